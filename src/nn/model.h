// A sequential CNN: layer list with shapes and parameter offsets, its initialisers and the
// training setup it comes with. Built from a preset name or an INI-style config file.
#ifndef HETRAIN_MODEL_H
#define HETRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "core/common.h"
#include "nn/layer_kinds.h"

// Limits on what a model may be.
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_DIM 65536   // channels, height, width, filters, units
#define MODEL_MAX_K 64        // kernel/window size, stride, padding
#define MODEL_MAX_CLASSES 256 // labels are uint8_t
#define MODEL_MAX_ELEMS ((int64_t)1 << 31) // per-sample activations, and total parameters
#define MODEL_MAX_IN 4 // inputs of one layer (a merge's)
#define MODEL_INPUT (-1) // layer.in's name for the model's input

// Initialisers as Keras defines them (keras.initializers), drawn from hetrain's seeded
// generator: the distributions are Keras's, the bits are not. fan_in and fan_out are Keras's:
// a conv kernel's K*K*C and K*K*OC, a dense weight's inputs and units, a bias's length (both).
// arg and arg2 are the layer's w_arg/w_arg2 (b_arg/b_arg2); "truncated" redraws beyond two
// stddev of the mean.
typedef enum init_kind {
    INIT_ZEROS,
    INIT_CONSTANT,         // value = arg
    INIT_LECUN_UNIFORM,    // U(-sqrt(3/fan_in), +)
    INIT_GLOROT_UNIFORM,   // U(-sqrt(6/(fan_in+fan_out)), +)
    INIT_TRUNCATED_NORMAL, // N(mean arg2, stddev arg) truncated
    INIT_ONES,
    INIT_GLOROT_NORMAL,    // variance_scaling(1, fan_avg, truncated_normal)
    INIT_HE_UNIFORM,       // variance_scaling(2, fan_in, uniform)
    INIT_HE_NORMAL,        // variance_scaling(2, fan_in, truncated_normal)
    INIT_LECUN_NORMAL,     // variance_scaling(1, fan_in, truncated_normal)
    INIT_RANDOM_UNIFORM,   // U(minval arg, maxval arg2)
    INIT_RANDOM_NORMAL,    // N(mean arg2, stddev arg)
    INIT_VARIANCE_SCALING, // scale = arg; mode and distribution in the layer's w_vs/b_vs
    INIT_KIND_COUNT
} init_kind;

// variance_scaling's mode | distribution (a layer's w_vs, b_vs). With n the mode's fan (fan_avg:
// the mean of both), s = scale / max(1, n): truncated_normal has stddev sqrt(s) / 0.8796...
// (the stddev of a standard normal truncated at 2, so the result has variance s),
// untruncated_normal stddev sqrt(s), uniform the limit sqrt(3 s).
enum {
    INIT_VS_FAN_IN = 0,
    INIT_VS_FAN_OUT = 1,
    INIT_VS_FAN_AVG = 2,
    INIT_VS_MODE = 3, // mask
    INIT_VS_TRUNCATED = 0 << 2,
    INIT_VS_UNTRUNCATED = 1 << 2,
    INIT_VS_UNIFORM = 2 << 2,
    INIT_VS_DIST = 3 << 2, // mask
};
#define INIT_TRUNC_STDDEV 0.87962566103423978 // stddev of N(0,1) truncated to [-2, 2]

// One initialiser: what a layer keeps per tensor, and what model_init_keras_name reads.
typedef struct init_desc {
    init_kind kind;
    float arg, arg2;
    int vs;
} init_desc;

// Their names as config files and Keras's functions write them ("glorot_uniform"), in enum
// order, NULL-terminated.
extern const char *const init_kind_names[];

