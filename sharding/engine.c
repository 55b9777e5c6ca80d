// Step engine: persistent worker threads (one per device), scatter/run/gather/update/broadcast,
// and failover: a device that errs, hangs or returns wrong numbers is dropped and its share of
// the step is run again on the devices left.
#define _GNU_SOURCE // pthread_timedjoin_np
#include "engine.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_internal.h"
#include "net.h"

static void event(engine *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void event(engine *g, const char *fmt, ...) {
    size_t k = strlen(g->events);
    if (k + 2 >= sizeof g->events) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->events + k, sizeof g->events - k - 1, fmt, ap);
    va_end(ap);
    k = strlen(g->events);
    g->events[k] = '\n';
    g->events[k + 1] = 0;
}

const char *engine_take_events(engine *g) {
    static _Thread_local char out[sizeof g->events];
    memcpy(out, g->events, sizeof out);
    g->events[0] = 0;
    return out;
}

int engine_active(const engine *g) {
    int n = 0;
    for (int d = 0; d < g->n_devs; d++) n += !g->slots[d].failed;
    return n;
}

void engine_drop_device(engine *g, int d) {
    if (d < 0 || d >= g->n_devs || g->slots[d].failed) return;
    g->slots[d].failed = 1;
    balance_drop(g, d);
    event(g, "device %s dropped on request", g->devs[d].spec);
}

void engine_set_timeout(engine *g, double seconds) { g->timeout_s = seconds > 0 ? seconds : ENGINE_DEFAULT_TIMEOUT; }
void engine_set_nan_stop(engine *g, int stop) { g->nan_stop = stop; }

// The test hook for a device that stops answering: sleeps until the engine shuts down.
static void injected_hang(engine *g) {
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop) return;
        usleep(20000);
    }
}

