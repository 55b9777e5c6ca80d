// Keras model JSON (model.to_json() of a Sequential model, Keras 2.x or 3.x) into hetrain's
// layers. Each Keras layer becomes zero or more hetrain layers (Conv2D with activation="relu":
// conv + relu; Flatten, InputLayer: none); every shape and parameter count is checked against
// what Keras computes, so a layer hetrain would compute differently is refused, never changed.
#include "keras.h"

#include "layer_desc.h"

#include <json.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERAS_MAX_BYTES (64u << 20)
#define KERAS_CLASSES                                                                          \
    "InputLayer, Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, "  \
    "Dense, BatchNormalization, Dropout, Activation, ReLU, LeakyReLU, ELU, Softmax"
#define NO_DEFAULT INT32_MIN

typedef struct kctx {
    const char *path;
    ht_error *err;
    int idx;            // index of the layer being read in the JSON's list; -1: none
    const char *lname;  // its name and class, for messages
    const char *lclass;
    int channels_first; // the model's data_format
    int format_set;
    // the running shape in Keras's terms: rank 1 (features), 2 (H, W) or 3 (an image)
    int rank;
    int keras2; // written by Keras 2 (keras_version 1.x or 2.x): its hard_sigmoid is 0.2 x + 0.5
} kctx;

static int kfail(kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int kfail(kctx *k, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    // The JSON's own strings (names, classes, values) may hold any character: keep one line.
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    if (k->idx < 0) return ht_fail(k->err, "%s: %s", k->path, msg);
    char name[48], cls[48];
    ht_escape(name, sizeof name, k->lname, strlen(k->lname));
    ht_escape(cls, sizeof cls, k->lclass, strlen(k->lclass));
    return ht_fail(k->err, "%s: layer %d \"%s\" (%s): %s", k->path, k->idx, name, cls, msg);
}

static const char *type_name(json_object *v) {
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double: return "a number";
    case json_type_int: return "an integer";
    case json_type_object: return "an object";
    case json_type_array: return "a list";
    case json_type_string: return "a string";
    }
    return "?";
}

// The value under key; NULL when absent or null.
static json_object *jget(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object)) return NULL;
    if (!json_object_object_get_ex(o, key, &v)) return NULL;
    return v;
}

