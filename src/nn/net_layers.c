// The CPU path's op table (net_layers.h): a row per kind, its family's ops.
#include "nn/net_layers.h"

const net_layer_ops *const net_layer_ops_of[LAYER_KIND_COUNT] = {
#define CPU_OPS_ROW(id, fam, name, prefix, keras, key, dflt) [LAYER_##id] = &cpu_##fam,
    LAYER_KINDS(CPU_OPS_ROW)
#undef CPU_OPS_ROW
};
