// The zeropad family on an OpenCL device (ocl_layers.h): kernels/zeropad.cl, one work-item
// per element of the larger side, NCHW.
#include "devices/ocl_layers.h"

static int zeropad_launch(const ocl_call *c, const char *kernel, cl_mem to, cl_mem from,
                          size_t n, ht_error *e) {
    const layer *L = c->L;
    cl_int B = c->B, C = L->c, H = L->h, W = L->w, OH = L->oh, OW = L->ow;
    cl_int top = L->pad_top, left = L->pad_left;
    ocl_karg a[] = {OCL_KA(to), OCL_KA(from), OCL_KA(B),  OCL_KA(C),   OCL_KA(H),
                    OCL_KA(W),  OCL_KA(OH),   OCL_KA(OW), OCL_KA(top), OCL_KA(left)};
    return c->B ? ocl_launch_1d(c->o, kernel, a, (int)(sizeof a / sizeof a[0]), n, e) : 0;
}
static int zeropad_fwd(const ocl_call *c, ht_error *e) {
    return zeropad_launch(c, "zeropad_fwd", c->out, c->in,
                          layer_out_size(c->L) * (size_t)c->B, e);
}
static int zeropad_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    return c->din ? zeropad_launch(c, "zeropad_bwd", c->din, c->dout,
                                   layer_in_size(c->L) * (size_t)c->B, e)
                  : 0;
}

static const char *const zeropad_kernels[] = {"zeropad_fwd", "zeropad_bwd", NULL};

const ocl_layer_ops cl_zeropad = {.forward = zeropad_fwd, .backward = zeropad_bwd,
                                  .kernels = zeropad_kernels};
