// The CPU path's op table (net_layers.h): each family's forward and backward, batch-wise and,
// for the families of the trunk, one sample at a time, over layers.h's math.
#include "net_layers.h"

#include <string.h>

#include "layer_desc.h"
#include "layers.h"
#include "rng.h"

size_t net_out_floats(const layer *L, const net_lplan *p) {
    return p->out_nhwc ? (size_t)L->oh * L->ow * p->out_cs : layer_out_size(L);
}

conv_geom net_conv_geom(const layer *L, const net_lplan *p) {
    return (conv_geom){.C = L->c, .Cs = p->in_cs, .H = L->h, .W = L->w, .OC = L->oc,
                       .K = L->k, .stride = L->stride, .pad = L->pad, .OH = L->oh, .OW = L->ow,
                       .fwd = p->algo.fwd, .din = p->algo.din, .dw = p->algo.dw};
}

static pool_geom pool_of(const layer *L, const net_lplan *p) {
    return (pool_geom){.Cs = p->in_cs, .H = L->h, .W = L->w, .K = L->k, .stride = L->stride,
                       .pad = L->pad, .OH = L->oh, .OW = L->ow};
}

// A layer's bias in a parameter (or gradient) buffer, NULL for a layer without one.
static float *bias_in(float *buf, const layer *L) { return L->n_b ? buf + L->b_off : NULL; }
static const float *bias_of(const float *buf, const layer *L) {
    return L->n_b ? buf + L->b_off : NULL;
}

// ---- conv ----

static void conv_forward(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_forward(c->out, c->in, c->params + c->L->w_off, bias_of(c->params, c->L), c->B,
                        &g, c->p->fuse_relu, c->scratch, c->nt);
}
static float *conv_backward(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_backward(c->din, c->grads + c->L->w_off, bias_in(c->grads, c->L), c->dout,
                         c->p->fuse_relu ? c->out : NULL, c->in, c->params + c->L->w_off, c->B,
                         &g, c->scratch, c->nt);
    return c->din;
}
static void conv_forward_one(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_forward_one(c->out, c->in, c->pack, &g, c->p->fuse_relu, c->scratch);
}
static float *conv_backward_one(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_backward_one(c->din, c->dout, c->p->fuse_relu ? c->out : NULL, c->in, c->pack,
                             &g, c->scratch);
    return c->din;
}

// ---- pool: max and average ----

static void pool_forward(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_forward(c->out, c->in, c->B, &g, c->nt);
    else avgpool_nhwc_forward(c->out, c->in, c->B, &g, c->nt);
}
static float *pool_backward(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (!c->din) return NULL;
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_backward(c->din, c->dout, c->in, c->B, &g, c->nt);
    else avgpool_nhwc_backward(c->din, c->dout, c->B, &g, c->nt);
    return c->din;
}
static void pool_forward_one(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_forward_one(c->out, c->in, &g);
    else avgpool_nhwc_forward_one(c->out, c->in, &g);
}
static float *pool_backward_one(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (!c->din) return NULL;
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_backward_one(c->din, c->dout, c->in, &g);
    else avgpool_nhwc_backward_one(c->din, c->dout, &g);
    return c->din;
}

// ---- gap: global average pooling, (B,HW,Cs) <-> (B,1,1,Cs) ----

static void gap_forward(const net_call *c) {
    const int Cs = c->p->in_cs, HW = c->L->h * c->L->w;
#pragma omp parallel for num_threads(c->nt) schedule(static)
    for (int s = 0; s < c->B; s++)
        gavgpool_nhwc_forward_one(c->out + (size_t)s * Cs, c->in + (size_t)s * HW * Cs, Cs, HW);
}
static float *gap_backward(const net_call *c) {
    const int Cs = c->p->in_cs, HW = c->L->h * c->L->w;
    if (!c->din) return NULL;
#pragma omp parallel for num_threads(c->nt) schedule(static)
    for (int s = 0; s < c->B; s++)
        gavgpool_nhwc_backward_one(c->din + (size_t)s * HW * Cs, c->dout + (size_t)s * Cs, Cs, HW);
    return c->din;
}

static void gap_forward_one(const net_call *c) {
    gavgpool_nhwc_forward_one(c->out, c->in, c->p->in_cs, c->L->h * c->L->w);
}
static float *gap_backward_one(const net_call *c) {
    if (!c->din) return NULL;
    gavgpool_nhwc_backward_one(c->din, c->dout, c->p->in_cs, c->L->h * c->L->w);
    return c->din;
}

