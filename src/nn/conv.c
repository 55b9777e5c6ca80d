// 2-D convolution, channels-last (NHWC): direct convolution with register-tiled vector
// kernels, the layout and code the network (net.c) runs on, and for 3x3 and 5x5 stride-1
// layers Winograd F(2x2,3x3)/F(4x4,3x3)/F(2x2,5x5)/F(4x4,5x5) (winograd.c's stages, strung
// together here) in whichever directions conv_geom asks. The NCHW reference it is checked against
// (im2col + SGEMM) is tests/lib/ref.c.
#include "nn/layers.h"

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

#include "core/ht_omp.h"
#include <string.h>

#include "nn/vec.h"
#include "nn/winograd.h"

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

typedef struct nhwc_plan {
    int Hp, Wp;      // padded input (rows and columns enough for Winograd's last tiles too)
    int OCs;         // output channel stride
    int fast_din;    // input gradient by the flipped-kernel convolution
    int q;           // border of the output-gradient buffer (K-1-pad when fast_din, else 0)
    int Gh, Gw;      // output-gradient buffer rows and columns
    int wino;        // Winograd allowed in some direction: its pack and scratch are there
    int CV;          // channel stride of the input's transformed tiles, conv_cpad(C)
    size_t nw;       // K*K*C*OCs packed weights
    size_t nflip;    // K*K*OC*Cs flipped weights (fast_din)
    size_t nu, nuf;  // Winograd weights: a*a*C*OCs (forward) and a*a*OC*Cs (input gradient)
    size_t pin_n, gb_n; // floats of the padded input and of the gradient buffer, rounded up
    size_t sums_n;   // doubles of the dw and db sums
    size_t dU_n;     // doubles of the transformed-domain dw sums (a*a*C*OCs)
    size_t wa_n, wb_n; // floats of the two Winograd work buffers (V; M or Z)
    size_t zf_n;     // floats holding the zero-field bytes (Hp*Wp input, OH*OW output)
} nhwc_plan;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }
static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }
static int max_i(int a, int b) { return a > b ? a : b; }

int conv2d_wino_ok(const conv_geom *g, conv_dir dir) {
    // The transforms' tiles assume the padding of the last rows and columns equals the first's.
    if ((g->K != 3 && g->K != 5) || g->stride != 1 || g->OH != g->H + 2 * g->pad - (g->K - 1) ||
        g->OW != g->W + 2 * g->pad - (g->K - 1))
        return 0;
    return dir != CONV_DIR_DIN || (g->pad <= g->K - 1 && g->Cs % VL == 0);
}

int conv2d_wino_impl_ok(const conv_geom *g, conv_impl impl, conv_dir dir) {
    return (impl == CONV_WINO2 || impl == CONV_WINO4) && wino_has((int)impl, g->K) &&
           conv2d_wino_ok(g, dir);
}

// The Winograd tile size of a direction, 0 for direct; the kernel size r is g->K.
static int wino_m(const conv_geom *g, conv_impl impl, conv_dir dir) {
    return conv2d_wino_impl_ok(g, impl, dir) ? (int)impl : 0;
}

