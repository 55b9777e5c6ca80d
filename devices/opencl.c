// The OpenCL device: runs the network with the kernels of kernels/*.cl and CLBlast GEMMs on
// one OpenCL device of any vendor, walking the model's schedule (nn/schedule.h: its buffers and
// gradient slots; the CPU path's fusions are not applied). A shard's inputs go over in one
// write and its gradient sum comes back in one read; buffers are allocated once for the
// largest micro-batch.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/ocl_layers.h"
#include "devices/ocl_ops.h"
#include "devices/ocl_util.h"
#include "nn/batchnorm.h"
#include "devices/device.h"
#include "nn/layer_desc.h"
#include "core/ht_omp.h"
#include "devices/micro.h"
#include "devices/opencl.h"
#include "nn/net.h"
#include "nn/schedule.h"
#include "core/rng.h"

// Micro-batches larger than this buy nothing on any device we know, and keep the im2col
// scratch of the reference networks under a few hundred MB.
#define OCL_MICRO_MAX 512

// A layer without a bias has b_off LAYER_NO_PARAM, which the ops take as "no bias".
_Static_assert(LAYER_NO_PARAM == OCL_NO_BIAS, "opencl.c passes b_off to the ops as it is");

typedef struct ocl_ctx {
    const model *m;
    schedule sched;     // the nodes walked, their buffers and gradient slots
    ocl_dev_info info;
    cl_context ctx;
    cl_program prog;
    cl_command_queue q;
    ocl_ops ops;
    int max_batch; // whole shard: the input/output staging buffers hold this many samples
    int micro;     // samples per micro-batch
    int group;     // batchnorm's group (model_bn_group; 0: none): training's micro-batches are
                   // whole groups
    cl_mem params, grads;
    cl_mem x_all, y_all, ids_all, loss_all, probs_all; // (max_batch, ...) staging
    cl_mem x, y, ids, loss;                             // (micro, ...) current micro-batch
    cl_mem *act;        // per node, its buffer's; an in-place node's (relu, dropout) is its
                        // input's
    cl_mem *aux;        // per node: its own buffer (ocl_layer_ops.aux_bytes), or NULL
    cl_mem *gslot;      // the schedule's gradient slots
    cl_mem gadd[SCHED_MAX_IN]; // where an input's gradient is made before it is added to its
                               // slot (sched_node.grad_add); schedule.max_add of them
    cl_mem tmp;         // the layers' shared scratch (ocl_layer_ops.tmp_floats)
    float *probs_host;                                  // (max_batch, n_classes)
    // While profiling (profile_start; the queue then has event profiling): the record, and
    // within a training shard (prof_on) the time of the last cut (prof_cut).
    device_profile *prof;
    int prof_on;
    double prof_t;
    ocl_tuning tuning;                                  // from the cache; empty when untuned
    int tuned;
    // The job's convolution algorithms (net_conv_choices, per layer) and what Winograd needs:
    // per layer its transformed weights (NULL: none), made on the host (u_host) at every
    // set_params; the scratch and the forward's marks every layer shares.
    conv_choice *algo;
    cl_mem *wino_u, wino, wino_exact;
    float *u_host;
} ocl_ctx;

// The Winograd scratch (floats) and marks (bytes) the convolutions of m share for B samples.
static void wino_sizes(const model *m, const conv_choice *algo, int B, size_t *scratch,
                       size_t *exact) {
    *scratch = *exact = 0;
    for (int l = 0; algo && l < m->n_layers; l++) {
        if (!net_layer_conv_algo(&m->layers[l])) continue;
        conv_geom g = ocl_conv_geom(&m->layers[l], &algo[l]);
        size_t s = ocl_wino_scratch_floats(&g, B), x = ocl_wino_exact_bytes(&g, B);
        if (s > *scratch) *scratch = s;
        if (x > *exact) *exact = x;
    }
}

// The bytes of a layer's own buffer (its family's aux_bytes, with its convolution algorithm).
static size_t layer_aux_bytes(const layer *L, const conv_choice *algo, int B) {
    const ocl_layer_ops *ops = ocl_layer_ops_of[L->kind];
    return ops->aux_bytes ? ops->aux_bytes(L, net_layer_conv_algo(L) ? algo : NULL, B) : 0;
}

