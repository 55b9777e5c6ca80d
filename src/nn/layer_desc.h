// One description per layer kind (layer_kinds.h's list): its names, its config keys, how it
// shapes its output and parameters, how its weight tensor is shaped in safetensors, what it
// costs, and the flags the backends plan by. Kinds of one family share its description.
#ifndef HETRAIN_LAYER_DESC_H
#define HETRAIN_LAYER_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "nn/model.h"

enum {
    LF_PARAMS = 1 << 0,     // a weight tensor and (unless no_bias) a bias
    LF_IN_PLACE = 1 << 1,   // its output may overwrite its input's buffer (relu, dropout)
    LF_SPATIAL = 1 << 2,    // reads and writes (C,H,W) images: channels-last on the CPU path
    LF_FLAT = 1 << 3,       // reads its input flattened in PyTorch's (C,H,W) order
    LF_LAST = 1 << 4,       // the loss head: the model's last layer, and only there
    LF_ACTIVATION = 1 << 5, // elementwise; `activation = <name>` appends it after conv/dense
    LF_WINDOW = 1 << 6,     // a conv or pooling window: k, stride, pad
    LF_KERNEL = 1 << 7,     // its weight is a kernel, which weight decay applies to
    LF_MERGE = 1 << 8,      // takes 2..MODEL_MAX_IN inputs of one shape (add, multiply, ...),
                            // or after the first of 1x1 with its channels (broadcast)
    LF_CONCAT = 1 << 9,     // with LF_MERGE: inputs of one height and width, whose channels it
                            // puts one after another (concat)
    LF_OUT_FREE = 1 << 10,  // its backward never reads its own output, on any backend (its
                            // input, the output's gradient, its parameters): a merge may write
                            // over that output. A fused relu's mask is read, but a node that
                            // fused its relu has that relu as its only reader, never a merge.
};

struct layer_desc;

// ---- config keys: how the config reader (config.c) reads a family's section ----

// What a key's value is and where it goes in the layer_spec. The reader checks the value and
// writes the messages; a family with a key of its own kind parses it itself (LK_PARSE).
typedef enum layer_key_type {
    LK_INT,        // an integer lo..hi into an int
    LK_FLOAT,      // a number in lo..hi (LK_LO_OPEN, LK_HI_OPEN leave a bound out) into a float
    LK_NOT_BOOL,   // 0|1|false|true into an int, negated: "bias = 0" sets no_bias
    LK_PAD,        // an integer 0..64, "same" (-1: Keras's "same") or "valid" (0) into an int
    LK_ACTIVATION, // an activation the reader appends after the layer ("linear": none)
    LK_W_INIT,     // the weight's initializer, Keras's name with its arguments
    LK_B_INIT,     // the bias's
    LK_W_ARG,      // the weight initializer's first argument, over what the init gave
    LK_B_ARG,      // the bias initializer's
    LK_PARSE,      // the row's parse function
} layer_key_type;

enum {
    LK_REQUIRED = 1 << 0,   // a section must give it ("[conv] needs filters and size")
    LK_LO_OPEN = 1 << 1,    // LK_FLOAT: lo itself is out of range
    LK_HI_OPEN = 1 << 2,    // LK_FLOAT: hi itself is out of range
    LK_KIND_PARAM = 1 << 3, // a key only of the kinds whose param_key it is (layer_desc)
};

// A value for a family's own parse function, and where its message goes: the whole line after
// the reader's "path:LINE: ".
typedef struct layer_key_in {
    const char *section; // the section as written ("BatchNorm2d"), for messages
    const char *shown;   // the key as written (maybe a Keras alias), for messages
    const char *value;
    char *msg;
    size_t cap;
} layer_key_in;

