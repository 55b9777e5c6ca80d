// The layer kinds' descriptions (layer_desc.h): the table of every kind, its family's
// description (from the family's own file), and lookups by name.
#include "nn/layer_desc.h"

#include <stdio.h>
#include <string.h>


const layer_desc layer_descs[LAYER_KIND_COUNT] = {
#define LAYER_DESC_ROW(id, fam, name, prefix, keras, key, dflt)                                  \
    [LAYER_##id] = {name, prefix, keras, key, dflt, &family_##fam},
    LAYER_KINDS(LAYER_DESC_ROW)
#undef LAYER_DESC_ROW
};

// act_fn and merge_op list their family's kinds in layer_kinds.h's order: k's is the count of
// its family's kinds before it.
static int family_index(layer_kind k, const layer_family *f) {
    if (layer_descs[k].family != f) return -1;
    int n = 0;
    for (int i = 0; i < (int)k; i++) n += layer_descs[i].family == f;
    return n;
}

int layer_act_fn(layer_kind k) { return family_index(k, &family_act); }
int layer_merge_op(layer_kind k) { return family_index(k, &family_merge); }

int layer_kind_by_name(const char *name, int keras) {
    for (int k = 0; name && k < LAYER_KIND_COUNT; k++)
        if (!strcmp(name, layer_descs[k].name) ||
            (keras && layer_descs[k].keras_class && !strcmp(name, layer_descs[k].keras_class)))
            return k;
    return -1;
}

int layer_kind_by_activation(const char *name) {
    if (!strcmp(name, "linear")) return -1;
    if (!strcmp(name, "silu")) return LAYER_SWISH; // Keras 3's name, swish its alias
    if (!strcmp(name, "hard_silu")) return LAYER_HARD_SWISH; // Keras 3's name for hard_swish
    int k = layer_kind_by_name(name, 0);
    return k >= 0 && (layer_flags((layer_kind)k) & LF_ACTIVATION) ? k : -2;
}

const char *layer_activation_list(void) {
    static char list[256];
    if (list[0]) return list;
    size_t n = 0;
    for (int k = 0; k < LAYER_KIND_COUNT && n < sizeof list; k++)
        if ((layer_flags((layer_kind)k) & LF_ACTIVATION) && k != LAYER_SOFTMAX_XENT)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s, ", layer_descs[k].name);
    if (n < sizeof list) snprintf(list + n, sizeof list - n, "softmax");
    return list;
}
