// Winograd convolutions (winograd.h, run through layers.h's conv2d_nhwc_* as net.c runs them)
// against the NCHW reference (ref.c), F(2x2,3x3), F(4x4,3x3), F(2x2,5x5) and F(4x4,5x5): their
// rounding
// error, bounded on random layers of the networks' shapes and on edge cases; the bound's power
// to see a wrong transform; outputs over all-zero receptive fields exact; the algorithm choice
// (conv_algo.h) and its text; and one training step of each reference network with Winograd
// against one direct.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/conv_algo.h"
#include "data/data.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/net.h"
#include "tests/lib/ref.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"
#include "nn/winograd.h"

// ---- the error measure and its bound -------------------------------------------------------
// Each element of a convolution's output, input gradient or weight gradient is a sum of n
// products p_k. Summed in float, in any order, it rounds to within about sqrt(n) * 2^-24 * S
// (typically; n * 2^-24 * S at worst), S = sum_k |p_k|, whatever the cancellation. Winograd
// computes the same sums through transforms whose coefficients (F(4,3) and F(2,5): up to 5 in
// B; 8 in F(4,3)'s A, 2 in F(2,5)'s; 1/4..1/24 and up to 2/3 in G) mix a whole tile's patch
// and then cancel magnitudes larger than the inputs', so its rounding is a multiple of 2^-24
// times the magnitudes of the tile: the error measure is
//   E = max over elements |result - reference| / S_tile,
// with S computed by the reference itself on |x|, |w| (|dout|), and S_tile the largest S of
// the element's tile (m x m outputs or input-gradient positions, the K x K taps of one weight
// gradient kernel; the element itself for direct). Without the tile a corner output of an
// unpadded layer, a few small products of its own, shows its tile's rounding as E ~1e-4.
// The reference (float im2col + SGEMM) carries its own rounding in E; the direct path is
// measured the same way for scale. Measured over the fixed cases below and 1000 random layers
// of each kernel size (N_RANDOM raised for the measurement; 60 run here) on AVX-512: direct
// 2.9e-7 (5 x 2^-24), F(2x2,3x3) 1.9e-6 (32 x 2^-24), F(4x4,3x3) 7.2e-6 (120 x 2^-24), the
// worst of the three tensors each time, the input gradient's; F(2x2,5x5) and F(4x4,5x5)
// below. The bounds leave 4x to 5x room. The double-precision transforms of
// test_wrong_transform_exceeds show what one coefficient off (a typo in any of A, B or G)
// does: E 0.1 and more, thousands of times the bound.
#define E_DIRECT 1.5e-6
#define E_WINO2 1e-5
#define E_WINO4 3e-5
// F(2x2,5x5): F(4,3)'s B^T (coefficients to 5) on the same 6x6 patch, but a G whose last
// finite rows reach 2/3 (the 4th powers of +-2 over 24) and an A^T of 1s and 2s. Measured worst
// 8.8e-6, the weight gradient's (its 25 taps come out of one transform of sums over every tile
// of a sample, so each carries the rounding of the largest; forward 3.4e-6, input gradient
// 3.9e-6, as F(4,3)'s); the bound leaves 4.5x.
#define E_WINO25 4e-5
// F(4x4,5x5): 8x8 patches, the points +-1/2 added: B^T's coefficients reach 21/4, A^T's 8 and
// G's 32/45. Measured worst 1.4e-5 (235 x 2^-24), the weight gradient's again (forward 7.5e-6,
// input gradient 8.3e-6); the bound leaves 4.3x.
#define E_WINO45 6e-5

typedef struct case_shape {
    int B, C, Cs, H, W, OC, pad, K;
} case_shape;

// Errors of one layer's three tensors (E above).
typedef struct errs {
    double out, din, dw;
} errs;

static float *urand(size_t n, float lo, float hi, uint64_t seed) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * ht_rng_double(&r));
    return p;
}

static float *absv(const float *x, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = fabsf(x[i]);
    return p;
}

static float *zeros(size_t n) {
    float *p = calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

// S over the m x m tiles (aligned at 0) of each (sample, channel) plane of (BC, H, W): each
// element gets its tile's largest, in place.
static void tile_max(float *S, int BC, int H, int W, int m) {
    for (int p = 0; p < BC; p++) {
        float *P = S + (size_t)p * H * W;
        for (int ty = 0; ty < H; ty += m)
            for (int tx = 0; tx < W; tx += m) {
                float best = 0;
                for (int i = ty; i < ty + m && i < H; i++)
                    for (int j = tx; j < tx + m && j < W; j++) best = fmaxf(best, P[i * W + j]);
                for (int i = ty; i < ty + m && i < H; i++)
                    for (int j = tx; j < tx + m && j < W; j++) P[i * W + j] = best;
            }
    }
}

// max |a - b| / S over n elements; S = 0 (no products at all) must give a == b.
static double emax(const float *a, const float *b, const float *S, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double e = S[i] > 0 ? d / S[i] : (d > 0 ? INFINITY : 0);
        if (!(e <= worst)) worst = e; // NaN too
    }
    return worst;
}

