// The rescale family: every element times a scale plus an offset, x * scale + offset (Keras's
// Rescaling, which keras.applications' EfficientNet and MobileNetV3 put first to take pixels
// of 0..255 to 0..1 or -1..1). No parameters; the input's gradient is the output's times the
// scale. Element-wise: its input's layout passes through (net.c), and on the CPU path the pad
// channels of a channels-last tensor stay zero.
#include "nn/layers.h"

#include <math.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// Below this many elements a parallel region costs more than the loop it would split.
#define RESCALE_PARALLEL_MIN 32768

// rows of Cs floats, the first C of each real: y = x * s + o there, 0 in the pad channels.
void rescale_forward(float *out, const float *in, size_t rows, int C, int Cs, float s, float o,
                     int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= RESCALE_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        for (int c = 0; c < C; c++) y[c] = x[c] * s + o;
        for (int c = C; c < Cs; c++) y[c] = 0.0f;
    }
}

void rescale_backward(float *din, const float *dout, size_t rows, int C, int Cs, float s,
                      int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= RESCALE_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *g = dout + r * Cs;
        float *d = din + r * Cs;
        for (int c = 0; c < C; c++) d[c] = g[c] * s;
        for (int c = C; c < Cs; c++) d[c] = 0.0f;
    }
}

// ---- the rescale family: its description (layer_desc.h) and CPU ops (net_layers.h) ----

// Keras's defaults: offset 0 (scale has none there; here 1, the layer that changes nothing).
static void rescale_defaults(layer_spec *s, const char *section) {
    (void)section;
    s->scale = 1.0f, s->offset = 0.0f;
}

static int rescale_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                         int idx, ht_error *err) {
    (void)n_classes;
    if (!isfinite(s->scale) || !isfinite(s->offset))
        return ht_fail(err, "layer %d (%s): scale %g, offset %g: expected finite numbers", idx,
                       d->name, (double)s->scale, (double)s->offset);
    L->scale = s->scale, L->offset = s->offset;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    return 0;
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key rescale_keys[] = {
    LK_ROW("scale", NULL, LK_FLOAT, 0, scale, -1e30, 1e30),
    LK_ROW("offset", NULL, LK_FLOAT, 0, offset, -1e30, 1e30),
    LK_END,
};

const layer_family family_rescale = {.name = "rescale", .flags = 0, .keys = rescale_keys,
                                     .config_defaults = rescale_defaults,
                                     .shape = rescale_shape, .macs = no_macs};

// A channels-last tensor with pad channels as rows of its channel stride; any other as a row
// a sample.
static void rows_of(const net_call *c, size_t *rows, int *C, int *Cs) {
    const layer *L = c->L;
    if (c->p->out_nhwc && c->p->out_cs != L->oc) {
        *rows = (size_t)c->B * L->oh * L->ow, *C = L->oc, *Cs = c->p->out_cs;
    } else {
        *rows = (size_t)c->B, *C = *Cs = (int)net_out_floats(L, c->p);
    }
}

static void rescale_fwd(const net_call *c) {
    size_t rows;
    int C, Cs;
    rows_of(c, &rows, &C, &Cs);
    rescale_forward(c->out, c->in, rows, C, Cs, c->L->scale, c->L->offset, c->nt);
}
static float *rescale_bwd(const net_call *c) {
    if (!c->din) return NULL;
    size_t rows;
    int C, Cs;
    rows_of(c, &rows, &C, &Cs);
    rescale_backward(c->din, c->dout, rows, C, Cs, c->L->scale, c->nt);
    return c->din;
}

// In the trunk too, with B = 1 and nt = 1.
const net_layer_ops cpu_rescale = {.forward = rescale_fwd, .backward = rescale_bwd,
                                   .forward_one = rescale_fwd, .backward_one = rescale_bwd};
