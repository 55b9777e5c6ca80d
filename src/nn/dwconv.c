// The dwconv family: a depthwise convolution (Keras's DepthwiseConv2D, PyTorch's Conv2d with
// groups = C): input channel c gives output channels c*M .. c*M+M-1, each its own KxK kernel
// over that channel alone. On the CPU path channels-last, the input with its channel stride,
// the output with a whole number of vectors (conv_cpad), its pad channels zero.
#include "nn/layers.h"

#include <string.h>

#include "core/ht_omp.h"
#include "nn/isa_kernels.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// The kernels (dwconv_vec.c, compiled per instruction set and run through isa_kernels_active())
// go over channels innermost: the weights are first laid out as wt[tap][oc]
// (dwconv_ws_floats' scratch), so each tap of a position is one multiply-add over contiguous
// channels of input, weight and output.

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

void dwconv_forward(float *out, const float *in, const float *w, const float *bias, int B,
                    const dwconv_geom *g, float *ws, int nthreads) {
    const int OC = g->C * g->M, K = g->K;
    if (nthreads < 1) nthreads = 1;
    float *wt = ws;
    wt_of(wt, w, OC, K * K);
    const isa_kernels *k = isa_kernels_active();
    const int rows = B * g->OH;
#pragma omp parallel num_threads(nthreads) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
    {
        float xb[g->M > 1 ? OC : 1];
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        k->dw_forward_rows(out, in, wt, bias, g, (int)((long)rows * t / nt),
                           (int)((long)rows * (t + 1) / nt), xb);
    }
}

void dwconv_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int B, const dwconv_geom *g, float *ws, int nthreads) {
    const int OC = g->C * g->M, K = g->K, KK = K * K;
    if (nthreads < 1) nthreads = 1;
    float *wt = ws, *sums = ws + (size_t)KK * OC;
    const size_t slice = (size_t)KK * OC + OC;
    wt_of(wt, w, OC, KK);
    const isa_kernels *k = isa_kernels_active();
    int nt = 1;
    // Each thread its samples: their input gradient, and its own sums of the weights' and
    // biases' gradients over them, added up in thread order after.
#pragma omp parallel num_threads(nthreads) if ((size_t)B * g->OH * g->OW * OC * K * K >= 65536)
    {
#pragma omp single
        nt = omp_get_num_threads();
        float *gw = sums + (size_t)omp_get_thread_num() * slice, *gb = gw + (size_t)KK * OC;
        memset(gw, 0, sizeof(float) * slice);
        float xb[g->M > 1 ? OC : 1];
#pragma omp for schedule(static)
        for (int b = 0; b < B; b++)
            k->dw_backward_sample(din ? din + (size_t)b * g->H * g->W * g->Cs : NULL, gw, gb,
                                  dout, in, wt, b, g, xb);
    }
    for (int t = 0; t < nt; t++) {
        const float *gw = sums + (size_t)t * slice, *gb = gw + (size_t)KK * OC;
        for (int oc = 0; oc < OC; oc++)
            for (int q = 0; q < KK; q++) dw[(size_t)oc * KK + q] += gw[(size_t)q * OC + oc];
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
    .name = "dwconv", .flags = LF_PARAMS | LF_SPATIAL | LF_WINDOW | LF_KERNEL | LF_OUT_FREE,
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
