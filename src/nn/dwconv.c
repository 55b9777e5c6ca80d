// The dwconv family: a depthwise convolution (Keras's DepthwiseConv2D, PyTorch's Conv2d with
// groups = C): input channel c gives output channels c*M .. c*M+M-1, each its own KxK kernel
// over that channel alone. On the CPU path channels-last, the input with its channel stride,
// the output with a whole number of vectors (conv_cpad), its pad channels zero.
#include "nn/layers.h"

#include <string.h>

#include "core/ht_omp.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// The kernels run over channels innermost, channels-last: the weights are first laid out as
// wt[tap][oc] (dwconv_ws_floats' scratch), so each tap of a position is one multiply-add over
// contiguous channels of input, weight and output, which the compiler vectorises. With a depth
// multiplier M > 1, output channel oc reads input channel oc / M.

size_t dwconv_ws_floats(const dwconv_geom *g, int nthreads) {
    const size_t OC = (size_t)g->C * g->M, kk = (size_t)g->K * g->K;
    if (nthreads < 1) nthreads = 1;
    // wt, then per thread its weight-gradient and bias-gradient sums.
    return kk * OC + (size_t)nthreads * (kk * OC + OC);
}

static void wt_of(float *wt, const float *w, int OC, int KK) {
    for (int oc = 0; oc < OC; oc++)
        for (int t = 0; t < KK; t++) wt[(size_t)t * OC + oc] = w[(size_t)oc * KK + t];
}

// One input position's channels as the output channels read them: x itself at M = 1, else
// expanded into buf.
static const float *x_of(const float *x, int OC, int M, float *buf) {
    if (M == 1) return x;
    for (int oc = 0; oc < OC; oc++) buf[oc] = x[oc / M];
    return buf;
}

