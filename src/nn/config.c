// Model config files: a darknet-like INI description of a sequential network, read with inih.
//
//   # comment                 ; and # start comments, at line start or after whitespace
//   [net]                     first section, once
//   name = mynet              default: the file's base name without extension
//   input = 1x28x28           CxHxW, required
//   classes = 10              2..256, default 10
//   optimizer = sgd           sgd|adam (or SGD|Adam); the setup keys below default to the
//   lr = 0.05                 cnn2d_3layer_fullconnected_3layer preset's setup
//   momentum = 0.9            (SGD lr 0.05, momentum 0.9, Nesterov, decay 1e-6, batch
//   nesterov = 1              1000, 10 epochs, val_split 0.2; Adam betas .9/.999, eps 1e-8)
//   decay = 1e-6   beta1 = 0.9   beta2 = 0.999   eps = 1e-8
//   batch = 1000   epochs = 10   val_split = 0.2
//   conv_algo = auto          auto|direct|winograd|winograd2|gemm: how CPU devices compute 3x3
//                             and 5x5 stride-1 convolutions (--conv-algo overrides it)
//   lr_schedule = none        none|cosine|exp:GAMMA|step:EPOCHS:GAMMA (optim.h; --lr-schedule)
//   weight_decay = 0          W >= 0 on the kernels (--weight-decay)
//   weight_decay_mode = l2    l2|decoupled (--weight-decay-mode)
//   bn_group = 32             samples per group of batchnorm statistics (--bn-group)
//   [conv]     filters (required), size (required), stride = 1, pad = 0 | valid | same,
//              activation = linear | relu | sigmoid | tanh | leaky_relu | elu | selu | swish |
//              softplus | hard_sigmoid | hard_swish | gelu | relu6 | softmax (appends a
//              layer of that kind, with its default parameter; silu is swish, hard_silu
//              hard_swish),
//              init = glorot_uniform, init_arg, bias = 1, bias_init = zeros, bias_arg
//   [dense]    units (required), activation, init = lecun_uniform, init_arg, bias = 1,
//              bias_init, bias_arg
//   [maxpool]  size (required), stride = size, pad = 0 | same
//   [avgpool]  size (required), stride = size, pad = 0 | same (the mean of the window's
//              inputs; padding is not counted)
//   [globalavgpool]  each channel's mean over the whole plane: CxHxW -> Cx1x1
//   [dropout]  rate (required, 0 <= rate < 1), per_sample = 0 (1: one draw a sample, all its
//              elements dropped or kept together: Keras's noise_shape (None, 1, 1, 1))
//   [relu]  [sigmoid]  [tanh]  [selu]  [swish]  [softplus]
//   [leaky_relu]    alpha = 0.3: slope below 0 (Keras's LeakyReLU; negative_slope too)
//   [elu]           alpha = 1
//   [hard_sigmoid]  slope = 0.1666..: clamp(slope x + 0.5, 0, 1) (Keras 3 and PyTorch's;
//                   Keras 2's is 0.2)
//   [hard_swish]    slope = 0.1666..: x hard_sigmoid(x) (Keras 3's hard_silu, PyTorch's
//                   Hardswish)
//   [gelu]          approximate = 0: x Phi(x) with erf; 1: its tanh approximation
//   [permute]  dims = a,b,c (required): the axes (1 C, 2 H, 3 W) reordered, as PyTorch's
//              x.permute(0, a, b, c): output axis i is input axis dims[i]
//   [dwconv]   size (required), stride = 1, pad, multiplier = 1 (output channels per input
//              channel), activation, init, bias, ...: a depthwise convolution (Keras's
//              DepthwiseConv2D)
//   [relu6]    max_value = 6: min(max(x, 0), max_value)
//   [add]      the sum of 2..4 inputs of one shape (Keras's Add), named by `from`; after the
//              first, an input of 1x1 with its channels is broadcast over its height and width
//   [subtract] [multiply] [average] [maximum]  the same for Keras's Subtract (2 inputs: the
//              first minus the second), Multiply, Average and Maximum
//   [rescale]  scale = 1, offset = 0: x * scale + offset (Keras's Rescaling)
//   [normalize] invert = 0: each channel (x - mean) / max(sqrt(variance), 1e-7) by the mean and
//              variance of its state (Keras's Normalization; 1: mean + x * that); or mean =
//              M1, M2, .. and variance = V1, V2, .. as constants (one each for up to 4
//              channels, or one for all; Keras keeps no variable then)
//   [layernorm] epsilon = 1e-3, center = 1, scale = 1: each position's channels (a vector's
//              features) standardised by their own mean and variance, times gamma plus beta
//              (Keras's LayerNormalization over the last axis)
//   [layerscale] init_values = 1e-6: each channel times a trainable factor that starts there
//              (ConvNeXt's LayerScale; init = another initializer)
//   [concat]   2..4 inputs of one height and width, their channels one after another (Keras's
//              Concatenate on the channel axis), named by `from`
//   [zeropad]  padding = N | (H, W) | ((TOP, BOTTOM), (LEFT, RIGHT)) as Keras's ZeroPadding2D
//              writes it, or top, bottom, left, right each (default 0): rows of zeros above
//              and below each plane, columns left and right
//   [softmax]  softmax + cross-entropy; must be last, over `classes` features
//   [binary_crossentropy]  sigmoid + binary cross-entropy of one logit (after a dense layer of
//              1 unit), labels 0 and 1 (classes = 2); must be last. Its output is the two
//              classes' probabilities (1 - p, p): accuracy and predictions at p > 0.5. After
//              a dense layer of k = classes units (2..24): the multi-label head, k labels of 0
//              or 1 a sample (from .npy/.npz), the loss the mean of their binary
//              cross-entropies, accuracy the share of labels right at p > 0.5
//   [batchnorm]  per channel (after conv/pool) or unit (after dense): momentum = 0.99 (Keras's:
//              moving = momentum * moving + (1 - momentum) * batch), epsilon (eps) = 1e-3,
//              center = 1 (beta), scale = 1 (gamma); as [BatchNorm2d] or [BatchNorm1d] the
//              keys are PyTorch's: momentum = 0.1 (1 - Keras's), eps = 1e-5, affine = 1
//              (gamma and beta). Statistics in training are over groups of bn_group samples.
//
// pad = same is Keras/TensorFlow's for any size and stride: output ceil(in/stride), the odd
// padding row/column at the bottom/right. bias = 0 leaves the layer without a bias tensor
// (Keras use_bias = False).
// Every layer section takes `from`, its inputs: -N (the layer N before), a layer's number or
// name, or `input` (the model's); default -1, the layer before. A graph's layers may be read by
// several later layers.
// Every layer section also takes `name` (default "conv1", "fc2", ...), and one with parameters
// (conv, dense, batchnorm) `trainable` (default 1; 0 freezes it as Keras's trainable false
// does: its parameters are not updated, and a batchnorm normalises with its moving averages in
// training too and keeps them), and `share` (a layer before it, as `from` names one: this
// layer is that one called again, computing with its parameters, which it takes with its
// settings and activation; it adds none of its own, its gradients add to that layer's, and
// only name, from and activation may be given with it; a batchnorm's state is not shared).
// An init is one of
// Keras's initialisers (model.h), by name ("he_normal", or Keras's class name "HeNormal")
// with its arguments as Keras names them where it has any: zeros, ones, constant(value),
// random_uniform(minval, maxval), random_normal(mean, stddev), truncated_normal(mean,
// stddev), glorot_uniform, glorot_normal, he_uniform, he_normal, lecun_uniform, lecun_normal,
// variance_scaling(scale, mode = fan_in|fan_out|fan_avg, distribution = truncated_normal|
// untruncated_normal|uniform), e.g. "init = random_uniform(minval = -0.1, maxval = 0.1)";
// absent arguments take Keras's defaults. init_arg/bias_arg set the first argument (constant's
// value, truncated_normal's stddev), as before.
// Aliases: [network], [convolutional], [connected]. Errors are one line: "path:LINE: ...".
//
// Keras's names work too, so a Keras model reads almost as written: the sections [Conv2D],
// [MaxPooling2D], [AveragePooling2D], [GlobalAveragePooling2D], [Dense], [Dropout], [ReLU],
// [LeakyReLU], [ELU], [Softmax], [Activation] (activation = one of the activations above: a
// layer of that kind, or nothing for linear) and [Flatten] (nothing: dense layers flatten
// their input); the keys kernel_size and pool_size (size), strides (stride), padding
// (pad: valid | same), kernel_initializer (init), bias_initializer (bias_init), and in [net]
// learning_rate (lr), batch_size (batch), validation_split (val_split). units, rate, filters,
// activation and epochs are already Keras's.
//
// inih reports neither empty nor repeated sections, so the reader below follows every
// well-formed section line with a synthetic "__section_line = N" line, which the handler
// takes as the start of a section. The reader also normalises each line (comments and
// leading blanks removed, so inih's multi-line continuation never triggers) and reports
// syntax errors with the real line number.
#include <ini.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/keras.h"
#include "nn/layer_desc.h"
#include "nn/model.h"
#include "nn/optim.h"