static nhwc_plan nhwc_plan_of(const conv_geom *g) {
    nhwc_plan p;
    // The padded input holds the pad before, the input, and whatever the last window reads
    // past it (the after-pad, which "same" padding may make one wider than the before-pad).
    p.Hp = max_i(g->H + 2 * g->pad, (g->OH - 1) * g->stride + g->K);
    p.Wp = max_i(g->W + 2 * g->pad, (g->OW - 1) * g->stride + g->K);
    p.OCs = conv_cpad(g->OC);
    p.fast_din = g->stride == 1 && g->pad <= g->K - 1 && g->Cs % VL == 0;
    p.q = p.fast_din ? g->K - 1 - g->pad : 0;
    // The flipped-kernel input gradient reads the bordered buffer down to row H+K-2.
    p.Gh = max_i(g->OH + 2 * p.q, p.fast_din ? g->H + g->K - 1 : 0);
    p.Gw = max_i(g->OW + 2 * p.q, p.fast_din ? g->W + g->K - 1 : 0);
    p.wino = conv2d_wino_ok(g, CONV_DIR_FWD);
    p.CV = conv_cpad(g->C);
    p.nu = p.nuf = p.dU_n = p.wa_n = p.wb_n = 0;
    if (p.wino) {
        const int wdin = conv2d_wino_ok(g, CONV_DIR_DIN), r = g->K;
        size_t a2max = 0;
        for (int m = 2; m <= 4; m += 2) {
            if (!wino_has(m, r)) continue;
            const size_t a2 = (size_t)wino_alpha(m, r) * wino_alpha(m, r);
            const int th = wino_tiles(g->OH, m), tw = wino_tiles(g->OW, m);
            const int ih = wino_tiles(g->H, m), iw = wino_tiles(g->W, m);
            a2max = max_z(a2max, a2);
            // Forward and weight-gradient tiles read the padded input up to row th*m + r - 2;
            // the weight gradient reads the output gradient's tiles (at the border q) up to
            // q + th*m - 1, the input gradient its patches up to ih*m + r - 2.
            p.Hp = max_i(p.Hp, th * m + r - 1);
            p.Wp = max_i(p.Wp, tw * m + r - 1);
            p.Gh = max_i(p.Gh, p.q + th * m);
            p.Gw = max_i(p.Gw, p.q + tw * m);
            size_t T = (size_t)th * tw;
            p.wa_n = max_z(p.wa_n, a2 * T * p.CV);
            p.wb_n = max_z(p.wb_n, a2 * T * p.OCs);
            if (wdin) {
                p.Gh = max_i(p.Gh, ih * m + r - 1);
                p.Gw = max_i(p.Gw, iw * m + r - 1);
                size_t Ti = (size_t)ih * iw;
                p.wa_n = max_z(p.wa_n, a2 * Ti * p.OCs);
                p.wb_n = max_z(p.wb_n, a2 * Ti * g->Cs);
            }
        }
        p.nu = a2max * g->C * p.OCs;
        p.nuf = wdin ? a2max * g->OC * g->Cs : 0;
        p.dU_n = a2max * g->C * p.OCs;
        p.wa_n = round16(p.wa_n);
        p.wb_n = round16(p.wb_n);
    }
    p.nw = (size_t)g->K * g->K * g->C * p.OCs;
    p.nflip = p.fast_din ? (size_t)g->K * g->K * g->OC * g->Cs : 0;
    p.zf_n = p.wino ? round16(((size_t)p.Hp * p.Wp + (size_t)g->OH * g->OW + 3) / 4) : 0;
    p.pin_n = round16((size_t)p.Hp * p.Wp * g->Cs);
    p.gb_n = round16((size_t)p.Gh * p.Gw * p.OCs);
    p.sums_n = p.nw + p.OCs;
    return p;
}

// The pack: w transposed, bias, flipped kernel, then the Winograd weights (forward, input
// gradient); the scratch: padded input, gradient buffer, dw/db sums (double), transformed dw
// sums (double), the two Winograd work buffers. Offsets in floats:
static size_t pack_flip_off(const nhwc_plan *p) { return round16(p->nw + p->OCs); }
static size_t pack_u_off(const nhwc_plan *p) { return pack_flip_off(p) + round16(p->nflip); }
static size_t pack_uf_off(const nhwc_plan *p) { return pack_u_off(p) + round16(p->nu); }
static size_t scr_sums_off(const nhwc_plan *p) { return p->pin_n + p->gb_n; }
static size_t scr_dU_off(const nhwc_plan *p) { return scr_sums_off(p) + round16(2 * p->sums_n); }
static size_t scr_wa_off(const nhwc_plan *p) { return scr_dU_off(p) + round16(2 * p->dU_n); }
static size_t scr_wb_off(const nhwc_plan *p) { return scr_wa_off(p) + p->wa_n; }
static size_t scr_zf_off(const nhwc_plan *p) { return scr_wb_off(p) + p->wb_n; }

