// Network forward/backward on the CPU: walks the layer list calling the layer math in layers.h.
// Spatial activations (conv and pool outputs) are kept channels-last, where the direct
// convolution kernels are fast; a layer that needs the other layout (dense: PyTorch's NCHW
// flattening order) gets a converted copy of its input, and its input gradient is converted
// back. A relu right after a conv or a batchnorm is applied by that layer, forward and
// backward; a relu right before a dropout (after the trunk) does the dropout's backward too
// (drop_fold). The leading
// run of spatial layers (the trunk) goes one sample at a time through all its layers on one
// thread, so a sample's tensors stay in that core's cache between layers; the layers after it
// (dense and the rest) go batch-wise.
#include "nn/net.h"

#include "core/ht_omp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/batchnorm.h"
#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "nn/net_layers.h"
#include "core/rng.h"

// relu and dropout work in place on their input's buffer.
static int layer_in_place(const layer *L) { return (layer_flags(L->kind) & LF_IN_PLACE) != 0; }

// A tensor's layout: channels-last with channel stride cs, or NCHW (cs == c).
typedef struct fmt {
    int nhwc, cs;
} fmt;

// Whether a tensor of c channels over hw positions in layout f can be read as NHWC with
// channel stride cs (*cs set), or as NCHW, without moving anything.
static int as_nhwc(fmt f, int c, int hw, int *cs) {
    if (f.nhwc) {
        *cs = f.cs;
        return 1;
    }
    *cs = c;
    return c == 1 || hw == 1;
}
static int as_nchw(fmt f, int c, int hw) { return !f.nhwc || (f.cs == c && (c == 1 || hw == 1)); }

// Channels and positions of layer l's input tensor as the layer before produced it (a dense
// layer's own c/h/w describe it flattened).
static void in_shape(const model *m, int l, int *c, int *hw) {
    if (l == 0) {
        *c = m->in_c;
        *hw = m->in_h * m->in_w;
    } else {
        const layer *P = &m->layers[l - 1];
        *c = P->oc;
        *hw = P->oh * P->ow;
    }
}

// Plans layer l given the layout of its input; returns the layout of its output.
static fmt plan_layer(const model *m, int l, fmt in, net_lplan *p) {
    const layer *L = &m->layers[l];
    int c, hw;
    in_shape(m, l, &c, &hw);
    memset(p, 0, sizeof *p);
    fmt out = in;
    unsigned flags = layer_flags(L->kind);
    if (flags & LF_SPATIAL) {
        if (!as_nhwc(in, c, hw, &p->in_cs)) {
            p->cvt = 1;
            p->cvt_cs = p->in_cs = conv_cpad(c);
        }
        out.nhwc = 1;
        out.cs = L->kind == LAYER_CONV2D ? conv_cpad(L->oc) : p->in_cs;
        p->fuse_relu = (L->kind == LAYER_CONV2D || L->kind == LAYER_BATCHNORM) &&
                       l + 1 < m->n_layers && m->layers[l + 1].kind == LAYER_RELU;
    } else if (flags & LF_FLAT) {
        if (!as_nchw(in, c, hw)) {
            p->cvt = 2;
            p->cvt_cs = in.cs;
        }
        out.nhwc = 0;
        out.cs = L->oc;
    } else { // elementwise: the layout passes through
        p->skip = L->kind == LAYER_RELU && l > 0 && (m->layers[l - 1].kind == LAYER_CONV2D ||
                                                    m->layers[l - 1].kind == LAYER_BATCHNORM);
    }
    p->out_nhwc = out.nhwc;
    p->out_cs = out.cs;
    return out;
}

static fmt input_fmt(const model *m) { return (fmt){.nhwc = 0, .cs = m->in_c}; }

// Floats per sample of layer l's output, and of its converted input (0 when not converted).
#define out_floats net_out_floats
static size_t cvt_floats(const model *m, int l, const net_lplan *p) {
    int c, hw;
    in_shape(m, l, &c, &hw);
    if (!p->cvt) return 0;
    return (size_t)hw * (p->cvt == 1 ? p->cvt_cs : c);
}
// Floats per sample of layer l's input as it arrives, in the layout f.
static size_t in_floats(const model *m, int l, fmt f) {
    int c, hw;
    in_shape(m, l, &c, &hw);
    return (size_t)hw * (f.nhwc ? f.cs : c);
}

