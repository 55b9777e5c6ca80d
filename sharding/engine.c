// Step engine: persistent worker threads (one per device), scatter/run/gather/update/broadcast,
// and failover: a device that errs, hangs or returns wrong numbers is dropped and its share of
// the step is run again on the devices left.
//
// Every pass (a step's shards, a re-run of failed shards, a broadcast, an inference chunk) is
// an engine_task handed to the workers: the engine gathers each device's samples into that
// device's own buffers, wakes the workers, waits for them up to the timeout, and copies the
// outcome out. Nothing is shared with a worker while it runs but its own buffers and the
// read-only master parameters of a broadcast.
#define _GNU_SOURCE
#include "engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "balance.h"
#include "optim.h"
#include "plan.h"
#include "ranks.h"

#define ENGINE_REPLAN_GAIN 0.03 // re-plan only for a predicted step this much faster
#define ENGINE_MIN_SHARE 0.005  // a device keeps at least this fraction of the largest capacity
#define ENGINE_PROBE_EVERY 20   // steps between probes of devices the plan gives no samples

typedef enum task_kind { TASK_TRAIN, TASK_INFER, TASK_PARAMS } task_kind;

// What one pass asks of the devices. Training: idx[j] is the sample at batch position j;
// inference: position j is sample start + j; a broadcast carries no samples.
typedef struct engine_task {
    task_kind kind;
    const dataset *ds;
    const uint32_t *idx;
    int start;
    uint32_t epoch;
    long step; // the training step (from 1); 0 outside training
} engine_task;

// What the engine and its workers share. Reference-counted: a worker the engine gave up on
// keeps it alive until it comes back, so that it never touches freed memory.
typedef struct engine_hub {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen; // pass number
    int stop;
    int refs;          // the engine and each running worker
    float *params;     // the master parameters (n_params)
    float **retired;   // master buffers a worker given up on may still read (retire_params)
    int n_retired;
} engine_hub;

// Everything a worker thread touches, allocated per device on its own so that the engine can
// give up on a worker that stopped answering (hung) and leave this to it: such a worker frees
// it, and closes its device, when (if ever) it comes back. The engine writes the task fields
// before a pass and reads the results after it, never while the worker runs.
typedef struct engine_work {
    engine_hub *hub;
    const device_ops *ops;
    void *ctx;
    // The task of this pass.
    int go;           // takes part in this pass
    task_kind kind;
    int n;            // samples, gathered by the engine into x, y, ids
    uint64_t seed;
    uint32_t epoch;
    long step;
    size_t n_params;
    float *x;         // (max_batch, in)
    uint8_t *y;
    uint32_t *ids;
    // The results.
    float *grad_sum;  // (n_params)
    float *loss;
    int32_t *pred;
    float *probs;     // (max_batch, n_classes)
    int rc;
    ht_error err;
    char note[256];   // the device's own note from its last shard
    int micro;        // the device's micro-batch after the shard (0: unchanged)
    double busy_s;
    unsigned long done_gen; // the last pass it finished
    int abandoned;    // the engine gave up on it: the worker owns this struct now
} engine_work;

// The engine's view of a device: what it decided of it and learned from it. The device itself
// is only read (its ops, context, spec and name).
typedef struct engine_slot {
    device *dev;
    double capacity;  // relative capacity: its share of a batch is capacity / sum (0: dropped)
    int micro;        // its micro-batch as of its last shard (it shrinks on out-of-memory)
    int hung;         // stopped answering: its worker may still be inside it (engine_gave_up)
    engine_work *work; // NULL once the device hung
    int n;            // positions this pass
    int *pos;         // (max_batch) batch positions of this device
    // The outcome of the last pass, copied from work when it finished.
    double busy_s;
    int rc;
    ht_error err;
    int dispatched;   // takes part in the current pass
    int failed;       // dropped for good
    int started;      // its worker thread runs
} engine_slot;

struct engine {
    const model *m;
    device *devs;
    int n_devs;
    int max_batch;
    uint64_t seed;
    data_augment aug; // applied to training steps' samples as they are gathered (engine_config)
    float *params;   // master parameters (n_params), read by the workers through the hub
    float *grad;     // the step's gradient sum, then the rest of the step's one reduction
                     // (reduce_group): losses, predictions, flags
    int grad_ready;  // grad holds the last step's gradient sum
    float grad_scale; // 1/B: the mean gradient is the sum * grad_scale
    int grad_mean;   // grad holds the mean gradient instead (engine_grad made it)
    int bound;       // some device reads the master parameters in place (bind_params)
    optim opt;
    shard_plan plan; // over the active devices, for plan.len positions; remade when needed
    int plan_dev[HT_MAX_DEVICES]; // plan index -> device index
    engine_slot *slots;
    int *orphans;    // batch positions whose device failed, to run again (max_batch)
    uint8_t *own;    // (max_batch) positions this rank computed in the current step
    int span;        // steps are planned and reduced over every rank (ranks.h), not this
                     // process alone (engine_config.alone, or one rank): group_*
    const volatile int *stop_flag; // the job's stop request (a signal), engine_config's
    int stop_agreed; // over several ranks: some rank's stop_flag was set at the last step
    int peers_active; // the other ranks' active devices, as of the last plan_batch
    int n_orphans;
    long step;       // training steps done
    double timeout_s;
    int nan_stop;    // non-finite values stop the run instead of skipping the step
    char events[4096]; // what happened since engine_take_events, one line each
    char last_failure[600]; // the last device failure, for the error when none is left
    int rebalance;   // auto balance: re-fit every this many steps; 0: static
    int since;       // steps since the last re-fit
    balance bal;     // the devices' measured times
    pthread_t *threads;
    engine_hub *hub;
    double prep_s, pass_s; // training passes' times since engine_train_step began (dispatch)
};

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

