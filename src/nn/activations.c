// Elementwise layers (relu, inverted dropout) and the softmax cross-entropy head.
#include "nn/layers.h"

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

#include <math.h>
#include <string.h>

#include "core/rng.h"

// Below this many elements a parallel region costs more than the loop it would split.
#define ACT_PARALLEL_MIN 32768
// Elements of one sample a dropout task masks at a time.
#define DROPOUT_BLOCK 1024

void relu_forward(float *out, const float *in, size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float *din, const float *dout, const float *out, size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for simd num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) din[i] = keep_if(out[i] > 0.0f, dout[i]);
}

void relu_dropout_backward(float *din, const float *dout, const float *out, size_t n,
                           float rate, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
#pragma omp parallel for simd num_threads(nthreads) schedule(static) if (n >= ACT_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        din[i] = keep_if(out[i] > 0.0f, dout[i] * scale);
    }
}

// Forward and backward apply the same mask and scale; the mask is a pure function of
// (key, sample id, element), never of the batch position.
void dropout_forward(float *out, const float *in, int B, size_t N, float rate, uint64_t key,
                     const uint32_t *ids, int nthreads) {
    dropout_forward_mask(out, in, B, N, rate, key, ~0u, ids, nthreads);
}

void dropout_forward_mask(float *out, const float *in, int B, size_t N, float rate,
                          uint64_t key, uint32_t emask, const uint32_t *ids, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
    const size_t total = (size_t)B * N, nblk = (N + DROPOUT_BLOCK - 1) / DROPOUT_BLOCK;
    (void)total; // read only by the OpenMP clause
    // Blocks of a sample's elements, so that the inner loop (the hash) runs in vector lanes.
#pragma omp parallel for collapse(2) num_threads(nthreads) schedule(static) \
    if (total >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        for (size_t b = 0; b < nblk; b++) {
            const size_t lo = b * DROPOUT_BLOCK, hi = lo + DROPOUT_BLOCK < N ? lo + DROPOUT_BLOCK : N;
            const float *x = in + (size_t)i * N;
            float *y = out + (size_t)i * N;
            const uint32_t id = ids[i];
            HT_SIMD
            for (size_t e = lo; e < hi; e++) {
                y[e] = keep_if(ht_rng_uniform(key, id, (uint32_t)e & emask) >= rate, x[e] * scale);
            }
        }
    }
}

void softmax_xent_forward(float *probs, float *loss, const float *logits, const uint8_t *labels,
                          int B, int NC) {
    for (int i = 0; i < B; i++) {
        const float *x = logits + (size_t)i * NC;
        float *p = probs + (size_t)i * NC;
        float m = x[0];
        for (int c = 1; c < NC; c++) m = x[c] > m ? x[c] : m;
        double sum = 0.0;
        for (int c = 0; c < NC; c++) {
            p[c] = expf(x[c] - m);
            sum += p[c];
        }
        const float inv = (float)(1.0 / sum);
        for (int c = 0; c < NC; c++) p[c] *= inv;
        // -log softmax = log(sum exp(x - m)) - (x[label] - m); never exp of a large number.
        if (labels && loss) loss[i] = (float)(log(sum) - ((double)x[labels[i]] - m));
    }
}

void bce_forward(float *probs, float *loss, const float *logits, const uint8_t *labels, int B,
                 int K) {
    for (int i = 0; i < B; i++) {
        double sum = 0;
        int bad = 0;
        for (int j = 0; j < K; j++) {
            const double z = logits[(size_t)i * K + j], e = exp(-fabs(z));
            const double p = z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
            if (K == 1) {
                probs[2 * i] = (float)(z >= 0 ? e / (1.0 + e) : 1.0 / (1.0 + e));
                probs[2 * i + 1] = (float)p;
            } else {
                probs[(size_t)i * K + j] = (float)p;
            }
            if (!labels || !loss) continue;
            // softplus(z) - y z = max(z, 0) - y z + log1p(exp(-|z|))
            const int y = labels[(size_t)i * K + j];
            bad |= y > 1;
            sum += (z > 0 ? z : 0) - y * z + log1p(e);
        }
        // Keras's binary cross-entropy: the mean over the labels of a sample
        if (labels && loss) loss[i] = bad ? NAN : (float)(sum / K);
    }
}

void bce_backward(float *dlogits, const float *probs, const uint8_t *labels, int B, int K) {
    if (K == 1) {
        for (int i = 0; i < B; i++) dlogits[i] = probs[2 * i + 1] - (float)labels[i];
        return;
    }
    const float inv = 1.0f / (float)K; // the gradient of the mean over the labels
    for (size_t i = 0; i < (size_t)B * K; i++) dlogits[i] = (probs[i] - (float)labels[i]) * inv;
}

