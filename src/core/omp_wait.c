// libgomp's wait policy for hetrain's thread pools (omp_wait.h).
#include "core/omp_wait.h"

#include <stdio.h>
#include <stdlib.h>

#if defined(_OPENMP) && !defined(__clang__)
#define HT_LIBGOMP 1
#else
#define HT_LIBGOMP 0
#endif

int omp_wait_setenv(void) {
    if (!HT_LIBGOMP || getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") ||
        getenv("HETRAIN_OMP_WAIT_SET"))
        return 0;
    if (setenv("OMP_WAIT_POLICY", "active", 1) ||
        setenv("GOMP_SPINCOUNT", OMP_WAIT_SPINCOUNT, 1) ||
        setenv("HETRAIN_OMP_WAIT_SET", "1", 1)) {
        omp_wait_unset();
        return 0;
    }
    return 1;
}

void omp_wait_unset(void) {
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("HETRAIN_OMP_WAIT_SET");
}

void omp_wait_describe(char *buf, size_t cap) {
    if (!HT_LIBGOMP) {
        snprintf(buf, cap, "%s", "none (no libgomp in this build)");
        return;
    }
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (getenv("HETRAIN_OMP_WAIT_SET") && policy && spin)
        snprintf(buf, cap, "libgomp spins %s rounds, 1000 where threads outnumber CPUs (hetrain "
                 "set OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s)", spin, policy, spin);
    else if (policy || spin)
        snprintf(buf, cap, "libgomp's waits as the user set them (%s%s%s%s%s)",
                 policy ? "OMP_WAIT_POLICY=" : "", policy ? policy : "", policy && spin ? " " : "",
                 spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : "");
    else
        snprintf(buf, cap, "%s", "libgomp's defaults (spins 100 rounds where threads outnumber "
                 "CPUs)");
}