#define SECTION_KEY "__section_line"

// What the open section is: [net], a layer of some kind (cfg_ctx.spec.kind), or one of Keras's
// [Activation] (an activation layer, or nothing for "linear") and [Flatten] (nothing: dense
// layers flatten their input).
typedef enum sec_kind {
    SEC_NONE = -1,
    SEC_NET,
    SEC_LAYER,
    SEC_ACTIVATION,
    SEC_FLATTEN,
} sec_kind;

// Sections besides the layer kinds' own names, Keras classes and their families' other names
// (layer_desc.h).
static const struct {
    const char *name;
    sec_kind kind;
} sec_aliases[] = {
    {"net", SEC_NET},               {"network", SEC_NET},
    {"Activation", SEC_ACTIVATION}, {"Flatten", SEC_FLATTEN},
};

// Keras's argument names for [net]'s keys (a layer family's are in its key rows).
static const struct {
    const char *keras, *key;
} net_aliases[] = {
    {"learning_rate", "lr"},
    {"batch_size", "batch"},
    {"validation_split", "val_split"},
};

static const char *const net_keys[] = {"name", "input", "classes", "optimizer", "lr", "momentum",
                                       "nesterov", "decay", "beta1", "beta2", "eps", "batch",
                                       "epochs", "val_split", "conv_algo", "lr_schedule",
                                       "weight_decay", "weight_decay_mode", "bn_group", NULL};
static const char *const flatten_keys[] = {"name", NULL};
// [Activation]'s keys: name, and this row.
static const layer_key activation_row = {"activation", NULL, LK_ACTIVATION, 0, 0, 0, 0, 0, NULL};
// Every section of a family with parameters: trainable = 0 freezes the layer (Keras's
// trainable false: the optimiser leaves its parameters; a batchnorm also its moving averages,
// normalising with them in training too).
static const layer_key trainable_row = LK_ROW("trainable", NULL, LK_NOT_BOOL, 0, frozen, 0, 0);
// Every layer section: its inputs (parse_from), by default the layer before.
static const layer_key from_row = {"from", NULL, LK_PARSE, 0, 0, 0, 0, 0, NULL};
// Every section of a family with parameters: the layer whose parameters it computes with
// (parse_share), whose settings it then takes.
static const layer_key share_row = {"share", NULL, LK_PARSE, 0, 0, 0, 0, 0, NULL};

