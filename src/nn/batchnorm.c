// Batch normalisation (Keras's BatchNormalization, PyTorch's BatchNorm2d/1d) over the channels
// of a channels-last tensor (after a conv or pool: per channel over every position; after a
// dense layer: per unit). Training normalises each group of G consecutive samples of a batch
// (a ghost batch, model_bn_group) with that group's own mean and biased variance; inference
// with the moving averages. Statistics are accumulated in double.
//
// The moving averages are model state (model.h): the devices hand each group's mean and
// variance back in the state's place of their gradient sum (added over groups, with the count
// of groups in num_batches_tracked's place), the engine adds those up over devices and ranks as
// it does gradients, and model_bn_update turns them into one Keras update per step:
// moving = momentum * moving + (1 - momentum) * (mean over the batch's groups).
#include "nn/batchnorm.h"

#include "nn/isa_kernels.h"

#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "nn/net_layers.h"

#include "core/ht_omp.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int model_bn_group(const model *m) {
    int any = 0;
    for (int l = 0; l < m->n_layers && !any; l++) any = m->layers[l].kind == LAYER_BATCHNORM;
    if (!any) return 0;
    return m->setup.bn_group > 0 ? m->setup.bn_group : MODEL_DEFAULT_BN_GROUP;
}

void model_bn_update(const model *m, float *params, const float *sums) {
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (!L->n_s) continue;
        const int C = L->oc;
        const float *s = sums + L->s_off;
        float *st = params + L->s_off;
        const double groups = s[2 * C];
        if (!(groups > 0)) continue;
        const double mom = L->momentum;
        for (int c = 0; c < 2 * C; c++)
            st[c] = (float)(mom * st[c] + (1.0 - mom) * (s[c] / groups));
        st[2 * C] += 1.0f;
    }
}

// ---- the math: the CPU's instruction set's copy (bn_vec.c through isa_kernels.h) ------------

void bn_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                      float *stats, int B, int P, int C, int cs, int G, float eps, int relu,
                      int nthreads) {
    isa_kernels_active()->bn_train_forward(out, in, gamma, beta, stats, B, P, C, cs, G, eps, relu,
                                           NULL, nthreads);
}

void bn_train_forward_parts(float *out, const float *in, const float *gamma, const float *beta,
                            float *stats, int B, int P, int C, int cs, int G, float eps,
                            int relu, const double *parts, int nthreads) {
    isa_kernels_active()->bn_train_forward(out, in, gamma, beta, stats, B, P, C, cs, G, eps, relu,
                                           parts, nthreads);
}

void bn_sample_parts(double *part, const float *y, size_t rows, int C, int cs) {
    isa_kernels_active()->bn_sample_parts(part, y, rows, C, cs);
}

void bn_dx_sample(float *dx, const bn_fuse *f, const float *x, int s, size_t P, int cs) {
    const size_t at = (size_t)s * P * cs, g = (size_t)(s / f->G) * 3 * f->C;
    isa_kernels_active()->bn_dx_rows(dx, f->dout + at, f->relu_out ? f->relu_out + at : NULL,
                                     x + at, f->stats + g, f->coef + g, P, f->C, cs);
}

void bn_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                      const float *mean, const float *var, size_t rows, int C, int cs, float eps,
                      int relu, int nthreads) {
    isa_kernels_active()->bn_infer_forward(out, in, gamma, beta, mean, var, rows, C, cs, eps,
                                           relu, nthreads);
}

void bn_frozen_backward(float *din, const float *dout, const float *gamma, const float *var,
                        const float *relu_out, size_t rows, int C, int cs, float eps,
                        int nthreads) {
    isa_kernels_active()->bn_frozen_backward(din, dout, gamma, var, relu_out, rows, C, cs, eps,
                                             nthreads);
}

int bn_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                      const float *dout, const float *in, const float *gamma, const float *stats,
                      const float *relu_out, int B, int P, int C, int cs, int G, int nthreads) {
    return isa_kernels_active()->bn_train_backward(din, dgamma, dbeta, state_sums, dout, in,
                                                   gamma, stats, relu_out, B, P, C, cs, G, NULL,
                                                   nthreads);
}

