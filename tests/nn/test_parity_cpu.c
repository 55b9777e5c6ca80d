// Layer parity of the native CPU path: layers.h's channels-last ops, NCHW <-> NHWC by ref.c,
// against the reference over parity.c's table of cases, directly and by Winograd.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/layers.h"
#include "tests/lib/parity.h"
#include "tests/lib/ref.h"

// The CPU's average pooling sums and divides as the reference does (IEEE division): bit for bit.
static const tolset cpu_tols = {.conv = TOL_NHWC, .conv_floor_k = FLOOR_NHWC, .pool = TOL_BITS,
                                .avg = TOL_BITS, .exact = TOL_BITS, .act = TOL_ACT};
static const tolset cpu_wino2_tols = {.conv = TOL_WINO2, .conv_floor_k = FLOOR_NHWC};
static const tolset cpu_wino4_tols = {.conv = TOL_WINO4, .conv_floor_k = FLOOR_NHWC};
static const tolset cpu_wino25_tols = {.conv = TOL_WINO25, .conv_floor_k = FLOOR_NHWC};
static const tolset cpu_wino45_tols = {.conv = TOL_WINO45, .conv_floor_k = FLOOR_NHWC};

// ---- the native CPU backend: layers.h's channels-last ops, NCHW <-> NHWC by ref.c ----

// Every pad channel (c >= C) of a (rows, Cs) tensor is exactly zero.
static int pad_channels_zero(const float *x, size_t rows, int C, int Cs) {
    for (size_t r = 0; r < rows; r++)
        for (int c = C; c < Cs; c++)
            if (x[r * Cs + c] != 0.0f) return 0;
    return 1;
}

// The input's pad channels hold NaN, which must never reach a result; the outputs' pad
// channels must be zero.
// The backend's ctx, when not NULL, is a wino_ask: the conv_impl every direction of a K x K
// convolution asks for (Winograd where conv2d_wino_impl_ok allows it, direct elsewhere).
typedef struct wino_ask {
    conv_impl impl;
    int K;
} wino_ask;

static void cpu_conv(backend *b, conv_io *io) {
    const conv_shape *s = io->s;
    const int OCs = conv_cpad(s->OC);
    const wino_ask *ask = b->ctx;
    const conv_impl impl = ask && ask->K == s->K ? ask->impl : CONV_DIRECT;
    const conv_geom g = {.C = s->C, .Cs = s->Cs, .H = s->H, .W = s->W, .OC = s->OC, .K = s->K,
                         .stride = s->stride, .pad = io->pad, .OH = io->OH, .OW = io->OW,
                         .fwd = impl, .din = impl, .dw = impl};
    const size_t in_rows = (size_t)s->B * s->H * s->W, out_rows = (size_t)s->B * io->OH * io->OW;
    float *xin = nan_buf(in_rows * s->Cs), *xout = nan_buf(out_rows * OCs);
    float *xR = nan_buf(out_rows * OCs), *xdin = nan_buf(in_rows * s->Cs);
    // Exactly the advertised size, so ASan catches any write past it.
    float *ws = malloc(conv2d_nhwc_ws_floats(&g, CPU_THREADS) * sizeof *ws);
    ref_to_nhwc(xin, io->in, s->B, s->C, s->Cs, s->H * s->W, NAN);
    ref_to_nhwc(xR, io->dout, s->B, s->OC, OCs, io->OH * io->OW, NAN);
    const int nb = io->b_off != LAYER_NO_PARAM;
    const float *w = io->params + io->w_off, *bias = nb ? io->params + io->b_off : NULL;
    const float *relu_out = io->relu ? xout : NULL;
    conv2d_nhwc_forward(xout, xin, w, bias, s->B, &g, io->relu, ws, CPU_THREADS);
    memcpy(io->g1, io->grads0, io->np * sizeof *io->g1);
    conv2d_nhwc_backward(xdin, io->g1 + io->w_off, nb ? io->g1 + io->b_off : NULL, xR, relu_out,
                         xin, w, s->B, &g, ws, CPU_THREADS);
    memcpy(io->g2, io->g1, io->np * sizeof *io->g2);
    conv2d_nhwc_backward(NULL, io->g2 + io->w_off, nb ? io->g2 + io->b_off : NULL, xR, relu_out,
                         xin, w, s->B, &g, ws, CPU_THREADS);
    if (!pad_channels_zero(xout, out_rows, s->OC, OCs))
        failed(b, "conv OC%d: forward output's pad channels are not zero", s->OC);
    if (!pad_channels_zero(xdin, in_rows, s->C, s->Cs))
        failed(b, "conv C%d Cs%d: input gradient's pad channels are not zero", s->C, s->Cs);
    ref_to_nchw(io->out, xout, s->B, s->OC, OCs, io->OH * io->OW);
    ref_to_nchw(io->din, xdin, s->B, s->C, s->Cs, s->H * s->W);
    free(xin), free(xout), free(xR), free(xdin), free(ws);
}

