// Pooling on channels-last (NHWC) tensors: max, average and global average. Each window is
// pooled for all channels at once; windows are clipped to the input ("same" padding), and max
// pooling's backward finds the winner again from the forward input (no argmax). The NCHW
// reference with argmax is tests/lib/ref.c.
#include "nn/layers.h"

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

#include <string.h>

// The window of output (oh, ow) clipped to the input: its first input row and column and how
// many rows and columns it covers (at least one each: layers never make an empty window).
typedef struct pool_win {
    int ih, iw, nh, nw;
} pool_win;

static inline int pool_clip(int o, int stride, int pad, int K, int in, int *n) {
    int i0 = o * stride - pad, i1 = i0 + K;
    if (i0 < 0) i0 = 0;
    if (i1 > in) i1 = in;
    *n = i1 - i0;
    return i0;
}

static inline pool_win pool_window(const pool_geom *g, int oh, int ow) {
    pool_win w;
    w.ih = pool_clip(oh, g->stride, g->pad, g->K, g->H, &w.nh);
    w.iw = pool_clip(ow, g->stride, g->pad, g->K, g->W, &w.nw);
    return w;
}

void maxpool_nhwc_forward_one(float *out, const float *in, const pool_geom *g) {
    const int Cs = g->Cs, W = g->W;
    float *o = out;
    for (int oh = 0; oh < g->OH; oh++) {
        for (int ow = 0; ow < g->OW; ow++, o += Cs) {
            const pool_win wd = pool_window(g, oh, ow);
            const float *win = in + ((size_t)wd.ih * W + wd.iw) * Cs;
            memcpy(o, win, (size_t)Cs * sizeof *o);
            for (int kh = 0; kh < wd.nh; kh++) {
                for (int kw = 0; kw < wd.nw; kw++) {
                    const float *x = win + ((size_t)kh * W + kw) * Cs;
                    for (int c = 0; c < Cs; c++) o[c] = x[c] > o[c] ? x[c] : o[c];
                }
            }
        }
    }
}

void maxpool_nhwc_forward(float *out, const float *in, int B, const pool_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t in_s = (size_t)g->H * g->W * g->Cs, out_s = (size_t)g->OH * g->OW * g->Cs;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < B; s++) maxpool_nhwc_forward_one(out + s * out_s, in + s * in_s, g);
}

// Channels are handled in blocks of POOL_CBLOCK: a block's maxima and "still to find" masks
// are one vector each (GCC/Clang vector extensions: one AVX-512 register, two AVX2 ones; GCC's
// note on the ABI of passing such vectors does not concern these static, inlined helpers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define POOL_CBLOCK 16
typedef float pool_vf __attribute__((vector_size(POOL_CBLOCK * sizeof(float))));
typedef int32_t pool_vi __attribute__((vector_size(POOL_CBLOCK * sizeof(float))));

static inline pool_vf pool_load(const float *p) {
    pool_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

// One window (nh x nw inputs from `first`), channels [c0, c0 + POOL_CBLOCK): the gradient goes
// to the first maximum in row-major order (as the reference's argmax); overlapping windows
// (stride < K) can share a winner, so it is added, not assigned.
static inline void pool_window_back(float *dp, const float *ip, const float *g, size_t first,
                                    int W, int Cs, int nh, int nw, int assign) {
    pool_vf m = pool_load(ip + first);
    for (int kh = 0; kh < nh; kh++)
        for (int kw = 0; kw < nw; kw++) {
            pool_vf x = pool_load(ip + first + ((size_t)kh * W + kw) * Cs);
            pool_vi gt = x > m;
            m = (pool_vf)(((pool_vi)x & gt) | ((pool_vi)m & ~gt));
        }
    const pool_vi gv = (pool_vi)pool_load(g);
    pool_vi todo = ~(pool_vi){0};
    for (int kh = 0; kh < nh; kh++)
        for (int kw = 0; kw < nw; kw++) {
            const size_t at = first + ((size_t)kh * W + kw) * Cs;
            pool_vi hit = todo & (pool_load(ip + at) == m);
            // Assigning (windows that tile the input, din not zeroed first): 0 + g, the
            // same bits as adding to a zeroed din (-0 becomes +0 either way).
            pool_vf d = (assign ? (pool_vf){0} : pool_load(dp + at)) + (pool_vf)(gv & hit);
            memcpy(dp + at, &d, sizeof d);
            todo &= ~hit;
        }
}

void maxpool_nhwc_backward_one(float *din, const float *dout, const float *in,
                               const pool_geom *g) {
    const int Cs = g->Cs, W = g->W;
    const float *gp = dout;
    // Windows that cover every input exactly once, over whole channel blocks: each element of
    // din is written once, by its window, and needs no zeroing first.
    if (g->pad == 0 && g->stride == g->K && g->OH * g->K == g->H && g->OW * g->K == W &&
        Cs % POOL_CBLOCK == 0) {
        for (int oh = 0; oh < g->OH; oh++)
            for (int ow = 0; ow < g->OW; ow++, gp += Cs) {
                const size_t first = ((size_t)oh * g->K * W + (size_t)ow * g->K) * Cs;
                for (int c0 = 0; c0 < Cs; c0 += POOL_CBLOCK)
                    pool_window_back(din + c0, in + c0, gp + c0, first, W, Cs, g->K, g->K, 1);
            }
        return;
    }
    memset(din, 0, (size_t)g->H * W * Cs * sizeof *din);
    for (int oh = 0; oh < g->OH; oh++) {
        for (int ow = 0; ow < g->OW; ow++, gp += Cs) {
            const pool_win wd = pool_window(g, oh, ow);
            const size_t first = ((size_t)wd.ih * W + wd.iw) * Cs;
            int c0 = 0;
            for (; c0 + POOL_CBLOCK <= Cs; c0 += POOL_CBLOCK)
                pool_window_back(din + c0, in + c0, gp + c0, first, W, Cs, wd.nh, wd.nw, 0);
            for (int c = c0; c < Cs; c++) { // channels past the last full block
                size_t best = first + c;
                for (int kh = 0; kh < wd.nh; kh++)
                    for (int kw = 0; kw < wd.nw; kw++) {
                        const size_t at = first + ((size_t)kh * W + kw) * Cs + c;
                        if (in[at] > in[best]) best = at;
                    }
                din[best] += gp[c];
            }
        }
    }
}

void maxpool_nhwc_backward(float *din, const float *dout, const float *in, int B,
                           const pool_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t in_s = (size_t)g->H * g->W * g->Cs, out_s = (size_t)g->OH * g->OW * g->Cs;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < B; s++)
        maxpool_nhwc_backward_one(din + s * in_s, dout + s * out_s, in + s * in_s, g);
}

