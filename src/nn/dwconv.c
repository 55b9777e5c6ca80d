// The dwconv family: a depthwise convolution (Keras's DepthwiseConv2D, PyTorch's Conv2d with
// groups = C): input channel c gives output channels c*M .. c*M+M-1, each its own KxK kernel
// over that channel alone. On the CPU path channels-last, the input with its channel stride,
// the output with a whole number of vectors (conv_cpad), its pad channels zero.
#include "nn/layers.h"

#include <string.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// Output rows [oy, ...) of sample b: positions (oy, ox), every channel.
void dwconv_forward(float *out, const float *in, const float *w, const float *bias, int B,
                    const dwconv_geom *g, int nthreads) {
    const int OC = g->C * g->M, ocs = conv_cpad(OC), K = g->K;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
    for (int row = 0; row < B * g->OH; row++) {
        const int b = row / g->OH, oy = row % g->OH;
        for (int ox = 0; ox < g->OW; ox++) {
            float *y = out + (((size_t)b * g->OH + oy) * g->OW + ox) * ocs;
            for (int oc = 0; oc < OC; oc++) y[oc] = bias ? bias[oc] : 0.0f;
            for (int ky = 0; ky < K; ky++) {
                const int iy = oy * g->stride - g->pad + ky;
                if (iy < 0 || iy >= g->H) continue;
                for (int kx = 0; kx < K; kx++) {
                    const int ix = ox * g->stride - g->pad + kx;
                    if (ix < 0 || ix >= g->W) continue;
                    const float *x = in + (((size_t)b * g->H + iy) * g->W + ix) * g->Cs;
                    for (int oc = 0; oc < OC; oc++)
                        y[oc] += x[oc / g->M] * w[((size_t)oc * K + ky) * K + kx];
                }
            }
            for (int oc = OC; oc < ocs; oc++) y[oc] = 0.0f;
        }
    }
}

void dwconv_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int B, const dwconv_geom *g, int nthreads) {
    const int OC = g->C * g->M, ocs = conv_cpad(OC), K = g->K;
    if (nthreads < 1) nthreads = 1;
    // The input gradient, sample by sample (each thread its own samples).
    if (din) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
        for (int b = 0; b < B; b++) {
            float *d = din + (size_t)b * g->H * g->W * g->Cs;
            memset(d, 0, sizeof(float) * (size_t)g->H * g->W * g->Cs);
            for (int oy = 0; oy < g->OH; oy++)
                for (int ox = 0; ox < g->OW; ox++) {
                    const float *dy = dout + (((size_t)b * g->OH + oy) * g->OW + ox) * ocs;
                    for (int ky = 0; ky < K; ky++) {
                        const int iy = oy * g->stride - g->pad + ky;
                        if (iy < 0 || iy >= g->H) continue;
                        for (int kx = 0; kx < K; kx++) {
                            const int ix = ox * g->stride - g->pad + kx;
                            if (ix < 0 || ix >= g->W) continue;
                            float *dx = d + ((size_t)iy * g->W + ix) * g->Cs;
                            for (int oc = 0; oc < OC; oc++)
                                dx[oc / g->M] += dy[oc] * w[((size_t)oc * K + ky) * K + kx];
                        }
                    }
                }
        }
    }
    // The weights' and biases' gradients, added to, output channel by output channel (each
    // thread its own channels).
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
    for (int oc = 0; oc < OC; oc++) {
        const int c = oc / g->M;
        float *gw = dw + (size_t)oc * K * K;
        for (int b = 0; b < B; b++)
            for (int oy = 0; oy < g->OH; oy++)
                for (int ox = 0; ox < g->OW; ox++) {
                    const float dy = dout[(((size_t)b * g->OH + oy) * g->OW + ox) * ocs + oc];
                    if (db) db[oc] += dy;
                    for (int ky = 0; ky < K; ky++) {
                        const int iy = oy * g->stride - g->pad + ky;
                        if (iy < 0 || iy >= g->H) continue;
                        for (int kx = 0; kx < K; kx++) {
                            const int ix = ox * g->stride - g->pad + kx;
                            if (ix < 0 || ix >= g->W) continue;
                            gw[ky * K + kx] +=
                                dy * in[(((size_t)b * g->H + iy) * g->W + ix) * g->Cs + c];
                        }
                    }
                }
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
                   c->nt);
}
static float *dwconv_bwd(const net_call *c) {
    dwconv_geom g = geom(c);
    dwconv_backward(c->din, c->grads + c->L->w_off, net_bias(c->grads, c->L), c->dout, c->in,
                    c->params + c->L->w_off, c->B, &g, c->nt);
    return c->din;
}
static int dwconv_out_cs(const layer *L, int in_cs) {
    (void)in_cs;
    return conv_cpad(L->oc);
}

// Batch-wise; its backward adds to its parameters' gradients.
const net_layer_ops cpu_dwconv = {.forward = dwconv_fwd, .backward = dwconv_bwd,
                                  .flags = NET_OP_GRAD_ADDS, .out_cs = dwconv_out_cs};
