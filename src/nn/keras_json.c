// The Keras model JSON reader's plumbing (keras_int.h): one-line errors under the heading of the
// layer being read, and typed getters for the values of a layer's config, its initializers and
// its regularizers.
#include "nn/keras_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kfail(kctx *k, const char *fmt, ...) {
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

const char *ktype_name(json_object *v) {
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
json_object *kget(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object)) return NULL;
    if (!json_object_object_get_ex(o, key, &v)) return NULL;
    return v;
}

int kget_int(kctx *k, json_object *cfg, const char *key, int def, int lo, int hi,
                   int *out) {
    json_object *v = kget(cfg, key);
    if (!v) {
        if (def == NO_DEFAULT) return kfail(k, "%s missing", key);
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return kfail(k, "%s: expected an integer, found %s", key, ktype_name(v));
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return kfail(k, "%s %lld: expected %d..%d", key, (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

// An int or a list of equal ints (one per spatial axis): hetrain's windows are square.
int kget_pair(kctx *k, json_object *cfg, const char *key, int def, int lo, int hi,
                    int *out) {
    json_object *v = kget(cfg, key);
    if (!v || json_object_is_type(v, json_type_int)) return kget_int(k, cfg, key, def, lo, hi, out);
    if (!json_object_is_type(v, json_type_array))
        return kfail(k, "%s: expected an integer or a list of two, found %s", key, ktype_name(v));
    size_t n = json_object_array_length(v);
    if (n < 1 || n > 2) return kfail(k, "%s: expected a list of two integers", key);
    int64_t x[2];
    for (size_t i = 0; i < n; i++) {
        json_object *e = kidx(v, i);
        if (!json_object_is_type(e, json_type_int))
            return kfail(k, "%s: expected a list of integers, found %s in it", key, ktype_name(e));
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

int kget_bool(kctx *k, json_object *cfg, const char *key, int def, int *out) {
    json_object *v = kget(cfg, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_boolean))
        return kfail(k, "%s: expected true or false, found %s", key, ktype_name(v));
    *out = json_object_get_boolean(v);
    return 0;
}

int kget_num(kctx *k, json_object *cfg, const char *key, double *out) {
    json_object *v = kget(cfg, key);
    if (!v) return kfail(k, "%s missing", key);
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return kfail(k, "%s: expected a number, found %s", key, ktype_name(v));
    *out = json_object_get_double(v);
    if (!isfinite(*out)) return kfail(k, "%s: expected a finite number", key);
    return 0;
}

// A string under key (def when absent or null); NULL default: required.
int kget_str(kctx *k, json_object *cfg, const char *key, const char *def,
                   const char **out) {
    json_object *v = kget(cfg, key);
    if (!v) {
        if (!def) return kfail(k, "%s missing", key);
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return kfail(k, "%s: expected a string, found %s", key, ktype_name(v));
    *out = json_object_get_string(v);
    return 0;
}

// Keys that must be absent or null: what hetrain has no counterpart for.
int kcheck_nulls(kctx *k, json_object *cfg, const char *const *keys, const char *why) {
    for (int i = 0; keys[i]; i++)
        if (kget(cfg, keys[i])) return kfail(k, "%s: not supported (%s)", keys[i], why);
    return 0;
}

int kcheck_dtype(kctx *k, json_object *cfg) {
    json_object *v = kget(cfg, "dtype");
    if (!v) return 0;
    const char *name = NULL;
    if (json_object_is_type(v, json_type_string)) name = json_object_get_string(v);
    else if (json_object_is_type(v, json_type_object)) { // Keras 3's DTypePolicy
        json_object *n = kget(kget(v, "config"), "name");
        if (n && json_object_is_type(n, json_type_string)) name = json_object_get_string(n);
    }
    if (!name) return kfail(k, "dtype: expected a string or a dtype policy, found %s",
                            ktype_name(v));
    if (strcmp(name, "float32"))
        return kfail(k, "dtype \"%.40s\": hetrain computes in float32", name);
    return 0;
}


int kget_format(kctx *k, json_object *cfg, int *first) {
    const char *f;
    if (kget_str(k, cfg, "data_format", "channels_last", &f)) return -1;
    *first = !strcmp(f, "channels_first");
    if (!*first && strcmp(f, "channels_last"))
        return kfail(k, "data_format \"%.40s\": expected channels_last or channels_first", f);
    return 0;
}

// ---- initializers --------------------------------------------------------------------------

static int init_get(void *ctx, const char *key, double *num, const char **str) {
    json_object *v = kget(ctx, key);
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
int kget_init(kctx *k, json_object *cfg, const char *key, const char *def, init_desc *d) {
    json_object *v = kget(cfg, key), *icfg = NULL;
    const char *name = def;
    char why[300];
    if (v && json_object_is_type(v, json_type_string)) {
        name = json_object_get_string(v);
    } else if (v && json_object_is_type(v, json_type_object)) {
        json_object *cn = kget(v, "class_name"), *reg = kget(v, "registered_name");
        if (!cn || !json_object_is_type(cn, json_type_string))
            return kfail(k, "%s: expected a \"class_name\" string", key);
        name = json_object_get_string(cn);
        if (reg && (!json_object_is_type(reg, json_type_string) ||
                    strcmp(json_object_get_string(reg), name)))
            return kfail(k, "%s: a custom initializer (registered as %.40s) is not supported", key,
                         json_object_get_string(reg));
        icfg = kget(v, "config");
        if (icfg && !json_object_is_type(icfg, json_type_object))
            return kfail(k, "%s: config: expected an object, found %s", key, ktype_name(icfg));
        static const char *const axes[] = {"input_axes", "output_axes", NULL};
        for (int i = 0; axes[i]; i++)
            if (kget(icfg, axes[i]))
                return kfail(k, "%s: %s: not supported (hetrain takes Keras's fans of the "
                             "layer's kernel)", key, axes[i]);
    } else if (v) {
        return kfail(k, "%s: expected a name or an initializer object, found %s", key,
                     ktype_name(v));
    }
    if (model_init_keras_name(d, name, init_get, icfg, why, sizeof why))
        return kfail(k, "%s: %s", key, why);
    return 0;
}

// ---- regularizers ---------------------------------------------------------------------------

// Keras's weight regularizers by every name its get() takes, with the defaults of that name:
// the classes' (L1(l1=0.01), L2(l2=0.01), L1L2(l1=0, l2=0)) and the functions' (Keras 2's
// l1_l2(l1=0.01, l2=0.01); Keras 3's "l1l2" is the class).
static const struct {
    const char *name;
    float l1, l2;
    int has_l1, has_l2;
} keras_regs[] = {
    {"L1", 0.01f, 0, 1, 0},    {"l1", 0.01f, 0, 1, 0},   {"L2", 0, 0.01f, 0, 1},
    {"l2", 0, 0.01f, 0, 1},    {"L1L2", 0, 0, 1, 1},     {"l1l2", 0, 0, 1, 1},
    {"l1_l2", 0.01f, 0.01f, 1, 1},
};

int kget_reg(kctx *k, json_object *cfg, const char *key, float *l1, float *l2) {
    json_object *v = kget(cfg, key), *rcfg = NULL;
    const char *name = NULL;
    *l1 = *l2 = 0;
    if (!v) return 0;
    if (json_object_is_type(v, json_type_string)) {
        name = json_object_get_string(v);
    } else if (json_object_is_type(v, json_type_object)) {
        json_object *cn = kget(v, "class_name"), *regn = kget(v, "registered_name");
        if (!cn || !json_object_is_type(cn, json_type_string))
            return kfail(k, "%s: expected a \"class_name\" string", key);
        name = json_object_get_string(cn);
        if (regn && (!json_object_is_type(regn, json_type_string) ||
                     strcmp(json_object_get_string(regn), name)))
            return kfail(k, "%s: a custom regularizer (registered as %.40s) is not supported",
                         key, json_object_get_string(regn));
        rcfg = kget(v, "config");
        if (rcfg && !json_object_is_type(rcfg, json_type_object))
            return kfail(k, "%s: config: expected an object, found %s", key, ktype_name(rcfg));
    } else {
        return kfail(k, "%s: expected a name or a regularizer object, found %s", key,
                     ktype_name(v));
    }
    size_t r = 0, n = sizeof keras_regs / sizeof keras_regs[0];
    while (r < n && strcmp(keras_regs[r].name, name)) r++;
    if (r == n)
        return kfail(k, "%s: regularizer \"%.40s\" is not supported; hetrain has L1, L2 and "
                     "L1L2 (l1, l2, l1_l2)", key, name);
    float f[2] = {keras_regs[r].l1, keras_regs[r].l2};
    int has[2] = {keras_regs[r].has_l1, keras_regs[r].has_l2};
    if (rcfg) {
        json_object_object_foreach(rcfg, ck, cv) {
            int which = !strcmp(ck, "l1") ? 0 : !strcmp(ck, "l2") ? 1 : -1;
            if (which < 0 || !has[which])
                return kfail(k, "%s: %s: unknown key \"%.40s\" (%s)", key, name, ck,
                             has[0] && has[1] ? "l1, l2" : has[0] ? "l1" : "l2");
            if (!cv) continue; // null: the default, as Keras takes None
            if (!json_object_is_type(cv, json_type_double) &&
                !json_object_is_type(cv, json_type_int))
                return kfail(k, "%s: %s: expected a number, found %s", key, ck, ktype_name(cv));
            double x = json_object_get_double(cv);
            if (!(x >= 0 && x <= 1e30))
                return kfail(k, "%s: %s %g: expected a finite number >= 0", key, ck, x);
            f[which] = (float)x;
        }
    }
    *l1 = f[0], *l2 = f[1];
    return 0;
}

// ---- layers ---------------------------------------------------------------------------------

// A layer's name for hetrain: Keras's, when it is a name hetrain takes (1..31 of
// [A-Za-z0-9_-]) with the suffix; else NULL (hetrain numbers it).
const char *klayer_name(const char *kname, const char *suffix, char *buf, size_t cap) {
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

// The class and name of layer i, for messages; -1 when it is not a layer object at all.
int klayer_heading(kctx *k, json_object *layers, int i, json_object **out) {
    json_object *L = kidx(layers, (size_t)i);
    k->idx = i, k->lname = "", k->lclass = "?";
    *out = L;
    if (!L || !json_object_is_type(L, json_type_object))
        return kfail(k, "expected a layer object, found %s", ktype_name(L));
    json_object *cn = kget(L, "class_name"), *name = kget(kget(L, "config"), "name");
    if (!cn || !json_object_is_type(cn, json_type_string))
        return kfail(k, "class_name: expected a string");
    k->lclass = json_object_get_string(cn);
    if (name && json_object_is_type(name, json_type_string))
        k->lname = json_object_get_string(name);
    return 0;
}

const char *klayer_graph_name(json_object *layer) {
    json_object *n = kget(layer, "name");
    if (!n || !json_object_is_type(n, json_type_string)) n = kget(kget(layer, "config"), "name");
    return n && json_object_is_type(n, json_type_string) ? json_object_get_string(n) : NULL;
}
