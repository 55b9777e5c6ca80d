// Random numbers: a sequential generator for shuffles and initialisation, and a counter-based
// one for dropout, a pure function of (seed, epoch, global sample id, layer, element) so that a
// mask never depends on which device or batch processed the sample. kernels/ repeats
// ht_mix64/ht_rng_uniform bit for bit in OpenCL C.
#ifndef HETRAIN_RNG_H
#define HETRAIN_RNG_H

#include <math.h>
#include <stdint.h>

// splitmix64's finaliser: a bijective 64-bit mixer.
static inline uint64_t ht_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Key for one (seed, epoch, layer); combine with (sample, element) via ht_rng_uniform.
static inline uint64_t ht_rng_key(uint64_t seed, uint32_t epoch, uint32_t layer) {
    return ht_mix64(seed ^ ht_mix64(((uint64_t)epoch << 32) | layer));
}

// Uniform float in [0,1) with 24 random bits.
static inline float ht_rng_uniform(uint64_t key, uint32_t sample_id, uint32_t element) {
    uint64_t z = ht_mix64(key ^ ht_mix64(((uint64_t)sample_id << 32) | element));
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

// Sequential generator (splitmix64).
typedef struct ht_rng {
    uint64_t state;
} ht_rng;

static inline void ht_rng_seed(ht_rng *r, uint64_t seed) { r->state = seed; }

static inline uint64_t ht_rng_next(ht_rng *r) {
    uint64_t z = ht_mix64(r->state);
    r->state += 0x9E3779B97F4A7C15ull;
    return z;
}

// Uniform double in [0,1) with 53 random bits.
static inline double ht_rng_double(ht_rng *r) {
    return (double)(ht_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

// Uniform integer in [0, n) (n > 0), rejection-free multiply-shift; bias < 2^-32 for n < 2^32.
static inline uint32_t ht_rng_below(ht_rng *r, uint32_t n) {
    return (uint32_t)(((ht_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

// Standard normal by Box-Muller (one value per call; simple over fast: used only at init).
static inline double ht_rng_normal(ht_rng *r) {
    double u1 = ht_rng_double(r), u2 = ht_rng_double(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
