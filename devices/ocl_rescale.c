// The rescale family on an OpenCL device (ocl_layers.h): kernels/rescale.cl, one work-item an
// element.
#include "devices/ocl_layers.h"

static int rescale_fwd(const ocl_call *c, ht_error *e) {
    const size_t n = layer_out_size(c->L) * (size_t)c->B;
    cl_uint un = (cl_uint)n;
    cl_float s = c->L->scale, o = c->L->offset;
    ocl_karg a[] = {OCL_KA(c->out), OCL_KA(c->in), OCL_KA(un), OCL_KA(s), OCL_KA(o)};
    return n ? ocl_launch_1d(c->o, "rescale_fwd", a, (int)(sizeof a / sizeof a[0]), n, e) : 0;
}

static int rescale_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    const size_t n = layer_in_size(c->L) * (size_t)c->B;
    if (!c->din || !n) return 0;
    cl_uint un = (cl_uint)n;
    cl_float s = c->L->scale;
    ocl_karg a[] = {OCL_KA(c->din), OCL_KA(c->dout), OCL_KA(un), OCL_KA(s)};
    return ocl_launch_1d(c->o, "rescale_bwd", a, (int)(sizeof a / sizeof a[0]), n, e);
}

static const char *const rescale_kernels[] = {"rescale_fwd", "rescale_bwd", NULL};

const ocl_layer_ops cl_rescale = {.forward = rescale_fwd, .backward = rescale_bwd,
                                  .kernels = rescale_kernels};