// Device bytes for a micro-batch of B samples (staging for max_batch excluded).
static size_t micro_bytes(const model *m, const schedule *s, const conv_choice *algo, int B,
                          size_t *largest) {
    size_t total = 0, widest = 0, col = 0, tmp = 0, big = 0, ws, wx;
    wino_sizes(m, algo, B, &ws, &wx);
    total += ws * sizeof(float) + wx;
    if (ws * sizeof(float) > big) big = ws * sizeof(float);
    col = ws * sizeof(float); // the Winograd GEMMs' operands, which CLBlast may copy too
    for (int n = 0; n < s->n_nodes; n++) {
        const int l = s->node[n].layer;
        const layer *L = &m->layers[l];
        const ocl_layer_ops *ops = ocl_layer_ops_of[L->kind];
        size_t out = layer_out_size(L) * (size_t)B * sizeof(float);
        size_t in = layer_in_size(L) * (size_t)B * sizeof(float);
        size_t aux = layer_aux_bytes(L, algo ? &algo[l] : NULL, B);
        size_t t = ops->tmp_floats ? ops->tmp_floats(L, B) * sizeof(float) : 0;
        if (s->buf[s->node[n].buf].owner == n) total += out;
        total += aux; // every node's own buffer lives from forward to backward
        if (ops->gemm_aux && aux > col) col = aux;
        if (t > tmp) tmp = t;
        if (in > widest) widest = in;
        if (out > widest) widest = out;
    }
    // CLBlast's indirect GEMMs copy (padded) operands into a scratch of about the im2col size.
    total += (size_t)(s->n_gslots + s->max_add) * widest + tmp + (col + tmp);
    if (col > big) big = col;
    if (widest > big) big = widest;
    if (tmp > big) big = tmp;
    if (largest) *largest = big;
    return total;
}

typedef struct bytes_arg {
    const model *m;
    const schedule *s;
    const conv_choice *algo;
    uint64_t max_alloc;
} bytes_arg;

// micro_bytes for micro_fit: MICRO_NEVER when one buffer exceeds the largest allocation.
static size_t fit_bytes(const void *varg, int B) {
    const bytes_arg *a = varg;
    size_t largest, total = micro_bytes(a->m, a->s, a->algo, B, &largest);
    return largest > a->max_alloc ? MICRO_NEVER : total;
}

// Device bytes that do not depend on the micro-batch: weights, gradients, and the staging
// buffers for a whole shard of max_batch samples.
static size_t fixed_bytes(const model *m, const conv_choice *algo, int max_batch) {
    size_t in = (size_t)m->in_c * m->in_h * m->in_w, nc = (size_t)m->n_classes, u = 0;
    for (int l = 0; algo && l < m->n_layers; l++)
        if (net_layer_conv_algo(&m->layers[l])) {
            conv_geom g = ocl_conv_geom(&m->layers[l], &algo[l]);
            u += ocl_wino_u_floats(&g);
        }
    return 2 * sizeof(float) * m->n_params + u * sizeof(float) +
           (size_t)max_batch * (in * sizeof(float) + 1 + sizeof(uint32_t) + sizeof(float) +
                                nc * sizeof(float));
}

// The largest micro-batch (<= max_batch, OCL_MICRO_MAX, but at least one batchnorm group)
// whose buffers fit the budget (the user's limit, else half the device's global memory) with
// no single buffer over the device's maximum allocation.
static int choose_micro(const model *m, const schedule *s, const conv_choice *algo,
                        const ocl_dev_info *info, int max_batch, uint64_t limit) {
    const int group = model_bn_group(m), least = micro_least(group, max_batch);
    int hi = max_batch < OCL_MICRO_MAX ? max_batch : OCL_MICRO_MAX;
    if (hi < least) hi = least;
    uint64_t budget = limit ? limit : info->global_mem / 2;
    uint64_t fixed = fixed_bytes(m, algo, max_batch);
    if (budget <= fixed) return 0;
    bytes_arg arg = {m, s, algo, info->max_alloc};
    int best = micro_fit(hi, budget - fixed, fit_bytes, &arg);
    // Under batchnorm whole groups (training uses no more); else a multiple of 8 when that
    // costs little, for friendlier GEMM shapes.
    if (group > 1 && best >= group) best = micro_step(best, group, max_batch);
    else if (group <= 1 && best > 16) best -= best % 8;
    return best;
}

// A read-write buffer of the device's context (of 4 bytes for none: OpenCL refuses an empty one).
static int buf_create(ocl_ctx *c, cl_mem *buf, size_t bytes, ht_error *e) {
    cl_int err;
    *buf = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    if (err != CL_SUCCESS) return ocl_fail(e, "clCreateBuffer", err, c->ops.label);
    return 0;
}

static void buf_release(cl_mem *buf) {
    if (*buf) clReleaseMemObject(*buf);
    *buf = NULL;
}

