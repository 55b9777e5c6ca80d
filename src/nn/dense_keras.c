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
    if (!(k->rank == 1 || (k->rank == 3 && h == 1 && w == 1)))
        return kfail(k, "input of %d axes: Keras applies Dense to the last axis alone, hetrain "
                     "to the whole input; put Flatten or GlobalAveragePooling2D before it",
                     k->rank);
    if (kget_int(k, cfg, "units", NO_DEFAULT, 1, 65536, &units) || keras_read_weights(k, cfg, &s, &act))
        return -1;
    s.name = klayer_name(kname, "", buf, sizeof buf);
    s.units = units;
    size_t params = (size_t)c * h * w * units + (s.no_bias ? 0 : (size_t)units);
    if (keras_add(k, m, &s) || keras_check_layer(k, m, units, 1, 1, params)) return -1;
    return keras_add_activation(k, m, act, s.name, last);
}


const keras_family keras_dense = {dense_keras_read, NULL};
