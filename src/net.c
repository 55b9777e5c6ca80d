// Network forward/backward on the CPU: walks the layer list calling the layer math in layers.h.
#include "net.h"

#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "rng.h"

// relu and dropout work in place on their input's buffer.
static int layer_in_place(const layer *L) {
    return L->kind == LAYER_RELU || L->kind == LAYER_DROPOUT;
}

typedef struct ws_sizes {
    size_t act_floats, argmax_ints, grad_floats, conv_floats;
} ws_sizes;

static ws_sizes ws_measure(const model *m, int max_batch, int nthreads) {
    ws_sizes s = {0};
    size_t widest = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        size_t out = layer_out_size(L) * (size_t)max_batch;
        size_t in = layer_in_size(L) * (size_t)max_batch;
        if (!layer_in_place(L) || l == 0) s.act_floats += out;
        if (L->kind == LAYER_MAXPOOL) s.argmax_ints += out;
        if (L->kind == LAYER_CONV2D) {
            size_t c = conv2d_ws_floats(L->c, L->k, L->oc, L->oh, L->ow, nthreads);
            if (c > s.conv_floats) s.conv_floats = c;
        }
        if (in > widest) widest = in;
        if (out > widest) widest = out;
    }
    s.grad_floats = widest;
    return s;
}

size_t net_ws_bytes(const model *m, int max_batch, int nthreads) {
    ws_sizes s = ws_measure(m, max_batch, nthreads);
    return sizeof(float) * (s.act_floats + 2 * s.grad_floats + s.conv_floats + (size_t)max_batch) +
           sizeof(int32_t) * s.argmax_ints;
}

int net_ws_init(net_ws *ws, const model *m, int max_batch, int nthreads, ht_error *e) {
    memset(ws, 0, sizeof *ws);
    ws->max_batch = max_batch;
    ws->nthreads = nthreads < 1 ? 1 : nthreads;
    ws->n_layers = m->n_layers;
    ws_sizes s = ws_measure(m, max_batch, ws->nthreads);
    size_t total = s.act_floats + 2 * s.grad_floats + s.conv_floats + (size_t)max_batch;
    ws->act = ht_calloc((size_t)m->n_layers, sizeof *ws->act, e);
    ws->argmax = ws->act ? ht_calloc((size_t)m->n_layers, sizeof *ws->argmax, e) : NULL;
    ws->owned = ws->argmax ? ht_malloc(total, sizeof(float), e) : NULL;
    ws->owned_i = ws->owned ? ht_malloc(s.argmax_ints, sizeof(int32_t), e) : NULL;
    if (!ws->owned_i) {
        net_ws_free(ws);
        return ht_wrap(e, "network workspace for a micro-batch of %d", max_batch);
    }
    float *p = ws->owned;
    int32_t *q = ws->owned_i;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        size_t out = layer_out_size(L) * (size_t)max_batch;
        if (layer_in_place(L) && l > 0) {
            ws->act[l] = ws->act[l - 1];
        } else {
            ws->act[l] = p;
            p += out;
        }
        if (L->kind == LAYER_MAXPOOL) {
            ws->argmax[l] = q;
            q += out;
        }
    }
    ws->g0 = p;
    p += s.grad_floats;
    ws->g1 = p;
    p += s.grad_floats;
    ws->conv_ws = p;
    p += s.conv_floats;
    ws->loss = p;
    return 0;
}

void net_ws_free(net_ws *ws) {
    free(ws->owned);
    free(ws->owned_i);
    free(ws->act);
    free(ws->argmax);
    memset(ws, 0, sizeof *ws);
}

int net_argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static uint64_t dropout_key(const net_dropout *drop, int l) {
    return ht_rng_key(drop->seed, drop->epoch, (uint32_t)l);
}

const float *net_forward(net_ws *ws, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop) {
    const float *in = x;
    int nt = ws->nthreads;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        float *out = ws->act[l];
        switch (L->kind) {
        case LAYER_CONV2D:
            conv2d_forward(out, in, params + L->w_off, params + L->b_off, B, L->c, L->h, L->w,
                           L->oc, L->k, L->stride, L->pad, L->oh, L->ow, ws->conv_ws, nt);
            break;
        case LAYER_MAXPOOL:
            maxpool_forward(out, ws->argmax[l], in, B, L->c, L->h, L->w, L->k, L->stride, L->oh,
                            L->ow, nt);
            break;
        case LAYER_DENSE:
            dense_forward(out, in, params + L->w_off, params + L->b_off, B, (int)layer_in_size(L),
                          L->oc, nt);
            break;
        case LAYER_RELU:
            relu_forward(out, in, layer_out_size(L) * (size_t)B, nt);
            break;
        case LAYER_DROPOUT:
            if (drop)
                dropout_forward(out, in, B, layer_out_size(L), L->rate, dropout_key(drop, l),
                                drop->ids, nt);
            else if (out != in)
                memcpy(out, in, sizeof(float) * layer_out_size(L) * (size_t)B);
            break;
        case LAYER_SOFTMAX_XENT:
            softmax_xent_forward(out, y ? ws->loss : NULL, in, y, B, L->oc);
            break;
        }
        in = out;
    }
    return in;
}

void net_backward(net_ws *ws, const model *m, const float *params, float *grads, const float *x,
                  const uint8_t *y, int B, const net_dropout *drop) {
    int nt = ws->nthreads;
    float *dout = ws->g0, *dfree = ws->g1;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const layer *L = &m->layers[l];
        const float *in = l > 0 ? ws->act[l - 1] : x;
        // The first layer's input gradient is never needed.
        float *din = l > 0 ? dfree : NULL;
        switch (L->kind) {
        case LAYER_SOFTMAX_XENT:
            softmax_xent_backward(dfree, ws->act[l], y, B, L->oc);
            din = dfree;
            break;
        case LAYER_CONV2D:
            conv2d_backward(din, grads + L->w_off, grads + L->b_off, dout, in, params + L->w_off,
                            B, L->c, L->h, L->w, L->oc, L->k, L->stride, L->pad, L->oh, L->ow,
                            ws->conv_ws, nt);
            break;
        case LAYER_MAXPOOL:
            if (din)
                maxpool_backward(din, dout, ws->argmax[l], B, L->c, L->h, L->w, L->oh, L->ow, nt);
            break;
        case LAYER_DENSE:
            dense_backward(din, grads + L->w_off, grads + L->b_off, dout, in, params + L->w_off,
                           B, (int)layer_in_size(L), L->oc, nt);
            break;
        case LAYER_RELU:
            // ws->act[l] is the relu output (dropout after it keeps the sign, so it still marks
            // where the relu was active).
            if (din) relu_backward(dout, dout, ws->act[l], layer_out_size(L) * (size_t)B, nt);
            din = dout;
            break;
        case LAYER_DROPOUT:
            if (drop)
                dropout_backward(dout, dout, B, layer_out_size(L), L->rate, dropout_key(drop, l),
                                 drop->ids, nt);
            din = dout;
            break;
        }
        if (din && din != dout) {
            dfree = dout;
            dout = din;
        }
    }
}
