// The step engine: opens over the devices, and runs a training step in phases, the step_*
// functions in this order: plan the batch over every rank's devices, dispatch each shard to its
// device's worker, gather the results (a failed device's share re-run on the others), reduce
// the gradient sums in fixed device and rank order (span.h), update on the host and broadcast
// the new parameters. The other engine_*.c files hold the workers, the balance, the self-check,
// inference and the reduction over ranks (engine_int.h).
#include "sharding/engine_int.h"
#include "core/ht_omp.h"

#include "nn/batchnorm.h"

#include <math.h>
#include <stdlib.h>

const float *engine_params(const engine *g) { return g->params; }
// The optimiser takes the sum and the scale; the mean is made only when asked for.
const float *engine_grad(engine *g) {
    if (g->grad_ready && !g->grad_mean) {
        size_t n = g->m->n_params;
        ht_error e;
        // Each rank holds its own slice of the trainable part's sum; the rest is everyone's.
        if (g->sliced && span_allgather_slices(g->sp, g->grad, g->m->n_trainable, &e) < 0) return NULL;
        const float *sum = g->sum ? g->sum : g->grad; // one device's buffer, or g->grad
        for (size_t i = 0; i < n; i++) g->grad[i] = sum[i] * g->grad_scale;
        g->grad_mean = 1;
        g->sum = g->grad;
    }
    return g->grad;
}

void engine_set_timeout(engine *g, double seconds) {
    g->timeout_s = seconds > 0 ? seconds : ENGINE_DEFAULT_TIMEOUT;
}
int engine_stopping(const engine *g) {
    if (g->sp.size > 1) return g->stop_agreed;
    return g->stop_flag && *g->stop_flag;
}

int engine_micro(const engine *g, int d) { return g->slots[d].micro; }

int engine_gave_up(const engine *g, int d) { return g->slots[d].hung; }

// Sends the master parameters to every active device. Adds each device's time to st. After a
// training step (defer) a device that copies them is only marked: its worker copies them at
// the start of its next task, inside that pass, where a device with a small share has time
// to spare, instead of in a pass of its own that every device and the host wait for
// (bench/README.md, mixed devices: what that pass cost).
static int broadcast(engine *g, step_stats *st, int defer, ht_error *e) {
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
        if (defer && s->work) {
            s->work->stale = 1;
            continue;
        }
        s->dispatched = 1;
        copies++;
    }
    g->n_orphans = 0;
    if (copies) engine_dispatch(g, &t);
    for (int d = 0; st && d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed) st->busy_s[d] += g->slots[d].busy_s;
    if (engine_active(g) == 0)
        return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    return 0;
}

int engine_set_params(engine *g, const float *params, ht_error *e) {
    memcpy(g->params, params, sizeof(float) * g->m->n_params);
    return broadcast(g, NULL, 0, e);
}

int engine_open(engine **out, const engine_config *c, ht_error *e) {
    *out = NULL;
    const model *m = c->m;
    int n_devs = c->n_devs, max_batch = c->max_batch;
    if (n_devs < 1 || n_devs > HT_MAX_DEVICES)
        return ht_fail(e, "engine: %d devices (1..%d)", n_devs, HT_MAX_DEVICES);
    if (max_batch < 1) return ht_fail(e, "engine: batches of %d samples at most", max_batch);
    engine *g = ht_calloc(1, sizeof *g, e);
    if (!g) return -1;
    g->m = m;
    g->devs = c->devs;
    g->n_devs = n_devs;
    g->max_batch = max_batch;
    g->seed = c->seed;
    g->group = model_bn_group(m);
    g->rebalance = c->rebalance > 0 ? c->rebalance : 0;
    engine_set_timeout(g, 0); // c->timeout_s from the first pass after the broadcast below
    g->nan_stop = c->nan_stop;
    g->aug = c->augment;
    g->sp = c->alone ? span_alone() : span_job();
    g->sliced = g->sp.size > 1;
    const char *ov = getenv("HETRAIN_OVERLAP");
    g->no_overlap = ov && !strcmp(ov, "0");
    const char *fc = getenv("HETRAIN_FACTORS");
    g->comm_dt = c->comm_bf16 ? SPAN_BF16 : SPAN_F32;
    g->stop_flag = c->stop_flag;
    capacity_reset(&g->fits, n_devs);
    g->grad = ht_calloc(m->n_params + 2 * (size_t)max_batch + 3, sizeof(float), e);
    g->orphans = ht_malloc((size_t)max_batch, sizeof *g->orphans, e);
    g->unit = ht_malloc((size_t)max_batch + 1, sizeof *g->unit, e);
    g->sorted = ht_malloc((size_t)max_batch, sizeof *g->sorted, e);
    g->own = ht_calloc((size_t)max_batch, 1, e);
    g->slots = ht_calloc((size_t)n_devs, sizeof *g->slots, e);
    if (!g->grad || !g->orphans || !g->unit || !g->sorted || !g->own || !g->slots ||
        engine_factors_init(g, c->devs, n_devs, c->no_factors || (fc && !strcmp(fc, "0")), e) < 0 ||
        (g->sliced && engine_buckets_init(g, e) < 0) || engine_workers_open(g, e) < 0 ||
        optim_init(&g->opt, &m->setup, m->n_trainable, e) < 0 ||
        optim_use_model(&g->opt, m, e) < 0) {
        engine_close(g);
        return -1;
    }
    memcpy(g->params, c->params, sizeof(float) * m->n_params);
    for (int d = 0; d < n_devs; d++) {
        engine_slot *sl = &g->slots[d];
        sl->dev = &c->devs[d];
        sl->capacity = sl->dev->capacity;
        sl->micro = sl->dev->micro;
        sl->pos = ht_malloc((size_t)max_batch, sizeof *sl->pos, e);
        if (!sl->pos) {
            engine_close(g);
            return ht_wrap(e, "buffers for device %s", sl->dev->spec);
        }
        if (engine_worker_start(g, d, e) < 0) {
            engine_close(g);
            return -1;
        }
    }
    if (broadcast(g, NULL, 0, e) < 0) {
        engine_close(g);
        return -1;
    }
    engine_set_timeout(g, c->timeout_s);
    *out = g;
    return 0;
}

