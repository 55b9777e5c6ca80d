// Keras's Conv2D as the conv family (keras_int.h): its window, its weights' arguments and its
// activation; a Conv2D of the other data_format between two permutes.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

#include <string.h>

static int conv_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                           const char *kname, int last) {
    (void)kind;
    int filters = 0, kk = 0, stride = 1, dil = 1, groups = 1, act = 0, c, h, w;
    const char *pad = "valid";
    layer_spec s = {.kind = LAYER_CONV2D};
    char buf[32];
    int other = keras_need_image(k) ? -1 : keras_other_format(k, cfg);
    if (other < 0 || kget_int(k, cfg, "filters", NO_DEFAULT, 1, 65536, &filters) ||
        kget_pair(k, cfg, "kernel_size", NO_DEFAULT, 1, 64, &kk) ||
        kget_pair(k, cfg, "strides", 1, 1, 64, &stride) ||
        kget_pair(k, cfg, "dilation_rate", 1, 1, 64, &dil) ||
        kget_int(k, cfg, "groups", 1, 1, 65536, &groups) ||
        kget_str(k, cfg, "padding", "valid", &pad) || keras_read_weights(k, cfg, &s, &act))
        return -1;
    if (dil != 1) return kfail(k, "dilation_rate %d: hetrain's convolutions are dense (1)", dil);
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    int64_t want[3];
    if (other) {
        keras_mixed_out(k, m, kk, stride, same, filters, want);
        if (keras_add_permute(k, m, kname, "_in", 0)) return -1;
    }
    keras_cur_shape(k, m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "kernel %d does not fit its %dx%d input", kk, h, w);
    // groups = channels (ConvNeXt's 7x7) is a depthwise convolution, filters / groups outputs
    // a channel; Keras's (K, K, 1, filters) kernel holds DepthwiseConv2D's (K, K, C, M) values
    // in the same order.
    if (groups != 1 && (groups != c || filters % groups))
        return kfail(k, "groups %d of %d input channels and %d filters: hetrain's grouped "
                     "convolution is the depthwise one (groups = input channels, filters a "
                     "multiple of them)", groups, c, filters);
    s.name = klayer_name(kname, "", buf, sizeof buf);
    s.filters = filters, s.k = kk, s.stride = stride, s.pad = same ? -1 : 0;
    if (groups != 1)
        s.kind = LAYER_DWCONV, s.filters = 0, s.mult = filters / groups,
        s.keras_as = 1 + LAYER_CONV2D;
    size_t params = (size_t)kk * kk * (c / groups) * filters + (s.no_bias ? 0 : (size_t)filters);
    if (keras_add(k, m, &s) ||
        keras_check_layer(k, m, filters, keras_out(h, kk, stride, same), keras_out(w, kk, stride, same),
                    params))
        return -1;
    // The activation is elementwise: before the permute back, as Keras applies it.
    if (keras_add_activation(k, m, act, s.name, last && !other)) return -1;
    if (other && (keras_add_permute(k, m, kname, "_out", 1) ||
                  keras_check_layer(k, m, (int)want[0], (int)want[1], (int)want[2], 0)))
        return -1;
    return 0;
}


const keras_family keras_conv = {conv_keras_read, NULL};
