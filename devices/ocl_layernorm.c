// The layernorm and layerscale families on an OpenCL device (ocl_layers.h):
// kernels/layernorm.cl and kernels/layerscale.cl, NCHW. A layernorm keeps each position's mean
// and 1 / sqrt(var + eps) from its forward in its own buffer for the backward.
#include "devices/ocl_layers.h"

#include <limits.h>

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

// Its elements and positions fit the kernels' int indices.
static int fits(const ocl_call *c, const char *fam, ht_error *e) {
    const double elems = (double)c->B * c->L->c * c->L->h * c->L->w;
    if (elems > INT_MAX)
        return ht_fail(e, "%s %s on %s: %.0f elements exceed the kernels' indices; use a "
                       "smaller micro-batch", fam, c->L->name, c->o->label, elems);
    return 0;
}

typedef struct ln_args {
    cl_uint w_off, b_off;
    cl_int has_w, has_b, n, C, P;
} ln_args;

static ln_args ln_args_of(const ocl_call *c) {
    const layer *L = c->L;
    return (ln_args){.w_off = L->n_w ? (cl_uint)L->w_off : 0,
                     .b_off = L->n_b ? (cl_uint)L->b_off : 0, .has_w = L->n_w > 0,
                     .has_b = L->n_b > 0, .n = c->B * L->h * L->w, .C = L->c,
                     .P = L->h * L->w};
}

static size_t ln_aux_bytes(const layer *L, const conv_choice *algo, int B) {
    (void)algo;
    return sizeof(float) * 2 * (size_t)B * L->h * L->w; // mean, 1 / sqrt(var + eps) a position
}

static int ln_fwd(const ocl_call *c, ht_error *e) {
    if (!c->B) return 0;
    if (fits(c, "layernorm", e)) return -1;
    ln_args a = ln_args_of(c);
    cl_float eps = c->L->eps;
    ocl_karg k[] = {OCL_KA(c->out),  OCL_KA(c->in),    OCL_KA(c->params), OCL_KA(c->aux),
                    OCL_KA(a.w_off), OCL_KA(a.b_off),  OCL_KA(a.has_w),   OCL_KA(a.has_b),
                    OCL_KA(a.n),     OCL_KA(a.C),      OCL_KA(a.P),       OCL_KA(eps)};
    return ocl_launch_1d(c->o, "ln_fwd", k, NARGS(k), (size_t)a.n, e);
}

static int ln_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    if (!c->B) return 0;
    ln_args a = ln_args_of(c);
    if (c->din) {
        ocl_karg k[] = {OCL_KA(c->din),  OCL_KA(c->dout), OCL_KA(c->in), OCL_KA(c->params),
                        OCL_KA(c->aux),  OCL_KA(a.w_off), OCL_KA(a.has_w), OCL_KA(a.n),
                        OCL_KA(a.C),     OCL_KA(a.P)};
        if (ocl_launch_1d(c->o, "ln_bwd_in", k, NARGS(k), (size_t)a.n, e) < 0) return -1;
    }
    if (!a.has_w && !a.has_b) return 0;
    ocl_karg k[] = {OCL_KA(c->grads), OCL_KA(c->dout), OCL_KA(c->in),   OCL_KA(c->aux),
                    OCL_KA(a.w_off),  OCL_KA(a.b_off), OCL_KA(a.has_w), OCL_KA(a.has_b),
                    OCL_KA(a.n),      OCL_KA(a.C),     OCL_KA(a.P)};
    return ocl_launch_1d(c->o, "ln_bwd_w", k, NARGS(k), 2 * (size_t)a.C, e);
}

static const char *const ln_kernels[] = {"ln_fwd", "ln_bwd_in", "ln_bwd_w", NULL};

const ocl_layer_ops cl_layernorm = {.forward = ln_fwd, .backward = ln_bwd,
                                    .aux_bytes = ln_aux_bytes, .kernels = ln_kernels};

static int ls_fwd(const ocl_call *c, ht_error *e) {
    if (!c->B) return 0;
    if (fits(c, "layerscale", e)) return -1;
    const layer *L = c->L;
    cl_uint w_off = (cl_uint)L->w_off;
    cl_int n = c->B * L->c * L->h * L->w, C = L->c, P = L->h * L->w;
    ocl_karg k[] = {OCL_KA(c->out), OCL_KA(c->in), OCL_KA(c->params), OCL_KA(w_off),
                    OCL_KA(n),      OCL_KA(C),     OCL_KA(P)};
    return ocl_launch_1d(c->o, "ls_fwd", k, NARGS(k), (size_t)n, e);
}

static int ls_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    if (!c->B) return 0;
    const layer *L = c->L;
    cl_uint w_off = (cl_uint)L->w_off;
    cl_int n = c->B * L->c * L->h * L->w, B = c->B, C = L->c, P = L->h * L->w;
    if (c->din) {
        ocl_karg k[] = {OCL_KA(c->din), OCL_KA(c->dout), OCL_KA(c->params), OCL_KA(w_off),
                        OCL_KA(n),      OCL_KA(C),       OCL_KA(P)};
        if (ocl_launch_1d(c->o, "ls_bwd_in", k, NARGS(k), (size_t)n, e) < 0) return -1;
    }
    ocl_karg k[] = {OCL_KA(c->grads), OCL_KA(c->dout), OCL_KA(c->in), OCL_KA(w_off),
                    OCL_KA(B),        OCL_KA(C),       OCL_KA(P)};
    return ocl_launch_1d(c->o, "ls_bwd_w", k, NARGS(k), (size_t)C, e);
}

static const char *const ls_kernels[] = {"ls_fwd", "ls_bwd_in", "ls_bwd_w", NULL};

const ocl_layer_ops cl_layerscale = {.forward = ls_fwd, .backward = ls_bwd,
                                     .kernels = ls_kernels};
