// Winograd F(m x m, r x r) convolutions (m = 2, 4; r = 3, 5) over a micro-batch in NCHW: the
// transforms of src/nn/winograd.c (the CPU device's), operation for operation, so that both
// devices round alike; the GEMMs of the transformed domain run on CLBlast (ocl_wino.c). Tile t
// = (b * th + ty) * tw + tx covers outputs [ty*m, ty*m + m) x [tx*m, tx*m + m) of sample b;
// a = m + r - 1 transform points per axis; buffers are [xi][t][ld] (xi < a*a).
// No contraction of a * b + c into fma beyond the fma() calls written, as the CPU's code.
#pragma OPENCL FP_CONTRACT OFF

// B^T x over a = 4, 6 or 8 values x[0], x[s], ... into y[0], y[s], ...
static void wino_bt(float *y, const float *x, const int s, const int a) {
    if (a == 4) {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
        y[0] = x0 - x2;
        y[s] = x1 + x2;
        y[2 * s] = x2 - x1;
        y[3 * s] = x1 - x3;
    } else if (a == 6) {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s],
                    x5 = x[5 * s];
        const float d42 = x4 - x2, d31 = x3 - x1;
        y[0] = fma(4.0f, x0, fma(-5.0f, x2, x4));
        y[s] = fma(-4.0f, x1 + x2, x3 + x4);
        y[2 * s] = fma(4.0f, x1 - x2, x4 - x3);
        y[3 * s] = fma(2.0f, d31, d42);
        y[4 * s] = fma(2.0f, x1 - x3, d42);
        y[5 * s] = fma(4.0f, x1, fma(-5.0f, x3, x5));
    } else {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s],
                    x5 = x[5 * s], x6 = x[6 * s], x7 = x[7 * s];
        const float c214 = 21.0f / 4, m174 = -17.0f / 4;
        y[0] = fma(c214, x4 - x2, x0 - x6);
        y[7 * s] = fma(c214, x3 - x5, x7 - x1);
        const float a1 = fma(m174, x3, x1 + x5), b1 = fma(m174, x4, x2 + x6);
        y[s] = b1 + a1;
        y[2 * s] = b1 - a1;
        const float a3 = fma(2.0f, x5, fma(-2.5f, x3, 0.5f * x1)),
                    b3 = fma(-1.25f, x4, fma(0.25f, x2, x6));
        y[3 * s] = b3 + a3;
        y[4 * s] = b3 - a3;
        const float a5 = fma(0.5f, x5, fma(-2.5f, x3, 2.0f * x1)),
                    b5 = fma(-5.0f, x4, fma(4.0f, x2, x6));
        y[5 * s] = b5 + a5;
        y[6 * s] = b5 - a5;
    }
}

// A^T x: a values to m (F(2,3) 4 -> 2, F(4,3) 6 -> 4, F(2,5) 6 -> 2, F(4,5) 8 -> 4).
static void wino_at(float *y, const float *x, const int s, const int m, const int r) {
    if (r == 5 && m == 4) {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s],
                    x5 = x[5 * s], x6 = x[6 * s], x7 = x[7 * s];
        const float p1 = x1 + x2, d1 = x1 - x2, p2 = x3 + x4, d2 = x3 - x4, p3 = x5 + x6,
                    d3 = x5 - x6;
        y[0] = x0 + p1 + p2 + p3;
        y[s] = fma(0.5f, d3, fma(2.0f, d2, d1));
        y[2 * s] = fma(0.25f, p3, fma(4.0f, p2, p1));
        y[3 * s] = fma(0.125f, d3, fma(8.0f, d2, d1)) + x7;
    } else if (r == 5) {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s],
                    x5 = x[5 * s];
        y[0] = x0 + (x1 + x2) + (x3 + x4);
        y[s] = fma(2.0f, x3 - x4, x1 - x2) + x5;
    } else if (m == 2) {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
        y[0] = x0 + x1 + x2;
        y[s] = x1 - x2 - x3;
    } else {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s],
                    x5 = x[5 * s];
        const float a = x1 + x2, b = x1 - x2, c = x3 + x4, d = x3 - x4;
        y[0] = x0 + a + c;
        y[s] = fma(2.0f, d, b);
        y[2 * s] = fma(4.0f, c, a);
        y[3 * s] = fma(8.0f, d, b) + x5;
    }
}

