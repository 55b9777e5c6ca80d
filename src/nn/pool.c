// Pooling on channels-last (NHWC) tensors: max, average and global average. Each window is
// pooled for all channels at once; windows are clipped to the input ("same" padding), and max
// pooling's backward finds the winner again from the forward input (no argmax). The NCHW
// reference with argmax is tests/lib/ref.c.
#include "nn/layers.h"

#include "nn/isa_kernels.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"
#include "nn/pool_win.h"

#include <string.h>

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

// One sample through the CPU's vector code (pool_vec.c, isa_kernels.h).
void maxpool_nhwc_backward_one(float *din, const float *dout, const float *in,
                               const pool_geom *g) {
    isa_kernels_active()->maxpool_backward_one(din, dout, in, g);
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
