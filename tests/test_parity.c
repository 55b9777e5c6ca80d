// Layer parity: every backend against the reference (tests/ref.h), op by op, forward and
// backward, from one table of cases. The backends: the native CPU path (layers.h's
// channels-last ops, as net.c runs them) and every OpenCL device found (devices/ocl_ops.h),
// each with its own named tolerances. Outputs start as NaN (so overwrite semantics are checked),
// gradients start nonzero (so accumulate semantics are), parameters sit at nonzero offsets of
// their flat buffer, and every backward runs twice, the second time without an input gradient
// (a first layer). Whole networks: test_net (net.c against ref_forward/ref_backward) and
// test_cl_device.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "layers.h"
#include "ocl_blas.h"
#include "ocl_ops.h"
#include "ref.h"
#include "rng.h"
#include "testutil.h"

// ---- tolerances ----

// OpenCL. Relative errors against max(|gpu|, |cpu|, floor). Conv and dense differ from the CPU
// only in summation order (CLBlast's GEMM tiles vs OpenBLAS's, the bias-gradient reductions):
// float rounding of sums of L products of magnitude <= 1. Their partial sums grow like
// sqrt(L), and so does the rounding error, while an element that cancels can be as small as it
// likes; so the floor is the typical size of such a sum, FLOOR_SUM * sqrt(L) (floor_k below).
// Worst observed on PoCL: 1.1e-5 (conv dW of the 2x32x28x28 case after two backward passes;
// 7.2e-6 in the 4x32x14x14 case), 1.9e-6 (dense db).
#define TOL_CONV 1e-4f
#define TOL_DENSE 1e-4f
#define FLOOR_SUM 0.1f
// Max pooling selects; its backward adds in the CPU's window order: bit-identical.
#define TOL_POOL 0.0f
// Average pooling sums the same inputs in the same order as the CPU and divides by the same
// count, but OpenCL's float division may be off by 2.5 ulp (OpenCL C 1.2, 7.4): relative to
// max(|gpu|, |cpu|, 1), a few 1e-7. Its inputs and outputs are of magnitude <= 1.
#define TOL_AVG 1e-6f
// relu, dropout (same mask, same float scale), softmax backward (p - 1): bit-identical.
#define TOL_EXACT 0.0f
// Softmax in float on the device (exp within a few ulps, a float sum) vs expf and a double sum
// on the CPU. Probabilities are compared relative to themselves down to tiny values; the loss
// is an absolute error of a few ulps of log(sum), hence its floor. Worst observed on PoCL:
// 2.3e-7 (probs), 1.1e-7 (loss).
#define TOL_XENT 1e-5f
#define FLOOR_PROBS 1e-30f
#define FLOOR_LOSS 1e-2f

// Native CPU. Channels-last conv vs the NCHW reference: the same sums of n products of
// magnitude <= 1 (n = C*K*K for out, OC*K*K for din, B*OH*OW per backward pass for dw and db)
// in another order, with FMA. Such a sum's partial sums are ~sqrt(n), and elements that nearly
// cancel keep the rounding of those: hence the relative tolerance above a floor of sqrt(n)
// (FLOOR_NHWC * sqrt(n)). Worst observed: 1.8e-6.
#define TOL_NHWC 1e-5f
#define FLOOR_NHWC 1.0f
// Max pooling and dropout select and scale as the reference does, and the pooling backward
// adds in the same window order: bit for bit (TOL_POOL and TOL_EXACT compare as floats, where
// -0 equals +0).
#define TOL_BITS (-1.0f)

// A backend's tolerance per op; conv and dense are relative above a floor of
// floor_k * sqrt(products summed). An op a backend does not offer has no entry.
typedef struct tolset {
    float conv, conv_floor_k;
    float dense, dense_floor_k;
    float pool, avg, exact, xent;
} tolset;

static const tolset cl_tols = {.conv = TOL_CONV, .conv_floor_k = FLOOR_SUM, .dense = TOL_DENSE,
                               .dense_floor_k = FLOOR_SUM, .pool = TOL_POOL, .avg = TOL_AVG,
                               .exact = TOL_EXACT, .xent = TOL_XENT};
