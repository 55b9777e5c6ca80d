// Keras's layer classes into hetrain's layers (keras_int.h): each Keras layer becomes zero or
// more hetrain layers (Conv2D with activation="relu": conv + relu; Flatten, InputLayer: none),
// and every shape and parameter count is checked against what Keras computes, so a layer
// hetrain would compute differently is refused, never changed. A class that is a layer kind
// (layer_kinds.h's Keras class column) is its family's to read (<family>_keras.c); the classes
// that are no kind of their own are read here.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

#include <stdio.h>
#include <string.h>

// Each kind's family's reader.
static const keras_family *const keras_family_of[LAYER_KIND_COUNT] = {
#define KERAS_FAMILY_ROW(id, fam, name, prefix, keras, key, dflt) [LAYER_##id] = &keras_##fam,
    LAYER_KINDS(KERAS_FAMILY_ROW)
#undef KERAS_FAMILY_ROW
};

int keras_class_kind(const char *cls) {
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (layer_descs[k].keras_class && !strcmp(cls, layer_descs[k].keras_class)) return k;
    return -1;
}

// The classes hetrain reads, for the message about another: "InputLayer, Conv2D, ...,
// Flatten, Activation" (the kinds' in layer_kinds.h's order).
static const char *keras_class_list(void) {
    static char list[400];
    if (list[0]) return list;
    size_t n = (size_t)snprintf(list, sizeof list, "InputLayer");
    for (int k = 0; k < LAYER_KIND_COUNT && n < sizeof list; k++)
        if (layer_descs[k].keras_class && keras_family_of[k]->read)
            n += (size_t)snprintf(list + n, sizeof list - n, ", %s", layer_descs[k].keras_class);
    if (n < sizeof list)
        snprintf(list + n, sizeof list - n, ", SeparableConv2D, Flatten, Reshape, Activation");
    return list;
}

