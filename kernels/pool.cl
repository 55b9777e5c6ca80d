// Max, average and global average pooling. Windows start at oy*stride - pad and are clipped
// to the plane ("same" padding: padding never wins a max and is not counted in an average).
// Backward is a gather over the windows that contain each input element, so overlapping
// windows (stride < K) need no atomics.

// Range (ox, oy, plane) for the forward, (x, y, plane) for the backward: no work-item divides
// to find where it is (see conv.cl).

// One work-item per output; argmax = h*W + w within the plane. Row-major scan with a strict
// '>' keeps the first maximum on ties, as the CPU does.
__kernel void maxpool_fwd(__global float *out, __global int *argmax, __global const float *in,
                          const int B, const int C, const int H, const int W, const int K,
                          const int stride, const int pad, const int OH, const int OW) {
    const int ox = (int)get_global_id(0), oy = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (ox >= OW) return;
    __global const float *ip = in + plane * H * W;
    const int y0 = oy * stride - pad, x0 = ox * stride - pad;
    const int ya = max(y0, 0), yb = min(y0 + K, H), xa = max(x0, 0), xb = min(x0 + K, W);
    int bi = ya * W + xa;
    float best = ip[bi];
    for (int y = ya; y < yb; y++) {
        for (int x = xa; x < xb; x++) {
            const int at = y * W + x;
            const float v = ip[at];
            if (v > best) {
                best = v;
                bi = at;
            }
        }
    }
    const int i = (plane * OH + oy) * OW + ox;
    out[i] = best;
    argmax[i] = bi;
}

// din (B,C,H,W): each element sums dout over the windows whose argmax is this element, in
// window order (oy, ox), the order the CPU adds them in.
__kernel void maxpool_bwd(__global float *din, __global const float *dout,
                          __global const int *argmax, const int B, const int C, const int H,
                          const int W, const int K, const int stride, const int pad,
                          const int OH, const int OW) {
    const int xi = (int)get_global_id(0), yi = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (xi >= W) return;
    const int at = yi * W + xi;
    const int x = xi + pad, y = yi + pad; // in the padded plane's coordinates
    const int base = plane * OH * OW;
    float acc = 0.0f;
    if (stride >= K) {
        // Windows do not overlap: at most the one at (y / stride, x / stride).
        const int oy = y / stride, ox = x / stride;
        if (oy < OH && ox < OW && y - oy * stride < K && x - ox * stride < K) {
            const int o = base + oy * OW + ox;
            if (argmax[o] == at) acc += dout[o];
        }
    } else {
        // Windows oy with oy*stride <= y < oy*stride + K.
        const int oy0 = y >= K ? (y - K) / stride + 1 : 0, oy1 = min(y / stride, OH - 1);
        const int ox0 = x >= K ? (x - K) / stride + 1 : 0, ox1 = min(x / stride, OW - 1);
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                const int o = base + oy * OW + ox;
                if (argmax[o] == at) acc += dout[o];
            }
    }
    din[plane * H * W + at] = acc;
}

// The backward when the windows tile the input exactly (stride == K, H == OH*K, W == OW*K), as
// a scatter: range (ox, oy, plane) over the outputs, each writing its window, the argmax's
// element dout (added to 0, as the gather does) and the others 0.
__kernel void maxpool_bwd_tiled(__global float *din, __global const float *dout,
                                __global const int *argmax, const int K, const int OH,
                                const int OW) {
    const int ox = (int)get_global_id(0), oy = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (ox >= OW) return;
    const int W = OW * K, H = OH * K;
    const int o = (plane * OH + oy) * OW + ox, am = argmax[o];
    const float g = 0.0f + dout[o];
    __global float *dst = din + plane * H * W;
    for (int ky = 0; ky < K; ky++)
        for (int kx = 0; kx < K; kx++) {
            const int at = (oy * K + ky) * W + ox * K + kx;
            dst[at] = at == am ? g : 0.0f;
        }
}

// The window of output (oy, ox) clipped to the plane: rows [*ya, *yb), columns [*xa, *xb).
void pool_window(const int oy, const int ox, const int H, const int W, const int K,
                 const int stride, const int pad, int *ya, int *yb, int *xa, int *xb) {
    const int y0 = oy * stride - pad, x0 = ox * stride - pad;
    *ya = max(y0, 0), *yb = min(y0 + K, H), *xa = max(x0, 0), *xb = min(x0 + K, W);
}

// One work-item per output: the window's in-plane inputs summed row by row, divided by their
// count, as the CPU does. Range (ox, oy, plane).
__kernel void avgpool_fwd(__global float *out, __global const float *in, const int H,
                          const int W, const int K, const int stride, const int pad,
                          const int OH, const int OW) {
    const int ox = (int)get_global_id(0), oy = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (ox >= OW) return;
    __global const float *ip = in + plane * H * W;
    int ya, yb, xa, xb;
    pool_window(oy, ox, H, W, K, stride, pad, &ya, &yb, &xa, &xb);
    float s = 0.0f;
    for (int y = ya; y < yb; y++)
        for (int x = xa; x < xb; x++) s += ip[y * W + x];
    out[(plane * OH + oy) * OW + ox] = s / (float)((yb - ya) * (xb - xa));
}

// din (B,C,H,W): each element sums dout / count over the windows that hold it, in window
// order (oy, ox) as the CPU adds them. Range (x, y, plane).
__kernel void avgpool_bwd(__global float *din, __global const float *dout, const int H,
                          const int W, const int K, const int stride, const int pad,
                          const int OH, const int OW) {
    const int xi = (int)get_global_id(0), yi = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (xi >= W) return;
    const int x = xi + pad, y = yi + pad; // in the padded plane's coordinates
    // Windows oy with oy*stride <= y < oy*stride + K.
    const int oy0 = y >= K ? (y - K) / stride + 1 : 0, oy1 = min(y / stride, OH - 1);
    const int ox0 = x >= K ? (x - K) / stride + 1 : 0, ox1 = min(x / stride, OW - 1);
    __global const float *gp = dout + plane * OH * OW;
    float acc = 0.0f;
    for (int oy = oy0; oy <= oy1; oy++)
        for (int ox = ox0; ox <= ox1; ox++) {
            int ya, yb, xa, xb;
            pool_window(oy, ox, H, W, K, stride, pad, &ya, &yb, &xa, &xb);
            acc += gp[oy * OW + ox] / (float)((yb - ya) * (xb - xa));
        }
    din[(plane * H + yi) * W + xi] = acc;
}

// out (B*C) = each plane's mean over its HW elements, summed in order. Range: planes.
__kernel void gavgpool_fwd(__global float *out, __global const float *in, const int planes,
                           const int HW) {
    const int plane = (int)get_global_id(0);
    if (plane >= planes) return;
    __global const float *ip = in + plane * HW;
    float s = 0.0f;
    for (int i = 0; i < HW; i++) s += ip[i];
    out[plane] = s / (float)HW;
}

// din (B,C,H,W) = dout[plane] / (H*W). Range (x, y, plane).
__kernel void gavgpool_bwd(__global float *din, __global const float *dout, const int H,
                           const int W) {
    const int x = (int)get_global_id(0), y = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (x >= W) return;
    din[(plane * H + y) * W + x] = dout[plane] / (float)(H * W);
}