#define SEC_MAX_KEYS 24 // and below 32: `seen` has a bit per key

typedef struct cfg_ctx {
    // reader
    FILE *f;
    const char *path;
    int line;         // real line number of the line last read
    int pending;      // nonzero: next read returns the synthetic line for this section line
    char *buf;
    size_t cap;
    // parse state
    model *m;
    ht_error *err;
    int failed;
    int have_net, net_done, in_c, in_h, in_w, classes, input_set;
    char net_name[64];
    // the open section
    sec_kind kind;
    char sec_name[64]; // as written, for messages
    int sec_line, last_line;
    const char *keys[SEC_MAX_KEYS + 1]; // the section's keys, NULL-terminated
    const layer_key *rows[SEC_MAX_KEYS]; // a layer section's: each key's row (NULL: "name")
    unsigned seen;     // keys given, by index into keys
    layer_spec spec;
    char layer_name[64];
    // The spec each layer section added its layer from, and the activation it appended (-1:
    // none), by layer index (a shared layer's later calls take their first call's); n_specs.
    struct kept_spec {
        layer_spec s;
        int act;
    } *specs;
    int n_specs;
    int act_after;    // the kind of the activation `activation =` appends, or -1
    int w_arg_set, b_arg_set; // init_arg/bias_arg given: applied after init/bias_init
    float w_arg, b_arg;
    const char *key_shown;    // the key as written (a Keras alias), for messages
} cfg_ctx;

static int cfg_fail(cfg_ctx *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cfg_fail(cfg_ctx *c, int line, const char *fmt, ...) {
    if (c->failed) return -1;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return ht_fail(c->err, "%s:%d: %s", c->path, line, msg);
}

// ---- reader --------------------------------------------------------------------------------

static char *cfg_read(char *str, int num, void *stream) {
    cfg_ctx *c = stream;
    if (c->failed) return NULL;
    if (c->pending) {
        snprintf(str, (size_t)num, "%s = %d\n", SECTION_KEY, c->pending);
        c->pending = 0;
        return str;
    }
    if (getline(&c->buf, &c->cap, c->f) < 0) return NULL;
    char *s = c->buf;
    c->line++;
    if (c->line == 1 && !strncmp(s, "\xEF\xBB\xBF", 3)) s += 3;
    for (char *p = s; *p; p++) // a comment starts at ; or # at line start or after a blank
        if ((*p == ';' || *p == '#') && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
            *p = 0;
            break;
        }
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
    if (n + 3 > (size_t)num) {
        cfg_fail(c, c->line, "line too long (at most %d characters)", num - 3);
        return NULL;
    }
    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (!close || close[1]) {
            cfg_fail(c, c->line, "expected \"[section]\", found \"%.60s\"", s);
            return NULL;
        }
        c->pending = c->line;
    } else if (s[0] && !strpbrk(s, "=:")) {
        cfg_fail(c, c->line, "expected \"key = value\" or \"[section]\", found \"%.60s\"", s);
        return NULL;
    } else if (!strncmp(s, SECTION_KEY, strlen(SECTION_KEY))) {
        cfg_fail(c, c->line, "\"%s\" is reserved", SECTION_KEY);
        return NULL;
    }
    snprintf(str, (size_t)num, "%s\n", s);
    return str;
}

// ---- values --------------------------------------------------------------------------------

#define SHOWN(key) (c->key_shown ? c->key_shown : (key))

static int parse_int(cfg_ctx *c, const char *key, const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return cfg_fail(c, c->line, "[%s] %s: expected an integer %d..%d, found \"%.40s\"",
                        c->sec_name, SHOWN(key), lo, hi, v);
    *out = (int)x;
    return 0;
}

// lo_open/hi_open: whether the bound itself is excluded (layer_desc.h's checks, whose
// messages the families' own keys share).
static int parse_float(cfg_ctx *c, const char *key, const char *v, double lo, int lo_open,
                       double hi, int hi_open, float *out) {
    char msg[400];
    layer_key_in in = {c->sec_name, SHOWN(key), v, msg, sizeof msg};
    if (layer_key_number(&in, lo, lo_open, hi, hi_open, out))
        return cfg_fail(c, c->line, "%s", msg);
    return 0;
}

// Index of v in the NULL-terminated names, or an error listing them.
static int parse_choice(cfg_ctx *c, const char *key, const char *v, const char *const *names,
                        int *out) {
    char msg[400];
    layer_key_in in = {c->sec_name, SHOWN(key), v, msg, sizeof msg};
    if (layer_key_choice(&in, names, out)) return cfg_fail(c, c->line, "%s", msg);
    return 0;
}

// An initialiser's arguments as written in "name(key = value, ...)".
typedef struct init_args {
    int n;
    char key[8][24], val[8][48];
    unsigned used;
} init_args;

static int init_args_get(void *ctx, const char *key, double *num, const char **str) {
    init_args *a = ctx;
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->key[i], key)) continue;
        a->used |= 1u << i;
        char *end;
        errno = 0;
        double x = strtod(a->val[i], &end);
        if (a->val[i][0] && !*end && !errno) {
            *num = x;
            return 1;
        }
        *str = a->val[i];
        return 2;
    }
    return 0;
}

static void trim(char *s) {
    size_t n = strlen(s), i = 0;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    while (s[i] == ' ' || s[i] == '\t') i++;
    memmove(s, s + i, n - i + 1);
}

