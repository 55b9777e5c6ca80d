// What the reference's walker (ref.c) hands each family's ops, and the ops of the families
// that live in ref_layers.c: the ones that shape or combine tensors (permute, zeropad, the
// merges, rescale, concat, normalize, layernorm, layerscale) and the depthwise convolution,
// each by its definition in double.
#ifndef HETRAIN_TESTS_REF_INT_H
#define HETRAIN_TESTS_REF_INT_H

#include "tests/lib/ref.h"

typedef struct ref_call {
    ref_net *r;
    const layer *L;
    int l, B;
    const float *params;
    float *grads;
    const float *in; // the layer's input
    float *out;      // forward: its output; backward: its forward's output
    const float *g;  // backward: the gradient of its output
    float *din;      // backward: its input's gradient
    const net_dropout *drop;
    const uint8_t *y;
    int group; // model_bn_group
    int n_in;  // a merge's inputs (ins[0] is in) and their gradients (dins[0] is din)
    const float *ins[MODEL_MAX_IN];
    float *dins[MODEL_MAX_IN];
} ref_call;

typedef struct ref_ops {
    void (*forward)(const ref_call *c);
    void (*backward)(const ref_call *c);
} ref_ops;

extern const ref_ops ref_permute, ref_zeropad, ref_merge, ref_rescale, ref_concat, ref_dwconv,
    ref_normalize, ref_layernorm, ref_layerscale;

#endif
