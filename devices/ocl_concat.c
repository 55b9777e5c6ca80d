// The concat family on an OpenCL device (ocl_layers.h): kernels/concat.cl's concat_copy, input
// by input, into its channels of the output, and backward out of them.
#include "devices/ocl_layers.h"

static int copy_input(const ocl_call *c, cl_mem out, cl_mem in, int k, int off, int backward,
                      ht_error *e) {
    const layer *L = c->L;
    cl_int B = c->B, C = L->oc, Ck = L->in_ch[k], o = off, HW = L->h * L->w, bw = backward;
    ocl_karg a[] = {OCL_KA(out), OCL_KA(in), OCL_KA(B),  OCL_KA(C),
                    OCL_KA(Ck),  OCL_KA(o),  OCL_KA(HW), OCL_KA(bw)};
    return ocl_launch_1d(c->o, "concat_copy", a, (int)(sizeof a / sizeof a[0]),
                         (size_t)c->B * Ck * HW, e);
}

static int concat_fwd(const ocl_call *c, ht_error *e) {
    if (!c->B) return 0;
    for (int k = 0, off = 0; k < c->n_in; off += c->L->in_ch[k++])
        if (copy_input(c, c->out, c->ins[k], k, off, 0, e) < 0) return -1;
    return 0;
}

static int concat_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->dins[0];
    if (!c->B) return 0;
    for (int k = 0, off = 0; k < c->n_in; off += c->L->in_ch[k++])
        if (c->dins[k] && copy_input(c, c->dout, c->dins[k], k, off, 1, e) < 0) return -1;
    return 0;
}

static const char *const concat_kernels[] = {"concat_copy", NULL};

const ocl_layer_ops cl_concat = {.forward = concat_fwd, .backward = concat_bwd,
                                 .kernels = concat_kernels};
