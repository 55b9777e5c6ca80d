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

// V[xi][t][ldv] = B^T d B for every tile t = ty*tw + tx of the zero-bordered input: tile t's
// patch starts at src + (ty*m*rowstep + tx*m*cstride); channels c < C (ldv >= C rounded up to
// 16; lanes from C up are written zero). rowstep, cstride: floats between rows, positions.
void wino_input(float *V, int ldv, const float *src, int rowstep, int cstride, int C, int m,
                int r, int th, int tw);

// M[xi][t][0..16*nv) = sum_{c < C} V[xi][t][c] * U[xi][c][..]: T tiles, nv output vectors.
void wino_gemm(float *M, int ldm, int nv, const float *V, int ldv, int C, const float *U, int ldu,
               int T, int m, int r);

// out (OH,OW,ldo) = A^T M A (+ bias, relu) for every tile, the 16*nv channels of each output
// position written, positions past OH x OW skipped. bias: 16*nv floats or NULL. exact, when
// not NULL, marks (OH*OW bytes, nonzero) the outputs whose receptive field holds only zeros:
// they get the bias exactly, as a direct sum of zero products does, where the transforms
// would leave rounding noise of the tile's other values.
void wino_output(float *out, int ldo, int nv, const float *M, int ldm, const float *bias,
                 int relu, const unsigned char *exact, int m, int r, int th, int tw, int OH,
                 int OW);

// Z[xi][t][ldz] = A g A^T for every m x m tile of the output gradient, zero-bordered past its
// end (tile t at g + (ty*m*rowstep + tx*m*cstride)); channels c < OC (lanes from OC up zero).
void wino_grad_tiles(float *Z, int ldz, const float *g, int rowstep, int cstride, int OC, int m,
                     int r, int th, int tw);

// dU[xi][c][ldd] += sum_t V[xi][t][c] * Z[xi][t][..] over c < C and nv vectors of outputs: the
// sum over one sample's T tiles in float, added to dU in double.
void wino_dw_accum(double *dU, int ldd, const float *V, int ldv, int C, const float *Z, int ldz,
                   int nv, int T, int m, int r);

// The weight gradient of transformed-domain sums: dw[oc][c][kh][kw] += (G^T dU[.][c][oc] G),
// kh, kw < r,
// for dU laid out as above, summed over n buffers (buffer i at dU + i * stride doubles), in
// double.
void wino_dw_finish(float *dw, const double *dU, size_t stride, int n, int ldd, int C, int OC,
                    int m, int r);

#endif
