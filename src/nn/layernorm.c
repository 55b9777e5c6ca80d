// The layernorm family: each position's channels standardised by their own mean and variance,
// y = (x - mean) / sqrt(var + eps) * gamma + beta, Keras's LayerNormalization over the last
// axis (ConvNeXt's, after every depthwise convolution and in its head) and PyTorch's
// LayerNorm(C) over a channels-last tensor. gamma and beta are the layer's weight and bias
// (Keras's scale = false or center = false: without them). Unlike batchnorm nothing depends on
// the other samples, so training and inference compute the same and the layer shards freely.
// Backward, with xh = (x - mean) * r, r = 1 / sqrt(var + eps) and g = dy * gamma:
// dx = r * (g - mean(g) - xh * mean(g * xh)), dgamma += dy * xh, dbeta += dy. Channels-last
// on the CPU path, pad channels kept zero.
#include "nn/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ht_omp.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// Below this many elements a parallel region costs more than the loop it would split.
#define LAYERNORM_PARALLEL_MIN 16384
// Keras's default epsilon (PyTorch's is 1e-5).
#define LAYERNORM_DEFAULT_EPS 1e-3f

// One row's mean and 1 / sqrt(var + eps), the variance over the row's values about the mean
// (two passes in double: a row of 768 values near 1e3 keeps its digits).
static void row_stats(const float *x, int C, float eps, double *mean, double *rstd) {
    double s = 0;
    for (int c = 0; c < C; c++) s += x[c];
    const double mu = s / C;
    double v = 0;
    for (int c = 0; c < C; c++) v += (x[c] - mu) * (x[c] - mu);
    *mean = mu;
    *rstd = 1.0 / sqrt(v / C + eps);
}

void layernorm_forward(float *out, const float *in, size_t rows, int C, int Cs,
                       const float *gamma, const float *beta, float eps, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= LAYERNORM_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        double mu, rs;
        row_stats(x, C, eps, &mu, &rs);
        for (int c = 0; c < C; c++) {
            const float xh = (float)((x[c] - mu) * rs);
            y[c] = xh * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f);
        }
        for (int c = C; c < Cs; c++) y[c] = 0.0f;
    }
}

// The rows' share of the parameter gradients goes to part (2 * C doubles a thread: gamma's,
// beta's), summed in thread order afterwards, so that a run repeats its bits.
int layernorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                       const float *in, size_t rows, int C, int Cs, const float *gamma,
                       float eps, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (rows * (size_t)Cs < LAYERNORM_PARALLEL_MIN) nthreads = 1;
    double *part = calloc((size_t)nthreads * 2 * C, sizeof *part);
    if (!part) return -1;
#pragma omp parallel num_threads(nthreads)
    {
        const int t = omp_get_thread_num();
        double *pg = part + (size_t)t * 2 * C, *pb = pg + C;
#pragma omp for schedule(static)
        for (size_t r = 0; r < rows; r++) {
            const float *x = in + r * Cs, *dy = dout + r * Cs;
            double mu, rs, m1 = 0, m2 = 0;
            row_stats(x, C, eps, &mu, &rs);
            for (int c = 0; c < C; c++) {
                const double xh = (x[c] - mu) * rs, g = (double)dy[c] * (gamma ? gamma[c] : 1.0f);
                m1 += g, m2 += g * xh;
                pg[c] += dy[c] * xh, pb[c] += dy[c];
            }
            m1 /= C, m2 /= C;
            if (!din) continue;
            float *dx = din + r * Cs;
            for (int c = 0; c < C; c++) {
                const double xh = (x[c] - mu) * rs, g = (double)dy[c] * (gamma ? gamma[c] : 1.0f);
                dx[c] = (float)(rs * (g - m1 - xh * m2));
            }
            for (int c = C; c < Cs; c++) dx[c] = 0.0f;
        }
    }
    for (int c = 0; c < C; c++) {
        double g = 0, b = 0;
        for (int t = 0; t < nthreads; t++)
            g += part[(size_t)t * 2 * C + c], b += part[(size_t)t * 2 * C + C + c];
        if (dgamma) dgamma[c] += (float)g;
        if (dbeta) dbeta[c] += (float)b;
    }
    free(part);
    return 0;
}

// ---- the layernorm family: its description (layer_desc.h) and CPU ops (net_layers.h) --------

static void layernorm_defaults(layer_spec *s, const char *section) {
    (void)section;
    s->w_init = INIT_ONES;
}

static int layernorm_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                           int idx, ht_error *err) {
    (void)n_classes;
    const double eps = s->eps_set ? s->eps : LAYERNORM_DEFAULT_EPS;
    if (!(eps > 0 && eps <= 1))
        return ht_fail(err, "layer %d (%s): epsilon %g: expected a number in (0, 1]", idx,
                       d->name, eps);
    L->eps = (float)eps;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    L->n_w = s->no_scale ? 0 : (size_t)L->c;  // gamma: "<layer>.weight"
    L->n_b = s->no_center ? 0 : (size_t)L->c; // beta: "<layer>.bias"
    return 0;
}

static double layernorm_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key layernorm_keys[] = {
    {"epsilon", "eps", LK_FLOAT, LK_LO_OPEN, offsetof(layer_spec, eps),
     offsetof(layer_spec, eps_set), 0, 1, NULL},
    LK_ROW("center", NULL, LK_NOT_BOOL, 0, no_center, 0, 0),
    LK_ROW("scale", NULL, LK_NOT_BOOL, 0, no_scale, 0, 0),
    LK_END,
};

// gamma and beta where the layer has them, as Keras 3 names them.
static const layer_keras_var layernorm_keras_vars[] = {
    {"gamma", 0, TENSOR_TRAINABLE, LKW_SAME, 0},
    {"beta", 1, TENSOR_TRAINABLE, LKW_SAME, 0},
};

const layer_family family_layernorm = {
    .name = "layernorm", .flags = LF_PARAMS | LF_SPATIAL, .keys = layernorm_keys,
    .config_defaults = layernorm_defaults, .shape = layernorm_shape, .macs = layernorm_macs,
    .keras_vars = layernorm_keras_vars, .n_keras_vars = 2};

static void layernorm_fwd(const net_call *c) {
    const layer *L = c->L;
    layernorm_forward(c->out, c->in, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs,
                      L->n_w ? c->params + L->w_off : NULL, net_bias(c->params, L), L->eps,
                      c->nt);
}

static float *layernorm_bwd(const net_call *c) {
    const layer *L = c->L;
    // Out of memory for the threads' sums: the gradient comes back non-finite, which the
    // engine reports as that device's failure.
    if (layernorm_backward(c->din, L->n_w ? c->grads + L->w_off : NULL, net_bias(c->grads, L),
                           c->dout, c->in, (size_t)c->B * L->h * L->w, L->c, c->p->in_cs,
                           L->n_w ? c->params + L->w_off : NULL, L->eps, c->nt) < 0 &&
        (L->n_w || L->n_b))
        c->grads[L->n_w ? L->w_off : L->b_off] = NAN;
    return c->din;
}

// Batch-wise; its backward adds to its parameters' gradients.
const net_layer_ops cpu_layernorm = {.forward = layernorm_fwd, .backward = layernorm_bwd,
                                     .flags = NET_OP_GRAD_ADDS};