// An initialiser from Keras's name for it: a function name ("he_normal", "zeros"), a class name
// ("HeNormal", "Zeros"), or the aliases "uniform", "normal", and its config's values, which
// get(ctx, key, &num, &str) gives: 0 absent or null, 1 a number in *num, 2 a string in *str,
// 3 anything else. Keras's defaults fill what is absent (random_uniform -0.05..0.05,
// random_normal and truncated_normal stddev 0.05, variance_scaling 1.0, fan_in,
// truncated_normal; Keras 2's distribution "normal" is truncated_normal); "seed" is ignored
// (hetrain's --seed draws). variance_scaling with the parameters of glorot_uniform or
// lecun_uniform becomes that kind. Returns -1 with a one-line reason in why (no prefix) when
// the name is unknown or a value is wrong.
typedef int (*init_get_fn)(void *ctx, const char *key, double *num, const char **str);
int model_init_keras_name(init_desc *d, const char *name, init_get_fn get, void *ctx, char *why,
                          size_t cap);

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
    CONV_ALGO_GEMM, // every convolution of the CPU path as GEMMs over the batch (no per-sample trunk)
} conv_algo;
// Their names as --conv-algo and the config's conv_algo key take them, NULL-terminated.
extern const char *const conv_algo_names[];
// The default of the presets and of a config's [net] section.
#define MODEL_DEFAULT_CONV_ALGO CONV_ALGO_AUTO
// What the CPU path's GEMMs multiply in (--precision): float32, or bfloat16 factors with float32
// sums and master weights (gemm_bf16.h): the dense layers and the convolutions computed as GEMMs
// over the batch (conv_algo's choice, CONV_GEMM_BF16). Convolutions that run per-sample kernels
// (direct, Winograd), the other layers, the optimizer and the OpenCL path stay float32. Names as
// --precision takes them.
typedef enum precision { PRECISION_F32, PRECISION_BF16 } precision;
extern const char *const precision_names[];

#define LAYER_NO_PARAM ((size_t)-1)

// A layer's hyperparameters, declared once for what gives them (layer_spec: presets, the config
// reader, the Keras reader) and what keeps them (layer); a family's new parameter is a line
// here. model_add copies those its family has.
#define NORMALIZE_MAX_CONST 4 // channels of a normalize layer with constants (an image's)
#define LAYER_HPARAMS                                                                           \
    /* conv2d and pooling: the window; layer_spec's pad as given (< 0: Keras "same", any     \
       stride; pooling: 0 or "same"), the layer's the before-pad (top/left): "same" may pad  \
       one row/column more after, as oh/ow imply (layers.h) */                               \
    int k, stride, pad;                                                                        \
    float rate;  /* dropout drop probability */                                                \
    /* dropout: 1 draws once a sample, dropping all its elements or none (Keras's noise_shape \
       (None, 1, 1, 1): EfficientNet's stochastic depth) */                                    \
    int drop_sample;                                                                           \
    float alpha; /* the act family's parameter (layer_kinds.h) */                              \
    init_kind w_init, b_init;                                                                  \
    float w_arg, b_arg; /* init parameters (init_kind says which) */                           \
    float w_arg2, b_arg2;                                                                      \
    int w_vs, b_vs; /* variance_scaling's mode | distribution */                              \
    /* batchnorm: Keras's momentum and epsilon */                                              \
    float momentum, eps;                                                                       \
    /* Keras's weight regularizers (0: none): the loss gets w_l1 * sum|w| + w_l2 * sum(w^2)  \
       of the weight and the same of the bias (model_reg_penalty), the update their gradient \
       (optim.c). Keras's trainable = false (conv and dense): the optimiser leaves the        \
       layer's parameters and their moments as they are. */                                  \
    float w_l1, w_l2, b_l1, b_l2;                                                              \
    int frozen;                                                                                \
    /* permute: output axis i (of C, H, W) is input axis perm[i] - 1 (PyTorch's              \
       x.permute(0, perm[0], perm[1], perm[2])) */                                             \
    int perm[3];                                                                               \
    /* zeropad: rows of zeros added at the top and bottom, columns at the left and right */     \
    int pad_top, pad_bottom, pad_left, pad_right;                                               \
    /* dwconv: output channels per input channel (Keras's depth_multiplier) */                 \
    int mult;                                                                                  \
    /* rescale: x * scale + offset (Keras's Rescaling) */                                      \
    float scale, offset;                                                                       \
    /* normalize: 1 computes mean + x * sqrt(variance) instead (Keras's invert) */             \
    int invert;                                                                                \
    /* normalize: the mean and variance as constants of the layer (Keras's Normalization with  \
       mean and variance in its config: ConvNeXt's), n_const of them (1: every channel's),    \
       0: they are its state */                                                                \
    int n_const;                                                                               \
    float c_mean[NORMALIZE_MAX_CONST], c_var[NORMALIZE_MAX_CONST];                             \
    /* The Keras class the layer was read as when not its kind's, as 1 + the layer kind whose  \
       class it is (0: its kind's): Conv2D with groups = channels is a dwconv, Dense on an    \
       image's channels a 1x1 conv. Keras's weight files name and shape it as that class. */  \
    int keras_as;                                                                              \
    /* Read from the keras_seq-th Sequential inside a Keras model (ConvNeXt's stem): Keras's   \
       weight files hold it in that Sequential's group; 0: at the top; -1: deeper. */         \
    int keras_seq;                                                                             \
    /* 1 + the index of an earlier layer of its kind whose parameters it computes with (a      \
       layer called again: Keras's shared layer; the config's share = NAME); 0: its own.     \
       It holds none of its own: its w_off and b_off are that layer's, its gradients add to   \
       that layer's, and the tensors, counts, initialisers and files are that layer's. */     \
    int share;

