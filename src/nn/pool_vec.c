// Max pooling's backward, one sample, channels-last: the winner of each window found again
// from the forward input for a vector of channels at a time. Compiled once per instruction set
// (isa_fns.h); pool.c calls it through isa_kernels_active(). GCC's 16-float vector extension,
// which it used before, became scalar compares and stack traffic on SSE2 and AVX2: cnn2's
// first pooling's backward took 25 times its forward.
#include "nn/isa_fns.h"
#include "nn/pool_win.h"
#include "nn/vec.h"

#include <string.h>

// Channels are handled in blocks of VL (vec.h: this copy's vector width): a block's maxima and
// "still to find" masks are one vector each.
#define POOL_CBLOCK VL
typedef vf pool_vf;
typedef vint pool_vi;
#define pool_load v_load

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
            pool_vf d = (pool_vf)(gv & hit);
            if (!assign) d = v_add(pool_load(dp + at), d);
            else d = v_add(v_zero(), d);
            v_store(dp + at, d);
            todo &= ~hit;
        }
}

void pool_vec_max_backward_one(float *din, const float *dout, const float *in,
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

