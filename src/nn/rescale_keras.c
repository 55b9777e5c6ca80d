// Keras's Rescaling as the rescale family (keras_int.h): x * scale + offset, each a number
// (Keras takes per-channel lists too, which are refused by name).
#include "nn/keras_int.h"

#include <math.h>
#include <string.h>

// A number, or the message naming the key and what was found.
static int read_num(kctx *k, json_object *cfg, const char *key, double def, double *out) {
    json_object *v = kget(cfg, key);
    *out = def;
    if (!v) return 0;
    if (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) {
        *out = json_object_get_double(v);
        if (isfinite(*out)) return 0;
    }
    return kfail(k, "%s: expected a number (hetrain rescales every channel alike), found %.60s",
                 key, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
}

static int rescale_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                              const char *kname, int last) {
    (void)last;
    double scale, offset;
    char buf[32];
    if (read_num(k, cfg, "scale", 1.0, &scale) || read_num(k, cfg, "offset", 0.0, &offset))
        return -1;
    layer_spec s = {.kind = kind, .name = klayer_name(kname, "", buf, sizeof buf),
                    .scale = (float)scale, .offset = (float)offset};
    return keras_add(k, m, &s);
}

const keras_family keras_rescale = {rescale_keras_read, NULL};

// Keras 3 writes `x + 3.0`, `x * (1 / 6)` (keras.applications' MobileNetV3 does both in its
// hard sigmoid) as operations of keras.src.ops.numpy: a layer entry of class Add, Subtract,
// Multiply, Divide or TrueDivide whose call's args are the tensor and a number. Such an
// operation is the rescale family; one of two tensors is the merge of that name.
int keras_is_op(json_object *layer) {
    json_object *mod = kget(layer, "module"), *cls = kget(layer, "class_name");
    return (mod && json_object_is_type(mod, json_type_string) &&
            !strncmp(json_object_get_string(mod), "keras.src.ops.", 14)) ||
           (cls && json_object_is_type(cls, json_type_string) &&
            !strcmp(json_object_get_string(cls), "TFOpLambda"));
}

// tf.keras's TFOpLambda (a Keras 2 model's `x + y`, `x * 0.5`): its function as the operation
// class Keras 3 would write, or NULL.
static const char *tfop_class(json_object *cfg) {
    static const char *const fns[][2] = {
        {"__operators__.add", "Add"},      {"math.add", "Add"},
        {"math.subtract", "Subtract"},     {"__operators__.sub", "Subtract"},
        {"math.multiply", "Multiply"},     {"__operators__.mul", "Multiply"},
        {"math.truediv", "TrueDivide"},    {"__operators__.truediv", "TrueDivide"},
        {"math.divide", "Divide"},
    };
    json_object *f = kget(cfg, "function");
    if (!f || !json_object_is_type(f, json_type_string)) return NULL;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!strcmp(json_object_get_string(f), fns[i][0])) return fns[i][1];
    return NULL;
}

int keras_read_op(kctx *k, model *m, json_object *layer, json_object *cfg, const char *kname,
                  int last) {
    static const char *const ops[] = {"Add", "Subtract", "Multiply", "Divide", "TrueDivide",
                                      NULL};
    const int tfop = !strcmp(k->lclass, "TFOpLambda");
    const char *cls = tfop ? tfop_class(cfg) : k->lclass;
    if (!cls) {
        json_object *f = kget(cfg, "function");
        return kfail(k, "function %.60s is not supported; hetrain reads TFOpLambda's "
                     "__operators__.add, math.add, math.subtract, math.multiply and "
                     "math.truediv", f ? json_object_to_json_string_ext(f, JSON_C_TO_STRING_PLAIN)
                                       : "(none)");
    }
    int op = 0;
    while (ops[op] && strcmp(ops[op], cls)) op++;
    if (!ops[op])
        return kfail(k, "the operation %s is not supported; hetrain reads Add, Subtract, "
                     "Multiply and Divide of a tensor and a number, and Add, Subtract and "
                     "Multiply of two tensors", k->lclass);
    // The call's positional arguments: the numbers among them, and where. TFOpLambda's call
    // is [x's layer, node, tensor, {"y": ...}]: y, second, a number or a tensor.
    json_object *node = kidx(kget(layer, "inbound_nodes"), 0);
    json_object *args = tfop ? NULL : kget(node, "args");
    int n_num = 0, num_at = -1;
    double c = 0;
    json_object *y = tfop ? kget(kidx(node, 3), "y") : NULL;
    if (y && (json_object_is_type(y, json_type_double) || json_object_is_type(y, json_type_int)))
        n_num = 1, num_at = 1, c = json_object_get_double(y);
    for (size_t i = 0; args && json_object_is_type(args, json_type_array) &&
                       i < json_object_array_length(args); i++) {
        json_object *a = kidx(args, i);
        if (json_object_is_type(a, json_type_double) || json_object_is_type(a, json_type_int))
            n_num++, num_at = (int)i, c = json_object_get_double(a);
    }
    if (!n_num) {
        static const layer_kind merges[] = {LAYER_ADD, LAYER_SUBTRACT, LAYER_MULTIPLY};
        if (op > 2)
            return kfail(k, "%s of two tensors is not supported; hetrain divides by a number",
                         cls);
        return keras_merge.read(k, m, cfg, merges[op], kname, last);
    }
    if (n_num > 1 || !isfinite(c))
        return kfail(k, "%s: expected a tensor and one finite number", cls);
    double scale = 1, offset = 0;
    switch (op) {
    case 0: offset = c; break;                                    // x + c
    case 1: scale = num_at ? 1 : -1, offset = num_at ? -c : c; break; // x - c, c - x
    case 2: scale = c; break;                                     // x * c
    default:                                                      // x / c
        if (num_at == 0)
            return kfail(k, "%s of a number by a tensor is not supported; hetrain divides a "
                         "tensor by a number", cls);
        if (c == 0) return kfail(k, "%s by 0", cls);
        scale = 1 / c;
    }
    char buf[32];
    layer_spec s = {.kind = LAYER_RESCALE, .name = klayer_name(kname, "", buf, sizeof buf),
                    .scale = (float)scale, .offset = (float)offset};
    return keras_add(k, m, &s);
}
