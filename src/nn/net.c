// Network forward/backward on the CPU: walks the schedule's nodes (schedule.h) calling each
// family's ops (net_layers.h). Spatial activations (conv and pool outputs) are kept
// channels-last, where the direct convolution kernels are fast; a node that needs the other
// layout (dense: PyTorch's NCHW flattening order) gets a converted copy of its input, and its
// input gradient is converted back. The schedule's fusions are applied: a relu after a family
// that can apply it (conv, batchnorm) is done by that node, forward and backward; a relu right
// before a dropout (after the trunk) does the dropout's backward too (drop_fold). The leading
// run of spatial nodes (the trunk) goes one sample at a time through all its nodes on one
// thread, so a sample's tensors stay in that core's cache between layers; the nodes after it
// (dense and the rest) go batch-wise. Activation gradients live in the schedule's gradient
// slots, batch-wise and, in the trunk, per thread.
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

static const layer *node_layer(const model *m, const schedule *s, int n) {
    return &m->layers[s->node[n].layer];
}
static const net_layer_ops *node_ops(const model *m, const schedule *s, int n) {
    return net_layer_ops_of[node_layer(m, s, n)->kind];
}

// Channels and positions of node n's input tensor as the node before produced it (a dense
// layer's own c/h/w describe it flattened).
static void in_shape(const model *m, const schedule *s, int n, int *c, int *hw) {
    int from = s->node[n].in[0];
    if (from == SCHED_INPUT) {
        *c = m->in_c;
        *hw = m->in_h * m->in_w;
    } else {
        const layer *P = node_layer(m, s, from);
        *c = P->oc;
        *hw = P->oh * P->ow;
    }
}

// Plans node n given the layout of its input; returns the layout of its output.
static fmt plan_layer(const model *m, const schedule *s, int n, fmt in, net_lplan *p) {
    const layer *L = node_layer(m, s, n);
    const net_layer_ops *ops = net_layer_ops_of[L->kind];
    int c, hw;
    in_shape(m, s, n, &c, &hw);
    memset(p, 0, sizeof *p);
    fmt out = in;
    unsigned flags = layer_flags(L->kind);
    if (flags & LF_SPATIAL) {
        if (!as_nhwc(in, c, hw, &p->in_cs)) {
            p->cvt = 1;
            p->cvt_cs = p->in_cs = conv_cpad(c);
        }
        out.nhwc = 1;
        out.cs = ops->out_cs ? ops->out_cs(L, p->in_cs) : p->in_cs;
    } else if (flags & LF_FLAT) {
        if (!as_nchw(in, c, hw)) {
            p->cvt = 2;
            p->cvt_cs = in.cs;
        }
        out.nhwc = 0;
        out.cs = L->oc;
    }
    // else elementwise: the layout passes through
    p->fuse_relu = s->node[n].fuse_relu;
    p->skip = s->node[n].fused;
    p->out_nhwc = out.nhwc;
    p->out_cs = out.cs;
    return out;
}

// Floats per sample of node n's output, and of its converted input (0 when not converted).
#define out_floats net_out_floats
static size_t cvt_floats(const model *m, const schedule *s, int n, const net_lplan *p) {
    int c, hw;
    in_shape(m, s, n, &c, &hw);
    if (!p->cvt) return 0;
    return (size_t)hw * (p->cvt == 1 ? p->cvt_cs : c);
}
// Floats per sample of node n's input as it arrives, in the layout f.
static size_t in_floats(const model *m, const schedule *s, int n, fmt f) {
    int c, hw;
    in_shape(m, s, n, &c, &hw);
    return (size_t)hw * (f.nhwc ? f.cs : c);
}

#define geom_of net_conv_geom

// Each buffer starts on a 64-byte boundary.
static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

// Whether node n (planned as p) belongs in the trunk, given that all before it do: its output
// is channels-last and its family runs one sample at a time.
// Under --conv-algo gemm there is no trunk: GEMMs over the batch compute every convolution.
static int in_trunk(const model *m, const layer *L, const net_lplan *p) {
    return p->out_nhwc && net_layer_ops_of[L->kind]->forward_one &&
           m->setup.conv_algo != CONV_ALGO_GEMM;
}

// Floats of a fused batchnorm's samples' sums (3 * C doubles a sample), in which its backward
// leaves its groups' coefficients (3 * C floats a group).
static size_t bn_parts_floats(const layer *L, int max_batch) {
    return (size_t)6 * L->c * (size_t)max_batch;
}