const float *engine_params(const engine *g) { return g->params; }
// The optimiser takes the sum and the scale; the mean is made only when asked for.
const float *engine_grad(engine *g) {
    if (g->grad_ready && !g->grad_mean) {
        size_t n = g->m->n_params;
        for (size_t i = 0; i < n; i++) g->grad[i] *= g->grad_scale;
        g->grad_mean = 1;
    }
    return g->grad;
}

void engine_set_timeout(engine *g, double seconds) {
    g->timeout_s = seconds > 0 ? seconds : ENGINE_DEFAULT_TIMEOUT;
}
int engine_stopping(const engine *g) {
    if (g->span) return g->stop_agreed;
    return g->stop_flag && *g->stop_flag;
}

void engine_capacities(const engine *g, double *cap) {
    for (int d = 0; d < g->n_devs; d++) cap[d] = g->slots[d].failed ? 0 : g->slots[d].capacity;
}

// The ranks a step spans: every rank of the job, or this process alone. Everything below runs
// the same code for both; over one rank these collectives are copies.
static int group_size(const engine *g) { return g->span ? ranks_size() : 1; }
static int group_rank(const engine *g) { return g->span ? ranks_rank() : 0; }

// Every rank's n doubles, in rank order, into all (group_size * n).
static int group_allgather(const engine *g, const double *mine, double *all, int n, ht_error *e) {
    if (g->span) return ranks_allgather(mine, all, n, e);
    memcpy(all, mine, sizeof(double) * (size_t)n);
    return 0;
}

// buf summed over the ranks in rank order, the same bits on every rank.
static int group_sum(const engine *g, float *buf, size_t n, ht_error *e) {
    return g->span ? ranks_sum_ordered(buf, n, e) : 0;
}

int engine_micro(const engine *g, int d) { return g->slots[d].micro; }

int engine_gave_up(const engine *g, int d) { return g->slots[d].hung; }

// Sets the capacities of the active devices (dropped ones stay 0; none below the minimum
// share) and drops the cached plan.
static void set_capacities(engine *g, const double *cap) {
    double top = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (!g->slots[d].failed && cap[d] > top) top = cap[d];
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->slots[d].capacity = cap[d] > top * ENGINE_MIN_SHARE ? cap[d] : top * ENGINE_MIN_SHARE;
    }
    shard_plan_free(&g->plan);
}

// Capacities from the fits for batches of B, over the devices of every rank of the step: every
// rank gathers every rank's fits and computes the same capacities (in plan_batch's (rank,
// device) order), keeping its own devices'. The plan itself is made from the capacities every
// rank then has (plan_batch), so the ranks agree on it even if their arithmetic differed.
// Unless forced, the plan changes only when the fit predicts a step at least
// ENGINE_REPLAN_GAIN faster: every re-plan changes the shard shapes a device sees, and some
// drivers pay for new shapes (new GEMM kernels).
static void refit(engine *g, int B, int force) {
    enum { PER = 6 * HT_MAX_DEVICES }; // 5 fit sums and an active flag per device
    int R = group_size(g), me = group_rank(g);
    double mine[PER] = {0}, *all = malloc(sizeof(double) * (size_t)R * PER);
    ht_error e;
    if (!all) return; // the capacities stay as they are
    for (int d = 0; d < g->n_devs; d++) {
        memcpy(&mine[5 * d], g->bal.fit[d], sizeof g->bal.fit[d]);
        mine[5 * HT_MAX_DEVICES + d] = !g->slots[d].failed;
    }
    // A failed gather leaves the capacities alone; the step's own reduction reports the error.
    if (group_allgather(g, mine, all, PER, &e) < 0) {
        free(all);
        return;
    }
    balance glob;
    int loc[HT_MAX_DEVICES], active[HT_MAX_DEVICES], k = 0;
    balance_reset(&glob, HT_MAX_DEVICES);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < HT_MAX_DEVICES; d++) {
            const double *a = all + (size_t)r * PER;
            if (!(a[5 * HT_MAX_DEVICES + d] > 0)) continue;
            if (k == HT_MAX_DEVICES) { // plan_batch refuses this many
                free(all);
                return;
            }
            memcpy(glob.fit[k], &a[5 * d], sizeof glob.fit[k]);
            loc[k] = r == me ? d : -1;
            active[k++] = 1;
        }
    free(all);
    glob.n = k;
    double cap[HT_MAX_DEVICES], now[HT_MAX_DEVICES] = {0}, top = 0;
    if (k == 0 || balance_capacities(&glob, active, B, cap) < 0) return; // not all measured yet
    if (!force && g->plan.pattern && g->plan.len == B && g->plan.n_devs == k) {
        for (int i = 0; i < k; i++) now[i] = g->plan.count[i];
        if (balance_predict(&glob, active, now) <=
            balance_predict(&glob, active, cap) * (1 + ENGINE_REPLAN_GAIN))
            return;
    }
    for (int i = 0; i < k; i++) top = cap[i] > top ? cap[i] : top;
    for (int i = 0; i < k; i++)
        if (loc[i] >= 0)
            g->slots[loc[i]].capacity = cap[i] > top * ENGINE_MIN_SHARE ? cap[i] : top * ENGINE_MIN_SHARE;
    shard_plan_free(&g->plan);
}

