// The channels-last convolution's per-sample kernels: direct convolution with register-tiled
// vector code, and Winograd's stages (wino_tiles.c) strung together, in whichever directions
// conv_geom asks. Compiled once per instruction set (CMake's HT_ISAS: AVX-512, AVX2 + FMA,
// SSE2 on x86), each copy's functions under their own names (isa_fns.h); isa_kernels.c picks
// the copy the CPU runs. The layout they share is conv_plan.h's.
#include "nn/conv_plan.h"
#include "nn/isa_fns.h"
#include "nn/vec.h"
#include "nn/wino_tiles.h"
#include "nn/winograd.h"

#include <string.h>

// ---- channels-last direct convolution: the network's fast path -----------------------------
// A tile keeps NB output positions of one row x MV vectors of VL output channels in registers
// and runs over every input channel and tap: one (c, tap) costs MV vector loads of weights,
// shared by the NB positions, and NB broadcasts of input values, shared by the MV vectors.
// Each output is summed from zero in im2col + GEMM's order (c, kh, kw), then the bias added,
// so forward values round as the NCHW reference's and the OpenCL path's do, and max pooling
// breaks near-ties between window entries the same way.
// Inputs are first copied into a zero-bordered buffer, so tiles never test bounds. The input
// gradient is the same kernel run on the zero-bordered output gradient with the kernel
// flipped and transposed (stride 1); the weight gradient has its own tile (see dw_run).

_Static_assert(CONV_CPAD % VL == 0, "the channel padding is a whole number of vectors");

// Tile sizes by MV (vectors of output channels): accumulators + MV weights + 1 broadcast
// stay within the vector registers: 32 of 16 floats (AVX-512), else 16 (AVX2's of 8, SSE's
// and NEON's of 4).
#if defined(__AVX512F__)
#define FWD_NB_MAX1 16
#define FWD_NB_MAX2 14
#define FWD_NB_MAX3 9
#define DW_R_MAX1 16
#define DW_R_MAX2 12
#define DW_R_MAX3 8
#else
#define FWD_NB_MAX1 14
#define FWD_NB_MAX2 6
#define FWD_NB_MAX3 4
#define DW_R_MAX1 14
#define DW_R_MAX2 6
#define DW_R_MAX3 4
#endif
#define TILE_MAX 16 // the largest tile the function tables hold

typedef struct fwd_args {
    const float *in;   // padded input at the tile's first position (tap 0, channel 0)
    int pstep;         // floats between the tile's positions in `in` (stride * Cs)
    int rowstep, Cs;   // floats per padded input row, channel stride
    int C, K;
    const float *w;    // packed weights at the tile's first channel vector: [(c*K+kh)*K+kw][ldw]
    int ldw;
    const float *bias; // MV vectors, or NULL
    float *out;        // the tile's first output
    int ostep;         // floats between output positions
    int relu;
} fwd_args;