typedef struct ws_sizes {
    size_t act_floats, cvt_floats, grad_floats, conv_floats, bn_floats;
    int trunk;
    int mixed;    // 1 + a merge node whose inputs come in different layouts, else 0
    size_t pack_floats;              // the trunk's packed weights
    size_t tslice, tgrad_off, tgrad_n; // one thread's trunk scratch
} ws_sizes;

// Sizes of everything, and the plan of every node when plan is not NULL.
static ws_sizes ws_measure(const model *m, const schedule *s, int max_batch, int nthreads,
                           net_lplan *plan) {
    ws_sizes z = {0};
    size_t widest = 0, twidest = 0, scr = 0;
    const int group = model_bn_group(m);
    fmt bf[s->n_bufs]; // each buffer's layout, as its owner writes it
    bf[0] = (fmt){.nhwc = 0, .cs = m->in_c};
    unsigned char bn_fused[s->n_nodes + 1]; // a batchnorm whose conv is fuse_bn
    memset(bn_fused, 0, sizeof bn_fused);
    int trunk = 1;
    for (int n = 0; n < s->n_nodes; n++) {
        const sched_node *N = &s->node[n];
        const layer *L = node_layer(m, s, n);
        const net_layer_ops *ops = net_layer_ops_of[L->kind];
        net_lplan p;
        fmt f = bf[N->in_buf[0]];

        size_t in = in_floats(m, s, n, f);
        bf[N->buf] = plan_layer(m, s, n, f, &p);
        // A merge's other inputs come as they are: an element-wise one's in input 0's layout
        // (a 1x1 one, broadcast, in any), a concat's channels-last (any channel stride).
        p.ins_cs[0] = p.in_cs;
        for (int k = 1; k < N->n_in; k++) {
            const fmt g = bf[N->in_buf[k]];
            const int ok = (layer_flags(L->kind) & LF_CONCAT) || L->in_hw[k] == 1
                               ? as_nhwc(g, L->in_ch[k], L->in_hw[k], &p.ins_cs[k])
                               : g.nhwc == f.nhwc && g.cs == f.cs && (p.ins_cs[k] = g.cs, 1);
            if (!ok && !z.mixed) z.mixed = n + 1;
        }
        size_t out = out_floats(L, &p), cv = cvt_floats(m, s, n, &p);
        if (s->buf[N->buf].owner == n) z.act_floats += align16(out * (size_t)max_batch);
        if (cv) z.cvt_floats += align16(cv * (size_t)max_batch);
        if (ops->stat_floats) z.bn_floats += align16(ops->stat_floats(L, group, max_batch));
        p.bn_fused = bn_fused[n];
        if (p.bn_fused) z.bn_floats += align16(bn_parts_floats(L, max_batch));
        // The trunk is a chain: each node reads the one before, which nothing else reads.
        trunk = trunk && in_trunk(m, L, &p) && N->n_in == 1 &&
                (n == 0 ? N->in[0] == SCHED_INPUT : N->in[0] == n - 1 && s->node[n - 1].n_out == 1);
        // A conv after the trunk makes the statistics and input gradient of the training
        // batchnorm that is its only reader.
        if (!trunk && s->node[n].fuse_bn) p.fuse_bn = bn_fused[s->node[n].fused_with] = 1;
        if (trunk) {
            z.trunk = n + 1;
            if (out > twidest) twidest = out;
            if (ops->pack_floats) {
                p.pack_off = z.pack_floats;
                z.pack_floats += align16(ops->pack_floats(L, &p));
            }
            if (ops->scratch_floats) {
                p.scr_off = scr;
                scr += align16(ops->scratch_floats(L, &p));
            }
        } else {
            if (ops->ws_floats) {
                size_t c = ops->ws_floats(L, &p, nthreads);
                if (c > z.conv_floats) z.conv_floats = c;
            }
            // Batch-wise gradients: this node's input (the trunk's output included), output
            // and converted input.
            if (in > widest) widest = in;
            if (out > widest) widest = out;
            if (cv > widest) widest = cv;
        }
        if (plan) plan[n] = p;
    }
    z.grad_floats = align16(widest * (size_t)max_batch);
    z.tgrad_off = scr;
    z.tgrad_n = z.trunk ? align16(twidest) : 0;
    z.tslice = scr + (size_t)s->n_gslots * z.tgrad_n;
    return z;
}

