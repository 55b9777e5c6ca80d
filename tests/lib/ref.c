// The reference layer math and network walker (ref.h). Convolution: im2col + SGEMM, parallel
// over samples; each thread owns one slice of the scratch buffer (its im2col matrix and, for
// backward, its own dw/db accumulators). Max pooling: parallel over (sample, channel) planes,
// each output remembering which input won so backward can route the gradient there.
#include "tests/lib/ref.h"
#include "tests/lib/ref_int.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ht_omp.h"
#include "core/rng.h"
#include "nn/batchnorm.h"
#include "nn/layer_desc.h"
#include "nn/layers.h"

// ---- convolution ----------------------------------------------------------------------------

// A thread's slice: col (CKK x OH*OW), then dw (OC x CKK), then db (OC). Rounded up to a
// 64-byte multiple so that no two threads write into the same cache line.
static size_t slice_floats(int C, int K, int OC, int OH, int OW) {
    size_t ckk = (size_t)C * K * K;
    size_t n = ckk * OH * OW + (size_t)OC * ckk + (size_t)OC;
    return (n + 15) & ~(size_t)15;
}

size_t ref_conv2d_ws_floats(int C, int K, int OC, int OH, int OW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return (size_t)nthreads * slice_floats(C, K, OC, OH, OW);
}

// Output columns [*lo, *hi) whose tap kw lands inside the image (0 <= ow*stride-pad+kw < W);
// the others read padding.
static void tap_range(int kw, int stride, int pad, int W, int OW, int *lo, int *hi) {
    int d = pad - kw, x = W - 1 + pad - kw;
    int l = d <= 0 ? 0 : (d + stride - 1) / stride;
    int h = x < 0 ? 0 : x / stride + 1;
    if (l > OW) l = OW;
    if (h > OW) h = OW;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

// col row (c,kh,kw) holds, for each output position, the input pixel that tap sees (zero in
// the padding). Rows are written front to back so stores stay contiguous.
static void im2col(float *col, const float *in, int C, int H, int W, int K, int stride,
                   int pad, int OH, int OW) {
    for (int c = 0; c < C; c++) {
        const float *plane = in + (size_t)c * H * W;
        for (int kh = 0; kh < K; kh++) {
            for (int kw = 0; kw < K; kw++) {
                int lo, hi;
                tap_range(kw, stride, pad, W, OW, &lo, &hi);
                float *dst = col + ((size_t)(c * K + kh) * K + kw) * OH * OW;
                for (int oh = 0; oh < OH; oh++, dst += OW) {
                    int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) {
                        memset(dst, 0, (size_t)OW * sizeof *dst);
                        continue;
                    }
                    const float *src = plane + (size_t)ih * W;
                    for (int ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
                    if (stride == 1) {
                        if (hi > lo)
                            memcpy(dst + lo, src + lo - pad + kw, (size_t)(hi - lo) * sizeof *dst);
                    } else {
                        for (int ow = lo; ow < hi; ow++) dst[ow] = src[ow * stride - pad + kw];
                    }
                    for (int ow = hi; ow < OW; ow++) dst[ow] = 0.0f;
                }
            }
        }
    }
}

// The adjoint of im2col: din (C,H,W) is overwritten with the sum of every col entry that was
// copied from each pixel; padding entries are dropped.
static void col2im(float *din, const float *col, int C, int H, int W, int K, int stride,
                   int pad, int OH, int OW) {
    memset(din, 0, (size_t)C * H * W * sizeof *din);
    for (int c = 0; c < C; c++) {
        float *plane = din + (size_t)c * H * W;
        for (int kh = 0; kh < K; kh++) {
            for (int kw = 0; kw < K; kw++) {
                int lo, hi;
                tap_range(kw, stride, pad, W, OW, &lo, &hi);
                const float *src = col + ((size_t)(c * K + kh) * K + kw) * OH * OW;
                for (int oh = 0; oh < OH; oh++, src += OW) {
                    int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) continue;
                    float *dst = plane + (size_t)ih * W;
                    if (stride == 1) {
                        const int off = kw - pad;
                        for (int ow = lo; ow < hi; ow++) dst[ow + off] += src[ow];
                    } else {
                        for (int ow = lo; ow < hi; ow++) dst[ow * stride - pad + kw] += src[ow];
                    }
                }
            }
        }
    }
}

