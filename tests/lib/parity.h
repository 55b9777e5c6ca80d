// Layer parity, shared by its tests (test_parity_cpu.c, test_parity_cl.c): one table of cases
// per op family, the reference's result for each (tests/lib/ref.h), and the comparison of a
// backend's result with it under the backend's named tolerances. A backend is an interface of
// ops; outputs start as NaN (so overwrite semantics are checked), gradients start nonzero (so
// accumulate semantics are), parameters sit at nonzero offsets of their flat buffer, and every
// backward runs twice, the second time without an input gradient (a first layer). The act
// family's case runs every kind layer_kinds.h lists, so a new activation is checked here
// without a new line.
#ifndef HETRAIN_TEST_PARITY_H
#define HETRAIN_TEST_PARITY_H

#include <stddef.h>
#include <stdint.h>

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

// The act family in float (the CPU's libm, OpenCL's built-ins: exp, expm1, log1p within 3 ulp,
// tanh 5, erf 16; OpenCL C 1.2, 7.4) against the reference in double: a few ulp of the terms,
// which are of magnitude <= ~6 for inputs in [-6, 6], so relative to max(|a|, |b|, 1) a few
// 1e-6 at most where a derivative's terms cancel (swish', gelu' near their zeros). Worst
// observed: 4.8e-7 (CPU), 1.6e-6 (PoCL), both gelu's tanh form's backward.
#define TOL_ACT 1e-5f
#define FLOOR_ACT 1.0f

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
    float pool, avg, exact, xent, act;
} tolset;

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

// The act family's case: every act kind in turn (its parameter the kind's default, and once
// more with another value where it takes one), over B samples of C channels x HW positions;
// Cs is the CPU backend's channel stride.
typedef struct act_shape {
    int B, C, HW, Cs;
} act_shape;

typedef enum op_kind {
    OP_CONV, OP_MAXPOOL, OP_AVGPOOL, OP_GAVGPOOL, OP_DENSE, OP_RELU, OP_DROPOUT, OP_SOFTMAX,
    OP_ACT
} op_kind;

typedef struct layer_case {
    op_kind op;
    union {
        conv_shape conv;
        pool_shape pool;
        dense_shape dense;
        dropout_shape drop;
        act_shape act;
    };
    uint64_t seed;
} layer_case;

#define CONV(...) {.op = OP_CONV, .conv = {__VA_ARGS__}}
#define POOL(...) {.op = OP_MAXPOOL, .pool = {__VA_ARGS__}}
#define APOOL(...) {.op = OP_AVGPOOL, .pool = {__VA_ARGS__}}
#define GPOOL(B, C, H, W) {.op = OP_GAVGPOOL, .pool = {B, C, H, W, 1, 1, 0}}
#define DENSE(...) {.op = OP_DENSE, .dense = {__VA_ARGS__}}

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

typedef struct bce_io {
    int B, K; // K = 1: the binary head; K >= 2: the multi-label head of K labels
    const float *logits, *probs_ref; // backward runs from the reference's probabilities
    const uint8_t *labels;           // (B, K)
    float *probs, *loss; // (B, 2) or (B, K); (B)
    float *dlogits;      // (B, K)
} bce_io;

typedef struct act_io {
    const act_shape *s;
    int f;       // act_fn (layer_kinds.h)
    float alpha; // its parameter
    const float *in, *dout;
    float *out, *din;
} act_io;

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
    void (*act)(backend *b, act_io *io);
    void (*bce)(backend *b, bce_io *io);
};

// ---- helpers ----

// Host allocations of one case, released together.
typedef struct arena {
    void *p[64];
    int n;
} arena;

void *anew(arena *a, size_t bytes);
void arena_free(arena *a);
float *uniform(arena *a, size_t n, float lo, float hi, uint64_t seed);
float *nans(arena *a, size_t n);
// n NaNs in a malloc'd buffer the caller frees.
float *nan_buf(size_t n);
// A failure is counted and printed, and the test goes on so that one run shows every op that
// disagrees.
void failed(backend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Compares a backend's result with the reference by check_tensor, or bit for bit (TOL_BITS).
void expect(backend *b, const float *got, const float *ref, size_t n, float tol, float floor,
            const char *fmt, ...) __attribute__((format(printf, 7, 8)));

// Runs every case of the table the backend has an op for, in both directions.
void parity_run_cases(backend *b);

#endif
