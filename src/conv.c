// 2-D convolution by im2col + SGEMM, parallel over samples. Each thread owns one slice of the
// scratch buffer: its im2col matrix and, for backward, its own dw/db accumulators.
#include "layers.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

// A thread's slice: col (CKK x OH*OW), then dw (OC x CKK), then db (OC). Rounded up to a
// 64-byte multiple so that no two threads write into the same cache line.
static size_t slice_floats(int C, int K, int OC, int OH, int OW) {
    size_t ckk = (size_t)C * K * K;
    size_t n = ckk * OH * OW + (size_t)OC * ckk + (size_t)OC;
    return (n + 15) & ~(size_t)15;
}

size_t conv2d_ws_floats(int C, int K, int OC, int OH, int OW, int nthreads) {
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

void conv2d_forward(float *out, const float *in, const float *w, const float *b, int B, int C,
                    int H, int W, int OC, int K, int stride, int pad, int OH, int OW, float *ws,
                    int nthreads) {
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

void conv2d_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int B, int C, int H, int W, int OC, int K, int stride,
                     int pad, int OH, int OW, float *ws, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const int ckk = C * K * K, P = OH * OW;
    const size_t slice = slice_floats(C, K, OC, OH, OW);
    const size_t dw_off = (size_t)ckk * P, db_off = dw_off + (size_t)OC * ckk;
#pragma omp parallel num_threads(nthreads)
    {
        omp_set_num_threads(1); // see conv2d_forward
        float *col = ws + (size_t)omp_get_thread_num() * slice;
        float *dwt = col + dw_off, *dbt = col + db_off;
        memset(dwt, 0, ((size_t)OC * ckk + OC) * sizeof *dwt);
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            const float *g = dout + (size_t)s * OC * P;
            im2col(col, in + (size_t)s * C * H * W, C, H, W, K, stride, pad, OH, OW);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, ckk, P, 1.0f, g, P, col, P,
                        1.0f, dwt, ckk);
            for (int oc = 0; oc < OC; oc++) {
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
        for (int oc = 0; oc < OC; oc++) {
            float acc = 0.0f;
            for (int t = 0; t < nt; t++) acc += ws[(size_t)t * slice + db_off + (size_t)oc];
            db[oc] += acc;
        }
    }
}