static int alloc_fixed(ocl_ctx *c, ht_error *e) {
    const model *m = c->m;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w, nc = (size_t)m->n_classes;
    size_t MB = (size_t)c->max_batch;
    if (buf_create(c, &c->params, m->n_params * sizeof(float), e) < 0 ||
        buf_create(c, &c->grads, m->n_params * sizeof(float), e) < 0 ||
        buf_create(c, &c->x_all, MB * in * sizeof(float), e) < 0 ||
        buf_create(c, &c->y_all, MB * (size_t)m->label_width, e) < 0 ||
        buf_create(c, &c->ids_all, MB * sizeof(uint32_t), e) < 0 ||
        buf_create(c, &c->loss_all, MB * sizeof(float), e) < 0 ||
        buf_create(c, &c->probs_all, MB * nc * sizeof(float), e) < 0)
        return -1;
    c->act = ht_calloc((size_t)c->sched.n_nodes, sizeof *c->act, e);
    c->aux = ht_calloc((size_t)c->sched.n_nodes, sizeof *c->aux, e);
    c->wino_u = ht_calloc((size_t)m->n_layers, sizeof *c->wino_u, e);
    c->gslot = ht_calloc((size_t)c->sched.n_gslots, sizeof *c->gslot, e);
    c->probs_host = ht_malloc(MB * nc, sizeof(float), e);
    if (!c->act || !c->aux || !c->wino_u || !c->gslot || !c->probs_host) return -1;
    size_t u_max = 0;
    for (int l = 0; c->algo && l < m->n_layers; l++) {
        if (!net_layer_conv_algo(&m->layers[l])) continue;
        conv_geom g = ocl_conv_geom(&m->layers[l], &c->algo[l]);
        size_t u = ocl_wino_u_floats(&g);
        if (u && buf_create(c, &c->wino_u[l], u * sizeof(float), e) < 0) return -1;
        u_max += u;
    }
    if (u_max && !(c->u_host = ht_malloc(u_max, sizeof(float), e))) return -1;
    return 0;
}

static void free_micro(ocl_ctx *c) {
    if (c->act) {
        // From the top, so an in-place node's alias is cleared before its owner is released.
        for (int n = c->sched.n_nodes - 1; n >= 0; n--) {
            if (c->sched.buf[c->sched.node[n].buf].owner == n) buf_release(&c->act[n]);
            c->act[n] = NULL;
            buf_release(&c->aux[n]);
        }
    }
    for (int k = 0; c->gslot && k < c->sched.n_gslots; k++) buf_release(&c->gslot[k]);
    for (int k = 0; k < SCHED_MAX_IN; k++) buf_release(&c->gadd[k]);
    cl_mem *bufs[] = {&c->x, &c->y, &c->ids, &c->loss, &c->tmp, &c->wino, &c->wino_exact};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) buf_release(bufs[i]);
    ocl_ops_release_temp(&c->ops);
}

// Buffers for one micro-batch of c->micro samples.
static int alloc_micro(ocl_ctx *c, ht_error *e) {
    const model *m = c->m;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w, B = (size_t)c->micro;
    if (buf_create(c, &c->x, B * in * sizeof(float), e) < 0 || buf_create(c, &c->y, B * (size_t)m->label_width, e) < 0 ||
        buf_create(c, &c->ids, B * sizeof(uint32_t), e) < 0 || buf_create(c, &c->loss, B * sizeof(float), e) < 0)
        return -1;
    size_t widest = 0, tmp = 0;
    const schedule *s = &c->sched;
    for (int n = 0; n < s->n_nodes; n++) {
        const int l = s->node[n].layer, owner = s->buf[s->node[n].buf].owner;
        const layer *L = &m->layers[l];
        const ocl_layer_ops *ops = ocl_layer_ops_of[L->kind];
        size_t out = layer_out_size(L) * B, inl = layer_in_size(L) * B;
        if (owner != n) {
            c->act[n] = c->act[owner];
        } else if (buf_create(c, &c->act[n], out * sizeof(float), e) < 0) {
            return -1;
        }
        size_t aux = layer_aux_bytes(L, c->algo ? &c->algo[l] : NULL, (int)B);
        if (aux && buf_create(c, &c->aux[n], aux, e) < 0) return -1;
        size_t t = ops->tmp_floats ? ops->tmp_floats(L, (int)B) : 0;
        if (t > tmp) tmp = t;
        if (inl > widest) widest = inl;
        if (out > widest) widest = out;
    }
    for (int k = 0; k < s->n_gslots; k++)
        if (buf_create(c, &c->gslot[k], widest * sizeof(float), e) < 0) return -1;
    for (int k = 0; k < s->max_add; k++)
        if (buf_create(c, &c->gadd[k], widest * sizeof(float), e) < 0) return -1;
    if (buf_create(c, &c->tmp, tmp * sizeof(float), e) < 0) return -1;
    size_t ws, wx;
    wino_sizes(m, c->algo, (int)B, &ws, &wx);
    if (ws && (buf_create(c, &c->wino, ws * sizeof(float), e) < 0 || buf_create(c, &c->wino_exact, wx, e) < 0))
        return -1;
    return 0;
}

static int is_out_of_memory(cl_int err) {
    return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
           err == CL_OUT_OF_HOST_MEMORY;
}

