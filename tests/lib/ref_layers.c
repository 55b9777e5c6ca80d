// The reference's ops of the families that shape or combine tensors (ref_int.h): plain NCHW
// loops by each layer's definition, accumulating in double where they sum.
#include "tests/lib/ref_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layer_desc.h"
#include "nn/layers.h"

// Permute by the definition: output (a, b, c) is the input at the index whose axis perm[i] - 1
// is output axis i's coordinate; the backward adds each output gradient back there.
static size_t permute_src(const layer *L, int a, int b, int c) {
    int idx[3], o[3] = {a, b, c};
    for (int i = 0; i < 3; i++) idx[L->perm[i] - 1] = o[i];
    return ((size_t)idx[0] * L->h + idx[1]) * L->w + idx[2];
}
static void permute_f(const ref_call *c) {
    const layer *L = c->L;
    const size_t n = layer_in_size(L);
    for (int i = 0; i < c->B; i++)
        for (int a = 0; a < L->oc; a++)
            for (int b = 0; b < L->oh; b++)
                for (int d = 0; d < L->ow; d++)
                    c->out[i * n + ((size_t)a * L->oh + b) * L->ow + d] =
                        c->in[i * n + permute_src(L, a, b, d)];
}
static void permute_b(const ref_call *c) {
    const layer *L = c->L;
    const size_t n = layer_in_size(L);
    if (!c->din) return;
    memset(c->din, 0, sizeof(float) * n * (size_t)c->B);
    for (int i = 0; i < c->B; i++)
        for (int a = 0; a < L->oc; a++)
            for (int b = 0; b < L->oh; b++)
                for (int d = 0; d < L->ow; d++)
                    c->din[i * n + permute_src(L, a, b, d)] +=
                        c->g[i * n + ((size_t)a * L->oh + b) * L->ow + d];
}

// Zero padding by the definition: output (c, y, x) is the input at (c, y - top, x - left) when
// that is inside it, else 0; the backward adds each output gradient back there.
static void zeropad_f(const ref_call *c) {
    const layer *L = c->L;
    const size_t n = layer_in_size(L), no = layer_out_size(L);
    for (int i = 0; i < c->B; i++)
        for (int ch = 0; ch < L->oc; ch++)
            for (int y = 0; y < L->oh; y++)
                for (int x = 0; x < L->ow; x++) {
                    const int iy = y - L->pad_top, ix = x - L->pad_left;
                    c->out[i * no + ((size_t)ch * L->oh + y) * L->ow + x] =
                        iy >= 0 && iy < L->h && ix >= 0 && ix < L->w
                            ? c->in[i * n + ((size_t)ch * L->h + iy) * L->w + ix]
                            : 0.0f;
                }
}
static void zeropad_b(const ref_call *c) {
    const layer *L = c->L;
    const size_t n = layer_in_size(L), no = layer_out_size(L);
    if (!c->din) return;
    memset(c->din, 0, sizeof(float) * n * (size_t)c->B);
    for (int i = 0; i < c->B; i++)
        for (int ch = 0; ch < L->oc; ch++)
            for (int y = 0; y < L->oh; y++)
                for (int x = 0; x < L->ow; x++) {
                    const int iy = y - L->pad_top, ix = x - L->pad_left;
                    if (iy >= 0 && iy < L->h && ix >= 0 && ix < L->w)
                        c->din[i * n + ((size_t)ch * L->h + iy) * L->w + ix] +=
                            c->g[i * no + ((size_t)ch * L->oh + y) * L->ow + x];
                }
}

