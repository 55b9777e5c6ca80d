// Host optimizers over the flat parameter buffer: Keras 2 SGD (momentum, Nesterov, decay) and
// TensorFlow 1's Adam with Keras-style decay, learning-rate schedules and weight decay. One
// pass over the buffer per step.
#include "nn/optim.h"

#include "nn/layer_desc.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// Below this many parameters a parallel region costs more than it saves.
#define OPTIM_PAR_MIN 65536

static int check_setup(const train_setup *s, ht_error *e) {
    if (!(s->lr >= 0 && isfinite(s->lr)))
        return ht_fail(e, "optimizer: learning rate must be a finite number >= 0, found %g",
                       (double)s->lr);
    if (!(s->decay >= 0 && isfinite(s->decay)))
        return ht_fail(e, "optimizer: decay must be a finite number >= 0, found %g",
                       (double)s->decay);
    if (!(s->weight_decay >= 0 && isfinite(s->weight_decay)))
        return ht_fail(e, "optimizer: weight decay must be a finite number >= 0, found %g",
                       (double)s->weight_decay);
    const lr_schedule *ls = &s->sched;
    int gamma_ok = ls->gamma > 0 && ls->gamma <= 1;
    if (!(ls->kind == LR_SCHED_NONE || ls->kind == LR_SCHED_COSINE ||
          (ls->kind == LR_SCHED_EXP && gamma_ok) || (ls->kind == LR_SCHED_STEP && gamma_ok && ls->every >= 1)))
        return ht_fail(e, "optimizer: malformed learning-rate schedule (kind %d, every %d, gamma %g)",
                       (int)ls->kind, ls->every, (double)ls->gamma);
    if (s->wd_mode != WD_L2 && s->wd_mode != WD_DECOUPLED)
        return ht_fail(e, "optimizer: unknown weight decay mode %d", (int)s->wd_mode);
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
    o->sched = 1.0;
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
    free(o->spans);
    o->m = o->v = NULL;
    o->spans = NULL;
    o->n_spans = 0;
    o->n = 0;
    o->t = 0;
}

// Appends s to the spans, merged with the last one when it is treated alike.
static void span_add(optim *o, optim_span s) {
    optim_span *last = o->n_spans ? &o->spans[o->n_spans - 1] : NULL;
    if (s.n == 0) return;
    if (last && last->decay == s.decay && last->frozen == s.frozen && last->l1 == s.l1 &&
        last->l2 == s.l2 && last->off + last->n == s.off)
        last->n += s.n;
    else o->spans[o->n_spans++] = s;
}

int optim_decay_kernels(optim *o, const model *m, ht_error *e) { return optim_use_model(o, m, e); }

int optim_use_model(optim *o, const model *m, ht_error *e) {
    if (m->n_trainable != o->n)
        return ht_fail(e, "optimizer: model %s has %zu parameters, the optimizer %zu", m->name,
                       m->n_trainable, o->n);
    free(o->spans);
    o->n_spans = 0;
    o->special = 0;
    // Each tensor, and a gap before one or at the end, is at most one span.
    o->spans = ht_calloc(2 * (size_t)m->n_tensors + 1, sizeof *o->spans, e);
    if (!o->spans) return -1;
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        if (t->state) break; // the state follows every parameter
        if (t->off < at || t->off + t->n > o->n)
            return ht_fail(e, "optimizer: tensor %s out of order in the parameter buffer", t->name);
        const layer *L = &m->layers[t->layer];
        optim_span s = {t->off, t->n, !t->bias && (layer_flags(L->kind) & LF_KERNEL), L->frozen,
                        t->bias ? L->b_l1 : L->w_l1, t->bias ? L->b_l2 : L->w_l2};
        o->special |= s.frozen || s.l1 > 0 || s.l2 > 0;
        span_add(o, (optim_span){.off = at, .n = t->off - at});
        span_add(o, s);
        at = t->off + t->n;
    }
    span_add(o, (optim_span){.off = at, .n = o->n - at});
    return 0;
}

