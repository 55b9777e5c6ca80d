// The layer kinds, once: every table indexed by kind (the descriptors of layer_desc.c, and the
// op tables of the CPU path, the OpenCL device and the test reference) is built from this list,
// so a kind cannot be half-added: a backend that lacks its family's ops does not compile.
//
//   X(ID, family, name, automatic name prefix, Keras class, parameter key, its default)
//
// ID gives LAYER_<ID>. The family names the ops every backend implements for it
// (`<backend>_<family>`: conv, pool, gap, dense, relu, dropout, softmax, act, bn, bce, permute,
// zeropad, merge, concat, dwconv, rescale, normalize, layernorm, layerscale); kinds of one
// family share them. name is the config section and what `summary` and messages call the
// kind; for the kinds that can be an activation (relu, softmax, the act family) it is also the
// config's and Keras's activation name. The Keras class is the layer class that is this kind
// alone (NULL: none; Keras writes the activations as Activation("name") too). The act family
// takes one parameter, under the key given (NULL: none), kept in layer.alpha: leaky_relu's
// slope for negative inputs (Keras's LeakyReLU layer: 0.3), elu's alpha, hard_sigmoid's slope
// (Keras 3 and PyTorch: 1/6; Keras 2: 0.2), gelu's tanh approximation (0: erf, exact) and
// relu6's cap (min(max(x, 0), max_value): Keras's ReLU(max_value), MobileNet's 6) and
// hard_swish's slope (x * hard_sigmoid(x): Keras 3's hard_silu, MobileNetV3's, and PyTorch's
// Hardswish, 1/6).
//
// The enum's order is only in memory: files name layers and tensors, never a kind's number.
#ifndef HETRAIN_LAYER_KINDS_H
#define HETRAIN_LAYER_KINDS_H

#define LAYER_KINDS(X)                                                                              \
    X(CONV2D,         conv,    "conv",          "conv",     "Conv2D",                 NULL, 0)      \
    X(MAXPOOL,        pool,    "maxpool",       "pool",     "MaxPooling2D",           NULL, 0)      \
    X(DENSE,          dense,   "dense",         "fc",       "Dense",                  NULL, 0)      \
    X(RELU,           relu,    "relu",          "relu",     "ReLU",                   NULL, 0)      \
    X(DROPOUT,        dropout, "dropout",       "drop",     "Dropout",                NULL, 0)      \
    X(SOFTMAX_XENT,   softmax, "softmax",       "softmax",  "Softmax",                NULL, 0)      \
    X(AVGPOOL,        pool,    "avgpool",       "avgpool",  "AveragePooling2D",       NULL, 0)      \
    X(GLOBAL_AVGPOOL, gap,     "globalavgpool", "gap",      "GlobalAveragePooling2D", NULL, 0)      \
    X(SIGMOID,        act,     "sigmoid",       "sigmoid",  NULL,                     NULL, 0)      \
    X(TANH,           act,     "tanh",          "tanh",     NULL,                     NULL, 0)      \
    X(LEAKY_RELU,     act,     "leaky_relu",    "lrelu",    "LeakyReLU",              "alpha", 0.3) \
    X(ELU,            act,     "elu",           "elu",      "ELU",                    "alpha", 1.0) \
    X(SELU,           act,     "selu",          "selu",     NULL,                     NULL, 0)      \
    X(SWISH,          act,     "swish",         "swish",    NULL,                     NULL, 0)      \
    X(SOFTPLUS,       act,     "softplus",      "softplus", NULL,                     NULL, 0)      \
    X(HARD_SIGMOID,   act,     "hard_sigmoid",  "hsig",     NULL,                     "slope",      \
      0.16666666666666666)                                                                          \
    X(GELU,           act,     "gelu",          "gelu",     NULL,                     "approximate", 0) \
    X(RELU6,          act,     "relu6",         "relu6",    NULL,                     "max_value", 6.0) \
    X(HARD_SWISH,     act,     "hard_swish",    "hswish",   NULL,                     "slope",      \
      0.16666666666666666)                                                                          \
    X(BATCHNORM,      bn,      "batchnorm",     "bn",       "BatchNormalization",     NULL, 0)      \
    X(SIGMOID_BCE,    bce,     "binary_crossentropy", "bce", NULL,                    NULL, 0)      \
    X(PERMUTE,        permute, "permute",       "permute",  NULL,                     NULL, 0)      \
    X(ZEROPAD,        zeropad, "zeropad",       "zeropad",  "ZeroPadding2D",          NULL, 0)      \
    X(ADD,            merge,   "add",           "add",      "Add",                    NULL, 0)      \
    X(SUBTRACT,       merge,   "subtract",      "sub",      "Subtract",               NULL, 0)      \
    X(MULTIPLY,       merge,   "multiply",      "mul",      "Multiply",               NULL, 0)      \
    X(AVERAGE,        merge,   "average",       "average",  "Average",                NULL, 0)      \
    X(MAXIMUM,        merge,   "maximum",       "maximum",  "Maximum",                NULL, 0)      \
    X(CONCAT,         concat,  "concat",        "concat",   "Concatenate",            NULL, 0)      \
    X(DWCONV,         dwconv,  "dwconv",        "dwconv",   "DepthwiseConv2D",        NULL, 0)      \
    X(RESCALE,        rescale, "rescale",       "rescale",  "Rescaling",              NULL, 0)      \
    X(NORMALIZE,      normalize, "normalize",   "norm",     "Normalization",          NULL, 0)    \
    X(LAYERNORM,      layernorm, "layernorm",   "ln",       "LayerNormalization",     NULL, 0)    \
    X(LAYERSCALE,     layerscale, "layerscale", "ls",       "LayerScale",             NULL, 0)

