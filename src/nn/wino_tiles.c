// Winograd's per-sample stages on channels-last tensors (winograd.h's transforms, wino_tiles.h's
// functions): the tile transforms vectorised over channels and the register-tiled GEMMs of the
// transformed domain, one sample at a time on the calling thread. Compiled once per
// instruction set, as conv_nhwc.c, which calls them.
#include "nn/wino_tiles.h"

#include "nn/layers.h"
#include "nn/vec.h"
#include "nn/winograd.h"

// ---- the 1-D transforms, applied along both axes ------------------------------------------
// Lavin & Gray's matrices. F(2,3): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1].
// F(4,3): B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
// 0 4 0 -5 0 1], G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6;
// 0 0 1], A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
// F(2,5), by the Cook-Toom construction on F(4,3)'s points 0, 1, -1, 2, -2, inf (which gives
// F(4,3)'s matrices above exactly): the same B^T; A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 1] (the points'
// powers 0 and 1, inf picking the leading coefficient); G's rows the powers 0..4 of each point
// over f(p) = prod_{q != p} (p - q), as F(4,3)'s: [1/4 0 0 0 0; -1/6 -1/6 -1/6 -1/6 -1/6;
// -1/6 1/6 -1/6 1/6 -1/6; 1/24 1/12 1/6 1/3 2/3; 1/24 -1/12 1/6 -1/3 2/3; 0 0 0 0 1].
// F(4,5), by the same construction on the points 0, 1, -1, 2, -2, 1/2, -1/2, inf (a = 8; the
// first row of B^T and G negated, so that both start with +1): B^T = [1 0 -21/4 0 21/4 0 -1 0;
// 0 1 1 -17/4 -17/4 1 1 0; 0 -1 1 17/4 -17/4 -1 1 0; 0 1/2 1/4 -5/2 -5/4 2 1 0;
// 0 -1/2 1/4 5/2 -5/4 -2 1 0; 0 2 4 -5/2 -5 1/2 1 0; 0 -2 4 5/2 -5 -1/2 1 0;
// 0 -1 0 21/4 0 -21/4 0 1], A^T = [1 1 1 1 1 1 1 0; 0 1 -1 2 -2 1/2 -1/2 0;
// 0 1 1 4 4 1/4 1/4 0; 0 1 -1 8 -8 1/8 -1/8 1], G = G45 below.
// Each function maps x[0], x[s], x[2s], ... to y[0], y[s], ...

// B^T x, a = 4.
static ALWAYS_INLINE void bt2(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
    y[0] = x0 - x2;
    y[s] = x1 + x2;
    y[2 * s] = x2 - x1;
    y[3 * s] = x1 - x3;
}

// B^T x, a = 6.
static ALWAYS_INLINE void bt4(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s];
    const vf f4 = v_set1(4.0f), m4 = v_set1(-4.0f), m5 = v_set1(-5.0f), f2 = v_set1(2.0f);
    const vf d42 = x4 - x2, d31 = x3 - x1;
    y[0] = v_fma(f4, x0, v_fma(m5, x2, x4));
    y[s] = v_fma(m4, x1 + x2, x3 + x4);
    y[2 * s] = v_fma(f4, x1 - x2, x4 - x3);
    y[3 * s] = v_fma(f2, d31, d42);
    y[4 * s] = v_fma(f2, x1 - x3, d42);
    y[5 * s] = v_fma(f4, x1, v_fma(m5, x3, x5));
}

// A^T x: 4 -> 2.
static ALWAYS_INLINE void at2(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
    y[0] = x0 + x1 + x2;
    y[s] = x1 - x2 - x3;
}

// A^T x: 6 -> 4.
static ALWAYS_INLINE void at4(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s];
    const vf a = x1 + x2, b = x1 - x2, c = x3 + x4, d = x3 - x4;
    y[0] = x0 + a + c;
    y[s] = v_fma(v_set1(2.0f), d, b);
    y[2 * s] = v_fma(v_set1(4.0f), c, a);
    y[3 * s] = v_fma(v_set1(8.0f), d, b) + x5;
}

