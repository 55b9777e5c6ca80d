// CPU layer math, as the network (net.c) runs it: forward/backward pairs in float32.
// Dense, relu, dropout and softmax see flat tensors (dense's input flattened in PyTorch's NCHW
// order); convolution and max pooling work on channels-last (NHWC) tensors, below. The NCHW
// reference they are checked against is test code (tests/lib/ref.h).
// Backward functions *accumulate* (+=) into weight and bias gradients, so a device can sum
// per-sample gradients over micro-batches; they *overwrite* the input gradient. Gradients are
// sums over the batch, never means.
// Functions that parallelise use OpenMP with at most `nthreads` threads and call BLAS from
// inside their parallel regions (OpenBLAS's OpenMP build then runs each call single-threaded).
#ifndef HETRAIN_LAYERS_H
#define HETRAIN_LAYERS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cblas.h>

#include "core/ht_omp.h"
#include "nn/gemm_bf16.h"
#include "nn/layer_kinds.h"
#include "nn/model.h"

// Output size of a convolution or pooling window along one axis.
static inline int conv_out_dim(int in, int k, int stride, int pad) {
    return (in + 2 * pad - k) / stride + 1;
}

// Keras/TensorFlow "same" padding along one axis, for any stride and window: out =
// ceil(in/stride); total padding max((out-1)*stride + k - in, 0), of which total/2 goes before
// (top/left) and the rest, possibly one more, after (bottom/right). Layers keep the before-pad
// (`pad`) and their output size; the after-pad is implied by them, and kernels bounds-check
// both ends.
static inline int same_out_dim(int in, int stride) { return (in + stride - 1) / stride; }
static inline int same_pad_before(int in, int k, int stride) {
    int total = (same_out_dim(in, stride) - 1) * stride + k - in;
    return total > 0 ? total / 2 : 0;
}

// Row-major C (M x N) = op(A) * op(B) + beta*C on at most nthreads OpenMP threads, each running
// a single-threaded SGEMM on its block of C: along the longer of M and N (SPLIT_LONGER), or
// along M (SPLIT_M), in blocks of `align` rows or columns; never along K, so each element's sum
// is the same bits whatever the split. gemm_split computes in `prec`: float32 (OpenBLAS's
// SGEMM) or with bfloat16 factors and float sums (gemm_bf16.h, --precision bf16).
typedef enum { SPLIT_LONGER, SPLIT_M } split_dim;
typedef enum gemm_prec { GEMM_F32, GEMM_BF16 } gemm_prec;
void gemm_split(gemm_prec prec, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                const float *A, int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc,
                int nthreads, split_dim dim, int align);
// What m's GEMMs compute in (its setup's --precision).
static inline gemm_prec model_gemm_prec(const model *m) {
    return m->setup.precision == PRECISION_BF16 ? GEMM_BF16 : GEMM_F32;
}
// want, unless it is bfloat16 and a layer dimension of the product (the dims given, never the
// batch's) is narrower than GEMM_BF16_MIN_WIDTH, where float32 is quicker.
static inline gemm_prec gemm_prec_for(gemm_prec want, int dim1, int dim2) {
    return want == GEMM_BF16 && dim1 >= GEMM_BF16_MIN_WIDTH && dim2 >= GEMM_BF16_MIN_WIDTH
               ? GEMM_BF16
               : GEMM_F32;
}
static inline void sgemm_split(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                               const float *A, int lda, const float *Bm, int ldb, float beta,
                               float *Cm, int ldc, int nthreads, split_dim dim, int align) {
    gemm_split(GEMM_F32, ta, tb, M, N, K, A, lda, Bm, ldb, beta, Cm, ldc, nthreads, dim, align);
}

// in is (B,IN), w is (OUT,IN) (PyTorch layout), b is (OUT), out is (B,OUT). The _p forms
// compute their GEMMs in prec (gemm_split), the others in float32.
void dense_forward(float *out, const float *in, const float *w, const float *b, int B, int IN,
                   int OUT, int nthreads);