// The algorithm of conv node n (planned as p): under --conv-algo auto, a node after the trunk
// (run batch-wise) computes as GEMMs over the batch, unless the per-sample kernels do better by
// its shape, when it takes what conv_choose times (direct or Winograd), as a trunk node does:
// a 3x3 or 5x5 stride-1 layer of at least CONV_PER_SAMPLE_MIN_POS output positions (Winograd's
// tiles are mostly padding below), and a layer whose GEMM would copy its windows (all but 1x1
// stride-1 ones) to sum fewer than CONV_GEMM_MIN_SUM products (C x K x K: the copy costs more
// than the product). An explicit direct or winograd request holds for every node, and gemm
// makes every node a GEMM (in_trunk: there is no trunk); the GEMMs multiply in bfloat16 under
// --precision bf16 (CONV_GEMM_BF16) where they are wide enough, the per-sample kernels stay
// float32. By shape,
// not timed: every rank and a resumed run decide alike. Measured (batch 64, 2 cores, AVX2,
// --profile): at 8x8 and 64 channels Winograd 92 and 97 GFLOP/s (forward, backward) against
// GEMM's 38 and 37 (ResNet-20's third stage; ResNet50's conv2 at 32x32 inputs 0.09 s against
// 0.16); at 4x4 and 128 channels GEMM 0.11 s against Winograd's 0.33 (ResNet50's conv3); a 1x1
// stride-2 layer on 16 channels direct 0.05 s against GEMM's 0.22.
#define CONV_PER_SAMPLE_MIN_POS 64
#define CONV_GEMM_MIN_SUM 64
static conv_choice node_choice(const model *m, const schedule *s, int n, const net_lplan *p,
                               int trunk, int nthreads) {
    const int need_din = s->node[n].in[0] != SCHED_INPUT;
    const layer *L = node_layer(m, s, n);
    conv_geom g = geom_of(L, p);
    const int wino = conv2d_wino_ok(&g, CONV_DIR_FWD) && g.OH * g.OW >= CONV_PER_SAMPLE_MIN_POS;
    const int small_copy = !(g.K == 1 && g.stride == 1 && g.pad == 0) &&
                           g.C * g.K * g.K < CONV_GEMM_MIN_SUM;
    if (m->setup.conv_algo == CONV_ALGO_GEMM ||
        (m->setup.conv_algo == CONV_ALGO_AUTO && n >= trunk && !wino && !small_copy)) {
        conv_choice c = {CONV_GEMM, CONV_GEMM, CONV_GEMM, need_din, L->k, {{0}}};
        // Under --precision bf16, each direction whose product is wide enough (gemm_prec_for:
        // the forward's output columns are OC, the input gradient's C*K*K, the weight
        // gradient's both).
        const gemm_prec want = model_gemm_prec(m);
        const int ckk = g.C * g.K * g.K;
        if (gemm_prec_for(want, g.OC, g.OC) == GEMM_BF16) c.fwd = CONV_GEMM_BF16;
        if (gemm_prec_for(want, ckk, ckk) == GEMM_BF16) c.din = CONV_GEMM_BF16;
        if (gemm_prec_for(want, g.OC, ckk) == GEMM_BF16) c.dw = CONV_GEMM_BF16;
        return c;
    }
    return conv_choose(&g, m->setup.conv_algo, need_din, nthreads);
}

static size_t ws_total_floats(const model *m, const schedule *s, int max_batch, int nthreads) {
    ws_sizes z = ws_measure(m, s, max_batch, nthreads, NULL);
    return z.act_floats + z.cvt_floats + (size_t)(s->n_gslots + s->max_add) * z.grad_floats +
           align16(z.conv_floats) + z.bn_floats + z.pack_floats + (size_t)nthreads * z.tslice +
           align16((size_t)max_batch);
}

size_t net_ws_bytes(const model *m, int max_batch, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    schedule s;
    ht_error e;
    if (schedule_build(&s, m, &e) < 0) return (size_t)-1;
    size_t n = (size_t)s.n_nodes;
    size_t bytes = sizeof(float) * ws_total_floats(m, &s, max_batch, nthreads) +
                   n * (sizeof(net_lplan) + 4 * sizeof(float *) + nthreads * sizeof(double)) +
                   n * sizeof(sched_node) + (n + 1) * sizeof(sched_buf) +
                   (size_t)s.n_gslots * sizeof(float *);
    schedule_free(&s);
    return bytes;
}