void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B,
                           int NC) {
    for (int i = 0; i < B; i++) {
        const float *p = probs + (size_t)i * NC;
        float *d = dlogits + (size_t)i * NC;
        for (int c = 0; c < NC; c++) d[c] = p[c];
        d[labels[i]] -= 1.0f;
    }
}

// ---- channels-last (NHWC) tensors ----

void dropout_nhwc_apply(float *out, const float *in, int B, int C, int Cs, int HW, float rate,
                        uint64_t key, uint32_t emask, const uint32_t *ids, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if ((size_t)B * HW * C >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        for (int p = 0; p < HW; p++) {
            const size_t k = ((size_t)i * HW + p) * Cs;
            HT_SIMD
            for (int c = 0; c < C; c++) {
                const uint32_t e = ((uint32_t)c * (uint32_t)HW + (uint32_t)p) & emask;
                out[k + c] = keep_if(ht_rng_uniform(key, ids[i], e) >= rate, in[k + c] * scale);
            }
            for (int c = C; c < Cs; c++) out[k + c] = 0.0f;
        }
    }
}

void nchw_to_nhwc(float *dst, const float *src, int B, int C, int Cs, int HW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if ((size_t)B * HW * Cs >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        const float *s = src + (size_t)i * C * HW;
        float *d = dst + (size_t)i * HW * Cs;
        for (int p = 0; p < HW; p++) {
            for (int c = 0; c < C; c++) d[(size_t)p * Cs + c] = s[(size_t)c * HW + p];
            for (int c = C; c < Cs; c++) d[(size_t)p * Cs + c] = 0.0f;
        }
    }
}

void nhwc_to_nchw(float *dst, const float *src, int B, int C, int Cs, int HW, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) \
    if ((size_t)B * HW * Cs >= ACT_PARALLEL_MIN)
    for (int i = 0; i < B; i++) {
        const float *s = src + (size_t)i * HW * Cs;
        float *d = dst + (size_t)i * C * HW;
        for (int c = 0; c < C; c++)
            for (int p = 0; p < HW; p++) d[(size_t)c * HW + p] = s[(size_t)p * Cs + c];
    }
}

// ---- the relu, dropout and softmax families: descriptions (layer_desc.h), CPU ops ----

static int same_shape(layer *L) {
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    return 0;
}

static int relu_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                      ht_error *err) {
    (void)s, (void)d, (void)n_classes, (void)idx, (void)err;
    return same_shape(L);
}

static int dropout_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                         int idx, ht_error *err) {
    (void)n_classes;
    if (!(s->rate >= 0 && s->rate < 1))
        return ht_fail(err, "layer %d (%s): rate %g: expected 0 <= rate < 1", idx, d->name,
                       (double)s->rate);
    L->rate = s->rate;
    L->drop_sample = s->drop_sample;
    return same_shape(L);
}

static int softmax_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                         int idx, ht_error *err) {
    (void)s;
    if (layer_in_size(L) != (size_t)n_classes)
        return ht_fail(err, "layer %d (%s): input has %zu features (%dx%dx%d), expected the %d "
                       "classes", idx, d->name, layer_in_size(L), L->c, L->h, L->w, n_classes);
    L->c = n_classes, L->h = 1, L->w = 1;
    L->oc = L->c, L->oh = 1, L->ow = 1;
    return 0;
}

