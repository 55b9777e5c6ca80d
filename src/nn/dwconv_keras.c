// Keras's DepthwiseConv2D as the dwconv family (keras_int.h): its window, depth_multiplier,
// weights' arguments (depthwise_*) and activation; one of the other data_format between two
// permutes.
#include "nn/keras_int.h"

#include <string.h>

static int dwconv_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                             const char *kname, int last) {
    int kk = 0, stride = 1, dil = 1, mult = 1, act = 0, c, h, w;
    const char *pad = "valid";
    layer_spec s = {.kind = kind};
    char buf[32];
    int other = keras_need_image(k) ? -1 : keras_other_format(k, cfg);
    if (other < 0 || kget_pair(k, cfg, "kernel_size", NO_DEFAULT, 1, 64, &kk) ||
        kget_pair(k, cfg, "strides", 1, 1, 64, &stride) ||
        kget_pair(k, cfg, "dilation_rate", 1, 1, 64, &dil) ||
        kget_int(k, cfg, "depth_multiplier", 1, 1, 65536, &mult) ||
        kget_str(k, cfg, "padding", "valid", &pad) ||
        keras_read_weights_of(k, cfg, "depthwise", &s, &act))
        return -1;
    if (dil != 1) return kfail(k, "dilation_rate %d: hetrain's convolutions are dense (1)", dil);
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    if (other && keras_add_permute(k, m, kname, "_in", 0)) return -1;
    keras_cur_shape(k, m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "kernel %d does not fit its %dx%d input", kk, h, w);
    s.name = klayer_name(kname, "", buf, sizeof buf);
    s.k = kk, s.stride = stride, s.pad = same ? -1 : 0, s.mult = mult;
    const int oc = c * mult;
    size_t params = (size_t)kk * kk * oc + (s.no_bias ? 0 : (size_t)oc);
    if (keras_add(k, m, &s) ||
        keras_check_layer(k, m, oc, keras_out(h, kk, stride, same),
                          keras_out(w, kk, stride, same), params))
        return -1;
    if (keras_add_activation(k, m, act, s.name, last && !other)) return -1;
    if (other && keras_add_permute(k, m, kname, "_out", 1)) return -1;
    return 0;
}

const keras_family keras_dwconv = {dwconv_keras_read, NULL};