int net_ws_init(net_ws *ws, const model *m, int max_batch, int nthreads, ht_error *e) {
    memset(ws, 0, sizeof *ws);
    ws->max_batch = max_batch;
    ws->nthreads = nthreads < 1 ? 1 : nthreads;
    ws->n_layers = m->n_layers;
    if (schedule_build(&ws->sched, m, e) < 0)
        return ht_wrap(e, "network workspace for a micro-batch of %d", max_batch);
    const schedule *s = &ws->sched;
    const int nn = s->n_nodes;
    size_t total = ws_total_floats(m, s, max_batch, ws->nthreads);
    ws->plan = ht_calloc((size_t)nn, sizeof *ws->plan, e);
    ws->act = ws->plan ? ht_calloc((size_t)nn, sizeof *ws->act, e) : NULL;
    ws->cvt = ws->act ? ht_calloc((size_t)nn, sizeof *ws->cvt, e) : NULL;
    ws->bn_stats = ws->cvt ? ht_calloc((size_t)nn, sizeof *ws->bn_stats, e) : NULL;
    ws->bn_parts = ws->bn_stats ? ht_calloc((size_t)nn, sizeof *ws->bn_parts, e) : NULL;
    ws->gslot = ws->bn_parts ? ht_calloc((size_t)s->n_gslots, sizeof *ws->gslot, e) : NULL;
    ws->tprof = ws->gslot ? ht_calloc((size_t)m->n_layers * ws->nthreads, sizeof *ws->tprof, e)
                          : NULL;
    if (ws->tprof) {
        ws->owned = aligned_alloc(64, total * sizeof(float));
        if (!ws->owned) ht_fail(e, "out of memory (%zu bytes)", total * sizeof(float));
    }
    if (!ws->owned) {
        net_ws_free(ws);
        return ht_wrap(e, "network workspace for a micro-batch of %d", max_batch);
    }
    ws_sizes z = ws_measure(m, s, max_batch, ws->nthreads, ws->plan);
    if (z.mixed) {
        const layer *L = node_layer(m, s, z.mixed - 1);
        ht_fail(e, "layer %s (%s): its inputs reach it in different layouts (channels-last and "
                "not, or other channel strides), which the CPU path does not convert for a "
                "merge", L->name, layer_desc_of(L->kind)->name);
        net_ws_free(ws);
        return -1;
    }
    for (int n = 0; n < nn; n++)
        if (node_ops(m, s, n)->flags & NET_OP_CONV_ALGO)
            ws->plan[n].algo = node_choice(m, s, n, &ws->plan[n], z.trunk, ws->nthreads);
    float *p = ws->owned;
    for (int n = 0; n < nn; n++) {
        const sched_node *N = &s->node[n];
        if (s->buf[N->buf].owner == n) {
            ws->act[n] = p;
            p += align16(out_floats(node_layer(m, s, n), &ws->plan[n]) * (size_t)max_batch);
        } else {
            ws->act[n] = ws->act[s->buf[N->buf].owner];
        }
        if (ws->plan[n].cvt) {
            ws->cvt[n] = p;
            p += align16(cvt_floats(m, s, n, &ws->plan[n]) * (size_t)max_batch);
        }
    }
    for (int k = 0; k < s->n_gslots; k++) {
        ws->gslot[k] = p;
        p += z.grad_floats;
    }
    for (int k = 0; k < s->max_add; k++) {
        ws->gadd[k] = p;
        p += z.grad_floats;
    }
    ws->conv_ws = p;
    p += align16(z.conv_floats);
    ws->bn_group = model_bn_group(m);
    for (int n = 0; n < nn; n++) {
        const net_layer_ops *ops = node_ops(m, s, n);
        if (!ops->stat_floats) continue;
        ws->bn_stats[n] = p;
        p += align16(ops->stat_floats(node_layer(m, s, n), ws->bn_group, max_batch));
        if (!ws->plan[n].bn_fused) continue;
        ws->bn_parts[n] = (double *)p; // 64-byte aligned
        p += align16(bn_parts_floats(node_layer(m, s, n), max_batch));
    }
    ws->trunk = z.trunk;
    // Backward through relu -> dropout in one pass, without the dropout's random numbers: the
    // dropout's output (kept in place of the relu's) is > 0 exactly where the mask kept a
    // positive relu output, and there the dropout's gradient is dout * scale; elsewhere the
    // relu passes nothing. The same bits as the two passes (relu_dropout_backward).
    for (int n = z.trunk; n < nn; n++) ws->plan[n].drop_fold = s->node[n].drop_fold;
    ws->pack = p;
    p += z.pack_floats;
    ws->tscr = p;
    ws->tslice = z.tslice;
    ws->tgrad_off = z.tgrad_off;
    ws->tgrad_n = z.tgrad_n;
    p += (size_t)ws->nthreads * z.tslice;
    ws->loss = p;
    return 0;
}

