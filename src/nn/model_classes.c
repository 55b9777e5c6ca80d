// A model's class names: set from an image folder, written into weight files and checkpoints as
// a JSON array of strings, read back from them.
#include "nn/model.h"

#include <json.h>
#include <stdlib.h>
#include <string.h>

int model_set_classes(model *m, int n, char *const *names, ht_error *e) {
    free(m->class_names);
    m->class_names = NULL;
    m->n_class_names = 0;
    if (n <= 0) return 0;
    size_t bytes = (size_t)n * sizeof(char *);
    for (int i = 0; i < n; i++) bytes += strlen(names[i]) + 1;
    char **p = ht_malloc(bytes, 1, e);
    if (!p) return -1;
    char *at = (char *)(p + n);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]) + 1;
        p[i] = memcpy(at, names[i], len);
        at += len;
    }
    m->class_names = p;
    m->n_class_names = n;
    return 0;
}

int model_classes_differ(const model *m, int n, char *const *names) {
    int common = n < m->n_class_names ? n : m->n_class_names;
    for (int i = 0; i < common; i++)
        if (strcmp(m->class_names[i], names[i])) return i;
    return n == m->n_class_names ? -1 : common;
}

char *model_classes_json(const model *m, ht_error *e) {
    if (!m->n_class_names) return NULL;
    json_object *a = json_object_new_array_ext(m->n_class_names);
    for (int i = 0; a && i < m->n_class_names; i++)
        json_object_array_add(a, json_object_new_string(m->class_names[i]));
    const char *text = a ? json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN |
                                                                 JSON_C_TO_STRING_NOSLASHESCAPE)
                         : NULL;
    char *out = text ? strdup(text) : NULL;
    json_object_put(a);
    if (!out) ht_fail(e, "out of memory writing the class names");
    return out;
}

int model_classes_from_json(model *m, const char *json, const char *what, ht_error *e) {
    json_object *a = json_tokener_parse(json);
    int rc = -1;
    size_t n = a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
    if (!n || n > MODEL_MAX_CLASSES) {
        ht_fail(e, "%s: class_names is not a JSON array of 1..%d strings", what,
                MODEL_MAX_CLASSES);
        goto out;
    }
    char *names[MODEL_MAX_CLASSES];
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(a, i);
        if (!json_object_is_type(s, json_type_string) || !json_object_get_string_len(s) ||
            memchr(json_object_get_string(s), 0, (size_t)json_object_get_string_len(s))) {
            ht_fail(e, "%s: class_names[%zu] is not a non-empty string", what, i);
            goto out;
        }
        names[i] = (char *)json_object_get_string(s);
    }
    rc = model_set_classes(m, (int)n, names, e);
out:
    json_object_put(a);
    return rc;
}
