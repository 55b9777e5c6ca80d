// Winograd convolutions on an OpenCL device (ocl_ops.h): kernels/winograd.cl's transforms around
// CLBlast GEMMs, one per transform point, in the stages of the CPU device's (src/nn/conv.c over
// winograd.c): the same transforms in the same order, the weights transformed on the host by
// winograd.c itself, outputs that see only zeros set to the bias exactly.
#include "devices/ocl_ops.h"

#include <limits.h>

#include "nn/winograd.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define KA OCL_KA
typedef ocl_karg karg;

// The Winograd m of a direction (0: direct).
static int m_of(conv_impl impl) { return impl == CONV_WINO2 ? 2 : impl == CONV_WINO4 ? 4 : 0; }

// a*a, tiles per sample over (h, w) outputs.
static size_t points(int m, int r) { return (size_t)wino_alpha(m, r) * wino_alpha(m, r); }
static size_t tiles(int h, int w, int m) { return (size_t)wino_tiles(h, m) * wino_tiles(w, m); }

size_t ocl_wino_scratch_floats(const conv_geom *g, int B) {
    size_t need = 0, n;
    const int r = g->K, mf = m_of(g->fwd), md = m_of(g->din), mw = m_of(g->dw);
    if (mf) { // V (T, C) and M (T, OC) per point
        n = points(mf, r) * B * tiles(g->OH, g->OW, mf) * (size_t)(g->C + g->OC);
        need = n > need ? n : need;
    }
    if (md) { // V (T, OC) and M (T, C) per point, T over the input's positions
        n = points(md, r) * B * tiles(g->H, g->W, md) * (size_t)(g->OC + g->C);
        need = n > need ? n : need;
    }
    if (mw) { // V (T, C), Z (T, OC) and dU (C, OC) per point
        n = points(mw, r) * ((size_t)B * tiles(g->OH, g->OW, mw) * (g->C + g->OC) +
                             (size_t)g->C * g->OC);
        need = n > need ? n : need;
    }
    return need;
}

size_t ocl_wino_exact_bytes(const conv_geom *g, int B) {
    return m_of(g->fwd) ? (size_t)B * g->OH * g->OW : 0;
}

size_t ocl_wino_u_floats(const conv_geom *g) {
    const int r = g->K, mf = m_of(g->fwd), md = m_of(g->din);
    return (mf ? points(mf, r) : 0) * g->C * g->OC + (md ? points(md, r) : 0) * g->C * g->OC;
}

void ocl_wino_weights(float *u, const float *w, const conv_geom *g) {
    const int r = g->K, mf = m_of(g->fwd), md = m_of(g->din);
    if (mf) wino_weights(u, g->OC, w, g->C, g->OC, mf, r, 0);
    if (md) wino_weights(u + (mf ? points(mf, r) * g->C * g->OC : 0), g->C, w, g->C, g->OC, md,
                         r, 1);
}

// Whether every value the kernels take as an int fits: the tiles of a micro-batch times the
// transform points (the kernels index the buffers in size_t).
static int check(ocl_ops *o, const char *op, const conv_geom *g, int B, ht_error *e) {
    const double t = (double)B * (wino_tiles(g->H, 2) + 1) * (wino_tiles(g->W, 2) + 1) * 64;
    if (B < 0 || t > (double)INT_MAX)
        return ht_fail(e, "%s on %s: %d samples of %dx%dx%d are too many for one micro-batch",
                       op, o->label, B, g->C, g->H, g->W);
    return 0;
}

// The points' GEMMs: C_xi (rows, n) (+)= op(A_xi) B_xi for xi < pts, each operand's matrices
// `stride` floats apart.
static int gemms(ocl_ops *o, const char *what, char ta, size_t pts, size_t rows, size_t n,
                 size_t k, cl_mem a, size_t a_off, size_t a_stride, size_t lda, cl_mem b,
                 size_t b_off, size_t b_stride, size_t ldb, cl_mem c, size_t c_off,
                 size_t c_stride, ht_error *e) {
    for (size_t xi = 0; xi < pts; xi++)
        if (ocl_gemm(o, what, NULL, ta, 'N', rows, n, k, a, a_off + xi * a_stride, lda, b,
                     b_off + xi * b_stride, ldb, 0.0f, c, c_off + xi * c_stride, n, e))
            return -1;
    return 0;
}

// V (from float 0 of scratch) = the input transform of in (B, C, H, W) over th x tw tiles of m
// outputs a sample, padding pad.
static int input_tiles(ocl_ops *o, cl_mem scratch, cl_mem in, int B, int C, int H, int W,
                       int pad, int m, int r, int th, int tw, ht_error *e) {
    const int T = B * th * tw;
    karg a[] = {KA(scratch), KA(in), KA(C),  KA(H),  KA(W), KA(pad),
                KA(m),       KA(r),  KA(th), KA(tw), KA(T), KA(C)};
    return ocl_launch_3d(o, "wino_input", a, NARGS(a), (size_t)C, (size_t)th * tw, (size_t)B, e);
}

