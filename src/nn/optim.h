// Host optimizers over the flat parameter buffer: SGD with momentum, Nesterov and Keras-style
// decay; Adam (TensorFlow's formulation).
#ifndef HETRAIN_OPTIM_H
#define HETRAIN_OPTIM_H

#include <stddef.h>

#include "common.h"
#include "model.h"

// A stretch of the flat buffer [off, off + n) and whether weight decay applies to it.
typedef struct optim_span {
    size_t off, n;
    int decay;
} optim_span;

typedef struct optim {
    train_setup s;
    size_t n;
    float *m;     // SGD velocity / Adam first moment, n floats
    float *v;     // Adam second moment, n floats (NULL for SGD)
    long t;       // updates done so far
    double sched; // the schedule's factor on lr for the next step (1: none; optim_set_lr_factor)
    optim_span *spans; // with weight decay: the buffer in order, kernels decayed (NULL: all)
    int n_spans;
} optim;

int optim_init(optim *o, const train_setup *s, size_t n, ht_error *e);
void optim_free(optim *o);

// Weight decay (s->weight_decay > 0) applies to m's kernels only (conv and dense weights, not
// biases); without this call it applies to every parameter. m must have o->n parameters.
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
void optim_step(optim *o, float *params, const float *g);
// The same for the gradient g * scale (scale applied element by element, as a separate pass
// would): the engine hands in the gradient sum and 1/B, which saves a pass over the buffer.
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

#endif
