// The merge family: layers of several inputs combined element by element (Keras's Add,
// Subtract, Multiply, Average and Maximum). Every input has the first's shape, or after the
// first is 1x1 with its channels, broadcast over its height and width (squeeze-and-excite's
// (C,1,1) scale). The full inputs reach it in one layout (the CPU path's channels-last with
// the inputs' channel stride, whose pad channels are zero in each, or NCHW), which its output
// keeps; a 1x1 input in any.
#include "nn/layers.h"

#include <string.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// v op x, as Keras folds its inputs left to right (Average divides the sum at the end;
// Maximum keeps the earlier input on a tie, as TensorFlow's gradient does).
static inline float fold(merge_op op, float v, float x) {
    switch (op) {
    case MERGE_ADD:
    case MERGE_AVERAGE: return v + x;
    case MERGE_SUBTRACT: return v - x;
    case MERGE_MULTIPLY: return v * x;
    case MERGE_MAXIMUM: return x > v ? x : v;
    case MERGE_OP_COUNT: break;
    }
    return v;
}

// d out / d x[k] at one element whose inputs are x[0..n).
static inline float deriv(merge_op op, const float *x, int n, int k) {
    switch (op) {
    case MERGE_ADD: return 1.0f;
    case MERGE_SUBTRACT: return k ? -1.0f : 1.0f;
    case MERGE_AVERAGE: return 1.0f / (float)n;
    case MERGE_MULTIPLY: {
        float p = 1.0f;
        for (int j = 0; j < n; j++)
            if (j != k) p *= x[j];
        return p;
    }
    case MERGE_MAXIMUM: {
        int arg = 0;
        for (int j = 1; j < n; j++)
            if (x[j] > x[arg]) arg = j;
        return arg == k ? 1.0f : 0.0f;
    }
    case MERGE_OP_COUNT: break;
    }
    return 0.0f;
}

size_t merge_floats(const merge_geom *g) {
    return (size_t)g->HW * (g->nhwc ? g->cs : g->C);
}

// The loops below run over a sample as (outer, inner): channels-last positions then channels,
// or NCHW channels then positions; element j = o * inner + i is channel ch.
static void loop_dims(const merge_geom *g, int *outer, int *inner) {
    *outer = g->nhwc ? g->HW : g->C;
    *inner = g->nhwc ? g->cs : g->HW;
}

// Input k's value at element j (channel ch) of sample b: a broadcast input's is its channel's,
// and 0 in the pad channels.
static inline float in_at(const merge_geom *g, const float *const *ins, int k, size_t b,
                          size_t n, size_t j, int ch) {
    if (!((g->bcast >> k) & 1)) return ins[k][b * n + j];
    return ch < g->C ? ins[k][b * (size_t)g->bcs[k] + ch] : 0.0f;
}

// Every input's value at element j (channel ch) of sample b, into x[0..n_in) (n_in >= 2).
static inline void load(const merge_geom *g, const float *const *ins, size_t b, size_t n,
                        size_t j, int ch, float *x) {
    x[0] = in_at(g, ins, 0, b, n, j, ch);
    for (int k = 1; k < g->n_in; k++) x[k] = in_at(g, ins, k, b, n, j, ch);
}

// The output at one element whose inputs are x[0..n_in): folded left to right (Average: the
// sum over n_in).
static inline float combine(const merge_geom *g, const float *x) {
    float v = x[0];
    for (int k = 1; k < g->n_in; k++) v = fold(g->op, v, x[k]);
    return g->op == MERGE_AVERAGE ? v / (float)g->n_in : v;
}

// Keras's two common merges in loops the compiler vectorises (the general ones above go element
// by element through the op): an Add of full inputs (ResNet's residuals), and squeeze-and-
// excite's Multiply of a channels-last input by its broadcast (C,1,1) scale. The same
// operations in the same order as the general loops, so the same bits. 0 where g is another.
#define MERGE_CHUNK 4096

static int is_se_scale(const merge_geom *g) {
    return g->op == MERGE_MULTIPLY && g->n_in == 2 && g->bcast == 2u && g->nhwc;
}

