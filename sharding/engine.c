// Step engine: persistent worker threads (one per device), scatter/run/gather/update/broadcast,
// and failover: a device that errs, hangs or returns wrong numbers is dropped and its share of
// the step is run again on the devices left.
#define _GNU_SOURCE // pthread_timedjoin_np
#include "engine.h"

#include <errno.h>
#include <stdatomic.h>
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

// What the engine and its workers share. Reference-counted: a worker the engine gave up on
// keeps it alive until it comes back, so that it never touches freed memory.
struct engine_hub {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen; // pass number
    int stop;
    int refs;          // the engine and each running worker
    float *params;     // the master parameters (n_params)
};

static atomic_int stray_workers;

int engine_stray_workers(void) { return atomic_load(&stray_workers); }

int engine_wait_strays(double seconds) {
    double until = ht_now() + seconds;
    int n;
    while ((n = atomic_load(&stray_workers)) > 0 && ht_now() < until) usleep(10000);
    return n;
}

static void hub_release(engine_hub *h) {
    pthread_mutex_lock(&h->mu);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (!last) return;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->go);
    pthread_cond_destroy(&h->done);
    free(h->params);
    free(h);
}

static void work_free(engine_work *w) {
    if (!w) return;
    free(w->x);
    free(w->y);
    free(w->ids);
    free(w->grad_sum);
    free(w->loss);
    free(w->pred);
    free(w->probs);
    free(w);
}

// The test hook for a device that stops answering: sleeps until the engine shuts down.
static void injected_hang(engine_hub *h) {
    for (;;) {
        pthread_mutex_lock(&h->mu);
        int stop = h->stop;
        pthread_mutex_unlock(&h->mu);
        if (stop) return;
        usleep(20000);
    }
}

#define FAULT_BIT(k) (1u << (k))

// Runs one pass of a worker's task on its device: parameters if asked, then the samples.
static void work_run(engine_work *w) {
    double t0 = ht_now();
    w->rc = 0;
    w->bcast_s = 0;
    w->micro = 0;
    w->note[0] = 0;
    if (w->send_params) {
        if ((w->rc = w->ops->set_params(w->ctx, w->hub->params, &w->err)) < 0) return;
        w->bcast_s = ht_now() - t0;
    }
    if (w->faults & FAULT_BIT(FAULT_HANG)) {
        injected_hang(w->hub);
        w->rc = ht_fail(&w->err, "stopped while hung (HETRAIN_FAULT)");
        return;
    }
    if (w->faults & FAULT_BIT(FAULT_FAIL)) {
        w->rc = ht_fail(&w->err, "injected failure (HETRAIN_FAULT) at step %ld", w->step);
        return;
    }
    if (w->kind == TASK_TRAIN && w->n > 0) {
        shard_job job = {.x = w->x, .y = w->y, .ids = w->ids, .n = w->n, .seed = w->seed,
                         .epoch = w->epoch, .fault_oom = !!(w->faults & FAULT_BIT(FAULT_OOM))};
        shard_result res = {.grad_sum = w->grad_sum, .loss = w->loss, .pred = w->pred};
        w->rc = w->ops->train_shard(w->ctx, &job, &res, &w->err);
        if (w->rc == 0) w->micro = res.micro;
        snprintf(w->note, sizeof w->note, "%s", res.note);
        if (w->rc == 0 && (w->faults & FAULT_BIT(FAULT_CORRUPT)))
            for (size_t i = 0; i < w->n_params; i++) w->grad_sum[i] *= 1.5f;
        if (w->rc == 0 && (w->faults & FAULT_BIT(FAULT_NAN))) w->grad_sum[0] = NAN;
    } else if (w->n > 0) {
        w->rc = w->ops->infer(w->ctx, w->x, w->n, w->probs, &w->err);
    }
    w->busy_s = ht_now() - t0;
}

