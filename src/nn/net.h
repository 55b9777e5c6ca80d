// A whole network's forward and backward pass on the CPU, over a workspace allocated once for
// the largest micro-batch. Used by the native CPU device and as the reference for other devices.
// Inputs, outputs and gradients are in the model's layouts (NCHW input, PyTorch weights);
// inside, spatial activations are channels-last (layers.h's NHWC fast path).
#ifndef HETRAIN_NET_H
#define HETRAIN_NET_H

#include <stdint.h>

#include "core/common.h"
#include "nn/conv_algo.h"
#include "nn/model.h"
#include "nn/schedule.h"

// How node n's input and output are laid out (see net.c): spatial tensors are kept
// channels-last, dense ones flat. (Nodes are the schedule's; in a chain node n is layer n.)
typedef struct net_lplan {
    int out_nhwc, out_cs; // act[n] is (B,OH,OW,out_cs) when out_nhwc, else (B,OC,OH,OW)
    int cvt;              // input converted into cvt[n] first: 0 no, 1 to NHWC, 2 to NCHW
    int cvt_cs;           // the NHWC side's channel stride of that conversion
    int in_cs;            // channel stride of the (converted) input, NHWC consumers
    int ins_cs[MODEL_MAX_IN]; // a merge's: each input's channel stride (ins_cs[0] is in_cs)
    int fuse_relu;        // applies the relu after it itself (the schedule's fuse_relu)
    int skip;             // relu applied by the node before it (the schedule's fused)
    int drop_fold;        // relu (batch-wise) right before a dropout: backward applies the
                          // dropout's scale itself, and the dropout's backward does nothing
    size_t pack_off;      // in the trunk: its packed weights in ws->pack (pack_floats)
    size_t scr_off;       // in the trunk: its scratch in each thread's slice of ws->tscr
    conv_choice algo;     // conv: the algorithm of each direction (m->setup.conv_algo)
    int fuse_bn;          // conv after the trunk: makes its batchnorm's statistics and input
                          // gradient (the schedule's fuse_bn); bn_fused: that batchnorm
    int bn_fused;
} net_lplan;

typedef struct net_ws {
    int max_batch;
    int nthreads;
    int n_layers;
    schedule sched;   // the nodes walked, their buffers and gradient slots
    net_lplan *plan;  // (n_nodes)
    float **act;      // act[n]: node n's output buffer (an in-place node's is its input's)
    float **cvt;      // cvt[n]: node n's input in the layout it needs, where converted
    float *loss;      // (max_batch) per-sample loss of the last forward with labels
    float **gslot;    // the schedule's gradient slots (batch-wise); a layout change swaps two
    // Where an input's gradient is made before it is added to its slot (a buffer read by several
    // nodes: every reader but the first in reverse order adds; sched_node.grad_add), one per
    // input of the node that adds the most; none for a chain.
    float *gadd[SCHED_MAX_IN];
    float *conv_ws;   // the largest batch-wise scratch after the trunk (ws_floats)
    float **bn_stats; // bn_stats[n]: node n's statistics (stat_floats), else NULL
    double **bn_parts; // bn_parts[n]: a bn_fused node's samples' sums (net_call.bn_parts)
    int bn_group;     // model_bn_group: samples of a group of batchnorm statistics (0: none)
    // The trunk: nodes [0, trunk) are spatial and run one sample at a time per thread, so a
    // sample's activations and gradients stay in that core's cache from layer to layer.
    int trunk;
    float *pack;      // packed weights of the trunk's conv layers
    // pack_kept: the caller promises the parameters stay as they are until it clears `packed`
    // (the CPU device: within a shard, over its micro-batches' passes), so that they are packed
    // (Winograd-transformed) once, by the first pass that needs them; without it every pass
    // packs them. packed: they are packed.
    int pack_kept, packed;
    float *tscr;      // per-thread slices: the layers' scratch, then a per-sample gradient
                      // buffer for each gradient slot
    size_t tslice, tgrad_off, tgrad_n;
    float *owned;     // one allocation backing all of the above floats
    // Per-layer timing, off while prof is NULL (a pointer test a layer). A caller that points
    // prof at 2 * n_layers doubles gets layer l's wall seconds added to prof[2 * l] by
    // net_forward and to prof[2 * l + 1] by net_backward. The trunk's layers run interleaved,
    // a sample at a time on every thread, so they share the trunk's wall time in proportion
    // to the thread time each took (tprof: each thread's, nthreads * n_layers).
    double *prof;
    double *tprof;
    // NULL, or called by net_backward(_to) as layers finish: the gradient from element `from` to
    // n_trainable is final (net_grad_ready_from) and may be read while earlier layers go on.
    void (*ready)(void *arg, size_t from);
    void *ready_arg;
    // NULL, or called by net_backward(_to) after each dense layer with a weight gradient: its
    // input in (B, IN) and output gradient dout (B, OUT), of which the layer's weight gradient
    // is dout^T * in (dense_weight_grad), before `ready` reports the layer.
    void (*factor)(void *arg, int l, const float *in, const float *dout, int B);
    void *factor_arg;
} net_ws;

