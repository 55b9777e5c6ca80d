// The act family's sigmoid and swish, vectorised (vec.h's v_exp for expf): EfficientNet's
// every block runs swish, and libm's expf one lane at a time took a quarter of its step.
// Compiled once per instruction set (isa_fns.h); act.c calls it through isa_kernels_active()
// and keeps its scalar loop for the other functions. Same formulas as act.c's, in float.
#include "nn/isa_fns.h"
#include "nn/vec.h"

#include <string.h>

static ALWAYS_INLINE vf sigm(vf x) { return v_set1(1.0f) / (v_exp(-x) + 1.0f); }

static ALWAYS_INLINE vf fwd(act_fn kind, vf x) {
    const vf s = sigm(x);
    if (kind == ACT_SWISH) return x * s;
    return s;
}

static ALWAYS_INLINE vf dfdx(act_fn kind, vf x) {
    const vf s = sigm(x), ds = s * (v_set1(1.0f) - s);
    if (kind == ACT_SWISH) return s + x * ds;
    return ds;
}

// The first n (< VL) lanes of v to p.
static ALWAYS_INLINE void store_n(float *p, vf v, int n) {
    float t[VL];
    v_store(t, v);
    memcpy(p, t, (size_t)n * sizeof *p);
}

int vec_act_forward(act_fn kind, float *out, const float *in, size_t rows, int C, int Cs) {
    if (kind != ACT_SWISH && kind != ACT_SIGMOID) return 0;
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        int c = 0;
        for (; c + VL <= C; c += VL) v_store(y + c, fwd(kind, v_load(x + c)));
        if (c < C) store_n(y + c, fwd(kind, v_load_n(x + c, C - c)), C - c);
        if (Cs > C) memset(y + C, 0, (size_t)(Cs - C) * sizeof *y);
    }
    return 1;
}

int vec_act_backward(act_fn kind, float *din, const float *dout, const float *in, size_t rows,
                     int C, int Cs) {
    if (kind != ACT_SWISH && kind != ACT_SIGMOID) return 0;
    for (size_t r = 0; r < rows; r++) {
        const size_t k = r * Cs;
        int c = 0;
        for (; c + VL <= C; c += VL)
            v_store(din + k + c, v_load(dout + k + c) * dfdx(kind, v_load(in + k + c)));
        if (c < C)
            store_n(din + k + c,
                    v_load_n(dout + k + c, C - c) * dfdx(kind, v_load_n(in + k + c, C - c)), C - c);
        if (Cs > C) memset(din + k + C, 0, (size_t)(Cs - C) * sizeof *din);
    }
    return 1;
}