size_t conv2d_nhwc_pack_floats(const conv_geom *g) {
    nhwc_plan p = nhwc_plan_of(g);
    return pack_uf_off(&p) + round16(p.nuf);
}

size_t conv2d_nhwc_scratch_floats(const conv_geom *g) {
    nhwc_plan p = nhwc_plan_of(g);
    return scr_zf_off(&p) + p.zf_n;
}

// Zeroes what must start at zero: the buffers' borders and the sums (the work buffers are
// written before they are read).
void conv2d_nhwc_scratch_init(float *scratch, const conv_geom *g) {
    nhwc_plan p = nhwc_plan_of(g);
    memset(scratch, 0, scr_wa_off(&p) * sizeof *scratch);
}

// ---- convolutions as GEMMs over the batch ---------------------------------------------------
// A convolution is one matrix product over every output position of the batch: out (B*OH*OW,
// OC) = cols (B*OH*OW, C*K*K) * w^T, a row of cols holding the K x K window of one output
// position in w's (c, kh, kw) order (zero where it reads padding), so w (OC,C,K,K) and its
// gradient are the other factor as they are, and each output is summed in the order the NCHW
// reference and the OpenCL path sum it, then the bias added. A 1x1 convolution without
// padding needs no copy at stride 1: its rows are the input's, Cs apart. One SGEMM over the
// batch instead of a kernel per sample streaming all of w for a few positions: the layers of
// ResNet's and MobileNet's later stages (1x1, or 2x2 to 8x8 positions at 64x64 inputs) ran at
// a tenth of the machine's speed per sample. Rows go through in chunks (gemm_rows_per), so the
// scratch does not grow with the batch.
static size_t gemm_ckk(const conv_geom *g) { return (size_t)g->K * g->K * g->C; }
// Whether rows are read in place (no cols copy).
static int gemm_in_place(const conv_geom *g) { return g->K == 1 && g->pad == 0 && g->stride == 1; }
// Rows of a chunk: about 2^20 floats of cols, 16..512 rows.
static int gemm_rows_per(const conv_geom *g) {
    size_t r = ((size_t)1 << 20) / gemm_ckk(g);
    return r < 16 ? 16 : r > 512 ? 512 : (int)r;
}
// The scratch: a chunk's output gradient masked by a fused relu (rows x OC), its cols, and the
// cols' gradient (rows x C*K*K each).
static size_t gemm_cols_off(const conv_geom *g) {
    return (size_t)gemm_rows_per(g) * round16((size_t)g->OC);
}
static size_t gemm_ws_floats(const conv_geom *g) {
    return gemm_cols_off(g) + 2 * (size_t)gemm_rows_per(g) * round16(gemm_ckk(g));
}

size_t conv2d_nhwc_ws_floats(const conv_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return max_z(conv2d_nhwc_pack_floats(g) + (size_t)nthreads * conv2d_nhwc_scratch_floats(g),
                 gemm_ws_floats(g));
}

// Output row r (b, oh, ow): its sample and its window's top-left corner in the input.
static void gemm_window(long r, const conv_geom *g, long *b, int *y0, int *x0) {
    const long hw = (long)g->OH * g->OW, o = r % hw;
    *b = r / hw;
    *y0 = (int)(o / g->OW) * g->stride - g->pad;
    *x0 = (int)(o % g->OW) * g->stride - g->pad;
}

