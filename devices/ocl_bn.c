// The OpenCL batch normalisation ops (ocl_ops.h) over the kernels of kernels/batchnorm.cl:
// per (group, channel) statistics and backward sums as one work-group's reduction each, the
// rest elementwise.
#include "devices/ocl_ops.h"

#include <limits.h>

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

size_t ocl_bn_stats_floats(int C, int B) { return 3 * (size_t)C * (size_t)B; }
size_t ocl_bn_sums_floats(int C, int B) { return 4 * (size_t)C * (size_t)B; }

// Shapes positive, tensors within the kernels' 32-bit indices, offsets within 32 bits.
static int bn_check(ocl_ops *o, const char *op, const ocl_bn_geom *g, int B, int G,
                    ht_error *e) {
    if (B < 1 || g->C < 1 || g->P < 1 || G < 1)
        return ht_fail(e, "%s on %s: B %d, C %d, P %d, group %d: expected each > 0", op,
                       o->label, B, g->C, g->P, G);
    if ((double)B * g->C * g->P > INT_MAX || (double)ocl_bn_sums_floats(g->C, B) > INT_MAX)
        return ht_fail(e, "%s on %s: %d x %d x %d elements, more than the kernels index (%d); "
                       "use a smaller micro-batch", op, o->label, B, g->C, g->P, INT_MAX);
    const size_t offs[] = {g->w_off, g->b_off, g->s_off};
    for (int i = 0; i < 3; i++)
        if (offs[i] != OCL_NO_BIAS && offs[i] > (size_t)UINT_MAX - 2 * (size_t)g->C - 1)
            return ht_fail(e, "%s on %s: parameter offset %zu exceeds 32 bits", op, o->label,
                           offs[i]);
    return 0;
}

// The kernels' view of gamma and beta: an offset and whether it is there.
typedef struct bn_affine {
    cl_uint w_off, b_off;
    cl_int has_gamma, has_beta;
} bn_affine;

static bn_affine affine_of(const ocl_bn_geom *g) {
    bn_affine a = {0, 0, g->w_off != OCL_NO_BIAS, g->b_off != OCL_NO_BIAS};
    if (a.has_gamma) a.w_off = (cl_uint)g->w_off;
    if (a.has_beta) a.b_off = (cl_uint)g->b_off;
    return a;
}

int ocl_bn_train_forward(ocl_ops *o, const ocl_bn_geom *g, int B, int G, cl_mem out, cl_mem in,
                         cl_mem params, cl_mem stats, ht_error *e) {
    if (B == 0) return 0;
    if (bn_check(o, "batchnorm forward", g, B, G, e)) return -1;
    const int ng = (B + G - 1) / G;
    bn_affine f = affine_of(g);
    ocl_karg s[] = {OCL_KA(stats), OCL_KA(in), OCL_KA(B), OCL_KA(g->C), OCL_KA(g->P), OCL_KA(G),
                    OCL_KA(g->eps)};
    if (ocl_launch_groups(o, "bn_stats", s, NARGS(s), (size_t)ng * g->C, 2, e)) return -1;
    ocl_karg a[] = {OCL_KA(out),         OCL_KA(in),          OCL_KA(stats), OCL_KA(params),
                    OCL_KA(f.w_off),     OCL_KA(f.b_off),     OCL_KA(f.has_gamma),
                    OCL_KA(f.has_beta),  OCL_KA(B),           OCL_KA(g->C),  OCL_KA(g->P),
                    OCL_KA(G)};
    return ocl_launch_1d(o, "bn_fwd", a, NARGS(a), (size_t)B * g->C * g->P, e);
}

int ocl_bn_infer_forward(ocl_ops *o, const ocl_bn_geom *g, int B, cl_mem out, cl_mem in,
                         cl_mem params, ht_error *e) {
    if (B == 0) return 0;
    if (bn_check(o, "batchnorm inference", g, B, 1, e)) return -1;
    bn_affine f = affine_of(g);
    cl_uint s_off = (cl_uint)g->s_off;
    cl_int n = B * g->C * g->P;
    ocl_karg a[] = {OCL_KA(out),         OCL_KA(in),         OCL_KA(params), OCL_KA(f.w_off),
                    OCL_KA(f.b_off),     OCL_KA(s_off),      OCL_KA(f.has_gamma),
                    OCL_KA(f.has_beta),  OCL_KA(n),          OCL_KA(g->C),   OCL_KA(g->P),
                    OCL_KA(g->eps)};
    return ocl_launch_1d(o, "bn_infer", a, NARGS(a), (size_t)n, e);
}

int ocl_bn_backward(ocl_ops *o, const ocl_bn_geom *g, int B, int G, cl_mem din, cl_mem grads,
                    cl_mem dout, cl_mem in, cl_mem params, cl_mem stats, cl_mem sums,
                    ht_error *e) {
    if (B == 0) return 0;
    if (bn_check(o, "batchnorm backward", g, B, G, e)) return -1;
    const int ng = (B + G - 1) / G;
    bn_affine f = affine_of(g);
    cl_uint s_off = (cl_uint)g->s_off;
    ocl_karg s[] = {OCL_KA(sums), OCL_KA(dout), OCL_KA(in), OCL_KA(stats), OCL_KA(B),
                    OCL_KA(g->C), OCL_KA(g->P), OCL_KA(G)};
    if (ocl_launch_groups(o, "bn_bwd_sums", s, NARGS(s), (size_t)ng * g->C, 4, e)) return -1;
    if (din) {
        ocl_karg d[] = {OCL_KA(din),    OCL_KA(dout),        OCL_KA(in),   OCL_KA(stats),
                        OCL_KA(sums),   OCL_KA(params),      OCL_KA(f.w_off),
                        OCL_KA(f.has_gamma), OCL_KA(B),      OCL_KA(g->C), OCL_KA(g->P),
                        OCL_KA(G)};
        if (ocl_launch_1d(o, "bn_bwd_dx", d, NARGS(d), (size_t)B * g->C * g->P, e)) return -1;
    }
    ocl_karg r[] = {OCL_KA(grads),      OCL_KA(sums),       OCL_KA(stats), OCL_KA(f.w_off),
                    OCL_KA(f.b_off),    OCL_KA(s_off),      OCL_KA(f.has_gamma),
                    OCL_KA(f.has_beta), OCL_KA(g->C),       OCL_KA(ng)};
    return ocl_launch_1d(o, "bn_bwd_reduce", r, NARGS(r), (size_t)g->C, e);
}

int ocl_bn_frozen_backward(ocl_ops *o, const ocl_bn_geom *g, int B, cl_mem din, cl_mem dout,
                           cl_mem params, ht_error *e) {
    if (B == 0) return 0;
    if (bn_check(o, "frozen batchnorm backward", g, B, 1, e)) return -1;
    bn_affine f = affine_of(g);
    cl_uint s_off = (cl_uint)g->s_off;
    cl_int n = B * g->C * g->P;
    ocl_karg a[] = {OCL_KA(din),    OCL_KA(dout), OCL_KA(params),      OCL_KA(f.w_off),
                    OCL_KA(s_off),  OCL_KA(f.has_gamma), OCL_KA(n),    OCL_KA(g->C),
                    OCL_KA(g->P),   OCL_KA(g->eps)};
    return ocl_launch_1d(o, "bn_frozen_bwd", a, NARGS(a), (size_t)n, e);
}
