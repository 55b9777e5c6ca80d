// Fully connected layer, out = in * W^T + b with W in PyTorch's (OUT,IN) layout. The GEMMs are
// split across at most nthreads OpenMP threads, each running a single-threaded SGEMM on its
// block, so the thread count is exactly what the caller asked for.
#include "nn/layers.h"

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

#include <cblas.h>
#include "core/ht_omp.h"
#include <string.h>

// Rows or columns of C are handed out in blocks of a multiple of this many, matching SGEMM's
// register tiles.
#define DENSE_SPLIT_ALIGN 16

// One thread's block of C: OpenBLAS's SGEMM or the bfloat16 GEMM.
static void gemm_block(gemm_prec prec, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N,
                       int K, const float *A, int lda, const float *Bm, int ldb, float beta,
                       float *Cm, int ldc) {
    if (prec == GEMM_BF16) gemm_bf16(ta, tb, M, N, K, A, lda, Bm, ldb, beta, Cm, ldc);
    else cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc);
}

// How sgemm_split divides C among the threads (layers.h): timed on fc1 of cnn2 at batch 50 on 2
// threads (bench/dense_gemm.c; bench/README.md has the figures): the weight gradient (1024 x
// 3136, K = 50) is quicker split by rows than by columns, the input gradient (50 x 3136, K =
// 1024) in column blocks of 64 than of 16; the forward pass gains nothing.
void gemm_split(gemm_prec prec, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                const float *A, int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc,
                int nthreads, split_dim dim, int align) {
    // bfloat16's packing of a factor is paid by every thread that reads all of it: split the
    // longer side, so that each packs its part of the larger factor (its sums' order, hence
    // its bits, do not change with the split).
    if (prec == GEMM_BF16) dim = SPLIT_LONGER;
    const int split_m = dim == SPLIT_M || M >= N, len = split_m ? M : N;
    const int blocks = (len + align - 1) / align;
    if (nthreads > blocks) nthreads = blocks;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads)
    {
        // A team of one is not "in parallel" to OpenBLAS, which would then start its own
        // threads; pin this task's BLAS calls to one thread either way.
        omp_set_num_threads(1);
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int lo = (int)((long)blocks * t / nt) * align;
        int hi = (int)((long)blocks * (t + 1) / nt) * align;
        if (hi > len) hi = len;
        if (hi > lo) {
            if (split_m) {
                const float *a = ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo;
                gemm_block(prec, ta, tb, hi - lo, N, K, a, lda, Bm, ldb, beta,
                           Cm + (size_t)lo * ldc, ldc);
            } else {
                const float *bm = tb == CblasNoTrans ? Bm + lo : Bm + (size_t)lo * ldb;
                gemm_block(prec, ta, tb, M, hi - lo, K, A, lda, bm, ldb, beta, Cm + lo, ldc);
            }
        }
    }
}

void dense_forward(float *out, const float *in, const float *w, const float *b, int B, int IN,
                   int OUT, int nthreads) {
    dense_forward_p(out, in, w, b, B, IN, OUT, nthreads, GEMM_F32);
}

void dense_forward_p(float *out, const float *in, const float *w, const float *b, int B, int IN,
                     int OUT, int nthreads, gemm_prec prec) {
    for (int i = 0; i < B; i++) {
        if (b) memcpy(out + (size_t)i * OUT, b, (size_t)OUT * sizeof *out);
        else memset(out + (size_t)i * OUT, 0, (size_t)OUT * sizeof *out);
    }
    gemm_split(gemm_prec_for(prec, OUT, OUT), CblasNoTrans, CblasTrans, B, OUT, IN, in, IN, w,
               IN, 1.0f, out, OUT, nthreads, SPLIT_LONGER, DENSE_SPLIT_ALIGN);
}

void dense_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                    const float *w, int B, int IN, int OUT, int nthreads) {
    dense_backward_beta(din, dw, db, dout, in, w, B, IN, OUT, 1.0f, nthreads, GEMM_F32);
}

