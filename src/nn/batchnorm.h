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

#endif
