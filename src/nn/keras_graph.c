// The graph of a Functional model (Keras 3's and tf.keras 2.4+'s "Functional", older Keras 2's
// "Model"): hetrain reads one whose graph is a single path as it reads a Sequential model, and
// refuses any other naming the first layer where the graph stops being one path (a merge, a
// shared layer, a second input or output, a branch).
#include "nn/keras_int.h"

#include <stdio.h>
#include <string.h>

#define KIN_MAX 4 // inbound tensors kept per call (more are counted)

// One inbound tensor: the layer it comes from, that layer's call (node) and output.
typedef struct kin {
    const char *layer;
    int64_t node, tensor;
} kin;

static void kin_add(kin *in, int *n, const char *layer, int64_t node, int64_t tensor) {
    if (*n < KIN_MAX) in[*n] = (kin){layer, node, tensor};
    (*n)++;
}

static int is_int(json_object *v) { return v && json_object_is_type(v, json_type_int); }

// Keras 3: the tensors an argument holds ({"class_name": "__keras_tensor__", "config":
// {"keras_history": [layer, node, tensor]}}), however deep in lists and objects.
static int find_tensors(kctx *k, json_object *v, kin *in, int *n) {
    if (json_object_is_type(v, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(v); i++)
            if (find_tensors(k, kidx(v, i), in, n)) return -1;
        return 0;
    }
    if (!json_object_is_type(v, json_type_object)) return 0;
    json_object *cn = kget(v, "class_name");
    if (cn && json_object_is_type(cn, json_type_string) &&
        !strcmp(json_object_get_string(cn), "__keras_tensor__")) {
        json_object *h = kget(kget(v, "config"), "keras_history");
        // json-c asserts on an index into what is not an array: the type first.
        json_object *h0 = h && json_object_is_type(h, json_type_array)
                              ? kidx(h, 0) : NULL;
        if (!h || !json_object_is_type(h, json_type_array) || json_object_array_length(h) != 3 ||
            !json_object_is_type(h0, json_type_string) ||
            !is_int(kidx(h, 1)) || !is_int(kidx(h, 2)))
            return kfail(k, "inbound_nodes: a tensor without its keras_history [layer, node, "
                         "tensor]");
        kin_add(in, n, json_object_get_string(h0),
                json_object_get_int64(kidx(h, 1)),
                json_object_get_int64(kidx(h, 2)));
        return 0;
    }
    json_object_object_foreach(v, key, val) {
        (void)key;
        if (val && find_tensors(k, val, in, n)) return -1;
    }
    return 0;
}

// The tensors one call of the layer (one entry of its inbound_nodes) takes, in *n (the first
// KIN_MAX in in). Keras 2 writes a call as [[layer, node, tensor, kwargs], ...], Keras 3 as
// {"args": [...], "kwargs": {...}}. An argument other than the tensors is refused: Keras 2
// keeps one given at the call (training=True: dropout at inference too), hetrain has none;
// Keras 3's recorded training is replaced by fit's and predict's own, so it is let be.
static int read_call(kctx *k, json_object *node, kin *in, int *n) {
    *n = 0;
    if (json_object_is_type(node, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(node); i++) {
            json_object *e = kidx(node, i);
            size_t len = json_object_is_type(e, json_type_array) ? json_object_array_length(e) : 0;
            json_object *e0 = kidx(e, 0);
            if (len < 3 || !json_object_is_type(e0, json_type_string) ||
                !is_int(kidx(e, 1)) ||
                !is_int(kidx(e, 2)))
                return kfail(k, "inbound_nodes: expected [layer, node, tensor, kwargs] entries");
            json_object *kw = len > 3 ? kidx(e, 3) : NULL;
            if (kw && json_object_is_type(kw, json_type_object)) {
                json_object_object_foreach(kw, key, val) {
                    if (val)
                        return kfail(k, "called with %.40s=%.40s: hetrain calls a layer on its "
                                     "input alone", key,
                                     json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN));
                }
            }
            kin_add(in, n, json_object_get_string(e0),
                    json_object_get_int64(kidx(e, 1)),
                    json_object_get_int64(kidx(e, 2)));
        }
        return 0;
    }
    if (!json_object_is_type(node, json_type_object))
        return kfail(k, "inbound_nodes: expected lists or objects, found %s", ktype_name(node));
    json_object *args = kget(node, "args"), *kwargs = kget(node, "kwargs");
    if (args && find_tensors(k, args, in, n)) return -1;
    if (kwargs && json_object_is_type(kwargs, json_type_object)) {
        json_object_object_foreach(kwargs, key, val) {
            if (!val || !strcmp(key, "training")) continue;
            int before = *n;
            if (find_tensors(k, val, in, n)) return -1;
            if (*n == before)
                return kfail(k, "called with %.40s=%.40s: hetrain calls a layer on its input "
                             "alone", key, json_object_to_json_string_ext(val,
                                                                         JSON_C_TO_STRING_PLAIN));
        }
    }
    return 0;
}