#define geom_of net_conv_geom

// Each buffer starts on a 64-byte boundary.
static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

// A batchnorm's statistics: 3 floats a channel for each group of a micro-batch.
static size_t bn_stat_floats(const model *m, const layer *L, int max_batch) {
    int G = model_bn_group(m);
    return (size_t)3 * L->c * (size_t)((max_batch + G - 1) / G);
}

// Whether layer l (planned as p) belongs in the trunk, given that all before it do: its output
// is channels-last and its family runs one sample at a time.
static int in_trunk(const layer *L, const net_lplan *p) {
    return p->out_nhwc && net_layer_ops_of[L->kind]->forward_one;
}

typedef struct ws_sizes {
    size_t act_floats, cvt_floats, grad_floats, conv_floats, bn_floats;
    int trunk;
    size_t pack_floats;              // the trunk's packed conv weights
    size_t tslice, tgrad_off, tgrad_n; // one thread's trunk scratch
} ws_sizes;

// Sizes of everything, and the plan of every layer when plan is not NULL.
static ws_sizes ws_measure(const model *m, int max_batch, int nthreads, net_lplan *plan) {
    ws_sizes s = {0};
    size_t widest = 0, twidest = 0, scr = 0;
    fmt f = input_fmt(m);
    int trunk = 1;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        net_lplan p;
        size_t in = in_floats(m, l, f);
        f = plan_layer(m, l, f, &p);
        size_t out = out_floats(L, &p), cv = cvt_floats(m, l, &p);
        if (!layer_in_place(L) || l == 0) s.act_floats += align16(out * (size_t)max_batch);
        if (cv) s.cvt_floats += align16(cv * (size_t)max_batch);
        if (L->kind == LAYER_BATCHNORM) s.bn_floats += align16(bn_stat_floats(m, L, max_batch));
        trunk = trunk && in_trunk(L, &p);
        if (trunk) {
            s.trunk = l + 1;
            if (out > twidest) twidest = out;
            if (L->kind == LAYER_CONV2D) {
                conv_geom g = geom_of(L, &p);
                p.pack_off = s.pack_floats;
                p.scr_off = scr;
                s.pack_floats += align16(conv2d_nhwc_pack_floats(&g));
                scr += align16(conv2d_nhwc_scratch_floats(&g));
            }
        } else {
            if (L->kind == LAYER_CONV2D) {
                conv_geom g = geom_of(L, &p);
                size_t c = conv2d_nhwc_ws_floats(&g, nthreads);
                if (c > s.conv_floats) s.conv_floats = c;
            }
            // Batch-wise gradients: this layer's input (the trunk's output included), output
            // and converted input.
            if (in > widest) widest = in;
            if (out > widest) widest = out;
            if (cv > widest) widest = cv;
        }
        if (plan) plan[l] = p;
    }
    s.grad_floats = align16(widest * (size_t)max_batch);
    s.tgrad_off = scr;
    s.tgrad_n = s.trunk ? align16(twidest) : 0;
    s.tslice = scr + 2 * s.tgrad_n;
    return s;
}

static size_t ws_total_floats(const model *m, int max_batch, int nthreads) {
    ws_sizes s = ws_measure(m, max_batch, nthreads, NULL);
    return s.act_floats + s.cvt_floats + 2 * s.grad_floats + align16(s.conv_floats) + s.bn_floats +
           s.pack_floats + (size_t)nthreads * s.tslice + align16((size_t)max_batch);
}

size_t net_ws_bytes(const model *m, int max_batch, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return sizeof(float) * ws_total_floats(m, max_batch, nthreads) +
           m->n_layers * (sizeof(net_lplan) + 3 * sizeof(float *) + nthreads * sizeof(double));
}

