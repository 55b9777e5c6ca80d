// The layerscale family: each channel times a trainable factor, y = x * gamma[c], ConvNeXt's
// LayerScale (Keras's keras.applications class, gamma starting at init_values = 1e-6), which
// scales a block's residual branch before the add. gamma is the layer's weight; the backward
// gives dx = dy * gamma and dgamma += sum(dy * x). Channels-last on the CPU path, pad channels
// kept zero.
#include "nn/layers.h"

#include <math.h>
#include <stdlib.h>

#include "core/ht_omp.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// Below this many elements a parallel region costs more than the loop it would split.
#define LAYERSCALE_PARALLEL_MIN 16384

void layerscale_forward(float *out, const float *in, size_t rows, int C, int Cs,
                        const float *gamma, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= LAYERSCALE_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        for (int c = 0; c < C; c++) y[c] = x[c] * gamma[c];
        for (int c = C; c < Cs; c++) y[c] = 0.0f;
    }
}

// Each thread's share of dgamma goes to its own C doubles, summed in thread order afterwards,
// so that a run repeats its bits.
int layerscale_backward(float *din, float *dgamma, const float *dout, const float *in,
                        size_t rows, int C, int Cs, const float *gamma, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (rows * (size_t)Cs < LAYERSCALE_PARALLEL_MIN) nthreads = 1;
    double *part = calloc((size_t)nthreads * C, sizeof *part);
    if (!part) return -1;
#pragma omp parallel num_threads(nthreads)
    {
        double *pg = part + (size_t)omp_get_thread_num() * C;
#pragma omp for schedule(static)
        for (size_t r = 0; r < rows; r++) {
            const float *x = in + r * Cs, *dy = dout + r * Cs;
            for (int c = 0; c < C; c++) pg[c] += (double)dy[c] * x[c];
            if (!din) continue;
            float *dx = din + r * Cs;
            for (int c = 0; c < C; c++) dx[c] = dy[c] * gamma[c];
            for (int c = C; c < Cs; c++) dx[c] = 0.0f;
        }
    }
    for (int c = 0; c < C; c++) {
        double g = 0;
        for (int t = 0; t < nthreads; t++) g += part[(size_t)t * C + c];
        dgamma[c] += (float)g;
    }
    free(part);
    return 0;
}

// ---- the layerscale family: its description (layer_desc.h) and CPU ops (net_layers.h) -------

// Keras's init_values (the LayerScale of keras.applications' ConvNeXt).
static void layerscale_defaults(layer_spec *s, const char *section) {
    (void)section;
    s->w_init = INIT_CONSTANT, s->w_arg = 1e-6f;
}

static int layerscale_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                            int idx, ht_error *err) {
    (void)n_classes, (void)s, (void)d, (void)idx, (void)err;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    L->n_w = (size_t)L->c; // gamma: "<layer>.weight"
    L->n_b = 0;
    return 0;
}

static double layerscale_macs(const layer *L) { return (double)L->c * L->h * L->w; }

static const layer_key layerscale_keys[] = {
    {"init", NULL, LK_W_INIT, 0, 0, 0, 0, 0, NULL},
    {"init_values", "init_arg", LK_W_ARG, 0, 0, 0, 0, 0, NULL},
    LK_END,
};

static const layer_keras_var layerscale_keras_vars[] = {
    {"gamma", 0, TENSOR_TRAINABLE, LKW_SAME, 1},
};

const layer_family family_layerscale = {
    .name = "layerscale", .flags = LF_PARAMS | LF_SPATIAL | LF_OUT_FREE, .keys = layerscale_keys,
    .config_defaults = layerscale_defaults, .shape = layerscale_shape,
    .macs = layerscale_macs, .keras_vars = layerscale_keras_vars, .n_keras_vars = 1};

static void layerscale_fwd(const net_call *c) {
    const layer *L = c->L;
    layerscale_forward(c->out, c->in, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs,
                       c->params + L->w_off, c->nt);
}

static float *layerscale_bwd(const net_call *c) {
    const layer *L = c->L;
    // Out of memory for the threads' sums: the gradient comes back non-finite, which the
    // engine reports as that device's failure.
    if (layerscale_backward(c->din, c->grads + L->w_off, c->dout, c->in,
                            (size_t)c->B * L->h * L->w, L->c, c->p->in_cs, c->params + L->w_off,
                            c->nt) < 0)
        c->grads[L->w_off] = NAN;
    return c->din;
}

// Batch-wise; its backward adds to its parameter's gradient.
const net_layer_ops cpu_layerscale = {.forward = layerscale_fwd, .backward = layerscale_bwd,
                                      .flags = NET_OP_GRAD_ADDS};