void dwconv_forward(float *out, const float *in, const float *w, const float *bias, int B,
                    const dwconv_geom *g, float *ws, int nthreads) {
    const int OC = g->C * g->M, ocs = conv_cpad(OC), K = g->K;
    if (nthreads < 1) nthreads = 1;
    float *wt = ws;
    wt_of(wt, w, OC, K * K);
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
    for (int row = 0; row < B * g->OH; row++) {
        const int b = row / g->OH, oy = row % g->OH;
        float xb[g->M > 1 ? OC : 1];
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

void dwconv_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int B, const dwconv_geom *g, float *ws, int nthreads) {
    const int OC = g->C * g->M, ocs = conv_cpad(OC), K = g->K, KK = K * K;
    if (nthreads < 1) nthreads = 1;
    float *wt = ws, *sums = ws + (size_t)KK * OC;
    const size_t slice = (size_t)KK * OC + OC;
    wt_of(wt, w, OC, KK);
    int nt = 1;
    // Each thread its samples: their input gradient, and its own sums of the weights' and
    // biases' gradients over them, added up in thread order after.
#pragma omp parallel num_threads(nthreads) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
    {
#pragma omp single
        nt = omp_get_num_threads();
        float *restrict gw = sums + (size_t)omp_get_thread_num() * slice, *restrict gb = gw + (size_t)KK * OC;
        memset(gw, 0, sizeof(float) * slice);
        float xb[g->M > 1 ? OC : 1];
#pragma omp for schedule(static)
        for (int b = 0; b < B; b++) {
            float *d = din ? din + (size_t)b * g->H * g->W * g->Cs : NULL;
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
    }
    for (int t = 0; t < nt; t++) {
        const float *gw = sums + (size_t)t * slice, *gb = gw + (size_t)KK * OC;
        for (int oc = 0; oc < OC; oc++)
            for (int k = 0; k < KK; k++) dw[(size_t)oc * KK + k] += gw[(size_t)k * OC + oc];
        for (int oc = 0; db && oc < OC; oc++) db[oc] += gb[oc];
    }
}

// ---- the dwconv family: its description (layer_desc.h) and CPU ops (net_layers.h) ----------

static int dwconv_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                        int idx, ht_error *err) {
    (void)n_classes;
    const int mult = s->mult ? s->mult : 1;
    if (mult < 1 || (int64_t)mult * L->c > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (%s): multiplier %d: expected 1..%d for %d channels", idx,
                       d->name, mult, MODEL_MAX_DIM / L->c, L->c);
    if (layer_kernel_window(L, s, d->name, idx, err)) return -1;
    L->mult = mult;
    L->oc = L->c * mult;
    L->n_w = (size_t)L->oc * L->k * L->k;
    L->n_b = s->no_bias ? 0 : (size_t)L->oc;
    return 0;
}

static int dwconv_weight_shape(const layer *L, int64_t *shape) {
    shape[0] = L->oc, shape[1] = 1, shape[2] = L->k, shape[3] = L->k; // PyTorch, groups = C
    return 4;
}

static double dwconv_macs(const layer *L) { return (double)L->oc * L->oh * L->ow * L->k * L->k; }

// Keras's fans of a (K, K, C, M) kernel, or of Conv2D's (K, K, 1, C * M) with groups = C.
static void dwconv_fans(const layer *L, double *fan_in, double *fan_out) {
    if (L->keras_as == 1 + LAYER_CONV2D) {
        *fan_in = (double)L->k * L->k, *fan_out = (double)L->oc * L->k * L->k;
        return;
    }
    *fan_in = (double)L->c * L->k * L->k, *fan_out = (double)L->mult * L->k * L->k;
}

static const layer_key dwconv_keys[] = {
    LK_ROW("size", "kernel_size", LK_INT, LK_REQUIRED, k, 1, 64),
    LK_ROW("stride", "strides", LK_INT, 0, stride, 1, 64),
    LK_ROW("pad", "padding", LK_PAD, 0, pad, 0, 64),
    LK_ROW("multiplier", "depth_multiplier", LK_INT, 0, mult, 1, 65536),
    LK_WEIGHT_ROWS,
    LK_END,
};
static const layer_keras_var dwconv_keras_vars[] = {
    {"depthwise_kernel", 0, TENSOR_TRAINABLE, LKW_DEPTHWISE, 1},
    {"bias", 1, TENSOR_TRAINABLE, LKW_SAME, 0},
};

const layer_family family_dwconv = {
    .name = "dwconv", .flags = LF_PARAMS | LF_SPATIAL | LF_WINDOW | LF_KERNEL,
    .keys = dwconv_keys, .shape = dwconv_shape, .weight_shape = dwconv_weight_shape,
    .macs = dwconv_macs, .fans = dwconv_fans, .keras_vars = dwconv_keras_vars,
    .n_keras_vars = 2};

static dwconv_geom geom(const net_call *c) {
    const layer *L = c->L;
    return (dwconv_geom){.C = L->c, .Cs = c->p->in_cs, .H = L->h, .W = L->w, .M = L->mult,
                         .K = L->k, .stride = L->stride, .pad = L->pad, .OH = L->oh,
                         .OW = L->ow};
}
static void dwconv_fwd(const net_call *c) {
    dwconv_geom g = geom(c);
    dwconv_forward(c->out, c->in, c->params + c->L->w_off, net_bias(c->params, c->L), c->B, &g,
                   c->scratch, c->nt);
}
static float *dwconv_bwd(const net_call *c) {
    dwconv_geom g = geom(c);
    dwconv_backward(c->din, c->grads + c->L->w_off, net_bias(c->grads, c->L), c->dout, c->in,
                    c->params + c->L->w_off, c->B, &g, c->scratch, c->nt);
    return c->din;
}
static int dwconv_out_cs(const layer *L, int in_cs) {
    (void)in_cs;
    return conv_cpad(L->oc);
}
static size_t dwconv_scratch(const layer *L, const net_lplan *p, int nthreads) {
    const dwconv_geom g = {.C = L->c, .M = L->mult, .K = L->k};
    (void)p;
    return dwconv_ws_floats(&g, nthreads);
}

// Batch-wise; its backward adds to its parameters' gradients.
const net_layer_ops cpu_dwconv = {.forward = dwconv_fwd, .backward = dwconv_bwd,
                                  .flags = NET_OP_GRAD_ADDS, .out_cs = dwconv_out_cs,
                                  .ws_floats = dwconv_scratch};