void dense_forward_p(float *out, const float *in, const float *w, const float *b, int B, int IN,
                     int OUT, int nthreads, gemm_prec prec);

// dw (OUT,IN) and db (OUT) accumulated (db NULL: a layer without bias); din (B,IN)
// overwritten unless NULL.
void dense_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                    const float *w, int B, int IN, int OUT, int nthreads);
// The weight gradient alone: dw = beta * dw + dout^T * in, as dense_backward_beta computes it,
// element for element the same bits whatever nthreads (each element's sum runs over the B
// samples in order; the threads split rows or columns, never the samples). Several ranks
// recompute one another's dense weight gradients from these factors (sharding/engine_reduce.c).
void dense_weight_grad(float *dw, const float *dout, const float *in, int B, int IN, int OUT,
                       float beta, int nthreads, gemm_prec prec);
// The same with dw = beta * dw + ... (beta 0: dw and db are overwritten, not added to).
void dense_backward_beta(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int B, int IN, int OUT, float beta, int nthreads,
                         gemm_prec prec);

// n elements; in-place allowed (out == in).
void relu_forward(float *out, const float *in, size_t n, int nthreads);
// din = dout where out > 0, else 0; in-place allowed (din == dout).
void relu_backward(float *din, const float *dout, const float *out, size_t n, int nthreads);
// v where keep, else +0.0f, as a bit mask: the select every masked gradient (relu's, dropout's)
// goes through. Written `keep ? v : 0`, GCC 12 keeps a branch per element, mispredicted on half
// of them: it will not load v unconditionally (the load might trap), nor, with trapping math
// on, compute it unconditionally when v is a product. ResNet-20's batchnorm backward with its
// relu ran 5x slower than without.
static inline float keep_if(int keep, float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    b &= (uint32_t)0 - (uint32_t)(keep != 0);
    memcpy(&v, &b, sizeof v);
    return v;
}

// relu's backward over n elements, the loop every fused relu's backward shares: d = g where
// out > 0, else 0; d may be g (the loop is declared free of carried dependences, so it needs no
// aliasing check to run as vectors).
static inline void relu_mask(float *d, const float *g, const float *out, size_t n) {
    HT_SIMD
    for (size_t i = 0; i < n; i++) d[i] = keep_if(out[i] > 0.0f, g[i]);
}

// relu's backward and the backward of an inverted dropout of `rate` right after it, in one
// pass: out is the dropout's output (written over the relu's), so out > 0 exactly where the
// mask kept a positive relu output; din = out > 0 ? dout * scale : 0, the same bits as
// dropout_forward's masking of dout followed by relu_backward. din may be dout.
void relu_dropout_backward(float *din, const float *dout, const float *out, size_t n,
                           float rate, int nthreads);

// The act family's activations (layer_kinds.h's act_fn; alpha is the layer's parameter) over n
// elements: out = f(in); din = dout * f'(in), from the forward's input alone (a dropout after
// the activation overwrites its output in place). In place allowed (out == in, din == dout).
void act_forward(act_fn f, float alpha, float *out, const float *in, size_t n, int nthreads);
void act_backward(act_fn f, float alpha, float *din, const float *dout, const float *in,
                  size_t n, int nthreads);
// The same on channels-last rows (positions) of Cs floats: the first C of each; the pad
// channels of out and din are set to zero.
void act_nhwc_forward(act_fn f, float alpha, float *out, const float *in, size_t rows, int C,
                      int Cs, int nthreads);
void act_nhwc_backward(act_fn f, float alpha, float *din, const float *dout, const float *in,
                       size_t rows, int C, int Cs, int nthreads);

// Inverted dropout over B samples of N elements each: element e of sample i is kept when
// ht_rng_uniform(key, ids[i], e) >= rate, and kept values are scaled by 1/(1-rate).
// key = ht_rng_key(seed, epoch, layer index). In-place allowed. Its backward is the same call
// on the gradient: the same mask and scale.
void dropout_forward(float *out, const float *in, int B, size_t N, float rate, uint64_t key,
                     const uint32_t *ids, int nthreads);