// Pooling on NHWC tensors whose channel stride is the channel count rounded up to whole
// vectors, the pad channels holding NaN on the way in (pooled per channel, they must stay in
// their channel).
static void cpu_pool(backend *b, pool_io *io, op_kind kind) {
    const pool_shape *s = io->s;
    const int C = s->C, Cs = conv_cpad(C), HW = s->H * s->W, OHW = io->OH * io->OW;
    float *xin = nan_buf((size_t)s->B * HW * Cs), *xg = nan_buf((size_t)s->B * OHW * Cs);
    float *xout = nan_buf((size_t)s->B * OHW * Cs), *xdin = nan_buf((size_t)s->B * HW * Cs);
    ref_to_nhwc(xin, io->in, s->B, C, Cs, HW, NAN);
    ref_to_nhwc(xg, io->dout, s->B, C, Cs, OHW, NAN);
    const pool_geom g = {.Cs = Cs, .H = s->H, .W = s->W, .K = s->K, .stride = s->stride,
                         .pad = io->pad, .OH = io->OH, .OW = io->OW};
    if (kind == OP_MAXPOOL) {
        maxpool_nhwc_forward(xout, xin, s->B, &g, CPU_THREADS);
        maxpool_nhwc_backward(xdin, xg, xin, s->B, &g, CPU_THREADS);
    } else if (kind == OP_AVGPOOL) {
        avgpool_nhwc_forward(xout, xin, s->B, &g, CPU_THREADS);
        avgpool_nhwc_backward(xdin, xg, s->B, &g, CPU_THREADS);
    } else {
        for (int i = 0; i < s->B; i++) {
            gavgpool_nhwc_forward_one(xout + (size_t)i * Cs, xin + (size_t)i * HW * Cs, Cs, HW);
            gavgpool_nhwc_backward_one(xdin + (size_t)i * HW * Cs, xg + (size_t)i * Cs, Cs, HW);
        }
    }
    (void)b;
    ref_to_nchw(io->out, xout, s->B, C, Cs, OHW);
    ref_to_nchw(io->din, xdin, s->B, C, Cs, HW);
    free(xin), free(xg), free(xout), free(xdin);
}
static void cpu_maxpool(backend *b, pool_io *io) { cpu_pool(b, io, OP_MAXPOOL); }
static void cpu_avgpool(backend *b, pool_io *io) { cpu_pool(b, io, OP_AVGPOOL); }
static void cpu_gavgpool(backend *b, pool_io *io) { cpu_pool(b, io, OP_GAVGPOOL); }

// dropout_nhwc_apply masks element (c, p) as dropout_forward masks NCHW element c*HW + p, and
// zeroes pad channels (given nonzero here).
static void cpu_dropout(backend *b, dropout_io *io) {
    const dropout_shape *s = io->s;
    const size_t nx = (size_t)s->B * s->HW * s->Cs, rows = (size_t)s->B * s->HW;
    float *x = nan_buf(nx), *y = nan_buf(nx);
    ref_to_nhwc(x, io->in, s->B, s->C, s->Cs, s->HW, 1.0f);
    dropout_nhwc_apply(y, x, s->B, s->C, s->Cs, s->HW, s->rate, io->key, s->ids, CPU_THREADS);
    if (!pad_channels_zero(y, rows, s->C, s->Cs)) failed(b, "dropout: pad channels not zeroed");
    ref_to_nchw(io->out, y, s->B, s->C, s->Cs, s->HW);
    ref_to_nhwc(x, io->dout, s->B, s->C, s->Cs, s->HW, 1.0f);
    dropout_nhwc_apply(x, x, s->B, s->C, s->Cs, s->HW, s->rate, io->key, s->ids, CPU_THREADS);
    if (!pad_channels_zero(x, rows, s->C, s->Cs))
        failed(b, "dropout in place: pad channels not zeroed");
    ref_to_nchw(io->din, x, s->B, s->C, s->Cs, s->HW);
    free(x), free(y);
}

