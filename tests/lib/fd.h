// Finite-difference checks of the layer math (test_layers_*.c): the step, the tolerances, and
// the helpers that perturb one value at a time and compare the quotients with an analytic
// gradient.
#ifndef HETRAIN_TEST_FD_H
#define HETRAIN_TEST_FD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/rng.h"
#include "tests/lib/testutil.h"

// Central-difference step. A power of two, and the true step (x+h)-(x-h) is measured after
// rounding, so the quotient's only error is float rounding in the forward pass.
#define FD_EPS (1.0 / 64)
// Relative-error tolerances, against max(|analytic|, |numeric|, FD_FLOOR). Conv, dense, relu,
// dropout and maxpool are piecewise linear, so the difference quotient is exact up to the
// forward pass's float rounding (~1e-6 of L divided by 2*FD_EPS); softmax and the smooth
// activations add a truncation error of order FD_EPS^2. Worst observed: 2.1e-4 (dense), 1.7e-4
// (conv), 1.5e-4 (softmax), 3.0e-4 (gelu).
#define FD_FLOOR 0.1f
#define TOL_CONV_FD 2e-3f
#define TOL_POOL_FD 2e-3f
#define TOL_DENSE_FD 2e-3f
#define TOL_ACT_FD 2e-3f
#define TOL_XENT_FD 5e-3f
// ref_conv2d_forward and dense_forward against a double-precision direct loop. Outputs sum up to
// 50 products of magnitude <= 1 (|terms| adding up to ~12), and float sums in another order
// (SIMD width, BLAS blocking: both depend on the CPU) differ from the exact one by ~1e-7 of
// that each: measured up to 5.3e-7 absolute (dense under OpenBLAS's Prescott kernel, 2.7e-7
// under the default one). Relative to max(|out|, REF_FLOOR): a floor of 0.1 left 2x room.
#define TOL_CONV_REF 1e-5f
#define REF_FLOOR 1.0f
// nthreads=1 vs nthreads=2. out and din are computed per sample by the same single-threaded
// calls either way (observed: bit-identical); dw/db differ in the order the per-thread sums are
// added, a few ulps (observed 4.8e-7), so they get twice the room.
#define TOL_THREADS 1e-6f
#define TOL_THREADS_SUM 2e-6f
// A weight gradient summed over many rows in another order (the 1x1 GEMM's chunks of 512 rows
// against the reference's one SGEMM over the batch): sums of up to 768 products of magnitude
// <= 1, |sum| ~ 10, round to ~1e-6 of it each way.
#define TOL_GEMM_SUM 2e-5f
// Accumulate checks: (dw2 - dw0) vs 2 (dw1 - dw0) differ by a few float roundings.
#define TOL_ACCUM 1e-5f

// ---- helpers ----

static inline float *fill_uniform(size_t n, float lo, float hi, uint64_t seed) {
    float *p = malloc(n * sizeof *p);
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * ht_rng_double(&r));
    return p;
}

// Uniform in +-[0.1, 1]: keeps relu inputs away from its kink at 0 by much more than FD_EPS.
static inline float *fill_away_from_zero(size_t n, uint64_t seed) {
    float *p = fill_uniform(n, 0.1f, 1.0f, seed);
    ht_rng r;
    ht_rng_seed(&r, seed ^ 0x55);
    for (size_t i = 0; i < n; i++)
        if (ht_rng_next(&r) & 1) p[i] = -p[i];
    return p;
}

static inline double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static inline float max_abs(const float *a, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

// A scalar loss of the current parameters, evaluated by running a forward pass.
typedef double (*loss_fn)(void *ctx);

// num[j] = dL/dp[j] by central differences. Ends with a forward pass at the unperturbed point,
// so the context's outputs are current again.
// The same with differences of step h (a function curving sharply at FD_EPS's scale, such as a
// layer normalisation over a few channels of small spread).
static inline void fd_grad_step(float *num, float *p, size_t n, loss_fn f, void *ctx, double h) {
    for (size_t j = 0; j < n; j++) {
        const float x = p[j];
        p[j] = (float)(x + h);
        const double hp = p[j], lp = f(ctx);
        p[j] = (float)(x - h);
        const double hm = p[j], lm = f(ctx);
        p[j] = x;
        num[j] = (float)((lp - lm) / (hp - hm));
    }
    f(ctx);
}

static inline void fd_grad(float *num, float *p, size_t n, loss_fn f, void *ctx) {
    fd_grad_step(num, p, n, f, ctx, FD_EPS);
}

// Compares analytic with numeric, and refuses a vacuous check where both are ~0.
static inline void expect_grad(const float *ana, const float *num, size_t n, float tol,
                        const char *name) {
    if (!(max_abs(num, n) > 0.05f)) fail_msg("%s: a vacuous check, max %g", name, (double)max_abs(num, n));
    if (!check_tensor(ana, num, n, tol, FD_FLOOR, name)) fail_msg("%s: gradient mismatch", name);
}


#endif
