// Channel concatenation (the concat layer), NCHW: input k's (B, Ck, H, W) is channels
// [off, off + Ck) of out (B, C, H, W). One work-item per element of the input: forward it
// copies the element into out, backward it gathers its gradient from dout.

__kernel void concat_copy(__global float *out, __global float *in, const int B, const int C,
                          const int Ck, const int off, const int HW, const int backward) {
    const int i = (int)get_global_id(0);
    if (i >= B * Ck * HW) return;
    const int b = i / (Ck * HW), rest = i - b * Ck * HW;
    const int at = b * C * HW + off * HW + rest;
    if (backward) in[i] = out[at];
    else out[at] = in[i];
}