// ---- average pooling ----

void avgpool_nhwc_forward_one(float *out, const float *in, const pool_geom *g) {
    const int Cs = g->Cs, W = g->W;
    float *o = out;
    for (int oh = 0; oh < g->OH; oh++) {
        for (int ow = 0; ow < g->OW; ow++, o += Cs) {
            const pool_win wd = pool_window(g, oh, ow);
            const float *win = in + ((size_t)wd.ih * W + wd.iw) * Cs;
            const float n = (float)(wd.nh * wd.nw);
            memset(o, 0, (size_t)Cs * sizeof *o);
            for (int kh = 0; kh < wd.nh; kh++)
                for (int kw = 0; kw < wd.nw; kw++) {
                    const float *x = win + ((size_t)kh * W + kw) * Cs;
                    for (int c = 0; c < Cs; c++) o[c] += x[c];
                }
            for (int c = 0; c < Cs; c++) o[c] /= n;
        }
    }
}

void avgpool_nhwc_backward_one(float *din, const float *dout, const pool_geom *g) {
    const int Cs = g->Cs, W = g->W;
    const float *gp = dout;
    memset(din, 0, (size_t)g->H * W * Cs * sizeof *din);
    for (int oh = 0; oh < g->OH; oh++) {
        for (int ow = 0; ow < g->OW; ow++, gp += Cs) {
            const pool_win wd = pool_window(g, oh, ow);
            float *win = din + ((size_t)wd.ih * W + wd.iw) * Cs;
            const float n = (float)(wd.nh * wd.nw);
            for (int kh = 0; kh < wd.nh; kh++)
                for (int kw = 0; kw < wd.nw; kw++) {
                    float *d = win + ((size_t)kh * W + kw) * Cs;
                    for (int c = 0; c < Cs; c++) d[c] += gp[c] / n;
                }
        }
    }
}

void avgpool_nhwc_forward(float *out, const float *in, int B, const pool_geom *g, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t in_s = (size_t)g->H * g->W * g->Cs, out_s = (size_t)g->OH * g->OW * g->Cs;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < B; s++) avgpool_nhwc_forward_one(out + s * out_s, in + s * in_s, g);
}

void avgpool_nhwc_backward(float *din, const float *dout, int B, const pool_geom *g,
                           int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const size_t in_s = (size_t)g->H * g->W * g->Cs, out_s = (size_t)g->OH * g->OW * g->Cs;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < B; s++) avgpool_nhwc_backward_one(din + s * in_s, dout + s * out_s, g);
}

// ---- global average pooling ----

void gavgpool_nhwc_forward_one(float *out, const float *in, int Cs, int HW) {
    memset(out, 0, (size_t)Cs * sizeof *out);
    for (int p = 0; p < HW; p++) {
        const float *x = in + (size_t)p * Cs;
        for (int c = 0; c < Cs; c++) out[c] += x[c];
    }
    for (int c = 0; c < Cs; c++) out[c] /= (float)HW;
}

void gavgpool_nhwc_backward_one(float *din, const float *dout, int Cs, int HW) {
    for (int p = 0; p < HW; p++) {
        float *d = din + (size_t)p * Cs;
        for (int c = 0; c < Cs; c++) d[c] = dout[c] / (float)HW;
    }
}