// The binary head: one logit in (a Dense(1)), the two classes' probabilities out; or the
// multi-label head: k >= 2 logits in (a Dense(k)), each label's probability out.
static int bce_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                     ht_error *err) {
    (void)s;
    size_t in = layer_in_size(L);
    if (in == 1) {
        if (n_classes != 2)
            return ht_fail(err, "layer %d (%s): a binary head needs 2 classes (labels 0 and 1), "
                           "the model has %d", idx, d->name, n_classes);
        L->oc = 2, L->oh = 1, L->ow = 1;
        return 0;
    }
    if (in != (size_t)n_classes)
        return ht_fail(err, "layer %d (%s): input has %zu features (%dx%dx%d), expected 1 (a "
                       "binary head's logit) or the model's %d labels (a multi-label head)", idx,
                       d->name, in, L->c, L->h, L->w, n_classes);
    if (n_classes > MODEL_MAX_LABELS)
        return ht_fail(err, "layer %d (%s): a multi-label head of %d labels; at most %d are "
                       "supported", idx, d->name, n_classes, MODEL_MAX_LABELS);
    L->oc = n_classes, L->oh = 1, L->ow = 1;
    return 0;
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key no_keys[] = {LK_END};
static const layer_key dropout_keys[] = {
    LK_ROW("rate", NULL, LK_FLOAT, LK_REQUIRED | LK_HI_OPEN, rate, 0, 1),
    LK_ROW("per_sample", NULL, LK_INT, 0, drop_sample, 0, 1),
    LK_END,
};

const layer_family family_relu = {.name = "relu", .flags = LF_IN_PLACE | LF_ACTIVATION,
                                  .keys = no_keys, .shape = relu_shape, .macs = no_macs};
const layer_family family_dropout = {.name = "dropout", .flags = LF_IN_PLACE,
                                     .keys = dropout_keys, .shape = dropout_shape,
                                     .macs = no_macs};
const layer_family family_softmax = {.name = "softmax",
                                     .flags = LF_FLAT | LF_LAST | LF_ACTIVATION,
                                     .keys = no_keys, .shape = softmax_shape, .macs = no_macs};
const layer_family family_bce = {.name = "bce", .flags = LF_FLAT | LF_LAST, .keys = no_keys,
                                 .shape = bce_shape, .macs = no_macs};

// relu: in place; a relu right after a conv or a batchnorm is theirs (p->skip).
static void relu_fwd(const net_call *c) {
    if (!c->p->skip) relu_forward(c->out, c->in, net_out_floats(c->L, c->p) * (size_t)c->B, c->nt);
}
// c->out is the relu output (a dropout after it keeps the sign, so it still marks where the
// relu was active). With drop_fold and dropout on, the dropout's scale is applied here too.
static float *relu_bwd(const net_call *c) {
    size_t n = net_out_floats(c->L, c->p) * (size_t)c->B;
    if (c->din && c->p->drop_fold && c->drop)
        relu_dropout_backward(c->dout, c->dout, c->out, n, c->fold_rate, c->nt);
    else if (c->din && !c->p->skip)
        relu_backward(c->dout, c->dout, c->out, n, c->nt);
    return c->dout;
}

// dropout: in place; masks keyed by (seed, epoch, sample id, layer, element).
static void dropout_apply(const net_call *c, float *out, const float *in) {
    const layer *L = c->L;
    uint64_t key = ht_rng_key(c->drop->seed, c->drop->epoch, (uint32_t)c->l);
    if (c->p->out_nhwc)
        dropout_nhwc_apply(out, in, c->B, L->oc, c->p->out_cs, L->oh * L->ow, L->rate, key,
                           layer_dropout_emask(L), c->ids, c->nt);
    else
        dropout_forward_mask(out, in, c->B, layer_out_size(L), L->rate, key,
                             layer_dropout_emask(L), c->ids, c->nt);
}
static void dropout_fwd(const net_call *c) {
    if (c->drop) dropout_apply(c, c->out, c->in);
    else if (c->out != c->in)
        memcpy(c->out, c->in, sizeof(float) * net_out_floats(c->L, c->p) * (size_t)c->B);
}
// The same mask and scale on the gradient; after a relu with drop_fold, that relu's backward
// did it.
static float *dropout_bwd(const net_call *c) {
    if (c->drop && !c->folded) dropout_apply(c, c->dout, c->dout);
    return c->dout;
}

// softmax + cross-entropy, the loss head: its gradient goes where din says even for a first
// layer (the walker hands it a spare buffer then).
static void softmax_fwd(const net_call *c) {
    softmax_xent_forward(c->out, c->y ? c->loss : NULL, c->in, c->y, c->B, c->L->oc);
}
static float *softmax_bwd(const net_call *c) {
    softmax_xent_backward(c->din, c->out, c->y, c->B, c->L->oc);
    return c->din;
}

// relu and dropout run their batch-wise ops with B = 1 and nt = 1 in the trunk (below their
// parallel threshold: a plain loop); the loss head never is in it.
const net_layer_ops cpu_relu = {.forward = relu_fwd, .backward = relu_bwd,
                                .forward_one = relu_fwd, .backward_one = relu_bwd,
                                .flags = NET_OP_RELU};
const net_layer_ops cpu_dropout = {.forward = dropout_fwd, .backward = dropout_bwd,
                                   .forward_one = dropout_fwd, .backward_one = dropout_bwd,
                                   .flags = NET_OP_DROP_FOLD};
const net_layer_ops cpu_softmax = {.forward = softmax_fwd, .backward = softmax_bwd};

// The binary head (one logit) or the multi-label head (k logits: labels k bytes a sample).
static int bce_k(const layer *L) { return (int)layer_in_size(L); }
static void bce_fwd(const net_call *c) {
    bce_forward(c->out, c->y ? c->loss : NULL, c->in, c->y, c->B, bce_k(c->L));
}
static float *bce_bwd(const net_call *c) {
    bce_backward(c->din, c->out, c->y, c->B, bce_k(c->L));
    return c->din;
}
const net_layer_ops cpu_bce = {.forward = bce_fwd, .backward = bce_bwd};
