// How libgomp's idle threads wait between parallel regions. libgomp reads OMP_WAIT_POLICY and
// GOMP_SPINCOUNT before main and spins for GOMP_SPINCOUNT rounds (300,000 by default, about a
// millisecond) before it sleeps in the kernel, except while it manages more threads than the
// process has CPUs: then it spins only 100 rounds (1,000 under OMP_WAIT_POLICY=active). hetrain
// is always there: the host thread (sums, update) and each CPU device's worker thread have a
// thread pool of their own. 100 rounds are shorter than the gap between two layers' parallel
// regions, so every region began by waking its threads from futex sleep: MobileNetV2's step
// spent 14% in the scheduler (~900 samples/s against ~1,450 with 1,000 rounds, on 2 cores of a
// Zen 4). hetrain therefore runs itself with OMP_WAIT_POLICY=active GOMP_SPINCOUNT=300000
// (omp_wait_setenv): the throttled spin is 1,000 rounds and the other stays libgomp's default;
// a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT stands. Only with GCC's libgomp: LLVM's libomp
// reads OMP_WAIT_POLICY=active as "never sleep".
#ifndef HETRAIN_OMP_WAIT_H
#define HETRAIN_OMP_WAIT_H

#include <stddef.h>

#define OMP_WAIT_SPINCOUNT "300000"

// When the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (and this build runs libgomp):
// sets both, and HETRAIN_OMP_WAIT_SET (which keeps this from happening twice), and returns 1:
// the process must run itself again for libgomp to read them. 0: nothing set.
int omp_wait_setenv(void);

// Takes omp_wait_setenv's settings back (the exec that would have applied them failed).
void omp_wait_unset(void);

// "spin 300000 rounds, 1000 where threads outnumber CPUs (hetrain set OMP_WAIT_POLICY=active
// GOMP_SPINCOUNT=300000)", "... set by the user", or libgomp's defaults; "none" without OpenMP.
void omp_wait_describe(char *buf, size_t cap);

#endif
