// Zero padding (the zeropad layer), NCHW: out (B, C, OH, OW) is in (B, C, H, W) with top rows
// and left columns of zeros before it and the rest of OH, OW after. One work-item per element
// of the padded tensor forward, of the input backward (a gather: each input element's gradient
// is one output element's).

__kernel void zeropad_fwd(__global float *out, __global const float *in, const int B,
                          const int C, const int H, const int W, const int OH, const int OW,
                          const int top, const int left) {
    const int k = (int)get_global_id(0);
    if (k >= B * C * OH * OW) return;
    const int x = k % OW, y = (k / OW) % OH, bc = k / (OW * OH);
    const int iy = y - top, ix = x - left;
    out[k] = iy >= 0 && iy < H && ix >= 0 && ix < W ? in[(bc * H + iy) * W + ix] : 0.0f;
}

__kernel void zeropad_bwd(__global float *din, __global const float *dout, const int B,
                          const int C, const int H, const int W, const int OH, const int OW,
                          const int top, const int left) {
    const int k = (int)get_global_id(0);
    if (k >= B * C * H * W) return;
    const int x = k % W, y = (k / W) % H, bc = k / (W * H);
    din[k] = dout[(bc * OH + y + top) * OW + x + left];
}
