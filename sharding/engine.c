// Step engine: persistent worker threads (one per device), scatter/run/gather/update/broadcast.
#include "engine.h"

#include <stdlib.h>
#include <string.h>

enum { TASK_TRAIN, TASK_INFER };

struct engine_slot {
    device *dev;
    int n;            // positions this step
    int *pos;         // (max_batch) batch positions of this device
    float *x;         // (max_batch, in) gathered inputs
    uint8_t *y;
    uint32_t *ids;
    float *grad_sum;  // (n_params)
    float *loss;
    int32_t *pred;
    float *probs;     // (max_batch, n_classes)
    int weights_stale;
    double busy_s, bcast_s;
    int rc;
    ht_error err;
};

// Runs device s's share of the current task: broadcast if stale, gather, compute.
static void slot_run(engine *g, engine_slot *s) {
    double t0 = ht_now();
    s->rc = 0;
    s->bcast_s = 0;
    if (s->weights_stale) {
        if ((s->rc = s->dev->ops->set_weights(s->dev->ctx, g->params, &s->err)) < 0) return;
        s->weights_stale = 0;
        s->bcast_s = ht_now() - t0;
    }
    const dataset *ds = g->task_ds;
    int train = g->task_kind == TASK_TRAIN;
    size_t in = (size_t)ds->c * ds->h * ds->w;
    for (int i = 0; i < s->n; i++) {
        uint32_t id = train ? g->task_idx[s->pos[i]] : (uint32_t)(g->task_start + s->pos[i]);
        memcpy(s->x + i * in, ds->x + (size_t)id * in, sizeof(float) * in);
        s->ids[i] = id;
        if (ds->y) s->y[i] = ds->y[id];
    }
    if (train && s->n == 0) {
        memset(s->grad_sum, 0, sizeof(float) * g->m->n_params);
    } else if (train) {
        shard_job job = {.x = s->x, .y = s->y, .ids = s->ids, .n = s->n, .seed = g->seed,
                         .epoch = g->task_epoch};
        shard_result res = {.grad_sum = s->grad_sum, .loss = s->loss, .pred = s->pred};
        s->rc = s->dev->ops->train_shard(s->dev->ctx, &job, &res, &s->err);
    } else if (s->n > 0) {
        s->rc = s->dev->ops->infer(s->dev->ctx, s->x, s->n, s->probs, &s->err);
    }
    s->busy_s = ht_now() - t0;
}

typedef struct worker_arg {
    engine *g;
    int d;
} worker_arg;

static void *worker_main(void *varg) {
    worker_arg a = *(worker_arg *)varg;
    free(varg);
    engine *g = a.g;
    unsigned long seen = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->gen == seen) pthread_cond_wait(&g->go, &g->mu);
        if (g->stop) break;
        seen = g->gen;
        pthread_mutex_unlock(&g->mu);
        slot_run(g, &g->slots[a.d]);
        pthread_mutex_lock(&g->mu);
        if (--g->pending == 0) pthread_cond_signal(&g->done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

// Runs the current task on every device and waits for all of them.
static int dispatch(engine *g, ht_error *e) {
    if (g->n_devs == 1) {
        slot_run(g, &g->slots[0]);
    } else {
        pthread_mutex_lock(&g->mu);
        g->pending = g->n_devs;
        g->gen++;
        pthread_cond_broadcast(&g->go);
        while (g->pending > 0) pthread_cond_wait(&g->done, &g->mu);
        pthread_mutex_unlock(&g->mu);
    }
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->rc < 0) {
            if (e) *e = s->err;
            return ht_wrap(e, "device %s", s->dev->spec);
        }
    }
    return 0;
}

// Sets the device weights and drops the plan, so the next step plans with them.
static void set_weights_replan(engine *g, const double *w) {
    double top = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (w[d] > top) top = w[d];
    for (int d = 0; d < g->n_devs; d++)
        g->devs[d].weight = w[d] > top * ENGINE_MIN_SHARE ? w[d] : top * ENGINE_MIN_SHARE;
    shard_plan_free(&g->plan);
}

