// bfloat16 GEMM (src/nn/gemm_bf16.c): the rounding against known values, every transpose and
// edge (rows past a 12-row tile, columns past a 32-column one, odd K, K over several blocks)
// against a double-precision sum of the rounded factors, the AVX512_BF16 kernel, the emulation
// and the panels of the allocation-free fallback each, the same bits whatever the thread split, and the rounding visibly there.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/gemm_bf16.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/net.h"
#include "tests/lib/testutil.h"

// Float's unit roundoff: a sum of n products, each exact, added one at a time, is within
// n * U * sum |a b| of the exact sum (and a K-block's sum added to C, one more addition a block).
#define U 0x1p-24

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_round_known_values(void **state) {
    (void)state;
    assert_true(bf16_round(1.0f) == 1.0f);
    assert_true(bf16_round(1.0f + 0x1p-10f) == 1.0f);            // below half an ulp (2^-8)
    assert_true(bf16_round(1.0f + 0x1p-8f) == 1.0f);             // a tie: to even (down)
    assert_true(bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); // a tie: to even (up)
    assert_true(bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f); // above half: up
    assert_true(bf16_round(-3.0f) == -3.0f);
    assert_true(bf16_round(0x1.fffffep127f) == INFINITY); // float's largest rounds up to inf
    assert_true(bf16_round(-INFINITY) == -INFINITY);
    assert_true(isnan(bf16_round(NAN)));
    assert_true(isnan(bf16_round(bits_float(0x7f800001u)))); // a NaN whose payload is low bits
}

typedef struct shape {
    int ta, tb, M, N, K;
    float beta;
} shape;

// op(A) op(B) + beta C against the double sum of the rounded factors, within the bound above.
static void check(const shape *s, uint64_t seed) {
    const int M = s->M, N = s->N, K = s->K;
    const int lda = (s->ta ? M : K) + 3, ldb = (s->tb ? K : N) + 5, ldc = N + 7;
    const size_t na = (size_t)(s->ta ? K : M) * lda, nb = (size_t)(s->tb ? N : K) * ldb;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
    float *C0 = malloc((size_t)M * ldc * sizeof *C0), *C = malloc((size_t)M * ldc * sizeof *C);
    assert_non_null(A);
    assert_non_null(B);
    assert_non_null(C0);
    assert_non_null(C);
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < na; i++) A[i] = (float)(2 * ht_rng_double(&r) - 1);
    for (size_t i = 0; i < nb; i++) B[i] = (float)(2 * ht_rng_double(&r) - 1);
    for (size_t i = 0; i < (size_t)M * ldc; i++) C0[i] = (float)(2 * ht_rng_double(&r) - 1);
    memcpy(C, C0, (size_t)M * ldc * sizeof *C);
    gemm_bf16(s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, M, N, K, A,
              lda, B, ldb, s->beta, C, ldc);
    const double blocks = (K + GEMM_BF16_KC - 1) / GEMM_BF16_KC;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const float a = s->ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                const float b = s->tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                const double p = (double)bf16_round(a) * bf16_round(b);
                sum += p;
                mag += fabs(p);
            }
            const double c0 = s->beta == 0.0f ? 0.0 : (double)(float)(s->beta * C0[(size_t)i * ldc + j]);
            const double want = sum + c0;
            const double tol = (K + blocks + 2) * U * (mag + fabs(c0)) + 1e-30;
            const double got = C[(size_t)i * ldc + j];
            if (fabs(got - want) > tol)
                fail_msg("ta %d tb %d %dx%dx%d beta %g: C[%d][%d] = %.9g, want %.9g (tol %.3g)",
                         s->ta, s->tb, M, N, K, (double)s->beta, i, j, got, want, tol);
        }
    // Nothing past the N columns of a row (ldc's padding) is touched.
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) assert_true(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
    free(A);
    free(B);
    free(C0);
    free(C);
}

static const shape shapes[] = {
    {0, 0, 37, 45, 601, 0.0f}, {0, 1, 37, 45, 601, 0.0f}, {1, 0, 37, 45, 601, 1.0f},
    {1, 1, 37, 45, 601, 0.5f}, {0, 1, 12, 32, 2, 1.0f},   {1, 0, 13, 33, 3, 0.0f},
    {0, 0, 1, 1, 1, 0.0f},     {0, 1, 130, 700, 257, 0.0f}, {1, 0, 100, 20, 512, 1.0f},
    {0, 0, 5, 3, 0, 0.0f},     {0, 0, 5, 3, 0, 1.0f},
};

static void run_shapes(void) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check(&shapes[i], 11 + i);
}

// What this CPU runs (AVX512_BF16 where it has it), then the emulation.
static void test_shapes_native(void **state) {
    (void)state;
    if (!gemm_bf16_native()) skip(); // no AVX512_BF16 here: the emulation's test below runs
    run_shapes();
}
static void test_shapes_emulated(void **state) {
    (void)state;
    gemm_bf16_emulate(1);
    run_shapes();
    gemm_bf16_emulate(0);
}
// The fallback without an allocation: one 12 x 32 tile's panels at a time.
static void test_shapes_small_panels(void **state) {
    (void)state;
    gemm_bf16_small_panels(1);
    run_shapes();
    gemm_bf16_small_panels(0);
}