// Element-wise merges by the definition, in double: input k's value at element (b, ch, pos)
// is its own, or for a 1x1 input broadcast over the positions its channel's.
static double merge_x(const ref_call *c, int k, size_t b, size_t ch, size_t i) {
    const layer *L = c->L;
    return L->in_hw[k] == 1 && k ? c->ins[k][b * L->oc + ch] : c->ins[k][i];
}
static void merge_f(const ref_call *c) {
    const layer *L = c->L;
    const size_t hw = (size_t)L->oh * L->ow, n = layer_out_size(L);
    for (size_t i = 0; i < n * (size_t)c->B; i++) {
        const size_t b = i / n, ch = i % n / hw;
        double v = merge_x(c, 0, b, ch, i);
        for (int k = 1; k < c->n_in; k++) {
            const double x = merge_x(c, k, b, ch, i);
            switch (L->kind) {
            case LAYER_SUBTRACT: v -= x; break;
            case LAYER_MULTIPLY: v *= x; break;
            case LAYER_MAXIMUM: v = x > v ? x : v; break;
            default: v += x; // add, average
            }
        }
        c->out[i] = (float)(L->kind == LAYER_AVERAGE ? v / c->n_in : v);
    }
}
// Each input's gradient: the output's times the derivative, a broadcast input's summed over
// the positions (maximum: the first of the largest inputs takes it).
static void merge_b(const ref_call *c) {
    const layer *L = c->L;
    const size_t hw = (size_t)L->oh * L->ow, n = layer_out_size(L);
    double *acc[MODEL_MAX_IN] = {NULL}; // the broadcast inputs' sums
    for (int k = 1; k < c->n_in; k++)
        if (L->in_hw[k] == 1) acc[k] = calloc((size_t)c->B * L->oc, sizeof(double));
    for (size_t i = 0; i < n * (size_t)c->B; i++) {
        const size_t b = i / n, ch = i % n / hw;
        double x[MODEL_MAX_IN];
        int arg = 0;
        for (int k = 0; k < c->n_in; k++) {
            x[k] = merge_x(c, k, b, ch, i);
            if (x[k] > x[arg]) arg = k;
        }
        for (int k = 0; k < c->n_in; k++) {
            double d = 1;
            switch (L->kind) {
            case LAYER_SUBTRACT: d = k ? -1 : 1; break;
            case LAYER_AVERAGE: d = 1.0 / c->n_in; break;
            case LAYER_MAXIMUM: d = k == arg; break;
            case LAYER_MULTIPLY:
                for (int j = 0; j < c->n_in; j++)
                    if (j != k) d *= x[j];
                break;
            default: break;
            }
            if (acc[k]) acc[k][b * L->oc + ch] += c->g[i] * d;
            else c->dins[k][i] = (float)(c->g[i] * d);
        }
    }
    for (int k = 1; k < c->n_in; k++) {
        for (size_t j = 0; acc[k] && j < (size_t)c->B * L->oc; j++) c->dins[k][j] = (float)acc[k][j];
        free(acc[k]);
    }
}

// Rescaling by the definition, in double: x * scale + offset; the gradient times the scale.
static void rescale_f(const ref_call *c) {
    const size_t n = layer_out_size(c->L) * (size_t)c->B;
    for (size_t i = 0; i < n; i++)
        c->out[i] = (float)((double)c->in[i] * c->L->scale + c->L->offset);
}
static void rescale_b(const ref_call *c) {
    const size_t n = layer_in_size(c->L) * (size_t)c->B;
    for (size_t i = 0; c->din && i < n; i++) c->din[i] = (float)((double)c->g[i] * c->L->scale);
}

// Normalization by Keras's definition, in double: (x - mean) / max(sqrt(var), 1e-7), or with
// invert mean + x * max(sqrt(var), 1e-7), over NCHW; the gradient divided (times) by the same.
static double normalize_std_ref(double var) {
    const double s = sqrt(var);
    return s > 1e-7 ? s : 1e-7;
}
static void normalize_f(const ref_call *c) {
    const layer *L = c->L;
    const float *mean = L->n_const ? L->c_mean : c->params + L->s_off;
    const float *var = L->n_const ? L->c_var : mean + L->c;
    const size_t P = (size_t)L->h * L->w, n = layer_out_size(L) * (size_t)c->B;
    for (size_t i = 0; i < n; i++) {
        const size_t ch = i / P % (size_t)L->c;
        const double s = normalize_std_ref(var[ch]);
        c->out[i] = (float)(L->invert ? mean[ch] + (double)c->in[i] * s
                                      : ((double)c->in[i] - mean[ch]) / s);
    }
}
static void normalize_b(const ref_call *c) {
    const layer *L = c->L;
    const float *var = L->n_const ? L->c_var : c->params + L->s_off + L->c;
    const size_t P = (size_t)L->h * L->w, n = layer_in_size(L) * (size_t)c->B;
    for (size_t i = 0; c->din && i < n; i++) {
        const double s = normalize_std_ref(var[i / P % (size_t)L->c]);
        c->din[i] = (float)(L->invert ? c->g[i] * s : c->g[i] / s);
    }
}