// Adds the last pass's compute times to the fits.
static void observe_pass(engine *g) {
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->dispatched && !s->failed && s->rc == 0 && s->n > 0 && s->busy_s > 0)
            balance_add(&g->bal, d, s->n, s->busy_s);
    }
}

// A device leaves for good: no capacity, no measurements, no plan that names it.
static void drop(engine *g, int d) {
    g->slots[d].failed = 1;
    g->slots[d].capacity = 0;
    balance_forget(&g->bal, d);
    shard_plan_free(&g->plan);
}

void engine_drop_device(engine *g, int d) {
    if (d < 0 || d >= g->n_devs || g->slots[d].failed) return;
    drop(g, d);
    event(g, "device %s dropped on request", g->devs[d].spec);
}

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
    for (int i = 0; i < h->n_retired; i++) free(h->retired[i]);
    free(h->retired);
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

// Runs one pass of a worker's task on its device.
static void work_run(engine_work *w) {
    double t0 = ht_now();
    w->rc = 0;
    w->micro = 0;
    w->note[0] = 0;
    if (w->kind == TASK_PARAMS) {
        w->rc = w->ops->set_params(w->ctx, w->hub->params, &w->err);
    } else if (w->kind == TASK_TRAIN) {
        shard_job job = {.x = w->x, .y = w->y, .ids = w->ids, .n = w->n, .seed = w->seed,
                         .epoch = w->epoch, .step = w->step};
        shard_result res = {.grad_sum = w->grad_sum, .loss = w->loss, .pred = w->pred};
        w->rc = w->ops->train_shard(w->ctx, &job, &res, &w->err);
        if (w->rc == 0) w->micro = res.micro;
        snprintf(w->note, sizeof w->note, "%s", res.note);
    } else {
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

// Hands device s's part of task t to its worker: its samples gathered into its own buffers.
static void work_prepare(engine *g, engine_slot *s, const engine_task *t) {
    engine_work *w = s->work;
    if (t->kind != TASK_PARAMS) {
        for (int i = 0; i < s->n; i++)
            w->ids[i] = t->kind == TASK_TRAIN ? t->idx[s->pos[i]] : (uint32_t)(t->start + s->pos[i]);
        if (!t->ds->y) memset(w->y, 0, (size_t)s->n);
        // Training steps (step >= 1) gather augmented samples; the self-check and the
        // calibration (step 0) and inference gather them as they are.
        dataset_gather_augment(t->ds, w->ids, s->n, w->x, w->y,
                               t->kind == TASK_TRAIN && t->step > 0 ? &g->aug : NULL, g->seed,
                               t->epoch);
    }
    w->kind = t->kind;
    w->n = s->n;
    w->seed = g->seed;
    w->epoch = t->epoch;
    w->step = t->step;
    w->go = 1;
}

// A worker given up on may still be reading the master parameters if its device had them bound
// (bind_params): from now on the engine updates a copy, and the buffer it left stays, unchanged,
// with the hub until the last worker is gone. The devices still in use are bound to the copy at
// the next broadcast; until then the old buffer holds the same values.
static void retire_params(engine *g) {
    engine_hub *h = g->hub;
    if (!g->bound) return;
    float *copy = malloc(sizeof(float) * g->m->n_params);
    float **list = realloc(h->retired, sizeof *list * (size_t)(h->n_retired + 1));
    if (list) h->retired = list;
    if (!copy || !list) { // out of memory: leave it (the stray reads a buffer being updated)
        free(copy);
        return;
    }
    memcpy(copy, g->params, sizeof(float) * g->m->n_params);
    h->retired[h->n_retired++] = g->params;
    h->params = g->params = copy;
}

static const char *pass_name(const engine_task *t) {
    return t->kind == TASK_TRAIN ? "step" : t->kind == TASK_INFER ? "inference, step" : "broadcast, step";
}

// Runs task t on every dispatched device and waits for them, at most timeout_s. A device that
// errs or does not answer is dropped (with an event); its positions go to g->orphans. A device
// that does not answer is given up: its worker keeps its own buffers and closes the device if
// it ever comes back. Returns the number of devices that failed.
static int dispatch(engine *g, const engine_task *t) {
    engine_hub *h = g->hub;
    double t0 = ht_now();
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->work) s->work->go = 0;
        if (s->dispatched) work_prepare(g, s, t);
    }
    double t1 = ht_now();
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
    if (t->kind == TASK_TRAIN) {
        g->prep_s += t1 - t0;
        g->pass_s += ht_now() - t1;
    }
    int failed = 0;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched) continue;
        engine_work *w = s->work;
        const char *note = "";
        if (w->done_gen != gen) {
            // Its thread is still inside the device: leave both to it from now on.
            retire_params(g);
            w->abandoned = 1;
            s->work = NULL;
            s->hung = 1;
            pthread_detach(g->threads[d]);
            atomic_fetch_add(&stray_workers, 1);
            if (t->kind == TASK_PARAMS)
                s->rc = ht_fail(&s->err, "no answer within %g s", g->timeout_s);
            else
                s->rc = ht_fail(&s->err, "no answer within %g s (a device only slow for shards of "
                                         "%d samples needs a longer --device-timeout)", g->timeout_s, s->n);
        } else {
            s->rc = w->rc;
            s->err = w->err;
            s->busy_s = w->busy_s;
            if (w->rc == 0 && w->micro > 0) s->micro = w->micro;
            note = w->note;
        }
        if (s->rc < 0) {
            failed++;
            drop(g, d);
            for (int i = 0; i < s->n; i++) g->orphans[g->n_orphans++] = s->pos[i];
            snprintf(g->last_failure, sizeof g->last_failure, "%s: %s", s->dev->spec, s->err.msg);
            if (s->n > 0)
                event(g, "%s %ld: device %s failed and was dropped: %s; its %d sample%s went to "
                         "the other devices", pass_name(t), g->step, s->dev->spec, s->err.msg, s->n,
                      s->n == 1 ? "" : "s");
            else
                event(g, "%s %ld: device %s failed and was dropped: %s", pass_name(t), g->step,
                      s->dev->spec, s->err.msg);
        } else if (note[0]) {
            event(g, "step %ld: device %s: %s", g->step, s->dev->spec, note);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return failed;
}