static int get_int(kctx *k, json_object *cfg, const char *key, int def, int lo, int hi,
                   int *out) {
    json_object *v = jget(cfg, key);
    if (!v) {
        if (def == NO_DEFAULT) return kfail(k, "%s missing", key);
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return kfail(k, "%s: expected an integer, found %s", key, type_name(v));
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return kfail(k, "%s %lld: expected %d..%d", key, (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

// An int or a list of equal ints (one per spatial axis): hetrain's windows are square.
static int get_pair(kctx *k, json_object *cfg, const char *key, int def, int lo, int hi,
                    int *out) {
    json_object *v = jget(cfg, key);
    if (!v || json_object_is_type(v, json_type_int)) return get_int(k, cfg, key, def, lo, hi, out);
    if (!json_object_is_type(v, json_type_array))
        return kfail(k, "%s: expected an integer or a list of two, found %s", key, type_name(v));
    size_t n = json_object_array_length(v);
    if (n < 1 || n > 2) return kfail(k, "%s: expected a list of two integers", key);
    int64_t x[2];
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        if (!json_object_is_type(e, json_type_int))
            return kfail(k, "%s: expected a list of integers, found %s in it", key, type_name(e));
        x[i] = json_object_get_int64(e);
    }
    if (n == 2 && x[0] != x[1])
        return kfail(k, "%s [%lld, %lld]: hetrain takes the same size along both axes", key,
                     (long long)x[0], (long long)x[1]);
    if (x[0] < lo || x[0] > hi)
        return kfail(k, "%s %lld: expected %d..%d", key, (long long)x[0], lo, hi);
    *out = (int)x[0];
    return 0;
}

static int get_bool(kctx *k, json_object *cfg, const char *key, int def, int *out) {
    json_object *v = jget(cfg, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_boolean))
        return kfail(k, "%s: expected true or false, found %s", key, type_name(v));
    *out = json_object_get_boolean(v);
    return 0;
}

static int get_num(kctx *k, json_object *cfg, const char *key, double *out) {
    json_object *v = jget(cfg, key);
    if (!v) return kfail(k, "%s missing", key);
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return kfail(k, "%s: expected a number, found %s", key, type_name(v));
    *out = json_object_get_double(v);
    if (!isfinite(*out)) return kfail(k, "%s: expected a finite number", key);
    return 0;
}

// A string under key (def when absent or null); NULL default: required.
static int get_str(kctx *k, json_object *cfg, const char *key, const char *def,
                   const char **out) {
    json_object *v = jget(cfg, key);
    if (!v) {
        if (!def) return kfail(k, "%s missing", key);
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return kfail(k, "%s: expected a string, found %s", key, type_name(v));
    *out = json_object_get_string(v);
    return 0;
}

// Keys that must be absent or null: what hetrain has no counterpart for.
static int check_nulls(kctx *k, json_object *cfg, const char *const *keys, const char *why) {
    for (int i = 0; keys[i]; i++)
        if (jget(cfg, keys[i])) return kfail(k, "%s: not supported (%s)", keys[i], why);
    return 0;
}

static int check_dtype(kctx *k, json_object *cfg) {
    json_object *v = jget(cfg, "dtype");
    if (!v) return 0;
    const char *name = NULL;
    if (json_object_is_type(v, json_type_string)) name = json_object_get_string(v);
    else if (json_object_is_type(v, json_type_object)) { // Keras 3's DTypePolicy
        json_object *n = jget(jget(v, "config"), "name");
        if (n && json_object_is_type(n, json_type_string)) name = json_object_get_string(n);
    }
    if (!name) return kfail(k, "dtype: expected a string or a dtype policy, found %s",
                            type_name(v));
    if (strcmp(name, "float32"))
        return kfail(k, "dtype \"%.40s\": hetrain computes in float32", name);
    return 0;
}

static int check_format(kctx *k, json_object *cfg) {
    const char *f;
    if (get_str(k, cfg, "data_format", "channels_last", &f)) return -1;
    int first = !strcmp(f, "channels_first");
    if (!first && strcmp(f, "channels_last"))
        return kfail(k, "data_format \"%.40s\": expected channels_last or channels_first", f);
    if (k->format_set && first != k->channels_first)
        return kfail(k, "data_format %s after %s layers: hetrain reads one layout per model", f,
                     k->channels_first ? "channels_first" : "channels_last");
    k->channels_first = first, k->format_set = 1;
    return 0;
}

// ---- initializers --------------------------------------------------------------------------

static int init_get(void *ctx, const char *key, double *num, const char **str) {
    json_object *v = jget(ctx, key);
    if (!v) return 0;
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        *num = json_object_get_double(v);
        return 1;
    }
    if (json_object_is_type(v, json_type_string)) {
        *str = json_object_get_string(v);
        return 2;
    }
    return 3;
}

// "glorot_uniform", {"class_name": "GlorotUniform", "config": {...}} (Keras 2) or the same
// with "module" and "registered_name" (Keras 3).
static int get_init(kctx *k, json_object *cfg, const char *key, const char *def, init_desc *d) {
    json_object *v = jget(cfg, key), *icfg = NULL;
    const char *name = def;
    char why[300];
    if (v && json_object_is_type(v, json_type_string)) {
        name = json_object_get_string(v);
    } else if (v && json_object_is_type(v, json_type_object)) {
        json_object *cn = jget(v, "class_name"), *reg = jget(v, "registered_name");
        if (!cn || !json_object_is_type(cn, json_type_string))
            return kfail(k, "%s: expected a \"class_name\" string", key);
        name = json_object_get_string(cn);
        if (reg && (!json_object_is_type(reg, json_type_string) ||
                    strcmp(json_object_get_string(reg), name)))
            return kfail(k, "%s: a custom initializer (registered as %.40s) is not supported", key,
                         json_object_get_string(reg));
        icfg = jget(v, "config");
        if (icfg && !json_object_is_type(icfg, json_type_object))
            return kfail(k, "%s: config: expected an object, found %s", key, type_name(icfg));
        static const char *const axes[] = {"input_axes", "output_axes", NULL};
        for (int i = 0; axes[i]; i++)
            if (jget(icfg, axes[i]))
                return kfail(k, "%s: %s: not supported (hetrain takes Keras's fans of the "
                             "layer's kernel)", key, axes[i]);
    } else if (v) {
        return kfail(k, "%s: expected a name or an initializer object, found %s", key,
                     type_name(v));
    }
    if (model_init_keras_name(d, name, init_get, icfg, why, sizeof why))
        return kfail(k, "%s: %s", key, why);
    return 0;
}

// ---- layers ---------------------------------------------------------------------------------

// An activation by Keras's name: the layer kind that computes it (layer_desc.h), or -1 for
// linear (none).
static int get_activation(kctx *k, json_object *cfg, int required, int *act) {
    const char *a;
    json_object *v = jget(cfg, "activation");
    if (v && json_object_is_type(v, json_type_object))
        return kfail(k, "activation: a custom activation is not supported");
    if (get_str(k, cfg, "activation", required ? NULL : "linear", &a)) return -1;
    *act = layer_kind_by_activation(a);
    if (*act == -2)
        return kfail(k, "activation \"%.40s\": hetrain has linear, %s (softmax as the last step)",
                     a, layer_activation_list());
    return 0;
}

// A layer's name for hetrain: Keras's, when it is a name hetrain takes (1..31 of
// [A-Za-z0-9_-]) with the suffix; else NULL (hetrain numbers it).
static const char *layer_name(const char *kname, const char *suffix, char *buf, size_t cap) {
    if (!kname) return NULL;
    size_t n = strlen(kname), s = strlen(suffix);
    if (n == 0 || n + s > 31 || n + s >= cap) return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = kname[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return NULL;
    }
    memcpy(buf, kname, n);
    memcpy(buf + n, suffix, s + 1);
    return buf;
}

// model_add with the message under this layer's heading (model_add's own "layer N (kind): "
// names hetrain's index, which the user never wrote).
static int add(kctx *k, model *m, const layer_spec *s) {
    ht_error e;
    if (model_add(m, s, &e) == 0) return 0;
    const char *msg = e.msg, *cut = strstr(msg, "): ");
    if (!strncmp(msg, "layer ", 6) && cut) msg = cut + 3;
    return kfail(k, "%s", msg);
}

// Keras's output size along one axis.
static int keras_out(int in, int kk, int stride, int same) {
    return same ? (in + stride - 1) / stride : (in - kk) / stride + 1;
}

// Checks the layer model_add just made against what Keras computes for it.
static int check_layer(kctx *k, const model *m, int oc, int oh, int ow, size_t params) {
    const layer *L = &m->layers[m->n_layers - 1];
    if (L->oc != oc || L->oh != oh || L->ow != ow)
        return kfail(k, "hetrain computes an output of %dx%dx%d (CxHxW) where Keras has "
                     "%dx%dx%d", L->oc, L->oh, L->ow, oc, oh, ow);
    if (L->n_w + L->n_b != params)
        return kfail(k, "hetrain gives it %zu parameters where Keras has %zu", L->n_w + L->n_b,
                     params);
    return 0;
}

// The current output as Keras shapes it (without the batch axis), for build_config.
static int keras_shape(const kctx *k, const model *m, int64_t d[3]) {
    int c = m->in_c, h = m->in_h, w = m->in_w;
    if (m->n_layers) {
        const layer *L = &m->layers[m->n_layers - 1];
        c = L->oc, h = L->oh, w = L->ow;
    }
    if (k->rank == 1) {
        d[0] = (int64_t)c * h * w;
        return 1;
    }
    if (k->rank == 2) {
        d[0] = h, d[1] = w;
        return 2;
    }
    if (k->channels_first) d[0] = c, d[1] = h, d[2] = w;
    else d[0] = h, d[1] = w, d[2] = c;
    return 3;
}

// Keras 3 writes each built layer's input shape: it must be what the layers before gave.
static int check_build_config(kctx *k, const model *m, json_object *layer) {
    json_object *shape = jget(jget(layer, "build_config"), "input_shape");
    if (!shape || !json_object_is_type(shape, json_type_array)) return 0;
    int64_t d[3];
    int n = keras_shape(k, m, d);
    int ok = (int)json_object_array_length(shape) == n + 1;
    for (int i = 0; ok && i < n; i++) {
        json_object *e = json_object_array_get_idx(shape, (size_t)i + 1);
        ok = json_object_is_type(e, json_type_int) && json_object_get_int64(e) == d[i];
    }
    if (ok) return 0;
    char got[48];
    snprintf(got, sizeof got, n == 1 ? "[%lld]" : n == 2 ? "[%lld, %lld]" : "[%lld, %lld, %lld]",
             (long long)d[0], (long long)d[1], (long long)d[2]);
    return kfail(k, "build_config input_shape %.60s, but the layers before it give %s",
                 json_object_to_json_string_ext(shape, JSON_C_TO_STRING_PLAIN), got);
}

static int need_image(kctx *k) {
    if (k->rank != 3)
        return kfail(k, "expects an image (height, width, channels), but its input has %d "
                     "axis%s", k->rank, k->rank == 1 ? "" : "es");
    return 0;
}

// The running output size of the model (before the layer being read).
static void cur_shape(const model *m, int *c, int *h, int *w) {
    if (m->n_layers == 0) {
        *c = m->in_c, *h = m->in_h, *w = m->in_w;
        return;
    }
    const layer *L = &m->layers[m->n_layers - 1];
    *c = L->oc, *h = L->oh, *w = L->ow;
}

static int add_softmax(kctx *k, model *m, const char *name, int last) {
    int c, h, w;
    cur_shape(m, &c, &h, &w);
    if (!last)
        return kfail(k, "softmax before the last layer: hetrain reads softmax only as the "
                     "network's last step (its softmax cross-entropy)");
    if (!(k->rank == 1 || (k->rank == 3 && h == 1 && w == 1)))
        return kfail(k, "softmax over a %dx%dx%d (CxHxW) output: hetrain's is over one vector "
                     "of classes; put Flatten or GlobalAveragePooling2D before it", c, h, w);
    int64_t n = (int64_t)c * h * w;
    if (n < 2 || n > 256)
        return kfail(k, "softmax over %lld classes: hetrain takes 2..256", (long long)n);
    m->n_classes = (int)n;
    layer_spec s = {.kind = LAYER_SOFTMAX_XENT, .name = name};
    return add(k, m, &s);
}

// Keras's activation functions' parameters, where they differ from the layer classes':
// leaky_relu(negative_slope = 0.2) against LeakyReLU's 0.3; Keras 2's hard_sigmoid 0.2 x + 0.5
// against Keras 3's relu6(x + 3) / 6.
static void activation_defaults(const kctx *k, layer_spec *s) {
    if (s->kind == LAYER_LEAKY_RELU) s->alpha = 0.2f, s->alpha_set = 1;
    if (s->kind == LAYER_HARD_SIGMOID && k->keras2) s->alpha = 0.2f, s->alpha_set = 1;
}

// The activation (a layer kind, -1: none) that follows a Conv2D or Dense, named after it
// ("conv2d_relu").
static int add_activation(kctx *k, model *m, int act, const char *kname, int last) {
    char buf[32], suffix[24];
    if (act == LAYER_SOFTMAX_XENT) return add_softmax(k, m, NULL, last);
    if (act < 0) return 0;
    snprintf(suffix, sizeof suffix, "_%s", layer_desc_of((layer_kind)act)->name);
    layer_spec s = {.kind = (layer_kind)act, .name = layer_name(kname, suffix, buf, sizeof buf)};
    activation_defaults(k, &s);
    return add(k, m, &s);
}

static const char *const weight_extras[] = {"kernel_regularizer", "bias_regularizer",
                                            "activity_regularizer", "kernel_constraint",
                                            "bias_constraint", "lora_rank", NULL};

static int read_weights(kctx *k, json_object *cfg, layer_spec *s, int *act) {
    int use_bias = 1;
    init_desc wi = {0}, bi = {0};
    if (check_nulls(k, cfg, weight_extras, "hetrain adds no regularizers, constraints or "
                    "adapters") ||
        get_bool(k, cfg, "use_bias", 1, &use_bias) || get_activation(k, cfg, 0, act) ||
        get_init(k, cfg, "kernel_initializer", "glorot_uniform", &wi) ||
        get_init(k, cfg, "bias_initializer", "zeros", &bi))
        return -1;
    s->no_bias = !use_bias;
    s->w_init = wi.kind, s->w_arg = wi.arg, s->w_arg2 = wi.arg2, s->w_vs = wi.vs;
    s->b_init = bi.kind, s->b_arg = bi.arg, s->b_arg2 = bi.arg2, s->b_vs = bi.vs;
    return 0;
}

static int read_conv(kctx *k, model *m, json_object *cfg, const char *kname, int last) {
    int filters = 0, kk = 0, stride = 1, dil = 1, groups = 1, act = 0, c, h, w;
    const char *pad = "valid";
    layer_spec s = {.kind = LAYER_CONV2D};
    char buf[32];
    if (need_image(k) || check_format(k, cfg) ||
        get_int(k, cfg, "filters", NO_DEFAULT, 1, 65536, &filters) ||
        get_pair(k, cfg, "kernel_size", NO_DEFAULT, 1, 64, &kk) ||
        get_pair(k, cfg, "strides", 1, 1, 64, &stride) ||
        get_pair(k, cfg, "dilation_rate", 1, 1, 64, &dil) ||
        get_int(k, cfg, "groups", 1, 1, 65536, &groups) ||
        get_str(k, cfg, "padding", "valid", &pad) || read_weights(k, cfg, &s, &act))
        return -1;
    if (dil != 1) return kfail(k, "dilation_rate %d: hetrain's convolutions are dense (1)", dil);
    if (groups != 1) return kfail(k, "groups %d: hetrain's convolutions have one group", groups);
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    cur_shape(m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "kernel %d does not fit its %dx%d input", kk, h, w);
    s.name = layer_name(kname, "", buf, sizeof buf);
    s.filters = filters, s.k = kk, s.stride = stride, s.pad = same ? -1 : 0;
    size_t params = (size_t)kk * kk * c * filters + (s.no_bias ? 0 : (size_t)filters);
    if (add(k, m, &s) ||
        check_layer(k, m, filters, keras_out(h, kk, stride, same), keras_out(w, kk, stride, same),
                    params))
        return -1;
    return add_activation(k, m, act, s.name, last);
}

static int read_pool(kctx *k, model *m, json_object *cfg, const char *kname, layer_kind kind) {
    int kk = 0, stride = 1, c, h, w;
    const char *pad = "valid";
    char buf[32];
    if (need_image(k) || check_format(k, cfg) ||
        get_pair(k, cfg, "pool_size", 2, 1, 64, &kk) ||
        get_str(k, cfg, "padding", "valid", &pad))
        return -1;
    if (get_pair(k, cfg, "strides", kk, 1, 64, &stride)) return -1;
    int same = !strcmp(pad, "same");
    if (!same && strcmp(pad, "valid"))
        return kfail(k, "padding \"%.40s\": expected valid or same", pad);
    cur_shape(m, &c, &h, &w);
    if (!same && (h < kk || w < kk))
        return kfail(k, "pool_size %d does not fit its %dx%d input", kk, h, w);
    layer_spec s = {.kind = kind, .name = layer_name(kname, "", buf, sizeof buf), .k = kk,
                    .stride = stride, .pad = same ? -1 : 0};
    if (add(k, m, &s)) return -1;
    return check_layer(k, m, c, keras_out(h, kk, stride, same), keras_out(w, kk, stride, same), 0);
}

static int read_gap(kctx *k, model *m, json_object *cfg, const char *kname) {
    int keepdims = 0, c, h, w;
    char buf[32];
    if (need_image(k) || check_format(k, cfg) || get_bool(k, cfg, "keepdims", 0, &keepdims))
        return -1;
    cur_shape(m, &c, &h, &w);
    layer_spec s = {.kind = LAYER_GLOBAL_AVGPOOL, .name = layer_name(kname, "", buf, sizeof buf)};
    if (add(k, m, &s) || check_layer(k, m, c, 1, 1, 0)) return -1;
    if (!keepdims) k->rank = 1;
    return 0;
}

static int read_dense(kctx *k, model *m, json_object *cfg, const char *kname, int last) {
    int units = 0, act = 0, c, h, w;
    char buf[32];
    layer_spec s = {.kind = LAYER_DENSE};
    cur_shape(m, &c, &h, &w);
    if (!(k->rank == 1 || (k->rank == 3 && h == 1 && w == 1)))
        return kfail(k, "input of %d axes: Keras applies Dense to the last axis alone, hetrain "
                     "to the whole input; put Flatten or GlobalAveragePooling2D before it",
                     k->rank);
    if (get_int(k, cfg, "units", NO_DEFAULT, 1, 65536, &units) || read_weights(k, cfg, &s, &act))
        return -1;
    s.name = layer_name(kname, "", buf, sizeof buf);
    s.units = units;
    size_t params = (size_t)c * h * w * units + (s.no_bias ? 0 : (size_t)units);
    if (add(k, m, &s) || check_layer(k, m, units, 1, 1, params)) return -1;
    return add_activation(k, m, act, s.name, last);
}

// Keras's BatchNormalization over the channels of an image or the features of a vector, as
// hetrain's batchnorm. Keras counts the moving mean and variance as (non-trainable) parameters;
// hetrain keeps them, with its count of updates, as the model's state after every parameter.
static int read_bn(kctx *k, model *m, json_object *cfg, const char *kname) {
    static const char *const extras[] = {"beta_regularizer", "gamma_regularizer",
                                         "beta_constraint", "gamma_constraint",
                                         "activity_regularizer", NULL};
    int center = 1, scale = 1, renorm = 0, c, h, w;
    double mom = 0.99, eps = 1e-3; // Keras's defaults (batchnorm.h)
    init_desc gi = {0}, bi = {0}, mi = {0}, vi = {0};
    char buf[32];
    if (check_nulls(k, cfg, extras, "hetrain adds no regularizers or constraints") ||
        (jget(cfg, "momentum") && get_num(k, cfg, "momentum", &mom)) ||
        (jget(cfg, "epsilon") && get_num(k, cfg, "epsilon", &eps)) ||
        get_bool(k, cfg, "center", 1, &center) || get_bool(k, cfg, "scale", 1, &scale) ||
        get_bool(k, cfg, "renorm", 0, &renorm) ||
        get_init(k, cfg, "gamma_initializer", "ones", &gi) ||
        get_init(k, cfg, "beta_initializer", "zeros", &bi) ||
        get_init(k, cfg, "moving_mean_initializer", "zeros", &mi) ||
        get_init(k, cfg, "moving_variance_initializer", "ones", &vi))
        return -1;
    // Keras 3's synchronized (statistics across replicas) needs nothing: hetrain's statistics
    // are per group of bn_group samples, the same whichever devices compute them.
    if (renorm) return kfail(k, "renorm true: hetrain's batchnorm is Keras's plain one");
    static const char *const ghost[] = {"virtual_batch_size", NULL};
    if (check_nulls(k, cfg, ghost, "hetrain's statistics are over groups of --bn-group or [net] "
                    "bn_group samples"))
        return -1;
    if (!(mi.kind == INIT_ZEROS || (mi.kind == INIT_CONSTANT && mi.arg == 0)))
        return kfail(k, "moving_mean_initializer %s: hetrain starts the moving mean at zeros "
                     "(Keras's default)", init_kind_names[mi.kind]);
    if (!(vi.kind == INIT_ONES || (vi.kind == INIT_CONSTANT && vi.arg == 1)))
        return kfail(k, "moving_variance_initializer %s: hetrain starts the moving variance at "
                     "ones (Keras's default)", init_kind_names[vi.kind]);

    // The axis normalised over: the channels of an image, the features of a vector. Keras 2
    // writes the built layer's axis as a list of one.
    json_object *ax = jget(cfg, "axis");
    if (ax && json_object_is_type(ax, json_type_array) && json_object_array_length(ax) == 1)
        ax = json_object_array_get_idx(ax, 0);
    if (ax && !json_object_is_type(ax, json_type_int))
        return kfail(k, "axis: expected an integer or a list of one, found %s", type_name(ax));
    int64_t axis = ax ? json_object_get_int64(ax) : -1;
    if (k->rank == 2)
        return kfail(k, "an input of 2 axes (height, width): hetrain normalises the channels of "
                     "an image or the features of a vector");
    int ok = k->rank == 1 ? axis == -1 || axis == 1
             : k->channels_first ? axis == 1 || axis == -3 : axis == -1 || axis == 3;
    if (!ok)
        return kfail(k, "axis %lld: hetrain normalises over the %s (axis %s)", (long long)axis,
                     k->rank == 1 ? "features" : "channels",
                     k->rank == 1 ? "-1 or 1" : k->channels_first ? "1" : "-1 or 3");
    cur_shape(m, &c, &h, &w);
    if (k->rank == 1 && (h > 1 || w > 1))
        return kfail(k, "after Flatten of a %dx%dx%d (CxHxW) output: Keras normalises each of "
                     "its %lld features, hetrain each channel; put BatchNormalization before "
                     "Flatten", c, h, w, (long long)c * h * w);

    layer_spec s = {.kind = LAYER_BATCHNORM, .name = layer_name(kname, "", buf, sizeof buf),
                    .momentum = (float)mom, .momentum_set = 1, .eps = (float)eps,
                    .eps_set = 1, .no_center = !center, .no_scale = !scale};
    s.w_init = gi.kind, s.w_arg = gi.arg, s.w_arg2 = gi.arg2, s.w_vs = gi.vs;
    s.b_init = bi.kind, s.b_arg = bi.arg, s.b_arg2 = bi.arg2, s.b_vs = bi.vs;
    // Keras's trainable count: gamma and beta; the moving statistics are the state.
    if (add(k, m, &s) || check_layer(k, m, c, h, w, (size_t)(center + scale) * c)) return -1;
    return 0;
}

// One entry of the JSON's list of layers.
static int read_layer(kctx *k, model *m, json_object *layer, int last) {
    json_object *cfg = jget(layer, "config");
    const char *cls = k->lclass;
    char buf[32];
    const char *kname = k->lname[0] ? k->lname : NULL;
    if (!cfg || !json_object_is_type(cfg, json_type_object))
        return kfail(k, "config: expected an object");
    json_object *reg = jget(layer, "registered_name");
    if (reg && (!json_object_is_type(reg, json_type_string) ||
                strcmp(json_object_get_string(reg), cls)))
        return kfail(k, "a custom layer (registered as %.40s) is not supported",
                     json_object_get_string(reg));
    int trainable;
    if (get_bool(k, cfg, "trainable", 1, &trainable) || check_dtype(k, cfg)) return -1;
    if (!trainable) return kfail(k, "trainable false: hetrain trains every layer");
    if (strcmp(cls, "InputLayer") && check_build_config(k, m, layer)) return -1;

    if (!strcmp(cls, "InputLayer")) {
        int flag;
        if (k->idx != 0) return kfail(k, "an InputLayer is read only as the first layer");
        if (get_bool(k, cfg, "sparse", 0, &flag)) return -1;
        if (flag) return kfail(k, "sparse inputs are not supported");
        if (get_bool(k, cfg, "ragged", 0, &flag)) return -1;
        if (flag) return kfail(k, "ragged inputs are not supported");
        return 0;
    }
    if (!strcmp(cls, "Conv2D")) return read_conv(k, m, cfg, kname, last);
    if (!strcmp(cls, "MaxPooling2D")) return read_pool(k, m, cfg, kname, LAYER_MAXPOOL);
    if (!strcmp(cls, "AveragePooling2D")) return read_pool(k, m, cfg, kname, LAYER_AVGPOOL);
    if (!strcmp(cls, "GlobalAveragePooling2D")) return read_gap(k, m, cfg, kname);
    if (!strcmp(cls, "Dense")) return read_dense(k, m, cfg, kname, last);
    if (!strcmp(cls, "BatchNormalization")) return read_bn(k, m, cfg, kname);
    if (!strcmp(cls, "Flatten")) { // hetrain's dense layers flatten their input themselves
        k->rank = 1;
        return 0;
    }
    if (!strcmp(cls, "Dropout")) {
        double rate = 0;
        static const char *const extras[] = {"noise_shape", NULL};
        if (check_nulls(k, cfg, extras, "hetrain drops each element on its own") ||
            get_num(k, cfg, "rate", &rate))
            return -1;
        if (!(rate >= 0 && rate < 1)) return kfail(k, "rate %g: expected 0 <= rate < 1", rate);
        layer_spec s = {.kind = LAYER_DROPOUT, .name = layer_name(kname, "", buf, sizeof buf),
                        .rate = (float)rate};
        return add(k, m, &s);
    }
    if (!strcmp(cls, "LeakyReLU") || !strcmp(cls, "ELU")) {
        // Keras 3's LeakyReLU names its slope negative_slope, Keras 2's alpha; both 0.3.
        int leaky = cls[0] == 'L';
        const char *key = leaky && jget(cfg, "negative_slope") ? "negative_slope" : "alpha";
        json_object *v = jget(cfg, key);
        double a = leaky ? 0.3 : 1.0;
        if (v && json_object_get_type(v) != json_type_null && get_num(k, cfg, key, &a)) return -1;
        if (!isfinite(a)) return kfail(k, "%s: expected a number", key);
        layer_spec s = {.kind = leaky ? LAYER_LEAKY_RELU : LAYER_ELU,
                        .name = layer_name(kname, "", buf, sizeof buf), .alpha = (float)a,
                        .alpha_set = 1};
        return add(k, m, &s);
    }
    if (!strcmp(cls, "Activation") || !strcmp(cls, "ReLU") || !strcmp(cls, "Softmax")) {
        int act = LAYER_RELU;
        if (!strcmp(cls, "Activation") && get_activation(k, cfg, 1, &act)) return -1;
        if (!strcmp(cls, "Softmax")) {
            act = LAYER_SOFTMAX_XENT;
            json_object *axis = jget(cfg, "axis");
            if (axis && json_object_is_type(axis, json_type_array) &&
                json_object_array_length(axis) == 1)
                axis = json_object_array_get_idx(axis, 0);
            if (axis && !(json_object_is_type(axis, json_type_int) &&
                          json_object_get_int64(axis) == -1))
                return kfail(k, "axis: hetrain's softmax is over the last axis (-1)");
        }
        if (!strcmp(cls, "ReLU")) {
            static const char *const keys[] = {"negative_slope", "threshold"};
            if (jget(cfg, "max_value"))
                return kfail(k, "max_value: hetrain's ReLU has no upper bound");
            for (int i = 0; i < 2; i++) {
                json_object *v = jget(cfg, keys[i]);
                if (v && (!(json_object_is_type(v, json_type_int) ||
                            json_object_is_type(v, json_type_double)) ||
                          json_object_get_double(v) != 0))
                    return kfail(k, "%s: hetrain's ReLU has 0", keys[i]);
            }
        }
        if (act == LAYER_SOFTMAX_XENT)
            return add_softmax(k, m, layer_name(kname, "", buf, sizeof buf), last);
        if (act < 0) return 0;
        layer_spec s = {.kind = (layer_kind)act, .name = layer_name(kname, "", buf, sizeof buf)};
        activation_defaults(k, &s);
        return add(k, m, &s);
    }
    return kfail(k, "not supported; hetrain reads " KERAS_CLASSES);
}

// ---- the model ------------------------------------------------------------------------------

// [batch, d1, ...] into hetrain's (C,H,W) and the running rank.
static int read_input_shape(kctx *k, json_object *shape, const char *key, int *c, int *h, int *w) {
    if (!json_object_is_type(shape, json_type_array))
        return kfail(k, "%s: expected a list, found %s", key, type_name(shape));
    size_t n = json_object_array_length(shape);
    if (n < 2 || n > 4)
        return kfail(k, "%s: expected [batch, features], [batch, height, width] or [batch, "
                     "height, width, channels], found %zu entries", key, n);
    int64_t d[3];
    for (size_t i = 1; i < n; i++) {
        json_object *e = json_object_array_get_idx(shape, i);
        if (!e) return kfail(k, "%s: axis %zu has no size (null): hetrain needs every size", key,
                             i);
        if (!json_object_is_type(e, json_type_int))
            return kfail(k, "%s: expected integers, found %s", key, type_name(e));
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

// The class and name of layer i, for messages; -1 when it is not a layer object at all.
static int layer_heading(kctx *k, json_object *layers, int i, json_object **out) {
    json_object *L = json_object_array_get_idx(layers, (size_t)i);
    k->idx = i, k->lname = "", k->lclass = "?";
    *out = L;
    if (!L || !json_object_is_type(L, json_type_object))
        return kfail(k, "expected a layer object, found %s", type_name(L));
    json_object *cn = jget(L, "class_name"), *name = jget(jget(L, "config"), "name");
    if (!cn || !json_object_is_type(cn, json_type_string))
        return kfail(k, "class_name: expected a string");
    k->lclass = json_object_get_string(cn);
    if (name && json_object_is_type(name, json_type_string))
        k->lname = json_object_get_string(name);
    return 0;
}

// The model's name: Keras's, unless it is Keras's default ("sequential", "sequential_3"), which
// says less than the file's base name.
static void model_name(json_object *cfg, const char *path, char *out, size_t cap) {
    json_object *n = jget(cfg, "name");
    const char *s = n && json_object_is_type(n, json_type_string) ? json_object_get_string(n) : "";
    size_t len = strlen(s);
    int is_default = !strncmp(s, "sequential", 10) &&
                     (s[10] == 0 || (s[10] == '_' && s[11] && strspn(s + 11, "0123456789") ==
                                                                 strlen(s + 11)));
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

static int build(kctx *k, model *m, json_object *root) {
    if (!json_object_is_type(root, json_type_object))
        return kfail(k, "expected a JSON object (Keras's model.to_json()), found %s",
                     type_name(root));
    json_object *cn = jget(root, "class_name");
    if (!cn || !json_object_is_type(cn, json_type_string))
        return kfail(k, "class_name: expected \"Sequential\"");
    if (strcmp(json_object_get_string(cn), "Sequential"))
        return kfail(k, "class_name \"%.40s\": hetrain reads Sequential models only",
                     json_object_get_string(cn));
    json_object *cfg = jget(root, "config"), *layers = cfg;
    if (cfg && json_object_is_type(cfg, json_type_object)) layers = jget(cfg, "layers");
    else cfg = NULL; // Keras 2.0-2.2: "config" is the list of layers itself
    if (!layers || !json_object_is_type(layers, json_type_array))
        return kfail(k, "config: expected an object with a list of \"layers\", or that list");
    int n = (int)json_object_array_length(layers);
    if (n < 1) return kfail(k, "the model has no layers");
    json_object *ver = jget(root, "keras_version"); // Keras 3 writes none
    k->keras2 = ver && json_object_is_type(ver, json_type_string) &&
                (json_object_get_string(ver)[0] == '1' || json_object_get_string(ver)[0] == '2');
    if (cfg && check_dtype(k, cfg)) return -1;

    // The layout is the first image layer's data_format; the input shape reads in it.
    for (int i = 0; i < n; i++) {
        json_object *L;
        if (layer_heading(k, layers, i, &L)) return -1;
        const char *c = k->lclass;
        if (!strcmp(c, "Conv2D") || !strcmp(c, "MaxPooling2D") || !strcmp(c, "AveragePooling2D") ||
            !strcmp(c, "GlobalAveragePooling2D")) {
            if (check_format(k, jget(L, "config"))) return -1;
            break;
        }
    }
    k->format_set = 0; // each layer is checked again in the main pass

    // The input shape: the InputLayer's (Keras 3 batch_shape, Keras 2 batch_input_shape), the
    // first layer's batch_input_shape (Keras 2 without an InputLayer), Keras 3's build_config.
    json_object *L0, *shape = NULL;
    const char *key = NULL;
    if (layer_heading(k, layers, 0, &L0)) return -1;
    json_object *c0 = jget(L0, "config");
    static const char *const keys[] = {"batch_shape", "batch_input_shape"};
    for (int i = 0; i < 2 && !shape; i++)
        if ((shape = jget(c0, keys[i]))) key = keys[i];
    k->idx = -1;
    if (!shape && (shape = jget(jget(root, "build_config"), "input_shape")))
        key = "build_config input_shape";
    if (!shape)
        return kfail(k, "no input shape: expected an InputLayer with batch_shape (Keras 3) or "
                     "batch_input_shape (Keras 2), or batch_input_shape on the first layer");
    int c = 0, h = 0, w = 0;
    if (read_input_shape(k, shape, key, &c, &h, &w)) return -1;
    char name[64];
    model_name(cfg, k->path, name, sizeof name);
    // Begin with the most classes; the final softmax sets the real count.
    if (model_begin(m, name, c, h, w, 256, k->err)) return ht_wrap(k->err, "%s", k->path);

    for (int i = 0; i < n; i++) {
        json_object *L;
        if (layer_heading(k, layers, i, &L) || read_layer(k, m, L, i == n - 1)) return -1;
    }
    const layer *last = m->n_layers ? &m->layers[m->n_layers - 1] : NULL;
    if (!last || last->kind != LAYER_SOFTMAX_XENT)
        return kfail(k, "the network must end in a softmax over the classes (Dense(..., "
                     "activation=\"softmax\"), Activation(\"softmax\") or Softmax), which "
                     "hetrain trains as its softmax cross-entropy");
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