// B^T x, a = 8.
static ALWAYS_INLINE void bt8(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s],
             x6 = x[6 * s], x7 = x[7 * s];
    const vf c214 = v_set1(21.0f / 4), m174 = v_set1(-17.0f / 4), h = v_set1(0.5f),
             q = v_set1(0.25f), m52 = v_set1(-2.5f), m54 = v_set1(-1.25f), f2 = v_set1(2.0f),
             f4 = v_set1(4.0f), m5 = v_set1(-5.0f);
    y[0] = v_fma(c214, x4 - x2, x0 - x6);
    y[7 * s] = v_fma(c214, x3 - x5, x7 - x1);
    const vf a1 = v_fma(m174, x3, x1 + x5), b1 = v_fma(m174, x4, x2 + x6);
    y[s] = b1 + a1;
    y[2 * s] = b1 - a1;
    const vf a3 = v_fma(f2, x5, v_fma(m52, x3, h * x1)), b3 = v_fma(m54, x4, v_fma(q, x2, x6));
    y[3 * s] = b3 + a3;
    y[4 * s] = b3 - a3;
    const vf a5 = v_fma(h, x5, v_fma(m52, x3, f2 * x1)), b5 = v_fma(m5, x4, v_fma(f4, x2, x6));
    y[5 * s] = b5 + a5;
    y[6 * s] = b5 - a5;
}

// A^T x: 8 -> 4 (F(4,5)).
static ALWAYS_INLINE void at45(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s],
             x6 = x[6 * s], x7 = x[7 * s];
    const vf p1 = x1 + x2, d1 = x1 - x2, p2 = x3 + x4, d2 = x3 - x4, p3 = x5 + x6, d3 = x5 - x6;
    y[0] = x0 + p1 + p2 + p3;
    y[s] = v_fma(v_set1(0.5f), d3, v_fma(v_set1(2.0f), d2, d1));
    y[2 * s] = v_fma(v_set1(0.25f), p3, v_fma(v_set1(4.0f), p2, p1));
    y[3 * s] = v_fma(v_set1(0.125f), d3, v_fma(v_set1(8.0f), d2, d1)) + x7;
}

// A x: 4 -> 8 (F(4,5)).
static ALWAYS_INLINE void a45(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
    const vf e1 = x0 + x2, o1 = x1 + x3;
    const vf e2 = v_fma(v_set1(4.0f), x2, x0), o2 = v_fma(v_set1(8.0f), x3, x1 + x1);
    const vf e3 = v_fma(v_set1(0.25f), x2, x0), o3 = v_fma(v_set1(0.125f), x3, v_set1(0.5f) * x1);
    y[0] = x0;
    y[s] = e1 + o1;
    y[2 * s] = e1 - o1;
    y[3 * s] = e2 + o2;
    y[4 * s] = e2 - o2;
    y[5 * s] = e3 + o3;
    y[6 * s] = e3 - o3;
    y[7 * s] = x3;
}

// A^T x: 6 -> 2 (F(2,5)).
static ALWAYS_INLINE void at25(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s];
    y[0] = x0 + (x1 + x2) + (x3 + x4);
    y[s] = v_fma(v_set1(2.0f), x3 - x4, x1 - x2) + x5;
}

// A x: 2 -> 6 (F(2,5)).
static ALWAYS_INLINE void a25(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], t = x1 + x1;
    y[0] = x0;
    y[s] = x0 + x1;
    y[2 * s] = x0 - x1;
    y[3 * s] = x0 + t;
    y[4 * s] = x0 - t;
    y[5 * s] = x1;
}

// A x: 2 -> 4.
static ALWAYS_INLINE void a2(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s];
    y[0] = x0;
    y[s] = x0 + x1;
    y[2 * s] = x0 - x1;
    y[3 * s] = v_zero() - x1;
}

// A x: 4 -> 6.
static ALWAYS_INLINE void a4(vf *y, const vf *x, int s) {
    const vf x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
    const vf e = x0 + x2, f = x1 + x3;
    const vf g = v_fma(v_set1(4.0f), x2, x0), h = v_fma(v_set1(8.0f), x3, x1 + x1);
    y[0] = x0;
    y[s] = e + f;
    y[2 * s] = e - f;
    y[3 * s] = g + h;
    y[4 * s] = g - h;
    y[5 * s] = x3;
}