// A x: m values to a (the output gradient's tiles, for the weight gradient).
static void wino_a(float *y, const float *x, const int s, const int m, const int r) {
    if (r == 5 && m == 4) {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
        const float e1 = x0 + x2, o1 = x1 + x3;
        const float e2 = fma(4.0f, x2, x0), o2 = fma(8.0f, x3, x1 + x1);
        const float e3 = fma(0.25f, x2, x0), o3 = fma(0.125f, x3, 0.5f * x1);
        y[0] = x0;
        y[s] = e1 + o1;
        y[2 * s] = e1 - o1;
        y[3 * s] = e2 + o2;
        y[4 * s] = e2 - o2;
        y[5 * s] = e3 + o3;
        y[6 * s] = e3 - o3;
        y[7 * s] = x3;
    } else if (r == 5) {
        const float x0 = x[0], x1 = x[s], t = x1 + x1;
        y[0] = x0;
        y[s] = x0 + x1;
        y[2 * s] = x0 - x1;
        y[3 * s] = x0 + t;
        y[4 * s] = x0 - t;
        y[5 * s] = x1;
    } else if (m == 2) {
        const float x0 = x[0], x1 = x[s];
        y[0] = x0;
        y[s] = x0 + x1;
        y[2 * s] = x0 - x1;
        y[3 * s] = 0.0f - x1;
    } else {
        const float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
        const float e = x0 + x2, f = x1 + x3;
        const float g = fma(4.0f, x2, x0), h = fma(8.0f, x3, x1 + x1);
        y[0] = x0;
        y[s] = e + f;
        y[2 * s] = e - f;
        y[3 * s] = g + h;
        y[4 * s] = g - h;
        y[5 * s] = x3;
    }
}

// V[xi][t][c] = (B^T d B)[xi] of the a x a patch of channel c whose top left is input position
// (ty*m - pad, tx*m - pad), zero outside the input. Range (c, ty*tw + tx, b).
__kernel void wino_input(__global float *V, __global const float *in, const int C, const int H,
                         const int W, const int pad, const int m, const int r, const int th,
                         const int tw, const int T, const int ldv) {
    const int c = (int)get_global_id(0), tt = (int)get_global_id(1), b = (int)get_global_id(2);
    if (c >= C) return;
    const int a = m + r - 1, ty = tt / tw, tx = tt - ty * tw;
    const int y0 = ty * m - pad, x0 = tx * m - pad;
    __global const float *ip = in + ((size_t)b * C + c) * H * W;
    float d[64], u[64];
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) {
            const int y = y0 + i, x = x0 + j;
            d[i * a + j] = y >= 0 && y < H && x >= 0 && x < W ? ip[y * W + x] : 0.0f;
        }
    for (int i = 0; i < a; i++) wino_bt(u + i * a, d + i * a, 1, a); // along each row,
    for (int j = 0; j < a; j++) wino_bt(d + j, u + j, a, a);         // then each column
    const size_t t = (size_t)b * th * tw + tt;
    for (int xi = 0; xi < a * a; xi++) V[((size_t)xi * T + t) * ldv + c] = d[xi];
}

// out (B, OC, OH, OW) = A^T M A of each tile (M from float m_off of its buffer) (+ bias); an output marked in exact (B*OH*OW
// bytes, when has_exact) sees only zeros and gets the bias alone, as a direct sum would. Range
// (oc, ty*tw + tx, b).
__kernel void wino_output(__global float *out, __global const float *M, const ulong m_off,
                          __global const float *params, const int b_off, const int has_bias,
                          __global const uchar *exact, const int has_exact, const int OC,
                          const int OH, const int OW, const int m, const int r, const int th,
                          const int tw, const int T, const int ldm) {
    const int oc = (int)get_global_id(0), tt = (int)get_global_id(1), b = (int)get_global_id(2);
    if (oc >= OC) return;
    const int a = m + r - 1, ty = tt / tw, tx = tt - ty * tw;
    const size_t t = (size_t)b * th * tw + tt;
    float x[64], u[32], y[16];
    for (int xi = 0; xi < a * a; xi++) x[xi] = M[m_off + ((size_t)xi * T + t) * ldm + oc];
    for (int i = 0; i < a; i++) wino_at(u + i * m, x + i * a, 1, m, r); // rows: a x m
    for (int j = 0; j < m; j++) wino_at(y + j, u + j, m, m, r);         // columns: m x m
    const float bias = has_bias ? params[b_off + oc] : 0.0f;
    __global float *op = out + ((size_t)b * OC + oc) * OH * OW;
    for (int i = 0; i < m; i++) {
        const int oy = ty * m + i;
        if (oy >= OH) break;
        for (int j = 0; j < m; j++) {
            const int ox = tx * m + j;
            if (ox >= OW) break;
            float v = has_bias ? y[i * m + j] + bias : y[i * m + j];
            if (has_exact && exact[((size_t)b * OH + oy) * OW + ox]) v = bias;
            op[oy * OW + ox] = v;
        }
    }
}

// exact (B, OH, OW) bytes: 1 where the K x K receptive field of a stride-1 convolution (padding
// pad) holds only zeros over all C channels. Range (ox, oy, b).
__kernel void wino_zero_fields(__global uchar *exact, __global const float *in, const int C,
                               const int H, const int W, const int K, const int pad,
                               const int OH, const int OW) {
    const int ox = (int)get_global_id(0), oy = (int)get_global_id(1), b = (int)get_global_id(2);
    if (ox >= OW) return;
    int any = 0;
    for (int c = 0; c < C && !any; c++) {
        __global const float *ip = in + ((size_t)b * C + c) * H * W;
        for (int kh = 0; kh < K; kh++) {
            const int y = oy - pad + kh;
            if (y < 0 || y >= H) continue;
            for (int kw = 0; kw < K; kw++) {
                const int x = ox - pad + kw;
                if (x >= 0 && x < W && ip[y * W + x] != 0.0f) any = 1;
            }
        }
    }
    exact[((size_t)b * OH + oy) * OW + ox] = (uchar)!any;
}

