// Keras's Concatenate as the concat family (keras_int.h): on the channel axis of images (axis
// -1 or 3 in a channels_last model, 1 in a channels_first one); its inputs are the graph's
// (kctx.from).
#include "nn/keras_int.h"

static int concat_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                             const char *kname, int last) {
    (void)last;
    if (keras_need_merge(k) || keras_need_image(k)) return -1;
    int axis;
    if (kget_int(k, cfg, "axis", -1, -4, 3, &axis)) return -1;
    const int channels = k->channels_first ? axis == 1 || axis == -3 : axis == 3 || axis == -1;
    if (!channels)
        return kfail(k, "axis %d: hetrain concatenates images on their channel axis (%s)", axis,
                     k->channels_first ? "1" : "-1 or 3");
    char buf[32];
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf)};
    return keras_add(k, m, &s); // its channels: the next layer's build_config checks them
}

const keras_family keras_concat = {concat_keras_read, NULL};