// Runs device s's share of the current task: broadcast if stale, gather, compute.
static void slot_run(engine *g, engine_slot *s) {
    double t0 = ht_now();
    const char *spec = s->dev->spec;
    long step = g->task_kind == TASK_TRAIN ? g->step : 0;
    s->rc = 0;
    s->bcast_s = 0;
    s->note[0] = 0;
    if (s->weights_stale) {
        if ((s->rc = s->dev->ops->set_weights(s->dev->ctx, g->params, &s->err)) < 0) return;
        s->weights_stale = 0;
        s->bcast_s = ht_now() - t0;
    }
    if (step && fault_planned(&g->faults, FAULT_HANG, spec, step)) injected_hang(g);
    if (step && fault_planned(&g->faults, FAULT_FAIL, spec, step)) {
        s->rc = ht_fail(&s->err, "injected failure (HETRAIN_FAULT) at step %ld", step);
        return;
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
    if (train && s->n > 0) {
        shard_job job = {.x = s->x, .y = s->y, .ids = s->ids, .n = s->n, .seed = g->seed,
                         .epoch = g->task_epoch,
                         .fault_oom = step && fault_planned(&g->faults, FAULT_OOM, spec, step)};
        shard_result res = {.grad_sum = s->grad_sum, .loss = s->loss, .pred = s->pred};
        s->rc = s->dev->ops->train_shard(s->dev->ctx, &job, &res, &s->err);
        if (s->rc == 0 && res.micro > 0) s->dev->micro = res.micro;
        snprintf(s->note, sizeof s->note, "%s", res.note);
        if (s->rc == 0 && fault_planned(&g->faults, FAULT_CORRUPT, spec, step)) {
            for (size_t i = 0; i < g->m->n_params; i++) s->grad_sum[i] *= 1.5f;
        }
        if (s->rc == 0 && step && fault_planned(&g->faults, FAULT_NAN, spec, step))
            s->grad_sum[0] = NAN;
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
    engine_slot *s = &g->slots[a.d];
    unsigned long seen = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->gen == seen) pthread_cond_wait(&g->go, &g->mu);
        if (g->stop) break;
        seen = g->gen;
        if (!s->dispatched) continue;
        pthread_mutex_unlock(&g->mu);
        slot_run(g, s);
        pthread_mutex_lock(&g->mu);
        s->done_gen = seen;
        pthread_cond_broadcast(&g->done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

// Runs the current task on every dispatched device and waits for them, at most timeout_s. A
// device that errs or does not answer is marked failed (with an event); its positions go to
// g->orphans. Returns the number of devices that failed in this pass.
static int dispatch(engine *g) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double whole = floor(g->timeout_s);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((g->timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g->mu);
    unsigned long gen = ++g->gen;
    pthread_cond_broadcast(&g->go);
    for (;;) {
        int waiting = 0;
        for (int d = 0; d < g->n_devs; d++)
            waiting += g->slots[d].dispatched && g->slots[d].done_gen != gen;
        if (!waiting) break;
        if (pthread_cond_timedwait(&g->done, &g->mu, &deadline) == ETIMEDOUT) break;
    }
    int failed = 0;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched) continue;
        if (s->done_gen != gen) {
            // Its thread is still inside the device: never touch either again.
            s->dev->hung = 1;
            s->rc = ht_fail(&s->err, "no answer within %.0f s", g->timeout_s);
        }
        if (s->rc < 0) {
            s->failed = 1;
            failed++;
            balance_drop(g, d);
            for (int i = 0; i < s->n; i++) g->orphans[g->n_orphans++] = s->pos[i];
            snprintf(g->last_failure, sizeof g->last_failure, "%s: %s", s->dev->spec, s->err.msg);
            event(g, "%s%ld: device %s failed and was dropped: %s; its %d sample%s went to the "
                     "other devices", g->task_kind == TASK_TRAIN ? "step " : "inference, step ",
                  g->step, s->dev->spec, s->err.msg, s->n, s->n == 1 ? "" : "s");
        } else if (s->note[0]) {
            event(g, "step %ld: device %s: %s", g->step, s->dev->spec, s->note);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return failed;
}

// Plans `n` positions over the active devices (plan cached for the full batch only).
static int plan_active(engine *g, shard_plan *p, int n, ht_error *e) {
    double w[ENGINE_MAX_DEVICES];
    int k = 0;
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->plan_dev[k] = d;
        w[k++] = g->devs[d].weight > 0 ? g->devs[d].weight : 1;
    }
    if (k == 0) return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    return shard_plan_init(p, w, k, n, e);
}

// Gives every active device its positions among `positions` (NULL: 0..n-1) and marks it
// dispatched. Uses the cached full-batch plan when n is the batch size.
static int assign(engine *g, const int *positions, int n, int cache, ht_error *e) {
    shard_plan tmp, *p = &g->plan;
    if (!cache) {
        if (plan_active(g, &tmp, n, e) < 0) return -1;
        p = &tmp;
    } else if (!(g->plan.pattern && g->plan.len == n)) {
        shard_plan_free(&g->plan);
        if (plan_active(g, &g->plan, n, e) < 0) return -1;
    }
    for (int d = 0; d < g->n_devs; d++) {
        g->slots[d].n = 0;
        g->slots[d].dispatched = 0;
    }
    for (int j = 0; j < n; j++) {
        engine_slot *s = &g->slots[g->plan_dev[p->pattern[j]]];
        s->pos[s->n++] = positions ? positions[j] : j;
    }
    // A device with no samples this pass sits it out: no broadcast, no launch, no wait.
    for (int k = 0; k < p->n_devs; k++) {
        engine_slot *s = &g->slots[g->plan_dev[k]];
        s->dispatched = s->n > 0;
    }
    if (!cache) shard_plan_free(&tmp);
    return 0;
}

// Gives every active device that the plan left without samples one position, taken from the
// busiest device: a device the balance once wrote off (its fixed cost seemed larger than a
// step, perhaps only while its driver was compiling) is measured again now and then and can
// earn its share back.
static void probe_idle(engine *g) {
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->failed || s->n > 0) continue;
        engine_slot *big = NULL;
        for (int k = 0; k < g->n_devs; k++)
            if (!g->slots[k].failed && (!big || g->slots[k].n > big->n)) big = &g->slots[k];
        if (!big || big->n < 2) return;
        s->pos[s->n++] = big->pos[--big->n];
        s->dispatched = 1;
    }
}

