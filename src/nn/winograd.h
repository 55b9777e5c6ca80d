// Winograd convolution F(m x m, r x r) for r x r stride-1 convolutions of one channels-last
// sample, m = 2 or 4, r = 3 or 5: the stages conv.c strings together for the forward pass, the
// input gradient (the same convolution of the output gradient with the flipped kernel) and
// the weight gradient. A tile
// of m x m outputs reads an a x a input patch, a = m + r - 1; with A, B, G the transform
// matrices of Lavin & Gray (2015), interpolation points 0, ±1, ±2, ±1/2 (a = 8: F(4,5)),
// 0, ±1, ±2 (a = 6: F(4,3), F(2,5)) and 0, ±1 (a = 4: F(2,3)):
//   out_tile = A^T [ sum_c (G w[oc][c] G^T) .* (B^T in_tile[c] B) ] A
// so each of the a*a transform points xi is one small GEMM over (tiles x channels):
//   M[xi] (T, OC) = V[xi] (T, C) . U[xi] (C, OC)
// and the weight gradient is dw = G^T [ sum_tiles V .* (A dout_tile A^T) ] G, a GEMM over the
// tiles per xi, summed in the transformed domain and brought back once per batch.
// Buffers are laid out [xi][row][ld] (each xi's matrix contiguous), ld a multiple of 16 (one
// vector of channels); inputs are read from zero-bordered buffers large enough that tiles past
// the edge read zeros. Every function takes the variant as (m, r), one wino_has allows.
#ifndef HETRAIN_WINOGRAD_H
#define HETRAIN_WINOGRAD_H

#include <stddef.h>

// Tiles of m x m covering n outputs along one axis.
static inline int wino_tiles(int n, int m) { return (n + m - 1) / m; }
// Transform points per axis, a = m + r - 1; a*a per tile.
static inline int wino_alpha(int m, int r) { return m + r - 1; }
// Whether F(m x m, r x r) is implemented: F(2,3), F(4,3), F(2,5), F(4,5).
static inline int wino_has(int m, int r) {
    return (r == 3 || r == 5) && (m == 2 || m == 4);
}

// Transformed weights U[xi][i][ldu] (rows i < n_in, columns j < n_out, zero for
// n_out <= j < ldu) from PyTorch's w (OC,C,r,r): forward (flip 0) i = c, j = oc, U = G w G^T;
// for the input gradient (flip 1) i = oc, j = c, of the kernel turned by 180 degrees.
// Computed in double, rounded once.
void wino_weights(float *U, int ldu, const float *w, int C, int OC, int m, int r, int flip);

// The weight gradient of transformed-domain sums: dw[oc][c][kh][kw] += (G^T dU[.][c][oc] G),
// kh, kw < r,
// for dU laid out as above, summed over n buffers (buffer i at dU + i * stride doubles), in
// double.
void wino_dw_finish(float *dw, const double *dU, size_t stride, int n, int ldd, int C, int OC,
                    int m, int r);

#endif
