// Keras's ReLU, Dropout and Softmax as the relu, dropout and softmax families (keras_int.h);
// the bce family has no class of its own (a last Dense's sigmoid is read as it, keras_build.c).
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

static int relu_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                           const char *kname, int last) {
    (void)last;
    char buf[32];
    static const char *const keys[] = {"negative_slope", "threshold"};
    for (int i = 0; i < 2; i++) {
        json_object *v = kget(cfg, keys[i]);
        if (v && (!(json_object_is_type(v, json_type_int) ||
                    json_object_is_type(v, json_type_double)) ||
                  json_object_get_double(v) != 0))
            return kfail(k, "%s: hetrain's ReLU has 0", keys[i]);
    }
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf)};
    json_object *cap = kget(cfg, "max_value");
    if (cap) { // min(max(x, 0), max_value): the act family's relu6 with that cap
        double v;
        if (kget_num(k, cfg, "max_value", &v)) return -1;
        if (!(v > 0)) return kfail(k, "max_value %g: expected a number > 0", v);
        s.kind = LAYER_RELU6, s.alpha = (float)v, s.alpha_set = 1;
    }
    keras_activation_defaults(k, &s);
    return keras_add(k, m, &s);
}

static int dropout_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                              const char *kname, int last) {
    (void)last;
    char buf[32];
    double rate = 0;
    if (kget_num(k, cfg, "rate", &rate)) return -1;
    if (!(rate >= 0 && rate < 1)) return kfail(k, "rate %g: expected 0 <= rate < 1", rate);
    // noise_shape: none (each element on its own), or null and then 1 on every other axis
    // ((None, 1, 1, 1): one draw a sample, EfficientNet's stochastic depth).
    int per_sample = 0;
    json_object *ns = kget(cfg, "noise_shape");
    if (ns) {
        int ok = json_object_is_type(ns, json_type_array) && json_object_array_length(ns) >= 2;
        for (size_t i = 0; ok && i < json_object_array_length(ns); i++) {
            json_object *d = kidx(ns, i);
            ok = i == 0 ? d == NULL
                        : json_object_is_type(d, json_type_int) && json_object_get_int64(d) == 1;
        }
        if (!ok)
            return kfail(k, "noise_shape %.60s: hetrain drops each element on its own (none) "
                         "or whole samples ([null, 1, 1, 1])",
                         json_object_to_json_string_ext(ns, JSON_C_TO_STRING_PLAIN));
        per_sample = 1;
    }
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .rate = (float)rate, .drop_sample = per_sample};
    return keras_add(k, m, &s);
}

// Keras's Softmax layer: over the last axis alone, as the network's last step.
static int softmax_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                              const char *kname, int last) {
    (void)kind;
    char buf[32];
    json_object *axis = kget(cfg, "axis");
    if (axis && json_object_is_type(axis, json_type_array) && json_object_array_length(axis) == 1)
        axis = kidx(axis, 0);
    if (axis && !(json_object_is_type(axis, json_type_int) && json_object_get_int64(axis) == -1))
        return kfail(k, "axis: hetrain's softmax is over the last axis (-1)");
    return keras_add_softmax(k, m, klayer_name(kname, "", buf, sizeof buf), last);
}

const keras_family keras_relu = {relu_keras_read, NULL};
const keras_family keras_dropout = {dropout_keras_read, NULL};
const keras_family keras_softmax = {softmax_keras_read, NULL};
const keras_family keras_bce = {NULL, NULL};