// Layer normalisation by the definition, in double: position p of sample b standardised over
// its C channels, times gamma plus beta; the backward through the same formula's derivative,
// dx = r * (g - mean(g) - xh * mean(g * xh)) with g = dy * gamma.
static void ln_stats(const layer *L, const float *x, size_t base, size_t P, double *mu,
                     double *r) {
    double s = 0, v = 0;
    for (int ch = 0; ch < L->c; ch++) s += x[base + ch * P];
    *mu = s / L->c;
    for (int ch = 0; ch < L->c; ch++) v += (x[base + ch * P] - *mu) * (x[base + ch * P] - *mu);
    *r = 1 / sqrt(v / L->c + (double)L->eps);
}
static double ln_gamma(const ref_call *c, int ch) {
    return c->L->n_w ? c->params[c->L->w_off + ch] : 1.0;
}
static void layernorm_f(const ref_call *c) {
    const layer *L = c->L;
    const size_t P = (size_t)L->h * L->w;
    for (size_t i = 0; i < (size_t)c->B * P; i++) {
        const size_t base = i / P * L->c * P + i % P;
        double mu, r;
        ln_stats(L, c->in, base, P, &mu, &r);
        for (int ch = 0; ch < L->c; ch++)
            c->out[base + ch * P] =
                (float)((c->in[base + ch * P] - mu) * r * ln_gamma(c, ch) +
                        (L->n_b ? c->params[L->b_off + ch] : 0.0));
    }
}
static void layernorm_b(const ref_call *c) {
    const layer *L = c->L;
    const size_t P = (size_t)L->h * L->w;
    for (size_t i = 0; i < (size_t)c->B * P; i++) {
        const size_t base = i / P * L->c * P + i % P;
        double mu, r, m1 = 0, m2 = 0;
        ln_stats(L, c->in, base, P, &mu, &r);
        for (int ch = 0; ch < L->c; ch++) {
            const double xh = (c->in[base + ch * P] - mu) * r, dy = c->g[base + ch * P];
            m1 += dy * ln_gamma(c, ch), m2 += dy * ln_gamma(c, ch) * xh;
            if (L->n_w) c->grads[L->w_off + ch] += (float)(dy * xh);
            if (L->n_b) c->grads[L->b_off + ch] += (float)dy;
        }
        m1 /= L->c, m2 /= L->c;
        for (int ch = 0; c->din && ch < L->c; ch++) {
            const double xh = (c->in[base + ch * P] - mu) * r;
            const double g = c->g[base + ch * P] * ln_gamma(c, ch);
            c->din[base + ch * P] = (float)(r * (g - m1 - xh * m2));
        }
    }
}

// A channel times its factor.
static void layerscale_f(const ref_call *c) {
    const layer *L = c->L;
    const size_t P = (size_t)L->h * L->w, n = layer_out_size(L) * (size_t)c->B;
    for (size_t i = 0; i < n; i++)
        c->out[i] = (float)((double)c->in[i] * c->params[L->w_off + i / P % (size_t)L->c]);
}
static void layerscale_b(const ref_call *c) {
    const layer *L = c->L;
    const size_t P = (size_t)L->h * L->w, n = layer_in_size(L) * (size_t)c->B;
    double *dg = calloc((size_t)L->c, sizeof *dg);
    if (!dg) abort();
    for (size_t i = 0; i < n; i++) {
        const size_t ch = i / P % (size_t)L->c;
        dg[ch] += (double)c->g[i] * c->in[i];
        if (c->din) c->din[i] = (float)((double)c->g[i] * c->params[L->w_off + ch]);
    }
    for (int ch = 0; ch < L->c; ch++) c->grads[L->w_off + ch] += (float)dg[ch];
    free(dg);
}

