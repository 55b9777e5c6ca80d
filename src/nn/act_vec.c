// The act family's functions vectorised: sigmoid and swish (vec.h's v_exp for expf: EfficientNet's
// every block runs swish, and libm's expf one lane at a time took a quarter of its step), and
// the piecewise-linear ones as compares and blends (MobileNetV2's relu6, MobileNetV3's hard
// swish: act.c's scalar loop kept its switch and branches per element, 40% of MobileNetV2's
// step). Compiled once per instruction set (isa_fns.h); act.c calls it through
// isa_kernels_active() and keeps its scalar loop for the other functions. Same formulas as
// act.c's, in float: the piecewise-linear ones give its bits exactly (no contraction into FMA).
#include "nn/isa_fns.h"
#include "nn/vec.h"

#include <string.h>

static ALWAYS_INLINE vf sigm(vf x) { return v_set1(1.0f) / (v_exp(-x) + 1.0f); }

// min(max(y, 0), 1), a NaN kept (act.c's y < 0 ? 0 : y > 1 ? 1 : y).
static ALWAYS_INLINE vf clamp01(vf y) {
    return v_sel((vint)(y < v_zero()), v_zero(), v_sel((vint)(y > v_set1(1.0f)), v_set1(1.0f), y));
}

static ALWAYS_INLINE vf fwd(act_fn kind, float a, vf x) {
    const vf zero = v_zero(), one = v_set1(1.0f);
    switch (kind) {
    case ACT_SWISH: return x * sigm(x);
    case ACT_SIGMOID: return sigm(x);
    case ACT_LEAKY_RELU: return v_sel((vint)(x > zero), x, x * a);
    case ACT_RELU6: return v_sel((vint)(x > zero), v_sel((vint)(x < v_set1(a)), x, v_set1(a)), zero);
    case ACT_HARD_SIGMOID: return clamp01(x * a + 0.5f);
    case ACT_HARD_SWISH: return x * clamp01(x * a + 0.5f);
    default: return one;
    }
}

static ALWAYS_INLINE vf dfdx(act_fn kind, float a, vf x) {
    const vf zero = v_zero(), one = v_set1(1.0f);
    switch (kind) {
    case ACT_SWISH: {
        const vf s = sigm(x), ds = s * (one - s);
        return s + x * ds;
    }
    case ACT_SIGMOID: {
        const vf s = sigm(x);
        return s * (one - s);
    }
    case ACT_LEAKY_RELU: return v_sel((vint)(x > zero), one, v_set1(a));
    case ACT_RELU6: return v_sel((vint)(x > zero) & (vint)(x < v_set1(a)), one, zero);
    case ACT_HARD_SIGMOID: {
        const vf z = x * a + 0.5f;
        return v_sel((vint)(z > zero) & (vint)(z < one), v_set1(a), zero);
    }
    case ACT_HARD_SWISH: {
        const vf z = x * a + 0.5f;
        return v_sel((vint)(z <= zero), zero, v_sel((vint)(z >= one), one, z + x * a));
    }
    default: return one;
    }
}

static int vectorised(act_fn kind) {
    return kind == ACT_SWISH || kind == ACT_SIGMOID || kind == ACT_LEAKY_RELU ||
           kind == ACT_RELU6 || kind == ACT_HARD_SIGMOID || kind == ACT_HARD_SWISH;
}

// The first n (< VL) lanes of v to p.
static ALWAYS_INLINE void store_n(float *p, vf v, int n) {
    float t[VL];
    v_store(t, v);
    memcpy(p, t, (size_t)n * sizeof *p);
}

int vec_act_forward(act_fn kind, float a, float *out, const float *in, size_t rows, int C,
                    int Cs) {
    if (!vectorised(kind)) return 0;
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * Cs;
        float *y = out + r * Cs;
        int c = 0;
        for (; c + VL <= C; c += VL) v_store(y + c, fwd(kind, a, v_load(x + c)));
        if (c < C) store_n(y + c, fwd(kind, a, v_load_n(x + c, C - c)), C - c);
        if (Cs > C) memset(y + C, 0, (size_t)(Cs - C) * sizeof *y);
    }
    return 1;
}

int vec_act_backward(act_fn kind, float a, float *din, const float *dout, const float *in,
                     size_t rows, int C, int Cs) {
    if (!vectorised(kind)) return 0;
    for (size_t r = 0; r < rows; r++) {
        const size_t k = r * Cs;
        int c = 0;
        for (; c + VL <= C; c += VL)
            v_store(din + k + c, v_load(dout + k + c) * dfdx(kind, a, v_load(in + k + c)));
        if (c < C)
            store_n(din + k + c,
                    v_load_n(dout + k + c, C - c) * dfdx(kind, a, v_load_n(in + k + c, C - c)), C - c);
        if (Cs > C) memset(din + k + C, 0, (size_t)(Cs - C) * sizeof *din);
    }
    return 1;
}
