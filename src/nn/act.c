// The act family's elementwise activations (layer_kinds.h) on the CPU, forward and backward,
// in float. The backward works from the forward's input x alone: an in-place layer after the
// activation (dropout) may have written over its output by then.
#include "nn/layers.h"

#include "nn/isa_kernels.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

#include "core/ht_omp.h"
#include <math.h>

// A missing case is a compile error, not a silently linear layer.
#pragma GCC diagnostic error "-Wswitch"

// Below this many elements a parallel region costs more than the loop it would split.
#define ACT_PARALLEL_MIN 32768

#define SELU_ALPHA 1.6732632423543772848170429916717f
#define SELU_SCALE 1.0507009873554804934193349852946f
#define GELU_K 0.7978845608028654f // sqrt(2/pi)
#define GELU_C 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

static inline float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline float act_f(act_fn kind, float a, float x) {
    switch (kind) {
    case ACT_SIGMOID: return sigm(x);
    case ACT_TANH: return tanhf(x);
    case ACT_LEAKY_RELU: return x > 0.0f ? x : a * x;
    case ACT_ELU: return x > 0.0f ? x : a * expm1f(x);
    case ACT_SELU: return SELU_SCALE * (x > 0.0f ? x : SELU_ALPHA * expm1f(x));
    case ACT_SWISH: return x * sigm(x);
    case ACT_SOFTPLUS: return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
    case ACT_HARD_SIGMOID: {
        float y = a * x + 0.5f;
        return y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
    }
    case ACT_RELU6: return x > 0.0f ? (x < a ? x : a) : 0.0f;
    case ACT_HARD_SWISH: {
        float y = a * x + 0.5f;
        return x * (y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y);
    }
    case ACT_GELU:
        if (a != 0.0f) return 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_C * x * x * x)));
        return 0.5f * x * (1.0f + erff(x * INV_SQRT2));
    case ACT_FN_COUNT: break;
    }
    return x;
}

// f'(x).
static inline float act_df(act_fn kind, float a, float x) {
    switch (kind) {
    case ACT_SIGMOID: {
        float s = sigm(x);
        return s * (1.0f - s);
    }
    case ACT_TANH: {
        float t = tanhf(x);
        return 1.0f - t * t;
    }
    case ACT_LEAKY_RELU: return x > 0.0f ? 1.0f : a;
    case ACT_ELU: return x > 0.0f ? 1.0f : a * expf(x);
    case ACT_SELU: return SELU_SCALE * (x > 0.0f ? 1.0f : SELU_ALPHA * expf(x));
    case ACT_SWISH: {
        float s = sigm(x);
        return s + x * s * (1.0f - s);
    }
    case ACT_SOFTPLUS: return sigm(x);
    case ACT_HARD_SIGMOID: {
        float z = a * x + 0.5f;
        return z > 0.0f && z < 1.0f ? a : 0.0f;
    }
    case ACT_RELU6: return x > 0.0f && x < a ? 1.0f : 0.0f;
    case ACT_HARD_SWISH: { // h(x) + x h'(x), h = hard_sigmoid
        float z = a * x + 0.5f;
        return z <= 0.0f ? 0.0f : z >= 1.0f ? 1.0f : z + a * x;
    }
    case ACT_GELU:
        if (a != 0.0f) {
            float u = GELU_K * (x + GELU_C * x * x * x), t = tanhf(u);
            return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
        }
        return 0.5f * (1.0f + erff(x * INV_SQRT2)) + x * expf(-0.5f * x * x) * INV_SQRT_2PI;
    case ACT_FN_COUNT: break;
    }
    return 1.0f;
}

// Sigmoid, swish and the piecewise-linear functions go to the CPU's vector code (act_vec.c
// through isa_kernels.h), which answers 0 for a function it does not vectorise; each thread
// takes its share of `rows` rows of Cs.
static int vec_forward(act_fn kind, float a, float *out, const float *in, size_t rows, int C, int Cs,
                       int nthreads) {
    (void)nthreads; // without OpenMP
    const isa_kernels *k = isa_kernels_active();
    if (!k->act_forward(kind, a, out, in, 0, C, Cs)) return 0;
#pragma omp parallel num_threads(nthreads) if (rows * (size_t)Cs >= ACT_PARALLEL_MIN)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
        k->act_forward(kind, a, out + r0 * Cs, in + r0 * Cs, r1 - r0, C, Cs);
    }
    return 1;
}

static int vec_backward(act_fn kind, float a, float *din, const float *dout, const float *in, size_t rows,
                        int C, int Cs, int nthreads) {
    (void)nthreads; // without OpenMP
    const isa_kernels *k = isa_kernels_active();
    if (!k->act_backward(kind, a, din, dout, in, 0, C, Cs)) return 0;
#pragma omp parallel num_threads(nthreads) if (rows * (size_t)Cs >= ACT_PARALLEL_MIN)
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
        k->act_backward(kind, a, din + r0 * Cs, dout + r0 * Cs, in + r0 * Cs, r1 - r0, C, Cs);
    }
    return 1;
}

// A flat tensor as rows of ACT_ROW floats and a last row of the rest.
#define ACT_ROW 1024

