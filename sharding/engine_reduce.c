// The gradient's way over the ranks when the engine is sliced (several ranks): buckets of
// whole layers, last layers first, each reduce-scattered (span.h) as soon as every device of
// this rank has finished those layers' backward pass, so that the bulk of the traffic (the
// dense layers' weights, last in the network) travels while the devices still compute the
// first layers' gradients. The sums are the device-order, rank-order sums of the whole-buffer
// reduction, element for element: the same bits however the buckets fall or the timing goes.
#include "sharding/engine_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/ht_omp.h"
#include "nn/layers.h"
#include "nn/net.h"

// A rank's factors of a layer: a header of FAC_HEAD floats, the number of its devices that
// had samples and each one's samples and micro-batch (its first micro-batch's size), then each
// device's micro-batches in order, each its inputs (k x in) then output gradients (k x out).
// The header's size is fixed, so that every rank knows every rank's count from the plan (its
// samples), however a rank spread them over its devices (engine_probe_idle moves some).
#define FAC_HEAD (1 + 2 * HT_MAX_DEVICES)

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
        // In any order (NaN or not is all it tells): vector code, where a float sum in order
        // would wait on each add (bench/README.md, MPI: what that cost).
        float seen = 0;
#pragma omp simd reduction(+ : seen)
        for (size_t i = c; i < end; i++) seen += acc[i] * 0.0f;
        nan_seen += seen;
    }
    return nan_seen;
}

int engine_factors_init(engine *g, const device *devs, int n_devs, int off, ht_error *e) {
    const model *m = g->m;
    g->fac_of = ht_malloc((size_t)m->n_layers, sizeof *g->fac_of, e);
    if (!g->fac_of) return -1;
    for (int l = 0; l < m->n_layers; l++) g->fac_of[l] = -1;
    if (!g->sliced) return 0;
    // Every device of every rank must report factors: the least over the ranks.
    double mine = !off && g->max_batch <= ENGINE_FAC_MAX_BATCH, *all;
    for (int d = 0; d < n_devs; d++) mine = devs[d].factors ? mine : 0;
    if (!(all = ht_malloc((size_t)g->sp.size, sizeof *all, e))) return -1;
    int rc = span_allgather(g->sp, &mine, all, 1, e);
    for (int r = 0; rc == 0 && r < g->sp.size; r++) mine = all[r] < mine ? all[r] : mine;
    free(all);
    if (rc < 0 || mine == 0) return rc;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        const size_t in = layer_in_size(L), out = (size_t)L->oc;
        if (!net_layer_factors(L) || !L->n_w || L->frozen || layer_params_shared(L) ||
            L->n_w != in * out ||
            (size_t)g->max_batch * (in + out) * 4 > in * out)
            continue;
        engine_fac *more = realloc(g->fac, sizeof *more * (size_t)(g->n_fac + 1));
        if (!more) return ht_fail(e, "out of memory for the factored layers");
        g->fac = more;
        g->fac_of[l] = g->n_fac;
        g->fac[g->n_fac++] = (engine_fac){.layer = l, .in = (int)in, .out = (int)out, .w_off = L->w_off};
    }
    if (g->n_fac == 0) return 0;
    // Scratch: the sums' three buffers, each factored layer's factors going out and coming in
    // (at most a batch's samples and a header a device), the parameters' gather.
    size_t most = 0, R = (size_t)g->sp.size, fac_n = 0;
    g->fac_send = ht_calloc((size_t)g->n_fac, sizeof *g->fac_send, e);
    g->fac_recv = ht_calloc((size_t)g->n_fac, sizeof *g->fac_recv, e);
    g->fac_counts = ht_malloc(R, sizeof *g->fac_counts, e);
    if (!g->fac_send || !g->fac_recv || !g->fac_counts) return -1;
    for (int f = 0; f < g->n_fac; f++) {
        const engine_fac *F = &g->fac[f];
        const size_t W = (size_t)F->in * F->out, per = (size_t)F->in + F->out;
        most = W > most ? W : most;
        fac_n += W;
        if (!(g->fac_send[f] = ht_malloc(FAC_HEAD + (size_t)g->max_batch * per, sizeof(float), e)) ||
            !(g->fac_recv[f] = ht_malloc(R * FAC_HEAD + (size_t)g->max_batch * per, sizeof(float), e)))
            return -1;
    }
    for (int k = 0; k < 3; k++)
        if (!(g->fac_tmp[k] = ht_malloc(most, sizeof(float), e))) return -1;
    g->packed = ht_malloc(m->n_trainable - fac_n + 1, sizeof(float), e);
    return g->packed ? 0 : -1;
}

