// OpenMP when the build has it; otherwise the few runtime calls hetrain makes, for one thread.
// The ThreadSanitizer build turns OpenMP off (libgomp is not instrumented, so TSan cannot see
// its synchronisation) and keeps every other thread: the engine's workers and the devices'.
#ifndef HETRAIN_HT_OMP_H
#define HETRAIN_HT_OMP_H

#ifdef _OPENMP
#include <omp.h>
#else
#include <unistd.h>
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
static inline void omp_set_num_threads(int n) { (void)n; }
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_num_procs(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
#endif

// A loop free of carried dependences, to be compiled as vector code without an aliasing check
// (omp simd); nothing where the build has no OpenMP.
#ifdef _OPENMP
#define HT_SIMD _Pragma("omp simd")
#else
#define HT_SIMD
#endif

#endif
