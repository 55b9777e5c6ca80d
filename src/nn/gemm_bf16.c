// bfloat16 GEMM (gemm_bf16.h): the factors packed as bfloat16 pairs, Goto's blocking (a block of
// B's columns stays in the L2 cache, a micro-panel of it in L1, A's rows stream past), and a
// 12 x 32 register tile of float sums.
//
// Packed layouts. A pair is two bfloat16 in one 32-bit word, k = 2p in the low half, 2p+1 in the
// high one (an odd K's last pair has a zero high half). B's micro-panel (NR columns, kp pairs)
// is pair-major, [p][j], so that a pair row is two vectors of 16 columns; A's micro-panel (MR
// rows) is [i][p] when A's rows are contiguous (no transpose: each row converts as it lies) and
// [p][i] when its columns are (transposed), the kernel reading a(i, p) at i*rs + p*ps. Rows and
// columns past the matrix's edge are zero in the panels and never stored.
#include "nn/gemm_bf16.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_NATIVE 1
#else
#define HAVE_NATIVE 0
#endif

#define MR 12
#define NR 32
#define KC GEMM_BF16_KC
#define KP (KC / 2)
#define MC (8 * MR)
#define NC 512

#define INLINE static inline __attribute__((always_inline))

// x's bfloat16 bits, to nearest with ties to even; a NaN stays a (quiet) NaN.
INLINE uint32_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r;
}
INLINE uint32_t pair_of(float lo, float hi) { return bf16_bits(lo) | bf16_bits(hi) << 16; }
INLINE float lo_of(uint32_t v) {
    const uint32_t u = v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
INLINE float hi_of(uint32_t v) {
    const uint32_t u = v & 0xffff0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float bf16_round(float x) { return lo_of(bf16_bits(x)); }

// ---- packing --------------------------------------------------------------------------------
// n consecutive values of k from x as (n + 1) / 2 pairs (an odd n's last with a zero high half).
INLINE void pairs_along(uint32_t *d, const float *x, int n) {
    const int full = n / 2;
    for (int p = 0; p < full; p++) d[p] = pair_of(x[2 * p], x[2 * p + 1]);
    if (n & 1) d[full] = pair_of(x[n - 1], 0.0f);
}
// A's rows [i0, i0 + mr) and values of k [k0, k0 + kc) into an MR-row micro-panel.
INLINE void pack_a_rows(uint32_t *dst, const float *A, int lda, int i0, int mr, int k0, int kc) {
    const int kp = (kc + 1) / 2;
    for (int i = 0; i < MR; i++) {
        uint32_t *d = dst + (size_t)i * kp;
        if (i < mr) pairs_along(d, A + (size_t)(i0 + i) * lda + k0, kc);
        else memset(d, 0, sizeof *d * (size_t)kp);
    }
}
// W-wide pair-major panel [p][w] of a matrix whose k-th row holds the panel's values at
// X[(k0 + k)*ld + c0 + w], w < n (the rest zero): a transposed A's rows (W = MR) and B's rows
// (W = NR) alike.
INLINE void pack_pair_rows(uint32_t *dst, int W, const float *X, int ld, int c0, int n, int k0,
                           int kc) {
    const int kp = (kc + 1) / 2;
    for (int p = 0; p < kp; p++) {
        uint32_t *d = dst + (size_t)p * W;
        const float *r0 = X + (size_t)(k0 + 2 * p) * ld + c0;
        if (2 * p + 1 < kc) {
            const float *r1 = r0 + ld;
            for (int j = 0; j < n; j++) d[j] = pair_of(r0[j], r1[j]);
        } else {
            for (int j = 0; j < n; j++) d[j] = pair_of(r0[j], 0.0f);
        }
        for (int j = n; j < W; j++) d[j] = 0;
    }
}
INLINE void pack_a_cols(uint32_t *dst, const float *A, int lda, int i0, int mr, int k0, int kc) {
    pack_pair_rows(dst, MR, A, lda, i0, mr, k0, kc);
}
INLINE void pack_b_rows(uint32_t *dst, const float *B, int ldb, int j0, int nr, int k0, int kc) {
    pack_pair_rows(dst, NR, B, ldb, j0, nr, k0, kc);
}
// The same from a transposed B (b(k, j) = B[j*ldb + k]): each column's pairs converted as they
// lie (whole vectors), 16 pairs at a time into a small tile, then written pair-major.
INLINE void pack_b_cols(uint32_t *dst, const float *B, int ldb, int j0, int nr, int k0, int kc) {
    const int kp = (kc + 1) / 2;
    uint32_t t[NR][16];
    for (int p0 = 0; p0 < kp; p0 += 16) {
        const int np = kp - p0 < 16 ? kp - p0 : 16;
        const int nk = kc - 2 * p0 < 32 ? kc - 2 * p0 : 32; // values of k in this tile
        for (int j = 0; j < NR; j++) {
            if (j < nr) pairs_along(t[j], B + (size_t)(j0 + j) * ldb + k0 + 2 * p0, nk);
            else memset(t[j], 0, sizeof t[j]);
        }
        for (int p = 0; p < np; p++)
            for (int j = 0; j < NR; j++) dst[(size_t)(p0 + p) * NR + j] = t[j][p];
    }
}

// ---- micro-kernels: C's mr x nr tile (mode 0: =, 1: +=) from kp pairs --------------------------
static void ukr_emul(int kp, const uint32_t *a, int rs, int ps, const uint32_t *b, float *c,
                     int ldc, int mr, int nr, int mode) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int p = 0; p < kp; p++) {
        const uint32_t *bp = b + (size_t)p * NR;
        for (int i = 0; i < MR; i++) {
            const uint32_t av = a[(size_t)i * rs + (size_t)p * ps];
            const float a0 = lo_of(av), a1 = hi_of(av);
            for (int j = 0; j < NR; j++) {
                acc[i][j] += a1 * hi_of(bp[j]); // each product exact in float
                acc[i][j] += a0 * lo_of(bp[j]);
            }
        }
    }
    for (int i = 0; i < mr; i++) {
        float *ci = c + (size_t)i * ldc;
        for (int j = 0; j < nr; j++) ci[j] = mode ? ci[j] + acc[i][j] : acc[i][j];
    }
}