// Rows [r0, r0 + m) of cols: in place (ld Cs) when they are the input's rows, else copied into
// buf (ld C*K*K).
static const float *gemm_cols(const float *in, long r0, int m, const conv_geom *g, float *buf,
                              int *ld, int nt) {
    (void)nt; // without OpenMP
    if (gemm_in_place(g)) {
        *ld = g->Cs;
        return in + r0 * g->Cs;
    }
    const int K = g->K, KK = K * K, C = g->C;
    *ld = (int)gemm_ckk(g);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < m; i++) {
        long b;
        int y0, x0;
        gemm_window(r0 + i, g, &b, &y0, &x0);
        float *row = buf + (size_t)i * gemm_ckk(g);
        for (int kh = 0, t = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++, t++) {
                const int y = y0 + kh, x = x0 + kw;
                const int inside = y >= 0 && y < g->H && x >= 0 && x < g->W;
                const float *px = in + ((b * g->H + (inside ? y : 0)) * g->W + (inside ? x : 0)) * g->Cs;
                for (int c = 0; c < C; c++) row[c * KK + t] = inside ? px[c] : 0.0f;
            }
    }
    return buf;
}

// din += the cols' gradient of rows [r0, r0 + m) (ld C*K*K), each tap to where it was read.
// The windows of one sample overlap, so a sample's rows go in order on one thread.
static void gemm_col2im(float *din, long r0, int m, const float *dcols, const conv_geom *g,
                        int nt) {
    (void)nt; // without OpenMP
    const int K = g->K, KK = K * K, C = g->C;
    const long hw = (long)g->OH * g->OW, b0 = r0 / hw, b1 = (r0 + m - 1) / hw;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long b = b0; b <= b1; b++) {
        const long lo = b * hw > r0 ? b * hw : r0;
        const long hi = (b + 1) * hw < r0 + m ? (b + 1) * hw : r0 + m;
        for (long r = lo; r < hi; r++) {
            long bb;
            int y0, x0;
            gemm_window(r, g, &bb, &y0, &x0);
            const float *row = dcols + (size_t)(r - r0) * gemm_ckk(g);
            for (int kh = 0, t = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++, t++) {
                    const int y = y0 + kh, x = x0 + kw;
                    if (y < 0 || y >= g->H || x < 0 || x >= g->W) continue;
                    float *d = din + ((b * g->H + y) * g->W + x) * g->Cs;
                    for (int c = 0; c < C; c++) d[c] += row[c * KK + t];
                }
        }
    }
}

static void gemm_forward(float *out, const float *in, const float *w, const float *b, int B,
                         const conv_geom *g, int relu, float *ws, int nt) {
    const int OCs = conv_cpad(g->OC), OC = g->OC, ckk = (int)gemm_ckk(g);
    const long M = (long)B * g->OH * g->OW;
    const int rows = gemm_in_place(g) ? (int)M : gemm_rows_per(g);
    for (long r0 = 0; r0 < M; r0 += rows) {
        const int m = (int)(M - r0 < rows ? M - r0 : rows);
        int lda;
        const float *a = gemm_cols(in, r0, m, g, ws + gemm_cols_off(g), &lda, nt);
        sgemm_split(CblasNoTrans, CblasTrans, m, OC, ckk, a, lda, w, ckk, 0.0f, out + r0 * OCs,
                    OCs, nt, SPLIT_M, 16);
    }
    // The bias after the sum (as the direct path adds it), the relu, the pad channels zero.
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long r = 0; r < M; r++) {
        float *o = out + r * OCs;
        for (int k = 0; k < OC; k++) {
            float v = b ? o[k] + b[k] : o[k];
            o[k] = relu && !(v > 0.0f) ? 0.0f : v;
        }
        for (int k = OC; k < OCs; k++) o[k] = 0.0f;
    }
}