static int fast_forward(float *out, const float *const *ins, int B, const merge_geom *g,
                        int nthreads) {
    (void)nthreads; // without OpenMP
    const size_t n = merge_floats(g), total = n * (size_t)B;
    if (g->op == MERGE_ADD && !g->bcast) {
        const long chunks = (long)((total + MERGE_CHUNK - 1) / MERGE_CHUNK);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (total >= 65536)
        for (long q = 0; q < chunks; q++) {
            const size_t i0 = (size_t)q * MERGE_CHUNK;
            const size_t i1 = i0 + MERGE_CHUNK < total ? i0 + MERGE_CHUNK : total;
            const float *a = ins[0], *b = ins[1];
            for (size_t i = i0; i < i1; i++) out[i] = a[i] + b[i];
            for (int k = 2; k < g->n_in; k++)
                for (size_t i = i0; i < i1; i++) out[i] += ins[k][i];
        }
        return 1;
    }
    if (!is_se_scale(g)) return 0;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (total >= 65536)
    for (int b = 0; b < B; b++) {
        const float *sc = ins[1] + (size_t)b * g->bcs[1];
        for (int p = 0; p < g->HW; p++) {
            const size_t at = (size_t)b * n + (size_t)p * g->cs;
            const float *x = ins[0] + at;
            float *y = out + at;
            for (int c = 0; c < g->C; c++) y[c] = x[c] * sc[c];
            for (int c = g->C; c < g->cs; c++) y[c] = x[c] * 0.0f;
        }
    }
    return 1;
}

// The squeeze-and-excite Multiply's input gradients: dout times the scale for the full input,
// and for the scale each channel's sum over the positions of dout times the input, in double,
// position by position (grad_bcast's order).
static void se_backward(float *const *dins, const float *dout, const float *const *ins, int B,
                        const merge_geom *g, int nthreads) {
    (void)nthreads; // without OpenMP
    const size_t n = merge_floats(g);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n * (size_t)B >= 65536)
    for (int b = 0; b < B; b++) {
        const float *sc = ins[1] + (size_t)b * g->bcs[1];
        double acc[g->C];
        memset(acc, 0, sizeof acc);
        for (int p = 0; p < g->HW; p++) {
            const size_t at = (size_t)b * n + (size_t)p * g->cs;
            const float *dy = dout + at, *x = ins[0] + at;
            if (dins[0]) {
                float *d = dins[0] + at;
                for (int c = 0; c < g->C; c++) d[c] = dy[c] * sc[c];
                for (int c = g->C; c < g->cs; c++) d[c] = dy[c] * 0.0f;
            }
            if (dins[1])
                for (int c = 0; c < g->C; c++) acc[c] += (double)dy[c] * x[c];
        }
        if (!dins[1]) continue;
        float *db = dins[1] + (size_t)b * g->bcs[1];
        for (int c = 0; c < g->C; c++) db[c] = (float)acc[c];
        for (int c = g->C; c < g->bcs[1]; c++) db[c] = 0.0f;
    }
}

void merge_forward(float *out, const float *const *ins, int B, const merge_geom *g,
                   int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (fast_forward(out, ins, B, g, nthreads)) return;
    const size_t n = merge_floats(g), total = n * (size_t)B;
    if (!g->bcast) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (total >= 65536)
        for (size_t i = 0; i < total; i++) {
            float x[MODEL_MAX_IN];
            x[0] = ins[0][i];
            for (int k = 1; k < g->n_in; k++) x[k] = ins[k][i];
            out[i] = combine(g, x);
        }
        return;
    }
    int outer, inner;
    loop_dims(g, &outer, &inner);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (total >= 65536)
    for (int b = 0; b < B; b++)
        for (int o = 0; o < outer; o++)
            for (int i = 0; i < inner; i++) {
                const size_t j = (size_t)o * inner + i;
                float x[MODEL_MAX_IN];
                load(g, ins, (size_t)b, n, j, g->nhwc ? i : o, x);
                out[(size_t)b * n + j] = combine(g, x);
            }
}