void ref_conv2d_forward(float *out, const float *in, const float *w, const float *b, int B,
                        int C, int H, int W, int OC, int K, int stride, int pad, int OH, int OW,
                        float *ws, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const int ckk = C * K * K, P = OH * OW;
    const size_t slice = slice_floats(C, K, OC, OH, OW);
#pragma omp parallel num_threads(nthreads)
    {
        // A team of one is not "in parallel" to OpenBLAS, which would then start its own
        // threads; pin this task's BLAS calls to one thread either way.
        omp_set_num_threads(1);
        float *col = ws + (size_t)omp_get_thread_num() * slice;
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            float *o = out + (size_t)s * OC * P;
            im2col(col, in + (size_t)s * C * H * W, C, H, W, K, stride, pad, OH, OW);
            for (int oc = 0; oc < OC; oc++) {
                float v = b ? b[oc] : 0.0f;
                float *row = o + (size_t)oc * P;
                for (int p = 0; p < P; p++) row[p] = v;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, P, ckk, 1.0f, w, ckk, col,
                        P, 1.0f, o, P);
        }
    }
}

void ref_conv2d_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int B, int C, int H, int W, int OC, int K, int stride,
                         int pad, int OH, int OW, float *ws, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const int ckk = C * K * K, P = OH * OW;
    const size_t slice = slice_floats(C, K, OC, OH, OW);
    const size_t dw_off = (size_t)ckk * P, db_off = dw_off + (size_t)OC * ckk;
#pragma omp parallel num_threads(nthreads)
    {
        omp_set_num_threads(1); // see ref_conv2d_forward
        float *col = ws + (size_t)omp_get_thread_num() * slice;
        float *dwt = col + dw_off, *dbt = col + db_off;
        memset(dwt, 0, ((size_t)OC * ckk + OC) * sizeof *dwt);
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            const float *g = dout + (size_t)s * OC * P;
            im2col(col, in + (size_t)s * C * H * W, C, H, W, K, stride, pad, OH, OW);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, ckk, P, 1.0f, g, P, col, P,
                        1.0f, dwt, ckk);
            for (int oc = 0; db && oc < OC; oc++) {
                const float *row = g + (size_t)oc * P;
                float acc = 0.0f;
                for (int p = 0; p < P; p++) acc += row[p];
                dbt[oc] += acc;
            }
            if (din) {
                // col is no longer needed for this sample: reuse it for dcol.
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, P, OC, 1.0f, w, ckk, g,
                            P, 0.0f, col, P);
                col2im(din + (size_t)s * C * H * W, col, C, H, W, K, stride, pad, OH, OW);
            }
        }
        // Reduce the per-thread sums in thread order, so a given nthreads is deterministic.
        const int nt = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int i = 0; i < OC * ckk; i++) {
            float acc = 0.0f;
            for (int t = 0; t < nt; t++) acc += ws[(size_t)t * slice + dw_off + (size_t)i];
            dw[i] += acc;
        }
#pragma omp for schedule(static)
        for (int oc = 0; oc < (db ? OC : 0); oc++) {
            float acc = 0.0f;
            for (int t = 0; t < nt; t++) acc += ws[(size_t)t * slice + db_off + (size_t)oc];
            db[oc] += acc;
        }
    }
}

// ---- max pooling ----------------------------------------------------------------------------