typedef struct layer {
    layer_kind kind;
    char name[32];    // tensor name prefix in safetensors: "conv1" -> "conv1.weight"
    int c, h, w;      // input shape of one sample (dense: c = features, h = w = 1); a merge's
                      // every input has it
    int oc, oh, ow;   // output shape of one sample
    // Its inputs: earlier layers, or MODEL_INPUT; n_in 0 (a layer filled in by hand): the layer
    // before. Only a merge family (LF_MERGE) takes more than one.
    int n_in;
    int in[MODEL_MAX_IN];
    int in_ch[MODEL_MAX_IN]; // a merge's inputs' channels (c is the first's)
    // A merge's inputs' positions: h * w, or 1 for an input of 1x1 that an element-wise merge
    // broadcasts over the first input's height and width (squeeze-and-excite's (C,1,1) scale).
    int in_hw[MODEL_MAX_IN];
    LAYER_HPARAMS
    size_t w_off, b_off; // offsets into the flat parameter buffer, LAYER_NO_PARAM if none
    size_t n_w, n_b;
    // batchnorm's state (model state, not parameters: after every trainable parameter,
    // model_finish places it): running mean (oc), running variance (oc) and the count of
    // updates, at s_off (LAYER_NO_PARAM if none), n_s floats.
    size_t s_off, n_s;
    int n_sharers; // later layers computing with its parameters (their share names it)
} layer;

// Whether more than one layer computes with L's parameters (it shares another's, or others
// share its): their gradients add up over the calls (net.c, the devices).
static inline int layer_params_shared(const layer *L) { return L->share || L->n_sharers; }

// One parameter tensor in the flat parameter buffer, as safetensors and PyTorch name and shape
// it: "<layer>.weight" conv [OC,C,K,K] and dense [OUT,IN], "<layer>.bias" [OC]; a weight of
// another kind is flat [n]. Gradients and optimizer state use the same offsets.
#define MODEL_TENSOR_MAX_DIMS 4
// A batchnorm's state tensors come after every trainable one: "<layer>.running_mean" [C],
// "<layer>.running_var" [C] and "<layer>.num_batches_tracked" [] (an integer in safetensors).
typedef enum tensor_state {
    TENSOR_TRAINABLE,
    TENSOR_RUNNING_MEAN,
    TENSOR_RUNNING_VAR,
    TENSOR_NUM_BATCHES,
} tensor_state;

typedef struct model_tensor {
    char name[52];    // layer name (<= 31) + ".num_batches_tracked"
    int layer;        // index into model.layers
    int bias;         // 0 weight, 1 bias (trainable tensors)
    tensor_state state; // TENSOR_TRAINABLE, or which state tensor
    int integer;      // a count, which files keep as an integer (I64 in safetensors)
    int output;       // 1 for the output layer's tensors (the last layer with parameters)
    size_t off, n;    // place in params: [off, off + n)
    int ndim;
    uint64_t shape[MODEL_TENSOR_MAX_DIMS];
} model_tensor;

