// A whole network's forward and backward pass on the CPU, over a workspace allocated once for
// the largest micro-batch. Used by the native CPU device and as the reference for other devices.
#ifndef HETRAIN_NET_H
#define HETRAIN_NET_H

#include <stdint.h>

#include "common.h"
#include "model.h"

typedef struct net_ws {
    int max_batch;
    int nthreads;
    int n_layers;
    float **act;      // act[l]: output of layer l, (max_batch, out_size); relu/dropout alias act[l-1]
    int32_t **argmax; // argmax[l] for maxpool layers, else NULL
    float *loss;      // (max_batch) per-sample loss of the last forward with labels
    float *g0, *g1;   // activation-gradient ping-pong buffers
    float *conv_ws;   // im2col scratch for the largest conv layer
    float *owned;     // one allocation backing all of the above floats
    int32_t *owned_i; // one allocation backing argmax
} net_ws;

// Dropout context: masks are keyed by (seed, epoch, ids[i], layer, element).
typedef struct net_dropout {
    uint64_t seed;
    uint32_t epoch;
    const uint32_t *ids; // (B) global sample ids
} net_dropout;

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

// Index of the largest of n values (first on ties).
int net_argmax(const float *v, int n);

#endif
