// Keras model JSON (model.to_json() of a Sequential model, or of a Functional one whose graph
// is a single path; Keras 2.x or 3.x) into hetrain's layers: the model's frame (class, input
// shape, layout, name) here, its layers in keras_layers.c, its graph in keras_graph.c.
#include "nn/keras.h"

#include "nn/keras_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERAS_MAX_BYTES (64u << 20)

// ---- the model ------------------------------------------------------------------------------

// [batch, d1, ...] into hetrain's (C,H,W) and the running rank.
static int read_input_shape(kctx *k, json_object *shape, const char *key, int *c, int *h, int *w) {
    if (!json_object_is_type(shape, json_type_array))
        return kfail(k, "%s: expected a list, found %s", key, ktype_name(shape));
    size_t n = json_object_array_length(shape);
    if (n < 2 || n > 4)
        return kfail(k, "%s: expected [batch, features], [batch, height, width] or [batch, "
                     "height, width, channels], found %zu entries", key, n);
    int64_t d[3];
    for (size_t i = 1; i < n; i++) {
        json_object *e = kidx(shape, i);
        if (!e) return kfail(k, "%s: axis %zu has no size (null): hetrain needs every size", key,
                             i);
        if (!json_object_is_type(e, json_type_int))
            return kfail(k, "%s: expected integers, found %s", key, ktype_name(e));
        d[i - 1] = json_object_get_int64(e);
        if (d[i - 1] < 1 || d[i - 1] > 65536)
            return kfail(k, "%s: size %lld: expected 1..65536", key, (long long)d[i - 1]);
    }
    k->rank = (int)n - 1;
    if (k->rank == 1) *c = (int)d[0], *h = 1, *w = 1;
    else if (k->rank == 2) *c = 1, *h = (int)d[0], *w = (int)d[1];
    else if (k->channels_first) *c = (int)d[0], *h = (int)d[1], *w = (int)d[2];
    else *c = (int)d[2], *h = (int)d[0], *w = (int)d[1];
    return 0;
}

// Whether s is prefix, or prefix_N: a name Keras made up.
static int keras_default_name(const char *s, const char *prefix) {
    size_t n = strlen(prefix);
    return !strncmp(s, prefix, n) &&
           (s[n] == 0 || (s[n] == '_' && s[n + 1] && strspn(s + n + 1, "0123456789") ==
                                                         strlen(s + n + 1)));
}

// The model's name: Keras's, unless it is one of Keras's defaults ("sequential",
// "sequential_3", "functional_1", Keras 2's "model"), which say less than the file's base name.
static void model_name(json_object *cfg, const char *path, char *out, size_t cap) {
    json_object *n = kget(cfg, "name");
    const char *s = n && json_object_is_type(n, json_type_string) ? json_object_get_string(n) : "";
    size_t len = strlen(s);
    int is_default = keras_default_name(s, "sequential") || keras_default_name(s, "functional") ||
                     keras_default_name(s, "model");
    if (len > 0 && len < cap && len < 64 && !is_default) {
        snprintf(out, cap, "%s", s);
        return;
    }
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *dot = strrchr(base, '.');
    int blen = (int)(dot && dot != base ? (size_t)(dot - base) : strlen(base));
    snprintf(out, cap, "%.*s", blen > 63 ? 63 : blen, base);
    if (!out[0]) snprintf(out, cap, "model");
}

