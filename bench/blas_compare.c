// The SGEMMs hetrain's CPU device runs, through three libraries in one process: OpenBLAS (what
// hetrain links), BLIS (its kernels chosen by CPU features at run time) and oneDNN's
// dnnl_sgemm, each loaded with dlopen from Debian's packages (libopenblas0-openmp,
// libblis4-openmp, libdnnl2). Shapes: the conv GEMMs of ResNet50 at 32x32 and batch 64 as
// `--conv-algo auto` runs them (rows = batch x output positions, columns = output channels,
// sums over C x K x K; forward NT, weight gradient TN, input gradient NN), cnn2's fc1 (batch 50,
// 3136 -> 1024) and a 1024^3 square. Two ways of threading each call: hetrain's (sgemm_split:
// the longer of M and N cut into one block per thread, each block one single-threaded call)
// and the library's own (one call on every thread). The libraries alternate within every round;
// medians of the rounds in GFLOP/s and each against OpenBLAS. Not a test; bench/blas_compare.sh
// builds and runs it.
//   blas_compare [rounds] [threads] [openblas.so] [blis.so] [dnnl.so]
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, long, long, long, float, const float *, long,
                             const float *, long, float, float *, long);

typedef struct lib {
    const char *name;
    cblas_sgemm_fn cblas;
    dnnl_sgemm_fn dnnl;
    void (*set_threads)(long); // BLIS's own count (it would thread inside hetrain's blocks)
} lib;

typedef struct shape {
    const char *what;
    int M, N, K;
    char ta, tb; // 'N' or 'T', row-major
} shape;