typedef struct layer_key {
    const char *key;   // as the config writes it
    const char *alias; // Keras's argument name for the same (kernel_size), or NULL
    layer_key_type type;
    unsigned flags;    // LK_*
    size_t off;        // offsetof(layer_spec, ...): the field it sets (LK_INT .. LK_PAD)
    size_t set;        // offsetof an int of layer_spec set to 1 when given; 0: none (the spec's
                       // first field is its kind, never a flag)
    double lo, hi;     // LK_INT, LK_FLOAT
    int (*parse)(layer_spec *s, const layer_key_in *in); // LK_PARSE: 0, or -1 with in->msg
} layer_key;

// The row that ends a family's keys.
#define LK_END {.key = NULL}
// A row of an int, float or flag field: LK_ROW(key, alias, LK_INT, flags, field, lo, hi).
#define LK_ROW(key, alias, type, flags, field, lo, hi)                                         \
    {key, alias, type, flags, offsetof(layer_spec, field), 0, lo, hi, NULL}
// The keys of a layer with a weight and a bias (conv, dense), in the order messages list them.
#define LK_WEIGHT_ROWS                                                                          \
    {"activation", NULL, LK_ACTIVATION, 0, 0, 0, 0, 0, NULL},                                   \
    {"init", "kernel_initializer", LK_W_INIT, 0, 0, 0, 0, 0, NULL},                             \
    {"init_arg", NULL, LK_W_ARG, 0, 0, 0, 0, 0, NULL},                                          \
    LK_ROW("bias", "use_bias", LK_NOT_BOOL, 0, no_bias, 0, 0),                                  \
    {"bias_init", "bias_initializer", LK_B_INIT, 0, 0, 0, 0, 0, NULL},                          \
    {"bias_arg", NULL, LK_B_ARG, 0, 0, 0, 0, 0, NULL}

// The reader's checks, for the families' parse functions: 0 with *out, or -1 with the message
// the reader gives for such a value ("[conv] size: expected an integer 1..64, found \"x\"").
int layer_key_number(const layer_key_in *in, double lo, int lo_open, double hi, int hi_open,
                     float *out);
// Index of the value in the NULL-terminated names, or -1 with a message listing them.
int layer_key_choice(const layer_key_in *in, const char *const *names, int *out);

// ---- weight files: where a family's tensors sit in Keras's HDF5 weights (kerash5.c) ----

typedef enum layer_keras_layout {
    LKW_SAME,  // a vector
    LKW_CONV,  // Keras (K,K,C,OC), hetrain (OC,C,K,K): a kernel of rank 4
    LKW_DEPTHWISE, // Keras (K,K,C,M), hetrain (C*M,1,K,K): a depthwise kernel
    LKW_DENSE, // Keras (IN,OUT) with IN in (H,W,C) order, hetrain (OUT,IN) in (C,H,W) order
    LKW_SCALAR, // Keras () integer, hetrain one float: a count
    LKW_NONE,  // no Keras counterpart: a load from Keras's file zeroes it
} layer_keras_layout;

// One of the family's Keras variables, in Keras's order.
typedef struct layer_keras_var {
    const char *name;   // Keras's ("kernel", "moving_mean"); NULL for LKW_NONE
    int bias;           // the layer's tensor: its weight (0) or its bias (1), when state is
    tensor_state state; // TENSOR_TRAINABLE; else this state tensor
    layer_keras_layout layout;
    int required;       // every layer of the family has it (else only where the layer does)
} layer_keras_var;

