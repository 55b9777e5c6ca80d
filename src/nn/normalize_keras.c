// Keras's Normalization as the normalize family (keras_int.h): over the channels (axis -1),
// its mean and variance the variables adapt() sets and the weight files carry.
#include "nn/keras_int.h"

static int normalize_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                                const char *kname, int last) {
    (void)last;
    int invert = 0, c, h, w;
    char buf[32];
    if (keras_channel_axis(k, m, cfg) || kget_bool(k, cfg, "invert", 0, &invert)) return -1;
    // keras.applications' ConvNeXt gives ImageNet's mean and variance as constants of the
    // layer, which Keras then keeps as no variable at all.
    static const char *const consts[] = {"mean", "variance", NULL};
    if (kcheck_nulls(k, cfg, consts, "hetrain's normalize layer takes its mean and variance "
                     "from the weights (Keras's adapt() and weight files), as EfficientNet has "
                     "them"))
        return -1;
    keras_cur_shape(k, m, &c, &h, &w);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .invert = invert};
    return keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, 0) ? -1 : 0;
}

const keras_family keras_normalize = {normalize_keras_read, NULL};