// The act family on channels-last rows (input pad channels NaN, output pad channels zero), and
// flat in place as the batch-wise path runs it where there are no pad channels: the same bits.
static void cpu_act(backend *b, act_io *io) {
    const act_shape *s = io->s;
    const size_t rows = (size_t)s->B * s->HW, n = (size_t)s->B * s->C * s->HW;
    float *x = nan_buf(rows * s->Cs), *y = nan_buf(rows * s->Cs), *dy = nan_buf(rows * s->Cs);
    float *dx = nan_buf(rows * s->Cs), *flat = nan_buf(n);
    ref_to_nhwc(x, io->in, s->B, s->C, s->Cs, s->HW, NAN);
    ref_to_nhwc(dy, io->dout, s->B, s->C, s->Cs, s->HW, NAN);
    act_nhwc_forward((act_fn)io->f, io->alpha, y, x, rows, s->C, s->Cs, CPU_THREADS);
    act_nhwc_backward((act_fn)io->f, io->alpha, dx, dy, x, rows, s->C, s->Cs, CPU_THREADS);
    if (!pad_channels_zero(y, rows, s->C, s->Cs) || !pad_channels_zero(dx, rows, s->C, s->Cs))
        failed(b, "act %d: pad channels not zeroed", io->f);
    ref_to_nchw(io->out, y, s->B, s->C, s->Cs, s->HW);
    ref_to_nchw(io->din, dx, s->B, s->C, s->Cs, s->HW);
    memcpy(flat, io->in, n * sizeof *flat);
    act_forward((act_fn)io->f, io->alpha, flat, flat, n, CPU_THREADS);
    expect(b, flat, io->out, n, TOL_BITS, 1.0f, "act %d flat in place forward", io->f);
    memcpy(flat, io->dout, n * sizeof *flat);
    act_backward((act_fn)io->f, io->alpha, flat, flat, io->in, n, CPU_THREADS);
    expect(b, flat, io->din, n, TOL_BITS, 1.0f, "act %d flat in place backward", io->f);
    free(x), free(y), free(dy), free(dx), free(flat);
}

static void test_parity_cpu(void **state) {
    (void)state;
    backend b = {.name = "cpu (layers.h, channels-last)", .tol = &cpu_tols, .conv_relu = 1,
                 .conv = cpu_conv, .maxpool = cpu_maxpool, .avgpool = cpu_avgpool,
                 .gavgpool = cpu_gavgpool, .dropout = cpu_dropout, .act = cpu_act};
    parity_run_cases(&b);
    printf("%s: %d op checks failed\n", b.name, b.fails);
    assert_int_equal(b.fails, 0);
}

// The same ops with every 3x3 stride-1 convolution by Winograd, F(2x2,3x3) and F(4x4,3x3),
// and every 5x5 one by F(2x2,5x5) and F(4x4,5x5).
static void test_parity_cpu_winograd(void **state) {
    (void)state;
    static const wino_ask asks[] = {{CONV_WINO2, 3}, {CONV_WINO4, 3}, {CONV_WINO2, 5},
                                    {CONV_WINO4, 5}};
    static const tolset *const tols[] = {&cpu_wino2_tols, &cpu_wino4_tols, &cpu_wino25_tols,
                                         &cpu_wino45_tols};
    static const char *const names[] = {"cpu winograd F(2x2,3x3)", "cpu winograd F(4x4,3x3)",
                                        "cpu winograd F(2x2,5x5)", "cpu winograd F(4x4,5x5)"};
    int fails = 0;
    for (int i = 0; i < 4; i++) {
        backend b = {.name = names[i], .tol = tols[i], .ctx = (void *)&asks[i], .conv_relu = 1,
                     .conv = cpu_conv};
        parity_run_cases(&b);
        printf("%s: %d op checks failed\n", b.name, b.fails);
        fails += b.fails;
    }
    assert_int_equal(fails, 0);
}


int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_cpu),
        cmocka_unit_test(test_parity_cpu_winograd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
