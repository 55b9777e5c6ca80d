// Data loaders: real Fashion-MNIST (gzip IDX), raw IDX and Kaggle CSV copies of it, malformed
// files with the exact message each must give, and the seeded train/val split.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "data/data.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

#define FASHION_CLASSES 10

static dataset fm_train, fm_test; // real Fashion-MNIST, loaded once by the group setup

static int group_setup(void **state) {
    (void)state;
    ht_error e;
    if (dataset_load_dir(&fm_train, &fm_test, FASHION_DIR, NULL, &e)) {
        fprintf(stderr, "loading %s: %s\n", FASHION_DIR, e.msg);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    dataset_free(&fm_train);
    dataset_free(&fm_test);
    return 0;
}

// ---- helpers ----------------------------------------------------------------------------

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

// IDX bytes: magic, then its dims (at most 3), then `len` payload bytes (which need not
// agree with the dims).
static uint8_t *idx_bytes(uint32_t magic, const uint32_t *dims, const uint8_t *payload,
                          size_t len, size_t *out_len) {
    int nd = (int)(magic & 0xff);
    if (nd > 3) nd = 3; // dims holds at most 3
    size_t hl = 4 + 4 * (size_t)nd;
    uint8_t *b = malloc(hl + len + 1);
    put_be32(b, magic);
    for (int i = 0; i < nd; i++) put_be32(b + 4 + 4 * i, dims[i]);
    if (len) memcpy(b + hl, payload, len);
    *out_len = hl + len;
    return b;
}

static char *write_gz(const char *dir, const char *name, const void *data, size_t len) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(gz), Z_OK);
    return path;
}

// Writes an IDX file (raw, or gzip when gz) with the given header and payload.
static char *write_idx(const char *dir, const char *name, int gz, uint32_t magic,
                       const uint32_t *dims, const uint8_t *payload, size_t len) {
    size_t bl;
    uint8_t *b = idx_bytes(magic, dims, payload, len, &bl);
    char *path = gz ? write_gz(dir, name, b, bl) : test_write_file(dir, name, b, bl);
    free(b);
    assert_non_null(path);
    return path;
}

// The first n samples of a loaded set back as IDX bytes (pixel = round(x*255)).
static uint8_t *to_bytes(const dataset *d, int n) {
    size_t len = (size_t)n * (size_t)(d->h * d->w);
    uint8_t *b = malloc(len);
    for (size_t i = 0; i < len; i++) b[i] = (uint8_t)lrintf(d->x[i] * 255.0f);
    return b;
}

// Writes images and labels IDX files for the first n samples of d.
static void write_subset(const dataset *d, int n, const char *dir, const char *xname,
                         const char *yname, int gz, char **xpath, char **ypath) {
    uint8_t *px = to_bytes(d, n);
    uint32_t xd[3] = {(uint32_t)n, (uint32_t)d->h, (uint32_t)d->w}, yd[1] = {(uint32_t)n};
    *xpath = write_idx(dir, xname, gz, 0x803, xd, px, (size_t)n * (size_t)(d->h * d->w));
    *ypath = write_idx(dir, yname, gz, 0x801, yd, d->y, (size_t)n);
    free(px);
}

// Asserts that msg is containing every fragment (NULL-terminated list).
#define expect_msg(msg, ...) test_expect_frags(msg, 0, __VA_ARGS__)

// The load must fail, leave d empty, and say what frag1.. say.
#define EXPECT_IDX_FAIL(xp, yp, ...)                                                           \
    do {                                                                                       \
        dataset d_;                                                                            \
        memset(&d_, 0xab, sizeof d_);                                                          \
        ht_error e_ = {{0}};                                                                   \
        assert_int_equal(dataset_load_idx(&d_, (xp), (yp), 10, &e_), -1);                      \
        assert_null(d_.x);                                                                     \
        assert_null(d_.y);                                                                     \
        assert_null(strchr(e_.msg, '\n'));                                                     \
        expect_msg(e_.msg, __VA_ARGS__, NULL);                                                 \
        dataset_free(&d_);                                                                     \
    } while (0)

static void assert_same_data(const dataset *a, const dataset *b, int n) {
    assert_int_equal(a->c, b->c);
    assert_int_equal(a->h, b->h);
    assert_int_equal(a->w, b->w);
    assert_memory_equal(a->x, b->x, (size_t)n * (size_t)(a->c * a->h * a->w) * sizeof(float));
    if (a->y || b->y) {
        assert_non_null(a->y);
        assert_non_null(b->y);
        assert_memory_equal(a->y, b->y, (size_t)n);
    }
}

// ---- real data ----------------------------------------------------------------------------

