// Max pooling without padding on channels-last (NHWC) tensors: each window is pooled for all
// channels at once, and backward finds the winner again from the forward input (no argmax).
// The NCHW reference with argmax is tests/ref.c.
#include "layers.h"

#include <string.h>

void maxpool_nhwc_forward_one(float *out, const float *in, int Cs, int H, int W, int K,
                              int stride, int OH, int OW) {
    (void)H; // windows end at row (OH-1)*stride+K-1 < H by construction
    float *o = out;
    for (int oh = 0; oh < OH; oh++) {
        for (int ow = 0; ow < OW; ow++, o += Cs) {
            const float *win = in + ((size_t)oh * stride * W + (size_t)ow * stride) * Cs;
            memcpy(o, win, (size_t)Cs * sizeof *o);
            for (int kh = 0; kh < K; kh++) {
                for (int kw = 0; kw < K; kw++) {
                    const float *x = win + ((size_t)kh * W + kw) * Cs;
                    for (int c = 0; c < Cs; c++) o[c] = x[c] > o[c] ? x[c] : o[c];
                }
            }
        }
    }
}

void maxpool_nhwc_forward(float *out, const float *in, int B, int Cs, int H, int W, int K,
                          int stride, int OH, int OW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < B; s++)
        maxpool_nhwc_forward_one(out + (size_t)s * OH * OW * Cs, in + (size_t)s * H * W * Cs, Cs,
                                 H, W, K, stride, OH, OW);
}

// Channels are handled in blocks of POOL_CBLOCK: a block's maxima and "still to find" masks
// are one vector each (GCC/Clang vector extensions: one AVX-512 register, two AVX2 ones; GCC's
// note on the ABI of passing such vectors does not concern these static, inlined helpers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define POOL_CBLOCK 16
typedef float pool_vf __attribute__((vector_size(POOL_CBLOCK * sizeof(float))));
typedef int32_t pool_vi __attribute__((vector_size(POOL_CBLOCK * sizeof(float))));

static inline pool_vf pool_load(const float *p) {
    pool_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

// One window, channels [c0, c0 + POOL_CBLOCK): the gradient goes to the first maximum in
// row-major order (as the reference's argmax); overlapping windows (stride < K) can share a
// winner, so it is added, not assigned.
static void pool_window_back(float *dp, const float *ip, const float *g, size_t first, int W,
                             int Cs, int K) {
    pool_vf m = pool_load(ip + first);
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            pool_vf x = pool_load(ip + first + ((size_t)kh * W + kw) * Cs);
            pool_vi gt = x > m;
            m = (pool_vf)(((pool_vi)x & gt) | ((pool_vi)m & ~gt));
        }
    const pool_vi gv = (pool_vi)pool_load(g);
    pool_vi todo = ~(pool_vi){0};
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            const size_t at = first + ((size_t)kh * W + kw) * Cs;
            pool_vi hit = todo & (pool_load(ip + at) == m);
            pool_vf d = pool_load(dp + at) + (pool_vf)(gv & hit);
            memcpy(dp + at, &d, sizeof d);
            todo &= ~hit;
        }
}

void maxpool_nhwc_backward_one(float *din, const float *dout, const float *in, int Cs, int H,
                               int W, int K, int stride, int OH, int OW) {
    const float *g = dout;
    memset(din, 0, (size_t)H * W * Cs * sizeof *din);
    for (int oh = 0; oh < OH; oh++) {
        for (int ow = 0; ow < OW; ow++, g += Cs) {
            const size_t first = ((size_t)oh * stride * W + (size_t)ow * stride) * Cs;
            int c0 = 0;
            for (; c0 + POOL_CBLOCK <= Cs; c0 += POOL_CBLOCK)
                pool_window_back(din + c0, in + c0, g + c0, first, W, Cs, K);
            for (int c = c0; c < Cs; c++) { // channels past the last full block
                size_t best = first + c;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++) {
                        const size_t at = first + ((size_t)kh * W + kw) * Cs + c;
                        if (in[at] > in[best]) best = at;
                    }
                din[best] += g[c];
            }
        }
    }
}

void maxpool_nhwc_backward(float *din, const float *dout, const float *in, int B, int Cs,
                           int H, int W, int K, int stride, int OH, int OW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < B; s++)
        maxpool_nhwc_backward_one(din + (size_t)s * H * W * Cs, dout + (size_t)s * OH * OW * Cs,
                                  in + (size_t)s * H * W * Cs, Cs, H, W, K, stride, OH, OW);
}
