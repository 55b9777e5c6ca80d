// Which of OpenBLAS's kernels run. Debian's OpenBLAS picks its kernels at load time by the CPU's
// model numbers (DYNAMIC_ARCH); a CPU newer than the library (a Sapphire Rapids Xeon under
// OpenBLAS 0.3.21, which a VM reports as "Intel(R) Xeon(R) Processor") is then named
// "Prescott" and runs SSE3 kernels a quarter as fast as its AVX2 ones. OpenBLAS reads
// OPENBLAS_CORETYPE before main, so hetrain corrects it by running itself again with it set to
// the kernels the CPU's features allow (blas_core_setenv); a user's own OPENBLAS_CORETYPE stands.
#ifndef HETRAIN_BLAS_CORE_H
#define HETRAIN_BLAS_CORE_H

#include <stddef.h>

// The OpenBLAS core whose kernels a CPU of these features runs best, among those that any x86
// CPU with them can run: "SkylakeX" (AVX-512 F, BW, VL, DQ), "Haswell" (AVX2 and FMA),
// "Sandybridge" (AVX), or NULL (none of them: nothing better than OpenBLAS's own choice).
const char *blas_core_for(int avx512, int avx2_fma, int avx);

// Whether the core OpenBLAS named (openblas_get_corename()) runs narrower vectors than `want`
// (blas_core_for's): a core OpenBLAS does not list as AVX-512, AVX2 or AVX ranks below all.
int blas_core_below(const char *named, const char *want);

// Called first in main: when OpenBLAS named a core below what this CPU runs and the user set no
// OPENBLAS_CORETYPE, sets it (and HETRAIN_BLAS_NAMED to what OpenBLAS had named, which also
// keeps this from happening twice) and returns 1: main runs /proc/self/exe again for OpenBLAS to
// read it. 0: nothing set. HETRAIN_BLAS_CORENAME, when set, stands in for OpenBLAS's name (for
// tests).
int blas_core_setenv(void);

// Takes blas_core_setenv's settings back (the exec that would have applied them failed).
void blas_core_unset(void);

// "OpenBLAS 0.3.21, Haswell kernels" and why: "(OpenBLAS named this CPU Prescott; hetrain set
// OPENBLAS_CORETYPE=Haswell)" or "(OPENBLAS_CORETYPE=... set by the user)".
void blas_core_describe(char *buf, size_t cap);

#endif
