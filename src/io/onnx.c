// ONNX export (onnx.h). The graph is built as protobuf-c messages of the generated ONNX schema
// (onnx/onnx.pb-c.h, from libonnx-dev's onnx.proto by protoc-c at build time), every allocation
// of one export in an arena freed at the end, then packed once and written atomically.
//
// Tensors between nodes are NCHW (N,C,H,W), as hetrain's parameters are laid out (conv weights
// (OC,C,K,K), dense (OUT,IN) reading its input flattened in (C,H,W) order), or (N,F) after a
// dense layer; each value keeps its rank, and a layer that needs the other one gets a Flatten
// or an Unsqueeze first (a squeeze-and-excite scale of (N,C) multiplies an (N,C,H,W) map as
// (N,C,1,1)). Layers map to one or a few standard operators each (layer_node).
#include "io/onnx.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/stfile.h"
#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "onnx/onnx.pb-c.h"

// ---- the arena: every allocation of one export, freed together ----

typedef struct arena {
    void **p;
    size_t n, cap;
    int failed;
} arena;

static void *a_alloc(arena *a, size_t bytes) {
    if (a->failed) return NULL;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        void **p = realloc(a->p, cap * sizeof *p);
        if (!p) return a->failed = 1, NULL;
        a->p = p, a->cap = cap;
    }
    void *q = calloc(1, bytes ? bytes : 1);
    if (!q) return a->failed = 1, NULL;
    return a->p[a->n++] = q;
}

static char *a_str(arena *a, const char *s) {
    char *d = a_alloc(a, strlen(s) + 1);
    if (d) strcpy(d, s);
    return d;
}