int net_ws_init(net_ws *ws, const model *m, int max_batch, int nthreads, ht_error *e) {
    memset(ws, 0, sizeof *ws);
    ws->max_batch = max_batch;
    ws->nthreads = nthreads < 1 ? 1 : nthreads;
    ws->n_layers = m->n_layers;
    size_t total = ws_total_floats(m, max_batch, ws->nthreads);
    ws->plan = ht_calloc((size_t)m->n_layers, sizeof *ws->plan, e);
    ws->act = ws->plan ? ht_calloc((size_t)m->n_layers, sizeof *ws->act, e) : NULL;
    ws->cvt = ws->act ? ht_calloc((size_t)m->n_layers, sizeof *ws->cvt, e) : NULL;
    ws->bn_stats = ws->cvt ? ht_calloc((size_t)m->n_layers, sizeof *ws->bn_stats, e) : NULL;
    ws->tprof = ws->bn_stats ? ht_calloc((size_t)m->n_layers * ws->nthreads, sizeof *ws->tprof, e)
                             : NULL;
    if (ws->tprof) {
        ws->owned = aligned_alloc(64, total * sizeof(float));
        if (!ws->owned) ht_fail(e, "out of memory (%zu bytes)", total * sizeof(float));
    }
    if (!ws->owned) {
        net_ws_free(ws);
        return ht_wrap(e, "network workspace for a micro-batch of %d", max_batch);
    }
    ws_sizes s = ws_measure(m, max_batch, ws->nthreads, ws->plan);
    for (int l = 0; l < m->n_layers; l++) {
        if (m->layers[l].kind != LAYER_CONV2D) continue;
        conv_geom g = geom_of(&m->layers[l], &ws->plan[l]);
        ws->plan[l].algo = conv_choose(&g, m->setup.conv_algo, l > 0, ws->nthreads);
    }
    float *p = ws->owned;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (layer_in_place(L) && l > 0) {
            ws->act[l] = ws->act[l - 1];
        } else {
            ws->act[l] = p;
            p += align16(out_floats(L, &ws->plan[l]) * (size_t)max_batch);
        }
        if (ws->plan[l].cvt) {
            ws->cvt[l] = p;
            p += align16(cvt_floats(m, l, &ws->plan[l]) * (size_t)max_batch);
        }
    }
    ws->g0 = p;
    p += s.grad_floats;
    ws->g1 = p;
    p += s.grad_floats;
    ws->conv_ws = p;
    p += align16(s.conv_floats);
    ws->bn_group = model_bn_group(m);
    for (int l = 0; l < m->n_layers; l++) {
        if (m->layers[l].kind != LAYER_BATCHNORM) continue;
        ws->bn_stats[l] = p;
        p += align16(bn_stat_floats(m, &m->layers[l], max_batch));
    }
    ws->trunk = s.trunk;
    // Backward through relu -> dropout in one pass, without the dropout's random numbers: the
    // dropout's output (kept in place of the relu's) is > 0 exactly where the mask kept a
    // positive relu output, and there the dropout's gradient is dout * scale; elsewhere the
    // relu passes nothing. The same bits as the two passes (relu_dropout_backward).
    for (int l = s.trunk; l + 1 < m->n_layers; l++)
        ws->plan[l].drop_fold = m->layers[l].kind == LAYER_RELU && !ws->plan[l].skip &&
                                m->layers[l + 1].kind == LAYER_DROPOUT;
    ws->pack = p;
    p += s.pack_floats;
    ws->tscr = p;
    ws->tslice = s.tslice;
    ws->tgrad_off = s.tgrad_off;
    ws->tgrad_n = s.tgrad_n;
    p += (size_t)ws->nthreads * s.tslice;
    ws->loss = p;
    return 0;
}

void net_ws_free(net_ws *ws) {
    free(ws->owned);
    free(ws->act);
    free(ws->cvt);
    free(ws->bn_stats);
    free(ws->plan);
    free(ws->tprof);
    memset(ws, 0, sizeof *ws);
}

int net_conv_choices(const model *m, int nthreads, conv_choice *out) {
    net_lplan *plan = calloc((size_t)m->n_layers, sizeof *plan);
    if (!plan) return -1;
    ws_measure(m, 1, nthreads, plan);
    for (int l = 0; l < m->n_layers; l++) {
        memset(&out[l], 0, sizeof out[l]);
        if (m->layers[l].kind != LAYER_CONV2D) continue;
        conv_geom g = geom_of(&m->layers[l], &plan[l]);
        out[l] = conv_choose(&g, m->setup.conv_algo, l > 0, nthreads);
    }
    free(plan);
    return 0;
}

