// Keras's layer classes into hetrain's layers (keras_int.h): each Keras layer becomes zero or
// more hetrain layers (Conv2D with activation="relu": conv + relu; Flatten, InputLayer: none),
// and every shape and parameter count is checked against what Keras computes, so a layer
// hetrain would compute differently is refused, never changed.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

// ---- layers ---------------------------------------------------------------------------------

// An activation by Keras's name: the layer kind that computes it (layer_desc.h), or -1 for
// linear (none).
static int get_activation(kctx *k, json_object *cfg, int required, int *act) {
    const char *a;
    json_object *v = kget(cfg, "activation");
    if (v && json_object_is_type(v, json_type_object))
        return kfail(k, "activation: a custom activation is not supported");
    if (kget_str(k, cfg, "activation", required ? NULL : "linear", &a)) return -1;
    *act = layer_kind_by_activation(a);
    if (*act == -2)
        return kfail(k, "activation \"%.40s\": hetrain has linear, %s (softmax as the last step)",
                     a, layer_activation_list());
    return 0;
}

// model_add with the message under this layer's heading (model_add's own "layer N (kind): "
// names hetrain's index, which the user never wrote).
static int add(kctx *k, model *m, const layer_spec *s) {
    ht_error e;
    if (model_add(m, s, &e) == 0) return 0;
    const char *msg = e.msg, *cut = strstr(msg, "): ");
    if (!strncmp(msg, "layer ", 6) && cut) msg = cut + 3;
    return kfail(k, "%s", msg);
}

// Keras's output size along one axis.
static int keras_out(int in, int kk, int stride, int same) {
    return same ? (in + stride - 1) / stride : (in - kk) / stride + 1;
}

// Checks the layer model_add just made against what Keras computes for it.
static int check_layer(kctx *k, const model *m, int oc, int oh, int ow, size_t params) {
    const layer *L = &m->layers[m->n_layers - 1];
    if (L->oc != oc || L->oh != oh || L->ow != ow)
        return kfail(k, "hetrain computes an output of %dx%dx%d (CxHxW) where Keras has "
                     "%dx%dx%d", L->oc, L->oh, L->ow, oc, oh, ow);
    if (L->n_w + L->n_b != params)
        return kfail(k, "hetrain gives it %zu parameters where Keras has %zu", L->n_w + L->n_b,
                     params);
    return 0;
}

// The current output as Keras shapes it (without the batch axis), for build_config.
static int keras_shape(const kctx *k, const model *m, int64_t d[3]) {
    int c = m->in_c, h = m->in_h, w = m->in_w;
    if (m->n_layers) {
        const layer *L = &m->layers[m->n_layers - 1];
        c = L->oc, h = L->oh, w = L->ow;
    }
    if (k->rank == 1) {
        d[0] = (int64_t)c * h * w;
        return 1;
    }
    if (k->rank == 2) {
        d[0] = h, d[1] = w;
        return 2;
    }
    if (k->channels_first) d[0] = c, d[1] = h, d[2] = w;
    else d[0] = h, d[1] = w, d[2] = c;
    return 3;
}

// Keras 3 writes each built layer's input shape: it must be what the layers before gave.
static int check_build_config(kctx *k, const model *m, json_object *layer) {
    json_object *shape = kget(kget(layer, "build_config"), "input_shape");
    if (!shape || !json_object_is_type(shape, json_type_array)) return 0;
    int64_t d[3] = {0};
    int n = keras_shape(k, m, d);
    int ok = (int)json_object_array_length(shape) == n + 1;
    for (int i = 0; ok && i < n; i++) {
        json_object *e = kidx(shape, (size_t)i + 1);
        ok = json_object_is_type(e, json_type_int) && json_object_get_int64(e) == d[i];
    }
    if (ok) return 0;
    char got[48];
    snprintf(got, sizeof got, n == 1 ? "[%lld]" : n == 2 ? "[%lld, %lld]" : "[%lld, %lld, %lld]",
             (long long)d[0], (long long)d[1], (long long)d[2]);
    return kfail(k, "build_config input_shape %.60s, but the layers before it give %s",
                 json_object_to_json_string_ext(shape, JSON_C_TO_STRING_PLAIN), got);
}

static int need_image(kctx *k) {
    if (k->rank != 3)
        return kfail(k, "expects an image (height, width, channels), but its input has %d "
                     "axis%s", k->rank, k->rank == 1 ? "" : "es");
    return 0;
}

