// The normalize family on an OpenCL device (ocl_layers.h): kernels/normalize.cl, one work-item
// an element, the mean and variance read from the parameters' state.
#include "devices/ocl_layers.h"

#include <limits.h>

// The kernels' arguments but the first two (their output and input), or -1 past their indices.
static int normalize_args(const ocl_call *c, ocl_karg *a, cl_uint *s_off, cl_int *invert,
                          cl_int *n, cl_int *C, cl_int *P, ht_error *e) {
    const layer *L = c->L;
    const double elems = (double)c->B * L->c * L->h * L->w;
    if (elems > INT_MAX || L->s_off > (size_t)UINT_MAX - 2 * (size_t)L->c)
        return ht_fail(e, "normalize %s on %s: %.0f elements or its state's offset exceed the "
                       "kernels' indices; use a smaller micro-batch", L->name, c->o->label, elems);
    *s_off = (cl_uint)L->s_off, *invert = L->invert, *n = (cl_int)elems;
    *C = L->c, *P = L->h * L->w;
    a[2] = OCL_KA(c->params), a[3] = OCL_KA(*s_off), a[4] = OCL_KA(*invert), a[5] = OCL_KA(*n);
    a[6] = OCL_KA(*C), a[7] = OCL_KA(*P);
    return 0;
}

static int normalize_fwd(const ocl_call *c, ht_error *e) {
    ocl_karg a[8];
    cl_uint s_off;
    cl_int invert, n, C, P;
    if (normalize_args(c, a, &s_off, &invert, &n, &C, &P, e)) return -1;
    a[0] = OCL_KA(c->out), a[1] = OCL_KA(c->in);
    return n ? ocl_launch_1d(c->o, "normalize_fwd", a, 8, (size_t)n, e) : 0;
}

// Its state's place in the gradients stays zero: nothing for the moving-average update.
static int normalize_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    if (!c->din) return 0;
    ocl_karg a[8];
    cl_uint s_off;
    cl_int invert, n, C, P;
    if (normalize_args(c, a, &s_off, &invert, &n, &C, &P, e)) return -1;
    a[0] = OCL_KA(c->din), a[1] = OCL_KA(c->dout);
    return n ? ocl_launch_1d(c->o, "normalize_bwd", a, 8, (size_t)n, e) : 0;
}

static const char *const normalize_kernels[] = {"normalize_fwd", "normalize_bwd", NULL};

const ocl_layer_ops cl_normalize = {.forward = normalize_fwd, .backward = normalize_bwd,
                                    .kernels = normalize_kernels};