// The CPU's average pooling sums and divides as the reference does (IEEE division): bit for bit.
static const tolset cpu_tols = {.conv = TOL_NHWC, .conv_floor_k = FLOOR_NHWC, .pool = TOL_BITS,
                                .avg = TOL_BITS, .exact = TOL_BITS};
// The same ops by Winograd F(2x2,3x3), F(4x4,3x3) and F(2x2,5x5) where conv2d_wino_impl_ok
// allows (direct elsewhere): their transforms add rounding that grows with the tile
// (test_winograd bounds it per tile). Worst observed in this table's measure: 1.2e-6
// (F(2x2,3x3)), 7.3e-6 (F(4x4,3x3)), both the weight gradient of the cnn3 conv2 case after two
// backward passes; 1.3e-5 (F(2x2,5x5)), the weight gradient of cnn2's conv1 and conv2 after
// two passes; 7.5e-6 (F(4x4,5x5)), cnn2 conv1's weight gradient.
#define TOL_WINO2 1e-5f
#define TOL_WINO4 5e-5f
#define TOL_WINO25 5e-5f
#define TOL_WINO45 5e-5f
static const tolset cpu_wino2_tols = {.conv = TOL_WINO2, .conv_floor_k = FLOOR_NHWC};
static const tolset cpu_wino4_tols = {.conv = TOL_WINO4, .conv_floor_k = FLOOR_NHWC};
static const tolset cpu_wino25_tols = {.conv = TOL_WINO25, .conv_floor_k = FLOOR_NHWC};
static const tolset cpu_wino45_tols = {.conv = TOL_WINO45, .conv_floor_k = FLOOR_NHWC};

// Parameters and gradients start this many floats into their buffer, so offsets are tested.
#define PARAM_LEAD 7
// Threads of the CPU backend's ops.
#define CPU_THREADS 2

// ---- the cases ----

// pad < 0: Keras "same" (layers.h's same_pad_before/same_out_dim: the odd row/column of
// padding after); nb: no bias (Keras use_bias = False).
typedef struct conv_shape {
    int B, C, Cs, H, W, OC, K, stride, pad; // Cs: the CPU backend's input channel stride
    int nb;
} conv_shape;
typedef struct pool_shape {
    int B, C, H, W, K, stride;
    int same; // Keras "same" padding: windows clipped at both ends
} pool_shape;
typedef struct dense_shape {
    int B, IN, OUT;
    int nb; // no bias
} dense_shape;
typedef struct dropout_shape {
    int B, C, HW, Cs; // N = C*HW elements per sample; the CPU backend's channel stride Cs
    float rate;
    uint32_t ids[6];
} dropout_shape;

typedef enum op_kind {
    OP_CONV, OP_MAXPOOL, OP_AVGPOOL, OP_GAVGPOOL, OP_DENSE, OP_RELU, OP_DROPOUT, OP_SOFTMAX
} op_kind;

typedef struct layer_case {
    op_kind op;
    union {
        conv_shape conv;
        pool_shape pool;
        dense_shape dense;
        dropout_shape drop;
    };
    uint64_t seed;
} layer_case;

#define CONV(...) {.op = OP_CONV, .conv = {__VA_ARGS__}}
#define POOL(...) {.op = OP_MAXPOOL, .pool = {__VA_ARGS__}}
#define APOOL(...) {.op = OP_AVGPOOL, .pool = {__VA_ARGS__}}
#define GPOOL(B, C, H, W) {.op = OP_GAVGPOOL, .pool = {B, C, H, W, 1, 1, 0}}
#define DENSE(...) {.op = OP_DENSE, .dense = {__VA_ARGS__}}

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
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

// ---- backends ----

// What an op is given and what the backend returns, in NCHW order. Outputs arrive NaN.
typedef struct conv_io {
    const conv_shape *s;
    int pad, OH, OW, relu; // pad: the before-pad; relu: conv + relu fused (conv_relu backends)
    const float *in, *params, *dout, *grads0; // params and grads: np floats each
    size_t np, w_off, b_off; // b_off LAYER_NO_PARAM: no bias
    float *out, *din, *g1, *g2; // g1: grads0 after a backward; g2: after another, din NULL
} conv_io;

