// The channels-last convolution's plan of one geometry: the sizes of its packed weights and
// per-thread scratch and where each part lies. conv.c computes it (conv_nhwc_plan) and owns
// the buffers; the per-sample kernels (conv_nhwc.c, compiled once per instruction set) read it,
// so every set agrees on the layout.
#ifndef HETRAIN_CONV_PLAN_H
#define HETRAIN_CONV_PLAN_H

#include "nn/layers.h"

typedef struct nhwc_plan {
    int Hp, Wp;      // padded input (rows and columns enough for Winograd's last tiles too)
    int OCs;         // output channel stride
    int fast_din;    // input gradient by the flipped-kernel convolution
    int q;           // border of the output-gradient buffer (K-1-pad when fast_din, else 0)
    int Gh, Gw;      // output-gradient buffer rows and columns
    int wino;        // Winograd allowed in some direction: its pack and scratch are there
    int CV;          // channel stride of the input's transformed tiles, conv_cpad(C)
    size_t nw;       // K*K*C*OCs packed weights
    size_t nflip;    // K*K*OC*Cs flipped weights (the input gradient's, unless Winograd)
    size_t nu, nuf;  // Winograd weights: a*a*C*OCs (forward) and a*a*OC*Cs (input gradient)
    size_t pin_n, gb_n; // floats of the padded input and of the gradient buffer, rounded up
    size_t sums_n;   // doubles of the dw and db sums
    size_t dU_n;     // doubles of the transformed-domain dw sums (a*a*C*OCs)
    size_t wa_n, wb_n; // floats of the two Winograd work buffers (V; M or Z)
    size_t zf_n;     // floats holding the zero-field bytes (Hp*Wp input, OH*OW output)
} nhwc_plan;

nhwc_plan conv_nhwc_plan(const conv_geom *g);

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

// The Winograd tile size of a direction, 0 for direct; the kernel size r is g->K.
static inline int conv_wino_m(const conv_geom *g, conv_impl impl, conv_dir dir) {
    return conv2d_wino_impl_ok(g, impl, dir) ? (int)impl : 0;
}

// The pack: w transposed, bias, flipped kernel, then the Winograd weights (forward, input
// gradient); the scratch: padded input, gradient buffer, dw/db sums (double), transformed dw
// sums (double), the two Winograd work buffers. Offsets in floats:
static inline size_t pack_flip_off(const nhwc_plan *p) { return round16(p->nw + p->OCs); }
static inline size_t pack_u_off(const nhwc_plan *p) { return pack_flip_off(p) + round16(p->nflip); }
static inline size_t pack_uf_off(const nhwc_plan *p) { return pack_u_off(p) + round16(p->nu); }
static inline size_t scr_sums_off(const nhwc_plan *p) { return p->pin_n + p->gb_n; }
static inline size_t scr_dU_off(const nhwc_plan *p) {
    return scr_sums_off(p) + round16(2 * p->sums_n);
}
static inline size_t scr_wa_off(const nhwc_plan *p) { return scr_dU_off(p) + round16(2 * p->dU_n); }
static inline size_t scr_wb_off(const nhwc_plan *p) { return scr_wa_off(p) + p->wa_n; }
static inline size_t scr_zf_off(const nhwc_plan *p) { return scr_wb_off(p) + p->wb_n; }


#endif
