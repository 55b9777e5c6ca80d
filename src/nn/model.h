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
} layer_kind;

typedef enum init_kind {
    INIT_ZEROS,
    INIT_CONSTANT,         // value = init_arg
    INIT_LECUN_UNIFORM,    // U(-sqrt(3/fan_in), +)
    INIT_GLOROT_UNIFORM,   // U(-sqrt(6/(fan_in+fan_out)), +)
    INIT_TRUNCATED_NORMAL, // N(0, init_arg) redrawn beyond 2 stddev
} init_kind;

typedef enum optim_kind { OPTIM_SGD, OPTIM_ADAM } optim_kind;

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
} train_setup;

typedef struct model {
    char name[64];
    int in_c, in_h, in_w;
    int n_classes;
    int n_layers;
    layer *layers;
    size_t n_params;
    train_setup setup;
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

// Index of the layer called `name`, or -1.
int model_find_layer(const model *m, const char *name);

// Writes `hetrain summary`'s table (layer, output shape, parameters, total) to f.

void model_print_summary(const model *m, FILE *f);

// Forward multiply-adds per sample, for GFLOP/s reports.
double model_forward_macs(const model *m);

// Internal to model.c/config.c: appends a layer computing shapes from the previous one and
// assigning parameter offsets. Returns -1 with err on an impossible shape.
typedef struct layer_spec {
    layer_kind kind;
    const char *name; // NULL: automatic ("conv1", "fc2", ...)
    int filters, k, stride, pad; // pad < 0: "same"
    int units;
    float rate;
    init_kind w_init, b_init;
    float w_arg, b_arg;
} layer_spec;
int model_begin(model *m, const char *name, int c, int h, int w, int n_classes, ht_error *err);
int model_add(model *m, const layer_spec *s, ht_error *err);
// Checks the model is complete (ends with softmax cross-entropy over n_classes).
int model_finish(model *m, ht_error *err);

#endif