void ref_maxpool_forward(float *out, int32_t *argmax, const float *in, int B, int C, int H,
                         int W, int K, int stride, int pad, int OH, int OW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const int planes = B * C;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int p = 0; p < planes; p++) {
        const float *ip = in + (size_t)p * H * W;
        float *op = out + (size_t)p * OH * OW;
        int32_t *ap = argmax + (size_t)p * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            for (int ow = 0; ow < OW; ow++) {
                int bi = -1;
                float best = 0.0f;
                // Row-major scan over the window's inputs (padding skipped) with a strict '>'
                // keeps the first maximum on ties.
                for (int kh = 0; kh < K; kh++) {
                    const int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < K; kw++) {
                        const int iw = ow * stride - pad + kw;
                        if (iw < 0 || iw >= W) continue;
                        if (bi < 0 || ip[ih * W + iw] > best) {
                            best = ip[ih * W + iw];
                            bi = ih * W + iw;
                        }
                    }
                }
                op[oh * OW + ow] = bi < 0 ? NAN : best; // a window of padding alone: a bug
                ap[oh * OW + ow] = bi;
            }
        }
    }
}

void ref_maxpool_backward(float *din, const float *dout, const int32_t *argmax, int B, int C,
                          int H, int W, int OH, int OW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const int planes = B * C, n = OH * OW;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int p = 0; p < planes; p++) {
        float *dp = din + (size_t)p * H * W;
        const float *gp = dout + (size_t)p * n;
        const int32_t *ap = argmax + (size_t)p * n;
        memset(dp, 0, (size_t)H * W * sizeof *dp);
        // Overlapping windows (stride < K) can share a winner: add, do not assign.
        for (int j = 0; j < n; j++) dp[ap[j]] += gp[j];
    }
}

// ---- average pooling ----------------------------------------------------------------------

// How many inputs (not padding) window (oh, ow) holds.
static int window_count(int oh, int ow, int H, int W, int K, int stride, int pad) {
    int n = 0;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            const int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
            n += ih >= 0 && ih < H && iw >= 0 && iw < W;
        }
    return n;
}

void ref_avgpool_forward(float *out, const float *in, int B, int C, int H, int W, int K,
                         int stride, int pad, int OH, int OW) {
    for (int p = 0; p < B * C; p++) {
        const float *ip = in + (size_t)p * H * W;
        float *op = out + (size_t)p * OH * OW;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float s = 0.0f;
                for (int kh = 0; kh < K; kh++) {
                    const int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < K; kw++) {
                        const int iw = ow * stride - pad + kw;
                        if (iw >= 0 && iw < W) s += ip[ih * W + iw];
                    }
                }
                op[oh * OW + ow] = s / (float)window_count(oh, ow, H, W, K, stride, pad);
            }
    }
}

void ref_avgpool_backward(float *din, const float *dout, int B, int C, int H, int W, int K,
                          int stride, int pad, int OH, int OW) {
    memset(din, 0, (size_t)B * C * H * W * sizeof *din);
    for (int p = 0; p < B * C; p++) {
        float *dp = din + (size_t)p * H * W;
        const float *gp = dout + (size_t)p * OH * OW;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const float g = gp[oh * OW + ow] /
                                (float)window_count(oh, ow, H, W, K, stride, pad);
                for (int kh = 0; kh < K; kh++) {
                    const int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < K; kw++) {
                        const int iw = ow * stride - pad + kw;
                        if (iw >= 0 && iw < W) dp[ih * W + iw] += g;
                    }
                }
            }
    }
}

void ref_gavgpool_forward(float *out, const float *in, int B, int C, int HW) {
    for (int p = 0; p < B * C; p++) {
        float s = 0.0f;
        for (int i = 0; i < HW; i++) s += in[(size_t)p * HW + i];
        out[p] = s / (float)HW;
    }
}

void ref_gavgpool_backward(float *din, const float *dout, int B, int C, int HW) {
    for (int p = 0; p < B * C; p++)
        for (int i = 0; i < HW; i++) din[(size_t)p * HW + i] = dout[p] / (float)HW;
}

// ---- layouts --------------------------------------------------------------------------------

void ref_to_nhwc(float *dst, const float *src, int B, int C, int Cs, int HW, float pad) {
    for (int i = 0; i < B; i++)
        for (int p = 0; p < HW; p++)
            for (int c = 0; c < Cs; c++)
                dst[((size_t)i * HW + p) * Cs + c] =
                    c < C ? src[((size_t)i * C + c) * HW + p] : pad;
}