// The Keras-decayed rate of update t (from 0), with the schedule's factor.
static double decayed_lr(const optim *o, long t) {
    return (double)o->s.lr * o->sched / (1.0 + (double)o->s.decay * (double)t);
}

float optim_lr(const optim *o) { return (float)decayed_lr(o, o->t); }

void optim_set_lr_factor(optim *o, double f) { o->sched = f; }

// The buffer as spans for one update: the model's spans with weight decay, frozen layers or
// regularizers, else all of it alike (one span, no allocation).
static const optim_span *update_spans(const optim *o, optim_span *whole, int *n) {
    *whole = (optim_span){0, o->n, o->s.weight_decay > 0, 0, 0, 0};
    if (o->spans && (o->s.weight_decay > 0 || o->special)) {
        *n = o->n_spans;
        return o->spans;
    }
    *n = 1;
    return whole;
}

// SGD over [lo, hi) without weight decay.
static void sgd_plain(float *restrict p, float *restrict v, const float *restrict g, size_t lo,
                      size_t hi, float sc, float mu, float lr, int nesterov) {
    if (nesterov) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
        for (size_t i = lo; i < hi; i++) {
            float gi = g[i] * sc;
            float vi = mu * v[i] - lr * gi;
            v[i] = vi;
            p[i] += mu * vi - lr * gi;
        }
    } else {
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
        for (size_t i = lo; i < hi; i++) {
            float vi = mu * v[i] - lr * (g[i] * sc);
            v[i] = vi;
            p[i] += vi;
        }
    }
}

// SGD over [lo, hi) with weight decay: l2 = W (L2) or 0, dc = lr_t*W (decoupled) or 0.
static void sgd_decayed(float *restrict p, float *restrict v, const float *restrict g,
                        size_t lo, size_t hi, float sc, float mu, float lr, int nesterov,
                        float l2, float dc) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
    for (size_t i = lo; i < hi; i++) {
        float pi = p[i];
        float gi = g[i] * sc + l2 * pi;
        float vi = mu * v[i] - lr * gi;
        v[i] = vi;
        p[i] = pi - dc * pi + (nesterov ? mu * vi - lr * gi : vi);
    }
}

// d|p|/dp as TensorFlow and PyTorch take it: sign(p), 0 at 0.
static inline float sign0(float p) { return (float)((p > 0.0f) - (p < 0.0f)); }

// SGD over [lo, hi) with a regularizer: a2 = W (L2 decay, or 0) + 2 * l2, l1, dc as above.
static void sgd_reg(float *restrict p, float *restrict v, const float *restrict g, size_t lo,
                    size_t hi, float sc, float mu, float lr, int nesterov, float a2, float l1,
                    float dc) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
    for (size_t i = lo; i < hi; i++) {
        float pi = p[i];
        float gi = g[i] * sc + a2 * pi + l1 * sign0(pi);
        float vi = mu * v[i] - lr * gi;
        v[i] = vi;
        p[i] = pi - dc * pi + (nesterov ? mu * vi - lr * gi : vi);
    }
}

// A span's part of [from, to): [*lo, *hi), empty when they do not meet.
static void clip(const optim_span *sp, size_t from, size_t to, size_t *lo, size_t *hi) {
    *lo = sp->off > from ? sp->off : from;
    *hi = sp->off + sp->n < to ? sp->off + sp->n : to;
    if (*hi < *lo) *hi = *lo;
}