void net_ws_free(net_ws *ws) {
    free(ws->owned);
    free(ws->act);
    free(ws->cvt);
    free(ws->bn_stats);
    free(ws->bn_parts);
    free(ws->gslot);
    free(ws->plan);
    free(ws->tprof);
    schedule_free(&ws->sched);
    memset(ws, 0, sizeof *ws);
}

int net_layer_conv_algo(const layer *L) {
    return (net_layer_ops_of[L->kind]->flags & NET_OP_CONV_ALGO) != 0;
}

int net_layer_factors(const layer *L) {
    return (net_layer_ops_of[L->kind]->flags & NET_OP_FACTORS) != 0;
}

int net_conv_choices(const model *m, int nthreads, conv_choice *out) {
    schedule s;
    ht_error e;
    if (schedule_build(&s, m, &e) < 0) return -1;
    net_lplan *plan = calloc((size_t)s.n_nodes, sizeof *plan);
    if (!plan) {
        schedule_free(&s);
        return -1;
    }
    const int trunk = ws_measure(m, &s, 1, nthreads, plan).trunk;
    for (int l = 0; l < m->n_layers; l++) memset(&out[l], 0, sizeof out[l]);
    for (int n = 0; n < s.n_nodes; n++)
        if (node_ops(m, &s, n)->flags & NET_OP_CONV_ALGO)
            out[s.node[n].layer] = node_choice(m, &s, n, &plan[n], trunk, nthreads);
    free(plan);
    schedule_free(&s);
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
        if (!net_layer_conv_algo(L)) continue;
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


// Node n's input as it arrives: the model's input x, or its input node's buffer.
static const float *node_in(const net_ws *ws, int n, const float *x) {
    int from = ws->sched.node[n].in[0];
    return from == SCHED_INPUT ? x : ws->act[from];
}
// Input k of node n as it arrives (a merge's inputs need no conversion).
static const float *node_in_k(const net_ws *ws, int n, int k, const float *x) {
    int from = ws->sched.node[n].in[k];
    return from == SCHED_INPUT ? x : ws->act[from];
}

// Node n's input in the layout it needs: converted into ws->cvt[n] when the plan says so.
static const float *layer_input(net_ws *ws, const model *m, int n, const float *in, int B) {
    const net_lplan *p = &ws->plan[n];
    int c, hw;
    in_shape(m, &ws->sched, n, &c, &hw);
    if (p->cvt == 1) nchw_to_nhwc(ws->cvt[n], in, B, c, p->cvt_cs, hw, ws->nthreads);
    if (p->cvt == 2) nhwc_to_nchw(ws->cvt[n], in, B, c, p->cvt_cs, hw, ws->nthreads);
    return p->cvt ? ws->cvt[n] : in;
}

// dst += src over n floats.
static void add_into(float *dst, const float *src, size_t n, int nt) {
    (void)nt; // without OpenMP
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// Floats per sample of buffer b (b > 0), as its owner wrote it.
static size_t buf_floats(const net_ws *ws, const model *m, int b) {
    int owner = ws->sched.buf[b].owner;
    return out_floats(node_layer(m, &ws->sched, owner), &ws->plan[owner]);
}

// The batch-wise gradient of buffer b (in its slot; NULL for one that has none).
static float *grad_of(const net_ws *ws, int b) {
    int k = ws->sched.buf[b].gslot;
    return k < 0 ? NULL : ws->gslot[k];
}

// Packs the weights of the trunk's nodes that keep them packed; while profiling, each layer's
// time goes to its entry for direction dir (0 forward, 1 backward).
static void trunk_pack(net_ws *ws, const model *m, const float *params, int dir) {
    if (ws->pack_kept && ws->packed) return;
    ws->packed = 1;
    for (int n = 0; n < ws->trunk; n++) {
        const layer *L = node_layer(m, &ws->sched, n);
        const net_layer_ops *ops = net_layer_ops_of[L->kind];
        if (!ops->pack) continue;
        double t = ws->prof ? ht_now() : 0;
        ops->pack(ws->pack + ws->plan[n].pack_off, params, L, &ws->plan[n]);
        if (ws->prof) ws->prof[2 * ws->sched.node[n].layer + dir] += ht_now() - t;
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
    for (int n = 0; n < ws->trunk; n++) {
        const int l = ws->sched.node[n].layer;
        double mine = 0;
        for (int t = 0; t < ws->nthreads; t++) mine += ws->tprof[(size_t)t * ws->n_layers + l];
        ws->prof[2 * l + dir] += wall * mine / total;
    }
}
// This thread's per-layer times while profiling, else NULL.
static double *trunk_prof_mine(net_ws *ws) {
    return ws->prof ? ws->tprof + (size_t)omp_get_thread_num() * ws->n_layers : NULL;
}

// This thread's slice of the trunk scratch, with every node's part zeroed.
static float *trunk_scratch(net_ws *ws, const model *m) {
    float *mine = ws->tscr + (size_t)omp_get_thread_num() * ws->tslice;
    for (int n = 0; n < ws->trunk; n++) {
        const layer *L = node_layer(m, &ws->sched, n);
        const net_layer_ops *ops = net_layer_ops_of[L->kind];
        if (ops->scratch_init) ops->scratch_init(mine + ws->plan[n].scr_off, L, &ws->plan[n]);
    }
    return mine;
}

// Sample s's input of node n in the trunk, in the layout the node needs: the model's input
// (converted when planned so), or its input node's buffer.
static const float *trunk_input(net_ws *ws, const model *m, const float *x, int n, int s) {
    const sched_node *N = &ws->sched.node[n];
    if (N->in[0] != SCHED_INPUT) return ws->act[N->in[0]] + s * buf_floats(ws, m, N->in_buf[0]);
    const size_t k = (size_t)m->in_c * m->in_h * m->in_w;
    const net_lplan *p = &ws->plan[n];
    if (!p->cvt) return x + s * k;
    float *dst = ws->cvt[n] + s * cvt_floats(m, &ws->sched, n, p);
    nchw_to_nhwc(dst, x + s * k, 1, m->in_c, p->cvt_cs, m->in_h * m->in_w, 1);
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
            for (int n = 0; n < ws->trunk; n++) {
                const sched_node *N = &ws->sched.node[n];
                const layer *L = &m->layers[N->layer];
                const net_lplan *p = &ws->plan[n];
                net_call c = {.L = L, .p = p, .l = N->layer, .B = 1, .nt = 1,
                              .act = layer_act_fn(L->kind), .op = layer_merge_op(L->kind), .params = params,
                              .in = trunk_input(ws, m, x, n, s),
                              .out = ws->act[n] + s * out_floats(L, p),
                              .scratch = mine + p->scr_off, .pack = ws->pack + p->pack_off,
                              .drop = drop, .ids = drop ? drop->ids + s : NULL};
                net_layer_ops_of[L->kind]->forward_one(&c);
                if (tp) {
                    double now = ht_now();
                    tp[N->layer] += now - tl;
                    tl = now;
                }
            }
        }
    }
    if (ws->prof) trunk_prof_share(ws, 0, ht_now() - t0);
}

// The gradient of the trunk's output is in its buffer's batch-wise slot; adds the gradients of
// the parameters of the trunk's nodes whose backward runs to grads. Within a sample every other
// buffer's gradient is in this thread's slot of the same number.
static void trunk_backward(net_ws *ws, const model *m, const float *params, float *grads,
                           const float *x, int B, const net_dropout *drop) {
    const schedule *S = &ws->sched;
    const int T = ws->trunk, out_buf = S->node[T - 1].buf;
    float *gout = grad_of(ws, out_buf);
    const size_t gout_n = buf_floats(ws, m, out_buf);
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
        float *tg = mine + ws->tgrad_off;
        double *tp = trunk_prof_mine(ws);
#pragma omp single nowait
        nt = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int s = 0; s < B; s++) {
            double tl = tp ? ht_now() : 0;
            for (int n = T - 1; n >= 0; n--) {
                const sched_node *N = &S->node[n];
                if (!N->backward) continue;
                const layer *L = &m->layers[N->layer];
                const net_lplan *p = &ws->plan[n];
                float *dout = N->buf == out_buf
                                  ? gout + s * gout_n
                                  : tg + (size_t)S->buf[N->buf].gslot * ws->tgrad_n;
                float *din = N->need_grad[0]
                                 ? tg + (size_t)S->buf[N->in_buf[0]].gslot * ws->tgrad_n
                                 : NULL;
                net_call c = {.L = L, .p = p, .l = N->layer, .B = 1, .nt = 1,
                              .act = layer_act_fn(L->kind), .op = layer_merge_op(L->kind), .params = params,
                              .in = trunk_input(ws, m, x, n, s),
                              .out = ws->act[n] + s * out_floats(L, p), .dout = dout,
                              .din = din, .scratch = mine + p->scr_off,
                              .pack = ws->pack + p->pack_off, .drop = drop,
                              .ids = drop ? drop->ids + s : NULL};
                net_layer_ops_of[L->kind]->backward_one(&c);
                if (tp) {
                    double now = ht_now();
                    tp[N->layer] += now - tl;
                    tl = now;
                }
            }
        }
    }
    if (ws->prof) trunk_prof_share(ws, 1, ht_now() - t0);
    // Per-thread sums added in thread order, so a given nthreads is deterministic.
    for (int n = 0; n < T; n++) {
        const layer *L = node_layer(m, S, n);
        const net_layer_ops *ops = net_layer_ops_of[L->kind];
        if (!S->node[n].backward || !ops->scratch_reduce) continue;
        double t = ws->prof ? ht_now() : 0;
        ops->scratch_reduce(grads, ws->tscr + ws->plan[n].scr_off, ws->tslice, nt, L,
                            &ws->plan[n]);
        if (ws->prof) ws->prof[2 * S->node[n].layer + 1] += ht_now() - t;
    }
}

