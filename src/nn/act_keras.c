// Keras's LeakyReLU and ELU layers as the act family (keras_int.h), with their parameter;
// the act family's other kinds come as activations (Activation, a layer's activation argument).
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

#include <math.h>

static int act_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                          const char *kname, int last) {
    (void)last;
    char buf[32];
    // Keras 3's LeakyReLU names its slope negative_slope, Keras 2's alpha; both 0.3 (the
    // kind's default, layer_kinds.h), ELU's alpha 1.
    const layer_desc *d = layer_desc_of(kind);
    const char *key = kind == LAYER_LEAKY_RELU && kget(cfg, "negative_slope") ? "negative_slope"
                                                                              : "alpha";
    json_object *v = kget(cfg, key);
    double a = d->param_default;
    if (v && json_object_get_type(v) != json_type_null && kget_num(k, cfg, key, &a)) return -1;
    if (!isfinite(a)) return kfail(k, "%s: expected a number", key);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .alpha = (float)a, .alpha_set = 1};
    return keras_add(k, m, &s);
}

const keras_family keras_act = {act_keras_read, NULL};