static void sgd_step(optim *o, float *restrict p, const float *restrict g, const float sc,
                     const size_t (*ranges)[2], int nr) {
    const float mu = o->s.momentum;
    const double lr_d = decayed_lr(o, o->t);
    const float lr = (float)lr_d, W = o->s.weight_decay;
    const float l2 = o->s.wd_mode == WD_L2 ? W : 0, dc = o->s.wd_mode == WD_L2 ? 0 : (float)(lr_d * W);
    optim_span whole;
    int ns;
    const optim_span *sp = update_spans(o, &whole, &ns);
    for (int i = 0; i < ns * nr; i++) { // span k's part of range r
        const int k = i / nr, r = i % nr;
        size_t lo, hi;
        clip(&sp[k], ranges[r][0], ranges[r][1], &lo, &hi);
        int decay = sp[k].decay && W > 0;
        if (sp[k].frozen || lo == hi) continue;
        if (sp[k].l1 > 0 || sp[k].l2 > 0)
            sgd_reg(p, o->m, g, lo, hi, sc, mu, lr, o->s.nesterov,
                    (decay ? l2 : 0) + 2 * sp[k].l2, sp[k].l1, decay ? dc : 0);
        else if (decay) sgd_decayed(p, o->m, g, lo, hi, sc, mu, lr, o->s.nesterov, l2, dc);
        else sgd_plain(p, o->m, g, lo, hi, sc, mu, lr, o->s.nesterov);
    }
    o->t++;
}

// Adam's moments and parameters over [lo, hi): l2 = W (L2) or 0, dc = lr_dec*W (decoupled)
// or 0; decay = 0 keeps the update without weight decay exactly. With a regularizer (l1 or an
// l2 that holds 2 * its factor) the gradient gets l1 * sign(p) too.
static void adam_range(float *restrict p, float *restrict m, float *restrict v,
                       const float *restrict g, size_t lo, size_t hi, float sc, float lr,
                       float b1, float b2, float eps, int decay, float l2, float dc, int reg,
                       float l1) {
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    if (reg) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
        for (size_t i = lo; i < hi; i++) {
            float pi = p[i];
            float gi = g[i] * sc + l2 * pi + l1 * sign0(pi);
            float mi = b1 * m[i] + c1 * gi;
            float vi = b2 * v[i] + c2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - dc * pi - lr * mi / (sqrtf(vi) + eps);
        }
        return;
    }
    if (!decay) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
        for (size_t i = lo; i < hi; i++) {
            float gi = g[i] * sc;
            float mi = b1 * m[i] + c1 * gi;
            float vi = b2 * v[i] + c2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] -= lr * mi / (sqrtf(vi) + eps);
        }
        return;
    }
#pragma omp parallel for simd schedule(static) if (hi - lo >= OPTIM_PAR_MIN)
    for (size_t i = lo; i < hi; i++) {
        float pi = p[i];
        float gi = g[i] * sc + l2 * pi;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - dc * pi - lr * mi / (sqrtf(vi) + eps);
    }
}

static void adam_step(optim *o, float *restrict p, const float *restrict g, const float sc,
                      const size_t (*ranges)[2], int nr) {
    o->t++;
    // Bias correction in double: beta^t underflows gracefully and 1-beta^t keeps its digits.
    const double t = (double)o->t, b1 = o->s.beta1, b2 = o->s.beta2;
    const double lr_dec = decayed_lr(o, o->t - 1);
    const float lr = (float)(lr_dec * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t)));
    const float W = o->s.weight_decay;
    const float l2 = o->s.wd_mode == WD_L2 ? W : 0, dc = o->s.wd_mode == WD_L2 ? 0 : (float)(lr_dec * W);
    optim_span whole;
    int ns;
    const optim_span *sp = update_spans(o, &whole, &ns);
    for (int i = 0; i < ns * nr; i++) { // span k's part of range r
        const int k = i / nr, r = i % nr;
        int decay = sp[k].decay && W > 0, reg = sp[k].l1 > 0 || sp[k].l2 > 0;
        size_t lo, hi;
        clip(&sp[k], ranges[r][0], ranges[r][1], &lo, &hi);
        if (sp[k].frozen || lo == hi) continue;
        adam_range(p, o->m, o->v, g, lo, hi, sc, lr, o->s.beta1,
                   o->s.beta2, o->s.eps, decay || reg,
                   reg ? (decay ? l2 : 0) + 2 * sp[k].l2 : l2, decay ? dc : 0, reg, sp[k].l1);
    }
}