// The running output size of the model (before the layer being read).
static void cur_shape(const model *m, int *c, int *h, int *w) {
    if (m->n_layers == 0) {
        *c = m->in_c, *h = m->in_h, *w = m->in_w;
        return;
    }
    const layer *L = &m->layers[m->n_layers - 1];
    *c = L->oc, *h = L->oh, *w = L->ow;
}

// The layer's data_format against the model's: 0 the same, 1 the other, -1 an error.
static int other_format(kctx *k, json_object *cfg) {
    int first;
    if (kget_format(k, cfg, &first)) return -1;
    return first != k->channels_first;
}

// A layer whose data_format is not the model's. Keras hands it the model's tensor and the
// layer reads that tensor's axes in its own order: a channels_first layer of a channels_last
// model takes (H, W, C) as (channels, height, width) and works over the tensor's W and C, H its
// channels; a channels_last layer of a channels_first model works over C and H. hetrain runs it
// as Keras computes it: between two permutes (the permute family), the first giving the layer
// its input in its own order, the second putting its output back in the model's. In hetrain's
// (C, H, W) axes the first is (2, 3, 1) in a channels_last model (Keras's (H, W, C) read as
// channels first) and (3, 1, 2) in a channels_first one; the second is its inverse.
static int add_permute(kctx *k, model *m, const char *kname, const char *suffix, int inverse) {
    char buf[32];
    int fwd = !k->channels_first ? !inverse : inverse; // (2, 3, 1), else (3, 1, 2)
    layer_spec s = {.kind = LAYER_PERMUTE, .name = klayer_name(kname, suffix, buf, sizeof buf),
                    .perm = {fwd ? 2 : 3, fwd ? 3 : 1, fwd ? 1 : 2}};
    return add(k, m, &s);
}

// Keras's output of a window over the two axes a layer of the other data_format works over
// (add_permute), with OC channels (0: the input's), in hetrain's (C, H, W) order.
static void mixed_out(const kctx *k, const model *m, int kk, int stride, int same, int oc,
                      int64_t out[3]) {
    int64_t d[3] = {0};
    keras_shape(k, m, d);
    if (!k->channels_first) { // (H, W, C) taken as (C', H', W'): hetrain's (W', C', H')
        out[1] = oc ? oc : d[0];
        out[2] = keras_out((int)d[1], kk, stride, same);
        out[0] = keras_out((int)d[2], kk, stride, same);
    } else { // (C, H, W) taken as (H', W', C'): hetrain's order is Keras's
        out[0] = keras_out((int)d[0], kk, stride, same);
        out[1] = keras_out((int)d[1], kk, stride, same);
        out[2] = oc ? oc : d[2];
    }
}

static int add_softmax(kctx *k, model *m, const char *name, int last) {
    int c, h, w;
    cur_shape(m, &c, &h, &w);
    if (!last)
        return kfail(k, "softmax before the last layer: hetrain reads softmax only as the "
                     "network's last step (its softmax cross-entropy)");
    if (!(k->rank == 1 || (k->rank == 3 && h == 1 && w == 1)))
        return kfail(k, "softmax over a %dx%dx%d (CxHxW) output: hetrain's is over one vector "
                     "of classes; put Flatten or GlobalAveragePooling2D before it", c, h, w);
    int64_t n = (int64_t)c * h * w;
    if (n < 2 || n > 256)
        return kfail(k, "softmax over %lld classes: hetrain takes 2..256", (long long)n);
    m->n_classes = (int)n;
    layer_spec s = {.kind = LAYER_SOFTMAX_XENT, .name = name};
    return add(k, m, &s);
}

// A sigmoid as the network's last step: over one output (Dense(1, activation="sigmoid"))
// hetrain's binary head, sigmoid and binary cross-entropy, labels 0 and 1; over k outputs
// (Dense(k, activation="sigmoid")) the multi-label head, k labels of 0 or 1 a sample.
static int add_bce(kctx *k, model *m, const char *name) {
    int c, h, w;
    cur_shape(m, &c, &h, &w);
    int64_t n = (int64_t)c * h * w;
    if (n > 1 && (h != 1 || w != 1))
        return kfail(k, "a sigmoid over %dx%dx%d outputs as the last step (a label per position) "
                     "is not supported; hetrain's sigmoid heads take a flat output (Dense(k, "
                     "activation=\"sigmoid\"))", c, h, w);
    if (n > MODEL_MAX_LABELS)
        return kfail(k, "a multi-label sigmoid head over %lld labels: hetrain takes at most %d",
                     (long long)n, MODEL_MAX_LABELS);
    m->n_classes = n == 1 ? 2 : (int)n;
    layer_spec s = {.kind = LAYER_SIGMOID_BCE, .name = name};
    return add(k, m, &s);
}