// One layer (K x K, stride 1) through conv2d_nhwc_forward/backward with every direction
// asking for impl, against the reference. Pad channels of the NHWC inputs hold NaN, which must
// not reach a result.
static errs run_case(const case_shape *s, conv_impl impl, uint64_t seed) {
    const int B = s->B, C = s->C, H = s->H, W = s->W, OC = s->OC, K = s->K, pad = s->pad;
    const int OH = conv_out_dim(H, K, 1, pad), OW = conv_out_dim(W, K, 1, pad);
    const int OCs = conv_cpad(OC);
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * OC * OH * OW;
    const size_t nw = (size_t)OC * C * K * K;
    float *in = urand(nin, -1, 1, seed), *w = urand(nw, -0.5f, 0.5f, seed + 1);
    float *b = urand(OC, -0.5f, 0.5f, seed + 2), *dout = urand(nout, -1, 1, seed + 3);
    float *ain = absv(in, nin), *aw = absv(w, nw), *adout = absv(dout, nout);
    float *rws = zeros(ref_conv2d_ws_floats(C, K, OC, OH, OW, 1));
    float *out_r = zeros(nout), *din_r = zeros(nin), *dw_r = zeros(nw), *db_r = zeros(OC);
    float *S_out = zeros(nout), *S_din = zeros(nin), *S_dw = zeros(nw), *S_db = zeros(OC);
    ref_conv2d_forward(out_r, in, w, b, B, C, H, W, OC, K, 1, pad, OH, OW, rws, 1);
    ref_conv2d_backward(din_r, dw_r, db_r, dout, in, w, B, C, H, W, OC, K, 1, pad, OH, OW, rws, 1);
    ref_conv2d_forward(S_out, ain, aw, NULL, B, C, H, W, OC, K, 1, pad, OH, OW, rws, 1);
    for (size_t i = 0; i < nout; i++) S_out[i] += fabsf(b[i / ((size_t)OH * OW) % OC]);
    ref_conv2d_backward(S_din, S_dw, S_db, adout, ain, aw, B, C, H, W, OC, K, 1, pad, OH, OW, rws,
                        1);
    // A Winograd tile's outputs are mixed from its whole input patch, so each one's rounding
    // follows the tile's magnitudes: an output with few or small products of its own (a
    // corner without padding) carries the rounding of its tile's largest.
    const int m = impl == CONV_DIRECT ? 1 : (int)impl;
    tile_max(S_out, B * OC, OH, OW, m);
    if (conv2d_wino_ok(&(conv_geom){.H = H, .W = W, .K = K, .stride = 1, .pad = pad, .OH = OH,
                                    .OW = OW, .Cs = s->Cs},
                       CONV_DIR_DIN))
        tile_max(S_din, B * C, H, W, m);
    // Likewise the weight gradient's K x K taps of one (oc, c) come out of one transform.
    if (m > 1) tile_max(S_dw, OC * C, K, K, K);

    const conv_geom g = {.C = C, .Cs = s->Cs, .H = H, .W = W, .OC = OC, .K = K, .stride = 1,
                         .pad = pad, .OH = OH, .OW = OW, .fwd = impl, .din = impl, .dw = impl};
    const size_t in_rows = (size_t)B * H * W, out_rows = (size_t)B * OH * OW;
    float *xin = malloc(in_rows * s->Cs * sizeof *xin), *xR = malloc(out_rows * OCs * sizeof *xR);
    float *xout = malloc(out_rows * OCs * sizeof *xout);
    float *xdin = malloc(in_rows * s->Cs * sizeof *xdin);
    float *ws = malloc(conv2d_nhwc_ws_floats(&g, 2) * sizeof *ws); // the advertised size
    float *out = zeros(nout), *din = zeros(nin), *dw = zeros(nw), *db = zeros(OC);
    assert_true(xin && xR && xout && xdin && ws);
    ref_to_nhwc(xin, in, B, C, s->Cs, H * W, NAN);
    ref_to_nhwc(xR, dout, B, OC, OCs, OH * OW, NAN);
    conv2d_nhwc_forward(xout, xin, w, b, B, &g, 0, ws, 2);
    conv2d_nhwc_backward(xdin, dw, db, xR, NULL, xin, w, B, &g, ws, 2);
    ref_to_nchw(out, xout, B, OC, OCs, OH * OW);
    ref_to_nchw(din, xdin, B, C, s->Cs, H * W);
    errs e = {emax(out, out_r, S_out, nout), emax(din, din_r, S_din, nin),
              emax(dw, dw_r, S_dw, nw)};
    double edb = emax(db, db_r, S_db, OC);
    if (edb > e.dw) e.dw = edb;
    free(in), free(w), free(b), free(dout), free(ain), free(aw), free(adout), free(rws);
    free(out_r), free(din_r), free(dw_r), free(db_r), free(S_out), free(S_din), free(S_dw);
    free(S_db), free(xin), free(xR), free(xout), free(xdin), free(ws), free(out), free(din);
    free(dw), free(db);
    return e;
}

//   B   C  Cs   H   W  OC  pad
static const case_shape fixed_cases3[] = {
    {2, 1, 1, 28, 28, 32, 1, 3},    // cnn3 conv1: one input channel (stride 1)
    {2, 32, 32, 28, 28, 48, 1, 3},  // cnn3 conv2
    {2, 48, 48, 14, 14, 32, 1, 3},  // cnn3 conv3: F(4,3) tiles overhang 14 by 2
    {1, 1, 1, 1, 1, 1, 1, 3},       // a 1x1 image, one channel each side, batch 1
    {1, 17, 32, 1, 1, 5, 1, 3},     // a 1x1 image with 17 channels (a vector and one more)
    {1, 3, 16, 5, 7, 20, 1, 3},     // odd sizes, 20 outputs (12 pad channels)
    {1, 33, 48, 13, 9, 17, 1, 3},   // > 32 channels, odd sizes, 17 outputs
    {1, 20, 20, 6, 5, 7, 1, 3},     // Cs not a multiple of 16: the input gradient stays direct
    {1, 4, 16, 6, 6, 3, 0, 3},      // no padding ("valid")
    {1, 4, 16, 5, 6, 3, 2, 3},      // pad 2: outputs larger than the input
    {3, 2, 16, 3, 3, 2, 1, 3},      // one F(4,3) tile, mostly overhang
    {1, 40, 48, 2, 17, 50, 1, 3},   // two rows, many channels
};
static const case_shape fixed_cases5[] = {
    {2, 1, 1, 28, 28, 32, 2, 5},    // cnn2 conv1: one input channel, "same"
    {2, 32, 32, 14, 14, 64, 2, 5},  // cnn2 conv2
    {1, 1, 1, 1, 1, 1, 2, 5},       // a 1x1 image: every tap but the centre reads padding
    {1, 17, 32, 3, 2, 5, 2, 5},     // 17 channels, an image smaller than the kernel
    {1, 33, 48, 13, 9, 17, 2, 5},   // > 32 channels, odd sizes: F(2,5) tiles overhang by 1
    {1, 20, 20, 8, 7, 7, 2, 5},     // Cs not a multiple of 16: the input gradient stays direct
    {1, 4, 16, 9, 8, 3, 0, 5},      // no padding ("valid")
    {1, 4, 16, 5, 6, 3, 4, 5},      // pad 4: outputs larger than the input, widest din border
    {1, 3, 16, 6, 5, 20, 1, 5},     // pad 1, 20 outputs
    {1, 40, 48, 2, 17, 50, 3, 5},   // two rows, many channels, pad 3
};
#define N_RANDOM 60

