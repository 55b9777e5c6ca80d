// Host optimizers over the flat parameter buffer: Keras 2 SGD (momentum, Nesterov, decay) and
// TensorFlow 1's Adam with Keras-style decay. One pass over the buffer per step.
#include "optim.h"

#include <math.h>
#include <stdlib.h>

// Below this many parameters a parallel region costs more than it saves.
#define OPTIM_PAR_MIN 65536

static int check_setup(const train_setup *s, ht_error *e) {
    if (!(s->lr >= 0 && isfinite(s->lr)))
        return ht_fail(e, "optimizer: learning rate must be a finite number >= 0, found %g",
                       (double)s->lr);
    if (!(s->decay >= 0 && isfinite(s->decay)))
        return ht_fail(e, "optimizer: decay must be a finite number >= 0, found %g",
                       (double)s->decay);
    if (s->optim == OPTIM_SGD) {
        if (!(s->momentum >= 0 && isfinite(s->momentum)))
            return ht_fail(e, "optimizer sgd: momentum must be a finite number >= 0, found %g",
                           (double)s->momentum);
    } else if (s->optim == OPTIM_ADAM) {
        if (!(s->beta1 >= 0 && s->beta1 < 1))
            return ht_fail(e, "optimizer adam: beta1 must be in [0,1), found %g", (double)s->beta1);
        if (!(s->beta2 >= 0 && s->beta2 < 1))
            return ht_fail(e, "optimizer adam: beta2 must be in [0,1), found %g", (double)s->beta2);
        if (!(s->eps > 0 && isfinite(s->eps)))
            return ht_fail(e, "optimizer adam: epsilon must be a finite number > 0, found %g",
                           (double)s->eps);
    } else {
        return ht_fail(e, "optimizer: unknown kind %d", (int)s->optim);
    }
    return 0;
}

int optim_init(optim *o, const train_setup *s, size_t n, ht_error *e) {
    *o = (optim){0};
    if (check_setup(s, e)) return -1;
    o->s = *s;
    o->n = n;
    o->m = ht_calloc(n, sizeof *o->m, e);
    if (o->m && s->optim == OPTIM_ADAM) o->v = ht_calloc(n, sizeof *o->v, e);
    if (!o->m || (s->optim == OPTIM_ADAM && !o->v)) {
        optim_free(o);
        return ht_wrap(e, "optimizer state for %zu parameters", n);
    }
    return 0;
}

void optim_free(optim *o) {
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
    o->n = 0;
    o->t = 0;
}

static double decayed_lr(const train_setup *s, long t) {
    return (double)s->lr / (1.0 + (double)s->decay * (double)t);
}

float optim_lr(const optim *o) { return (float)decayed_lr(&o->s, o->t); }

static void sgd_step(optim *o, float *restrict p, const float *restrict g, const float sc) {
    float *restrict v = o->m;
    const size_t n = o->n;
    const float mu = o->s.momentum, lr = (float)decayed_lr(&o->s, o->t);
    if (o->s.nesterov) {
#pragma omp parallel for simd schedule(static) if (n >= OPTIM_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * sc;
            float vi = mu * v[i] - lr * gi;
            v[i] = vi;
            p[i] += mu * vi - lr * gi;
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= OPTIM_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float vi = mu * v[i] - lr * (g[i] * sc);
            v[i] = vi;
            p[i] += vi;
        }
    }
    o->t++;
}

static void adam_step(optim *o, float *restrict p, const float *restrict g, const float sc) {
    float *restrict m = o->m, *restrict v = o->v;
    const size_t n = o->n;
    o->t++;
    // Bias correction in double: beta^t underflows gracefully and 1-beta^t keeps its digits.
    const double t = (double)o->t, b1 = o->s.beta1, b2 = o->s.beta2;
    const float lr = (float)(decayed_lr(&o->s, o->t - 1) * sqrt(1.0 - pow(b2, t)) /
                             (1.0 - pow(b1, t)));
    const float fb1 = o->s.beta1, fb2 = o->s.beta2, eps = o->s.eps;
    const float c1 = 1.0f - fb1, c2 = 1.0f - fb2;
#pragma omp parallel for simd schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * sc;
        float mi = fb1 * m[i] + c1 * gi;
        float vi = fb2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * mi / (sqrtf(vi) + eps);
    }
}

void optim_step_scaled(optim *o, float *params, const float *g, float scale) {
    if (o->s.optim == OPTIM_ADAM) adam_step(o, params, g, scale);
    else sgd_step(o, params, g, scale);
}

void optim_step(optim *o, float *params, const float *g) { optim_step_scaled(o, params, g, 1.0f); }