int engine_buckets_init(engine *g, ht_error *e) {
    const model *m = g->m;
    const size_t T = m->n_trainable;
    const size_t most = 2 * (size_t)m->n_layers + 2;
    g->bucket = ht_malloc(most + 1, sizeof *g->bucket, e);
    g->bucket_fac = ht_malloc(most, sizeof *g->bucket_fac, e);
    g->inflight = ht_calloc(most, sizeof *g->inflight, e);
    if (!g->bucket || !g->bucket_fac || !g->inflight) return -1;
    int n = 0;
    g->bucket[n] = T;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const int f = g->fac_of[l];
        if (f >= 0) {
            // A factored weight is a bucket of its own: what lies above it (its bias, later
            // layers) closes the bucket before.
            const size_t lo = g->fac[f].w_off, hi = lo + (size_t)g->fac[f].in * g->fac[f].out;
            if (g->bucket[n] > hi) g->bucket_fac[n] = -1, g->bucket[++n] = hi;
            g->bucket_fac[n] = f;
            g->bucket[++n] = lo;
            continue;
        }
        if (l == 0) break;
        size_t from = net_grad_ready_from(m, l);
        if (from >= g->bucket[n] || from == 0) continue;
        if (g->bucket[n] - from >= ENGINE_BUCKET_MIN) g->bucket_fac[n] = -1, g->bucket[++n] = from;
    }
    if (g->bucket[n] > 0 || n == 0) g->bucket_fac[n] = -1, g->bucket[++n] = 0;
    g->n_buckets = n;
    return 0;
}