typedef struct layer_family {
    const char *name;        // the family, as layer_kinds.h names it ("pool")
    unsigned flags;          // LF_*
    const layer_key *keys;   // config keys besides "name", in the order messages list them,
                             // ended by a row with a NULL key
    // Other section names of the family's first kind (darknet's "convolutional", PyTorch's
    // "BatchNorm2d"), NULL-terminated; NULL: none.
    const char *const *sections;
    // Sets what a config section of the kind starts with (the reader has zeroed s and set its
    // kind, a glorot_uniform weight and a zeros bias); section as written. NULL: nothing more.
    void (*config_defaults)(layer_spec *s, const char *section);
    // Sets L's output shape (oc, oh, ow), window and parameter counts from s; L's kind, name and
    // input shape are set, d is its kind's description. Errors say "layer IDX (NAME): ...".
    int (*shape)(layer *L, const layer_spec *s, const struct layer_desc *d, int n_classes, int idx,
                 ht_error *err);
    // The weight tensor's shape as PyTorch has it; returns its dimensions.
    int (*weight_shape)(const layer *L, int64_t *shape);
    // Forward multiply-adds per sample (0 for what is not a product).
    double (*macs)(const layer *L);
    // Its weight's fans as Keras counts them for its initialisers (its kernel's receptive field
    // times its input and output channels); NULL: its input's and output's sizes.
    void (*fans)(const layer *L, double *fan_in, double *fan_out);
    // Its tensors as Keras's weight files hold them under its kind's Keras class: n_keras_vars
    // rows (0: Keras's files hold none of the family's tensors).
    const layer_keras_var *keras_vars;
    int n_keras_vars;
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

// Each family's description is beside its CPU math (conv.c, pool.c, dense.c, activations.c,
// act.c, batchnorm.c): family_<name> of layer_kinds.h's list.
#define LAYER_FAMILY_DECL(id, fam, name, prefix, keras, key, dflt) extern const layer_family family_##fam;
LAYER_KINDS(LAYER_FAMILY_DECL)
#undef LAYER_FAMILY_DECL

// For the families' shape functions: sets L's window (k, stride, before-pad) and output size:
// pad >= 0 as given, pad < 0 Keras/TensorFlow "same" (layers.h's same_pad_before), whose
// before-pads must agree between the axes, as the layer keeps one.
static inline int layer_window(layer *L, int idx, const char *kname, int k, int stride, int pad,
                               ht_error *err) {
    L->k = k, L->stride = stride;
    if (pad >= 0) {
        L->pad = pad;
        L->oh = (L->h + 2 * pad - k) / stride + 1;
        L->ow = (L->w + 2 * pad - k) / stride + 1;
        return 0;
    }
    int oh = (L->h + stride - 1) / stride, ow = (L->w + stride - 1) / stride;
    int th = (oh - 1) * stride + k - L->h, tw = (ow - 1) * stride + k - L->w;
    int ph = th > 0 ? th / 2 : 0, pw = tw > 0 ? tw / 2 : 0;
    if (ph != pw)
        return ht_fail(err, "layer %d (%s): \"same\" padding of input %dx%d (window %d, stride "
                       "%d) pads %d rows but %d columns before; one pad for both is supported",
                       idx, kname, L->h, L->w, k, stride, ph, pw);
    L->pad = ph;
    L->oh = oh;
    L->ow = ow;
    return 0;
}

// A convolution's window from s (conv, dwconv): its kernel size, stride (0: 1) and pad in
// range and the kernel fitting the padded input, then layer_window.
int layer_kernel_window(layer *L, const layer_spec *s, const char *kname, int idx,
                        ht_error *err);

static inline const layer_desc *layer_desc_of(layer_kind k) { return &layer_descs[k]; }
static inline unsigned layer_flags(layer_kind k) { return layer_descs[k].family->flags; }

// The act family's function of kind k (layer_kinds.h's act_fn), or -1 for another family.
int layer_act_fn(layer_kind k);
// The merge family's operation of kind k (layer_kinds.h's merge_op), or -1 for another family.
int layer_merge_op(layer_kind k);

// The kind whose name (or, when keras is nonzero, also Keras class) is `name`; -1 if none.
int layer_kind_by_name(const char *name, int keras);
// The kind an activation name gives ("sigmoid"; Keras's "silu" is swish), -1 for "linear"
// (none) and -2 when there is no such activation.
int layer_kind_by_activation(const char *name);
// The activations hetrain has, for messages: "relu, sigmoid, tanh, ..., softmax".
const char *layer_activation_list(void);

#endif