#if HAVE_NATIVE
#define NATIVE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
NATIVE_TARGET static void ukr_native(int kp, const uint32_t *a, int rs, int ps,
                                     const uint32_t *b, float *c, int ldc, int mr, int nr,
                                     int mode) {
    __m512 s0[MR], s1[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) s0[i] = _mm512_setzero_ps(), s1[i] = _mm512_setzero_ps();
    const uint32_t *ar[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) ar[i] = a + (size_t)i * rs;
    for (int p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR + 16);
        const size_t o = (size_t)p * ps;
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ar[i][o]);
            s0[i] = _mm512_dpbf16_ps(s0[i], av, b0);
            s1[i] = _mm512_dpbf16_ps(s1[i], av, b1);
        }
    }
    const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
        float *ci = c + (size_t)i * ldc;
        __m512 v0 = s0[i], v1 = s1[i];
        if (mode) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + 16, m1, v1);
    }
}
#endif

// ---- the blocked product --------------------------------------------------------------------
typedef void (*ukr_fn)(int, const uint32_t *, int, int, const uint32_t *, float *, int, int, int,
                       int);

INLINE void run(ukr_fn ukr, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                uint32_t *abuf, uint32_t *bbuf, int mcap, int ncap) {
    const int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = K - k0 < KC ? K - k0 : KC, kp = (kc + 1) / 2;
        const int mode = k0 > 0 || beta != 0.0f;
        for (int j0 = 0; j0 < N; j0 += ncap) {
            const int nc = N - j0 < ncap ? N - j0 : ncap;
            for (int jr = 0; jr < nc; jr += NR) {
                const int nr = nc - jr < NR ? nc - jr : NR;
                uint32_t *d = bbuf + (size_t)(jr / NR) * kp * NR;
                if (bt) pack_b_cols(d, B, ldb, j0 + jr, nr, k0, kc);
                else pack_b_rows(d, B, ldb, j0 + jr, nr, k0, kc);
            }
            for (int i0 = 0; i0 < M; i0 += mcap) {
                const int mc = M - i0 < mcap ? M - i0 : mcap;
                for (int ir = 0; ir < mc; ir += MR) {
                    const int mr = mc - ir < MR ? mc - ir : MR;
                    uint32_t *d = abuf + (size_t)(ir / MR) * kp * MR;
                    if (at) pack_a_cols(d, A, lda, i0 + ir, mr, k0, kc);
                    else pack_a_rows(d, A, lda, i0 + ir, mr, k0, kc);
                }
                const int rs = at ? 1 : kp, ps = at ? MR : 1;
                for (int jr = 0; jr < nc; jr += NR) {
                    const int nr = nc - jr < NR ? nc - jr : NR;
                    const uint32_t *bp = bbuf + (size_t)(jr / NR) * kp * NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        const int mr = mc - ir < MR ? mc - ir : MR;
                        ukr(kp, abuf + (size_t)(ir / MR) * kp * MR, rs, ps, bp,
                            C + (size_t)(i0 + ir) * ldc + j0 + jr, ldc, mr, nr, mode);
                    }
                }
            }
        }
    }
}

