// Image folders (src/data/data_images.c): the scan (classes in byte order, hidden entries and
// files beside the classes skipped, nested folders followed, extensions in any case), every
// format decoded to the pixels written (PNG of each colour type and depth, BMP, GIF, JPEG
// against TurboJPEG's own decoding), broken files named and skipped or (strict) an error,
// Keras's resize and crop_to_aspect_ratio on known values, the cache (a second load reads it,
// a changed file does not), and the folders' errors.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gif_lib.h>
#include <png.h>
#include <turbojpeg.h>

#include "data/data_images.h"
#include "tests/lib/testutil.h"

// ---- writing images -------------------------------------------------------------------------

static void mkdirs(const char *dir, const char *sub) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    for (char *s = p + strlen(dir) + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

// An 8-bit PNG of the simplified API's format (PNG_FORMAT_GRAY, _RGB, _RGBA, or with
// PNG_FORMAT_FLAG_LINEAR 16 bits a sample).
static void write_png(const char *path, const void *px, int w, int h, png_uint_32 format) {
    png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w,
                    .height = (png_uint_32)h, .format = format};
    if (!png_image_write_to_file(&im, path, 0, px, 0, NULL)) fail_msg("%s: %s", path, im.message);
}

static unsigned char *jpeg_bytes(const uint8_t *rgb, int w, int h, unsigned long *len) {
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    *len = 0;
    if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &out, len, TJSAMP_444, 95, 0) < 0)
        fail_msg("tjCompress2: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    return out;
}

static void write_jpeg(const char *path, const uint8_t *rgb, int w, int h) {
    unsigned long len;
    unsigned char *b = jpeg_bytes(rgb, w, h, &len);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
    tjFree(b);
}

// A GIF of a 4-colour palette; the image's pixels are palette indices.
static void write_gif(const char *path, const uint8_t *idx, int w, int h, const uint8_t pal[4][3]) {
    int err;
    GifFileType *g = EGifOpenFileName(path, 0, &err);
    assert_non_null(g);
    GifColorType colors[4];
    for (int i = 0; i < 4; i++) colors[i] = (GifColorType){pal[i][0], pal[i][1], pal[i][2]};
    ColorMapObject *cm = GifMakeMapObject(4, colors);
    assert_int_equal(EGifPutScreenDesc(g, w, h, 2, 0, cm), GIF_OK);
    assert_int_equal(EGifPutImageDesc(g, 0, 0, w, h, 0, NULL), GIF_OK);
    for (int y = 0; y < h; y++)
        assert_int_equal(EGifPutLine(g, (GifPixelType *)idx + (size_t)y * w, w), GIF_OK);
    GifFreeMapObject(cm);
    assert_int_equal(EGifCloseFile(g, &err), GIF_OK);
}

static void put(const char *dir, const char *name, const void *data, size_t len) {
    free(test_write_file(dir, name, data, len));
}

// A 4x3 RGB test card: pixel (x, y) = (40x + 7, 60y + 3, 200 - 30x - 10y).
static void card(uint8_t *rgb) {
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            uint8_t *p = rgb + (y * 4 + x) * 3;
            p[0] = (uint8_t)(40 * x + 7), p[1] = (uint8_t)(60 * y + 3),
            p[2] = (uint8_t)(200 - 30 * x - 10 * y);
        }
}

