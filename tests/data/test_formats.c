// The CIFAR and NumPy loaders: files written here byte by byte (CIFAR records, .npy headers of
// every format version, .npz archives through libzip, stored and deflated) load to the exact
// values written, and every malformed input fails with one line naming the file (and member)
// and what was wrong, leaving the dataset empty.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zip.h>

#include "data/data.h"
#include "tests/lib/testutil.h"

// Asserts that msg is one line containing every fragment (NULL-terminated list).
#define expect_msg(msg, ...) test_expect_frags(msg, 1, __VA_ARGS__)

static const data_opts rgb10 = {.classes = 10, .channels = 3};

// ---- CIFAR --------------------------------------------------------------------------------

// Pixel k (0..3071) of record r: a value that depends on both.
static uint8_t cifar_px(int r, int k) { return (uint8_t)(r * 31 + k * 7 + (k >> 8)); }

// n records from record r0 on: CIFAR-10 (label r % 10) or, when hundred, CIFAR-100 (coarse
// label r % 20, fine r % 100).
static char *write_cifar(const char *dir, const char *name, int r0, int n, int hundred) {
    int rec = 3072 + (hundred ? 2 : 1);
    uint8_t *b = malloc((size_t)n * rec);
    for (int i = 0; i < n; i++) {
        uint8_t *p = b + (size_t)i * rec;
        int r = r0 + i;
        if (hundred) {
            p[0] = (uint8_t)(r % 20);
            p[1] = (uint8_t)(r % 100);
        } else {
            p[0] = (uint8_t)(r % 10);
        }
        for (int k = 0; k < 3072; k++) p[rec - 3072 + k] = cifar_px(r, k);
    }
    char *path = test_write_file(dir, name, b, (size_t)n * rec);
    free(b);
    return path;
}

// d holds records r0 .. r0+n-1 as write_cifar made them, labels label(r).
static void check_cifar(const dataset *d, int r0, int n, int hundred, int coarse) {
    assert_int_equal(d->n, n);
    assert_int_equal(d->c, 3);
    assert_int_equal(d->h, 32);
    assert_int_equal(d->w, 32);
    for (int i = 0; i < n; i++) {
        int r = r0 + i;
        assert_int_equal(d->y[i], hundred ? (coarse ? r % 20 : r % 100) : r % 10);
        // Planes R, G, B of 32x32 row-major: exactly (c, h, w).
        for (int k = 0; k < 3072; k += 97)
            if (d->x[(size_t)i * 3072 + k] != (float)cifar_px(r, k) / 255.0f)
                fail_msg("record %d pixel %d: %g, want %d/255", r, k,
                         (double)d->x[(size_t)i * 3072 + k], cifar_px(r, k));
    }
}

