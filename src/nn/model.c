// Sequential models: building layer by layer with shape checks, the two reference presets,
// parameter initialisers and the summary table. The config-file front end is in config.c.
#include "nn/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "core/rng.h"

// ---- presets -------------------------------------------------------------------------------

// Keras's defaults for the 3-layer net (glorot conv, lecun dense as the original set, zero bias).
#define CONV3(f, p)                                                                            \
    {.kind = LAYER_CONV2D, .filters = f, .k = 3, .stride = 1, .pad = p,                       \
     .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_ZEROS}
#define DENSE3(u) {.kind = LAYER_DENSE, .units = u, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_ZEROS}
// The TensorFlow 2-layer net: every weight N(0, 0.1) truncated at 2 stddev, every bias 0.1.
#define CONV2(f)                                                                               \
    {.kind = LAYER_CONV2D, .filters = f, .k = 5, .stride = 1, .pad = -1,                      \
     .w_init = INIT_TRUNCATED_NORMAL, .w_arg = 0.1f, .b_init = INIT_CONSTANT, .b_arg = 0.1f}
#define DENSE2(u)                                                                              \
    {.kind = LAYER_DENSE, .units = u, .w_init = INIT_TRUNCATED_NORMAL, .w_arg = 0.1f,         \
     .b_init = INIT_CONSTANT, .b_arg = 0.1f}
#define RELU {.kind = LAYER_RELU}
#define POOL2 {.kind = LAYER_MAXPOOL, .k = 2}
#define DROPOUT(r) {.kind = LAYER_DROPOUT, .rate = r}
#define SOFTMAX {.kind = LAYER_SOFTMAX_XENT}

static const layer_spec cnn3_layers[] = {
    CONV3(32, 1), RELU, CONV3(48, 1), RELU, POOL2, CONV3(32, 1), RELU, POOL2,
    DENSE3(128),  RELU, DROPOUT(0.25f), DENSE3(128), RELU, DROPOUT(0.25f), DENSE3(10), SOFTMAX,
};
static const layer_spec cnn2_layers[] = {
    CONV2(32), RELU, POOL2, CONV2(64), RELU, POOL2, DENSE2(1024), RELU, DROPOUT(0.5f),
    DENSE2(10), SOFTMAX,
};

const char *const conv_algo_names[] = {
    [CONV_ALGO_DIRECT] = "direct", [CONV_ALGO_AUTO] = "auto", [CONV_ALGO_WINOGRAD] = "winograd",
    [CONV_ALGO_WINOGRAD2] = "winograd2", [CONV_ALGO_GEMM] = "gemm", NULL,
};
const char *const precision_names[] = {[PRECISION_F32] = "f32", [PRECISION_BF16] = "bf16", NULL};

// Also the defaults of a config file's [net] section. Adam's betas are set here too so that
// `optimizer = adam` alone gets the usual ones.
static const train_setup cnn3_setup = {
    .optim = OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .nesterov = 1, .decay = 1e-6f,
    .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .batch = 1000, .epochs = 10, .val_split = 0.2f,
    .conv_algo = MODEL_DEFAULT_CONV_ALGO,
};
// DESIGN.md gives no epoch count for this net; 10 matches the other one.
static const train_setup cnn2_setup = {
    .optim = OPTIM_ADAM, .lr = 5e-4f, .momentum = 0, .nesterov = 0, .decay = 0,
    .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .batch = 50, .epochs = 10, .val_split = 0.2f,
    .conv_algo = MODEL_DEFAULT_CONV_ALGO,
};

typedef struct preset {
    const char *name, *alias;
    const layer_spec *layers;
    int n_layers;
    const train_setup *setup;
} preset;

static const preset presets[] = {
    {"cnn2d_3layer_fullconnected_3layer", "cnn3", cnn3_layers,
     (int)(sizeof cnn3_layers / sizeof cnn3_layers[0]), &cnn3_setup},
    {"cnn2d_2layer_full_connected_2layer", "cnn2", cnn2_layers,
     (int)(sizeof cnn2_layers / sizeof cnn2_layers[0]), &cnn2_setup},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

// Full names only; each also answers to its short alias ("cnn3", "cnn2"), which
// model_init_preset accepts and its error message lists.
const char *const model_preset_names[] = {
    "cnn2d_3layer_fullconnected_3layer",
    "cnn2d_2layer_full_connected_2layer",
    NULL,
};

// The preset of that name or alias, or NULL.
static const preset *find_preset(const char *name) {
    for (int i = 0; name && i < N_PRESETS; i++)
        if (!strcmp(name, presets[i].name) || !strcmp(name, presets[i].alias)) return &presets[i];
    return NULL;
}

int model_is_preset(const char *name) { return find_preset(name) != NULL; }

static int fail_unknown_preset(ht_error *err, const char *name) {
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < N_PRESETS && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s (%s)", i ? ", " : "",
                                presets[i].name, presets[i].alias);
    return ht_fail(err, "unknown model \"%.64s\": expected a preset (%s) or a .cfg file",
                   name ? name : "(null)", list);
}

int model_init_preset(model *m, const char *name, ht_error *err) {
    memset(m, 0, sizeof *m);
    const preset *p = find_preset(name);
    if (!p) return fail_unknown_preset(err, name);
    if (model_begin(m, p->name, 1, 28, 28, 10, err)) goto fail;
    m->setup = *p->setup;
    for (int i = 0; i < p->n_layers; i++)
        if (model_add(m, &p->layers[i], err)) goto fail;
    if (model_finish(m, err)) goto fail;
    return 0;
fail:
    ht_wrap(err, "preset %s", p->name);
    model_free(m);
    return -1;
}

void model_free(model *m) {
    if (!m) return;
    free(m->layers);
    free(m->tensors);
    free(m->class_names);
    memset(m, 0, sizeof *m);
}

// ---- building ------------------------------------------------------------------------------