// Sends the master parameters to every active device. Adds each device's time to st.
static int broadcast(engine *g, step_stats *st, ht_error *e) {
    engine_task t = {.kind = TASK_PARAMS, .step = g->step};
    int copies = 0;
    g->bound = 0;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        s->n = 0;
        s->dispatched = 0;
        if (s->failed) continue;
        // A device that reads the parameters in place is bound here, on the engine's thread
        // (its worker is idle); the others copy them on their own threads.
        const device_ops *ops = s->dev->ops;
        ht_error be;
        if (ops->bind_params && ops->bind_params(s->dev->ctx, g->params, &be) == 0) {
            g->bound = 1;
            continue;
        }
        s->dispatched = 1;
        copies++;
    }
    g->n_orphans = 0;
    if (copies) dispatch(g, &t);
    for (int d = 0; st && d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed) st->busy_s[d] += g->slots[d].busy_s;
    if (engine_active(g) == 0)
        return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    return 0;
}

int engine_set_params(engine *g, const float *params, ht_error *e) {
    memcpy(g->params, params, sizeof(float) * g->m->n_params);
    return broadcast(g, NULL, e);
}

void engine_get_state(const engine *g, engine_state *st) {
    memset(st, 0, sizeof *st);
    st->step = g->step;
    st->optim_t = g->opt.t;
    st->since = g->since;
    st->n_devs = g->n_devs;
    engine_capacities(g, st->capacity);
    memcpy(st->fit, g->bal.fit, sizeof st->fit);
}

void engine_set_lr_factor(engine *g, double f) { optim_set_lr_factor(&g->opt, f); }

float engine_lr(const engine *g) { return optim_lr(&g->opt); }

void engine_moments(const engine *g, const float **m, const float **v) {
    *m = g->opt.m;
    *v = g->opt.v;
}

int engine_restore(engine *g, const engine_state *st, const float *params, const float *m,
                   const float *v, ht_error *e) {
    size_t n = g->m->n_params;
    if (!m != !g->opt.m || !v != !g->opt.v)
        return ht_fail(e, "the optimiser state does not match the optimiser (%s)",
                       g->opt.v ? "Adam needs two moments" : "SGD has one moment");
    if (m) memcpy(g->opt.m, m, sizeof(float) * n);
    if (v) memcpy(g->opt.v, v, sizeof(float) * n);
    g->opt.t = st->optim_t;
    g->step = st->step;
    g->since = st->since;
    if (st->n_devs == g->n_devs) {
        int any = 0;
        for (int d = 0; d < g->n_devs; d++) any |= !g->slots[d].failed && st->capacity[d] > 0;
        if (any) {
            set_capacities(g, st->capacity);
            memcpy(g->bal.fit, st->fit, sizeof g->bal.fit);
        }
    }
    return engine_set_params(g, params, e);
}

// Plans `n` positions over this rank's active devices: a re-run of failed devices' positions.
static int plan_local(engine *g, shard_plan *p, int n, ht_error *e) {
    double cap[HT_MAX_DEVICES];
    int k = 0;
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->plan_dev[k] = d;
        cap[k++] = g->slots[d].capacity > 0 ? g->slots[d].capacity : 1;
    }
    if (k == 0) return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    return shard_plan_init(p, cap, k, n, e);
}

// The plan of a whole batch over the active devices of every rank of the step, in (rank,
// device) order: each rank gathers every rank's capacities and makes the same plan;
// g->plan_dev maps a plan index to a device of this rank, or -1 for another rank's.
static int plan_batch(engine *g, shard_plan *p, int n, ht_error *e) {
    int R = group_size(g), me = group_rank(g);
    double mine[HT_MAX_DEVICES] = {0}, *all = ht_malloc((size_t)R * HT_MAX_DEVICES, sizeof(double), e);
    if (!all) return -1;
    for (int d = 0; d < g->n_devs; d++)
        if (!g->slots[d].failed) mine[d] = g->slots[d].capacity > 0 ? g->slots[d].capacity : 1;
    if (group_allgather(g, mine, all, HT_MAX_DEVICES, e) < 0) {
        free(all);
        return -1;
    }
    double cap[HT_MAX_DEVICES];
    int k = 0, peers = 0, rc = 0;
    for (int r = 0; r < R && rc == 0; r++)
        for (int d = 0; d < HT_MAX_DEVICES && rc == 0; d++) {
            if (!(all[(size_t)r * HT_MAX_DEVICES + d] > 0)) continue;
            if (k == HT_MAX_DEVICES) {
                rc = ht_fail(e, "more than %d devices over all ranks", HT_MAX_DEVICES);
                break;
            }
            g->plan_dev[k] = r == me ? d : -1;
            peers += r != me;
            cap[k++] = all[(size_t)r * HT_MAX_DEVICES + d];
        }
    free(all);
    if (rc < 0) return -1;
    if (k == 0 && R > 1) return ht_fail(e, "every device of every rank has failed");
    if (k == 0) return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    g->peers_active = peers;
    return shard_plan_init(p, cap, k, n, e);
}