// An initialiser as Keras names it, bare ("he_normal", "GlorotUniform") or with its arguments
// ("random_uniform(minval = -0.1, maxval = 0.1)"); model_init_keras_name knows the names.
static int parse_init(cfg_ctx *c, const char *key, const char *v, init_desc *d) {
    char name[64], why[300];
    init_args a = {0};
    const char *open = strchr(v, '(');
    size_t n = open ? (size_t)(open - v) : strlen(v);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, v, n);
    name[n] = 0;
    trim(name);
    if (open) {
        const char *close = strrchr(open, ')');
        if (!close || close[1])
            return cfg_fail(c, c->line, "[%s] %s: expected NAME or NAME(KEY = VALUE, ...), "
                            "found \"%.60s\"", c->sec_name, SHOWN(key), v);
        for (const char *p = open + 1; p < close && a.n < 8;) {
            const char *comma = memchr(p, ',', (size_t)(close - p));
            const char *end = comma ? comma : close;
            const char *eq = memchr(p, '=', (size_t)(end - p));
            if (!eq || eq - p >= 24 || end - eq > 48)
                return cfg_fail(c, c->line, "[%s] %s: expected KEY = VALUE in \"%.*s\"",
                                c->sec_name, SHOWN(key), (int)(end - p > 40 ? 40 : end - p), p);
            snprintf(a.key[a.n], sizeof a.key[0], "%.*s", (int)(eq - p), p);
            snprintf(a.val[a.n], sizeof a.val[0], "%.*s", (int)(end - eq - 1), eq + 1);
            trim(a.key[a.n]);
            trim(a.val[a.n]);
            a.n++;
            p = comma ? comma + 1 : close;
            if (comma && a.n == 8)
                return cfg_fail(c, c->line, "[%s] %s: at most 8 arguments", c->sec_name,
                                SHOWN(key));
        }
    }
    if (model_init_keras_name(d, name, init_args_get, &a, why, sizeof why))
        return cfg_fail(c, c->line, "[%s] %s: %s", c->sec_name, SHOWN(key), why);
    for (int i = 0; i < a.n; i++)
        if (!(a.used >> i & 1) && strcmp(a.key[i], "seed"))
            return cfg_fail(c, c->line, "[%s] %s: %s takes no argument \"%s\"", c->sec_name,
                            SHOWN(key), init_kind_names[d->kind], a.key[i]);
    return 0;
}

static int parse_input(cfg_ctx *c, const char *v) {
    int d[3];
    const char *p = v;
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        int sep_ok = i < 2 ? (*end == 'x' || *end == 'X') : *end == 0;
        if (end == p || errno || x < 1 || x > 65536 || !sep_ok)
            return cfg_fail(c, c->line,
                            "[%s] input: expected CxHxW with each 1..65536, found \"%.40s\"",
                            c->sec_name, v);
        d[i] = (int)x;
        p = end + 1;
    }
    c->in_c = d[0], c->in_h = d[1], c->in_w = d[2], c->input_set = 1;
    return 0;
}

// ---- sections ------------------------------------------------------------------------------

static int net_key(cfg_ctx *c, const char *key, const char *v) {
    train_setup *s = &c->m->setup;
    int i;
    if (!strcmp(key, "name")) {
        if (!*v || strlen(v) >= sizeof c->net_name)
            return cfg_fail(c, c->line, "[%s] name: expected 1..%zu characters", c->sec_name,
                            sizeof c->net_name - 1);
        strcpy(c->net_name, v);
        return 0;
    }
    if (!strcmp(key, "input")) return parse_input(c, v);
    if (!strcmp(key, "classes")) return parse_int(c, key, v, 2, 256, &c->classes);
    if (!strcmp(key, "optimizer")) {
        static const char *const names[] = {[OPTIM_SGD] = "sgd", [OPTIM_ADAM] = "adam", NULL};
        char low[16]; // Keras's class names SGD and Adam too
        size_t n = 0;
        for (; v[n] && n + 1 < sizeof low; n++)
            low[n] = (char)(v[n] >= 'A' && v[n] <= 'Z' ? v[n] - 'A' + 'a' : v[n]);
        low[n] = 0;
        if (parse_choice(c, key, v[n] ? v : low, names, &i)) return -1;
        s->optim = (optim_kind)i;
        return 0;
    }
    if (!strcmp(key, "nesterov")) {
        static const char *const names[] = {"0", "1", "false", "true", "no", "yes", NULL};
        if (parse_choice(c, key, v, names, &i)) return -1;
        s->nesterov = i % 2;
        return 0;
    }
    if (!strcmp(key, "lr")) return parse_float(c, key, v, 0, 1, 100, 0, &s->lr);
    if (!strcmp(key, "momentum")) return parse_float(c, key, v, 0, 0, 1, 1, &s->momentum);
    if (!strcmp(key, "decay")) return parse_float(c, key, v, 0, 0, 1, 0, &s->decay);
    if (!strcmp(key, "beta1")) return parse_float(c, key, v, 0, 0, 1, 1, &s->beta1);
    if (!strcmp(key, "beta2")) return parse_float(c, key, v, 0, 0, 1, 1, &s->beta2);
    if (!strcmp(key, "eps")) return parse_float(c, key, v, 0, 1, 1, 0, &s->eps);
    if (!strcmp(key, "batch")) return parse_int(c, key, v, 1, 1 << 24, &s->batch);
    if (!strcmp(key, "epochs")) return parse_int(c, key, v, 1, 1000000, &s->epochs);
    if (!strcmp(key, "val_split")) return parse_float(c, key, v, 0, 0, 1, 1, &s->val_split);
    if (!strcmp(key, "conv_algo")) {
        if (parse_choice(c, key, v, conv_algo_names, &i)) return -1;
        s->conv_algo = (conv_algo)i;
        return 0;
    }
    if (!strcmp(key, "lr_schedule")) {
        ht_error le;
        if (lr_schedule_parse(&s->sched, v, &le) < 0)
            return cfg_fail(c, c->line, "[%s] %s: %s", c->sec_name, key, le.msg);
        return 0;
    }
    if (!strcmp(key, "weight_decay")) return parse_float(c, key, v, 0, 0, 1, 0, &s->weight_decay);
    if (!strcmp(key, "weight_decay_mode")) {
        static const char *const names[] = {[WD_L2] = "l2", [WD_DECOUPLED] = "decoupled", NULL};
        if (parse_choice(c, key, v, names, &i)) return -1;
        s->wd_mode = (wd_mode)i;
        return 0;
    }
    if (!strcmp(key, "bn_group")) return parse_int(c, key, v, 1, 1 << 20, &s->bn_group);
    return cfg_fail(c, c->line, "[%s] %s: not handled", c->sec_name, key); // table out of sync
}

