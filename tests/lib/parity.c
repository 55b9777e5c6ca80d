// Layer parity's cases and their comparisons (parity.h).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/lib/parity.h"

#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "tests/lib/ref.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

static const layer_case cases[] = {
    //   B   C  Cs   H   W  OC  K  s  p
    CONV(3, 1, 1, 8, 8, 4, 3, 1, 1),       // first layer: C = 1, same padding
    CONV(2, 3, 16, 9, 7, 5, 5, 2, 2),      // K 5, stride 2, pad 2, H != W
    CONV(2, 2, 16, 10, 11, 3, 3, 2, 0),    // stride 2, no padding
    CONV(2, 4, 16, 6, 5, 6, 3, 1, 2),      // pad wider than needed for "same"
    CONV(3, 2, 16, 7, 7, 4, 5, 1, 0),      // K 5, no padding
    CONV(2, 3, 16, 5, 6, 2, 1, 1, 0),      // K 1
    CONV(4, 32, 32, 14, 14, 48, 3, 1, 1),  // a real layer's size: CLBlast's large-matrix path
    CONV(2, 1, 1, 28, 28, 32, 3, 1, 1),    // cnn3 conv1
    CONV(2, 32, 32, 28, 28, 48, 3, 1, 1),  // cnn3 conv2
    CONV(3, 48, 48, 14, 14, 32, 3, 1, 1),  // cnn3 conv3
    CONV(2, 1, 1, 28, 28, 32, 5, 1, 2),    // cnn2 conv1
    CONV(2, 32, 32, 14, 14, 64, 5, 1, 2),  // cnn2 conv2: two pairs of channel vectors
    CONV(2, 3, 16, 9, 30, 16, 3, 1, 1),    // one channel vector, 30 wide: two blocks of 15
    CONV(2, 5, 16, 6, 7, 80, 3, 1, 1),     // five channel vectors: a pair and a triple
    CONV(2, 4, 16, 7, 7, 20, 3, 1, 1),     // 20 output channels: 12 pad channels
    CONV(2, 20, 20, 5, 6, 7, 3, 1, 1),     // Cs not a multiple of 16: input gradient scattered
    CONV(2, 3, 16, 7, 8, 2, 3, 2, 0),      // stride 2: scattered, a leftover column
    CONV(3, 2, 16, 5, 6, 4, 2, 2, 1),      // stride 2 with padding, even K
    CONV(2, 2, 16, 4, 5, 3, 3, 3, 2),      // stride 3 with pad 2
    CONV(2, 3, 16, 5, 5, 4, 3, 1, 3),      // pad > K-1: outputs that see only padding
    CONV(3, 4, 16, 5, 5, 5, 1, 1, 0),      // 1x1
    CONV(2, 2, 16, 4, 1, 3, 3, 1, 1),      // W=1
    CONV(2, 2, 16, 4, 1, 3, 3, 3, 2),      // W=1: kernel columns 0 and 1 only ever see padding
    // Keras "same" padding (p -1) for any stride and K: before total/2, the rest after.
    CONV(2, 3, 3, 32, 32, 16, 3, 2, -1),   // 3x32x32 RGB input, stride 2: pad 0 before, 1 after
    CONV(2, 3, 16, 9, 9, 8, 3, 2, -1),     // stride 2, odd size: pad 1 and 1
    CONV(2, 4, 16, 8, 8, 5, 4, 1, -1),     // even K stride 1: pad 1 before, 2 after
    CONV(2, 4, 16, 8, 8, 5, 4, 1, -1, 1),  // ... without a bias
    CONV(2, 5, 16, 10, 10, 6, 5, 3, -1),   // stride 3: pad 1 before, 2 after
    CONV(2, 16, 16, 7, 7, 16, 3, 1, -1, 1), // 3x3 same stride 1 (Winograd's shape), no bias
    CONV(2, 3, 16, 6, 7, 4, 3, 2, 1, 1),   // explicit pad, stride 2, no bias
    //   B   C   H   W  K  s
    POOL(3, 2, 8, 8, 2, 2),
    POOL(2, 3, 7, 9, 2, 2),    // odd sizes: the last row/column is dropped
    POOL(2, 2, 9, 9, 3, 2),    // overlapping windows
    POOL(1, 3, 8, 10, 3, 2),   // overlapping, a partial last window dropped
    POOL(2, 48, 28, 28, 2, 2), // cnn3 pool1: three full channel vectors
    POOL(2, 20, 7, 7, 2, 2),   // a full vector and 4 leftovers; an odd edge row/column
    POOL(3, 5, 6, 7, 3, 2),    // leftovers only, overlapping windows
    POOL(2, 32, 9, 9, 3, 2),   // overlapping windows on full vectors
    POOL(1, 16, 5, 5, 3, 1),   // stride 1: every input in up to 9 windows
    POOL(2, 3, 7, 7, 2, 2, 1), // "same": the last row/column's windows clipped (pad 0 + 1)
    POOL(2, 20, 8, 8, 3, 2, 1), // "same" overlapping, pad 0 before, 1 after; leftover channels
    POOL(2, 16, 7, 9, 3, 1, 1), // "same" stride 1: pad 1 at both ends
    POOL(2, 3, 9, 9, 2, 3, 0), // stride 3 > K: inputs in no window
    POOL(2, 3, 9, 9, 3, 2, 1), // "same" with stride != K, pad 1 and 1
    //    B   C   H   W  K  s  same
    APOOL(3, 2, 8, 8, 2, 2),
    APOOL(2, 3, 7, 9, 2, 2),    // odd sizes: the last row/column is dropped
    APOOL(2, 20, 9, 9, 3, 2),   // overlapping windows, leftover channels
    APOOL(2, 3, 7, 7, 2, 2, 1), // "same": clipped windows average fewer inputs
    APOOL(2, 16, 8, 8, 3, 2, 1), // "same" overlapping, pad 0 before, 1 after
    APOOL(1, 5, 7, 9, 3, 1, 1), // "same" stride 1: pad 1 at both ends
    APOOL(2, 3, 9, 9, 2, 3),    // stride 3 > K: inputs in no window
    GPOOL(3, 3, 32, 32),        // RGB-sized plane
    GPOOL(2, 20, 5, 7),         // leftover channels, H != W
    GPOOL(2, 16, 1, 1),         // a 1x1 plane: the identity
    DENSE(5, 37, 13),
    DENSE(64, 300, 128),
    DENSE(1, 10, 1),
    DENSE(5, 37, 13, 1), // no bias
    {.op = OP_RELU},
    // Global sample ids, some above 2^31 (unsigned all the way through); 777 = 21 x 37.
    {.op = OP_DROPOUT,
     .drop = {6, 21, 37, 32, 0.25f, {0, 1, 4242, 59999, 0x80000001u, 0xFFFFFFF0u}}},
    {.op = OP_DROPOUT,
     .drop = {6, 21, 37, 32, 0.5f, {0, 1, 4242, 59999, 0x80000001u, 0xFFFFFFF0u}}},
    {.op = OP_DROPOUT, .drop = {3, 20, 12, 32, 0.4f, {5, 77, 2}}}, // a pad vector of 12
    {.op = OP_SOFTMAX},
    //                   B   C  HW  Cs
    {.op = OP_ACT, .act = {3, 20, 37, 32}}, // 12 pad channels on the CPU
    {.op = OP_ACT, .act = {2, 16, 25, 16}},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

// ---- helpers ----

void *anew(arena *a, size_t bytes) {
    assert_true(a->n < (int)(sizeof a->p / sizeof a->p[0]));
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    a->p[a->n++] = p;
    return p;
}

void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) free(a->p[i]);
    a->n = 0;
}

