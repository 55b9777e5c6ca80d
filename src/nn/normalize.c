// The normalize family: each channel standardised by a stored mean and variance, (x - mean) /
// max(sqrt(variance), 1e-7), Keras's Normalization (keras.applications' EfficientNet puts one
// after its Rescaling; Keras 3's epsilon is 1e-7), or with invert mean + x * max(sqrt(variance),
// 1e-7). The mean and variance are the layer's state (model.h: the state after every trainable
// parameter, as a batchnorm's moving averages), with Keras's count beside them: constants of
// the model, which Keras sets by adapt() and its weight files carry, and training never changes
// (the layer is frozen); or constants of the layer itself, given in the config (Keras keeps no
// variable for them then: ConvNeXt's ImageNet mean and variance). The input's gradient is the
// output's divided (or, inverted, times) by the same. Channels-last on the CPU path, pad
// channels kept zero.
#include "nn/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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
    (void)n_classes;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    L->invert = s->invert;
    L->frozen = 1; // constants: no step changes them
    if (!s->n_const) {
        L->n_s = 2 * (size_t)L->c + 1; // mean, variance, Keras's count (of adapt()'s samples)
        return 0;
    }
    // Given as constants: the layer's own, not state (Keras keeps no variable for them).
    if (s->n_const != 1 && s->n_const != L->c)
        return ht_fail(err, "layer %d (%s): %d means and variances for %d channels: expected one "
                       "for each channel, or one for all", idx, d->name, s->n_const, L->c);
    if (L->c > NORMALIZE_MAX_CONST)
        return ht_fail(err, "layer %d (%s): %d channels: a normalize layer with constants "
                       "takes up to %d (an image's); give its mean and variance as weights",
                       idx, d->name, L->c, NORMALIZE_MAX_CONST);
    if (isnan(s->c_mean[0]) || isnan(s->c_var[0]))
        return ht_fail(err, "layer %d (%s): the %s without the %s: give both as constants, or "
                       "neither (they are then the layer's weights)", idx, d->name,
                       isnan(s->c_var[0]) ? "mean" : "variance",
                       isnan(s->c_var[0]) ? "variance" : "mean");
    for (int c = 0; c < L->c; c++) {
        L->c_mean[c] = s->c_mean[s->n_const == 1 ? 0 : c];
        L->c_var[c] = s->c_var[s->n_const == 1 ? 0 : c];
        if (!isfinite(L->c_mean[c]) || !(L->c_var[c] >= 0) || !isfinite(L->c_var[c]))
            return ht_fail(err, "layer %d (%s): channel %d's mean %g and variance %g: expected "
                           "finite numbers, the variance 0 or more", idx, d->name, c,
                           (double)L->c_mean[c], (double)L->c_var[c]);
    }
    L->n_const = L->c;
    return 0;
}

// `mean = 123.675, 116.28, 103.53`: up to NORMALIZE_MAX_CONST numbers into *out, their count
// into *n (the two keys must give as many).
static int const_list(const layer_key_in *in, float *out, int *n) {
    const char *v = in->value;
    int k = 0;
    while (*v) {
        char *end;
        double x = strtod(v, &end);
        if (end == v || k == NORMALIZE_MAX_CONST || !isfinite(x)) {
            snprintf(in->msg, in->cap, "%s = %s: expected 1 to %d numbers, separated by commas",
                     in->shown, in->value, NORMALIZE_MAX_CONST);
            return -1;
        }
        out[k++] = (float)x;
        while (*end == ' ' || *end == '\t') end++;
        if (*end == ',') end++;
        while (*end == ' ' || *end == '\t') end++;
        v = end;
    }
    if (!k || (*n && *n != k)) {
        snprintf(in->msg, in->cap, "%s = %s: expected %d number%s, as many as the other of mean "
                 "and variance gave", in->shown, in->value, *n ? *n : 1, *n == 1 ? "" : "s");
        return -1;
    }
    *n = k;
    return 0;
}
static int mean_key(layer_spec *s, const layer_key_in *in) {
    return const_list(in, s->c_mean, &s->n_const);
}
static int variance_key(layer_spec *s, const layer_key_in *in) {
    return const_list(in, s->c_var, &s->n_const);
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

// Neither constant given (the mean's and variance's keys each set theirs).
static void normalize_defaults(layer_spec *s, const char *section) {
    (void)section;
    s->c_mean[0] = s->c_var[0] = NAN;
}

static const layer_key normalize_keys[] = {
    LK_ROW("invert", NULL, LK_INT, 0, invert, 0, 1),
    {"mean", NULL, LK_PARSE, 0, 0, 0, 0, 0, mean_key},
    {"variance", NULL, LK_PARSE, 0, 0, 0, 0, 0, variance_key},
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
    .name = "normalize", .flags = LF_SPATIAL, .keys = normalize_keys,
    .config_defaults = normalize_defaults, .shape = normalize_shape,
    .macs = no_macs, .keras_vars = normalize_keras_vars, .n_keras_vars = 3};

// Its mean and variance: its constants, or its state.
static const float *mean_of(const net_call *c) {
    return c->L->n_const ? c->L->c_mean : c->params + c->L->s_off;
}
static const float *var_of(const net_call *c) {
    return c->L->n_const ? c->L->c_var : c->params + c->L->s_off + c->L->c;
}

static void normalize_fwd(const net_call *c) {
    const layer *L = c->L;
    normalize_forward(c->out, c->in, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs,
                      mean_of(c), var_of(c), L->invert, c->nt);
}

static float *normalize_bwd(const net_call *c) {
    const layer *L = c->L;
    // Its state's place in the gradient sum stays zero (net.c, as a frozen layer's).
    if (!c->din) return NULL;
    normalize_backward(c->din, c->dout, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs,
                       var_of(c), L->invert, c->nt);
    return c->din;
}

// In the trunk too, with B = 1 and nt = 1.
const net_layer_ops cpu_normalize = {.forward = normalize_fwd, .backward = normalize_bwd,
                                     .forward_one = normalize_fwd,
                                     .backward_one = normalize_bwd};
