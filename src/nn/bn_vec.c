// Batch normalisation's passes over channels-last rows (batchnorm.h's bn_train_forward and the
// rest; pad channels stay zero), compiled once per instruction set (isa_fns.h) and, unlike the
// other copies, threaded inside (over groups or rows, as before). The statistics are summed in
// double, per channel along the rows, so the compiler's vectors run across the channels and
// every set gives the same bits; the wider sets take 8 doubles a vector where the portable
// build's SSE2 takes 2. MobileNetV2's batchnorm passes, alternating runs on a Zen 4: 0.22 and
// 0.35 s over 20 steps before, 0.18 and 0.21 after; ResNet-20's (16 to 64 channels) the same
// within the noise. batchnorm.c calls it through isa_kernels_active().
#include "nn/isa_fns.h"

#include "core/ht_omp.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// Adds, per channel, the sums of (x - k) and of its square over `rows` rows from y into a1, a2,
// in double, row by row.
static inline void add_shifted_sums(double *a1, double *a2, const double *k, const float *y,
                                    size_t rows, int C, int cs) {
    for (size_t r = 0; r < rows; r++) {
        const float *x = y + r * cs;
        for (int c = 0; c < C; c++) {
            double d = (double)x[c] - k[c];
            a1[c] += d;
            a2[c] += d * d;
        }
    }
}

// One sample's sums for its group's statistics (batchnorm.h's bn_sample_parts): per channel its
// first row's value k, then the sums of (x - k) and of its square over the rows, in double.
void bn_vec_sample_parts(double *part, const float *y, size_t rows, int C, int cs) {
    double *k = part, *a1 = part + C, *a2 = part + 2 * C;
    for (int c = 0; c < C; c++) a1[c] = a2[c] = 0, k[c] = y[c];
    add_shifted_sums(a1, a2, k, y, rows, C, cs);
}

// Per (group, channel): mean, biased variance, 1/sqrt(var + eps) into stats (3 * C per group).
// parts: each sample's sums (bn_vec_sample_parts), taken in sample order for the group's, in
// place of the pass over the rows.
void bn_vec_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                          float *stats, int B, int P, int C, int cs, int G, float eps, int relu,
                          const double *parts, int nthreads) {
    const int ng = (B + G - 1) / G;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads)
    {
        double *acc = malloc(sizeof(double) * 3 * (size_t)C);
#pragma omp for schedule(static)
        for (int g = 0; g < ng; g++) {
            if (!acc) continue;
            const int s0 = g * G, s1 = s0 + G < B ? s0 + G : B;
            const size_t r0 = (size_t)s0 * P, r1 = (size_t)s1 * P;
            const double R = (double)(r1 - r0);
            // One pass of sums shifted by each channel's first value (which keeps the
            // variance's cancellation to the data's spread, not its mean), in double.
            double *a1 = acc, *a2 = acc + C, *k = acc + 2 * C;
            for (int c = 0; c < C; c++) a1[c] = a2[c] = 0, k[c] = in[r0 * cs + c];
            if (parts) {
                // A sample's sums about its own first value k_s, moved to the group's k:
                // sum(x - k) = a1 + n d, sum((x - k)^2) = a2 + 2 d a1 + n d^2, d = k_s - k.
                const double n = (double)P;
                for (int s = s0; s < s1; s++) {
                    const double *ks = parts + (size_t)s * 3 * C, *b1 = ks + C, *b2 = ks + 2 * C;
                    for (int c = 0; c < C; c++) {
                        const double d = ks[c] - k[c];
                        a1[c] += b1[c] + n * d;
                        a2[c] += b2[c] + 2.0 * d * b1[c] + n * d * d;
                    }
                }
            } else {
                add_shifted_sums(a1, a2, k, in + r0 * cs, r1 - r0, C, cs);
            }
            float *st = stats + (size_t)g * 3 * C;
            for (int c = 0; c < C; c++) {
                double m = a1[c] / R, var = a2[c] / R - m * m;
                if (var < 0) var = 0;
                st[c] = (float)(k[c] + m);
                st[C + c] = (float)var;
                st[2 * C + c] = (float)(1.0 / sqrt(var + (double)eps));
            }
            for (size_t r = r0; r < r1; r++) {
                const float *x = in + r * cs;
                float *y = out + r * cs;
                for (int c = 0; c < C; c++) {
                    float xh = (x[c] - st[c]) * st[2 * C + c];
                    y[c] = (gamma ? gamma[c] : 1.0f) * xh + (beta ? beta[c] : 0.0f);
                }
                if (relu)
                    for (int c = 0; c < C; c++) y[c] = y[c] > 0.0f ? y[c] : 0.0f;
                for (int c = C; c < cs; c++) y[c] = 0.0f;
            }
        }
        free(acc);
    }
}

void bn_vec_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                          const float *mean, const float *var, size_t rows, int C, int cs, float eps,
                          int relu, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (rows * (size_t)cs >= 32768)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * cs;
        float *y = out + r * cs;
        for (int c = 0; c < C; c++) {
            float inv = 1.0f / sqrtf(var[c] + eps);
            y[c] = (gamma ? gamma[c] : 1.0f) * ((x[c] - mean[c]) * inv) + (beta ? beta[c] : 0.0f);
        }
        if (relu)
            for (int c = 0; c < C; c++) y[c] = y[c] > 0.0f ? y[c] : 0.0f;
        for (int c = C; c < cs; c++) y[c] = 0.0f;
    }
}