static void gemm_backward(float *din, float *dw, float *db, const float *dout,
                          const float *relu_out, const float *in, const float *w, int B,
                          const conv_geom *g, float *ws, int nt) {
    const int OCs = conv_cpad(g->OC), C = g->C, OC = g->OC, ckk = (int)gemm_ckk(g);
    const long M = (long)B * g->OH * g->OW;
    float *gbuf = ws, *cols = ws + gemm_cols_off(g);
    float *dcols = cols + (size_t)gemm_rows_per(g) * round16(gemm_ckk(g));
    if (din && !gemm_in_place(g)) memset(din, 0, sizeof(float) * (size_t)B * g->H * g->W * g->Cs);
    const int rows = gemm_rows_per(g);
    for (long r0 = 0; r0 < M; r0 += rows) {
        const int m = (int)(M - r0 < rows ? M - r0 : rows);
        const float *gr = dout + r0 * OCs;
        int ldg = OCs, lda;
        if (relu_out) { // the fused relu's backward
            const float *ro = relu_out + r0 * OCs;
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int i = 0; i < m; i++)
                for (int k = 0; k < OC; k++)
                    gbuf[(size_t)i * OC + k] =
                        ro[(size_t)i * OCs + k] > 0.0f ? gr[(size_t)i * OCs + k] : 0.0f;
            gr = gbuf, ldg = OC;
        }
        const float *a = gemm_cols(in, r0, m, g, cols, &lda, nt);
        sgemm_split(CblasTrans, CblasNoTrans, OC, ckk, m, gr, ldg, a, lda, 1.0f, dw, ckk, nt,
                    SPLIT_LONGER, 16);
        for (int i = 0; db && i < m; i++)
            for (int k = 0; k < OC; k++) db[k] += gr[(size_t)i * ldg + k];
        if (!din) continue;
        if (gemm_in_place(g)) {
            sgemm_split(CblasNoTrans, CblasNoTrans, m, C, OC, gr, ldg, w, C, 0.0f,
                        din + r0 * g->Cs, g->Cs, nt, SPLIT_LONGER, 16);
        } else {
            sgemm_split(CblasNoTrans, CblasNoTrans, m, ckk, OC, gr, ldg, w, ckk, 0.0f, dcols,
                        ckk, nt, SPLIT_LONGER, 16);
            gemm_col2im(din, r0, m, dcols, g, nt);
        }
    }
    for (long r = 0; din && g->Cs > C && r < (long)B * g->H * g->W; r++)
        memset(din + r * g->Cs + C, 0, sizeof(float) * (size_t)(g->Cs - C));
}