// The same with the element's number masked, ht_rng_uniform(key, ids[i], e & emask): ~0 is
// dropout_forward, 0 one draw a sample for all its elements (layer_dropout_emask).
void dropout_forward_mask(float *out, const float *in, int B, size_t N, float rate,
                          uint64_t key, uint32_t emask, const uint32_t *ids, int nthreads);

// logits (B,NC) -> probs (B,NC) by a numerically stable softmax; when labels is not NULL,
// loss[i] = -log(probs[i][labels[i]]) computed as logsumexp - logit (stable for large logits).
void softmax_xent_forward(float *probs, float *loss, const float *logits, const uint8_t *labels,
                          int B, int NC);
// The binary head (K = 1): sigmoid + binary cross-entropy of one logit a sample. probs (B, 2)
// gets (1 - p, p), p = sigmoid(logit) (so that class 1's probability is p and the argmax is
// p > 0.5); with labels (0 or 1; another value gives a NaN loss),
// loss = -(y log p + (1 - y) log(1 - p)) from the logit, never log of 0. The backward:
// dlogit = p - y. The multi-label head (K >= 2): logits, probs and labels are (B, K), and a
// sample's loss is the mean of its K labels' (Keras's binary_crossentropy), so dlogit =
// (p - y) / K.
void bce_forward(float *probs, float *loss, const float *logits, const uint8_t *labels, int B,
                 int K);
void bce_backward(float *dlogits, const float *probs, const uint8_t *labels, int B, int K);

// dlogits = probs - onehot(labels): the gradient of the *summed* loss.
void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B,
                           int NC);

// A sample's (C, H, W) = dims axes reordered: output axis i is input axis perm[i] - 1
// (PyTorch's x.permute(0, perm[0], perm[1], perm[2])); the backward moves the gradient back.
void permute_forward(float *out, const float *in, int B, const int dims[3], const int perm[3],
                     int nthreads);
void permute_backward(float *din, const float *dout, int B, const int dims[3], const int perm[3],
                      int nthreads);

// The dwconv family (a depthwise convolution), channels-last: in (B,H,W,Cs), its pad channels
// ignored; w (C*M,1,K,K) as PyTorch's groups = C; out (B,OH,OW,conv_cpad(C*M)), pad channels
// zero. The backward overwrites din (skipped when NULL; pad channels zero) and adds to dw and db
// (db NULL: no bias).
typedef struct dwconv_geom {
    int C, Cs, H, W, M, K, stride, pad, OH, OW; // pad: before (top/left)
} dwconv_geom;
// ws: dwconv_ws_floats(g, nthreads) floats of scratch.
size_t dwconv_ws_floats(const dwconv_geom *g, int nthreads);
void dwconv_forward(float *out, const float *in, const float *w, const float *bias, int B,
                    const dwconv_geom *g, float *ws, int nthreads);
void dwconv_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int B, const dwconv_geom *g, float *ws, int nthreads);

// The concat family, channels-last over rows = B * H * W positions: each input k's in_c[k]
// channels (channel stride in_cs[k]) one after another into out (channel stride out_cs, the
// rest zero); the backward hands each wanted input (dins[k] not NULL) its slice, pads zeroed.
void concat_forward(float *out, int out_cs, const float *const *ins, const int *in_c,
                    const int *in_cs, int n_in, size_t rows, int nthreads);
void concat_backward(float *const *dins, const int *in_c, const int *in_cs, int n_in,
                     const float *dout, int out_cs, size_t rows, int nthreads);

// The merge family's element-wise merges over B samples: out = ins[0] op ins[1] op ... in
// input order (Average: the sum over n_in). The output and every full input are (B,H,W,cs)
// channels-last or (B,C,H,W); input k with bit k of bcast is (B,1,1,C) with its channels
// bcs[k] floats apart, broadcast over H and W. The backward writes each wanted input's
// gradient (dins[k] not NULL; a broadcast input's summed over the positions, pads zero).
typedef struct merge_geom {
    merge_op op;
    int n_in;
    int C, HW;      // the output's channels and positions
    int nhwc, cs;   // its layout: channels-last with channel stride cs, or NCHW
    unsigned bcast; // inputs broadcast over H and W, as bits
    int bcs[MODEL_MAX_IN];
} merge_geom;
size_t merge_floats(const merge_geom *g); // floats of one sample of the output
void merge_forward(float *out, const float *const *ins, int B, const merge_geom *g,
                   int nthreads);