// Keras's activation functions' parameters, where they differ from the layer classes':
// leaky_relu(negative_slope = 0.2) against LeakyReLU's 0.3; Keras 2's hard_sigmoid 0.2 x + 0.5
// against Keras 3's relu6(x + 3) / 6.
static void activation_defaults(const kctx *k, layer_spec *s) {
    if (s->kind == LAYER_LEAKY_RELU) s->alpha = 0.2f, s->alpha_set = 1;
    if (s->kind == LAYER_HARD_SIGMOID && k->keras2) s->alpha = 0.2f, s->alpha_set = 1;
}

// The activation (a layer kind, -1: none) that follows a Conv2D or Dense, named after it
// ("conv2d_relu").
static int add_activation(kctx *k, model *m, int act, const char *kname, int last) {
    char buf[32], suffix[24];
    if (act == LAYER_SOFTMAX_XENT) return add_softmax(k, m, NULL, last);
    if (act == LAYER_SIGMOID && last) return add_bce(k, m, NULL);
    if (act < 0) return 0;
    snprintf(suffix, sizeof suffix, "_%s", layer_desc_of((layer_kind)act)->name);
    layer_spec s = {.kind = (layer_kind)act, .name = klayer_name(kname, suffix, buf, sizeof buf)};
    activation_defaults(k, &s);
    return add(k, m, &s);
}

static const char *const weight_extras[] = {"activity_regularizer", "kernel_constraint",
                                            "bias_constraint", "lora_rank", NULL};

// A Conv2D's or Dense's weights: bias, activation, initializers, regularizers, and whether it
// is frozen (trainable false). Keras 3 adds the regularization term of trainable weights alone
// to the loss, Keras 2 of every weight: a frozen layer of a Keras 3 model keeps none (its
// weights are not updated either way).
static int read_weights(kctx *k, json_object *cfg, layer_spec *s, int *act) {
    int use_bias = 1;
    init_desc wi = {0}, bi = {0};
    if (kcheck_nulls(k, cfg, weight_extras, "hetrain adds no activity regularizers, "
                    "constraints or adapters") ||
        kget_bool(k, cfg, "use_bias", 1, &use_bias) || get_activation(k, cfg, 0, act) ||
        kget_init(k, cfg, "kernel_initializer", "glorot_uniform", &wi) ||
        kget_init(k, cfg, "bias_initializer", "zeros", &bi) ||
        kget_reg(k, cfg, "kernel_regularizer", &s->w_l1, &s->w_l2) ||
        kget_reg(k, cfg, "bias_regularizer", &s->b_l1, &s->b_l2))
        return -1;
    if (!use_bias) s->b_l1 = s->b_l2 = 0; // Keras makes no bias to regularize
    if (k->frozen && !k->keras2) s->w_l1 = s->w_l2 = s->b_l1 = s->b_l2 = 0;
    s->frozen = k->frozen;
    s->no_bias = !use_bias;
    s->w_init = wi.kind, s->w_arg = wi.arg, s->w_arg2 = wi.arg2, s->w_vs = wi.vs;
    s->b_init = bi.kind, s->b_arg = bi.arg, s->b_arg2 = bi.arg2, s->b_vs = bi.vs;
    return 0;
}