float *uniform(arena *a, size_t n, float lo, float hi, uint64_t seed) {
    float *p = anew(a, n * sizeof *p);
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * ht_rng_double(&r));
    return p;
}

float *nans(arena *a, size_t n) {
    float *p = anew(a, n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

float *nan_buf(size_t n) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static float *copy(arena *a, const float *x, size_t n) {
    float *p = anew(a, n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static float floor_k(float k, double products) { return k * (float)sqrt(products); }

static void vfail(backend *b, const char *fmt, va_list ap) {
    fprintf(stderr, "%s: ", b->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    b->fails++;
}

void failed(backend *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(b, fmt, ap);
    va_end(ap);
}

void expect(backend *b, const float *got, const float *ref, size_t n, float tol,
                   float floor, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(name, sizeof name, "%s: ", b->name);
    if (k < 0 || k >= (int)sizeof name) k = 0;
    vsnprintf(name + k, sizeof name - (size_t)k, fmt, ap);
    va_end(ap);
    if (tol != TOL_BITS) {
        if (!check_tensor(got, ref, n, tol, floor, name)) b->fails++;
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], sizeof *got)) {
            fprintf(stderr, "%s: not bit for bit: first at [%zu]: %.9g vs %.9g\n", name, i,
                    (double)got[i], (double)ref[i]);
            b->fails++;
            return;
        }
}

static void expect_int(backend *b, const int32_t *got, const int32_t *ref, size_t n,
                       const char *what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != ref[i] && bad++ == 0) first = i;
    if (bad)
        failed(b, "%s: %zu of %zu differ, first [%zu]: %d vs %d", what, bad, n, first, got[first],
               ref[first]);
}

// A case whose reference is all zeros (or has no variety) could not fail; guard against that.
static void nontrivial(backend *b, const float *ref, size_t n, const char *what) {
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += ref[i] != 0.0f;
    if (nz == 0) failed(b, "%s: reference is all zero; the case tests nothing", what);
}

// ---- running a case: inputs, the reference, the backend, the comparisons ----

// A window's before-pad and output size along one axis: as given, or Keras "same" (pad < 0).
static int out_dim(int in, int K, int stride, int pad) {
    return pad < 0 ? same_out_dim(in, stride) : conv_out_dim(in, K, stride, pad);
}
static int pad_of(int H, int W, int K, int stride, int pad) {
    if (pad >= 0) return pad;
    assert_int_equal(same_pad_before(H, K, stride), same_pad_before(W, K, stride));
    return same_pad_before(H, K, stride);
}

static void run_conv(backend *b, const conv_shape *s, int relu, uint64_t seed) {
    arena a = {0};
    const int B = s->B, C = s->C, H = s->H, W = s->W, OC = s->OC, K = s->K;
    const int pad = pad_of(H, W, K, s->stride, s->pad);
    const int OH = out_dim(H, K, s->stride, s->pad), OW = out_dim(W, K, s->stride, s->pad);
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * OC * OH * OW;
    const size_t nb = s->nb ? 0 : (size_t)OC; // bias floats
    const size_t nw = (size_t)OC * C * K * K, np = PARAM_LEAD + nw + nb;
    const size_t w_off = PARAM_LEAD, b_off = nb ? PARAM_LEAD + nw : LAYER_NO_PARAM;
    char tag[128];
    snprintf(tag, sizeof tag, "conv B%d C%d(Cs%d) %dx%d OC%d K%d s%d p%d%s%s%s", B, C, s->Cs, H,
             W, OC, K, s->stride, pad, s->pad < 0 ? " (same)" : "", nb ? "" : " no bias",
             relu ? " + relu" : "");
    float *in = uniform(&a, nin, -1, 1, seed), *params = uniform(&a, np, -0.5f, 0.5f, seed + 1);
    float *dout = uniform(&a, nout, -1, 1, seed + 2), *grads0 = uniform(&a, np, -1, 1, seed + 3);
    const float *bias = nb ? params + b_off : NULL;

    // Reference: forward (and relu), backward with din, then again without (accumulating
    // twice). With relu, dout is the relu output's gradient: the conv sees it where out > 0.
    float *ws = anew(&a, ref_conv2d_ws_floats(C, K, OC, OH, OW, 1) * sizeof(float));
    float *out_ref = anew(&a, nout * sizeof(float)), *din_ref = anew(&a, nin * sizeof(float));
    float *gr = anew(&a, nout * sizeof(float)), *ref2 = copy(&a, grads0, np);
    ref_conv2d_forward(out_ref, in, params + w_off, bias, B, C, H, W, OC, K, s->stride, pad, OH,
                       OW, ws, 1);
    for (size_t i = 0; i < nout; i++) {
        if (relu) out_ref[i] = out_ref[i] > 0.0f ? out_ref[i] : 0.0f;
        gr[i] = !relu || out_ref[i] > 0.0f ? dout[i] : 0.0f;
    }
    ref_conv2d_backward(din_ref, ref2 + w_off, nb ? ref2 + b_off : NULL, gr, in, params + w_off,
                        B, C, H, W, OC, K, s->stride, pad, OH, OW, ws, 1);
    float *ref1 = copy(&a, ref2, np);
    ref_conv2d_backward(NULL, ref2 + w_off, nb ? ref2 + b_off : NULL, gr, in, params + w_off, B,
                        C, H, W, OC, K, s->stride, pad, OH, OW, ws, 1);
    nontrivial(b, out_ref, nout, tag);
    nontrivial(b, din_ref, nin, tag);

    conv_io io = {.s = s, .pad = pad, .OH = OH, .OW = OW, .relu = relu, .in = in,
                  .params = params, .dout = dout, .grads0 = grads0, .np = np, .w_off = w_off,
                  .b_off = b_off, .out = nans(&a, nout), .din = nans(&a, nin),
                  .g1 = nans(&a, np), .g2 = nans(&a, np)};
    b->conv(b, &io);

    // Products summed per element: out C*K*K, din at most OC*K*K, dW and db B*OH*OW per pass.
    const tolset *t = b->tol;
    const float fl_grad1 = floor_k(t->conv_floor_k, (double)B * OH * OW);
    const float fl_grad2 = floor_k(t->conv_floor_k, 2.0 * B * OH * OW);
    expect(b, io.out, out_ref, nout, t->conv, floor_k(t->conv_floor_k, (double)C * K * K),
           "%s forward out", tag);
    expect(b, io.din, din_ref, nin, t->conv, floor_k(t->conv_floor_k, (double)OC * K * K),
           "%s backward din", tag);
    expect(b, io.g1 + w_off, ref1 + w_off, nw, t->conv, fl_grad1, "%s backward dW", tag);
    if (nb)
        expect(b, io.g1 + b_off, ref1 + b_off, nb, t->conv, fl_grad1, "%s backward db", tag);
    expect(b, io.g1, grads0, PARAM_LEAD, t->exact, 1.0f, "%s backward: grads before w_off", tag);
    expect(b, io.g2 + w_off, ref2 + w_off, nw, t->conv, fl_grad2,
           "%s second backward (din NULL) dW", tag);
    if (nb)
        expect(b, io.g2 + b_off, ref2 + b_off, nb, t->conv, fl_grad2,
               "%s second backward (din NULL) db", tag);
    arena_free(&a);
}

// Max (kind OP_MAXPOOL), average (OP_AVGPOOL) or global average pooling (OP_GAVGPOOL).
static void run_pool(backend *b, op_kind kind, const pool_shape *s, uint64_t seed) {
    arena a = {0};
    const int B = s->B, C = s->C, H = s->H, W = s->W, K = s->K;
    const int glob = kind == OP_GAVGPOOL, same = s->same ? -1 : 0;
    const int pad = glob ? 0 : pad_of(H, W, K, s->stride, same);
    const int OH = glob ? 1 : out_dim(H, K, s->stride, same);
    const int OW = glob ? 1 : out_dim(W, K, s->stride, same);
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * C * OH * OW;
    char tag[96];
    snprintf(tag, sizeof tag, "%s B%d C%d %dx%d K%d s%d%s",
             kind == OP_MAXPOOL ? "maxpool" : glob ? "global avgpool" : "avgpool", B, C, H, W,
             K, s->stride, s->same ? " same" : "");
    // Max pooling: values on a coarse grid, so windows often hold ties (the first maximum must
    // win), all negative, so padding taken for an input would win ("same").
    float *in = uniform(&a, nin, 0, 5, seed);
    for (size_t i = 0; i < nin; i++)
        in[i] = kind == OP_MAXPOOL ? floorf(in[i]) * 0.5f - 3.0f : in[i] * 0.4f - 1.0f;
    float *dout = uniform(&a, nout, -1, 1, seed + 1);

    float *out_ref = anew(&a, nout * sizeof(float)), *din_ref = anew(&a, nin * sizeof(float));
    int32_t *am_ref = anew(&a, nout * sizeof(int32_t));
    if (kind == OP_MAXPOOL) {
        ref_maxpool_forward(out_ref, am_ref, in, B, C, H, W, K, s->stride, pad, OH, OW, 1);
        ref_maxpool_backward(din_ref, dout, am_ref, B, C, H, W, OH, OW, 1);
    } else if (glob) {
        ref_gavgpool_forward(out_ref, in, B, C, H * W);
        ref_gavgpool_backward(din_ref, dout, B, C, H * W);
    } else {
        ref_avgpool_forward(out_ref, in, B, C, H, W, K, s->stride, pad, OH, OW);
        ref_avgpool_backward(din_ref, dout, B, C, H, W, K, s->stride, pad, OH, OW);
    }
    nontrivial(b, din_ref, nin, tag);

    pool_io io = {.s = s, .pad = pad, .OH = OH, .OW = OW, .in = in, .dout = dout,
                  .out = nans(&a, nout), .din = nans(&a, nin),
                  .argmax = anew(&a, nout * sizeof(int32_t))};
    for (size_t i = 0; i < nout; i++) io.argmax[i] = -7;
    if (kind == OP_MAXPOOL) b->maxpool(b, &io);
    else if (glob) b->gavgpool(b, &io);
    else b->avgpool(b, &io);

    const float tol = kind == OP_MAXPOOL ? b->tol->pool : b->tol->avg;
    expect(b, io.out, out_ref, nout, tol, 1.0f, "%s forward out", tag);
    if (kind == OP_MAXPOOL && b->has_argmax) {
        char what[128];
        snprintf(what, sizeof what, "%s forward argmax", tag);
        expect_int(b, io.argmax, am_ref, nout, what);
    }
    expect(b, io.din, din_ref, nin, tol, 1.0f, "%s backward din", tag);
    arena_free(&a);
}

static void run_dense(backend *b, const dense_shape *s, uint64_t seed) {
    arena a = {0};
    const int B = s->B, IN = s->IN, OUT = s->OUT;
    const size_t nin = (size_t)B * IN, nout = (size_t)B * OUT, nw = (size_t)OUT * IN;
    const size_t nb = s->nb ? 0 : (size_t)OUT;
    const size_t np = PARAM_LEAD + nw + nb, w_off = PARAM_LEAD;
    const size_t b_off = nb ? PARAM_LEAD + nw : LAYER_NO_PARAM;
    char tag[64];
    snprintf(tag, sizeof tag, "dense B%d IN%d OUT%d%s", B, IN, OUT, nb ? "" : " no bias");
    float *in = uniform(&a, nin, -1, 1, seed), *params = uniform(&a, np, -0.5f, 0.5f, seed + 1);
    float *dout = uniform(&a, nout, -1, 1, seed + 2), *grads0 = uniform(&a, np, -1, 1, seed + 3);

    float *out_ref = anew(&a, nout * sizeof(float)), *din_ref = anew(&a, nin * sizeof(float));
    float *ref2 = copy(&a, grads0, np);
    dense_forward(out_ref, in, params + w_off, nb ? params + b_off : NULL, B, IN, OUT, 1);
    dense_backward(din_ref, ref2 + w_off, nb ? ref2 + b_off : NULL, dout, in, params + w_off, B,
                   IN, OUT, 1);
    float *ref1 = copy(&a, ref2, np);
    dense_backward(NULL, ref2 + w_off, nb ? ref2 + b_off : NULL, dout, in, params + w_off, B, IN,
                   OUT, 1);

    dense_io io = {.s = s, .in = in, .params = params, .dout = dout, .grads0 = grads0, .np = np,
                   .w_off = w_off, .b_off = b_off, .out = nans(&a, nout), .din = nans(&a, nin),
                   .g1 = nans(&a, np), .g2 = nans(&a, np)};
    b->dense(b, &io);

    // Products summed per element: out IN, din OUT, dW and db B per pass.
    const tolset *t = b->tol;
    const float fl_grad1 = floor_k(t->dense_floor_k, B);
    const float fl_grad2 = floor_k(t->dense_floor_k, 2.0 * B);
    expect(b, io.out, out_ref, nout, t->dense, floor_k(t->dense_floor_k, IN), "%s forward out",
           tag);
    expect(b, io.din, din_ref, nin, t->dense, floor_k(t->dense_floor_k, OUT), "%s backward din",
           tag);
    expect(b, io.g1 + w_off, ref1 + w_off, nw, t->dense, fl_grad1, "%s backward dW", tag);
    if (nb)
        expect(b, io.g1 + b_off, ref1 + b_off, nb, t->dense, fl_grad1, "%s backward db", tag);
    expect(b, io.g1, grads0, PARAM_LEAD, t->exact, 1.0f, "%s backward: grads before w_off", tag);
    expect(b, io.g2 + w_off, ref2 + w_off, nw, t->dense, fl_grad2,
           "%s second backward (din NULL) dW", tag);
    if (nb)
        expect(b, io.g2 + b_off, ref2 + b_off, nb, t->dense, fl_grad2,
               "%s second backward (din NULL) db", tag);
    arena_free(&a);
}

static void run_relu(backend *b, uint64_t seed) {
    arena a = {0};
    const size_t n = 3001;
    float *in = uniform(&a, n, -1, 1, seed), *dout = uniform(&a, n, -1, 1, seed + 1);
    for (size_t i = 0; i < n; i += 10) in[i] = 0.0f; // the kink: relu'(0) = 0 on both sides
    float *out_ref = anew(&a, n * sizeof(float)), *din_ref = anew(&a, n * sizeof(float));
    relu_forward(out_ref, in, n, 1);
    relu_backward(din_ref, dout, out_ref, n, 1);
    nontrivial(b, din_ref, n, "relu");

    relu_io io = {.n = n, .in = in, .dout = dout, .out = nans(&a, n), .din = nans(&a, n),
                  .out_ip = nans(&a, n), .din_ip = nans(&a, n)};
    b->relu(b, &io);
    const float tol = b->tol->exact;
    expect(b, io.out, out_ref, n, tol, 1.0f, "relu forward");
    expect(b, io.din, din_ref, n, tol, 1.0f, "relu backward");
    expect(b, io.out_ip, out_ref, n, tol, 1.0f, "relu forward in place");
    expect(b, io.din_ip, din_ref, n, tol, 1.0f, "relu backward in place");
    arena_free(&a);
}

static void run_dropout(backend *b, const dropout_shape *s, uint64_t seed) {
    arena a = {0};
    const size_t N = (size_t)s->C * s->HW, n = (size_t)s->B * N;
    const uint64_t key = ht_rng_key(seed, 3, 7);
    char tag[64];
    snprintf(tag, sizeof tag, "dropout %.2f B%d N%zu", (double)s->rate, s->B, N);
    float *in = uniform(&a, n, 0.1f, 1.0f, seed); // nonzero, so zeros in the output are the mask
    float *dout = uniform(&a, n, -1, 1, seed + 1);
    float *out_ref = anew(&a, n * sizeof(float)), *din_ref = anew(&a, n * sizeof(float));
    dropout_forward(out_ref, in, s->B, N, s->rate, key, s->ids, 1);
    dropout_forward(din_ref, dout, s->B, N, s->rate, key, s->ids, 1); // backward: the same call
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) kept += out_ref[i] != 0.0f;
    if (kept == 0 || kept == n) failed(b, "%s: reference mask keeps %zu of %zu", tag, kept, n);

    dropout_io io = {.s = s, .key = key, .in = in, .dout = dout, .out = nans(&a, n),
                     .din = nans(&a, n)};
    b->dropout(b, &io);
    size_t mask_diff = 0;
    for (size_t i = 0; i < n; i++) mask_diff += (io.out[i] != 0.0f) != (out_ref[i] != 0.0f);
    if (mask_diff)
        failed(b, "%s: %zu of %zu mask elements differ from the reference's", tag, mask_diff, n);
    expect(b, io.out, out_ref, n, b->tol->exact, 1.0f, "%s forward", tag);
    expect(b, io.din, din_ref, n, b->tol->exact, 1.0f, "%s backward in place", tag);
    arena_free(&a);
}

static void run_softmax(backend *b, uint64_t seed) {
    arena a = {0};
    enum { B = 9, NC = 10 };
    const size_t n = (size_t)B * NC;
    float *logits = uniform(&a, n, -8, 8, seed);
    for (int c = 0; c < NC; c++) logits[3 * NC + c] += 1000.0f; // exp would overflow unshifted
    for (int c = 0; c < NC; c++) logits[5 * NC + c] *= 5.0f;    // probabilities down to ~1e-35
    uint8_t labels[B];
    for (int i = 0; i < B; i++) labels[i] = (uint8_t)((i * 7 + 3) % NC);
    float *probs_ref = anew(&a, n * sizeof(float)), *loss_ref = anew(&a, B * sizeof(float));
    float *dl_ref = anew(&a, n * sizeof(float)), *sentinel = anew(&a, B * sizeof(float));
    softmax_xent_forward(probs_ref, loss_ref, logits, labels, B, NC);
    softmax_xent_backward(dl_ref, probs_ref, labels, B, NC);
    for (int i = 0; i < B; i++) sentinel[i] = 12345.0f;

    softmax_io io = {.B = B, .NC = NC, .logits = logits, .probs_ref = probs_ref,
                     .labels = labels, .probs = nans(&a, n), .loss = nans(&a, B),
                     .probs_nl = nans(&a, n), .loss_nl = copy(&a, sentinel, B),
                     .dlogits = nans(&a, n)};
    b->softmax(b, &io);
    const tolset *t = b->tol;
    expect(b, io.probs, probs_ref, n, t->xent, FLOOR_PROBS, "softmax_xent forward probs");
    expect(b, io.loss, loss_ref, B, t->xent, FLOOR_LOSS, "softmax_xent forward loss");
    // Without labels: probabilities only, the loss buffer untouched.
    expect(b, io.probs_nl, probs_ref, n, t->xent, FLOOR_PROBS,
           "softmax_xent forward probs (no labels)");
    expect(b, io.loss_nl, sentinel, B, t->exact, 1.0f,
           "softmax_xent forward (no labels) leaves loss alone");
    // Backward from the reference's probabilities, so the comparison is exact.
    expect(b, io.dlogits, dl_ref, n, t->exact, 1.0f, "softmax_xent backward");
    arena_free(&a);
}

// The binary head (K = 1) and the multi-label head (K = 5): logits far into both tails (where
// 1 - p rounds to 1 and the loss must not go through log 0) and around 0, both labels.
static void run_bce_k(backend *b, int K, uint64_t seed) {
    arena a = {0};
    enum { B = 12 };
    const size_t n = (size_t)B * K, np = K == 1 ? 2 * B : n;
    float *logits = uniform(&a, n, -6, 6, seed);
    logits[0] = -90.0f, logits[1] = 90.0f, logits[2] = 0.0f, logits[3] = -17.0f;
    uint8_t *labels = anew(&a, n);
    for (size_t i = 0; i < n; i++) labels[i] = (uint8_t)((i * 5 + 1) % 3 == 0);
    float *probs_ref = anew(&a, np * sizeof(float)), *loss_ref = anew(&a, B * sizeof(float));
    float *dl_ref = anew(&a, n * sizeof(float));
    bce_forward(probs_ref, loss_ref, logits, labels, B, K);
    bce_backward(dl_ref, probs_ref, labels, B, K);
    bce_io io = {.B = B, .K = K, .logits = logits, .probs_ref = probs_ref, .labels = labels,
                 .probs = nans(&a, np), .loss = nans(&a, B), .dlogits = nans(&a, n)};
    b->bce(b, &io);
    const tolset *t = b->tol;
    const char *head = K == 1 ? "binary head" : "multi-label head";
    expect(b, io.probs, probs_ref, np, t->xent, FLOOR_PROBS, "%s forward probs", head);
    expect(b, io.loss, loss_ref, B, t->xent, FLOOR_LOSS, "%s forward loss", head);
    // 1/K is exact in float only for powers of two: a rounding of the product apart
    expect(b, io.dlogits, dl_ref, n, K == 1 ? t->exact : t->xent, 1.0f, "%s backward", head);
    arena_free(&a);
}

static void run_bce(backend *b, uint64_t seed) {
    run_bce_k(b, 1, seed);
    run_bce_k(b, 5, seed + 1);
}

// Every case of the table the backend has an op for, in both directions.
// Inputs across [-6, 6] (beyond hard_sigmoid's clamps both ways), exact zeros among them
// (leaky_relu's and elu's kink: their slope at 0 is the negative side's everywhere).
static void run_act_kind(backend *b, const act_shape *s, layer_kind k, float alpha,
                         uint64_t seed) {
    arena a = {0};
    const size_t n = (size_t)s->B * s->C * s->HW;
    const act_fn f = (act_fn)layer_act_fn(k);
    char tag[96];
    snprintf(tag, sizeof tag, "%s(%g) B%d C%d HW%d", layer_desc_of(k)->name, (double)alpha, s->B,
             s->C, s->HW);
    float *in = uniform(&a, n, -6, 6, seed), *dout = uniform(&a, n, -1, 1, seed + 1);
    for (size_t i = 0; i < n; i += 17) in[i] = 0.0f;
    float *out_ref = anew(&a, n * sizeof(float)), *din_ref = anew(&a, n * sizeof(float));
    ref_act_forward(f, alpha, out_ref, in, n);
    ref_act_backward(f, alpha, din_ref, dout, in, n);
    nontrivial(b, out_ref, n, tag);
    nontrivial(b, din_ref, n, tag);
    act_io io = {.s = s, .f = f, .alpha = alpha, .in = in, .dout = dout, .out = nans(&a, n),
                 .din = nans(&a, n)};
    b->act(b, &io);
    expect(b, io.out, out_ref, n, b->tol->act, FLOOR_ACT, "%s forward", tag);
    expect(b, io.din, din_ref, n, b->tol->act, FLOOR_ACT, "%s backward", tag);
    arena_free(&a);
}

// Every kind of the act family, with its default parameter and, where it takes one, another.
static void run_act(backend *b, const act_shape *s, uint64_t seed) {
    for (int k = 0; k < LAYER_KIND_COUNT; k++) {
        const layer_desc *d = layer_desc_of((layer_kind)k);
        if (layer_act_fn((layer_kind)k) < 0) continue;
        run_act_kind(b, s, (layer_kind)k, (float)d->param_default, seed + (uint64_t)k);
        if (!d->param_key) continue;
        // gelu: the tanh form; the others a value of their parameter unlike the default's.
        float other = k == LAYER_GELU ? 1.0f : k == LAYER_HARD_SIGMOID ? 0.2f : 0.05f;
        run_act_kind(b, s, (layer_kind)k, other, seed + 100 + (uint64_t)k);
    }
}

void parity_run_cases(backend *b) {
    for (int i = 0; i < N_CASES; i++) {
        const layer_case *c = &cases[i];
        const uint64_t seed = 100 + 10 * (uint64_t)i;
        switch (c->op) {
        case OP_CONV:
            if (!b->conv) break;
            run_conv(b, &c->conv, 0, seed);
            if (b->conv_relu) run_conv(b, &c->conv, 1, seed);
            break;
        case OP_MAXPOOL:
            if (b->maxpool) run_pool(b, c->op, &c->pool, seed);
            break;
        case OP_AVGPOOL:
            if (b->avgpool) run_pool(b, c->op, &c->pool, seed);
            break;
        case OP_GAVGPOOL:
            if (b->gavgpool) run_pool(b, c->op, &c->pool, seed);
            break;
        case OP_DENSE:
            if (b->dense) run_dense(b, &c->dense, seed);
            break;
        case OP_RELU:
            if (b->relu) run_relu(b, seed);
            break;
        case OP_DROPOUT:
            if (b->dropout) run_dropout(b, &c->drop, seed);
            break;
        case OP_SOFTMAX:
            if (b->softmax) run_softmax(b, seed);
            if (b->bce) run_bce(b, seed);
            break;
        case OP_ACT:
            if (b->act) run_act(b, &c->act, seed);
            break;
        }
    }
}