// The choices of the layers at algo, `stride` bytes apart (net_lplan's or an array's).
static void describe(const model *m, const char *algo, size_t stride, char *buf, size_t len) {
    size_t k = 0;
    int timed = 0;
    buf[0] = 0;
    for (int l = 0; l < m->n_layers; l++)
        timed |= ((const conv_choice *)(algo + (size_t)l * stride))->t[0][0] > 0;
    for (int l = 0; l < m->n_layers && k < len; l++) {
        const layer *L = &m->layers[l];
        if (L->kind != LAYER_CONV2D) continue;
        if (!k)
            k = (size_t)snprintf(buf, len, "conv algorithms (%s%s): ",
                                 conv_algo_names[m->setup.conv_algo],
                                 timed ? "; us a sample direct/winograd" : "");
        else
            k += (size_t)snprintf(buf + k, len - k, "; ");
        if (k < len)
            conv_choice_describe((const conv_choice *)(algo + (size_t)l * stride), L->name,
                                 buf + k, len - k);
        k += strlen(buf + k);
    }
}

void net_conv_describe(const net_ws *ws, const model *m, char *buf, size_t len) {
    describe(m, (const char *)&ws->plan[0].algo, sizeof ws->plan[0], buf, len);
}

void net_conv_decide(const model *m, int nthreads) {
    if (m->setup.conv_algo != CONV_ALGO_AUTO) return;
    conv_choice *c = calloc((size_t)m->n_layers, sizeof *c);
    if (c) net_conv_choices(m, nthreads, c); // else the devices decide as they open
    free(c);
}

void net_conv_describe_choices(const model *m, const conv_choice *algo, char *buf, size_t len) {
    describe(m, (const char *)algo, sizeof *algo, buf, len);
}

int net_argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int32_t net_predict(const model *m, const float *probs) {
    if (m->label_width == 1) return net_argmax(probs, m->n_classes);
    int32_t bits = 0;
    for (int j = 0; j < m->label_width; j++) bits |= (int32_t)(probs[j] > 0.5f) << j;
    return bits;
}

int net_labels_right(const model *m, int32_t pred, const uint8_t *y) {
    if (m->label_width == 1) return pred == y[0];
    int right = 0;
    for (int j = 0; j < m->label_width; j++) right += ((pred >> j) & 1) == (y[j] != 0);
    return right;
}

static double neg_log(double p) { return -log(p > 1e-30 ? p : 1e-30); }

double net_prob_loss(const model *m, const float *probs, const uint8_t *y) {
    if (m->label_width == 1) return neg_log(probs[y[0]]);
    double sum = 0;
    for (int j = 0; j < m->label_width; j++)
        sum += neg_log(y[j] ? probs[j] : 1.0 - (double)probs[j]);
    return sum / m->label_width;
}

// Layer l's input in the layout it needs: converted into ws->cvt[l] when the plan says so.
static const float *layer_input(net_ws *ws, const model *m, int l, const float *in, int B) {
    const net_lplan *p = &ws->plan[l];
    int c, hw;
    in_shape(m, l, &c, &hw);
    if (p->cvt == 1) nchw_to_nhwc(ws->cvt[l], in, B, c, p->cvt_cs, hw, ws->nthreads);
    if (p->cvt == 2) nhwc_to_nchw(ws->cvt[l], in, B, c, p->cvt_cs, hw, ws->nthreads);
    return p->cvt ? ws->cvt[l] : in;
}

// Packs the weights of the trunk's conv layers; while profiling, each layer's time goes to
// its entry for direction dir (0 forward, 1 backward).
static void trunk_pack(net_ws *ws, const model *m, const float *params, int dir) {
    if (ws->pack_kept && ws->packed) return;
    ws->packed = 1;
    for (int l = 0; l < ws->trunk; l++) {
        const layer *L = &m->layers[l];
        const net_lplan *p = &ws->plan[l];
        if (L->kind != LAYER_CONV2D) continue;
        double t = ws->prof ? ht_now() : 0;
        conv_geom g = geom_of(L, p);
        conv2d_nhwc_pack(ws->pack + p->pack_off, params + L->w_off,
                          L->n_b ? params + L->b_off : NULL, &g);
        if (ws->prof) ws->prof[2 * l + dir] += ht_now() - t;
    }
}