static void *worker_main(void *arg) {
    engine_work *w = arg;
    engine_hub *h = w->hub;
    unsigned long seen = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->gen == seen) pthread_cond_wait(&h->go, &h->mu);
        if (h->stop) break;
        seen = h->gen;
        if (!w->go) continue;
        pthread_mutex_unlock(&h->mu);
        work_run(w);
        pthread_mutex_lock(&h->mu);
        w->done_gen = seen;
        if (w->abandoned) break;
        pthread_cond_broadcast(&h->done);
    }
    int abandoned = w->abandoned;
    pthread_mutex_unlock(&h->mu);
    if (abandoned) {
        // The engine dropped this device and left it to us: it is ours to close.
        if (w->ops->close) w->ops->close(w->ctx);
        work_free(w);
        atomic_fetch_sub(&stray_workers, 1);
    }
    hub_release(h);
    return NULL;
}

// Hands the positions of device s's pass to its worker: the samples gathered, the faults to
// inject, whether to send the parameters first.
static void work_prepare(engine *g, engine_slot *s) {
    engine_work *w = s->work;
    const dataset *ds = g->task_ds;
    int train = g->task_kind == TASK_TRAIN;
    size_t in = (size_t)ds->c * ds->h * ds->w;
    for (int i = 0; i < s->n; i++) {
        uint32_t id = train ? g->task_idx[s->pos[i]] : (uint32_t)(g->task_start + s->pos[i]);
        memcpy(w->x + i * in, ds->x + (size_t)id * in, sizeof(float) * in);
        w->ids[i] = id;
        w->y[i] = ds->y ? ds->y[id] : 0;
    }
    long step = train ? g->step : 0;
    w->faults = 0;
    for (int k = FAULT_FAIL; k <= FAULT_CORRUPT; k++)
        if (fault_planned(&g->faults, (fault_kind)k, s->dev->spec, step)) w->faults |= FAULT_BIT(k);
    w->kind = g->task_kind;
    w->n = s->n;
    w->seed = g->seed;
    w->epoch = g->task_epoch;
    w->step = g->step;
    w->send_params = s->params_stale;
    w->go = s->dispatched;
}

// Runs the current task on every dispatched device and waits for them, at most timeout_s. A
// device that errs or does not answer is marked failed (with an event); its positions go to
// g->orphans. A device that does not answer is given up: its worker keeps its own buffers and
// closes the device if it ever comes back. Returns the number of devices that failed.
static int dispatch(engine *g) {
    engine_hub *h = g->hub;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->work) s->work->go = 0;
        if (s->dispatched) work_prepare(g, s);
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double whole = floor(g->timeout_s);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((g->timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->mu);
    unsigned long gen = ++h->gen;
    pthread_cond_broadcast(&h->go);
    for (;;) {
        int waiting = 0;
        for (int d = 0; d < g->n_devs; d++)
            waiting += g->slots[d].dispatched && g->slots[d].work->done_gen != gen;
        if (!waiting) break;
        if (pthread_cond_timedwait(&h->done, &h->mu, &deadline) == ETIMEDOUT) break;
    }
    int failed = 0;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched) continue;
        engine_work *w = s->work;
        const char *note = "";
        if (w->done_gen != gen) {
            // Its thread is still inside the device: leave both to it from now on.
            w->abandoned = 1;
            s->work = NULL;
            s->dev->hung = 1;
            pthread_detach(g->threads[d]);
            atomic_fetch_add(&stray_workers, 1);
            s->rc = ht_fail(&s->err, "no answer within %g s (a device only slow for shards of "
                                     "%d samples needs a longer --device-timeout)", g->timeout_s, s->n);
        } else {
            s->rc = w->rc;
            s->err = w->err;
            s->busy_s = w->busy_s;
            s->bcast_s = w->bcast_s;
            if (w->rc == 0 && w->send_params) s->params_stale = 0;
            if (w->rc == 0 && w->micro > 0) s->dev->micro = w->micro;
            note = w->note;
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
        } else if (note[0]) {
            event(g, "step %ld: device %s: %s", g->step, s->dev->spec, note);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return failed;
}

