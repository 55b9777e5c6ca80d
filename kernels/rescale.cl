// x * scale + offset (the rescale family, Keras's Rescaling), element by element; the
// backward's input gradient is the output's times the scale.

__kernel void rescale_fwd(__global float *out, __global const float *in, const uint n,
                          const float s, const float o) {
    const uint i = (uint)get_global_id(0);
    if (i < n) out[i] = in[i] * s + o;
}

__kernel void rescale_bwd(__global float *din, __global const float *dout, const uint n,
                          const float s) {
    const uint i = (uint)get_global_id(0);
    if (i < n) din[i] = dout[i] * s;
}