int model_begin(model *m, const char *name, int c, int h, int w, int n_classes, ht_error *err) {
    memset(m, 0, sizeof *m);
    if (!name || !*name || strlen(name) >= sizeof m->name)
        return ht_fail(err, "model name must be 1..%zu characters", sizeof m->name - 1);
    if (c < 1 || h < 1 || w < 1 || c > MODEL_MAX_DIM || h > MODEL_MAX_DIM || w > MODEL_MAX_DIM ||
        (int64_t)c * h * w >= MODEL_MAX_ELEMS)
        return ht_fail(err, "input %dx%dx%d: each of CxHxW must be 1..%d and C*H*W < 2^31", c, h,
                       w, MODEL_MAX_DIM);
    if (n_classes < 2 || n_classes > MODEL_MAX_CLASSES)
        return ht_fail(err, "classes %d: expected 2..%d", n_classes, MODEL_MAX_CLASSES);
    strcpy(m->name, name);
    m->in_c = c;
    m->in_h = h;
    m->in_w = w;
    m->n_classes = n_classes;
    m->setup = cnn3_setup;
    return 0;
}

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 31) return 0;
    for (; *s; s++) // safetensors keys and JSON: keep to a plain identifier
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

static int check_init(init_kind kind, float arg, float arg2, int vs, const char *what, int idx,
                      const char *kname, ht_error *err) {
    if ((unsigned)kind >= INIT_KIND_COUNT)
        return ht_fail(err, "layer %d (%s): unknown %s init %d", idx, kname, what, (int)kind);
    if (!isfinite(arg) || !isfinite(arg2))
        return ht_fail(err, "layer %d (%s): %s init argument is not finite", idx, kname, what);
    if ((kind == INIT_TRUNCATED_NORMAL || kind == INIT_RANDOM_NORMAL) && !(arg > 0))
        return ht_fail(err, "layer %d (%s): %s %s needs a stddev > 0, got %g", idx, kname, what,
                       init_kind_names[kind], (double)arg);
    if (kind == INIT_RANDOM_UNIFORM && !(arg <= arg2))
        return ht_fail(err, "layer %d (%s): %s random_uniform needs minval <= maxval, got %g, %g",
                       idx, kname, what, (double)arg, (double)arg2);
    if (kind == INIT_VARIANCE_SCALING &&
        (!(arg > 0) || (vs & INIT_VS_MODE) > INIT_VS_FAN_AVG ||
         (vs & INIT_VS_DIST) > INIT_VS_UNIFORM || (vs & ~(INIT_VS_MODE | INIT_VS_DIST))))
        return ht_fail(err, "layer %d (%s): %s variance_scaling needs a scale > 0 and a known "
                       "mode and distribution, got %g, %d", idx, kname, what, (double)arg, vs);
    return 0;
}

// Regularizer factors are finite and >= 0, and only on the tensors a layer has.
static int check_reg(const layer_spec *s, int has_bias, int idx, const char *kname,
                     ht_error *err) {
    const float f[4] = {s->w_l1, s->w_l2, s->b_l1, s->b_l2};
    for (int i = 0; i < 4; i++)
        if (!(f[i] >= 0 && isfinite(f[i])))
            return ht_fail(err, "layer %d (%s): regularizer factor %g: expected a finite number "
                           ">= 0", idx, kname, (double)f[i]);
    if (!has_bias && (s->b_l1 > 0 || s->b_l2 > 0))
        return ht_fail(err, "layer %d (%s): a bias regularizer without a bias", idx, kname);
    return 0;
}

// One input's shape: an earlier layer's output, or the model's input.
static void input_shape(const model *m, int from, int *c, int *h, int *w) {
    if (from == MODEL_INPUT) {
        *c = m->in_c, *h = m->in_h, *w = m->in_w;
    } else {
        const layer *P = &m->layers[from];
        *c = P->oc, *h = P->oh, *w = P->ow;
    }
}

// What an input is called in messages.
static const char *input_name(const model *m, int from) {
    return from == MODEL_INPUT ? "the model's input" : m->layers[from].name;
}

// L's inputs from s (the layer before unless s names them) and its input shape; a merge's
// inputs must all have that shape.
static int set_inputs(const model *m, layer *L, const layer_spec *s, int idx, const char *kname,
                      ht_error *err) {
    const int merge = (layer_flags(s->kind) & LF_MERGE) != 0;
    if (s->n_from < 0 || s->n_from > MODEL_MAX_IN)
        return ht_fail(err, "layer %d (%s): %d inputs: expected 1..%d", idx, kname, s->n_from,
                       MODEL_MAX_IN);
    L->n_in = s->n_from ? s->n_from : 1;
    L->in[0] = idx - 1; // MODEL_INPUT for the first layer
    for (int k = 0; k < s->n_from; k++) {
        if (s->from[k] < MODEL_INPUT || s->from[k] >= idx)
            return ht_fail(err, "layer %d (%s): input %d is layer %d: expected an earlier "
                           "layer (0..%d) or the model's input", idx, kname, k + 1, s->from[k],
                           idx - 1);
        if (s->from[k] >= 0 && (layer_flags(m->layers[s->from[k]].kind) & LF_LAST))
            return ht_fail(err, "layer %d (%s): its input %s is the loss head, which nothing "
                           "may read", idx, kname, m->layers[s->from[k]].name);
        L->in[k] = s->from[k];
    }
    if (merge && L->n_in < 2)
        return ht_fail(err, "layer %d (%s): merges 2..%d inputs, given %d", idx, kname,
                       MODEL_MAX_IN, L->n_in);
    if (!merge && L->n_in > 1)
        return ht_fail(err, "layer %d (%s): takes one input, given %d", idx, kname, L->n_in);
    input_shape(m, L->in[0], &L->c, &L->h, &L->w);
    L->in_ch[0] = L->c;
    L->in_hw[0] = L->h * L->w;
    const int concat = (layer_flags(s->kind) & LF_CONCAT) != 0;
    for (int k = 1; k < L->n_in; k++) {
        int c, h, w;
        input_shape(m, L->in[k], &c, &h, &w);
        L->in_ch[k] = c;
        L->in_hw[k] = h * w;
        if (concat && (h != L->h || w != L->w))
            return ht_fail(err, "layer %d (%s): input %d (%s) is %dx%d, input 1 (%s) %dx%d: "
                           "the inputs of %s must have one height and width", idx, kname, k + 1,
                           input_name(m, L->in[k]), h, w, input_name(m, L->in[0]), L->h, L->w,
                           kname);
        // An element-wise merge broadcasts a 1x1 input with the first's channels over its
        // height and width, as Keras's merges broadcast (N,1,1,C) against (N,H,W,C).
        const int bcast = h == 1 && w == 1 && c == L->c;
        if (!concat && !bcast && (c != L->c || h != L->h || w != L->w))
            return ht_fail(err, "layer %d (%s): input %d (%s) is %dx%dx%d, input 1 (%s) "
                           "%dx%dx%d: the inputs of %s must have one shape, or after the first "
                           "be 1x1 with its channels (broadcast over its height and width)", idx,
                           kname, k + 1, input_name(m, L->in[k]), c, h, w,
                           input_name(m, L->in[0]), L->c, L->h, L->w, kname);
    }
    return 0;
}

