// The CPU path's op table: one row per layer kind (layer_kinds.h), its family's ops, which
// net.c's walker calls with everything a call needs in one net_call, and what the walker and
// the schedule plan by (fusions, packed weights, scratch and statistics sizes). Each family's
// ops are beside its math (conv.c, pool.c, dense.c, activations.c, act.c) as cpu_<family>.
// Internal to src/nn.
#ifndef HETRAIN_NET_LAYERS_H
#define HETRAIN_NET_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "nn/layers.h"
#include "nn/model.h"
#include "nn/net.h"

// One call of a layer's op: batch-wise over B samples with nt threads, or in the trunk one
// sample (B = 1) on the calling thread (nt = 1).
typedef struct net_call {
    const layer *L;
    const net_lplan *p;
    int l, B, nt;
    gemm_prec prec;          // what the GEMMs compute in (model_gemm_prec)
    int act;                 // the act family's function (act_fn), -1 for another family
    int op;                  // the merge family's operation (merge_op), -1 for another family
    const float *params;
    float *grads;            // backward: parameter gradients, added to (dense: by beta)
    float beta;              // dense's weight gradient: 0 overwrites, 1 adds
    const float *in;         // the layer's input in the layout it needs
    int n_in;                // a merge's inputs (ins[0] is in), each in the same layout
    const float *ins[MODEL_MAX_IN];
    float *out;              // forward: its output; backward: its forward's output
    float *dout;             // backward: the gradient of its output (in-place ops write it)
    float *din;              // backward: where its input's gradient goes; NULL: not wanted
    float *dins[MODEL_MAX_IN]; // a merge's backward: each input's (dins[0] is din)
    float *scratch;          // conv: the batch workspace, or this thread's trunk scratch
    const float *pack;       // conv in the trunk: its packed weights
    const net_dropout *drop; // NULL: inference (dropout passes its input)
    const uint32_t *ids;     // dropout: the call's samples' ids
    const uint8_t *y;        // softmax: labels, or NULL
    float *loss;             // softmax: each sample's loss (when y is not NULL)
    float *bn_stats;         // batchnorm: its groups' statistics (forward writes, backward reads)
    double *bn_parts;        // fuse_bn, training: the samples' sums (conv writes, batchnorm
                             // reads); the batchnorm's backward writes its coefficients there
    const struct bn_fuse *bn; // a fuse_bn conv's backward: its batchnorm's, to make its dout
    int group;               // batchnorm in training: samples a group (model_bn_group)
    int folded;              // dropout's backward: the relu before it did it (drop_fold)
    float fold_rate;         // relu's backward with drop_fold: the dropout's rate
} net_call;

typedef struct net_layer_ops {
    void (*forward)(const net_call *c);
    // Returns where the input's gradient is (din, or dout for an op that works in place), or
    // NULL when none was made.
    float *(*backward)(const net_call *c);
    // The trunk's one-sample ops; NULL for a family that never runs in the trunk.
    void (*forward_one)(const net_call *c);
    float *(*backward_one)(const net_call *c);
    unsigned flags; // NET_OP_*
    // Spatial families: the channel stride of its channels-last output given its input's
    // (conv pads its channels to whole vectors); NULL: its input's.
    int (*out_cs)(const layer *L, int in_cs);
    // Scratch floats batch-wise with nthreads threads (NULL: none).
    size_t (*ws_floats)(const layer *L, const net_lplan *p, int nthreads);
    // In the trunk: floats of its packed weights and of each thread's scratch (NULL: none),
    // packing them from the parameters, zeroing a thread's scratch before a pass, and adding
    // the threads' scratch (nt slices, tslice floats apart) into the parameter gradients.
    size_t (*pack_floats)(const layer *L, const net_lplan *p);
    size_t (*scratch_floats)(const layer *L, const net_lplan *p);
    void (*pack)(float *pack, const float *params, const layer *L, const net_lplan *p);
    void (*scratch_init)(float *scratch, const layer *L, const net_lplan *p);
    void (*scratch_reduce)(float *grads, const float *scratch, size_t tslice, int nt,
                           const layer *L, const net_lplan *p);
    // Floats of per-micro-batch statistics a forward keeps for its backward (batchnorm's
    // groups) for max_batch samples in groups of `group` (NULL: none).
    size_t (*stat_floats)(const layer *L, int group, int max_batch);
} net_layer_ops;

// What the walker and the schedule plan by (net_layer_ops.flags).
enum {
    NET_OP_FUSES_RELU = 1 << 0, // applies a relu that follows it, forward and backward
                                // (net_lplan.fuse_relu)
    NET_OP_RELU = 1 << 1,       // a relu: done by the node before (skip), or doing the backward
                                // of a dropout after it (drop_fold)
    NET_OP_DROP_FOLD = 1 << 2,  // a dropout whose backward the relu before it can do (folded)
    NET_OP_GRAD_ADDS = 1 << 3,  // its backward adds to its parameters' gradients whatever beta
                                // says: a pass that overwrites zeroes them first
    NET_OP_FACTORS = 1 << 4,    // its weight gradient is dout^T * in (net_ws.factor)
    NET_OP_CONV_ALGO = 1 << 5,  // computes by conv_algo.h's choice for its net_conv_geom
                                // (net_lplan.algo)
    NET_OP_FEEDS_BN = 1 << 6,   // batch-wise, makes a batchnorm's statistics and input
                                // gradient in its passes (net_lplan.fuse_bn)
    NET_OP_BN = 1 << 7,         // a batchnorm that can leave those to the node before
};

#define NET_OPS_DECL(id, fam, name, prefix, keras, key, dflt) extern const net_layer_ops cpu_##fam;
LAYER_KINDS(NET_OPS_DECL)
#undef NET_OPS_DECL

extern const net_layer_ops *const net_layer_ops_of[LAYER_KIND_COUNT];

// Floats per sample of layer L's output as planned (channels-last with its channel stride, or
// flat).
static inline size_t net_out_floats(const layer *L, const net_lplan *p) {
    return p->out_nhwc ? (size_t)L->oh * L->ow * p->out_cs : layer_out_size(L);
}

// A convolution's geometry as net.c plans it (its input's channel stride, its algorithms).
static inline conv_geom net_conv_geom(const layer *L, const net_lplan *p) {
    return (conv_geom){.C = L->c, .Cs = p->in_cs, .H = L->h, .W = L->w, .OC = L->oc,
                       .K = L->k, .stride = L->stride, .pad = L->pad, .OH = L->oh, .OW = L->ow,
                       .fwd = p->algo.fwd, .din = p->algo.din, .dw = p->algo.dw};
}

// A layer's bias in a parameter (or gradient) buffer, NULL for a layer without one.
static inline float *net_bias(const float *buf, const layer *L) {
    return L->n_b ? (float *)buf + L->b_off : NULL;
}

#endif
