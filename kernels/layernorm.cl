// Each position's channels standardised by their own mean and variance (the layernorm family,
// Keras's LayerNormalization over the channels): y = (x - mean) * r * gamma + beta with
// r = 1 / sqrt(var + eps), over NCHW (position p of sample b: element (b * C + c) * P + p).
// The forward keeps each position's mean and r in stats (2 floats a position) for the
// backward; gamma at params[w_off] and beta at params[b_off] where has_w, has_b.

__kernel void ln_fwd(__global float *out, __global const float *in, __global const float *params,
                     __global float *stats, const uint w_off, const uint b_off, const int has_w,
                     const int has_b, const int n, const int C, const int P, const float eps) {
    const int i = (int)get_global_id(0); // a position: sample i / P, position i % P
    if (i >= n) return;
    const int base = (i / P) * C * P + i % P;
    float s = 0.0f;
    for (int c = 0; c < C; c++) s += in[base + c * P];
    const float mu = s / C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
        const float d = in[base + c * P] - mu;
        v += d * d;
    }
    const float r = 1.0f / sqrt(v / C + eps);
    stats[2 * i] = mu, stats[2 * i + 1] = r;
    for (int c = 0; c < C; c++) {
        const float xh = (in[base + c * P] - mu) * r;
        out[base + c * P] =
            xh * (has_w ? params[w_off + c] : 1.0f) + (has_b ? params[b_off + c] : 0.0f);
    }
}

// dx = r * (g - mean(g) - xh * mean(g * xh)), g = dy * gamma; one work-item a position.
__kernel void ln_bwd_in(__global float *din, __global const float *dout, __global const float *in,
                        __global const float *params, __global const float *stats,
                        const uint w_off, const int has_w, const int n, const int C, const int P) {
    const int i = (int)get_global_id(0);
    if (i >= n) return;
    const int base = (i / P) * C * P + i % P;
    const float mu = stats[2 * i], r = stats[2 * i + 1];
    float m1 = 0.0f, m2 = 0.0f;
    for (int c = 0; c < C; c++) {
        const float g = dout[base + c * P] * (has_w ? params[w_off + c] : 1.0f);
        m1 += g, m2 += g * (in[base + c * P] - mu) * r;
    }
    m1 /= C, m2 /= C;
    for (int c = 0; c < C; c++) {
        const float xh = (in[base + c * P] - mu) * r;
        const float g = dout[base + c * P] * (has_w ? params[w_off + c] : 1.0f);
        din[base + c * P] = r * (g - m1 - xh * m2);
    }
}

// gamma's gradient += sum(dy * xh), beta's += sum(dy): work-item c < C is gamma's channel c
// (when has_w), the next C beta's (when has_b); over the n positions.
__kernel void ln_bwd_w(__global float *grads, __global const float *dout, __global const float *in,
                       __global const float *stats, const uint w_off, const uint b_off,
                       const int has_w, const int has_b, const int n, const int C, const int P) {
    const int j = (int)get_global_id(0);
    if (j >= 2 * C) return;
    const int c = j % C, beta = j >= C;
    if (beta ? !has_b : !has_w) return;
    float acc = 0.0f;
    for (int i = 0; i < n; i++) {
        const int at = (i / P) * C * P + c * P + i % P;
        acc += beta ? dout[at] : dout[at] * (in[at] - stats[2 * i]) * stats[2 * i + 1];
    }
    grads[(beta ? b_off : w_off) + c] += acc;
}
