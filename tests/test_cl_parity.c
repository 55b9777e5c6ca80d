// OpenCL parity: every op of devices/ocl_ops.h, forward and backward, on every OpenCL device
// found, against the CPU reference (tests/ref.h, layers.h), each with a named tolerance.
// Outputs and scratch start as NaN (so overwrite semantics and "scratch is not kept" are checked),
// gradients start nonzero (so accumulate semantics are), and parameters sit at nonzero
// offsets of their flat buffer.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ocl_ops.h"
#include "layers.h"
#include "ref.h"
#include "rng.h"
#include "testutil.h"

// Relative errors against max(|gpu|, |cpu|, floor). Conv and dense differ from the CPU only in
// summation order (CLBlast's GEMM tiles vs OpenBLAS's, the bias-gradient reductions): float
// rounding of sums of L products of magnitude <= 1. Their partial sums grow like sqrt(L), and
// so does the rounding error, while an element that cancels can be as small as it likes; so
// the floor is the typical size of such a sum, FLOOR_SUM * sqrt(L) (sum_floor below).
// Worst observed on PoCL: 7.2e-6 (conv dW of the 4x32x14x14 case after two backward passes),
// 1.9e-6 (dense db).
#define TOL_CONV 1e-4f
#define TOL_DENSE 1e-4f
#define FLOOR_SUM 0.1f
// Max pooling selects; its backward adds in the CPU's window order: bit-identical.
#define TOL_POOL 0.0f
// relu, dropout (same mask, same float scale), softmax backward (p - 1): bit-identical.
#define TOL_EXACT 0.0f
// Softmax in float on the device (exp within a few ulps, a float sum) vs expf and a double sum
// on the CPU. Probabilities are compared relative to themselves down to tiny values; the loss
// is an absolute error of a few ulps of log(sum), hence its floor. Worst observed on PoCL:
// 2.3e-7 (probs), 1.1e-7 (loss).
#define TOL_XENT 1e-5f
#define FLOOR_PROBS 1e-30f
#define FLOOR_LOSS 1e-2f

static float sum_floor(double L) { return FLOOR_SUM * (float)sqrt(L); }

// Parameters and gradients start this many floats into their buffer, so offsets are tested.
#define PARAM_LEAD 7

typedef struct env {
    ocl_ops o;
    cl_context ctx;
    cl_command_queue q;
    const char *spec;
    int fails;
    ht_error err;
    // Per-case allocations, released by case_end.
    cl_mem bufs[64];
    int nbufs;
    void *host[64];
    int nhost;
} env;

// ---- helpers ----

static void *hnew(env *t, size_t bytes) {
    assert_true(t->nhost < (int)(sizeof t->host / sizeof t->host[0]));
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    t->host[t->nhost++] = p;
    return p;
}

static float *uniform(env *t, size_t n, float lo, float hi, uint64_t seed) {
    float *p = hnew(t, n * sizeof *p);
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * ht_rng_double(&r));
    return p;
}

