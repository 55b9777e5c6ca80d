// Keras's MaxPooling2D and AveragePooling2D as the pool family, GlobalAveragePooling2D as the
// gap family (keras_int.h); a layer of the other data_format between two permutes.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

#include <string.h>

static int pool_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                           const char *kname, int last) {
    (void)last;
    int kk = 0, stride = 1, c, h, w;
    const char *pad = "valid";
    char buf[32];
    int other = keras_need_image(k) ? -1 : keras_other_format(k, cfg);
    if (other < 0 || kget_pair(k, cfg, "pool_size", 2, 1, 64, &kk) ||
        kget_str(k, cfg, "padding", "valid", &pad))
        return -1;
    if (kget_pair(k, cfg, "strides", kk, 1, 64, &stride)) return -1;
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    // A 1x1 window of stride 1 is the identity whichever axes it slides over.
    other = other && !(kk == 1 && stride == 1);
    int64_t want[3];
    if (other) {
        keras_mixed_out(k, m, kk, stride, same, 0, want);
        if (keras_add_permute(k, m, kname, "_in", 0)) return -1;
    }
    keras_cur_shape(k, m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "pool_size %d does not fit its %dx%d input", kk, h, w);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf), .k = kk,
                    .stride = stride, .pad = same ? -1 : 0};
    if (keras_add(k, m, &s) ||
        keras_check_layer(k, m, c, keras_out(h, kk, stride, same), keras_out(w, kk, stride, same), 0))
        return -1;
    if (other && (keras_add_permute(k, m, kname, "_out", 1) ||
                  keras_check_layer(k, m, (int)want[0], (int)want[1], (int)want[2], 0)))
        return -1;
    return 0;
}

static int gap_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                          const char *kname, int last) {
    (void)kind, (void)last;
    int keepdims = 0, c, h, w;
    char buf[32];
    int other = keras_need_image(k) ? -1 : keras_other_format(k, cfg);
    if (other < 0 || kget_bool(k, cfg, "keepdims", 0, &keepdims)) return -1;
    if (other && keras_add_permute(k, m, kname, "_in", 0)) return -1;
    keras_cur_shape(k, m, &c, &h, &w);
    layer_spec s = {.kind = LAYER_GLOBAL_AVGPOOL, .name = klayer_name(kname, "", buf, sizeof buf)};
    if (keras_add(k, m, &s) || keras_check_layer(k, m, c, 1, 1, 0)) return -1;
    // Keras keeps (C', 1, 1) in the layer's order: the model's is the permute back of it.
    if (other && keepdims && keras_add_permute(k, m, kname, "_out", 1)) return -1;
    if (!keepdims) k->rank = 1;
    return 0;
}


const keras_family keras_pool = {pool_keras_read, NULL};
const keras_family keras_gap = {gap_keras_read, NULL};