// A layer called again (s->share): it computes with the parameters of layer owner (or of the
// layer that one shares), which must be of its kind and of the same shapes, and holds none.
static int share_params(const model *m, layer *L, int owner, int idx, const char *kname,
                        ht_error *err) {
    if (owner < 0 || owner >= idx)
        return ht_fail(err, "layer %d (%s): shares the parameters of layer %d: expected an "
                       "earlier layer (0..%d)", idx, kname, owner, idx - 1);
    if (m->layers[owner].share) owner = m->layers[owner].share - 1;
    const layer *O = &m->layers[owner];
    if (O->kind != L->kind)
        return ht_fail(err, "layer %d (%s): shares the parameters of %s, a %s layer: a layer "
                       "shares those of a layer of its kind", idx, kname, O->name,
                       model_kind_name(O->kind));
    if (!O->n_w && !O->n_b)
        return ht_fail(err, "layer %d (%s): %s has no parameters to share", idx, kname, O->name);
    if (O->n_s)
        return ht_fail(err, "layer %d (%s): shares the parameters of %s, which keeps a state "
                       "(its moving statistics): hetrain shares parameters, not a state", idx,
                       kname, O->name);
    if (L->n_w != O->n_w || L->n_b != O->n_b || L->oc != O->oc || L->k != O->k)
        return ht_fail(err, "layer %d (%s): shares the parameters of %s (%zu weights, %d "
                       "outputs) but would need %zu weights and %d outputs: a shared layer's "
                       "inputs must have the first call's shape", idx, kname, O->name, O->n_w,
                       O->oc, L->n_w, L->oc);
    L->w_off = O->w_off, L->b_off = O->b_off;
    L->w_init = O->w_init, L->b_init = O->b_init;
    L->w_l1 = O->w_l1, L->w_l2 = O->w_l2, L->b_l1 = O->b_l1, L->b_l2 = O->b_l2;
    L->frozen = O->frozen;
    L->share = owner + 1;
    return 0;
}