// dir/: classes "Zebra" (upper case sorts first), "apple" (with a nested folder, an upper-case
// extension and a hidden file), "bird"; a hidden class and a file beside the classes.
static void make_folder(const char *dir) {
    uint8_t rgb[4 * 3 * 3], rgba[4 * 3 * 4], gray[4 * 3];
    uint16_t gray16[4 * 3];
    card(rgb);
    for (int i = 0; i < 12; i++) {
        rgba[4 * i] = rgb[3 * i], rgba[4 * i + 1] = rgb[3 * i + 1], rgba[4 * i + 2] = rgb[3 * i + 2];
        rgba[4 * i + 3] = (uint8_t)(i * 20); // dropped, as Keras drops it
        gray[i] = (uint8_t)(i * 21);
        gray16[i] = (uint16_t)(i * 21 * 257); // 16 bits of the same greys
    }
    mkdirs(dir, "Zebra");
    mkdirs(dir, "apple/nested/deeper");
    mkdirs(dir, "bird");
    mkdirs(dir, ".cache/x");
    char p[1024];
    snprintf(p, sizeof p, "%s/Zebra/a.png", dir);
    write_png(p, rgb, 4, 3, PNG_FORMAT_RGB);
    snprintf(p, sizeof p, "%s/Zebra/b.PNG", dir);
    write_png(p, rgba, 4, 3, PNG_FORMAT_RGBA);
    snprintf(p, sizeof p, "%s/apple/g.png", dir);
    write_png(p, gray, 4, 3, PNG_FORMAT_GRAY);
    snprintf(p, sizeof p, "%s/apple/nested/deeper/g16.png", dir);
    write_png(p, gray16, 4, 3, PNG_FORMAT_GRAY | PNG_FORMAT_FLAG_LINEAR);
    snprintf(p, sizeof p, "%s/apple/nested/c.JPEG", dir);
    write_jpeg(p, rgb, 4, 3);
    snprintf(p, sizeof p, "%s/bird/card.bmp", dir);
    tjhandle tj = tjInitCompress();
    assert_int_equal(tjSaveImage(p, rgb, 4, 0, 3, TJPF_RGB, 0), 0);
    tjDestroy(tj);
    static const uint8_t pal[4][3] = {{0, 0, 0}, {255, 0, 0}, {10, 200, 30}, {90, 90, 250}};
    uint8_t idx[12];
    for (int i = 0; i < 12; i++) idx[i] = (uint8_t)(i % 4);
    snprintf(p, sizeof p, "%s/bird/pal.gif", dir);
    write_gif(p, idx, 4, 3, pal);
    snprintf(p, sizeof p, "%s/.cache/x/hidden.png", dir);
    write_png(p, rgb, 4, 3, PNG_FORMAT_RGB);
    put(dir, "apple/.hidden.png", "x", 1);
    put(dir, "apple/readme.txt", "not an image", 12);
    put(dir, "labels.csv", "a,b\n", 4);
}

// The broken files: a truncated JPEG, an empty PNG, a text file named .jpg.
static void add_broken(const char *dir) {
    uint8_t rgb[4 * 3 * 3];
    card(rgb);
    unsigned long len;
    unsigned char *b = jpeg_bytes(rgb, 4, 3, &len);
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/bird", dir);
    put(sub, "cut.jpg", b, len / 2);
    tjFree(b);
    put(sub, "empty.png", "", 0);
    put(sub, "notes.jpg", "these are notes\n", 16);
}

static data_images_opts opts(int h, int w, int ch, const char *cache) {
    return (data_images_opts){.h = h, .w = w, .channels = ch, .scale = 1.0f, .cache_dir = cache,
                              .threads = 2};
}

static int find_file(const data_images_info *info, const char *rel) {
    for (int i = 0; i < info->n; i++)
        if (!strcmp(info->files[i], rel)) return i;
    fail_msg("%s was not loaded", rel);
    return -1;
}

// Sample i's pixel (x, y), channel c.
static float px(const dataset *d, int i, int c, int y, int x) {
    return dataset_px(d, (((size_t)i * d->c + c) * d->h + y) * d->w + x);
}

// ---- tests ----------------------------------------------------------------------------------

// An interlaced GIF (rows stored in its four passes) with a transparent colour and a frame
// smaller than its screen: the frame lands de-interlaced at its place, black around it and
// where it is transparent.
static void test_gif_interlaced(void **state) {
    (void)state;
    char *dir = test_tmpdir("images-gif");
    mkdirs(dir, "c");
    char p[1024];
    snprintf(p, sizeof p, "%s/c/i.gif", dir);
    int err;
    GifFileType *g = EGifOpenFileName(p, 0, &err);
    assert_non_null(g);
    GifColorType colors[4] = {{0, 0, 0}, {200, 0, 0}, {0, 100, 0}, {0, 0, 50}};
    ColorMapObject *cm = GifMakeMapObject(4, colors);
    enum { SW = 5, SH = 10, FW = 3, FH = 9, LEFT = 1, TOP = 1 };
    assert_int_equal(EGifPutScreenDesc(g, SW, SH, 2, 0, cm), GIF_OK);
    GraphicsControlBlock gcb = {.TransparentColor = 3, .DelayTime = 0};
    GifByteType ext[4];
    EGifGCBToExtension(&gcb, ext);
    assert_int_equal(EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, 4, ext), GIF_OK);
    assert_int_equal(EGifPutImageDesc(g, LEFT, TOP, FW, FH, 1, NULL), GIF_OK);
    // Frame row y is colour 1 + y % 3 (3: transparent) in every column.
    static const int first[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0; pass < 4; pass++)
        for (int y = first[pass]; y < FH; y += step[pass]) {
            GifPixelType row[FW];
            for (int x = 0; x < FW; x++) row[x] = (GifPixelType)(1 + y % 3);
            assert_int_equal(EGifPutLine(g, row, FW), GIF_OK);
        }
    GifFreeMapObject(cm);
    assert_int_equal(EGifCloseFile(g, &err), GIF_OK);
    dataset d;
    data_images_info info;
    ht_error e;
    data_images_opts o = opts(SH, SW, 3, NULL);
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    for (int y = 0; y < SH; y++)
        for (int x = 0; x < SW; x++) {
            const int in = y >= TOP && x >= LEFT && x < LEFT + FW, k = in ? 1 + (y - TOP) % 3 : 0;
            const int c = k == 3 ? 0 : k; // transparent: black
            for (int ch = 0; ch < 3; ch++)
                assert_float_equal(px(&d, 0, ch, y, x),
                                   ch == 0 ? colors[c].Red : ch == 1 ? colors[c].Green
                                                                     : colors[c].Blue, 0);
        }
    dataset_free(&d);
    data_images_info_free(&info);
    free(dir);
}

