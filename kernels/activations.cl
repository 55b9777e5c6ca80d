// Elementwise layers (relu, the act family, inverted dropout) and the softmax cross-entropy head.

__kernel void relu_fwd(__global float *out, __global const float *in, const uint n) {
    const uint i = (uint)get_global_id(0);
    if (i < n) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

__kernel void relu_bwd(__global float *din, __global const float *dout,
                       __global const float *out, const uint n) {
    const uint i = (uint)get_global_id(0);
    if (i < n) din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

// ht_mix64 and ht_rng_uniform from src/rng.h, bit for bit.
ulong ht_mix64(ulong z) {
    z += 0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}

float ht_rng_uniform(ulong key, uint sample_id, uint element) {
    const ulong z = ht_mix64(key ^ ht_mix64(((ulong)sample_id << 32) | element));
    return (float)(z >> 40) * (1.0f / 16777216.0f);  // 24 bits: exact in float
}

// Inverted dropout (forward and backward alike): element e of sample i is kept, times scale,
// when ht_rng_uniform(key, ids[i], e & emask) >= rate (emask 0: one draw a sample). scale =
// 1/(1-rate) is computed on the host, as the CPU does, so kept values match bit for bit.
__kernel void dropout(__global float *out, __global const float *in, const int B,
                      const uint N, const float rate, const float scale, const ulong key,
                      const uint emask, __global const uint *ids) {
    const uint k = (uint)get_global_id(0);
    if (k >= (uint)B * N) return;
    const uint i = k / N, e = k - i * N;
    out[k] = ht_rng_uniform(key, ids[i], e & emask) >= rate ? in[k] * scale : 0.0f;
}

// One work-item per sample: probs = softmax(logits) with the maximum subtracted; when
// has_labels, loss = log(sum exp(x - m)) - (x[label] - m), never exp of a large number.
// labels is then (B) uchar; without labels it may be any buffer (it is not read).
// In float (double is an extension), so it matches the CPU's double sum within rounding.
__kernel void softmax_xent_fwd(__global float *probs, __global float *loss,
                               __global const float *logits, __global const uchar *labels,
                               const int has_labels, const int B, const int NC) {
    const int i = (int)get_global_id(0);
    if (i >= B) return;
    __global const float *x = logits + (size_t)i * NC;
    __global float *p = probs + (size_t)i * NC;
    float m = x[0];
    for (int c = 1; c < NC; c++) m = x[c] > m ? x[c] : m;
    float sum = 0.0f;
    for (int c = 0; c < NC; c++) {
        const float v = exp(x[c] - m);
        p[c] = v;
        sum += v;
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < NC; c++) p[c] *= inv;
    // A label outside [0,NC) gives a NaN loss rather than a read past the row.
    if (has_labels) {
        const int l = labels[i];
        loss[i] = l < NC ? log(sum) - (x[l] - m) : NAN;
    }
}

// dlogits = probs - onehot(labels), one work-item per element.
__kernel void softmax_xent_bwd(__global float *dlogits, __global const float *probs,
                               __global const uchar *labels, const int B, const int NC) {
    const int k = (int)get_global_id(0);
    if (k >= B * NC) return;
    const int i = k / NC, c = k - i * NC;
    const float p = probs[k];
    dlogits[k] = c == (int)labels[i] ? p - 1.0f : p;
}

// The binary head (K = 1) and the multi-label head (K >= 2), one work-item per sample. K = 1:
// probs (B, 2) = (1 - p, p), p = sigmoid(logit); K >= 2: probs (B, K), each label's p. With
// labels ((B, K) bytes), loss = the mean over the K labels of softplus(z) - y z =
// max(z, 0) - y z + log1p(exp(-|z|)) (a label other than 0 or 1 gives NaN), as the CPU
// computes it (in double there).
__kernel void bce_fwd(__global float *probs, __global float *loss, __global const float *logits,
                      __global const uchar *labels, const int has_labels, const int B,
                      const int K) {
    const int i = (int)get_global_id(0);
    if (i >= B) return;
    float sum = 0.0f;
    int bad = 0;
    for (int j = 0; j < K; j++) {
        const int at = i * K + j;
        const float z = logits[at], e = exp(-fabs(z)), inv = 1.0f / (1.0f + e);
        const float p = z >= 0.0f ? inv : e * inv;
        if (K == 1) {
            probs[2 * i] = z >= 0.0f ? e * inv : inv;
            probs[2 * i + 1] = p;
        } else {
            probs[at] = p;
        }
        if (has_labels) {
            const int y = labels[at];
            bad |= y > 1;
            sum += fmax(z, 0.0f) - (float)y * z + log1p(e);
        }
    }
    if (has_labels) loss[i] = bad ? NAN : sum / (float)K;
}

// dlogit = (p - y) / K (the gradient of the mean over the labels), one work-item per logit.
__kernel void bce_bwd(__global float *dlogits, __global const float *probs,
                      __global const uchar *labels, const int B, const int K) {
    const int k = (int)get_global_id(0);
    if (k >= B * K) return;
    if (K == 1) dlogits[k] = probs[2 * k + 1] - (float)labels[k];
    else dlogits[k] = (probs[k] - (float)labels[k]) * (1.0f / (float)K);
}

// The act family's activations (enum act_fn: the host's, in the prelude before these sources),
// as the CPU path computes them (src/nn/act.c). The backward works from the forward's input x
// alone: a dropout after the activation overwrites its output in place.
#define SELU_ALPHA 1.6732632423543772848170429916717f
#define SELU_SCALE 1.0507009873554804934193349852946f
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

float act_sigm(float x) { return 1.0f / (1.0f + exp(-x)); }

float act_f(int f, float a, float x) {
    switch (f) {
    case ACT_SIGMOID: return act_sigm(x);
    case ACT_TANH: return tanh(x);
    case ACT_LEAKY_RELU: return x > 0.0f ? x : a * x;
    case ACT_ELU: return x > 0.0f ? x : a * expm1(x);
    case ACT_SELU: return SELU_SCALE * (x > 0.0f ? x : SELU_ALPHA * expm1(x));
    case ACT_SWISH: return x * act_sigm(x);
    case ACT_SOFTPLUS: return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x));
    case ACT_HARD_SIGMOID: return clamp(a * x + 0.5f, 0.0f, 1.0f);
    case ACT_RELU6: return x > 0.0f ? fmin(x, a) : 0.0f;
    case ACT_HARD_SWISH: return x * clamp(a * x + 0.5f, 0.0f, 1.0f);
    case ACT_GELU:
        if (a != 0.0f) return 0.5f * x * (1.0f + tanh(GELU_K * (x + GELU_C * x * x * x)));
        return 0.5f * x * (1.0f + erf(x * INV_SQRT2));
    }
    return x;
}

