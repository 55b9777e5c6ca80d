// The graph of a Functional model (Keras 3's and tf.keras 2.4+'s "Functional", older Keras 2's
// "Model"): each layer's calls and what each reads, in an order they run in, for the reader to
// give the layers it adds their inputs (a shared layer's later calls their first's
// parameters). A graph hetrain cannot compute is refused naming the first layer where it
// cannot: a merge hetrain does not have, a second input or output, a cycle.
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

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
    // tf.keras's TFOpLambda (`x + y` in a Keras 2 model): the call is one entry, [x's layer,
    // node, tensor, {"y": y, "name": null}], y another tensor's [layer, node, tensor] or a
    // number (keras_read_op's).
    if (json_object_is_type(node, json_type_array) &&
        json_object_is_type(kidx(node, 0), json_type_string)) {
        json_object *kw = kidx(node, 3);
        if (!is_int(kidx(node, 1)) || !is_int(kidx(node, 2)) ||
            (kw && !json_object_is_type(kw, json_type_object)))
            return kfail(k, "inbound_nodes: expected [layer, node, tensor, kwargs]");
        kin_add(in, n, json_object_get_string(kidx(node, 0)), json_object_get_int64(kidx(node, 1)),
                json_object_get_int64(kidx(node, 2)));
        json_object_object_foreach(kw, key, val) {
            if (!val || (!strcmp(key, "y") && !json_object_is_type(val, json_type_array))) continue;
            json_object *v0 = kidx(val, 0);
            if (!strcmp(key, "y") && json_object_array_length(val) >= 3 &&
                json_object_is_type(v0, json_type_string) && is_int(kidx(val, 1)) &&
                is_int(kidx(val, 2))) {
                kin_add(in, n, json_object_get_string(v0), json_object_get_int64(kidx(val, 1)),
                        json_object_get_int64(kidx(val, 2)));
                continue;
            }
            return kfail(k, "called with %.40s=%.40s: hetrain reads TFOpLambda's x and y", key,
                         json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN));
        }
        return 0;
    }
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

// Why a layer is no merge of n inputs: the message naming them and hetrain's merges.
static int not_a_merge(kctx *k, const kin *in, int n_in) {
    char names[160];
    size_t at = 0;
    for (int j = 0; j < n_in && j < KIN_MAX && at < sizeof names; j++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s\"%.30s\"", j ? ", " : "",
                               in[j].layer);
    char merges[160];
    at = 0;
    merges[0] = 0;
    for (int q = 0; q < LAYER_KIND_COUNT && at < sizeof merges; q++)
        if ((layer_flags((layer_kind)q) & LF_MERGE) && layer_desc_of(q)->keras_class)
            at += (size_t)snprintf(merges + at, sizeof merges - at, "%s%s", at ? ", " : "",
                                   layer_desc_of(q)->keras_class);
    return kfail(k, "merges %d inputs (%s%s): %s is no merge; hetrain merges with %s", n_in,
                 names, n_in > KIN_MAX ? ", ..." : "", k->lclass, merges);
}

// Each layer's calls: the layer's first call's index among all calls (in list order, the
// InputLayer's one first), and how many.
typedef struct kcalls_of {
    int first, n;
} kcalls_of;

