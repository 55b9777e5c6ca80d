// 2-D convolution, channels-last (NHWC), the layout and code the network (net.c) runs on: the
// layer (its description and CPU ops), the batch-wise passes, which run each sample through
// the per-sample kernels of the CPU's instruction set (conv_nhwc.c: direct register-tiled
// vector code, and for 3x3 and 5x5 stride-1 layers Winograd F(2x2,3x3)/F(4x4,3x3)/F(2x2,5x5)/
// F(4x4,5x5) in whichever directions conv_geom asks) or the whole batch as GEMMs, the packing
// of weights and the reduction of per-thread sums. The NCHW reference it is checked against
// (im2col + SGEMM) is tests/lib/ref.c.
#include "nn/layers.h"
#include "nn/batchnorm.h"

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

#include "core/ht_omp.h"
#include <string.h>

#include "nn/isa_kernels.h"
#include "nn/conv_plan.h"
#include "nn/winograd.h"

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

size_t conv2d_nhwc_pack_floats(const conv_geom *g) {
    nhwc_plan p = conv_nhwc_plan(g);
    return pack_uf_off(&p) + round16(p.nuf);
}

size_t conv2d_nhwc_scratch_floats(const conv_geom *g) {
    nhwc_plan p = conv_nhwc_plan(g);
    return scr_zf_off(&p) + p.zf_n;
}

