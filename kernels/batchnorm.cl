// Batch normalisation in NCHW, as the CPU path computes it (src/nn/batchnorm.c): in training
// each group of G consecutive samples (the last may be smaller) is normalised with its own mean
// and biased variance per channel; at inference with the moving averages. x (B,C,P), P the
// positions of a sample. The group statistics are sums of up to G*P floats, which the CPU adds
// in double; double is optional in OpenCL, so here each work-item adds a strided slice with
// Kahan's compensation and the slices meet in a tree of TwoSum additions: the sums come out
// within a rounding or two of the double ones, in an order fixed by the work-group size alone.
// stats holds 3C floats a group: mean [c], variance [C + c], 1/sqrt(variance + eps) [2C + c].

// v into the compensated sum (*s, *c): the sum is *s - *c.
void bn_kahan(float *s, float *c, const float v) {
    const float y = v - *c, t = *s + y;
    *c = (t - *s) - y;
    *s = t;
}

// The rounding error of s = a + b (Knuth's TwoSum): a + b = s + bn_sum_err(a, b, s) exactly.
float bn_sum_err(const float a, const float b, const float s) {
    const float bb = s - a;
    return (a - (s - bb)) + (b - bb);
}

// (h + l) / R as a float pair: *lo gets what the float quotient leaves out.
float bn_div2(const float h, const float l, const float R, float *lo) {
    const float q = (h + l) / R;
    *lo = (fma(-q, R, h) + l) / R;
    return q;
}

// Adds the work-items' partial sums of nq quantities into element 0 of each: quantity q's
// high parts at part[2q*ls + lid], its low parts at part[(2q+1)*ls + lid]. A tree of TwoSum
// additions of the high parts whose errors go to the low parts. ls a power of two; every
// work-item of the group calls it, and may read element 0 afterwards.
void bn_tree(__local float *part, const int nq, const int lid, const int ls) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = ls / 2; h > 0; h /= 2) {
        if (lid < h)
            for (int q = 0; q < nq; q++) {
                __local float *hi = part + 2 * q * ls, *lo = hi + ls;
                const float a = hi[lid], b = hi[lid + h], s = a + b;
                hi[lid] = s;
                lo[lid] += lo[lid + h] + bn_sum_err(a, b, s);
            }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// One work-group per (group g, channel c), get_group_id = g*C + c: the group's mean, then its
// variance about it (two passes), into stats. part: 2 floats a work-item.
__kernel void bn_stats(__global float *stats, __global const float *in, const int B,
                       const int C, const int P, const int G, const float eps,
                       __local float *part) {
    const int gc = (int)get_group_id(0), g = gc / C, c = gc - g * C;
    const int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    const int s0 = g * G, R = min(G, B - s0) * P, CP = C * P;
    __global const float *x = in + s0 * CP + c * P; // sample s0 + k, position p: x[k*CP + p]
    float s = 0.0f, comp = 0.0f;
    for (int r = lid; r < R; r += ls) {
        const int k = r / P;
        bn_kahan(&s, &comp, x[k * CP + r - k * P]);
    }
    part[lid] = s;
    part[ls + lid] = -comp;
    bn_tree(part, 1, lid, ls);
    // The mean as a float and its rounding error: the second pass centres on both.
    const float Rf = (float)R;
    float ml;
    const float mh = bn_div2(part[0], part[ls], Rf, &ml);
    barrier(CLK_LOCAL_MEM_FENCE); // part[0] read by all before it is overwritten
    s = comp = 0.0f;
    for (int r = lid; r < R; r += ls) {
        const int k = r / P;
        const float d = (x[k * CP + r - k * P] - mh) - ml;
        bn_kahan(&s, &comp, d * d);
    }
    part[lid] = s;
    part[ls + lid] = -comp;
    bn_tree(part, 1, lid, ls);
    if (lid == 0) {
        const float var = (part[0] + part[ls]) / Rf;
        __global float *st = stats + g * 3 * C;
        st[c] = mh;
        st[C + c] = var;
        st[2 * C + c] = 1.0f / sqrt(var + eps);
    }
}

// Training's output, one work-item per element: gamma (params[w_off + c], or 1 without) times
// x normalised by its group's statistics, plus beta (params[b_off + c], or 0).
__kernel void bn_fwd(__global float *out, __global const float *in,
                     __global const float *stats, __global const float *params, const uint w_off,
                     const uint b_off, const int has_gamma, const int has_beta, const int B,
                     const int C, const int P, const int G) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * P) return;
    const int sc = i / P, s = sc / C, c = sc - s * C;
    __global const float *st = stats + (s / G) * 3 * C;
    const float xh = (in[i] - st[c]) * st[2 * C + c];
    out[i] = (has_gamma ? params[w_off + c] : 1.0f) * xh + (has_beta ? params[b_off + c] : 0.0f);
}

// Inference's output, with the moving mean and variance at params[s_off..] ([C] each).
__kernel void bn_infer(__global float *out, __global const float *in,
                       __global const float *params, const uint w_off, const uint b_off,
                       const uint s_off, const int has_gamma, const int has_beta, const int n,
                       const int C, const int P, const float eps) {
    const int i = (int)get_global_id(0);
    if (i >= n) return;
    const int c = (i / P) % C;
    const float inv = 1.0f / sqrt(params[s_off + C + c] + eps);
    out[i] = (has_gamma ? params[w_off + c] : 1.0f) * ((in[i] - params[s_off + c]) * inv) +
             (has_beta ? params[b_off + c] : 0.0f);
}