static ALWAYS_INLINE void fwd_run(const int NB, const int MV, vf *acc, const fwd_args *t) {
#pragma GCC unroll 64
    for (int i = 0; i < NB * MV; i++) acc[i] = v_zero();
    const int C = t->C, K = t->K, ldw = t->ldw, ps = t->pstep;
    const float *wp = t->w;
    for (int c = 0; c < C; c++) {
        for (int kh = 0; kh < K; kh++) {
            const float *ip = t->in + c + kh * t->rowstep;
            for (int kw = 0; kw < K; kw++, ip += t->Cs, wp += ldw) {
                vf w[3];
#pragma GCC unroll 4
                for (int m = 0; m < MV; m++) w[m] = v_load(wp + m * VL);
#pragma GCC unroll 32
                for (int j = 0; j < NB; j++) {
                    const vf x = v_set1(ip[j * ps]);
#pragma GCC unroll 4
                    for (int m = 0; m < MV; m++) acc[j * MV + m] = v_fma(x, w[m], acc[j * MV + m]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MV; m++) {
        const vf b = t->bias ? v_load(t->bias + m * VL) : v_zero();
#pragma GCC unroll 32
        for (int j = 0; j < NB; j++) {
            vf v = t->bias ? v_add(acc[j * MV + m], b) : acc[j * MV + m];
            v_store(t->out + (size_t)j * t->ostep + m * VL, t->relu ? v_relu(v) : v);
        }
    }
}

typedef struct dw_args {
    const float *in;  // padded input of the sample
    const int *off;   // R offsets: tap (kh,kw) and channel c of row r, from a position's base
    int OH, OW;
    int pstep, rowstep; // floats between output positions' bases along a row / between rows
    const float *g;   // output gradient at (0,0), the tile's first channel vector
    int gstep, growstep;
    double *dw;       // transposed weight-gradient sums [r][ldw], tile's first vector
    int ldw;
} dw_args;

// dwT[r][oc] += sum over output positions p of in(p + tap(r), channel(r)) * g(p, oc). The
// sums over a sample's positions are float; the sums over samples double, so a thread's total
// does not depend on how its samples were grouped into calls beyond float rounding of one sum.
static ALWAYS_INLINE void dw_run(const int R, const int MV, vf *acc, const dw_args *t) {
    int off[TILE_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) off[r] = t->off[r];
#pragma GCC unroll 64
    for (int i = 0; i < R * MV; i++) acc[i] = v_zero();
    for (int oh = 0; oh < t->OH; oh++) {
        const float *ib = t->in + (size_t)oh * t->rowstep;
        const float *gp = t->g + (size_t)oh * t->growstep;
        for (int ow = 0; ow < t->OW; ow++, ib += t->pstep, gp += t->gstep) {
            vf g[3];
#pragma GCC unroll 4
            for (int m = 0; m < MV; m++) g[m] = v_load(gp + m * VL);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                const vf x = v_set1(ib[off[r]]);
#pragma GCC unroll 4
                for (int m = 0; m < MV; m++) acc[r * MV + m] = v_fma(x, g[m], acc[r * MV + m]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (int m = 0; m < MV; m++)
            v_add_to_double(t->dw + (size_t)r * t->ldw + m * VL, acc[r * MV + m]);
    }
}

typedef void (*fwd_fn)(const fwd_args *);
typedef void (*dw_fn)(const dw_args *);

// One function per tile size, so that every accumulator is a named register.
#define LIST8(X, M) X(1, M) X(2, M) X(3, M) X(4, M) X(5, M) X(6, M) X(7, M) X(8, M)
#define LIST9(X, M) LIST8(X, M) X(9, M)
#define LIST12(X, M) LIST9(X, M) X(10, M) X(11, M) X(12, M)
#define LIST14(X, M) LIST12(X, M) X(13, M) X(14, M)
#define LIST16(X, M) LIST14(X, M) X(15, M) X(16, M)
#define DEF_FWD(N, M)                                                                          \
    static void fwd_tile_##N##_##M(const fwd_args *t) {                                        \
        vf acc[(N) * (M)];                                                                     \
        fwd_run(N, M, acc, t);                                                                 \
    }
#define DEF_DW(N, M)                                                                           \
    static void dw_tile_##N##_##M(const dw_args *t) {                                          \
        vf acc[(N) * (M)];                                                                     \
        dw_run(N, M, acc, t);                                                                  \
    }
#define PTR_FWD(N, M) fwd_tile_##N##_##M,
#define PTR_DW(N, M) dw_tile_##N##_##M,
LIST16(DEF_FWD, 1)
LIST14(DEF_FWD, 2)
LIST9(DEF_FWD, 3)
LIST16(DEF_DW, 1)
LIST12(DEF_DW, 2)
LIST8(DEF_DW, 3)
static const fwd_fn fwd_tiles1[] = {NULL, LIST16(PTR_FWD, 1)};
static const fwd_fn fwd_tiles2[] = {NULL, LIST14(PTR_FWD, 2)};
static const fwd_fn fwd_tiles3[] = {NULL, LIST9(PTR_FWD, 3)};
static const dw_fn dw_tiles1[] = {NULL, LIST16(PTR_DW, 1)};
static const dw_fn dw_tiles2[] = {NULL, LIST12(PTR_DW, 2)};
static const dw_fn dw_tiles3[] = {NULL, LIST8(PTR_DW, 3)};
static const int fwd_nb_max[] = {0, FWD_NB_MAX1, FWD_NB_MAX2, FWD_NB_MAX3};
static const int dw_r_max[] = {0, DW_R_MAX1, DW_R_MAX2, DW_R_MAX3};

// Vectors of output channels handled together: 1, 2 or 3 while they last, else pairs (a
// 14x2 tile keeps more accumulators busy than a 6x4 one), with a final 3 for an odd count.
static int group_mv(int left) {
    return left <= 3 ? left : (left == 5 ? 3 : 2);
}

// Splits n into nblk nearly equal blocks of at most max: block i's length.
static int block_len(int n, int max, int i) {
    int nblk = (n + max - 1) / max, base = n / nblk, rem = n % nblk;
    return base + (i < rem);
}

// out (OH,OW,ldo) = conv of the padded input (rows of Wp positions, channel stride Cs,
// C channels used) with packed weights w [(c*K+kh)*K+kw][ldw]; ldw/VL vectors of outputs.
static void fwd_rows(float *out, int ldo, const float *in, int Wp, int Cs, int C, int K,
                     int stride, int OH, int OW, const float *w, int ldw, const float *bias,
                     int relu) {
    fwd_args t = {.pstep = stride * Cs, .rowstep = Wp * Cs, .Cs = Cs, .C = C, .K = K,
                  .ldw = ldw, .ostep = ldo, .relu = relu};
    const int nv = ldw / VL;
    for (int v0 = 0; v0 < nv;) {
        const int mv = group_mv(nv - v0), nbmax = fwd_nb_max[mv];
        const fwd_fn *tiles = mv == 1 ? fwd_tiles1 : mv == 2 ? fwd_tiles2 : fwd_tiles3;
        t.w = w + v0 * VL;
        t.bias = bias ? bias + v0 * VL : NULL;
        for (int oh = 0; oh < OH; oh++) {
            for (int ow = 0, i = 0; ow < OW; i++) {
                const int nb = block_len(OW, nbmax, i);
                t.in = in + ((size_t)oh * stride * Wp + (size_t)ow * stride) * Cs;
                t.out = out + ((size_t)oh * OW + ow) * ldo + v0 * VL;
                tiles[nb](&t);
                ow += nb;
            }
        }
        v0 += mv;
    }
}

// Copies one sample (H,W,Cs) into the interior of its zero-bordered buffer (border untouched).
static void pad_interior(float *dst, const float *src, int H, int W, int Cs, int Wp, int pad) {
    const size_t row = (size_t)W * Cs;
    for (int h = 0; h < H; h++)
        memcpy(dst + ((size_t)(h + pad) * Wp + pad) * Cs, src + h * row, row * sizeof *dst);
}

// Marks in zf (OH*OW bytes) the outputs of a stride-1 K x K convolution whose receptive field
// in the padded input pin holds only zeros (channels < C); nz (Hp*Wp bytes) is work space.
// Returns how many there are.
static int zero_fields(unsigned char *zf, unsigned char *nz, const float *pin, const nhwc_plan *p,
                       const conv_geom *g) {
    const int C = g->C, Cs = g->Cs, K = g->K, Wp = p->Wp, OW = g->OW;
    const size_t n_in = (size_t)p->Hp * Wp;
    for (size_t i = 0; i < n_in; i++) {
        const float *x = pin + i * Cs;
        int any = 0;
        for (int c0 = 0; c0 < C; c0 += VL)
            any |= v_any_nonzero(C - c0 < VL ? v_load_n(x + c0, C - c0) : v_load(x + c0));
        nz[i] = (unsigned char)any;
    }
    // Along rows, in place (each position looks right only), then down the columns.
    for (int h = 0; h < p->Hp; h++) {
        unsigned char *r = nz + (size_t)h * Wp;
        for (int ow = 0; ow < OW; ow++) {
            unsigned char v = r[ow];
            for (int kw = 1; kw < K; kw++) v |= r[ow + kw];
            r[ow] = v;
        }
    }
    int n = 0;
    for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            unsigned char v = 0;
            for (int kh = 0; kh < K; kh++) v |= nz[(size_t)(oh + kh) * Wp + ow];
            zf[oh * OW + ow] = !v;
            n += !v;
        }
    return n;
}

void conv_nhwc_forward_one(float *out, const float *in, const float *pack, const conv_geom *g,
                             int relu, float *scratch) {
    const nhwc_plan p = conv_nhwc_plan(g);
    pad_interior(scratch, in, g->H, g->W, g->Cs, p.Wp, g->pad);
    const int m = conv_wino_m(g, g->fwd, CONV_DIR_FWD);
    if (!m) {
        fwd_rows(out, p.OCs, scratch, p.Wp, g->Cs, g->C, g->K, g->stride, g->OH, g->OW, pack,
                 p.OCs, pack + p.nw, relu);
        return;
    }
    const int th = wino_tiles(g->OH, m), tw = wino_tiles(g->OW, m), nv = p.OCs / VL;
    float *V = scratch + scr_wa_off(&p), *M = scratch + scr_wb_off(&p);
    wino_input(V, p.CV, scratch, p.Wp * g->Cs, g->Cs, g->C, m, g->K, th, tw);
    wino_gemm(M, p.OCs, nv, V, p.CV, g->C, pack + pack_u_off(&p), p.OCs, th * tw, m, g->K);
    // Outputs that see only zeros (an image's blank background, and what a relu made of it
    // after zero biases) are exactly the bias direct, and a relu or max pool after them sees
    // exact ties there; Winograd would leave noise of the size of its rounding instead.
    unsigned char *zf = (unsigned char *)(scratch + scr_zf_off(&p)), *nz = zf + g->OH * g->OW;
    const int exact = zero_fields(zf, nz, scratch, &p, g);
    wino_output(out, p.OCs, nv, M, p.OCs, pack + p.nw, relu, exact ? zf : NULL, m, g->K, th, tw,
                g->OH, g->OW);
}

// Input gradient by scattering each output's gradient through the kernel; any stride and
// padding. din (H,W,Cs) is overwritten; gr is (OH,OW,OCs) with rows grow floats apart, and wf
// the pack's flipped kernel [(oc*K+kh)*K+kw][Cs] (tap t of w at K*K-1-t): for each output
// position and tap, din's channels += g[oc] x a row of wf, oc by oc, over contiguous channels
// (vectorised by the compiler for this copy's instruction set).
static void din_scatter(float *din, const float *gr, int grow, const float *wf,
                        const conv_geom *g, int OCs) {
    const int K = g->K, KK = K * K, C = g->C, Cs = g->Cs;
    memset(din, 0, (size_t)g->H * g->W * Cs * sizeof *din);
    for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
            const float *gv = gr + (size_t)oh * grow + (size_t)ow * OCs;
            for (int kh = 0; kh < K; kh++) {
                const int ih = oh * g->stride - g->pad + kh;
                if (ih < 0 || ih >= g->H) continue;
                for (int kw = 0; kw < K; kw++) {
                    const int iw = ow * g->stride - g->pad + kw;
                    if (iw < 0 || iw >= g->W) continue;
                    float *restrict d = din + ((size_t)ih * g->W + iw) * Cs;
                    const float *wr = wf + (size_t)(KK - 1 - (kh * K + kw)) * Cs;
                    for (int oc = 0; oc < g->OC; oc++) {
                        const float go = gv[oc];
                        const float *restrict wo = wr + (size_t)oc * KK * Cs;
                        for (int c = 0; c < C; c++) d[c] += go * wo[c];
                    }
                }
            }
        }
}

// One sample's weight gradient into the thread's transposed sums dwt [(kh*K+kw)*C+c][OCs].
static void dw_sample(double *dwt, const float *pin, const float *gr, int grow, int Wp,
                      const conv_geom *g, int OCs) {
    const int rows = g->K * g->K * g->C, nv = OCs / VL;
    int off[DW_R_MAX1];
    dw_args t = {.in = pin, .off = off, .OH = g->OH, .OW = g->OW, .pstep = g->stride * g->Cs,
                 .rowstep = g->stride * Wp * g->Cs, .gstep = OCs, .growstep = grow, .ldw = OCs};
    for (int v0 = 0; v0 < nv;) {
        const int mv = group_mv(nv - v0), rmax = dw_r_max[mv];
        const dw_fn *tiles = mv == 1 ? dw_tiles1 : mv == 2 ? dw_tiles2 : dw_tiles3;
        t.g = gr + v0 * VL;
        for (int r0 = 0, i = 0; r0 < rows; i++) {
            const int nr = block_len(rows, rmax, i);
            for (int r = 0; r < nr; r++) {
                const int tap = (r0 + r) / g->C, c = (r0 + r) % g->C;
                off[r] = ((tap / g->K) * Wp + tap % g->K) * g->Cs + c;
            }
            t.dw = dwt + (size_t)r0 * OCs + v0 * VL;
            tiles[nr](&t);
            r0 += nr;
        }
        v0 += mv;
    }
}

void conv_nhwc_backward_one(float *din, const float *dout, const float *relu_out,
                              const float *in, const float *pack, const conv_geom *g,
                              float *scratch) {
    const nhwc_plan p = conv_nhwc_plan(g);
    const int OCs = p.OCs, row = g->OW * OCs, grow = p.Gw * OCs;
    float *pin = scratch, *gb = scratch + p.pin_n;
    double *dwt = (double *)(scratch + scr_sums_off(&p)), *dbt = dwt + p.nw;
    float *gi = gb + (size_t)p.q * grow + (size_t)p.q * OCs; // the buffer's interior (0,0)
    // The output gradient, masked by the fused relu, into the bordered buffer; and db.
    for (int oh = 0; oh < g->OH; oh++) {
        const float *src = dout + (size_t)oh * row;
        float *dst = gi + (size_t)oh * grow;
        if (!relu_out) {
            memcpy(dst, src, (size_t)row * sizeof *dst);
            continue;
        }
        const float *mr = relu_out + (size_t)oh * row;
        relu_mask(dst, src, mr, (size_t)row);
    }
    for (int v = 0; v < OCs; v += VL) {
        vf acc = v_zero();
        for (int oh = 0; oh < g->OH; oh++)
            for (int ow = 0; ow < g->OW; ow++)
                acc = v_add(acc, v_load(gi + (size_t)oh * grow + ow * OCs + v));
        v_add_to_double(dbt + v, acc);
    }
    pad_interior(pin, in, g->H, g->W, g->Cs, p.Wp, g->pad);
    float *V = scratch + scr_wa_off(&p), *MZ = scratch + scr_wb_off(&p);
    const int mw = conv_wino_m(g, g->dw, CONV_DIR_DW);
    if (mw) {
        // dU[xi] += V[xi]^T Z[xi]: the input's tiles against the output gradient's.
        const int th = wino_tiles(g->OH, mw), tw = wino_tiles(g->OW, mw);
        wino_input(V, p.CV, pin, p.Wp * g->Cs, g->Cs, g->C, mw, g->K, th, tw);
        wino_grad_tiles(MZ, OCs, gi, grow, OCs, g->OC, mw, g->K, th, tw);
        wino_dw_accum((double *)(scratch + scr_dU_off(&p)), OCs, V, p.CV, g->C, MZ, OCs,
                      OCs / VL, th * tw, mw, g->K);
    } else {
        dw_sample(dwt, pin, gi, grow, p.Wp, g, OCs);
    }
    if (!din) return;
    const int md = conv_wino_m(g, g->din, CONV_DIR_DIN);
    if (md) {
        // The forward's three stages on the bordered output gradient, flipped weights.
        const int th = wino_tiles(g->H, md), tw = wino_tiles(g->W, md), nv = g->Cs / VL;
        wino_input(V, OCs, gb, grow, OCs, g->OC, md, g->K, th, tw);
        wino_gemm(MZ, g->Cs, nv, V, OCs, g->OC, pack + pack_uf_off(&p), g->Cs, th * tw, md,
                  g->K);
        wino_output(din, g->Cs, nv, MZ, g->Cs, NULL, 0, NULL, md, g->K, th, tw, g->H, g->W);
    } else if (p.fast_din) {
        fwd_rows(din, g->Cs, gb, p.Gw, OCs, g->OC, g->K, 1, g->H, g->W, pack + pack_flip_off(&p),
                 g->Cs, NULL, 0);
    } else {
        din_scatter(din, gi, grow, pack + pack_flip_off(&p), g, OCs);
    }
}

