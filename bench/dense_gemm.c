// Microbenchmark of the dense layer's three GEMMs on fc1's shapes in cnn2 (batch 50, 3136 ->
// 1024): forward NT, weight gradient TN (beta 0) and input gradient NN, each split the way
// dense.c's sgemm_split once split every GEMM (split16: the longer of M and N in blocks of 16)
// and in the alternatives below, alternated round by round in one process. Prints each way's
// median milliseconds, marking ways whose bits differ from split16's. dense.c now takes split16
// for the forward pass, splitM for the weight gradient and split64 for the input gradient. Not
// a test: build with `cmake --build build --target bench_dense_gemm`, run
// `build/bench_dense_gemm [rounds] [threads] [ways]`.
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Rows [lo, hi) of C (split_m) or its columns [lo, hi), by one single-threaded SGEMM.
static void block(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
                  int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc, int lo,
                  int hi, int split_m) {
    if (split_m) {
        const float *a = ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo;
        cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, 1.0f, a, lda, Bm, ldb, beta,
                    Cm + (size_t)lo * ldc, ldc);
    } else {
        const float *bm = tb == CblasNoTrans ? Bm + lo : Bm + (size_t)lo * ldb;
        cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, 1.0f, A, lda, bm, ldb, beta, Cm + lo,
                    ldc);
    }
}

// The longer of M and N (force 0), or M (1) or N (2), in blocks of `align`.
static void split(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
                  int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc, int nthreads,
                  int align, int force /* 0 longer, 1 M, 2 N */) {
    const int split_m = force ? force == 1 : M >= N, len = split_m ? M : N;
    const int blocks = (len + align - 1) / align;
    if (nthreads > blocks) nthreads = blocks;
#pragma omp parallel num_threads(nthreads)
    {
        omp_set_num_threads(1);
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int lo = (int)((long)blocks * t / nt) * align, hi = (int)((long)blocks * (t + 1) / nt) * align;
        if (hi > len) hi = len;
        if (hi > lo) block(ta, tb, M, N, K, A, lda, Bm, ldb, beta, Cm, ldc, lo, hi, split_m);
    }
}

// OpenBLAS threading the call itself.
static void blas_mt(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
                    int lda, const float *Bm, int ldb, float beta, float *Cm, int ldc, int nthreads) {
    omp_set_num_threads(nthreads);
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc);
}

