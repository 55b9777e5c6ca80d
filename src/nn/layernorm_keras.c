// Keras's LayerNormalization and LayerScale as the layernorm and layerscale families
// (keras_int.h): over the channels of an image (each position's) or the features of a vector.
#include "nn/keras_int.h"

#include <math.h>

static int layernorm_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                                const char *kname, int last) {
    (void)last;
    static const char *const extras[] = {"beta_regularizer", "gamma_regularizer",
                                         "beta_constraint", "gamma_constraint",
                                         "activity_regularizer", NULL};
    int center = 1, scale = 1, rms = 0, c, h, w;
    double eps = 1e-3; // Keras's default
    init_desc gi = {0}, bi = {0};
    char buf[32];
    if (kcheck_nulls(k, cfg, extras, "hetrain regularizes Conv2D and Dense weights alone, and "
                     "adds no constraints") ||
        (kget(cfg, "epsilon") && kget_num(k, cfg, "epsilon", &eps)) ||
        kget_bool(k, cfg, "center", 1, &center) || kget_bool(k, cfg, "scale", 1, &scale) ||
        kget_bool(k, cfg, "rms_scaling", 0, &rms) ||
        kget_init(k, cfg, "gamma_initializer", "ones", &gi) ||
        kget_init(k, cfg, "beta_initializer", "zeros", &bi))
        return -1;
    if (rms) return kfail(k, "rms_scaling true: hetrain's layernorm subtracts the mean");
    if (!(eps > 0 && eps <= 1)) return kfail(k, "epsilon %g: expected a number in (0, 1]", eps);
    if (keras_channel_axis(k, m, cfg)) return -1;
    keras_cur_shape(k, m, &c, &h, &w);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .eps = (float)eps, .eps_set = 1, .no_center = !center, .no_scale = !scale,
                    .frozen = k->frozen};
    s.w_init = gi.kind, s.w_arg = gi.arg, s.w_arg2 = gi.arg2, s.w_vs = gi.vs;
    s.b_init = bi.kind, s.b_arg = bi.arg, s.b_arg2 = bi.arg2, s.b_vs = bi.vs;
    return keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, (size_t)(center + scale) * c)
               ? -1 : 0;
}

const keras_family keras_layernorm = {layernorm_keras_read, NULL};

// keras.applications' ConvNeXt's LayerScale: gamma (projection_dim of them, the channels)
// starting at init_values.
static int layerscale_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                                 const char *kname, int last) {
    (void)last;
    double init = 1e-6, dim = -1;
    int c, h, w;
    char buf[32];
    if ((kget(cfg, "init_values") && kget_num(k, cfg, "init_values", &init)) ||
        (kget(cfg, "projection_dim") && kget_num(k, cfg, "projection_dim", &dim)))
        return -1;
    if (!isfinite(init)) return kfail(k, "init_values: expected a finite number");
    keras_cur_shape(k, m, &c, &h, &w);
    if (k->rank == 1 && (h > 1 || w > 1))
        return kfail(k, "after Flatten: hetrain scales the channels of an image or the features "
                     "of a vector");
    if (dim >= 0 && dim != c)
        return kfail(k, "projection_dim %g: its input has %d channels", dim, c);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .w_init = INIT_CONSTANT, .w_arg = (float)init, .frozen = k->frozen};
    return keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, (size_t)c) ? -1 : 0;
}

const keras_family keras_layerscale = {layerscale_keras_read, NULL};
