// The engine's worker threads, one per device, and the passes they run. Every pass (a step's
// shards, a re-run of failed shards, a broadcast, an inference chunk) is an engine_task: the
// engine gathers each device's samples into that device's own buffers, wakes the workers,
// waits for them up to the timeout, and copies the outcome out. Nothing is shared with a
// worker while it runs but its own buffers and the read-only master parameters of a
// broadcast. A device that errs or does not answer is dropped; one that does not answer is
// left to its worker, which closes it if it ever comes back (a stray worker).
#define _GNU_SOURCE
#include "sharding/engine_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void engine_event(engine *g, const char *fmt, ...) {
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

void engine_drop(engine *g, int d) {
    g->slots[d].failed = 1;
    g->slots[d].capacity = 0;
    capacity_forget(&g->fits, d);
    shard_plan_free(&g->plan);
}

void engine_drop_device(engine *g, int d) {
    if (d < 0 || d >= g->n_devs || g->slots[d].failed) return;
    engine_drop(g, d);
    engine_event(g, "device %s dropped on request", g->devs[d].spec);
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
    for (int f = 0; w->fac_buf && f < w->n_fac; f++) free(w->fac_buf[f]);
    free(w->fac_buf);
    free(w->fac_len);
    free((void *)w->fac);
    free((void *)w->fac_of);
    free(w);
}

// The device's backward pass reports the gradient final from `from` on (shard_job.grad_ready).
static void work_ready(void *arg, size_t from) {
    engine_work *w = arg;
    pthread_mutex_lock(&w->hub->mu);
    if (from < w->ready_from) w->ready_from = from;
    pthread_cond_broadcast(&w->hub->done);
    pthread_mutex_unlock(&w->hub->mu);
}

// The device's backward pass has a dense layer's factors of one micro-batch
// (shard_job.factor): a factored layer's are appended to the pass's (engine_work.fac_buf).
static void work_factor(void *arg, int l, const float *in, const float *dout, int n) {
    engine_work *w = arg;
    const int f = w->fac_of[l];
    if (f < 0) return;
    const engine_fac *F = &w->fac[f];
    float *buf = w->fac_buf[f];
    size_t len = w->fac_len[f], nin = (size_t)n * F->in, nout = (size_t)n * F->out;
    // Never past the buffer (a device sends at most max_batch samples a pass); the engine
    // reads what is missing as zeros.
    if (len == 0) buf[len++] = (float)n;
    if (len + nin + nout > w->fac_cap) return;
    memcpy(buf + len, in, sizeof(float) * nin);
    memcpy(buf + len + nin, dout, sizeof(float) * nout);
    w->fac_len[f] = len + nin + nout;
}

