// CPU layer math: forward/backward pairs, NCHW float32. Backward functions *accumulate* (+=)
// into weight and bias gradients, so a device can sum per-sample gradients over micro-batches;
// they *overwrite* the input gradient. Gradients are sums over the batch, never means.
// Functions that parallelise use OpenMP with at most `nthreads` threads and call BLAS from
// inside their parallel regions (OpenBLAS's OpenMP build then runs each call single-threaded).
#ifndef HETRAIN_LAYERS_H
#define HETRAIN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

// Output size of a convolution or pooling window along one axis.
static inline int conv_out_dim(int in, int k, int stride, int pad) {
    return (in + 2 * pad - k) / stride + 1;
}

// Floats of scratch memory conv2d_forward/backward need for `nthreads` threads.
size_t conv2d_ws_floats(int C, int K, int OC, int OH, int OW, int nthreads);

// in is (B,C,H,W), w is (OC,C,K,K), b is (OC), out is (B,OC,OH,OW). ws as sized above.
void conv2d_forward(float *out, const float *in, const float *w, const float *b, int B, int C,
                    int H, int W, int OC, int K, int stride, int pad, int OH, int OW, float *ws,
                    int nthreads);

// dout is (B,OC,OH,OW); dw (OC,C,K,K) and db (OC) are accumulated; din (B,C,H,W) is
// overwritten, or skipped when NULL (first layer).
void conv2d_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int B, int C, int H, int W, int OC, int K, int stride,
                     int pad, int OH, int OW, float *ws, int nthreads);

// in is (B,C,H,W), out is (B,C,OH,OW); argmax (B,C,OH,OW) records the flat index h*W+w of the
// winning input within its channel plane (first maximum wins on ties).
void maxpool_forward(float *out, int32_t *argmax, const float *in, int B, int C, int H, int W,
                     int K, int stride, int OH, int OW, int nthreads);

// din (B,C,H,W) is overwritten: zero except at argmax positions, which receive dout.
void maxpool_backward(float *din, const float *dout, const int32_t *argmax, int B, int C, int H,
                      int W, int OH, int OW, int nthreads);

// in is (B,IN), w is (OUT,IN) (PyTorch layout), b is (OUT), out is (B,OUT).
void dense_forward(float *out, const float *in, const float *w, const float *b, int B, int IN,
                   int OUT, int nthreads);

// dw (OUT,IN) and db (OUT) accumulated; din (B,IN) overwritten unless NULL.
void dense_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                    const float *w, int B, int IN, int OUT, int nthreads);

// n elements; in-place allowed (out == in).
void relu_forward(float *out, const float *in, size_t n, int nthreads);
// din = dout where out > 0, else 0; in-place allowed (din == dout).
void relu_backward(float *din, const float *dout, const float *out, size_t n, int nthreads);

// Inverted dropout over B samples of N elements each: element e of sample i is kept when
// ht_rng_uniform(key, ids[i], e) >= rate, and kept values are scaled by 1/(1-rate).
// key = ht_rng_key(seed, epoch, layer index). In-place allowed.
void dropout_forward(float *out, const float *in, int B, size_t N, float rate, uint64_t key,
                     const uint32_t *ids, int nthreads);
// Applies the same mask and scale to the gradient; in-place allowed.
void dropout_backward(float *din, const float *dout, int B, size_t N, float rate, uint64_t key,
                      const uint32_t *ids, int nthreads);

// logits (B,NC) -> probs (B,NC) by a numerically stable softmax; when labels is not NULL,
// loss[i] = -log(probs[i][labels[i]]) computed as logsumexp - logit (stable for large logits).
void softmax_xent_forward(float *probs, float *loss, const float *logits, const uint8_t *labels,
                          int B, int NC);
// dlogits = probs - onehot(labels): the gradient of the *summed* loss.
void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B,
                           int NC);

#endif
