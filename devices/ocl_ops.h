// The OpenCL ops: each enqueues kernels from kernels/*.cl (and CLBlast GEMMs) on the queue of
// an ocl_ops. Tensors are NCHW, as in the reference (tests/lib/ref.h) they are checked against
// (tests/devices/test_parity_cl.c): backward ops *accumulate* into
// weight/bias gradients and *overwrite* input gradients; parameters and gradients live in one
// flat buffer each, addressed by float offsets (w_off, b_off), as on the host. Calls are
// asynchronous (in-order queue); errors from enqueueing are reported at once, naming the call,
// the OpenCL error by name and the device (o->label).
#ifndef HETRAIN_OCL_OPS_H
#define HETRAIN_OCL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "devices/ocl_blas.h"
#include "devices/ocl_tune.h"
#include "devices/ocl_util.h"
#include "nn/layers.h"

// Kernels are the program's (kernels/*.cl), found by name; this many at most.
#define OCL_MAX_KERNELS 64
#define OCL_KERNEL_NAME 48

// One line of a profile: a kernel, a GEMM shape or a transfer, with its time and calls.
typedef struct ocl_prof_entry {
    char name[64];            // the kernel's name, "write", or a GEMM's shape ("NT 48x288x156800")
    char op[64];              // a GEMM's op ("conv2d backward: dW += dtmp x col^T")
    int gemm;                 // a GEMM: the fields below describe its first call
    ocl_gemm_shape shape;
    size_t a_off, lda, b_off, ldb, c_off, ldc;
    float beta;
    double s;
    long calls;
} ocl_prof_entry;

#define OCL_PROF_MAX 64

typedef struct ocl_ops {
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    cl_device_id dev;
    char label[300];  // "cl:0.0 (device name)" for messages
    // Every kernel of the program, created once by ocl_ops_init, in order of name, with the
    // largest work-group each takes here and the work-group size each is launched with (0: the
    // driver's choice; see ocl_ops_tune).
    int n_k;
    cl_kernel k[OCL_MAX_KERNELS];
    char kname[OCL_MAX_KERNELS][OCL_KERNEL_NAME];
    size_t kmax[OCL_MAX_KERNELS];
    unsigned local[OCL_MAX_KERNELS];
    size_t row_sum_group; // row_sum's work-group: a power of two the kernel and device take
    // The device's tuning (ocl_tune.h), not owned; NULL: CLBlast's own GEMM configurations.
    const ocl_tuning *tuning;
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
    // Profiling, on with $HETRAIN_OCL_PROFILE (printed to stderr by ocl_ops_free) or for the
    // tuner: every op waits for the device and adds its time to prof[] by name. It serialises
    // the queue, so it is only for finding out where the time goes.
    int prof_on;
    int prof_n;
    ocl_prof_entry prof[OCL_PROF_MAX];
} ocl_ops;

typedef enum ocl_ev_kind {
    OCL_EV_KERNEL,   // one of our kernels
    OCL_EV_TRANSFER, // a buffer write, read or copy
    OCL_EV_GEMM,     // the event CLBlast gives back: its last kernel
    OCL_EV_MARK,     // a marker just before a CLBlast call: where the GEMM's time starts
} ocl_ev_kind;

// Creates every kernel of prog; fails naming the first kernel the ops below launch that prog
// lacks.
int ocl_ops_init(ocl_ops *o, cl_context ctx, cl_command_queue q, cl_program prog,
                const char *label, ht_error *e);
// The index of kernel `name` in o->k, or -1.
int ocl_kernel_index(const ocl_ops *o, const char *name);

// Launching a kernel by name: its arguments in order (OCL_KA(variable); a __local argument is
// {bytes, NULL}), over n work-items (1-D, global size rounded up: kernels bounds-check) or over
// (n0, n1, n2) with n0 rounded up to the work-group (3-D: a kernel finds its place from its ids
// alone). The tuned work-group size of the kernel applies (ocl_ops_tune). For ops of layer
// families that live outside this file (ocl_layers.c).
typedef struct ocl_karg {
    size_t size;
    const void *ptr; // NULL for a __local argument of `size` bytes
} ocl_karg;
#define OCL_KA(v) ((ocl_karg){sizeof(v), &(v)})
int ocl_launch_1d(ocl_ops *o, const char *name, const ocl_karg *args, int nargs, size_t n,
                  ht_error *e);
