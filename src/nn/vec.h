// 16-float vectors for the channels-last CPU math (conv.c, winograd.c): AVX-512 where the
// build targets it, else GCC/Clang vector extensions (two AVX2 registers, four NEON ones).
// Both types take +, - and * (with a scalar too), so transforms can be written as formulas.
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
#else
// These static helpers are always inlined, so GCC's note that 64-byte vector arguments would
// change the ABI does not concern them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
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
    for (int i = 0; i < 16; i++)
        if (nz[i]) return 1;
    return 0;
}
static inline void v_add_to_double(double *d, vf a) {
    float f[16];
    memcpy(f, &a, sizeof f);
    for (int i = 0; i < 16; i++) d[i] += f[i];
}
#endif

#define VL 16
#define ALWAYS_INLINE inline __attribute__((always_inline))

#endif
