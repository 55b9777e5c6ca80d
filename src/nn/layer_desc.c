// The layer kinds' descriptions (layer_desc.h): their families' shapes, tensors, costs and keys.
#include "layer_desc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers.h"

// ---- shapes --------------------------------------------------------------------------------

// Sets L's window (k, stride, before-pad) and output size: pad >= 0 as given, pad < 0
// Keras/TensorFlow "same" (layers.h's same_pad_before), whose before-pads must agree between
// the axes, as the layer keeps one.
static int same_padding(layer *L, int idx, const char *kname, int k, int stride, int pad,
                        ht_error *err) {
    L->k = k, L->stride = stride;
    if (pad >= 0) {
        L->pad = pad;
        L->oh = conv_out_dim(L->h, k, stride, pad);
        L->ow = conv_out_dim(L->w, k, stride, pad);
        return 0;
    }
    int ph = same_pad_before(L->h, k, stride), pw = same_pad_before(L->w, k, stride);
    if (ph != pw)
        return ht_fail(err, "layer %d (%s): \"same\" padding of input %dx%d (window %d, stride "
                       "%d) pads %d rows but %d columns before; one pad for both is supported",
                       idx, kname, L->h, L->w, k, stride, ph, pw);
    L->pad = ph;
    L->oh = same_out_dim(L->h, stride);
    L->ow = same_out_dim(L->w, stride);
    return 0;
}

static int conv_shape(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                      ht_error *err) {
    (void)n_classes;
    if (s->filters < 1 || s->filters > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (conv): filters %d: expected 1..%d", idx, s->filters,
                       MODEL_MAX_DIM);
    if (s->k < 1 || s->k > MODEL_MAX_K)
        return ht_fail(err, "layer %d (conv): kernel size %d: expected 1..%d", idx, s->k,
                       MODEL_MAX_K);
    int stride = s->stride ? s->stride : 1;
    if (stride < 1 || stride > MODEL_MAX_K)
        return ht_fail(err, "layer %d (conv): stride %d: expected 1..%d", idx, stride,
                       MODEL_MAX_K);
    int pad = s->pad;
    if (pad > MODEL_MAX_K)
        return ht_fail(err, "layer %d (conv): pad %d: expected 0..%d", idx, pad, MODEL_MAX_K);
    if (pad >= 0 && (L->h + 2 * pad < s->k || L->w + 2 * pad < s->k))
        return ht_fail(err, "layer %d (conv): kernel %d does not fit input %dx%d (pad %d)", idx,
                       s->k, L->h, L->w, pad);
    if (same_padding(L, idx, kname, s->k, stride, pad, err)) return -1;
    L->oc = s->filters;
    L->n_w = (size_t)L->oc * L->c * L->k * L->k;
    L->n_b = s->no_bias ? 0 : (size_t)L->oc;
    return 0;
}

static int pool_shape(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                      ht_error *err) {
    (void)n_classes;
    if (s->k < 1 || s->k > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): window %d: expected 1..%d", idx, kname, s->k,
                       MODEL_MAX_K);
    int stride = s->stride ? s->stride : s->k;
    if (stride < 1 || stride > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): stride %d: expected 1..%d", idx, kname, stride,
                       MODEL_MAX_K);
    if (s->pad > 0) // a window of padding alone would have no maximum or average
        return ht_fail(err, "layer %d (%s): pad %d: pooling pads 0 (valid) or \"same\"", idx,
                       kname, s->pad);
    if (s->pad == 0 && (L->h < s->k || L->w < s->k))
        return ht_fail(err, "layer %d (%s): window %d does not fit input %dx%d", idx, kname,
                       s->k, L->h, L->w);
    if (same_padding(L, idx, kname, s->k, stride, s->pad, err)) return -1;
    L->oc = L->c;
    return 0;
}

static int gap_shape(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                     ht_error *err) {
    (void)s, (void)n_classes, (void)idx, (void)kname, (void)err;
    L->oc = L->c, L->oh = 1, L->ow = 1;
    return 0;
}

static int dense_shape(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                       ht_error *err) {
    (void)n_classes, (void)kname;
    if (s->units < 1 || s->units > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (dense): units %d: expected 1..%d", idx, s->units,
                       MODEL_MAX_DIM);
    L->c = (int)layer_in_size(L), L->h = 1, L->w = 1; // flattens its input
    L->oc = s->units, L->oh = 1, L->ow = 1;
    L->n_w = (size_t)L->oc * L->c;
    L->n_b = s->no_bias ? 0 : (size_t)L->oc;
    return 0;
}

static int same_shape(layer *L) {
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    return 0;
}

static int relu_shape(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                      ht_error *err) {
    (void)s, (void)n_classes, (void)idx, (void)kname, (void)err;
    return same_shape(L);
}

static int dropout_shape(layer *L, const layer_spec *s, int n_classes, int idx,
                         const char *kname, ht_error *err) {
    (void)n_classes, (void)kname;
    if (!(s->rate >= 0 && s->rate < 1))
        return ht_fail(err, "layer %d (dropout): rate %g: expected 0 <= rate < 1", idx,
                       (double)s->rate);
    L->rate = s->rate;
    return same_shape(L);
}

static int softmax_shape(layer *L, const layer_spec *s, int n_classes, int idx,
                         const char *kname, ht_error *err) {
    (void)s, (void)kname;
    if (layer_in_size(L) != (size_t)n_classes)
        return ht_fail(err, "layer %d (softmax): input has %zu features (%dx%dx%d), expected the "
                       "%d classes", idx, layer_in_size(L), L->c, L->h, L->w, n_classes);
    L->c = n_classes, L->h = 1, L->w = 1;
    L->oc = L->c, L->oh = 1, L->ow = 1;
    return 0;
}

