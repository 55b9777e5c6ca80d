// The channels-last convolution's per-sample kernels (conv_nhwc.c), one table per instruction
// set they were compiled for, and the choice among them by what the CPU runs (conv_kernels.c):
// the widest it has, unless HETRAIN_ISA names a narrower one (to compare them, or to rule one
// out). A binary built on one machine runs each CPU's own vector code.
#ifndef HETRAIN_CONV_KERNELS_H
#define HETRAIN_CONV_KERNELS_H

#include "nn/layers.h"

#include <stddef.h>

typedef struct conv_kernels {
    const char *isa; // "avx512", "avx2", "sse2", "generic"
    int vl;          // floats per vector
    void (*forward_one)(float *out, const float *in, const float *pack, const conv_geom *g,
                        int relu, float *scratch);
    void (*backward_one)(float *din, const float *dout, const float *relu_out, const float *in,
                         const float *pack, const conv_geom *g, float *scratch);
} conv_kernels;

// The sets this CPU runs, widest first; returns how many (at least 1), at most max in out.
int conv_kernels_supported(const conv_kernels **out, int max);

// The set the kernels run: chosen once (the widest supported, or HETRAIN_ISA's).
const conv_kernels *conv_kernels_active(void);

// Runs k from now on (one conv_kernels_supported gave): for tests and benchmarks that compare
// the sets in one process; not while kernels run.
void conv_kernels_set(const conv_kernels *k);

// HETRAIN_ISA's problem, when it names no set this binary holds or one this CPU cannot run
// (the widest supported runs instead); NULL when it is unset or good.
const char *conv_kernels_env_error(void);

// One line for `hetrain devices`, the run log and --profile: the set that runs, why, and the
// others built, e.g. "avx2 (the widest this CPU runs; built: avx512 avx2 sse2)".
void conv_kernels_describe(char *buf, size_t n);

#endif