void engine_set_balance(engine *g, balance_mode mode, int rebalance) {
    g->balance = mode;
    g->rebalance = rebalance < 1 ? 1 : rebalance;
}

void engine_weights(const engine *g, double *w) {
    for (int d = 0; d < g->n_devs; d++) w[d] = g->devs[d].weight;
}

// Adds one shard's (n, busy) to device d's forgetting sums.
static void fit_add(engine *g, int d, double n, double t) {
    double *f = g->fit[d];
    for (int k = 0; k < 5; k++) f[k] *= ENGINE_FORGET;
    f[0] += 1;
    f[1] += n;
    f[2] += t;
    f[3] += n * n;
    f[4] += n * t;
}

// Least-squares t = a + b*n for device d; with too little spread in n, a = 0 and b = t/n.
static int fit_line(const engine *g, int d, double *a, double *b) {
    const double *f = g->fit[d];
    if (f[1] <= 0 || f[2] <= 0) return -1;
    double den = f[0] * f[3] - f[1] * f[1];
    *b = f[2] / f[1];
    *a = 0;
    if (den > 1e-9 * f[0] * f[3]) {
        double bb = (f[0] * f[4] - f[1] * f[2]) / den, aa = (f[2] - bb * f[1]) / f[0];
        if (bb > 0 && aa >= 0) {
            *a = aa;
            *b = bb;
        } else if (bb > 0) {
            *b = f[2] / f[1]; // a negative intercept is noise: keep the rate model
        }
    }
    return 0;
}

// Weights from the fits for batches of B: equal finish times, devices that cannot finish
// their fixed costs in time dropped to the minimum share. Unless forced, the plan changes
// only when the fit predicts a step at least ENGINE_REPLAN_GAIN faster: every re-plan changes
// the shard shapes a device sees, and some drivers pay for new shapes (new GEMM kernels).
static void rebalance_now(engine *g, int B, int force) {
    double a[64], b[64], w[64];
    int on[64], n = g->n_devs;
    for (int d = 0; d < n; d++) {
        on[d] = fit_line(g, d, &a[d], &b[d]) == 0;
        if (!on[d]) return; // not every device measured yet
    }
    for (int iter = 0; iter < n; iter++) {
        double num = B, den = 0;
        for (int d = 0; d < n; d++)
            if (on[d]) {
                num += a[d] / b[d];
                den += 1 / b[d];
            }
        double T = num / den;
        int dropped = 0;
        for (int d = 0; d < n; d++) {
            w[d] = on[d] ? (T - a[d]) / b[d] : 0;
            if (on[d] && w[d] <= 0) {
                on[d] = 0;
                dropped = 1;
            }
        }
        if (!dropped) break;
    }
    if (!force && g->plan.pattern && g->plan.len == B) {
        double t_now = 0, t_new = 0;
        for (int d = 0; d < n; d++) {
            double tn = g->plan.count[d] ? a[d] + b[d] * g->plan.count[d] : 0;
            double tw = on[d] ? a[d] + b[d] * w[d] : 0;
            if (tn > t_now) t_now = tn;
            if (tw > t_new) t_new = tw;
        }
        if (t_now <= t_new * (1 + ENGINE_REPLAN_GAIN)) return;
    }
    set_weights_replan(g, w);
}

// Folds one step's measurements into the fits; re-plans every g->rebalance steps.
static void observe(engine *g, int B) {
    if (g->balance != BALANCE_AUTO || g->n_devs < 2) return;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->n > 0 && s->busy_s > 0) fit_add(g, d, s->n, s->busy_s - s->bcast_s);
    }
    if (++g->since < g->rebalance) return;
    g->since = 0;
    rebalance_now(g, B, 0);
}

// Makes the plan for batches of B positions (kept while B stays the same).
static int ensure_plan(engine *g, int B, ht_error *e) {
    if (g->plan.len == B && g->plan.pattern) return 0;
    double w[64];
    for (int d = 0; d < g->n_devs; d++) w[d] = g->devs[d].weight;
    shard_plan_free(&g->plan);
    if (shard_plan_init(&g->plan, w, g->n_devs, B, e) < 0) return -1;
    return 0;
}

