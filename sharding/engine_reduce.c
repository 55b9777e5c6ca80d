// The gradient's way over the ranks when the engine is sliced (several ranks): buckets of
// whole layers, last layers first, each reduce-scattered (ranks.h) as soon as every device of
// this rank has finished those layers' backward pass, so that the bulk of the traffic (the
// dense layers' weights, last in the network) travels while the devices still compute the
// first layers' gradients. The sums are the device-order, rank-order sums of the whole-buffer
// reduction, element for element: the same bits however the buckets fall or the timing goes.
#include "engine_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "net.h"

float engine_add_sums(const float *const *sums, int k, float *acc, size_t a, size_t b) {
    float nan_seen = 0;
    if (k == 0) {
        memset(acc + a, 0, sizeof(float) * (b - a));
        return 0;
    }
#pragma omp parallel for reduction(+ : nan_seen) schedule(static) if (b - a >= ENGINE_PAR_MIN)
    for (size_t c = a; c < b; c += ENGINE_CHUNK) {
        size_t end = c + ENGINE_CHUNK < b ? c + ENGINE_CHUNK : b;
        for (int d = 0; d < k; d++) {
            const float *gs = sums[d];
            if (d == 0) memcpy(acc + c, gs + c, sizeof(float) * (end - c));
            else
                for (size_t i = c; i < end; i++) acc[i] += gs[i];
        }
        for (size_t i = c; i < end; i++) nan_seen += acc[i] * 0.0f;
    }
    return nan_seen;
}

int engine_buckets_init(engine *g, ht_error *e) {
    const model *m = g->m;
    const size_t T = m->n_trainable;
    g->bucket = ht_malloc((size_t)m->n_layers + 2, sizeof *g->bucket, e);
    g->inflight = ht_calloc((size_t)m->n_layers + 1, sizeof *g->inflight, e);
    if (!g->bucket || !g->inflight) return -1;
    int n = 0;
    g->bucket[n] = T;
    for (int l = m->n_layers - 1; l > 0; l--) {
        size_t from = net_grad_ready_from(m, l);
        if (from >= g->bucket[n] || from == 0) continue;
        if (g->bucket[n] - from >= ENGINE_BUCKET_MIN) g->bucket[++n] = from;
    }
    if (g->bucket[n] > 0 || n == 0) g->bucket[++n] = 0;
    g->n_buckets = n;
    return 0;
}

void engine_buckets_free(engine *g) {
    for (int k = 0; g->inflight && k < g->n_buckets; k++) ranks_rs_finish(g->inflight[k], NULL, NULL);
    free(g->bucket);
    free(g->inflight);
}

// Device d's gradient sums in device order, as the step's sum takes them.
static int device_sums(const engine *g, const float **sums) {
    int k = 0;
    for (int d = 0; d < g->n_devs; d++) {
        const engine_slot *s = &g->slots[d];
        if (s->dispatched && !s->failed && s->work) sums[k++] = s->work->grad_sum;
    }
    return k;
}

// Sums bucket `next_bucket` over this rank's devices and starts its reduce-scatter.
static void start_next(engine *g, const float **sums, int k) {
    const int b = g->next_bucket++;
    const size_t lo = g->bucket[b + 1], hi = g->bucket[b];
    if (!g->overlap_err && k >= 0) g->overlap_nan += engine_add_sums(sums, k, g->grad, lo, hi);
    ht_error e;
    if (!g->overlap_err && ranks_rs_start(&g->inflight[b], g->grad, g->m->n_trainable, lo, hi,
                                          g->comm_dt, &e) < 0) {
        g->overlap_err = 1;
        g->overlap_e = e;
    }
}

int engine_overlap_poll(engine *g) {
    engine_hub *h = g->hub;
    // What every dispatched device has finished (read under the hub's lock, which the caller
    // holds and the workers take to report).
    size_t ready = 0;
    int any = 0;
    for (int d = 0; d < g->n_devs; d++) {
        const engine_slot *s = &g->slots[d];
        if (!s->dispatched || !s->work) continue;
        size_t f = s->work->ready_from;
        ready = !any || f > ready ? f : ready;
        any = 1;
    }
    if (!any) return 0;
    const int startable = g->next_bucket < g->n_buckets && g->bucket[g->next_bucket + 1] >= ready;
    if (!startable && g->travelling == 0) return 0;
    pthread_mutex_unlock(&h->mu);
    if (startable) {
        const float *sums[HT_MAX_DEVICES];
        int k = device_sums(g, sums);
        while (g->next_bucket < g->n_buckets && g->bucket[g->next_bucket + 1] >= ready) {
            start_next(g, sums, k);
            g->travelling++;
        }
    }
    // Each test lets MPI move the data along (Open MPI's TCP transport moves only inside its
    // calls); the first that has not arrived ends the round.
    for (; g->travelling > 0; g->travelling--)
        if (!ranks_rs_test(g->inflight[g->next_bucket - g->travelling])) break;
    pthread_mutex_lock(&h->mu);
    return ENGINE_POLL_RELEASED | (g->travelling > 0 ? ENGINE_POLL_TRAVELLING : 0);
}

void engine_overlap_rest(engine *g, int *finite) {
    const float *sums[HT_MAX_DEVICES];
    int k = device_sums(g, sums);
    while (g->next_bucket < g->n_buckets) start_next(g, sums, k);
    // batchnorm's statistics travel with the step's small sums.
    const size_t T = g->m->n_trainable;
    float nan_seen = g->overlap_nan + engine_add_sums(sums, k, g->grad, T, g->m->n_params);
    *finite = !isnan(nan_seen);
}

void engine_overlap_flush(engine *g) {
    while (g->next_bucket < g->n_buckets) start_next(g, NULL, -1);
    // A failed wait is kept, as a failed start is, for the step's engine_overlap_finish.
    ht_error e;
    if (engine_overlap_finish(g, 0, &e) < 0 && !g->overlap_err) {
        g->overlap_err = 1;
        g->overlap_e = e;
    }
}

int engine_overlap_finish(engine *g, int keep, ht_error *e) {
    ht_error mine, *err = e ? e : &mine;
    int rc = 0;
    for (int b = 0; b < g->n_buckets; b++) {
        if (!g->inflight[b]) continue;
        if (ranks_rs_finish(g->inflight[b], keep && !g->overlap_err ? g->grad : NULL, err) < 0)
            rc = -1;
        g->inflight[b] = NULL;
    }
    if (g->overlap_err) {
        *err = g->overlap_e;
        rc = -1;
    }
    return rc;
}

void engine_overlap_begin(engine *g) {
    g->overlap = g->sliced && g->n_buckets > 0 && !g->no_overlap;
    g->next_bucket = 0;
    g->travelling = 0;
    g->overlap_nan = 0;
    g->overlap_err = 0;
}