void engine_close(engine *g) {
    if (!g) return;
    engine_workers_close(g);
    for (int d = 0; g->slots && d < g->n_devs; d++) free(g->slots[d].pos);
    free(g->slots);
    engine_buckets_free(g);
    free(g->grad);
    free(g->orphans);
    free(g->unit);
    free(g->sorted);
    free(g->own);
    optim_free(&g->opt);
    shard_plan_free(&g->plan);
    free(g);
}

void engine_get_state(const engine *g, engine_state *st) {
    memset(st, 0, sizeof *st);
    st->step = g->step;
    st->optim_t = g->opt.t;
    st->since = g->since;
    st->n_devs = g->n_devs;
    engine_capacities(g, st->capacity);
    memcpy(st->fit, g->fits.fit, sizeof st->fit);
}

void engine_set_lr_factor(engine *g, double f) { optim_set_lr_factor(&g->opt, f); }

float engine_lr(const engine *g) { return optim_lr(&g->opt); }

void engine_moments(const engine *g, const float **m, const float **v) {
    *m = g->opt.m;
    *v = g->opt.v;
}

int engine_gather_moments(engine *g, ht_error *e) {
    if (!g->sliced) return 0;
    size_t n = g->m->n_trainable;
    if ((g->opt.m && span_allgather_slices(g->sp, g->opt.m, n, e) < 0) ||
        (g->opt.v && span_allgather_slices(g->sp, g->opt.v, n, e) < 0))
        return ht_wrap(e, "gathering the optimiser's moments");
    return 0;
}

int engine_restore(engine *g, const engine_state *st, const float *params, const float *m,
                   const float *v, ht_error *e) {
    size_t n = g->m->n_trainable;
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
            engine_set_capacities(g, st->capacity);
            memcpy(g->fits.fit, st->fit, sizeof g->fits.fit);
        }
    }
    return engine_set_params(g, params, e);
}

// Whether a pass's results hold a non-finite loss or gradient element.
static int non_finite(const engine_work *w, int with_grad) {
    for (int i = 0; i < w->n; i++)
        if (!isfinite(w->loss[i])) return 1;
    for (size_t i = 0; with_grad && i < w->n_params; i++)
        if (!isfinite(w->grad_sum[i])) return 1;
    return 0;
}

// What a training pass hands back, for collect.
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
    int redo;  // over several ranks: some rank's device failed in the pass, and the step's
               // sums were reduced whole (step_reduce)
} step_out;