static void assign_positions(engine *g, int B) {
    for (int d = 0; d < g->n_devs; d++) g->slots[d].n = 0;
    for (int j = 0; j < B; j++) {
        engine_slot *s = &g->slots[g->plan.pattern[j]];
        s->pos[s->n++] = j;
    }
}

static int slot_alloc(engine *g, engine_slot *s, device *dev, ht_error *e) {
    size_t B = (size_t)g->max_batch, in = (size_t)g->m->in_c * g->m->in_h * g->m->in_w;
    s->dev = dev;
    s->weights_stale = 1;
    s->pos = ht_malloc(B, sizeof *s->pos, e);
    s->x = ht_malloc(B * in, sizeof *s->x, e);
    s->y = ht_calloc(B, sizeof *s->y, e);
    s->ids = ht_malloc(B, sizeof *s->ids, e);
    s->grad_sum = ht_malloc(g->m->n_params, sizeof *s->grad_sum, e);
    s->loss = ht_malloc(B, sizeof *s->loss, e);
    s->pred = ht_malloc(B, sizeof *s->pred, e);
    s->probs = ht_malloc(B * (size_t)g->m->n_classes, sizeof *s->probs, e);
    if (!s->pos || !s->x || !s->y || !s->ids || !s->grad_sum || !s->loss || !s->pred || !s->probs)
        return -1;
    return 0;
}

static void slot_free(engine_slot *s) {
    free(s->pos);
    free(s->x);
    free(s->y);
    free(s->ids);
    free(s->grad_sum);
    free(s->loss);
    free(s->pred);
    free(s->probs);
}

int engine_init(engine *g, const model *m, device *devs, int n_devs, const float *params,
                const train_setup *s, int max_batch, uint64_t seed, ht_error *e) {
    memset(g, 0, sizeof *g);
    if (n_devs < 1 || n_devs > 64) return ht_fail(e, "engine: %d devices (1..64)", n_devs);
    g->m = m;
    g->devs = devs;
    g->n_devs = n_devs;
    g->max_batch = max_batch;
    g->seed = seed;
    g->balance = BALANCE_STATIC;
    g->rebalance = 1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->go, NULL);
    pthread_cond_init(&g->done, NULL);
    g->params = ht_malloc(m->n_params, sizeof(float), e);
    g->grad = ht_malloc(m->n_params, sizeof(float), e);
    g->slots = ht_calloc((size_t)n_devs, sizeof *g->slots, e);
    if (!g->params || !g->grad || !g->slots || optim_init(&g->opt, s, m->n_params, e) < 0) {
        engine_free(g);
        return -1;
    }
    memcpy(g->params, params, sizeof(float) * m->n_params);
    for (int d = 0; d < n_devs; d++) {
        if (slot_alloc(g, &g->slots[d], &devs[d], e) < 0) {
            engine_free(g);
            return ht_wrap(e, "buffers for device %s", devs[d].spec);
        }
    }
    if (n_devs > 1) {
        g->threads = ht_calloc((size_t)n_devs, sizeof *g->threads, e);
        if (!g->threads) {
            engine_free(g);
            return -1;
        }
        for (int d = 0; d < n_devs; d++) {
            worker_arg *a = malloc(sizeof *a);
            a->g = g;
            a->d = d;
            if (!a || pthread_create(&g->threads[d], NULL, worker_main, a) != 0) {
                free(a);
                g->n_devs = d; // join only the ones started
                engine_free(g);
                return ht_fail(e, "engine: cannot start a worker thread for device %d", d);
            }
        }
    }
    return 0;
}

void engine_free(engine *g) {
    if (g->threads) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_broadcast(&g->go);
        pthread_mutex_unlock(&g->mu);
        for (int d = 0; d < g->n_devs; d++) pthread_join(g->threads[d], NULL);
        free(g->threads);
    }
    if (g->slots)
        for (int d = 0; d < g->n_devs; d++) slot_free(&g->slots[d]);
    free(g->slots);
    free(g->params);
    free(g->grad);
    optim_free(&g->opt);
    shard_plan_free(&g->plan);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
    memset(g, 0, sizeof *g);
}