int model_add(model *m, const layer_spec *s, ht_error *err) {
    int idx = m->n_layers;
    if (m->in_c < 1) return ht_fail(err, "model_add before model_begin");
    if ((unsigned)s->kind >= LAYER_KIND_COUNT)
        return ht_fail(err, "layer %d: unknown kind %d", idx, (int)s->kind);
    const layer_desc *d = layer_desc_of(s->kind);
    const char *kname = d->name;
    if (idx >= MODEL_MAX_LAYERS)
        return ht_fail(err, "layer %d (%s): more than %d layers", idx, kname, MODEL_MAX_LAYERS);
    if (idx > 0 && (layer_flags(m->layers[idx - 1].kind) & LF_LAST))
        return ht_fail(err, "layer %d (%s): nothing may follow %s, which must be last", idx,
                       kname, layer_desc_of(m->layers[idx - 1].kind)->name);

    layer L = {.kind = s->kind, .w_off = LAYER_NO_PARAM, .b_off = LAYER_NO_PARAM,
               .s_off = LAYER_NO_PARAM};
    if (set_inputs(m, &L, s, idx, kname, err)) return -1;

    if (s->name) {
        if (!valid_name(s->name))
            return ht_fail(err, "layer %d (%s): name \"%.40s\" must be 1..31 of [A-Za-z0-9_-]",
                           idx, kname, s->name);
        strcpy(L.name, s->name);
    } else if (d->family->flags & LF_LAST) { // alone in a model: no number
        strcpy(L.name, d->prefix);
    } else {
        int count = 1;
        for (int i = 0; i < idx; i++) count += m->layers[i].kind == s->kind;
        snprintf(L.name, sizeof L.name, "%s%d", d->prefix, count);
    }
    for (int i = 0; i < idx; i++)
        if (!strcmp(m->layers[i].name, L.name))
            return ht_fail(err, "layer %d (%s): name \"%s\" is already used by layer %d", idx,
                           kname, L.name, i);

    if (d->family->shape(&L, s, d, m->n_classes, idx, err)) return -1;
    if (L.oh < 1 || L.ow < 1) // unreachable after the fit checks; kept as the invariant
        return ht_fail(err, "layer %d (%s): output %dx%d is empty", idx, kname, L.oh, L.ow);
    if ((int64_t)L.oc * L.oh * L.ow >= MODEL_MAX_ELEMS)
        return ht_fail(err, "layer %d (%s): output %dx%dx%d has 2^31 or more elements", idx,
                       kname, L.oc, L.oh, L.ow);

    if (s->no_bias && !(d->family->flags & LF_PARAMS))
        return ht_fail(err, "layer %d (%s): only conv and dense layers have a bias to leave out",
                       idx, kname);
    if (L.n_w) {
        if (check_init(s->w_init, s->w_arg, s->w_arg2, s->w_vs, "weight", idx, kname, err) ||
            (L.n_b &&
             check_init(s->b_init, s->b_arg, s->b_arg2, s->b_vs, "bias", idx, kname, err)))
            return -1;
        if ((int64_t)(m->n_params + L.n_w + L.n_b + L.n_s) >= MODEL_MAX_ELEMS)
            return ht_fail(err, "layer %d (%s): %zu parameters take the total to 2^31 or more",
                           idx, kname, L.n_w + L.n_b);
        L.w_init = s->w_init, L.w_arg = s->w_arg;
        L.b_init = s->b_init, L.b_arg = s->b_arg;
        L.w_arg2 = s->w_arg2, L.b_arg2 = s->b_arg2, L.w_vs = s->w_vs, L.b_vs = s->b_vs;
        L.w_off = m->n_params - m->n_state; // the state goes after the trainable parameters
        L.b_off = L.n_b ? L.w_off + L.n_w : LAYER_NO_PARAM;
        if (check_reg(s, L.n_b > 0, idx, kname, err)) return -1;
        L.w_l1 = s->w_l1, L.w_l2 = s->w_l2;
        if (L.n_b) L.b_l1 = s->b_l1, L.b_l2 = s->b_l2;
    } else if (L.n_b) { // batchnorm without gamma (scale = false): beta alone
        L.b_init = s->b_init, L.b_arg = s->b_arg, L.b_arg2 = s->b_arg2, L.b_vs = s->b_vs;
        L.b_off = m->n_params - m->n_state;
    }
    L.frozen |= s->frozen; // or the family made it so (normalize: constants)
    L.keras_as = s->keras_as, L.keras_seq = s->keras_seq;
    if (s->share && share_params(m, &L, s->share - 1, idx, kname, err)) return -1;
    const size_t own = L.share ? 0 : L.n_w + L.n_b + L.n_s; // a sharer's are its owner's
    if ((int64_t)(m->n_params + own) >= MODEL_MAX_ELEMS)
        return ht_fail(err, "layer %d (%s): %zu parameters take the total to 2^31 or more", idx,
                       kname, L.n_w + L.n_b + L.n_s);

    layer *grown = realloc(m->layers, (size_t)(idx + 1) * sizeof *grown);
    if (!grown) return ht_fail(err, "layer %d (%s): out of memory", idx, kname);
    m->layers = grown;
    m->layers[idx] = L;
    m->n_layers = idx + 1;
    if (L.share) m->layers[L.share - 1].n_sharers++;
    m->n_params += own;
    m->n_state += L.n_s;
    m->n_trainable = m->n_params - m->n_state;
    return 0;
}

// ---- the tensor table ----------------------------------------------------------------------

// Appends layer l's weight or bias, or state tensor `state`, to the table: its name, its
// PyTorch shape, its place.
static int add_tensor(model *m, int l, int bias, tensor_state state, ht_error *err) {
    static const char *const suffix[] = {"weight", "running_mean", "running_var",
                                         "num_batches_tracked"};
    const layer *L = &m->layers[l];
    model_tensor *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%.*s.%s", (int)strnlen(L->name, sizeof L->name), L->name,
             bias ? "bias" : suffix[state]);
    t->layer = l;
    t->bias = bias;
    t->state = state;
    t->integer = state == TENSOR_NUM_BATCHES;
    t->off = bias ? L->b_off : L->w_off;
    t->n = bias ? L->n_b : L->n_w;
    if (state) { // running mean, running variance, count
        t->off = L->s_off + (state - 1) * (size_t)L->oc;
        t->n = state == TENSOR_NUM_BATCHES ? 1 : (size_t)L->oc;
    }
    int64_t shape[MODEL_TENSOR_MAX_DIMS];
    const layer_family *f = layer_desc_of(L->kind)->family;
    if (state == TENSOR_NUM_BATCHES) {
        t->ndim = 0; // a scalar
    } else if (bias || state) {
        t->ndim = 1;
        shape[0] = (int64_t)t->n;
    } else if (f->weight_shape) {
        t->ndim = f->weight_shape(L, shape);
    } else {
        t->ndim = 1;
        shape[0] = (int64_t)L->n_w;
    }
    uint64_t prod = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (shape[i] < 0)
            return ht_fail(err, "model %s: tensor \"%s\" has a negative dimension", m->name,
                           t->name);
        t->shape[i] = (uint64_t)shape[i];
        prod *= t->shape[i];
    }
    if (prod != t->n)
        return ht_fail(err, "model %s: tensor \"%s\" has %zu values but its shape needs %" PRIu64,
                       m->name, t->name, t->n, prod);
    // Tensors follow each other without gaps, as model_add lays them out.
    size_t at = m->n_tensors ? m->tensors[m->n_tensors - 1].off + m->tensors[m->n_tensors - 1].n
                             : 0;
    if (t->off != at || t->n > m->n_params - at)
        return ht_fail(err, "model %s: tensor \"%s\" at offset %zu (+%zu) does not follow the "
                       "previous one (offset %zu) within the %zu parameters", m->name, t->name,
                       t->off, t->n, at, m->n_params);
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, t->name))
            return ht_fail(err, "model %s: tensor name \"%s\" used twice (duplicate layer name)",
                           m->name, t->name);
    m->n_tensors++;
    return 0;
}