static void test_scan_and_decode(void **state) {
    (void)state;
    char *dir = test_tmpdir("images");
    make_folder(dir);
    dataset d;
    data_images_info info;
    ht_error e;
    data_images_opts o = opts(3, 4, 3, NULL);
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(info.n_classes, 3);
    assert_string_equal(info.classes[0], "Zebra");
    assert_string_equal(info.classes[1], "apple");
    assert_string_equal(info.classes[2], "bird");
    assert_int_equal(d.n, 7);
    assert_int_equal(info.n_skipped, 0);
    assert_int_equal(d.c, 3);
    // In class order, each class's files in byte order of their paths.
    static const char *const order[] = {"Zebra/a.png", "Zebra/b.PNG", "apple/g.png",
                                        "apple/nested/c.JPEG", "apple/nested/deeper/g16.png",
                                        "bird/card.bmp", "bird/pal.gif"};
    static const int label[] = {0, 0, 1, 1, 1, 2, 2};
    for (int i = 0; i < 7; i++) {
        assert_string_equal(info.files[i], order[i]);
        assert_int_equal(d.y[i], label[i]);
    }
    uint8_t rgb[36];
    card(rgb);
    // Lossless formats give the pixels written: RGB and RGBA (alpha dropped) PNG, BMP; grey PNG
    // of 8 and 16 bits on every channel; the GIF's palette colours.
    static const uint8_t pal[4][3] = {{0, 0, 0}, {255, 0, 0}, {10, 200, 30}, {90, 90, 250}};
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++)
            for (int c = 0; c < 3; c++) {
                const float want = rgb[(y * 4 + x) * 3 + c];
                assert_float_equal(px(&d, 0, c, y, x), want, 0);
                assert_float_equal(px(&d, 1, c, y, x), want, 0);
                assert_float_equal(px(&d, 5, c, y, x), want, 0);
                assert_float_equal(px(&d, 2, c, y, x), (float)((y * 4 + x) * 21), 0);
                assert_float_equal(px(&d, 4, c, y, x), (float)((y * 4 + x) * 21), 0);
                assert_float_equal(px(&d, 6, c, y, x), pal[(y * 4 + x) % 4][c], 0);
            }
    // The JPEG: TurboJPEG's own decoding of the same bytes.
    unsigned long len;
    unsigned char *b = jpeg_bytes(rgb, 4, 3, &len);
    uint8_t back[36];
    tjhandle tj = tjInitDecompress();
    assert_int_equal(tjDecompress2(tj, b, len, back, 4, 0, 3, TJPF_RGB, 0), 0);
    tjDestroy(tj);
    tjFree(b);
    for (int i = 0; i < 12; i++)
        for (int c = 0; c < 3; c++) assert_float_equal(px(&d, 3, c, i / 4, i % 4), back[i * 3 + c], 0);
    dataset_free(&d);
    data_images_info_free(&info);
    // Grayscale: TensorFlow's weights of the RGB card, rounded; a grey PNG as it is; scaled.
    o = opts(3, 4, 1, NULL);
    o.scale = 1.0f / 255;
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(d.c, 1);
    for (int i = 0; i < 12; i++) {
        const uint8_t *p = rgb + 3 * i;
        const int g = (int)(0.2989f * p[0] + 0.5870f * p[1] + 0.1140f * p[2] + 0.5f);
        assert_float_equal(px(&d, 0, 0, i / 4, i % 4), g / 255.0f, 1e-7);
        assert_float_equal(px(&d, 2, 0, i / 4, i % 4), (float)(i * 21) / 255.0f, 1e-7);
    }
    dataset_free(&d);
    data_images_info_free(&info);
    free(dir);
}

