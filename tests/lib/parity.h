// Parity of whole small models, shared by test_parity_cpu.c and test_parity_cl.c: cases are
// models written as config text (one layer under test where its forward and backward show,
// and small stacks), run through a backend's real walker and op table (the CPU path's
// net_forward/net_backward, the OpenCL device's train_shard/infer) and through the reference's
// (tests/lib/ref.h), and compared: training outputs, per-sample losses, every parameter
// gradient and batchnorm's statistics sums, and inference outputs, each within the backend's
// named tolerance. The cases live in one table per family, indexed by layer_kinds.h's list.
#ifndef HETRAIN_TEST_PARITY_H
#define HETRAIN_TEST_PARITY_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "nn/model.h"

// ---- tolerances ----

// Every comparison is check_tensor's: the relative error |a - b| / max(|a|, |b|, floor), with
// the floor the reference tensor's root mean square times PARITY_FLOOR_RMS. The tensors are
// sums of many products (conv, dense and their gradients), means (pooling, batchnorm) and
// activations of those, and two backends differ in a sum only by the order of its terms, with
// or without FMA: the rounding grows like sqrt(terms) times a term, as the typical element
// does, while an element that cancels can be as small as it likes. So elements well below the
// tensor's typical size are compared to that size.
#define PARITY_FLOOR_RMS 0.1f

// The native CPU path (channels-last conv with FMA, OpenBLAS's dense, float activations and
// batchnorm) against the reference (NCHW im2col + SGEMM, the act family and batchnorm in
// double): a few float roundings of each sum, carried through the layers after it. Worst
// observed: 4.0e-5 (cnn3 conv2's weight gradient; the same through the CPU device's
// micro-batches).
#define TOL_CPU 1e-4f
// OpenCL: CLBlast's GEMM tiles and the kernels' reductions in yet another order, OpenCL's
// built-ins within 3 to 16 ulp (OpenCL C 1.2, 7.4). Worst observed: 3.7e-5 on PoCL, 3.4e-5 on
// rusticl (both cnn3 conv2's weight gradient).
#define TOL_CL 2e-4f
// Winograd F(2x2,3x3), F(4x4,3x3), F(2x2,5x5) and F(4x4,5x5) (conv_algo = winograd or
// winograd2; the OpenCL device computes as the CPU device decides): their transforms add
// rounding that grows with the tile (test_winograd bounds it per tile). Worst observed: 2.8e-4
// on the CPU and PoCL (the dense weight gradient after cnn2's conv2 by F(2x2,5x5), which is
// made of that convolution's outputs), 3.6e-4 on rusticl (that conv's weight gradient).
#define TOL_WINO 1e-3f
// A wrong op is off by far more: a flipped sign or a wrong divisor in a backward moves the
// gradients below it by 0.2 to 2 of themselves.
//
// Relu and max pooling branch on forward values, and a value within rounding of the branch
// (an input at 0, two near-equal inputs of a window) could go two ways on two backends. The
// cases' inputs are random floats, where that has not happened; the ties and zeros that must
// go one way are exact on every backend (parity_case.grid).

typedef struct parity_tols {
    float direct; // every tensor of a case whose convolutions run direct
    float wino;   // of a case whose convolutions may run by Winograd
} parity_tols;

// ---- the cases ----

// A model as config text (model_init_config's format), run on a batch of B samples with
// dropout on in training (drop masks keyed by sample ids, some above 2^31). algos: the
// case's convolutions also run by Winograd (conv_algo = winograd and winograd2), not only
// direct. grid: inputs on a grid of halves in [-1, 1] instead of uniform, so that a 1x1
// convolution of one channel (whose products are then exact on every backend) makes exact
// ties in pooling windows (the first maximum wins) and exact zeros at relu's kink.
typedef struct parity_case {
    const char *what; // what it checks
    const char *cfg;
    int B;
    int algos;
    int grid;
} parity_case;

// ---- backends ----

// One batch: x (B, in) NCHW, y (B, label_width), ids (B); dropout keyed by (seed, epoch).
typedef struct parity_batch {
    const float *x;
    const uint8_t *y;
    const uint32_t *ids;
    int B;
    uint64_t seed;
    uint32_t epoch;
} parity_batch;

// What a backend returns of one batch: the training pass's outputs (probs; NULL where the
// backend does not show them) and per-sample losses, the gradient sum over the batch with
// batchnorm's statistics sums after the trainable parameters (n_params), and the inference
// pass's outputs. Every buffer arrives NaN.
typedef struct parity_out {
    float *probs, *loss, *grads, *probs_infer;
} parity_out;

typedef struct parity_backend parity_backend;
struct parity_backend {
    const char *name;
    const parity_tols *tol;
    void *ctx;
    // A training forward and backward of the batch from params, then an inference forward.
    // -1 with e when the backend fails (a failure of the case).
    int (*run)(parity_backend *b, const model *m, const float *params, const parity_batch *in,
               parity_out *out, ht_error *e);
    int fails;  // comparisons that failed, over every case run
    int checks; // comparisons made
};

// Runs every case of every family's table through the backend and the reference, printing
// each failed comparison; also fails when a kind of layer_kinds.h appears in no case of its
// family's table. Returns the failures (b->fails).
int parity_run_cases(parity_backend *b);

// The model of config text cfg (written to a file under the test's temp folder and read by
// model_init_config); fails the test when it does not read.
void parity_model_init(model *m, const char *cfg);

#endif