// gemm_split in bfloat16: the same bits on 1 and 2 threads along either dimension; and not
// float32's result (the factors' low bits are gone: some element differs by more than float
// rounding could make it).
static void test_split_and_rounding(void **state) {
    (void)state;
    const int M = 70, N = 90, K = 300;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    float *C3 = malloc(sizeof(float) * M * N), *F = malloc(sizeof(float) * M * N);
    ht_rng r;
    ht_rng_seed(&r, 3);
    for (int i = 0; i < M * K; i++) A[i] = (float)(2 * ht_rng_double(&r) - 1);
    for (int i = 0; i < K * N; i++) B[i] = (float)(2 * ht_rng_double(&r) - 1);
    gemm_split(GEMM_BF16, CblasNoTrans, CblasNoTrans, M, N, K, A, K, B, N, 0.0f, C1, N, 1,
               SPLIT_LONGER, 16);
    gemm_split(GEMM_BF16, CblasNoTrans, CblasNoTrans, M, N, K, A, K, B, N, 0.0f, C2, N, 2,
               SPLIT_LONGER, 16);
    gemm_split(GEMM_BF16, CblasNoTrans, CblasNoTrans, M, N, K, A, K, B, N, 0.0f, C3, N, 2,
               SPLIT_M, 16);
    assert_memory_equal(C1, C2, sizeof(float) * M * N);
    assert_memory_equal(C1, C3, sizeof(float) * M * N);
    gemm_split(GEMM_F32, CblasNoTrans, CblasNoTrans, M, N, K, A, K, B, N, 0.0f, F, N, 1,
               SPLIT_LONGER, 16);
    double worst = 0;
    for (int i = 0; i < M * N; i++) {
        const double d = fabs((double)C1[i] - F[i]);
        if (d > worst) worst = d;
    }
    // Float's own rounding of these sums stays below K * U * K (|a b| <= 1); bfloat16's factors
    // move them by about 2^-9 * sqrt(K).
    assert_true(worst > 2.0 * K * U * K);
    free(A);
    free(B);
    free(C1);
    free(C2);
    free(C3);
    free(F);
}

// --precision bf16 takes bfloat16 only where the layer is wide enough, by its shape: a 16-filter
// convolution on one channel keeps every direction in float32; 16 -> 32 channels 3x3 takes it in
// all three; a 1x1 32 -> 16 only in its input gradient (C*K*K = 32 columns; 16 outputs and a 16-row
// weight gradient stay float32). Under float32 none does.
static void test_width_rule(void **state) {
    (void)state;
    assert_int_equal(gemm_prec_for(GEMM_BF16, 24, 24), GEMM_BF16);
    assert_int_equal(gemm_prec_for(GEMM_BF16, 23, 1000), GEMM_F32);
    assert_int_equal(gemm_prec_for(GEMM_F32, 1000, 1000), GEMM_F32);
    static const char cfg[] = "[net]\ninput = 1x8x8\nconv_algo = gemm\n"
                              "[conv]\nfilters = 16\nsize = 3\npad = same\n"
                              "[conv]\nfilters = 32\nsize = 3\npad = same\n"
                              "[conv]\nfilters = 16\nsize = 1\n"
                              "[dense]\nunits = 10\n[softmax]\n";
    char *dir = test_tmpdir("gemm-bf16");
    char *path = test_write_file(dir, "w.cfg", cfg, sizeof cfg - 1);
    model m;
    ht_error e;
    if (model_init_config(&m, path, &e) < 0) fail_msg("%s", e.msg);
    conv_choice c[8];
    assert_true(m.n_layers <= 8);
    static const conv_impl want[2][3][3] = {
        {{CONV_GEMM, CONV_GEMM, CONV_GEMM}, {CONV_GEMM, CONV_GEMM, CONV_GEMM},
         {CONV_GEMM, CONV_GEMM, CONV_GEMM}},
        {{CONV_GEMM, CONV_GEMM, CONV_GEMM}, {CONV_GEMM_BF16, CONV_GEMM_BF16, CONV_GEMM_BF16},
         {CONV_GEMM, CONV_GEMM_BF16, CONV_GEMM}},
    };
    for (int bf = 0; bf < 2; bf++) {
        m.setup.precision = bf ? PRECISION_BF16 : PRECISION_F32;
        assert_int_equal(net_conv_choices(&m, 1, c), 0);
        for (int l = 0, k = 0; l < m.n_layers; l++) {
            if (!net_layer_conv_algo(&m.layers[l])) continue;
            const conv_impl *w = want[bf][k++];
            if (c[l].fwd != w[0] || c[l].din != w[1] || c[l].dw != w[2])
                fail_msg("precision %d, layer %d: fwd %d din %d dw %d, want %d %d %d", bf, l,
                         c[l].fwd, c[l].din, c[l].dw, w[0], w[1], w[2]);
        }
    }
    model_free(&m);
    free(path);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_known_values),
        cmocka_unit_test(test_shapes_native),
        cmocka_unit_test(test_shapes_emulated),
        cmocka_unit_test(test_shapes_small_panels),
        cmocka_unit_test(test_split_and_rounding),
        cmocka_unit_test(test_width_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