// Gives every active device its positions among `positions` (NULL: 0..n-1) and marks it
// dispatched. A whole batch (`batch`) is planned over every rank's devices into g->plan, made
// again for every batch from every rank's capacities now (a rank alone cannot know that
// another one's changed); a re-run of failed devices' positions over this rank's devices left.
static int assign(engine *g, const int *positions, int n, int batch, ht_error *e) {
    shard_plan tmp, *p = &g->plan;
    if (batch) {
        shard_plan_free(&g->plan);
        if (plan_batch(g, &g->plan, n, e) < 0) return -1;
    } else {
        if (plan_local(g, &tmp, n, e) < 0) return -1;
        p = &tmp;
    }
    for (int d = 0; d < g->n_devs; d++) {
        g->slots[d].n = 0;
        g->slots[d].dispatched = 0;
    }
    for (int j = 0; j < n; j++) {
        int d = g->plan_dev[p->pattern[j]];
        if (d < 0) continue; // another rank's
        engine_slot *s = &g->slots[d];
        s->pos[s->n++] = positions ? positions[j] : j;
    }
    // A device with no samples this pass sits it out: no launch, no wait.
    for (int d = 0; d < g->n_devs; d++) g->slots[d].dispatched = g->slots[d].n > 0;
    if (!batch) shard_plan_free(&tmp);
    return 0;
}