// Keras 3 writes each built layer's input shape: it must be what the layers before gave.
static int check_build_config(kctx *k, const model *m, json_object *layer) {
    json_object *shape = kget(kget(layer, "build_config"), "input_shape");
    if (!shape || !json_object_is_type(shape, json_type_array)) return 0;
    // A merge's: a list of its inputs' shapes, which model_add checks against each other.
    if (json_object_is_type(kidx(shape, 0), json_type_array)) return 0;
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

// Keras's Flatten: hetrain's dense layers flatten their input themselves.
static int read_flatten(kctx *k, model *m, json_object *cfg, const char *kname) {
    // Keras's Flatten reshapes the tensor as it is, unless its data_format is channels_first,
    // when it first moves the channels last. hetrain's dense layers always take (C, H, W); what
    // Keras's dense kernel after it takes matters to the weight files (kerash5.c): (H, W, C)
    // for a channels_last model, and for a channels_first one with a channels_first Flatten;
    // (C, H, W) for a channels_first model's channels_last (default) Flatten. A channels_first
    // Flatten in a channels_last model takes (H, W, C) as (C, H, W) and moves that C last: it
    // flattens (W, C, H), hetrain's tensor after a permute (3, 1, 2), whose own order the
    // kernel then takes.
    int first;
    if (kget_format(k, cfg, &first)) return -1;
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
    if (first && !k->channels_first && w > 1 && (c > 1 || h > 1)) {
        if (keras_add_permute(k, m, kname, "", 1)) return -1; // (3, 1, 2)
        m->keras_flatten_chw = 1;
    } else if (c > 1 && h * w > 1) {
        m->keras_flatten_chw = k->channels_first && !first;
    }
    k->rank = 1;
    return 0;
}

// Keras's Reshape where it moves no element: between C features and an image of 1x1 with C
// channels (MobileNet's head: its global pooling kept 1x1, its classifier a 1x1 convolution,
// then Reshape((C,))). It changes only the rank the layers after it see.
static int read_reshape(kctx *k, model *m, json_object *cfg) {
    json_object *t = kget(cfg, "target_shape");
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
    size_t n = t && json_object_is_type(t, json_type_array) ? json_object_array_length(t) : 0;
    int64_t d[3] = {0, 0, 0};
    for (size_t i = 0; i < n && i < 3; i++) {
        json_object *v = kidx(t, i);
        d[i] = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -2;
    }
    const int cl = !k->channels_first;
    int rank = 0;
    if (h == 1 && w == 1 && n == 1 && d[0] == c) rank = 1;
    else if (h == 1 && w == 1 && n == 3 && d[cl ? 2 : 0] == c && d[cl ? 0 : 1] == 1 &&
             d[cl ? 1 : 2] == 1)
        rank = 3;
    if (!rank)
        return kfail(k, "target_shape %.60s of a %dx%dx%d (CxHxW) tensor: hetrain reshapes "
                     "only between %d features and a 1x1 image of %d channels", t ?
                     json_object_to_json_string_ext(t, JSON_C_TO_STRING_PLAIN) : "(none)", c,
                     h, w, c, c);
    k->rank = rank;
    return 0;
}

// Keras's Activation("name"): the kind that computes it (softmax and a last sigmoid as heads),
// nothing for linear.
static int read_activation(kctx *k, model *m, json_object *cfg, const char *kname, int last) {
    char buf[32];
    int act;
    if (keras_get_activation(k, cfg, 1, &act)) return -1;
    if (act == LAYER_SOFTMAX_XENT)
        return keras_add_softmax(k, m, klayer_name(kname, "", buf, sizeof buf), last);
    if (act == LAYER_SIGMOID && last)
        return keras_add_bce(k, m, klayer_name(kname, "", buf, sizeof buf));
    if (act < 0) return 0;
    layer_spec s = {.kind = (layer_kind)act, .name = klayer_name(kname, "", buf, sizeof buf)};
    keras_activation_defaults(k, &s);
    return keras_add(k, m, &s);
}

int keras_read_layer(kctx *k, model *m, json_object *layer, int last) {
    json_object *cfg = kget(layer, "config");
    const char *cls = k->lclass;
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
    json_object *seq = kget(layer, KERAS_SEQ_KEY);
    k->seq = seq ? json_object_get_int(seq) : 0;
    int kind = keras_class_kind(cls);
    const keras_family *kf = kind >= 0 ? keras_family_of[kind] : NULL;
    if (k->frozen && kf && kf->frozen) return kfail(k, "trainable false: %s", kf->frozen);
    if (strcmp(cls, "InputLayer") && check_build_config(k, m, layer)) return -1;

    if (keras_is_op(layer)) return keras_read_op(k, m, layer, cfg, kname, last);
    if (kf && kf->read) return kf->read(k, m, cfg, (layer_kind)kind, kname, last);
    if (!strcmp(cls, "InputLayer")) {
        int flag;
        if (k->idx != 0) return kfail(k, "an InputLayer is read only as the first layer");
        if (kget_bool(k, cfg, "sparse", 0, &flag)) return -1;
        if (flag) return kfail(k, "sparse inputs are not supported");
        if (kget_bool(k, cfg, "ragged", 0, &flag)) return -1;
        if (flag) return kfail(k, "ragged inputs are not supported");
        return 0;
    }
    if (!strcmp(cls, "Flatten")) return read_flatten(k, m, cfg, kname);
    if (!strcmp(cls, "Reshape")) return read_reshape(k, m, cfg);
    if (!strcmp(cls, "SeparableConv2D")) return keras_read_separable(k, m, cfg, kname, last);
    if (!strcmp(cls, "Activation")) return read_activation(k, m, cfg, kname, last);
    if (!strcmp(cls, "Sequential") || !strcmp(cls, "Functional") || !strcmp(cls, "Model"))
        return kfail(k, "a model inside the model is not supported; hetrain reads one list of "
                     "layers, and Sequential models inside a Functional one");
    return kfail(k, "not supported; hetrain reads %s", keras_class_list());
}
