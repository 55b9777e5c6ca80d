// The normalize family: each channel standardised by a stored mean and variance, (x - mean) /
// max(sqrt(variance), 1e-7), Keras's Normalization (keras.applications' EfficientNet puts one
// after its Rescaling; Keras 3's epsilon is 1e-7), or with invert mean + x * max(sqrt(variance),
// 1e-7). The mean and variance are the layer's state (model.h: the state after every trainable
// parameter, as a batchnorm's moving averages), with Keras's count beside them: constants of
// the model, which Keras sets by adapt() and its weight files carry, and training never changes
// (the layer is frozen). The input's gradient is the output's divided (or, inverted, times) by
// the same. Channels-last on the CPU path, pad channels kept zero.
#include "nn/layers.h"

#include <math.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// Below this many elements a parallel region costs more than the loop it would split.
#define NORMALIZE_PARALLEL_MIN 32768

float normalize_std(float var) {
    const float s = sqrtf(var);
    return s > NORMALIZE_MIN_STD ? s : NORMALIZE_MIN_STD;
}

void normalize_forward(float *out, const float *in, size_t rows, int C, int Cs, const float *mean,
                       const float *var, int invert, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= NORMALIZE_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        for (int c = 0; c < C; c++) {
            const float s = normalize_std(var[c]);
            y[c] = invert ? mean[c] + x[c] * s : (x[c] - mean[c]) / s;
        }
        for (int c = C; c < Cs; c++) y[c] = 0.0f;
    }
}

void normalize_backward(float *din, const float *dout, size_t rows, int C, int Cs,
                        const float *var, int invert, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= NORMALIZE_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *g = dout + r * Cs;
        float *d = din + r * Cs;
        for (int c = 0; c < C; c++) {
            const float s = normalize_std(var[c]);
            d[c] = invert ? g[c] * s : g[c] / s;
        }
        for (int c = C; c < Cs; c++) d[c] = 0.0f;
    }
}

// ---- the normalize family: its description (layer_desc.h) and CPU ops (net_layers.h) --------

static int normalize_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                           int idx, ht_error *err) {
    (void)n_classes, (void)d, (void)idx, (void)err;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    L->invert = s->invert;
    L->n_s = 2 * (size_t)L->c + 1; // mean, variance, Keras's count (of adapt()'s samples)
    L->frozen = 1;                 // constants: no step changes them
    return 0;
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key normalize_keys[] = {
    LK_ROW("invert", NULL, LK_INT, 0, invert, 0, 1),
    LK_END,
};

// The mean, the variance and the count, as Keras 3 names its variables (all non-trainable, all
// counted in its summary's parameters).
static const layer_keras_var normalize_keras_vars[] = {
    {"mean", 0, TENSOR_RUNNING_MEAN, LKW_SAME, 1},
    {"variance", 0, TENSOR_RUNNING_VAR, LKW_SAME, 1},
    {"count", 0, TENSOR_NUM_BATCHES, LKW_SCALAR, 1},
};

const layer_family family_normalize = {
    .name = "normalize", .flags = LF_SPATIAL, .keys = normalize_keys, .shape = normalize_shape,
    .macs = no_macs, .keras_vars = normalize_keras_vars, .n_keras_vars = 3};

static void normalize_fwd(const net_call *c) {
    const layer *L = c->L;
    const float *st = c->params + L->s_off;
    normalize_forward(c->out, c->in, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs, st,
                      st + L->c, L->invert, c->nt);
}

static float *normalize_bwd(const net_call *c) {
    const layer *L = c->L;
    // Its state's place in the gradient sum stays zero (net.c, as a frozen layer's).
    if (!c->din) return NULL;
    normalize_backward(c->din, c->dout, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs,
                       c->params + L->s_off + L->c, L->invert, c->nt);
    return c->din;
}

// In the trunk too, with B = 1 and nt = 1.
const net_layer_ops cpu_normalize = {.forward = normalize_fwd, .backward = normalize_bwd,
                                     .forward_one = normalize_fwd,
                                     .backward_one = normalize_bwd};