static void check_fashion(const dataset *d, int n, int per_class) {
    assert_int_equal(d->n, n);
    assert_int_equal(d->c, 1);
    assert_int_equal(d->h, 28);
    assert_int_equal(d->w, 28);
    assert_non_null(d->x);
    assert_non_null(d->y);
    size_t len = (size_t)n * 784;
    float lo = 1, hi = 0;
    double sum = 0;
    for (size_t i = 0; i < len; i++) {
        float v = d->x[i];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        sum += v;
        float k = v * 255.0f;
        if (fabsf(k - roundf(k)) > 1e-3f) fail_msg("pixel %zu = %g is not k/255", i, (double)v);
    }
    assert_true(lo == 0.0f);
    assert_true(hi == 1.0f);
    double mean = sum / (double)len; // Fashion-MNIST's pixel mean is about 0.286
    assert_true(mean > 0.27 && mean < 0.30);
    int counts[FASHION_CLASSES] = {0};
    for (int i = 0; i < n; i++) {
        assert_true(d->y[i] < FASHION_CLASSES);
        counts[d->y[i]]++;
    }
    for (int k = 0; k < FASHION_CLASSES; k++) assert_int_equal(counts[k], per_class);
}

static void test_fashion_train(void **state) {
    (void)state;
    check_fashion(&fm_train, 60000, 6000);
}

static void test_fashion_test(void **state) {
    (void)state;
    check_fashion(&fm_test, 10000, 1000);
    // The two sets differ (not the same file loaded twice).
    assert_memory_not_equal(fm_train.x, fm_test.x, 784 * sizeof(float));
}

static void test_idx_raw_and_gz_match(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-idx");
    char *xr, *yr, *xg, *yg;
    write_subset(&fm_test, 300, dir, "x.idx", "y.idx", 0, &xr, &yr);
    write_subset(&fm_test, 300, dir, "x.idx.gz", "y.idx.gz", 1, &xg, &yg);
    ht_error e;
    dataset raw, gz, nolab;
    assert_int_equal(dataset_load_idx(&raw, xr, yr, 10, &e), 0);
    assert_int_equal(dataset_load_idx(&gz, xg, yg, 10, &e), 0);
    assert_int_equal(raw.n, 300);
    assert_int_equal(gz.n, 300);
    assert_same_data(&raw, &fm_test, 300);
    assert_same_data(&gz, &fm_test, 300);
    // Without labels; compression is detected by content, not by name.
    assert_int_equal(dataset_load_idx(&nolab, xg, NULL, 10, &e), 0);
    assert_null(nolab.y);
    assert_int_equal(nolab.n, 300);
    dataset_free(&nolab);
    char *renamed = malloc(strlen(dir) + 16);
    sprintf(renamed, "%s/plain-name", dir);
    assert_int_equal(rename(xg, renamed), 0);
    assert_int_equal(dataset_load_idx(&nolab, renamed, yr, 10, &e), 0);
    assert_same_data(&nolab, &fm_test, 300);
    dataset_free(&nolab);
    dataset_free(&raw);
    dataset_free(&gz);
    free(renamed);
    free(xr), free(yr), free(xg), free(yg), free(dir);
}

static void test_load_dir(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-dir");
    char *p[4];
    // Mixed: raw train, gzip test.
    write_subset(&fm_train, 200, dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", 0,
                 &p[0], &p[1]);
    write_subset(&fm_test, 50, dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 1,
                 &p[2], &p[3]);
    ht_error e;
    dataset tr, te;
    assert_int_equal(dataset_load_dir(&tr, &te, dir, NULL, &e), 0);
    assert_int_equal(tr.n, 200);
    assert_int_equal(te.n, 50);
    assert_same_data(&tr, &fm_train, 200);
    assert_same_data(&te, &fm_test, 50);
    dataset_free(&tr);
    dataset_free(&te);
    // test may be NULL, and then the t10k files are not needed.
    remove(p[3]);
    assert_int_equal(dataset_load_dir(&tr, NULL, dir, NULL, &e), 0);
    assert_int_equal(tr.n, 200);
    dataset_free(&tr);
    assert_int_equal(dataset_load_dir(&tr, &te, dir, NULL, &e), -1);
    expect_msg(e.msg, dir, "t10k-labels-idx1-ubyte", "missing", NULL);
    assert_null(tr.x);
    assert_null(te.x);
    remove(p[0]);
    assert_int_equal(dataset_load_dir(&tr, NULL, dir, NULL, &e), -1);
    expect_msg(e.msg, dir, "train-images-idx3-ubyte", "nor is it a CIFAR folder", NULL);
    char *gone = malloc(strlen(dir) + 16);
    sprintf(gone, "%s/nope", dir);
    assert_int_equal(dataset_load_dir(&tr, &te, gone, NULL, &e), -1);
    expect_msg(e.msg, gone, "No such file or directory", NULL);
    for (int i = 0; i < 4; i++) free(p[i]);
    free(gone);
    free(dir);
}

// ---- malformed IDX ------------------------------------------------------------------------