// ---- tile transforms, VL channels at a time up to the padded count (conv_cpad) -------------

// Loads channels [c0, c0 + n) of one position: a full vector, or n lanes and zeros.
static ALWAYS_INLINE vf load_ch(const float *p, int n) {
    return n == VL ? v_load(p) : v_load_n(p, n);
}

static ALWAYS_INLINE void input_tiles(const int m, const int r, float *V, int ldv,
                                      const float *src, int rowstep, int cstride, int C, int th,
                                      int tw) {
    const int a = m + r - 1; // B^T depends on a alone
    const size_t plane = (size_t)th * tw * ldv;
    for (int ty = 0; ty < th; ty++)
        for (int tx = 0; tx < tw; tx++) {
            const int t = ty * tw + tx;
            const float *base = src + (size_t)ty * m * rowstep + (size_t)tx * m * cstride;
            for (int c0 = 0; c0 < conv_cpad(C); c0 += VL) {
                const int n = C - c0 < VL ? (C > c0 ? C - c0 : 0) : VL;
                vf d[64], u[64];
                for (int i = 0; i < a; i++)
                    for (int j = 0; j < a; j++)
                        d[i * a + j] =
                            load_ch(base + (size_t)i * rowstep + (size_t)j * cstride + c0, n);
                for (int i = 0; i < a; i++) { // along each row, then each column
                    if (a == 4) bt2(u + i * a, d + i * a, 1);
                    else if (a == 6) bt4(u + i * a, d + i * a, 1);
                    else bt8(u + i * a, d + i * a, 1);
                }
                for (int j = 0; j < a; j++) {
                    if (a == 4) bt2(d + j, u + j, a);
                    else if (a == 6) bt4(d + j, u + j, a);
                    else bt8(d + j, u + j, a);
                }
                float *v = V + (size_t)t * ldv + c0;
                for (int xi = 0; xi < a * a; xi++) v_store(v + xi * plane, d[xi]);
            }
        }
}

void wino_input(float *V, int ldv, const float *src, int rowstep, int cstride, int C, int m,
                int r, int th, int tw) {
    if (r == 5 && m == 4) input_tiles(4, 5, V, ldv, src, rowstep, cstride, C, th, tw);
    else if (r == 5) input_tiles(2, 5, V, ldv, src, rowstep, cstride, C, th, tw);
    else if (m == 2) input_tiles(2, 3, V, ldv, src, rowstep, cstride, C, th, tw);
    else input_tiles(4, 3, V, ldv, src, rowstep, cstride, C, th, tw);
}

static ALWAYS_INLINE void output_tiles(const int m, const int r, float *out, int ldo, int nv,
                                       const float *M, int ldm, const float *bias, int relu,
                                       const unsigned char *exact, int th, int tw, int OH,
                                       int OW) {
    const int a = m + r - 1;
    const size_t plane = (size_t)th * tw * ldm;
    for (int ty = 0; ty < th; ty++)
        for (int tx = 0; tx < tw; tx++) {
            const int t = ty * tw + tx;
            const int rows = OH - ty * m < m ? OH - ty * m : m;
            const int cols = OW - tx * m < m ? OW - tx * m : m;
            for (int v = 0; v < nv; v++) {
                vf x[64], u[32], y[16];
                const float *mp = M + (size_t)t * ldm + v * VL;
                for (int xi = 0; xi < a * a; xi++) x[xi] = v_load(mp + xi * plane);
                for (int i = 0; i < a; i++) { // each row a -> m: u is a x m
                    if (r == 5 && m == 4) at45(u + i * m, x + i * a, 1);
                    else if (r == 5) at25(u + i * m, x + i * a, 1);
                    else if (m == 2) at2(u + i * m, x + i * a, 1);
                    else at4(u + i * m, x + i * a, 1);
                }
                for (int j = 0; j < m; j++) { // each column a -> m: y is m x m
                    if (r == 5 && m == 4) at45(y + j, u + j, m);
                    else if (r == 5) at25(y + j, u + j, m);
                    else if (m == 2) at2(y + j, u + j, m);
                    else at4(y + j, u + j, m);
                }
                const vf b = bias ? v_load(bias + v * VL) : v_zero();
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < cols; j++) {
                        vf r = bias ? v_add(y[i * m + j], b) : y[i * m + j];
                        if (exact && exact[(ty * m + i) * OW + tx * m + j]) r = b;
                        float *o = out + ((size_t)(ty * m + i) * OW + tx * m + j) * ldo + v * VL;
                        v_store(o, relu ? v_relu(r) : r);
                    }
            }
        }
}