// The pack: w transposed as [(c*K+kh)*K+kw][OCs], then b as [OCs] (zero in the pad columns),
// then, for the input gradient, the flipped kernel [(oc*K+kh)*K+kw][Cs] holding
// w[oc][c][K-1-kh][K-1-kw] (zero for c >= C); then the Winograd weights of the directions g
// runs by Winograd (winograd.h's U for the forward, [xi][c][OCs], and for the input gradient,
// [xi][oc][Cs]).
void conv2d_nhwc_pack(float *pack, const float *w, const float *b, const conv_geom *g) {
    const nhwc_plan p = nhwc_plan_of(g);
    const int K = g->K, C = g->C, OC = g->OC, OCs = p.OCs, Cs = g->Cs;
    const size_t rows = (size_t)K * K * C;
    float *wp = pack, *bp = pack + p.nw, *wf = pack + pack_flip_off(&p);
    memset(wp, 0, (p.nw + OCs) * sizeof *wp);
    for (int oc = 0; oc < OC; oc++)
        for (size_t r = 0; r < rows; r++) wp[r * OCs + oc] = w[(size_t)oc * rows + r];
    if (b) memcpy(bp, b, (size_t)OC * sizeof *bp);
    const int mf = wino_m(g, g->fwd, CONV_DIR_FWD), md = wino_m(g, g->din, CONV_DIR_DIN);
    if (mf) wino_weights(pack + pack_u_off(&p), OCs, w, C, OC, mf, K, 0);
    if (md) wino_weights(pack + pack_uf_off(&p), Cs, w, C, OC, md, K, 1);
    if (!p.fast_din || md) return;
    memset(wf, 0, p.nflip * sizeof *wf);
    for (int oc = 0; oc < OC; oc++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < K * K; t++)
                wf[((size_t)oc * K * K + (K * K - 1 - t)) * Cs + c] =
                    w[((size_t)oc * C + c) * K * K + t];
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

void conv2d_nhwc_forward_one(float *out, const float *in, const float *pack, const conv_geom *g,
                             int relu, float *scratch) {
    const nhwc_plan p = nhwc_plan_of(g);
    pad_interior(scratch, in, g->H, g->W, g->Cs, p.Wp, g->pad);
    const int m = wino_m(g, g->fwd, CONV_DIR_FWD);
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

void conv2d_nhwc_forward(float *out, const float *in, const float *w, const float *b, int B,
                         const conv_geom *g, int relu, float *ws, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (g->fwd == CONV_GEMM) {
        gemm_forward(out, in, w, b, B, g, relu, ws, nthreads);
        return;
    }
    const size_t in_s = (size_t)g->H * g->W * g->Cs;
    const size_t out_s = (size_t)g->OH * g->OW * conv_cpad(g->OC);
    const size_t pack_n = conv2d_nhwc_pack_floats(g), scr_n = conv2d_nhwc_scratch_floats(g);
    conv2d_nhwc_pack(ws, w, b, g);
#pragma omp parallel num_threads(nthreads)
    {
        float *scr = ws + pack_n + (size_t)omp_get_thread_num() * scr_n;
        conv2d_nhwc_scratch_init(scr, g);
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++)
            conv2d_nhwc_forward_one(out + s * out_s, in + s * in_s, ws, g, relu, scr);
    }
}

// Input gradient by scattering each output's gradient through the kernel; any stride and
// padding. din (H,W,Cs) is overwritten; gr is (OH,OW,OCs) with rows grow floats apart, and wp
// the forward packing.
static void din_scatter(float *din, const float *gr, int grow, const float *wp,
                        const conv_geom *g, int OCs) {
    const int K = g->K, C = g->C, Cs = g->Cs;
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
                    float *d = din + ((size_t)ih * g->W + iw) * Cs;
                    const float *wr = wp + (size_t)(kh * K + kw) * OCs;
                    for (int c = 0; c < C; c++, wr += (size_t)K * K * OCs) {
                        float acc = 0.0f;
                        for (int oc = 0; oc < g->OC; oc++) acc += gv[oc] * wr[oc];
                        d[c] += acc;
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

void conv2d_nhwc_backward_one(float *din, const float *dout, const float *relu_out,
                              const float *in, const float *pack, const conv_geom *g,
                              float *scratch) {
    const nhwc_plan p = nhwc_plan_of(g);
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
        for (int i = 0; i < row; i++) dst[i] = mr[i] > 0.0f ? src[i] : 0.0f;
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
    const int mw = wino_m(g, g->dw, CONV_DIR_DW);
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
    const int md = wino_m(g, g->din, CONV_DIR_DIN);
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
        din_scatter(din, gi, grow, pack, g, OCs);
    }
}

void conv2d_nhwc_scratch_reduce(float *dw, float *db, const float *scratch, size_t stride,
                                int n, const conv_geom *g) {
    const nhwc_plan p = nhwc_plan_of(g);
    const int K = g->K, C = g->C, OC = g->OC, OCs = p.OCs;
    const int mw = wino_m(g, g->dw, CONV_DIR_DW);
#define SUMS(t) ((const double *)(scratch + (size_t)(t) * stride + scr_sums_off(&p)))
    if (mw) // the sums are in the transformed domain: added over threads, then brought back
        wino_dw_finish(dw, (const double *)(scratch + scr_dU_off(&p)), stride / 2, n, OCs, C, OC,
                       mw, K);
    else
        for (int r = 0; r < K * K * C; r++) {
            const int tap = r / C, c = r % C;
            for (int oc = 0; oc < OC; oc++) {
                double acc = 0.0;
                for (int t = 0; t < n; t++) acc += SUMS(t)[(size_t)r * OCs + oc];
                dw[((size_t)oc * C + c) * K * K + tap] += (float)acc;
            }
        }
    for (int oc = 0; db && oc < OC; oc++) {
        double acc = 0.0;
        for (int t = 0; t < n; t++) acc += SUMS(t)[p.nw + oc];
        db[oc] += (float)acc;
    }
#undef SUMS
}

void conv2d_nhwc_backward(float *din, float *dw, float *db, const float *dout,
                          const float *relu_out, const float *in, const float *w, int B,
                          const conv_geom *g, float *ws, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (g->dw == CONV_GEMM) {
        gemm_backward(din, dw, db, dout, relu_out, in, w, B, g, ws, nthreads);
        return;
    }
    const size_t in_s = (size_t)g->H * g->W * g->Cs;
    const size_t out_s = (size_t)g->OH * g->OW * conv_cpad(g->OC);
    const size_t pack_n = conv2d_nhwc_pack_floats(g), scr_n = conv2d_nhwc_scratch_floats(g);
    conv2d_nhwc_pack(ws, w, NULL, g);
    int nt = nthreads;
#pragma omp parallel num_threads(nthreads)
    {
        float *scr = ws + pack_n + (size_t)omp_get_thread_num() * scr_n;
        conv2d_nhwc_scratch_init(scr, g);
#pragma omp single nowait
        nt = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++)
            conv2d_nhwc_backward_one(din ? din + s * in_s : NULL, dout + s * out_s,
                                     relu_out ? relu_out + s * out_s : NULL, in + s * in_s, ws,
                                     g, scr);
    }
    conv2d_nhwc_scratch_reduce(dw, db, ws + pack_n, scr_n, nt, g);
}

// ---- the conv family: its description (layer_desc.h) and the CPU path's ops (net_layers.h) ----

// The window checks conv and dwconv share (layer_desc.h).
int layer_kernel_window(layer *L, const layer_spec *s, const char *kname, int idx,
                        ht_error *err) {
    if (s->k < 1 || s->k > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): kernel size %d: expected 1..%d", idx, kname, s->k,
                       MODEL_MAX_K);
    int stride = s->stride ? s->stride : 1;
    if (stride < 1 || stride > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): stride %d: expected 1..%d", idx, kname, stride,
                       MODEL_MAX_K);
    if (s->pad > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): pad %d: expected 0..%d", idx, kname, s->pad,
                       MODEL_MAX_K);
    if (s->pad >= 0 && (L->h + 2 * s->pad < s->k || L->w + 2 * s->pad < s->k))
        return ht_fail(err, "layer %d (%s): kernel %d does not fit input %dx%d (pad %d)", idx,
                       kname, s->k, L->h, L->w, s->pad);
    return layer_window(L, idx, kname, s->k, stride, s->pad, err);
}

