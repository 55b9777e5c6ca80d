// Keras's Add as the merge family (keras_int.h): its inputs are the graph's, which the reader
// hands to the layer it adds (kctx.from); Keras checks they have one shape, and so does
// model_add.
#include "nn/keras_int.h"

static int merge_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                            const char *kname, int last) {
    (void)cfg, (void)last;
    if (keras_need_merge(k)) return -1;
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
    char buf[32];
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf)};
    if (keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, 0)) return -1;
    return 0;
}

const keras_family keras_merge = {merge_keras_read, NULL};