static uint8_t pix[5 * 16 + 64]; // 5 images of 4x4 and spare bytes
static const uint8_t good_labels[5] = {1, 2, 3, 4, 5};

static void test_idx_bad_magic(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-magic");
    uint32_t xd[3] = {5, 4, 4}, yd[1] = {5};
    char *x = write_idx(dir, "images.idx", 0, 0x804, xd, pix, 80);
    char *y = write_idx(dir, "labels.idx", 0, 0x801, yd, good_labels, 5);
    EXPECT_IDX_FAIL(x, y, "images.idx: bad magic 0x00000804, expected 0x00000803 (IDX images)");
    // Files given the wrong way round.
    char *x2 = write_idx(dir, "good.idx", 0, 0x803, xd, pix, 80);
    EXPECT_IDX_FAIL(y, x2, "labels.idx: bad magic 0x00000801, expected 0x00000803");
    EXPECT_IDX_FAIL(x2, x2, "good.idx: bad magic 0x00000803, expected 0x00000801 (IDX labels)");
    // Text, not IDX at all.
    char *t = test_write_file(dir, "text.idx", "hello world\n", 12);
    EXPECT_IDX_FAIL(t, NULL, "text.idx: bad magic 0x68656c6c");
    free(x), free(y), free(x2), free(t), free(dir);
}

static void test_idx_truncated_and_trailing(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-trunc");
    uint32_t xd[3] = {5, 4, 4};
    char *x = write_idx(dir, "short.idx", 0, 0x803, xd, pix, 3 * 16 + 9);
    EXPECT_IDX_FAIL(x, NULL,
                    "short.idx: header says 5 images of 4x4 but the file ends after 3 images");
    char *x2 = write_idx(dir, "long.idx", 0, 0x803, xd, pix, 5 * 16 + 7);
    EXPECT_IDX_FAIL(x2, NULL, "long.idx: 7 trailing bytes after 5 images of 4x4");
    char *x3 = write_idx(dir, "long.idx.gz", 1, 0x803, xd, pix, 5 * 16 + 7);
    EXPECT_IDX_FAIL(x3, NULL, "long.idx.gz: 7 trailing bytes after 5 images of 4x4");
    char *x4 = write_idx(dir, "short.idx.gz", 1, 0x803, xd, pix, 2 * 16);
    EXPECT_IDX_FAIL(x4, NULL,
                    "short.idx.gz: header says 5 images of 4x4 but the file ends after 2 images");
    uint32_t yd[1] = {5};
    char *y = write_idx(dir, "labels.idx", 0, 0x801, yd, good_labels, 4);
    EXPECT_IDX_FAIL(x, y, "short.idx"); // images are checked first
    char *x5 = write_idx(dir, "ok.idx", 0, 0x803, xd, pix, 80);
    EXPECT_IDX_FAIL(x5, y, "labels.idx: header says 5 labels but the file ends after 4 labels");
    // Shorter than the header itself.
    char *h = test_write_file(dir, "hdr.idx", "\0\0\x08\x03\0\0", 6);
    EXPECT_IDX_FAIL(h, NULL, "hdr.idx: file ends inside the 16-byte IDX header, after 6 bytes");
    free(x), free(x2), free(x3), free(x4), free(x5), free(y), free(h), free(dir);
}

static void test_idx_truncated_gz(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-tgz");
    char *x, *y;
    write_subset(&fm_test, 300, dir, "x.gz", "y.gz", 1, &x, &y);
    size_t len;
    char *gzb = test_read_file(x, &len);
    assert_true(len > 1000);
    char *cut = test_write_file(dir, "cut.gz", gzb, len / 2);
    EXPECT_IDX_FAIL(cut, y, "cut.gz: header says 300 images of 28x28 but the file ends after ",
                    "(gzip stream truncated)");
    // Only the 8-byte gzip trailer (CRC, length) missing: all data arrives, the check fails.
    char *notrailer = test_write_file(dir, "notrailer.gz", gzb, len - 8);
    EXPECT_IDX_FAIL(notrailer, y, "notrailer.gz");
    // Corrupt bytes in the middle of the deflate stream.
    for (size_t i = len / 3; i < len / 3 + 64; i++) gzb[i] ^= 0x5a;
    char *bad = test_write_file(dir, "corrupt.gz", gzb, len);
    EXPECT_IDX_FAIL(bad, y, "corrupt.gz: ", "gzip");
    free(gzb), free(cut), free(notrailer), free(bad), free(x), free(y), free(dir);
}

