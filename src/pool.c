// Max pooling without padding; each output remembers which input won so backward can route
// the gradient there. Parallel over (sample, channel) planes.
#include "layers.h"

#include <string.h>

void maxpool_forward(float *out, int32_t *argmax, const float *in, int B, int C, int H, int W,
                     int K, int stride, int OH, int OW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const int planes = B * C;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int p = 0; p < planes; p++) {
        const float *ip = in + (size_t)p * H * W;
        float *op = out + (size_t)p * OH * OW;
        int32_t *ap = argmax + (size_t)p * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            for (int ow = 0; ow < OW; ow++) {
                int first = oh * stride * W + ow * stride, bi = first;
                float best = ip[first];
                // Row-major scan with a strict '>' keeps the first maximum on ties.
                for (int kh = 0; kh < K; kh++) {
                    const float *row = ip + first + kh * W;
                    for (int kw = 0; kw < K; kw++) {
                        if (row[kw] > best) {
                            best = row[kw];
                            bi = first + kh * W + kw;
                        }
                    }
                }
                op[oh * OW + ow] = best;
                ap[oh * OW + ow] = bi;
            }
        }
    }
}

void maxpool_backward(float *din, const float *dout, const int32_t *argmax, int B, int C, int H,
                      int W, int OH, int OW, int nthreads) {
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
