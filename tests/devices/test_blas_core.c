// OpenBLAS's kernels (src/core/blas_core.c): the core a CPU's features call for, the ranking
// that says OpenBLAS chose below it, and hetrain running itself again with OPENBLAS_CORETYPE
// set when OpenBLAS names the CPU below its features (HETRAIN_BLAS_CORENAME stands in for the
// name OpenBLAS gives a CPU it does not know: this machine's it knows), a user's own setting
// left standing, and `hetrain devices` saying which kernels run. And libgomp's waits
// (src/core/omp_wait.c), set the same way before libgomp reads them: `hetrain devices`, run
// again with them, says so; a user's own setting stands.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/blas_core.h"
#include "nn/gemm_bf16.h"
#include "tests/lib/testutil.h"

static void test_core_for(void **state) {
    (void)state;
    assert_string_equal(blas_core_for(1, 1, 1), "SkylakeX");
    assert_string_equal(blas_core_for(0, 1, 1), "Haswell");
    assert_string_equal(blas_core_for(0, 0, 1), "Sandybridge");
    assert_null(blas_core_for(0, 0, 0));
}

static void test_below(void **state) {
    (void)state;
    // What OpenBLAS 0.3.21 names a Sapphire Rapids Xeon, and other SSE-only cores.
    assert_true(blas_core_below("Prescott", "Haswell"));
    assert_true(blas_core_below("Nehalem", "SkylakeX"));
    assert_true(blas_core_below("Haswell", "SkylakeX"));
    assert_true(blas_core_below("Sandybridge", "Haswell"));
    // OpenBLAS's own names for AVX2 and AVX-512 CPUs are not below their class.
    assert_false(blas_core_below("Zen", "Haswell"));
    assert_false(blas_core_below("Haswell", "Haswell"));
    assert_false(blas_core_below("Cooperlake", "SkylakeX"));
    assert_false(blas_core_below("SkylakeX", "Haswell"));
    assert_false(blas_core_below("Prescott", NULL)); // a CPU without AVX: OpenBLAS's choice
}

// Through the binary: the kernels the CPU's features call for replace a generic choice.
static void test_rerun(void **state) {
    (void)state;
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("HETRAIN_BLAS_NAMED");
    char *out = test_expect_cli("devices", 0, "cpu's GEMMs: OpenBLAS ");
    free(out);
    __builtin_cpu_init();
    const int avx = __builtin_cpu_supports("avx");
    setenv("HETRAIN_BLAS_CORENAME", "Prescott", 1);
    out = test_expect_cli("devices", 0, avx ? "(OpenBLAS named this CPU Prescott; hetrain set "
                                              "OPENBLAS_CORETYPE="
                                            : "cpu's GEMMs: ");
    if (avx) assert_null(strstr(out, "Prescott kernels"));
    free(out);
    // A user's own OPENBLAS_CORETYPE stands.
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    free(test_expect_cli("devices", 0, "Prescott kernels (OPENBLAS_CORETYPE=Prescott set by the "
                                       "user)"));
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("HETRAIN_BLAS_CORENAME");
}

#if defined(_OPENMP) && !defined(__clang__)
#define LIBGOMP 1
#else
#define LIBGOMP 0
#endif

static void test_omp_wait(void **state) {
    (void)state;
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("HETRAIN_OMP_WAIT_SET");
    // What the run that printed it read: it ran again with them set (the mark is set only there).
    free(test_expect_cli("devices", 0, LIBGOMP ? "threads between regions: libgomp spins 300000 "
                                                 "rounds, 1000 where threads outnumber CPUs "
                                                 "(hetrain set OMP_WAIT_POLICY=active "
                                                 "GOMP_SPINCOUNT=300000)"
                                               : "threads between regions: none"));
    setenv("OMP_WAIT_POLICY", "passive", 1);
    free(test_expect_cli("devices", 0, LIBGOMP ? "libgomp's waits as the user set them "
                                                 "(OMP_WAIT_POLICY=passive)"
                                               : "threads between regions: none"));
    unsetenv("OMP_WAIT_POLICY");
    setenv("GOMP_SPINCOUNT", "1000", 1);
    free(test_expect_cli("devices", 0, LIBGOMP ? "(GOMP_SPINCOUNT=1000)"
                                               : "threads between regions: none"));
    unsetenv("GOMP_SPINCOUNT");
}

// `hetrain devices` says how --precision bf16 would multiply on this CPU.
static void test_bf16_line(void **state) {
    (void)state;
    free(test_expect_cli("devices", 0, gemm_bf16_native()
                                           ? "cpu's bfloat16 GEMMs (--precision bf16): AVX512_BF16"
                                           : "cpu's bfloat16 GEMMs (--precision bf16): emulated"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_for),
        cmocka_unit_test(test_bf16_line),
        cmocka_unit_test(test_below),
        cmocka_unit_test(test_rerun),
        cmocka_unit_test(test_omp_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