static void test_idx_absurd_dims(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-dims");
    struct {
        uint32_t dims[3];
        const char *frag;
    } cases[] = {
        {{0, 28, 28}, "header dims 0 images of 28x28 out of range"},
        {{5, 0, 4}, "header dims 5 images of 0x4 out of range"},
        {{5, 4, DATA_MAX_DIM + 1}, "header dims 5 images of 4x4097 out of range"},
        {{DATA_MAX_SAMPLES + 1, 1, 1}, "header dims 10000001 images of 1x1 out of range"},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu}, "header dims 4294967295 images"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *x = write_idx(dir, "dims.idx", 0, 0x803, cases[i].dims, pix, 80);
        EXPECT_IDX_FAIL(x, NULL, "dims.idx: ", cases[i].frag);
        free(x);
    }
    uint32_t yd[1] = {0}, xd[3] = {5, 4, 4};
    char *x = write_idx(dir, "ok.idx", 0, 0x803, xd, pix, 80);
    char *y = write_idx(dir, "nolabels.idx", 0, 0x801, yd, good_labels, 0);
    EXPECT_IDX_FAIL(x, y, "nolabels.idx: header says 0 labels");
    // Headers at the limits that lie about the size: refused without allocating their claim
    // (ASan would abort on a multi-terabyte malloc).
    uint32_t big[3] = {DATA_MAX_SAMPLES, DATA_MAX_DIM, DATA_MAX_DIM};
    char *r = write_idx(dir, "big.idx", 0, 0x803, big, pix, 80);
    EXPECT_IDX_FAIL(r, NULL, "big.idx: header says 10000000 images of 4096x4096 but the file "
                             "ends after 0 images");
    char *g = write_idx(dir, "big.idx.gz", 1, 0x803, big, pix, 80);
    EXPECT_IDX_FAIL(g, NULL, "big.idx.gz: header says 10000000 images of 4096x4096 but the file "
                             "ends after 0 images");
    free(x), free(y), free(r), free(g), free(dir);
}

static void test_idx_count_mismatch_and_labels(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-count");
    uint32_t xd[3] = {5, 4, 4}, yd[1] = {4};
    char *x = write_idx(dir, "images.idx", 0, 0x803, xd, pix, 80);
    char *y = write_idx(dir, "four.idx", 0, 0x801, yd, good_labels, 4);
    EXPECT_IDX_FAIL(x, y, "images.idx has 5 images but ", "four.idx has 4 labels");
    uint8_t bad[5] = {0, 9, 3, 12, 1};
    yd[0] = 5;
    char *y2 = write_idx(dir, "labels.idx", 1, 0x801, yd, bad, 5);
    EXPECT_IDX_FAIL(x, y2, "labels.idx: label 12 at record 3 is outside 0..9");
    free(x), free(y), free(y2), free(dir);
}

static void test_idx_empty_and_missing(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-empty");
    char *x = test_write_file(dir, "empty.idx", "", 0);
    EXPECT_IDX_FAIL(x, NULL, "empty.idx: empty file");
    char *gone = malloc(strlen(dir) + 16);
    sprintf(gone, "%s/nope.idx", dir);
    EXPECT_IDX_FAIL(gone, NULL, "nope.idx: No such file or directory");
    uint32_t xd[3] = {5, 4, 4};
    char *ok = write_idx(dir, "ok.idx", 0, 0x803, xd, pix, 80);
    EXPECT_IDX_FAIL(ok, gone, "nope.idx: No such file or directory");
    EXPECT_IDX_FAIL(ok, x, "empty.idx: empty file");
    EXPECT_IDX_FAIL(dir, NULL, "is a directory");
    free(x), free(gone), free(ok), free(dir);
}

// ---- CSV ----------------------------------------------------------------------------------

static char *csv_file(const char *dir, const char *name, const char *text) {
    char *p = test_write_file(dir, name, text, strlen(text));
    assert_non_null(p);
    return p;
}

static void test_csv_values(void **state) {
    (void)state;
    char *dir = test_tmpdir("data-csv");
    const char *texts[] = {
        "label,pixel0,pixel1,pixel2,pixel3\n3,0,255,12,7\n9,12.0,1,2,254\n",
        "label,pixel0,pixel1,pixel2,pixel3\r\n3,0,255,12,7\r\n9,12.0,1,2,254\r\n",
        "\xEF\xBB\xBF\"label\",\"pixel0\",\"pixel1\",\"pixel2\",\"pixel3\"\n"
        "3,0,255,12,7\n9,12.0,1,2,254",
        "label,pixel0,pixel1,pixel2,pixel3\n3, 0,255,012,7\n9.0,1.2e1,1,2.00,254\n\n\r\n",
    };
    const float want[8] = {0, 1, 12 / 255.0f, 7 / 255.0f, 12 / 255.0f, 1 / 255.0f, 2 / 255.0f,
                           254 / 255.0f};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char *p = csv_file(dir, "l.csv", texts[i]);
        dataset d;
        ht_error e;
        if (dataset_load_csv(&d, p, 10, &e)) fail_msg("case %zu: %s", i, e.msg);
        assert_int_equal(d.n, 2);
        assert_int_equal(d.c, 1);
        assert_int_equal(d.h, 2);
        assert_int_equal(d.w, 2);
        assert_non_null(d.y);
        assert_int_equal(d.y[0], 3);
        assert_int_equal(d.y[1], 9);
        assert_memory_equal(d.x, want, sizeof want);
        dataset_free(&d);
        free(p);
    }
    // Unlabelled (Kaggle test.csv), with a fractional value.
    char *p = csv_file(dir, "u.csv", "pixel0,pixel1,pixel2,pixel3\r\n0,127.5,255,1\r\n");
    dataset d;
    ht_error e;
    assert_int_equal(dataset_load_csv(&d, p, 10, &e), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.h, 2);
    assert_null(d.y);
    const float wu[4] = {0, 127.5f / 255.0f, 1, 1 / 255.0f};
    assert_memory_equal(d.x, wu, sizeof wu);
    dataset_free(&d);
    free(p), free(dir);
}