// Runs one pass of a worker's task on its device: first the parameters, if the engine has
// broadcast new ones since the device last copied them.
static void work_run(engine_work *w) {
    double t0 = ht_now();
    w->rc = 0;
    w->micro = 0;
    w->note[0] = 0;
    if (w->kind == TASK_PARAMS || w->stale) {
        w->rc = w->ops->set_params(w->ctx, w->hub->params, &w->err);
        if (w->rc == 0) w->stale = 0;
    }
    if (w->rc == 0 && w->kind == TASK_TRAIN) {
        shard_job job = {.x = w->x, .y = w->y, .ids = w->ids, .n = w->n, .seed = w->seed,
                         .epoch = w->epoch, .step = w->step,
                         .grad_ready = w->want_ready ? work_ready : NULL, .grad_ready_arg = w,
                         .factor = w->want_fac ? work_factor : NULL, .factor_arg = w};
        for (int f = 0; f < w->n_fac; f++) w->fac_len[f] = 0;
        shard_result res = {.grad_sum = w->grad_sum, .loss = w->loss, .pred = w->pred};
        w->rc = w->ops->train_shard(w->ctx, &job, &res, &w->err);
        if (w->rc == 0) w->micro = res.micro;
        snprintf(w->note, sizeof w->note, "%s", res.note);
    } else if (w->rc == 0 && w->kind == TASK_INFER) {
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
        if (!t->ds->y) memset(w->y, 0, (size_t)s->n * (size_t)g->m->label_width);
        // Training steps (step >= 1) gather augmented samples; the self-check and the
        // calibration (step 0) and inference gather them as they are.
        dataset_gather_augment(t->ds, w->ids, s->n, w->x, w->y,
                               t->kind == TASK_TRAIN && t->step > 0 ? &g->aug : NULL, g->seed,
                               t->epoch);
    }
    w->kind = t->kind;
    w->want_ready = t->kind == TASK_TRAIN && g->overlap;
    w->want_fac = t->kind == TASK_TRAIN && g->want_fac;
    w->ready_from = SIZE_MAX;
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

// CLOCK_REALTIME (pthread_cond_timedwait's clock) `seconds` from now.
static struct timespec clock_after(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(seconds);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

// Runs task t on every dispatched device and waits for them, at most timeout_s. A device that
// errs or does not answer is dropped (with an event); its positions go to g->orphans. A device
// that does not answer is given up: its worker keeps its own buffers and closes the device if
// it ever comes back. Returns the number of devices that failed.
int engine_dispatch(engine *g, const engine_task *t) {
    engine_hub *h = g->hub;
    double t0 = ht_now();
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->work) s->work->go = 0;
        if (s->dispatched) work_prepare(g, s, t);
    }
    double t1 = ht_now();
    const struct timespec deadline = clock_after(g->timeout_s);
    pthread_mutex_lock(&h->mu);
    unsigned long gen = ++h->gen;
    pthread_cond_broadcast(&h->go);
    for (;;) {
        // Buckets to start as the devices report, and, while some travel, to move along: then
        // the thread wakes at least every ENGINE_POLL_S. The poll lets go of the lock while it
        // works, so the devices are counted after it; and a poll that let go of it polls again
        // before sleeping, as a report may have come meanwhile.
        int ov = t->kind == TASK_TRAIN && g->overlap ? engine_overlap_poll(g) : 0;
        int waiting = 0;
        for (int d = 0; d < g->n_devs; d++)
            waiting += g->slots[d].dispatched && g->slots[d].work->done_gen != gen;
        if (!waiting) break;
        if (ov == ENGINE_POLL_RELEASED) continue;
        if (ov & ENGINE_POLL_TRAVELLING) {
            const struct timespec soon = clock_after(ENGINE_POLL_S);
            int later = soon.tv_sec > deadline.tv_sec ||
                        (soon.tv_sec == deadline.tv_sec && soon.tv_nsec >= deadline.tv_nsec);
            if (pthread_cond_timedwait(&h->done, &h->mu, later ? &deadline : &soon) == ETIMEDOUT &&
                later)
                break;
            continue;
        }
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
            engine_drop(g, d);
            for (int i = 0; i < s->n; i++) g->orphans[g->n_orphans++] = s->pos[i];
            snprintf(g->last_failure, sizeof g->last_failure, "%s: %s", s->dev->spec, s->err.msg);
            if (s->n > 0)
                engine_event(g, "%s %ld: device %s failed and was dropped: %s; its %d sample%s went to "
                         "the other devices", pass_name(t), g->step, s->dev->spec, s->err.msg, s->n,
                      s->n == 1 ? "" : "s");
            else
                engine_event(g, "%s %ld: device %s failed and was dropped: %s", pass_name(t), g->step,
                      s->dev->spec, s->err.msg);
        } else if (note[0]) {
            engine_event(g, "step %ld: device %s: %s", g->step, s->dev->spec, note);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return failed;
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
    w->y = ht_calloc(B * (size_t)g->m->label_width, sizeof *w->y, e);
    w->ids = ht_malloc(B, sizeof *w->ids, e);
    w->grad_sum = ht_malloc(g->m->n_params, sizeof *w->grad_sum, e);
    w->loss = ht_malloc(B, sizeof *w->loss, e);
    w->pred = ht_malloc(B, sizeof *w->pred, e);
    w->probs = ht_malloc(B * (size_t)g->m->n_classes, sizeof *w->probs, e);
    if (!w->x || !w->y || !w->ids || !w->grad_sum || !w->loss || !w->pred || !w->probs) {
        work_free(w);
        return NULL;
    }
    if (g->n_fac == 0) return w;
    // The factored layers' buffers, and copies of what the callback reads: a worker the engine
    // gives up on may outlive the engine.
    const size_t nl = (size_t)g->m->n_layers;
    engine_fac *fac = ht_malloc((size_t)g->n_fac, sizeof *fac, e);
    int *fac_of = ht_malloc(nl, sizeof *fac_of, e);
    w->fac = fac;
    w->fac_of = fac_of;
    w->n_fac = g->n_fac;
    w->fac_buf = ht_calloc((size_t)g->n_fac, sizeof *w->fac_buf, e);
    w->fac_len = ht_calloc((size_t)g->n_fac, sizeof *w->fac_len, e);
    int ok = fac && fac_of && w->fac_buf && w->fac_len;
    for (int f = 0; ok && f < g->n_fac; f++) {
        size_t cap = 1 + B * (size_t)(g->fac[f].in + g->fac[f].out);
        if (cap > w->fac_cap) w->fac_cap = cap;
    }
    for (int f = 0; ok && f < g->n_fac; f++)
        ok = (w->fac_buf[f] = ht_malloc(w->fac_cap, sizeof(float), e)) != NULL;
    if (!ok) {
        work_free(w);
        return NULL;
    }
    memcpy(fac, g->fac, sizeof *fac * (size_t)g->n_fac);
    memcpy(fac_of, g->fac_of, sizeof *fac_of * nl);
    return w;
}

int engine_workers_open(engine *g, ht_error *e) {
    engine_hub *h = g->hub = ht_calloc(1, sizeof *h, e);
    if (!h) return -1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->go, NULL);
    pthread_cond_init(&h->done, NULL);
    h->refs = 1;
    h->params = g->params = ht_malloc(g->m->n_params, sizeof(float), e);
    g->threads = ht_calloc((size_t)g->n_devs, sizeof *g->threads, e);
    return g->params && g->threads ? 0 : -1;
}

