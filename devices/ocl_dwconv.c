// The dwconv family on an OpenCL device (ocl_layers.h): kernels/dwconv.cl, direct, NCHW.
#include "devices/ocl_layers.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct dw_args {
    cl_uint w_off, b_off;
    cl_int has_bias, B, C, M, H, W, K, stride, pad, OH, OW;
} dw_args;

static dw_args args_of(const ocl_call *c) {
    const layer *L = c->L;
    return (dw_args){.w_off = (cl_uint)L->w_off, .b_off = L->n_b ? (cl_uint)L->b_off : 0,
                     .has_bias = L->n_b > 0, .B = c->B, .C = L->c, .M = L->mult, .H = L->h,
                     .W = L->w, .K = L->k, .stride = L->stride, .pad = L->pad, .OH = L->oh,
                     .OW = L->ow};
}

static int dwconv_fwd(const ocl_call *c, ht_error *e) {
    if (!c->B) return 0;
    dw_args a = args_of(c);
    ocl_karg k[] = {OCL_KA(c->out), OCL_KA(c->in),   OCL_KA(c->params), OCL_KA(a.w_off),
                    OCL_KA(a.b_off), OCL_KA(a.has_bias), OCL_KA(a.B),    OCL_KA(a.C),
                    OCL_KA(a.M),    OCL_KA(a.H),     OCL_KA(a.W),       OCL_KA(a.K),
                    OCL_KA(a.stride), OCL_KA(a.pad), OCL_KA(a.OH),      OCL_KA(a.OW)};
    return ocl_launch_1d(c->o, "dw_fwd", k, NARGS(k), layer_out_size(c->L) * (size_t)c->B, e);
}

static int dwconv_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    if (!c->B) return 0;
    dw_args a = args_of(c);
    if (c->din) {
        ocl_karg k[] = {OCL_KA(c->din), OCL_KA(c->dout), OCL_KA(c->params), OCL_KA(a.w_off),
                        OCL_KA(a.B),    OCL_KA(a.C),     OCL_KA(a.M),       OCL_KA(a.H),
                        OCL_KA(a.W),    OCL_KA(a.K),     OCL_KA(a.stride),  OCL_KA(a.pad),
                        OCL_KA(a.OH),   OCL_KA(a.OW)};
        if (ocl_launch_1d(c->o, "dw_bwd_in", k, NARGS(k), layer_in_size(c->L) * (size_t)c->B,
                          e) < 0)
            return -1;
    }
    ocl_karg k[] = {OCL_KA(c->grads), OCL_KA(c->dout), OCL_KA(c->in),   OCL_KA(a.w_off),
                    OCL_KA(a.b_off),  OCL_KA(a.has_bias), OCL_KA(a.B),  OCL_KA(a.C),
                    OCL_KA(a.M),      OCL_KA(a.H),     OCL_KA(a.W),     OCL_KA(a.K),
                    OCL_KA(a.stride), OCL_KA(a.pad),   OCL_KA(a.OH),    OCL_KA(a.OW)};
    return ocl_launch_1d(c->o, "dw_bwd_w", k, NARGS(k), c->L->n_w + c->L->n_b, e);
}

static const char *const dwconv_kernels[] = {"dw_fwd", "dw_bwd_in", "dw_bwd_w", NULL};

const ocl_layer_ops cl_dwconv = {.forward = dwconv_fwd, .backward = dwconv_bwd,
                                 .kernels = dwconv_kernels};