int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e) {
    if (g->n_devs < 2) return 0;
    if (B > g->max_batch) B = g->max_batch;
    memset(g->fit, 0, sizeof g->fit);
    // Round 0 warms up (first launches, caches, page faults); round 1 measures at the given
    // weights, round 2 at the weights fitted from round 1, so each device is seen at two
    // shard sizes and the fit can separate fixed from per-sample cost.
    for (int round = 0; round < 3; round++) {
        if (ensure_plan(g, B, e) < 0) return -1;
        assign_positions(g, B);
        g->task_kind = TASK_TRAIN;
        g->task_ds = ds;
        g->task_idx = idx;
        g->task_epoch = 0;
        if (dispatch(g, e) < 0) return ht_wrap(e, "calibration");
        if (round == 0) continue;
        for (int d = 0; d < g->n_devs; d++) {
            engine_slot *s = &g->slots[d];
            if (s->n > 0 && s->busy_s > 0) fit_add(g, d, s->n, s->busy_s - s->bcast_s);
        }
        rebalance_now(g, B, 1);
    }
    g->since = 0;
    return 0;
}

int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e) {
    if (B < 1 || B > g->max_batch) return ht_fail(e, "engine: batch %d outside 1..%d", B, g->max_batch);
    double t0 = ht_now();
    if (ensure_plan(g, B, e) < 0) return -1;
    assign_positions(g, B);
    g->task_kind = TASK_TRAIN;
    g->task_ds = ds;
    g->task_idx = idx;
    g->task_epoch = epoch;
    if (dispatch(g, e) < 0) return -1;
    double t1 = ht_now();

    // Reduce in fixed device order, then divide by B: the same sum whatever the timing.
    size_t n = g->m->n_params;
    float inv = 1.0f / (float)B;
    const float *first = g->slots[0].grad_sum;
    for (size_t i = 0; i < n; i++) {
        float acc = first[i];
        for (int d = 1; d < g->n_devs; d++) acc += g->slots[d].grad_sum[i];
        g->grad[i] = acc * inv;
    }
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        for (int i = 0; i < s->n; i++) {
            if (loss) loss[s->pos[i]] = s->loss[i];
            if (pred) pred[s->pos[i]] = s->pred[i];
        }
    }
    optim_step(&g->opt, g->params, g->grad);
    for (int d = 0; d < g->n_devs; d++) g->slots[d].weights_stale = 1;
    double t2 = ht_now();
    observe(g, B);

    if (st) {
        memset(st, 0, sizeof *st);
        double slowest = 0, bcast = 0;
        for (int d = 0; d < g->n_devs; d++) {
            st->busy_s[d] = g->slots[d].busy_s;
            st->share[d] = g->slots[d].n;
            if (st->busy_s[d] > slowest) slowest = st->busy_s[d];
            if (g->slots[d].bcast_s > bcast) bcast = g->slots[d].bcast_s;
        }
        for (int d = 0; d < g->n_devs; d++) st->wait_s += slowest - st->busy_s[d];
        st->host_s = (t2 - t1) + bcast;
        st->wall_s = t2 - t0;
    }
    return 0;
}

int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e) {
    int nc = g->m->n_classes;
    for (int off = 0; off < n; off += g->max_batch) {
        int B = n - off < g->max_batch ? n - off : g->max_batch;
        if (ensure_plan(g, B, e) < 0) return -1;
        assign_positions(g, B);
        g->task_kind = TASK_INFER;
        g->task_ds = ds;
        g->task_start = start + off;
        if (dispatch(g, e) < 0) return -1;
        for (int d = 0; d < g->n_devs; d++) {
            engine_slot *s = &g->slots[d];
            for (int i = 0; i < s->n; i++)
                memcpy(probs + (size_t)(off + s->pos[i]) * nc, s->probs + (size_t)i * nc,
                       sizeof(float) * nc);
        }
    }
    return 0;
}