// Takes the results of the last pass: each position's loss and prediction, and each device's
// gradient sum, added to the step's sum in device order (so the sum does not depend on timing)
// or, when deferred, noted for sum_devices.
static void collect(engine *g, void *arg) {
    step_out *o = arg;
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->failed) continue;
        const engine_work *w = s->work;
        if (non_finite(w, !o->defer)) {
            o->bad = 1;
            engine_event(g, "step %ld: device %s returned a non-finite loss or gradient", g->step,
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

// The step's gradient sum from the deferred device sums: one device's buffer as it is (when the
// step spans one rank: nothing to add up, here or over ranks), else their sum in device order
// into g->grad, in one parallel pass that also checks it. *finite says whether every element
// is finite (x * 0 is NaN for inf and NaN). Returns where the sum is.
static const float *sum_devices(engine *g, const step_out *o, int *finite) {
    const size_t n = g->m->n_params;
    float nan_seen = 0;
    if (o->n_sums == 1 && g->sp.size == 1) {
        const float *a = o->sums[0];
#pragma omp parallel for simd reduction(+ : nan_seen) schedule(static) if (n >= ENGINE_PAR_MIN)
        for (size_t i = 0; i < n; i++) nan_seen += a[i] * 0.0f;
        *finite = !isnan(nan_seen);
        return a;
    }
    float *acc = g->grad;
    nan_seen = engine_add_sums(o->sums, o->n_sums, acc, 0, n);
    *finite = !isnan(nan_seen);
    return acc;
}

// A non-finite deferred sum: names the devices whose sums hold a non-finite element (none: the
// sum of finite sums overflowed).
static void name_non_finite(engine *g, const step_out *o) {
    int named = 0;
    for (int k = 0; k < o->n_sums; k++)
        for (size_t i = 0; i < g->m->n_params; i++)
            if (!isfinite(o->sums[k][i])) {
                engine_event(g, "step %ld: device %s returned a non-finite gradient", g->step,
                      g->slots[o->sum_dev[k]].dev->spec);
                named = 1;
                break;
            }
    if (!named) engine_event(g, "step %ld: the devices' gradient sums overflowed when added", g->step);
}

// The step's plan: every position of the batch to a device of some rank, and now and then a
// position for a device the plan left idle, so that its fit stays measured.
static int step_plan(engine *g, int B, double t0, ht_error *e) {
    if (engine_assign(g, NULL, B, 1, e) < 0) return -1;
    if (g->rebalance > 0 && g->step % ENGINE_PROBE_EVERY == 0) engine_probe_idle(g);
    g->n_orphans = 0;
    g->prep_s = ht_now() - t0; // the plan
    return 0;
}

// The step's dispatch: every device's pass over its shard, while (over several ranks) the
// gradient's buckets start on their way as the devices finish layers. Returns whether the step
// must be reduced whole: a failed device's samples run again elsewhere and change the sums that
// buckets may already carry, so those finish (as every rank expects them) and are dropped.
static int step_dispatch(engine *g, const engine_task *t, step_stats *st) {
    engine_overlap_begin(g);
    g->want_fac = g->n_fac > 0;
    engine_dispatch(g, t);
    g->overlap = g->want_fac = 0; // re-runs start no buckets
    const int redo = g->sliced && g->n_orphans > 0;
    if (redo) engine_overlap_flush(g);
    if (g->rebalance > 0) engine_observe_pass(g);
    double slowest = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed && g->slots[d].busy_s > slowest)
            slowest = g->slots[d].busy_s;
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed) st->wait_s += slowest - g->slots[d].busy_s;
    st->compute_s = slowest;
    return redo;
}

// The step's gather: the pass's results, the failed devices' positions run again on the others,
// and this rank's sum of its devices' gradient sums in device order (over several ranks, the
// buckets not yet on their way start).
static int step_gather(engine *g, const engine_task *t, step_out *o, int B, ht_error *e) {
    memset(g->own, 0, (size_t)B);
    if (!o->defer) memset(g->grad, 0, sizeof(float) * g->m->n_params);
    collect(g, o);
    if (engine_rerun_orphans(g, t, collect, o, e) < 0) return -1;
    g->sum = g->grad;
    if (o->defer) {
        int finite;
        if (g->sliced) engine_overlap_rest(g, &finite);
        else g->sum = sum_devices(g, o, &finite);
        if (!finite) {
            o->bad = 1;
            name_non_finite(g, o);
        }
    }
    return 0;
}