void optim_step_ranges(optim *o, float *params, const float *g, float scale,
                       const size_t (*ranges)[2], int n_ranges) {
    if (o->s.optim == OPTIM_ADAM) adam_step(o, params, g, scale, ranges, n_ranges);
    else sgd_step(o, params, g, scale, ranges, n_ranges);
}

void optim_step_range(optim *o, float *params, const float *g, float scale, size_t lo,
                      size_t hi) {
    if (hi > o->n) hi = o->n;
    if (lo > hi) lo = hi;
    const size_t range[1][2] = {{lo, hi}};
    optim_step_ranges(o, params, g, scale, range, 1);
}

void optim_step_scaled(optim *o, float *params, const float *g, float scale) {
    optim_step_range(o, params, g, scale, 0, o->n);
}

void optim_step(optim *o, float *params, const float *g) { optim_step_scaled(o, params, g, 1.0f); }

// ---- learning-rate schedules ----------------------------------------------------------------

// A number 0 < x <= 1 (a schedule's GAMMA).
static int parse_gamma(const char *text, const char *v, float *out, ht_error *e) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    // Kept as a float: below a float's smallest normal value it would round to 0 or lose bits
    // (found by fuzzing: exp:1E-124 became exp:0).
    if (!*v || *end || errno || !(x >= FLT_MIN && x <= 1))
        return ht_fail(e, "\"%.60s\": GAMMA must be a number 0 < GAMMA <= 1 (at least %g), "
                          "found \"%.40s\"", text, FLT_MIN, v);
    *out = (float)x;
    return 0;
}

int lr_schedule_parse(lr_schedule *s, const char *text, ht_error *e) {
    lr_schedule r = {0};
    if (!strcmp(text, "none") || !strcmp(text, "cosine")) {
        r.kind = text[0] == 'c' ? LR_SCHED_COSINE : LR_SCHED_NONE;
    } else if (!strncmp(text, "exp:", 4)) {
        r.kind = LR_SCHED_EXP;
        if (parse_gamma(text, text + 4, &r.gamma, e) < 0) return -1;
    } else if (!strncmp(text, "step:", 5)) {
        r.kind = LR_SCHED_STEP;
        const char *v = text + 5;
        char *end;
        errno = 0;
        long k = strtol(v, &end, 10);
        if (end == v || *end != ':' || errno || k < 1 || k > 1000000)
            return ht_fail(e, "\"%.60s\": EPOCHS must be an integer 1..1000000 "
                              "followed by :GAMMA, found \"%.*s\"",
                           text, (int)strcspn(v, ":"), v);
        r.every = (int)k;
        if (parse_gamma(text, end + 1, &r.gamma, e) < 0) return -1;
    } else {
        return ht_fail(e, "expected step:EPOCHS:GAMMA, exp:GAMMA, cosine or none, "
                          "found \"%.60s\"", text);
    }
    *s = r;
    return 0;
}

void lr_schedule_text(const lr_schedule *s, char *buf, size_t len) {
    switch (s->kind) {
    case LR_SCHED_STEP: snprintf(buf, len, "step:%d:%.9g", s->every, (double)s->gamma); break;
    case LR_SCHED_EXP: snprintf(buf, len, "exp:%.9g", (double)s->gamma); break;
    case LR_SCHED_COSINE: snprintf(buf, len, "cosine"); break;
    default: snprintf(buf, len, "none"); break;
    }
}

double lr_schedule_factor(const lr_schedule *s, int epoch, long step, long total) {
    switch (s->kind) {
    case LR_SCHED_STEP:
        return s->every > 0 ? pow((double)s->gamma, (double)(epoch / s->every)) : 1.0;
    case LR_SCHED_EXP: return pow((double)s->gamma, (double)epoch);
    case LR_SCHED_COSINE:
        return total > 0 ? 0.5 * (1.0 + cos(M_PI * (double)step / (double)total)) : 1.0;
    default: return 1.0;
    }
}