void dense_weight_grad(float *dw, const float *dout, const float *in, int B, int IN, int OUT,
                       float beta, int nthreads, gemm_prec prec) {
    // dw (OUT x IN) = beta * dw + dout^T (OUT x B) * in (B x IN): by rows (each thread's part
    // of dw one contiguous range) where every thread gets at least 64 of them.
    const split_dim dw_dim = OUT >= 64 * (nthreads > 1 ? nthreads : 1) ? SPLIT_M : SPLIT_LONGER;
    gemm_split(gemm_prec_for(prec, OUT, IN), CblasTrans, CblasNoTrans, OUT, IN, B, dout, OUT, in,
               IN, beta, dw, IN, nthreads, dw_dim, DENSE_SPLIT_ALIGN);
}

void dense_backward_beta(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int B, int IN, int OUT, float beta, int nthreads,
                         gemm_prec prec) {
    dense_weight_grad(dw, dout, in, B, IN, OUT, beta, nthreads, prec);
    if (db && beta == 0.0f) memset(db, 0, sizeof(float) * (size_t)OUT);
    for (int i = 0; db && i < B; i++) {
        const float *g = dout + (size_t)i * OUT;
        for (int o = 0; o < OUT; o++) db[o] += g[o];
    }
    // din (B x IN) = dout (B x OUT) * w (OUT x IN): the longer side, columns in blocks of 64.
    if (din)
        gemm_split(gemm_prec_for(prec, IN, IN), CblasNoTrans, CblasNoTrans, B, IN, OUT, dout, OUT,
                   w, IN, 0.0f, din, IN, nthreads, SPLIT_LONGER,
                   B >= IN ? DENSE_SPLIT_ALIGN : 4 * DENSE_SPLIT_ALIGN);
}

// ---- the dense family: its description (layer_desc.h) and CPU ops (net_layers.h) ----

static int dense_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                       ht_error *err) {
    (void)n_classes;
    if (s->units < 1 || s->units > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (%s): units %d: expected 1..%d", idx, d->name, s->units,
                       MODEL_MAX_DIM);
    L->c = (int)layer_in_size(L), L->h = 1, L->w = 1; // flattens its input
    L->oc = s->units, L->oh = 1, L->ow = 1;
    L->n_w = (size_t)L->oc * L->c;
    L->n_b = s->no_bias ? 0 : (size_t)L->oc;
    return 0;
}

static int dense_weight_shape(const layer *L, int64_t *shape) {
    shape[0] = L->oc, shape[1] = (int64_t)L->c * L->h * L->w;
    return 2;
}

static double dense_macs(const layer *L) { return (double)L->c * L->oc; }

static const layer_key dense_keys[] = {
    LK_ROW("units", NULL, LK_INT, LK_REQUIRED, units, 1, 65536),
    LK_WEIGHT_ROWS,
    LK_END,
};
static const char *const dense_sections[] = {"connected", NULL}; // darknet's
static const layer_keras_var dense_keras_vars[] = {
    {"kernel", 0, TENSOR_TRAINABLE, LKW_DENSE, 1},
    {"bias", 1, TENSOR_TRAINABLE, LKW_SAME, 0},
};

// Keras's Dense initialises its kernel lecun_uniform.
static void dense_config_defaults(layer_spec *s, const char *section) {
    (void)section;
    s->w_init = INIT_LECUN_UNIFORM;
}

const layer_family family_dense = {
    .name = "dense", .flags = LF_PARAMS | LF_FLAT | LF_KERNEL | LF_OUT_FREE, .keys = dense_keys,
    .sections = dense_sections, .config_defaults = dense_config_defaults, .shape = dense_shape,
    .weight_shape = dense_weight_shape, .macs = dense_macs, .keras_vars = dense_keras_vars,
    .n_keras_vars = 2};

static void dense_fwd(const net_call *c) {
    dense_forward_p(c->out, c->in, c->params + c->L->w_off, net_bias(c->params, c->L), c->B,
                    (int)layer_in_size(c->L), c->L->oc, c->nt, c->prec);
}
static float *dense_bwd(const net_call *c) {
    dense_backward_beta(c->din, c->grads + c->L->w_off, net_bias(c->grads, c->L), c->dout, c->in,
                        c->params + c->L->w_off, c->B, (int)layer_in_size(c->L), c->L->oc,
                        c->beta, c->nt, c->prec);
    return c->din;
}

// Never in the per-sample trunk: its input is flat.
const net_layer_ops cpu_dense = {.forward = dense_fwd, .backward = dense_bwd,
                                 .flags = NET_OP_FACTORS};