void ref_to_nchw(float *dst, const float *src, int B, int C, int Cs, int HW) {
    for (int i = 0; i < B; i++)
        for (int c = 0; c < C; c++)
            for (int p = 0; p < HW; p++)
                dst[((size_t)i * C + c) * HW + p] = src[((size_t)i * HW + p) * Cs + c];
}

// ---- the network ----------------------------------------------------------------------------

static void *ref_alloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "ref: out of memory (%zu x %zu bytes)\n", n, size);
        abort();
    }
    return p;
}

void ref_net_init(ref_net *r, const model *m, int max_batch) {
    memset(r, 0, sizeof *r);
    r->max_batch = max_batch;
    r->n_layers = m->n_layers;
    ht_error e;
    if (schedule_build(&r->sched, m, &e) < 0) {
        fprintf(stderr, "ref: %s\n", e.msg);
        abort();
    }
    r->act = ref_alloc((size_t)m->n_layers, sizeof *r->act);
    r->dinput = ref_alloc((size_t)m->n_layers, sizeof *r->dinput);
    r->dout = ref_alloc((size_t)m->n_layers, sizeof *r->dout);
    r->argmax = ref_alloc((size_t)m->n_layers, sizeof *r->argmax);
    r->loss = ref_alloc((size_t)max_batch, sizeof *r->loss);
    size_t ws = 0;
    for (int l = 0; l < r->sched.n_nodes; l++) {
        const layer *L = &m->layers[r->sched.node[l].layer];
        const size_t no = layer_out_size(L) * (size_t)max_batch;
        r->act[l] = ref_alloc(no, sizeof(float));
        r->dout[l] = ref_alloc(no, sizeof(float));
        size_t ins = 0; // every input's, one after another
        for (int k = 0; k < r->sched.node[l].n_in; k++) ins += layer_in_size_k(L, k);
        r->dinput[l] = ref_alloc(ins * (size_t)max_batch, sizeof(float));
        if (L->kind == LAYER_MAXPOOL) r->argmax[l] = ref_alloc(no, sizeof(int32_t)); // its winners
        if (L->kind == LAYER_CONV2D) {
            size_t n = ref_conv2d_ws_floats(L->c, L->k, L->oc, L->oh, L->ow, 1);
            if (n > ws) ws = n;
        }
    }
    r->ws = ref_alloc(ws, sizeof(float));
}

void ref_net_free(ref_net *r) {
    for (int l = 0; l < r->n_layers; l++) {
        free(r->act[l]);
        free(r->dinput[l]);
        free(r->dout[l]);
        free(r->argmax[l]);
    }
    schedule_free(&r->sched);
    free(r->act);
    free(r->dinput);
    free(r->dout);
    free(r->argmax);
    free(r->loss);
    free(r->ws);
    memset(r, 0, sizeof *r);
}

// ---- the act family, in double ----

static double ref_sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static double act_value(act_fn f, double a, double x) {
    switch (f) {
    case ACT_SIGMOID: return ref_sigm(x);
    case ACT_TANH: return tanh(x);
    case ACT_LEAKY_RELU: return x > 0 ? x : a * x;
    case ACT_ELU: return x > 0 ? x : a * expm1(x);
    case ACT_SELU: return 1.0507009873554804934 * (x > 0 ? x : 1.6732632423543772848 * expm1(x));
    case ACT_SWISH: return x * ref_sigm(x);
    case ACT_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case ACT_HARD_SIGMOID: return fmin(1.0, fmax(0.0, a * x + 0.5));
    case ACT_RELU6: return x > 0 ? fmin(x, a) : 0;
    case ACT_HARD_SWISH: return x * fmin(1.0, fmax(0.0, a * x + 0.5));
    case ACT_GELU:
        if (a != 0) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case ACT_FN_COUNT: break;
    }
    abort();
}