static void test_cifar10_folder_and_files(void **state) {
    (void)state;
    char *dir = test_tmpdir("cifar10");
    char *b1 = write_cifar(dir, "data_batch_1.bin", 0, 7, 0);
    char *b2 = write_cifar(dir, "data_batch_2.bin", 7, 5, 0);
    char *t = write_cifar(dir, "test_batch.bin", 100, 4, 0);
    dataset tr, te;
    ht_error e;
    if (dataset_load_dir(&tr, &te, dir, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    check_cifar(&tr, 0, 12, 0, 0); // the batches in order, one after the other
    check_cifar(&te, 100, 4, 0, 0);
    dataset_free(&tr);
    dataset_free(&te);
    // One file by name, through the loader the CLI picks.
    if (dataset_load_file(&te, b2, NULL, 0, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    check_cifar(&te, 7, 5, 0, 0);
    dataset_free(&te);
    // Test set only: the batches are not read (a broken one does not matter).
    char *b3 = test_write_file(dir, "data_batch_3.bin", "x", 1);
    if (dataset_load_dir(NULL, &te, dir, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    check_cifar(&te, 100, 4, 0, 0);
    dataset_free(&te);
    assert_int_equal(dataset_load_dir(&tr, NULL, dir, &rgb10, &e), -1);
    expect_msg(e.msg, "data_batch_3.bin: 1 bytes are not a whole number of 3073-byte CIFAR-10 "
                      "records (0 records and 1 bytes over)", NULL);
    assert_null(tr.x);
    remove(b3);
    // A gap in the batches is refused rather than skipped.
    char *b4 = write_cifar(dir, "data_batch_4.bin", 0, 1, 0);
    assert_int_equal(dataset_load_dir(&tr, NULL, dir, &rgb10, &e), -1);
    expect_msg(e.msg, "data_batch_3.bin is missing but data_batch_4.bin is there", NULL);
    remove(b4);
    remove(t);
    assert_int_equal(dataset_load_dir(&tr, &te, dir, &rgb10, &e), -1);
    expect_msg(e.msg, dir, "missing test_batch.bin in this CIFAR-10 folder", NULL);
    free(b1), free(b2), free(b3), free(b4), free(t), free(dir);
}

static void test_cifar100_fine_and_coarse(void **state) {
    (void)state;
    char *dir = test_tmpdir("cifar100");
    char *tr_p = write_cifar(dir, "train.bin", 0, 120, 1);
    char *te_p = write_cifar(dir, "test.bin", 500, 3, 1);
    data_opts o = {.classes = 100, .channels = 3};
    dataset tr, te;
    ht_error e;
    if (dataset_load_dir(&tr, &te, dir, &o, &e) < 0) fail_msg("%s", e.msg);
    check_cifar(&tr, 0, 120, 1, 0);
    check_cifar(&te, 500, 3, 1, 0);
    dataset_free(&tr);
    dataset_free(&te);
    o.coarse = 1;
    o.classes = 20;
    if (dataset_load_dir(&tr, NULL, dir, &o, &e) < 0) fail_msg("%s", e.msg);
    check_cifar(&tr, 0, 120, 1, 1);
    dataset_free(&tr);
    // Fine labels up to 99 do not fit a 20-class model; the record is named.
    o.coarse = 0;
    assert_int_equal(dataset_load_dir(&tr, NULL, dir, &o, &e), -1);
    expect_msg(e.msg, "train.bin: fine label 20 at record 20 is outside 0..19", NULL);
    assert_null(tr.x);
    free(tr_p), free(te_p), free(dir);
}

static void test_cifar_malformed(void **state) {
    (void)state;
    char *dir = test_tmpdir("cifar-bad");
    dataset d;
    ht_error e;
    // Labels beyond the model's classes.
    char *p = write_cifar(dir, "data_batch_1.bin", 0, 12, 0);
    data_opts five = {.classes = 5, .channels = 3};
    const char *one[1] = {p};
    assert_int_equal(dataset_load_cifar(&d, one, 1, &five, &e), -1);
    expect_msg(e.msg, "data_batch_1.bin: label 5 at record 5 is outside 0..4", NULL);
    assert_null(d.x);
    assert_null(d.y);
    // Sizes that are not whole records, by name and by size.
    uint8_t junk[3073 * 2 + 5] = {0};
    char *cut = test_write_file(dir, "test_batch.bin", junk, 3073 + 100);
    one[0] = cut;
    assert_int_equal(dataset_load_cifar(&d, one, 1, &rgb10, &e), -1);
    expect_msg(e.msg, "test_batch.bin: 3173 bytes are not a whole number of 3073-byte CIFAR-10 "
                      "records (1 records and 100 bytes over)", NULL);
    char *odd = test_write_file(dir, "mine.bin", junk, sizeof junk);
    one[0] = odd;
    assert_int_equal(dataset_load_cifar(&d, one, 1, &rgb10, &e), -1);
    expect_msg(e.msg, "mine.bin: 6151 bytes are not a whole number of CIFAR-10 (3073-byte) or "
                      "CIFAR-100 (3074-byte) records", NULL);
    char *c100 = test_write_file(dir, "train.bin", junk, 3073);
    one[0] = c100;
    assert_int_equal(dataset_load_cifar(&d, one, 1, &rgb10, &e), -1);
    expect_msg(e.msg, "train.bin: 3073 bytes are not a whole number of 3074-byte CIFAR-100", NULL);
    char *empty = test_write_file(dir, "test.bin", "", 0);
    one[0] = empty;
    assert_int_equal(dataset_load_cifar(&d, one, 1, &rgb10, &e), -1);
    expect_msg(e.msg, "test.bin: empty file", NULL);
    // An unnamed file of whole CIFAR-10 records is taken as CIFAR-10.
    char *named = write_cifar(dir, "records.bin", 3, 2, 0);
    one[0] = named;
    if (dataset_load_cifar(&d, one, 1, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    check_cifar(&d, 3, 2, 0, 0);
    dataset_free(&d);
    // Kinds mixed in one list; coarse labels of CIFAR-10.
    char *h = write_cifar(dir, "test.bin", 0, 1, 1);
    const char *two[2] = {p, h};
    assert_int_equal(dataset_load_cifar(&d, two, 2, NULL, &e), -1);
    expect_msg(e.msg, "test.bin is CIFAR-100 but ", "data_batch_1.bin is CIFAR-10", NULL);
    data_opts coarse = {.classes = 20, .coarse = 1};
    one[0] = p;
    assert_int_equal(dataset_load_cifar(&d, one, 1, &coarse, &e), -1);
    expect_msg(e.msg, "data_batch_1.bin: CIFAR-10 has no coarse labels", NULL);
    char gone[1100];
    snprintf(gone, sizeof gone, "%s/nope.bin", dir);
    one[0] = gone;
    assert_int_equal(dataset_load_cifar(&d, one, 1, NULL, &e), -1);
    expect_msg(e.msg, "nope.bin: No such file or directory", NULL);
    free(p), free(cut), free(odd), free(c100), free(empty), free(named), free(h), free(dir);
}

// ---- .npy ---------------------------------------------------------------------------------

// A .npy image: version major.0, the header dict text as given (padded with spaces and a
// newline to a multiple of 64, as numpy does), then len payload bytes.
static uint8_t *npy_bytes(int major, const char *dict, const void *payload, size_t len,
                          size_t *out_len) {
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total_hdr = (pre + dl + 1 + 63) / 64 * 64, hl = total_hdr - pre;
    uint8_t *b = malloc(total_hdr + len + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = 0;
    if (major == 1) {
        b[8] = (uint8_t)hl;
        b[9] = (uint8_t)(hl >> 8);
    } else {
        for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(hl >> (8 * i));
    }
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hl - dl - 1);
    b[total_hdr - 1] = '\n';
    if (len) memcpy(b + total_hdr, payload, len);
    *out_len = total_hdr + len;
    return b;
}

static char *write_npy(const char *dir, const char *name, int major, const char *dict,
                       const void *payload, size_t len) {
    size_t n;
    uint8_t *b = npy_bytes(major, dict, payload, len, &n);
    char *p = test_write_file(dir, name, b, n);
    free(b);
    return p;
}

// Image i, channel c, row y, column x of a 2x3x4x5 (N,C,H,W) test set: a value in 0..255.
static int px(int i, int c, int y, int x) { return (i * 97 + c * 41 + y * 13 + x * 3) % 256; }

enum { NI = 2, NC = 3, NH = 4, NW = 5 };

// The test images in NCHW or NHWC order, as bytes.
static void make_images(uint8_t *b, int nhwc) {
    for (int i = 0; i < NI; i++)
        for (int c = 0; c < NC; c++)
            for (int y = 0; y < NH; y++)
                for (int x = 0; x < NW; x++) {
                    size_t at = nhwc ? (((size_t)i * NH + y) * NW + x) * NC + c
                                     : (((size_t)i * NC + c) * NH + y) * NW + x;
                    b[at] = (uint8_t)px(i, c, y, x);
                }
}

// d holds the test images, each value px / div.
static void check_images(const dataset *d, float div) {
    assert_int_equal(d->n, NI);
    assert_int_equal(d->c, NC);
    assert_int_equal(d->h, NH);
    assert_int_equal(d->w, NW);
    for (int i = 0; i < NI; i++)
        for (int c = 0; c < NC; c++)
            for (int y = 0; y < NH; y++)
                for (int x = 0; x < NW; x++) {
                    float v = d->x[(((size_t)i * NC + c) * NH + y) * NW + x];
                    if (v != (float)px(i, c, y, x) / div)
                        fail_msg("x[%d,%d,%d,%d] = %.9g, want %d/%g", i, c, y, x, (double)v,
                                 px(i, c, y, x), (double)div);
                }
}

static void test_npy_layouts_versions_dtypes(void **state) {
    (void)state;
    char *dir = test_tmpdir("npy");
    uint8_t hwc[NI * NC * NH * NW], chw[NI * NC * NH * NW];
    make_images(hwc, 1);
    make_images(chw, 0);
    const int32_t y4[2] = {7, 2};
    const int64_t y8[2] = {0, 9};
    const uint8_t y1[2] = {3, 1};
    char *yp4 = write_npy(dir, "y4.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", y4, 8);
    char *yp8 = write_npy(dir, "y8.npy", 2, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }", y8, 16);
    char *yp1 = write_npy(dir, "y1.npy", 3, "{\"shape\": (2,), \"descr\": \"|u1\", \"fortran_order\": False}", y1, 2);
    ht_error e;
    dataset d;
    for (int major = 1; major <= 3; major++) {
        // NHWC (N,H,W,C) is found from the channel axis, and becomes NCHW.
        char *xp = write_npy(dir, "x.npy", major,
                             "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 4, 5, 3), }", hwc, sizeof hwc);
        if (dataset_load_npy(&d, xp, yp4, &rgb10, &e) < 0) fail_msg("v%d: %s", major, e.msg);
        check_images(&d, 255.0f);
        assert_int_equal(d.y[0], 7);
        assert_int_equal(d.y[1], 2);
        dataset_free(&d);
        free(xp);
    }
    // NCHW (N,C,H,W).
    char *xc = write_npy(dir, "xc.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", chw, sizeof chw);
    if (dataset_load_npy(&d, xc, yp8, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    check_images(&d, 255.0f);
    assert_int_equal(d.y[1], 9);
    dataset_free(&d);
    // float32, taken as they are; labels uint8.
    float f[NI * NC * NH * NW];
    for (size_t i = 0; i < sizeof chw; i++) f[i] = (float)chw[i];
    char *xf = write_npy(dir, "xf.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", f, sizeof f);
    if (dataset_load_npy(&d, xf, yp1, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    check_images(&d, 1.0f);
    assert_int_equal(d.y[0], 3);
    dataset_free(&d);
    // (N,H,W): one channel; no labels.
    data_opts gray = {.classes = 10, .channels = 1};
    char *xg = write_npy(dir, "xg.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 4, 5), }", chw, 120);
    if (dataset_load_npy(&d, xg, NULL, &gray, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(d.n, 6);
    assert_int_equal(d.c, 1);
    assert_null(d.y);
    assert_true(d.x[119] == (float)chw[119] / 255.0f);
    dataset_free(&d);
    // An ambiguous shape is settled by --layout; without it the error says why.
    static const uint8_t zeros[360];
    char *xa = write_npy(dir, "amb.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 20, 3), }", zeros, 360);
    assert_int_equal(dataset_load_npy(&d, xa, NULL, &rgb10, &e), -1);
    expect_msg(e.msg, "amb.npy: images of shape (2, 3, 20, 3) are ambiguous: axes 1 and 3 both "
                      "have the model's 3 channels; give --layout nhwc or nchw", NULL);
    data_opts nchw = rgb10;
    nchw.layout = DATA_LAYOUT_NCHW;
    if (dataset_load_npy(&d, xa, NULL, &nchw, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(d.c, 3);
    assert_int_equal(d.h, 20);
    assert_int_equal(d.w, 3);
    dataset_free(&d);
    data_opts nhwc = rgb10;
    nhwc.layout = DATA_LAYOUT_NHWC;
    if (dataset_load_npy(&d, xc, NULL, &nhwc, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(d.c, 5); // (2,3,4,5) read as NHWC: what check_fits later refuses
    dataset_free(&d);
    free(yp4), free(yp8), free(yp1), free(xc), free(xf), free(xg), free(xa), free(dir);
}

static void test_npy_malformed(void **state) {
    (void)state;
    char *dir = test_tmpdir("npy-bad");
    static const uint8_t pay[1024]; // zeros, as long as the longest payload below
    float nanv[120];
    for (int i = 0; i < 120; i++) nanv[i] = 0.5f;
    nanv[60 + 7] = NAN;
    const char *ok_x = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }";
    char *good_x = write_npy(dir, "good.npy", 1, ok_x, pay, 120);
    struct {
        const char *dict;  // NULL: raw bytes below
        const void *payload;
        size_t len;
        int labels;        // the case is the labels file (images: good.npy)
        const char *frag;
    } cases[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", pay, 480, 0,
         "bad.npy: dtype '>f4' is not one hetrain reads"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", pay, 960, 0,
         "bad.npy: dtype '<f8' is not one hetrain reads"},
        {"{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 4, 5), }", pay, 120, 0,
         "bad.npy: fortran_order is True"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", pay, 100, 0,
         "bad.npy: shape (2, 3, 4, 5) of uint8 needs 120 bytes of data but the file holds 100 "
         "(1 whole rows): truncated"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", pay, 123, 0,
         "bad.npy: 3 trailing bytes after the (2, 3, 4, 5) uint8 data"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), 'extra': 1}", pay, 120, 0,
         "bad.npy: malformed header: unexpected key 'extra'"},
        {"{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5)}", pay, 120, 0,
         "bad.npy: malformed header: key 'descr' given twice"},
        {"{'descr': '|u1', 'shape': (2, 3, 4, 5), }", pay, 120, 0,
         "bad.npy: malformed header: no 'fortran_order' key"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5) ", pay, 120, 0,
         "bad.npy: malformed header: expected ',' or '}'"},
        {"{'descr': '|u1', 'fortran_order': 0, 'shape': (2, 3, 4, 5), }", pay, 120, 0,
         "bad.npy: malformed header: 'fortran_order' is not True or False"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, -3, 4, 5), }", pay, 120, 0,
         "bad.npy: malformed header: 'shape' holds \"-3"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (120), }", pay, 120, 0,
         "a 1-tuple needs its comma"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 60), }", pay, 120, 0,
         "bad.npy: images of shape (2, 60), expected (N,H,W,C), (N,C,H,W) or (N,H,W)"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5), }", pay, 120, 0,
         "bad.npy: shape has more than 4 dimensions"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 4, 5, 5), }", pay, 200, 0,
         "bad.npy: images of shape (2, 4, 5, 5) have the model's 3 channels on neither axis 3 "
         "(NHWC) nor axis 1 (NCHW)"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (0, 3, 4, 5), }", pay, 0, 0,
         "bad.npy: images of shape (0, 3, 4, 5): every dimension must be"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", pay, 480, 0,
         "bad.npy: images of dtype int32, expected uint8 or float32"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", nanv, 480, 0,
         "bad.npy: sample 1: element 7 is nan, expected a finite number"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", pay, 8, 1,
         "bad.npy: labels of dtype float32, expected uint8, int32 or int64"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "\1\2\3", 3, 1,
         "bad.npy has 3 labels"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", "\1\2\3\4", 4, 1,
         "bad.npy: labels of shape (2, 2), expected (N,) or (N, 1)"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", "\1\12", 2, 1,
         "bad.npy: label 10 at record 1 is outside 0..9"},
        {"{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
         "\0\0\0\0\0\0\0\0\377\377\377\377\377\377\377\377", 16, 1,
         "bad.npy: label -1 at record 1 is outside 0..9"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", "\1\0\0\0\0\1\0\0", 8, 1,
         "bad.npy: label 256 at record 1 is outside 0..9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = write_npy(dir, "bad.npy", 1, cases[i].dict, cases[i].payload, cases[i].len);
        dataset d;
        memset(&d, 0xab, sizeof d);
        ht_error e = {{0}};
        int rc = cases[i].labels ? dataset_load_npy(&d, good_x, p, &rgb10, &e)
                                 : dataset_load_npy(&d, p, NULL, &rgb10, &e);
        if (rc != -1) fail_msg("case %zu (%s) loaded", i, cases[i].frag);
        assert_null(d.x);
        assert_null(d.y);
        expect_msg(e.msg, cases[i].frag, NULL);
        free(p);
    }
    // Preambles: magic, version, header length.
    struct {
        const char *bytes;
        size_t len;
        const char *frag;
    } raw[] = {
        {"\x93NUMPX\1\0\0\0", 10, "bad.npy: not a .npy file (bad magic"},
        {"PK\3\4", 4, "bad.npy: not a .npy file"},
        {"\x93NUMPY\4\0\0\0", 10, "bad.npy: .npy format version 4.0, expected 1.0, 2.0 or 3.0"},
        {"\x93NUMPY\1\1\0\0", 10, "bad.npy: .npy format version 1.1"},
        {"\x93NUMPY\1\0\200\0{", 11, "bad.npy: file ends inside the 128-byte header"},
        {"\x93NUMPY\2\0\0\0\0\1", 12, "bad.npy: header of 16777216 bytes, more than 65536"},
        {"\x93NUMPY\1\0\4\0{}\n\n", 14, "bad.npy: malformed header: \"\\x0a\" after the dict"},
        {"\x93NUMPY\1\0\4\0{}  ", 14, "bad.npy: malformed header: it does not end with a newline"},
        {"\x93NUMPY\1", 7, "bad.npy: file ends inside the .npy preamble"},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        char *p = test_write_file(dir, "bad.npy", raw[i].bytes, raw[i].len);
        dataset d;
        ht_error e = {{0}};
        if (dataset_load_npy(&d, p, NULL, &rgb10, &e) != -1) fail_msg("raw case %zu loaded", i);
        expect_msg(e.msg, raw[i].frag, NULL);
        free(p);
    }
    char *empty = test_write_file(dir, "empty.npy", "", 0);
    dataset d;
    ht_error e;
    assert_int_equal(dataset_load_npy(&d, empty, NULL, &rgb10, &e), -1);
    expect_msg(e.msg, "empty.npy: empty file", NULL);
    assert_int_equal(dataset_load_npy(&d, dir, NULL, &rgb10, &e), -1);
    expect_msg(e.msg, "is a directory", NULL);
    free(empty), free(good_x), free(dir);
}

// ---- .npz ---------------------------------------------------------------------------------

typedef struct member {
    const char *name;
    uint8_t *bytes;
    size_t len;
} member;

// Writes an archive of the members, each stored or deflated.
static char *write_npz(const char *dir, const char *name, const member *m, int n, int deflate) {
    size_t pl = strlen(dir) + strlen(name) + 2;
    char *path = malloc(pl);
    snprintf(path, pl, "%s/%s", dir, name);
    remove(path);
    int err = 0;
    zip_t *z = zip_open(path, ZIP_CREATE | ZIP_EXCL, &err);
    assert_non_null(z);
    for (int i = 0; i < n; i++) {
        zip_source_t *s = zip_source_buffer(z, m[i].bytes, m[i].len, 0);
        assert_non_null(s);
        zip_int64_t idx = zip_file_add(z, m[i].name, s, ZIP_FL_ENC_UTF_8);
        assert_true(idx >= 0);
        assert_int_equal(zip_set_file_compression(z, (zip_uint64_t)idx,
                                                  deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0), 0);
    }
    assert_int_equal(zip_close(z), 0);
    return path;
}

static void test_npz_keys_and_compression(void **state) {
    (void)state;
    char *dir = test_tmpdir("npz");
    uint8_t hwc[NI * NC * NH * NW];
    make_images(hwc, 1);
    const uint8_t ytr[2] = {4, 5}, yte[2] = {6, 8};
    const char *xd = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 4, 5, 3), }";
    const char *yd = "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }";
    member m[4] = {{"x_train.npy", 0, 0}, {"y_train.npy", 0, 0}, {"x_test.npy", 0, 0}, {"y_test.npy", 0, 0}};
    m[0].bytes = npy_bytes(1, xd, hwc, sizeof hwc, &m[0].len);
    m[1].bytes = npy_bytes(1, yd, ytr, 2, &m[1].len);
    m[2].bytes = npy_bytes(1, xd, hwc, sizeof hwc, &m[2].len);
    m[3].bytes = npy_bytes(1, yd, yte, 2, &m[3].len);
    ht_error e;
    dataset d;
    for (int deflate = 0; deflate < 2; deflate++) {
        char *p = write_npz(dir, deflate ? "deflated.npz" : "stored.npz", m, 4, deflate);
        if (dataset_load_npz(&d, p, 0, 0, &rgb10, &e) < 0) fail_msg("%s", e.msg);
        check_images(&d, 255.0f);
        assert_int_equal(d.y[1], 5);
        dataset_free(&d);
        if (dataset_load_npz(&d, p, 1, 1, &rgb10, &e) < 0) fail_msg("%s", e.msg);
        check_images(&d, 255.0f);
        assert_int_equal(d.y[1], 8);
        dataset_free(&d);
        free(p);
    }
    // x/y (np.savez(f, x=..., y=...)), through the CLI's loader choice; with only_named, a
    // training archive without x_test has no test set (1), not its x.
    member xy[2] = {{"x.npy", m[0].bytes, m[0].len}, {"y.npy", m[3].bytes, m[3].len}};
    char *pxy = write_npz(dir, "xy.npz", xy, 2, 1);
    if (dataset_load_file(&d, pxy, NULL, 0, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(d.y[1], 8);
    dataset_free(&d);
    assert_int_equal(dataset_load_npz(&d, pxy, 1, 1, &rgb10, &e), 1);
    assert_null(d.x);
    // A test set may come without labels; a training set may not.
    char *px_only = write_npz(dir, "xonly.npz", m + 2, 1, 0);
    if (dataset_load_npz(&d, px_only, 1, 0, &rgb10, &e) < 0) fail_msg("%s", e.msg);
    assert_null(d.y);
    dataset_free(&d);
    char *ptr_only = write_npz(dir, "tronly.npz", m, 1, 0);
    assert_int_equal(dataset_load_npz(&d, ptr_only, 0, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "tronly.npz: no member y_train.npy for the labels of x_train.npy", NULL);
    assert_int_equal(dataset_load_npz(&d, ptr_only, 1, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "tronly.npz: no member x_test.npy or x.npy", NULL);
    // A bad member is named with its archive.
    uint8_t bad_lab[2] = {4, 10};
    member bad[2] = {{"x_train.npy", m[0].bytes, m[0].len}, {"y_train.npy", 0, 0}};
    bad[1].bytes = npy_bytes(1, yd, bad_lab, 2, &bad[1].len);
    char *pbad = write_npz(dir, "badlab.npz", bad, 2, 1);
    assert_int_equal(dataset_load_npz(&d, pbad, 0, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "badlab.npz: y_train.npy: label 10 at record 1 is outside 0..9", NULL);
    assert_null(d.x);
    free(bad[1].bytes);
    bad[1].bytes = npy_bytes(1, "{'descr': '|u1', 'fortran_order': True, 'shape': (2,), }", ytr, 2, &bad[1].len);
    char *pfort = write_npz(dir, "fortran.npz", bad, 2, 0);
    assert_int_equal(dataset_load_npz(&d, pfort, 0, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "fortran.npz: y_train.npy: fortran_order is True", NULL);
    // Not a zip; a zip cut short; a deflated member corrupted (its CRC fails).
    char *notzip = test_write_file(dir, "notzip.npz", m[0].bytes, m[0].len);
    assert_int_equal(dataset_load_npz(&d, notzip, 0, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "notzip.npz: not a readable .npz (zip) archive: ", NULL);
    char *stored = write_npz(dir, "stored2.npz", m, 2, 0);
    size_t len;
    char *zb = test_read_file(stored, &len);
    char *cut = test_write_file(dir, "cut.npz", zb, len / 2);
    assert_int_equal(dataset_load_npz(&d, cut, 0, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "cut.npz: not a readable .npz (zip) archive", NULL);
    // The first member's payload starts after its 30-byte local header and name: flip bytes
    // inside it, so the archive opens but the data fails its CRC.
    for (size_t i = 30 + 11 + 100; i < 30 + 11 + 110; i++) zb[i] ^= 0x55;
    char *crc = test_write_file(dir, "crc.npz", zb, len);
    assert_int_equal(dataset_load_npz(&d, crc, 0, 0, &rgb10, &e), -1);
    expect_msg(e.msg, "crc.npz: x_train.npy: ", "CRC", NULL);
    assert_null(d.x);
    for (int i = 0; i < 4; i++) free(m[i].bytes);
    free(bad[1].bytes);
    free(zb), free(pxy), free(px_only), free(ptr_only), free(pbad), free(pfort), free(notzip);
    free(stored), free(cut), free(crc), free(dir);
}

// Multi-label labels (a model of 3 labels: data_opts.labels): (N, 3) of 0 and 1 in any integer
// dtype or float32, kept as 3 bytes a sample through the split and the gather; another shape,
// a 2 or a 0.5 refused naming the file, the record and the label.
static void test_npy_multilabel(void **state) {
    (void)state;
    char *dir = test_tmpdir("npy-multi");
    uint8_t chw[NI * NC * NH * NW];
    make_images(chw, 0);
    char *xp = write_npy(dir, "x.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", chw, sizeof chw);
    const data_opts ml = {.classes = 3, .channels = 3, .labels = 3};
    const uint8_t u1[] = {1, 0, 1, 0, 1, 1};
    const float f4[] = {1, 0, 1, 0, 1, 1};
    char *yu = write_npy(dir, "yu.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", u1, sizeof u1);
    char *yf = write_npy(dir, "yf.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4, sizeof f4);
    dataset d;
    ht_error e;
    for (int k = 0; k < 2; k++) {
        if (dataset_load_npy(&d, xp, k ? yf : yu, &ml, &e) < 0) fail_msg("%s", e.msg);
        assert_int_equal(d.ylen, 3);
        assert_memory_equal(d.y, u1, sizeof u1);
        // the second sample's labels travel as a block of 3
        dataset g = d;
        uint8_t y[3];
        float x[NC * NH * NW];
        uint32_t one = 1;
        dataset_gather(&g, &one, 1, x, y);
        assert_memory_equal(y, u1 + 3, 3);
        dataset_free(&d);
    }
    const uint8_t two[] = {1, 0, 1, 0, 2, 1};
    const float half[] = {1, 0.5f, 1, 0, 1, 1};
    char *y2 = write_npy(dir, "y2.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", two, sizeof two);
    char *yh = write_npy(dir, "yh.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", half, sizeof half);
    char *y4 = write_npy(dir, "y4.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2), }", u1, sizeof u1);
    assert_int_equal(dataset_load_npy(&d, xp, y2, &ml, &e), -1);
    test_expect_frags(e.msg, 1, "y2.npy: record 1, label 1 is not 0 or 1", NULL);
    assert_int_equal(dataset_load_npy(&d, xp, yh, &ml, &e), -1);
    test_expect_frags(e.msg, 1, "yh.npy: record 0, label 1 is not 0 or 1", NULL);
    assert_int_equal(dataset_load_npy(&d, xp, y4, &ml, &e), -1);
    test_expect_frags(e.msg, 1, "y4.npy: labels of shape (3, 2), expected (N, 3)", NULL);
    assert_null(d.y);
    // and float labels for a model of classes: refused as before
    const data_opts cls = {.classes = 3, .channels = 3};
    assert_int_equal(dataset_load_npy(&d, xp, yf, &cls, &e), -1);
    test_expect_frags(e.msg, 1, "labels of dtype float32", NULL);
    free(xp), free(yu), free(yf), free(y2), free(yh), free(y4), free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cifar10_folder_and_files),
        cmocka_unit_test(test_cifar100_fine_and_coarse),
        cmocka_unit_test(test_cifar_malformed),
        cmocka_unit_test(test_npy_layouts_versions_dtypes),
        cmocka_unit_test(test_npy_malformed),
        cmocka_unit_test(test_npy_multilabel),
        cmocka_unit_test(test_npz_keys_and_compression),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