// Runs the positions that failed devices left in g->orphans on the others, until none is left;
// after each pass, `collect` takes what it produced.
static int rerun_orphans(engine *g, const engine_task *t, void (*collect)(engine *, void *),
                         void *arg, ht_error *e) {
    while (g->n_orphans > 0) {
        int n = g->n_orphans;
        int *left = malloc(sizeof(int) * (size_t)n);
        if (!left) return ht_fail(e, "out of memory re-planning the failed devices' samples");
        memcpy(left, g->orphans, sizeof(int) * (size_t)n);
        g->n_orphans = 0;
        int rc = assign(g, left, n, 0, e);
        free(left);
        if (rc < 0) return -1;
        dispatch(g, t);
        collect(g, arg);
    }
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
static int non_finite(const engine_work *w, int with_grad) {
    for (int i = 0; i < w->n; i++)
        if (!isfinite(w->loss[i])) return 1;
    for (size_t i = 0; with_grad && i < w->n_params; i++)
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

int engine_open(engine **out, const engine_config *c, ht_error *e) {
    *out = NULL;
    const model *m = c->m;
    device *devs = c->devs;
    int n_devs = c->n_devs, max_batch = c->max_batch;
    if (n_devs < 1 || n_devs > HT_MAX_DEVICES)
        return ht_fail(e, "engine: %d devices (1..%d)", n_devs, HT_MAX_DEVICES);
    if (max_batch < 1) return ht_fail(e, "engine: batches of %d samples at most", max_batch);
    engine *g = ht_calloc(1, sizeof *g, e);
    if (!g) return -1;
    g->m = m;
    g->devs = devs;
    g->n_devs = n_devs;
    g->max_batch = max_batch;
    g->seed = c->seed;
    g->rebalance = c->rebalance > 0 ? c->rebalance : 0;
    engine_set_timeout(g, c->timeout_s);
    g->nan_stop = c->nan_stop;
    g->aug = c->augment;
    g->span = !c->alone && ranks_size() > 1;
    g->stop_flag = c->stop_flag;
    balance_reset(&g->bal, n_devs);
    engine_hub *h = g->hub = ht_calloc(1, sizeof *h, e);
    if (!h) {
        free(g);
        return -1;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->go, NULL);
    pthread_cond_init(&h->done, NULL);
    h->refs = 1;
    h->params = g->params = ht_malloc(m->n_params, sizeof(float), e);
    g->grad = ht_calloc(m->n_params + 2 * (size_t)max_batch + 2, sizeof(float), e);
    g->orphans = ht_malloc((size_t)max_batch, sizeof *g->orphans, e);
    g->own = ht_calloc((size_t)max_batch, 1, e);
    g->slots = ht_calloc((size_t)n_devs, sizeof *g->slots, e);
    g->threads = ht_calloc((size_t)n_devs, sizeof *g->threads, e);
    if (!g->params || !g->grad || !g->orphans || !g->own || !g->slots || !g->threads ||
        optim_init(&g->opt, &m->setup, m->n_params, e) < 0 ||
        (m->setup.weight_decay > 0 && optim_decay_kernels(&g->opt, m, e) < 0)) {
        engine_close(g);
        return -1;
    }
    memcpy(g->params, c->params, sizeof(float) * m->n_params);
    for (int d = 0; d < n_devs; d++) {
        engine_slot *sl = &g->slots[d];
        sl->dev = &devs[d];
        sl->capacity = devs[d].capacity;
        sl->micro = devs[d].micro;
        sl->pos = ht_malloc((size_t)max_batch, sizeof *sl->pos, e);
        sl->work = sl->pos ? work_alloc(g, &devs[d], e) : NULL;
        if (!sl->work) {
            engine_close(g);
            return ht_wrap(e, "buffers for device %s", devs[d].spec);
        }
        pthread_mutex_lock(&h->mu);
        h->refs++;
        pthread_mutex_unlock(&h->mu);
        if (pthread_create(&g->threads[d], NULL, worker_main, sl->work) != 0) {
            pthread_mutex_lock(&h->mu);
            h->refs--;
            pthread_mutex_unlock(&h->mu);
            engine_close(g);
            return ht_fail(e, "engine: cannot start a worker thread for device %s", devs[d].spec);
        }
        sl->started = 1;
    }
    if (broadcast(g, NULL, e) < 0) {
        engine_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void engine_close(engine *g) {
    if (!g) return;
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
    free(g->own);
    optim_free(&g->opt);
    shard_plan_free(&g->plan);
    if (h) hub_release(h); // frees the parameters with the last worker
    else free(g->params);
    free(g);
}

// The relative L2 difference of a[off..off+n) from b, and the index of the largest element
// difference.
static double rel_diff(const float *a, const float *b, size_t off, size_t n, size_t *worst_at) {
    double num = 0, den = 0, worst = -1;
    *worst_at = off;
    for (size_t i = off; i < off + n; i++) {
        double diff = (double)a[i] - b[i];
        num += diff * diff;
        den += (double)b[i] * b[i];
        if (!(fabs(diff) <= worst)) {
            worst = fabs(diff);
            *worst_at = i;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Compares device slot s's probe results with the reference's; drops it with an event when
// they differ beyond the ENGINE_SELF_CHECK_TOL_* bounds.
static void check_one(engine *g, int d, const float *ref_grad, const float *ref_loss, int n) {
    const engine_work *w = g->slots[d].work;
    const model_tensor *ts;
    int nt = model_tensors(g->m, &ts);
    // Per tensor, against its own tolerance; the tensor furthest over it is reported.
    double excess = 0, rel_at = 0, tol_at = 0;
    const model_tensor *bad = NULL;
    size_t wi = 0;
    for (int k = 0; k < nt; k++) {
        double tol = ts[k].output ? ENGINE_SELF_CHECK_TOL_OUT : ENGINE_SELF_CHECK_TOL_BRANCH;
        size_t wj;
        double rel = rel_diff(w->grad_sum, ref_grad, ts[k].off, ts[k].n, &wj);
        if (!(rel / tol <= excess)) {
            excess = isnan(rel) ? INFINITY : rel / tol;
            rel_at = rel;
            tol_at = tol;
            bad = &ts[k];
            wi = wj;
        }
    }
    double lworst = 0;
    for (int i = 0; i < n; i++) {
        double dl = fabs((double)w->loss[i] - ref_loss[i]);
        if (!(dl <= lworst)) lworst = dl;
    }
    if (excess <= 1 && lworst <= ENGINE_SELF_CHECK_TOL_LOSS) return;
    const device *dev = g->slots[d].dev;
    drop(g, d);
    event(g, "self-check: device %s (%s) excluded: its gradient of %s differs from the "
             "reference by %.3g (relative L2, tolerance %.3g), worst element [%zu] %.6g vs "
             "%.6g; largest loss difference %.3g (tolerance %.3g)",
          dev->spec, dev->name, bad ? bad->name : "(no tensor)", rel_at, tol_at,
          bad ? wi - bad->off : 0, (double)w->grad_sum[wi],
          (double)ref_grad[wi], lworst, ENGINE_SELF_CHECK_TOL_LOSS);
}

int engine_self_check(engine *g, device *ref, const dataset *ds, const uint32_t *idx, int n,
                      ht_error *e) {
    const model *m = g->m;
    if (n > g->max_batch) n = g->max_batch;
    if (n < 1) return 0;
    // Every device runs the whole probe, as a pass outside training (step 0).
    engine_task t = {.kind = TASK_TRAIN, .ds = ds, .idx = idx};
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        s->dispatched = !s->failed;
        s->n = s->dispatched ? n : 0;
        for (int i = 0; i < s->n; i++) s->pos[i] = i;
    }
    g->n_orphans = 0;
    dispatch(g, &t);
    // The reference, on the same samples (gathered as the devices got them).
    size_t in = (size_t)ds->c * ds->h * ds->w;
    float *x = ht_malloc((size_t)n * in, sizeof(float), e);
    uint8_t *y = ht_malloc((size_t)n, 1, e);
    float *grad = ht_malloc(m->n_params, sizeof(float), e), *loss = ht_malloc((size_t)n, sizeof(float), e);
    int32_t *pred = ht_malloc((size_t)n, sizeof(int32_t), e);
    int rc = -1;
    if (!x || !y || !grad || !loss || !pred) goto out;
    dataset_gather(ds, idx, n, x, y);
    shard_job job = {.x = x, .y = y, .ids = idx, .n = n, .seed = g->seed};
    shard_result res = {.grad_sum = grad, .loss = loss, .pred = pred};
    if (ref->ops->set_params(ref->ctx, g->params, e) < 0 ||
        ref->ops->train_shard(ref->ctx, &job, &res, e) < 0) {
        ht_wrap(e, "self-check: the reference device %s", ref->spec);
        goto out;
    }
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed) check_one(g, d, grad, loss, n);
    rc = 0;
    if (engine_active(g) == 0) rc = ht_fail(e, "no device passed the self-check:\n%s", g->events);
out:
    free(x);
    free(y);
    free(grad);
    free(loss);
    free(pred);
    return rc;
}

int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e) {
    // Only with several devices over the ranks of the step.
    double mine = engine_active(g), *all = ht_malloc((size_t)group_size(g), sizeof(double), e);
    if (!all || group_allgather(g, &mine, all, 1, e) < 0) {
        free(all);
        return ht_wrap(e, "calibration");
    }
    double devices = 0;
    for (int r = 0; r < group_size(g); r++) devices += all[r];
    free(all);
    if (devices < 2) return 0;
    if (B > g->max_batch) B = g->max_batch;
    balance_reset(&g->bal, g->n_devs);
    // Some drivers compile or tune on the first launch of each new shape, so every measured
    // round follows a warm-up round at the same shares: round 0 warms up at the given capacities,
    // round 1 measures them; round 2 warms up at the capacities fitted from round 1, round 3
    // measures those. Each device is thus seen at two shard sizes, and the fit can separate
    // fixed from per-sample cost.
    engine_task t = {.kind = TASK_TRAIN, .ds = ds, .idx = idx};
    for (int round = 0; round < 4; round++) {
        if (assign(g, NULL, B, 1, e) < 0) return ht_wrap(e, "calibration");
        g->n_orphans = 0;
        dispatch(g, &t);
        if (engine_active(g) == 0) return ht_fail(e, "calibration: every device failed");
        if (round % 2 == 0) continue;
        observe_pass(g);
        refit(g, B, 1);
    }
    g->since = 0;
    return 1;
}

// What a training pass hands back, for gather.
typedef struct step_out {
    float *loss;
    int32_t *pred;
    step_stats *st;
    int bad;   // a device returned non-finite values
    // Without re-runs the devices' gradient sums stay in their buffers until sum_devices adds
    // them in one pass (or, from one device, is used where it is).
    int defer;
    const float *sums[HT_MAX_DEVICES];
    int sum_dev[HT_MAX_DEVICES];
    int n_sums;
} step_out;

// Takes the results of the last pass: each position's loss and prediction, and each device's
// gradient sum, added to the step's sum in device order (so the sum does not depend on timing)
// or, when deferred, noted for sum_devices.
static void gather(engine *g, void *arg) {
    step_out *o = arg;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->failed) continue;
        const engine_work *w = s->work;
        if (non_finite(w, !o->defer)) {
            o->bad = 1;
            event(g, "step %ld: device %s returned a non-finite loss or gradient", g->step,
                  s->dev->spec);
        }
        if (o->defer) {
            o->sum_dev[o->n_sums] = d;
            o->sums[o->n_sums++] = w->grad_sum;
        } else {
            float *acc = g->grad;
            const float *gs = w->grad_sum;
            for (size_t i = 0; i < g->m->n_params; i++) acc[i] += gs[i];
        }
        for (int i = 0; i < s->n; i++) {
            if (o->loss) o->loss[s->pos[i]] = w->loss[i];
            if (o->pred) o->pred[s->pos[i]] = w->pred[i];
            g->own[s->pos[i]] = 1;
        }
        o->st->busy_s[d] += s->busy_s;
        o->st->share[d] += s->n;
    }
}

#define ENGINE_PAR_MIN 65536 // elements below which a parallel pass costs more than it saves
#define ENGINE_CHUNK 4096    // elements a thread sums over every device before moving on

// The step's gradient sum from the deferred device sums: their sum in device order into
// g->grad, in one parallel pass that also checks it. *finite says whether every element is
// finite (x * 0 is NaN for inf and NaN).
static void sum_devices(engine *g, const step_out *o, int *finite) {
    const size_t n = g->m->n_params;
    float nan_seen = 0;
    float *acc = g->grad;
    const int k = o->n_sums;
    if (k == 0) memset(acc, 0, sizeof(float) * n);
#pragma omp parallel for reduction(+ : nan_seen) schedule(static) if (n >= ENGINE_PAR_MIN && k > 0)
    for (size_t c = 0; c < n; c += ENGINE_CHUNK) {
        size_t end = c + ENGINE_CHUNK < n ? c + ENGINE_CHUNK : n;
        for (int d = 0; d < k; d++) {
            const float *gs = o->sums[d];
            if (d == 0) memcpy(acc + c, gs + c, sizeof(float) * (end - c));
            else
                for (size_t i = c; i < end; i++) acc[i] += gs[i];
        }
        for (size_t i = c; i < end; i++) nan_seen += acc[i] * 0.0f;
    }
    *finite = !isnan(nan_seen);
}

// A non-finite deferred sum: names the devices whose sums hold a non-finite element (none: the
// sum of finite sums overflowed).
static void name_non_finite(engine *g, const step_out *o) {
    int named = 0;
    for (int k = 0; k < o->n_sums; k++)
        for (size_t i = 0; i < g->m->n_params; i++)
            if (!isfinite(o->sums[k][i])) {
                event(g, "step %ld: device %s returned a non-finite gradient", g->step,
                      g->slots[o->sum_dev[k]].dev->spec);
                named = 1;
                break;
            }
    if (!named) event(g, "step %ld: the devices' gradient sums overflowed when added", g->step);
}

// The gradient sums of every rank of the step added in rank order, and every position's loss
// and prediction (each computed on one rank, zero on the others), the same on every rank, in
// one reduction: [gradient | losses | predictions | non-finite flag | stop requests]. Which
// positions this rank computed: those of its devices' shards, re-runs included.
static int reduce_group(engine *g, step_out *o, int B, ht_error *e) {
    size_t P = g->m->n_params;
    float *lp = g->grad + P;
    for (int j = 0; j < B; j++) {
        lp[j] = g->own[j] && o->loss ? o->loss[j] : 0;
        lp[B + j] = g->own[j] && o->pred ? (float)o->pred[j] : 0; // classes < 2^24: exact
    }
    lp[2 * B] = o->bad ? 1.0f : 0.0f;
    lp[2 * B + 1] = g->stop_flag && *g->stop_flag ? 1.0f : 0.0f;
    if (group_sum(g, g->grad, P + 2 * (size_t)B + 2, e) < 0) return -1;
    for (int j = 0; j < B; j++) {
        if (o->loss) o->loss[j] = lp[j];
        if (o->pred) o->pred[j] = (int32_t)lp[B + j];
    }
    o->bad = lp[2 * B] > 0;
    g->stop_agreed = lp[2 * B + 1] > 0;
    return 0;
}

int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e) {
    if (B < 1 || B > g->max_batch) return ht_fail(e, "engine: batch %d outside 1..%d", B, g->max_batch);
    double t0 = ht_now();
    step_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    g->step++;
    g->grad_ready = 0; // g->grad is this step's from here on
    g->prep_s = g->pass_s = 0;
    engine_task t = {.kind = TASK_TRAIN, .ds = ds, .idx = idx, .epoch = epoch, .step = g->step};
    if (assign(g, NULL, B, 1, e) < 0) return -1;
    if (g->rebalance > 0 && g->step % ENGINE_PROBE_EVERY == 0) probe_idle(g);
    g->n_orphans = 0;
    g->prep_s = ht_now() - t0; // the plan
    dispatch(g, &t);
    if (g->rebalance > 0) observe_pass(g);
    double slowest = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed && g->slots[d].busy_s > slowest)
            slowest = g->slots[d].busy_s;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed) st->wait_s += slowest - g->slots[d].busy_s;
    st->compute_s = slowest;
    step_out o = {.loss = loss, .pred = pred, .st = st, .defer = g->n_orphans == 0};
    memset(g->own, 0, (size_t)B);
    if (!o.defer) memset(g->grad, 0, sizeof(float) * g->m->n_params);
    gather(g, &o);
    if (rerun_orphans(g, &t, gather, &o, e) < 0) return -1;
    if (o.defer) {
        int finite;
        sum_devices(g, &o, &finite);
        if (!finite) {
            o.bad = 1;
            name_non_finite(g, &o);
        }
    }
    if (reduce_group(g, &o, B, e) < 0) return -1;
    g->grad_ready = 1;
    g->grad_scale = 1.0f / (float)B;
    g->grad_mean = 0;
    double t1 = ht_now(), tu = t1;
    st->prep_s = g->prep_s;
    st->pass_s = g->pass_s;
    st->reduce_s = t1 - t0 - g->prep_s - g->pass_s;
    if (o.bad) {
        if (g->nan_stop) return ht_fail(e, "non-finite loss or gradient (--on-nan stop)");
        event(g, "step %ld: update skipped (--on-nan skip)", g->step);
        st->skipped = 1;
    } else {
        // The mean is taken inside the update (sum * 1/B, as a separate pass would).
        optim_step_scaled(&g->opt, g->params, g->grad, g->grad_scale);
        tu = ht_now();
        if (broadcast(g, st, e) < 0) return -1;
    }
    double t2 = ht_now();
    st->update_s = tu - t1;
    st->bcast_s = t2 - tu;
    st->host_s = t2 - t1;
    st->wall_s = t2 - t0;
    // Re-fits need two devices over the ranks: this rank's now, the others' as of the plan.
    if (g->rebalance > 0 && engine_active(g) + g->peers_active >= 2 && ++g->since >= g->rebalance) {
        g->since = 0;
        refit(g, B, 0);
    }
    return 0;
}