// Plans `n` positions over the active devices (plan cached for the full batch only).
static int plan_active(engine *g, shard_plan *p, int n, ht_error *e) {
    double w[HT_MAX_DEVICES];
    int k = 0;
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->plan_dev[k] = d;
        w[k++] = g->devs[d].capacity > 0 ? g->devs[d].capacity : 1;
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

// Whether a pass's results hold a non-finite loss or gradient element.
static int non_finite(const engine_work *w) {
    for (int i = 0; i < w->n; i++)
        if (!isfinite(w->loss[i])) return 1;
    for (size_t i = 0; i < w->n_params; i++)
        if (!isfinite(w->grad_sum[i])) return 1;
    return 0;
}

static engine_work *work_alloc(engine *g, const device *dev, ht_error *e) {
    size_t B = (size_t)g->max_batch, in = (size_t)g->m->in_c * g->m->in_h * g->m->in_w;
    engine_work *w = ht_calloc(1, sizeof *w, e);
    if (!w) return NULL;
    w->hub = g->hub;
    w->ops = dev->ops;
    w->ctx = dev->ctx;
    w->n_params = g->m->n_params;
    w->x = ht_malloc(B * in, sizeof *w->x, e);
    w->y = ht_calloc(B, sizeof *w->y, e);
    w->ids = ht_malloc(B, sizeof *w->ids, e);
    w->grad_sum = ht_malloc(g->m->n_params, sizeof *w->grad_sum, e);
    w->loss = ht_malloc(B, sizeof *w->loss, e);
    w->pred = ht_malloc(B, sizeof *w->pred, e);
    w->probs = ht_malloc(B * (size_t)g->m->n_classes, sizeof *w->probs, e);
    if (!w->x || !w->y || !w->ids || !w->grad_sum || !w->loss || !w->pred || !w->probs) {
        work_free(w);
        return NULL;
    }
    return w;
}

int engine_init(engine *g, const model *m, device *devs, int n_devs, const float *params,
                const train_setup *s, int max_batch, uint64_t seed, ht_error *e) {
    memset(g, 0, sizeof *g);
    if (n_devs < 1 || n_devs > HT_MAX_DEVICES)
        return ht_fail(e, "engine: %d devices (1..%d)", n_devs, HT_MAX_DEVICES);
    if (fault_plan_parse(&g->faults, getenv("HETRAIN_FAULT"), e) < 0) return -1;
    g->m = m;
    g->devs = devs;
    g->n_devs = n_devs;
    g->max_batch = max_batch;
    g->seed = seed;
    g->balance = BALANCE_STATIC;
    g->rebalance = 1;
    g->timeout_s = ENGINE_DEFAULT_TIMEOUT;
    engine_hub *h = g->hub = ht_calloc(1, sizeof *h, e);
    if (!h) return -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->go, NULL);
    pthread_cond_init(&h->done, NULL);
    h->refs = 1;
    h->params = g->params = ht_malloc(m->n_params, sizeof(float), e);
    g->grad = ht_malloc(m->n_params, sizeof(float), e);
    g->orphans = ht_malloc((size_t)max_batch, sizeof *g->orphans, e);
    g->slots = ht_calloc((size_t)n_devs, sizeof *g->slots, e);
    g->threads = ht_calloc((size_t)n_devs, sizeof *g->threads, e);
    if (!g->params || !g->grad || !g->orphans || !g->slots || !g->threads ||
        optim_init(&g->opt, s, m->n_params, e) < 0) {
        engine_free(g);
        return -1;
    }
    memcpy(g->params, params, sizeof(float) * m->n_params);
    for (int d = 0; d < n_devs; d++) {
        engine_slot *sl = &g->slots[d];
        sl->dev = &devs[d];
        sl->params_stale = 1;
        sl->pos = ht_malloc((size_t)max_batch, sizeof *sl->pos, e);
        sl->work = sl->pos ? work_alloc(g, &devs[d], e) : NULL;
        if (!sl->work) {
            engine_free(g);
            return ht_wrap(e, "buffers for device %s", devs[d].spec);
        }
        pthread_mutex_lock(&h->mu);
        h->refs++;
        pthread_mutex_unlock(&h->mu);
        if (pthread_create(&g->threads[d], NULL, worker_main, sl->work) != 0) {
            pthread_mutex_lock(&h->mu);
            h->refs--;
            pthread_mutex_unlock(&h->mu);
            engine_free(g);
            return ht_fail(e, "engine: cannot start a worker thread for device %s", devs[d].spec);
        }
        sl->started = 1;
    }
    return 0;
}