// A Functional model's layer calls, each given its inputs: the hetrain layer that holds each
// input call's output (a Keras layer may add several, or none: Flatten's is its input's) and
// its Keras rank. A layer on the last layer added alone needs nothing: it follows it. A shared
// layer's later call is read again, into layers sharing its first call's (kctx.node).
static int read_graph(kctx *k, model *m, json_object *cfg, json_object *layers) {
    kcall *calls = NULL;
    const int n = keras_graph_calls(k, cfg, layers, &calls);
    if (n < 0) return -1;
    int *out_of = calloc((size_t)n, sizeof *out_of), *rank_of = calloc((size_t)n, sizeof *rank_of);
    int *first_of = calloc((size_t)n, sizeof *first_of), rc = -1;
    if (!out_of || !rank_of || !first_of) {
        k->idx = -1;
        kfail(k, "out of memory for %d layer calls", n);
        goto out;
    }
    for (int c = 0; c < n; c++) {
        const kcall *C = &calls[c];
        json_object *L;
        if (klayer_heading(k, layers, C->layer, &L)) goto out;
        k->n_from = 0;
        if (C->n_in) {
            const int merge = C->n_in > 1;
            k->rank = rank_of[C->in[0]];
            if (merge || out_of[C->in[0]] != m->n_layers - 1) {
                k->n_from = C->n_in;
                for (int j = 0; j < C->n_in; j++) k->from[j] = out_of[C->in[j]];
            }
        }
        const int before = m->n_layers;
        first_of[c] = before; // call c's layers: [first_of[c], first_of[c + 1])
        // A later call: its first's layers, which came before it (the order runs them first).
        int first = -1;
        for (int q = 0; C->node && q < c && first < 0; q++)
            if (calls[q].layer == C->layer && calls[q].node == 0) first = q;
        k->node = C->node;
        k->call_first = before;
        k->share_first = first >= 0 ? first_of[first] : 0;
        k->share_n = first >= 0 ? first_of[first + 1] - first_of[first] : 0;
        if (keras_read_layer(k, m, L, c == n - 1)) goto out;
        out_of[c] = m->n_layers > before ? m->n_layers - 1
                    : C->n_in            ? out_of[C->in[0]]
                                         : MODEL_INPUT;
        rank_of[c] = k->rank;
        k->n_from = 0;
        k->node = 0;
    }
    rc = 0;
out:
    free(calls), free(out_of), free(rank_of), free(first_of);
    return rc;
}

static int build(kctx *k, model *m, json_object *root) {
    if (!json_object_is_type(root, json_type_object))
        return kfail(k, "expected a JSON object (Keras's model.to_json()), found %s",
                     ktype_name(root));
    json_object *cn = kget(root, "class_name");
    if (!cn || !json_object_is_type(cn, json_type_string))
        return kfail(k, "class_name: expected \"Sequential\" or \"Functional\"");
    const char *mclass = json_object_get_string(cn);
    // Functional: Keras 3 and tf.keras 2.4+; Model: Keras 2 before.
    int graph = !strcmp(mclass, "Functional") || !strcmp(mclass, "Model");
    if (!graph && strcmp(mclass, "Sequential"))
        return kfail(k, "class_name \"%.40s\": hetrain reads Sequential models, and Functional "
                     "ones whose graph is a single path", mclass);
    json_object *cfg = kget(root, "config"), *layers = cfg;
    if (cfg && json_object_is_type(cfg, json_type_object)) layers = kget(cfg, "layers");
    else cfg = NULL; // Keras 2.0-2.2: "config" is the list of layers itself
    if (!layers || !json_object_is_type(layers, json_type_array))
        return kfail(k, "config: expected an object with a list of \"layers\", or that list");
    int n = (int)json_object_array_length(layers);
    if (n < 1) return kfail(k, "the model has no layers");
    json_object *ver = kget(root, "keras_version"); // Keras 3 writes none
    k->keras2 = ver && json_object_is_type(ver, json_type_string) &&
                (json_object_get_string(ver)[0] == '1' || json_object_get_string(ver)[0] == '2');
    int trainable = 1;
    if (cfg && (kcheck_dtype(k, cfg) || kget_bool(k, cfg, "trainable", 1, &trainable)))
        return -1;
    if (!trainable) return kfail(k, "trainable false on the whole model: nothing would train");
    if (graph && !cfg)
        return kfail(k, "config: expected an object with \"layers\", \"input_layers\" and "
                     "\"output_layers\"");

    // The layout is the first Conv2D's data_format, else the first image layer's; the input
    // shape reads in it. A layer of the other format is refused (keras_layers.c).
    int format = -1;
    for (int pass = 0; pass < 2 && format < 0; pass++)
        for (int i = 0; i < n && format < 0; i++) {
            json_object *L;
            if (klayer_heading(k, layers, i, &L)) return -1;
            const char *c = k->lclass;
            if (!strcmp(c, "Conv2D") ||
                (pass == 1 && (!strcmp(c, "MaxPooling2D") || !strcmp(c, "AveragePooling2D") ||
                               !strcmp(c, "GlobalAveragePooling2D"))))
                if (kget_format(k, kget(L, "config"), &format)) return -1;
        }
    k->channels_first = format == 1;

    // The input shape: the InputLayer's (Keras 3 batch_shape, Keras 2 batch_input_shape), the
    // first layer's batch_input_shape (Keras 2 without an InputLayer), Keras 3's build_config.
    json_object *L0, *shape = NULL;
    const char *key = NULL;
    if (klayer_heading(k, layers, 0, &L0)) return -1;
    json_object *c0 = kget(L0, "config");
    static const char *const keys[] = {"batch_shape", "batch_input_shape"};
    for (int i = 0; i < 2 && !shape; i++)
        if ((shape = kget(c0, keys[i]))) key = keys[i];
    k->idx = -1;
    if (!shape && (shape = kget(kget(root, "build_config"), "input_shape")))
        key = "build_config input_shape";
    if (!shape)
        return kfail(k, "no input shape: expected an InputLayer with batch_shape (Keras 3) or "
                     "batch_input_shape (Keras 2), or batch_input_shape on the first layer");
    int c = 0, h = 0, w = 0;
    if (read_input_shape(k, shape, key, &c, &h, &w)) return -1;
    char name[64];
    model_name(cfg, k->path, name, sizeof name);
    // Begin with the most classes; the final softmax or sigmoid sets the real count.
    if (model_begin(m, name, c, h, w, 256, k->err)) return ht_wrap(k->err, "%s", k->path);

    if (!graph) {
        for (int i = 0; i < n; i++) {
            json_object *L;
            if (klayer_heading(k, layers, i, &L) || keras_read_layer(k, m, L, i == n - 1))
                return -1;
        }
    } else {
        // Models inside the model, up to 8 deep, in their places (deeper ones stay, refused).
        json_object *flat = json_object_get(layers);
        for (int depth = 0, inlined = 1; flat && inlined && depth < 8; depth++) {
            json_object *next = keras_graph_inline(k, flat, &inlined);
            json_object_put(flat);
            flat = next;
        }
        int rc = flat ? read_graph(k, m, cfg, flat) : -1;
        json_object_put(flat);
        if (rc < 0) return -1;
    }
    const layer *last = m->n_layers ? &m->layers[m->n_layers - 1] : NULL;
    if (!last || (last->kind != LAYER_SOFTMAX_XENT && last->kind != LAYER_SIGMOID_BCE))
        return kfail(k, "the network must end in a softmax over the classes (Dense(..., "
                     "activation=\"softmax\"), Activation(\"softmax\") or Softmax), which "
                     "hetrain trains as its softmax cross-entropy, or in a sigmoid (binary "
                     "cross-entropy: one output, or k labels of a multi-label head)");
    k->idx = -1;
    if (model_finish(m, k->err)) return ht_wrap(k->err, "%s", k->path);
    return 0;
}