int keras_graph_calls(kctx *k, json_object *cfg, json_object *layers, kcall **out) {
    const int n = (int)json_object_array_length(layers);
    *out = NULL;
    kin in[KIN_MAX];
    int n_in;
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
    const char *last = klayer_graph_name(kidx(layers, (size_t)n - 1));
    if (!last || strcmp(last, output)) {
        k->idx = -1;
        int i = layer_index(layers, output);
        json_object *L;
        if (i >= 0 && klayer_heading(k, layers, i, &L)) return -1;
        return kfail(k, "the model's output is \"%.40s\", not its last layer: hetrain reads a "
                     "Functional model whose output is its last layer", output);
    }
    // The layers' calls, numbered in list order.
    kcalls_of *of = calloc((size_t)n, sizeof *of);
    kcall *calls = NULL, *order = NULL;
    int *done = NULL, *at = NULL, total = 0, rc = -1;
    if (!of) goto oom;
    for (int i = 0; i < n; i++) {
        json_object *L;
        if (klayer_heading(k, layers, i, &L)) goto out;
        const char *name = klayer_graph_name(L);
        json_object *nodes = kget(L, "inbound_nodes");
        if (nodes && !json_object_is_type(nodes, json_type_array)) {
            kfail(k, "inbound_nodes: expected a list, found %s", ktype_name(nodes));
            goto out;
        }
        const int calls_i = nodes ? (int)json_object_array_length(nodes) : 0;
        if (i == 0) {
            if (strcmp(k->lclass, "InputLayer") || calls_i || !name || strcmp(name, input)) {
                kfail(k, "the first layer must be the model's input, \"%.40s\" (an "
                      "InputLayer)", input);
                goto out;
            }
        } else if (calls_i == 0) {
            kfail(k, "%s: hetrain reads a Functional model of one input",
                  strcmp(k->lclass, "InputLayer") ? "called on no input" : "a second input");
            goto out;
        } else if (calls_i > 1 && i == n - 1) {
            kfail(k, "the model's output layer, called %d times: hetrain reads a model whose "
                  "output layer is called once", calls_i);
            goto out;
        }
        of[i] = (kcalls_of){total, i ? calls_i : 1};
        if (total + of[i].n > KERAS_MAX_CALLS) {
            kfail(k, "more than %d layer calls in the model", KERAS_MAX_CALLS);
            goto out;
        }
        total += of[i].n;
    }
    if (!(calls = calloc((size_t)total, sizeof *calls)) ||
        !(order = calloc((size_t)total, sizeof *order)) ||
        !(done = calloc((size_t)total, sizeof *done)) || !(at = calloc((size_t)total, sizeof *at)))
        goto oom;
    calls[0] = (kcall){.layer = 0};
    for (int i = 1; i < n; i++) {
        json_object *L;
        if (klayer_heading(k, layers, i, &L)) goto out;
        json_object *nodes = kget(L, "inbound_nodes");
        const int kind = keras_class_kind(k->lclass);
        // TFOpLambda of two tensors: a merge (keras_read_op reads its function).
        const int merge = (kind >= 0 && (layer_flags((layer_kind)kind) & LF_MERGE)) ||
                          !strcmp(k->lclass, "TFOpLambda");
        for (int j = 0; j < of[i].n; j++) {
            kcall *C = &calls[of[i].first + j];
            *C = (kcall){.layer = i, .node = j};
            if (read_call(k, kidx(nodes, (size_t)j), in, &n_in)) goto out;
            if (n_in > 1 && !merge) {
                not_a_merge(k, in, n_in);
                goto out;
            }
            if (n_in > MODEL_MAX_IN) {
                kfail(k, "merges %d inputs: hetrain merges at most %d", n_in, MODEL_MAX_IN);
                goto out;
            }
            for (int t = 0; t < n_in; t++) {
                const int from = layer_index(layers, in[t].layer);
                if (from < 0) {
                    kfail(k, "its input \"%.40s\" is no layer of the model", in[t].layer);
                    goto out;
                }
                if (in[t].tensor != 0) {
                    kfail(k, "its input is output %lld of \"%.40s\": hetrain reads layers of "
                          "one output", (long long)in[t].tensor, in[t].layer);
                    goto out;
                }
                if (in[t].node < 0 || in[t].node >= of[from].n) {
                    kfail(k, "its input is call %lld of \"%.40s\", which is called %d time%s",
                          (long long)in[t].node, in[t].layer, of[from].n,
                          of[from].n == 1 ? "" : "s");
                    goto out;
                }
                C->in[t] = of[from].first + (int)in[t].node;
            }
            C->n_in = n_in;
        }
    }
    // An order they run in: the list's, each call as soon as what it reads is done (a shared
    // layer's later calls after the layers they read, listed after the layer itself).
    int n_done = 0;
    for (int progress = 1; progress && n_done < total;) {
        progress = 0;
        for (int c = 0; c < total; c++) {
            if (done[c]) continue;
            int ready = 1;
            for (int t = 0; t < calls[c].n_in && ready; t++) ready = done[calls[c].in[t]];
            if (!ready) continue;
            done[c] = 1, at[c] = n_done, progress = 1;
            order[n_done++] = calls[c];
        }
    }
    if (n_done < total) {
        for (int c = 0; c < total; c++) {
            if (done[c]) continue;
            json_object *L;
            if (klayer_heading(k, layers, calls[c].layer, &L)) goto out;
            kfail(k, "call %d reads what it computes itself (a cycle in the graph)",
                  calls[c].node);
            goto out;
        }
    }
    // Inputs as positions in the order; every call's output read, but the model's, which
    // nothing reads (so it is the last).
    for (int c = 0; c < total; c++)
        for (int t = 0; t < order[c].n_in; t++) order[c].in[t] = at[order[c].in[t]];
    memset(done, 0, sizeof *done * (size_t)total);
    for (int c = 0; c < total; c++)
        for (int t = 0; t < order[c].n_in; t++) {
            json_object *L;
            if (order[order[c].in[t]].layer != n - 1) {
                done[order[c].in[t]] = 1;
                continue;
            }
            if (klayer_heading(k, layers, order[c].layer, &L)) goto out;
            kfail(k, "its input \"%.40s\" is the model's output: hetrain reads a model whose "
                  "output is its last step", output);
            goto out;
        }
    for (int c = 0; c < total; c++) {
        if (done[c] || order[c].layer == n - 1) continue;
        json_object *L;
        if (klayer_heading(k, layers, order[c].layer, &L)) goto out;
        if (of[order[c].layer].n > 1)
            kfail(k, "no layer reads the output of its call %d, and it is not the model's: "
                  "hetrain trains a model of one output", order[c].node);
        else
            kfail(k, "no layer reads its output, and it is not the model's: hetrain trains a "
                  "model of one output");
        goto out;
    }
    *out = order;
    order = NULL;
    rc = total;
    goto out;
oom:
    k->idx = -1;
    kfail(k, "out of memory for the model's graph");
out:
    free(of), free(calls), free(order), free(done), free(at);
    return rc;
}

