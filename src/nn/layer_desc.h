// One description per layer kind (layer_kinds.h's list): its names, its config keys, how it
// shapes its output and parameters, how its weight tensor is shaped in safetensors, what it
// costs, and the flags the backends plan by. Kinds of one family share its description.
#ifndef HETRAIN_LAYER_DESC_H
#define HETRAIN_LAYER_DESC_H

#include <stdint.h>

#include "model.h"

enum {
    LF_PARAMS = 1 << 0,     // a weight tensor and (unless no_bias) a bias
    LF_IN_PLACE = 1 << 1,   // its output may overwrite its input's buffer (relu, dropout)
    LF_SPATIAL = 1 << 2,    // reads and writes (C,H,W) images: channels-last on the CPU path
    LF_FLAT = 1 << 3,       // reads its input flattened in PyTorch's (C,H,W) order
    LF_LAST = 1 << 4,       // the loss head: the model's last layer, and only there
    LF_ACTIVATION = 1 << 5, // elementwise; `activation = <name>` appends it after conv/dense
    LF_WINDOW = 1 << 6,     // a conv or pooling window: k, stride, pad
};

typedef struct layer_family {
    const char *name;        // the family, as layer_kinds.h names it ("pool")
    unsigned flags;          // LF_*
    const char *const *keys; // config keys besides "name", NULL-terminated
    const char *const *required; // the keys a config section must give, NULL-terminated
    // Sets L's output shape (oc, oh, ow), window and parameter counts from s; L's kind, name and
    // input shape are set. Errors say "layer IDX (KNAME): ...".
    int (*shape)(layer *L, const layer_spec *s, int n_classes, int idx, const char *kname,
                 ht_error *err);
    // The weight tensor's shape as PyTorch has it; returns its dimensions.
    int (*weight_shape)(const layer *L, int64_t *shape);
    // Forward multiply-adds per sample (0 for what is not a product).
    double (*macs)(const layer *L);
} layer_family;

typedef struct layer_desc {
    const char *name;        // config section, summary, activation name ("leaky_relu")
    const char *prefix;      // automatic layer names: prefix + a per-kind count ("fc2")
    const char *keras_class; // the Keras layer class that is this kind alone, or NULL
    const char *param_key;   // the act family's parameter (layer.alpha), or NULL
    double param_default;
    const layer_family *family;
} layer_desc;

extern const layer_desc layer_descs[LAYER_KIND_COUNT];

static inline const layer_desc *layer_desc_of(layer_kind k) { return &layer_descs[k]; }
static inline unsigned layer_flags(layer_kind k) { return layer_descs[k].family->flags; }

// The act family's function of kind k (layer_kinds.h's act_fn), or -1 for another family.
int layer_act_fn(layer_kind k);

// The kind whose name (or, when keras is nonzero, also Keras class) is `name`; -1 if none.
int layer_kind_by_name(const char *name, int keras);
// The kind an activation name gives ("sigmoid"; Keras's "silu" is swish), -1 for "linear"
// (none) and -2 when there is no such activation.
int layer_kind_by_activation(const char *name);
// The activations hetrain has, for messages: "relu, sigmoid, tanh, ..., softmax".
const char *layer_activation_list(void);

#endif