void engine_free(engine *g) {
    engine_hub *h = g->hub;
    if (h) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_broadcast(&h->go);
        pthread_mutex_unlock(&h->mu);
        // A worker given up on (work == NULL) is detached and frees its own; join the others.
        for (int d = 0; g->slots && d < g->n_devs; d++)
            if (g->slots[d].started && g->slots[d].work) pthread_join(g->threads[d], NULL);
    }
    for (int d = 0; g->slots && d < g->n_devs; d++) {
        free(g->slots[d].pos);
        work_free(g->slots[d].work);
    }
    free(g->threads);
    free(g->slots);
    free(g->grad);
    free(g->orphans);
    optim_free(&g->opt);
    shard_plan_free(&g->plan);
    if (h) hub_release(h); // frees the parameters with the last worker
    else free(g->params);
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

int engine_self_check(engine *g, const dataset *ds, const uint32_t *idx, int n, ht_error *e) {
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
    int out = 0; // the output layer: the last with parameters
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].w_off != LAYER_NO_PARAM || m->layers[l].b_off != LAYER_NO_PARAM) out = l;
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
        const engine_work *w = s->work;
        // Per tensor, against its own tolerance; the tensor furthest over it is reported.
        double excess = 0, rel_at = 0, tol_at = 0;
        const char *tensor = "?", *part = "";
        size_t wi = 0, at = 0;
        for (int l = 0; l < m->n_layers; l++) {
            const layer *L = &m->layers[l];
            double tol = l == out ? ENGINE_SELF_CHECK_TOL_OUT : ENGINE_SELF_CHECK_TOL_BRANCH;
            for (int p = 0; p < 2; p++) {
                size_t off = p ? L->b_off : L->w_off, cnt = p ? L->n_b : L->n_w;
                if (off == LAYER_NO_PARAM) continue;
                double num = 0, den = 0, worst = -1;
                size_t wj = off;
                for (size_t i = off; i < off + cnt; i++) {
                    double diff = (double)w->grad_sum[i] - ref[i];
                    num += diff * diff;
                    den += (double)ref[i] * ref[i];
                    if (!(fabs(diff) <= worst)) {
                        worst = fabs(diff);
                        wj = i;
                    }
                }
                double rel = den > 0 ? sqrt(num / den) : sqrt(num);
                if (!(rel / tol <= excess)) {
                    excess = isnan(rel) ? INFINITY : rel / tol;
                    rel_at = rel;
                    tol_at = tol;
                    tensor = L->name;
                    part = p ? ".bias" : ".weight";
                    wi = wj;
                    at = wj - off;
                }
            }
        }
        double lworst = 0;
        for (int i = 0; i < n; i++) {
            double dl = fabs((double)w->loss[i] - ws.loss[i]);
            if (!(dl <= lworst)) lworst = dl;
        }
        if (!(excess <= 1) || !(lworst <= ENGINE_SELF_CHECK_TOL_LOSS)) {
            s->failed = 1;
            balance_drop(g, d);
            event(g, "self-check: device %s (%s) excluded: its gradient of %s%s differs from the "
                     "CPU reference by %.3g (relative L2, tolerance %.3g), worst element [%zu] "
                     "%.6g vs %.6g; largest loss difference %.3g (tolerance %.3g)",
                  s->dev->spec, s->dev->name, tensor, part, rel_at, tol_at, at,
                  (double)w->grad_sum[wi], (double)ref[wi], lworst, ENGINE_SELF_CHECK_TOL_LOSS);
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
    // round follows a warm-up round at the same shares: round 0 warms up at the given capacities,
    // round 1 measures them; round 2 warms up at the capacities fitted from round 1, round 3
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
        const engine_work *w = s->work;
        if (non_finite(w)) {
            bad = 1;
            event(g, "step %ld: device %s returned a non-finite loss or gradient", g->step,
                  s->dev->spec);
        }
        float *acc = g->grad;
        const float *gs = w->grad_sum;
        for (size_t i = 0; i < g->m->n_params; i++) acc[i] += gs[i];
        for (int i = 0; i < s->n; i++) {
            if (loss) loss[s->pos[i]] = w->loss[i];
            if (pred) pred[s->pos[i]] = w->pred[i];
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
        for (int d = 0; d < g->n_devs; d++) g->slots[d].params_stale = 1;
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
                    memcpy(probs + (size_t)(off + s->pos[i]) * nc, s->work->probs + (size_t)i * nc,
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