// A learning-rate schedule: a factor on lr by epoch or step (optim.h). Zeroed: none.
typedef enum lr_sched_kind { LR_SCHED_NONE, LR_SCHED_STEP, LR_SCHED_EXP, LR_SCHED_COSINE } lr_sched_kind;
typedef struct lr_schedule {
    lr_sched_kind kind;
    int every;   // step: epochs between two multiplications by gamma
    float gamma; // step, exp
} lr_schedule;

// Weight decay on the kernels (conv and dense weights; biases never): L2 adds W*w to the
// gradient (loss + W/2*sum(w^2)); decoupled takes lr_t*W*w off the weight (AdamW, SGDW).
typedef enum wd_mode { WD_L2, WD_DECOUPLED } wd_mode;

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
    precision precision;
    lr_schedule sched;
    float weight_decay; // W >= 0 (0: none)
    wd_mode wd_mode;
    // batchnorm's statistics in training are over groups of this many consecutive positions of
    // a batch (ghost batches; the last group of a batch may be smaller): the same whichever
    // devices or ranks compute them. 0: MODEL_DEFAULT_BN_GROUP, at most the batch.
    int bn_group;
} train_setup;
#define MODEL_DEFAULT_BN_GROUP 32

typedef struct model {
    char name[64];
    int in_c, in_h, in_w;
    int n_classes;
    int n_layers;
    layer *layers;
    size_t n_params;    // every float of the flat buffer: trainable parameters, then state
    size_t n_trainable; // the parameters the optimiser updates: [0, n_trainable)
    size_t n_state;     // batchnorm's state: [n_trainable, n_params)
    train_setup setup;
    model_tensor *tensors; // built by model_finish, in parameter order
    int n_tensors;
    // Read from a Keras JSON whose Flatten keeps the tensor's (C,H,W) order (a channels_first
    // model's plain Flatten): a dense layer's Keras kernel after it takes its inputs in
    // hetrain's order, not (H,W,C) (the Keras weight files, kerash5.c).
    int keras_flatten_chw;
    // Labels per sample: 1 (a class index; a binary head's 0 or 1), or k for a multi-label head
    // (a sigmoid over k >= 2 outputs: k bytes of 0 or 1, and a prediction is the set of labels
    // over 0.5 as bits). Set by model_finish.
    int label_width;
    // The names of the classes the outputs stand for (an image folder's class folders, or what a
    // weights file or checkpoint recorded), or none (n_class_names 0): one allocation, freed by
    // model_free (model_classes.c).
    int n_class_names;
    char **class_names;
} model;

// Sets m's class names to a copy of names[0..n) (n 0: none). -1 with e when out of memory.
int model_set_classes(model *m, int n, char *const *names, ht_error *e);
// The first class whose name differs between m and names[0..n) (n, or m's count, when one list
// is longer), or -1 when they are the same.
int model_classes_differ(const model *m, int n, char *const *names);
// m's class names as a JSON array of strings (malloc'd), or NULL when it has none (or memory ran
// out: e says which).
char *model_classes_json(const model *m, ht_error *e);
// Sets m's class names from a JSON array of strings; what names its source in errors.
int model_classes_from_json(model *m, const char *json, const char *what, ht_error *e);

// A multi-label head's most labels: a prediction's bits travel exactly as a float.
#define MODEL_MAX_LABELS 24

// Sizes of one sample's input and output of layer l.
static inline size_t layer_in_size(const layer *L) { return (size_t)L->c * L->h * L->w; }
// Floats per sample of input k (a merge's inputs: their own channels).
static inline size_t layer_in_size_k(const layer *L, int k) {
    return L->n_in > 1 ? (size_t)L->in_ch[k] * L->in_hw[k] : layer_in_size(L);
}
static inline size_t layer_out_size(const layer *L) { return (size_t)L->oc * L->oh * L->ow; }
// The mask of a dropout's element numbers in its draws: every element its own, or one draw a
// sample (drop_sample).
static inline uint32_t layer_dropout_emask(const layer *L) { return L->drop_sample ? 0u : ~0u; }