static int read_conv(kctx *k, model *m, json_object *cfg, const char *kname, int last) {
    int filters = 0, kk = 0, stride = 1, dil = 1, groups = 1, act = 0, c, h, w;
    const char *pad = "valid";
    layer_spec s = {.kind = LAYER_CONV2D};
    char buf[32];
    int other = need_image(k) ? -1 : other_format(k, cfg);
    if (other < 0 || kget_int(k, cfg, "filters", NO_DEFAULT, 1, 65536, &filters) ||
        kget_pair(k, cfg, "kernel_size", NO_DEFAULT, 1, 64, &kk) ||
        kget_pair(k, cfg, "strides", 1, 1, 64, &stride) ||
        kget_pair(k, cfg, "dilation_rate", 1, 1, 64, &dil) ||
        kget_int(k, cfg, "groups", 1, 1, 65536, &groups) ||
        kget_str(k, cfg, "padding", "valid", &pad) || read_weights(k, cfg, &s, &act))
        return -1;
    if (dil != 1) return kfail(k, "dilation_rate %d: hetrain's convolutions are dense (1)", dil);
    if (groups != 1) return kfail(k, "groups %d: hetrain's convolutions have one group", groups);
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    int64_t want[3];
    if (other) {
        mixed_out(k, m, kk, stride, same, filters, want);
        if (add_permute(k, m, kname, "_in", 0)) return -1;
    }
    cur_shape(m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "kernel %d does not fit its %dx%d input", kk, h, w);
    s.name = klayer_name(kname, "", buf, sizeof buf);
    s.filters = filters, s.k = kk, s.stride = stride, s.pad = same ? -1 : 0;
    size_t params = (size_t)kk * kk * c * filters + (s.no_bias ? 0 : (size_t)filters);
    if (add(k, m, &s) ||
        check_layer(k, m, filters, keras_out(h, kk, stride, same), keras_out(w, kk, stride, same),
                    params))
        return -1;
    // The activation is elementwise: before the permute back, as Keras applies it.
    if (add_activation(k, m, act, s.name, last && !other)) return -1;
    if (other && (add_permute(k, m, kname, "_out", 1) ||
                  check_layer(k, m, (int)want[0], (int)want[1], (int)want[2], 0)))
        return -1;
    return 0;
}

static int read_pool(kctx *k, model *m, json_object *cfg, const char *kname, layer_kind kind) {
    int kk = 0, stride = 1, c, h, w;
    const char *pad = "valid";
    char buf[32];
    int other = need_image(k) ? -1 : other_format(k, cfg);
    if (other < 0 || kget_pair(k, cfg, "pool_size", 2, 1, 64, &kk) ||
        kget_str(k, cfg, "padding", "valid", &pad))
        return -1;
    if (kget_pair(k, cfg, "strides", kk, 1, 64, &stride)) return -1;
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    // A 1x1 window of stride 1 is the identity whichever axes it slides over.
    other = other && !(kk == 1 && stride == 1);
    int64_t want[3];
    if (other) {
        mixed_out(k, m, kk, stride, same, 0, want);
        if (add_permute(k, m, kname, "_in", 0)) return -1;
    }
    cur_shape(m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "pool_size %d does not fit its %dx%d input", kk, h, w);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf), .k = kk,
                    .stride = stride, .pad = same ? -1 : 0};
    if (add(k, m, &s) ||
        check_layer(k, m, c, keras_out(h, kk, stride, same), keras_out(w, kk, stride, same), 0))
        return -1;
    if (other && (add_permute(k, m, kname, "_out", 1) ||
                  check_layer(k, m, (int)want[0], (int)want[1], (int)want[2], 0)))
        return -1;
    return 0;
}

static int read_gap(kctx *k, model *m, json_object *cfg, const char *kname) {
    int keepdims = 0, c, h, w;
    char buf[32];
    int other = need_image(k) ? -1 : other_format(k, cfg);
    if (other < 0 || kget_bool(k, cfg, "keepdims", 0, &keepdims)) return -1;
    if (other && add_permute(k, m, kname, "_in", 0)) return -1;
    cur_shape(m, &c, &h, &w);
    layer_spec s = {.kind = LAYER_GLOBAL_AVGPOOL, .name = klayer_name(kname, "", buf, sizeof buf)};
    if (add(k, m, &s) || check_layer(k, m, c, 1, 1, 0)) return -1;
    // Keras keeps (C', 1, 1) in the layer's order: the model's is the permute back of it.
    if (other && keepdims && add_permute(k, m, kname, "_out", 1)) return -1;
    if (!keepdims) k->rank = 1;
    return 0;
}