// dy with the fused ReLU's mask (where its output is 0 the gradient stops), into d.
static inline void masked_row(float *d, const float *dy, const float *relu_out, int C) {
    if (!relu_out) {
        for (int c = 0; c < C; c++) d[c] = dy[c];
        return;
    }
    relu_mask(d, dy, relu_out, (size_t)C);
}

void bn_vec_frozen_backward(float *din, const float *dout, const float *gamma, const float *var,
                            const float *relu_out, size_t rows, int C, int cs, float eps,
                            int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (rows * (size_t)cs >= 32768)
    for (size_t r = 0; r < rows; r++) {
        float *dx = din + r * cs;
        masked_row(dx, dout + r * cs, relu_out ? relu_out + r * cs : NULL, C);
        for (int c = 0; c < C; c++) dx[c] *= (gamma ? gamma[c] : 1.0f) / sqrtf(var[c] + eps);
        for (int c = C; c < cs; c++) dx[c] = 0.0f;
    }
}

// The input gradient over rows of one group (batchnorm.h's bn_dx_rows): st its statistics, cf
// its coefficients (k = gamma/sqrt(var+eps), the means m1 of the masked gradient and m2 of it
// times x^, C floats each), in float as the pass computes them.
void bn_vec_dx_rows(float *din, const float *dout, const float *relu_out, const float *in,
                    const float *st, const float *cf, size_t rows, int C, int cs) {
    const float *mean = st, *inv = st + 2 * C, *kk = cf, *m1 = cf + C, *m2 = cf + 2 * C;
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * cs, *dy = dout + r * cs;
        const float *ro = relu_out ? relu_out + r * cs : NULL;
        float *dx = din + r * cs;
        if (ro)
            for (int c = 0; c < C; c++) {
                const float xh = (x[c] - mean[c]) * inv[c];
                dx[c] = kk[c] * (keep_if(ro[c] > 0.0f, dy[c]) - m1[c] - xh * m2[c]);
            }
        else
            for (int c = 0; c < C; c++) {
                const float xh = (x[c] - mean[c]) * inv[c];
                dx[c] = kk[c] * (dy[c] - m1[c] - xh * m2[c]);
            }
        for (int c = C; c < cs; c++) dx[c] = 0.0f;
    }
}

// coef (not NULL): each group's coefficients (3 * C floats a group, bn_vec_dx_rows's cf) in
// place of the pass that writes din.
int bn_vec_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                          const float *dout, const float *in, const float *gamma, const float *stats,
                          const float *relu_out, int B, int P, int C, int cs, int G, float *coef,
                          int nthreads) {
    const int ng = (B + G - 1) / G;
    double *sums = malloc(sizeof(double) * 2 * (size_t)C * (size_t)ng);
    if (!sums) return -1;
    if (nthreads < 1) nthreads = 1;
    int failed = 0;
#pragma omp parallel num_threads(nthreads) reduction(| : failed)
    {
        // A row of the masked gradient, and per channel k = gamma/sqrt(var+eps) and the two
        // means of the group, in float for the elementwise pass.
        float *d = malloc(sizeof(float) * 4 * (size_t)C), *cf = d + C; // cf: 3 * C
        failed = !d;
#pragma omp for schedule(static)
        for (int g = 0; g < ng; g++) {
            if (!d) continue;
            const int s0 = g * G, s1 = s0 + G < B ? s0 + G : B;
            const size_t r0 = (size_t)s0 * P, r1 = (size_t)s1 * P;
            const double R = (double)(r1 - r0);
            const float *st = stats + (size_t)g * 3 * C, *mean = st, *inv = st + 2 * C;
            double *sdy = sums + (size_t)g * 2 * C, *sdx = sdy + C;
            for (int c = 0; c < C; c++) sdy[c] = sdx[c] = 0;
            for (size_t r = r0; r < r1; r++) {
                const float *x = in + r * cs;
                masked_row(d, dout + r * cs, relu_out ? relu_out + r * cs : NULL, C);
                for (int c = 0; c < C; c++) {
                    sdy[c] += d[c];
                    sdx[c] += (double)d[c] * ((x[c] - mean[c]) * inv[c]);
                }
            }
            if (!din && !coef) continue;
            float *k = coef ? coef + (size_t)g * 3 * C : cf;
            for (int c = 0; c < C; c++) {
                k[c] = (float)((gamma ? gamma[c] : 1.0) * inv[c]);
                k[C + c] = (float)(sdy[c] / R);
                k[2 * C + c] = (float)(sdx[c] / R);
            }
            if (din)
                bn_vec_dx_rows(din + r0 * cs, dout + r0 * cs, relu_out ? relu_out + r0 * cs : NULL,
                               in + r0 * cs, st, k, r1 - r0, C, cs);
        }
        free(d);
    }
    if (failed) {
        free(sums);
        return -1;
    }
    // The groups' sums in group order: the same bits for any thread count.
    for (int g = 0; g < ng; g++) {
        const double *sdy = sums + (size_t)g * 2 * C, *sdx = sdy + C;
        const float *st = stats + (size_t)g * 3 * C;
        for (int c = 0; c < C; c++) {
            if (dgamma) dgamma[c] += (float)sdx[c];
            if (dbeta) dbeta[c] += (float)sdy[c];
            state_sums[c] += st[c];
            state_sums[C + c] += st[C + c];
        }
        state_sums[2 * C] += 1.0f;
    }
    free(sums);
    return 0;
}