int model_init_keras_text(model *m, const char *text, size_t len, const char *path,
                          ht_error *err) {
    memset(m, 0, sizeof *m);
    kctx k = {.path = path, .err = err, .idx = -1, .lname = "", .lclass = ""};
    if (len > KERAS_MAX_BYTES) return kfail(&k, "larger than %u MiB", KERAS_MAX_BYTES >> 20);
    json_tokener *tok = json_tokener_new();
    if (!tok) return kfail(&k, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    int rc = -1;
    if (!root) {
        enum json_tokener_error je = json_tokener_get_error(tok);
        size_t at = json_tokener_get_parse_end(tok), line = 1, col = 1;
        for (size_t i = 0; i < at && i < len; i++, col++)
            if (text[i] == '\n') line++, col = 0;
        if (je == json_tokener_continue || je == json_tokener_success)
            kfail(&k, "not valid JSON: it ends early");
        else
            kfail(&k, "not valid JSON at line %zu, column %zu: %s", line, col,
                  json_tokener_error_desc(je));
        goto done;
    }
    for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
        if (!strchr(" \t\r\n", text[i]) || !text[i]) {
            kfail(&k, "not valid JSON: more after the model's object (byte %zu)", i);
            goto done;
        }
    rc = build(&k, m, root);
done:
    json_object_put(root);
    json_tokener_free(tok);
    if (rc) model_free(m);
    return rc;
}

int model_init_keras(model *m, const char *path, ht_error *err) {
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f) return ht_fail(err, "%s: cannot open Keras model: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = -1;
    for (;;) {
        if (len == cap) {
            if (cap > KERAS_MAX_BYTES) {
                ht_fail(err, "%s: larger than %u MiB", path, KERAS_MAX_BYTES >> 20);
                goto out;
            }
            cap = cap ? 2 * cap : 65536;
            char *grown = realloc(buf, cap + 1);
            if (!grown) {
                ht_fail(err, "%s: out of memory", path);
                goto out;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        ht_fail(err, "%s: read error: %s", path, strerror(errno));
        goto out;
    }
    rc = model_init_keras_text(m, buf, len, path, err);
out:
    fclose(f);
    free(buf);
    return rc;
}