static double act_slope(act_fn f, double a, double x) {
    switch (f) {
    case ACT_SIGMOID: return ref_sigm(x) * (1 - ref_sigm(x));
    case ACT_TANH: return 1 - tanh(x) * tanh(x);
    case ACT_LEAKY_RELU: return x > 0 ? 1 : a;
    case ACT_ELU: return x > 0 ? 1 : a * exp(x);
    case ACT_SELU: return 1.0507009873554804934 * (x > 0 ? 1 : 1.6732632423543772848 * exp(x));
    case ACT_SWISH: return ref_sigm(x) * (1 + x * (1 - ref_sigm(x)));
    case ACT_SOFTPLUS: return ref_sigm(x);
    case ACT_HARD_SIGMOID: return a * x + 0.5 > 0 && a * x + 0.5 < 1 ? a : 0;
    case ACT_RELU6: return x > 0 && x < a ? 1 : 0;
    case ACT_HARD_SWISH: return a * x + 0.5 <= 0 ? 0 : a * x + 0.5 >= 1 ? 1 : 2 * a * x + 0.5;
    case ACT_GELU:
        if (a != 0) {
            double k = sqrt(2 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
        }
        return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-x * x / 2) / sqrt(2 * M_PI);
    case ACT_FN_COUNT: break;
    }
    abort();
}

// ---- batchnorm in double, NCHW: the group's mean and biased variance over its samples and
// positions, recomputed in the backward ----

// Group g's (samples [s0, s1)) mean and variance of channel c.
static void bn_moments(const float *in, int s0, int s1, int C, int P, int c, double *mean,
                       double *var) {
    double sum = 0, sq = 0, R = (double)(s1 - s0) * P;
    for (int b = s0; b < s1; b++)
        for (int p = 0; p < P; p++) sum += in[((size_t)b * C + c) * P + p];
    *mean = sum / R;
    for (int b = s0; b < s1; b++)
        for (int p = 0; p < P; p++) {
            double d = in[((size_t)b * C + c) * P + p] - *mean;
            sq += d * d;
        }
    *var = sq / R;
}

void ref_bn_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                          int B, int C, int P, int G, float eps) {
    for (int s0 = 0; s0 < B; s0 += G) {
        int s1 = s0 + G < B ? s0 + G : B;
        for (int c = 0; c < C; c++) {
            double mean, var;
            bn_moments(in, s0, s1, C, P, c, &mean, &var);
            double inv = 1.0 / sqrt(var + (double)eps);
            for (int b = s0; b < s1; b++)
                for (int p = 0; p < P; p++) {
                    size_t i = ((size_t)b * C + c) * P + p;
                    out[i] = (float)((gamma ? gamma[c] : 1.0) * (in[i] - mean) * inv +
                                     (beta ? beta[c] : 0.0));
                }
        }
    }
}

void ref_bn_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                          const float *mean, const float *var, int B, int C, int P, float eps) {
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int p = 0; p < P; p++) {
                size_t i = ((size_t)b * C + c) * P + p;
                double inv = 1.0 / sqrt((double)var[c] + (double)eps);
                out[i] = (float)((gamma ? gamma[c] : 1.0) * (in[i] - (double)mean[c]) * inv +
                                 (beta ? beta[c] : 0.0));
            }
}

void ref_bn_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                           const float *dout, const float *in, const float *gamma, int B, int C,
                           int P, int G, float eps) {
    for (int s0 = 0; s0 < B; s0 += G) {
        int s1 = s0 + G < B ? s0 + G : B;
        double R = (double)(s1 - s0) * P;
        for (int c = 0; c < C; c++) {
            double mean, var, sdy = 0, sdx = 0;
            bn_moments(in, s0, s1, C, P, c, &mean, &var);
            double inv = 1.0 / sqrt(var + (double)eps);
            for (int b = s0; b < s1; b++)
                for (int p = 0; p < P; p++) {
                    size_t i = ((size_t)b * C + c) * P + p;
                    sdy += dout[i];
                    sdx += dout[i] * (in[i] - mean) * inv;
                }
            if (dgamma) dgamma[c] += (float)sdx;
            if (dbeta) dbeta[c] += (float)sdy;
            state_sums[c] += (float)mean;
            state_sums[C + c] += (float)var;
            if (!din) continue;
            double k = (gamma ? gamma[c] : 1.0) * inv;
            for (int b = s0; b < s1; b++)
                for (int p = 0; p < P; p++) {
                    size_t i = ((size_t)b * C + c) * P + p;
                    double xh = (in[i] - mean) * inv;
                    din[i] = (float)(k * (dout[i] - sdy / R - xh * sdx / R));
                }
        }
        state_sums[2 * C] += 1.0f;
    }
}