// The act family's parameter: the kind's default unless given; within what the function takes.
static int act_shape(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                     ht_error *err) {
    (void)n_classes;
    const layer_desc *d = layer_desc_of(L->kind);
    if (s->alpha_set && !d->param_key)
        return ht_fail(err, "layer %d (%s): takes no parameter", idx, kname);
    double a = s->alpha_set ? s->alpha : d->param_default;
    if (!isfinite(a) || fabs(a) > 1e6)
        return ht_fail(err, "layer %d (%s): %s %g: expected a finite number", idx, kname,
                       d->param_key, a);
    if (L->kind == LAYER_GELU && a != 0 && a != 1)
        return ht_fail(err, "layer %d (gelu): approximate %g: expected 0 (erf) or 1 (tanh)", idx,
                       a);
    if (L->kind == LAYER_HARD_SIGMOID && !(a > 0))
        return ht_fail(err, "layer %d (hard_sigmoid): slope %g: expected a number > 0", idx, a);
    L->alpha = (float)a;
    return same_shape(L);
}

// ---- tensors and costs ---------------------------------------------------------------------

static int conv_weight_shape(const layer *L, int64_t *shape) {
    shape[0] = L->oc, shape[1] = L->c, shape[2] = L->k, shape[3] = L->k;
    return 4;
}

static int dense_weight_shape(const layer *L, int64_t *shape) {
    shape[0] = L->oc, shape[1] = (int64_t)L->c * L->h * L->w;
    return 2;
}

static double conv_macs(const layer *L) { return (double)L->oc * L->oh * L->ow * L->c * L->k * L->k; }
static double dense_macs(const layer *L) { return (double)L->c * L->oc; }
static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

// ---- the families and kinds ----------------------------------------------------------------

static const char *const conv_keys[] = {"filters", "size", "stride", "pad", "activation", "init",
                                        "init_arg", "bias", "bias_init", "bias_arg", NULL};
static const char *const pool_keys[] = {"size", "stride", "pad", NULL};
static const char *const dense_keys[] = {"units", "activation", "init", "init_arg", "bias",
                                         "bias_init", "bias_arg", NULL};
static const char *const dropout_keys[] = {"rate", NULL};
static const char *const no_keys[] = {NULL};
static const char *const conv_required[] = {"filters", "size", NULL};
static const char *const size_required[] = {"size", NULL};
static const char *const units_required[] = {"units", NULL};
static const char *const rate_required[] = {"rate", NULL};
// The act family's one parameter goes by its kind's param_key (config.c looks it up there).

static const layer_family family_conv = {"conv", LF_PARAMS | LF_SPATIAL | LF_WINDOW, conv_keys,
                                         conv_required, conv_shape, conv_weight_shape,
                                         conv_macs};
static const layer_family family_pool = {"pool", LF_SPATIAL | LF_WINDOW, pool_keys,
                                         size_required, pool_shape, NULL, no_macs};
static const layer_family family_gap = {"gap", LF_SPATIAL, no_keys, no_keys, gap_shape, NULL, no_macs};
static const layer_family family_dense = {"dense", LF_PARAMS | LF_FLAT, dense_keys,
                                          units_required, dense_shape, dense_weight_shape, dense_macs};
static const layer_family family_relu = {"relu", LF_IN_PLACE | LF_ACTIVATION, no_keys, no_keys,
                                         relu_shape, NULL, no_macs};
static const layer_family family_dropout = {"dropout", LF_IN_PLACE, dropout_keys,
                                            rate_required, dropout_shape, NULL, no_macs};
static const layer_family family_softmax = {"softmax", LF_FLAT | LF_LAST | LF_ACTIVATION, no_keys,
                                            no_keys, softmax_shape, NULL, no_macs};
static const layer_family family_act = {"act", LF_ACTIVATION, no_keys, no_keys, act_shape, NULL,
                                        no_macs};

const layer_desc layer_descs[LAYER_KIND_COUNT] = {
#define LAYER_DESC_ROW(id, fam, name, prefix, keras, key, dflt)                                  \
    [LAYER_##id] = {name, prefix, keras, key, dflt, &family_##fam},
    LAYER_KINDS(LAYER_DESC_ROW)
#undef LAYER_DESC_ROW
};

int layer_act_fn(layer_kind k) {
    // act_fn lists the act family's kinds in layer_kinds.h's order: k's is their count before it.
    if (layer_descs[k].family != &family_act) return -1;
    int n = 0;
    for (int i = 0; i < (int)k; i++) n += layer_descs[i].family == &family_act;
    return n;
}

int layer_kind_by_name(const char *name, int keras) {
    for (int k = 0; name && k < LAYER_KIND_COUNT; k++)
        if (!strcmp(name, layer_descs[k].name) ||
            (keras && layer_descs[k].keras_class && !strcmp(name, layer_descs[k].keras_class)))
            return k;
    return -1;
}

int layer_kind_by_activation(const char *name) {
    if (!strcmp(name, "linear")) return -1;
    if (!strcmp(name, "silu")) return LAYER_SWISH; // Keras 3's name, swish its alias
    int k = layer_kind_by_name(name, 0);
    return k >= 0 && (layer_flags((layer_kind)k) & LF_ACTIVATION) ? k : -2;
}

const char *layer_activation_list(void) {
    static char list[256];
    if (list[0]) return list;
    size_t n = 0;
    for (int k = 0; k < LAYER_KIND_COUNT && n < sizeof list; k++)
        if ((layer_flags((layer_kind)k) & LF_ACTIVATION) && k != LAYER_SOFTMAX_XENT)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s, ", layer_descs[k].name);
    if (n < sizeof list) snprintf(list + n, sizeof list - n, "softmax");
    return list;
}