static int build_tensors(model *m, ht_error *err) {
    free(m->tensors);
    m->tensors = NULL;
    m->n_tensors = 0;
    if (!(m->tensors = ht_calloc((size_t)m->n_layers * 5, sizeof *m->tensors, err))) return -1;
    int out = -1;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->share) { // its tensors are its owner's
            out = L->share - 1;
            continue;
        }
        if (L->w_off != LAYER_NO_PARAM && L->n_w > 0 && add_tensor(m, l, 0, 0, err)) return -1;
        if (L->b_off != LAYER_NO_PARAM && L->n_b > 0 && add_tensor(m, l, 1, 0, err)) return -1;
        if (L->w_off != LAYER_NO_PARAM || L->b_off != LAYER_NO_PARAM) out = l;
    }
    for (int l = 0; l < m->n_layers; l++)
        for (int k = TENSOR_RUNNING_MEAN; m->layers[l].n_s && k <= TENSOR_NUM_BATCHES; k++)
            if (add_tensor(m, l, 0, (tensor_state)k, err)) return -1;
    size_t end = m->n_tensors ? m->tensors[m->n_tensors - 1].off + m->tensors[m->n_tensors - 1].n
                              : 0;
    if (end != m->n_params)
        return ht_fail(err, "model %s: its tensors hold %zu of its %zu parameters", m->name, end,
                       m->n_params);
    for (int i = 0; i < m->n_tensors; i++) m->tensors[i].output = m->tensors[i].layer == out;
    return 0;
}

int model_finish(model *m, ht_error *err) {
    if (m->n_layers == 0) return ht_fail(err, "model \"%s\" has no layers", m->name);
    const layer *last = &m->layers[m->n_layers - 1];
    if (!(layer_flags(last->kind) & LF_LAST))
        return ht_fail(err, "layer %d (%s): the model must end with softmax over the %d classes",
                       m->n_layers - 1, model_kind_name(last->kind), m->n_classes);
    // Every layer's output is read by a later layer, but the loss head's.
    for (int l = 0; l < m->n_layers - 1; l++) {
        int read = 0;
        for (int k = l + 1; k < m->n_layers && !read; k++) {
            const layer *K = &m->layers[k];
            if (!K->n_in) read = k == l + 1;
            for (int i = 0; i < K->n_in; i++) read |= K->in[i] == l;
        }
        if (!read)
            return ht_fail(err, "layer %d (%s): no layer reads its output (only the last layer's "
                           "is the model's)", l, m->layers[l].name);
    }
    // The state goes after every trainable parameter, in layer order.
    size_t n_state = 0;
    for (int l = 0; l < m->n_layers; l++) n_state += m->layers[l].n_s;
    if (n_state > m->n_params)
        return ht_fail(err, "model %s: more state than parameters", m->name);
    m->n_state = n_state;
    m->n_trainable = m->n_params - n_state;
    m->label_width = last->kind == LAYER_SIGMOID_BCE && layer_in_size(last) > 1 ? last->oc : 1;
    for (int l = 0, at = 0; l < m->n_layers; l++) {
        layer *L = &m->layers[l];
        L->s_off = L->n_s ? m->n_trainable + (size_t)at : LAYER_NO_PARAM;
        at += (int)L->n_s;
    }
    if (build_tensors(m, err)) {
        free(m->tensors);
        m->tensors = NULL;
        m->n_tensors = 0;
        return -1;
    }
    return 0;
}

int model_tensors(const model *m, const model_tensor **t) {
    *t = m->tensors;
    return m->n_tensors;
}

int model_output_tensors(const model *m, const model_tensor **t) {
    int first = m->n_tensors;
    while (first > 0 && m->tensors[first - 1].output) first--;
    *t = first < m->n_tensors ? &m->tensors[first] : NULL;
    return m->n_tensors - first;
}

const model_tensor *model_tensor_at(const model *m, size_t i) {
    // The tensors tile params in order: binary search for the last one starting at or before i.
    int lo = 0, hi = m->n_tensors;
    if (i >= m->n_params || hi == 0) return NULL;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (m->tensors[mid].off <= i) lo = mid;
        else hi = mid;
    }
    return &m->tensors[lo];
}

int model_find_layer(const model *m, const char *name) {
    for (int i = 0; name && i < m->n_layers; i++)
        if (!strcmp(m->layers[i].name, name)) return i;
    return -1;
}

// ---- initialisation ------------------------------------------------------------------------

const char *const init_kind_names[] = {
    [INIT_ZEROS] = "zeros",
    [INIT_CONSTANT] = "constant",
    [INIT_LECUN_UNIFORM] = "lecun_uniform",
    [INIT_GLOROT_UNIFORM] = "glorot_uniform",
    [INIT_TRUNCATED_NORMAL] = "truncated_normal",
    [INIT_ONES] = "ones",
    [INIT_GLOROT_NORMAL] = "glorot_normal",
    [INIT_HE_UNIFORM] = "he_uniform",
    [INIT_HE_NORMAL] = "he_normal",
    [INIT_LECUN_NORMAL] = "lecun_normal",
    [INIT_RANDOM_UNIFORM] = "random_uniform",
    [INIT_RANDOM_NORMAL] = "random_normal",
    [INIT_VARIANCE_SCALING] = "variance_scaling",
    NULL,
};

// x ~ N(0, stddev) redrawn while beyond 2 stddev (Keras's truncated normal).
static double trunc_normal(ht_rng *r, double stddev) {
    double x;
    do x = ht_rng_normal(r) * stddev;
    while (fabs(x) > 2.0 * stddev);
    return x;
}