void wino_output(float *out, int ldo, int nv, const float *M, int ldm, const float *bias,
                 int relu, const unsigned char *exact, int m, int r, int th, int tw, int OH,
                 int OW) {
    if (r == 5 && m == 4)
        output_tiles(4, 5, out, ldo, nv, M, ldm, bias, relu, exact, th, tw, OH, OW);
    else if (r == 5) output_tiles(2, 5, out, ldo, nv, M, ldm, bias, relu, exact, th, tw, OH, OW);
    else if (m == 2) output_tiles(2, 3, out, ldo, nv, M, ldm, bias, relu, exact, th, tw, OH, OW);
    else output_tiles(4, 3, out, ldo, nv, M, ldm, bias, relu, exact, th, tw, OH, OW);
}

static ALWAYS_INLINE void grad_tiles(const int m, const int r, float *Z, int ldz, const float *g,
                                     int rowstep, int cstride, int OC, int th, int tw) {
    const int a = m + r - 1;
    const size_t plane = (size_t)th * tw * ldz;
    for (int ty = 0; ty < th; ty++)
        for (int tx = 0; tx < tw; tx++) {
            const int t = ty * tw + tx;
            const float *base = g + (size_t)ty * m * rowstep + (size_t)tx * m * cstride;
            for (int c0 = 0; c0 < conv_cpad(OC); c0 += VL) {
                const int n = OC - c0 < VL ? (OC > c0 ? OC - c0 : 0) : VL;
                vf d[16], u[32], z[64];
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < m; j++)
                        d[i * m + j] =
                            load_ch(base + (size_t)i * rowstep + (size_t)j * cstride + c0, n);
                for (int i = 0; i < m; i++) { // each row m -> a: u is m x a
                    if (r == 5 && m == 4) a45(u + i * a, d + i * m, 1);
                    else if (r == 5) a25(u + i * a, d + i * m, 1);
                    else if (m == 2) a2(u + i * a, d + i * m, 1);
                    else a4(u + i * a, d + i * m, 1);
                }
                for (int j = 0; j < a; j++) { // each column m -> a
                    if (r == 5 && m == 4) a45(z + j, u + j, a);
                    else if (r == 5) a25(z + j, u + j, a);
                    else if (m == 2) a2(z + j, u + j, a);
                    else a4(z + j, u + j, a);
                }
                float *zp = Z + (size_t)t * ldz + c0;
                for (int xi = 0; xi < a * a; xi++) v_store(zp + xi * plane, z[xi]);
            }
        }
}

void wino_grad_tiles(float *Z, int ldz, const float *g, int rowstep, int cstride, int OC, int m,
                     int r, int th, int tw) {
    if (r == 5 && m == 4) grad_tiles(4, 5, Z, ldz, g, rowstep, cstride, OC, th, tw);
    else if (r == 5) grad_tiles(2, 5, Z, ldz, g, rowstep, cstride, OC, th, tw);
    else if (m == 2) grad_tiles(2, 3, Z, ldz, g, rowstep, cstride, OC, th, tw);
    else grad_tiles(4, 3, Z, ldz, g, rowstep, cstride, OC, th, tw);
}