// Profiling the trunk: every thread's per-layer times start at zero (threads the region does
// not use keep theirs at zero); trunk_prof_share then hands the region's wall time `wall` to
// the trunk's layers (direction dir) in proportion to the thread time each took.
static void trunk_prof_zero(net_ws *ws) {
    memset(ws->tprof, 0, sizeof *ws->tprof * (size_t)ws->n_layers * (size_t)ws->nthreads);
}
static void trunk_prof_share(net_ws *ws, int dir, double wall) {
    double total = 0;
    for (int i = 0; i < ws->nthreads * ws->n_layers; i++) total += ws->tprof[i];
    if (total <= 0) return;
    for (int l = 0; l < ws->trunk; l++) {
        double mine = 0;
        for (int t = 0; t < ws->nthreads; t++) mine += ws->tprof[(size_t)t * ws->n_layers + l];
        ws->prof[2 * l + dir] += wall * mine / total;
    }
}
// This thread's per-layer times while profiling, else NULL.
static double *trunk_prof_mine(net_ws *ws) {
    return ws->prof ? ws->tprof + (size_t)omp_get_thread_num() * ws->n_layers : NULL;
}

// This thread's slice of the trunk scratch, with every conv layer's part zeroed.
static float *trunk_scratch(net_ws *ws, const model *m) {
    float *mine = ws->tscr + (size_t)omp_get_thread_num() * ws->tslice;
    for (int l = 0; l < ws->trunk; l++) {
        const layer *L = &m->layers[l];
        const net_lplan *p = &ws->plan[l];
        if (L->kind != LAYER_CONV2D) continue;
        conv_geom g = geom_of(L, p);
        conv2d_nhwc_scratch_init(mine + p->scr_off, &g);
    }
    return mine;
}

// Sample s's input of layer 0 in the layout the layer needs (converted when planned so).
static const float *trunk_input(net_ws *ws, const model *m, const float *x, int s) {
    const size_t n = (size_t)m->in_c * m->in_h * m->in_w;
    const net_lplan *p = &ws->plan[0];
    if (!p->cvt) return x + s * n;
    float *dst = ws->cvt[0] + s * cvt_floats(m, 0, p);
    nchw_to_nhwc(dst, x + s * n, 1, m->in_c, p->cvt_cs, m->in_h * m->in_w, 1);
    return dst;
}

static void trunk_forward(net_ws *ws, const model *m, const float *params, const float *x,
                          int B, const net_dropout *drop) {
    trunk_pack(ws, m, params, 0);
    double t0 = 0;
    if (ws->prof) {
        trunk_prof_zero(ws);
        t0 = ht_now();
    }
#pragma omp parallel num_threads(ws->nthreads)
    {
        float *mine = trunk_scratch(ws, m);
        double *tp = trunk_prof_mine(ws);
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            double tl = tp ? ht_now() : 0;
            const float *in = trunk_input(ws, m, x, s);
            for (int l = 0; l < ws->trunk; l++) {
                const layer *L = &m->layers[l];
                const net_lplan *p = &ws->plan[l];
                const size_t n = out_floats(L, p);
                float *out = ws->act[l] + s * n;
                net_call c = {.L = L, .p = p, .l = l, .B = 1, .nt = 1,
                              .act = layer_act_fn(L->kind), .params = params,
                              .in = in, .out = out, .scratch = mine + p->scr_off,
                              .pack = ws->pack + p->pack_off, .drop = drop,
                              .ids = drop ? drop->ids + s : NULL};
                net_layer_ops_of[L->kind]->forward_one(&c);
                if (tp) {
                    double now = ht_now();
                    tp[l] += now - tl;
                    tl = now;
                }
                in = out;
            }
        }
    }
    if (ws->prof) trunk_prof_share(ws, 0, ht_now() - t0);
}

// The lowest layer the backward pass must reach: the first with parameters that are not frozen
// or with batchnorm statistics (its backward writes them). Below it every layer is frozen (or
// has no parameters), so nothing there needs a gradient: the backward stops there, and that
// layer computes no input gradient. A model with nothing to train: n_layers.
static int backward_floor(const model *m) {
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (((L->n_w || L->n_b) && !L->frozen) || L->n_s) return l;
    }
    return m->n_layers;
}

