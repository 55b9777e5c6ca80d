// The OpenCL ops: each enqueues kernels from kernels/*.cl (and CLBlast GEMMs) on the queue of
// an ocl_ops. Tensors are NCHW, as in the reference (tests/ref.h) they are checked against
// (tests/test_parity.c): backward ops *accumulate* into
// weight/bias gradients and *overwrite* input gradients; parameters and gradients live in one
// flat buffer each, addressed by float offsets (w_off, b_off), as on the host. Calls are
// asynchronous (in-order queue); errors from enqueueing are reported at once, naming the call,
// the OpenCL error by name and the device (o->label).
#ifndef HETRAIN_OCL_OPS_H
#define HETRAIN_OCL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ocl_util.h"

typedef struct ocl_ops {
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    char label[300];  // "cl:0.0 (device name)" for messages
    // Kernels, created once by ocl_ops_init (names as in kernels/*.cl).
    cl_kernel k_fill, k_im2col, k_col2im, k_bias_to_nchw, k_nchw_to_rows, k_row_sum,
        k_maxpool_fwd, k_maxpool_bwd, k_dense_bias, k_col_sum, k_relu_fwd, k_relu_bwd,
        k_dropout, k_softmax_xent_fwd, k_softmax_xent_bwd;
    // CLBlast's scratch for its indirect GEMMs, owned here and grown on demand: left to
    // itself, CLBlast allocates one per call and aborts the process when that allocation
    // fails; owning it makes a lack of memory an ordinary, recoverable error.
    cl_mem gemm_temp;
    size_t gemm_temp_bytes;
    // Event profiling (ocl_ops_profile, on a queue made with CL_QUEUE_PROFILING_ENABLE): every
    // command the ops enqueue, and every one the device enqueues with ocl_ops_event, keeps
    // its event until ocl_ops_drain adds up their times.
    int profiling;
    cl_event *ev;
    unsigned char *ev_kind; // ocl_ev_kind of each
    int n_ev, cap_ev;
} ocl_ops;

typedef enum ocl_ev_kind {
    OCL_EV_KERNEL,   // one of our kernels
    OCL_EV_TRANSFER, // a buffer write, read or copy
    OCL_EV_GEMM,     // the event CLBlast gives back: its last kernel
    OCL_EV_MARK,     // a marker just before a CLBlast call: where the GEMM's time starts
} ocl_ev_kind;

int ocl_ops_init(ocl_ops *o, cl_context ctx, cl_command_queue q, cl_program prog,
                const char *label, ht_error *e);
void ocl_ops_free(ocl_ops *o);
// Releases the GEMM scratch (it is made again, as large as needed, by the next GEMM).
void ocl_ops_release_temp(ocl_ops *o);

// Keeps (on) or stops keeping (off, after draining) the events of enqueued commands.
void ocl_ops_profile(ocl_ops *o, int on);
// Where the command about to be enqueued puts its event (pass it as the call's last
// argument), kept as `kind`; NULL when not profiling (or out of memory: then that command
// goes uncounted).
cl_event *ocl_ops_event(ocl_ops *o, ocl_ev_kind kind);
// Once the queue is finished: adds the seconds (START to END) of every kept event to
// sums[0] (kernels), sums[1] (transfers) and sums[2] (GEMMs: from the END of the marker
// before each CLBlast call, else the START of its event, to the END of its event, so with the
// padding kernels CLBlast runs first), and releases the events. sums NULL: only releases them.
void ocl_ops_drain(ocl_ops *o, double *sums);

// buf[0..n) = value.
int ocl_fill(ocl_ops *o, cl_mem buf, float value, size_t n, ht_error *e);

// Floats of scratch the conv ops need for B samples (im2col matrix plus a (OC, B*OH*OW)
// staging matrix for the GEMM output / the reshaped output gradient).
size_t ocl_conv2d_scratch_floats(int B, int C, int K, int OC, int OH, int OW);

// in (B,C,H,W), weight params[w_off..] (OC,C,K,K), bias params[b_off..] (OC), out (B,OC,OH,OW).
int ocl_conv2d_forward(ocl_ops *o, cl_mem out, cl_mem in, cl_mem params, size_t w_off,
                        size_t b_off, int B, int C, int H, int W, int OC, int K, int stride,
                        int pad, int OH, int OW, cl_mem scratch, ht_error *e);

// grads[w_off..] += dW, grads[b_off..] += db; din (may be NULL) = input gradient.
int ocl_conv2d_backward(ocl_ops *o, cl_mem din, cl_mem grads, size_t w_off, size_t b_off,
                         cl_mem dout, cl_mem in, cl_mem params, int B, int C, int H, int W,
                         int OC, int K, int stride, int pad, int OH, int OW, cl_mem scratch,
                         ht_error *e);

// argmax (int32, B*C*OH*OW): flat index h*W+w within the channel plane; first max wins.
int ocl_maxpool_forward(ocl_ops *o, cl_mem out, cl_mem argmax, cl_mem in, int B, int C, int H,
                         int W, int K, int stride, int OH, int OW, ht_error *e);
int ocl_maxpool_backward(ocl_ops *o, cl_mem din, cl_mem dout, cl_mem argmax, int B, int C,
                          int H, int W, int K, int stride, int OH, int OW, ht_error *e);

// in (B,IN), weight (OUT,IN), out (B,OUT).
int ocl_dense_forward(ocl_ops *o, cl_mem out, cl_mem in, cl_mem params, size_t w_off,
                       size_t b_off, int B, int IN, int OUT, ht_error *e);
int ocl_dense_backward(ocl_ops *o, cl_mem din, cl_mem grads, size_t w_off, size_t b_off,
                        cl_mem dout, cl_mem in, cl_mem params, int B, int IN, int OUT,
                        ht_error *e);

// In place allowed (out == in, din == dout).
int ocl_relu_forward(ocl_ops *o, cl_mem out, cl_mem in, size_t n, ht_error *e);
int ocl_relu_backward(ocl_ops *o, cl_mem din, cl_mem dout, cl_mem out, size_t n, ht_error *e);

// Forward and backward are the same mask-and-scale: element e of sample i kept when
// ht_rng_uniform(key, ids[i], e) >= rate (src/core/rng.h, bit for bit). ids: uint32 (B).
int ocl_dropout(ocl_ops *o, cl_mem out, cl_mem in, int B, size_t N, float rate, uint64_t key,
                 cl_mem ids, ht_error *e);

// labels: uchar (B) or NULL (then loss is not written).
int ocl_softmax_xent_forward(ocl_ops *o, cl_mem probs, cl_mem loss, cl_mem logits,
                              cl_mem labels, int B, int NC, ht_error *e);
int ocl_softmax_xent_backward(ocl_ops *o, cl_mem dlogits, cl_mem probs, cl_mem labels, int B,
                               int NC, ht_error *e);

#endif