// ---- models inside the model ------------------------------------------------------------------

// Replaces element 0 of every inbound entry that names `from` (Keras 3's keras_history, Keras
// 2's [layer, node, tensor, kwargs]) by `to`, however deep in v.
static void rename_inbound(json_object *v, const char *from, const char *to) {
    if (json_object_is_type(v, json_type_array)) {
        json_object *e0 = kidx(v, 0);
        size_t n = json_object_array_length(v);
        if (n >= 3 && json_object_is_type(e0, json_type_string) &&
            !strcmp(json_object_get_string(e0), from)) {
            json_object_array_put_idx(v, 0, json_object_new_string(to));
            return;
        }
        for (size_t i = 0; i < n; i++) rename_inbound(kidx(v, i), from, to);
        return;
    }
    if (!json_object_is_type(v, json_type_object)) return;
    json_object_object_foreach(v, key, val) {
        (void)key;
        if (val) rename_inbound(val, from, to);
    }
}

// An inbound_nodes list of one call on the output of layer `name`, in the generation of
// `like` (a call as Keras 3 or Keras 2 writes it).
static json_object *call_on(const char *name, json_object *like) {
    json_object *hist = json_object_new_array();
    json_object_array_add(hist, json_object_new_string(name));
    json_object_array_add(hist, json_object_new_int(0));
    json_object_array_add(hist, json_object_new_int(0));
    json_object *call;
    if (json_object_is_type(like, json_type_array)) { // Keras 2: [[name, 0, 0, {}]]
        json_object_array_add(hist, json_object_new_object());
        call = json_object_new_array();
        json_object_array_add(call, hist);
    } else { // Keras 3: {"args": [tensor], "kwargs": {}}
        json_object *tcfg = json_object_new_object(), *t = json_object_new_object();
        json_object_object_add(tcfg, "keras_history", hist);
        json_object_object_add(t, "class_name", json_object_new_string("__keras_tensor__"));
        json_object_object_add(t, "config", tcfg);
        json_object *args = json_object_new_array();
        json_object_array_add(args, t);
        call = json_object_new_object();
        json_object_object_add(call, "args", args);
        json_object_object_add(call, "kwargs", json_object_new_object());
    }
    json_object *nodes = json_object_new_array();
    json_object_array_add(nodes, call);
    return nodes;
}

