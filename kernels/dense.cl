// Dense-layer helpers around the CLBlast GEMMs: the bias add and the bias gradient.

// out (B,OUT) += bias params[b_off..b_off+OUT).
__kernel void dense_bias(__global float *out, __global const float *params, const uint b_off,
                         const int B, const int OUT) {
    const int i = (int)get_global_id(0);
    if (i >= B * OUT) return;
    out[i] += params[b_off + i % OUT];
}

// acc[off + o] += sum over rows i of m[i][o], m (rows, cols); one work-item per column, so
// neighbouring work-items read neighbouring floats.
__kernel void col_sum(__global float *acc, const uint off, __global const float *m,
                      const int rows, const int cols) {
    const int o = (int)get_global_id(0);
    if (o >= cols) return;
    float s = 0.0f;
    for (int i = 0; i < rows; i++) s += m[i * cols + o];
    acc[off + o] += s;
}
