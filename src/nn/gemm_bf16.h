// Matrix products with bfloat16 factors and float32 sums: --precision bf16's GEMMs (the dense
// layers and the convolutions computed as GEMMs over the batch).
//
// Each element of A and B is rounded to bfloat16 (round to nearest even: 8 bits of mantissa),
// every product of two such is exact in float, and the products are summed in float: pairs of
// consecutive k (k = 2p, 2p+1) go into a float accumulator as acc += a(2p+1)b(2p+1), then acc +=
// a(2p)b(2p), p in order, in blocks of GEMM_BF16_KC values of k whose sums are added to C in order.
// On a CPU with AVX512_BF16 this is the VDPBF16PS instruction (twice the products per instruction
// of a float FMA); elsewhere the same arithmetic in plain float code (emulated: the numerics of a
// bf16 run, at less than float32's speed). The instruction flushes denormal factors and sums to
// zero where the emulation keeps them, and its order of the pair's two additions is the vendor's,
// so the two agree within float rounding of the sums, not bit for bit. Each element's sum is the
// same bits whatever the split of C among threads (the order of k never changes).
#ifndef HETRAIN_GEMM_BF16_H
#define HETRAIN_GEMM_BF16_H

#include <cblas.h>

// Values of k per block (even), as the sums are ordered above.
#define GEMM_BF16_KC 256

// The narrowest layer dimension a bfloat16 GEMM pays on (--precision bf16 leaves narrower
// products in float32): each packed element is used as many times as the other factor is wide,
// and below this the packing costs what the instruction saves. Measured on one thread of a Zen
// 4 against OpenBLAS's SGEMM: 16 output columns 46-66 against 62-109 GFLOP/s (a weight
// gradient 96 x 16 over 512 rows: 46 against 109), 24 columns 94 against 63, 32 columns 120-132
// against 75-82. By the layer's dimensions alone (never the batch's), so every split of a batch
// computes alike.
#define GEMM_BF16_MIN_WIDTH 24

// Row-major C (M x N, ldc) = op(A) op(B) + beta*C (beta 0: C's old values never read), the
// factors rounded to bfloat16 as above, on the calling thread.
void gemm_bf16(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc);

// Whether this CPU computes it with AVX512_BF16 (1) or emulated (0), now; and that as text for
// `hetrain devices` and the run log.
int gemm_bf16_native(void);
const char *gemm_bf16_describe(void);
// Forces the emulation (on != 0) or goes back to what the CPU has: for tests and benchmarks that
// compare the two in one process; not while products run.
void gemm_bf16_emulate(int on);
// Runs with the panels it falls back to when their memory cannot be had (one tile each, on the
// stack), for the tests; not while products run.
void gemm_bf16_small_panels(int on);

// x rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), as a float.
float bf16_round(float x);

#endif
