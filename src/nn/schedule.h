// A network's schedule, computed once per model and walked by every backend (the CPU path, the
// OpenCL device, the test reference): its nodes in forward order, each node's inputs, the
// activation buffer it writes and who uses that buffer, whether its backward writes or adds each
// input's gradient, and the fusions the CPU path may apply.
#ifndef HETRAIN_SCHEDULE_H
#define HETRAIN_SCHEDULE_H

#include "core/common.h"
#include "nn/model.h"

// Most inputs of one node (the merge families to come take several).
#define SCHED_MAX_IN 4
// The node "before the first": the model's input, buffer 0 of every schedule.
#define SCHED_INPUT (-1)

// What the builder needs to know of a node's family (schedule_build fills them from the layer
// descriptions and the CPU op table).
enum {
    SCHED_IN_PLACE = 1 << 0,   // may write its output over its input's buffer (relu, dropout)
    SCHED_FUSES_RELU = 1 << 1, // can apply a relu that follows it itself (conv, batchnorm)
    SCHED_RELU = 1 << 2,       // a relu: fused into the node before, or folding a dropout after
    SCHED_DROP_FOLD = 1 << 3,  // a dropout whose backward a relu right before it can do
    SCHED_TRAINS = 1 << 4,     // its backward makes something: trainable parameters, statistics
    SCHED_OUT_FREE = 1 << 5,   // its backward never reads its own output (LF_OUT_FREE)
    SCHED_FEEDS_BN = 1 << 6,   // can make the statistics and input gradient of a batchnorm
                               // that is its only reader in its own passes (conv)
    SCHED_BN = 1 << 7,         // a batchnorm that trains (its statistics are its groups')
};

typedef struct sched_spec {
    int n_in;
    int in[SCHED_MAX_IN]; // earlier nodes, or SCHED_INPUT
    unsigned flags;       // SCHED_*
    // A merge: bit k when input k's gradient is the output's, unchanged (an add's full inputs,
    // a subtract's first), so its output may go over that input and the gradient stay there.
    unsigned in_place_in;
} sched_spec;

typedef struct sched_node {
    int layer; // index into model.layers (a layer called twice would be two nodes)
    int n_in;
    int in[SCHED_MAX_IN];  // input nodes, SCHED_INPUT for the model's input
    int in_buf[SCHED_MAX_IN]; // their activation buffers
    // Backward, per input: 1 when this node adds its share to the input's gradient, 0 when it
    // writes it (llm.c's rule: the input's first consumer in reverse order writes, the others
    // add; a node that reads one input twice writes at the first and adds at the second);
    // need_grad 0 when nothing upstream of the input wants a gradient.
    unsigned char grad_add[SCHED_MAX_IN];
    unsigned char need_grad[SCHED_MAX_IN];
    int buf;      // the buffer its output goes to: an in-place node's is its input's
    int over;     // the input whose buffer it writes over (in place), else -1
    int backward; // 1 when its backward runs: it, or a node upstream of it, trains
    int n_out;    // nodes that read its output
    int fused_with; // the node its fusion below joins it with (its relu, its dropout), else -1
    // Fusions the CPU path applies (the others walk the nodes as they are):
    int fuse_relu; // applies the relu that is its only reader, forward and backward
    int fused;     // that relu: its node before did it
    int drop_fold; // a relu whose only reader is a dropout: its backward applies the dropout's
                   // scale, and the dropout's backward does nothing
    int folded;    // that dropout
    int fuse_bn;   // a conv whose only reader is a training batchnorm (fused_with): the conv's
                   // passes make its statistics and its input gradient; that batchnorm's
                   // output gradient keeps its slot until the conv's backward has read it
    int bn_fused;  // that batchnorm
} sched_node;

// An activation buffer: buffer 0 is the model's input (owner SCHED_INPUT). Its lifetime in the
// forward pass runs from its first writer to its last reader (in training every reader's
// backward reads it again, so it lives until then). Its gradient lives in the backward pass
// from its last reader's backward (which writes it) to its owner's (the last to read it), in
// gradient slot gslot; buffers whose lifetimes do not meet share a slot. A buffer nobody reads
// (the model's output) has a slot over its owner's backward alone.
typedef struct sched_buf {
    int owner;       // the node that writes it first
    int first, last; // the first node that writes it, the last that reads it
    int gslot;
} sched_buf;

typedef struct schedule {
    int n_nodes, n_bufs, n_gslots;
    int reach;       // the lowest node whose backward runs (n_nodes: none)
    int max_add;     // the most inputs whose gradient one node adds (grad_add; 0 in a chain)
    sched_node *node;
    sched_buf *buf;
} schedule;

// The schedule of m's layers, a node each, its inputs the layer's (layer.in). -1 with e when
// out of memory.
int schedule_build(schedule *s, const model *m, ht_error *e);
// The schedule of n nodes as spec describes them (node i's inputs must be earlier nodes): the
// builder under schedule_build, and what tests hand graphs that models cannot be yet. layer of
// node i is i. -1 with e naming the node when an input is not an earlier node.
int schedule_build_nodes(schedule *s, const sched_spec *spec, int n, ht_error *e);
void schedule_free(schedule *s);

#endif