void merge_backward(float *const *dins, const float *dout, const float *const *ins, int B,
                    const merge_geom *g, int nthreads);

// The rescale family: rows of Cs floats, y = x * s + o in the first C of each and 0 in the
// rest (a channels-last tensor's pad channels); the backward din = dout * s the same way.
void rescale_forward(float *out, const float *in, size_t rows, int C, int Cs, float s, float o,
                     int nthreads);
void rescale_backward(float *din, const float *dout, size_t rows, int C, int Cs, float s,
                      int nthreads);

// The normalize family: rows of Cs floats, channel c of the first C of each standardised,
// (x - mean[c]) / normalize_std(var[c]) (invert: mean[c] + x * normalize_std(var[c])), the rest 0;
// the backward din = dout / normalize_std(var[c]) (invert: times) the same way.
#define NORMALIZE_MIN_STD 1e-7f // Keras's epsilon, below which a deviation counts as this
float normalize_std(float var);
void normalize_forward(float *out, const float *in, size_t rows, int C, int Cs, const float *mean,
                       const float *var, int invert, int nthreads);
void normalize_backward(float *din, const float *dout, size_t rows, int C, int Cs,
                        const float *var, int invert, int nthreads);

// The layernorm family: rows of Cs floats, the first C of each standardised by the row's own
// mean and variance, (x - mean) / sqrt(var + eps) * gamma[c] + beta[c] (gamma, beta NULL: 1,
// 0), the rest 0. The backward writes din (skipped when NULL) and adds the rows' sums to dgamma
// and dbeta (each NULL: not wanted); -1 when out of memory for the threads' sums.
void layernorm_forward(float *out, const float *in, size_t rows, int C, int Cs,
                       const float *gamma, const float *beta, float eps, int nthreads);
int layernorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                       const float *in, size_t rows, int C, int Cs, const float *gamma,
                       float eps, int nthreads);

// The layerscale family: rows of Cs floats, y = x * gamma[c] in the first C of each, 0 in the
// rest; the backward writes din (skipped when NULL) and adds sum(dy * x) to dgamma; -1 when
// out of memory for the threads' sums.
void layerscale_forward(float *out, const float *in, size_t rows, int C, int Cs,
                        const float *gamma, int nthreads);
int layerscale_backward(float *din, float *dgamma, const float *dout, const float *in,
                        size_t rows, int C, int Cs, const float *gamma, int nthreads);

// ---- channels-last (NHWC), the layout net.c keeps spatial activations in ----
// A spatial tensor is (B,H,W,Cs): channel stride Cs >= C. Convolutions write Cs =
// conv_cpad(OC), a multiple of CONV_CPAD, and keep the pad channels at zero; weights stay in
// PyTorch's (OC,C,K,K) layout. Results equal the NCHW reference's up to float rounding.
#define CONV_CPAD 16
static inline int conv_cpad(int c) { return (c + CONV_CPAD - 1) / CONV_CPAD * CONV_CPAD; }

// How one direction of a convolution is computed: direct (any shape), or Winograd
// F(m x m, K x K) with m = 2 or 4, K = 3 or 5 (winograd.h), for the shapes conv2d_wino_impl_ok
// allows (a direction given Winograd where it is not allowed runs direct), or as GEMMs over the
// batch (CONV_GEMM, any shape: im2col rows and SGEMM; the batch-wise conv2d_nhwc_forward and,
// given it as dw, conv2d_nhwc_backward for both gradients; per sample it runs direct).
// CONV_GEMM_BF16: the same GEMMs with bfloat16 factors (--precision bf16, gemm_bf16.h).
typedef enum conv_impl {
    CONV_DIRECT = 0,
    CONV_GEMM = 1,
    CONV_WINO2 = 2,
    CONV_WINO4 = 4,
    CONV_GEMM_BF16 = 8
} conv_impl;
static inline int conv_impl_gemm(conv_impl i) { return i == CONV_GEMM || i == CONV_GEMM_BF16; }
static inline gemm_prec conv_impl_prec(conv_impl i) {
    return i == CONV_GEMM_BF16 ? GEMM_BF16 : GEMM_F32;
}

