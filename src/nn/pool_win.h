// Pooling windows clipped to the input (pool.c, pool_vec.c).
#ifndef HETRAIN_POOL_WIN_H
#define HETRAIN_POOL_WIN_H

#include "nn/layers.h"

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

#endif
