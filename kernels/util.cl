// Small helpers shared by the device code. Every kernel here and in the other kernels/*.cl
// files is launched over a global size rounded up to a multiple of the work-group size, so
// each one checks its index against the real element count first.

// buf[0..n) = value.
__kernel void fill(__global float *buf, const float value, const uint n) {
    const uint i = (uint)get_global_id(0);
    if (i < n) buf[i] = value;
}

// out[0..n) = a + b (out may be a: adding into it). The merge family's add, and the gradient
// of a tensor several layers read, added up.
__kernel void add2(__global float *out, __global const float *a, __global const float *b,
                   const uint n) {
    const uint i = (uint)get_global_id(0);
    if (i < n) out[i] = a[i] + b[i];
}

// A sample's (C, H, W) axes reordered (the permute layer): out (B, o0, o1, o2) element (a, b, c)
// is in's at a * s0 + b * s1 + c * s2 within its sample of n floats. The backward is the same
// with the inverse permutation. One work-item per output element.
__kernel void permute3(__global float *out, __global const float *in, const int B, const int o0,
                       const int o1, const int o2, const int s0, const int s1, const int s2) {
    const int n = o0 * o1 * o2, k = (int)get_global_id(0);
    if (k >= B * n) return;
    const int i = k / n, r = k - i * n, a = r / (o1 * o2), b = (r / o2) % o1, c = r % o2;
    out[k] = in[i * n + a * s0 + b * s1 + c * s2];
}