// Whether a slot's results hold a non-finite loss or gradient element.
static int non_finite(const engine *g, const engine_slot *s) {
    for (int i = 0; i < s->n; i++)
        if (!isfinite(s->loss[i])) return 1;
    for (size_t i = 0; i < g->m->n_params; i++)
        if (!isfinite(s->grad_sum[i])) return 1;
    return 0;
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
    if (n_devs < 1 || n_devs > ENGINE_MAX_DEVICES)
        return ht_fail(e, "engine: %d devices (1..%d)", n_devs, ENGINE_MAX_DEVICES);
    if (fault_plan_parse(&g->faults, getenv("HETRAIN_FAULT"), e) < 0) return -1;
    g->m = m;
    g->devs = devs;
    g->n_devs = n_devs;
    g->max_batch = max_batch;
    g->seed = seed;
    g->balance = BALANCE_STATIC;
    g->rebalance = 1;
    g->timeout_s = ENGINE_DEFAULT_TIMEOUT;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->go, NULL);
    pthread_cond_init(&g->done, NULL);
    g->params = ht_malloc(m->n_params, sizeof(float), e);
    g->grad = ht_malloc(m->n_params, sizeof(float), e);
    g->orphans = ht_malloc((size_t)max_batch, sizeof *g->orphans, e);
    g->slots = ht_calloc((size_t)n_devs, sizeof *g->slots, e);
    g->threads = ht_calloc((size_t)n_devs, sizeof *g->threads, e);
    if (!g->params || !g->grad || !g->orphans || !g->slots || !g->threads ||
        optim_init(&g->opt, s, m->n_params, e) < 0) {
        g->n_devs = 0;
        engine_free(g);
        return -1;
    }
    memcpy(g->params, params, sizeof(float) * m->n_params);
    for (int d = 0; d < n_devs; d++) {
        if (slot_alloc(g, &g->slots[d], &devs[d], e) < 0) {
            g->n_devs = 0;
            engine_free(g);
            return ht_wrap(e, "buffers for device %s", devs[d].spec);
        }
    }
    for (int d = 0; d < n_devs; d++) {
        worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->g = g;
            a->d = d;
        }
        if (!a || pthread_create(&g->threads[d], NULL, worker_main, a) != 0) {
            free(a);
            g->n_devs = d; // join only the ones started
            engine_free(g);
            return ht_fail(e, "engine: cannot start a worker thread for device %d", d);
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
        for (int d = 0; d < g->n_devs; d++) {
            if (!g->devs[d].hung) {
                pthread_join(g->threads[d], NULL);
                continue;
            }
            // A device that stopped answering may never return: wait a little, then leave
            // its thread and buffers alone rather than free them under it.
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_sec += 2;
            if (pthread_timedjoin_np(g->threads[d], NULL, &t) == 0) {
                g->devs[d].hung = 0;
            } else {
                pthread_detach(g->threads[d]);
                memset(&g->slots[d], 0, sizeof g->slots[d]);
            }
        }
        free(g->threads);
    }
    if (g->slots)
        for (int d = 0; d < g->n_devs; d++) slot_free(&g->slots[d]);
    free(g->slots);
    free(g->params);
    free(g->grad);
    free(g->orphans);
    optim_free(&g->opt);
    shard_plan_free(&g->plan);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
    memset(g, 0, sizeof *g);
}

static void set_task(engine *g, int kind, const dataset *ds, const uint32_t *idx, int start,
                     uint32_t epoch) {
    g->task_kind = kind;
    g->task_ds = ds;
    g->task_idx = idx;
    g->task_start = start;
    g->task_epoch = epoch;
}