// An earlier layer as `from` and `share` name it (t trimmed): -N (the layer N before this one:
// -1 the layer before), a layer's number (0, 1, ...: summary's #), a layer's name, or (from
// alone) `input`, the model's: MODEL_INPUT.
static int parse_layer_ref(cfg_ctx *c, const char *key, const char *t, int *out) {
    const int idx = c->m->n_layers; // this section's layer, when it is added
    const int input = !strcmp(key, "from");
    char *end;
    long k = strtol(t, &end, 10);
    if (input && !strcmp(t, "input")) {
        *out = MODEL_INPUT;
    } else if (*t && !*end) {
        if (k < 0 ? idx + k < (input ? MODEL_INPUT : 0) : k >= idx)
            return cfg_fail(c, c->line, "[%s] %s: %s: expected an earlier layer (-1..-%d, or "
                            "0..%d)%s", c->sec_name, key, t, idx + input, idx - 1,
                            input ? ", or input" : "");
        *out = k < 0 ? (int)(idx + k) : (int)k;
    } else {
        *out = -2;
        for (int l = 0; l < idx && *out == -2; l++)
            if (!strcmp(c->m->layers[l].name, t)) *out = l;
        if (*out == -2)
            return cfg_fail(c, c->line, "[%s] %s: no layer before this one is named \"%.40s\"",
                            c->sec_name, key, t);
    }
    return 0;
}

static void trim_ends(char **t) {
    while (**t == ' ' || **t == '\t') (*t)++;
    size_t n = strlen(*t);
    while (n && ((*t)[n - 1] == ' ' || (*t)[n - 1] == '\t')) (*t)[--n] = 0;
}

// share = the layer (parse_layer_ref) whose parameters this one computes with: a layer called
// again, as Keras calls a shared layer. The section then takes that layer's settings.
static int parse_share(cfg_ctx *c, const char *v) {
    char t[64];
    snprintf(t, sizeof t, "%s", v);
    char *p = t;
    trim_ends(&p);
    int l;
    if (parse_layer_ref(c, "share", p, &l)) return -1;
    c->spec.share = l + 1;
    return 0;
}

// from = the layer's inputs, comma-separated (parse_layer_ref's).
static int parse_from(cfg_ctx *c, const char *v) {
    layer_spec *s = &c->spec;
    char list[512];
    snprintf(list, sizeof list, "%s", v);
    s->n_from = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        trim_ends(&t);
        if (s->n_from == MODEL_MAX_IN)
            return cfg_fail(c, c->line, "[%s] from: more than %d inputs", c->sec_name,
                            MODEL_MAX_IN);
        if (parse_layer_ref(c, "from", t, &s->from[s->n_from])) return -1;
        s->n_from++;
    }
    if (!s->n_from)
        return cfg_fail(c, c->line, "[%s] from: expected the layer's inputs (-1, a layer's name "
                        "or number, input), found nothing", c->sec_name);
    return 0;
}

// A key of a layer section, read as its family's row says (layer_desc.h); row NULL: "name".
static int section_key(cfg_ctx *c, const layer_key *row, const char *key, const char *v) {
    layer_spec *s = &c->spec;
    int i;
    if (row == &from_row) return parse_from(c, v);
    if (row == &share_row) return parse_share(c, v);
    if (!row) {
        if (!*v || strlen(v) > 31)
            return cfg_fail(c, c->line, "[%s] name: expected 1..31 characters, found \"%.40s\"",
                            c->sec_name, v);
        strcpy(c->layer_name, v);
        s->name = c->layer_name;
        return 0;
    }
    char *field = (char *)s + row->off;
    if (row->set) *(int *)((char *)s + row->set) = 1;
    switch (row->type) {
    case LK_INT:
        return parse_int(c, key, v, (int)row->lo, (int)row->hi, (int *)field);
    case LK_FLOAT:
        return parse_float(c, key, v, row->lo, !!(row->flags & LK_LO_OPEN), row->hi,
                           !!(row->flags & LK_HI_OPEN), (float *)field);
    case LK_NOT_BOOL: {
        static const char *const names[] = {"0", "1", "false", "true", NULL}; // use_bias too
        if (parse_choice(c, key, v, names, &i)) return -1;
        *(int *)field = i % 2 == 0;
        return 0;
    }
    case LK_PAD: {
        if (!strcmp(v, "same") || !strcmp(v, "valid")) {
            *(int *)field = v[0] == 's' ? -1 : 0;
            return 0;
        }
        char *end;
        long x = strtol(v, &end, 10);
        if (!*v || *end || x < 0 || x > 64)
            return cfg_fail(c, c->line, "[%s] %s: expected an integer 0..64, \"same\" or "
                            "\"valid\", found \"%.40s\"", c->sec_name, SHOWN(key), v);
        *(int *)field = (int)x;
        return 0;
    }
    case LK_ACTIVATION: {
        // linear, then the activations in layer_kinds.h's order ("linear|relu|...|softmax").
        const char *names[LAYER_KIND_COUNT + 2];
        int kinds[LAYER_KIND_COUNT + 1], n = 0;
        names[n] = "linear", kinds[n++] = -1;
        for (int k = 0; k < LAYER_KIND_COUNT; k++)
            if (layer_flags((layer_kind)k) & LF_ACTIVATION)
                names[n] = layer_desc_of((layer_kind)k)->name, kinds[n++] = k;
        names[n] = NULL;
        if (!strcmp(v, "silu")) v = "swish"; // Keras 3's names for them
        if (!strcmp(v, "hard_silu")) v = "hard_swish";
        if (parse_choice(c, key, v, names, &i)) return -1;
        c->act_after = kinds[i];
        return 0;
    }
    case LK_W_INIT:
    case LK_B_INIT: {
        init_desc d;
        if (parse_init(c, key, v, &d)) return -1;
        if (row->type == LK_W_INIT)
            s->w_init = d.kind, s->w_arg = d.arg, s->w_arg2 = d.arg2, s->w_vs = d.vs;
        else
            s->b_init = d.kind, s->b_arg = d.arg, s->b_arg2 = d.arg2, s->b_vs = d.vs;
        return 0;
    }
    // Kept aside until the section ends, so that they win over the init's defaults in any order.
    case LK_W_ARG:
        c->w_arg_set = 1;
        return parse_float(c, key, v, -1e6, 0, 1e6, 0, &c->w_arg);
    case LK_B_ARG:
        c->b_arg_set = 1;
        return parse_float(c, key, v, -1e6, 0, 1e6, 0, &c->b_arg);
    case LK_PARSE: {
        char msg[400];
        layer_key_in in = {c->sec_name, SHOWN(key), v, msg, sizeof msg};
        if (row->parse(s, &in)) return cfg_fail(c, c->line, "%s", msg);
        return 0;
    }
    }
    return cfg_fail(c, c->line, "[%s] %s: not handled", c->sec_name, key);
}

