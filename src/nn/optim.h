// Host optimizers over the flat parameter buffer: SGD with momentum, Nesterov and Keras-style
// decay; Adam (TensorFlow's formulation).
#ifndef HETRAIN_OPTIM_H
#define HETRAIN_OPTIM_H

#include <stddef.h>

#include "core/common.h"
#include "nn/model.h"

// A stretch of the flat buffer [off, off + n): whether weight decay applies to it (a kernel),
// whether it is frozen (Keras trainable = false: no update, its moments untouched), and its
// Keras regularizer's factors (the gradient gets l1 * sign(p) + 2 * l2 * p).
typedef struct optim_span {
    size_t off, n;
    int decay;
    int frozen;
    float l1, l2;
} optim_span;

typedef struct optim {
    train_setup s;
    size_t n;
    float *m;     // SGD velocity / Adam first moment, n floats
    float *v;     // Adam second moment, n floats (NULL for SGD)
    long t;       // updates done so far
    double sched; // the schedule's factor on lr for the next step (1: none; optim_set_lr_factor)
    optim_span *spans; // the buffer in order, from the model (NULL: all of it alike, decayed
                       // with weight decay)
    int n_spans;
    int special; // a span is frozen or regularized: the update goes by spans even without W
} optim;

int optim_init(optim *o, const train_setup *s, size_t n, ht_error *e);
void optim_free(optim *o);

// Takes the spans of the update from m (which must have o->n trainable parameters): weight
// decay (s->weight_decay > 0) on m's kernels only (conv and dense weights, not biases; without
// this call on every parameter), no update for frozen layers' parameters (their moments stay
// as they are), and each layer's regularizers' gradient added to its parameters' mean
// gradient. A model with none of these updates exactly as without the call.
int optim_use_model(optim *o, const model *m, ht_error *e);
// The same (its older name, when only weight decay went by the model).
int optim_decay_kernels(optim *o, const model *m, ht_error *e);

// Learning rate the next step will use: lr * f / (1 + decay * t), f the schedule's factor.
// For Adam this is the rate before its bias correction (the rate Keras and PyTorch report).
float optim_lr(const optim *o);

// The schedule's factor for the following steps (lr_schedule_factor).
void optim_set_lr_factor(optim *o, double f);

// One update with the *mean* gradient g (n floats), lr' = lr * f (f the schedule's factor):
// SGD (Keras):  lr_t = lr'/(1+decay*t); v = momentum*v - lr_t*g;
//               p += nesterov ? momentum*v - lr_t*g : v
// Adam (TF):    t += 1; lr_t = lr_dec * sqrt(1-beta2^t)/(1-beta1^t), lr_dec = lr'/(1+decay*(t-1));
//               m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr_t * m / (sqrt(v) + eps)
// Weight decay W on a kernel element p (in the same pass): L2 first sets g += W*p; decoupled
// adds -lr_d*W*p to the update, with p the value before the step and lr_d the rate without
// Adam's bias correction (SGD: lr_t; Adam: lr_dec), as PyTorch's AdamW. W = 0 leaves the
// update as it was without weight decay, bit for bit.
// A Keras regularizer (optim_use_model) adds its gradient at p, the value before the step, to
// the mean gradient as L2 decay does: g += l1 * sign(p) + 2 * l2 * p (sign(0) = 0, as
// TensorFlow and PyTorch differentiate |p|; JAX takes 1). A frozen span is skipped: p, m, v
// stay as they are (t still counts every step, as Keras's iterations do).
void optim_step(optim *o, float *params, const float *g);
// The same for the gradient g * scale (scale applied element by element, as a separate pass
// would): the engine hands in the gradient sum and 1/B, which saves a pass over the buffer.
// The same update, of elements [lo, hi) only (their moments too; the step count advances as for
// a whole update): each element's new value is the bits a whole update gives it. Several ranks
// each update their own slice with it (ZeRO stage 1).
void optim_step_range(optim *o, float *params, const float *g, float scale, size_t lo,
                      size_t hi);
// The same over several ranges at once (disjoint, each within [0, n)), one step: a rank that
// updates its slice and the layers every rank holds whole (sharding/engine_reduce.c).
void optim_step_ranges(optim *o, float *params, const float *g, float scale,
                       const size_t (*ranges)[2], int n_ranges);
void optim_step_scaled(optim *o, float *params, const float *g, float scale);

// Learning-rate schedules (--lr-schedule, a config's lr_schedule), as a factor f on lr; epoch
// counts from 0, step is the step's index in the run (from 0) and total the run's steps:
//   none       f = 1
//   step:E:G   f = G^floor(epoch / E)   (E >= 1 epochs, 0 < G <= 1)
//   exp:G      f = G^epoch              (0 < G <= 1)
//   cosine     f = 0.5 * (1 + cos(pi * step / total)): lr at the first step, towards 0 at the end
// Returns 0, or -1 with a one-line error quoting text.
int lr_schedule_parse(lr_schedule *s, const char *text, ht_error *e);
// The schedule as lr_schedule_parse reads it back, exactly ("none", "step:3:0.5", ...).
void lr_schedule_text(const lr_schedule *s, char *buf, size_t len);
double lr_schedule_factor(const lr_schedule *s, int epoch, long step, long total);

// --optimizer: NAME[:KEY=VALUE,...] replaces s's optimizer by Keras's with Keras's defaults,
// then the keys: sgd (learning_rate 0.01, momentum 0, nesterov 0, decay 0) or adam
// (learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7, decay 0); keys lr or
// learning_rate, momentum and nesterov (0|1|false|true) for sgd, beta1/beta_1, beta2/beta_2
// and eps/epsilon for adam, decay for both ("adam:epsilon=1e-8", "sgd:momentum=0.9,nesterov=1").
// Names are case-blind (Keras's SGD, Adam). Returns 0, or -1 with a one-line error (s untouched).
int optimizer_parse(train_setup *s, const char *spec, ht_error *e);

#endif