// A frozen layer's backward: its forward is bn_infer's, so dx = dy * gamma / sqrt(var + eps).
__kernel void bn_frozen_bwd(__global float *din, __global const float *dout,
                            __global const float *params, const uint w_off, const uint s_off,
                            const int has_gamma, const int n, const int C, const int P,
                            const float eps) {
    const int i = (int)get_global_id(0);
    if (i >= n) return;
    const int c = (i / P) % C;
    din[i] = dout[i] * ((has_gamma ? params[w_off + c] : 1.0f) / sqrt(params[s_off + C + c] + eps));
}

// One work-group per (group g, channel c), as bn_stats: the sums over the group of dy and of
// dy * xhat (xhat rounded to float, as the CPU has it), each as a float pair, at
// sums[g*4C + c] and [g*4C + 2C + c] (high parts) and [g*4C + C + c] and [g*4C + 3C + c] (low
// parts). The products go in exactly (fma). part: 4 floats a work-item.
__kernel void bn_bwd_sums(__global float *sums, __global const float *dout,
                          __global const float *in, __global const float *stats, const int B,
                          const int C, const int P, const int G, __local float *part) {
    const int gc = (int)get_group_id(0), g = gc / C, c = gc - g * C;
    const int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    const int s0 = g * G, R = min(G, B - s0) * P, CP = C * P, at0 = s0 * CP + c * P;
    __global const float *st = stats + g * 3 * C;
    const float mean = st[c], inv = st[2 * C + c];
    float sy = 0.0f, cy = 0.0f, sx = 0.0f, cx = 0.0f;
    for (int r = lid; r < R; r += ls) {
        const int k = r / P, at = at0 + k * CP + r - k * P;
        const float dy = dout[at], xh = (in[at] - mean) * inv, p = dy * xh;
        bn_kahan(&sy, &cy, dy);
        bn_kahan(&sx, &cx, p);
        cx -= fma(dy, xh, -p);
    }
    part[lid] = sy;
    part[ls + lid] = -cy;
    part[2 * ls + lid] = sx;
    part[3 * ls + lid] = -cx;
    bn_tree(part, 2, lid, ls);
    if (lid == 0) {
        __global float *sm = sums + g * 4 * C;
        sm[c] = part[0] + part[ls];
        sm[C + c] = part[ls] - (sm[c] - part[0]);
        sm[2 * C + c] = part[2 * ls] + part[3 * ls];
        sm[3 * C + c] = part[3 * ls] - (sm[2 * C + c] - part[2 * ls]);
    }
}

// The input's gradient, one work-item per element:
// din = gamma * invstd * (dy - sum(dy)/R - xhat * sum(dy*xhat)/R), R the group's rows.
// The bracket cancels (in a group of two rows, one position each, all but eps/(var + eps) of
// it), so it is computed in float pairs, xhat exact from the rounded difference, as the CPU
// computes it in double.
__kernel void bn_bwd_dx(__global float *din, __global const float *dout,
                        __global const float *in, __global const float *stats,
                        __global const float *sums, __global const float *params,
                        const uint w_off, const int has_gamma, const int B, const int C,
                        const int P, const int G) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * P) return;
    const int sc = i / P, s = sc / C, c = sc - s * C, g = s / G;
    __global const float *st = stats + g * 3 * C, *sm = sums + g * 4 * C;
    const float Rf = (float)(min(G, B - g * G) * P);
    float al, bl;
    const float ah = bn_div2(sm[c], sm[C + c], Rf, &al);         // mean of dy
    const float bh = bn_div2(sm[2 * C + c], sm[3 * C + c], Rf, &bl); // mean of dy * xhat
    const float inv = st[2 * C + c], d = in[i] - st[c];
    const float xh = d * inv, xl = fma(d, inv, -xh);
    const float ph = xh * bh, pl = fma(xh, bh, -ph) + (xh * bl + xl * bh); // xhat * b
    const float dy = dout[i], s1 = dy - ah, s2 = s1 - ph;
    const float t = s2 + ((bn_sum_err(dy, -ah, s1) + bn_sum_err(s1, -ph, s2)) - (al + pl));
    din[i] = (has_gamma ? params[w_off + c] : 1.0f) * inv * t;
}

// One work-item per channel: the groups' sums added in group order, as the CPU adds them, to
// gamma's and beta's gradients (when there), and each group's mean and variance to the
// state's place grads[s_off..]: [c] and [C + c]; work-item 0 adds the count of groups to [2C].
__kernel void bn_bwd_reduce(__global float *grads, __global const float *sums,
                            __global const float *stats, const uint w_off, const uint b_off,
                            const uint s_off, const int has_gamma, const int has_beta,
                            const int C, const int ng) {
    const int c = (int)get_global_id(0);
    if (c >= C) return;
    float dg = has_gamma ? grads[w_off + c] : 0.0f, db = has_beta ? grads[b_off + c] : 0.0f;
    float m = grads[s_off + c], v = grads[s_off + C + c];
    for (int g = 0; g < ng; g++) {
        dg += sums[g * 4 * C + 2 * C + c];
        db += sums[g * 4 * C + c];
        m += stats[g * 3 * C + c];
        v += stats[g * 3 * C + C + c];
    }
    if (has_gamma) grads[w_off + c] = dg;
    if (has_beta) grads[b_off + c] = db;
    grads[s_off + c] = m;
    grads[s_off + C + c] = v;
    if (c == 0) grads[s_off + 2 * C] += (float)ng;
}