static const shape shapes[] = {
    {"resnet50 conv2 1x1 fwd", 4096, 64, 256, 'N', 'T'},
    {"resnet50 conv2 3x3 fwd", 4096, 64, 576, 'N', 'T'},
    {"resnet50 conv2 3x3 dw", 64, 576, 4096, 'T', 'N'},
    {"resnet50 conv2 3x3 din", 4096, 576, 64, 'N', 'N'},
    {"resnet50 conv3 3x3 fwd", 1024, 128, 1152, 'N', 'T'},
    {"resnet50 conv4 3x3 fwd", 256, 256, 2304, 'N', 'T'},
    {"resnet50 conv4 1x1 fwd", 256, 1024, 256, 'N', 'T'},
    {"resnet50 conv5 3x3 fwd", 64, 512, 4608, 'N', 'T'},
    {"resnet50 conv5 3x3 dw", 512, 4608, 64, 'T', 'N'},
    {"cnn2 fc1 fwd", 50, 1024, 3136, 'N', 'T'},
    {"cnn2 fc1 dw", 1024, 3136, 50, 'T', 'N'},
    {"square 1024", 1024, 1024, 1024, 'N', 'N'},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// C (rows [r0, r1) or columns [r0, r1)) = op(A) op(B) through one library call.
static void call(const lib *l, const shape *s, const float *A, const float *B, float *C, int lo,
                 int hi, int split_m) {
    const int lda = s->ta == 'N' ? s->K : s->M, ldb = s->tb == 'N' ? s->N : s->K, ldc = s->N;
    const float *a = A, *b = B;
    float *c = C;
    int M = s->M, N = s->N;
    if (split_m) {
        a = s->ta == 'N' ? A + (size_t)lo * lda : A + lo;
        c = C + (size_t)lo * ldc;
        M = hi - lo;
    } else {
        b = s->tb == 'N' ? B + lo : B + (size_t)lo * ldb;
        c = C + lo;
        N = hi - lo;
    }
    if (l->dnnl)
        l->dnnl(s->ta, s->tb, M, N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    else
        l->cblas(ROW_MAJOR, s->ta == 'N' ? NO_TRANS : TRANS, s->tb == 'N' ? NO_TRANS : TRANS, M, N,
                 s->K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

// One product: hetrain's split (own 1) or the library's threads (own 0); seconds.
static double run(const lib *l, const shape *s, const float *A, const float *B, float *C, int nt,
                  int own) {
    const int split_m = s->M >= s->N, len = split_m ? s->M : s->N, align = 16;
    const int blocks = (len + align - 1) / align, t_n = nt < blocks ? nt : blocks;
    if (own && l->set_threads) l->set_threads(1);
    double t0 = now();
    if (own) {
#pragma omp parallel num_threads(t_n)
        {
            const int t = omp_get_thread_num(), n = omp_get_num_threads();
            int lo = (int)((long)blocks * t / n) * align, hi = (int)((long)blocks * (t + 1) / n) * align;
            if (hi > len) hi = len;
            if (hi > lo) call(l, s, A, B, C, lo, hi, split_m);
        }
    } else {
        call(l, s, A, B, C, 0, split_m ? s->M : s->N, split_m);
    }
    const double t = now() - t0;
    if (own && l->set_threads) l->set_threads(nt);
    return t;
}

static void *open_lib(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fprintf(stderr, "blas_compare: %s: %s (skipped)\n", path, dlerror());
    return h;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 5, nt = argc > 2 ? atoi(argv[2]) : 2;
    const char *paths[3] = {
        argc > 3 ? argv[3] : "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
        argc > 4 ? argv[4] : "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4",
        argc > 5 ? argv[5] : "/usr/lib/x86_64-linux-gnu/libdnnl.so.2"};
    if (rounds < 1 || rounds > 99 || nt < 1) {
        fprintf(stderr, "usage: blas_compare [rounds 1..99] [threads] [openblas] [blis] [dnnl]\n");
        return 2;
    }
    lib libs[3];
    int n_libs = 0;
    static const char *const names[] = {"openblas", "blis", "onednn"};
    for (int i = 0; i < 3; i++) {
        void *h = open_lib(paths[i]);
        if (!h) continue;
        lib l = {names[i], NULL, NULL, NULL};
        if (i == 2) *(void **)&l.dnnl = dlsym(h, "dnnl_sgemm");
        else *(void **)&l.cblas = dlsym(h, "cblas_sgemm");
        if (i == 1) *(void **)&l.set_threads = dlsym(h, "bli_thread_set_num_threads");
        if (!l.cblas && !l.dnnl) {
            fprintf(stderr, "blas_compare: %s has no %s (skipped)\n", paths[i],
                    i == 2 ? "dnnl_sgemm" : "cblas_sgemm");
            continue;
        }
        libs[n_libs++] = l;
    }
    if (n_libs == 0 || strcmp(libs[0].name, "openblas") != 0) {
        fprintf(stderr, "blas_compare: OpenBLAS is the baseline and did not load\n");
        return 1;
    }
    omp_set_num_threads(nt);
    printf("shape,M,N,K,threading,library,gflops_median,gflops_min,gflops_max,vs_openblas\n");
    for (int si = 0; si < N_SHAPES; si++) {
        const shape *s = &shapes[si];
        const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
        if (!A || !B || !C) return 1;
        for (size_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
        const double flop = 2.0 * s->M * s->N * s->K;
        // Repetitions per timing: about 20 ms of work at 50 GFLOP/s.
        const int reps = flop > 1e9 ? 1 : (int)(1e9 / flop) < 1 ? 1 : (int)(1e9 / flop);
        for (int own = 1; own >= 0; own--) {
            double g[3][99];
            for (int r = -1; r < rounds; r++) // r = -1: warm-up
                for (int k = 0; k < n_libs; k++) {
                    const int li = (r + k + 3) % n_libs; // a different library first each round
                    double t = 0;
                    for (int i = 0; i < reps; i++) t += run(&libs[li], s, A, B, C, nt, own);
                    if (r >= 0) g[li][r] = flop * reps / t / 1e9;
                }
            double base = 0;
            for (int li = 0; li < n_libs; li++) {
                qsort(g[li], (size_t)rounds, sizeof(double), cmp_double);
                const double med = g[li][rounds / 2];
                if (li == 0) base = med;
                printf("%s,%d,%d,%d,%s,%s,%.1f,%.1f,%.1f,%.2f\n", s->what, s->M, s->N, s->K,
                       own ? "split" : "library", libs[li].name, med, g[li][0],
                       g[li][rounds - 1], med / base);
            }
            fflush(stdout);
        }
        free(A), free(B), free(C);
    }
    return 0;
}
