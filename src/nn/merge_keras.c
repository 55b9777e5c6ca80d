// Keras's element-wise merges (Add, Subtract, Multiply, Average, Maximum) as the merge family
// (keras_int.h): its inputs are the graph's, which the reader hands to the layer it adds
// (kctx.from); model_add checks their shapes as Keras broadcasts them: each the first's, or 1x1
// with its channels.
#include "nn/keras_int.h"

// A's output positions (the model's input's for MODEL_INPUT).
static int positions(const model *m, int at) {
    return at < 0 ? m->in_h * m->in_w : m->layers[at].oh * m->layers[at].ow;
}

static int merge_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                            const char *kname, int last) {
    (void)cfg, (void)last;
    if (keras_need_merge(k)) return -1;
    // hetrain broadcasts inputs after the first: where Keras's first is the 1x1 one (Multiply
    // of a scale and an image), the first full input goes first, the result being the same but
    // for Subtract, whose order model_add keeps (and refuses).
    for (int j = 1; kind != LAYER_SUBTRACT && j < k->n_from; j++)
        if (positions(m, k->from[0]) == 1 && positions(m, k->from[j]) > 1) {
            int t = k->from[0];
            k->from[0] = k->from[j], k->from[j] = t;
            break;
        }
    int c, h, w;
    keras_cur_shape(k, m, &c, &h, &w);
    char buf[32];
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf)};
    if (keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, 0)) return -1;
    return 0;
}

const keras_family keras_merge = {merge_keras_read, NULL};