// Real samples written as Kaggle CSV (785 columns, long lines) load back bit for bit.
static void test_csv_matches_idx(void **state) {
    (void)state;
    int n = 2000;
    size_t cap = (size_t)n * 785 * 4 + 16384, len = 0;
    char *text = malloc(cap), *text_u = malloc(cap);
    size_t len_u = 0;
    len += (size_t)sprintf(text + len, "label");
    for (int k = 0; k < 784; k++) {
        len += (size_t)sprintf(text + len, ",pixel%d", k);
        len_u += (size_t)sprintf(text_u + len_u, k ? ",pixel%d" : "pixel%d", k);
    }
    text[len++] = '\n';
    text_u[len_u++] = '\n';
    uint8_t *b = to_bytes(&fm_train, n);
    for (int i = 0; i < n; i++) {
        len += (size_t)sprintf(text + len, "%d", fm_train.y[i]);
        for (int k = 0; k < 784; k++) {
            len += (size_t)sprintf(text + len, ",%d", b[(size_t)i * 784 + (size_t)k]);
            len_u += (size_t)sprintf(text_u + len_u, k ? ",%d" : "%d",
                                     b[(size_t)i * 784 + (size_t)k]);
        }
        text[len++] = '\n';
        text_u[len_u++] = '\n';
    }
    char *dir = test_tmpdir("data-csvreal");
    char *p = test_write_file(dir, "train.csv", text, len);
    char *pu = test_write_file(dir, "test.csv", text_u, len_u);
    dataset d, du;
    ht_error e;
    assert_int_equal(dataset_load_csv(&d, p, 10, &e), 0);
    assert_int_equal(d.n, n);
    assert_same_data(&d, &fm_train, n);
    assert_int_equal(dataset_load_csv(&du, pu, 10, &e), 0);
    assert_int_equal(du.n, n);
    assert_null(du.y);
    assert_memory_equal(du.x, fm_train.x, (size_t)n * 784 * sizeof(float));
    dataset_free(&du);
    // The same file gzip-compressed loads the same; cut short, it is refused.
    char *pg = write_gz(dir, "train.csv.gz", text, len);
    assert_int_equal(dataset_load_csv(&du, pg, 10, &e), 0);
    assert_same_data(&du, &d, n);
    dataset_free(&du);
    size_t glen;
    char *gzb = test_read_file(pg, &glen);
    char *cut = test_write_file(dir, "cut.csv.gz", gzb, glen / 2);
    assert_int_equal(dataset_load_csv(&du, cut, 10, &e), -1);
    expect_msg(e.msg, "cut.csv.gz: gzip stream truncated", NULL);
    assert_null(du.x);
    dataset_free(&d);
    free(b), free(text), free(text_u), free(p), free(pu), free(pg), free(gzb), free(cut);
    free(dir);
}

