// The native CPU device: an OpenMP worker running the network over net.c with its own
// parameter copy and a workspace sized for its micro-batch.
#include "core/ht_omp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/device.h"
#include "devices/micro.h"
#include "nn/batchnorm.h"
#include "nn/net.h"

// Largest micro-batch a CPU worker uses: bigger buys nothing once the per-sample GEMMs are
// parallelised across threads, and it bounds the workspace (the 3-layer network keeps about
// 320 KB of activations per sample: 80 MB at 256, 320 MB at a whole batch of 1000).
#define CPU_MICRO_MAX 256

typedef struct cpu_ctx {
    const model *m;
    int threads;
    int micro;
    float *params;    // its own copy (set_params)
    const float *use; // what it runs with: params, or the buffer bound by bind_params
    net_ws ws;
    // While profiling (profile_start): net.c's per-layer seconds (2 * n_layers, the workspace
    // points at them for every shard), the time of the shards and of set_params, and counts.
    double *layer_s;
    double shard_s, params_s;
    long shards, samples;
} cpu_ctx;

static int cpu_set_params(void *vctx, const float *params, ht_error *e) {
    (void)e;
    cpu_ctx *c = vctx;
    double t = c->layer_s ? ht_now() : 0;
    memcpy(c->params, params, sizeof(float) * c->m->n_params);
    c->use = c->params;
    if (c->layer_s) c->params_s += ht_now() - t;
    return 0;
}

static int cpu_bind_params(void *vctx, const float *params, ht_error *e) {
    (void)e;
    cpu_ctx *c = vctx;
    c->use = params;
    return 0;
}

static void record_outputs(cpu_ctx *c, const float *probs, int off, int n, shard_result *res) {
    int nc = c->m->n_classes;
    for (int i = 0; i < n; i++) {
        res->loss[off + i] = c->ws.loss[i];
        res->pred[off + i] = net_predict(c->m, probs + (size_t)i * nc);
    }
}

// Frees the workspace and makes one for a micro-batch of B (micro_realloc_fn).
static int realloc_ws(void *vctx, int B, ht_error *e) {
    cpu_ctx *c = vctx;
    net_ws_free(&c->ws);
    c->micro = B;
    return net_ws_init(&c->ws, c->m, B, c->threads, e) < 0 ? MICRO_OOM : 0;
}

// Out of memory: a workspace for a micro-batch half as large (device_ops.shrink).
static int cpu_shrink(void *vctx, const char *why, char *note, size_t note_len, ht_error *e) {
    cpu_ctx *c = vctx;
    return micro_halve(c->micro, why, realloc_ws, c, note, note_len, e) < 0 ? -1 : 0;
}

static int cpu_train_shard(void *vctx, const shard_job *job, shard_result *res, ht_error *e) {
    cpu_ctx *c = vctx;
    const model *m = c->m;
    // The workspace is allocated up front; only a micro-batch shrunk below one batchnorm group
    // cannot run.
    const int step = micro_step(c->micro, c->ws.bn_group, job->n);
    if (step < 1)
        return ht_fail(e, "a micro-batch of %d holds no whole group of %d samples (--bn-group)",
                       c->micro, c->ws.bn_group);
    double t0 = c->layer_s ? ht_now() : 0;
    c->ws.prof = c->layer_s; // the workspace may have been made anew (cpu_shrink)
    // The thread count is the calling thread's setting: set it for the shard and give the
    // caller its own back (the engine's host thread runs the optimiser in parallel after a
    // self-check ran the single-threaded reference on it).
    int caller_threads = omp_get_max_threads();
    omp_set_num_threads(c->threads);
    res->note[0] = 0;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    // The parameters stay as they are for the shard: packed once, by its first forward pass.
    c->ws.pack_kept = 1;
    c->ws.packed = 0;
    for (int off = 0; off < job->n; off += step) {
        int n = job->n - off < step ? job->n - off : step;
        net_dropout drop = {.seed = job->seed, .epoch = job->epoch, .ids = job->ids + off};
        const float *x = job->x + (size_t)off * in;
        const uint8_t *y = job->y + (size_t)off * m->label_width;
        const float *probs = net_forward(&c->ws, m, c->use, x, y, n, &drop);
        record_outputs(c, probs, off, n, res);
        // The first micro-batch writes the gradient sum, the others add to it; during the last,
        // the layers it finishes are final.
        const int last = off + step >= job->n;
        c->ws.ready = last ? job->grad_ready : NULL;
        c->ws.ready_arg = job->grad_ready_arg;
        c->ws.factor = job->factor;
        c->ws.factor_arg = job->factor_arg;
        net_backward_to(&c->ws, m, c->use, res->grad_sum, x, y, n, &drop,
                        off == 0 ? NET_GRAD_WRITE : NET_GRAD_ADD);
        c->ws.ready = NULL;
        c->ws.factor = NULL;
    }
    res->micro = c->micro;
    omp_set_num_threads(caller_threads);
    c->ws.prof = NULL;
    if (c->layer_s) {
        c->shard_s += ht_now() - t0;
        c->shards++;
        c->samples += job->n;
    }
    return 0;
}