int bn_train_backward_coef(float *coef, float *dgamma, float *dbeta, float *state_sums,
                           const float *dout, const float *in, const float *gamma,
                           const float *stats, const float *relu_out, int B, int P, int C, int cs,
                           int G, int nthreads) {
    return isa_kernels_active()->bn_train_backward(NULL, dgamma, dbeta, state_sums, dout, in,
                                                   gamma, stats, relu_out, B, P, C, cs, G, coef,
                                                   nthreads);
}

// ---- the bn family: its description (layer_desc.h) and CPU ops (net_layers.h) ---------------

static int bn_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                    ht_error *err) {
    (void)n_classes;
    double mom = s->momentum_set ? s->momentum : BN_DEFAULT_MOMENTUM;
    double eps = s->eps_set ? s->eps : BN_DEFAULT_EPS;
    if (!(mom >= 0 && mom <= 1))
        return ht_fail(err, "layer %d (%s): momentum %g: expected 0..1 (Keras's: the moving "
                       "averages keep this much of their value at each step)", idx, d->name, mom);
    if (!(eps > 0 && eps <= 1))
        return ht_fail(err, "layer %d (%s): epsilon %g: expected a number in (0, 1]", idx,
                       d->name, eps);
    L->momentum = (float)mom;
    L->eps = (float)eps;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    L->n_w = s->no_scale ? 0 : (size_t)L->c;  // gamma: "<layer>.weight"
    L->n_b = s->no_center ? 0 : (size_t)L->c; // beta: "<layer>.bias"
    L->n_s = 2 * (size_t)L->c + 1;            // running mean, running variance, count
    return 0;
}

static double bn_macs(const layer *L) {
    (void)L;
    return 0;
}

// A [BatchNorm2d] or [BatchNorm1d] section: PyTorch's names and meanings ([BatchNormalization],
// Keras's class, keeps Keras's).
static int bn_torch(const char *section) {
    return !strcmp(section, "BatchNorm2d") || !strcmp(section, "BatchNorm1d");
}

// Keras's momentum, or PyTorch's (1 - Keras's) in a PyTorch section.
static int bn_momentum_key(layer_spec *s, const layer_key_in *in) {
    s->momentum_set = 1;
    if (layer_key_number(in, 0, 0, 1, 0, &s->momentum)) return -1;
    if (bn_torch(in->section)) s->momentum = 1.0f - s->momentum;
    return 0;
}

// PyTorch's affine: gamma and beta both.
static int bn_affine_key(layer_spec *s, const layer_key_in *in) {
    static const char *const names[] = {"0", "1", "false", "true", NULL};
    int i;
    if (layer_key_choice(in, names, &i)) return -1;
    s->no_center = s->no_scale = i % 2 == 0;
    return 0;
}

static const layer_key bn_keys[] = {
    {"momentum", NULL, LK_PARSE, 0, 0, 0, 0, 0, bn_momentum_key},
    {"epsilon", NULL, LK_FLOAT, LK_LO_OPEN, offsetof(layer_spec, eps),
     offsetof(layer_spec, eps_set), 0, 1, NULL},
    {"eps", NULL, LK_FLOAT, LK_LO_OPEN, offsetof(layer_spec, eps), offsetof(layer_spec, eps_set),
     0, 1, NULL},
    LK_ROW("center", NULL, LK_NOT_BOOL, 0, no_center, 0, 0),
    LK_ROW("scale", NULL, LK_NOT_BOOL, 0, no_scale, 0, 0),
    {"affine", NULL, LK_PARSE, 0, 0, 0, 0, 0, bn_affine_key},
    LK_END,
};
static const char *const bn_sections[] = {"BatchNorm2d", "BatchNorm1d", NULL}; // PyTorch's

// gamma starts at ones; PyTorch's sections take PyTorch's defaults.
static void bn_config_defaults(layer_spec *s, const char *section) {
    s->w_init = INIT_ONES;
    if (bn_torch(section)) s->momentum = 0.9f, s->momentum_set = 1, s->eps = 1e-5f, s->eps_set = 1;
}

// gamma and beta where the layer has them, the moving statistics; Keras keeps no count.
static const layer_keras_var bn_keras_vars[] = {
    {"gamma", 0, TENSOR_TRAINABLE, LKW_SAME, 0},
    {"beta", 1, TENSOR_TRAINABLE, LKW_SAME, 0},
    {"moving_mean", 0, TENSOR_RUNNING_MEAN, LKW_SAME, 1},
    {"moving_variance", 0, TENSOR_RUNNING_VAR, LKW_SAME, 1},
    {NULL, 0, TENSOR_NUM_BATCHES, LKW_NONE, 0},
};