// variance_scaling(scale, mode, distribution) over fans as Keras computes them.
static void vs_fill(float *p, size_t n, double scale, int vs, double fan_in, double fan_out,
                    ht_rng *r) {
    int mode = vs & INIT_VS_MODE, dist = vs & INIT_VS_DIST;
    double fan = mode == INIT_VS_FAN_IN    ? fan_in
                 : mode == INIT_VS_FAN_OUT ? fan_out
                                           : (fan_in + fan_out) / 2.0;
    double s = scale / (fan > 1.0 ? fan : 1.0);
    if (dist == INIT_VS_UNIFORM) {
        double limit = sqrt(3.0 * s);
        for (size_t i = 0; i < n; i++) p[i] = (float)((2.0 * ht_rng_double(r) - 1.0) * limit);
    } else if (dist == INIT_VS_UNTRUNCATED) {
        double stddev = sqrt(s);
        for (size_t i = 0; i < n; i++) p[i] = (float)(ht_rng_normal(r) * stddev);
    } else {
        double stddev = sqrt(s) / INIT_TRUNC_STDDEV;
        for (size_t i = 0; i < n; i++) p[i] = (float)trunc_normal(r, stddev);
    }
}

static void init_fill(float *p, size_t n, init_kind kind, float arg, float arg2, int vs,
                      double fan_in, double fan_out, ht_rng *r) {
    double limit = 0;
    switch (kind) {
    case INIT_ZEROS:
    case INIT_ONES:
    case INIT_CONSTANT: {
        float v = kind == INIT_ZEROS ? 0.0f : kind == INIT_ONES ? 1.0f : arg;
        for (size_t i = 0; i < n; i++) p[i] = v;
        return;
    }
    case INIT_LECUN_UNIFORM:
        limit = sqrt(3.0 / fan_in);
        break;
    case INIT_GLOROT_UNIFORM:
        limit = sqrt(6.0 / (fan_in + fan_out));
        break;
    case INIT_TRUNCATED_NORMAL: // the mean added after the draw: mean 0 keeps the old bits
        for (size_t i = 0; i < n; i++) p[i] = (float)(trunc_normal(r, arg) + arg2);
        return;
    case INIT_RANDOM_NORMAL:
        for (size_t i = 0; i < n; i++) p[i] = (float)(ht_rng_normal(r) * arg + arg2);
        return;
    case INIT_RANDOM_UNIFORM:
        for (size_t i = 0; i < n; i++)
            p[i] = (float)(arg + ((double)arg2 - arg) * ht_rng_double(r));
        return;
    case INIT_GLOROT_NORMAL:
        vs_fill(p, n, 1.0, INIT_VS_FAN_AVG | INIT_VS_TRUNCATED, fan_in, fan_out, r);
        return;
    case INIT_HE_UNIFORM:
        vs_fill(p, n, 2.0, INIT_VS_FAN_IN | INIT_VS_UNIFORM, fan_in, fan_out, r);
        return;
    case INIT_HE_NORMAL:
        vs_fill(p, n, 2.0, INIT_VS_FAN_IN | INIT_VS_TRUNCATED, fan_in, fan_out, r);
        return;
    case INIT_LECUN_NORMAL:
        vs_fill(p, n, 1.0, INIT_VS_FAN_IN | INIT_VS_TRUNCATED, fan_in, fan_out, r);
        return;
    case INIT_VARIANCE_SCALING:
        vs_fill(p, n, arg, vs, fan_in, fan_out, r);
        return;
    case INIT_KIND_COUNT:
        return;
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((2.0 * ht_rng_double(r) - 1.0) * limit);
}

void model_init_params(const model *m, float *params, uint64_t seed) {
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->n_s) { // batchnorm's state, as Keras and PyTorch start it: mean 0, variance 1
            for (int c = 0; c < L->oc; c++) {
                params[L->s_off + c] = 0.0f;
                params[L->s_off + L->oc + c] = 1.0f;
            }
            params[L->s_off + 2 * L->oc] = 0.0f;
        }
        if ((L->w_off == LAYER_NO_PARAM && L->b_off == LAYER_NO_PARAM) || L->share) continue;
        // One generator per layer, so adding or changing a layer leaves the others' draws alone.
        ht_rng r;
        ht_rng_seed(&r, ht_mix64(seed ^ (uint64_t)l));
        double fan_in = L->c, fan_out = L->oc; // Keras: receptive field times channels
        const layer_family *f = layer_desc_of(L->kind)->family;
        if (f->fans) f->fans(L, &fan_in, &fan_out);
        if (L->n_w)
            init_fill(params + L->w_off, L->n_w, L->w_init, L->w_arg, L->w_arg2, L->w_vs, fan_in,
                      fan_out, &r);
        // Keras's fans of a bias (shape [n]) are its length, both of them.
        if (L->n_b)
            init_fill(params + L->b_off, L->n_b, L->b_init, L->b_arg, L->b_arg2, L->b_vs,
                      (double)L->n_b, (double)L->n_b, &r);
    }
}

// "GlorotUniform" -> "glorot_uniform"; a name already in snake case stays as it is.
static void snake_case(const char *name, char *out, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; name[i] && j + 2 < cap; i++) {
        char ch = name[i];
        if (ch >= 'A' && ch <= 'Z') {
            if (i > 0 && j + 3 < cap) out[j++] = '_';
            ch = (char)(ch - 'A' + 'a');
        }
        out[j++] = ch;
    }
    out[j] = 0;
}

// Keras's number under `key`, or def when absent; -1 with why when it is not a number.
static int init_num(init_get_fn get, void *ctx, const char *init, const char *key, double def,
                    double *out, char *why, size_t cap) {
    const char *str = NULL;
    double num = def;
    int t = get(ctx, key, &num, &str);
    if (t == 0) num = def;
    else if (t != 1 || !isfinite(num) || fabs(num) > 1e30) {
        snprintf(why, cap, "%s: %s: expected a number", init, key);
        return -1;
    }
    *out = num;
    return 0;
}

