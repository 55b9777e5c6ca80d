// The merge family on an OpenCL device (ocl_layers.h): add as kernels/util.cl's add2, input by
// input in order; each input's gradient a copy of the output's.
#include "devices/ocl_layers.h"

static int merge_fwd(const ocl_call *c, ht_error *e) {
    const size_t n = layer_out_size(c->L) * (size_t)c->B;
    if (ocl_add(c->o, c->out, c->ins[0], c->ins[1], n, e) < 0) return -1;
    for (int k = 2; k < c->n_in; k++)
        if (ocl_add(c->o, c->out, c->out, c->ins[k], n, e) < 0) return -1;
    return 0;
}

static int merge_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    const size_t bytes = layer_out_size(c->L) * (size_t)c->B * sizeof(float);
    for (int k = 0; k < c->n_in; k++)
        if (c->dins[k] && ocl_copy(c->o, c->dout, 0, c->dins[k], 0, bytes, e) < 0) return -1;
    *din = c->dins[0];
    return 0;
}

static const char *const merge_kernels[] = {"add2", NULL};

const ocl_layer_ops cl_merge = {.forward = merge_fwd, .backward = merge_bwd,
                                .kernels = merge_kernels};
