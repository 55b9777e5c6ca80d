// The merge family on an OpenCL device (ocl_layers.h): kernels/merge.cl's merge_fwd over all
// inputs at once, and merge_bwd for each input whose gradient is wanted (a broadcast input's
// summed over the positions).
#include "devices/ocl_layers.h"

#include "nn/layer_desc.h"

// What the kernels take of a call: four input buffers (the unused repeat the first), the
// broadcast inputs as bits, the operation and the output's sizes.
typedef struct merge_args {
    cl_mem x[4];
    cl_int bcast, n_in, op, B, C, HW;
} merge_args;

static merge_args args_of(const ocl_call *c) {
    const layer *L = c->L;
    merge_args m = {.n_in = c->n_in, .op = layer_merge_op(L->kind), .B = c->B, .C = L->oc,
                    .HW = L->oh * L->ow};
    for (int k = 0; k < 4; k++) m.x[k] = k < c->n_in ? c->ins[k] : c->ins[0];
    for (int k = 1; k < c->n_in; k++)
        if (L->in_hw[k] == 1) m.bcast |= 1 << k;
    return m;
}

static int merge_fwd(const ocl_call *c, ht_error *e) {
    if (!c->B) return 0;
    merge_args m = args_of(c);
    ocl_karg a[] = {OCL_KA(c->out), OCL_KA(m.x[0]), OCL_KA(m.x[1]), OCL_KA(m.x[2]),
                    OCL_KA(m.x[3]), OCL_KA(m.n_in), OCL_KA(m.op),   OCL_KA(m.bcast),
                    OCL_KA(m.B),    OCL_KA(m.C),    OCL_KA(m.HW)};
    return ocl_launch_1d(c->o, "merge_fwd", a, (int)(sizeof a / sizeof a[0]),
                         (size_t)m.B * m.C * m.HW, e);
}

static int merge_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->dins[0];
    if (!c->B) return 0;
    merge_args m = args_of(c);
    for (cl_int k = 0; k < m.n_in; k++) {
        if (!c->dins[k]) continue;
        ocl_karg a[] = {OCL_KA(c->dins[k]), OCL_KA(c->dout), OCL_KA(m.x[0]), OCL_KA(m.x[1]),
                        OCL_KA(m.x[2]),     OCL_KA(m.x[3]),  OCL_KA(m.n_in), OCL_KA(m.op),
                        OCL_KA(m.bcast),    OCL_KA(k),       OCL_KA(m.B),    OCL_KA(m.C),
                        OCL_KA(m.HW)};
        const size_t n = (size_t)m.B * m.C * ((m.bcast >> k) & 1 ? 1 : (size_t)m.HW);
        if (ocl_launch_1d(c->o, "merge_bwd", a, (int)(sizeof a / sizeof a[0]), n, e) < 0)
            return -1;
    }
    return 0;
}

static const char *const merge_kernels[] = {"merge_fwd", "merge_bwd", NULL};

const ocl_layer_ops cl_merge = {.forward = merge_fwd, .backward = merge_bwd,
                                .kernels = merge_kernels};
