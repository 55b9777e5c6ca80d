// The channels-last convolution's plan of one geometry (conv_plan.h): which Winograd variants
// it allows and its buffers' sizes. Read by the layer (conv.c) and by every kernel set
// (conv_nhwc.c), so they agree on the layout.
#include "nn/conv_plan.h"

#include "nn/winograd.h"

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }
static int max_i(int a, int b) { return a > b ? a : b; }

int conv2d_wino_ok(const conv_geom *g, conv_dir dir) {
    // The transforms' tiles assume the padding of the last rows and columns equals the first's.
    if ((g->K != 3 && g->K != 5) || g->stride != 1 || g->OH != g->H + 2 * g->pad - (g->K - 1) ||
        g->OW != g->W + 2 * g->pad - (g->K - 1))
        return 0;
    return dir != CONV_DIR_DIN || (g->pad <= g->K - 1 && g->Cs % CONV_CPAD == 0);
}

int conv2d_wino_impl_ok(const conv_geom *g, conv_impl impl, conv_dir dir) {
    return (impl == CONV_WINO2 || impl == CONV_WINO4) && wino_has((int)impl, g->K) &&
           conv2d_wino_ok(g, dir);
}

nhwc_plan conv_nhwc_plan(const conv_geom *g) {
    nhwc_plan p;
    // The padded input holds the pad before, the input, and whatever the last window reads
    // past it (the after-pad, which "same" padding may make one wider than the before-pad).
    p.Hp = max_i(g->H + 2 * g->pad, (g->OH - 1) * g->stride + g->K);
    p.Wp = max_i(g->W + 2 * g->pad, (g->OW - 1) * g->stride + g->K);
    p.OCs = conv_cpad(g->OC);
    p.fast_din = g->stride == 1 && g->pad <= g->K - 1 && g->Cs % CONV_CPAD == 0;
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
    p.nflip = (size_t)g->K * g->K * g->OC * g->Cs; // fast_din's kernel, or din_scatter's rows
    p.zf_n = p.wino ? round16(((size_t)p.Hp * p.Wp + (size_t)g->OH * g->OW + 3) / 4) : 0;
    p.pin_n = round16((size_t)p.Hp * p.Wp * g->Cs);
    p.gb_n = round16((size_t)p.Gh * p.Gw * p.OCs);
    p.sums_n = p.nw + p.OCs;
    return p;
}