// The step's reduce: the gradient sums of every rank of the step added in rank order, and every
// position's loss and prediction (each computed on one rank, zero on the others), the same on
// every rank, in one reduction: [gradient | losses | predictions | non-finite flag | stop
// requests | redo]. Which positions this rank computed: those of its devices' shards, re-runs
// included.
static int step_reduce(engine *g, step_out *o, int B, int redo, ht_error *e) {
    size_t P = g->m->n_params;
    float *lp = g->grad + P;
    for (int j = 0; j < B; j++) {
        lp[j] = g->own[j] && o->loss ? o->loss[j] : 0;
        lp[B + j] = g->own[j] && o->pred ? (float)o->pred[j] : 0; // classes < 2^24: exact
    }
    lp[2 * B] = o->bad ? 1.0f : 0.0f;
    lp[2 * B + 1] = g->stop_flag && *g->stop_flag ? 1.0f : 0.0f;
    lp[2 * B + 2] = redo ? 1.0f : 0.0f;
    if (g->sliced) {
        // The trainable part is reduce-scattered by buckets (each rank sums the slice it
        // updates; engine_reduce.c), already on their way; the rest (batchnorm's statistics,
        // losses, predictions, flags: small) summed whole. A rank whose device failed in the
        // pass (redo) had sent sums its re-runs then changed: every rank drops the buckets'
        // results and reduces the whole trainable part again.
        const size_t T = g->m->n_trainable;
        if (span_sum(g->sp, g->grad + T, P - T + 2 * (size_t)B + 3, e) < 0) {
            engine_overlap_finish(g, 0, NULL);
            return -1;
        }
        redo = o->redo = lp[2 * B + 2] > 0;
        if (engine_overlap_finish(g, !redo, e) < 0 ||
            (redo && span_reduce_scatter(g->sp, g->grad, T, g->comm_dt, e) < 0))
            return -1;
    } else if (span_sum(g->sp, g->grad, P + 2 * (size_t)B + 3, e) < 0) {
        return -1;
    }
    for (int j = 0; j < B; j++) {
        if (o->loss) o->loss[j] = lp[j];
        if (o->pred) o->pred[j] = (int32_t)lp[B + j];
    }
    o->bad = lp[2 * B] > 0;
    g->stop_agreed = lp[2 * B + 1] > 0;
    return 0;
}

// The step's update: the optimiser over the reduced sum, the mean taken inside it (sum * 1/B,
// as a separate pass would), and batchnorm's moving averages from the state's place in the sum.
static int step_update(engine *g, const step_out *o, ht_error *e) {
    if (g->sliced) {
        // This rank's slice (ZeRO stage 1) and the factored layers, then every rank's: the
        // same bits a whole update gives each element. A step reduced whole updated the
        // factored layers by slices: their moments, every rank's before, are again.
        if (engine_update_sliced(g, o->redo, e) < 0 ||
            (o->redo && g->n_fac && engine_gather_moments(g, e) < 0))
            return -1;
    } else {
        optim_step_scaled(&g->opt, g->params, g->sum, g->grad_scale);
    }
    if (g->m->n_state) model_bn_update(g->m, g->params, g->sum);
    return 0;
}

// plan -> dispatch -> gather -> reduce -> update -> broadcast.
static int train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
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
    if (step_plan(g, B, t0, e) < 0) return -1;
    const int redo = step_dispatch(g, &t, st);
    step_out o = {.loss = loss, .pred = pred, .st = st, .defer = g->n_orphans == 0};
    if (step_gather(g, &t, &o, B, e) < 0 || step_reduce(g, &o, B, redo, e) < 0) return -1;
    g->grad_ready = 1;
    g->grad_scale = 1.0f / (float)B;
    g->grad_mean = 0;
    double t1 = ht_now(), tu = t1;
    st->prep_s = g->prep_s;
    st->pass_s = g->pass_s;
    st->reduce_s = t1 - t0 - g->prep_s - g->pass_s;
    if (o.bad) {
        if (g->nan_stop) return ht_fail(e, "non-finite loss or gradient (--on-nan stop)");
        engine_event(g, "step %ld: update skipped (--on-nan skip)", g->step);
        st->skipped = 1;
    } else {
        if (step_update(g, &o, e) < 0) return -1;
        tu = ht_now();
        if (broadcast(g, st, 1, e) < 0) return -1;
    }
    double t2 = ht_now();
    st->update_s = tu - t1;
    st->bcast_s = t2 - tu;
    st->host_s = t2 - t1;
    st->wall_s = t2 - t0;
    // Re-fits need two devices over the ranks: this rank's now, the others' as of the plan.
    if (g->rebalance > 0 && engine_active(g) + g->peers_active >= 2 && ++g->since >= g->rebalance) {
        g->since = 0;
        engine_refit(g, B, 0);
    }
    return 0;
}

int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e) {
    // With several devices at work the host's own parallel loops (the sum, the update) run on
    // this thread alone: an OpenMP team's threads spin a while after each loop, on the cores
    // where the devices compute the next pass (bench/README.md, mixed devices: a CPU worker
    // and a PoCL device with and without the host's team). One device alone
    // keeps the team, whose spinning then costs nothing and saves the next loop's start.
    int working = 0;
    for (int d = 0; d < g->n_devs; d++) working += !g->slots[d].failed && g->slots[d].capacity > 0;
    const int host_threads = omp_get_max_threads();
    if (working >= 2) omp_set_num_threads(1);
    int rc = train_step(g, ds, idx, B, epoch, loss, pred, st, e);
    omp_set_num_threads(host_threads);
    return rc;
}