float act_df(int f, float a, float x) {
    switch (f) {
    case ACT_SIGMOID: {
        const float s = act_sigm(x);
        return s * (1.0f - s);
    }
    case ACT_TANH: {
        const float t = tanh(x);
        return 1.0f - t * t;
    }
    case ACT_LEAKY_RELU: return x > 0.0f ? 1.0f : a;
    case ACT_ELU: return x > 0.0f ? 1.0f : a * exp(x);
    case ACT_SELU: return SELU_SCALE * (x > 0.0f ? 1.0f : SELU_ALPHA * exp(x));
    case ACT_SWISH: {
        const float s = act_sigm(x);
        return s + x * s * (1.0f - s);
    }
    case ACT_SOFTPLUS: return act_sigm(x);
    case ACT_HARD_SIGMOID: {
        const float z = a * x + 0.5f;
        return z > 0.0f && z < 1.0f ? a : 0.0f;
    }
    case ACT_RELU6: return x > 0.0f && x < a ? 1.0f : 0.0f;
    case ACT_HARD_SWISH: {
        const float z = a * x + 0.5f;
        return z <= 0.0f ? 0.0f : z >= 1.0f ? 1.0f : z + a * x;
    }
    case ACT_GELU:
        if (a != 0.0f) {
            const float t = tanh(GELU_K * (x + GELU_C * x * x * x));
            return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
        }
        return 0.5f * (1.0f + erf(x * INV_SQRT2)) + x * exp(-0.5f * x * x) * INV_SQRT_2PI;
    }
    return 1.0f;
}

__kernel void act_fwd(__global float *out, __global const float *in, const uint n, const int f,
                      const float a) {
    const uint i = (uint)get_global_id(0);
    if (i < n) out[i] = act_f(f, a, in[i]);
}

__kernel void act_bwd(__global float *din, __global const float *dout, __global const float *in,
                      const uint n, const int f, const float a) {
    const uint i = (uint)get_global_id(0);
    if (i < n) din[i] = dout[i] * act_df(f, a, in[i]);
}