int engine_worker_start(engine *g, int d, ht_error *e) {
    engine_slot *sl = &g->slots[d];
    engine_hub *h = g->hub;
    sl->work = work_alloc(g, sl->dev, e);
    if (!sl->work) return ht_wrap(e, "buffers for device %s", sl->dev->spec);
    pthread_mutex_lock(&h->mu);
    h->refs++;
    pthread_mutex_unlock(&h->mu);
    if (pthread_create(&g->threads[d], NULL, worker_main, sl->work) != 0) {
        pthread_mutex_lock(&h->mu);
        h->refs--;
        pthread_mutex_unlock(&h->mu);
        return ht_fail(e, "engine: cannot start a worker thread for device %s", sl->dev->spec);
    }
    sl->started = 1;
    return 0;
}

void engine_workers_close(engine *g) {
    engine_hub *h = g->hub;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->go);
    pthread_mutex_unlock(&h->mu);
    // A worker given up on (work == NULL) is detached and frees its own; join the others.
    for (int d = 0; g->slots && d < g->n_devs; d++)
        if (g->slots[d].started && g->slots[d].work) pthread_join(g->threads[d], NULL);
    for (int d = 0; g->slots && d < g->n_devs; d++) {
        work_free(g->slots[d].work);
        g->slots[d].work = NULL;
    }
    free(g->threads);
    g->threads = NULL;
    hub_release(h); // frees the parameters with the last worker
    g->hub = NULL;
    g->params = NULL;
}