// Keeps the spec layer `at` was added from and its activation (share_spec's), its name not
// kept (the section's buffer).
static int keep_spec(cfg_ctx *c, int at, const layer_spec *s) {
    if (at >= c->n_specs) {
        struct kept_spec *grown = realloc(c->specs, sizeof *grown * (size_t)(at + 1));
        if (!grown) return ht_fail(c->err, "out of memory");
        memset(grown + c->n_specs, 0, sizeof *grown * (size_t)(at + 1 - c->n_specs));
        c->specs = grown;
        c->n_specs = at + 1;
    }
    c->specs[at] = (struct kept_spec){*s, c->act_after};
    c->specs[at].s.name = NULL;
    return 0;
}

// A section with share: the settings of the layer it shares and its activation, with its own
// name and inputs (and its own activation, if given). Any other key is refused: the layer is
// that layer called again.
static int share_spec(cfg_ctx *c) {
    layer_spec *s = &c->spec;
    const int owner = s->share - 1;
    int act_given = 0;
    if (owner >= c->n_specs || c->m->layers[owner].kind != s->kind ||
        c->specs[owner].s.kind != s->kind)
        return cfg_fail(c, c->sec_line, "[%s] share = %s: a %s layer: a layer shares the "
                        "parameters of a layer of its kind", c->sec_name,
                        c->m->layers[owner].name, model_kind_name(c->m->layers[owner].kind));
    for (int r = 0; c->keys[r]; r++) {
        if (!(c->seen >> r & 1u) || !c->rows[r] || c->rows[r] == &from_row ||
            c->rows[r] == &share_row)
            continue;
        if (c->rows[r]->type == LK_ACTIVATION) {
            act_given = 1;
            continue;
        }
        return cfg_fail(c, c->sec_line, "[%s] %s: a layer that shares another's parameters "
                        "(share = %s) takes that layer's settings: give it name, from and "
                        "activation alone", c->sec_name, c->keys[r], c->m->layers[owner].name);
    }
    layer_spec own = c->specs[owner].s;
    if (!act_given) c->act_after = c->specs[owner].act;
    own.name = s->name;
    own.n_from = s->n_from;
    memcpy(own.from, s->from, sizeof own.from);
    own.share = s->share;
    *s = own;
    return 0;
}

// Applies the section that just ended: [net] starts the model, a layer section adds its layer.
static int close_section(cfg_ctx *c) {
    ht_error *err = c->err;
    model *m = c->m;
    if (c->kind == SEC_NONE) return 0;
    if (c->kind == SEC_NET) {
        if (!c->input_set)
            return cfg_fail(c, c->sec_line, "[%s] input missing: give it as CxHxW, e.g. "
                            "input = 1x28x28", c->sec_name);
        train_setup setup = m->setup;
        if (model_begin(m, c->net_name, c->in_c, c->in_h, c->in_w, c->classes, err)) {
            c->failed = 1;
            return ht_wrap(err, "%s:%d", c->path, c->sec_line);
        }
        m->setup = setup;
        c->net_done = 1;
        return 0;
    }
    if (c->kind == SEC_FLATTEN) return 0;
    layer_spec *s = &c->spec;
    if (c->w_arg_set) s->w_arg = c->w_arg;
    if (c->b_arg_set) s->b_arg = c->b_arg;
    if (c->kind == SEC_ACTIVATION) {
        if (!(c->seen & 2u)) return cfg_fail(c, c->sec_line, "[%s] needs activation", c->sec_name);
        if (c->act_after < 0) return 0;
        s->kind = (layer_kind)c->act_after;
        if (model_add(m, s, err)) {
            c->failed = 1;
            return ht_wrap(err, "%s:%d", c->path, c->sec_line);
        }
        c->last_line = c->sec_line;
        return 0;
    }
    if (s->share && share_spec(c)) return -1;
    // Every key the family requires was given ("needs filters and size").
    for (int r = 0; !s->share && c->keys[r]; r++) {
        if (!c->rows[r] || !(c->rows[r]->flags & LK_REQUIRED) || (c->seen >> r & 1u)) continue;
        char need[96] = "";
        for (int i = 0, n = 0; c->keys[i]; i++)
            if (c->rows[i] && (c->rows[i]->flags & LK_REQUIRED))
                n += snprintf(need + n, sizeof need - (size_t)n, "%s%s", n ? " and " : "",
                              c->keys[i]);
        return cfg_fail(c, c->sec_line, "[%s] needs %s", c->sec_name, need);
    }
    layer_spec after = {.kind = (layer_kind)(c->act_after >= 0 ? c->act_after : 0)};
    const int at = m->n_layers;
    if (model_add(m, s, err) || keep_spec(c, at, s) ||
        (c->act_after >= 0 && model_add(m, &after, err))) {
        c->failed = 1;
        return ht_wrap(err, "%s:%d", c->path, c->sec_line);
    }
    c->last_line = c->sec_line;
    return 0;
}