int ocl_launch_3d(ocl_ops *o, const char *name, const ocl_karg *args, int nargs, size_t n0,
                  size_t n1, size_t n2, ht_error *e);
// A reduction: `groups` work-groups of the largest power of two (at most 256) the kernel takes
// on this device, never tuned (the work-group is the order of its sums), with its arguments
// followed by a __local one of `local_floats` floats a work-item. At most OCL_MAX_KARGS
// arguments.
#define OCL_MAX_KARGS 16
int ocl_launch_groups(ocl_ops *o, const char *name, const ocl_karg *args, int nargs,
                      size_t groups, int local_floats, ht_error *e);
// Whether kernel `name` may be given a tuned work-group size (not a reduction's).
int ocl_kernel_tunable(const char *name);
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
// Uses tuning t (NULL: none) from now on: its GEMM configurations and its kernels'
// work-group sizes (those the kernels take on this device; others stay the driver's choice).
void ocl_ops_tune(ocl_ops *o, const ocl_tuning *t);

// Profiling: ocl_prof_start returns the time to pass to ocl_prof_stop, which waits for the
// queue and adds the interval to `name`. Both do nothing while prof_on is 0.
double ocl_prof_start(ocl_ops *o);
void ocl_prof_stop(ocl_ops *o, const char *name, double t0);
void ocl_prof_reset(ocl_ops *o);
// The profile as a table, largest first, to f.
void ocl_prof_print(const ocl_ops *o, FILE *f);

// One CLBlast row-major SGEMM, C = op(A) op(B) + beta C (alpha 1), offsets in floats. cfg NULL:
// the tuning's configuration for this shape, else CLBlast's own. `what` names the op in
// messages and profiles.
int ocl_gemm(ocl_ops *o, const char *what, const ocl_gemm_cfg *cfg, char ta, char tb, size_t m,
             size_t n, size_t k, cl_mem a, size_t a_off, size_t lda, cl_mem b, size_t b_off,
             size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc, ht_error *e);

// bytes from src (at byte src_off) to dst (at dst_off).
int ocl_copy(ocl_ops *o, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off, size_t bytes,
             ht_error *e);

// buf[0..n) = value.
int ocl_fill(ocl_ops *o, cl_mem buf, float value, size_t n, ht_error *e);
// out[0..n) = a + b, element by element (out may be a).
int ocl_add(ocl_ops *o, cl_mem out, cl_mem a, cl_mem b, size_t n, ht_error *e);

// A bias offset meaning "no bias" (the layer's LAYER_NO_PARAM): conv and dense ops then add
// none and compute no bias gradient.
#define OCL_NO_BIAS ((size_t)-1)

// Convolutions in NCHW over B samples, their shape in a conv_geom (layers.h; Cs and the
// algorithms are the CPU's and not read here): pad is the before-pad (top/left); OH/OW imply
// the after-pad ("same" padding may pad one more row/column at the bottom/right), and the
// kernels bounds-check both ends. in (B,C,H,W), weight params[w_off..] (OC,C,K,K), bias
// params[b_off..] (OC) or OCL_NO_BIAS, out (B,OC,OH,OW).
// Their scratch: col, the im2col matrix (C*K*K, B*OH*OW) from float 0 of its buffer, and tmp
// (OC, B*OH*OW) from float tmp_off of its. The forward leaves the im2col matrix of `in` in
// col; the backward takes it from there when col_ready (the forward of the same input ran last
// on col), else computes it, and leaves col overwritten (with the input gradient's columns).
typedef struct ocl_conv_scratch {
    cl_mem col, tmp;
    size_t tmp_off;
    int col_ready;
} ocl_conv_scratch;
// Floats of col and of tmp for B samples.
size_t ocl_conv2d_col_floats(const conv_geom *g, int B);
size_t ocl_conv2d_tmp_floats(const conv_geom *g, int B);

int ocl_conv2d_forward(ocl_ops *o, const conv_geom *g, int B, cl_mem out, cl_mem in,
                       cl_mem params, size_t w_off, size_t b_off, const ocl_conv_scratch *s,
                       ht_error *e);
// grads[w_off..] += dW, grads[b_off..] += db; din (may be NULL) = input gradient. A direction
// the conv_geom computes by Winograd (g->dw, g->din) is left out here (ocl_wino_*).
int ocl_conv2d_backward(ocl_ops *o, const conv_geom *g, int B, cl_mem din, cl_mem grads,
                        cl_mem dout, cl_mem in, cl_mem params, size_t w_off, size_t b_off,
                        const ocl_conv_scratch *s, ht_error *e);

