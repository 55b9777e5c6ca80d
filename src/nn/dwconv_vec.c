// A depthwise convolution's inner loops (dwconv.c holds the layer and the threading), channels
// innermost: with the weights laid out wt[tap][oc], each tap of a position is one multiply-add
// over contiguous channels of input, weight and output, which the compiler vectorises for the
// instruction set this copy is compiled for (isa_fns.h). With a depth multiplier M > 1, output
// channel oc reads input channel oc / M.
#include "nn/isa_fns.h"

#include <string.h>

// One input position's channels as the output channels read them: x itself at M = 1, else
// expanded into buf.
static const float *x_of(const float *x, int OC, int M, float *buf) {
    if (M == 1) return x;
    for (int oc = 0; oc < OC; oc++) buf[oc] = x[oc / M];
    return buf;
}

void dwconv_vec_forward_rows(float *out, const float *in, const float *wt, const float *bias,
                             const dwconv_geom *g, int row0, int row1, float *xb) {
    const int OC = g->C * g->M, ocs = conv_cpad(OC), K = g->K;
    for (int row = row0; row < row1; row++) {
        const int b = row / g->OH, oy = row % g->OH;
        for (int ox = 0; ox < g->OW; ox++) {
            float *restrict y = out + (((size_t)b * g->OH + oy) * g->OW + ox) * ocs;
            for (int oc = 0; oc < OC; oc++) y[oc] = 0.0f;
            for (int ky = 0; ky < K; ky++) {
                const int iy = oy * g->stride - g->pad + ky;
                if (iy < 0 || iy >= g->H) continue;
                for (int kx = 0; kx < K; kx++) {
                    const int ix = ox * g->stride - g->pad + kx;
                    if (ix < 0 || ix >= g->W) continue;
                    const float *restrict x =
                        x_of(in + (((size_t)b * g->H + iy) * g->W + ix) * g->Cs, OC, g->M, xb);
                    const float *restrict wk = wt + (size_t)(ky * K + kx) * OC;
                    for (int oc = 0; oc < OC; oc++) y[oc] += x[oc] * wk[oc];
                }
            }
            // The bias after the sum, as a convolution adds it.
            if (bias)
                for (int oc = 0; oc < OC; oc++) y[oc] += bias[oc];
            for (int oc = OC; oc < ocs; oc++) y[oc] = 0.0f;
        }
    }
}

void dwconv_vec_backward_sample(float *din_b, float *gw, float *gb, const float *dout,
                                const float *in, const float *wt, int b, const dwconv_geom *g,
                                float *xb) {
    const int OC = g->C * g->M, ocs = conv_cpad(OC), K = g->K;
    float *d = din_b;
    if (d) memset(d, 0, sizeof(float) * (size_t)g->H * g->W * g->Cs);
    for (int oy = 0; oy < g->OH; oy++)
        for (int ox = 0; ox < g->OW; ox++) {
            const float *restrict dy = dout + (((size_t)b * g->OH + oy) * g->OW + ox) * ocs;
            for (int oc = 0; oc < OC; oc++) gb[oc] += dy[oc];
            for (int ky = 0; ky < K; ky++) {
                const int iy = oy * g->stride - g->pad + ky;
                if (iy < 0 || iy >= g->H) continue;
                for (int kx = 0; kx < K; kx++) {
                    const int ix = ox * g->stride - g->pad + kx;
                    if (ix < 0 || ix >= g->W) continue;
                    const size_t t = (size_t)(ky * K + kx) * OC;
                    const float *px = in + (((size_t)b * g->H + iy) * g->W + ix) * g->Cs;
                    const float *restrict x = x_of(px, OC, g->M, xb);
                    float *restrict gwk = gw + t;
                    for (int oc = 0; oc < OC; oc++) gwk[oc] += dy[oc] * x[oc];
                    if (!d) continue;
                    float *dx = d + ((size_t)iy * g->W + ix) * g->Cs;
                    const float *restrict wk = wt + t;
                    if (g->M == 1)
                        for (int oc = 0; oc < OC; oc++) dx[oc] += dy[oc] * wk[oc];
                    else
                        for (int oc = 0; oc < OC; oc++) dx[oc / g->M] += dy[oc] * wk[oc];
                }
            }
        }
}