// ---- the transformed domain's GEMMs: register tiles as conv.c's ------------------------------
// gemm: NB tiles x MV vectors of outputs, over the C input channels: per channel MV vector
// loads of U and NB broadcasts of V. dw: R channels x MV vectors of outputs, over the tiles.
// Accumulators + MV loads + 1 broadcast stay within the vector registers: 32 (AVX-512) or 16.
#if defined(__AVX512F__)
#define GEMM_NB_MAX1 16
#define GEMM_NB_MAX2 14
#define GEMM_NB_MAX3 9
#define DWG_R_MAX1 16
#define DWG_R_MAX2 12
#define DWG_R_MAX3 8
#else
#define GEMM_NB_MAX1 14
#define GEMM_NB_MAX2 6
#define GEMM_NB_MAX3 4
#define DWG_R_MAX1 14
#define DWG_R_MAX2 6
#define DWG_R_MAX3 4
#endif

typedef struct gemm_args {
    const float *V; // tile block's first row, at its first channel
    int ldv, C;
    const float *U; // first channel's row, at the vector group's first column
    int ldu;
    float *M;
    int ldm;
} gemm_args;

static ALWAYS_INLINE void gemm_run(const int NB, const int MV, vf *acc, const gemm_args *t) {
#pragma GCC unroll 64
    for (int i = 0; i < NB * MV; i++) acc[i] = v_zero();
    const float *up = t->U, *vp = t->V;
    const int ldu = t->ldu, ldv = t->ldv;
    for (int c = 0; c < t->C; c++, up += ldu, vp++) {
        vf w[3];
#pragma GCC unroll 4
        for (int k = 0; k < MV; k++) w[k] = v_load(up + k * VL);
#pragma GCC unroll 32
        for (int j = 0; j < NB; j++) {
            const vf x = v_set1(vp[j * ldv]);
#pragma GCC unroll 4
            for (int k = 0; k < MV; k++) acc[j * MV + k] = v_fma(x, w[k], acc[j * MV + k]);
        }
    }
#pragma GCC unroll 32
    for (int j = 0; j < NB; j++)
#pragma GCC unroll 4
        for (int k = 0; k < MV; k++) v_store(t->M + (size_t)j * t->ldm + k * VL, acc[j * MV + k]);
}

typedef struct dwg_args {
    const float *V; // first tile's row at the block's first channel
    int ldv;
    const float *Z; // first tile's row at the vector group's first column
    int ldz, T;
    double *dU;     // the block's first channel row, at the group's first column
    int ldd;
} dwg_args;

static ALWAYS_INLINE void dwg_run(const int R, const int MV, vf *acc, const dwg_args *t) {
#pragma GCC unroll 64
    for (int i = 0; i < R * MV; i++) acc[i] = v_zero();
    const float *vp = t->V, *zp = t->Z;
    for (int k = 0; k < t->T; k++, vp += t->ldv, zp += t->ldz) {
        vf g[3];
#pragma GCC unroll 4
        for (int q = 0; q < MV; q++) g[q] = v_load(zp + q * VL);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            const vf x = v_set1(vp[r]);
#pragma GCC unroll 4
            for (int q = 0; q < MV; q++) acc[r * MV + q] = v_fma(x, g[q], acc[r * MV + q]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < MV; q++)
            v_add_to_double(t->dU + (size_t)r * t->ldd + q * VL, acc[r * MV + q]);
}

typedef void (*gemm_fn)(const gemm_args *);
typedef void (*dwg_fn)(const dwg_args *);

#define LIST8(X, M) X(1, M) X(2, M) X(3, M) X(4, M) X(5, M) X(6, M) X(7, M) X(8, M)
#define LIST9(X, M) LIST8(X, M) X(9, M)
#define LIST12(X, M) LIST9(X, M) X(10, M) X(11, M) X(12, M)
#define LIST14(X, M) LIST12(X, M) X(13, M) X(14, M)
#define LIST16(X, M) LIST14(X, M) X(15, M) X(16, M)
#define DEF_GEMM(N, M)                                                                         \
    static void gemm_tile_##N##_##M(const gemm_args *t) {                                      \
        vf acc[(N) * (M)];                                                                     \
        gemm_run(N, M, acc, t);                                                                \
    }
#define DEF_DWG(N, M)                                                                          \
    static void dwg_tile_##N##_##M(const dwg_args *t) {                                        \
        vf acc[(N) * (M)];                                                                     \
        dwg_run(N, M, acc, t);                                                                 \
    }
