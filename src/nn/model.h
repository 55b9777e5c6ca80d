// A sequential CNN: layer list with shapes and parameter offsets, its initialisers and the
// training setup it comes with. Built from a preset name or an INI-style config file.
#ifndef HETRAIN_MODEL_H
#define HETRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "common.h"

typedef enum layer_kind {
    LAYER_CONV2D,
    LAYER_MAXPOOL,
    LAYER_DENSE,
    LAYER_RELU,
    LAYER_DROPOUT,
    LAYER_SOFTMAX_XENT, // softmax + cross-entropy; must be last
    LAYER_AVGPOOL,        // average over each window (k, stride, pad as maxpool's)
    LAYER_GLOBAL_AVGPOOL, // (C,H,W) -> (C,1,1): each channel's mean
} layer_kind;

typedef enum init_kind {
    INIT_ZEROS,
    INIT_CONSTANT,         // value = init_arg
    INIT_LECUN_UNIFORM,    // U(-sqrt(3/fan_in), +)
    INIT_GLOROT_UNIFORM,   // U(-sqrt(6/(fan_in+fan_out)), +)
    INIT_TRUNCATED_NORMAL, // N(0, init_arg) redrawn beyond 2 stddev
} init_kind;

typedef enum optim_kind { OPTIM_SGD, OPTIM_ADAM } optim_kind;

// How the CPU path computes its 3x3 and 5x5 stride-1 convolutions (conv_algo.h): direct;
// Winograd in every direction it can, F(4x4,KxK) (winograd) or F(2x2,KxK) (winograd2); or per
// layer and direction whichever of direct and F(4x4,KxK) a timing at device open finds faster.
// Other convolutions, and the OpenCL device, always run direct.
typedef enum conv_algo {
    CONV_ALGO_DIRECT,
    CONV_ALGO_AUTO,
    CONV_ALGO_WINOGRAD,
    CONV_ALGO_WINOGRAD2,
} conv_algo;
// Their names as --conv-algo and the config's conv_algo key take them, NULL-terminated.
extern const char *const conv_algo_names[];
// The default of the presets and of a config's [net] section.
#define MODEL_DEFAULT_CONV_ALGO CONV_ALGO_AUTO

#define LAYER_NO_PARAM ((size_t)-1)

typedef struct layer {
    layer_kind kind;
    char name[32];    // tensor name prefix in safetensors: "conv1" -> "conv1.weight"
    int c, h, w;      // input shape of one sample (dense: c = features, h = w = 1)
    int oc, oh, ow;   // output shape of one sample
    int k, stride, pad; // conv2d and maxpool (pool: pad = 0)
    float rate;       // dropout drop probability
    init_kind w_init, b_init;
    float w_arg, b_arg; // init parameters (constant value or stddev)
    size_t w_off, b_off; // offsets into the flat parameter buffer, LAYER_NO_PARAM if none
    size_t n_w, n_b;
} layer;

// One parameter tensor in the flat parameter buffer, as safetensors and PyTorch name and shape
// it: "<layer>.weight" conv [OC,C,K,K] and dense [OUT,IN], "<layer>.bias" [OC]; a weight of
// another kind is flat [n]. Gradients and optimizer state use the same offsets.
#define MODEL_TENSOR_MAX_DIMS 4
typedef struct model_tensor {
    char name[40];    // layer name (<= 31) + ".weight"
    int layer;        // index into model.layers
    int bias;         // 0 weight, 1 bias
    int output;       // 1 for the output layer's tensors (the last layer with parameters)
    size_t off, n;    // place in params: [off, off + n)
    int ndim;
    uint64_t shape[MODEL_TENSOR_MAX_DIMS];
} model_tensor;

typedef struct train_setup {
    optim_kind optim;
    float lr;
    float momentum;  // SGD
    int nesterov;    // SGD
    float decay;     // Keras-style: lr_t = lr / (1 + decay * iterations)
    float beta1, beta2, eps; // Adam
    int batch;
    int epochs;
    float val_split;
    conv_algo conv_algo;
} train_setup;

typedef struct model {
    char name[64];
    int in_c, in_h, in_w;
    int n_classes;
    int n_layers;
    layer *layers;
    size_t n_params;
    train_setup setup;
    model_tensor *tensors; // built by model_finish, in parameter order
    int n_tensors;
} model;

// Sizes of one sample's input and output of layer l.
static inline size_t layer_in_size(const layer *L) { return (size_t)L->c * L->h * L->w; }
static inline size_t layer_out_size(const layer *L) { return (size_t)L->oc * L->oh * L->ow; }

// Names of the built-in presets, NULL-terminated.
extern const char *const model_preset_names[];

// Builds the preset `name`. Returns -1 with err when the name is unknown.
int model_init_preset(model *m, const char *name, ht_error *err);

// Loads an INI-style config (see docs in config.c). Errors name the file and line.
int model_init_config(model *m, const char *path, ht_error *err);

// A preset name, or a path to a config file (anything ending in .cfg/.ini or containing '/').
int model_init(model *m, const char *name_or_path, ht_error *err);

void model_free(model *m);

// Fills params (n_params floats) from each layer's initialisers, deterministically from seed.
void model_init_params(const model *m, float *params, uint64_t seed);

// A layer kind's name as config files and `hetrain summary` write it: "conv", "maxpool", ...
const char *model_kind_name(layer_kind k);

// Index of the layer called `name`, or -1.
int model_find_layer(const model *m, const char *name);

// The parameter tensors in layer order, weight before bias, which is also their order in
// params (they tile it). *t points at the table model_finish built, valid until model_free;
// returns the count (0 and *t NULL before model_finish).
int model_tensors(const model *m, const model_tensor **t);

// The output layer's tensors: the last layer with parameters, so the table's last one or two.
// Returns the count and points *t at the first; 0 when the model has no parameters.
int model_output_tensors(const model *m, const model_tensor **t);

// The tensor holding flat parameter i, or NULL when i >= n_params (or before model_finish).
const model_tensor *model_tensor_at(const model *m, size_t i);

// Writes `hetrain summary`'s table (layer, output shape, parameters, forward multiply-adds,
// totals) to f.
void model_print_summary(const model *m, FILE *f);

// Forward multiply-adds per sample, for GFLOP/s reports.
double model_forward_macs(const model *m);
// Layer l's multiply-adds per sample (conv2d and dense; 0 for the others): its forward, or
// (backward != 0) its backward: the weight gradient plus the input gradient, the latter for
// every layer but layer 0 (1x or 2x the forward). The sum of the forwards is model_forward_macs.
double model_layer_macs(const model *m, int l, int backward);

// Internal to model.c/config.c: appends a layer computing shapes from the previous one and
// assigning parameter offsets. Returns -1 with err on an impossible shape.
typedef struct layer_spec {
    layer_kind kind;
    const char *name; // NULL: automatic ("conv1", "fc2", ...)
    int filters, k, stride, pad; // pad < 0: "same"
    int no_bias;      // conv2d, dense: no bias tensor (Keras use_bias = false)
    int units;
    float rate;
    init_kind w_init, b_init;
    float w_arg, b_arg;
} layer_spec;
int model_begin(model *m, const char *name, int c, int h, int w, int n_classes, ht_error *err);
int model_add(model *m, const layer_spec *s, ht_error *err);
// Checks the model is complete (ends with softmax cross-entropy over n_classes) and builds
// its tensor table (model_tensors), checking that the tensors tile the parameters under
// distinct names. A model whose layers were filled in by hand gets its table here too.
int model_finish(model *m, ht_error *err);

#endif