static int init_word(init_get_fn get, void *ctx, const char *init, const char *key,
                     const char *def, const char *const *names, int *out, char *why, size_t cap) {
    const char *str = def;
    double num;
    int t = get(ctx, key, &num, &str);
    if (t == 0) str = def;
    else if (t != 2) {
        snprintf(why, cap, "%s: %s: expected a string", init, key);
        return -1;
    }
    for (int i = 0; names[i]; i++)
        if (!strcmp(str, names[i])) {
            *out = i;
            return 0;
        }
    snprintf(why, cap, "%s: %s \"%.40s\": expected %s%s%s%s%s", init, key, str, names[0],
             names[1] ? ", " : "", names[1] ? names[1] : "", names[2] ? ", " : "",
             names[2] ? names[2] : "");
    return -1;
}

int model_init_keras_name(init_desc *d, const char *name, init_get_fn get, void *ctx, char *why,
                          size_t cap) {
    char snake[48];
    snake_case(name, snake, sizeof snake);
    if (!strcmp(snake, "uniform")) strcpy(snake, "random_uniform");
    if (!strcmp(snake, "normal")) strcpy(snake, "random_normal");
    int kind = -1;
    for (int i = 0; init_kind_names[i]; i++)
        if (!strcmp(snake, init_kind_names[i])) kind = i;
    if (kind < 0) {
        snprintf(why, cap, "initializer \"%.40s\" is not supported; hetrain has zeros, ones, "
                 "constant, random_uniform, random_normal, truncated_normal, glorot_uniform, "
                 "glorot_normal, he_uniform, he_normal, lecun_uniform, lecun_normal, "
                 "variance_scaling", name);
        return -1;
    }
    *d = (init_desc){.kind = (init_kind)kind};
    const char *iname = init_kind_names[kind];
    double a = 0, b = 0;
    switch ((init_kind)kind) {
    case INIT_CONSTANT:
        if (init_num(get, ctx, iname, "value", 0, &a, why, cap)) return -1;
        d->arg = (float)a;
        break;
    case INIT_RANDOM_UNIFORM:
        if (init_num(get, ctx, iname, "minval", -0.05, &a, why, cap) ||
            init_num(get, ctx, iname, "maxval", 0.05, &b, why, cap))
            return -1;
        if (!(a <= b)) {
            snprintf(why, cap, "%s: minval %g is above maxval %g", iname, a, b);
            return -1;
        }
        d->arg = (float)a, d->arg2 = (float)b;
        break;
    case INIT_RANDOM_NORMAL:
    case INIT_TRUNCATED_NORMAL:
        if (init_num(get, ctx, iname, "mean", 0, &b, why, cap) ||
            init_num(get, ctx, iname, "stddev", 0.05, &a, why, cap))
            return -1;
        if (!(a > 0)) {
            snprintf(why, cap, "%s: stddev %g: expected a number > 0", iname, a);
            return -1;
        }
        d->arg = (float)a, d->arg2 = (float)b;
        break;
    case INIT_VARIANCE_SCALING: {
        static const char *const modes[] = {"fan_in", "fan_out", "fan_avg", NULL};
        static const char *const dists[] = {"truncated_normal", "untruncated_normal", "uniform",
                                            "normal", NULL};
        int mode, dist;
        if (init_num(get, ctx, iname, "scale", 1.0, &a, why, cap) ||
            init_word(get, ctx, iname, "mode", "fan_in", modes, &mode, why, cap) ||
            init_word(get, ctx, iname, "distribution", "truncated_normal", dists, &dist, why, cap))
            return -1;
        if (!(a > 0)) {
            snprintf(why, cap, "%s: scale %g: expected a number > 0", iname, a);
            return -1;
        }
        if (dist == 3) dist = 0; // Keras 2's "normal" is truncated_normal
        d->arg = (float)a;
        d->vs = mode | dist << 2;
        if (a == 1.0 && d->vs == (INIT_VS_FAN_AVG | INIT_VS_UNIFORM))
            *d = (init_desc){.kind = INIT_GLOROT_UNIFORM};
        else if (a == 1.0 && d->vs == (INIT_VS_FAN_IN | INIT_VS_UNIFORM))
            *d = (init_desc){.kind = INIT_LECUN_UNIFORM};
        break;
    }
    default:
        break;
    }
    return 0;
}

// ---- reporting -----------------------------------------------------------------------------

const char *model_kind_name(layer_kind k) { return layer_desc_of(k)->name; }

double model_layer_macs(const model *m, int l, int backward) {
    const layer *L = &m->layers[l];
    double fwd = layer_desc_of(L->kind)->family->macs(L);
    if (!backward) return fwd;
    // The weight gradient costs what the forward does, and so does the input gradient, which
    // layer 0 never computes: nothing needs the gradient of the network's input.
    return l > 0 ? 2 * fwd : fwd;
}

double model_forward_macs(const model *m) {
    double macs = 0;
    for (int l = 0; l < m->n_layers; l++) macs += model_layer_macs(m, l, 0);
    return macs;
}

// 1234567 -> "1,234,567", as Keras prints parameter counts.
static const char *group_digits(size_t v, char buf[32]) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%zu", v), j = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[j++] = ',';
        buf[j++] = tmp[i];
    }
    buf[j] = 0;
    return buf;
}

// ---- regularizers and frozen layers ---------------------------------------------------------

// l1 * sum|x| + l2 * sum(x^2) over n floats, in double.
static double reg_term(const float *x, size_t n, float l1, float l2) {
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s1 += fabs((double)x[i]), s2 += (double)x[i] * x[i];
    return (double)l1 * s1 + (double)l2 * s2;
}

double model_reg_penalty(const model *m, const float *params) {
    double total = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->share) continue; // its owner's, counted there
        if (L->n_w && (L->w_l1 > 0 || L->w_l2 > 0))
            total += reg_term(params + L->w_off, L->n_w, L->w_l1, L->w_l2);
        if (L->n_b && (L->b_l1 > 0 || L->b_l2 > 0))
            total += reg_term(params + L->b_off, L->n_b, L->b_l1, L->b_l2);
    }
    return total;
}