static int read_dense(kctx *k, model *m, json_object *cfg, const char *kname, int last) {
    int units = 0, act = 0, c, h, w;
    char buf[32];
    layer_spec s = {.kind = LAYER_DENSE};
    cur_shape(m, &c, &h, &w);
    if (!(k->rank == 1 || (k->rank == 3 && h == 1 && w == 1)))
        return kfail(k, "input of %d axes: Keras applies Dense to the last axis alone, hetrain "
                     "to the whole input; put Flatten or GlobalAveragePooling2D before it",
                     k->rank);
    if (kget_int(k, cfg, "units", NO_DEFAULT, 1, 65536, &units) || read_weights(k, cfg, &s, &act))
        return -1;
    s.name = klayer_name(kname, "", buf, sizeof buf);
    s.units = units;
    size_t params = (size_t)c * h * w * units + (s.no_bias ? 0 : (size_t)units);
    if (add(k, m, &s) || check_layer(k, m, units, 1, 1, params)) return -1;
    return add_activation(k, m, act, s.name, last);
}

// Keras's BatchNormalization over the channels of an image or the features of a vector, as
// hetrain's batchnorm. Keras counts the moving mean and variance as (non-trainable) parameters;
// hetrain keeps them, with its count of updates, as the model's state after every parameter.
static int read_bn(kctx *k, model *m, json_object *cfg, const char *kname) {
    static const char *const extras[] = {"beta_regularizer", "gamma_regularizer",
                                         "beta_constraint", "gamma_constraint",
                                         "activity_regularizer", NULL};
    int center = 1, scale = 1, renorm = 0, c, h, w;
    double mom = 0.99, eps = 1e-3; // Keras's defaults (batchnorm.h)
    init_desc gi = {0}, bi = {0}, mi = {0}, vi = {0};
    char buf[32];
    if (kcheck_nulls(k, cfg, extras, "hetrain regularizes Conv2D and Dense weights alone, and "
                     "adds no constraints") ||
        (kget(cfg, "momentum") && kget_num(k, cfg, "momentum", &mom)) ||
        (kget(cfg, "epsilon") && kget_num(k, cfg, "epsilon", &eps)) ||
        kget_bool(k, cfg, "center", 1, &center) || kget_bool(k, cfg, "scale", 1, &scale) ||
        kget_bool(k, cfg, "renorm", 0, &renorm) ||
        kget_init(k, cfg, "gamma_initializer", "ones", &gi) ||
        kget_init(k, cfg, "beta_initializer", "zeros", &bi) ||
        kget_init(k, cfg, "moving_mean_initializer", "zeros", &mi) ||
        kget_init(k, cfg, "moving_variance_initializer", "ones", &vi))
        return -1;
    // Keras 3's synchronized (statistics across replicas) needs nothing: hetrain's statistics
    // are per group of bn_group samples, the same whichever devices compute them.
    if (renorm) return kfail(k, "renorm true: hetrain's batchnorm is Keras's plain one");
    static const char *const ghost[] = {"virtual_batch_size", NULL};
    if (kcheck_nulls(k, cfg, ghost, "hetrain's statistics are over groups of --bn-group or [net] "
                    "bn_group samples"))
        return -1;
    if (!(mi.kind == INIT_ZEROS || (mi.kind == INIT_CONSTANT && mi.arg == 0)))
        return kfail(k, "moving_mean_initializer %s: hetrain starts the moving mean at zeros "
                     "(Keras's default)", init_kind_names[mi.kind]);
    if (!(vi.kind == INIT_ONES || (vi.kind == INIT_CONSTANT && vi.arg == 1)))
        return kfail(k, "moving_variance_initializer %s: hetrain starts the moving variance at "
                     "ones (Keras's default)", init_kind_names[vi.kind]);

    // The axis normalised over: the channels of an image, the features of a vector. Keras 2
    // writes the built layer's axis as a list of one.
    json_object *ax = kget(cfg, "axis");
    if (ax && json_object_is_type(ax, json_type_array) && json_object_array_length(ax) == 1)
        ax = kidx(ax, 0);
    if (ax && !json_object_is_type(ax, json_type_int))
        return kfail(k, "axis: expected an integer or a list of one, found %s", ktype_name(ax));
    int64_t axis = ax ? json_object_get_int64(ax) : -1;
    if (k->rank == 2)
        return kfail(k, "an input of 2 axes (height, width): hetrain normalises the channels of "
                     "an image or the features of a vector");
    int ok = k->rank == 1 ? axis == -1 || axis == 1
             : k->channels_first ? axis == 1 || axis == -3 : axis == -1 || axis == 3;
    if (!ok)
        return kfail(k, "axis %lld: hetrain normalises over the %s (axis %s)", (long long)axis,
                     k->rank == 1 ? "features" : "channels",
                     k->rank == 1 ? "-1 or 1" : k->channels_first ? "1" : "-1 or 3");
    cur_shape(m, &c, &h, &w);
    if (k->rank == 1 && (h > 1 || w > 1))
        return kfail(k, "after Flatten of a %dx%dx%d (CxHxW) output: Keras normalises each of "
                     "its %lld features, hetrain each channel; put BatchNormalization before "
                     "Flatten", c, h, w, (long long)c * h * w);

    layer_spec s = {.kind = LAYER_BATCHNORM, .name = klayer_name(kname, "", buf, sizeof buf),
                    .momentum = (float)mom, .momentum_set = 1, .eps = (float)eps,
                    .eps_set = 1, .no_center = !center, .no_scale = !scale};
    s.w_init = gi.kind, s.w_arg = gi.arg, s.w_arg2 = gi.arg2, s.w_vs = gi.vs;
    s.b_init = bi.kind, s.b_arg = bi.arg, s.b_arg2 = bi.arg2, s.b_vs = bi.vs;
    // Keras's trainable count: gamma and beta; the moving statistics are the state.
    if (add(k, m, &s) || check_layer(k, m, c, h, w, (size_t)(center + scale) * c)) return -1;
    return 0;
}

