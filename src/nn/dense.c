// Fully connected layer, out = in * W^T + b with W in PyTorch's (OUT,IN) layout. The GEMMs are
// split across at most nthreads OpenMP threads, each running a single-threaded SGEMM on its
// block, so the thread count is exactly what the caller asked for.
#include "layers.h"

#include <cblas.h>
#include "ht_omp.h"
#include <string.h>

// Rows or columns of C are handed out in blocks of this many, matching SGEMM's register tiles.
#define DENSE_SPLIT_ALIGN 16

// Row-major C (M x N) = op(A) * op(B) + beta*C, split along the longer of M and N.
static void sgemm_split(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                        const float *A, int lda, const float *Bm, int ldb, float beta, float *Cm,
                        int ldc, int nthreads) {
    const int split_m = M >= N, len = split_m ? M : N;
    const int blocks = (len + DENSE_SPLIT_ALIGN - 1) / DENSE_SPLIT_ALIGN;
    if (nthreads > blocks) nthreads = blocks;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads)
    {
        // A team of one is not "in parallel" to OpenBLAS, which would then start its own
        // threads; pin this task's BLAS calls to one thread either way.
        omp_set_num_threads(1);
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int lo = (int)((long)blocks * t / nt) * DENSE_SPLIT_ALIGN;
        int hi = (int)((long)blocks * (t + 1) / nt) * DENSE_SPLIT_ALIGN;
        if (hi > len) hi = len;
        if (hi > lo) {
            if (split_m) {
                const float *a = ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo;
                cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, 1.0f, a, lda, Bm, ldb, beta,
                            Cm + (size_t)lo * ldc, ldc);
            } else {
                const float *bm = tb == CblasNoTrans ? Bm + lo : Bm + (size_t)lo * ldb;
                cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, 1.0f, A, lda, bm, ldb, beta,
                            Cm + lo, ldc);
            }
        }
    }
}

void dense_forward(float *out, const float *in, const float *w, const float *b, int B, int IN,
                   int OUT, int nthreads) {
    for (int i = 0; i < B; i++) {
        if (b) memcpy(out + (size_t)i * OUT, b, (size_t)OUT * sizeof *out);
        else memset(out + (size_t)i * OUT, 0, (size_t)OUT * sizeof *out);
    }
    sgemm_split(CblasNoTrans, CblasTrans, B, OUT, IN, in, IN, w, IN, 1.0f, out, OUT, nthreads);
}

void dense_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                    const float *w, int B, int IN, int OUT, int nthreads) {
    dense_backward_beta(din, dw, db, dout, in, w, B, IN, OUT, 1.0f, nthreads);
}

void dense_backward_beta(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int B, int IN, int OUT, float beta, int nthreads) {
    // dw (OUT x IN) = beta * dw + dout^T (OUT x B) * in (B x IN)
    sgemm_split(CblasTrans, CblasNoTrans, OUT, IN, B, dout, OUT, in, IN, beta, dw, IN, nthreads);
    if (db && beta == 0.0f) memset(db, 0, sizeof(float) * (size_t)OUT);
    for (int i = 0; db && i < B; i++) {
        const float *g = dout + (size_t)i * OUT;
        for (int o = 0; o < OUT; o++) db[o] += g[o];
    }
    // din (B x IN) = dout (B x OUT) * w (OUT x IN)
    if (din)
        sgemm_split(CblasNoTrans, CblasNoTrans, B, IN, OUT, dout, OUT, w, IN, 0.0f, din, IN,
                    nthreads);
}
