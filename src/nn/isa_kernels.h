// hetrain's own vector code, one table per instruction set it was compiled for (CMake's
// HT_ISA_SOURCES, isa_fns.h: the per-sample convolution kernels, the vectorised activations, the
// depthwise convolution's loops), and the choice among them by what the CPU runs
// (isa_kernels.c): the widest it has, unless HETRAIN_ISA names a narrower one (to compare them,
// or to rule one out). A binary built on one machine runs each CPU's own vector code.
#ifndef HETRAIN_ISA_KERNELS_H
#define HETRAIN_ISA_KERNELS_H

#include "nn/layers.h"

#include <stddef.h>

// isa_fns.h says what each does.
typedef struct isa_kernels {
    const char *isa; // "avx512", "avx2", "sse2", "generic"
    int vl;          // floats per vector
    void (*conv_forward_one)(float *out, const float *in, const float *pack, const conv_geom *g,
                             int relu, float *scratch);
    void (*conv_backward_one)(float *din, const float *dout, const float *relu_out,
                              const float *in, const float *pack, const conv_geom *g,
                              float *scratch);
    int (*act_forward)(act_fn kind, float a, float *out, const float *in, size_t rows, int C,
                       int Cs);
    int (*act_backward)(act_fn kind, float a, float *din, const float *dout, const float *in,
                        size_t rows, int C, int Cs);
    void (*dw_forward_rows)(float *out, const float *in, const float *wt, const float *bias,
                            const dwconv_geom *g, int row0, int row1, float *xb);
    void (*dw_backward_sample)(float *din_b, float *gw, float *gb, const float *dout,
                               const float *in, const float *wt, int b, const dwconv_geom *g,
                               float *xb);
    void (*maxpool_backward_one)(float *din, const float *dout, const float *in,
                                 const pool_geom *g);
    void (*bn_train_forward)(float *out, const float *in, const float *gamma, const float *beta,
                             float *stats, int B, int P, int C, int cs, int G, float eps, int relu,
                             const double *parts, int nthreads);
    void (*bn_infer_forward)(float *out, const float *in, const float *gamma, const float *beta,
                             const float *mean, const float *var, size_t rows, int C, int cs,
                             float eps, int relu, int nthreads);
    void (*bn_frozen_backward)(float *din, const float *dout, const float *gamma,
                               const float *var, const float *relu_out, size_t rows, int C,
                               int cs, float eps, int nthreads);
    int (*bn_train_backward)(float *din, float *dgamma, float *dbeta, float *state_sums,
                             const float *dout, const float *in, const float *gamma,
                             const float *stats, const float *relu_out, int B, int P, int C,
                             int cs, int G, float *coef, int nthreads);
    void (*bn_sample_parts)(double *part, const float *y, size_t rows, int C, int cs);
    void (*bn_dx_rows)(float *din, const float *dout, const float *relu_out, const float *in,
                       const float *st, const float *cf, size_t rows, int C, int cs);
} isa_kernels;

// The sets this CPU runs, widest first; returns how many (at least 1), at most max in out.
int isa_kernels_supported(const isa_kernels **out, int max);

// The set the kernels run: chosen once (the widest supported, or HETRAIN_ISA's).
const isa_kernels *isa_kernels_active(void);

// Runs k from now on (one isa_kernels_supported gave): for tests and benchmarks that compare
// the sets in one process; not while kernels run.
void isa_kernels_set(const isa_kernels *k);

// HETRAIN_ISA's problem, when it names no set this binary holds or one this CPU cannot run
// (the widest supported runs instead); NULL when it is unset or good.
const char *isa_kernels_env_error(void);

// One line for `hetrain devices`, the run log and --profile: the set that runs, why, and the
// others built, e.g. "avx2 (the widest this CPU runs; built: avx512 avx2 sse2)".
void isa_kernels_describe(char *buf, size_t n);

#endif