// Zeroes what must start at zero: the buffers' borders and the sums (the work buffers are
// written before they are read).
void conv2d_nhwc_scratch_init(float *scratch, const conv_geom *g) {
    nhwc_plan p = conv_nhwc_plan(g);
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

// ---- taps that only ever read padding ----
// Where the input is so small that whole rows and columns of the kernel meet only padding at
// every output position (keras.applications' 3x3 "same" layers on the 1x1 maps their last stage
// reaches from a 32x32 input), the GEMM would multiply zeros in all but those taps' columns of
// cols: 8 of 9 for a 3x3 on 1x1. It runs the kernel's middle instead: taps [k0, k0 + K') of both
// axes, padding pad - k0 (window corners move by k0, the taps by -k0: every input position a
// kept tap reads is the one it read before), w's middle gathered, the middle's weight gradient
// added back into its taps (the others' gradient is exactly zero: nothing is added to them). A
// 3x3 on 1x1 becomes a 1x1 without padding, whose rows are read in place.

// The taps [*k0, *k0 + return) of one axis that reach the input (size n) at some output
// position (on outputs of stride s).
static int trim_axis(int K, int pad, int s, int n, int on, int *k0) {
    int lo = pad - (on - 1) * s, hi = n + pad;
    if (lo < 0) lo = 0;
    if (hi > K) hi = K;
    *k0 = lo;
    return hi - lo;
}

// Whether g's kernel has taps that only read padding, the same on both axes (square inputs):
// *t the geometry of the taps that remain, *k0 their first. A middle that would run in place
// (1x1, stride 1, no padding) must also keep the input's size.
static int gemm_trim(const conv_geom *g, conv_geom *t, int *k0) {
    int kh0, kw0;
    const int kh = trim_axis(g->K, g->pad, g->stride, g->H, g->OH, &kh0);
    const int kw = trim_axis(g->K, g->pad, g->stride, g->W, g->OW, &kw0);
    if (kh != kw || kh0 != kw0 || kh < 1 || kh >= g->K) return 0;
    *t = *g;
    t->K = kh, t->pad = g->pad - kh0;
    *k0 = kh0;
    return !(gemm_in_place(t) && (g->OH != g->H || g->OW != g->W));
}

// The trimmed product's scratch: w's middle, its gradient, then the GEMM's own.
static size_t trim_w_floats(const conv_geom *t) { return round16((size_t)t->OC * gemm_ckk(t)); }
static size_t trim_ws_floats(const conv_geom *g) {
    conv_geom t;
    int k0;
    return gemm_trim(g, &t, &k0) ? 2 * trim_w_floats(&t) + gemm_ws_floats(&t) : 0;
}

// dst (OC, C, K', K') = src's taps [k0, k0 + K') on both axes.
static void trim_gather(float *dst, const float *src, const conv_geom *g, const conv_geom *t,
                        int k0) {
    const int K = g->K, Kt = t->K;
    for (size_t oc_c = 0; oc_c < (size_t)g->OC * g->C; oc_c++)
        for (int i = 0; i < Kt; i++)
            for (int j = 0; j < Kt; j++)
                dst[(oc_c * Kt + i) * Kt + j] = src[(oc_c * K + i + k0) * K + j + k0];
}

// dw's taps [k0, k0 + K') += the middle's gradient.
static void trim_scatter_add(float *dw, const float *dmid, const conv_geom *g,
                             const conv_geom *t, int k0) {
    const int K = g->K, Kt = t->K;
    for (size_t oc_c = 0; oc_c < (size_t)g->OC * g->C; oc_c++)
        for (int i = 0; i < Kt; i++)
            for (int j = 0; j < Kt; j++)
                dw[(oc_c * K + i + k0) * K + j + k0] += dmid[(oc_c * Kt + i) * Kt + j];
}

size_t conv2d_nhwc_ws_floats(const conv_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return max_z(conv2d_nhwc_pack_floats(g) + (size_t)nthreads * conv2d_nhwc_scratch_floats(g),
                 max_z(gemm_ws_floats(g), trim_ws_floats(g)));
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
    conv_geom t;
    int k0;
    if (gemm_trim(g, &t, &k0)) { // only the taps that reach the input (above)
        trim_gather(ws, w, g, &t, k0);
        gemm_forward(out, in, ws, b, B, &t, relu, ws + 2 * trim_w_floats(&t), nt);
        return;
    }
    const int OCs = conv_cpad(g->OC), OC = g->OC, ckk = (int)gemm_ckk(g);
    const long M = (long)B * g->OH * g->OW;
    const int rows = gemm_in_place(g) ? (int)M : gemm_rows_per(g);
    const gemm_prec prec = conv_impl_prec(g->fwd);
    for (long r0 = 0; r0 < M; r0 += rows) {
        const int m = (int)(M - r0 < rows ? M - r0 : rows);
        int lda;
        const float *a = gemm_cols(in, r0, m, g, ws + gemm_cols_off(g), &lda, nt);
        gemm_split(prec, CblasNoTrans, CblasTrans, m, OC, ckk, a, lda, w, ckk, 0.0f,
                   out + r0 * OCs, OCs, nt, SPLIT_M, 16);
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
    conv_geom t;
    int k0;
    if (gemm_trim(g, &t, &k0)) { // only the taps that reach the input (above)
        float *wmid = ws, *dmid = ws + trim_w_floats(&t);
        trim_gather(wmid, w, g, &t, k0);
        memset(dmid, 0, sizeof(float) * (size_t)t.OC * gemm_ckk(&t));
        gemm_backward(din, dmid, db, dout, relu_out, in, wmid, B, &t, ws + 2 * trim_w_floats(&t),
                      nt);
        trim_scatter_add(dw, dmid, g, &t, k0);
        return;
    }
    const int OCs = conv_cpad(g->OC), C = g->C, OC = g->OC, ckk = (int)gemm_ckk(g);
    const long M = (long)B * g->OH * g->OW;
    const gemm_prec prec = conv_impl_prec(g->dw), prec_din = conv_impl_prec(g->din);
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
                relu_mask(gbuf + (size_t)i * OC, gr + (size_t)i * OCs, ro + (size_t)i * OCs,
                          (size_t)OC);
            gr = gbuf, ldg = OC;
        }
        const float *a = gemm_cols(in, r0, m, g, cols, &lda, nt);
        gemm_split(prec, CblasTrans, CblasNoTrans, OC, ckk, m, gr, ldg, a, lda, 1.0f, dw, ckk,
                   nt, SPLIT_LONGER, 16);
        for (int i = 0; db && i < m; i++)
            for (int k = 0; k < OC; k++) db[k] += gr[(size_t)i * ldg + k];
        if (!din) continue;
        if (gemm_in_place(g)) {
            gemm_split(prec_din, CblasNoTrans, CblasNoTrans, m, C, OC, gr, ldg, w, C, 0.0f,
                       din + r0 * g->Cs, g->Cs, nt, SPLIT_LONGER, 16);
        } else {
            gemm_split(prec_din, CblasNoTrans, CblasNoTrans, m, ckk, OC, gr, ldg, w, ckk, 0.0f,
                       dcols, ckk, nt, SPLIT_LONGER, 16);
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
    const nhwc_plan p = conv_nhwc_plan(g);
    const int K = g->K, C = g->C, OC = g->OC, OCs = p.OCs, Cs = g->Cs;
    const size_t rows = (size_t)K * K * C;
    float *wp = pack, *bp = pack + p.nw, *wf = pack + pack_flip_off(&p);
    memset(wp, 0, (p.nw + OCs) * sizeof *wp);
    for (int oc = 0; oc < OC; oc++)
        for (size_t r = 0; r < rows; r++) wp[r * OCs + oc] = w[(size_t)oc * rows + r];
    if (b) memcpy(bp, b, (size_t)OC * sizeof *bp);
    const int mf = conv_wino_m(g, g->fwd, CONV_DIR_FWD), md = conv_wino_m(g, g->din, CONV_DIR_DIN);
    if (mf) wino_weights(pack + pack_u_off(&p), OCs, w, C, OC, mf, K, 0);
    if (md) wino_weights(pack + pack_uf_off(&p), Cs, w, C, OC, md, K, 1);
    if (md) return;
    memset(wf, 0, p.nflip * sizeof *wf);
    for (int oc = 0; oc < OC; oc++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < K * K; t++)
                wf[((size_t)oc * K * K + (K * K - 1 - t)) * Cs + c] =
                    w[((size_t)oc * C + c) * K * K + t];
}

// One sample through the kernels compiled for this CPU (isa_kernels.c).
void conv2d_nhwc_forward_one(float *out, const float *in, const float *pack, const conv_geom *g,
                             int relu, float *scratch) {
    isa_kernels_active()->conv_forward_one(out, in, pack, g, relu, scratch);
}

void conv2d_nhwc_backward_one(float *din, const float *dout, const float *relu_out,
                              const float *in, const float *pack, const conv_geom *g,
                              float *scratch) {
    isa_kernels_active()->conv_backward_one(din, dout, relu_out, in, pack, g, scratch);
}

void conv2d_nhwc_forward(float *out, const float *in, const float *w, const float *b, int B,
                         const conv_geom *g, int relu, float *ws, int nthreads) {
    conv2d_nhwc_forward_parts(out, in, w, b, B, g, relu, ws, NULL, nthreads);
}

void conv2d_nhwc_forward_parts(float *out, const float *in, const float *w, const float *b,
                               int B, const conv_geom *g, int relu, float *ws, double *parts,
                               int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t P = (size_t)g->OH * g->OW, out_s = P * conv_cpad(g->OC);
    const size_t part_n = (size_t)3 * g->OC;
    if (conv_impl_gemm(g->fwd)) {
        gemm_forward(out, in, w, b, B, g, relu, ws, nthreads);
        if (parts) // after the GEMMs, sample by sample
#pragma omp parallel for num_threads(nthreads) schedule(static)
            for (int s = 0; s < B; s++)
                bn_sample_parts(parts + s * part_n, out + s * out_s, P, g->OC, conv_cpad(g->OC));
        return;
    }
    const size_t in_s = (size_t)g->H * g->W * g->Cs;
    const size_t pack_n = conv2d_nhwc_pack_floats(g), scr_n = conv2d_nhwc_scratch_floats(g);
    conv2d_nhwc_pack(ws, w, b, g);
#pragma omp parallel num_threads(nthreads)
    {
        float *scr = ws + pack_n + (size_t)omp_get_thread_num() * scr_n;
        conv2d_nhwc_scratch_init(scr, g);
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            conv2d_nhwc_forward_one(out + s * out_s, in + s * in_s, ws, g, relu, scr);
            // While the sample is still in cache.
            if (parts)
                bn_sample_parts(parts + s * part_n, out + s * out_s, P, g->OC, conv_cpad(g->OC));
        }
    }
}

void conv2d_nhwc_scratch_reduce(float *dw, float *db, const float *scratch, size_t stride,
                                int n, const conv_geom *g) {
    const nhwc_plan p = conv_nhwc_plan(g);
    const int K = g->K, C = g->C, OC = g->OC, OCs = p.OCs;
    const int mw = conv_wino_m(g, g->dw, CONV_DIR_DW);
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
    conv2d_nhwc_backward_bn(din, dw, db, (float *)dout, relu_out, NULL, NULL, in, w, B, g, ws,
                            nthreads);
}

size_t conv2d_nhwc_ws_floats_bn(const conv_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return conv2d_nhwc_ws_floats(g, nthreads) +
           (size_t)nthreads * g->OH * g->OW * conv_cpad(g->OC);
}

void conv2d_nhwc_backward_bn(float *din, float *dw, float *db, float *dout, const float *relu_out,
                             const bn_fuse *bn, const float *out, const float *in,
                             const float *w, int B, const conv_geom *g, float *ws, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t P = (size_t)g->OH * g->OW, out_s = P * conv_cpad(g->OC);
    if (conv_impl_gemm(g->dw)) {
        if (bn) // the GEMMs read the whole batch's: made first, into dout
#pragma omp parallel for num_threads(nthreads) schedule(static)
            for (int s = 0; s < B; s++)
                bn_dx_sample(dout + s * out_s, bn, out, s, P, conv_cpad(g->OC));
        gemm_backward(din, dw, db, dout, relu_out, in, w, B, g, ws, nthreads);
        return;
    }
    const size_t in_s = (size_t)g->H * g->W * g->Cs;
    const size_t pack_n = conv2d_nhwc_pack_floats(g), scr_n = conv2d_nhwc_scratch_floats(g);
    conv2d_nhwc_pack(ws, w, NULL, g);
    // With bn: each thread's room for a sample's output gradient, after every thread's scratch.
    const size_t dx_off = bn ? conv2d_nhwc_ws_floats(g, nthreads) : 0;
    int nt = nthreads;
#pragma omp parallel num_threads(nthreads)
    {
        const int t = omp_get_thread_num();
        float *scr = ws + pack_n + (size_t)t * scr_n;
        float *dx = ws + dx_off + (size_t)t * out_s;
        conv2d_nhwc_scratch_init(scr, g);
#pragma omp single nowait
        nt = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            const float *dy = dout + s * out_s;
            if (bn) {
                bn_dx_sample(dx, bn, out, s, P, conv_cpad(g->OC));
                dy = dx;
            }
            conv2d_nhwc_backward_one(din ? din + s * in_s : NULL, dy,
                                     relu_out ? relu_out + s * out_s : NULL, in + s * in_s, ws,
                                     g, scr);
        }
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
    .name = "conv", .flags = LF_PARAMS | LF_SPATIAL | LF_WINDOW | LF_KERNEL | LF_OUT_FREE,
    .keys = conv_keys,
    .sections = conv_sections, .shape = conv_shape, .weight_shape = conv_weight_shape,
    .macs = conv_macs, .fans = conv_fans, .keras_vars = conv_keras_vars, .n_keras_vars = 2};

static void conv_forward(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_forward_parts(c->out, c->in, c->params + c->L->w_off, net_bias(c->params, c->L),
                              c->B, &g, c->p->fuse_relu, c->scratch, c->bn_parts, c->nt);
}
static float *conv_backward(const net_call *c) {
    conv_geom g = net_conv_geom(c->L, c->p);
    conv2d_nhwc_backward_bn(c->din, c->grads + c->L->w_off, net_bias(c->grads, c->L), c->dout,
                            c->p->fuse_relu ? c->out : NULL, c->bn, c->out, c->in,
                            c->params + c->L->w_off, c->B, &g, c->scratch, c->nt);
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
    return p->fuse_bn ? conv2d_nhwc_ws_floats_bn(&g, nthreads) : conv2d_nhwc_ws_floats(&g, nthreads);
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
// kernels alike), it applies a relu after it, and batch-wise the passes of a batchnorm after it.
const net_layer_ops cpu_conv = {
    .forward = conv_forward, .backward = conv_backward, .forward_one = conv_forward_one,
    .backward_one = conv_backward_one,
    .flags = NET_OP_FUSES_RELU | NET_OP_GRAD_ADDS | NET_OP_CONV_ALGO | NET_OP_FEEDS_BN,
    .out_cs = conv_out_cs, .ws_floats = conv_ws_floats, .pack_floats = conv_pack_floats,
    .scratch_floats = conv_scratch_floats, .pack = conv_pack, .scratch_init = conv_scratch_init,
    .scratch_reduce = conv_scratch_reduce};
