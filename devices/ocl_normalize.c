// The normalize family on an OpenCL device (ocl_layers.h): kernels/normalize.cl, one work-item
// an element, the mean and variance read from the parameters' state or given as the layer's
// constants.
#include "devices/ocl_layers.h"

#include <limits.h>

// Launches `kernel` (normalize_fwd or normalize_bwd) writing out from in over the layer's B
// samples; both kernels take the same arguments.
static int normalize_launch(const ocl_call *c, const char *kernel, cl_mem out, cl_mem in,
                            ht_error *e) {
    const layer *L = c->L;
    const double elems = (double)c->B * L->c * L->h * L->w;
    if (elems > INT_MAX || (!L->n_const && L->s_off > (size_t)UINT_MAX - 2 * (size_t)L->c))
        return ht_fail(e, "normalize %s on %s: %.0f elements or its state's offset exceed the "
                       "kernels' indices; use a smaller micro-batch", L->name, c->o->label, elems);
    cl_uint s_off = L->n_const ? 0 : (cl_uint)L->s_off;
    cl_int invert = L->invert, n = (cl_int)elems, C = L->c, P = L->h * L->w;
    cl_int consts = L->n_const > 0;
    cl_float4 cm = {{0}}, cv = {{0}}; // its constants, where it has them
    for (int k = 0; k < L->n_const; k++) cm.s[k] = L->c_mean[k], cv.s[k] = L->c_var[k];
    ocl_karg a[] = {OCL_KA(out),    OCL_KA(in), OCL_KA(c->params), OCL_KA(s_off),
                    OCL_KA(invert), OCL_KA(n),  OCL_KA(C),         OCL_KA(P),
                    OCL_KA(consts), OCL_KA(cm), OCL_KA(cv)};
    return n ? ocl_launch_1d(c->o, kernel, a, (int)(sizeof a / sizeof a[0]), (size_t)n, e) : 0;
}

static int normalize_fwd(const ocl_call *c, ht_error *e) {
    return normalize_launch(c, "normalize_fwd", c->out, c->in, e);
}

// Its state's place in the gradients stays zero: nothing for the moving-average update.
static int normalize_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    return c->din ? normalize_launch(c, "normalize_bwd", c->din, c->dout, e) : 0;
}

static const char *const normalize_kernels[] = {"normalize_fwd", "normalize_bwd", NULL};

const ocl_layer_ops cl_normalize = {.forward = normalize_fwd, .backward = normalize_bwd,
                                    .kernels = normalize_kernels};
