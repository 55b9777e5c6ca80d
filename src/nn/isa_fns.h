// The functions each instruction set's copy of the vector code exports (CMake's HT_ISA_SOURCES,
// compiled once per set, names suffixed by isa.h's ISA_NAME), gathered into that set's
// isa_kernels table by isa_table.c. Callers go through isa_kernels_active() (isa_kernels.h).
#ifndef HETRAIN_ISA_FNS_H
#define HETRAIN_ISA_FNS_H

#include "nn/isa.h"
#include "nn/layers.h"

#include <stddef.h>

#define conv_nhwc_forward_one ISA_NAME(conv_nhwc_forward_one)
#define conv_nhwc_backward_one ISA_NAME(conv_nhwc_backward_one)
#define vec_act_forward ISA_NAME(vec_act_forward)
#define vec_act_backward ISA_NAME(vec_act_backward)
#define dwconv_vec_forward_rows ISA_NAME(dwconv_vec_forward_rows)
#define dwconv_vec_backward_sample ISA_NAME(dwconv_vec_backward_sample)
#define pool_vec_max_backward_one ISA_NAME(pool_vec_max_backward_one)
#define bn_vec_train_forward ISA_NAME(bn_vec_train_forward)
#define bn_vec_infer_forward ISA_NAME(bn_vec_infer_forward)
#define bn_vec_frozen_backward ISA_NAME(bn_vec_frozen_backward)
#define bn_vec_train_backward ISA_NAME(bn_vec_train_backward)
#define bn_vec_sample_parts ISA_NAME(bn_vec_sample_parts)
#define bn_vec_dx_rows ISA_NAME(bn_vec_dx_rows)

// conv_nhwc.c: layers.h's conv2d_nhwc_forward_one / conv2d_nhwc_backward_one.
void conv_nhwc_forward_one(float *out, const float *in, const float *pack, const conv_geom *g,
                           int relu, float *scratch);
void conv_nhwc_backward_one(float *din, const float *dout, const float *relu_out, const float *in,
                            const float *pack, const conv_geom *g, float *scratch);

// act_vec.c: the act family's functions it vectorises (sigmoid, swish, leaky relu, relu6, hard
// sigmoid, hard swish; a the layer's parameter) over `rows` rows of Cs floats, C of them used
// (the pad lanes written zero); 0 for another function (nothing done).
int vec_act_forward(act_fn kind, float a, float *out, const float *in, size_t rows, int C,
                    int Cs);
int vec_act_backward(act_fn kind, float a, float *din, const float *dout, const float *in,
                     size_t rows, int C, int Cs);

// dwconv_vec.c: a depthwise convolution's output rows [row0, row1) of the batch (row = b * OH +
// oy) from the weights laid out wt[tap][oc]; and one sample b's backward: its input gradient
// (din_b, when not NULL) and the sums of its weight and bias gradients added into gw
// [tap][oc] and gb. xb: OC floats of work space where the depth multiplier is above 1.
void dwconv_vec_forward_rows(float *out, const float *in, const float *wt, const float *bias,
                             const dwconv_geom *g, int row0, int row1, float *xb);
void dwconv_vec_backward_sample(float *din_b, float *gw, float *gb, const float *dout,
                                const float *in, const float *wt, int b, const dwconv_geom *g,
                                float *xb);

// pool_vec.c: layers.h's maxpool_nhwc_backward_one.
void pool_vec_max_backward_one(float *din, const float *dout, const float *in, const pool_geom *g);

// bn_vec.c: batchnorm.h's bn_train_forward (with bn_train_forward_parts's parts),
// bn_infer_forward, bn_frozen_backward, bn_train_backward (with bn_train_backward_coef's coef),
// bn_sample_parts and bn_dx_rows.
void bn_vec_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                          float *stats, int B, int P, int C, int cs, int G, float eps, int relu,
                          const double *parts, int nthreads);
void bn_vec_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                          const float *mean, const float *var, size_t rows, int C, int cs,
                          float eps, int relu, int nthreads);
void bn_vec_frozen_backward(float *din, const float *dout, const float *gamma, const float *var,
                            const float *relu_out, size_t rows, int C, int cs, float eps,
                            int nthreads);
int bn_vec_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                          const float *dout, const float *in, const float *gamma,
                          const float *stats, const float *relu_out, int B, int P, int C, int cs,
                          int G, float *coef, int nthreads);
void bn_vec_sample_parts(double *part, const float *y, size_t rows, int C, int cs);
void bn_vec_dx_rows(float *din, const float *dout, const float *relu_out, const float *in,
                    const float *st, const float *cf, size_t rows, int C, int cs);

#endif