// ---- dense ----

static void dense_fwd(const net_call *c) {
    dense_forward(c->out, c->in, c->params + c->L->w_off, bias_of(c->params, c->L), c->B,
                  (int)layer_in_size(c->L), c->L->oc, c->nt);
}
static float *dense_bwd(const net_call *c) {
    dense_backward_beta(c->din, c->grads + c->L->w_off, bias_in(c->grads, c->L), c->dout, c->in,
                        c->params + c->L->w_off, c->B, (int)layer_in_size(c->L), c->L->oc,
                        c->beta, c->nt);
    return c->din;
}

// ---- relu: in place; a relu right after a conv is the conv's (p->skip) ----

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

// ---- dropout: in place; masks keyed by (seed, epoch, sample id, layer, element) ----

static void dropout_apply(const net_call *c, float *out, const float *in) {
    const layer *L = c->L;
    uint64_t key = ht_rng_key(c->drop->seed, c->drop->epoch, (uint32_t)c->l);
    if (c->p->out_nhwc)
        dropout_nhwc_apply(out, in, c->B, L->oc, c->p->out_cs, L->oh * L->ow, L->rate, key, c->ids,
                           c->nt);
    else
        dropout_forward(out, in, c->B, layer_out_size(L), L->rate, key, c->ids, c->nt);
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

// ---- softmax + cross-entropy: the loss head ----

static void softmax_fwd(const net_call *c) {
    softmax_xent_forward(c->out, c->y ? c->loss : NULL, c->in, c->y, c->B, c->L->oc);
}
// Writes the gradient of the logits even for a first layer (into din's buffer, c->out's
// neighbour the walker hands as din or its spare).
static float *softmax_bwd(const net_call *c) {
    softmax_xent_backward(c->din, c->out, c->y, c->B, c->L->oc);
    return c->din;
}

// ---- act: the elementwise activations; pad channels of channels-last tensors stay zero ----

static void act_fwd(const net_call *c) {
    const layer *L = c->L;
    act_fn f = (act_fn)layer_act_fn(L->kind);
    if (c->p->out_nhwc && c->p->out_cs != L->oc)
        act_nhwc_forward(f, L->alpha, c->out, c->in, (size_t)c->B * L->oh * L->ow, L->oc,
                         c->p->out_cs, c->nt);
    else
        act_forward(f, L->alpha, c->out, c->in, net_out_floats(L, c->p) * (size_t)c->B, c->nt);
}
static float *act_bwd(const net_call *c) {
    const layer *L = c->L;
    act_fn f = (act_fn)layer_act_fn(L->kind);
    if (!c->din) return NULL;
    if (c->p->out_nhwc && c->p->out_cs != L->oc)
        act_nhwc_backward(f, L->alpha, c->din, c->dout, c->in, (size_t)c->B * L->oh * L->ow,
                          L->oc, c->p->out_cs, c->nt);
    else
        act_backward(f, L->alpha, c->din, c->dout, c->in, net_out_floats(L, c->p) * (size_t)c->B,
                     c->nt);
    return c->din;
}

// The families' rows: relu, dropout and act run their batch-wise ops with B = 1 and nt = 1 in
// the trunk (below their parallel threshold, a plain loop).
static const net_layer_ops cpu_conv = {conv_forward, conv_backward, conv_forward_one,
                                       conv_backward_one};
static const net_layer_ops cpu_pool = {pool_forward, pool_backward, pool_forward_one,
                                       pool_backward_one};
static const net_layer_ops cpu_gap = {gap_forward, gap_backward, gap_forward_one,
                                      gap_backward_one};
static const net_layer_ops cpu_dense = {dense_fwd, dense_bwd, NULL, NULL};
static const net_layer_ops cpu_relu = {relu_fwd, relu_bwd, relu_fwd, relu_bwd};
static const net_layer_ops cpu_dropout = {dropout_fwd, dropout_bwd, dropout_fwd, dropout_bwd};
static const net_layer_ops cpu_softmax = {softmax_fwd, softmax_bwd, NULL, NULL};
static const net_layer_ops cpu_act = {act_fwd, act_bwd, act_fwd, act_bwd};

const net_layer_ops net_layer_ops_of[LAYER_KIND_COUNT] = {
#define CPU_OPS_ROW(id, fam, name, prefix, keras, key, dflt) [LAYER_##id] = cpu_##fam,
    LAYER_KINDS(CPU_OPS_ROW)
#undef CPU_OPS_ROW
};