typedef struct conv_geom {
    int C, Cs, H, W;           // input channels, their stride, height, width
    int OC, K, stride, pad, OH, OW; // pad: before (top/left); the after-pad follows from OH/OW
    conv_impl fwd, din, dw;    // forward, input gradient, weight gradient (default direct)
} conv_geom;

// The directions of a convolution, for conv2d_wino_ok.
typedef enum conv_dir { CONV_DIR_FWD, CONV_DIR_DIN, CONV_DIR_DW } conv_dir;

// Whether direction dir of g may run Winograd: 3x3 or 5x5, stride 1, the same padding at both
// ends (OH = H + 2*pad - (K-1)); the input gradient also needs pad <= K-1 and a channel stride
// Cs that is a multiple of 16 (it is written whole vectors). conv2d_wino_impl_ok: whether it
// may run impl.
int conv2d_wino_ok(const conv_geom *g, conv_dir dir);
int conv2d_wino_impl_ok(const conv_geom *g, conv_impl impl, conv_dir dir);

// Floats of scratch memory conv2d_nhwc_forward/backward need for `nthreads` threads. The
// sizes below hold for every choice of g's fwd, din and dw: the algorithm of a direction may
// change between calls on the same workspace.
size_t conv2d_nhwc_ws_floats(const conv_geom *g, int nthreads);

// in is (B,H,W,Cs), its pad channels ignored; w (OC,C,K,K), b (OC) or NULL; out is
// (B,OH,OW,conv_cpad(OC)), pad channels zero. relu != 0 applies relu to the output (a fused
// conv + relu).
void conv2d_nhwc_forward(float *out, const float *in, const float *w, const float *b, int B,
                         const conv_geom *g, int relu, float *ws, int nthreads);

// dout is (B,OH,OW,conv_cpad(OC)), its pad channels ignored. relu_out, when not NULL, is the
// forward's relu'd output: dout then counts only where relu_out > 0 (relu's backward, fused).
// dw (OC,C,K,K) and db (OC; NULL without a bias) are accumulated; din (B,H,W,Cs) is
// overwritten, pad channels zero, or skipped when NULL.
void conv2d_nhwc_backward(float *din, float *dw, float *db, const float *dout,
                          const float *relu_out, const float *in, const float *w, int B,
                          const conv_geom *g, float *ws, int nthreads);

// A convolution with the batchnorm that is its only reader (batchnorm.h's bn_fuse): the
// forward adds each sample's sums for the batchnorm's statistics into parts (B * 3 * OC
// doubles; NULL: none) as it writes the sample; the backward, given bn, makes its output
// gradient from the batchnorm's a sample at a time (dout: B samples of room, written by the
// GEMMs' path, out: the forward's output) in ws, conv2d_nhwc_ws_floats_bn floats.
struct bn_fuse;
void conv2d_nhwc_forward_parts(float *out, const float *in, const float *w, const float *b,
                               int B, const conv_geom *g, int relu, float *ws, double *parts,
                               int nthreads);
size_t conv2d_nhwc_ws_floats_bn(const conv_geom *g, int nthreads);
void conv2d_nhwc_backward_bn(float *din, float *dw, float *db, float *dout, const float *relu_out,
                             const struct bn_fuse *bn, const float *out, const float *in,
                             const float *w, int B, const conv_geom *g, float *ws, int nthreads);