// Frees the micro-batch buffers and allocates them for B samples (micro_realloc_fn).
static int realloc_micro(void *vctx, int B, ht_error *e) {
    ocl_ctx *c = vctx;
    free_micro(c);
    c->micro = B;
    ocl_clear_error();
    if (alloc_micro(c, e) == 0) return 0;
    return is_out_of_memory(ocl_last_error()) ? MICRO_OOM : -1;
}

// After an out-of-memory error: drains the queue and reallocates for half the micro-batch
// (again halving while even that fails). Notes what happened in note.
static int shrink_micro(ocl_ctx *c, const char *why, char *note, size_t note_len, ht_error *e) {
    clFinish(c->q);
    int rc = micro_halve(c->micro, why, realloc_micro, c, note, note_len, e);
    if (rc == MICRO_OOM) return ht_wrap(e, "%s", c->ops.label);
    return rc < 0 ? -1 : 0;
}

static void ocl_close(void *vctx) {
    ocl_ctx *c = vctx;
    if (!c) return;
    if (c->q) clFinish(c->q);
    if (c->prof) {
        device_profile_free(c->prof);
        free(c->prof);
    }
    free_micro(c);
    for (int l = 0; c->wino_u && l < c->m->n_layers; l++) buf_release(&c->wino_u[l]);
    free(c->act);
    free(c->aux);
    free(c->gslot);
    schedule_free(&c->sched);
    free(c->wino_u);
    free(c->u_host);
    free(c->algo);
    cl_mem *bufs[] = {&c->params, &c->grads, &c->x_all, &c->y_all, &c->ids_all, &c->loss_all,
                      &c->probs_all};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) buf_release(bufs[i]);
    ocl_ops_free(&c->ops);
    if (c->q) clReleaseCommandQueue(c->q);
    free(c->probs_host);
    ocl_tuning_free(&c->tuning);
    free(c);
}

// Profiling: waits for the queue and adds the wall time since the last cut, and the times of
// the commands enqueued since, to `to` (a layer's entry, the rest of the shard, set_params).
static void prof_cut(ocl_ctx *c, device_prof_time *to) {
    clFinish(c->q);
    double ev[3] = {0, 0, 0}, now = ht_now();
    ocl_ops_drain(&c->ops, ev);
    to->time_s += now - c->prof_t;
    to->kernel_s += ev[0];
    to->transfer_s += ev[1];
    to->gemm_s += ev[2];
    c->prof_t = now;
}

static int ocl_set_params(void *vctx, const float *params, ht_error *e) {
    ocl_ctx *c = vctx;
    if (c->prof) c->prof_t = ht_now();
    double t0 = ocl_prof_start(&c->ops);
    // The Winograd layers' transformed weights, made here as the CPU device makes its own; the
    // blocking write of the weights below waits for these too (in-order queue).
    float *u = c->u_host;
    for (int l = 0; l < c->m->n_layers; l++) {
        if (!c->wino_u || !c->wino_u[l]) continue;
        const layer *L = &c->m->layers[l];
        conv_geom g = ocl_conv_geom(L, &c->algo[l]);
        const size_t n = ocl_wino_u_floats(&g);
        ocl_wino_weights(u, params + L->w_off, &g);
        cl_int werr = clEnqueueWriteBuffer(c->q, c->wino_u[l], CL_FALSE, 0, n * sizeof(float), u,
                                           0, NULL, ocl_ops_event(&c->ops, OCL_EV_TRANSFER));
        if (werr != CL_SUCCESS)
            return ocl_fail(e, "clEnqueueWriteBuffer(Winograd weights)", werr, c->ops.label);
        u += n;
    }
    cl_int err = clEnqueueWriteBuffer(c->q, c->params, CL_TRUE, 0,
                                      sizeof(float) * c->m->n_params, params, 0, NULL,
                                      ocl_ops_event(&c->ops, OCL_EV_TRANSFER));
    if (c->prof) prof_cut(c, &c->prof->params);
    if (err != CL_SUCCESS) return ocl_fail(e, "clEnqueueWriteBuffer(weights)", err, c->ops.label);
    ocl_prof_stop(&c->ops, "write weights (blocking)", t0);
    return 0;
}

static int write_buf(ocl_ctx *c, cl_mem buf, size_t bytes, const void *src, const char *what,
                     ht_error *e) {
    if (bytes == 0) return 0;
    double t0 = ocl_prof_start(&c->ops);
    cl_int err = clEnqueueWriteBuffer(c->q, buf, CL_FALSE, 0, bytes, src, 0, NULL,
                                      ocl_ops_event(&c->ops, OCL_EV_TRANSFER));
    if (err != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clEnqueueWriteBuffer(%s)", what);
        return ocl_fail(e, call, err, c->ops.label);
    }
    ocl_prof_stop(&c->ops, "write", t0);
    return 0;
}

