// Max pooling without padding. Backward is a gather over the windows that contain each input
// element, so overlapping windows (stride < K) need no atomics.

// One work-item per output; argmax = h*W + w within the plane. Row-major scan with a strict
// '>' keeps the first maximum on ties, as the CPU does.
__kernel void maxpool_fwd(__global float *out, __global int *argmax, __global const float *in,
                          const int B, const int C, const int H, const int W, const int K,
                          const int stride, const int OH, const int OW) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * OH * OW) return;
    const int ox = i % OW, t = i / OW;
    const int oy = t % OH, plane = t / OH;
    __global const float *ip = in + (size_t)plane * H * W;
    const int first = oy * stride * W + ox * stride;
    int bi = first;
    float best = ip[first];
    for (int ky = 0; ky < K; ky++) {
        for (int kx = 0; kx < K; kx++) {
            const int at = first + ky * W + kx;
            const float v = ip[at];
            if (v > best) {
                best = v;
                bi = at;
            }
        }
    }
    out[i] = best;
    argmax[i] = bi;
}

// din (B,C,H,W): each element sums dout over the windows whose argmax is this element, in
// window order (oy, ox), the order the CPU adds them in.
__kernel void maxpool_bwd(__global float *din, __global const float *dout,
                          __global const int *argmax, const int B, const int C, const int H,
                          const int W, const int K, const int stride, const int OH,
                          const int OW) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * H * W) return;
    const int x = i % W, t = i / W;
    const int y = t % H, plane = t / H;
    const int at = y * W + x;
    // Windows oy with oy*stride <= y < oy*stride + K.
    const int oy0 = y >= K ? (y - K) / stride + 1 : 0, oy1 = min(y / stride, OH - 1);
    const int ox0 = x >= K ? (x - K) / stride + 1 : 0, ox1 = min(x / stride, OW - 1);
    const int base = plane * OH * OW;
    float acc = 0.0f;
    for (int oy = oy0; oy <= oy1; oy++)
        for (int ox = ox0; ox <= ox1; ox++) {
            const int o = base + oy * OW + ox;
            if (argmax[o] == at) acc += dout[o];
        }
    din[i] = acc;
}