int model_has_reg(const model *m) {
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->w_l1 > 0 || L->w_l2 > 0 || L->b_l1 > 0 || L->b_l2 > 0) return 1;
    }
    return 0;
}

size_t model_frozen_params(const model *m) {
    size_t n = 0;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].frozen && !m->layers[l].share) n += m->layers[l].n_w + m->layers[l].n_b;
    return n;
}

int model_set_frozen(model *m, int l, int frozen) {
    if (l < 0 || l >= m->n_layers) return -1;
    const int owner = m->layers[l].share ? m->layers[l].share - 1 : l;
    layer *O = &m->layers[owner];
    if (!O->n_w && !O->n_b && !O->n_s) return 0;
    for (int k = 0; k < m->n_layers; k++)
        if (k == owner || m->layers[k].share == owner + 1) m->layers[k].frozen = frozen != 0;
    return 0;
}

// The layer called name, or a message listing a few of the model's.
static int find_named(const model *m, const char *name, const char *option, ht_error *e) {
    const int l = model_find_layer(m, name);
    if (l >= 0) return l;
    return ht_fail(e, "%s %s: model %s has no layer of that name (its layers are %s, %s, ... %s; "
                   "hetrain summary lists them)", option, name, m->name, m->layers[0].name,
                   m->n_layers > 1 ? m->layers[1].name : "-", m->layers[m->n_layers - 1].name);
}

int model_freeze_names(model *m, const char *names, ht_error *e) {
    char list[1024];
    snprintf(list, sizeof list, "%s", names);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        const int l = find_named(m, t, "--freeze", e);
        if (l < 0) return -1;
        model_set_frozen(m, l, 1);
    }
    return 0;
}

int model_trainable_from(model *m, const char *name, ht_error *e) {
    const int from = find_named(m, name, "--trainable-from", e);
    if (from < 0) return -1;
    for (int l = 0; l < from; l++) model_set_frozen(m, l, 1);
    return 0;
}

// A state tensor's values when Keras's weight files have no variable for it, else 0.
static size_t keras_uncounted(const model *m, const model_tensor *t) {
    if (t->state == TENSOR_TRAINABLE) return 0;
    const layer_family *f = layer_desc_of(m->layers[t->layer].kind)->family;
    for (int r = 0; r < f->n_keras_vars; r++)
        if (f->keras_vars[r].state == t->state && f->keras_vars[r].layout != LKW_NONE) return 0;
    return t->n;
}

size_t model_keras_uncounted(const model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_tensors; i++) n += keras_uncounted(m, &m->tensors[i]);
    return n;
}

size_t model_layer_keras_uncounted(const model *m, int l) {
    size_t n = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].layer == l) n += keras_uncounted(m, &m->tensors[i]);
    return n;
}

// Whether some layer reads other than the one layer before it: the summary then says what
// each reads, as Keras's does for a Functional model ("Connected to").
static int model_is_graph(const model *m) {
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_in > 1 || (m->layers[l].n_in == 1 && m->layers[l].in[0] != l - 1))
            return 1;
    return 0;
}

void model_print_summary(const model *m, FILE *f) {
    char num[32], macs[32], shape[48], label[48];
    const int graph = model_is_graph(m);
    int lw = 20; // the label column: wider for long (Keras) layer names
    for (int l = 0; l < m->n_layers; l++) {
        int n = snprintf(label, sizeof label, "%s (%s)", m->layers[l].name,
                         model_kind_name(m->layers[l].kind));
        if (n > lw) lw = n < 47 ? n : 47;
    }
    int rule = lw + 52 + (graph ? 24 : 0);
    fprintf(f, "Model: \"%s\"  input %dx%dx%d, %d classes\n", m->name, m->in_c, m->in_h,
            m->in_w, m->n_classes);
    fprintf(f, "%-4s %-*s %-18s %12s %14s%s\n", "#", lw, "Layer (kind)", "Output shape",
            "Param #", "Forward MACs", graph ? "  Connected to" : "");
    for (int i = 0; i < rule; i++) fputc('=', f);
    fputc('\n', f);
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        snprintf(label, sizeof label, "%s (%s)", L->name, model_kind_name(L->kind));
        snprintf(shape, sizeof shape, "(%d, %d, %d)", L->oc, L->oh, L->ow);
        // A later call of a shared layer counts none: they are its first call's.
        const size_t own =
            L->share ? 0 : L->n_w + L->n_b + L->n_s - model_layer_keras_uncounted(m, l);
        fprintf(f, "%-4d %-*s %-18s %12s %14s", l, lw, label, shape, group_digits(own, num),
                group_digits((size_t)model_layer_macs(m, l, 0), macs));
        for (int k = 0; graph && k < (L->n_in ? L->n_in : 1); k++) {
            const int from = L->n_in ? L->in[k] : l - 1;
            fprintf(f, "%s%s", k ? ", " : "  ", from < 0 ? "input" : m->layers[from].name);
        }
        if (L->share) fprintf(f, "  (the parameters of %s)", m->layers[L->share - 1].name);
        fputc('\n', f);
    }
    for (int i = 0; i < rule; i++) fputc('=', f);
    fputc('\n', f);
    // Keras's counts: a batchnorm's moving mean and variance are non-trainable parameters; its
    // update count (PyTorch's num_batches_tracked) is hetrain's own, and not counted.
    const size_t counts = model_keras_uncounted(m);
    // A frozen layer's parameters are non-trainable too.
    size_t frozen = model_frozen_params(m);
    fprintf(f, "Total params: %s\n", group_digits(m->n_params - counts, num));
    if (m->n_state || frozen) {
        fprintf(f, "Trainable params: %s\n", group_digits(m->n_trainable - frozen, num));
        fprintf(f, "Non-trainable params: %s\n", group_digits(m->n_state - counts + frozen, num));
    }
    fprintf(f, "Forward multiply-adds per sample: %.2f M\n", model_forward_macs(m) / 1e6);
}