const layer_family family_bn = {
    .name = "bn", .flags = LF_PARAMS | LF_SPATIAL | LF_OUT_FREE, .keys = bn_keys,
    .sections = bn_sections,
    .config_defaults = bn_config_defaults, .shape = bn_shape, .macs = bn_macs,
    .keras_vars = bn_keras_vars, .n_keras_vars = 5};

static const float *bn_gamma(const float *buf, const layer *L) {
    return L->n_w ? buf + L->w_off : NULL;
}

// Training normalises by the groups' statistics, inference and a frozen layer (in training too,
// as Keras does) by the moving averages.
static void bn_fwd(const net_call *c) {
    const layer *L = c->L;
    const int P = L->h * L->w, cs = c->p->in_cs;
    const float *gamma = bn_gamma(c->params, L), *beta = net_bias(c->params, L);
    if (c->drop && !L->frozen)
        bn_train_forward_parts(c->out, c->in, gamma, beta, c->bn_stats, c->B, P, L->c, cs,
                               c->group, L->eps, c->p->fuse_relu, c->bn_parts, c->nt);
    else
        bn_infer_forward(c->out, c->in, gamma, beta, c->params + L->s_off,
                         c->params + L->s_off + L->c, (size_t)c->B * P, L->c, cs, L->eps,
                         c->p->fuse_relu, c->nt);
}

static float *bn_bwd(const net_call *c) {
    const layer *L = c->L;
    float *dgamma = L->n_w ? c->grads + L->w_off : NULL, *dbeta = net_bias(c->grads, L);
    float *state = c->grads + L->s_off;
    if (c->beta == 0.0f) { // the first micro-batch of a shard writes the sums
        if (dgamma) memset(dgamma, 0, sizeof(float) * L->n_w);
        if (dbeta) memset(dbeta, 0, sizeof(float) * L->n_b);
        memset(state, 0, sizeof(float) * L->n_s);
    }
    // Frozen: no parameter gradients and no statistics (no groups: model_bn_update leaves its
    // moving averages alone), the input's gradient through the moving variance.
    if (L->frozen) {
        if (c->din)
            bn_frozen_backward(c->din, c->dout, bn_gamma(c->params, L),
                               c->params + L->s_off + L->c, c->p->fuse_relu ? c->out : NULL,
                               (size_t)c->B * L->h * L->w, L->c, c->p->in_cs, L->eps, c->nt);
        return c->din;
    }
    // Out of memory for the groups' sums: the gradient comes back non-finite, which the
    // engine reports as that device's failure. Fused into the conv before it: the groups'
    // coefficients of din for the conv (bn_parts), and no din here.
    const float *relu_out = c->p->fuse_relu ? c->out : NULL;
    const int rc = c->p->bn_fused
                       ? bn_train_backward_coef((float *)c->bn_parts, dgamma, dbeta, state,
                                                c->dout, c->in, bn_gamma(c->params, L),
                                                c->bn_stats, relu_out, c->B, L->h * L->w, L->c,
                                                c->p->in_cs, c->group, c->nt)
                       : bn_train_backward(c->din, dgamma, dbeta, state, c->dout, c->in,
                                           bn_gamma(c->params, L), c->bn_stats, relu_out, c->B,
                                           L->h * L->w, L->c, c->p->in_cs, c->group, c->nt);
    if (rc < 0) state[2 * L->c] = NAN;
    return c->p->bn_fused ? NULL : c->din;
}

// A batchnorm's statistics: 3 floats a channel for each group of a micro-batch.
static size_t bn_stat_floats(const layer *L, int group, int max_batch) {
    return (size_t)3 * L->c * (size_t)((max_batch + group - 1) / group);
}

// Never in the per-sample trunk: its statistics are over groups of samples. It applies a relu
// after it.
const net_layer_ops cpu_bn = {.forward = bn_fwd, .backward = bn_bwd,
                              .flags = NET_OP_FUSES_RELU | NET_OP_BN,
                              .stat_floats = bn_stat_floats};
