// Convolution by im2col over a whole micro-batch + GEMM (CLBlast, on the host side), and the
// reshapes around it. N = B*OH*OW columns: column j = b*OH*OW + oy*OW + ox; row
// r = c*K*K + ky*K + kx.

// col (C*K*K, N) from in (B,C,H,W); zero where a tap lands in the padding.
// 2-D range: dim 0 = column j (N), dim 1 = channel c. Each work-item writes its column's K*K
// taps of channel c: the index arithmetic is done once per K*K stores, and neighbouring
// work-items store to neighbouring addresses.
__kernel void im2col(__global float *col, __global const float *in, const int B, const int C,
                     const int H, const int W, const int K, const int stride, const int pad,
                     const int OH, const int OW) {
    const int j = (int)get_global_id(0), c = (int)get_global_id(1);
    const int P = OH * OW, N = B * P;
    if (j >= N || c >= C) return;
    const int b = j / P, p = j - b * P;
    const int oy = p / OW, ox = p - oy * OW;
    const int y0 = oy * stride - pad, x0 = ox * stride - pad;
    __global const float *plane = in + (b * C + c) * H * W;
    __global float *dst = col + c * K * K * N + j;
    for (int ky = 0; ky < K; ky++) {
        const int iy = y0 + ky;
        const int row_ok = iy >= 0 && iy < H;
        for (int kx = 0; kx < K; kx++) {
            const int ix = x0 + kx;
            *dst = row_ok && ix >= 0 && ix < W ? plane[iy * W + ix] : 0.0f;
            dst += N;
        }
    }
}

// The adjoint of im2col as a gather: din (B,C,H,W) = the sum of every col entry that was
// copied from that pixel, in (ky,kx) order like the CPU's col2im. One work-item per input
// element, so no two work-items write the same place (no atomics).
__kernel void col2im(__global float *din, __global const float *col, const int B, const int C,
                     const int H, const int W, const int K, const int stride, const int pad,
                     const int OH, const int OW) {
    const int i = (int)get_global_id(0);
    if (i >= B * C * H * W) return;
    const int x = i % W, t1 = i / W;
    const int y = t1 % H, t2 = t1 / H;
    const int c = t2 % C, b = t2 / C;
    const int P = OH * OW, N = B * P;
    float acc = 0.0f;
    for (int ky = 0; ky < K; ky++) {
        const int ty = y + pad - ky;  // = oy * stride when this tap row touches y
        if (ty < 0 || ty % stride != 0) continue;
        const int oy = ty / stride;
        if (oy >= OH) continue;
        for (int kx = 0; kx < K; kx++) {
            const int tx = x + pad - kx;
            if (tx < 0 || tx % stride != 0) continue;
            const int ox = tx / stride;
            if (ox >= OW) continue;
            acc += col[((c * K + ky) * K + kx) * N + b * P + oy * OW + ox];
        }
    }
    din[i] = acc;
}

// out (B,OC,P) = tmp (OC, B*P) reshaped, plus bias params[b_off + oc]. tmp starts at float
// tmp_off of its buffer (a region of the scratch).
__kernel void bias_to_nchw(__global float *out, __global const float *tmp, const uint tmp_off,
                           __global const float *params, const uint b_off, const int B,
                           const int OC, const int P) {
    const int i = (int)get_global_id(0);
    if (i >= B * OC * P) return;
    tmp += tmp_off;
    const int p = i % P, t = i / P;
    const int oc = t % OC, b = t / OC;
    out[i] = tmp[oc * (B * P) + b * P + p] + params[b_off + oc];
}

// rows (OC, B*P), from float rows_off of its buffer on, = dout (B,OC,P) reshaped; one
// work-item per element of rows.
__kernel void nchw_to_rows(__global float *rows, const uint rows_off, __global const float *dout,
                           const int B, const int OC, const int P) {
    const int i = (int)get_global_id(0);
    const int N = B * P;
    if (i >= OC * N) return;
    rows += rows_off;
    const int oc = i / N, j = i - oc * N;
    const int b = j / P, p = j - b * P;
    rows[i] = dout[(b * OC + oc) * P + p];
}

// acc[off + r] += sum of row r of m (rows, cols), m starting at float m_off of its buffer.
// One work-group per row: each work-item sums a strided slice, then a tree reduction in local
// memory. The local size must be a power of two; `part` holds one float per work-item.
__kernel void row_sum(__global float *acc, const uint off, __global const float *m,
                      const uint m_off, const int rows, const int cols, __local float *part) {
    const int r = (int)get_group_id(0);
    const int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    float s = 0.0f;
    if (r < rows) {
        __global const float *row = m + m_off + (size_t)r * cols;
        for (int j = lid; j < cols; j += ls) s += row[j];
    }
    part[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = ls / 2; h > 0; h /= 2) {
        if (lid < h) part[lid] += part[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && r < rows) acc[off + r] += part[0];
}