// out (B, OC', OH', OW') of in (B, C', H', W') convolved by the transformed weights U (C', OC')
// per point, padding pad; bias and exact as wino_output takes them. V and M in scratch.
static int convolve(ocl_ops *o, const char *what, int m, int r, int B, cl_mem out, cl_mem in,
                    int C, int H, int W, int pad, int OC, int OH, int OW, cl_mem U, size_t u_off,
                    cl_mem params, size_t b_off, cl_mem exact, cl_mem scratch, ht_error *e) {
    const int th = wino_tiles(OH, m), tw = wino_tiles(OW, m), tt = th * tw, T = B * tt;
    const size_t pts = points(m, r), v_n = pts * (size_t)T * C;
    cl_int has_bias = b_off != OCL_NO_BIAS, boff = has_bias ? (cl_int)b_off : 0;
    cl_int has_exact = exact != NULL;
    if (input_tiles(o, scratch, in, B, C, H, W, pad, m, r, th, tw, e)) return -1;
    // M_xi (T, OC) = V_xi (T, C) x U_xi (C, OC), after V in the scratch.
    if (gemms(o, what, 'N', pts, (size_t)T, (size_t)OC, (size_t)C, scratch, 0, (size_t)T * C,
              (size_t)C, U, u_off, (size_t)C * OC, (size_t)OC, scratch, v_n, (size_t)T * OC, e))
        return -1;
    cl_ulong moff = v_n;
    cl_mem ex = exact ? exact : scratch, pb = params ? params : scratch; // unread without them
    karg b[] = {KA(out), KA(scratch), KA(moff), KA(pb), KA(boff), KA(has_bias), KA(ex),
                KA(has_exact), KA(OC), KA(OH), KA(OW), KA(m), KA(r), KA(th), KA(tw), KA(T),
                KA(OC)};
    return ocl_launch_3d(o, "wino_output", b, NARGS(b), (size_t)OC, (size_t)tt, (size_t)B, e);
}

int ocl_wino_forward(ocl_ops *o, const conv_geom *g, int B, cl_mem out, cl_mem in,
                     cl_mem params, size_t b_off, cl_mem U, cl_mem scratch, cl_mem exact,
                     ht_error *e) {
    if (B == 0) return 0;
    if (check(o, "Winograd conv2d forward", g, B, e)) return -1;
    const int m = m_of(g->fwd);
    // Outputs whose receptive field holds only zeros (an image's blank background) are the
    // bias exactly, as direct sums give them; the transforms would leave their rounding.
    karg z[] = {KA(exact), KA(in),   KA(g->C),  KA(g->H), KA(g->W),
                KA(g->K),  KA(g->pad), KA(g->OH), KA(g->OW)};
    if (ocl_launch_3d(o, "wino_zero_fields", z, NARGS(z), (size_t)g->OW, (size_t)g->OH,
                      (size_t)B, e))
        return -1;
    return convolve(o, "Winograd conv2d forward: M = V x U", m, g->K, B, out, in, g->C, g->H,
                    g->W, g->pad, g->OC, g->OH, g->OW, U, 0, params, b_off, exact, scratch, e);
}

int ocl_wino_input_grad(ocl_ops *o, const conv_geom *g, int B, cl_mem din, cl_mem dout, cl_mem U,
                        cl_mem scratch, ht_error *e) {
    if (B == 0) return 0;
    if (check(o, "Winograd conv2d input gradient", g, B, e)) return -1;
    const int m = m_of(g->din), mf = m_of(g->fwd);
    const size_t u_off = mf ? points(mf, g->K) * g->C * g->OC : 0;
    // The forward's stages on the output gradient padded by K-1-pad, the kernel turned round.
    return convolve(o, "Winograd conv2d backward: din = V x U'", m, g->K, B, din, dout, g->OC,
                    g->OH, g->OW, g->K - 1 - g->pad, g->C, g->H, g->W, U, u_off, NULL,
                    OCL_NO_BIAS, NULL, scratch, e);
}

int ocl_wino_weight_grad(ocl_ops *o, const conv_geom *g, int B, cl_mem grads, size_t w_off,
                         cl_mem dout, cl_mem in, cl_mem scratch, ht_error *e) {
    if (B == 0) return 0;
    if (check(o, "Winograd conv2d weight gradient", g, B, e) ||
        (w_off > (size_t)INT_MAX && ht_fail(e, "weights past 2^31 floats on %s", o->label)))
        return -1;
    const int m = m_of(g->dw), r = g->K, C = g->C, OC = g->OC;
    const int th = wino_tiles(g->OH, m), tw = wino_tiles(g->OW, m), tt = th * tw, T = B * tt;
    const size_t pts = points(m, r), v_n = pts * (size_t)T * C, z_n = pts * (size_t)T * OC;
    if (input_tiles(o, scratch, in, B, C, g->H, g->W, g->pad, m, r, th, tw, e)) return -1;
    cl_ulong zoff = v_n, uoff = v_n + z_n;
    karg b[] = {KA(scratch), KA(zoff), KA(dout), KA(OC), KA(g->OH), KA(g->OW),
                KA(m),       KA(r),    KA(th),   KA(tw), KA(T),     KA(OC)};
    if (ocl_launch_3d(o, "wino_grad_tiles", b, NARGS(b), (size_t)OC, (size_t)tt, (size_t)B, e))
        return -1;
    // dU_xi (C, OC) = V_xi^T (C, T) x Z_xi (T, OC), after Z.
    if (gemms(o, "Winograd conv2d backward: dU = V^T x Z", 'T', pts, (size_t)C, (size_t)OC,
              (size_t)T, scratch, 0, (size_t)T * C, (size_t)C, scratch, v_n, (size_t)T * OC,
              (size_t)OC, scratch, v_n + z_n, (size_t)C * OC, e))
        return -1;
    cl_int woff = (cl_int)w_off;
    karg c[] = {KA(grads), KA(woff), KA(scratch), KA(uoff), KA(C), KA(OC), KA(m), KA(r)};
    return ocl_launch_3d(o, "wino_dw_finish", c, NARGS(c), (size_t)OC, (size_t)C, 1, e);
}