static case_shape random_case(ht_rng *r, int K) {
    case_shape s;
    s.K = K;
    s.B = 1 + (int)ht_rng_below(r, 2);
    s.C = 1 + (int)ht_rng_below(r, 40);
    s.Cs = s.C == 1 && ht_rng_below(r, 2) ? 1 : conv_cpad(s.C);
    s.H = 1 + (int)ht_rng_below(r, 17);
    s.W = 1 + (int)ht_rng_below(r, 17);
    s.OC = 1 + (int)ht_rng_below(r, 40);
    s.pad = (int)ht_rng_below(r, (uint64_t)K);
    while (s.H + 2 * s.pad < K || s.W + 2 * s.pad < K) s.pad++;
    return s;
}

static void show(const char *what, const errs *e) {
    printf("%s: worst E forward %.2g, input gradient %.2g, weight gradient %.2g\n", what, e->out,
           e->din, e->dw);
}

static void worst_of(errs *w, const errs *e) {
    if (!(e->out <= w->out)) w->out = e->out;
    if (!(e->din <= w->din)) w->din = e->din;
    if (!(e->dw <= w->dw)) w->dw = e->dw;
}

// Every case of kernel size K, fixed and random, under one algorithm: the worst E of each
// tensor within bound.
static void check_impl(conv_impl impl, int K, double bound, const char *name) {
    errs worst = {0, 0, 0};
    ht_rng r;
    ht_rng_seed(&r, K == 3 ? 2024 : 2025);
    const case_shape *fixed = K == 3 ? fixed_cases3 : fixed_cases5;
    const int n_fixed = K == 3 ? (int)(sizeof fixed_cases3 / sizeof fixed_cases3[0])
                               : (int)(sizeof fixed_cases5 / sizeof fixed_cases5[0]);
    for (int i = 0; i < n_fixed + N_RANDOM; i++) {
        case_shape s = i < n_fixed ? fixed[i] : random_case(&r, K);
        errs e = run_case(&s, impl, 500 + 10 * (uint64_t)i);
        if (!(e.out <= bound && e.din <= bound && e.dw <= bound)) {
            show(name, &e);
            fail_msg("%s: B%d C%d(Cs%d) %dx%d OC%d K%d pad %d: E above %.2g", name, s.B, s.C,
                     s.Cs, s.H, s.W, s.OC, s.K, s.pad, bound);
        }
        worst_of(&worst, &e);
    }
    show(name, &worst);
}

static void test_error_direct(void **state) {
    (void)state;
    check_impl(CONV_DIRECT, 3, E_DIRECT, "direct 3x3");
    check_impl(CONV_DIRECT, 5, E_DIRECT, "direct 5x5");
}

static void test_error_winograd2(void **state) {
    (void)state;
    check_impl(CONV_WINO2, 3, E_WINO2, "winograd F(2x2,3x3)");
}

static void test_error_winograd4(void **state) {
    (void)state;
    check_impl(CONV_WINO4, 3, E_WINO4, "winograd F(4x4,3x3)");
}

static void test_error_winograd25(void **state) {
    (void)state;
    check_impl(CONV_WINO2, 5, E_WINO25, "winograd F(2x2,5x5)");
}

static void test_error_winograd45(void **state) {
    (void)state;
    check_impl(CONV_WINO4, 5, E_WINO45, "winograd F(4x4,5x5)");
}

// ---- a wrong transform exceeds the bound -------------------------------------------------
// Winograd's forward in double with the transform matrices as tables (Lavin & Gray's, those
// of winograd.c; F(2,5)'s by the same Cook-Toom construction on F(4,3)'s points): with the
// right ones its E is the reference's own rounding; with any one coefficient changed (as a
// typo would) E is far above the bounds above.

static const double BT2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double AT2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
static const double BT4[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                 {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
static const double G4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
static const double AT4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0},
                                 {0, 1, -1, 8, -8, 1}};