// Input k's gradient, not broadcast: dout times the derivative, element by element.
static void grad_full(float *d, const float *dout, const float *const *ins, int B,
                      const merge_geom *g, int k, int nthreads) {
    (void)nthreads; // without OpenMP
    const size_t n = merge_floats(g), total = n * (size_t)B;
    if (g->op == MERGE_ADD || (g->op == MERGE_SUBTRACT && !k)) {
        if (d != dout) memcpy(d, dout, sizeof(float) * total); // else in place (schedule.h)
        return;
    }
    int outer, inner;
    loop_dims(g, &outer, &inner);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (total >= 65536)
    for (int b = 0; b < B; b++)
        for (int o = 0; o < outer; o++)
            for (int i = 0; i < inner; i++) {
                const size_t j = (size_t)o * inner + i, at = (size_t)b * n + j;
                float x[MODEL_MAX_IN];
                load(g, ins, (size_t)b, n, j, g->nhwc ? i : o, x);
                d[at] = dout[at] * deriv(g->op, x, g->n_in, k);
            }
}

// A broadcast input's gradient: each channel's sum over the positions, in double, position
// by position; its pad channels zero.
static void grad_bcast(float *d, const float *dout, const float *const *ins, int B,
                       const merge_geom *g, int k, int nthreads) {
    (void)nthreads; // without OpenMP
    const size_t n = merge_floats(g);
    int outer, inner;
    loop_dims(g, &outer, &inner);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n * (size_t)B >= 65536)
    for (int b = 0; b < B; b++) {
        float *db = d + (size_t)b * g->bcs[k];
        double acc[g->C];
        memset(acc, 0, sizeof acc);
        for (int o = 0; o < outer; o++)
            for (int i = 0; i < inner; i++) {
                const int ch = g->nhwc ? i : o;
                if (ch >= g->C) continue;
                const size_t j = (size_t)o * inner + i;
                float x[MODEL_MAX_IN];
                load(g, ins, (size_t)b, n, j, ch, x);
                acc[ch] += (double)dout[(size_t)b * n + j] * deriv(g->op, x, g->n_in, k);
            }
        for (int ch = 0; ch < g->C; ch++) db[ch] = (float)acc[ch];
        for (int ch = g->C; ch < g->bcs[k]; ch++) db[ch] = 0.0f;
    }
}

void merge_backward(float *const *dins, const float *dout, const float *const *ins, int B,
                    const merge_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (is_se_scale(g)) {
        se_backward(dins, dout, ins, B, g, nthreads);
        return;
    }
    for (int k = 0; k < g->n_in; k++) {
        if (!dins[k]) continue;
        if ((g->bcast >> k) & 1) grad_bcast(dins[k], dout, ins, B, g, k, nthreads);
        else grad_full(dins[k], dout, ins, B, g, k, nthreads);
    }
}

static int merge_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                       int idx, ht_error *err) {
    (void)s, (void)n_classes;
    if (L->kind == LAYER_SUBTRACT && L->n_in != 2)
        return ht_fail(err, "layer %d (%s): subtracts its second input from its first: given "
                       "%d inputs, expected 2", idx, d->name, L->n_in);
    L->oc = L->c, L->oh = L->h, L->ow = L->w; // model_add checked the inputs' shapes
    return 0;
}

static double merge_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key merge_keys[] = {LK_END}; // its inputs: `from`, as every layer's

const layer_family family_merge = {.name = "merge", .flags = LF_MERGE | LF_OUT_FREE, .keys = merge_keys,
                                   .shape = merge_shape, .macs = merge_macs};

// The geometry of a call as net.c planned it.
static merge_geom geom_of(const net_call *c) {
    const layer *L = c->L;
    merge_geom g = {.op = (merge_op)c->op, .n_in = c->n_in, .C = L->oc,
                    .HW = L->oh * L->ow, .nhwc = c->p->out_nhwc, .cs = c->p->out_cs};
    for (int k = 1; k < c->n_in; k++)
        if (L->in_hw[k] == 1) g.bcast |= 1u << k, g.bcs[k] = c->p->ins_cs[k];
    return g;
}

static void merge_fwd(const net_call *c) {
    merge_geom g = geom_of(c);
    merge_forward(c->out, c->ins, c->B, &g, c->nt);
}

static float *merge_bwd(const net_call *c) {
    merge_geom g = geom_of(c);
    merge_backward((float *const *)c->dins, c->dout, c->ins, c->B, &g, c->nt);
    return c->dins[0];
}

// Batch-wise only: the per-sample trunk ends before a merge.
const net_layer_ops cpu_merge = {.forward = merge_fwd, .backward = merge_bwd};