int engine_self_check(engine *g, const dataset *ds, const uint32_t *idx, int n, double tol,
                      ht_error *e) {
    const model *m = g->m;
    if (n > g->max_batch) n = g->max_batch;
    if (n < 1) return 0;
    // The reference: the CPU network over the same probe, dropout on as in training.
    size_t in = (size_t)ds->c * ds->h * ds->w;
    net_ws ws;
    float *x = ht_malloc((size_t)n * in, sizeof(float), e);
    uint8_t *y = ht_malloc((size_t)n, 1, e);
    float *ref = ht_calloc(m->n_params, sizeof(float), e);
    if (!x || !y || !ref || net_ws_init(&ws, m, n, 1, e) < 0) {
        free(x);
        free(y);
        free(ref);
        return -1;
    }
    dataset_gather(ds, idx, n, x, y);
    net_dropout drop = {.seed = g->seed, .epoch = 0, .ids = idx};
    net_forward(&ws, m, g->params, x, y, n, &drop);
    net_backward(&ws, m, g->params, ref, x, y, n, &drop);
    double ref_norm = 0;
    for (size_t i = 0; i < m->n_params; i++) ref_norm += (double)ref[i] * ref[i];
    ref_norm = sqrt(ref_norm);
    // Every device runs the whole probe.
    set_task(g, TASK_TRAIN, ds, idx, 0, 0);
    long step = g->step;
    g->step = 0; // no step fault fires during the check
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        s->dispatched = !s->failed;
        s->n = s->dispatched ? n : 0;
        for (int i = 0; i < s->n; i++) s->pos[i] = i;
    }
    g->n_orphans = 0;
    dispatch(g);
    g->step = step;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->failed) continue;
        double num = 0, worst = 0;
        size_t wi = 0;
        for (size_t i = 0; i < m->n_params; i++) {
            double diff = (double)s->grad_sum[i] - ref[i];
            num += diff * diff;
            if (!(fabs(diff) <= worst)) {
                worst = fabs(diff);
                wi = i;
            }
        }
        double rel = ref_norm > 0 ? sqrt(num) / ref_norm : sqrt(num);
        double lworst = 0;
        for (int i = 0; i < n; i++) {
            double dl = fabs((double)s->loss[i] - ws.loss[i]);
            if (!(dl <= lworst)) lworst = dl;
        }
        if (!(rel <= tol) || !(lworst <= tol * 10)) {
            const char *tensor = "?", *part = "";
            size_t at = wi;
            for (int l = 0; l < m->n_layers; l++) {
                const layer *L = &m->layers[l];
                if (L->w_off != LAYER_NO_PARAM && wi >= L->w_off && wi < L->w_off + L->n_w) {
                    tensor = L->name;
                    part = ".weight";
                    at = wi - L->w_off;
                } else if (L->b_off != LAYER_NO_PARAM && wi >= L->b_off && wi < L->b_off + L->n_b) {
                    tensor = L->name;
                    part = ".bias";
                    at = wi - L->b_off;
                }
            }
            s->failed = 1;
            balance_drop(g, d);
            event(g, "self-check: device %s (%s) excluded: its gradient differs from the CPU "
                     "reference by %.3g (relative L2, tolerance %.3g), worst element %s%s[%zu] "
                     "%.6g vs %.6g; largest loss difference %.3g",
                  s->dev->spec, s->dev->name, rel, tol, tensor, part, at, (double)s->grad_sum[wi],
                  (double)ref[wi], lworst);
        }
    }
    net_ws_free(&ws);
    free(x);
    free(y);
    free(ref);
    if (engine_active(g) == 0) return ht_fail(e, "no device passed the self-check:\n%s", g->events);
    return 0;
}

int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e) {
    if (engine_active(g) < 2) return 0;
    if (B > g->max_batch) B = g->max_batch;
    balance_reset(g);
    // Some drivers compile or tune on the first launch of each new shape, so every measured
    // round follows a warm-up round at the same shares: round 0 warms up at the given weights,
    // round 1 measures them; round 2 warms up at the weights fitted from round 1, round 3
    // measures those. Each device is thus seen at two shard sizes, and the fit can separate
    // fixed from per-sample cost.
    for (int round = 0; round < 4; round++) {
        if (assign(g, NULL, B, 1, e) < 0) return ht_wrap(e, "calibration");
        set_task(g, TASK_TRAIN, ds, idx, 0, 0);
        g->n_orphans = 0;
        long step = g->step;
        g->step = 0;
        dispatch(g);
        g->step = step;
        if (engine_active(g) == 0) return ht_fail(e, "calibration: every device failed");
        if (round % 2 == 0) continue;
        balance_fit_pass(g);
        balance_now(g, B, 1);
    }
    g->since = 0;
    return 0;
}

