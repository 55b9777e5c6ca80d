// A channel standardised by its stored mean and variance (the normalize family, Keras's
// Normalization): (x - mean) / max(sqrt(var), 1e-7), or with invert mean + x * that, over NCHW
// (channel (i / P) % C); the state's mean at params[s_off], its variance C after. The
// backward's input gradient is the output's divided (inverted: multiplied) by the same. With
// consts the mean and variance are the layer's constants cm and cv (up to 4 channels) instead.

static float normalize_std(const float var) {
    const float s = sqrt(var);
    return s > 1e-7f ? s : 1e-7f;
}

static float pick(const float4 v, const int c) {
    return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

__kernel void normalize_fwd(__global float *out, __global const float *in,
                            __global const float *params, const uint s_off, const int invert,
                            const int n, const int C, const int P, const int consts,
                            const float4 cm, const float4 cv) {
    const int i = (int)get_global_id(0);
    if (i >= n) return;
    const int c = (i / P) % C;
    const float mean = consts ? pick(cm, c) : params[s_off + c];
    const float s = normalize_std(consts ? pick(cv, c) : params[s_off + C + c]);
    out[i] = invert ? mean + in[i] * s : (in[i] - mean) / s;
}

__kernel void normalize_bwd(__global float *din, __global const float *dout,
                            __global const float *params, const uint s_off, const int invert,
                            const int n, const int C, const int P, const int consts,
                            const float4 cm, const float4 cv) {
    const int i = (int)get_global_id(0);
    if (i >= n) return;
    const int c = (i / P) % C;
    const float s = normalize_std(consts ? pick(cv, c) : params[s_off + C + c]);
    din[i] = invert ? dout[i] * s : dout[i] / s;
}