static const double G25[6][5] = {{1.0 / 4, 0, 0, 0, 0},
                                 {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
                                 {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
                                 {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
                                 {0, 0, 0, 0, 1}};
static const double AT25[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
static const double BT8[8][8] = {{1, 0, -21.0 / 4, 0, 21.0 / 4, 0, -1, 0},
                                 {0, 1, 1, -17.0 / 4, -17.0 / 4, 1, 1, 0},
                                 {0, -1, 1, 17.0 / 4, -17.0 / 4, -1, 1, 0},
                                 {0, 0.5, 0.25, -2.5, -1.25, 2, 1, 0},
                                 {0, -0.5, 0.25, 2.5, -1.25, -2, 1, 0},
                                 {0, 2, 4, -2.5, -5, 0.5, 1, 0},
                                 {0, -2, 4, 2.5, -5, -0.5, 1, 0},
                                 {0, -1, 0, 21.0 / 4, 0, -21.0 / 4, 0, 1}};
static const double G45[8][5] = {{1, 0, 0, 0, 0},
                                 {-2.0 / 9, -2.0 / 9, -2.0 / 9, -2.0 / 9, -2.0 / 9},
                                 {-2.0 / 9, 2.0 / 9, -2.0 / 9, 2.0 / 9, -2.0 / 9},
                                 {1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                                 {1.0 / 90, -1.0 / 45, 2.0 / 45, -4.0 / 45, 8.0 / 45},
                                 {32.0 / 45, 16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45},
                                 {32.0 / 45, -16.0 / 45, 8.0 / 45, -4.0 / 45, 2.0 / 45},
                                 {0, 0, 0, 0, 1}};
static const double AT45[4][8] = {{1, 1, 1, 1, 1, 1, 1, 0},
                                  {0, 1, -1, 2, -2, 0.5, -0.5, 0},
                                  {0, 1, 1, 4, 4, 0.25, 0.25, 0},
                                  {0, 1, -1, 8, -8, 0.125, -0.125, 1}};

typedef struct tables {
    int m, r, a;
    double BT[8][8], G[8][5], AT[4][8];
} tables;

static tables tables_of(int m, int r) {
    tables t;
    memset(&t, 0, sizeof t);
    t.m = m;
    t.r = r;
    t.a = m + r - 1;
    for (int i = 0; i < t.a; i++) {
        for (int j = 0; j < t.a; j++)
            t.BT[i][j] = t.a == 4 ? BT2[i][j] : t.a == 6 ? BT4[i][j] : BT8[i][j];
        for (int j = 0; j < r; j++)
            t.G[i][j] = r == 5 ? (m == 2 ? G25[i][j] : G45[i][j]) : m == 2 ? G2[i][j] : G4[i][j];
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < t.a; j++)
            t.AT[i][j] = r == 5 ? (m == 2 ? AT25[i][j] : AT45[i][j])
                         : m == 2 ? AT2[i][j]
                                  : AT4[i][j];
    return t;
}

// out (B,OC,OH,OW) of in (B,C,H,W) and w (OC,C,r,r), "same" padding (r-1)/2, by the tables.
static void wino_double(float *out, const float *in, const float *w, int B, int C, int H, int W,
                        int OC, const tables *t) {
    const int m = t->m, r = t->r, a = t->a, OH = H, OW = W, pad = (r - 1) / 2;
    for (int n = 0; n < B; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int ty = 0; ty * m < OH; ty++)
                for (int tx = 0; tx * m < OW; tx++) {
                    double M[8][8] = {{0}};
                    for (int c = 0; c < C; c++) {
                        double d[8][8], U[8][8], V[8][8], tg[8][5], td[8][8];
                        for (int i = 0; i < a; i++)
                            for (int j = 0; j < a; j++) {
                                int ih = ty * m + i - pad, iw = tx * m + j - pad;
                                d[i][j] = ih < 0 || iw < 0 || ih >= H || iw >= W
                                              ? 0
                                              : in[(((size_t)n * C + c) * H + ih) * W + iw];
                            }
                        const float *k = w + ((size_t)oc * C + c) * r * r;
                        for (int i = 0; i < a; i++)
                            for (int j = 0; j < r; j++) {
                                double s = 0;
                                for (int k2 = 0; k2 < r; k2++) s += t->G[i][k2] * k[k2 * r + j];
                                tg[i][j] = s;
                            }
                        for (int i = 0; i < a; i++)
                            for (int j = 0; j < a; j++) {
                                double s = 0;
                                for (int k2 = 0; k2 < r; k2++) s += tg[i][k2] * t->G[j][k2];
                                U[i][j] = s;
                            }
                        for (int i = 0; i < a; i++)
                            for (int j = 0; j < a; j++) {
                                double s = 0;
                                for (int k2 = 0; k2 < a; k2++) s += t->BT[i][k2] * d[k2][j];
                                td[i][j] = s;
                            }
                        for (int i = 0; i < a; i++)
                            for (int j = 0; j < a; j++) {
                                double s = 0;
                                for (int k2 = 0; k2 < a; k2++) s += td[i][k2] * t->BT[j][k2];
                                V[i][j] = s;
                            }
                        for (int i = 0; i < a; i++)
                            for (int j = 0; j < a; j++) M[i][j] += U[i][j] * V[i][j];
                    }
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < m; j++) {
                            int oh = ty * m + i, ow = tx * m + j;
                            if (oh >= OH || ow >= OW) continue;
                            double s = 0;
                            for (int p = 0; p < a; p++)
                                for (int q = 0; q < a; q++)
                                    s += t->AT[i][p] * M[p][q] * t->AT[j][q];
                            out[(((size_t)n * OC + oc) * OH + oh) * OW + ow] = (float)s;
                        }
                }
}

static void test_wrong_transform_exceeds(void **state) {
    (void)state;
    enum { B = 1, C = 8, H = 12, W = 12, OC = 6 };
    static const struct {
        int m, r;
        double bound;
    } variants[] = {{2, 3, E_WINO2}, {4, 3, E_WINO4}, {2, 5, E_WINO25}, {4, 5, E_WINO45}};
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * OC * H * W;
    float *in = urand(nin, -1, 1, 71), *ain = absv(in, nin);
    float *ref = zeros(nout), *S = zeros(nout), *out = zeros(nout);
    for (int v = 0; v < 4; v++) {
        const int m = variants[v].m, r = variants[v].r, pad = (r - 1) / 2;
        const double bound = variants[v].bound;
        const size_t nw = (size_t)OC * C * r * r;
        float *w = urand(nw, -0.5f, 0.5f, 72), *aw = absv(w, nw);
        float *rws = zeros(ref_conv2d_ws_floats(C, r, OC, H, W, 1));
        ref_conv2d_forward(ref, in, w, NULL, B, C, H, W, OC, r, 1, pad, H, W, rws, 1);
        ref_conv2d_forward(S, ain, aw, NULL, B, C, H, W, OC, r, 1, pad, H, W, rws, 1);
        tables t = tables_of(m, r);
        wino_double(out, in, w, B, C, H, W, OC, &t);
        double e_right = emax(out, ref, S, nout);
        printf("F(%dx%d,%dx%d) in double, right tables: E %.2g (bound %.2g)\n", m, m, r, r,
               e_right, bound);
        assert_true(e_right <= bound);
        // One coefficient of each matrix off, by a quarter of itself: B^T[1][2] (-4 or 1),
        // G[1][1] (-1/6, 1/2 or -2/9), A^T[1][3] (2 or -1), and for 5x5 kernels G[3][4] (2/3
        // or 8/45, a coefficient of the kernel's last row and column only).
        struct {
            double *c;
            const char *name;
        } typos[] = {{&t.BT[1][2], "B^T[1][2]"},
                     {&t.G[1][1], "G[1][1]"},
                     {&t.AT[1][3], "A^T[1][3]"},
                     {&t.G[3][4], "G[3][4]"}};
        for (int k = 0; k < (r == 5 ? 4 : 3); k++) {
            const double keep = *typos[k].c;
            *typos[k].c = keep * 1.25;
            wino_double(out, in, w, B, C, H, W, OC, &t);
            double e = emax(out, ref, S, nout);
            printf("F(%dx%d,%dx%d) with %s x1.25: E %.2g = %.0f x the bound\n", m, m, r, r,
                   typos[k].name, e, e / bound);
            assert_true(e > 100 * bound);
            *typos[k].c = keep;
        }
        free(w), free(aw), free(rws);
    }
    free(in), free(ain), free(ref), free(S), free(out);
}

// ---- exact zeros -----------------------------------------------------------------------------

// An output whose receptive field holds only zeros is exactly its bias (relu'd) under every
// algorithm, as a direct sum of zero products is: where an image's background is blank, a relu
// and a max pool after the convolution see exact ties, on every path alike.
static void test_zero_fields_exact(void **state) {
    (void)state;
    enum { B = 2, C = 5, Cs = 16, H = 13, W = 11, OC = 20 };
    const int OCs = conv_cpad(OC);
    float *in = zeros((size_t)B * H * W * Cs), *w = urand((size_t)OC * C * 25, -0.5f, 0.5f, 81);
    float *b = urand(OC, -0.2f, 0.2f, 82);
    for (int i = 0; i < OC; i += 3) b[i] = 0.0f; // zero biases as at initialisation
    // A 3x4 blob of values in each sample; everything else zero.
    ht_rng r;
    ht_rng_seed(&r, 83);
    for (int n = 0; n < B; n++)
        for (int h = 4; h < 7; h++)
            for (int x = 2 + n; x < 6 + n; x++)
                for (int c = 0; c < C; c++)
                    in[(((size_t)n * H + h) * W + x) * Cs + c] = (float)(ht_rng_double(&r) - 0.5);
    float *out_d = zeros((size_t)B * H * W * OCs), *out_w = zeros((size_t)B * H * W * OCs);
    static const struct {
        conv_impl impl;
        int K;
    } variants[] = {{CONV_WINO2, 3}, {CONV_WINO4, 3}, {CONV_WINO2, 5}, {CONV_WINO4, 5}};
    for (int k = 0; k < 4; k++) {
        const conv_impl impl = variants[k].impl;
        const int K = variants[k].K, h2 = K / 2; // "same" padding
        conv_geom g = {.C = C, .Cs = Cs, .H = H, .W = W, .OC = OC, .K = K, .stride = 1,
                       .pad = h2, .OH = H, .OW = W};
        float *ws = malloc(conv2d_nhwc_ws_floats(&g, 1) * sizeof *ws);
        conv2d_nhwc_forward(out_d, in, w, b, B, &g, 1, ws, 1);
        g.fwd = impl;
        conv2d_nhwc_forward(out_w, in, w, b, B, &g, 1, ws, 1);
        int exact = 0;
        for (int n = 0; n < B; n++)
            for (int h = 0; h < H; h++)
                for (int x = 0; x < W; x++) {
                    if (h >= 4 - h2 && h <= 6 + h2 && x >= 2 + n - h2 && x <= 5 + n + h2)
                        continue; // sees the blob
                    const size_t o = (((size_t)n * H + h) * W + x) * OCs;
                    if (memcmp(out_d + o, out_w + o, OCs * sizeof(float)))
                        fail_msg("F(%d,%d): output (%d,%d,%d) over zeros differs from direct",
                                 impl, K, n, h, x);
                    exact++;
                }
        assert_true(exact > B * H * W / 2);
        free(ws);
    }
    free(in), free(w), free(b), free(out_d), free(out_w);
}

// ---- choosing ----------------------------------------------------------------------------------

static void test_choose(void **state) {
    (void)state;
    const conv_geom g3 = {.C = 32, .Cs = 32, .H = 14, .W = 14, .OC = 48, .K = 3, .stride = 1,
                          .pad = 1, .OH = 14, .OW = 14};
    conv_geom g5 = g3, gs = g3, gc = g3;
    g5.K = 5, g5.pad = 2;
    gs.stride = 2, gs.OH = gs.OW = 7;
    gc.C = 20, gc.Cs = 20; // the input gradient cannot be written in whole vectors
    conv_choice c = conv_choose(&g3, CONV_ALGO_DIRECT, 1, 1);
    assert_true(c.fwd == CONV_DIRECT && c.din == CONV_DIRECT && c.dw == CONV_DIRECT);
    c = conv_choose(&g3, CONV_ALGO_WINOGRAD, 1, 1);
    assert_true(c.fwd == CONV_WINO4 && c.din == CONV_WINO4 && c.dw == CONV_WINO4);
    c = conv_choose(&g3, CONV_ALGO_WINOGRAD2, 1, 1);
    assert_true(c.fwd == CONV_WINO2 && c.din == CONV_WINO2 && c.dw == CONV_WINO2);
    c = conv_choose(&g3, CONV_ALGO_WINOGRAD, 0, 1); // a first layer: no input gradient
    assert_true(c.fwd == CONV_WINO4 && c.din == CONV_DIRECT && c.dw == CONV_WINO4);
    c = conv_choose(&gc, CONV_ALGO_WINOGRAD, 1, 1);
    assert_true(c.fwd == CONV_WINO4 && c.din == CONV_DIRECT && c.dw == CONV_WINO4);
    // 5x5: F(4x4,5x5) (winograd) and F(2x2,5x5) (winograd2); the input gradient needs pad <= 4
    // as 3x3's needs pad <= 2.
    c = conv_choose(&g5, CONV_ALGO_DIRECT, 1, 1);
    assert_true(c.fwd == CONV_DIRECT && c.din == CONV_DIRECT && c.dw == CONV_DIRECT);
    c = conv_choose(&g5, CONV_ALGO_WINOGRAD, 1, 1);
    assert_true(c.fwd == CONV_WINO4 && c.din == CONV_WINO4 && c.dw == CONV_WINO4 && c.K == 5);
    c = conv_choose(&g5, CONV_ALGO_WINOGRAD2, 1, 1);
    assert_true(c.fwd == CONV_WINO2 && c.din == CONV_WINO2 && c.dw == CONV_WINO2 && c.K == 5);
    conv_geom g5p = g5;
    g5p.pad = 5, g5p.OH = g5p.OW = 20;
    c = conv_choose(&g5p, CONV_ALGO_WINOGRAD, 1, 1);
    assert_true(c.fwd == CONV_WINO4 && c.din == CONV_DIRECT && c.dw == CONV_WINO4);
    for (int i = 0; i < 4; i++) { // strided convolutions stay direct under every request
        c = conv_choose(&gs, (conv_algo)i, 1, 1);
        assert_true(c.fwd == CONV_DIRECT && c.din == CONV_DIRECT && c.dw == CONV_DIRECT);
    }
    // The run log's names carry the kernel size.
    char line[512];
    conv_choice_describe(&(conv_choice){.fwd = CONV_WINO2, .din = CONV_WINO2, .dw = CONV_WINO2,
                                        .need_din = 1, .K = 5},
                         "conv2", line, sizeof line);
    assert_string_equal(line, "conv2 winograd F(2x2,5x5)");
    conv_choice_describe(&(conv_choice){.fwd = CONV_DIRECT, .dw = CONV_WINO4, .K = 5}, "conv1",
                         line, sizeof line);
    assert_string_equal(line, "conv1 fwd direct, dw winograd F(4x4,5x5)");
    conv_choice_describe(&(conv_choice){.fwd = CONV_WINO2, .dw = CONV_WINO2, .K = 3}, "conv1",
                         line, sizeof line);
    assert_string_equal(line, "conv1 winograd F(2x2,3x3)");
    // auto: each direction direct or F(4x4,3x3), every direction timed both ways, and asked
    // again (another device of the process) the same decisions without timing anew.
    conv_choice a = conv_choose(&g3, CONV_ALGO_AUTO, 1, 2);
    const conv_impl got[3] = {a.fwd, a.din, a.dw};
    for (int d = 0; d < 3; d++) {
        assert_true(got[d] == CONV_DIRECT || got[d] == CONV_WINO4);
        assert_true(a.t[d][0] > 0 && a.t[d][1] > 0);
    }
    conv_choice_describe(&a, "conv2", line, sizeof line);
    printf("auto: %s\n", line);
    conv_choice again = conv_choose(&g3, CONV_ALGO_AUTO, 1, 2);
    assert_true(again.fwd == a.fwd && again.din == a.din && again.dw == a.dw && again.K == 3);
    assert_memory_equal(again.t, a.t, sizeof a.t);
    // The same for 5x5: direct or F(4x4,5x5).
    conv_choice a5 = conv_choose(&g5, CONV_ALGO_AUTO, 1, 2);
    const conv_impl got5[3] = {a5.fwd, a5.din, a5.dw};
    for (int d = 0; d < 3; d++) {
        assert_true(got5[d] == CONV_DIRECT || got5[d] == CONV_WINO4);
        assert_true(a5.t[d][0] > 0 && a5.t[d][1] > 0);
    }
    conv_choice_describe(&a5, "conv2", line, sizeof line);
    printf("auto: %s\n", line);

    // The decisions as text (what a checkpoint keeps and rank 0 sends), and back: a restored
    // decision replaces the timed one and is used without timing.
    char text[CONV_CHOICES_TEXT];
    conv_choices_text(text, sizeof text);
    char want[64];
    snprintf(want, sizeof want, "32.32.14.14.48.3.1.1:%d.%d.%d", a.fwd, a.din, a.dw);
    if (!strstr(text, want)) fail_msg("\"%s\" lacks \"%s\"", text, want);
    snprintf(want, sizeof want, "32.32.14.14.48.5.2.1:%d.%d.%d", a5.fwd, a5.din, a5.dw);
    if (!strstr(text, want)) fail_msg("\"%s\" lacks \"%s\"", text, want);
    // A text of the earlier format (no K: every entry 3x3), as checkpoints written before 5x5
    // kernels ran Winograd keep it, is taken as 3x3.
    assert_int_equal(conv_choices_restore("32.32.14.14.48.1.1:2.0.4;5.16.9.9.7.0.0:4.0.0"), 0);
    c = conv_choose(&g3, CONV_ALGO_AUTO, 1, 2);
    assert_true(c.fwd == CONV_WINO2 && c.din == CONV_DIRECT && c.dw == CONV_WINO4);
    assert_true(c.t[0][0] == 0 && c.t[2][1] == 0);
    const conv_geom g9 = {.C = 5, .Cs = 16, .H = 9, .W = 9, .OC = 7, .K = 3, .stride = 1,
                          .pad = 0, .OH = 7, .OW = 7};
    c = conv_choose(&g9, CONV_ALGO_AUTO, 0, 2);
    assert_true(c.fwd == CONV_WINO4 && c.din == CONV_DIRECT && c.dw == CONV_DIRECT);
    // And one of this format with a 5x5 entry, whose decision replaces the timed one.
    assert_int_equal(conv_choices_restore("32.32.14.14.48.5.2.1:0.2.2"), 0);
    c = conv_choose(&g5, CONV_ALGO_AUTO, 1, 2);
    assert_true(c.fwd == CONV_DIRECT && c.din == CONV_WINO2 && c.dw == CONV_WINO2 && c.K == 5);
    assert_true(c.t[0][0] == 0);
    conv_choices_text(text, sizeof text);
    assert_non_null(strstr(text, "32.32.14.14.48.3.1.1:2.0.4"));
    assert_non_null(strstr(text, "5.16.9.9.7.3.0.0:4.0.0"));
    assert_non_null(strstr(text, "32.32.14.14.48.5.2.1:0.2.2"));
    // The text written is taken back whole (what a resumed checkpoint and every rank do).
    assert_int_equal(conv_choices_restore(text), 0);
    char text2[CONV_CHOICES_TEXT];
    conv_choices_text(text2, sizeof text2);
    assert_string_equal(text, text2);
    static const char *const bad[] = {
        "x", "32.32.14.14.48.1", "32.32.14.14.48.1.1:4.4", "32.32.14.14.48.1.1:4.4.3",
        "32.32.14.14.48.1.2:4.4.4", "0.32.14.14.48.1.1:4.4.4", "32.16.14.14.48.1.1:4.4.4",
        "99999999999999999999.32.14.14.48.1.1:4.4.4", "32.32.14.14.48.1.1:4.4.4;;",
        "32.32.14.14.48.1.1:4.4.4 ", "32.32.-14.14.48.1.1:4.4.4", "32.32.1.1.48.0.1:4.4.4",
        "32.32.14.14.48.1.1:2.0.4.4",     // a fourth decision
        "32.32.14.14.48.7.3.1:2.2.2",     // nor 7x7 Winograd
        "32.32.14.14.48.5.2.1.1:2.2.2",   // nine numbers
        "32.32.14.14.48.5:2.2.2",         // six
        "32.32.2.2.48.5.0.1:2.2.2",       // a 2x2 image under a 5x5 kernel, no padding
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (conv_choices_restore(bad[i]) != -1) fail_msg("\"%s\" taken", bad[i]);
    c = conv_choose(&g3, CONV_ALGO_AUTO, 1, 2); // nothing of a malformed text was taken
    assert_true(c.fwd == CONV_WINO2 && c.din == CONV_DIRECT && c.dw == CONV_WINO4);
}

// ---- one training step -------------------------------------------------------------------------

// A network's mean gradient over 64 Fashion-MNIST images (dropout on) with every eligible
// convolution by Winograd (requests algos[1..n-1]), against the same step direct: the output
// layer within rounding (TOL_GRAD_ROUNDING), the others within TOL_GRAD_BRANCH
// (check_step_grad), every sample's loss within TOL_RUN_LOSS.
static void step_vs_direct(const char *preset, const conv_algo *algos, int n) {
    enum { N = 64 };
    ht_error e;
    model m;
    if (model_init_preset(&m, preset, &e) < 0) fail_msg("%s", e.msg);
    dataset tr;
    test_fashion_set(&tr, FASHION_TEST, 0);
    float *params = malloc(m.n_params * sizeof *params);
    model_init_params(&m, params, 7);
    uint32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (uint32_t)(i * 37 + 5);
    float *x = malloc((size_t)N * 784 * sizeof *x);
    uint8_t y[N];
    dataset_gather(&tr, ids, N, x, y);
    net_dropout drop = {.seed = 3, .epoch = 1, .ids = ids};
    float *grads[3], loss[3][N];
    assert_true(n <= 3 && algos[0] == CONV_ALGO_DIRECT);
    for (int k = 0; k < n; k++) {
        m.setup.conv_algo = algos[k];
        net_ws ws;
        if (net_ws_init(&ws, &m, N, 2, &e) < 0) fail_msg("%s", e.msg);
        if (k) // the convolutions after the first run Winograd in every direction
            for (int l = 1; l < m.n_layers; l++)
                if (m.layers[l].kind == LAYER_CONV2D)
                    assert_true(ws.plan[l].algo.fwd != CONV_DIRECT &&
                                ws.plan[l].algo.din != CONV_DIRECT &&
                                ws.plan[l].algo.dw != CONV_DIRECT);
        if (k) // the first in both of its directions
            assert_true(ws.plan[0].algo.fwd != CONV_DIRECT && ws.plan[0].algo.dw != CONV_DIRECT);
        grads[k] = calloc(m.n_params, sizeof(float));
        net_forward(&ws, &m, params, x, y, N, &drop);
        memcpy(loss[k], ws.loss, sizeof loss[k]);
        net_backward(&ws, &m, params, grads[k], x, y, N, &drop);
        net_ws_free(&ws);
    }
    for (int k = 1; k < n; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s: %s vs direct step", preset, conv_algo_names[algos[k]]);
        assert_true(check_step_grad(&m, grads[k], grads[0], what));
        for (int i = 0; i < N; i++)
            if (!(fabsf(loss[k][i] - loss[0][i]) <= TOL_RUN_LOSS * fabsf(loss[0][i])))
                fail_msg("%s: sample %d's loss %.9g vs %.9g", what, i, (double)loss[k][i],
                         (double)loss[0][i]);
        free(grads[k]);
    }
    free(grads[0]);
    free(x);
    free(params);
    dataset_free(&tr);
    model_free(&m);
}

// The 3-layer network: F(4x4,3x3) (winograd) and F(2x2,3x3) (winograd2).
static void test_step_winograd_vs_direct(void **state) {
    (void)state;
    const conv_algo algos[] = {CONV_ALGO_DIRECT, CONV_ALGO_WINOGRAD, CONV_ALGO_WINOGRAD2};
    step_vs_direct("cnn3", algos, 3);
}

// The 2-layer network's 5x5 convolutions: F(4x4,5x5) (winograd) and F(2x2,5x5) (winograd2).
static void test_step_winograd_5x5_vs_direct(void **state) {
    (void)state;
    const conv_algo algos[] = {CONV_ALGO_DIRECT, CONV_ALGO_WINOGRAD, CONV_ALGO_WINOGRAD2};
    step_vs_direct("cnn2", algos, 3);
}

// Winograd's tiles assume the last rows and columns are padded as the first: a 3x3 or 5x5
// stride-1 geometry with another after-pad (one row or column fewer or more than the
// before-pad) runs direct in every direction; the symmetric ones ("same", valid, explicit
// pads) may run Winograd. (Keras "same" on odd kernels at stride 1 is always symmetric.)
static void test_wino_ok_padding(void **state) {
    (void)state;
    static const conv_dir dirs[] = {CONV_DIR_FWD, CONV_DIR_DIN, CONV_DIR_DW};
    for (int K = 3; K <= 5; K += 2)
        for (int pad = 0; pad <= K - 1; pad++)
            for (int d = 0; d < 3; d++) {
                conv_geom g = {.C = 4, .Cs = 16, .H = 9, .W = 8, .OC = 16, .K = K, .stride = 1,
                               .pad = pad};
                g.OH = conv_out_dim(g.H, K, 1, pad);
                g.OW = conv_out_dim(g.W, K, 1, pad);
                assert_true(conv2d_wino_ok(&g, dirs[d]));
                g.OH++; // one more row of padding at the bottom
                assert_false(conv2d_wino_ok(&g, dirs[d]));
                g.OH--, g.OW--; // one column fewer on the right
                assert_false(conv2d_wino_ok(&g, dirs[d]));
            }
    assert_int_equal(same_pad_before(7, 3, 1), 1);
    assert_int_equal(same_out_dim(7, 1), 7);
}

// The weight transforms run several channels side by side (one to a vector lane, the tail
// lanes idle): each filter's transform is the bits it has alone (one input and one output
// channel), whatever its neighbours, for channel counts that are no multiple of the lanes, in
// both directions and for every F(m, r) the CPU runs.
static void test_transforms_channel_bits(void **state) {
    (void)state;
    const int C = 11, OC = 13, ms[4][2] = {{2, 3}, {4, 3}, {2, 5}, {4, 5}};
    for (int k = 0; k < 4; k++) {
        const int m = ms[k][0], r = ms[k][1], a = wino_alpha(m, r), rr = r * r, aa = a * a;
        float *w = malloc(sizeof(float) * (size_t)OC * C * rr);
        float *U = malloc(sizeof(float) * (size_t)aa * OC * 16), one[64];
        double *dU = malloc(sizeof(double) * 2 * (size_t)aa * C * 16), dU1[2 * 64];
        float *dw = calloc((size_t)OC * C * rr, sizeof(float)), dw1[25];
        const uint64_t key = ht_rng_key(40, (uint32_t)k, 0);
        for (int i = 0; i < OC * C * rr; i++) w[i] = ht_rng_uniform(key, 0, (uint32_t)i) * 2 - 1;
        for (int i = 0; i < 2 * aa * C * 16; i++) dU[i] = ht_rng_uniform(key, 1, (uint32_t)i) * 2 - 1;
        for (int flip = 0; flip < 2; flip++) {
            const int n_in = flip ? OC : C;
            wino_weights(U, 16, w, C, OC, m, r, flip);
            for (int oc = 0; oc < OC; oc++)
                for (int c = 0; c < C; c++) {
                    wino_weights(one, 1, w + ((size_t)oc * C + c) * rr, 1, 1, m, r, flip);
                    const int row = flip ? oc : c, col = flip ? c : oc;
                    for (int xi = 0; xi < aa; xi++)
                        assert_memory_equal(&U[((size_t)xi * n_in + row) * 16 + col], &one[xi],
                                            sizeof(float));
                }
        }
        // Two buffers of [xi][c][16] doubles, summed.
        const size_t stride = (size_t)aa * C * 16;
        wino_dw_finish(dw, dU, stride, 2, 16, C, OC, m, r);
        for (int oc = 0; oc < OC; oc++)
            for (int c = 0; c < C; c++) {
                for (int b = 0; b < 2; b++)
                    for (int xi = 0; xi < aa; xi++)
                        dU1[b * aa + xi] = dU[b * stride + (size_t)xi * C * 16 + (size_t)c * 16 + oc];
                memset(dw1, 0, sizeof dw1);
                wino_dw_finish(dw1, dU1, (size_t)aa, 2, 1, 1, 1, m, r);
                assert_memory_equal(&dw[((size_t)oc * C + c) * rr], dw1, sizeof(float) * (size_t)rr);
            }
        free(w);
        free(U);
        free(dU);
        free(dw);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_direct),
        cmocka_unit_test(test_error_winograd2),
        cmocka_unit_test(test_error_winograd4),
        cmocka_unit_test(test_error_winograd25),
        cmocka_unit_test(test_error_winograd45),
        cmocka_unit_test(test_wrong_transform_exceeds),
        cmocka_unit_test(test_zero_fields_exact),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_wino_ok_padding),
        cmocka_unit_test(test_transforms_channel_bits),
        cmocka_unit_test(test_step_winograd_vs_direct),
        cmocka_unit_test(test_step_winograd_5x5_vs_direct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