// The list of sections for the message about an unknown one.
static const char *section_list(void) {
    static char list[700];
    if (list[0]) return list;
    size_t n = (size_t)snprintf(list, sizeof list, "expected [net]");
    for (int k = 0; k < LAYER_KIND_COUNT && n < sizeof list; k++)
        n += (size_t)snprintf(list + n, sizeof list - n, ", [%s]", layer_descs[k].name);
    n += (size_t)snprintf(list + n, sizeof list - n, ", or Keras's");
    for (int k = 0; k < LAYER_KIND_COUNT && n < sizeof list; k++)
        if (layer_descs[k].keras_class)
            n += (size_t)snprintf(list + n, sizeof list - n, " [%s],", layer_descs[k].keras_class);
    if (n < sizeof list) snprintf(list + n, sizeof list - n, " [Activation], [Flatten]");
    return list;
}

// The keys of the open section: name, then its family's (of them, the act family's parameter
// its kind takes), then trainable where the family has parameters.
static void section_keys(cfg_ctx *c) {
    const char *const *from = c->kind == SEC_NET ? net_keys : c->kind == SEC_FLATTEN ? flatten_keys
                                                                                       : NULL;
    int n = 0;
    if (from) {
        while (from[n] && n < SEC_MAX_KEYS) c->rows[n] = NULL, c->keys[n] = from[n], n++;
    } else if (c->kind == SEC_ACTIVATION) {
        c->rows[n] = NULL, c->keys[n++] = "name";
        c->rows[n] = &activation_row, c->keys[n++] = activation_row.key;
    } else {
        const layer_desc *d = layer_desc_of(c->spec.kind);
        c->rows[n] = NULL, c->keys[n++] = "name";
        for (const layer_key *r = d->family->keys; r->key && n < SEC_MAX_KEYS; r++)
            if (!(r->flags & LK_KIND_PARAM) || (d->param_key && !strcmp(r->key, d->param_key)))
                c->rows[n] = r, c->keys[n++] = r->key;
        if ((d->family->flags & LF_PARAMS) && n < SEC_MAX_KEYS)
            c->rows[n] = &trainable_row, c->keys[n++] = trainable_row.key;
        if ((d->family->flags & LF_PARAMS) && n < SEC_MAX_KEYS)
            c->rows[n] = &share_row, c->keys[n++] = share_row.key;
        if (n < SEC_MAX_KEYS) c->rows[n] = &from_row, c->keys[n++] = from_row.key;
    }
    c->keys[n] = NULL;
}

static int open_section(cfg_ctx *c, const char *section, int line) {
    if (close_section(c)) return -1;
    while (*section == ' ' || *section == '\t') section++;
    size_t n = strlen(section);
    while (n && (section[n - 1] == ' ' || section[n - 1] == '\t')) n--;
    snprintf(c->sec_name, sizeof c->sec_name, "%.*s", (int)n, section);
    c->sec_line = line;
    c->kind = SEC_NONE;
    int lk = layer_kind_by_name(c->sec_name, 1);
    if (lk >= 0) c->kind = SEC_LAYER;
    for (int k = 0; lk < 0 && k < LAYER_KIND_COUNT; k++) { // its family's other names
        const layer_family *f = layer_descs[k].family;
        int first = 1; // they name the family's first kind
        for (int j = 0; j < k; j++) first &= layer_descs[j].family != f;
        for (int i = 0; first && f->sections && f->sections[i]; i++)
            if (!strcmp(c->sec_name, f->sections[i])) c->kind = SEC_LAYER, lk = k;
    }
    for (size_t i = 0; lk < 0 && i < sizeof sec_aliases / sizeof sec_aliases[0]; i++)
        if (!strcmp(c->sec_name, sec_aliases[i].name)) {
            c->kind = sec_aliases[i].kind;
            lk = 0;
        }
    if (c->kind == SEC_NONE)
        return cfg_fail(c, line, "unknown section [%s]; %s", c->sec_name, section_list());
    if (c->kind == SEC_NET && c->have_net)
        return cfg_fail(c, line, "second [%s] section", c->sec_name);
    if (c->kind != SEC_NET && !c->have_net)
        return cfg_fail(c, line, "[%s] before [net]: the file must start with [net]",
                        c->sec_name);
    c->seen = 0;
    c->act_after = -1;
    c->w_arg_set = c->b_arg_set = 0;
    c->layer_name[0] = 0;
    c->spec = (layer_spec){.kind = (layer_kind)(lk > 0 ? lk : 0)};
    section_keys(c);
    if (c->kind == SEC_NET) {
        c->have_net = 1;
        c->classes = 10;
        // Begin with a placeholder input just to get the default setup for keys to override.
        if (model_begin(c->m, c->net_name, 1, 1, 1, 10, c->err)) {
            c->failed = 1;
            return ht_wrap(c->err, "%s:%d", c->path, line);
        }
        return 0;
    }
    c->spec.w_init = INIT_GLOROT_UNIFORM;
    c->spec.b_init = INIT_ZEROS;
    const layer_family *f = layer_desc_of(c->spec.kind)->family;
    if (c->kind == SEC_LAYER && f->config_defaults) f->config_defaults(&c->spec, c->sec_name);
    return 0;
}

