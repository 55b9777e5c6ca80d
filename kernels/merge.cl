// The element-wise merges (the merge family: add, subtract, multiply, average, maximum), NCHW
// over B samples of C x HW. Up to four inputs x0..x3 (n_in of them; the unused ones repeat x0);
// input k with bit k of bcast is (B, C), one value a channel, broadcast over the positions.
// The fold and the derivatives are the CPU path's (src/nn/merge.c), operation for operation.

inline float merge_fold(const int op, const float v, const float x) {
    if (op == MERGE_SUBTRACT) return v - x;
    if (op == MERGE_MULTIPLY) return v * x;
    if (op == MERGE_MAXIMUM) return x > v ? x : v;
    return v + x; // add, average
}

// The four inputs' values at element i = (b, ch, position) of the output.
inline void merge_load(float *x, __global const float *x0, __global const float *x1,
                       __global const float *x2, __global const float *x3, const int bcast,
                       const int C, const int b, const int ch, const int i) {
    const int bi = b * C + ch;
    x[0] = x0[i];
    x[1] = (bcast & 2) ? x1[bi] : x1[i];
    x[2] = (bcast & 4) ? x2[bi] : x2[i];
    x[3] = (bcast & 8) ? x3[bi] : x3[i];
}

inline float merge_deriv(const int op, const float *x, const int n, const int k) {
    if (op == MERGE_ADD) return 1.0f;
    if (op == MERGE_SUBTRACT) return k ? -1.0f : 1.0f;
    if (op == MERGE_AVERAGE) return 1.0f / (float)n;
    if (op == MERGE_MULTIPLY) {
        float p = 1.0f;
        for (int j = 0; j < n; j++)
            if (j != k) p *= x[j];
        return p;
    }
    int arg = 0; // maximum: the first of the largest
    for (int j = 1; j < n; j++)
        if (x[j] > x[arg]) arg = j;
    return arg == k ? 1.0f : 0.0f;
}

// out = x0 op x1 op ... (average: the sum over n_in). One work-item per output element.
__kernel void merge_fwd(__global float *out, __global const float *x0, __global const float *x1,
                        __global const float *x2, __global const float *x3, const int n_in,
                        const int op, const int bcast, const int B, const int C, const int HW) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * HW) return;
    const int b = i / (C * HW), ch = (i / HW) % C;
    float x[4];
    merge_load(x, x0, x1, x2, x3, bcast, C, b, ch, i);
    float v = x[0];
    for (int k = 1; k < n_in; k++) v = merge_fold(op, v, x[k]);
    out[i] = op == MERGE_AVERAGE ? v / (float)n_in : v;
}

// Input k's gradient d: dout times the derivative. Not broadcast: one work-item per element;
// broadcast (bit k of bcast): one work-item per (b, ch), the sum over the positions in order.
__kernel void merge_bwd(__global float *d, __global const float *dout,
                        __global const float *x0, __global const float *x1,
                        __global const float *x2, __global const float *x3, const int n_in,
                        const int op, const int bcast, const int k, const int B, const int C,
                        const int HW) {
    const int t = (int)get_global_id(0);
    float x[4];
    if (!((bcast >> k) & 1)) {
        if (t >= B * C * HW) return;
        const int b = t / (C * HW), ch = (t / HW) % C;
        merge_load(x, x0, x1, x2, x3, bcast, C, b, ch, t);
        d[t] = dout[t] * merge_deriv(op, x, n_in, k);
        return;
    }
    if (t >= B * C) return;
    const int b = t / C, ch = t % C;
    float acc = 0.0f;
    for (int p = 0; p < HW; p++) {
        const int i = (b * C + ch) * HW + p;
        merge_load(x, x0, x1, x2, x3, bcast, C, b, ch, i);
        acc += dout[i] * merge_deriv(op, x, n_in, k);
    }
    d[t] = acc;
}