// Names of the built-in presets, NULL-terminated.
extern const char *const model_preset_names[];
// Whether name is a built-in preset's name or alias ("cnn3").
int model_is_preset(const char *name);

// Builds the preset `name`. Returns -1 with err when the name is unknown.
int model_init_preset(model *m, const char *name, ht_error *err);

// Loads an INI-style config (see docs in config.c). Errors name the file and line.
int model_init_config(model *m, const char *path, ht_error *err);

// A preset name, a Keras model JSON (a path ending in .json, keras.h), a path to a config
// file (anything else ending in .cfg/.ini or containing '/'), or the name of a config hetrain
// ships (models/<name>.cfg, installed in <exe>/../share/hetrain/models: "resnet20").
int model_init(model *m, const char *name_or_path, ht_error *err);

void model_free(model *m);

// Fills params (n_params floats) from each layer's initialisers, deterministically from seed.
void model_init_params(const model *m, float *params, uint64_t seed);

// A layer kind's name as config files and `hetrain summary` write it: "conv", "maxpool", ...
const char *model_kind_name(layer_kind k);

// Index of the layer called `name`, or -1.
int model_find_layer(const model *m, const char *name);

// The parameter tensors in layer order, weight before bias, then the state tensors in layer
// order, which is also their order in params (they tile it). *t points at the table model_finish built, valid until model_free;
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

// The regularization term Keras adds to the loss: the sum over layers of w_l1 * sum|w| +
// w_l2 * sum(w^2) of the weights and biases in params (in double); 0 without regularizers.
double model_reg_penalty(const model *m, const float *params);
// Whether any layer has a regularizer, and how many trainable parameters (of
// [0, n_trainable)) frozen layers hold.
int model_has_reg(const model *m);
size_t model_frozen_params(const model *m);
// The state values Keras's summary does not count (a batchnorm's count of updates, which
// Keras does not keep: its family's Keras variables have no such row), of the model and of
// layer l.
size_t model_keras_uncounted(const model *m);
size_t model_layer_keras_uncounted(const model *m, int l);

// Freezes layer l (frozen != 0) or lets it train, as Keras's layer.trainable = False/True: its
// parameters are not updated, a batchnorm normalises with its moving statistics; a shared
// layer's calls all follow. A layer without parameters is left as it is (returns 0); -1 when l
// is out of range.
int model_set_frozen(model *m, int l, int frozen);
// --freeze NAME[,NAME...] and --trainable-from NAME: the layers named frozen, or every layer
// with parameters before the one named. -1 with e naming the layer that is not in the model.
int model_freeze_names(model *m, const char *names, ht_error *e);
int model_trainable_from(model *m, const char *name, ht_error *e);

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
    LAYER_HPARAMS     // as the layer keeps them (pad: see there)
    int filters;      // conv2d's output channels
    int units;        // dense's
    int no_bias;      // conv2d, dense: no bias tensor (Keras use_bias = false)
    int alpha_set;    // alpha given (else the kind's default)
    // batchnorm's momentum and eps given (else Keras's defaults 0.99, 1e-3); Keras's center =
    // false (no beta), scale = false (no gamma)
    int momentum_set, eps_set;
    int no_center, no_scale;
    // Its inputs, as layer.in (earlier layers' indices, MODEL_INPUT); n_from 0: the layer before.
    int n_from;
    int from[MODEL_MAX_IN];
} layer_spec;
int model_begin(model *m, const char *name, int c, int h, int w, int n_classes, ht_error *err);
int model_add(model *m, const layer_spec *s, ht_error *err);
// Checks the model is complete (ends with softmax cross-entropy over n_classes) and builds
// its tensor table (model_tensors), checking that the tensors tile the parameters under
// distinct names. A model whose layers were filled in by hand gets its table here too.
int model_finish(model *m, ht_error *err);

#endif
