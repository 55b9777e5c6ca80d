// What the families' Keras readers (<family>_keras.c) build with (keras_int.h): adding a layer
// under the Keras layer's heading and checking it against Keras's shapes, the running shape,
// the permutes around a layer of the other data_format, the activations and heads a layer's
// activation argument appends, and Conv2D's and Dense's weight arguments.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

// An activation by Keras's name: the layer kind that computes it (layer_desc.h), or -1 for
// linear (none).
int keras_get_activation(kctx *k, json_object *cfg, int required, int *act) {
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
int keras_add(kctx *k, model *m, const layer_spec *s) {
    ht_error e;
    layer_spec with = *s;
    if (k->n_from && !s->n_from) { // the Keras layer's inputs, to its first hetrain layer
        with.n_from = k->n_from;
        memcpy(with.from, k->from, sizeof with.from);
    }
    k->n_from = 0;
    with.keras_seq = k->seq;
    char name[32];
    if (k->node > 0) { // a shared layer called again (kctx.node)
        const int i = m->n_layers - k->call_first, owner = k->share_first + i;
        with.name = s->name && snprintf(name, sizeof name, "%s-%d", s->name, k->node) < 32
                        ? name
                        : NULL;
        const layer *O = i < k->share_n ? &m->layers[owner] : NULL;
        if (O && O->kind == s->kind && (O->n_w || O->n_b)) with.share = owner + 1;
    }
    if (model_add(m, &with, &e) == 0) return 0;
    const char *msg = e.msg, *cut = strstr(msg, "): ");
    if (!strncmp(msg, "layer ", 6) && cut) msg = cut + 3;
    return kfail(k, "%s", msg);
}

int keras_need_merge(kctx *k) {
    if (k->n_from >= 2) return 0;
    return kfail(k, "merges %d input%s: a merge reads 2 to %d, in a Functional model", k->n_from,
                 k->n_from == 1 ? "" : "s", MODEL_MAX_IN);
}

// Keras's output size along one axis.
int keras_out(int in, int kk, int stride, int same) {
    return same ? (in + stride - 1) / stride : (in - kk) / stride + 1;
}

// Checks the layer model_add just made against what Keras computes for it.
int keras_check_layer(kctx *k, const model *m, int oc, int oh, int ow, size_t params) {
    const layer *L = &m->layers[m->n_layers - 1];
    if (L->oc != oc || L->oh != oh || L->ow != ow)
        return kfail(k, "hetrain computes an output of %dx%dx%d (CxHxW) where Keras has "
                     "%dx%dx%d", L->oc, L->oh, L->ow, oc, oh, ow);
    if (L->n_w + L->n_b != params)
        return kfail(k, "hetrain gives it %zu parameters where Keras has %zu", L->n_w + L->n_b,
                     params);
    return 0;
}

int keras_channel_axis(kctx *k, const model *m, json_object *cfg) {
    // Keras 2 writes the built layer's axis as a list of one, Keras 3 always.
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
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
    if (k->rank == 1 && (h > 1 || w > 1))
        return kfail(k, "after Flatten of a %dx%dx%d (CxHxW) output: Keras normalises each of "
                     "its %lld features, hetrain each channel; put %s before Flatten", c, h, w,
                     (long long)c * h * w, k->lclass);
    return 0;
}

// The current output as Keras shapes it (without the batch axis), for build_config.
int keras_shape(const kctx *k, const model *m, int64_t d[3]) {
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
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

int keras_need_image(kctx *k) {
    if (k->rank != 3)
        return kfail(k, "expects an image (height, width, channels), but its input has %d "
                     "axis%s", k->rank, k->rank == 1 ? "" : "es");
    return 0;
}

// The running output size of the model (before the layer being read): its input's (the first
// one's, for a merge), else the last layer added's.
void keras_cur_shape(const kctx *k, const model *m, int *c, int *h, int *w) {
    const int at = k->n_from ? k->from[0] : m->n_layers - 1;
    if (at < 0) {
        *c = m->in_c, *h = m->in_h, *w = m->in_w;
        return;
    }
    const layer *L = &m->layers[at];
    *c = L->oc, *h = L->oh, *w = L->ow;
}

// The layer's data_format against the model's: 0 the same, 1 the other, -1 an error.
int keras_other_format(kctx *k, json_object *cfg) {
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
int keras_add_permute(kctx *k, model *m, const char *kname, const char *suffix, int inverse) {
    char buf[32];
    int fwd = !k->channels_first ? !inverse : inverse; // (2, 3, 1), else (3, 1, 2)
    layer_spec s = {.kind = LAYER_PERMUTE, .name = klayer_name(kname, suffix, buf, sizeof buf),
                    .perm = {fwd ? 2 : 3, fwd ? 3 : 1, fwd ? 1 : 2}};
    return keras_add(k, m, &s);
}

// Keras's output of a window over the two axes a layer of the other data_format works over
// (add_permute), with OC channels (0: the input's), in hetrain's (C, H, W) order.
void keras_mixed_out(const kctx *k, const model *m, int kk, int stride, int same, int oc,
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

int keras_add_softmax(kctx *k, model *m, const char *name, int last) {
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
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
    return keras_add(k, m, &s);
}

// A sigmoid as the network's last step: over one output (Dense(1, activation="sigmoid"))
// hetrain's binary head, sigmoid and binary cross-entropy, labels 0 and 1; over k outputs
// (Dense(k, activation="sigmoid")) the multi-label head, k labels of 0 or 1 a sample.
int keras_add_bce(kctx *k, model *m, const char *name) {
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
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
    return keras_add(k, m, &s);
}

// Keras's activation functions' parameters, where they differ from the layer classes':
// leaky_relu(negative_slope = 0.2) against LeakyReLU's 0.3; Keras 2's hard_sigmoid 0.2 x + 0.5
// against Keras 3's relu6(x + 3) / 6.
void keras_activation_defaults(const kctx *k, layer_spec *s) {
    if (s->kind == LAYER_LEAKY_RELU) s->alpha = 0.2f, s->alpha_set = 1;
    if (s->kind == LAYER_HARD_SIGMOID && k->keras2) s->alpha = 0.2f, s->alpha_set = 1;
}

// The activation (a layer kind, -1: none) that follows a Conv2D or Dense, named after it
// ("conv2d_relu").
int keras_add_activation(kctx *k, model *m, int act, const char *kname, int last) {
    char buf[32], suffix[24];
    if (act == LAYER_SOFTMAX_XENT) return keras_add_softmax(k, m, NULL, last);
    if (act == LAYER_SIGMOID && last) return keras_add_bce(k, m, NULL);
    if (act < 0) return 0;
    snprintf(suffix, sizeof suffix, "_%s", layer_desc_of((layer_kind)act)->name);
    layer_spec s = {.kind = (layer_kind)act, .name = klayer_name(kname, suffix, buf, sizeof buf)};
    keras_activation_defaults(k, &s);
    return keras_add(k, m, &s);
}

// A Conv2D's or Dense's weights: bias, activation, initializers, regularizers, and whether it
// is frozen (trainable false). Keras 3 adds the regularization term of trainable weights alone
// to the loss, Keras 2 of every weight: a frozen layer of a Keras 3 model keeps none (its
// weights are not updated either way).
int keras_read_weights(kctx *k, json_object *cfg, layer_spec *s, int *act) {
    return keras_read_weights_of(k, cfg, "kernel", s, act);
}

int keras_read_weights_of(kctx *k, json_object *cfg, const char *kernel, layer_spec *s,
                          int *act) {
    int use_bias = 1;
    init_desc wi = {0}, bi = {0};
    char init[48], reg[48], constraint[48];
    snprintf(init, sizeof init, "%s_initializer", kernel);
    snprintf(reg, sizeof reg, "%s_regularizer", kernel);
    snprintf(constraint, sizeof constraint, "%s_constraint", kernel);
    const char *const extras[] = {"activity_regularizer", constraint, "bias_constraint",
                                  "lora_rank", NULL};
    if (kcheck_nulls(k, cfg, extras, "hetrain adds no activity regularizers, "
                    "constraints or adapters") ||
        kget_bool(k, cfg, "use_bias", 1, &use_bias) || keras_get_activation(k, cfg, 0, act) ||
        kget_init(k, cfg, init, "glorot_uniform", &wi) ||
        kget_init(k, cfg, "bias_initializer", "zeros", &bi) ||
        kget_reg(k, cfg, reg, &s->w_l1, &s->w_l2) ||
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