const float *net_forward(net_ws *ws, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop) {
    int nt = ws->nthreads;
    if (ws->trunk) trunk_forward(ws, m, params, x, B, drop);
    for (int n = ws->trunk; n < ws->sched.n_nodes; n++) {
        const sched_node *N = &ws->sched.node[n];
        const layer *L = &m->layers[N->layer];
        const net_lplan *p = &ws->plan[n];
        double t = ws->prof ? ht_now() : 0;
        const float *lin = layer_input(ws, m, n, node_in(ws, n, x), B);
        net_call c = {.L = L, .p = p, .l = N->layer, .B = B, .nt = nt, .prec = model_gemm_prec(m),
                      .act = layer_act_fn(L->kind), .op = layer_merge_op(L->kind), .params = params, .in = lin,
                      .n_in = N->n_in, .ins = {lin},
                      .out = ws->act[n], .scratch = ws->conv_ws, .drop = drop,
                      .ids = drop ? drop->ids : NULL, .y = y, .loss = ws->loss,
                      .bn_stats = ws->bn_stats[n], .group = ws->bn_group};
        // Training: a fused conv hands its batchnorm the samples' sums.
        if (drop && p->fuse_bn) c.bn_parts = ws->bn_parts[N->fused_with];
        if (drop && p->bn_fused) c.bn_parts = ws->bn_parts[n];
        for (int k = 1; k < N->n_in; k++) c.ins[k] = node_in_k(ws, n, k, x);
        net_layer_ops_of[L->kind]->forward(&c);
        if (ws->prof) ws->prof[2 * N->layer] += ht_now() - t;
    }
    return ws->act[ws->sched.n_nodes - 1];
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
    const schedule *S = &ws->sched;
    int nt = ws->nthreads;
    // Overwriting: the dense layers' GEMMs write their weight gradients (beta 0), and the
    // families that add to theirs (conv) are zeroed here and then added to as usual, as are
    // parameters that several layers compute with (a shared layer's calls add up); the frozen
    // layers below the reach, which the pass does not reach, get zeros, statistics too.
    for (int n = 0; overwrite == NET_GRAD_WRITE && n < S->n_nodes; n++) {
        const layer *L = node_layer(m, S, n);
        // A frozen layer's statistics (a normalize layer's constants) have no sums to give.
        if (L->n_s && L->frozen) memset(grads + L->s_off, 0, sizeof(float) * L->n_s);
        if (!(net_layer_ops_of[L->kind]->flags & NET_OP_GRAD_ADDS) && S->node[n].backward &&
            !layer_params_shared(L))
            continue;
        if (L->n_w) memset(grads + L->w_off, 0, sizeof(float) * L->n_w);
        if (L->n_b) memset(grads + L->b_off, 0, sizeof(float) * L->n_b);
        if (L->n_s && !S->node[n].backward) memset(grads + L->s_off, 0, sizeof(float) * L->n_s);
    }
    const int stop = ws->trunk > S->reach ? ws->trunk : S->reach;
    for (int n = S->n_nodes - 1; n >= stop; n--) {
        const sched_node *N = &S->node[n];
        if (!N->backward) continue;
        const layer *L = &m->layers[N->layer];
        const net_layer_ops *ops = net_layer_ops_of[L->kind];
        const net_lplan *p = &ws->plan[n];
        double t = ws->prof ? ht_now() : 0;
        // The node's input as the forward pass used it (converted copies are still there).
        const float *in = p->cvt ? ws->cvt[n] : node_in(ws, n, x);
        float *dout = grad_of(ws, N->buf), *dslot[SCHED_MAX_IN];
        net_call c = {.L = L, .p = p, .l = N->layer, .B = B, .nt = nt, .prec = model_gemm_prec(m),
                      .act = layer_act_fn(L->kind), .op = layer_merge_op(L->kind), .params = params, .grads = grads,
                      .beta = overwrite == NET_GRAD_WRITE && !layer_params_shared(L) ? 0.0f
                                                                                   : 1.0f,
                      .in = in,
                      .n_in = N->n_in, .out = ws->act[n], .dout = dout,
                      .scratch = ws->conv_ws, .drop = drop, .ids = drop ? drop->ids : NULL,
                      .y = y, .bn_stats = ws->bn_stats[n], .group = ws->bn_group,
                      .folded = N->folded && ws->plan[N->in[0]].drop_fold,
                      .fold_rate = p->drop_fold ? node_layer(m, S, N->fused_with)->rate : 0.0f};
        // Each input's gradient goes into its buffer's slot, or, where a later reader wrote
        // that slot already (grad_add), into a scratch slot first, then added. The loss head
        // writes its gradient even when nothing wants it (as a first layer).
        for (int k = 0, adds = 0; k < N->n_in; k++) {
            const int want = N->need_grad[k] || (!k && (layer_flags(L->kind) & LF_LAST));
            c.ins[k] = k ? node_in_k(ws, n, k, x) : in;
            dslot[k] = grad_of(ws, N->in_buf[k]);
            c.dins[k] = !want ? NULL : N->grad_add[k] ? ws->gadd[adds++] : dslot[k];
        }
        c.din = c.dins[0];
        // A fused batchnorm leaves its coefficients for its conv, which makes the batchnorm's
        // din (never made into its slot) from its dout, still in its slot, sample by sample.
        bn_fuse bn;
        if (p->bn_fused) c.bn_parts = ws->bn_parts[n];
        if (p->fuse_bn) {
            const int r = N->fused_with;
            bn = (bn_fuse){.dout = grad_of(ws, S->node[r].buf),
                           .relu_out = ws->plan[r].fuse_relu ? ws->act[r] : NULL,
                           .stats = ws->bn_stats[r], .coef = (const float *)ws->bn_parts[r],
                           .G = ws->bn_group, .C = L->oc};
            c.bn = &bn;
        }
        float *din = ops->backward(&c);
        // Before the layout change below, which writes over dout.
        if (ws->factor && (ops->flags & NET_OP_FACTORS) && L->n_w)
            ws->factor(ws->factor_arg, N->layer, c.in, c.dout, B);
        if (din && din != dout && p->cvt) {
            // Back to the input's layout, into dout's slot (no longer needed), which then
            // becomes the input's slot and the input's the free one; or, to be added, is added.
            int ch, hw;
            in_shape(m, S, n, &ch, &hw);
            if (p->cvt == 1) nhwc_to_nchw(dout, din, B, ch, p->cvt_cs, hw, nt);
            else nchw_to_nhwc(dout, din, B, ch, p->cvt_cs, hw, nt);
            if (N->grad_add[0]) {
                add_into(dslot[0], dout, buf_floats(ws, m, N->in_buf[0]) * (size_t)B, nt);
            } else {
                float **a = &ws->gslot[S->buf[N->in_buf[0]].gslot];
                float **b = &ws->gslot[S->buf[N->buf].gslot];
                float *tmp = *a;
                *a = *b;
                *b = tmp;
            }
            din = NULL; // done
        }
        // Where an op left an input's gradient elsewhere than its slot (in place in dout, or in
        // a scratch slot), it goes there: added, or copied. A chain's ops write their slots.
        for (int k = 0; k < N->n_in; k++) {
            float *got = k ? c.dins[k] : din;
            if (!got || !c.dins[k] || N->in_buf[k] == 0) continue;
            const size_t nf = buf_floats(ws, m, N->in_buf[k]) * (size_t)B;
            if (N->grad_add[k]) add_into(dslot[k], got, nf, nt);
            else if (got != dslot[k]) memcpy(dslot[k], got, sizeof(float) * nf);
        }
        if (ws->prof) ws->prof[2 * N->layer + 1] += ht_now() - t;
        if (ws->ready) {
            size_t from = net_grad_ready_from(m, N->layer);
            if (from < m->n_trainable) ws->ready(ws->ready_arg, from);
        }
    }
    if (ws->trunk > S->reach) trunk_backward(ws, m, params, grads, x, B, drop);
}