// tf.image.resize's bilinear with half-pixel centres, on values worked by hand, and
// crop_to_aspect_ratio's centred window.
static void test_resize_and_crop(void **state) {
    (void)state;
    char *dir = test_tmpdir("images-resize");
    mkdirs(dir, "c");
    char p[1024];
    // A 2x1 grey row [0, 255] to width 4: positions -0.25, 0.25, 0.75, 1.25.
    const uint8_t two[2] = {0, 255};
    snprintf(p, sizeof p, "%s/c/a.png", dir);
    write_png(p, two, 2, 1, PNG_FORMAT_GRAY);
    // A 4x1 row [0, 100, 200, 255] to width 2: positions 0.5 and 2.5.
    const uint8_t four[4] = {0, 100, 200, 255};
    snprintf(p, sizeof p, "%s/c/b.png", dir);
    write_png(p, four, 4, 1, PNG_FORMAT_GRAY);
    dataset d;
    data_images_info info;
    ht_error e;
    data_images_opts o = opts(1, 4, 1, NULL);
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    static const float up[4] = {0, 64, 191, 255}; // 63.75 and 191.25, rounded
    for (int x = 0; x < 4; x++) assert_float_equal(px(&d, 0, 0, 0, x), up[x], 0);
    dataset_free(&d);
    data_images_info_free(&info);
    o = opts(1, 2, 1, NULL);
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_float_equal(px(&d, 1, 0, 0, 0), 50, 0);
    assert_float_equal(px(&d, 1, 0, 0, 1), 228, 0); // 227.5 rounds up
    dataset_free(&d);
    data_images_info_free(&info);
    // An 8x4 image of columns 30 x to a 2x2 target: cropped to its centred 4x4 (columns 2..5),
    // then halved (positions 0.5 and 2.5 of the window: columns 2.5 and 4.5).
    uint8_t wide[32];
    for (int i = 0; i < 32; i++) wide[i] = (uint8_t)(30 * (i % 8));
    mkdirs(dir, "w");
    snprintf(p, sizeof p, "%s/w/wide.png", dir);
    write_png(p, wide, 8, 4, PNG_FORMAT_GRAY);
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/w", dir);
    o = opts(2, 2, 1, NULL);
    o.crop = 1;
    if (dataset_load_images(&d, &info, sub, &o, &e) == 0) fail_msg("a file beside classes read");
    test_expect_frags(e.msg, 1, "no class folders", NULL);
    mkdirs(dir, "w2/only");
    snprintf(p, sizeof p, "%s/w2/only/wide.png", dir);
    write_png(p, wide, 8, 4, PNG_FORMAT_GRAY);
    snprintf(sub, sizeof sub, "%s/w2", dir);
    if (dataset_load_images(&d, &info, sub, &o, &e)) fail_msg("%s", e.msg);
    assert_float_equal(px(&d, 0, 0, 0, 0), 75, 0);  // between 60 and 90
    assert_float_equal(px(&d, 0, 0, 1, 1), 135, 0); // between 120 and 150
    dataset_free(&d);
    data_images_info_free(&info);
    // A 1x1 image: every output pixel is its one pixel, at any target and with the crop.
    mkdirs(dir, "one/c");
    const uint8_t dot[3] = {17, 130, 251};
    snprintf(p, sizeof p, "%s/one/c/dot.png", dir);
    write_png(p, dot, 1, 1, PNG_FORMAT_RGB);
    snprintf(sub, sizeof sub, "%s/one", dir);
    for (int crop = 0; crop < 2; crop++) {
        data_images_opts o1 = opts(3, 5, 3, NULL);
        o1.crop = crop;
        dataset d1;
        if (dataset_load_images(&d1, &info, sub, &o1, &e)) fail_msg("%s", e.msg);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 15; i++) assert_float_equal(px(&d1, 0, c, i / 5, i % 5), dot[c], 0);
        dataset_free(&d1);
        data_images_info_free(&info);
    }
    snprintf(sub, sizeof sub, "%s/w2", dir);
    o.crop = 0; // stretched: positions 1.5 and 5.5 of the whole width
    if (dataset_load_images(&d, &info, sub, &o, &e)) fail_msg("%s", e.msg);
    assert_float_equal(px(&d, 0, 0, 0, 0), 45, 0);
    assert_float_equal(px(&d, 0, 0, 0, 1), 165, 0);
    dataset_free(&d);
    data_images_info_free(&info);
    free(dir);
}