static int copy_buf(ocl_ctx *c, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off,
                    size_t bytes, ht_error *e) {
    return ocl_copy(&c->ops, src, src_off, dst, dst_off, bytes, e);
}

// Node `node`'s call with the device's buffers (ocl_layers.h), over n samples.
static ocl_call call_of(ocl_ctx *c, int node, int n, const uint64_t *keys) {
    const sched_node *N = &c->sched.node[node];
    const int l = N->layer;
    const layer *L = &c->m->layers[l];
    return (ocl_call){.o = &c->ops, .L = L, .l = l, .B = n, .act = layer_act_fn(L->kind),
                      .params = c->params, .grads = c->grads,
                      .in = N->in[0] == SCHED_INPUT ? c->x : c->act[N->in[0]],
                      .out = c->act[node], .aux = c->aux[node], .tmp = c->tmp, .y = c->y,
                      .loss = c->loss,
                      .ids = c->ids, .keys = keys, .group = c->group,
                      .algo = c->algo && net_layer_conv_algo(L) ? &c->algo[l] : NULL,
                      .wino_u = c->wino_u ? c->wino_u[l] : NULL, .wino = c->wino,
                      .wino_exact = c->wino_exact};
}

// Forward over the current micro-batch in c->x (n samples); keys NULL for inference.
static int forward(ocl_ctx *c, int n, int with_labels, const uint64_t *keys, ht_error *e) {
    const model *m = c->m;
    if (c->prof_on) prof_cut(c, &c->prof->rest);
    for (int k = 0; k < c->sched.n_nodes; k++) {
        const int l = c->sched.node[k].layer;
        const layer *L = &m->layers[l];
        ocl_call call = call_of(c, k, n, keys);
        if (!with_labels) call.y = NULL;
        const sched_node *N = &c->sched.node[k];
        call.n_in = N->n_in;
        for (int i = 0; i < N->n_in; i++)
            call.ins[i] = N->in[i] == SCHED_INPUT ? c->x : c->act[N->in[i]];
        if (ocl_layer_ops_of[L->kind]->forward(&call, e) < 0)
            return ht_wrap(e, "layer %s forward", L->name);
        if (c->prof_on) prof_cut(c, &c->prof->layer[2 * l]);
    }
    return 0;
}

// Every node's output gradient is in its buffer's gradient slot; an op that works in place
// (its input's buffer is its own) finds its input's there too.
static int backward(ocl_ctx *c, int n, const uint64_t *keys, ht_error *e) {
    const model *m = c->m;
    const schedule *s = &c->sched;
    if (c->prof_on) prof_cut(c, &c->prof->rest);
    for (int k = s->n_nodes - 1; k >= 0; k--) {
        const sched_node *N = &s->node[k];
        const layer *L = &m->layers[N->layer];
        ocl_call call = call_of(c, k, n, keys);
        cl_mem gin = c->gslot[s->buf[N->in_buf[0]].gslot];
        call.dout = c->gslot[s->buf[N->buf].gslot];
        call.spare = gin;
        // Each input's gradient into its buffer's slot, or, where a later reader wrote that
        // slot already (grad_add), into a scratch buffer first, then added.
        call.n_in = N->n_in;
        cl_mem dslot[SCHED_MAX_IN];
        for (int i = 0, adds = 0; i < N->n_in; i++) {
            call.ins[i] = N->in[i] == SCHED_INPUT ? c->x : c->act[N->in[i]];
            dslot[i] = c->gslot[s->buf[N->in_buf[i]].gslot];
            call.dins[i] = N->in[i] == SCHED_INPUT ? NULL
                           : N->grad_add[i]         ? c->gadd[adds++]
                                                    : dslot[i];
        }
        call.din = call.dins[0];
        cl_mem din = NULL;
        if (ocl_layer_ops_of[L->kind]->backward(&call, &din, e) < 0)
            return ht_wrap(e, "layer %s backward", L->name);
        // Where an op left an input's gradient elsewhere than its slot (in place in dout, or in
        // a scratch buffer), it goes there: added, or copied. A chain's ops write their slots.
        for (int i = 0; i < N->n_in; i++) {
            cl_mem got = i ? call.dins[i] : din;
            if (!got || !call.dins[i]) continue;
            const size_t nf = layer_in_size_k(L, i) * (size_t)n;
            if (N->grad_add[i] ? ocl_add(&c->ops, dslot[i], dslot[i], got, nf, e) < 0
                : got != dslot[i] &&
                      copy_buf(c, got, 0, dslot[i], 0, nf * sizeof(float), e) < 0)
                return ht_wrap(e, "layer %s backward", L->name);
        }
        if (c->prof_on) prof_cut(c, &c->prof->layer[2 * N->layer + 1]);
    }
    return 0;
}