// Adds the results of the last pass to the step's gradient sum (in device order, so the sum
// does not depend on timing) and outputs; returns 1 when a device returned non-finite values.
static int gather(engine *g, float *loss, int32_t *pred, step_stats *st) {
    int bad = 0;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->failed) continue;
        if (non_finite(g, s)) {
            bad = 1;
            event(g, "step %ld: device %s returned a non-finite loss or gradient", g->step,
                  s->dev->spec);
        }
        float *acc = g->grad;
        const float *gs = s->grad_sum;
        for (size_t i = 0; i < g->m->n_params; i++) acc[i] += gs[i];
        for (int i = 0; i < s->n; i++) {
            if (loss) loss[s->pos[i]] = s->loss[i];
            if (pred) pred[s->pos[i]] = s->pred[i];
        }
        if (st) {
            st->busy_s[d] += s->busy_s;
            st->share[d] += s->n;
        }
    }
    return bad;
}

int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e) {
    if (B < 1 || B > g->max_batch) return ht_fail(e, "engine: batch %d outside 1..%d", B, g->max_batch);
    double t0 = ht_now();
    step_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    g->step++;
    set_task(g, TASK_TRAIN, ds, idx, 0, epoch);
    if (assign(g, NULL, B, 1, e) < 0) return -1;
    if (g->balance == BALANCE_AUTO && g->step % ENGINE_PROBE_EVERY == 0) probe_idle(g);
    g->n_orphans = 0;
    dispatch(g);
    if (g->balance == BALANCE_AUTO) balance_fit_pass(g);
    memset(g->grad, 0, sizeof(float) * g->m->n_params);
    double slowest = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed && g->slots[d].busy_s > slowest)
            slowest = g->slots[d].busy_s;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed) st->wait_s += slowest - g->slots[d].busy_s;
    int bad = gather(g, loss, pred, st);
    // Re-run what failed devices left undone, on the others, until nothing is left.
    while (g->n_orphans > 0) {
        int n = g->n_orphans;
        int *left = malloc(sizeof(int) * (size_t)n);
        if (!left) return ht_fail(e, "out of memory re-planning the step");
        memcpy(left, g->orphans, sizeof(int) * (size_t)n);
        g->n_orphans = 0;
        int rc = assign(g, left, n, 0, e);
        free(left);
        if (rc < 0) return -1;
        dispatch(g);
        bad |= gather(g, loss, pred, st);
    }
    double t1 = ht_now();
    if (bad) {
        if (g->nan_stop)
            return ht_fail(e, "non-finite loss or gradient (--on-nan stop)");
        event(g, "step %ld: update skipped (--on-nan skip)", g->step);
        st->skipped = 1;
    } else {
        float inv = 1.0f / (float)B;
        for (size_t i = 0; i < g->m->n_params; i++) g->grad[i] *= inv;
        optim_step(&g->opt, g->params, g->grad);
        for (int d = 0; d < g->n_devs; d++) g->slots[d].weights_stale = 1;
    }
    double t2 = ht_now(), bcast = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].bcast_s > bcast) bcast = g->slots[d].bcast_s;
    st->host_s = (t2 - t1) + bcast;
    st->wall_s = t2 - t0;
    balance_observe(g, B);
    return 0;
}

int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e) {
    int nc = g->m->n_classes;
    for (int off = 0; off < n; off += g->max_batch) {
        int B = n - off < g->max_batch ? n - off : g->max_batch;
        set_task(g, TASK_INFER, ds, NULL, start + off, 0);
        if (assign(g, NULL, B, 1, e) < 0) return ht_wrap(e, "inference");
        g->n_orphans = 0;
        dispatch(g);
        for (;;) {
            for (int d = 0; d < g->n_devs; d++) {
                engine_slot *s = &g->slots[d];
                if (!s->dispatched || s->failed) continue;
                for (int i = 0; i < s->n; i++)
                    memcpy(probs + (size_t)(off + s->pos[i]) * nc, s->probs + (size_t)i * nc,
                           sizeof(float) * nc);
            }
            if (g->n_orphans == 0) break;
            int k = g->n_orphans;
            int *left = malloc(sizeof(int) * (size_t)k);
            if (!left) return ht_fail(e, "out of memory re-planning inference");
            memcpy(left, g->orphans, sizeof(int) * (size_t)k);
            g->n_orphans = 0;
            int rc = assign(g, left, k, 0, e);
            free(left);
            if (rc < 0) return ht_wrap(e, "inference");
            dispatch(g);
        }
    }
    return 0;
}