static int conv_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                      ht_error *err) {
    (void)n_classes;
    if (s->filters < 1 || s->filters > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (conv): filters %d: expected 1..%d", idx, s->filters,
                       MODEL_MAX_DIM);
    if (layer_kernel_window(L, s, d->name, idx, err)) return -1;
    L->oc = s->filters;
    L->n_w = (size_t)L->oc * L->c * L->k * L->k;
    L->n_b = s->no_bias ? 0 : (size_t)L->oc;
    return 0;
}

static int conv_weight_shape(const layer *L, int64_t *shape) {
    shape[0] = L->oc, shape[1] = L->c, shape[2] = L->k, shape[3] = L->k;
    return 4;
}

static void conv_fans(const layer *L, double *fan_in, double *fan_out) {
    *fan_in = (double)L->c * L->k * L->k, *fan_out = (double)L->oc * L->k * L->k;
}

static double conv_macs(const layer *L) {
    return (double)L->oc * L->oh * L->ow * L->c * L->k * L->k;
}

static const layer_key conv_keys[] = {
    LK_ROW("filters", NULL, LK_INT, LK_REQUIRED, filters, 1, 65536),
    LK_ROW("size", "kernel_size", LK_INT, LK_REQUIRED, k, 1, 64),
    LK_ROW("stride", "strides", LK_INT, 0, stride, 1, 64),
    LK_ROW("pad", "padding", LK_PAD, 0, pad, 0, 64),
    LK_WEIGHT_ROWS,
    LK_END,
};
static const char *const conv_sections[] = {"convolutional", NULL}; // darknet's
static const layer_keras_var conv_keras_vars[] = {
    {"kernel", 0, TENSOR_TRAINABLE, LKW_CONV, 1},
    {"bias", 1, TENSOR_TRAINABLE, LKW_SAME, 0},
};