// Concatenation by the definition: input k's channels after those of the inputs before it.
static void concat_f(const ref_call *c) {
    const layer *L = c->L;
    const size_t hw = (size_t)L->h * L->w;
    for (int b = 0; b < c->B; b++)
        for (int k = 0, off = 0; k < c->n_in; off += L->in_ch[k++])
            for (size_t i = 0; i < (size_t)L->in_ch[k] * hw; i++)
                c->out[(size_t)b * L->oc * hw + off * hw + i] =
                    c->ins[k][(size_t)b * L->in_ch[k] * hw + i];
}
static void concat_b(const ref_call *c) {
    const layer *L = c->L;
    const size_t hw = (size_t)L->h * L->w;
    for (int b = 0; b < c->B; b++)
        for (int k = 0, off = 0; k < c->n_in; off += L->in_ch[k++])
            for (size_t i = 0; i < (size_t)L->in_ch[k] * hw; i++)
                c->dins[k][(size_t)b * L->in_ch[k] * hw + i] =
                    c->g[(size_t)b * L->oc * hw + off * hw + i];
}

// Depthwise convolution by the definition, in double: output channel oc = c*M + m is input
// channel c convolved with kernel oc.
static void dwconv_f(const ref_call *c) {
    const layer *L = c->L;
    const int M = L->mult, K = L->k;
    for (int b = 0; b < c->B; b++)
        for (int oc = 0; oc < L->oc; oc++)
            for (int oy = 0; oy < L->oh; oy++)
                for (int ox = 0; ox < L->ow; ox++) {
                    double acc = L->n_b ? c->params[L->b_off + oc] : 0.0;
                    for (int ky = 0; ky < K; ky++)
                        for (int kx = 0; kx < K; kx++) {
                            const int iy = oy * L->stride - L->pad + ky;
                            const int ix = ox * L->stride - L->pad + kx;
                            if (iy < 0 || iy >= L->h || ix < 0 || ix >= L->w) continue;
                            acc += (double)c->in[(((size_t)b * L->c + oc / M) * L->h + iy) *
                                                     L->w + ix] *
                                   c->params[L->w_off + ((size_t)oc * K + ky) * K + kx];
                        }
                    c->out[(((size_t)b * L->oc + oc) * L->oh + oy) * L->ow + ox] = (float)acc;
                }
}
static void dwconv_b(const ref_call *c) {
    const layer *L = c->L;
    const int M = L->mult, K = L->k;
    if (c->din) memset(c->din, 0, sizeof(float) * layer_in_size(L) * (size_t)c->B);
    for (int oc = 0; oc < L->oc; oc++) {
        double db = 0, dw[MODEL_MAX_K * MODEL_MAX_K] = {0};
        for (int b = 0; b < c->B; b++)
            for (int oy = 0; oy < L->oh; oy++)
                for (int ox = 0; ox < L->ow; ox++) {
                    const double g = c->g[(((size_t)b * L->oc + oc) * L->oh + oy) * L->ow + ox];
                    db += g;
                    for (int ky = 0; ky < K; ky++)
                        for (int kx = 0; kx < K; kx++) {
                            const int iy = oy * L->stride - L->pad + ky;
                            const int ix = ox * L->stride - L->pad + kx;
                            if (iy < 0 || iy >= L->h || ix < 0 || ix >= L->w) continue;
                            const size_t at = (((size_t)b * L->c + oc / M) * L->h + iy) * L->w + ix;
                            dw[ky * K + kx] += g * c->in[at];
                            if (c->din)
                                c->din[at] += (float)(g * c->params[L->w_off +
                                                                    ((size_t)oc * K + ky) * K + kx]);
                        }
                }
        for (int t = 0; t < K * K; t++) c->grads[L->w_off + (size_t)oc * K * K + t] += (float)dw[t];
        if (L->n_b) c->grads[L->b_off + oc] += (float)db;
    }
}

const ref_ops ref_permute = {permute_f, permute_b}, ref_zeropad = {zeropad_f, zeropad_b},
              ref_merge = {merge_f, merge_b}, ref_concat = {concat_f, concat_b},
              ref_dwconv = {dwconv_f, dwconv_b}, ref_rescale = {rescale_f, rescale_b},
              ref_normalize = {normalize_f, normalize_b},
              ref_layernorm = {layernorm_f, layernorm_b},
              ref_layerscale = {layerscale_f, layerscale_b};
