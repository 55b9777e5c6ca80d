// The native CPU device: an OpenMP worker running the network over net.c with its own
// parameter copy and a workspace sized for its micro-batch.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "net.h"

// Largest micro-batch a CPU worker uses: bigger buys nothing once the per-sample GEMMs are
// parallelised across threads, and it bounds the workspace (the 3-layer network keeps about
// 320 KB of activations per sample: 80 MB at 256, 320 MB at a whole batch of 1000).
#define CPU_MICRO_MAX 256

typedef struct cpu_ctx {
    const model *m;
    int threads;
    int micro;
    float *params;
    net_ws ws;
} cpu_ctx;

static int cpu_set_weights(void *vctx, const float *params, ht_error *e) {
    (void)e;
    cpu_ctx *c = vctx;
    memcpy(c->params, params, sizeof(float) * c->m->n_params);
    return 0;
}

static void record_outputs(cpu_ctx *c, const float *probs, int off, int n, shard_result *res) {
    int nc = c->m->n_classes;
    for (int i = 0; i < n; i++) {
        res->loss[off + i] = c->ws.loss[i];
        res->pred[off + i] = net_argmax(probs + (size_t)i * nc, nc);
    }
}

static int cpu_train_shard(void *vctx, const shard_job *job, shard_result *res, ht_error *e) {
    (void)e;
    cpu_ctx *c = vctx;
    const model *m = c->m;
    omp_set_num_threads(c->threads);
    memset(res->grad_sum, 0, sizeof(float) * m->n_params);
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    for (int off = 0; off < job->n; off += c->micro) {
        int n = job->n - off < c->micro ? job->n - off : c->micro;
        net_dropout drop = {.seed = job->seed, .epoch = job->epoch, .ids = job->ids + off};
        const float *x = job->x + (size_t)off * in;
        const float *probs = net_forward(&c->ws, m, c->params, x, job->y + off, n, &drop);
        record_outputs(c, probs, off, n, res);
        net_backward(&c->ws, m, c->params, res->grad_sum, x, job->y + off, n, &drop);
    }
    return 0;
}

static int cpu_infer(void *vctx, const float *x, int n, float *probs, ht_error *e) {
    (void)e;
    cpu_ctx *c = vctx;
    const model *m = c->m;
    omp_set_num_threads(c->threads);
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    for (int off = 0; off < n; off += c->micro) {
        int k = n - off < c->micro ? n - off : c->micro;
        const float *p = net_forward(&c->ws, m, c->params, x + (size_t)off * in, NULL, k, NULL);
        memcpy(probs + (size_t)off * m->n_classes, p, sizeof(float) * (size_t)k * m->n_classes);
    }
    return 0;
}

static void cpu_close(void *vctx) {
    cpu_ctx *c = vctx;
    if (!c) return;
    net_ws_free(&c->ws);
    free(c->params);
    free(c);
}

static const device_ops cpu_ops = {
    .type = "cpu",
    .set_weights = cpu_set_weights,
    .train_shard = cpu_train_shard,
    .infer = cpu_infer,
    .close = cpu_close,
};

int cpu_device_open(device *d, const model *m, int threads, int max_batch, ht_error *e) {
    memset(d, 0, sizeof *d);
    cpu_ctx *c = ht_calloc(1, sizeof *c, e);
    if (!c) return -1;
    c->m = m;
    c->threads = threads;
    c->micro = max_batch < CPU_MICRO_MAX ? max_batch : CPU_MICRO_MAX;
    if (c->micro < 1) c->micro = 1;
    c->params = ht_calloc(m->n_params, sizeof(float), e);
    if (!c->params || net_ws_init(&c->ws, m, c->micro, threads, e) < 0) {
        cpu_close(c);
        return -1;
    }
    d->ops = &cpu_ops;
    d->ctx = c;
    d->micro = c->micro;
    d->threads = threads;
    d->weight = 1.0;
    snprintf(d->spec, sizeof d->spec, "cpu");
    snprintf(d->name, sizeof d->name, "native CPU, %d OpenMP thread%s", threads,
             threads == 1 ? "" : "s");
    return 0;
}