const layer_family family_conv = {
    .name = "conv", .flags = LF_PARAMS | LF_SPATIAL | LF_WINDOW | LF_KERNEL, .keys = conv_keys,
    .sections = conv_sections, .shape = conv_shape, .weight_shape = conv_weight_shape,
    .macs = conv_macs, .fans = conv_fans, .keras_vars = conv_keras_vars, .n_keras_vars = 2};

static void conv_forward(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_forward(c->out, c->in, c->params + c->L->w_off, net_bias(c->params, c->L), c->B,
                        &g, c->p->fuse_relu, c->scratch, c->nt);
}
static float *conv_backward(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_backward(c->din, c->grads + c->L->w_off, net_bias(c->grads, c->L), c->dout,
                         c->p->fuse_relu ? c->out : NULL, c->in, c->params + c->L->w_off, c->B,
                         &g, c->scratch, c->nt);
    return c->din;
}
static void conv_forward_one(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_forward_one(c->out, c->in, c->pack, &g, c->p->fuse_relu, c->scratch);
}
static float *conv_backward_one(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_backward_one(c->din, c->dout, c->p->fuse_relu ? c->out : NULL, c->in, c->pack,
                             &g, c->scratch);
    return c->din;
}

static int conv_out_cs(const layer *L, int in_cs) {
    (void)in_cs;
    return conv_cpad(L->oc);
}
static size_t conv_ws_floats(const layer *L, const net_lplan *p, int nthreads) {
    conv_geom g = net_conv_geom(L, p);
    return conv2d_nhwc_ws_floats(&g, nthreads);
}
static size_t conv_pack_floats(const layer *L, const net_lplan *p) {
    conv_geom g = net_conv_geom(L, p);
    return conv2d_nhwc_pack_floats(&g);
}
static size_t conv_scratch_floats(const layer *L, const net_lplan *p) {
    conv_geom g = net_conv_geom(L, p);
    return conv2d_nhwc_scratch_floats(&g);
}
static void conv_pack(float *pack, const float *params, const layer *L, const net_lplan *p) {
    conv_geom g = net_conv_geom(L, p);
    conv2d_nhwc_pack(pack, params + L->w_off, net_bias(params, L), &g);
}
static void conv_scratch_init(float *scratch, const layer *L, const net_lplan *p) {
    conv_geom g = net_conv_geom(L, p);
    conv2d_nhwc_scratch_init(scratch, &g);
}
static void conv_scratch_reduce(float *grads, const float *scratch, size_t tslice, int nt,
                                const layer *L, const net_lplan *p) {
    conv_geom g = net_conv_geom(L, p);
    conv2d_nhwc_scratch_reduce(grads + L->w_off, net_bias(grads, L), scratch, tslice, nt, &g);
}

// Its weight and bias gradients are added to (the trunk's per-thread sums, the batch-wise
// kernels alike), and it applies a relu after it.
const net_layer_ops cpu_conv = {
    .forward = conv_forward, .backward = conv_backward, .forward_one = conv_forward_one,
    .backward_one = conv_backward_one,
    .flags = NET_OP_FUSES_RELU | NET_OP_GRAD_ADDS | NET_OP_CONV_ALGO,
    .out_cs = conv_out_cs, .ws_floats = conv_ws_floats, .pack_floats = conv_pack_floats,
    .scratch_floats = conv_scratch_floats, .pack = conv_pack, .scratch_init = conv_scratch_init,
    .scratch_reduce = conv_scratch_reduce};