// The same convolutions by Winograd F(m x m, K x K) (ocl_wino.c, kernels/winograd.cl), in the
// directions g->fwd, g->din, g->dw name (CONV_WINO2, CONV_WINO4; K 3 or 5, stride 1, the
// padding the CPU device's conv2d_wino_ok allows), as the CPU device computes them. U: the
// transformed weights, ocl_wino_u_floats of them as ocl_wino_weights makes them on the host
// (the forward's, then the input gradient's); scratch: ocl_wino_scratch_floats; exact:
// ocl_wino_exact_bytes, the forward's marks of outputs that see only zeros.
size_t ocl_wino_scratch_floats(const conv_geom *g, int B);
size_t ocl_wino_exact_bytes(const conv_geom *g, int B);
size_t ocl_wino_u_floats(const conv_geom *g);
void ocl_wino_weights(float *u, const float *w, const conv_geom *g);
int ocl_wino_forward(ocl_ops *o, const conv_geom *g, int B, cl_mem out, cl_mem in,
                     cl_mem params, size_t b_off, cl_mem U, cl_mem scratch, cl_mem exact,
                     ht_error *e);
// din (B,C,H,W) = the input gradient of dout (B,OC,OH,OW).
int ocl_wino_input_grad(ocl_ops *o, const conv_geom *g, int B, cl_mem din, cl_mem dout, cl_mem U,
                        cl_mem scratch, ht_error *e);
// grads[w_off..] += dW of dout and the forward's input in.
int ocl_wino_weight_grad(ocl_ops *o, const conv_geom *g, int B, cl_mem grads, size_t w_off,
                         cl_mem dout, cl_mem in, cl_mem scratch, ht_error *e);

// Pooling in NCHW over B samples, the shape in a pool_geom (layers.h) whose Cs is the channel
// count: windows start at oy*stride - pad and are clipped to the plane (pad: the before-pad,
// 0 or "same"'s; every window must hold an input).
// argmax (int32, B*C*OH*OW): flat index h*W+w within the channel plane; first max wins.
int ocl_maxpool_forward(ocl_ops *o, const pool_geom *g, int B, cl_mem out, cl_mem argmax,
                        cl_mem in, ht_error *e);
int ocl_maxpool_backward(ocl_ops *o, const pool_geom *g, int B, cl_mem din, cl_mem dout,
                         cl_mem argmax, ht_error *e);
// Average pooling (padding not counted): out (B,C,OH,OW); din (B,C,H,W) overwritten.
int ocl_avgpool_forward(ocl_ops *o, const pool_geom *g, int B, cl_mem out, cl_mem in,
                        ht_error *e);
int ocl_avgpool_backward(ocl_ops *o, const pool_geom *g, int B, cl_mem din, cl_mem dout,
                         ht_error *e);
// Global average pooling: in (B,C,H,W) -> out (B,C); din (B,C,H,W) = dout / (H*W).
int ocl_gavgpool_forward(ocl_ops *o, cl_mem out, cl_mem in, int B, int C, int H, int W,
                         ht_error *e);
int ocl_gavgpool_backward(ocl_ops *o, cl_mem din, cl_mem dout, int B, int C, int H, int W,
                          ht_error *e);

// in (B,IN), weight (OUT,IN), out (B,OUT); b_off OCL_NO_BIAS: no bias.
int ocl_dense_forward(ocl_ops *o, cl_mem out, cl_mem in, cl_mem params, size_t w_off,
                       size_t b_off, int B, int IN, int OUT, ht_error *e);
int ocl_dense_backward(ocl_ops *o, cl_mem din, cl_mem grads, size_t w_off, size_t b_off,
                        cl_mem dout, cl_mem in, cl_mem params, int B, int IN, int OUT,
                        ht_error *e);

// In place allowed (out == in, din == dout).
int ocl_relu_forward(ocl_ops *o, cl_mem out, cl_mem in, size_t n, ht_error *e);
int ocl_relu_backward(ocl_ops *o, cl_mem din, cl_mem dout, cl_mem out, size_t n, ht_error *e);

// The act family's activation f (layer_kinds.h's act_fn, alpha its parameter) over n
// elements: out = f(in); din = dout * f'(in), from the forward's input alone. In place allowed.
int ocl_act_forward(ocl_ops *o, int f, float alpha, cl_mem out, cl_mem in, size_t n,
                    ht_error *e);