// What an inference pass hands back, for take_probs.
typedef struct infer_out {
    float *probs;
    int off;
} infer_out;

static void take_probs(engine *g, void *arg) {
    infer_out *o = arg;
    int nc = g->m->n_classes;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->failed) continue;
        for (int i = 0; i < s->n; i++)
            memcpy(o->probs + (size_t)(o->off + s->pos[i]) * nc, s->work->probs + (size_t)i * nc,
                   sizeof(float) * nc);
    }
}

int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e) {
    for (int off = 0; off < n; off += g->max_batch) {
        int B = n - off < g->max_batch ? n - off : g->max_batch;
        engine_task t = {.kind = TASK_INFER, .ds = ds, .start = start + off};
        infer_out o = {.probs = probs, .off = off};
        // Over several ranks each computes its devices' positions of the chunk and the chunk's
        // rows are added in rank order: every position is one rank's row plus zeros, exactly.
        float *rows = probs + (size_t)off * g->m->n_classes;
        size_t n_rows = (size_t)B * g->m->n_classes;
        memset(rows, 0, sizeof(float) * n_rows);
        if (assign(g, NULL, B, 1, e) < 0) return ht_wrap(e, "inference");
        g->n_orphans = 0;
        dispatch(g, &t);
        take_probs(g, &o);
        if (rerun_orphans(g, &t, take_probs, &o, e) < 0) return ht_wrap(e, "inference");
        if (group_sum(g, rows, n_rows, e) < 0) return ht_wrap(e, "inference");
    }
    return 0;
}
