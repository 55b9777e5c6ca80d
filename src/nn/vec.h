// Float vectors for the channels-last CPU math (conv.c, winograd.c): the widest the
// compilation targets. AVX-512: 16 floats in a register; AVX2 + FMA: 8; else GCC/Clang vector
// extensions of 4 (SSE2, NEON). VL is the width; every type takes +, - and * (with a scalar
// too), so transforms can be written as formulas. Layouts pad channels to CONV_CPAD (16), a
// whole number of vectors at every width.
#ifndef HETRAIN_VEC_H
#define HETRAIN_VEC_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
typedef __m512 vf;
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_relu(vf a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
// The first n (0..16) floats at p, the other lanes zero; nothing past p + n is read.
static inline vf v_load_n(const float *p, int n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}
// Whether any lane is not zero (NaN counts as not zero).
static inline int v_any_nonzero(vf a) {
    return _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0;
}
// d[0..15] += a, in double.
static inline void v_add_to_double(double *d, vf a) {
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
    __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    _mm512_storeu_pd(d, _mm512_add_pd(_mm512_loadu_pd(d), lo));
    _mm512_storeu_pd(d + 8, _mm512_add_pd(_mm512_loadu_pd(d + 8), hi));
}
#define VL 16
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 vf;
static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf v_relu(vf a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
// The first n (0..8) floats at p, the other lanes zero; a masked load reads nothing past p + n.
static inline vf v_load_n(const float *p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
}
static inline int v_any_nonzero(vf a) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NEQ_UQ)) != 0;
}
// d[0..7] += a, in double.
static inline void v_add_to_double(double *d, vf a) {
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    _mm256_storeu_pd(d, _mm256_add_pd(_mm256_loadu_pd(d), lo));
    _mm256_storeu_pd(d + 4, _mm256_add_pd(_mm256_loadu_pd(d + 4), hi));
}
#define VL 8
#else
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));
static inline vf v_load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v_store(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf v_set1(float x) { return (vf){0} + x; }
static inline vf v_zero(void) { return (vf){0}; }
static inline vf v_add(vf a, vf b) { return a + b; }
static inline vf v_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf v_relu(vf a) { return (vf)((vi)a & (a > (vf){0})); }
static inline vf v_load_n(const float *p, int n) {
    vf v = {0};
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}
static inline int v_any_nonzero(vf a) {
    vi nz = (vi)(a != (vf){0});
    return (nz[0] | nz[1] | nz[2] | nz[3]) != 0;
}
static inline void v_add_to_double(double *d, vf a) {
    for (int i = 0; i < 4; i++) d[i] += a[i];
}
#define VL 4
#endif

// ---- on every path: vf is a GCC/Clang vector type (the intrinsics' types are too), so the
// helpers below are written once with its operators.
typedef int32_t vint __attribute__((vector_size(sizeof(vf))));
// Lanes of a where m (a comparison's all-ones lanes), else b.
static inline vf v_sel(vint m, vf a, vf b) { return (vf)(((vint)a & m) | ((vint)b & ~m)); }
// exp(x) by Cephes's expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n
// into the exponent; within 2 ulp of expf for x in [-87.3, 88.3], +inf above and 0 below (where
// expf is within a few ulp of overflow or a denormal). A NaN stays NaN.
static inline vf v_exp(vf x) {
    const vf hi = v_set1(88.3762626647949f), lo = v_set1(-87.3365447505531f);
    const vint over = (vint)(x > hi), under = (vint)(x < lo);
    x = v_sel(over, hi, x);
    x = v_sel(under, lo, x);
    vf fx = x * 1.44269504088896341f + 0.5f;
    vint n = __builtin_convertvector(fx, vint);
    vf nf = __builtin_convertvector(n, vf);
    n += (vint)(nf > fx); // truncation to floor: one less where it rounded up (negatives)
    nf = __builtin_convertvector(n, vf);
    x = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    const vf z = x * x;
    vf y = v_set1(1.9875691500e-4f);
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * z + x + 1.0f;
    y = y * (vf)((n + 127) << 23);
    return v_sel(under, v_zero(), v_sel(over, v_set1(__builtin_inff()), y));
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

#endif