// gout (B, trunk output) is the gradient of the trunk's output; adds the gradients of the
// trunk's parameters from layer `reach` up to grads.
static void trunk_backward(net_ws *ws, const model *m, const float *params, float *grads,
                           const float *x, int B, const net_dropout *drop, float *gout,
                           int reach) {
    const int T = ws->trunk;
    const size_t gout_n = out_floats(&m->layers[T - 1], &ws->plan[T - 1]);
    int nt = ws->nthreads;
    trunk_pack(ws, m, params, 1);
    double t0 = 0;
    if (ws->prof) {
        trunk_prof_zero(ws);
        t0 = ht_now();
    }
#pragma omp parallel num_threads(ws->nthreads)
    {
        float *mine = trunk_scratch(ws, m);
        float *ga = mine + ws->tgrad_off, *gb = ga + ws->tgrad_n;
        double *tp = trunk_prof_mine(ws);
#pragma omp single nowait
        nt = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            float *dout = gout + s * gout_n, *dfree = ga;
            double tl = tp ? ht_now() : 0;
            for (int l = T - 1; l >= reach; l--) {
                const layer *L = &m->layers[l];
                const net_lplan *p = &ws->plan[l];
                const size_t n = out_floats(L, p);
                const float *in = l > 0 ? ws->act[l - 1] + s * out_floats(&m->layers[l - 1],
                                                                             &ws->plan[l - 1])
                                        : trunk_input(ws, m, x, s);
                // The first layer's input gradient is never needed, nor the reach layer's.
                float *din = l > reach ? dfree : NULL;
                net_call c = {.L = L, .p = p, .l = l, .B = 1, .nt = 1,
                              .act = layer_act_fn(L->kind), .params = params,
                              .in = in, .out = ws->act[l] + s * n, .dout = dout, .din = din,
                              .scratch = mine + p->scr_off, .pack = ws->pack + p->pack_off,
                              .drop = drop, .ids = drop ? drop->ids + s : NULL};
                din = net_layer_ops_of[L->kind]->backward_one(&c);
                if (din && din != dout) {
                    dout = din;
                    dfree = din == ga ? gb : ga;
                }
                if (tp) {
                    double now = ht_now();
                    tp[l] += now - tl;
                    tl = now;
                }
            }
        }
    }
    if (ws->prof) trunk_prof_share(ws, 1, ht_now() - t0);
    // Per-thread sums added in thread order, so a given nthreads is deterministic.
    for (int l = reach; l < T; l++) {
        const layer *L = &m->layers[l];
        const net_lplan *p = &ws->plan[l];
        if (L->kind != LAYER_CONV2D) continue;
        double t = ws->prof ? ht_now() : 0;
        conv_geom g = geom_of(L, p);
        conv2d_nhwc_scratch_reduce(grads + L->w_off, L->n_b ? grads + L->b_off : NULL,
                                   ws->tscr + p->scr_off,
                                   ws->tslice, nt, &g);
        if (ws->prof) ws->prof[2 * l + 1] += ht_now() - t;
    }
}

const float *net_forward(net_ws *ws, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop) {
    int nt = ws->nthreads;
    if (ws->trunk) trunk_forward(ws, m, params, x, B, drop);
    const float *in = ws->trunk ? ws->act[ws->trunk - 1] : x;
    for (int l = ws->trunk; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        const net_lplan *p = &ws->plan[l];
        float *out = ws->act[l];
        double t = ws->prof ? ht_now() : 0;
        const float *lin = layer_input(ws, m, l, in, B);
        net_call c = {.L = L, .p = p, .l = l, .B = B, .nt = nt, .act = layer_act_fn(L->kind),
                      .params = params, .in = lin, .out = out, .scratch = ws->conv_ws, .drop = drop,
                      .ids = drop ? drop->ids : NULL, .y = y, .loss = ws->loss,
                      .bn_stats = ws->bn_stats[l], .group = ws->bn_group};
        net_layer_ops_of[L->kind]->forward(&c);
        if (ws->prof) ws->prof[2 * l] += ht_now() - t;
        in = out;
    }
    return in;
}