int ocl_act_backward(ocl_ops *o, int f, float alpha, cl_mem din, cl_mem dout, cl_mem in,
                     size_t n, ht_error *e);

// Forward and backward are the same mask-and-scale: element e of sample i kept when
// ht_rng_uniform(key, ids[i], e) >= rate (src/core/rng.h, bit for bit). ids: uint32 (B).
int ocl_dropout(ocl_ops *o, cl_mem out, cl_mem in, int B, size_t N, float rate, uint64_t key,
                uint32_t emask, cl_mem ids, ht_error *e);

// Batch normalisation (ocl_bn.c, kernels/batchnorm.cl; the CPU's is src/nn/batchnorm.c) of
// x (B,C,P), P positions a sample. The layer's tensors in the flat buffers: gamma at w_off and
// beta at b_off (OCL_NO_BIAS: none, taken as 1 and 0), the state at s_off: moving mean [C],
// moving variance [C], count.
typedef struct ocl_bn_geom {
    int C, P;
    size_t w_off, b_off, s_off;
    float eps;
} ocl_bn_geom;
// Training: groups of G consecutive samples (the last may be smaller) normalised with their
// own mean and biased variance; stats gets each group's (mean [C], variance [C],
// 1/sqrt(variance + eps) [C]), 3C floats a group.
int ocl_bn_train_forward(ocl_ops *o, const ocl_bn_geom *g, int B, int G, cl_mem out, cl_mem in,
                         cl_mem params, cl_mem stats, ht_error *e);
// Inference: with the moving mean and variance.
int ocl_bn_infer_forward(ocl_ops *o, const ocl_bn_geom *g, int B, cl_mem out, cl_mem in,
                         cl_mem params, ht_error *e);
// Training's backward from the forward's input and stats: din (NULL: not wanted) overwritten;
// gamma's and beta's gradients added to, and in the state's place of grads each group's mean
// and variance added, and the count of groups. sums: scratch of ocl_bn_sums_floats(C, B).
int ocl_bn_backward(ocl_ops *o, const ocl_bn_geom *g, int B, int G, cl_mem din, cl_mem grads,
                    cl_mem dout, cl_mem in, cl_mem params, cl_mem stats, cl_mem sums,
                    ht_error *e);
// A frozen layer's backward (its forward is the inference one): din = dout * gamma /
// sqrt(moving variance + eps); no parameter gradients, no statistics.
int ocl_bn_frozen_backward(ocl_ops *o, const ocl_bn_geom *g, int B, cl_mem din, cl_mem dout,
                           cl_mem params, ht_error *e);
// Floats of stats and of the backward's sums for B samples, whatever G (at most B groups).
size_t ocl_bn_stats_floats(int C, int B);
size_t ocl_bn_sums_floats(int C, int B);

// labels: uchar (B) or NULL (then loss is not written).
// A sample's (C, H, W) = dims axes reordered, output axis i from input axis perm[i] - 1
// (kernels/util.cl's permute3); with inverse, the backward: in is the permuted tensor's
// gradient, out gets the gradient of the tensor of shape dims.
int ocl_permute(ocl_ops *o, cl_mem out, cl_mem in, int B, const int dims[3], const int perm[3],
                int inverse, ht_error *e);

// The binary head (K = 1; kernels/activations.cl): probs (B, 2) = (1 - p, p), p =
// sigmoid(logits[i]); with labels (and loss), each sample's binary cross-entropy. Backward:
// dlogits = p - label. The multi-label head (K >= 2): logits, probs, labels (B, K); a sample's
// loss the mean over its labels, dlogits = (p - label) / K.
int ocl_bce_forward(ocl_ops *o, cl_mem probs, cl_mem loss, cl_mem logits, cl_mem labels, int B,
                    int K, ht_error *e);
int ocl_bce_backward(ocl_ops *o, cl_mem dlogits, cl_mem probs, cl_mem labels, int B, int K,
                     ht_error *e);
int ocl_softmax_xent_forward(ocl_ops *o, cl_mem probs, cl_mem loss, cl_mem logits,
                              cl_mem labels, int B, int NC, ht_error *e);
int ocl_softmax_xent_backward(ocl_ops *o, cl_mem dlogits, cl_mem probs, cl_mem labels, int B,
                               int NC, ht_error *e);

#endif
