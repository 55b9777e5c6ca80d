// Keras's DepthwiseConv2D as the dwconv family (keras_int.h): its window, depth_multiplier,
// weights' arguments (depthwise_*) and activation; one of the other data_format between two
// permutes.
#include "nn/keras_int.h"

#include <string.h>

// The depthwise window DepthwiseConv2D and SeparableConv2D share: kernel_size, strides,
// depth_multiplier, padding valid or same, dilation_rate 1.
static int read_depthwise_window(kctx *k, json_object *cfg, int *kk, int *stride, int *mult,
                                 int *same) {
    int dil = 1;
    const char *pad = "valid";
    if (kget_pair(k, cfg, "kernel_size", NO_DEFAULT, 1, 64, kk) ||
        kget_pair(k, cfg, "strides", 1, 1, 64, stride) ||
        kget_pair(k, cfg, "dilation_rate", 1, 1, 64, &dil) ||
        kget_int(k, cfg, "depth_multiplier", 1, 1, 65536, mult) ||
        kget_str(k, cfg, "padding", "valid", &pad))
        return -1;
    if (dil != 1) return kfail(k, "dilation_rate %d: hetrain's convolutions are dense (1)", dil);
    *same = !strcmp(pad, "same");
    if (!*same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    return 0;
}

static int dwconv_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                             const char *kname, int last) {
    int kk = 0, stride = 1, mult = 1, same = 0, act = 0, c, h, w;
    layer_spec s = {.kind = kind};
    char buf[32];
    int other = keras_need_image(k) ? -1 : keras_other_format(k, cfg);
    if (other < 0 || read_depthwise_window(k, cfg, &kk, &stride, &mult, &same) ||
        keras_read_weights_of(k, cfg, "depthwise", &s, &act))
        return -1;
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

// Keras's SeparableConv2D: a depthwise convolution without a bias, then a 1x1 convolution to
// `filters` with the bias, as Keras computes it (its count, K*K*C*M + C*M*F + F, is the two
// layers'); named <name>_dw and <name>. The activation follows the second.
int keras_read_separable(kctx *k, model *m, json_object *cfg, const char *kname, int last) {
    int filters = 0, kk = 0, stride = 1, mult = 1, same = 0, act = 0, c, h, w, use_bias = 1;
    layer_spec dw = {.kind = LAYER_DWCONV}, pw = {.kind = LAYER_CONV2D};
    char buf[32], buf2[32];
    if (keras_need_image(k)) return -1;
    int other = keras_other_format(k, cfg);
    if (other < 0 || kget_int(k, cfg, "filters", NO_DEFAULT, 1, 65536, &filters) ||
        read_depthwise_window(k, cfg, &kk, &stride, &mult, &same) ||
        kget_bool(k, cfg, "use_bias", 1, &use_bias))
        return -1;
    if (other) return kfail(k, "data_format: hetrain reads a SeparableConv2D of its model's");
    // The depthwise kernel's arguments are depthwise_*, the pointwise one's pointwise_*; the
    // bias is the pointwise convolution's.
    int no_act;
    if (keras_read_weights_of(k, cfg, "depthwise", &dw, &no_act) ||
        keras_read_weights_of(k, cfg, "pointwise", &pw, &act))
        return -1;
    dw.no_bias = 1, dw.b_l1 = dw.b_l2 = 0;
    keras_cur_shape(k, m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "kernel %d does not fit its %dx%d input", kk, h, w);
    dw.name = klayer_name(kname, "_dw", buf, sizeof buf);
    dw.k = kk, dw.stride = stride, dw.pad = same ? -1 : 0, dw.mult = mult;
    pw.name = klayer_name(kname, "", buf2, sizeof buf2);
    pw.filters = filters, pw.k = 1, pw.stride = 1, pw.pad = 0;
    const int oh = keras_out(h, kk, stride, same), ow = keras_out(w, kk, stride, same);
    if (keras_add(k, m, &dw) ||
        keras_check_layer(k, m, c * mult, oh, ow, (size_t)kk * kk * c * mult) ||
        keras_add(k, m, &pw) ||
        keras_check_layer(k, m, filters, oh, ow,
                          (size_t)c * mult * filters + (use_bias ? (size_t)filters : 0)))
        return -1;
    return keras_add_activation(k, m, act, pw.name, last);
}