typedef enum layer_kind {
#define LAYER_KIND_ENUM(id, fam, name, prefix, keras, key, dflt) LAYER_##id,
    LAYER_KINDS(LAYER_KIND_ENUM)
#undef LAYER_KIND_ENUM
    LAYER_KIND_COUNT
} layer_kind;

// The act family's kinds on their own, as act_fn: what the backends' activation functions
// switch over (without a default, so that a missing one does not compile). Each family says
// whether its kinds are activations; a new family adds its line here.
#define LAYER_ACT_FN_conv(id)
#define LAYER_ACT_FN_pool(id)
#define LAYER_ACT_FN_gap(id)
#define LAYER_ACT_FN_dense(id)
#define LAYER_ACT_FN_relu(id)
#define LAYER_ACT_FN_dropout(id)
#define LAYER_ACT_FN_softmax(id)
#define LAYER_ACT_FN_act(id) ACT_##id,
#define LAYER_ACT_FN_bn(id)
#define LAYER_ACT_FN_bce(id)
#define LAYER_ACT_FN_permute(id)
#define LAYER_ACT_FN_zeropad(id)
#define LAYER_ACT_FN_merge(id)
#define LAYER_ACT_FN_concat(id)
#define LAYER_ACT_FN_dwconv(id)
#define LAYER_ACT_FN_rescale(id)
#define LAYER_ACT_FN_normalize(id)
#define LAYER_ACT_FN_layernorm(id)
#define LAYER_ACT_FN_layerscale(id)

#define LAYER_ACT_FN_ENTRY(id, fam, name, prefix, keras, key, dflt) LAYER_ACT_FN_##fam(id)
typedef enum act_fn { LAYER_KINDS(LAYER_ACT_FN_ENTRY) ACT_FN_COUNT } act_fn;

// The merge family's kinds on their own, as merge_op: what the backends' element-wise merges
// switch over (MERGE_ADD, MERGE_SUBTRACT, ...), and as OpenCL C source.
#define LAYER_MERGE_OP_conv(id)
#define LAYER_MERGE_OP_pool(id)
#define LAYER_MERGE_OP_gap(id)
#define LAYER_MERGE_OP_dense(id)
#define LAYER_MERGE_OP_relu(id)
#define LAYER_MERGE_OP_dropout(id)
#define LAYER_MERGE_OP_softmax(id)
#define LAYER_MERGE_OP_act(id)
#define LAYER_MERGE_OP_bn(id)
#define LAYER_MERGE_OP_bce(id)
#define LAYER_MERGE_OP_permute(id)
#define LAYER_MERGE_OP_zeropad(id)
#define LAYER_MERGE_OP_merge(id) MERGE_##id,
#define LAYER_MERGE_OP_concat(id)
#define LAYER_MERGE_OP_dwconv(id)
#define LAYER_MERGE_OP_rescale(id)
#define LAYER_MERGE_OP_normalize(id)
#define LAYER_MERGE_OP_layernorm(id)
#define LAYER_MERGE_OP_layerscale(id)

#define LAYER_MERGE_OP_ENTRY(id, fam, name, prefix, keras, key, dflt) LAYER_MERGE_OP_##fam(id)
typedef enum merge_op { LAYER_KINDS(LAYER_MERGE_OP_ENTRY) MERGE_OP_COUNT } merge_op;

// The same enums as OpenCL C source, which the OpenCL device puts before its kernels.
#define LAYER_STR_(...) #__VA_ARGS__
#define LAYER_STR(...) LAYER_STR_(__VA_ARGS__)
#define LAYER_ACT_FN_OPENCL                                                                    \
    "enum act_fn { " LAYER_STR(LAYER_KINDS(LAYER_ACT_FN_ENTRY)) " ACT_FN_COUNT };\n"             \
    "enum merge_op { " LAYER_STR(LAYER_KINDS(LAYER_MERGE_OP_ENTRY)) " MERGE_OP_COUNT };\n"

#endif