static void run_emul(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc, uint32_t *abuf, uint32_t *bbuf, int mcap, int ncap) {
    run(ukr_emul, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, abuf, bbuf, mcap, ncap);
}
#if HAVE_NATIVE
// The packing compiled for the same CPU as the kernel, so that it converts whole vectors.
NATIVE_TARGET static void run_native(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N,
                                     int K, const float *A, int lda, const float *B, int ldb,
                                     float beta, float *C, int ldc, uint32_t *abuf,
                                     uint32_t *bbuf, int mcap, int ncap) {
    run(ukr_native, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, abuf, bbuf, mcap, ncap);
}
#endif

static int forced_emul, small_panels;

int gemm_bf16_native(void) {
#if HAVE_NATIVE
    __builtin_cpu_init();
    return !forced_emul && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

const char *gemm_bf16_describe(void) {
    return gemm_bf16_native() ? "AVX512_BF16"
                              : "emulated (this CPU has no AVX512_BF16), slower than f32";
}

void gemm_bf16_emulate(int on) { forced_emul = on != 0; }
void gemm_bf16_small_panels(int on) { small_panels = on != 0; }

void gemm_bf16(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (beta != 0.0f && beta != 1.0f)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] *= beta;
    if (K <= 0) {
        for (int i = 0; beta == 0.0f && i < M; i++)
            memset(C + (size_t)i * ldc, 0, sizeof *C * (size_t)N);
        return;
    }
    if (beta != 0.0f) beta = 1.0f;
    // The panels, on 64-byte boundaries: up to 48 KiB of A's rows and 256 KiB of B's columns,
    // sized to the product. Where that cannot be had, panels of one tile each on the stack
    // (slower; the same sums, in the same order).
    const int mc = M < MC ? (M + MR - 1) / MR * MR : MC;
    const int nc = N < NC ? (N + NR - 1) / NR * NR : NC;
    const size_t na = (size_t)mc * KP, nb = (size_t)nc * KP;
    uint32_t *buf = small_panels ? NULL : aligned_alloc(64, (na + nb) * sizeof *buf);
    _Alignas(64) uint32_t small_a[MR * KP], small_b[NR * KP];
    uint32_t *abuf = buf ? buf : small_a, *bbuf = buf ? buf + na : small_b;
    const int mcap = buf ? MC : MR, ncap = buf ? NC : NR;
    if (gemm_bf16_native()) {
#if HAVE_NATIVE
        run_native(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, abuf, bbuf, mcap, ncap);
#endif
    } else {
        run_emul(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, abuf, bbuf, mcap, ncap);
    }
    free(buf);
}