void act_forward(act_fn kind, float alpha, float *out, const float *in, size_t n,
                 int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t full = n / ACT_ROW * ACT_ROW;
    if (vec_forward(kind, alpha, out, in, n / ACT_ROW, ACT_ROW, ACT_ROW, nthreads)) {
        vec_forward(kind, alpha, out + full, in + full, 1, (int)(n - full), (int)(n - full), 1);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) out[i] = act_f(kind, alpha, in[i]);
}

void act_backward(act_fn kind, float alpha, float *din, const float *dout, const float *in,
                  size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t full = n / ACT_ROW * ACT_ROW;
    if (vec_backward(kind, alpha, din, dout, in, n / ACT_ROW, ACT_ROW, ACT_ROW, nthreads)) {
        vec_backward(kind, alpha, din + full, dout + full, in + full, 1, (int)(n - full), (int)(n - full),
                     1);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) din[i] = dout[i] * act_df(kind, alpha, in[i]);
}

void act_nhwc_forward(act_fn kind, float alpha, float *out, const float *in, size_t rows,
                      int C, int Cs, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (vec_forward(kind, alpha, out, in, rows, C, Cs, nthreads)) return;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= ACT_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        for (int c = 0; c < C; c++) y[c] = act_f(kind, alpha, x[c]);
        for (int c = C; c < Cs; c++) y[c] = 0.0f;
    }
}

void act_nhwc_backward(act_fn kind, float alpha, float *din, const float *dout,
                       const float *in, size_t rows, int C, int Cs, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (vec_backward(kind, alpha, din, dout, in, rows, C, Cs, nthreads)) return;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if (rows * (size_t)Cs >= ACT_PARALLEL_MIN)
    for (size_t r = 0; r < rows; r++) {
        const size_t k = r * Cs;
        for (int c = 0; c < C; c++)
            din[k + c] = dout[k + c] * act_df(kind, alpha, in[k + c]);
        for (int c = C; c < Cs; c++) din[k + c] = 0.0f;
    }
}

// ---- the act family: its description (layer_desc.h) and CPU ops (net_layers.h) ----

// The family's parameter: the kind's default unless given; within what the function takes.
static int act_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                     ht_error *err) {
    (void)n_classes;
    if (s->alpha_set && !d->param_key)
        return ht_fail(err, "layer %d (%s): takes no parameter", idx, d->name);
    double a = s->alpha_set ? s->alpha : d->param_default;
    if (!isfinite(a) || fabs(a) > 1e6)
        return ht_fail(err, "layer %d (%s): %s %g: expected a finite number", idx, d->name,
                       d->param_key, a);
    if (L->kind == LAYER_GELU && a != 0 && a != 1)
        return ht_fail(err, "layer %d (%s): approximate %g: expected 0 (erf) or 1 (tanh)", idx,
                       d->name, a);
    if (L->kind == LAYER_RELU6 && !(a > 0))
        return ht_fail(err, "layer %d (%s): max_value %g: expected a number > 0", idx, d->name, a);
    if ((L->kind == LAYER_HARD_SIGMOID || L->kind == LAYER_HARD_SWISH) && !(a > 0))
        return ht_fail(err, "layer %d (%s): slope %g: expected a number > 0", idx, d->name, a);
    L->alpha = (float)a;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    return 0;
}

static double act_macs(const layer *L) {
    (void)L;
    return 0;
}

// Each kind's parameter (layer_kinds.h), each row a key of the kinds whose param_key it is;
// model_add checks its range. Keras 3's LeakyReLU calls alpha negative_slope.
#define ACT_PARAM_ROW(key, alias)                                                              \
    {key, alias, LK_FLOAT, LK_KIND_PARAM, offsetof(layer_spec, alpha),                         \
     offsetof(layer_spec, alpha_set), -1e6, 1e6, NULL}
static const layer_key act_keys[] = {
    ACT_PARAM_ROW("alpha", "negative_slope"),
    ACT_PARAM_ROW("slope", NULL),
    ACT_PARAM_ROW("approximate", NULL),
    ACT_PARAM_ROW("max_value", NULL),
    LK_END,
};

const layer_family family_act = {.name = "act", .flags = LF_ACTIVATION, .keys = act_keys,
                                 .shape = act_shape, .macs = act_macs};

// Channels-last tensors keep their pad channels zero.
static void act_fwd(const net_call *c) {
    const layer *L = c->L;
    if (c->p->out_nhwc && c->p->out_cs != L->oc)
        act_nhwc_forward((act_fn)c->act, L->alpha, c->out, c->in, (size_t)c->B * L->oh * L->ow,
                         L->oc, c->p->out_cs, c->nt);
    else
        act_forward((act_fn)c->act, L->alpha, c->out, c->in,
                    net_out_floats(L, c->p) * (size_t)c->B, c->nt);
}
static float *act_bwd(const net_call *c) {
    const layer *L = c->L;
    if (!c->din) return NULL;
    if (c->p->out_nhwc && c->p->out_cs != L->oc)
        act_nhwc_backward((act_fn)c->act, L->alpha, c->din, c->dout, c->in,
                          (size_t)c->B * L->oh * L->ow, L->oc, c->p->out_cs, c->nt);
    else
        act_backward((act_fn)c->act, L->alpha, c->din, c->dout, c->in,
                     net_out_floats(L, c->p) * (size_t)c->B, c->nt);
    return c->din;
}

// In the trunk too, with B = 1 and nt = 1.
const net_layer_ops cpu_act = {.forward = act_fwd, .backward = act_bwd,
                               .forward_one = act_fwd, .backward_one = act_bwd};
