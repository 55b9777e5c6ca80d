// The zeropad family: rows of zeros added above and below a sample's (C, H, W) image, columns
// left and right of it, each side its own count (Keras's ZeroPadding2D; zeropad_keras.c reads
// it). Channels-last on the CPU path (LF_SPATIAL): a pixel's channels, pad channels included,
// move as one block.
#include "nn/layers.h"

#include <string.h>

#include "core/ht_omp.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// One sample at a time: in is (H, W, Cs), out (H + top + bottom, W + left + right, Cs).
static void zeropad_one(float *out, const float *in, const layer *L, int cs) {
    const size_t row = (size_t)L->ow * cs, left = (size_t)L->pad_left * cs;
    const size_t inner = (size_t)L->w * cs, right = (size_t)L->pad_right * cs;
    for (int y = 0; y < L->oh; y++, out += row) {
        const int iy = y - L->pad_top;
        if (iy < 0 || iy >= L->h) {
            memset(out, 0, sizeof(float) * row);
            continue;
        }
        memset(out, 0, sizeof(float) * left);
        memcpy(out + left, in + (size_t)iy * inner, sizeof(float) * inner);
        memset(out + left + inner, 0, sizeof(float) * right);
    }
}

// The gradient of the input is the output's gradient inside the padding.
static void zeropad_back_one(float *din, const float *dout, const layer *L, int cs) {
    const size_t row = (size_t)L->ow * cs, left = (size_t)L->pad_left * cs;
    const size_t inner = (size_t)L->w * cs;
    for (int y = 0; y < L->h; y++)
        memcpy(din + (size_t)y * inner, dout + (size_t)(y + L->pad_top) * row + left,
               sizeof(float) * inner);
}

static void zeropad_forward(float *out, const float *in, int B, const layer *L, int cs,
                            int nthreads) {
    const size_t n_in = (size_t)L->h * L->w * cs, n_out = (size_t)L->oh * L->ow * cs;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * n_out >= 65536)
    for (int i = 0; i < B; i++) zeropad_one(out + (size_t)i * n_out, in + (size_t)i * n_in, L, cs);
}

static void zeropad_backward(float *din, const float *dout, int B, const layer *L, int cs,
                             int nthreads) {
    const size_t n_in = (size_t)L->h * L->w * cs, n_out = (size_t)L->oh * L->ow * cs;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * n_out >= 65536)
    for (int i = 0; i < B; i++)
        zeropad_back_one(din + (size_t)i * n_in, dout + (size_t)i * n_out, L, cs);
}

// ---- the zeropad family: its description (layer_desc.h) and CPU ops (net_layers.h) ----

static int zeropad_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                         int idx, ht_error *err) {
    (void)n_classes;
    const int pads[4] = {s->pad_top, s->pad_bottom, s->pad_left, s->pad_right};
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] > MODEL_MAX_DIM)
            return ht_fail(err, "layer %d (%s): pads %d,%d,%d,%d (top, bottom, left, right): "
                           "expected 0..%d each", idx, d->name, pads[0], pads[1], pads[2],
                           pads[3], MODEL_MAX_DIM);
    L->pad_top = s->pad_top, L->pad_bottom = s->pad_bottom;
    L->pad_left = s->pad_left, L->pad_right = s->pad_right;
    L->oc = L->c;
    L->oh = L->h + L->pad_top + L->pad_bottom;
    L->ow = L->w + L->pad_left + L->pad_right;
    if (L->oh > MODEL_MAX_DIM || L->ow > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (%s): output %dx%d: expected at most %d a side", idx,
                       d->name, L->oh, L->ow, MODEL_MAX_DIM);
    return 0;
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

// padding = N (every side), (H, W) (top and bottom H, left and right W) or
// ((TOP, BOTTOM), (LEFT, RIGHT)), as Keras's ZeroPadding2D takes it.
static int zeropad_padding_key(layer_spec *s, const layer_key_in *in) {
    char v[96];
    size_t n = 0;
    for (const char *p = in->value; *p && n + 1 < sizeof v; p++)
        if (*p != ' ' && *p != '\t') v[n++] = *p;
    v[n] = 0;
    int a[4], used = 0, ok = 0;
    if (sscanf(v, "((%d,%d),(%d,%d))%n", &a[0], &a[1], &a[2], &a[3], &used) == 4 && !v[used]) {
        ok = 1;
    } else if (sscanf(v, "(%d,%d)%n", &a[0], &a[2], &used) == 2 && !v[used]) {
        a[1] = a[0], a[3] = a[2], ok = 1;
    } else if (sscanf(v, "%d%n", &a[0], &used) == 1 && !v[used]) {
        a[1] = a[2] = a[3] = a[0], ok = 1;
    }
    for (int i = 0; ok && i < 4; i++) ok = a[i] >= 0 && a[i] <= MODEL_MAX_DIM;
    if (!ok) {
        snprintf(in->msg, in->cap, "[%s] %s: expected N, (H, W) or ((TOP, BOTTOM), (LEFT, "
                 "RIGHT)) of integers 0..%d, found \"%.40s\"", in->section, in->shown,
                 MODEL_MAX_DIM, in->value);
        return -1;
    }
    s->pad_top = a[0], s->pad_bottom = a[1], s->pad_left = a[2], s->pad_right = a[3];
    return 0;
}

// padding sets every side; top, bottom, left and right one each, over it when given after it.
static const layer_key zeropad_keys[] = {
    {"padding", NULL, LK_PARSE, 0, 0, 0, 0, 0, zeropad_padding_key},
    LK_ROW("top", NULL, LK_INT, 0, pad_top, 0, MODEL_MAX_DIM),
    LK_ROW("bottom", NULL, LK_INT, 0, pad_bottom, 0, MODEL_MAX_DIM),
    LK_ROW("left", NULL, LK_INT, 0, pad_left, 0, MODEL_MAX_DIM),
    LK_ROW("right", NULL, LK_INT, 0, pad_right, 0, MODEL_MAX_DIM),
    LK_END,
};

const layer_family family_zeropad = {.name = "zeropad", .flags = LF_SPATIAL,
                                     .keys = zeropad_keys, .shape = zeropad_shape,
                                     .macs = no_macs};

// Channels-last in and out, with the input's channel stride (net.c keeps it for a spatial
// layer other than conv).
static void zeropad_fwd(const net_call *c) {
    zeropad_forward(c->out, c->in, c->B, c->L, c->p->in_cs, c->nt);
}
static float *zeropad_bwd(const net_call *c) {
    if (!c->din) return NULL;
    zeropad_backward(c->din, c->dout, c->B, c->L, c->p->in_cs, c->nt);
    return c->din;
}

const net_layer_ops cpu_zeropad = {.forward = zeropad_fwd, .backward = zeropad_bwd,
                                   .forward_one = zeropad_fwd, .backward_one = zeropad_bwd};
