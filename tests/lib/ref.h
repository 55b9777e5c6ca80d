// The reference the CPU path (net.c, layers.h) and the OpenCL kernels are checked against:
// convolution and max pooling in NCHW (im2col + SGEMM; pooling with argmax), NCHW <-> NHWC by
// plain loops, the act family's activations in double, and one walker of a model's layer list
// through them (a row per layer kind, as every backend has). Test code only: nothing in the
// library runs NCHW convolutions. Dense, relu, dropout and softmax have one layout and one
// implementation (layers.h, checked in test_layers_flat against finite differences and direct
// loops); the walker calls those as they are.
// Conventions as layers.h's: backward accumulates (+=) into weight and bias gradients and
// overwrites the input gradient; gradients are sums over the batch.
#ifndef HETRAIN_TEST_REF_H
#define HETRAIN_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

#include "nn/model.h"
#include "nn/net.h"

// Floats of scratch memory ref_conv2d_forward/backward need for `nthreads` threads.
size_t ref_conv2d_ws_floats(int C, int K, int OC, int OH, int OW, int nthreads);

// in is (B,C,H,W), w is (OC,C,K,K), b is (OC) or NULL, out is (B,OC,OH,OW). ws as sized above.
void ref_conv2d_forward(float *out, const float *in, const float *w, const float *b, int B,
                        int C, int H, int W, int OC, int K, int stride, int pad, int OH, int OW,
                        float *ws, int nthreads);

// dout is (B,OC,OH,OW); dw (OC,C,K,K) and db (OC; NULL without a bias) are accumulated; din
// (B,C,H,W) is overwritten, or skipped when NULL (first layer). pad is the before-pad; OH/OW
// may imply a different one after (Keras "same" with stride > 1 or an even K).
void ref_conv2d_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int B, int C, int H, int W, int OC, int K, int stride,
                         int pad, int OH, int OW, float *ws, int nthreads);

// Pooling windows: output (oh, ow) covers inputs (oh*stride - pad + kh, ow*stride - pad + kw),
// kh, kw < K; those outside the plane are padding, which never wins a max and is not counted
// in an average (Keras/TensorFlow "same" padding: pad is the before-pad, OH/OW imply the rest).
// in is (B,C,H,W), out is (B,C,OH,OW); argmax (B,C,OH,OW) records the flat index h*W+w of the
// winning input within its channel plane (first maximum in row-major order wins on ties).
void ref_maxpool_forward(float *out, int32_t *argmax, const float *in, int B, int C, int H,
                         int W, int K, int stride, int pad, int OH, int OW, int nthreads);

// din (B,C,H,W) is overwritten: zero except at argmax positions, which receive (the sum of)
// dout.
void ref_maxpool_backward(float *din, const float *dout, const int32_t *argmax, int B, int C,
                          int H, int W, int OH, int OW, int nthreads);

// Average pooling: out = the sum of the window's inputs in row-major order / their count;
// din (B,C,H,W) is overwritten with, for each input, dout / count of every window holding it.
void ref_avgpool_forward(float *out, const float *in, int B, int C, int H, int W, int K,
                         int stride, int pad, int OH, int OW);
void ref_avgpool_backward(float *din, const float *dout, int B, int C, int H, int W, int K,
                          int stride, int pad, int OH, int OW);

// Global average pooling: in (B,C,H,W) -> out (B,C), each plane's mean; din = dout / (H*W).
void ref_gavgpool_forward(float *out, const float *in, int B, int C, int HW);
void ref_gavgpool_backward(float *din, const float *dout, int B, int C, int HW);

// (B,C,HW) -> (B,HW,Cs), the pad channels c >= C set to `pad`; and back, pad channels dropped.
void ref_to_nhwc(float *dst, const float *src, int B, int C, int Cs, int HW, float pad);
void ref_to_nchw(float *dst, const float *src, int B, int C, int Cs, int HW);

// The act family's activations (layer_kinds.h) in double, rounded to float at the end: out =
// f(in); din = dout * f'(in). The CPU path (act.c) and the OpenCL kernels are checked against
// these; these are checked against finite differences (test_layers_flat).
void ref_act_forward(act_fn f, float alpha, float *out, const float *in, size_t n);
void ref_act_backward(act_fn f, float alpha, float *din, const float *dout, const float *in,
                      size_t n);

// batchnorm in double (batchnorm.h's semantics), NCHW over P positions a sample: training
// normalises each group of G consecutive samples (the last may be smaller) with its own mean
// and biased variance; inference with mean and var. The backward recomputes the statistics,
// overwrites din (unless NULL), adds to dgamma and dbeta (unless NULL), and adds each group's
// mean, variance and 1 to state_sums (2C + 1).
void ref_bn_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                          int B, int C, int P, int G, float eps);
void ref_bn_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                          const float *mean, const float *var, int B, int C, int P, float eps);
void ref_bn_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                           const float *dout, const float *in, const float *gamma, int B, int C,
                           int P, int G, float eps);

// A whole network through the functions above and layers.h's flat ones, walking the schedule's
// nodes (schedule.h; in a chain node l is layer l): NCHW throughout, one buffer per node,
// nothing fused or in place, one thread.
typedef struct ref_net {
    int max_batch, n_layers;
    schedule sched;
    float **act;      // act[l]: node l's output (B, oc, oh, ow)
    float **dinput;   // after ref_backward, dinput[l]: gradient of node l's input (B, c, h, w)
                      // (a merge's input k: from k * c * h * w * max_batch on)
    float **dout;     // dout[l]: gradient of node l's output, its readers' dinput written or
                      // added as the schedule says
    int32_t **argmax; // max-pool layers' winners
    float *loss;      // (max_batch) per-sample loss of the last forward with labels
    float *ws;        // scratch of the largest convolution
} ref_net;

// Allocates for batches of up to max_batch; aborts when out of memory (test code).
void ref_net_init(ref_net *r, const model *m, int max_batch);
void ref_net_free(ref_net *r);

// As net_forward: x (B, in) in NCHW; drop NULL means inference. Returns the probabilities
// (B, n_classes); r->loss holds each sample's loss when y is not NULL.
const float *ref_forward(ref_net *r, const model *m, const float *params, const float *x,
                         const uint8_t *y, int B, const net_dropout *drop);

// As net_backward, after ref_forward with the same arguments: adds the batch's parameter
// gradient to grads (n_params) and leaves every layer's input gradient in r->dinput.
void ref_backward(ref_net *r, const model *m, const float *params, float *grads, const float *x,
                  const uint8_t *y, int B, const net_dropout *drop);

#endif