// The same, one sample at a time on the calling thread, for callers that run several layers
// per sample (net.c): the weights are packed once per batch (pack, conv2d_nhwc_pack_floats
// floats); each thread owns a scratch (conv2d_nhwc_scratch_floats floats), zeroed by
// conv2d_nhwc_scratch_init before its first sample, in which backward_one sums dw and db over
// the thread's samples; conv2d_nhwc_scratch_reduce adds n threads' sums (scratch t at
// scratch + t * stride) to dw and db, in thread order.
size_t conv2d_nhwc_pack_floats(const conv_geom *g);
void conv2d_nhwc_pack(float *pack, const float *w, const float *b, const conv_geom *g);
size_t conv2d_nhwc_scratch_floats(const conv_geom *g);
void conv2d_nhwc_scratch_init(float *scratch, const conv_geom *g);
void conv2d_nhwc_forward_one(float *out, const float *in, const float *pack, const conv_geom *g,
                             int relu, float *scratch);
void conv2d_nhwc_backward_one(float *din, const float *dout, const float *relu_out,
                              const float *in, const float *pack, const conv_geom *g,
                              float *scratch);
void conv2d_nhwc_scratch_reduce(float *dw, float *db, const float *scratch, size_t stride,
                                int n, const conv_geom *g);

// Pooling windows: K x K, stride, before-pad `pad` (0 or "same"'s, same_pad_before; the
// after-pad is implied by OH/OW). Windows are clipped to the input: padding never wins a max
// and is not counted in an average (Keras/TensorFlow). Every window holds an input.
typedef struct pool_geom {
    int Cs, H, W, K, stride, pad, OH, OW;
} pool_geom;

// in is (B,H,W,Cs), out (B,OH,OW,Cs); every one of the Cs channels is pooled.
void maxpool_nhwc_forward(float *out, const float *in, int B, const pool_geom *g, int nthreads);
// din (B,H,W,Cs) is overwritten: each window's gradient goes to the window's first maximum
// in row-major order (as the reference's argmax), found again from the forward input `in`.
void maxpool_nhwc_backward(float *din, const float *dout, const float *in, int B,
                           const pool_geom *g, int nthreads);

// One sample of each, on the calling thread.
void maxpool_nhwc_forward_one(float *out, const float *in, const pool_geom *g);
void maxpool_nhwc_backward_one(float *din, const float *dout, const float *in,
                               const pool_geom *g);

// Average pooling: each output is the sum of its window's inputs (row-major) divided by how
// many there are; backward gives each input dout/count of every window holding it, added in
// window order. din is overwritten.
void avgpool_nhwc_forward_one(float *out, const float *in, const pool_geom *g);
void avgpool_nhwc_backward_one(float *din, const float *dout, const pool_geom *g);
void avgpool_nhwc_forward(float *out, const float *in, int B, const pool_geom *g, int nthreads);
void avgpool_nhwc_backward(float *din, const float *dout, int B, const pool_geom *g,
                           int nthreads);

// Global average pooling: in (B,HW,Cs) -> out (B,1,1,Cs), each channel's mean over the HW
// positions (summed in position order, divided by HW); backward: din (B,HW,Cs) = dout / HW.
void gavgpool_nhwc_forward_one(float *out, const float *in, int Cs, int HW);
void gavgpool_nhwc_backward_one(float *din, const float *dout, int Cs, int HW);

// Inverted dropout as dropout_forward on (B,HW,Cs) tensors, forward and backward: channel
// c < C of position p is element c*HW + p of its sample, so masks match the NCHW layout's.
// Pad channels are set to zero. emask as dropout_forward_mask's.
void dropout_nhwc_apply(float *out, const float *in, int B, int C, int Cs, int HW, float rate,
                        uint64_t key, uint32_t emask, const uint32_t *ids, int nthreads);

// Layout changes: (B,C,HW) <-> (B,HW,Cs); to_nhwc zeroes the pad channels.
void nchw_to_nhwc(float *dst, const float *src, int B, int C, int Cs, int HW, int nthreads);
void nhwc_to_nchw(float *dst, const float *src, int B, int C, int Cs, int HW, int nthreads);

#endif