typedef struct pool_io {
    const pool_shape *s;
    int pad, OH, OW;
    const float *in, *dout;
    float *out, *din;
    int32_t *argmax; // the winners, for backends that keep them (has_argmax)
} pool_io;

typedef struct dense_io {
    const dense_shape *s;
    const float *in, *params, *dout, *grads0;
    size_t np, w_off, b_off;
    float *out, *din, *g1, *g2;
} dense_io;

typedef struct relu_io {
    size_t n;
    const float *in, *dout;
    float *out, *din;       // out of place
    float *out_ip, *din_ip; // in place, as the OpenCL device runs them
} relu_io;

typedef struct dropout_io {
    const dropout_shape *s;
    uint64_t key;
    const float *in, *dout;
    float *out, *din; // din: backward, the same op on the gradient, in place
} dropout_io;

typedef struct softmax_io {
    int B, NC;
    const float *logits, *probs_ref; // backward runs from the reference's probabilities
    const uint8_t *labels;
    float *probs, *loss;       // with labels
    float *probs_nl, *loss_nl; // without labels: loss_nl must keep its sentinel values
    float *dlogits;
} softmax_io;

// One backend under test, as an interface: NULL slots are ops it does not run on its own (the
// CPU path runs dense, relu and softmax through the very functions the reference uses).
typedef struct backend backend;
struct backend {
    const char *name;
    const tolset *tol;
    void *ctx;
    int fails;
    int conv_relu, has_argmax;
    void (*conv)(backend *b, conv_io *io);
    void (*maxpool)(backend *b, pool_io *io);
    void (*avgpool)(backend *b, pool_io *io);  // io->argmax unused
    void (*gavgpool)(backend *b, pool_io *io); // global: OH = OW = 1
    void (*dense)(backend *b, dense_io *io);
    void (*relu)(backend *b, relu_io *io);
    void (*dropout)(backend *b, dropout_io *io);
    void (*softmax)(backend *b, softmax_io *io);
};

// ---- helpers ----

// Host allocations of one case, released together.
typedef struct arena {
    void *p[64];
    int n;
} arena;

static void *anew(arena *a, size_t bytes) {
    assert_true(a->n < (int)(sizeof a->p / sizeof a->p[0]));
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    a->p[a->n++] = p;
    return p;
}

static void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) free(a->p[i]);
    a->n = 0;
}

static float *uniform(arena *a, size_t n, float lo, float hi, uint64_t seed) {
    float *p = anew(a, n * sizeof *p);
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * ht_rng_double(&r));
    return p;
}

static float *nans(arena *a, size_t n) {
    float *p = anew(a, n * sizeof *p);
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

// A failure is counted and printed, and the test goes on so that one run shows every op that
// disagrees.
static void failed(backend *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(b, fmt, ap);
    va_end(ap);
}

// Compares a backend's result with the reference by check_tensor, or bit for bit (TOL_BITS).
static void expect(backend *b, const float *got, const float *ref, size_t n, float tol,
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

// Every case of the table the backend has an op for, in both directions.
static void run_cases(backend *b) {
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
            break;
        }
    }
}

// ---- the native CPU backend: layers.h's channels-last ops, NCHW <-> NHWC by ref.c ----

// Every pad channel (c >= C) of a (rows, Cs) tensor is exactly zero.
static int pad_channels_zero(const float *x, size_t rows, int C, int Cs) {
    for (size_t r = 0; r < rows; r++)
        for (int c = C; c < Cs; c++)
            if (x[r * Cs + c] != 0.0f) return 0;
    return 1;
}

static float *nan_buf(size_t n) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
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