void ref_act_forward(act_fn f, float alpha, float *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)act_value(f, alpha, in[i]);
}

void ref_act_backward(act_fn f, float alpha, float *din, const float *dout, const float *in,
                      size_t n) {
    for (size_t i = 0; i < n; i++) din[i] = (float)(dout[i] * act_slope(f, alpha, in[i]));
}

// ---- the walker's op table: one row per kind, its family's ops ----

// ref_call and ref_ops are ref_int.h's; the families that shape or combine tensors have their
// ops in ref_layers.c.

static void conv_f(const ref_call *c) {
    const layer *L = c->L;
    ref_conv2d_forward(c->out, c->in, c->params + L->w_off, L->n_b ? c->params + L->b_off : NULL,
                       c->B, L->c, L->h, L->w, L->oc, L->k, L->stride, L->pad, L->oh, L->ow,
                       c->r->ws, 1);
}
static void conv_b(const ref_call *c) {
    const layer *L = c->L;
    ref_conv2d_backward(c->din, c->grads + L->w_off, L->n_b ? c->grads + L->b_off : NULL, c->g,
                        c->in, c->params + L->w_off, c->B, L->c, L->h, L->w, L->oc, L->k,
                        L->stride, L->pad, L->oh, L->ow, c->r->ws, 1);
}
static void pool_f(const ref_call *c) {
    const layer *L = c->L;
    if (L->kind == LAYER_MAXPOOL)
        ref_maxpool_forward(c->out, c->r->argmax[c->l], c->in, c->B, L->c, L->h, L->w, L->k,
                            L->stride, L->pad, L->oh, L->ow, 1);
    else
        ref_avgpool_forward(c->out, c->in, c->B, L->c, L->h, L->w, L->k, L->stride, L->pad, L->oh,
                            L->ow);
}
static void pool_b(const ref_call *c) {
    const layer *L = c->L;
    if (L->kind == LAYER_MAXPOOL)
        ref_maxpool_backward(c->din, c->g, c->r->argmax[c->l], c->B, L->c, L->h, L->w, L->oh,
                             L->ow, 1);
    else
        ref_avgpool_backward(c->din, c->g, c->B, L->c, L->h, L->w, L->k, L->stride, L->pad,
                             L->oh, L->ow);
}
static void gap_f(const ref_call *c) {
    ref_gavgpool_forward(c->out, c->in, c->B, c->L->c, c->L->h * c->L->w);
}
static void gap_b(const ref_call *c) {
    ref_gavgpool_backward(c->din, c->g, c->B, c->L->c, c->L->h * c->L->w);
}
static void dense_f(const ref_call *c) {
    const layer *L = c->L;
    dense_forward(c->out, c->in, c->params + L->w_off, L->n_b ? c->params + L->b_off : NULL, c->B,
                  (int)layer_in_size(L), L->oc, 1);
}
static void dense_b(const ref_call *c) {
    const layer *L = c->L;
    dense_backward(c->din, c->grads + L->w_off, L->n_b ? c->grads + L->b_off : NULL, c->g, c->in,
                   c->params + L->w_off, c->B, (int)layer_in_size(L), L->oc, 1);
}
static void relu_f(const ref_call *c) {
    relu_forward(c->out, c->in, layer_in_size(c->L) * (size_t)c->B, 1);
}
static void relu_b(const ref_call *c) {
    relu_backward(c->din, c->g, c->out, layer_in_size(c->L) * (size_t)c->B, 1);
}
// Dropout's backward is the same mask and scale, applied to the gradient.
static void dropout_any(const ref_call *c, float *out, const float *in) {
    const size_t ni = layer_in_size(c->L);
    if (c->drop)
        dropout_forward_mask(out, in, c->B, ni, c->L->rate,
                             ht_rng_key(c->drop->seed, c->drop->epoch, (uint32_t)c->l),
                             layer_dropout_emask(c->L), c->drop->ids, 1);
    else
        memcpy(out, in, ni * (size_t)c->B * sizeof *out);
}
static void dropout_f(const ref_call *c) { dropout_any(c, c->out, c->in); }
static void dropout_b(const ref_call *c) { dropout_any(c, c->din, c->g); }
static void softmax_f(const ref_call *c) {
    softmax_xent_forward(c->out, c->y ? c->r->loss : NULL, c->in, c->y, c->B, c->L->oc);
}
static void softmax_b(const ref_call *c) {
    softmax_xent_backward(c->din, c->out, c->y, c->B, c->L->oc);
}
// The binary head (K = 1) and the multi-label head (K labels) in double: probabilities (1 - p,
// p), or each label's p, and the mean over the labels of -(y log p + (1 - y) log(1 - p)).
static void bce_f(const ref_call *c) {
    const int K = (int)layer_in_size(c->L);
    for (int i = 0; i < c->B; i++) {
        double sum = 0;
        for (int j = 0; j < K; j++) {
            const size_t at = (size_t)i * K + j;
            double z = c->in[at], p = 1.0 / (1.0 + exp(-z));
            if (K == 1) {
                c->out[2 * i] = (float)(1.0 - p);
                c->out[2 * i + 1] = (float)p;
            } else {
                c->out[at] = (float)p;
            }
            if (c->y) sum += -(c->y[at] * log(p) + (1 - c->y[at]) * log1p(-p));
        }
        if (c->y) c->r->loss[i] = (float)(sum / K);
    }
}
static void bce_b(const ref_call *c) {
    const int K = (int)layer_in_size(c->L);
    for (int i = 0; i < c->B; i++)
        for (int j = 0; j < K; j++) {
            const size_t at = (size_t)i * K + j;
            c->din[at] = K == 1 ? c->out[2 * i + 1] - (float)c->y[i]
                                : (float)((c->out[at] - (double)c->y[at]) / K);
        }
}
static void act_f(const ref_call *c) {
    ref_act_forward((act_fn)layer_act_fn(c->L->kind), c->L->alpha, c->out, c->in,
                    layer_in_size(c->L) * (size_t)c->B);
}
static void act_b(const ref_call *c) {
    ref_act_backward((act_fn)layer_act_fn(c->L->kind), c->L->alpha, c->din, c->g, c->in,
                     layer_in_size(c->L) * (size_t)c->B);
}