static int read_back(ocl_ctx *c, cl_mem buf, size_t bytes, void *dst, const char *what, ht_error *e) {
    double t0 = ocl_prof_start(&c->ops);
    cl_int err = clEnqueueReadBuffer(c->q, buf, CL_TRUE, 0, bytes, dst, 0, NULL,
                                      ocl_ops_event(&c->ops, OCL_EV_TRANSFER));
    if (err != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clEnqueueReadBuffer(%s)", what);
        return ocl_fail(e, call, err, c->ops.label);
    }
    ocl_prof_stop(&c->ops, "read (blocking)", t0);
    return 0;
}

// Copies the current micro-batch's probabilities (and losses) into the shard staging.
static int stash_outputs(ocl_ctx *c, int off, int n, int with_loss, ht_error *e) {
    size_t nc = (size_t)c->m->n_classes;
    cl_mem probs = c->act[c->sched.n_nodes - 1];
    if (copy_buf(c, probs, 0, c->probs_all, (size_t)off * nc * sizeof(float),
                 (size_t)n * nc * sizeof(float), e) < 0)
        return -1;
    if (with_loss &&
        copy_buf(c, c->loss, 0, c->loss_all, (size_t)off * sizeof(float), (size_t)n * sizeof(float), e) < 0)
        return -1;
    return 0;
}

// Moves micro-batch [off, off+n) of the staged shard into the micro-batch buffers.
static int stage_micro(ocl_ctx *c, int off, int n, int with_labels, ht_error *e) {
    size_t in = (size_t)c->m->in_c * c->m->in_h * c->m->in_w;
    if (copy_buf(c, c->x_all, (size_t)off * in * sizeof(float), c->x, 0, (size_t)n * in * sizeof(float), e) < 0)
        return -1;
    if (!with_labels) return 0;
    size_t yw = (size_t)c->m->label_width;
    if (copy_buf(c, c->y_all, (size_t)off * yw, c->y, 0, (size_t)n * yw, e) < 0 ||
        copy_buf(c, c->ids_all, (size_t)off * sizeof(uint32_t), c->ids, 0, (size_t)n * sizeof(uint32_t), e) < 0)
        return -1;
    return 0;
}

// One attempt at a shard with the current micro-batch.
static int train_attempt(ocl_ctx *c, const shard_job *job, shard_result *res, const uint64_t *keys,
                         ht_error *e) {
    const model *m = c->m;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w, nc = (size_t)m->n_classes;
    if (write_buf(c, c->x_all, (size_t)job->n * in * sizeof(float), job->x, "inputs", e) < 0 ||
        write_buf(c, c->y_all, (size_t)job->n * m->label_width, job->y, "labels", e) < 0 ||
        write_buf(c, c->ids_all, (size_t)job->n * sizeof(uint32_t), job->ids, "sample ids", e) < 0 ||
        ocl_fill(&c->ops, c->grads, 0.0f, m->n_params, e) < 0)
        return -1;
    // Layers add to the zeroed sum, batchnorm's statistics in the state's place too.
    const int step = micro_step(c->micro, c->group, job->n);
    if (step < 1)
        return ht_fail(e, "%s: a micro-batch of %d holds no whole group of %d samples "
                          "(--bn-group)", c->ops.label, c->micro, c->group);
    for (int off = 0; off < job->n; off += step) {
        int n = job->n - off < step ? job->n - off : step;
        if (stage_micro(c, off, n, 1, e) < 0 || forward(c, n, 1, keys, e) < 0 ||
            stash_outputs(c, off, n, 1, e) < 0 || backward(c, n, keys, e) < 0)
            return -1;
    }
    if (read_back(c, c->grads, sizeof(float) * m->n_params, res->grad_sum, "gradients", e) < 0 ||
        read_back(c, c->loss_all, sizeof(float) * (size_t)job->n, res->loss, "losses", e) < 0 ||
        read_back(c, c->probs_all, sizeof(float) * (size_t)job->n * nc, c->probs_host, "probabilities", e) < 0)
        return -1;
    for (int i = 0; i < job->n; i++) res->pred[i] = net_predict(m, c->probs_host + (size_t)i * nc);
    return 0;
}