static int cpu_infer(void *vctx, const float *x, int n, float *probs, ht_error *e) {
    (void)e;
    cpu_ctx *c = vctx;
    const model *m = c->m;
    int caller_threads = omp_get_max_threads();
    omp_set_num_threads(c->threads);
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    c->ws.pack_kept = 1;
    c->ws.packed = 0;
    for (int off = 0; off < n; off += c->micro) {
        int k = n - off < c->micro ? n - off : c->micro;
        const float *p = net_forward(&c->ws, m, c->use, x + (size_t)off * in, NULL, k, NULL);
        memcpy(probs + (size_t)off * m->n_classes, p, sizeof(float) * (size_t)k * m->n_classes);
    }
    omp_set_num_threads(caller_threads);
    return 0;
}

// device_ops.profile_start: an empty record, filled from now on.
static int cpu_profile_start(void *vctx, ht_error *e) {
    cpu_ctx *c = vctx;
    if (!c->layer_s && !(c->layer_s = ht_calloc(2 * (size_t)c->m->n_layers, sizeof(double), e)))
        return -1;
    memset(c->layer_s, 0, 2 * (size_t)c->m->n_layers * sizeof(double));
    c->shard_s = c->params_s = 0;
    c->shards = c->samples = 0;
    return 1;
}

// device_ops.profile: the layers' times, and the rest of the shards' time.
static void cpu_profile(void *vctx, device_profile *out) {
    cpu_ctx *c = vctx;
    device_profile_clear(out);
    out->events = 0;
    if (!c->layer_s) return;
    double layers = 0;
    for (int i = 0; i < 2 * c->m->n_layers && i < 2 * out->n_layers; i++) {
        out->layer[i].time_s = c->layer_s[i];
        layers += c->layer_s[i];
    }
    out->rest.time_s = c->shard_s - layers;
    out->params.time_s = c->params_s;
    out->shards = c->shards;
    out->samples = c->samples;
}

static void cpu_close(void *vctx) {
    cpu_ctx *c = vctx;
    if (!c) return;
    net_ws_free(&c->ws);
    free(c->params);
    free(c->layer_s);
    free(c);
}

static const device_ops cpu_ops = {
    .set_params = cpu_set_params,
    .bind_params = cpu_bind_params,
    .train_shard = cpu_train_shard,
    .infer = cpu_infer,
    .shrink = cpu_shrink,
    .close = cpu_close,
    .profile_start = cpu_profile_start,
    .profile = cpu_profile,
};

typedef struct ws_arg {
    const model *m;
    int threads;
} ws_arg;

// The workspace's bytes for a micro-batch of B (micro_bytes_fn).
static size_t ws_bytes(const void *varg, int B) {
    const ws_arg *a = varg;
    return net_ws_bytes(a->m, B, a->threads);
}

int cpu_device_open(device *d, const model *m, int threads, int max_batch, uint64_t mem_limit,
                    ht_error *e) {
    memset(d, 0, sizeof *d);
    // Without a limit, a worker may use a quarter of the host's memory.
    uint64_t host = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t budget = mem_limit ? mem_limit : host / 4;
    uint64_t fixed = 2 * sizeof(float) * m->n_params; // parameter copy + gradient sum
    int most = max_batch < CPU_MICRO_MAX ? max_batch : CPU_MICRO_MAX;
    const int least = micro_least(model_bn_group(m), max_batch);
    if (most < least) most = least;
    if (most < 1) most = 1;
    ws_arg arg = {m, threads};
    int micro = budget > fixed ? micro_fit(most, budget - fixed, ws_bytes, &arg) : 0;
    if (micro < 1)
        return ht_fail(e, "not even one sample of %s fits in %llu MiB (its parameters and gradient "
                          "take %llu MiB, a workspace for one sample %zu KiB more)", m->name,
                       (unsigned long long)(budget >> 20), (unsigned long long)(fixed >> 20),
                       net_ws_bytes(m, 1, threads) >> 10);
    if (micro < least)
        return ht_fail(e, "a batchnorm group of %d samples (--bn-group) of %s does not fit in "
                          "%llu MiB (%d samples do); give a smaller --bn-group", least, m->name,
                       (unsigned long long)(budget >> 20), micro);
    cpu_ctx *c = ht_calloc(1, sizeof *c, e);
    if (!c) return -1;
    c->m = m;
    c->threads = threads;
    c->micro = micro;
    c->params = ht_calloc(m->n_params, sizeof(float), e);
    c->use = c->params;
    if (!c->params || net_ws_init(&c->ws, m, c->micro, threads, e) < 0) {
        cpu_close(c);
        return -1;
    }
    d->ops = &cpu_ops;
    d->ctx = c;
    d->micro = c->micro;
    d->factors = 1;
    d->capacity = 1.0;
    snprintf(d->spec, sizeof d->spec, "cpu");
    snprintf(d->name, sizeof d->name, "native CPU, %d OpenMP thread%s", threads,
             threads == 1 ? "" : "s");
    net_conv_describe(&c->ws, m, d->detail, sizeof d->detail);
    return 0;
}