// Z[xi][t][oc] (from float z_off of its buffer) = (A g A^T)[xi] of the m x m tile of the output gradient g (B, OC, OH, OW), zero
// past its end. Range (oc, ty*tw + tx, b).
__kernel void wino_grad_tiles(__global float *Z, const ulong z_off, __global const float *g,
                              const int OC,
                              const int OH, const int OW, const int m, const int r, const int th,
                              const int tw, const int T, const int ldz) {
    const int oc = (int)get_global_id(0), tt = (int)get_global_id(1), b = (int)get_global_id(2);
    if (oc >= OC) return;
    const int a = m + r - 1, ty = tt / tw, tx = tt - ty * tw;
    __global const float *gp = g + ((size_t)b * OC + oc) * OH * OW;
    float d[16], u[32], z[64];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            const int y = ty * m + i, x = tx * m + j;
            d[i * m + j] = y < OH && x < OW ? gp[y * OW + x] : 0.0f;
        }
    for (int i = 0; i < m; i++) wino_a(u + i * a, d + i * m, 1, m, r); // rows: m x a
    for (int j = 0; j < a; j++) wino_a(z + j, u + j, a, m, r);         // columns: a x a
    const size_t t = (size_t)b * th * tw + tt;
    for (int xi = 0; xi < a * a; xi++) Z[z_off + ((size_t)xi * T + t) * ldz + oc] = z[xi];
}

// Row i of F(m, r)'s G (winograd.c's tables, in float): r coefficients.
__constant float wino_G2[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
__constant float wino_G4[6][3] = {{1.0f / 4, 0, 0},
                                  {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                                  {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                                  {1.0f / 24, 1.0f / 12, 1.0f / 6},
                                  {1.0f / 24, -1.0f / 12, 1.0f / 6},
                                  {0, 0, 1}};
__constant float wino_G5[6][5] = {{1.0f / 4, 0, 0, 0, 0},
                                  {-1.0f / 6, -1.0f / 6, -1.0f / 6, -1.0f / 6, -1.0f / 6},
                                  {-1.0f / 6, 1.0f / 6, -1.0f / 6, 1.0f / 6, -1.0f / 6},
                                  {1.0f / 24, 1.0f / 12, 1.0f / 6, 1.0f / 3, 2.0f / 3},
                                  {1.0f / 24, -1.0f / 12, 1.0f / 6, -1.0f / 3, 2.0f / 3},
                                  {0, 0, 0, 0, 1}};
__constant float wino_G45[8][5] = {{1, 0, 0, 0, 0},
                                   {-2.0f / 9, -2.0f / 9, -2.0f / 9, -2.0f / 9, -2.0f / 9},
                                   {-2.0f / 9, 2.0f / 9, -2.0f / 9, 2.0f / 9, -2.0f / 9},
                                   {1.0f / 90, 1.0f / 45, 2.0f / 45, 4.0f / 45, 8.0f / 45},
                                   {1.0f / 90, -1.0f / 45, 2.0f / 45, -4.0f / 45, 8.0f / 45},
                                   {32.0f / 45, 16.0f / 45, 8.0f / 45, 4.0f / 45, 2.0f / 45},
                                   {32.0f / 45, -16.0f / 45, 8.0f / 45, -4.0f / 45, 2.0f / 45},
                                   {0, 0, 0, 0, 1}};

static float wino_g(const int m, const int r, const int i, const int k) {
    return r == 5 ? (m == 2 ? wino_G5[i][k] : wino_G45[i][k])
                  : (m == 2 ? wino_G2[i][k] : wino_G4[i][k]);
}

// grads[w_off + ((oc*C + c)*r + k)*r + l] += (G^T dU[.][c][oc] G)[k][l]: the weight gradient
// of the transformed-domain sums dU[xi] (C, OC), from float u_off of its buffer. Range (oc, c).
__kernel void wino_dw_finish(__global float *grads, const int w_off, __global const float *dU,
                             const ulong u_off, const int C, const int OC, const int m, const int r) {
    const int oc = (int)get_global_id(0), c = (int)get_global_id(1);
    if (oc >= OC) return;
    const int a = m + r - 1;
    float s[64], t[40];
    for (int xi = 0; xi < a * a; xi++) s[xi] = dU[u_off + ((size_t)xi * C + c) * OC + oc];
    for (int i = 0; i < a; i++) // t = s G
        for (int l = 0; l < r; l++) {
            float acc = 0.0f;
            for (int j = 0; j < a; j++) acc += s[i * a + j] * wino_g(m, r, j, l);
            t[i * 5 + l] = acc;
        }
    __global float *d = grads + w_off + ((size_t)oc * C + c) * r * r;
    for (int k = 0; k < r; k++) // G^T t
        for (int l = 0; l < r; l++) {
            float acc = 0.0f;
            for (int i = 0; i < a; i++) acc += wino_g(m, r, i, k) * t[i * 5 + l];
            d[k * r + l] += acc;
        }
}

#pragma OPENCL FP_CONTRACT ON