static int ocl_train_shard(void *vctx, const shard_job *job, shard_result *res, ht_error *e) {
    ocl_ctx *c = vctx;
    const model *m = c->m;
    res->note[0] = 0;
    if (job->n > c->max_batch)
        return ht_fail(e, "%s: shard of %d samples exceeds the %d it was opened for", c->ops.label,
                       job->n, c->max_batch);
    uint64_t *keys = ht_malloc((size_t)m->n_layers, sizeof *keys, e);
    if (!keys) return -1;
    if (c->prof) {
        // Every layer's commands are waited for and timed on their own (prof_cut), so the
        // layers' times are theirs alone, at the cost of a queue wait between layers.
        c->prof_on = 1;
        c->prof_t = ht_now();
    }
    for (int l = 0; l < m->n_layers; l++) keys[l] = ht_rng_key(job->seed, job->epoch, (uint32_t)l);
    int rc;
    for (;;) {
        ocl_clear_error();
        if ((rc = train_attempt(c, job, res, keys, e)) == 0) break;
        cl_int err = ocl_last_error();
        // Out of device memory: halve the micro-batch and run the shard again from scratch
        // (the gradient sum is refilled, so nothing is counted twice).
        if (!is_out_of_memory(err) ||
            shrink_micro(c, ocl_error_name(err), res->note, sizeof res->note, e) < 0)
            break;
    }
    free(keys);
    if (rc < 0) clFinish(c->q); // nothing may still read the caller's buffers
    if (c->prof) {
        prof_cut(c, &c->prof->rest);
        c->prof_on = 0;
        c->prof->shards++;
        c->prof->samples += job->n;
    }
    res->micro = c->micro;
    return rc;
}

static int ocl_infer(void *vctx, const float *x, int n, float *probs, ht_error *e) {
    ocl_ctx *c = vctx;
    const model *m = c->m;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w, nc = (size_t)m->n_classes;
    for (int base = 0; base < n; base += c->max_batch) {
        int chunk = n - base < c->max_batch ? n - base : c->max_batch;
        if (write_buf(c, c->x_all, (size_t)chunk * in * sizeof(float), x + (size_t)base * in, "inputs", e) < 0)
            goto fail;
        for (int off = 0; off < chunk; off += c->micro) {
            int k = chunk - off < c->micro ? chunk - off : c->micro;
            if (stage_micro(c, off, k, 0, e) < 0 || forward(c, k, 0, NULL, e) < 0 ||
                stash_outputs(c, off, k, 0, e) < 0)
                goto fail;
        }
        if (read_back(c, c->probs_all, sizeof(float) * (size_t)chunk * nc, probs + (size_t)base * nc,
                      "probabilities", e) < 0)
            goto fail;
    }
    ocl_ops_drain(&c->ops, NULL); // inference is not profiled: its events go
    return 0;
fail:
    clFinish(c->q);
    ocl_ops_drain(&c->ops, NULL);
    return -1;
}

static int ocl_shrink(void *vctx, const char *why, char *note, size_t note_len, ht_error *e) {
    return shrink_micro(vctx, why, note, note_len, e);
}

// device_ops.profile_start: a queue with event profiling (made now, in place of the one
// without: profiling off costs the queue nothing) and an empty record.
static int ocl_profile_start(void *vctx, ht_error *e) {
    ocl_ctx *c = vctx;
    if (!c->prof) {
        device_profile *p = ht_calloc(1, sizeof *p, e);
        if (!p || device_profile_init(p, c->m->n_layers, e) < 0) {
            free(p);
            return -1;
        }
        cl_int err;
        cl_command_queue q = clCreateCommandQueue(c->ctx, c->info.device,
                                                  CL_QUEUE_PROFILING_ENABLE, &err);
        if (err != CL_SUCCESS) {
            device_profile_free(p);
            free(p);
            return ocl_fail(e, "clCreateCommandQueue(CL_QUEUE_PROFILING_ENABLE)", err, c->ops.label);
        }
        clFinish(c->q);
        clReleaseCommandQueue(c->q);
        c->q = c->ops.q = q;
        c->prof = p;
        ocl_ops_profile(&c->ops, 1);
    }
    device_profile_clear(c->prof);
    c->prof->events = 1;
    return 1;
}

static void ocl_profile(void *vctx, device_profile *out) {
    ocl_ctx *c = vctx;
    device_profile_clear(out);
    if (c->prof) device_profile_copy(out, c->prof);
}

static const device_ops opencl_ops = {
    .set_params = ocl_set_params,
    .train_shard = ocl_train_shard,
    .infer = ocl_infer,
    .shrink = ocl_shrink,
    .close = ocl_close,
    .profile_start = ocl_profile_start,
    .profile = ocl_profile,
};

struct ocl_ops *opencl_device_ops(device *d) {
    return d && d->ops == &opencl_ops ? &((ocl_ctx *)d->ctx)->ops : NULL;
}

const struct ocl_tuning *opencl_device_tuning(const device *d) {
    if (!d || d->ops != &opencl_ops) return NULL;
    const ocl_ctx *c = d->ctx;
    return c->tuned ? &c->tuning : NULL;
}