static void test_parity_cpu(void **state) {
    (void)state;
    backend b = {.name = "cpu (layers.h, channels-last)", .tol = &cpu_tols, .conv_relu = 1,
                 .conv = cpu_conv, .maxpool = cpu_maxpool, .avgpool = cpu_avgpool,
                 .gavgpool = cpu_gavgpool, .dropout = cpu_dropout};
    run_cases(&b);
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
        run_cases(&b);
        printf("%s: %d op checks failed\n", b.name, b.fails);
        fails += b.fails;
    }
    assert_int_equal(fails, 0);
}

// ---- the OpenCL backends: devices/ocl_ops.h on each device ----

typedef struct cl_env {
    ocl_ops o;
    cl_context ctx;
    cl_command_queue q;
    const char *spec;
    ht_error err;
    cl_mem bufs[16]; // the current op's buffers, released by cl_end
    int nbufs;
} cl_env;

// An op's return code: a failure to enqueue is fatal for the test.
#define OK(t, call)                                                                           \
    do {                                                                                      \
        if ((call) != 0) fail_msg("%s: %s", (t)->spec, (t)->err.msg);                          \
    } while (0)

// A device buffer holding a copy of host[0..bytes).
static cl_mem dbuf(cl_env *t, const void *host, size_t bytes) {
    assert_true(t->nbufs < (int)(sizeof t->bufs / sizeof t->bufs[0]));
    cl_int err;
    cl_mem m = clCreateBuffer(t->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    if (err != CL_SUCCESS)
        fail_msg("%s: clCreateBuffer(%zu): %s", t->spec, bytes, ocl_error_name(err));
    t->bufs[t->nbufs++] = m;
    return m;
}

static void dwrite(cl_env *t, cl_mem m, const void *host, size_t bytes) {
    cl_int err = clEnqueueWriteBuffer(t->q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueWriteBuffer: %s", t->spec, ocl_error_name(err));
}

// Blocking read into host; also surfaces errors of the kernels before it.
static void dread(cl_env *t, cl_mem m, void *host, size_t bytes) {
    cl_int err = clEnqueueReadBuffer(t->q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueReadBuffer: %s", t->spec, ocl_error_name(err));
}

static void cl_end(cl_env *t) {
    for (int i = 0; i < t->nbufs; i++) clReleaseMemObject(t->bufs[i]);
    t->nbufs = 0;
}

// Scratch starts as NaN before forward and again before backward: backward must not rely on
// what forward left there.
static void cl_conv(backend *b, conv_io *io) {
    cl_env *t = b->ctx;
    const conv_shape *s = io->s;
    const int B = s->B, C = s->C, H = s->H, W = s->W, OC = s->OC, K = s->K;
    const int OH = io->OH, OW = io->OW;
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * OC * OH * OW;
    const size_t nscr = ocl_conv2d_scratch_floats(B, C, K, OC, OH, OW), fl = sizeof(float);
    float *scr_nan = nan_buf(nscr);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_par = dbuf(t, io->params, io->np * fl);
    cl_mem d_out = dbuf(t, io->out, nout * fl), d_dout = dbuf(t, io->dout, nout * fl);
    cl_mem d_din = dbuf(t, io->din, nin * fl), d_grads = dbuf(t, io->grads0, io->np * fl);
    cl_mem d_scr = dbuf(t, scr_nan, nscr * fl);
    OK(t, ocl_conv2d_forward(&t->o, d_out, d_in, d_par, io->w_off, io->b_off, B, C, H, W, OC, K,
                             s->stride, io->pad, OH, OW, d_scr, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dwrite(t, d_scr, scr_nan, nscr * fl);
    OK(t, ocl_conv2d_backward(&t->o, d_din, d_grads, io->w_off, io->b_off, d_dout, d_in, d_par,
                              B, C, H, W, OC, K, s->stride, io->pad, OH, OW, d_scr, &t->err));
    dread(t, d_din, io->din, nin * fl);
    dread(t, d_grads, io->g1, io->np * fl);
    OK(t, ocl_conv2d_backward(&t->o, NULL, d_grads, io->w_off, io->b_off, d_dout, d_in, d_par,
                              B, C, H, W, OC, K, s->stride, io->pad, OH, OW, d_scr, &t->err));
    dread(t, d_grads, io->g2, io->np * fl);
    cl_end(t);
    free(scr_nan);
}

static void cl_maxpool(backend *b, pool_io *io) {
    cl_env *t = b->ctx;
    const pool_shape *s = io->s;
    const size_t nin = (size_t)s->B * s->C * s->H * s->W;
    const size_t nout = (size_t)s->B * s->C * io->OH * io->OW, fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_out = dbuf(t, io->out, nout * fl);
    cl_mem d_am = dbuf(t, io->argmax, nout * sizeof(int32_t));
    cl_mem d_dout = dbuf(t, io->dout, nout * fl), d_din = dbuf(t, io->din, nin * fl);
    OK(t, ocl_maxpool_forward(&t->o, d_out, d_am, d_in, s->B, s->C, s->H, s->W, s->K, s->stride,
                              io->pad, io->OH, io->OW, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dread(t, d_am, io->argmax, nout * sizeof(int32_t));
    OK(t, ocl_maxpool_backward(&t->o, d_din, d_dout, d_am, s->B, s->C, s->H, s->W, s->K,
                               s->stride, io->pad, io->OH, io->OW, &t->err));
    dread(t, d_din, io->din, nin * fl);
    cl_end(t);
}

static void cl_avgpool(backend *b, pool_io *io) {
    cl_env *t = b->ctx;
    const pool_shape *s = io->s;
    const size_t nin = (size_t)s->B * s->C * s->H * s->W;
    const size_t nout = (size_t)s->B * s->C * io->OH * io->OW, fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_out = dbuf(t, io->out, nout * fl);
    cl_mem d_dout = dbuf(t, io->dout, nout * fl), d_din = dbuf(t, io->din, nin * fl);
    OK(t, ocl_avgpool_forward(&t->o, d_out, d_in, s->B, s->C, s->H, s->W, s->K, s->stride,
                              io->pad, io->OH, io->OW, &t->err));
    OK(t, ocl_avgpool_backward(&t->o, d_din, d_dout, s->B, s->C, s->H, s->W, s->K, s->stride,
                               io->pad, io->OH, io->OW, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dread(t, d_din, io->din, nin * fl);
    cl_end(t);
}

static void cl_gavgpool(backend *b, pool_io *io) {
    cl_env *t = b->ctx;
    const pool_shape *s = io->s;
    const size_t nin = (size_t)s->B * s->C * s->H * s->W, nout = (size_t)s->B * s->C;
    const size_t fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_out = dbuf(t, io->out, nout * fl);
    cl_mem d_dout = dbuf(t, io->dout, nout * fl), d_din = dbuf(t, io->din, nin * fl);
    OK(t, ocl_gavgpool_forward(&t->o, d_out, d_in, s->B, s->C, s->H, s->W, &t->err));
    OK(t, ocl_gavgpool_backward(&t->o, d_din, d_dout, s->B, s->C, s->H, s->W, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dread(t, d_din, io->din, nin * fl);
    cl_end(t);
}

static void cl_dense(backend *b, dense_io *io) {
    cl_env *t = b->ctx;
    const int B = io->s->B, IN = io->s->IN, OUT = io->s->OUT;
    const size_t nin = (size_t)B * IN, nout = (size_t)B * OUT, fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_par = dbuf(t, io->params, io->np * fl);
    cl_mem d_out = dbuf(t, io->out, nout * fl), d_dout = dbuf(t, io->dout, nout * fl);
    cl_mem d_din = dbuf(t, io->din, nin * fl), d_grads = dbuf(t, io->grads0, io->np * fl);
    OK(t, ocl_dense_forward(&t->o, d_out, d_in, d_par, io->w_off, io->b_off, B, IN, OUT,
                            &t->err));
    dread(t, d_out, io->out, nout * fl);
    OK(t, ocl_dense_backward(&t->o, d_din, d_grads, io->w_off, io->b_off, d_dout, d_in, d_par, B,
                             IN, OUT, &t->err));
    dread(t, d_din, io->din, nin * fl);
    dread(t, d_grads, io->g1, io->np * fl);
    OK(t, ocl_dense_backward(&t->o, NULL, d_grads, io->w_off, io->b_off, d_dout, d_in, d_par, B,
                             IN, OUT, &t->err));
    dread(t, d_grads, io->g2, io->np * fl);
    cl_end(t);
}

static void cl_relu(backend *b, relu_io *io) {
    cl_env *t = b->ctx;
    const size_t n = io->n, bytes = n * sizeof(float);
    cl_mem d_in = dbuf(t, io->in, bytes), d_out = dbuf(t, io->out, bytes);
    cl_mem d_dout = dbuf(t, io->dout, bytes), d_din = dbuf(t, io->din, bytes);
    OK(t, ocl_relu_forward(&t->o, d_out, d_in, n, &t->err));
    OK(t, ocl_relu_backward(&t->o, d_din, d_dout, d_out, n, &t->err));
    dread(t, d_out, io->out, bytes);
    dread(t, d_din, io->din, bytes);
    OK(t, ocl_relu_forward(&t->o, d_in, d_in, n, &t->err));
    OK(t, ocl_relu_backward(&t->o, d_dout, d_dout, d_in, n, &t->err));
    dread(t, d_in, io->out_ip, bytes);
    dread(t, d_dout, io->din_ip, bytes);
    cl_end(t);
}

static void cl_dropout(backend *b, dropout_io *io) {
    cl_env *t = b->ctx;
    const dropout_shape *s = io->s;
    const size_t N = (size_t)s->C * s->HW, bytes = (size_t)s->B * N * sizeof(float);
    cl_mem d_in = dbuf(t, io->in, bytes), d_out = dbuf(t, io->out, bytes);
    cl_mem d_ids = dbuf(t, s->ids, (size_t)s->B * sizeof s->ids[0]);
    cl_mem d_dout = dbuf(t, io->dout, bytes);
    OK(t, ocl_dropout(&t->o, d_out, d_in, s->B, N, s->rate, io->key, d_ids, &t->err));
    OK(t, ocl_dropout(&t->o, d_dout, d_dout, s->B, N, s->rate, io->key, d_ids, &t->err));
    dread(t, d_out, io->out, bytes);
    dread(t, d_dout, io->din, bytes);
    cl_end(t);
}

static void cl_softmax(backend *b, softmax_io *io) {
    cl_env *t = b->ctx;
    const int B = io->B, NC = io->NC;
    const size_t n = (size_t)B * NC, fl = sizeof(float);
    cl_mem d_logits = dbuf(t, io->logits, n * fl), d_lab = dbuf(t, io->labels, (size_t)B);
    cl_mem d_probs = dbuf(t, io->probs, n * fl), d_loss = dbuf(t, io->loss, B * fl);
    OK(t, ocl_softmax_xent_forward(&t->o, d_probs, d_loss, d_logits, d_lab, B, NC, &t->err));
    dread(t, d_probs, io->probs, n * fl);
    dread(t, d_loss, io->loss, B * fl);
    dwrite(t, d_probs, io->probs_nl, n * fl); // NaN again
    dwrite(t, d_loss, io->loss_nl, B * fl);   // the sentinels
    OK(t, ocl_softmax_xent_forward(&t->o, d_probs, d_loss, d_logits, NULL, B, NC, &t->err));
    dread(t, d_probs, io->probs_nl, n * fl);
    dread(t, d_loss, io->loss_nl, B * fl);
    dwrite(t, d_probs, io->probs_ref, n * fl);
    cl_mem d_dl = dbuf(t, io->dlogits, n * fl);
    OK(t, ocl_softmax_xent_backward(&t->o, d_dl, d_probs, d_lab, B, NC, &t->err));
    dread(t, d_dl, io->dlogits, n * fl);
    cl_end(t);
}

// ocl_fill, which no layer is: n not a multiple of any work-group size, and the tail past n
// stays untouched.
static void cl_check_fill(backend *b) {
    cl_env *t = b->ctx;
    arena a = {0};
    const size_t n = 1001;
    float *got = nans(&a, n + 3), *ref = nans(&a, n + 3);
    cl_mem m = dbuf(t, got, (n + 3) * sizeof(float));
    for (size_t i = 0; i < n; i++) ref[i] = -2.5f;
    OK(t, ocl_fill(&t->o, m, -2.5f, n, &t->err));
    dread(t, m, got, (n + 3) * sizeof(float));
    expect(b, got, ref, n, TOL_EXACT, 1.0f, "fill");
    if (!(isnan(got[n]) && isnan(got[n + 1]) && isnan(got[n + 2]))) failed(b, "fill: wrote past n");
    cl_end(t);
    arena_free(&a);
}

static void test_parity_opencl(void **state) {
    (void)state;
    ht_error e;
    ocl_dev_info *devs = NULL;
    int n = 0;
    ocl_set_cache_dir(HT_TEST_TMP "/cl-cache");
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    if (n == 0) {
        free(devs);
        printf("SKIPPED: no OpenCL platform found; the OpenCL ops are not tested here\n");
        skip();
    }
    int fails = 0;
    for (int i = 0; i < n; i++) {
        cl_env *t = calloc(1, sizeof *t);
        assert_non_null(t);
        char label[300];
        snprintf(label, sizeof label, "%s (%s)", devs[i].spec, devs[i].name);
        t->spec = label;
        cl_program prog;
        int from_cache = 0;
        double t0 = ht_now();
        if (ocl_device_runtime(&devs[i], &t->ctx, &prog, &from_cache, &e) < 0)
            fail_msg("%s", e.msg);
        cl_int err;
        t->q = clCreateCommandQueue(t->ctx, devs[i].device, 0, &err);
        if (err != CL_SUCCESS) fail_msg("%s: clCreateCommandQueue: %s", label, ocl_error_name(err));
        if (ocl_ops_init(&t->o, t->ctx, t->q, prog, label, &e) < 0) fail_msg("%s", e.msg);
        backend b = {.name = label, .tol = &cl_tols, .ctx = t, .has_argmax = 1,
                     .conv = cl_conv, .maxpool = cl_maxpool, .avgpool = cl_avgpool,
                     .gavgpool = cl_gavgpool, .dense = cl_dense, .relu = cl_relu,
                     .dropout = cl_dropout, .softmax = cl_softmax};
        cl_check_fill(&b);
        run_cases(&b);
        printf("%s: %d op checks failed (program %s, %.1f s)\n", label, b.fails,
               from_cache ? "from cache" : "built", ht_now() - t0);
        fails += b.fails;
        ocl_ops_free(&t->o);
        clReleaseCommandQueue(t->q);
        free(t);
    }
    free(devs);
    ocl_blas_release_all();
    assert_int_equal(fails, 0);
}

// ocl_ops_init on a program that lacks kernels fails and names the first missing one.
static void test_cl_ops_init_missing_kernel(void **state) {
    (void)state;
    ht_error e;
    ocl_dev_info *devs = NULL;
    int n = 0;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    if (n == 0) {
        free(devs);
        printf("SKIPPED: no OpenCL platform found\n");
        skip();
    }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &devs[0].device, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    const char *src = "__kernel void fill(__global float *b, const float v, const uint n) {\n"
                      "    if (get_global_id(0) < n) b[get_global_id(0)] = v;\n}\n";
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(clBuildProgram(prog, 1, &devs[0].device, "-cl-std=CL1.2", NULL, NULL),
                     CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(ctx, devs[0].device, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    ocl_ops o;
    assert_int_equal(ocl_ops_init(&o, ctx, q, prog, "cl:test", &e), -1);
    printf("expected failure: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "im2col"));
    assert_non_null(strstr(e.msg, "cl:test"));
    assert_null(o.k_fill); // released again on failure
    clReleaseCommandQueue(q);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    free(devs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_cpu),
        cmocka_unit_test(test_parity_cpu_winograd),
        cmocka_unit_test(test_parity_opencl),
        cmocka_unit_test(test_cl_ops_init_missing_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
