// Keras's Dense as the dense family (keras_int.h): over a flat input (after Flatten or
// GlobalAveragePooling2D), its weights' arguments and its activation.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

static int dense_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                            const char *kname, int last) {
    (void)kind;
    int units = 0, act = 0, c, h, w;
    char buf[32];
    layer_spec s = {.kind = LAYER_DENSE};
    keras_cur_shape(k, m, &c, &h, &w);
    // On an image Keras applies Dense to the last axis alone: on channels-last, each position's
    // channels, a 1x1 convolution (ConvNeXt's pointwise layers), whose (1, 1, C, units) kernel
    // holds Dense's (C, units) values in the same order.
    const int pointwise = k->rank == 3 && (h > 1 || w > 1);
    if (!(k->rank == 1 || (k->rank == 3 && h == 1 && w == 1) ||
          (pointwise && !k->channels_first)))
        return kfail(k, "input of %d axes%s: Keras applies Dense to the last axis alone, hetrain "
                     "to the whole input or to the channels of a channels-last image; put "
                     "Flatten or GlobalAveragePooling2D before it", k->rank,
                     k->channels_first ? " (channels first)" : "");
    if (kget_int(k, cfg, "units", NO_DEFAULT, 1, 65536, &units) || keras_read_weights(k, cfg, &s, &act))
        return -1;
    s.name = klayer_name(kname, "", buf, sizeof buf);
    if (pointwise) {
        s.kind = LAYER_CONV2D, s.filters = units, s.k = 1, s.stride = 1, s.pad = 0;
        s.keras_as = 1 + LAYER_DENSE;
    } else {
        s.units = units;
    }
    size_t params = (size_t)c * (pointwise ? 1 : (size_t)h * w) * units +
                    (s.no_bias ? 0 : (size_t)units);
    if (keras_add(k, m, &s) ||
        keras_check_layer(k, m, units, pointwise ? h : 1, pointwise ? w : 1, params))
        return -1;
    return keras_add_activation(k, m, act, s.name, last);
}


const keras_family keras_dense = {dense_keras_read, NULL};