static char *a_fmt(arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *a_fmt(arena *a, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return a_str(a, buf);
}

static void arena_free(arena *a) {
    for (size_t i = 0; i < a->n; i++) free(a->p[i]);
    free(a->p);
    memset(a, 0, sizeof *a);
}

// A growing array of message pointers in the arena (nodes, initializers, attributes).
typedef struct plist {
    void **v;
    size_t n, cap;
} plist;

static int push(arena *a, plist *l, void *x) {
    if (!x) return -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        void **v = a_alloc(a, cap * sizeof *v);
        if (!v) return -1;
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

// ---- the graph being built ----

typedef struct gb {
    arena a;
    plist nodes, inits;
    int n_tmp; // intermediate values made so far (their names)
    const model *m;
    const float *params;
    char **name;         // per layer: the value holding its output
    unsigned char *rank; // per layer: 4 (N,C,H,W) or 2 (N,F)
} gb;

static char *tmp_name(gb *g, const char *base) { return a_fmt(&g->a, "%s/%d", base, g->n_tmp++); }

static Onnx__AttributeProto *attr_new(gb *g, const char *name,
                                      Onnx__AttributeProto__AttributeType t) {
    Onnx__AttributeProto *at = a_alloc(&g->a, sizeof *at);
    if (!at) return NULL;
    onnx__attribute_proto__init(at);
    at->name = a_str(&g->a, name);
    at->has_type = 1, at->type = t;
    return at->name ? at : NULL;
}

static Onnx__AttributeProto *attr_i(gb *g, const char *name, int64_t v) {
    Onnx__AttributeProto *at = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (at) at->has_i = 1, at->i = v;
    return at;
}

static Onnx__AttributeProto *attr_f(gb *g, const char *name, float v) {
    Onnx__AttributeProto *at = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (at) at->has_f = 1, at->f = v;
    return at;
}

static Onnx__AttributeProto *attr_ints(gb *g, const char *name, const int64_t *v, int n) {
    Onnx__AttributeProto *at = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!at) return NULL;
    at->ints = a_alloc(&g->a, sizeof(int64_t) * (size_t)n);
    if (!at->ints) return NULL;
    memcpy(at->ints, v, sizeof(int64_t) * (size_t)n);
    at->n_ints = (size_t)n;
    return at;
}

// A node op(in[0..n_in)) -> out with up to 4 attributes (NULL-terminated); the node's name is
// its output's. NULL when memory ran out.
static Onnx__NodeProto *node(gb *g, const char *op, const char *out, int n_in,
                             const char *const *in, Onnx__AttributeProto *a0,
                             Onnx__AttributeProto *a1, Onnx__AttributeProto *a2,
                             Onnx__AttributeProto *a3) {
    Onnx__NodeProto *nd = a_alloc(&g->a, sizeof *nd);
    if (!nd) return NULL;
    onnx__node_proto__init(nd);
    nd->op_type = a_str(&g->a, op);
    nd->name = a_str(&g->a, out);
    nd->input = a_alloc(&g->a, sizeof(char *) * (size_t)n_in);
    nd->output = a_alloc(&g->a, sizeof(char *));
    Onnx__AttributeProto *at[4] = {a0, a1, a2, a3};
    nd->attribute = a_alloc(&g->a, sizeof at);
    if (!nd->op_type || !nd->name || !nd->input || !nd->output || !nd->attribute) return NULL;
    for (int k = 0; k < n_in; k++)
        if (!(nd->input[k] = a_str(&g->a, in[k]))) return NULL;
    nd->n_input = (size_t)n_in;
    if (!(nd->output[0] = a_str(&g->a, out))) return NULL;
    nd->n_output = 1;
    for (int k = 0; k < 4 && at[k]; k++) nd->attribute[nd->n_attribute++] = at[k];
    return push(&g->a, &g->nodes, nd) < 0 ? NULL : nd;
}

// Shorthands: one input, two inputs, without attributes.
static int op1(gb *g, const char *op, const char *out, const char *x) {
    return node(g, op, out, 1, &x, NULL, NULL, NULL, NULL) ? 0 : -1;
}
static int op2(gb *g, const char *op, const char *out, const char *x, const char *y) {
    const char *in[2] = {x, y};
    return node(g, op, out, 2, in, NULL, NULL, NULL, NULL) ? 0 : -1;
}

// A float32 initializer `name` of shape dims[0..nd) holding v[0..n), or int64 when iv is given.
static int init_tensor(gb *g, const char *name, const int64_t *dims, int nd, const float *v,
                       const int64_t *iv) {
    Onnx__TensorProto *t = a_alloc(&g->a, sizeof *t);
    if (!t) return -1;
    onnx__tensor_proto__init(t);
    t->name = a_str(&g->a, name);
    t->dims = a_alloc(&g->a, sizeof(int64_t) * (size_t)(nd ? nd : 1));
    if (!t->name || !t->dims) return -1;
    size_t n = 1;
    for (int k = 0; k < nd; k++) t->dims[k] = dims[k], n *= (size_t)dims[k];
    t->n_dims = (size_t)nd;
    t->has_data_type = 1;
    t->data_type = iv ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    const size_t bytes = n * (iv ? sizeof(int64_t) : sizeof(float));
    t->raw_data.data = a_alloc(&g->a, bytes); // little-endian, as the host's
    if (!t->raw_data.data) return -1;
    memcpy(t->raw_data.data, iv ? (const void *)iv : (const void *)v, bytes);
    t->raw_data.len = bytes;
    t->has_raw_data = 1;
    return push(&g->a, &g->inits, t);
}

// A constant made for the graph (not a parameter): its name, or NULL.
static char *constant(gb *g, const char *base, const int64_t *dims, int nd, const float *v) {
    char *n = tmp_name(g, base);
    return n && init_tensor(g, n, dims, nd, v, NULL) == 0 ? n : NULL;
}
static char *constant_i64(gb *g, const char *base, const int64_t *v, int n) {
    char *nm = tmp_name(g, base);
    const int64_t dims[1] = {n};
    return nm && init_tensor(g, nm, dims, 1, NULL, v) == 0 ? nm : NULL;
}

// ---- layers ----

// The value layer l reads as input k, and its rank.
static int input_of(const gb *g, int l, int k, const char **name, int *rank) {
    const layer *L = &g->m->layers[l];
    int j = L->n_in ? L->in[k] : l - 1;
    if (j == MODEL_INPUT || j < 0) {
        *name = "input/nchw";
        *rank = 4;
    } else {
        *name = g->name[j];
        *rank = g->rank[j];
    }
    return 0;
}

// x of rank `have` as rank `want`: (N,C,1,1) <-> (N,C) for a 1x1 map, Flatten otherwise.
static const char *as_rank(gb *g, const char *x, int have, int want, const char *base) {
    if (have == want) return x;
    char *out = tmp_name(g, base);
    if (!out) return NULL;
    if (want == 2) {
        return node(g, "Flatten", out, 1, &x, attr_i(g, "axis", 1), NULL, NULL, NULL) ? out : NULL;
    }
    static const int64_t axes[2] = {2, 3};
    const char *ax = constant_i64(g, "axes", axes, 2);
    return ax && op2(g, "Unsqueeze", out, x, ax) == 0 ? out : NULL;
}

// A per-channel constant shaped to multiply or add a value of rank r: (C,1,1) or (C).
static char *chan_const(gb *g, const char *base, const float *v, int C, int rank) {
    const int64_t d4[3] = {C, 1, 1}, d2[1] = {C};
    return rank == 4 ? constant(g, base, d4, 3, v) : constant(g, base, d2, 1, v);
}

// The parameter tensor at params + off of n floats as an initializer named after its layer's
// own tensor (a shared layer's: the first layer's), shaped dims.
static const char *param(gb *g, const layer *L, const char *what, size_t off, const int64_t *dims,
                         int nd) {
    const layer *owner = L->share ? &g->m->layers[L->share - 1] : L;
    char nm[80];
    snprintf(nm, sizeof nm, "%s.%s", owner->name, what);
    for (size_t i = 0; i < g->inits.n; i++) {
        const Onnx__TensorProto *t = g->inits.v[i];
        if (!strcmp(t->name, nm)) return t->name; // made already for the first call
    }
    return init_tensor(g, nm, dims, nd, g->params + off, NULL) == 0
               ? ((Onnx__TensorProto *)g->inits.v[g->inits.n - 1])->name
               : NULL;
}

// A normalisation's (C) vector: the layer's parameter `what` at off where it has one (has),
// else every element fill (gamma 1, beta 0), a constant named base.
static const char *vec_or_fill(gb *g, const layer *L, int has, const char *what, size_t off,
                               int C, float fill, const char *base) {
    const int64_t d[1] = {C};
    if (has) return param(g, L, what, off, d, 1);
    float *v = a_alloc(&g->a, sizeof(float) * (size_t)C);
    if (!v) return NULL;
    for (int c = 0; c < C; c++) v[c] = fill;
    return constant(g, base, d, 1, v);
}

// Pads of a window: begin = the layer's pad, end = what its output size implies (never below 0:
// ONNX drops a leftover row as hetrain does).
static void window_pads(const layer *L, int64_t pads[4]) {
    const int eh = (L->oh - 1) * L->stride + L->k - L->h - L->pad;
    const int ew = (L->ow - 1) * L->stride + L->k - L->w - L->pad;
    pads[0] = L->pad, pads[1] = L->pad, pads[2] = eh > 0 ? eh : 0, pads[3] = ew > 0 ? ew : 0;
}

static int conv_node(gb *g, const layer *L, const char *x, const char *out, int groups) {
    const int64_t wd[4] = {L->oc, groups > 1 ? 1 : L->c, L->k, L->k}, bd[1] = {L->oc};
    const char *in[3] = {x, param(g, L, "weight", L->w_off, wd, 4), NULL};
    if (!in[1]) return -1;
    int n = 2;
    if (L->n_b && !(in[n++] = param(g, L, "bias", L->b_off, bd, 1))) return -1;
    int64_t pads[4], ks[2] = {L->k, L->k}, st[2] = {L->stride, L->stride};
    window_pads(L, pads);
    return node(g, "Conv", out, n, in, attr_ints(g, "kernel_shape", ks, 2),
                attr_ints(g, "strides", st, 2), attr_ints(g, "pads", pads, 4),
                attr_i(g, "group", groups))
               ? 0
               : -1;
}

// The act family: one operator, or a few for the functions ONNX lacks (swish, hard swish, gelu).
static int act_nodes(gb *g, const layer *L, const char *x, const char *out) {
    const float one = 1.0f;
    const int64_t scalar[1] = {1};
    switch ((act_fn)layer_act_fn(L->kind)) {
    case ACT_SIGMOID: return op1(g, "Sigmoid", out, x);
    case ACT_TANH: return op1(g, "Tanh", out, x);
    case ACT_SOFTPLUS: return op1(g, "Softplus", out, x);
    case ACT_SELU: return op1(g, "Selu", out, x); // Keras's and ONNX's default constants
    case ACT_LEAKY_RELU:
        return node(g, "LeakyRelu", out, 1, &x, attr_f(g, "alpha", L->alpha), NULL, NULL, NULL)
                   ? 0
                   : -1;
    case ACT_ELU:
        return node(g, "Elu", out, 1, &x, attr_f(g, "alpha", L->alpha), NULL, NULL, NULL) ? 0 : -1;
    case ACT_HARD_SIGMOID:
        return node(g, "HardSigmoid", out, 1, &x, attr_f(g, "alpha", L->alpha),
                    attr_f(g, "beta", 0.5f), NULL, NULL)
                   ? 0
                   : -1;
    case ACT_RELU6: {
        const float lo = 0.0f, hi = L->alpha;
        const char *in[3] = {x, constant(g, "min", NULL, 0, &lo), constant(g, "max", NULL, 0, &hi)};
        return in[1] && in[2] && node(g, "Clip", out, 3, in, NULL, NULL, NULL, NULL) ? 0 : -1;
    }
    case ACT_SWISH: {
        char *s = tmp_name(g, out);
        return s && op1(g, "Sigmoid", s, x) == 0 && op2(g, "Mul", out, x, s) == 0 ? 0 : -1;
    }
    case ACT_HARD_SWISH: {
        char *s = tmp_name(g, out);
        return s &&
                       node(g, "HardSigmoid", s, 1, &x, attr_f(g, "alpha", L->alpha),
                            attr_f(g, "beta", 0.5f), NULL, NULL) &&
                       op2(g, "Mul", out, x, s) == 0
                   ? 0
                   : -1;
    }
    case ACT_GELU: {
        // 0.5 x (1 + erf(x / sqrt 2)), or with approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x +
        // 0.044715 x^3))).
        const float half = 0.5f;
        char *t = tmp_name(g, out), *u = tmp_name(g, out), *v = tmp_name(g, out),
             *w = tmp_name(g, out);
        const char *c1 = constant(g, "one", scalar, 0, &one),
                   *ch = constant(g, "half", scalar, 0, &half);
        if (!t || !u || !v || !w || !c1 || !ch) return -1;
        if (L->alpha == 0.0f) {
            const float r2 = 0.70710678118654752f;
            const char *cr = constant(g, "rsqrt2", scalar, 0, &r2);
            if (!cr || op2(g, "Mul", t, x, cr) || op1(g, "Erf", u, t)) return -1;
        } else {
            const float k0 = 0.7978845608028654f, k1 = 0.044715f;
            char *x3 = tmp_name(g, out), *x2 = tmp_name(g, out), *p = tmp_name(g, out),
                 *q = tmp_name(g, out);
            const char *c0 = constant(g, "k0", scalar, 0, &k0),
                       *ck = constant(g, "k1", scalar, 0, &k1);
            if (!x3 || !x2 || !p || !q || !c0 || !ck || op2(g, "Mul", x2, x, x) ||
                op2(g, "Mul", x3, x2, x) || op2(g, "Mul", p, x3, ck) || op2(g, "Add", q, x, p) ||
                op2(g, "Mul", t, q, c0) || op1(g, "Tanh", u, t))
                return -1;
        }
        return op2(g, "Add", v, u, c1) || op2(g, "Mul", w, x, v) || op2(g, "Mul", out, w, ch) ? -1
                                                                                              : 0;
    }
    case ACT_FN_COUNT: break;
    }
    return -1;
}

// Refuses a layer: -1 with e naming it.
static int refuse(ht_error *e, const layer *L, const char *why) {
    return ht_fail(e, "layer %s (%s): %s", L->name, layer_desc_of(L->kind)->name, why);
}

// Layer l's nodes, its output in g->name[l] and its rank in g->rank[l].
static int layer_node(gb *g, int l, ht_error *e) {
    const model *m = g->m;
    const layer *L = &m->layers[l];
    const unsigned fl = layer_flags(L->kind);
    const char *x;
    int r;
    input_of(g, l, 0, &x, &r);
    const char *out = L->name;
    int orank = r;
    // The spatial families read (N,C,H,W), the flat ones (N,F); permute reads its input's
    // (C,H,W) axes whichever way it comes.
    if (L->kind == LAYER_PERMUTE && r == 2) {
        const int64_t shape[4] = {0, L->c, L->h, L->w}; // 0: the batch, as it is
        const char *in[2] = {x, constant_i64(g, "shape", shape, 4)};
        char *t = tmp_name(g, out);
        if (!in[1] || !t || !node(g, "Reshape", t, 2, in, NULL, NULL, NULL, NULL)) return -1;
        x = t;
        r = orank = 4;
    } else if (fl & LF_SPATIAL) {
        if (r == 2 && !(L->h == 1 && L->w == 1))
            return refuse(e, L,
                          "reads an image made of a flat vector, which the export does not "
                          "reshape");
        if (!(x = as_rank(g, x, r, 4, out))) return -1;
        r = orank = 4;
    } else if ((fl & LF_FLAT) && L->kind != LAYER_PERMUTE) {
        if (!(x = as_rank(g, x, r, 2, out))) return -1;
        r = orank = 2;
    }
    const int C = L->c;
    switch (L->kind) {
    case LAYER_CONV2D:
        if (conv_node(g, L, x, out, 1)) return -1;
        break;
    case LAYER_DWCONV:
        if (conv_node(g, L, x, out, C)) return -1;
        break;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL: {
        int64_t pads[4], ks[2] = {L->k, L->k}, st[2] = {L->stride, L->stride};
        window_pads(L, pads);
        // A window clipped to the input averages what it holds (count_include_pad 0).
        if (!node(g, L->kind == LAYER_MAXPOOL ? "MaxPool" : "AveragePool", out, 1, &x,
                  attr_ints(g, "kernel_shape", ks, 2), attr_ints(g, "strides", st, 2),
                  attr_ints(g, "pads", pads, 4), NULL))
            return -1;
        break;
    }
    case LAYER_GLOBAL_AVGPOOL:
        if (op1(g, "GlobalAveragePool", out, x)) return -1;
        break;
    case LAYER_DENSE: {
        const int64_t wd[2] = {L->oc, (int64_t)layer_in_size(L)}, bd[1] = {L->oc};
        const char *in[3] = {x, param(g, L, "weight", L->w_off, wd, 2), NULL};
        if (!in[1]) return -1;
        int n = 2;
        if (L->n_b && !(in[n++] = param(g, L, "bias", L->b_off, bd, 1))) return -1;
        if (!node(g, "Gemm", out, n, in, attr_i(g, "transB", 1), NULL, NULL, NULL)) return -1;
        break;
    }
    case LAYER_RELU:
        if (op1(g, "Relu", out, x)) return -1;
        break;
    case LAYER_DROPOUT: // gone: its output is its input
        g->name[l] = (char *)x;
        g->rank[l] = (unsigned char)r;
        return 0;
    case LAYER_SOFTMAX_XENT:
        if (!(x = as_rank(g, x, r, 2, out))) return -1;
        orank = 2;
        if (!node(g, "Softmax", out, 1, &x, attr_i(g, "axis", 1), NULL, NULL, NULL)) return -1;
        break;
    case LAYER_SIGMOID_BCE: {
        if (!(x = as_rank(g, x, r, 2, out))) return -1;
        orank = 2;
        if (L->oc == (int)layer_in_size(L)) { // multi-label: a sigmoid each
            if (op1(g, "Sigmoid", out, x)) return -1;
            break;
        }
        // Binary: one logit, the two classes' probabilities (1 - p, p) as hetrain gives them.
        const float one = 1.0f;
        char *p = tmp_name(g, out), *q = tmp_name(g, out);
        const char *c1 = constant(g, "one", NULL, 0, &one);
        if (!p || !q || !c1 || op1(g, "Sigmoid", p, x) || op2(g, "Sub", q, c1, p)) return -1;
        const char *in[2] = {q, p};
        if (!node(g, "Concat", out, 2, in, attr_i(g, "axis", 1), NULL, NULL, NULL)) return -1;
        break;
    }
    case LAYER_BATCHNORM: {
        // Inference form: the moving mean and variance; gamma 1 and beta 0 where it has none.
        const int64_t d[1] = {C};
        const char *in[5] = {
            x, vec_or_fill(g, L, L->n_w != 0, "weight", L->w_off, C, 1.0f, "ones"),
            vec_or_fill(g, L, L->n_b != 0, "bias", L->b_off, C, 0.0f, "zeros"),
            param(g, L, "running_mean", L->s_off, d, 1),
            param(g, L, "running_var", L->s_off + (size_t)C, d, 1)};
        for (int k = 1; k < 5; k++)
            if (!in[k]) return -1;
        if (!node(g, "BatchNormalization", out, 5, in, attr_f(g, "epsilon", L->eps), NULL, NULL,
                  NULL))
            return -1;
        break;
    }
    case LAYER_PERMUTE: {
        const int64_t perm[4] = {0, L->perm[0], L->perm[1], L->perm[2]};
        if (!node(g, "Transpose", out, 1, &x, attr_ints(g, "perm", perm, 4), NULL, NULL, NULL))
            return -1;
        break;
    }
    case LAYER_ZEROPAD: {
        const int64_t pads[8] = {0, 0, L->pad_top, L->pad_left, 0, 0, L->pad_bottom, L->pad_right};
        const char *in[2] = {x, constant_i64(g, "pads", pads, 8)};
        if (!in[1] || !node(g, "Pad", out, 2, in, NULL, NULL, NULL, NULL)) return -1;
        break;
    }
    case LAYER_ADD:
    case LAYER_SUBTRACT:
    case LAYER_MULTIPLY:
    case LAYER_AVERAGE:
    case LAYER_MAXIMUM:
    case LAYER_CONCAT: {
        // Every input at the highest rank among them (a (N,C) scale as (N,C,1,1)).
        const char *in[MODEL_MAX_IN];
        int rk[MODEL_MAX_IN], top = 2;
        for (int k = 0; k < L->n_in; k++) {
            input_of(g, l, k, &in[k], &rk[k]);
            if (rk[k] > top) top = rk[k];
        }
        for (int k = 0; k < L->n_in; k++)
            if (!(in[k] = as_rank(g, in[k], rk[k], top, out))) return -1;
        orank = top;
        static const char *const ops[] = {
            [LAYER_ADD] = "Sum",      [LAYER_SUBTRACT] = "Sub", [LAYER_MULTIPLY] = "Mul",
            [LAYER_AVERAGE] = "Mean", [LAYER_MAXIMUM] = "Max",  [LAYER_CONCAT] = "Concat"};
        if (L->kind == LAYER_MULTIPLY) { // binary: folded left to right as Keras does
            const char *acc = in[0];
            for (int k = 1; k < L->n_in; k++) {
                char *o = k + 1 == L->n_in ? (char *)out : tmp_name(g, out);
                if (!o || op2(g, "Mul", o, acc, in[k])) return -1;
                acc = o;
            }
        } else if (!node(g, ops[L->kind], out, L->n_in, in,
                         L->kind == LAYER_CONCAT ? attr_i(g, "axis", 1) : NULL, NULL, NULL, NULL)) {
            return -1;
        }
        break;
    }
    case LAYER_RESCALE: {
        const int64_t none[1] = {1};
        const char *s = constant(g, "scale", none, 0, &L->scale),
                   *o = constant(g, "offset", none, 0, &L->offset);
        char *t = tmp_name(g, out);
        if (!s || !o || !t || op2(g, "Mul", t, x, s) || op2(g, "Add", out, t, o)) return -1;
        break;
    }
    case LAYER_NORMALIZE: {
        // (x - mean) / s, or inverted mean + x * s, with s = max(sqrt(variance), its floor).
        float *mean = a_alloc(&g->a, sizeof(float) * (size_t)C),
              *sd = a_alloc(&g->a, sizeof(float) * (size_t)C);
        if (!mean || !sd) return -1;
        for (int c = 0; c < C; c++) {
            const int i = L->n_const == 1 ? 0 : c;
            mean[c] = L->n_const ? L->c_mean[i] : g->params[L->s_off + (size_t)c];
            sd[c] = normalize_std(L->n_const ? L->c_var[i]
                                             : g->params[L->s_off + (size_t)C + (size_t)c]);
        }
        const char *cm = chan_const(g, "mean", mean, C, r), *cs = chan_const(g, "std", sd, C, r);
        char *t = tmp_name(g, out);
        if (!cm || !cs || !t) return -1;
        if (L->invert ? op2(g, "Mul", t, x, cs) || op2(g, "Add", out, t, cm)
                      : op2(g, "Sub", t, x, cm) || op2(g, "Div", out, t, cs))
            return -1;
        break;
    }
    case LAYER_LAYERNORM: {
        // Over the channels of each position: the channels last for LayerNormalization.
        const int64_t to_last[4] = {0, 2, 3, 1}, back[4] = {0, 3, 1, 2};
        const char *in[3] = {x, vec_or_fill(g, L, L->n_w != 0, "weight", L->w_off, C, 1.0f, "ones"),
                             vec_or_fill(g, L, L->n_b != 0, "bias", L->b_off, C, 0.0f, "zeros")};
        if (!in[1] || !in[2]) return -1;
        char *t = tmp_name(g, out), *u = tmp_name(g, out);
        if (!t || !u) return -1;
        if (r == 4) {
            if (!node(g, "Transpose", t, 1, &x, attr_ints(g, "perm", to_last, 4), NULL, NULL, NULL))
                return -1;
            in[0] = t;
        }
        if (!node(g, "LayerNormalization", r == 4 ? u : out, 3, in, attr_i(g, "axis", -1),
                  attr_f(g, "epsilon", L->eps), NULL, NULL))
            return -1;
        if (r == 4 && !node(g, "Transpose", out, 1, (const char *const *)&u,
                            attr_ints(g, "perm", back, 4), NULL, NULL, NULL))
            return -1;
        break;
    }
    case LAYER_LAYERSCALE: {
        const int64_t d4[3] = {C, 1, 1}, d2[1] = {C};
        const char *gm = param(g, L, "weight", L->w_off, r == 4 ? d4 : d2, r == 4 ? 3 : 1);
        if (!gm || op2(g, "Mul", out, x, gm)) return -1;
        break;
    }
    default:
        if (layer_act_fn(L->kind) < 0) return refuse(e, L, "has no ONNX form in this export");
        if (act_nodes(g, L, x, out)) return -1;
        break;
    }
    g->name[l] = (char *)out;
    g->rank[l] = (unsigned char)orank;
    return 0;
}

// ---- the model ----

static Onnx__ValueInfoProto *value_info(gb *g, const char *name, const int64_t *dims, int nd) {
    Onnx__ValueInfoProto *v = a_alloc(&g->a, sizeof *v);
    Onnx__TypeProto *t = a_alloc(&g->a, sizeof *t);
    Onnx__TypeProto__Tensor *tt = a_alloc(&g->a, sizeof *tt);
    Onnx__TensorShapeProto *sh = a_alloc(&g->a, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dv = a_alloc(&g->a, sizeof *dv * (size_t)nd);
    if (!v || !t || !tt || !sh || !dv) return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(t);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int k = 0; k < nd; k++) {
        Onnx__TensorShapeProto__Dimension *d = a_alloc(&g->a, sizeof *d);
        if (!d) return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[k] < 0) { // the batch
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            if (!(d->dim_param = a_str(&g->a, "N"))) return NULL;
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[k];
        }
        dv[k] = d;
    }
    sh->dim = dv, sh->n_dim = (size_t)nd;
    tt->has_elem_type = 1, tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, tt->shape = sh;
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, t->tensor_type = tt;
    v->name = a_str(&g->a, name), v->type = t;
    return v->name ? v : NULL;
}

