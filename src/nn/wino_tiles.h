// Winograd's per-sample stages (wino_tiles.c), for conv_nhwc.c: both compiled once per
// instruction set, each copy's functions under its own name (isa.h). Layouts as winograd.h
// describes; "vectors" and channel counts are VL-wide (vec.h), ld a multiple of CONV_CPAD.
#ifndef HETRAIN_WINO_TILES_H
#define HETRAIN_WINO_TILES_H

#include "nn/isa.h"

#include <stddef.h>

#define wino_input ISA_NAME(wino_input)
#define wino_gemm ISA_NAME(wino_gemm)
#define wino_output ISA_NAME(wino_output)
#define wino_grad_tiles ISA_NAME(wino_grad_tiles)
#define wino_dw_accum ISA_NAME(wino_dw_accum)

// V[xi][t][ldv] = B^T d B for every tile t = ty*tw + tx of the zero-bordered input: tile t's
// patch starts at src + (ty*m*rowstep + tx*m*cstride); channels c < C (ldv >= conv_cpad(C);
// lanes from C up to it are written zero). rowstep, cstride: floats between rows, positions.
void wino_input(float *V, int ldv, const float *src, int rowstep, int cstride, int C, int m,
                int r, int th, int tw);

// M[xi][t][0..VL*nv) = sum_{c < C} V[xi][t][c] * U[xi][c][..]: T tiles, nv output vectors.
void wino_gemm(float *M, int ldm, int nv, const float *V, int ldv, int C, const float *U, int ldu,
               int T, int m, int r);

// out (OH,OW,ldo) = A^T M A (+ bias, relu) for every tile, the VL*nv channels of each output
// position written, positions past OH x OW skipped. bias: VL*nv floats or NULL. exact, when
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

#endif