// A frozen layer normalises with its moving statistics in training too (Keras's inference
// mode): its backward is dout * gamma / sqrt(var + eps), with no gradients or statistics.
static void bn_f(const ref_call *c) {
    const layer *L = c->L;
    const float *gamma = L->n_w ? c->params + L->w_off : NULL;
    const float *beta = L->n_b ? c->params + L->b_off : NULL;
    if (c->drop && !L->frozen)
        ref_bn_train_forward(c->out, c->in, gamma, beta, c->B, L->c, L->h * L->w, c->group,
                             L->eps);
    else
        ref_bn_infer_forward(c->out, c->in, gamma, beta, c->params + L->s_off,
                             c->params + L->s_off + L->c, c->B, L->c, L->h * L->w, L->eps);
}
static void bn_b(const ref_call *c) {
    const layer *L = c->L;
    if (L->frozen) {
        const float *var = c->params + L->s_off + L->c;
        const size_t P = (size_t)L->h * L->w;
        for (int i = 0; c->din && i < c->B; i++)
            for (int ch = 0; ch < L->c; ch++) {
                const double k = (L->n_w ? c->params[L->w_off + ch] : 1.0) /
                                 sqrt((double)var[ch] + (double)L->eps);
                for (size_t p = 0; p < P; p++) {
                    const size_t at = ((size_t)i * L->c + ch) * P + p;
                    c->din[at] = (float)(c->g[at] * k);
                }
            }
        return;
    }
    ref_bn_train_backward(c->din, L->n_w ? c->grads + L->w_off : NULL,
                          L->n_b ? c->grads + L->b_off : NULL, c->grads + L->s_off, c->g, c->in,
                          L->n_w ? c->params + L->w_off : NULL, c->B, L->c, L->h * L->w,
                          c->group, L->eps);
}

