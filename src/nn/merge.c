// The merge family: layers of several inputs of one shape combined element by element (Keras's
// Add). Its inputs reach it in one layout (the CPU path's channels-last with the inputs' channel
// stride, whose pad channels are zero in each, or NCHW), which its output keeps.
#include "nn/layers.h"

#include <string.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

void merge_add_forward(float *out, const float *const *ins, int n_in, size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) {
        float v = ins[0][i];
        for (int k = 1; k < n_in; k++) v += ins[k][i];
        out[i] = v;
    }
}

static int merge_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                       int idx, ht_error *err) {
    (void)s, (void)d, (void)n_classes, (void)idx, (void)err;
    L->oc = L->c, L->oh = L->h, L->ow = L->w; // model_add checked the inputs' shapes
    return 0;
}

static double merge_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key merge_keys[] = {LK_END}; // its inputs: `from`, as every layer's

const layer_family family_merge = {.name = "merge", .flags = LF_MERGE, .keys = merge_keys,
                                   .shape = merge_shape, .macs = merge_macs};

static void merge_fwd(const net_call *c) {
    merge_add_forward(c->out, c->ins, c->n_in, net_out_floats(c->L, c->p) * (size_t)c->B, c->nt);
}

// Each input's gradient is the output's.
static float *merge_bwd(const net_call *c) {
    const size_t n = net_out_floats(c->L, c->p) * (size_t)c->B;
    for (int k = 0; k < c->n_in; k++)
        if (c->dins[k]) memcpy(c->dins[k], c->dout, sizeof(float) * n);
    return c->dins[0];
}

// Batch-wise only: the per-sample trunk ends before a merge.
const net_layer_ops cpu_merge = {.forward = merge_fwd, .backward = merge_bwd};
