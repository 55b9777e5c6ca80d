// Keras's Normalization as the normalize family (keras_int.h): over the channels (axis -1),
// its mean and variance the variables adapt() sets and the weight files carry.
#include "nn/keras_int.h"

#include <math.h>

// Keras's mean or variance given in the config: a number or a list of numbers, into out (up
// to NORMALIZE_MAX_CONST); returns their count, 0 when absent (null), -1 after kfail.
static int read_consts(kctx *k, json_object *cfg, const char *key, float *out) {
    json_object *v = kget(cfg, key);
    if (!v) return 0;
    const int list = json_object_is_type(v, json_type_array);
    const int n = list ? (int)json_object_array_length(v) : 1;
    for (int i = 0; i < n; i++) {
        json_object *x = list ? kidx(v, (size_t)i) : v;
        if (!(json_object_is_type(x, json_type_double) || json_object_is_type(x, json_type_int)) ||
            !isfinite(json_object_get_double(x)))
            return kfail(k, "%s: expected a number or a list of numbers, found %.60s", key,
                         json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        if (i < NORMALIZE_MAX_CONST) out[i] = (float)json_object_get_double(x);
    }
    if (n < 1 || n > NORMALIZE_MAX_CONST)
        return kfail(k, "%s: %d values; hetrain takes 1 to %d constants (an image's channels)",
                     key, n, NORMALIZE_MAX_CONST);
    return n;
}

static int normalize_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                                const char *kname, int last) {
    (void)last;
    int invert = 0, c, h, w;
    char buf[32];
    if (keras_channel_axis(k, m, cfg) || kget_bool(k, cfg, "invert", 0, &invert)) return -1;
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .invert = invert};
    // keras.applications' ConvNeXt gives ImageNet's mean and variance as constants of the
    // layer, which Keras then keeps as no variable at all; EfficientNet's come from adapt()
    // and the weight files.
    const int nm = read_consts(k, cfg, "mean", s.c_mean);
    if (nm < 0) return -1;
    const int nv = read_consts(k, cfg, "variance", s.c_var);
    if (nv < 0) return -1;
    if (nm != nv)
        return kfail(k, "%d mean%s and %d variance%s: Keras takes both or neither", nm,
                     nm == 1 ? "" : "s", nv, nv == 1 ? "" : "s");
    s.n_const = nm;
    keras_cur_shape(k, m, &c, &h, &w);
    return keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, 0) ? -1 : 0;
}

const keras_family keras_normalize = {normalize_keras_read, NULL};