// Each thread's part in chunks of `chunk` columns/rows, interleaved (cache-sized pieces).
static void split_chunks(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                         const float *A, int lda, const float *Bm, int ldb, float beta, float *Cm,
                         int ldc, int nthreads, int chunk, int split_m) {
    const int len = split_m ? M : N, nch = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int c = 0; c < nch; c++) {
        omp_set_num_threads(1);
        int lo = c * chunk, hi = lo + chunk < len ? lo + chunk : len;
        block(ta, tb, M, N, K, A, lda, Bm, ldb, beta, Cm, ldc, lo, hi, split_m);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { B = 50, IN = 3136, OUT = 1024, NV = 10 };
static const char *names[NV] = {"split16", "split32",     "split64",   "splitM",
                                "splitN",        "openblas-mt", "chunk256",  "chunk512",
                                "chunkM128",     "chunkM256"};

static void run(int g, int v, float *in, float *w, float *out, float *dout, float *dw, float *din,
                int nt) {
    CBLAS_TRANSPOSE ta, tb;
    int M, N, K, lda, ldb, ldc;
    const float *A, *Bm;
    float *C, beta;
    if (g == 0) { // out (B x OUT) = in . W^T
        ta = CblasNoTrans, tb = CblasTrans, M = B, N = OUT, K = IN, A = in, lda = IN, Bm = w,
        ldb = IN, C = out, ldc = OUT, beta = 1.0f;
    } else if (g == 1) { // dW (OUT x IN) = dout^T . in
        ta = CblasTrans, tb = CblasNoTrans, M = OUT, N = IN, K = B, A = dout, lda = OUT, Bm = in,
        ldb = IN, C = dw, ldc = IN, beta = 0.0f;
    } else { // din (B x IN) = dout . W
        ta = CblasNoTrans, tb = CblasNoTrans, M = B, N = IN, K = OUT, A = dout, lda = OUT, Bm = w,
        ldb = IN, C = din, ldc = IN, beta = 0.0f;
    }
    switch (v) {
    case 0: split(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 16, 0); break;
    case 1: split(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 32, 0); break;
    case 2: split(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 64, 0); break;
    case 3: split(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 16, 1); break;
    case 4: split(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 16, 2); break;
    case 5: blas_mt(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt); break;
    case 6: split_chunks(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 256, 0); break;
    case 7: split_chunks(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 512, 0); break;
    case 8: split_chunks(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 128, 1); break;
    case 9: split_chunks(ta, tb, M, N, K, A, lda, Bm, ldb, beta, C, ldc, nt, 256, 1); break;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 30, nt = argc > 2 ? atoi(argv[2]) : 2;
    // argv[3]: the ways to run, as a string of digits (default all), e.g. "06".
    int use[NV] = {0};
    for (int v = 0; v < NV; v++) use[v] = argc <= 3 || strchr(argv[3], '0' + v) != NULL;
    float *in = malloc(sizeof(float) * B * IN), *w = malloc(sizeof(float) * OUT * IN);
    float *out = malloc(sizeof(float) * B * OUT), *dout = malloc(sizeof(float) * B * OUT);
    float *dw = malloc(sizeof(float) * OUT * IN), *din = malloc(sizeof(float) * B * IN);
    for (size_t i = 0; i < (size_t)B * IN; i++) in[i] = (float)((i * 7919) % 1000) / 1000.0f;
    for (size_t i = 0; i < (size_t)OUT * IN; i++) w[i] = (float)((i * 104729) % 2000) / 1e5f - 0.01f;
    for (size_t i = 0; i < (size_t)B * OUT; i++) dout[i] = (float)((i * 31) % 100) / 1e4f;
    memset(out, 0, sizeof(float) * B * OUT);
    const char *gname[3] = {"forward NT  50x1024x3136", "dW TN 1024x3136x50  ",
                            "din NN 50x3136x1024 "};
    double *t = malloc(sizeof(double) * rounds * NV);
    for (int g = 0; g < 3; g++) {
        for (int r = -2; r < rounds; r++)
            for (int v = 0; v < NV; v++) {
                if (!use[v]) continue;
                double t0 = now();
                run(g, v, in, w, out, dout, dw, din, nt);
                double dt = now() - t0;
                if (r >= 0) t[v * rounds + r] = dt;
            }
        // Which ways give the same bits as the current one.
        const size_t nc = g == 0 ? (size_t)B * OUT : g == 1 ? (size_t)OUT * IN : (size_t)B * IN;
        float *c = g == 0 ? out : g == 1 ? dw : din, *ref = malloc(sizeof(float) * nc);
        int same[NV];
        for (int v = 0; v < NV; v++) {
            if (g == 0) memset(out, 0, sizeof(float) * nc);
            run(g, v, in, w, out, dout, dw, din, nt);
            if (v == 0) memcpy(ref, c, sizeof(float) * nc);
            same[v] = !memcmp(ref, c, sizeof(float) * nc);
        }
        free(ref);
        printf("%s:", gname[g]);
        for (int v = 0; v < NV; v++) {
            if (!use[v]) continue;
            qsort(t + v * rounds, rounds, sizeof *t, cmp);
            printf(" %s %.3f ms%s;", names[v], 1e3 * t[v * rounds + rounds / 2],
                   same[v] ? "" : " (other bits)");
        }
        printf("\n");
    }
    free(t), free(in), free(w), free(out), free(dout), free(dw), free(din);
    return 0;
}
