// Batch normalisation: the ghost-batch group size, the moving averages' update on the host, and
// the CPU math (batchnorm.c), channels-last with channel stride cs over P positions a sample.
#ifndef HETRAIN_BATCHNORM_H
#define HETRAIN_BATCHNORM_H

#include <stddef.h>

#include "nn/model.h"

#define BN_DEFAULT_MOMENTUM 0.99 // Keras's (PyTorch's momentum 0.1 is 1 - this)
#define BN_DEFAULT_EPS 1e-3      // Keras's (PyTorch's default is 1e-5)

// The samples of one group of training statistics (train_setup.bn_group or its default), or
// 0 for a model without batchnorm.
int model_bn_group(const model *m);

// One update of every batchnorm's moving averages from sums, a step's reduced gradient-sum
// buffer (n_params): in each state's place the sums of its groups' means and variances and the
// count of groups. moving = momentum * moving + (1 - momentum) * sum / count; the count of
// updates (num_batches_tracked) goes up by one. A layer with no groups is left alone.
void model_bn_update(const model *m, float *params, const float *sums);

// Training: each group of G samples (the last one may be smaller) of B normalised with its
// mean and biased variance; stats gets each group's (mean, variance, 1/sqrt(variance + eps)),
// 3 * C floats a group. gamma, beta NULL: 1, 0. relu: the output goes through a ReLU too (the
// relu layer after it, fused).
void bn_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                      float *stats, int B, int P, int C, int cs, int G, float eps, int relu,
                      int nthreads);
// Inference over rows = B * P positions with the moving mean and variance.
void bn_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                      const float *mean, const float *var, size_t rows, int C, int cs, float eps,
                      int relu, int nthreads);
// The backward of a frozen batchnorm (trainable false: in training too it normalises with its
// moving statistics, as Keras runs it in inference mode): din = dout * gamma / sqrt(var + eps)
// over rows = B * P positions, through the fused ReLU's mask when relu_out is not NULL.
void bn_frozen_backward(float *din, const float *dout, const float *gamma, const float *var,
                        const float *relu_out, size_t rows, int C, int cs, float eps,
                        int nthreads);
// Training's backward: din (unless NULL) overwritten; dgamma, dbeta (unless NULL) added to;
// state_sums (2 * C + 1) gets each group's mean and variance added, and 1 a group. relu_out:
// the fused ReLU's output (dout passes where it is > 0), or NULL. -1 when out of memory.
int bn_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                      const float *dout, const float *in, const float *gamma, const float *stats,
                      const float *relu_out, int B, int P, int C, int cs, int G, int nthreads);

// ---- a batchnorm fused into the convolution before it (the schedule's fuse_bn) ----
// In training the convolution hands over each sample's sums as it writes the sample, and, in
// its backward, computes the batchnorm's input gradient a sample at a time as it reads it: the
// batchnorm's passes over the rows for its statistics and for din are not made.

// One sample's sums (3 * C doubles: each channel's first value k, the sums of x - k and of its
// square over the rows), taken by bn_train_forward_parts.
void bn_sample_parts(double *part, const float *y, size_t rows, int C, int cs);
// bn_train_forward with each group's statistics from the samples' parts (B * 3 * C doubles,
// sample by sample) instead of a pass over in: the same statistics up to rounding, the same
// bits for any split of the batch into groups of whole samples.
void bn_train_forward_parts(float *out, const float *in, const float *gamma, const float *beta,
                            float *stats, int B, int P, int C, int cs, int G, float eps,
                            int relu, const double *parts, int nthreads);
// bn_train_backward without din: each group's coefficients of it into coef (3 * C floats a
// group), which bn_dx_sample applies. -1 when out of memory.
int bn_train_backward_coef(float *coef, float *dgamma, float *dbeta, float *state_sums,
                           const float *dout, const float *in, const float *gamma,
                           const float *stats, const float *relu_out, int B, int P, int C, int cs,
                           int G, int nthreads);

// What the convolution needs of its batchnorm's backward to make the batchnorm's din.
typedef struct bn_fuse {
    const float *dout;     // the batchnorm's output gradient
    const float *relu_out; // its fused relu's output, or NULL
    const float *stats;    // its groups' statistics (bn_train_forward's)
    const float *coef;     // and coefficients (bn_train_backward_coef's)
    int G, C;              // samples a group, channels
} bn_fuse;
// Sample s's input gradient of the batchnorm (P rows of cs floats; x: the batchnorm's input,
// dout and relu_out from sample 0) into dx, the bits bn_train_backward writes there.
void bn_dx_sample(float *dx, const bn_fuse *f, const float *x, int s, size_t P, int cs);

#endif