static void test_csv_malformed(void **state) {
    (void)state;
    const char *hdr = "label,pixel0,pixel1,pixel2,pixel3\n";
    struct {
        const char *body; // appended to hdr unless it starts with '!' (then used alone)
        const char *frag;
    } cases[] = {
        {"1,0,0,0,0\n12,0,0,0,0\n", "bad.csv:3: column 1: expected a label 0..9, found \"12\""},
        {"3.5,0,0,0,0\n", "bad.csv:2: column 1: expected a label 0..9, found \"3.5\""},
        {"-1,0,0,0,0\n", "bad.csv:2: column 1: expected a label 0..9, found \"-1\""},
        {"x,0,0,0,0\n", "bad.csv:2: column 1: expected a label 0..9, found \"x\""},
        {"1,0,NaN,0,0\n", "bad.csv:2: column 3: expected a number 0..255, found \"NaN\""},
        {"1,0,0,0,inf\n", "bad.csv:2: column 5: expected a number 0..255, found \"inf\""},
        {"1,0,0,12a,0\n", "bad.csv:2: column 4: expected a number 0..255, found \"12a\""},
        {"1,0,,0,0\n", "bad.csv:2: column 3: expected a number 0..255, found \"\""},
        {"1,0,0,0,\n", "bad.csv:2: column 5: expected a number 0..255, found \"\""},
        {"1,256,0,0,0\n", "bad.csv:2: column 2: expected a number 0..255, found \"256\""},
        {"1,255.5,0,0,0\n", "bad.csv:2: column 2: expected a number 0..255, found \"255.5\""},
        {"1,-1,0,0,0\n", "bad.csv:2: column 2: expected a number 0..255, found \"-1\""},
        {"1,0x10,0,0,0\n", "bad.csv:2: column 2: expected a number 0..255, found \"0x10\""},
        {"1,99999999999,0,0,0\n", "column 2: expected a number 0..255, found \"99999999999\""},
        {"1,0,0,0,0\r\n2,0,0,0,0\r\n3,0,0,0,0\r\n4,0,0\r\n",
         "bad.csv:5: 3 columns, expected 5 as in the header"},
        {"1,0,0,0,0,0,0\n", "bad.csv:2: 7 columns, expected 5 as in the header"},
        {"1\n", "bad.csv:2: 1 columns, expected 5 as in the header"},
        {"1,0,0,0,0\n\n2,0,0,0,0\n", "bad.csv:3: empty line"},
        {"!", "bad.csv: empty file"},
        {"", "bad.csv: header but no data rows"},
        {"\n\r\n", "bad.csv: header but no data rows"},
        {"!\n1,2,3\n", "bad.csv:1: empty header line"},
        {"!label,pixel0,pixel1,pixel2\n1,0,0,0\n", "bad.csv:1: 3 pixel columns is not a square"},
        {"!pixel0,pixel1,pixel2,pixel3,pixel4\n0,0,0,0,0\n",
         "bad.csv:1: 5 pixel columns is not a square"},
        {"!1,0,0,0,0\n2,0,0,0,0\n", "is the header line missing?"},
    };
    char *dir = test_tmpdir("data-badcsv");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *body = cases[i].body;
        size_t n = strlen(hdr) + strlen(body) + 1;
        char *text = malloc(n);
        if (body[0] == '!') snprintf(text, n, "%s", body + 1);
        else snprintf(text, n, "%s%s", hdr, body);
        char *p = csv_file(dir, "bad.csv", text);
        dataset d;
        memset(&d, 0xab, sizeof d);
        ht_error e = {{0}};
        int rc = dataset_load_csv(&d, p, 10, &e);
        if (rc != -1) fail_msg("case %zu (%s) loaded", i, cases[i].frag);
        assert_null(d.x);
        assert_null(d.y);
        assert_null(strchr(e.msg, '\n'));
        expect_msg(e.msg, cases[i].frag, NULL);
        dataset_free(&d);
        free(p), free(text);
    }
    // Bytes a terminal would not show are escaped in the quoted field: a NUL is not "".
#define RAW_(s) s, sizeof s - 1 // the bytes, NULs included
    static const struct {
        const char *body;
        size_t len;
        const char *frag;
    } raw[] = {
        {RAW_("1,0,\0,0,0\n"), "bad.csv:2: column 3: expected a number 0..255, found \"\\0\""},
        {RAW_("1,0,0,1\0002,0\n"), "column 4: expected a number 0..255, found \"1\\02\""},
        {RAW_("\x01,0,0,0,0\n"), "column 1: expected a label 0..9, found \"\\x01\""},
        {RAW_("1,\"7\",0,0,0\n"), "column 2: expected a number 0..255, found \"\\\"7\\\"\""},
        {RAW_("1,\xff\xfe,0,0,0\n"), "column 2: expected a number 0..255, found \"\\xff\\xfe\""},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        size_t hl = strlen(hdr);
        char text[128];
        memcpy(text, hdr, hl);
        memcpy(text + hl, raw[i].body, raw[i].len);
        char *p = test_write_file(dir, "bad.csv", text, hl + raw[i].len);
        dataset d;
        ht_error e = {{0}};
        if (dataset_load_csv(&d, p, 10, &e) != -1) fail_msg("raw case %zu (%s) loaded", i, raw[i].frag);
        assert_null(strchr(e.msg, '\n'));
        expect_msg(e.msg, raw[i].frag, NULL);
        dataset_free(&d);
        free(p);
    }
#undef RAW_
    char *gone = malloc(strlen(dir) + 16);
    sprintf(gone, "%s/nope.csv", dir);
    dataset d;
    ht_error e;
    assert_int_equal(dataset_load_csv(&d, gone, 10, &e), -1);
    expect_msg(e.msg, "nope.csv: No such file or directory", NULL);
    dataset_free(&d);
    free(gone), free(dir);
}

// ---- split, gather, limit, free -----------------------------------------------------------

