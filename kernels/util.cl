// Small helpers shared by the device code. Every kernel here and in the other kernels/*.cl
// files is launched over a global size rounded up to a multiple of the work-group size, so
// each one checks its index against the real element count first.

// buf[0..n) = value.
__kernel void fill(__global float *buf, const float value, const uint n) {
    const uint i = (uint)get_global_id(0);
    if (i < n) buf[i] = value;
}