// Broken files: each named with why, left out and counted; with strict the first is an error.
static void test_broken_files(void **state) {
    (void)state;
    char *dir = test_tmpdir("images-broken");
    make_folder(dir);
    add_broken(dir);
    dataset d;
    data_images_info info;
    ht_error e;
    data_images_opts o = opts(3, 4, 3, NULL);
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(d.n, 7);
    assert_int_equal(info.n_skipped, 3);
    test_expect_frags(info.skipped, 0, "bird/cut.jpg: a broken JPEG", "bird/empty.png: an empty file",
                      "bird/notes.jpg: not an image (no JPEG, PNG, GIF or BMP signature)", NULL);
    (void)find_file(&info, "bird/pal.gif");
    dataset_free(&d);
    data_images_info_free(&info);
    o.strict = 1;
    assert_int_equal(dataset_load_images(&d, &info, dir, &o, &e), -1);
    test_expect_frags(e.msg, 1, "bird/cut.jpg: a broken JPEG", "(--strict-images)", NULL);
    assert_null(d.x8);
    free(dir);
}

// A broken JPEG and the good ones after it, decoded in that order on one thread (one TurboJPEG
// handle): each good one is loaded. TurboJPEG 2.1 leaves a handle that failed on one file
// failing the next with the same message ("missing SOS marker" on a valid JPEG).
static void test_good_jpeg_after_broken(void **state) {
    (void)state;
    char *dir = test_tmpdir("images-after-broken");
    mkdirs(dir, "x/");
    uint8_t rgb[4 * 3 * 3];
    card(rgb);
    char sub[1100], p[1200];
    snprintf(sub, sizeof sub, "%s/x", dir);
    unsigned long len;
    unsigned char *b = jpeg_bytes(rgb, 4, 3, &len);
    // Cut inside its last table, before its scan: TurboJPEG's header reader fails ("missing SOS
    // marker"); cut after 20 bytes: it warns and sets no size.
    unsigned long sos = 2;
    while (sos + 1 < len && !(b[sos] == 0xFF && b[sos + 1] == 0xDA)) sos++;
    assert_true(sos > 40 && sos + 1 < len);
    put(sub, "a_cut.jpg", b, sos - 20);
    put(sub, "d_head.jpg", b, 20);
    tjFree(b);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/c%d.jpg", sub, i);
        write_jpeg(p, rgb, 4, 3);
    }
    dataset d;
    data_images_info info;
    ht_error e;
    data_images_opts o = opts(3, 4, 3, NULL);
    o.threads = 1;
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    test_expect_frags(info.skipped, 0, "x/a_cut.jpg: a broken JPEG", "x/d_head.jpg: a broken JPEG",
                      NULL);
    assert_int_equal(info.n_skipped, 2);
    assert_int_equal(d.n, 3);
    dataset_free(&d);
    data_images_info_free(&info);
    free(dir);
}

