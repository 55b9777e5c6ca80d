// Keras's ZeroPadding2D as the zeropad family (keras_int.h): its padding an int, (sym_h,
// sym_w) or ((top, bottom), (left, right)); a layer of the other data_format between two
// permutes, as the pooling layers.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

// An integer of a padding, 0..MODEL_MAX_DIM.
static int pad_int(kctx *k, json_object *v, int *out) {
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
        json_object_get_int64(v) > MODEL_MAX_DIM)
        return kfail(k, "padding: expected integers 0..%d, found %s", MODEL_MAX_DIM,
                     json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    *out = (int)json_object_get_int64(v);
    return 0;
}

// pads: top, bottom, left, right, from Keras's padding (its default 1 on every side).
static int read_padding(kctx *k, json_object *cfg, int pads[4]) {
    json_object *v = kget(cfg, "padding");
    if (!v) {
        pads[0] = pads[1] = pads[2] = pads[3] = 1;
        return 0;
    }
    if (json_object_is_type(v, json_type_int)) {
        if (pad_int(k, v, &pads[0])) return -1;
        pads[1] = pads[2] = pads[3] = pads[0];
        return 0;
    }
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 2) {
        json_object *h = kidx(v, 0), *w = kidx(v, 1);
        if (json_object_is_type(h, json_type_int) && json_object_is_type(w, json_type_int)) {
            if (pad_int(k, h, &pads[0]) || pad_int(k, w, &pads[2])) return -1;
            pads[1] = pads[0], pads[3] = pads[2];
            return 0;
        }
        if (json_object_is_type(h, json_type_array) && json_object_array_length(h) == 2 &&
            json_object_is_type(w, json_type_array) && json_object_array_length(w) == 2)
            return pad_int(k, kidx(h, 0), &pads[0]) || pad_int(k, kidx(h, 1), &pads[1]) ||
                           pad_int(k, kidx(w, 0), &pads[2]) || pad_int(k, kidx(w, 1), &pads[3])
                       ? -1
                       : 0;
    }
    return kfail(k, "padding: expected an integer, [sym_h, sym_w] or [[top, bottom], [left, "
                 "right]], found %s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
}

static int zeropad_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                              const char *kname, int last) {
    (void)last;
    int pads[4] = {0}, c, h, w;
    char buf[32];
    int other = keras_need_image(k) ? -1 : keras_other_format(k, cfg);
    if (other < 0 || read_padding(k, cfg, pads)) return -1;
    // Keras's output: the layer pads the two axes it takes for height and width (of the other
    // data_format: in a channels_last model the tensor's W and C, in a channels_first one its
    // C and H), here in hetrain's (C, H, W) order after the permute back.
    int64_t d[3] = {0}, want[3];
    keras_shape(k, m, d);
    if (other && !k->channels_first) // (H, W, C) taken as (C', H', W')
        want[0] = d[2] + pads[2] + pads[3], want[1] = d[0], want[2] = d[1] + pads[0] + pads[1];
    else if (other) // (C, H, W) taken as (H', W', C')
        want[0] = d[0] + pads[0] + pads[1], want[1] = d[1] + pads[2] + pads[3], want[2] = d[2];
    if (other && keras_add_permute(k, m, kname, "_in", 0)) return -1;
    keras_cur_shape(k, m, &c, &h, &w);
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .pad_top = pads[0], .pad_bottom = pads[1], .pad_left = pads[2],
                    .pad_right = pads[3]};
    if (keras_add(k, m, &s) ||
        keras_check_layer(k, m, c, h + pads[0] + pads[1], w + pads[2] + pads[3], 0))
        return -1;
    if (other && (keras_add_permute(k, m, kname, "_out", 1) ||
                  keras_check_layer(k, m, (int)want[0], (int)want[1], (int)want[2], 0)))
        return -1;
    return 0;
}

const keras_family keras_zeropad = {zeropad_keras_read, NULL};
