// Host optimizers over the flat parameter buffer: SGD with momentum, Nesterov and Keras-style
// decay; Adam (TensorFlow's formulation).
#ifndef HETRAIN_OPTIM_H
#define HETRAIN_OPTIM_H

#include <stddef.h>

#include "common.h"
#include "model.h"

typedef struct optim {
    train_setup s;
    size_t n;
    float *m;     // SGD velocity / Adam first moment, n floats
    float *v;     // Adam second moment, n floats (NULL for SGD)
    long t;       // updates done so far
} optim;

int optim_init(optim *o, const train_setup *s, size_t n, ht_error *e);
void optim_free(optim *o);

// Learning rate the next step will use: lr / (1 + decay * t).
float optim_lr(const optim *o);

// One update with the *mean* gradient g (n floats):
// SGD (Keras):  lr_t = lr/(1+decay*t); v = momentum*v - lr_t*g;
//               p += nesterov ? momentum*v - lr_t*g : v
// Adam (TF):    t += 1; lr_t = lr_dec * sqrt(1-beta2^t)/(1-beta1^t), lr_dec = lr/(1+decay*(t-1));
//               m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr_t * m / (sqrt(v) + eps)
void optim_step(optim *o, float *params, const float *g);
// The same for the gradient g * scale (scale applied element by element, as a separate pass
// would): the engine hands in the gradient sum and 1/B, which saves a pass over the buffer.
void optim_step_scaled(optim *o, float *params, const float *g, float scale);

#endif