json_object *keras_graph_inline(kctx *k, json_object *layers, int *inlined) {
    json_object *out = json_object_new_array();
    *inlined = 0;
    const int n = (int)json_object_array_length(layers);
    int n_seq = 0; // the Sequentials of this list so far: Keras's weight files number them
    for (int i = 0; i < n; i++) {
        json_object *L;
        if (klayer_heading(k, layers, i, &L)) goto fail;
        if (strcmp(k->lclass, "Sequential")) {
            json_object_array_add(out, json_object_get(L));
            continue;
        }
        // A Sequential called once, on one tensor: its layers in its place, the first called
        // on its input, each next on the one before, and its readers reading its last.
        json_object *inner = kget(kget(L, "config"), "layers"), *nodes = kget(L, "inbound_nodes");
        const char *name = klayer_graph_name(L);
        if (!name || !inner || !json_object_is_type(inner, json_type_array) || !nodes ||
            !json_object_is_type(nodes, json_type_array) || json_object_array_length(nodes) != 1) {
            kfail(k, "a Sequential inside the model: expected its name, its layers and one call");
            goto fail;
        }
        json_object *call = kidx(nodes, 0);
        const char *prev = NULL;
        // Where its layers' weights are in Keras 3's files: under its group, the n_seq-th
        // Sequential's (KERAS_SEQ_KEY); one inside another Sequential's layers, deeper (-1).
        json_object *outer = kget(L, KERAS_SEQ_KEY);
        const int seq = outer ? -1 : ++n_seq;
        int trainable = 1;
        if (kget_bool(k, kget(L, "config"), "trainable", 1, &trainable)) goto fail;
        for (size_t j = 0; j < json_object_array_length(inner); j++) {
            json_object *I = kidx(inner, j), *cn = kget(I, "class_name");
            const char *iname = klayer_graph_name(I);
            if (!cn || !json_object_is_type(cn, json_type_string) || !iname) {
                kfail(k, "its layer %zu: expected a layer object with a class_name and a name", j);
                goto fail;
            }
            if (!strcmp(json_object_get_string(cn), "InputLayer")) continue;
            json_object_object_add(I, "inbound_nodes",
                                   prev ? call_on(prev, call) : json_object_get(nodes));
            json_object_object_add(I, KERAS_SEQ_KEY, json_object_new_int(seq));
            // A frozen Sequential's layers are frozen, as Keras trains them.
            json_object *icfg = kget(I, "config");
            if (!trainable && icfg && json_object_is_type(icfg, json_type_object))
                json_object_object_add(icfg, "trainable", json_object_new_boolean(0));
            // Keras 3's Functional names a layer at its top ("name"), as klayer_graph_name reads.
            json_object_array_add(out, json_object_get(I));
            prev = iname;
        }
        if (!prev) {
            kfail(k, "a Sequential inside the model without layers");
            goto fail;
        }
        (*inlined)++;
        for (int j = i + 1; j < n; j++)
            rename_inbound(kget(kidx(layers, (size_t)j), "inbound_nodes"), name, prev);
    }
    return out;
fail:
    json_object_put(out);
    return NULL;
}
