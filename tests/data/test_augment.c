// Training-time augmentation (data.h): the spec grammar, known values (a flip of a known image,
// a crop at the offsets the counter RNG gives reproducing the shifted image with zeros coming
// in), draws that depend on (seed, epoch, sample id) alone and not on the batch a sample is in,
// and draws spread as documented (every offset, flips about half the time).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data/data.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

static void test_parse_and_text(void **state) {
    (void)state;
    struct {
        const char *spec, *text;
        int crop, flip;
    } good[] = {
        {"crop:4,flip", "crop:4,flip", 4, 1}, {"flip,crop:4", "crop:4,flip", 4, 1},
        {"flip", "flip", 0, 1},               {"crop:2", "crop:2", 2, 0},
        {"none", "none", 0, 0},               {"crop:64", "crop:64", 64, 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        data_augment a;
        ht_error e;
        if (data_augment_parse(&a, good[i].spec, &e) < 0) fail_msg("%s: %s", good[i].spec, e.msg);
        assert_int_equal(a.crop, good[i].crop);
        assert_int_equal(a.flip, good[i].flip);
        char t[DATA_AUGMENT_TEXT];
        data_augment_text(&a, t, sizeof t);
        assert_string_equal(t, good[i].text);
    }
    struct {
        const char *spec, *frag;
    } bad[] = {
        {"crop", "expected crop:P, flip, both (crop:4,flip) or none, found \"crop\""},
        {"crop:0", "crop:P needs a padding P of 1..64, found \"crop:0\""},
        {"crop:65", "crop:P needs a padding P of 1..64"},
        {"crop:-1", "crop:P needs a padding P of 1..64"},
        {"crop:4x", "crop:P needs a padding P of 1..64, found \"crop:4x\""},
        {"flip,flip", "found \"flip\" in \"flip,flip\""},
        {"crop:2,crop:3", "found \"crop:3\""},
        {"flip,", "ends with a comma"},
        {"rotate", "found \"rotate\""},
        {"", "--augment: empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        data_augment a;
        ht_error e = {{0}};
        if (data_augment_parse(&a, bad[i].spec, &e) != -1) fail_msg("\"%s\" parsed", bad[i].spec);
        if (!strstr(e.msg, bad[i].frag)) fail_msg("\"%s\": \"%s\" lacks \"%s\"", bad[i].spec, e.msg, bad[i].frag);
    }
}

// A 2-channel 3x4 image with values 1..24 (no zeros, so zeros coming in show).
static void known_image(float *x) {
    for (int i = 0; i < 24; i++) x[i] = (float)(i + 1);
}

static void test_flip_known(void **state) {
    (void)state;
    float in[24], out[24];
    known_image(in);
    data_augment_apply(in, out, 2, 3, 4, 0, 0, 0, 1);
    const float want[24] = {4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9,
                            16, 15, 14, 13, 20, 19, 18, 17, 24, 23, 22, 21};
    assert_memory_equal(out, want, sizeof want);
    data_augment_apply(in, out, 2, 3, 4, 0, 0, 0, 0); // no flip, no crop: a copy
    assert_memory_equal(out, in, sizeof in);
    // Crop at the centre offset (dy = dx = P) is the image itself.
    data_augment_apply(in, out, 2, 3, 4, 2, 2, 2, 0);
    assert_memory_equal(out, in, sizeof in);
}

// The offsets and flip of sample id as data.h documents them, computed here from rng.h.
static void documented_draws(int crop, uint64_t seed, uint32_t epoch, uint32_t id, int *dy,
                             int *dx, int *flip) {
    uint64_t key = ht_rng_key(seed, epoch, DATA_AUGMENT_RNG_LAYER);
    *dy = (int)floor(ht_rng_uniform(key, id, 0) * (double)(2 * crop + 1));
    *dx = (int)floor(ht_rng_uniform(key, id, 1) * (double)(2 * crop + 1));
    *flip = ht_rng_uniform(key, id, 2) < 0.5f;
}

static void test_crop_at_rng_offset(void **state) {
    (void)state;
    const data_augment a = {.crop = 2, .flip = 1};
    dataset ds = {.n = 40, .c = 2, .h = 3, .w = 4};
    ds.x = malloc(sizeof(float) * 24 * 40);
    for (int s = 0; s < 40; s++) known_image(ds.x + 24 * s);
    uint32_t idx[40];
    for (int s = 0; s < 40; s++) idx[s] = (uint32_t)s;
    float *out = malloc(sizeof(float) * 24 * 40);
    dataset_gather_augment(&ds, idx, 40, out, NULL, &a, 77, 3);
    int shifted = 0, flipped = 0;
    for (int s = 0; s < 40; s++) {
        int dy, dx, flip, gy, gx, gf;
        documented_draws(2, 77, 3, (uint32_t)s, &dy, &dx, &flip);
        data_augment_draw(&a, 77, 3, (uint32_t)s, &gy, &gx, &gf);
        assert_int_equal(gy, dy);
        assert_int_equal(gx, dx);
        assert_int_equal(gf, flip);
        assert_true(dy >= 0 && dy <= 4 && dx >= 0 && dx <= 4);
        // Output (c, y, x) is input (c, y + dy - 2, x' + dx - 2), x' the flipped column, or 0.
        for (int c = 0; c < 2; c++)
            for (int y = 0; y < 3; y++)
                for (int x = 0; x < 4; x++) {
                    int sy = y + dy - 2, sx = (flip ? 3 - x : x) + dx - 2;
                    float want = sy >= 0 && sy < 3 && sx >= 0 && sx < 4 ? (float)(c * 12 + sy * 4 + sx + 1) : 0.0f;
                    float got = out[24 * s + c * 12 + y * 4 + x];
                    if (got != want)
                        fail_msg("sample %d (dy %d dx %d flip %d) at (%d,%d,%d): %g, want %g", s,
                                 dy, dx, flip, c, y, x, (double)got, (double)want);
                }
        shifted += dy != 2 || dx != 2;
        flipped += flip;
    }
    // The 40 draws include real shifts (zeros came in) and both flip states.
    assert_true(shifted > 20);
    assert_true(flipped > 5 && flipped < 35);
    free(out);
    dataset_free(&ds);
}

// A sample's augmentation depends on (seed, epoch, id) alone: the same in any batch, at any
// position; another epoch or seed draws anew.
static void test_same_draws_any_batch(void **state) {
    (void)state;
    const data_augment a = {.crop = 4, .flip = 1};
    enum { N = 30, H = 8, W = 8, C = 3, S = C * H * W };
    dataset ds = {.n = N, .c = C, .h = H, .w = W};
    ds.x = malloc(sizeof(float) * S * N);
    ds.y = malloc(N);
    for (int i = 0; i < S * N; i++) ds.x[i] = (float)((i * 7919) % 1000) / 1000.0f + 0.001f;
    for (int i = 0; i < N; i++) ds.y[i] = (uint8_t)(i % 10);
    const uint32_t b1[4] = {3, 17, 29, 8}, b2[7] = {29, 0, 8, 5, 3, 21, 17};
    float o1[4 * S], o2[7 * S], o3[4 * S], o4[4 * S];
    uint8_t y1[4], y2[7];
    dataset_gather_augment(&ds, b1, 4, o1, y1, &a, 5, 1);
    dataset_gather_augment(&ds, b2, 7, o2, y2, &a, 5, 1);
    const int same[4] = {4, 6, 0, 2}; // b1[i] is b2[same[i]]
    for (int i = 0; i < 4; i++) {
        assert_memory_equal(o1 + i * S, o2 + same[i] * S, sizeof(float) * S);
        assert_int_equal(y1[i], y2[same[i]]);
    }
    // Another epoch, another seed: some sample of the four comes out otherwise.
    dataset_gather_augment(&ds, b1, 4, o3, NULL, &a, 5, 2);
    dataset_gather_augment(&ds, b1, 4, o4, NULL, &a, 6, 1);
    assert_memory_not_equal(o1, o3, sizeof o1);
    assert_memory_not_equal(o1, o4, sizeof o1);
    // Off, or NULL: a plain copy, as dataset_gather.
    const data_augment off = {0};
    float p1[4 * S], p2[4 * S];
    dataset_gather_augment(&ds, b1, 4, p1, NULL, &off, 5, 1);
    dataset_gather(&ds, b1, 4, p2, NULL);
    assert_memory_equal(p1, p2, sizeof p1);
    for (int i = 0; i < 4; i++) assert_memory_equal(p1 + i * S, ds.x + b1[i] * S, sizeof(float) * S);
    dataset_free(&ds);
}

// Over many samples every offset 0..2P turns up on both axes and about half are flipped
// (binomial over 4000: sd 32; the bound is 6 sd).
static void test_draws_spread(void **state) {
    (void)state;
    const data_augment a = {.crop = 3, .flip = 1};
    int ys[7] = {0}, xs[7] = {0}, flips = 0;
    for (uint32_t id = 0; id < 4000; id++) {
        int dy, dx, f;
        data_augment_draw(&a, 1, 0, id, &dy, &dx, &f);
        assert_true(dy >= 0 && dy <= 6 && dx >= 0 && dx <= 6);
        ys[dy]++;
        xs[dx]++;
        flips += f;
    }
    for (int k = 0; k < 7; k++) assert_true(ys[k] > 400 && xs[k] > 400); // 571 expected
    assert_true(abs(flips - 2000) < 190);
    // Crop alone never flips; flip alone never shifts.
    const data_augment c = {.crop = 3}, f = {.flip = 1};
    for (uint32_t id = 0; id < 100; id++) {
        int dy, dx, fl;
        data_augment_draw(&c, 1, 0, id, &dy, &dx, &fl);
        assert_int_equal(fl, 0);
        data_augment_draw(&f, 1, 0, id, &dy, &dx, &fl);
        assert_int_equal(dy, 0);
        assert_int_equal(dx, 0);
    }
}

// A data set of bytes (an image folder's, dataset.x8) gathers, augments and splits to the
// floats of the same pixels held as floats: the same values, the same draws.
static void test_byte_pixels(void **state) {
    (void)state;
    enum { N = 9, C = 3, H = 5, W = 6, CHW = C * H * W };
    static uint8_t px[N * CHW];
    static float fx[N * CHW];
    uint8_t y[N];
    const float scale = 1.0f / 255;
    for (int i = 0; i < N * CHW; i++) px[i] = (uint8_t)(i * 37 % 251), fx[i] = px[i] * scale;
    for (int i = 0; i < N; i++) y[i] = (uint8_t)(i % 4);
    dataset f = {.n = N, .c = C, .h = H, .w = W, .x = fx, .y = y, .ylen = 1};
    dataset b = {.n = N, .c = C, .h = H, .w = W, .x8 = px, .x8_scale = scale, .y = y, .ylen = 1};
    const uint32_t idx[4] = {7, 0, 3, 7};
    float xf[4 * CHW], xb[4 * CHW];
    uint8_t yf[4], yb[4];
    data_augment a = {.crop = 2, .flip = 1};
    for (int on = 0; on < 2; on++) {
        dataset_gather_augment(&f, idx, 4, xf, yf, on ? &a : NULL, 5, 2);
        dataset_gather_augment(&b, idx, 4, xb, yb, on ? &a : NULL, 5, 2);
        assert_memory_equal(xf, xb, sizeof xf);
        assert_memory_equal(yf, yb, sizeof yf);
    }
    assert_float_equal(dataset_px(&b, 100), fx[100], 0);
    dataset tf, vf, tb, vb;
    ht_error e;
    assert_int_equal(dataset_split(&f, 0.34f, 11, &tf, &vf, &e), 0);
    assert_int_equal(dataset_split(&b, 0.34f, 11, &tb, &vb, &e), 0);
    assert_non_null(tb.x8);
    assert_null(tb.x); // bytes stay bytes
    assert_int_equal(tf.n, tb.n);
    for (size_t i = 0; i < (size_t)tf.n * CHW; i++) assert_float_equal(tf.x[i], dataset_px(&tb, i), 0);
    for (size_t i = 0; i < (size_t)vf.n * CHW; i++) assert_float_equal(vf.x[i], dataset_px(&vb, i), 0);
    assert_memory_equal(tf.y, tb.y, (size_t)tf.n);
    dataset_limit(&tb, 2);
    assert_int_equal(tb.n, 2);
    dataset_free(&tf), dataset_free(&vf), dataset_free(&tb), dataset_free(&vb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_text),
        cmocka_unit_test(test_flip_known),
        cmocka_unit_test(test_crop_at_rng_offset),
        cmocka_unit_test(test_same_draws_any_batch),
        cmocka_unit_test(test_draws_spread),
        cmocka_unit_test(test_byte_pixels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