// n samples of 1x2x3 whose values encode their index: x = id + k/8, label id % 10.
static void make_ids(dataset *d, int n, int labelled) {
    *d = (dataset){0};
    d->n = n;
    d->c = 1, d->h = 2, d->w = 3;
    d->x = malloc((size_t)n * 6 * sizeof(float));
    d->y = labelled ? malloc((size_t)n) : NULL;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++) d->x[i * 6 + k] = (float)i + (float)k / 8.0f;
        if (labelled) d->y[i] = (uint8_t)(i % 10);
    }
}

// Sample ids of d, checking each sample is an intact copy of one original.
static void ids_of(const dataset *d, int *ids) {
    for (int i = 0; i < d->n; i++) {
        int id = (int)d->x[i * 6];
        ids[i] = id;
        for (int k = 0; k < 6; k++) assert_true(d->x[i * 6 + k] == (float)id + (float)k / 8.0f);
        if (d->y) assert_int_equal(d->y[i], id % 10);
    }
}

static void test_split_documented_order(void **state) {
    (void)state;
    int n = 1000;
    dataset all, tr, va;
    make_ids(&all, n, 1);
    ht_error e;
    assert_int_equal(dataset_split(&all, 0.2f, 42, &tr, &va, &e), 0);
    assert_int_equal(tr.n, 800);
    assert_int_equal(va.n, 200);
    assert_int_equal(va.h, 2);
    assert_int_equal(va.w, 3);
    // The permutation data.h documents, computed here independently.
    uint32_t perm[1000];
    for (int i = 0; i < n; i++) perm[i] = (uint32_t)i;
    ht_rng r;
    ht_rng_seed(&r, 42);
    for (int i = n - 1; i >= 1; i--) {
        uint32_t j = ht_rng_below(&r, (uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int ids[1000], seen[1000] = {0};
    ids_of(&tr, ids);
    ids_of(&va, ids + 800);
    int moved = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(ids[i], (int)perm[i]);
        seen[ids[i]]++;
        moved += ids[i] != i;
    }
    for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
    assert_true(moved > 900); // really shuffled
    dataset_free(&tr);
    dataset_free(&va);
    dataset_free(&all);
}

static void test_split_seeds_and_sizes(void **state) {
    (void)state;
    dataset all, a1, v1, a2, v2, a3, v3;
    make_ids(&all, 101, 1);
    ht_error e;
    assert_int_equal(dataset_split(&all, 0.25f, 7, &a1, &v1, &e), 0);
    assert_int_equal(dataset_split(&all, 0.25f, 7, &a2, &v2, &e), 0);
    assert_int_equal(dataset_split(&all, 0.25f, 8, &a3, &v3, &e), 0);
    assert_int_equal(v1.n, 25); // lround(25.25)
    assert_int_equal(a1.n, 76);
    assert_memory_equal(a1.x, a2.x, 76 * 6 * sizeof(float));
    assert_memory_equal(v1.x, v2.x, 25 * 6 * sizeof(float));
    assert_memory_equal(v1.y, v2.y, 25);
    assert_memory_not_equal(v1.x, v3.x, 25 * 6 * sizeof(float));
    dataset_free(&a1), dataset_free(&v1), dataset_free(&a2), dataset_free(&v2);
    dataset_free(&a3), dataset_free(&v3);
    // Rounding half away from zero: 7 * 0.5 = 3.5 -> 4.
    assert_int_equal(dataset_split(&all, 0.5f, 1, &a1, &v1, &e), 0);
    dataset_free(&a1), dataset_free(&v1);
    dataset_limit(&all, 7);
    assert_int_equal(dataset_split(&all, 0.5f, 1, &a1, &v1, &e), 0);
    assert_int_equal(v1.n, 4);
    assert_int_equal(a1.n, 3);
    dataset_free(&a1), dataset_free(&v1);
    dataset_free(&all);
}

static void test_split_frac_zero_and_unlabelled(void **state) {
    (void)state;
    dataset all, tr, va;
    make_ids(&all, 50, 0);
    ht_error e;
    assert_int_equal(dataset_split(&all, 0.0f, 3, &tr, &va, &e), 0);
    assert_int_equal(tr.n, 50);
    assert_int_equal(va.n, 0);
    assert_null(tr.y);
    assert_null(va.y);
    int ids[50], seen[50] = {0};
    ids_of(&tr, ids);
    for (int i = 0; i < 50; i++) seen[ids[i]]++;
    for (int i = 0; i < 50; i++) assert_int_equal(seen[i], 1);
    dataset_free(&tr);
    dataset_free(&va);
    dataset_free(&all);
}

static void test_split_errors(void **state) {
    (void)state;
    dataset all, tr, va;
    make_ids(&all, 10, 1);
    ht_error e;
    const float bad[] = {-0.1f, 1.0f, 1.5f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&tr, 0xab, sizeof tr);
        memset(&va, 0xab, sizeof va);
        assert_int_equal(dataset_split(&all, bad[i], 1, &tr, &va, &e), -1);
        expect_msg(e.msg, "outside [0,1)", NULL);
        assert_null(tr.x);
        assert_null(va.x);
        dataset_free(&tr);
        dataset_free(&va);
    }
    assert_int_equal(dataset_split(&all, 0.96f, 1, &tr, &va, &e), -1);
    expect_msg(e.msg, "leaves no training samples", NULL);
    dataset empty = {0};
    assert_int_equal(dataset_split(&empty, 0.2f, 1, &tr, &va, &e), -1);
    expect_msg(e.msg, "empty", NULL);
    dataset_free(&all);
}

// The real training set's classes survive a split: 6000 of each between train and val.
static void test_split_fashion_classes(void **state) {
    (void)state;
    dataset tr, va;
    ht_error e;
    assert_int_equal(dataset_split(&fm_train, 0.2f, 1234, &tr, &va, &e), 0);
    assert_int_equal(tr.n, 48000);
    assert_int_equal(va.n, 12000);
    int counts[FASHION_CLASSES] = {0}, vcounts[FASHION_CLASSES] = {0};
    for (int i = 0; i < tr.n; i++) counts[tr.y[i]]++;
    for (int i = 0; i < va.n; i++) vcounts[va.y[i]]++;
    for (int k = 0; k < FASHION_CLASSES; k++) {
        assert_int_equal(counts[k] + vcounts[k], 6000);
        assert_true(vcounts[k] > 1000 && vcounts[k] < 1400); // a shuffle, not a sorted cut
    }
    // Each val image is a whole copy of some train image with its label (spot-check via the
    // documented order: val[0] is the permuted entry at position 48000).
    ht_rng r;
    ht_rng_seed(&r, 1234);
    static uint32_t perm[60000];
    for (int i = 0; i < 60000; i++) perm[i] = (uint32_t)i;
    for (int i = 59999; i >= 1; i--) {
        uint32_t j = ht_rng_below(&r, (uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < 12000; i += 997) {
        assert_memory_equal(va.x + (size_t)i * 784, fm_train.x + (size_t)perm[48000 + i] * 784,
                            784 * sizeof(float));
        assert_int_equal(va.y[i], fm_train.y[perm[48000 + i]]);
    }
    dataset_free(&tr);
    dataset_free(&va);
}

static void test_gather_limit_free(void **state) {
    (void)state;
    dataset d;
    make_ids(&d, 10, 1);
    const uint32_t idx[3] = {5, 0, 5};
    float x[18];
    uint8_t y[3] = {99, 99, 99};
    dataset_gather(&d, idx, 3, x, y);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 6; k++) assert_true(x[i * 6 + k] == (float)idx[i] + (float)k / 8.0f);
        assert_int_equal(y[i], idx[i] % 10);
    }
    dataset_gather(&d, idx + 1, 1, x, NULL); // y may be NULL
    assert_true(x[0] == 0.0f);
    dataset_limit(&d, 0);
    assert_int_equal(d.n, 10);
    dataset_limit(&d, 11);
    assert_int_equal(d.n, 10);
    dataset_limit(&d, 4);
    assert_int_equal(d.n, 4);
    assert_true(d.x[3 * 6 + 5] == 3.0f + 5.0f / 8.0f);
    assert_int_equal(d.y[3], 3);
    dataset_free(&d);
    assert_null(d.x);
    assert_int_equal(d.n, 0);
    dataset_free(&d); // twice is fine
    dataset z = {0};
    dataset_free(&z);
}

int main(void) {
    for (size_t i = 0; i < sizeof pix; i++) pix[i] = (uint8_t)(i * 7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fashion_train),
        cmocka_unit_test(test_fashion_test),
        cmocka_unit_test(test_idx_raw_and_gz_match),
        cmocka_unit_test(test_load_dir),
        cmocka_unit_test(test_idx_bad_magic),
        cmocka_unit_test(test_idx_truncated_and_trailing),
        cmocka_unit_test(test_idx_truncated_gz),
        cmocka_unit_test(test_idx_absurd_dims),
        cmocka_unit_test(test_idx_count_mismatch_and_labels),
        cmocka_unit_test(test_idx_empty_and_missing),
        cmocka_unit_test(test_csv_values),
        cmocka_unit_test(test_csv_matches_idx),
        cmocka_unit_test(test_csv_malformed),
        cmocka_unit_test(test_split_documented_order),
        cmocka_unit_test(test_split_seeds_and_sizes),
        cmocka_unit_test(test_split_frac_zero_and_unlabelled),
        cmocka_unit_test(test_split_errors),
        cmocka_unit_test(test_split_fashion_classes),
        cmocka_unit_test(test_gather_limit_free),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