int keras_read_layer(kctx *k, model *m, json_object *layer, int last) {
    json_object *cfg = kget(layer, "config");
    const char *cls = k->lclass;
    char buf[32];
    const char *kname = k->lname[0] ? k->lname : NULL;
    if (!cfg || !json_object_is_type(cfg, json_type_object))
        return kfail(k, "config: expected an object");
    json_object *reg = kget(layer, "registered_name");
    if (reg && (!json_object_is_type(reg, json_type_string) ||
                strcmp(json_object_get_string(reg), cls)))
        return kfail(k, "a custom layer (registered as %.40s) is not supported",
                     json_object_get_string(reg));
    int trainable;
    if (kget_bool(k, cfg, "trainable", 1, &trainable) || kcheck_dtype(k, cfg)) return -1;
    // A frozen layer's parameters are not updated (read_weights); one without any is as it was.
    k->frozen = !trainable;
    if (k->frozen && !strcmp(cls, "BatchNormalization"))
        return kfail(k, "trainable false: Keras runs a frozen BatchNormalization in inference "
                     "mode (normalising with its moving statistics), which hetrain does not; "
                     "leave it trainable");
    if (strcmp(cls, "InputLayer") && check_build_config(k, m, layer)) return -1;

    if (!strcmp(cls, "InputLayer")) {
        int flag;
        if (k->idx != 0) return kfail(k, "an InputLayer is read only as the first layer");
        if (kget_bool(k, cfg, "sparse", 0, &flag)) return -1;
        if (flag) return kfail(k, "sparse inputs are not supported");
        if (kget_bool(k, cfg, "ragged", 0, &flag)) return -1;
        if (flag) return kfail(k, "ragged inputs are not supported");
        return 0;
    }
    if (!strcmp(cls, "Conv2D")) return read_conv(k, m, cfg, kname, last);
    if (!strcmp(cls, "MaxPooling2D")) return read_pool(k, m, cfg, kname, LAYER_MAXPOOL);
    if (!strcmp(cls, "AveragePooling2D")) return read_pool(k, m, cfg, kname, LAYER_AVGPOOL);
    if (!strcmp(cls, "GlobalAveragePooling2D")) return read_gap(k, m, cfg, kname);
    if (!strcmp(cls, "Dense")) return read_dense(k, m, cfg, kname, last);
    if (!strcmp(cls, "BatchNormalization")) return read_bn(k, m, cfg, kname);
    if (!strcmp(cls, "Flatten")) { // hetrain's dense layers flatten their input themselves
        // Keras's Flatten reshapes the tensor as it is, unless its data_format is
        // channels_first, when it first moves the channels last. hetrain's dense layers always
        // take (C, H, W); what Keras's dense kernel after it takes matters to the weight files
        // (kerash5.c): (H, W, C) for a channels_last model, and for a channels_first one with a
        // channels_first Flatten; (C, H, W) for a channels_first model's channels_last
        // (default) Flatten. A channels_first Flatten in a channels_last model takes (H, W, C)
        // as (C, H, W) and moves that C last: it flattens (W, C, H), hetrain's tensor after a
        // permute (3, 1, 2), whose own order the kernel then takes.
        int first;
        if (kget_format(k, cfg, &first)) return -1;
        int c, h, w;
        cur_shape(m, &c, &h, &w);
        if (first && !k->channels_first && w > 1 && (c > 1 || h > 1)) {
            if (add_permute(k, m, kname, "", 1)) return -1; // (3, 1, 2)
            m->keras_flatten_chw = 1;
        } else if (c > 1 && h * w > 1) {
            m->keras_flatten_chw = k->channels_first && !first;
        }
        k->rank = 1;
        return 0;
    }
    if (!strcmp(cls, "Dropout")) {
        double rate = 0;
        static const char *const extras[] = {"noise_shape", NULL};
        if (kcheck_nulls(k, cfg, extras, "hetrain drops each element on its own") ||
            kget_num(k, cfg, "rate", &rate))
            return -1;
        if (!(rate >= 0 && rate < 1)) return kfail(k, "rate %g: expected 0 <= rate < 1", rate);
        layer_spec s = {.kind = LAYER_DROPOUT, .name = klayer_name(kname, "", buf, sizeof buf),
                        .rate = (float)rate};
        return add(k, m, &s);
    }
    if (!strcmp(cls, "LeakyReLU") || !strcmp(cls, "ELU")) {
        // Keras 3's LeakyReLU names its slope negative_slope, Keras 2's alpha; both 0.3.
        int leaky = cls[0] == 'L';
        const char *key = leaky && kget(cfg, "negative_slope") ? "negative_slope" : "alpha";
        json_object *v = kget(cfg, key);
        double a = leaky ? 0.3 : 1.0;
        if (v && json_object_get_type(v) != json_type_null && kget_num(k, cfg, key, &a)) return -1;
        if (!isfinite(a)) return kfail(k, "%s: expected a number", key);
        layer_spec s = {.kind = leaky ? LAYER_LEAKY_RELU : LAYER_ELU,
                        .name = klayer_name(kname, "", buf, sizeof buf), .alpha = (float)a,
                        .alpha_set = 1};
        return add(k, m, &s);
    }
    if (!strcmp(cls, "Activation") || !strcmp(cls, "ReLU") || !strcmp(cls, "Softmax")) {
        int act = LAYER_RELU;
        if (!strcmp(cls, "Activation") && get_activation(k, cfg, 1, &act)) return -1;
        if (!strcmp(cls, "Softmax")) {
            act = LAYER_SOFTMAX_XENT;
            json_object *axis = kget(cfg, "axis");
            if (axis && json_object_is_type(axis, json_type_array) &&
                json_object_array_length(axis) == 1)
                axis = kidx(axis, 0);
            if (axis && !(json_object_is_type(axis, json_type_int) &&
                          json_object_get_int64(axis) == -1))
                return kfail(k, "axis: hetrain's softmax is over the last axis (-1)");
        }
        if (!strcmp(cls, "ReLU")) {
            static const char *const keys[] = {"negative_slope", "threshold"};
            if (kget(cfg, "max_value"))
                return kfail(k, "max_value: hetrain's ReLU has no upper bound");
            for (int i = 0; i < 2; i++) {
                json_object *v = kget(cfg, keys[i]);
                if (v && (!(json_object_is_type(v, json_type_int) ||
                            json_object_is_type(v, json_type_double)) ||
                          json_object_get_double(v) != 0))
                    return kfail(k, "%s: hetrain's ReLU has 0", keys[i]);
            }
        }
        if (act == LAYER_SOFTMAX_XENT)
            return add_softmax(k, m, klayer_name(kname, "", buf, sizeof buf), last);
        if (act == LAYER_SIGMOID && last)
            return add_bce(k, m, klayer_name(kname, "", buf, sizeof buf));
        if (act < 0) return 0;
        layer_spec s = {.kind = (layer_kind)act, .name = klayer_name(kname, "", buf, sizeof buf)};
        activation_defaults(k, &s);
        return add(k, m, &s);
    }
    if (!strcmp(cls, "Sequential") || !strcmp(cls, "Functional") || !strcmp(cls, "Model"))
        return kfail(k, "a model inside the model is not supported; hetrain reads one list of "
                     "layers");
    return kfail(k, "not supported; hetrain reads " KERAS_CLASSES);
}