// Dropout context: masks are keyed by (seed, epoch, ids[i], layer, element).
typedef struct net_dropout {
    uint64_t seed;
    uint32_t epoch;
    const uint32_t *ids; // (B) global sample ids
} net_dropout;

// Also chooses each convolution's algorithms for m->setup.conv_algo (conv_algo.h; under
// CONV_ALGO_AUTO the first workspace of a process for a shape times it).
int net_ws_init(net_ws *ws, const model *m, int max_batch, int nthreads, ht_error *e);
void net_ws_free(net_ws *ws);

// Bytes net_ws_init would allocate: lets a device size its micro-batch from a memory budget.
size_t net_ws_bytes(const model *m, int max_batch, int nthreads);

// Forward over B <= max_batch samples x (B, in). drop == NULL means inference (dropout off).
// Returns the class probabilities (B, n_classes), valid until the next call; when y is not
// NULL ws->loss holds each sample's cross-entropy.
const float *net_forward(net_ws *ws, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop);

// Backward after net_forward with the same arguments: *adds* the sum over the B samples of
// the per-sample gradients to grads (n_params).
void net_backward(net_ws *ws, const model *m, const float *params, float *grads, const float *x,
                  const uint8_t *y, int B, const net_dropout *drop);
// What the backward pass does with the gradient buffer: adds the sums to it (net_backward), or
// writes them into it, which then need not be zeroed first (a shard's first micro-batch).
typedef enum net_grad_mode { NET_GRAD_ADD, NET_GRAD_WRITE } net_grad_mode;
// net_backward, adding to grads or writing them as mode says.
void net_backward_to(net_ws *ws, const model *m, const float *params, float *grads,
                     const float *x, const uint8_t *y, int B, const net_dropout *drop,
                     net_grad_mode mode);

// Where the gradient is final once layers [l, n_layers) have been through the backward pass:
// the lowest offset of their trainable parameters, when every earlier layer's lie below it;
// n_trainable otherwise (no suffix of the buffer is theirs alone) or when they have none.
size_t net_grad_ready_from(const model *m, int l);

// Makes conv_algo.h's decisions for every convolution of m as net_ws_init would, with nthreads
// threads timing (under CONV_ALGO_AUTO; nothing to do otherwise), without a workspace: so
// that a job can decide once and hand its decisions (conv_choices_text) to other processes.
void net_conv_decide(const model *m, int nthreads);

// The same decisions, each convolution's into out[l] (n_layers entries; the other layers' are
// zero: direct): what a device that is not a CPU device computes, so that every device of a job
// computes its convolutions alike. -1 when out of memory.
int net_conv_choices(const model *m, int nthreads, conv_choice *out);
// Whether layer L computes by a conv_choice (its family's NET_OP_CONV_ALGO): the layers whose
// entries of net_conv_choices' out say anything; the others' are zero.
int net_layer_conv_algo(const layer *L);
// Whether layer L's weight gradient is dout^T * in over the batch (its family's
// NET_OP_FACTORS): the factors net_backward_to hands out (net_ws.factor) for it.
int net_layer_factors(const layer *L);

// The convolutions' algorithms on one line for the run log ("conv algorithms (auto; ...):
// conv1 direct (...); conv2 winograd F(4x4,5x5) (...)"); "" for a model without any.
void net_conv_describe(const net_ws *ws, const model *m, char *buf, size_t len);
// The same of net_conv_choices' decisions.
void net_conv_describe_choices(const model *m, const conv_choice *algo, char *buf, size_t len);

// Index of the largest of n values (first on ties).
int net_argmax(const float *v, int n);

// What the model predicts from one sample's output (m->n_classes probabilities): the class
// (the argmax), or for a multi-label head the labels whose probability is over 0.5 (Keras's
// threshold), label j as bit j.
int32_t net_predict(const model *m, const float *probs);
// How many of one sample's labels y (m->label_width bytes) the prediction got right: 1 or 0 for
// a class, 0..k for a multi-label head. Accuracy is their sum over m->label_width times the
// samples (for a multi-label head Keras's binary accuracy, the share of all labels).
int net_labels_right(const model *m, int32_t pred, const uint8_t *y);
// One sample's loss from its output probabilities and labels (the evaluation's, which has no
// logits): -log p[y] for a class, the mean of the labels' binary cross-entropies for a
// multi-label head; only a probability of exactly 0 or 1 is clamped (at 1e-30 from it).
double net_prob_loss(const model *m, const float *probs, const uint8_t *y);

#endif