static float *nans(env *t, size_t n) {
    float *p = hnew(t, n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static float *copy(env *t, const float *a, size_t n) {
    float *p = hnew(t, n * sizeof *p);
    memcpy(p, a, n * sizeof *p);
    return p;
}

// A device buffer holding a copy of host[0..bytes).
static cl_mem dbuf(env *t, const void *host, size_t bytes) {
    assert_true(t->nbufs < (int)(sizeof t->bufs / sizeof t->bufs[0]));
    cl_int err;
    cl_mem m = clCreateBuffer(t->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    if (err != CL_SUCCESS)
        fail_msg("%s: clCreateBuffer(%zu): %s", t->spec, bytes, ocl_error_name(err));
    t->bufs[t->nbufs++] = m;
    return m;
}

static void dwrite(env *t, cl_mem m, const void *host, size_t bytes) {
    cl_int err = clEnqueueWriteBuffer(t->q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueWriteBuffer: %s", t->spec, ocl_error_name(err));
}

// Blocking read into a fresh host array; also surfaces errors of the kernels before it.
static void *dread(env *t, cl_mem m, size_t bytes) {
    void *p = hnew(t, bytes);
    cl_int err = clEnqueueReadBuffer(t->q, m, CL_TRUE, 0, bytes, p, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueReadBuffer: %s", t->spec, ocl_error_name(err));
    return p;
}

static void case_end(env *t) {
    for (int i = 0; i < t->nbufs; i++) clReleaseMemObject(t->bufs[i]);
    for (int i = 0; i < t->nhost; i++) free(t->host[i]);
    t->nbufs = t->nhost = 0;
}

// An op's return code: a failure to enqueue is fatal for the test.
#define OK(t, call)                                                                           \
    do {                                                                                      \
        if ((call) != 0) fail_msg("%s: %s", (t)->spec, (t)->err.msg);                          \
    } while (0)

// Compares a device result with the CPU reference; a failure is counted and printed, and the
// test goes on so that one run shows every op that disagrees.
static void expect(env *t, const float *dev, const float *ref, size_t n, float tol, float floor,
                   const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(name, sizeof name, "%s: ", t->spec);
    if (k < 0 || k >= (int)sizeof name) k = 0;
    vsnprintf(name + k, sizeof name - (size_t)k, fmt, ap);
    va_end(ap);
    if (!check_tensor(dev, ref, n, tol, floor, name)) t->fails++;
}

static void expect_int(env *t, const int32_t *dev, const int32_t *ref, size_t n,
                       const char *what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (dev[i] != ref[i] && bad++ == 0) first = i;
    if (bad) {
        fprintf(stderr, "%s: %s: %zu of %zu differ, first [%zu]: %d vs %d\n", t->spec, what, bad,
                n, first, dev[first], ref[first]);
        t->fails++;
    }
}

// A case whose reference is all zeros (or has no variety) could not fail; guard against that.
static void nontrivial(env *t, const float *ref, size_t n, const char *what) {
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += ref[i] != 0.0f;
    if (nz == 0) {
        fprintf(stderr, "%s: %s: reference is all zero; the case tests nothing\n", t->spec, what);
        t->fails++;
    }
}

// ---- cases ----

static void case_fill(env *t) {
    const size_t n = 1001;  // not a multiple of any work-group size
    float *init = nans(t, n + 3), *ref = nans(t, n + 3);
    cl_mem b = dbuf(t, init, (n + 3) * sizeof(float));
    for (size_t i = 0; i < n; i++) ref[i] = -2.5f;
    OK(t, ocl_fill(&t->o, b, -2.5f, n, &t->err));
    float *got = dread(t, b, (n + 3) * sizeof(float));
    expect(t, got, ref, n, TOL_EXACT, 1.0f, "fill");
    // The tail past n stays untouched (still NaN).
    int tail_ok = isnan(got[n]) && isnan(got[n + 1]) && isnan(got[n + 2]);
    if (!tail_ok) {
        fprintf(stderr, "%s: fill: wrote past n\n", t->spec);
        t->fails++;
    }
    case_end(t);
}

typedef struct conv_shape {
    int B, C, H, W, OC, K, stride, pad;
} conv_shape;

static void case_conv(env *t, const conv_shape *s, uint64_t seed) {
    const int B = s->B, C = s->C, H = s->H, W = s->W, OC = s->OC, K = s->K;
    const int OH = conv_out_dim(H, K, s->stride, s->pad);
    const int OW = conv_out_dim(W, K, s->stride, s->pad);
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * OC * OH * OW;
    const size_t nw = (size_t)OC * C * K * K, np = PARAM_LEAD + nw + OC;
    const size_t w_off = PARAM_LEAD, b_off = PARAM_LEAD + nw;
    char tag[96];
    snprintf(tag, sizeof tag, "conv B%d C%d %dx%d OC%d K%d s%d p%d", B, C, H, W, OC, K,
             s->stride, s->pad);

    float *in = uniform(t, nin, -1, 1, seed), *params = uniform(t, np, -0.5f, 0.5f, seed + 1);
    float *dout = uniform(t, nout, -1, 1, seed + 2), *grads0 = uniform(t, np, -1, 1, seed + 3);
    float *ws = hnew(t, ref_conv2d_ws_floats(C, K, OC, OH, OW, 1) * sizeof(float));
    const size_t nscr = ocl_conv2d_scratch_floats(B, C, K, OC, OH, OW);
    // Products summed per element: out C*K*K, din at most OC*K*K, dW and db 2*B*OH*OW (two
    // backward passes).
    const float fl_out = sum_floor((double)C * K * K), fl_din = sum_floor((double)OC * K * K);
    const float fl_grad = sum_floor(2.0 * B * OH * OW);

    // CPU reference: forward, backward with din, then again without (accumulating twice).
    float *out_ref = hnew(t, nout * sizeof(float)), *din_ref = hnew(t, nin * sizeof(float));
    float *grads_ref = copy(t, grads0, np);
    ref_conv2d_forward(out_ref, in, params + w_off, params + b_off, B, C, H, W, OC, K,
                       s->stride, s->pad, OH, OW, ws, 1);
    ref_conv2d_backward(din_ref, grads_ref + w_off, grads_ref + b_off, dout, in, params + w_off,
                        B, C, H, W, OC, K, s->stride, s->pad, OH, OW, ws, 1);
    float *grads_ref1 = copy(t, grads_ref, np);
    ref_conv2d_backward(NULL, grads_ref + w_off, grads_ref + b_off, dout, in, params + w_off, B,
                        C, H, W, OC, K, s->stride, s->pad, OH, OW, ws, 1);
    nontrivial(t, out_ref, nout, tag);
    nontrivial(t, din_ref, nin, tag);

    cl_mem d_in = dbuf(t, in, nin * sizeof(float)), d_par = dbuf(t, params, np * sizeof(float));
    cl_mem d_out = dbuf(t, nans(t, nout), nout * sizeof(float));
    cl_mem d_dout = dbuf(t, dout, nout * sizeof(float));
    cl_mem d_din = dbuf(t, nans(t, nin), nin * sizeof(float));
    cl_mem d_grads = dbuf(t, grads0, np * sizeof(float));
    float *scr_nan = nans(t, nscr);
    cl_mem d_scr = dbuf(t, scr_nan, nscr * sizeof(float));

    OK(t, ocl_conv2d_forward(&t->o, d_out, d_in, d_par, w_off, b_off, B, C, H, W, OC, K,
                              s->stride, s->pad, OH, OW, d_scr, &t->err));
    float *out = dread(t, d_out, nout * sizeof(float));
    expect(t, out, out_ref, nout, TOL_CONV, fl_out, "%s forward out", tag);

    dwrite(t, d_scr, scr_nan, nscr * sizeof(float));  // backward must not rely on forward's
    OK(t, ocl_conv2d_backward(&t->o, d_din, d_grads, w_off, b_off, d_dout, d_in, d_par, B, C, H,
                               W, OC, K, s->stride, s->pad, OH, OW, d_scr, &t->err));
    float *din = dread(t, d_din, nin * sizeof(float));
    float *g1 = dread(t, d_grads, np * sizeof(float));
    expect(t, din, din_ref, nin, TOL_CONV, fl_din, "%s backward din", tag);
    expect(t, g1 + w_off, grads_ref1 + w_off, nw, TOL_CONV, fl_grad, "%s backward dW", tag);
    expect(t, g1 + b_off, grads_ref1 + b_off, (size_t)OC, TOL_CONV, fl_grad,
           "%s backward db", tag);
    expect(t, g1, grads0, PARAM_LEAD, TOL_EXACT, 1.0f, "%s backward: grads before w_off", tag);

    OK(t, ocl_conv2d_backward(&t->o, NULL, d_grads, w_off, b_off, d_dout, d_in, d_par, B, C, H,
                               W, OC, K, s->stride, s->pad, OH, OW, d_scr, &t->err));
    float *g2 = dread(t, d_grads, np * sizeof(float));
    expect(t, g2 + w_off, grads_ref + w_off, nw, TOL_CONV, fl_grad,
           "%s second backward (din NULL) dW", tag);
    expect(t, g2 + b_off, grads_ref + b_off, (size_t)OC, TOL_CONV, fl_grad,
           "%s second backward (din NULL) db", tag);
    case_end(t);
}

static void case_maxpool(env *t, int B, int C, int H, int W, int K, int stride, uint64_t seed) {
    const int OH = conv_out_dim(H, K, stride, 0), OW = conv_out_dim(W, K, stride, 0);
    const size_t nin = (size_t)B * C * H * W, nout = (size_t)B * C * OH * OW;
    char tag[64];
    snprintf(tag, sizeof tag, "maxpool B%d C%d %dx%d K%d s%d", B, C, H, W, K, stride);
    // Values on a coarse grid, so windows often hold ties: the first maximum must win.
    float *in = uniform(t, nin, 0, 5, seed);
    for (size_t i = 0; i < nin; i++) in[i] = floorf(in[i]) * 0.5f - 1.0f;
    float *dout = uniform(t, nout, -1, 1, seed + 1);

    float *out_ref = hnew(t, nout * sizeof(float)), *din_ref = hnew(t, nin * sizeof(float));
    int32_t *am_ref = hnew(t, nout * sizeof(int32_t));
    ref_maxpool_forward(out_ref, am_ref, in, B, C, H, W, K, stride, OH, OW, 1);
    ref_maxpool_backward(din_ref, dout, am_ref, B, C, H, W, OH, OW, 1);
    nontrivial(t, din_ref, nin, tag);

    cl_mem d_in = dbuf(t, in, nin * sizeof(float));
    cl_mem d_out = dbuf(t, nans(t, nout), nout * sizeof(float));
    int32_t *am_init = hnew(t, nout * sizeof(int32_t));
    for (size_t i = 0; i < nout; i++) am_init[i] = -7;
    cl_mem d_am = dbuf(t, am_init, nout * sizeof(int32_t));
    cl_mem d_dout = dbuf(t, dout, nout * sizeof(float));
    cl_mem d_din = dbuf(t, nans(t, nin), nin * sizeof(float));

    OK(t, ocl_maxpool_forward(&t->o, d_out, d_am, d_in, B, C, H, W, K, stride, OH, OW, &t->err));
    float *out = dread(t, d_out, nout * sizeof(float));
    int32_t *am = dread(t, d_am, nout * sizeof(int32_t));
    expect(t, out, out_ref, nout, TOL_POOL, 1.0f, "%s forward out", tag);
    char what[96];
    snprintf(what, sizeof what, "%s forward argmax", tag);
    expect_int(t, am, am_ref, nout, what);

    OK(t, ocl_maxpool_backward(&t->o, d_din, d_dout, d_am, B, C, H, W, K, stride, OH, OW,
                                &t->err));
    float *din = dread(t, d_din, nin * sizeof(float));
    expect(t, din, din_ref, nin, TOL_POOL, 1.0f, "%s backward din", tag);
    case_end(t);
}

static void case_dense(env *t, int B, int IN, int OUT, uint64_t seed) {
    const size_t nin = (size_t)B * IN, nout = (size_t)B * OUT, nw = (size_t)OUT * IN;
    const size_t np = PARAM_LEAD + nw + OUT, w_off = PARAM_LEAD, b_off = PARAM_LEAD + nw;
    char tag[64];
    snprintf(tag, sizeof tag, "dense B%d IN%d OUT%d", B, IN, OUT);
    float *in = uniform(t, nin, -1, 1, seed), *params = uniform(t, np, -0.5f, 0.5f, seed + 1);
    float *dout = uniform(t, nout, -1, 1, seed + 2), *grads0 = uniform(t, np, -1, 1, seed + 3);
    // Products summed per element: out IN, din OUT, dW and db 2*B (two backward passes).
    const float fl_out = sum_floor(IN), fl_din = sum_floor(OUT), fl_grad = sum_floor(2.0 * B);

    float *out_ref = hnew(t, nout * sizeof(float)), *din_ref = hnew(t, nin * sizeof(float));
    float *grads_ref = copy(t, grads0, np);
    dense_forward(out_ref, in, params + w_off, params + b_off, B, IN, OUT, 1);
    dense_backward(din_ref, grads_ref + w_off, grads_ref + b_off, dout, in, params + w_off, B, IN,
                   OUT, 1);
    float *grads_ref1 = copy(t, grads_ref, np);
    dense_backward(NULL, grads_ref + w_off, grads_ref + b_off, dout, in, params + w_off, B, IN,
                   OUT, 1);

    cl_mem d_in = dbuf(t, in, nin * sizeof(float)), d_par = dbuf(t, params, np * sizeof(float));
    cl_mem d_out = dbuf(t, nans(t, nout), nout * sizeof(float));
    cl_mem d_dout = dbuf(t, dout, nout * sizeof(float));
    cl_mem d_din = dbuf(t, nans(t, nin), nin * sizeof(float));
    cl_mem d_grads = dbuf(t, grads0, np * sizeof(float));

    OK(t, ocl_dense_forward(&t->o, d_out, d_in, d_par, w_off, b_off, B, IN, OUT, &t->err));
    float *out = dread(t, d_out, nout * sizeof(float));
    expect(t, out, out_ref, nout, TOL_DENSE, fl_out, "%s forward out", tag);

    OK(t, ocl_dense_backward(&t->o, d_din, d_grads, w_off, b_off, d_dout, d_in, d_par, B, IN,
                              OUT, &t->err));
    float *din = dread(t, d_din, nin * sizeof(float));
    float *g1 = dread(t, d_grads, np * sizeof(float));
    expect(t, din, din_ref, nin, TOL_DENSE, fl_din, "%s backward din", tag);
    expect(t, g1 + w_off, grads_ref1 + w_off, nw, TOL_DENSE, fl_grad, "%s backward dW", tag);
    expect(t, g1 + b_off, grads_ref1 + b_off, (size_t)OUT, TOL_DENSE, fl_grad,
           "%s backward db", tag);
    expect(t, g1, grads0, PARAM_LEAD, TOL_EXACT, 1.0f, "%s backward: grads before w_off", tag);

    OK(t, ocl_dense_backward(&t->o, NULL, d_grads, w_off, b_off, d_dout, d_in, d_par, B, IN,
                              OUT, &t->err));
    float *g2 = dread(t, d_grads, np * sizeof(float));
    expect(t, g2 + w_off, grads_ref + w_off, nw, TOL_DENSE, fl_grad,
           "%s second backward (din NULL) dW", tag);
    expect(t, g2 + b_off, grads_ref + b_off, (size_t)OUT, TOL_DENSE, fl_grad,
           "%s second backward (din NULL) db", tag);
    case_end(t);
}

static void case_relu(env *t, uint64_t seed) {
    const size_t n = 3001;
    float *in = uniform(t, n, -1, 1, seed), *dout = uniform(t, n, -1, 1, seed + 1);
    for (size_t i = 0; i < n; i += 10) in[i] = 0.0f;  // the kink: relu'(0) = 0 on both sides
    float *out_ref = hnew(t, n * sizeof(float)), *din_ref = hnew(t, n * sizeof(float));
    relu_forward(out_ref, in, n, 1);
    relu_backward(din_ref, dout, out_ref, n, 1);
    nontrivial(t, din_ref, n, "relu");

    cl_mem d_in = dbuf(t, in, n * sizeof(float)), d_out = dbuf(t, nans(t, n), n * sizeof(float));
    cl_mem d_dout = dbuf(t, dout, n * sizeof(float));
    cl_mem d_din = dbuf(t, nans(t, n), n * sizeof(float));
    OK(t, ocl_relu_forward(&t->o, d_out, d_in, n, &t->err));
    OK(t, ocl_relu_backward(&t->o, d_din, d_dout, d_out, n, &t->err));
    expect(t, dread(t, d_out, n * sizeof(float)), out_ref, n, TOL_EXACT, 1.0f, "relu forward");
    expect(t, dread(t, d_din, n * sizeof(float)), din_ref, n, TOL_EXACT, 1.0f, "relu backward");
    // In place, as the OpenCL device runs them.
    OK(t, ocl_relu_forward(&t->o, d_in, d_in, n, &t->err));
    OK(t, ocl_relu_backward(&t->o, d_dout, d_dout, d_in, n, &t->err));
    expect(t, dread(t, d_in, n * sizeof(float)), out_ref, n, TOL_EXACT, 1.0f,
           "relu forward in place");
    expect(t, dread(t, d_dout, n * sizeof(float)), din_ref, n, TOL_EXACT, 1.0f,
           "relu backward in place");
    case_end(t);
}

static void case_dropout(env *t, float rate, uint64_t seed) {
    const int B = 6;
    const size_t N = 777, n = (size_t)B * N;
    // Global sample ids, some above 2^31 (unsigned all the way through).
    uint32_t ids[6] = {0, 1, 4242, 59999, 0x80000001u, 0xFFFFFFF0u};
    const uint64_t key = ht_rng_key(seed, 3, 7);
    float *in = uniform(t, n, 0.1f, 1.0f, seed);  // nonzero, so zeros in the output are the mask
    float *out_ref = hnew(t, n * sizeof(float));
    dropout_forward(out_ref, in, B, N, rate, key, ids, 1);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) kept += out_ref[i] != 0.0f;
    if (kept == 0 || kept == n) {
        fprintf(stderr, "%s: dropout %.2f: reference mask keeps %zu of %zu\n", t->spec,
                (double)rate, kept, n);
        t->fails++;
    }

    cl_mem d_in = dbuf(t, in, n * sizeof(float)), d_out = dbuf(t, nans(t, n), n * sizeof(float));
    cl_mem d_ids = dbuf(t, ids, sizeof ids);
    OK(t, ocl_dropout(&t->o, d_out, d_in, B, N, rate, key, d_ids, &t->err));
    float *out = dread(t, d_out, n * sizeof(float));
    size_t mask_diff = 0;
    for (size_t i = 0; i < n; i++) mask_diff += (out[i] != 0.0f) != (out_ref[i] != 0.0f);
    if (mask_diff) {
        fprintf(stderr, "%s: dropout %.2f: %zu of %zu mask elements differ from the CPU's\n",
                t->spec, (double)rate, mask_diff, n);
        t->fails++;
    }
    expect(t, out, out_ref, n, TOL_EXACT, 1.0f, "dropout %.2f forward", (double)rate);
    // Backward is the same op on the gradient, here in place.
    float *dout = uniform(t, n, -1, 1, seed + 1), *din_ref = hnew(t, n * sizeof(float));
    dropout_forward(din_ref, dout, B, N, rate, key, ids, 1); // backward: the same call
    cl_mem d_dout = dbuf(t, dout, n * sizeof(float));
    OK(t, ocl_dropout(&t->o, d_dout, d_dout, B, N, rate, key, d_ids, &t->err));
    expect(t, dread(t, d_dout, n * sizeof(float)), din_ref, n, TOL_EXACT, 1.0f,
           "dropout %.2f backward in place", (double)rate);
    case_end(t);
}

static void case_softmax_xent(env *t, uint64_t seed) {
    const int B = 9, NC = 10;
    const size_t n = (size_t)B * NC;
    float *logits = uniform(t, n, -8, 8, seed);
    for (int c = 0; c < NC; c++) logits[3 * NC + c] += 1000.0f;  // exp would overflow unshifted
    for (int c = 0; c < NC; c++) logits[5 * NC + c] *= 5.0f;     // probabilities down to ~1e-35
    uint8_t labels[9];
    for (int i = 0; i < B; i++) labels[i] = (uint8_t)((i * 7 + 3) % NC);
    float *probs_ref = hnew(t, n * sizeof(float)), *loss_ref = hnew(t, B * sizeof(float));
    float *dl_ref = hnew(t, n * sizeof(float));
    softmax_xent_forward(probs_ref, loss_ref, logits, labels, B, NC);
    softmax_xent_backward(dl_ref, probs_ref, labels, B, NC);

    cl_mem d_logits = dbuf(t, logits, n * sizeof(float)), d_lab = dbuf(t, labels, sizeof labels);
    cl_mem d_probs = dbuf(t, nans(t, n), n * sizeof(float));
    float *sentinel = hnew(t, B * sizeof(float));
    for (int i = 0; i < B; i++) sentinel[i] = 12345.0f;
    cl_mem d_loss = dbuf(t, nans(t, B), B * sizeof(float));
    OK(t, ocl_softmax_xent_forward(&t->o, d_probs, d_loss, d_logits, d_lab, B, NC, &t->err));
    expect(t, dread(t, d_probs, n * sizeof(float)), probs_ref, n, TOL_XENT, FLOOR_PROBS,
           "softmax_xent forward probs");
    expect(t, dread(t, d_loss, B * sizeof(float)), loss_ref, B, TOL_XENT, FLOOR_LOSS,
           "softmax_xent forward loss");

    // Without labels: probabilities only, the loss buffer untouched.
    dwrite(t, d_probs, nans(t, n), n * sizeof(float));
    dwrite(t, d_loss, sentinel, B * sizeof(float));
    OK(t, ocl_softmax_xent_forward(&t->o, d_probs, d_loss, d_logits, NULL, B, NC, &t->err));
    expect(t, dread(t, d_probs, n * sizeof(float)), probs_ref, n, TOL_XENT, FLOOR_PROBS,
           "softmax_xent forward probs (no labels)");
    expect(t, dread(t, d_loss, B * sizeof(float)), sentinel, B, TOL_EXACT, 1.0f,
           "softmax_xent forward (no labels) leaves loss alone");

    // Backward from the CPU's probabilities, so the comparison is exact.
    dwrite(t, d_probs, probs_ref, n * sizeof(float));
    cl_mem d_dl = dbuf(t, nans(t, n), n * sizeof(float));
    OK(t, ocl_softmax_xent_backward(&t->o, d_dl, d_probs, d_lab, B, NC, &t->err));
    expect(t, dread(t, d_dl, n * sizeof(float)), dl_ref, n, TOL_EXACT, 1.0f,
           "softmax_xent backward");
    case_end(t);
}

// Every op, both directions, on one device.
static void run_all_ops(env *t) {
    case_fill(t);
    static const conv_shape convs[] = {
        {3, 1, 8, 8, 4, 3, 1, 1},     // first layer: C = 1, same padding
        {2, 3, 9, 7, 5, 5, 2, 2},     // K 5, stride 2, pad 2, H != W
        {2, 2, 10, 11, 3, 3, 2, 0},   // stride 2, no padding
        {2, 4, 6, 5, 6, 3, 1, 2},     // pad wider than needed for "same"
        {3, 2, 7, 7, 4, 5, 1, 0},     // K 5, no padding
        {2, 3, 5, 6, 2, 1, 1, 0},     // K 1
        {4, 32, 14, 14, 48, 3, 1, 1}, // a real layer's size: CLBlast's large-matrix path
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++)
        case_conv(t, &convs[i], 100 + 10 * i);
    case_maxpool(t, 3, 2, 8, 8, 2, 2, 200);
    case_maxpool(t, 2, 3, 7, 9, 2, 2, 210);  // odd sizes: the last row/column is dropped
    case_maxpool(t, 2, 2, 9, 9, 3, 2, 220);  // overlapping windows
    case_maxpool(t, 1, 3, 8, 10, 3, 2, 230); // overlapping, a partial last window dropped
    case_dense(t, 5, 37, 13, 300);
    case_dense(t, 64, 300, 128, 310);
    case_dense(t, 1, 10, 1, 320);
    case_relu(t, 400);
    case_dropout(t, 0.25f, 500);
    case_dropout(t, 0.5f, 510);
    case_softmax_xent(t, 600);
}

static void test_cl_parity_all_ops(void **state) {
    (void)state;
    ht_error e;
    ocl_dev_info *devs = NULL;
    int n = 0;
    ocl_set_cache_dir(HT_TEST_TMP "/cl-cache");
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    if (n == 0) {
        printf("SKIPPED: no OpenCL platform found; the OpenCL ops are not tested here\n");
        skip();
    }
    int fails = 0;
    for (int i = 0; i < n; i++) {
        env *t = calloc(1, sizeof *t);
        assert_non_null(t);
        char label[300];
        snprintf(label, sizeof label, "%s (%s)", devs[i].spec, devs[i].name);
        t->spec = label;
        cl_program prog;
        int from_cache = 0;
        double t0 = ht_now();
        if (ocl_device_runtime(&devs[i], &t->ctx, &prog, &from_cache, &e) < 0)
            fail_msg("%s", e.msg);
        cl_int err;
        t->q = clCreateCommandQueue(t->ctx, devs[i].device, 0, &err);
        if (err != CL_SUCCESS) fail_msg("%s: clCreateCommandQueue: %s", label, ocl_error_name(err));
        if (ocl_ops_init(&t->o, t->ctx, t->q, prog, label, &e) < 0) fail_msg("%s", e.msg);
        run_all_ops(t);
        printf("%s: %d op checks failed (program %s, %.1f s)\n", label, t->fails,
               from_cache ? "from cache" : "built", ht_now() - t0);
        fails += t->fails;
        ocl_ops_free(&t->o);
        clReleaseCommandQueue(t->q);
        free(t);
    }
    free(devs);
    ocl_runtime_release_all();
    assert_int_equal(fails, 0);
}

// ocl_ops_init on a program that lacks kernels fails and names the first missing one.
static void test_cl_ops_init_missing_kernel(void **state) {
    (void)state;
    ht_error e;
    ocl_dev_info *devs = NULL;
    int n = 0;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    if (n == 0) {
        free(devs);
        printf("SKIPPED: no OpenCL platform found\n");
        skip();
    }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &devs[0].device, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    const char *src = "__kernel void fill(__global float *b, const float v, const uint n) {\n"
                      "    if (get_global_id(0) < n) b[get_global_id(0)] = v;\n}\n";
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(clBuildProgram(prog, 1, &devs[0].device, "-cl-std=CL1.2", NULL, NULL),
                     CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(ctx, devs[0].device, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    ocl_ops o;
    assert_int_equal(ocl_ops_init(&o, ctx, q, prog, "cl:test", &e), -1);
    printf("expected failure: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "im2col"));
    assert_non_null(strstr(e.msg, "cl:test"));
    assert_null(o.k_fill);  // released again on failure
    clReleaseCommandQueue(q);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    free(devs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cl_parity_all_ops),
        cmocka_unit_test(test_cl_ops_init_missing_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