int opencl_device_open(device *d, const ocl_dev_info *info, const model *m, int max_batch,
                       uint64_t mem_limit, ht_error *e) {
    memset(d, 0, sizeof *d);
    // Its kernels compute in float32: beside a bfloat16 cpu device it would compute its share
    // of each batch with another run's numerics.
    if (m->setup.precision == PRECISION_BF16)
        return ht_fail(e, "--precision bf16 runs on the cpu device only, and --devices opened %s; "
                          "give --devices cpu, or --precision f32", info->spec);
    ocl_ctx *c = ht_calloc(1, sizeof *c, e);
    if (!c) return -1;
    c->m = m;
    c->group = model_bn_group(m);
    c->info = *info;
    c->max_batch = max_batch < 1 ? 1 : max_batch;
    char label[300];
    snprintf(label, sizeof label, "%s (%s)", info->spec, info->name);
    int from_cache = 0;
    if (ocl_device_runtime(info, &c->ctx, &c->prog, &from_cache, e) < 0) {
        free(c);
        return -1;
    }
    cl_int err;
    c->q = clCreateCommandQueue(c->ctx, info->device, 0, &err);
    if (err != CL_SUCCESS) {
        ocl_fail(e, "clCreateCommandQueue", err, label);
        free(c);
        return -1;
    }
    if (ocl_ops_init(&c->ops, c->ctx, c->q, c->prog, label, e) < 0) {
        clReleaseCommandQueue(c->q);
        free(c);
        return -1;
    }
    if (ocl_layers_check(&c->ops, m, e) < 0) {
        ocl_close(c);
        return -1;
    }
    // The tuning `hetrain tune` left for this device, driver and CLBlast; one that cannot be
    // used is left alone with a warning (the device runs as untuned).
    char why[400];
    int rc = ocl_tuning_load(&c->tuning, info, why, sizeof why);
    if (rc < 0)
        snprintf(d->warning, sizeof d->warning, "%s: tuning cache ignored: %s", info->spec, why);
    c->tuned = rc > 0;
    // Shapes the file does not cover (all of them, untuned) start from the device class's
    // configuration where it has one (ocl_tuning_class_defaults; HETRAIN_OCL_CLASS=0: CLBlast's
    // own, as before).
    ocl_gemm_cfg own_direct, own_indirect;
    const char *cls = getenv("HETRAIN_OCL_CLASS");
    if (!(cls && !strcmp(cls, "0")) &&
        ocl_blas_defaults(info->device, &own_direct, &own_indirect, NULL) == 0)
        ocl_tuning_class_defaults(&c->tuning, info, &own_indirect.kp);
    if (c->tuned || c->tuning.has_class) ocl_ops_tune(&c->ops, &c->tuning);
    // Every device of a job computes its convolutions as its CPU devices do (conv_algo.h).
    if (!(c->algo = ht_calloc((size_t)m->n_layers, sizeof *c->algo, e)) ||
        net_conv_choices(m, omp_get_max_threads(), c->algo) < 0) {
        if (c->algo) ht_fail(e, "out of memory choosing the convolutions' algorithms");
        ocl_close(c);
        return -1;
    }
    net_conv_describe_choices(m, c->algo, d->detail, sizeof d->detail);
    if (schedule_build(&c->sched, m, e) < 0) {
        ocl_close(c);
        return ht_wrap(e, "%s", label);
    }
    c->micro = choose_micro(m, &c->sched, c->algo, info, c->max_batch, mem_limit);
    if (c->micro < 1) {
        ht_fail(e, "%s: not even one sample of %s fits in %llu MiB (device memory %llu MiB, "
                   "max allocation %llu MiB)", label, m->name,
                (unsigned long long)((mem_limit ? mem_limit : info->global_mem / 2) >> 20),
                (unsigned long long)(info->global_mem >> 20),
                (unsigned long long)(info->max_alloc >> 20));
        ocl_close(c);
        return -1;
    }
    if (c->micro < micro_least(c->group, c->max_batch)) {
        ht_fail(e, "%s: a batchnorm group of %d samples (--bn-group) of %s does not fit in "
                   "%llu MiB (%d samples do); give a smaller --bn-group", label,
                micro_least(c->group, c->max_batch), m->name,
                (unsigned long long)((mem_limit ? mem_limit : info->global_mem / 2) >> 20),
                c->micro);
        ocl_close(c);
        return -1;
    }
    if (alloc_fixed(c, e) < 0 || alloc_micro(c, e) < 0) {
        ocl_close(c);
        return -1;
    }
    d->ops = &opencl_ops;
    d->ctx = c;
    d->micro = c->micro;
    d->capacity = 1.0;
    snprintf(d->spec, sizeof d->spec, "%s", info->spec);
    char tuned[64] = "";
    if (c->tuned)
        snprintf(tuned, sizeof tuned, ", tuned (%d GEMM shapes, %d work-group sizes)",
                 c->tuning.n_gemm, c->tuning.n_wg);
    snprintf(d->name, sizeof d->name, "OpenCL %s %s (%s), %u CU, %llu MiB%s%s", info->type,
             info->name, info->platform_name, info->compute_units,
             (unsigned long long)(info->global_mem >> 20), from_cache ? ", kernels from cache" : "",
             tuned);
    return 0;
}
