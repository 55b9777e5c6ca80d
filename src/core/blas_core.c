// OpenBLAS's kernels: naming them, and correcting a choice below what the CPU runs
// (blas_core.h).
#include "core/blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *blas_core_for(int avx512, int avx2_fma, int avx) {
    return avx512 ? "SkylakeX" : avx2_fma ? "Haswell" : avx ? "Sandybridge" : NULL;
}

// OpenBLAS's x86 cores by the widest vectors their kernels use: 3 AVX-512, 2 AVX2, 1 AVX,
// 0 anything else (SSE: Prescott, Core2, Nehalem, Opteron, ...).
static int rank(const char *core) {
    static const char *const r3[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const r2[] = {"Haswell", "Zen", "Excavator", NULL};
    static const char *const r1[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller",
                                     NULL};
    const char *const *lists[3] = {r1, r2, r3};
    for (int k = 2; k >= 0; k--)
        for (const char *const *p = lists[k]; *p; p++)
            if (!strcasecmp(core, *p)) return k + 1;
    return 0;
}

int blas_core_below(const char *named, const char *want) {
    return want && named && rank(named) < rank(want);
}

static const char *cpu_best(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return blas_core_for(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512dq"),
                         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                         __builtin_cpu_supports("avx"));
#else
    return NULL;
#endif
}

int blas_core_setenv(void) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("HETRAIN_BLAS_NAMED")) return 0;
    const char *fake = getenv("HETRAIN_BLAS_CORENAME");
    const char *named = fake && *fake ? fake : openblas_get_corename();
    const char *want = cpu_best();
    if (!blas_core_below(named, want)) return 0;
    char was[64];
    snprintf(was, sizeof was, "%s", named);
    if (setenv("OPENBLAS_CORETYPE", want, 1) || setenv("HETRAIN_BLAS_NAMED", was, 1)) {
        blas_core_unset();
        return 0;
    }
    return 1;
}

// Not run again: this process keeps OpenBLAS's choice, and says so where it names it.
void blas_core_unset(void) {
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("HETRAIN_BLAS_NAMED");
}

void blas_core_describe(char *buf, size_t cap) {
    const char *named = getenv("HETRAIN_BLAS_NAMED"), *set = getenv("OPENBLAS_CORETYPE");
    const char *core = openblas_get_corename();
    char ver[32] = "";
    sscanf(openblas_get_config(), "OpenBLAS %31s", ver);
    int k = snprintf(buf, cap, "OpenBLAS %s, %s kernels", ver, core);
    if (k < 0 || (size_t)k >= cap) return;
    if (named && set)
        snprintf(buf + k, cap - (size_t)k, " (OpenBLAS named this CPU %s; hetrain set "
                 "OPENBLAS_CORETYPE=%s)", named, set);
    else if (set)
        snprintf(buf + k, cap - (size_t)k, " (OPENBLAS_CORETYPE=%s set by the user)", set);
    else if (blas_core_below(core, cpu_best()))
        snprintf(buf + k, cap - (size_t)k, " (below what this CPU runs: %s; set "
                 "OPENBLAS_CORETYPE=%s)", cpu_best(), cpu_best());
}
