// Depthwise convolution (the dwconv layer), NCHW: output channel oc = c*M + m of out
// (B, C*M, OH, OW) is input channel c convolved with its own KxK kernel w[oc] (PyTorch's
// groups = C layout, (C*M, 1, K, K)), plus its bias (has_bias). pad: before (top/left). The
// backward: the input's gradient one work-item per input element (a gather over the outputs
// that read it), the weights' and biases' one work-item per element, summed over the batch and
// added to grads.

__kernel void dw_fwd(__global float *out, __global const float *in, __global const float *p,
                     const uint w_off, const uint b_off, const int has_bias, const int B,
                     const int C, const int M, const int H, const int W, const int K,
                     const int stride, const int pad, const int OH, const int OW) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * M * OH * OW) return;
    const int ox = i % OW, oy = (i / OW) % OH, oc = (i / (OW * OH)) % (C * M);
    const int b = i / (OW * OH * C * M), c = oc / M;
    float acc = has_bias ? p[b_off + oc] : 0.0f;
    for (int ky = 0; ky < K; ky++) {
        const int iy = oy * stride - pad + ky;
        if (iy < 0 || iy >= H) continue;
        for (int kx = 0; kx < K; kx++) {
            const int ix = ox * stride - pad + kx;
            if (ix < 0 || ix >= W) continue;
            acc += in[((b * C + c) * H + iy) * W + ix] * p[w_off + (oc * K + ky) * K + kx];
        }
    }
    out[i] = acc;
}

__kernel void dw_bwd_in(__global float *din, __global const float *dout,
                        __global const float *p, const uint w_off, const int B, const int C,
                        const int M, const int H, const int W, const int K, const int stride,
                        const int pad, const int OH, const int OW) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * H * W) return;
    const int ix = i % W, iy = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);
    float acc = 0.0f;
    for (int m = 0; m < M; m++) {
        const int oc = c * M + m;
        for (int ky = 0; ky < K; ky++) {
            const int ty = iy + pad - ky;
            if (ty < 0 || ty % stride) continue;
            const int oy = ty / stride;
            if (oy >= OH) continue;
            for (int kx = 0; kx < K; kx++) {
                const int tx = ix + pad - kx;
                if (tx < 0 || tx % stride) continue;
                const int ox = tx / stride;
                if (ox >= OW) continue;
                acc += dout[((b * C * M + oc) * OH + oy) * OW + ox] *
                       p[w_off + (oc * K + ky) * K + kx];
            }
        }
    }
    din[i] = acc;
}

// One work-item per weight (oc, ky, kx), then (with the rest) per bias: grads added to.
__kernel void dw_bwd_w(__global float *grads, __global const float *dout,
                       __global const float *in, const uint w_off, const uint b_off,
                       const int has_bias, const int B, const int C, const int M, const int H,
                       const int W, const int K, const int stride, const int pad, const int OH,
                       const int OW) {
    const int i = (int)get_global_id(0), nw = C * M * K * K;
    if (i >= nw + (has_bias ? C * M : 0)) return;
    if (i >= nw) { // a bias
        const int oc = i - nw;
        float acc = 0.0f;
        for (int b = 0; b < B; b++)
            for (int o = 0; o < OH * OW; o++) acc += dout[(b * C * M + oc) * OH * OW + o];
        grads[b_off + oc] += acc;
        return;
    }
    const int kx = i % K, ky = (i / K) % K, oc = i / (K * K), c = oc / M;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        for (int oy = 0; oy < OH; oy++) {
            const int iy = oy * stride - pad + ky;
            if (iy < 0 || iy >= H) continue;
            for (int ox = 0; ox < OW; ox++) {
                const int ix = ox * stride - pad + kx;
                if (ix < 0 || ix >= W) continue;
                acc += dout[((b * C * M + oc) * OH + oy) * OW + ox] *
                       in[((b * C + c) * H + iy) * W + ix];
            }
        }
    grads[w_off + i] += acc;
}
