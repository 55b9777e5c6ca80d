// Convolution by im2col over a whole micro-batch + GEMM (CLBlast, on the host side), and the
// reshapes around it. N = B*OH*OW columns: column j = b*OH*OW + oy*OW + ox; row
// r = c*K*K + ky*K + kx.

// The kernels below run over 3-D ranges (x, y, plane) or (p, channel, sample), so that no
// work-item divides to find where it is (a vector of integer divisions is slow on CPU devices,
// which run the work-items of a group as SIMD lanes): dimension 0 is rounded up to a multiple
// of the work-group size and checked, the others are exact.

// col (C*K*K, N) from in (B,C,H,W); zero where a tap lands in the padding. Range: (ox, oy,
// plane b*C + c). Each work-item writes its column's K*K taps of channel c; neighbouring
// work-items store to neighbouring addresses.
__kernel void im2col(__global float *col, __global const float *in, const int B, const int C,
                     const int H, const int W, const int K, const int stride, const int pad,
                     const int OH, const int OW) {
    const int ox = (int)get_global_id(0), oy = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (ox >= OW) return;
    const int b = plane / C, c = plane - b * C;
    const int P = OH * OW, N = B * P;
    const int y0 = oy * stride - pad, x0 = ox * stride - pad;
    __global const float *src = in + plane * H * W;
    __global float *dst = col + c * K * K * N + b * P + oy * OW + ox;
    for (int ky = 0; ky < K; ky++) {
        const int iy = y0 + ky;
        const int row_ok = iy >= 0 && iy < H;
        for (int kx = 0; kx < K; kx++) {
            const int ix = x0 + kx;
            *dst = row_ok && ix >= 0 && ix < W ? src[iy * W + ix] : 0.0f;
            dst += N;
        }
    }
}

// The adjoint of im2col as a gather: din (B,C,H,W) = the sum of every col entry that was
// copied from that pixel, in (ky,kx) order like the CPU's col2im. Range: (x, y, plane); one
// work-item per input element, so no two work-items write the same place (no atomics).
__kernel void col2im(__global float *din, __global const float *col, const int B, const int C,
                     const int H, const int W, const int K, const int stride, const int pad,
                     const int OH, const int OW) {
    const int x = (int)get_global_id(0), y = (int)get_global_id(1);
    const int plane = (int)get_global_id(2);
    if (x >= W) return;
    const int b = plane / C, c = plane - b * C;
    const int P = OH * OW, N = B * P;
    __global const float *src = col + c * K * K * N + b * P;
    float acc = 0.0f;
    if (stride == 1) {
        for (int ky = 0; ky < K; ky++) {
            const int oy = y + pad - ky;
            if (oy < 0 || oy >= OH) continue;
            for (int kx = 0; kx < K; kx++) {
                const int ox = x + pad - kx;
                if (ox < 0 || ox >= OW) continue;
                acc += src[(ky * K + kx) * N + oy * OW + ox];
            }
        }
    } else {
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
                acc += src[(ky * K + kx) * N + oy * OW + ox];
            }
        }
    }
    din[(plane * H + y) * W + x] = acc;
}

// out (B,OC,P) = tmp (OC, B*P) reshaped, plus bias params[b_off + oc] when has_bias. tmp
// starts at float tmp_off of its buffer (a region of the scratch). Range: (p, oc, b).
__kernel void bias_to_nchw(__global float *out, __global const float *tmp, const uint tmp_off,
                           __global const float *params, const uint b_off, const int has_bias,
                           const int B, const int OC, const int P) {
    const int p = (int)get_global_id(0), oc = (int)get_global_id(1), b = (int)get_global_id(2);
    if (p >= P) return;
    tmp += tmp_off;
    const float v = tmp[oc * (B * P) + b * P + p];
    out[(b * OC + oc) * P + p] = has_bias ? v + params[b_off + oc] : v;
}

// rows (OC, B*P), from float rows_off of its buffer on, = dout (B,OC,P) reshaped. Range:
// (p, oc, b).
__kernel void nchw_to_rows(__global float *rows, const uint rows_off, __global const float *dout,
                           const int B, const int OC, const int P) {
    const int p = (int)get_global_id(0), oc = (int)get_global_id(1), b = (int)get_global_id(2);
    if (p >= P) return;
    rows += rows_off;
    rows[oc * (B * P) + b * P + p] = dout[(b * OC + oc) * P + p];
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
