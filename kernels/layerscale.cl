// Each channel times its factor (the layerscale family, ConvNeXt's LayerScale): y = x * gamma[c]
// over NCHW (channel (i / P) % C), gamma at params[w_off]; the backward's input gradient is the
// output's times the same, gamma's += sum(dy * x) (one work-item a channel).

__kernel void ls_fwd(__global float *out, __global const float *in, __global const float *params,
                     const uint w_off, const int n, const int C, const int P) {
    const int i = (int)get_global_id(0);
    if (i < n) out[i] = in[i] * params[w_off + (i / P) % C];
}

__kernel void ls_bwd_in(__global float *din, __global const float *dout,
                        __global const float *params, const uint w_off, const int n, const int C,
                        const int P) {
    const int i = (int)get_global_id(0);
    if (i < n) din[i] = dout[i] * params[w_off + (i / P) % C];
}

__kernel void ls_bwd_w(__global float *grads, __global const float *dout, __global const float *in,
                       const uint w_off, const int B, const int C, const int P) {
    const int c = (int)get_global_id(0);
    if (c >= C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) {
            const int at = (b * C + c) * P + p;
            acc += dout[at] * in[at];
        }
    grads[w_off + c] += acc;
}