// The layer names of input_layers or output_layers: Keras 3 writes one as [name, 0, 0] and
// several as [[name, 0, 0], ...], Keras 2 always the latter. Returns the count, or -1.
static int endpoint_names(kctx *k, json_object *cfg, const char *key, const char **names,
                          int cap) {
    json_object *v = kget(cfg, key);
    k->idx = -1; // the model's, not a layer's
    if (!v || !json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0)
        return kfail(k, "%s: expected a list of [layer, node, tensor]", key);
    json_object *first = kidx(v, 0);
    if (json_object_is_type(first, json_type_string)) {
        names[0] = json_object_get_string(first);
        return 1;
    }
    int n = (int)json_object_array_length(v);
    for (int i = 0; i < n; i++) {
        json_object *e = kidx(v, (size_t)i);
        json_object *e0 = kidx(e, 0);
        if (!json_object_is_type(e, json_type_array) || !json_object_is_type(e0, json_type_string))
            return kfail(k, "%s: expected a list of [layer, node, tensor]", key);
        if (i < cap) names[i] = json_object_get_string(e0);
    }
    return n;
}

// The index of the layer Keras's graph calls name, or -1.
static int layer_index(json_object *layers, const char *name) {
    int n = (int)json_object_array_length(layers);
    for (int i = 0; i < n; i++) {
        const char *s = klayer_graph_name(kidx(layers, (size_t)i));
        if (s && !strcmp(s, name)) return i;
    }
    return -1;
}

#define SINGLE_PATH "hetrain reads a Functional model whose graph is a single path"

int keras_check_path(kctx *k, json_object *cfg, json_object *layers) {
    int n = (int)json_object_array_length(layers);
    kin in[KIN_MAX];
    int n_in;
    // First what makes the graph more than a path wherever it is: merges and shared layers.
    for (int i = 0; i < n; i++) {
        json_object *L;
        if (klayer_heading(k, layers, i, &L)) return -1;
        json_object *nodes = kget(L, "inbound_nodes");
        if (nodes && !json_object_is_type(nodes, json_type_array))
            return kfail(k, "inbound_nodes: expected a list, found %s", ktype_name(nodes));
        int calls = nodes ? (int)json_object_array_length(nodes) : 0;
        if (calls > 1)
            return kfail(k, "called %d times (a shared layer): " SINGLE_PATH, calls);
        if (calls == 0) continue;
        if (read_call(k, kidx(nodes, 0), in, &n_in)) return -1;
        if (n_in > 1) {
            char names[160];
            size_t at = 0;
            for (int j = 0; j < n_in && j < KIN_MAX && at < sizeof names; j++)
                at += (size_t)snprintf(names + at, sizeof names - at, "%s\"%.30s\"",
                                       j ? ", " : "", in[j].layer);
            return kfail(k, "merges %d inputs (%s%s): " SINGLE_PATH " (no Add, Concatenate or "
                         "other merge)", n_in, names, n_in > KIN_MAX ? ", ..." : "");
        }
    }
    // One input, one output.
    const char *ends[2];
    int n_ends = endpoint_names(k, cfg, "input_layers", ends, 2);
    if (n_ends < 0) return -1;
    if (n_ends > 1) {
        int i = layer_index(layers, ends[1]);
        json_object *L;
        if (i < 0) k->idx = -1;
        else if (klayer_heading(k, layers, i, &L)) return -1;
        return kfail(k, "a second input (the model has %d): hetrain reads models of one input",
                     n_ends);
    }
    const char *input = ends[0];
    if ((n_ends = endpoint_names(k, cfg, "output_layers", ends, 2)) < 0) return -1;
    if (n_ends > 1) {
        const char *last = klayer_graph_name(kidx(layers, (size_t)n - 1));
        const char *odd = last && !strcmp(ends[0], last) ? ends[1] : ends[0];
        int i = layer_index(layers, odd);
        json_object *L;
        if (i < 0) k->idx = -1;
        else if (klayer_heading(k, layers, i, &L)) return -1;
        return kfail(k, "one of the model's %d outputs: hetrain trains a model of one output",
                     n_ends);
    }
    const char *output = ends[0];
    // The path: the input first, each later layer on the output of the one before it.
    for (int i = 0; i < n; i++) {
        json_object *L;
        if (klayer_heading(k, layers, i, &L)) return -1;
        const char *name = klayer_graph_name(L);
        json_object *nodes = kget(L, "inbound_nodes");
        int calls = nodes ? (int)json_object_array_length(nodes) : 0;
        if (i == 0) {
            if (strcmp(k->lclass, "InputLayer") || calls || !name || strcmp(name, input))
                return kfail(k, "the first layer must be the model's input, \"%.40s\" (an "
                             "InputLayer)", input);
            continue;
        }
        if (calls == 0)
            return kfail(k, "%s: " SINGLE_PATH " of one input",
                         strcmp(k->lclass, "InputLayer") ? "called on no input"
                                                         : "a second input");
        read_call(k, kidx(nodes, 0), in, &n_in); // read above
        const char *prev = klayer_graph_name(kidx(layers, (size_t)i - 1));
        if (n_in != 1 || !prev || strcmp(in[0].layer, prev) || in[0].node != 0 ||
            in[0].tensor != 0)
            return kfail(k, "its input is \"%.40s\", not the layer before it (\"%.40s\"): "
                         SINGLE_PATH ", its layers listed in order", n_in ? in[0].layer : "",
                         prev ? prev : "");
    }
    const char *last = klayer_graph_name(kidx(layers, (size_t)n - 1));
    if (!last || strcmp(last, output))
        return kfail(k, "the model's output is \"%.40s\", not its last layer: " SINGLE_PATH,
                     output);
    return 0;
}