#define PTR_GEMM(N, M) gemm_tile_##N##_##M,
#define PTR_DWG(N, M) dwg_tile_##N##_##M,
LIST16(DEF_GEMM, 1)
LIST14(DEF_GEMM, 2)
LIST9(DEF_GEMM, 3)
LIST16(DEF_DWG, 1)
LIST12(DEF_DWG, 2)
LIST8(DEF_DWG, 3)
static const gemm_fn gemm_tiles1[] = {NULL, LIST16(PTR_GEMM, 1)};
static const gemm_fn gemm_tiles2[] = {NULL, LIST14(PTR_GEMM, 2)};
static const gemm_fn gemm_tiles3[] = {NULL, LIST9(PTR_GEMM, 3)};
static const dwg_fn dwg_tiles1[] = {NULL, LIST16(PTR_DWG, 1)};
static const dwg_fn dwg_tiles2[] = {NULL, LIST12(PTR_DWG, 2)};
static const dwg_fn dwg_tiles3[] = {NULL, LIST8(PTR_DWG, 3)};
static const int gemm_nb_max[] = {0, GEMM_NB_MAX1, GEMM_NB_MAX2, GEMM_NB_MAX3};
static const int dwg_r_max[] = {0, DWG_R_MAX1, DWG_R_MAX2, DWG_R_MAX3};

// Vectors of outputs handled together: as conv.c's group_mv.
static int group_mv(int left) {
    return left <= 3 ? left : (left == 5 ? 3 : 2);
}

// Splits n into nearly equal blocks of at most max: block i's length.
static int block_len(int n, int max, int i) {
    int nblk = (n + max - 1) / max, base = n / nblk, rem = n % nblk;
    return base + (i < rem);
}

void wino_gemm(float *M, int ldm, int nv, const float *V, int ldv, int C, const float *U, int ldu,
               int T, int m, int r) {
    const int a = wino_alpha(m, r);
    for (int xi = 0; xi < a * a; xi++) {
        const float *Vx = V + (size_t)xi * T * ldv, *Ux = U + (size_t)xi * C * ldu;
        float *Mx = M + (size_t)xi * T * ldm;
        gemm_args g = {.ldv = ldv, .C = C, .ldu = ldu, .ldm = ldm};
        for (int v0 = 0; v0 < nv;) {
            const int mv = group_mv(nv - v0), nbmax = gemm_nb_max[mv];
            const gemm_fn *tiles = mv == 1 ? gemm_tiles1 : mv == 2 ? gemm_tiles2 : gemm_tiles3;
            g.U = Ux + v0 * VL;
            for (int t0 = 0, i = 0; t0 < T; i++) {
                const int nb = block_len(T, nbmax, i);
                g.V = Vx + (size_t)t0 * ldv;
                g.M = Mx + (size_t)t0 * ldm + v0 * VL;
                tiles[nb](&g);
                t0 += nb;
            }
            v0 += mv;
        }
    }
}

void wino_dw_accum(double *dU, int ldd, const float *V, int ldv, int C, const float *Z, int ldz,
                   int nv, int T, int m, int r) {
    const int a = wino_alpha(m, r);
    for (int xi = 0; xi < a * a; xi++) {
        dwg_args g = {.ldv = ldv, .ldz = ldz, .T = T, .ldd = ldd};
        const float *Vx = V + (size_t)xi * T * ldv, *Zx = Z + (size_t)xi * T * ldz;
        double *Dx = dU + (size_t)xi * C * ldd;
        for (int v0 = 0; v0 < nv;) {
            const int mv = group_mv(nv - v0), rmax = dwg_r_max[mv];
            const dwg_fn *tiles = mv == 1 ? dwg_tiles1 : mv == 2 ? dwg_tiles2 : dwg_tiles3;
            g.Z = Zx + v0 * VL;
            for (int c0 = 0, i = 0; c0 < C; i++) {
                const int nr = block_len(C, rmax, i);
                g.V = Vx + c0;
                g.dU = Dx + (size_t)c0 * ldd + v0 * VL;
                tiles[nr](&g);
                c0 += nr;
            }
            v0 += mv;
        }
    }
}