// One KEY=VALUE of an --optimizer spec into r; -1 with e naming the spec.
static int optimizer_key(train_setup *r, const char *spec, const char *kv, size_t len,
                         ht_error *e) {
    char key[32], val[48];
    const char *eq = memchr(kv, '=', len);
    size_t kn = eq ? (size_t)(eq - kv) : len;
    if (!eq || kn == 0 || kn >= sizeof key || len - kn - 1 == 0 || len - kn - 1 >= sizeof val)
        return ht_fail(e, "\"%.60s\": expected KEY=VALUE after the name, found \"%.*s\"", spec,
                       (int)(len > 40 ? 40 : len), kv);
    memcpy(key, kv, kn), key[kn] = 0;
    memcpy(val, eq + 1, len - kn - 1), val[len - kn - 1] = 0;
    int sgd = r->optim == OPTIM_SGD;
    if (sgd && !strcmp(key, "nesterov")) {
        static const char *const names[] = {"0", "1", "false", "true", NULL};
        for (int i = 0; names[i]; i++)
            if (!strcasecmp(val, names[i])) return r->nesterov = i % 2, 0;
        return ht_fail(e, "\"%.60s\": nesterov takes 0, 1, false or true, found \"%s\"", spec,
                       val);
    }
    struct {
        const char *name, *alias;
        int sgd, adam;
        double lo, hi;
        int lo_open, hi_open;
        float *dst;
    } keys[] = {
        {"lr", "learning_rate", 1, 1, 0, 100, 1, 0, &r->lr},
        {"decay", NULL, 1, 1, 0, 1, 0, 0, &r->decay},
        {"momentum", NULL, 1, 0, 0, 1, 0, 1, &r->momentum},
        {"beta1", "beta_1", 0, 1, 0, 1, 0, 1, &r->beta1},
        {"beta2", "beta_2", 0, 1, 0, 1, 0, 1, &r->beta2},
        {"eps", "epsilon", 0, 1, 0, 1, 1, 0, &r->eps},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (strcmp(key, keys[k].name) && !(keys[k].alias && !strcmp(key, keys[k].alias)))
            continue;
        if (!(sgd ? keys[k].sgd : keys[k].adam)) break;
        char *end;
        errno = 0;
        double x = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(x) ||
            (keys[k].lo_open ? x <= keys[k].lo : x < keys[k].lo) ||
            (keys[k].hi_open ? x >= keys[k].hi : x > keys[k].hi))
            return ht_fail(e, "\"%.60s\": %s must be a number %s%g and %s%g, found \"%s\"", spec,
                           key, keys[k].lo_open ? "above " : "from ", keys[k].lo,
                           keys[k].hi_open ? "below " : "up to ", keys[k].hi, val);
        *keys[k].dst = (float)x;
        return 0;
    }
    return ht_fail(e, "\"%.60s\": %s has no key \"%s\" (%s)", spec, sgd ? "sgd" : "adam", key,
                   sgd ? "lr, momentum, nesterov, decay" : "lr, beta1, beta2, eps, decay");
}

int optimizer_parse(train_setup *s, const char *spec, ht_error *e) {
    train_setup r = *s;
    size_t n = strcspn(spec, ":");
    if (n == 3 && !strncasecmp(spec, "sgd", 3)) {
        r.optim = OPTIM_SGD, r.lr = 0.01f, r.momentum = 0, r.nesterov = 0, r.decay = 0;
    } else if (n == 4 && !strncasecmp(spec, "adam", 4)) {
        r.optim = OPTIM_ADAM, r.lr = 0.001f, r.beta1 = 0.9f, r.beta2 = 0.999f, r.eps = 1e-7f;
        r.decay = 0;
    } else {
        return ht_fail(e, "expected sgd or adam, then :KEY=VALUE,... if any, found \"%.60s\"",
                       spec);
    }
    for (const char *p = spec[n] ? spec + n + 1 : NULL; p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (optimizer_key(&r, spec, p, len, e) < 0) return -1;
        p = comma ? comma + 1 : NULL;
    }
    *s = r;
    return 0;
}