size_t net_grad_ready_from(const model *m, int l) {
    size_t from = m->n_trainable, below = 0;
    for (int k = 0; k < m->n_layers; k++) {
        const layer *L = &m->layers[k];
        size_t lo = m->n_trainable, hi = 0;
        if (L->n_w) lo = L->w_off < lo ? L->w_off : lo, hi = L->w_off + L->n_w > hi ? L->w_off + L->n_w : hi;
        if (L->n_b) lo = L->b_off < lo ? L->b_off : lo, hi = L->b_off + L->n_b > hi ? L->b_off + L->n_b : hi;
        if (lo >= hi) continue;
        if (k >= l && lo < from) from = lo;
        if (k < l && hi > below) below = hi;
    }
    return below <= from ? from : m->n_trainable;
}

void net_backward(net_ws *ws, const model *m, const float *params, float *grads, const float *x,
                  const uint8_t *y, int B, const net_dropout *drop) {
    net_backward_to(ws, m, params, grads, x, y, B, drop, 0);
}

void net_backward_to(net_ws *ws, const model *m, const float *params, float *grads,
                     const float *x, const uint8_t *y, int B, const net_dropout *drop,
                     net_grad_mode overwrite) {
    int nt = ws->nthreads;
    const int reach = backward_floor(m);
    // Overwriting: the dense layers' GEMMs write their weight gradients (beta 0), and the
    // convolutions' few parameters are zeroed here and then added to as usual; the frozen
    // layers below the reach, which the pass does not reach, get zeros.
    for (int l = 0; overwrite && l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->kind != LAYER_CONV2D && l >= reach) continue;
        if (L->n_w) memset(grads + L->w_off, 0, sizeof(float) * L->n_w);
        if (L->n_b) memset(grads + L->b_off, 0, sizeof(float) * L->n_b);
    }
    float *dout = ws->g0, *dfree = ws->g1;
    const int stop = ws->trunk > reach ? ws->trunk : reach;
    for (int l = m->n_layers - 1; l >= stop; l--) {
        const layer *L = &m->layers[l];
        const net_lplan *p = &ws->plan[l];
        double t = ws->prof ? ht_now() : 0;
        // The layer's input as the forward pass used it (converted copies are still there).
        const float *in = p->cvt ? ws->cvt[l] : l > 0 ? ws->act[l - 1] : x;
        // The first layer's input gradient is never needed, nor the reach layer's.
        float *din = l > reach ? dfree : NULL;
        // The loss head writes its gradient even as a first layer: into the spare buffer.
        net_call c = {.L = L, .p = p, .l = l, .B = B, .nt = nt, .act = layer_act_fn(L->kind),
                      .params = params, .grads = grads,
                      .beta = overwrite ? 0.0f : 1.0f, .in = in, .out = ws->act[l],
                      .dout = dout, .din = (layer_flags(L->kind) & LF_LAST) ? dfree : din,
                      .scratch = ws->conv_ws, .drop = drop, .ids = drop ? drop->ids : NULL,
                      .y = y, .bn_stats = ws->bn_stats[l], .group = ws->bn_group,
                      .folded = l > 0 && ws->plan[l - 1].drop_fold,
                      .fold_rate = p->drop_fold ? m->layers[l + 1].rate : 0.0f};
        din = net_layer_ops_of[L->kind]->backward(&c);
        // Before the layout change below, which writes over dout.
        if (ws->factor && L->kind == LAYER_DENSE && L->n_w)
            ws->factor(ws->factor_arg, l, c.in, c.dout, B);
        if (din && din != dout) {
            if (p->cvt) {
                // Back to the previous layer's layout, into dout's buffer (no longer needed).
                int c, hw;
                in_shape(m, l, &c, &hw);
                if (p->cvt == 1) nhwc_to_nchw(dout, din, B, c, p->cvt_cs, hw, nt);
                else nchw_to_nhwc(dout, din, B, c, p->cvt_cs, hw, nt);
            } else {
                dfree = dout;
                dout = din;
            }
        }
        if (ws->prof) ws->prof[2 * l + 1] += ht_now() - t;
        if (ws->ready) {
            size_t from = net_grad_ready_from(m, l);
            if (from < m->n_trainable) ws->ready(ws->ready_arg, from);
        }
    }
    if (ws->trunk > reach) trunk_backward(ws, m, params, grads, x, B, drop, dout, reach);
}