// ---- the pool and gap families: descriptions (layer_desc.h) and CPU ops (net_layers.h) ----

static int pool_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                      ht_error *err) {
    (void)n_classes;
    if (s->k < 1 || s->k > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): window %d: expected 1..%d", idx, d->name, s->k,
                       MODEL_MAX_K);
    int stride = s->stride ? s->stride : s->k;
    if (stride < 1 || stride > MODEL_MAX_K)
        return ht_fail(err, "layer %d (%s): stride %d: expected 1..%d", idx, d->name, stride,
                       MODEL_MAX_K);
    if (s->pad > 0) // a window of padding alone would have no maximum or average
        return ht_fail(err, "layer %d (%s): pad %d: pooling pads 0 (valid) or \"same\"", idx,
                       d->name, s->pad);
    if (s->pad == 0 && (L->h < s->k || L->w < s->k))
        return ht_fail(err, "layer %d (%s): window %d does not fit input %dx%d", idx, d->name,
                       s->k, L->h, L->w);
    if (layer_window(L, idx, d->name, s->k, stride, s->pad, err)) return -1;
    L->oc = L->c;
    return 0;
}

static int gap_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                     ht_error *err) {
    (void)s, (void)d, (void)n_classes, (void)idx, (void)err;
    L->oc = L->c, L->oh = 1, L->ow = 1;
    return 0;
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key pool_keys[] = {
    LK_ROW("size", "pool_size", LK_INT, LK_REQUIRED, k, 1, 64),
    LK_ROW("stride", "strides", LK_INT, 0, stride, 1, 64),
    LK_ROW("pad", "padding", LK_PAD, 0, pad, 0, 64),
    LK_END,
};
static const layer_key no_keys[] = {LK_END};

const layer_family family_pool = {.name = "pool", .flags = LF_SPATIAL | LF_WINDOW,
                                  .keys = pool_keys, .shape = pool_shape, .macs = no_macs};
const layer_family family_gap = {.name = "gap", .flags = LF_SPATIAL, .keys = no_keys,
                                 .shape = gap_shape, .macs = no_macs};

static pool_geom pool_of(const layer *L, const net_lplan *p) {
    return (pool_geom){.Cs = p->in_cs, .H = L->h, .W = L->w, .K = L->k, .stride = L->stride,
                       .pad = L->pad, .OH = L->oh, .OW = L->ow};
}

static void pool_forward(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_forward(c->out, c->in, c->B, &g, c->nt);
    else avgpool_nhwc_forward(c->out, c->in, c->B, &g, c->nt);
}
static float *pool_backward(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (!c->din) return NULL;
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_backward(c->din, c->dout, c->in, c->B, &g, c->nt);
    else avgpool_nhwc_backward(c->din, c->dout, c->B, &g, c->nt);
    return c->din;
}
static void pool_forward_one(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_forward_one(c->out, c->in, &g);
    else avgpool_nhwc_forward_one(c->out, c->in, &g);
}
static float *pool_backward_one(const net_call *c) {
    pool_geom g = pool_of(c->L, c->p);
    if (!c->din) return NULL;
    if (c->L->kind == LAYER_MAXPOOL) maxpool_nhwc_backward_one(c->din, c->dout, c->in, &g);
    else avgpool_nhwc_backward_one(c->din, c->dout, &g);
    return c->din;
}

// Global average pooling, (B,HW,Cs) <-> (B,1,1,Cs).
static void gap_forward(const net_call *c) {
    const int Cs = c->p->in_cs, HW = c->L->h * c->L->w;
#pragma omp parallel for num_threads(c->nt) schedule(static)
    for (int s = 0; s < c->B; s++)
        gavgpool_nhwc_forward_one(c->out + (size_t)s * Cs, c->in + (size_t)s * HW * Cs, Cs, HW);
}
static float *gap_backward(const net_call *c) {
    const int Cs = c->p->in_cs, HW = c->L->h * c->L->w;
    if (!c->din) return NULL;
#pragma omp parallel for num_threads(c->nt) schedule(static)
    for (int s = 0; s < c->B; s++)
        gavgpool_nhwc_backward_one(c->din + (size_t)s * HW * Cs, c->dout + (size_t)s * Cs, Cs, HW);
    return c->din;
}
static void gap_forward_one(const net_call *c) {
    gavgpool_nhwc_forward_one(c->out, c->in, c->p->in_cs, c->L->h * c->L->w);
}
static float *gap_backward_one(const net_call *c) {
    if (!c->din) return NULL;
    gavgpool_nhwc_backward_one(c->din, c->dout, c->p->in_cs, c->L->h * c->L->w);
    return c->din;
}

const net_layer_ops cpu_pool = {.forward = pool_forward, .backward = pool_backward,
                                .forward_one = pool_forward_one,
                                .backward_one = pool_backward_one};
const net_layer_ops cpu_gap = {.forward = gap_forward, .backward = gap_backward,
                               .forward_one = gap_forward_one, .backward_one = gap_backward_one};