// Returns 0 (inih: error) once anything failed; the message itself is in c->err.
static int cfg_handler(void *user, const char *section, const char *key, const char *value) {
    cfg_ctx *c = user;
    if (c->failed) return 0;
    if (!strcmp(key, SECTION_KEY)) {
        open_section(c, section, atoi(value));
        return !c->failed;
    }
    if (c->kind == SEC_NONE) {
        cfg_fail(c, c->line, "key \"%.40s\" outside any section", key);
        return 0;
    }
    const char *written = key;
    for (size_t i = 0; c->kind == SEC_NET && i < sizeof net_aliases / sizeof net_aliases[0]; i++)
        if (!strcmp(key, net_aliases[i].keras)) key = net_aliases[i].key;
    for (int i = 0; c->kind == SEC_LAYER && c->keys[i]; i++)
        if (c->rows[i] && c->rows[i]->alias && !strcmp(key, c->rows[i]->alias)) key = c->keys[i];
    const char *const *keys = c->keys;
    int k = 0;
    while (keys[k] && strcmp(keys[k], key)) k++;
    if (!keys[k]) {
        char list[200] = "";
        size_t len = 0;
        for (int i = 0; keys[i] && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", keys[i]);
        cfg_fail(c, c->line, "[%s] unknown key \"%.40s\"; expected one of: %s", c->sec_name,
                 written, list);
        return 0;
    }
    if (c->seen & (1u << k)) {
        cfg_fail(c, c->line, "[%s] %s given twice", c->sec_name, written);
        return 0;
    }
    c->seen |= 1u << k;
    c->key_shown = written;
    if (c->kind == SEC_NET) net_key(c, key, value);
    else section_key(c, c->rows[k], key, value);
    c->key_shown = NULL;
    return !c->failed;
}

int model_init_config(model *m, const char *path, ht_error *err) {
    memset(m, 0, sizeof *m);
    cfg_ctx c = {.path = path, .m = m, .err = err, .kind = SEC_NONE};
    c.f = fopen(path, "r");
    if (!c.f) return ht_fail(err, "%s: cannot open model config: %s", path, strerror(errno));

    // Default model name: the file's base name without its extension.
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *dot = strrchr(base, '.');
    int len = (int)(dot && dot != base ? (size_t)(dot - base) : strlen(base));
    snprintf(c.net_name, sizeof c.net_name, "%.*s", len, base);
    if (!c.net_name[0]) snprintf(c.net_name, sizeof c.net_name, "model");

    int rc = ini_parse_stream(cfg_read, &c, cfg_handler, &c);
    if (!c.failed && ferror(c.f)) cfg_fail(&c, c.line, "read error: %s", strerror(errno));
    fclose(c.f);
    free(c.buf);
    if (!c.failed) close_section(&c);
    free(c.specs);
    if (!c.failed && !c.have_net)
        cfg_fail(&c, c.line > 0 ? c.line : 1, "no [net] section: the file must start with [net]");
    if (!c.failed && rc != 0) // the reader checks what inih would reject; this is a backstop
        cfg_fail(&c, c.line, "cannot parse the file (inih error %d)", rc);
    if (!c.failed && model_finish(m, err)) {
        c.failed = 1;
        ht_wrap(err, "%s:%d", path, c.last_line ? c.last_line : c.sec_line);
    }
    if (c.failed) {
        model_free(m);
        return -1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// The folders of the models hetrain ships (models/*.cfg): installed beside the binary
// (<exe>/../share/hetrain/models), or the source tree's.
static int model_dirs(char dirs[][PATH_MAX]) {
    int n = 0;
    char exe[PATH_MAX];
    if (ht_exe_dir(exe, sizeof exe) == 0)
        snprintf(dirs[n++], PATH_MAX, "%.4000s/../share/hetrain/models", exe);
#ifdef HT_SOURCE_DIR
    snprintf(dirs[n++], PATH_MAX, "%s/models", HT_SOURCE_DIR);
#endif
    return n;
}

int model_init(model *m, const char *name_or_path, ht_error *err) {
    memset(m, 0, sizeof *m);
    if (!name_or_path) return model_init_preset(m, NULL, err); // names the presets
    if (ends_with(name_or_path, ".json")) return model_init_keras(m, name_or_path, err);
    if (ends_with(name_or_path, ".cfg") || ends_with(name_or_path, ".ini") ||
        strchr(name_or_path, '/'))
        return model_init_config(m, name_or_path, err);
    // A name that is no built-in preset: models/<name>.cfg (resnet20, mobilenetv2, ...).
    char dirs[2][PATH_MAX], path[PATH_MAX + 80];
    const int nd = model_is_preset(name_or_path) ? 0 : model_dirs(dirs);
    for (int i = 0; i < nd && strlen(name_or_path) <= 64; i++) {
        snprintf(path, sizeof path, "%.4000s/%.64s.cfg", dirs[i], name_or_path);
        if (access(path, R_OK) == 0) return model_init_config(m, path, err);
    }
    if (model_init_preset(m, name_or_path, err) == 0) return 0;
    if (nd) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        ht_fail(err, "%s, or the name of a model in %s (resnet20, mobilenetv2, ...)", why,
                dirs[nd - 1]);
    }
    return -1;
}
