// Elementwise layers (relu, inverted dropout) and the softmax cross-entropy head.
#include "layers.h"

#include <math.h>

#include "rng.h"

// Below this many elements a parallel region costs more than the loop it would split.
#define ACT_PARALLEL_MIN 32768
// Elements of one sample a dropout task masks at a time.
#define DROPOUT_BLOCK 1024

void relu_forward(float *out, const float *in, size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float *din, const float *dout, const float *out, size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

void relu_dropout_backward(float *din, const float *dout, const float *out, size_t n,
                           float rate, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) din[i] = out[i] > 0.0f ? dout[i] * scale : 0.0f;
}

// Forward and backward apply the same mask and scale; the mask is a pure function of
// (key, sample id, element), never of the batch position.
void dropout_forward(float *out, const float *in, int B, size_t N, float rate, uint64_t key,
                     const uint32_t *ids, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
    const size_t total = (size_t)B * N, nblk = (N + DROPOUT_BLOCK - 1) / DROPOUT_BLOCK;
    (void)total; // read only by the OpenMP clause
    // Blocks of a sample's elements, so that the inner loop (the hash) runs in vector lanes.
#pragma omp parallel for collapse(2) num_threads(nthreads) schedule(static) \
    if (total >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        for (size_t b = 0; b < nblk; b++) {
            const size_t lo = b * DROPOUT_BLOCK, hi = lo + DROPOUT_BLOCK < N ? lo + DROPOUT_BLOCK : N;
            const float *x = in + (size_t)i * N;
            float *y = out + (size_t)i * N;
            const uint32_t id = ids[i];
            for (size_t e = lo; e < hi; e++)
                y[e] = ht_rng_uniform(key, id, (uint32_t)e) >= rate ? x[e] * scale : 0.0f;
        }
    }
}

void softmax_xent_forward(float *probs, float *loss, const float *logits, const uint8_t *labels,
                          int B, int NC) {
    for (int i = 0; i < B; i++) {
        const float *x = logits + (size_t)i * NC;
        float *p = probs + (size_t)i * NC;
        float m = x[0];
        for (int c = 1; c < NC; c++) m = x[c] > m ? x[c] : m;
        double sum = 0.0;
        for (int c = 0; c < NC; c++) {
            p[c] = expf(x[c] - m);
            sum += p[c];
        }
        const float inv = (float)(1.0 / sum);
        for (int c = 0; c < NC; c++) p[c] *= inv;
        // -log softmax = log(sum exp(x - m)) - (x[label] - m); never exp of a large number.
        if (labels && loss) loss[i] = (float)(log(sum) - ((double)x[labels[i]] - m));
    }
}

void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B,
                           int NC) {
    for (int i = 0; i < B; i++) {
        const float *p = probs + (size_t)i * NC;
        float *d = dlogits + (size_t)i * NC;
        for (int c = 0; c < NC; c++) d[c] = p[c];
        d[labels[i]] -= 1.0f;
    }
}

// ---- channels-last (NHWC) tensors ----

void dropout_nhwc_apply(float *out, const float *in, int B, int C, int Cs, int HW, float rate,
                        uint64_t key, const uint32_t *ids, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if ((size_t)B * HW * C >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        for (int p = 0; p < HW; p++) {
            const size_t k = ((size_t)i * HW + p) * Cs;
            for (int c = 0; c < C; c++) {
                const uint32_t e = (uint32_t)c * (uint32_t)HW + (uint32_t)p;
                out[k + c] = ht_rng_uniform(key, ids[i], e) >= rate ? in[k + c] * scale : 0.0f;
            }
            for (int c = C; c < Cs; c++) out[k + c] = 0.0f;
        }
    }
}

void nchw_to_nhwc(float *dst, const float *src, int B, int C, int Cs, int HW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if ((size_t)B * HW * Cs >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        const float *s = src + (size_t)i * C * HW;
        float *d = dst + (size_t)i * HW * Cs;
        for (int p = 0; p < HW; p++) {
            for (int c = 0; c < C; c++) d[(size_t)p * Cs + c] = s[(size_t)c * HW + p];
            for (int c = C; c < Cs; c++) d[(size_t)p * Cs + c] = 0.0f;
        }
    }
}

void nhwc_to_nchw(float *dst, const float *src, int B, int C, int Cs, int HW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if ((size_t)B * HW * Cs >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        const float *s = src + (size_t)i * HW * Cs;
        float *d = dst + (size_t)i * C * HW;
        for (int c = 0; c < C; c++)
            for (int p = 0; p < HW; p++) d[(size_t)c * HW + p] = s[(size_t)p * Cs + c];
    }
}