// The cache: the first load writes it, the second reads it to the same values and the same
// skipped files; a file changed (its time) is a new key.
static void test_cache(void **state) {
    (void)state;
    char *dir = test_tmpdir("images-cache"), *cache = test_tmpdir("images-cachedir");
    make_folder(dir);
    add_broken(dir);
    dataset a, b;
    data_images_info ia, ib;
    ht_error e;
    data_images_opts o = opts(5, 6, 3, cache);
    if (dataset_load_images(&a, &ia, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ia.cached, 0);
    assert_true(access(ia.cache_path, R_OK) == 0);
    if (dataset_load_images(&b, &ib, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ib.cached, 1);
    assert_string_equal(ia.cache_path, ib.cache_path);
    assert_int_equal(a.n, b.n);
    // Bytes both (the second the cache file's mapping), scaled alike.
    assert_null(a.x), assert_null(b.x);
    assert_int_equal(b.x8_mapped, 1);
    assert_memory_equal(a.x8, b.x8, (size_t)a.n * 3 * 5 * 6);
    assert_memory_equal(a.y, b.y, (size_t)a.n);
    assert_int_equal(ib.n_skipped, 3);
    assert_string_equal(ia.skipped, ib.skipped);
    for (int i = 0; i < a.n; i++) assert_string_equal(ia.files[i], ib.files[i]);
    dataset_free(&b);
    data_images_info_free(&ib);
    // Another size is another cache file.
    data_images_opts o2 = opts(4, 6, 3, cache);
    if (dataset_load_images(&b, &ib, dir, &o2, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ib.cached, 0);
    assert_string_not_equal(ia.cache_path, ib.cache_path);
    dataset_free(&b);
    data_images_info_free(&ib);
    // A file touched: decoded again.
    char p[1024];
    snprintf(p, sizeof p, "%s/bird/pal.gif", dir);
    struct timespec t[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
    if (dataset_load_images(&b, &ib, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ib.cached, 0);
    assert_memory_equal(a.x8, b.x8, (size_t)a.n * 3 * 5 * 6);
    dataset_free(&a), dataset_free(&b);
    data_images_info_free(&ia), data_images_info_free(&ib);
    free(dir), free(cache);
}

// Folders hetrain cannot read: one line naming the folder and what is wrong.
static void test_folder_errors(void **state) {
    (void)state;
    char *dir = test_tmpdir("images-errors");
    dataset d;
    data_images_info info;
    ht_error e;
    data_images_opts o = opts(3, 4, 3, NULL);
    char p[1024];
    snprintf(p, sizeof p, "%s/missing", dir);
    assert_int_equal(dataset_load_images(&d, &info, p, &o, &e), -1);
    test_expect_frags(e.msg, 1, p, "cannot read the folder", NULL);
    assert_int_equal(dataset_load_images(&d, &info, dir, &o, &e), -1);
    test_expect_frags(e.msg, 1, dir, "no class folders", NULL);
    mkdirs(dir, "cat");
    mkdirs(dir, "dog");
    uint8_t rgb[36];
    card(rgb);
    snprintf(p, sizeof p, "%s/cat/a.png", dir);
    write_png(p, rgb, 4, 3, PNG_FORMAT_RGB);
    put(dir, "dog/readme.txt", "x", 1);
    assert_int_equal(dataset_load_images(&d, &info, dir, &o, &e), -1);
    test_expect_frags(e.msg, 1, "/dog: no images in the class folder", NULL);
    snprintf(p, sizeof p, "%s/dog/a.png", dir);
    write_png(p, rgb, 4, 3, PNG_FORMAT_RGB);
    put(dir, "dog/bad.png", "\x89PNG\r\n\x1a\nnothing", 15);
    put(dir, "cat/bad.gif", "GIF89a", 6);
    // Every file broken: an error naming the first.
    char *only = test_tmpdir("images-only");
    mkdirs(only, "x");
    put(only, "x/bad.jpg", "\xff\xd8\xff\xe0", 4);
    assert_int_equal(dataset_load_images(&d, &info, only, &o, &e), -1);
    test_expect_frags(e.msg, 1, "none of its 1 images could be decoded", "x/bad.jpg", NULL);
    free(only);
    // Channels the loader does not give.
    o.channels = 4;
    assert_int_equal(dataset_load_images(&d, &info, dir, &o, &e), -1);
    test_expect_frags(e.msg, 1, "1 (grayscale) or 3 (RGB)", NULL);
    // Another folder's classes against these.
    o.channels = 3;
    data_images_info other;
    if (dataset_load_images(&d, &info, dir, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(info.n_skipped, 2);
    dataset_free(&d);
    char *dir2 = test_tmpdir("images-errors2");
    mkdirs(dir2, "cat");
    mkdirs(dir2, "emu");
    snprintf(p, sizeof p, "%s/cat/a.png", dir2);
    write_png(p, rgb, 4, 3, PNG_FORMAT_RGB);
    snprintf(p, sizeof p, "%s/emu/a.png", dir2);
    write_png(p, rgb, 4, 3, PNG_FORMAT_RGB);
    if (dataset_load_images(&d, &other, dir2, &o, &e)) fail_msg("%s", e.msg);
    dataset_free(&d);
    assert_int_equal(data_images_same_classes(&info, dir, &other, dir2, &e), -1);
    test_expect_frags(e.msg, 1, "has no class folder \"dog\"", "the same classes", NULL);
    assert_int_equal(data_images_same_classes(&info, dir, &info, dir, &e), 0);
    data_images_info_free(&info);
    data_images_info_free(&other);
    free(dir), free(dir2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_and_decode), cmocka_unit_test(test_resize_and_crop),
        cmocka_unit_test(test_broken_files),    cmocka_unit_test(test_good_jpeg_after_broken),    cmocka_unit_test(test_cache),
        cmocka_unit_test(test_folder_errors),   cmocka_unit_test(test_gif_interlaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