static const ref_ops ref_conv = {conv_f, conv_b}, ref_bn = {bn_f, bn_b}, ref_bce = {bce_f, bce_b}, ref_pool = {pool_f, pool_b},
                     ref_gap = {gap_f, gap_b}, ref_dense = {dense_f, dense_b},
                     ref_relu = {relu_f, relu_b}, ref_dropout = {dropout_f, dropout_b},
                     ref_softmax = {softmax_f, softmax_b}, ref_act = {act_f, act_b};

static const ref_ops *const ref_ops_of[LAYER_KIND_COUNT] = {
#define REF_OPS_ROW(id, fam, name, prefix, keras, key, dflt) [LAYER_##id] = &ref_##fam,
    LAYER_KINDS(REF_OPS_ROW)
#undef REF_OPS_ROW
};

const float *ref_forward(ref_net *r, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop) {
    const schedule *s = &r->sched;
    for (int n = 0; n < s->n_nodes; n++) {
        const sched_node *N = &s->node[n];
        const float *in = N->in[0] == SCHED_INPUT ? x : r->act[N->in[0]];
        ref_call c = {.r = r, .L = &m->layers[N->layer], .l = n, .B = B, .params = params,
                      .in = in, .out = r->act[n], .drop = drop, .y = y,
                      .group = model_bn_group(m)};
        c.n_in = N->n_in;
        for (int k = 0; k < N->n_in; k++)
            c.ins[k] = N->in[k] == SCHED_INPUT ? x : r->act[N->in[k]];
        ref_ops_of[m->layers[N->layer].kind]->forward(&c);
    }
    return r->act[s->n_nodes - 1];
}

void ref_backward(ref_net *r, const model *m, const float *params, float *grads, const float *x,
                  const uint8_t *y, int B, const net_dropout *drop) {
    const schedule *s = &r->sched;
    for (int n = s->n_nodes - 1; n >= 0; n--) {
        const sched_node *N = &s->node[n];
        const layer *L = &m->layers[N->layer];
        // The loss head's output has no readers, and its backward reads no gradient.
        ref_call c = {.r = r, .L = L, .l = n, .B = B, .params = params, .grads = grads,
                      .in = N->in[0] == SCHED_INPUT ? x : r->act[N->in[0]], .out = r->act[n],
                      .g = N->n_out ? r->dout[n] : NULL, .din = r->dinput[n], .drop = drop,
                      .y = y, .group = model_bn_group(m)};
        c.n_in = N->n_in;
        for (int i = 0, at = 0; i < N->n_in; at += (int)layer_in_size_k(L, i++)) {
            c.ins[i] = N->in[i] == SCHED_INPUT ? x : r->act[N->in[i]];
            c.dins[i] = r->dinput[n] + (size_t)at * (size_t)r->max_batch;
        }
        ref_ops_of[L->kind]->backward(&c);
        // Into each input's output gradient: the first reader going backward writes it, the
        // others add to it.
        for (int i = 0; i < N->n_in; i++) {
            if (N->in[i] == SCHED_INPUT) continue;
            const size_t k = layer_in_size_k(L, i) * (size_t)B;
            float *g = r->dout[N->in[i]];
            if (N->grad_add[i])
                for (size_t j = 0; j < k; j++) g[j] += c.dins[i][j];
            else
                memcpy(g, c.dins[i], sizeof(float) * k);
        }
    }
}