static Onnx__StringStringEntryProto *meta(gb *g, const char *k, const char *v) {
    Onnx__StringStringEntryProto *p = a_alloc(&g->a, sizeof *p);
    if (!p) return NULL;
    onnx__string_string_entry_proto__init(p);
    p->key = a_str(&g->a, k), p->value = a_str(&g->a, v);
    return p->key && p->value ? p : NULL;
}

// The graph and model in g's arena; *out the packed bytes (malloc'd).
static int build(gb *g, const onnx_opts *o, uint8_t **bytes, size_t *len, ht_error *e) {
    const model *m = g->m;
    const int64_t in_nchw[4] = {-1, m->in_c, m->in_h, m->in_w},
                  in_nhwc[4] = {-1, m->in_h, m->in_w, m->in_c};
    if (o->nhwc) {
        static const int64_t perm[4] = {0, 3, 1, 2};
        const char *x = "input";
        if (!node(g, "Transpose", "input/nchw", 1, &x, attr_ints(g, "perm", perm, 4), NULL, NULL,
                  NULL))
            goto oom;
    } else {
        const char *x = "input";
        if (op1(g, "Identity", "input/nchw", x)) goto oom;
    }
    for (int l = 0; l < m->n_layers; l++) {
        int rc = layer_node(g, l, e);
        if (rc < 0 && g->a.failed) goto oom;
        if (rc < 0) return -1; // refused
    }
    const int last = m->n_layers - 1;
    const int64_t out_d[2] = {-1, (int64_t)layer_out_size(&m->layers[last])};
    if (op1(g, "Identity", "output", g->name[last])) goto oom;

    Onnx__GraphProto *gr = a_alloc(&g->a, sizeof *gr);
    Onnx__ModelProto *mp = a_alloc(&g->a, sizeof *mp);
    Onnx__OperatorSetIdProto *opset = a_alloc(&g->a, sizeof *opset);
    Onnx__OperatorSetIdProto **opsets = a_alloc(&g->a, sizeof *opsets);
    Onnx__ValueInfoProto **gin = a_alloc(&g->a, sizeof *gin), **gout = a_alloc(&g->a, sizeof *gout);
    Onnx__StringStringEntryProto **props = a_alloc(&g->a, 2 * sizeof *props);
    if (!gr || !mp || !opset || !opsets || !gin || !gout || !props) goto oom;
    onnx__graph_proto__init(gr);
    onnx__model_proto__init(mp);
    onnx__operator_set_id_proto__init(opset);
    gin[0] = value_info(g, "input", o->nhwc ? in_nhwc : in_nchw, 4);
    gout[0] = value_info(g, "output", out_d, 2);
    if (!gin[0] || !gout[0]) goto oom;
    gr->name = a_str(&g->a, m->name);
    gr->node = (Onnx__NodeProto **)g->nodes.v, gr->n_node = g->nodes.n;
    gr->initializer = (Onnx__TensorProto **)g->inits.v, gr->n_initializer = g->inits.n;
    gr->input = gin, gr->n_input = 1;
    gr->output = gout, gr->n_output = 1;
    opset->domain = a_str(&g->a, ""), opset->has_version = 1, opset->version = ONNX_OPSET;
    opsets[0] = opset;
    mp->has_ir_version = 1, mp->ir_version = ONNX__VERSION__IR_VERSION;
    mp->opset_import = opsets, mp->n_opset_import = 1;
    mp->producer_name = a_str(&g->a, "hetrain");
    mp->producer_version = a_str(&g->a, HT_VERSION);
    char src[300] = "";
    if (o->source) snprintf(src, sizeof src, " (%s)", o->source);
    mp->doc_string = a_fmt(&g->a, "%s%s; input %s", m->name, src,
                           o->nhwc ? "(N,H,W,C) as Keras feeds it" : "(N,C,H,W)");
    mp->graph = gr;
    props[0] = meta(g, "input_layout", o->nhwc ? "NHWC" : "NCHW");
    if (!props[0] || !gr->name || !opset->domain || !mp->producer_name || !mp->doc_string) goto oom;
    mp->metadata_props = props, mp->n_metadata_props = 1;
    char *names = model_classes_json(m, e);
    if (!names && m->n_class_names) return -1;
    if (names) {
        props[1] = meta(g, "class_names", names);
        free(names);
        if (!props[1]) goto oom;
        mp->n_metadata_props = 2;
    }
    *len = onnx__model_proto__get_packed_size(mp);
    *bytes = malloc(*len ? *len : 1);
    if (!*bytes) goto oom;
    onnx__model_proto__pack(mp, *bytes);
    return 0;
oom:
    return ht_fail(e, "out of memory building the ONNX graph");
}

int onnx_export(const model *m, const float *params, const char *path, const onnx_opts *o,
                ht_error *e) {
    if (access(path, F_OK) == 0)
        return ht_fail(e, "%s already exists; choose another file or remove it", path);
    gb g = {.m = m, .params = params};
    g.name = calloc((size_t)m->n_layers + 1, sizeof *g.name);
    g.rank = calloc((size_t)m->n_layers + 1, 1);
    uint8_t *bytes = NULL;
    size_t len = 0;
    int rc = -1;
    if (!g.name || !g.rank) {
        ht_fail(e, "out of memory");
        goto out;
    }
    if (build(&g, o, &bytes, &len, e) < 0) goto out;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ht_fail(e, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    int bad = fwrite(bytes, 1, len, f) != len;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    const int err = errno;
    bad |= fclose(f) != 0;
    if (bad) {
        ht_fail(e, "writing %s: %s", tmp, strerror(err ? err : EIO));
        unlink(tmp);
        goto out;
    }
    if (stfile_publish(tmp, path, e) < 0) {
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(bytes);
    free(g.name);
    free(g.rank);
    arena_free(&g.a);
    return rc;
}
