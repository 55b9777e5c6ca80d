// The reference layer math and network walker (ref.h). Convolution: im2col + SGEMM, parallel
// over samples; each thread owns one slice of the scratch buffer (its im2col matrix and, for
// backward, its own dw/db accumulators). Max pooling: parallel over (sample, channel) planes,
// each output remembering which input won so backward can route the gradient there.
#include "ref.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ht_omp.h"
#include "layers.h"
#include "rng.h"

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
    r->act = ref_alloc((size_t)m->n_layers, sizeof *r->act);
    r->dinput = ref_alloc((size_t)m->n_layers, sizeof *r->dinput);
    r->argmax = ref_alloc((size_t)m->n_layers, sizeof *r->argmax);
    r->loss = ref_alloc((size_t)max_batch, sizeof *r->loss);
    size_t ws = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        const size_t no = layer_out_size(L) * (size_t)max_batch;
        r->act[l] = ref_alloc(no, sizeof(float));
        r->dinput[l] = ref_alloc(layer_in_size(L) * (size_t)max_batch, sizeof(float));
        if (L->kind == LAYER_MAXPOOL) r->argmax[l] = ref_alloc(no, sizeof(int32_t));
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
        free(r->argmax[l]);
    }
    free(r->act);
    free(r->dinput);
    free(r->argmax);
    free(r->loss);
    free(r->ws);
    memset(r, 0, sizeof *r);
}

const float *ref_forward(ref_net *r, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop) {
    const float *in = x;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        const size_t ni = layer_in_size(L);
        float *out = r->act[l];
        switch (L->kind) {
        case LAYER_CONV2D:
            ref_conv2d_forward(out, in, params + L->w_off, L->n_b ? params + L->b_off : NULL, B,
                               L->c, L->h, L->w, L->oc, L->k, L->stride, L->pad, L->oh, L->ow,
                               r->ws, 1);
            break;
        case LAYER_MAXPOOL:
            ref_maxpool_forward(out, r->argmax[l], in, B, L->c, L->h, L->w, L->k, L->stride,
                                L->pad, L->oh, L->ow, 1);
            break;
        case LAYER_AVGPOOL:
            ref_avgpool_forward(out, in, B, L->c, L->h, L->w, L->k, L->stride, L->pad, L->oh,
                                L->ow);
            break;
        case LAYER_GLOBAL_AVGPOOL:
            ref_gavgpool_forward(out, in, B, L->c, L->h * L->w);
            break;
        case LAYER_DENSE:
            dense_forward(out, in, params + L->w_off, L->n_b ? params + L->b_off : NULL, B,
                          (int)ni, L->oc, 1);
            break;
        case LAYER_RELU:
            relu_forward(out, in, ni * (size_t)B, 1);
            break;
        case LAYER_DROPOUT:
            if (drop)
                dropout_forward(out, in, B, ni, L->rate,
                                ht_rng_key(drop->seed, drop->epoch, (uint32_t)l), drop->ids, 1);
            else
                memcpy(out, in, ni * (size_t)B * sizeof *out);
            break;
        case LAYER_SOFTMAX_XENT:
            softmax_xent_forward(out, y ? r->loss : NULL, in, y, B, L->oc);
            break;
        }
        in = out;
    }
    return in;
}

void ref_backward(ref_net *r, const model *m, const float *params, float *grads, const float *x,
                  const uint8_t *y, int B, const net_dropout *drop) {
    const float *g = NULL; // gradient of layer l's output
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const layer *L = &m->layers[l];
        const size_t ni = layer_in_size(L);
        const float *in = l ? r->act[l - 1] : x;
        float *din = r->dinput[l];
        switch (L->kind) {
        case LAYER_CONV2D:
            ref_conv2d_backward(din, grads + L->w_off, L->n_b ? grads + L->b_off : NULL, g, in,
                                params + L->w_off, B, L->c, L->h, L->w, L->oc, L->k, L->stride,
                                L->pad, L->oh, L->ow, r->ws, 1);
            break;
        case LAYER_MAXPOOL:
            ref_maxpool_backward(din, g, r->argmax[l], B, L->c, L->h, L->w, L->oh, L->ow, 1);
            break;
        case LAYER_AVGPOOL:
            ref_avgpool_backward(din, g, B, L->c, L->h, L->w, L->k, L->stride, L->pad, L->oh,
                                 L->ow);
            break;
        case LAYER_GLOBAL_AVGPOOL:
            ref_gavgpool_backward(din, g, B, L->c, L->h * L->w);
            break;
        case LAYER_DENSE:
            dense_backward(din, grads + L->w_off, L->n_b ? grads + L->b_off : NULL, g, in,
                           params + L->w_off, B, (int)ni, L->oc, 1);
            break;
        case LAYER_RELU:
            relu_backward(din, g, r->act[l], ni * (size_t)B, 1);
            break;
        case LAYER_DROPOUT: // the same mask and scale, applied to the gradient
            if (drop)
                dropout_forward(din, g, B, ni, L->rate,
                                ht_rng_key(drop->seed, drop->epoch, (uint32_t)l), drop->ids, 1);
            else
                memcpy(din, g, ni * (size_t)B * sizeof *din);
            break;
        case LAYER_SOFTMAX_XENT:
            softmax_xent_backward(din, r->act[l], y, B, L->oc);
            break;
        }
        g = din;
    }
}