void engine_buckets_free(engine *g) {
    for (int k = 0; g->inflight && k < g->n_buckets; k++) span_finish(&g->inflight[k], NULL, NULL);
    for (int f = 0; f < g->n_fac; f++) {
        if (g->fac_send) free(g->fac_send[f]);
        if (g->fac_recv) free(g->fac_recv[f]);
    }
    for (int k = 0; k < 3; k++) free(g->fac_tmp[k]);
    free(g->bucket);
    free(g->bucket_fac);
    free(g->inflight);
    free(g->fac);
    free(g->fac_of);
    free(g->fac_send);
    free(g->fac_recv);
    free(g->fac_counts);
    free(g->packed);
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

// Every rank's floats of factored layer f's factors (g->fac_counts), from the plan.
static void fac_counts(engine *g, int f) {
    const size_t per = (size_t)g->fac[f].in + g->fac[f].out;
    const int R = g->sp.size;
    for (int r = 0; r < R; r++) g->fac_counts[r] = FAC_HEAD;
    for (int k = 0; k < g->plan_len; k++)
        g->fac_counts[g->plan_rd[k] / HT_MAX_DEVICES] += (int)((size_t)g->plan_n[k] * per);
}

// Starts the gather of factored layer f's factors (bucket b): this rank's devices' in device
// order (what a failed device left is padded: the step is then reduced whole).
static int start_factors(engine *g, int f, int b, ht_error *e) {
    const size_t per = (size_t)g->fac[f].in + g->fac[f].out;
    float *head = g->fac_send[f], *o = head + FAC_HEAD;
    memset(head, 0, sizeof(float) * FAC_HEAD);
    int k = 0;
    for (int d = 0; d < g->n_devs; d++) {
        const engine_slot *s = &g->slots[d];
        if (!s->dispatched || s->n == 0) continue;
        const size_t want = (size_t)s->n * per;
        size_t have = s->work && !s->failed && s->work->fac_len[f] ? s->work->fac_len[f] - 1 : 0;
        have = have < want ? have : want;
        head[1 + 2 * k] = (float)s->n;
        head[2 + 2 * k] = have ? s->work->fac_buf[f][0] : (float)s->n;
        k++;
        if (have) memcpy(o, s->work->fac_buf[f] + 1, sizeof(float) * have);
        memset(o + have, 0, sizeof(float) * (want - have));
        o += want;
    }
    head[0] = (float)k;
    fac_counts(g, f);
    // The devices' samples are the plan's: should they ever not be, the gather still starts
    // (every rank waits for it) and the step fails here.
    const size_t sent = (size_t)(o - head), want = (size_t)g->fac_counts[g->sp.rank];
    if (sent < want) memset(o, 0, sizeof(float) * (want - sent));
    int rc = span_gather_begin(g->sp, &g->inflight[b], g->fac_send[f], g->fac_counts,
                               g->fac_recv[f], e);
    if (rc == 0 && sent != want)
        return ht_fail(e, "rank %d: %zu floats of layer %d's factors where the plan says %zu",
                       g->sp.rank, sent, g->fac[f].layer, want);
    return rc;
}

// Rank r's factors `seg` (fac_counts[r] floats): their devices, samples and micro-batches, -1
// with e when the header does not add up.
static int fac_devices(const engine *g, int f, int r, const float *seg, int *n_dev, ht_error *e) {
    const size_t per = (size_t)g->fac[f].in + g->fac[f].out;
    const float k = seg[0];
    size_t total = 0;
    int ok = k >= 0 && k <= HT_MAX_DEVICES;
    for (int i = 0; ok && i < (int)k; i++) {
        const float n = seg[1 + 2 * i], step = seg[2 + 2 * i];
        ok = n >= 1 && n <= g->max_batch && step >= 1 && step <= n;
        total += ok ? (size_t)n * per : 0;
    }
    if (!ok || FAC_HEAD + total != (size_t)g->fac_counts[r])
        return ht_fail(e, "rank %d's factors of layer %d do not add up to its %d floats", r,
                       g->fac[f].layer, g->fac_counts[r]);
    *n_dev = (int)k;
    return 0;
}

// Sums bucket `next_bucket` over this rank's devices and starts its reduce-scatter, or for a
// factored weight the gather of its factors.
static void start_next(engine *g, const float **sums, int k) {
    const int b = g->next_bucket++, f = g->bucket_fac[b];
    const size_t lo = g->bucket[b + 1], hi = g->bucket[b];
    if (!g->overlap_err && k >= 0) g->overlap_nan += engine_add_sums(sums, k, g->grad, lo, hi);
    ht_error e;
    int rc = f >= 0 ? start_factors(g, f, b, &e)
                    : span_reduce_begin(g->sp, &g->inflight[b], g->grad, g->m->n_trainable, lo,
                                        hi, g->comm_dt, &e);
    if (!g->overlap_err && rc < 0) {
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
        if (!span_poll(&g->inflight[g->next_bucket - g->travelling])) break;
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

// dst = rank r's sum of factored layer f's weight gradient from its factors seg: its devices'
// sums added in device order, each over its micro-batches as the device computed it
// (dense_weight_grad, the first overwriting); tmp: scratch. Rounded as the reduce-scatter
// carries it.
static int rank_sum(engine *g, int f, int r, const float *seg, float *dst, float *tmp, ht_error *e) {
    const engine_fac *F = &g->fac[f];
    const size_t W = (size_t)F->in * F->out, per = (size_t)F->in + F->out;
    const int nt = omp_get_max_threads();
    const gemm_prec prec = model_gemm_prec(g->m);
    int devs;
    if (fac_devices(g, f, r, seg, &devs, e) < 0) return -1;
    const float *x = seg + FAC_HEAD;
    for (int i = 0; i < devs; i++) {
        const int n = (int)seg[1 + 2 * i], step = (int)seg[2 + 2 * i];
        float *out = i ? tmp : dst;
        for (int off = 0; off < n; off += step) {
            const int kb = n - off < step ? n - off : step;
            dense_weight_grad(out, x + (size_t)kb * F->in, x, kb, F->in, F->out, off ? 1.0f : 0.0f,
                              nt, prec);
            x += (size_t)kb * per;
        }
        if (out == tmp) {
#pragma omp parallel for schedule(static) if (W >= ENGINE_PAR_MIN)
            for (size_t q = 0; q < W; q++) dst[q] += tmp[q];
        }
    }
    if (devs == 0) memset(dst, 0, sizeof(float) * W);
    if (g->comm_dt == SPAN_BF16) span_bf16_round_n(dst, W);
    return 0;
}

// Two ranks, the other rank's sum one device's single micro-batch: it is dense_weight_grad's
// dout^T in, and the sum this rank's + it (or it + this rank's: a + b is b + a, bit for bit),
// which dense_weight_grad with beta 1 makes in place, without the scratch's passes: BLAS adds
// each element's sum over the samples to the element (the devices' micro-batches after their
// first rely on this too). 0 (nothing done) when the other rank's factors are otherwise.
static int add_single(engine *g, int f, int r, const float *seg, float *out) {
    const engine_fac *F = &g->fac[f];
    int devs;
    ht_error ignored;
    if (fac_devices(g, f, r, seg, &devs, &ignored) < 0 || devs != 1 || seg[2] < seg[1]) return 0;
    const int n = (int)seg[1];
    const float *x = seg + FAC_HEAD;
    dense_weight_grad(out, x + (size_t)n * F->in, x, n, F->in, F->out, 1.0f, omp_get_max_threads(),
                      model_gemm_prec(g->m));
    return 1;
}

// Factored layer f's weight gradient summed over the ranks in rank order, the bits the
// reduce-scatter gives an owner, into the whole of its place in g->grad, which holds this
// rank's own sum: the ranks before this one summed aside, then this rank's added (a + b is
// b + a, bit for bit), then the ranks after it.
static int combine_factors(engine *g, int f, ht_error *e) {
    const engine_fac *F = &g->fac[f];
    const size_t W = (size_t)F->in * F->out;
    const int R = g->sp.size, me = g->sp.rank;
    float *out = g->grad + F->w_off, *acc = g->fac_tmp[0], *one = g->fac_tmp[1], *tmp = g->fac_tmp[2];
    fac_counts(g, f);
    const float *other = me ? g->fac_recv[f] : g->fac_recv[f] + g->fac_counts[0];
    if (R == 2 && g->comm_dt == SPAN_F32 && add_single(g, f, 1 - me, other, out)) return 0;
    if (g->comm_dt == SPAN_BF16) span_bf16_round_n(out, W);
    const float *seg = g->fac_recv[f];
    for (int r = 0; r < R; r++) {
        if (r != me) {
            if (rank_sum(g, f, r, seg, r == 0 ? acc : one, tmp, e) < 0) return -1;
            float *dst = r < me ? acc : out;
            if (r > 0) {
#pragma omp parallel for schedule(static) if (W >= ENGINE_PAR_MIN)
                for (size_t i = 0; i < W; i++) dst[i] += one[i];
            }
        } else if (r > 0) {
#pragma omp parallel for schedule(static) if (W >= ENGINE_PAR_MIN)
            for (size_t i = 0; i < W; i++) out[i] = acc[i] + out[i];
        }
        seg += g->fac_counts[r];
    }
    return 0;
}

int engine_overlap_finish(engine *g, int keep, ht_error *e) {
    ht_error mine, *err = e ? e : &mine;
    int rc = 0;
    for (int b = 0; b < g->n_buckets; b++) {
        const int f = g->bucket_fac[b];
        span_op *op = &g->inflight[b];
        if (!op->rs && !op->ag) continue;
        if (f >= 0) {
            if (span_finish(op, NULL, err) < 0) rc = -1;
            else if (keep && !g->overlap_err && rc == 0 && combine_factors(g, f, err) < 0) rc = -1;
            continue;
        }
        if (span_finish(op, keep && !g->overlap_err ? g->grad : NULL, err) < 0) rc = -1;
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

// Rank r's slice less the factored weights (ascending, disjoint): up to n_fac + 1 pieces.
static int slice_pieces(const engine *g, int r, size_t (*piece)[2]) {
    size_t lo, hi, at;
    span_slice(g->sp, g->m->n_trainable, r, &lo, &hi);
    at = lo;
    int n = 0;
    for (int f = 0; f < g->n_fac && at < hi; f++) {
        const size_t a = g->fac[f].w_off, b = a + (size_t)g->fac[f].in * g->fac[f].out;
        if (b <= at) continue;
        if (a > at) piece[n][0] = at, piece[n][1] = a < hi ? a : hi, n++;
        at = b;
    }
    if (at < hi) piece[n][0] = at, piece[n][1] = hi, n++;
    return n;
}

int engine_update_sliced(engine *g, int whole, ht_error *e) {
    const size_t T = g->m->n_trainable;
    const int me = g->sp.rank, R = g->sp.size;
    size_t lo, hi;
    span_slice(g->sp, T, me, &lo, &hi);
    if (g->n_fac == 0 || whole) {
        // The sums of this rank's slice alone: ZeRO stage 1 throughout.
        optim_step_range(&g->opt, g->params, g->sum, g->grad_scale, lo, hi);
        return span_allgather_slices(g->sp, g->params, T, e);
    }
    // The slice less the factored weights, and the factored weights whole, in order.
    size_t (*range)[2] = malloc(sizeof *range * (size_t)(2 * g->n_fac + 1));
    int *counts = malloc(sizeof *counts * (size_t)R);
    if (!range || !counts) {
        free(range);
        free(counts);
        return ht_fail(e, "out of memory for the update's ranges");
    }
    int n = slice_pieces(g, me, range), k = n;
    for (int f = 0; f < g->n_fac; f++) {
        range[k][0] = g->fac[f].w_off;
        range[k][1] = g->fac[f].w_off + (size_t)g->fac[f].in * g->fac[f].out;
        k++;
    }
    optim_step_ranges(&g->opt, g->params, g->sum, g->grad_scale, (const size_t (*)[2])range, k);
    // Every rank's pieces packed in rank order, gathered, unpacked.
    size_t at = 0;
    for (int r = 0; r < R; r++) {
        int np = slice_pieces(g, r, range);
        size_t c = 0;
        for (int i = 0; i < np; i++) {
            const size_t len = range[i][1] - range[i][0];
            if (r == me) memcpy(g->packed + at + c, g->params + range[i][0], sizeof(float) * len);
            c += len;
        }
        counts[r] = (int)c;
        at += c;
    }
    int rc = span_allgatherv(g->sp, g->packed, counts, e);
    at = 0;
    for (int r = 0; rc == 0 && r < R; r++) {
        int np = slice_pieces(g, r, range);
        for (int i = 0; i < np; i++) {
            const size_t len = range[i][1] - range[i][0];
            if (r != me) memcpy(g->params + range[i][0], g->packed + at, sizeof(float) * len);
            at += len;
        }
    }
    free(range);
    free(counts);
    return rc;
}

int engine_factored(const engine *g) { return g->n_fac; }

void engine_describe_exchange(const engine *g, char *buf, size_t len) {
    if (!g->sliced) {
        snprintf(buf, len, "one rank");
        return;
    }
    size_t k = (size_t)snprintf(buf, len,
                                "over %d ranks, the gradient reduce-scattered as %s in buckets of whole "
                                "layers, each rank updating its slice of the parameters",
                                g->sp.size, g->comm_dt == SPAN_BF16 ? "bfloat16" : "float");
    for (int f = 0; f < g->n_fac && k < len; f++) {
        const engine_fac *F = &g->fac[f];
        k += (size_t)snprintf(buf + k, len - k,
                              "%s%s's weight (%zu values) as factors (%d x %d floats a batch)",
                              f ? ", " : "; ", g->m->layers[F->layer].name,
                              (size_t)F->in * F->out, g->max_batch, F->in + F->out);
    }
    if (g->n_fac && k < len) snprintf(buf + k, len - k, ", summed and updated on every rank");
}
