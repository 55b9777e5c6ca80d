// CPU convolution and pooling and their NCHW reference (ref.c): finite-difference gradient
// checks, the reference conv against a direct loop, thread-count agreement, accumulate
// semantics, known values of pooling's ties and "same" windows; the channels-last conv's thread
// agreement and the layout changes. The channels-last ops against the reference: the parity
// tests.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/fd.h"
#include "nn/isa_kernels.h"
#include "nn/layers.h"
#include "nn/gemm_bf16.h"
#include "tests/lib/ref.h"
#include "core/rng.h"
#include "tests/lib/parity.h"
#include "tests/lib/testutil.h"

// ---- conv2d ----

typedef struct conv_shape {
    int B, C, H, W, OC, K, stride, pad; // pad < 0: Keras "same" (layers.h), maybe asymmetric
} conv_shape;

typedef struct conv_case {
    conv_shape s;
    int OH, OW, nthreads;
    float *in, *w, *b, *out, *R, *ws;
    size_t nin, nw, nout;
} conv_case;

static void conv_case_init(conv_case *c, conv_shape s, int nthreads, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->nthreads = nthreads;
    if (s.pad < 0) { // the before-pad, and outputs that may need one more row/column after
        c->s.pad = same_pad_before(s.H, s.K, s.stride);
        assert_int_equal(c->s.pad, same_pad_before(s.W, s.K, s.stride));
        c->OH = same_out_dim(s.H, s.stride);
        c->OW = same_out_dim(s.W, s.stride);
    } else {
        c->OH = conv_out_dim(s.H, s.K, s.stride, s.pad);
        c->OW = conv_out_dim(s.W, s.K, s.stride, s.pad);
    }
    c->nin = (size_t)s.B * s.C * s.H * s.W;
    c->nw = (size_t)s.OC * s.C * s.K * s.K;
    c->nout = (size_t)s.B * s.OC * c->OH * c->OW;
    c->in = fill_uniform(c->nin, -1, 1, seed);
    c->w = fill_uniform(c->nw, -1, 1, seed + 1);
    c->b = fill_uniform(s.OC, -1, 1, seed + 2);
    c->R = fill_uniform(c->nout, -1, 1, seed + 3);
    c->out = malloc(c->nout * sizeof *c->out);
    // Exactly the advertised size, so ASan catches any write past it.
    c->ws = malloc(ref_conv2d_ws_floats(s.C, s.K, s.OC, c->OH, c->OW, nthreads) * sizeof *c->ws);
}

static void conv_case_free(conv_case *c) {
    free(c->in);
    free(c->w);
    free(c->b);
    free(c->R);
    free(c->out);
    free(c->ws);
}

static void conv_fwd(conv_case *c) {
    conv_shape s = c->s;
    ref_conv2d_forward(c->out, c->in, c->w, c->b, s.B, s.C, s.H, s.W, s.OC, s.K, s.stride,
                       s.pad, c->OH, c->OW, c->ws, c->nthreads);
}

static void conv_bwd(conv_case *c, float *din, float *dw, float *db, const float *dout) {
    conv_shape s = c->s;
    ref_conv2d_backward(din, dw, db, dout, c->in, c->w, s.B, s.C, s.H, s.W, s.OC, s.K,
                        s.stride, s.pad, c->OH, c->OW, c->ws, c->nthreads);
}

static double conv_loss(void *ctx) {
    conv_case *c = ctx;
    conv_fwd(c);
    return dot(c->out, c->R, c->nout);
}

// Direct convolution in double.
static void conv_direct(float *out, const conv_case *c) {
    conv_shape s = c->s;
    for (int n = 0; n < s.B; n++)
        for (int oc = 0; oc < s.OC; oc++)
            for (int oh = 0; oh < c->OH; oh++)
                for (int ow = 0; ow < c->OW; ow++) {
                    double acc = c->b[oc];
                    for (int ci = 0; ci < s.C; ci++)
                        for (int kh = 0; kh < s.K; kh++)
                            for (int kw = 0; kw < s.K; kw++) {
                                int ih = oh * s.stride - s.pad + kh;
                                int iw = ow * s.stride - s.pad + kw;
                                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                                acc += (double)c->in[((size_t)(n * s.C + ci) * s.H + ih) * s.W +
                                                     iw] *
                                       c->w[((size_t)(oc * s.C + ci) * s.K + kh) * s.K + kw];
                            }
                    out[((size_t)(n * s.OC + oc) * c->OH + oh) * c->OW + ow] = (float)acc;
                }
}

static const conv_shape conv_shapes[] = {
    // B  C  H  W OC  K  s  p
    {2, 1, 6, 7, 2, 3, 1, 1},  // K=3 "same"
    {1, 2, 7, 7, 3, 5, 1, 2},  // K=5 "same"
    {2, 3, 7, 8, 2, 3, 2, 0},  // stride 2, no padding, a leftover column
    {3, 2, 5, 6, 4, 2, 2, 1},  // stride 2 with padding, even K
    {2, 2, 4, 5, 3, 3, 3, 2},  // stride 3 with pad 2
    {2, 2, 4, 1, 3, 3, 3, 2},  // W=1: kernel columns 0 and 1 only ever see padding
    {2, 1, 3, 1, 2, 3, 2, 1},  // W=1, pad 1, stride 2: kernel column 2 only sees padding
    {3, 4, 5, 5, 5, 1, 1, 0},  // 1x1
    // Keras "same" (pad -1): the odd row/column of padding goes after.
    {2, 3, 8, 8, 2, 3, 2, -1}, // stride 2, even size: pad 0 before, 1 after
    {2, 2, 7, 7, 3, 3, 2, -1}, // stride 2, odd size: pad 1 before and after
    {2, 2, 6, 6, 2, 4, 1, -1}, // even K, stride 1: pad 1 before, 2 after
    {1, 3, 9, 9, 2, 5, 3, -1}, // stride 3: pad 1 before, 1 after
};
#define N_CONV_SHAPES (sizeof conv_shapes / sizeof conv_shapes[0])

static void test_conv_matches_direct(void **state) {
    (void)state;
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        conv_case c;
        conv_case_init(&c, conv_shapes[k], 2, 100 + k);
        float *ref = malloc(c.nout * sizeof *ref);
        conv_fwd(&c);
        conv_direct(ref, &c);
        char name[64];
        snprintf(name, sizeof name, "conv shape %zu out", k);
        if (!check_tensor(c.out, ref, c.nout, TOL_CONV_REF, REF_FLOOR, name)) fail_msg("%s", name);
        free(ref);
        conv_case_free(&c);
    }
}

static void test_conv_grad_fd(void **state) {
    (void)state;
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        conv_case c;
        conv_case_init(&c, conv_shapes[k], 2, 200 + k);
        float *din = malloc(c.nin * sizeof *din), *dw = calloc(c.nw, sizeof *dw);
        float *db = calloc(c.s.OC, sizeof *db);
        conv_fwd(&c);
        conv_bwd(&c, din, dw, db, c.R);

        float *num = malloc((c.nin > c.nw ? c.nin : c.nw) * sizeof *num);
        char name[64];
        fd_grad(num, c.in, c.nin, conv_loss, &c);
        snprintf(name, sizeof name, "conv shape %zu din", k);
        expect_grad(din, num, c.nin, TOL_CONV_FD, name);
        fd_grad(num, c.w, c.nw, conv_loss, &c);
        snprintf(name, sizeof name, "conv shape %zu dw", k);
        expect_grad(dw, num, c.nw, TOL_CONV_FD, name);
        fd_grad(num, c.b, c.s.OC, conv_loss, &c);
        snprintf(name, sizeof name, "conv shape %zu db", k);
        expect_grad(db, num, c.s.OC, TOL_CONV_FD, name);

        free(num);
        free(din);
        free(dw);
        free(db);
        conv_case_free(&c);
    }
}

// dw/db accumulate (+=) across calls; din is overwritten; din==NULL leaves dw/db unchanged.
static void test_conv_accumulates(void **state) {
    (void)state;
    conv_case c;
    conv_case_init(&c, (conv_shape){3, 2, 6, 6, 3, 3, 1, 1}, 2, 300);
    float *dw0 = fill_uniform(c.nw, -1, 1, 301), *db0 = fill_uniform(c.s.OC, -1, 1, 302);
    float *dw = malloc(c.nw * sizeof *dw), *db = malloc(c.s.OC * sizeof *db);
    float *dwn = malloc(c.nw * sizeof *dwn), *dbn = malloc(c.s.OC * sizeof *dbn);
    float *din1 = malloc(c.nin * sizeof *din1), *din2 = malloc(c.nin * sizeof *din2);
    memcpy(dw, dw0, c.nw * sizeof *dw);
    memcpy(db, db0, c.s.OC * sizeof *db);

    conv_bwd(&c, din1, dw, db, c.R);
    float *g1w = malloc(c.nw * sizeof *g1w), *g1b = malloc(c.s.OC * sizeof *g1b);
    for (size_t i = 0; i < c.nw; i++) g1w[i] = 2 * (dw[i] - dw0[i]);
    for (int i = 0; i < c.s.OC; i++) g1b[i] = 2 * (db[i] - db0[i]);
    memset(din2, 0x7f, c.nin * sizeof *din2); // garbage that must be overwritten
    conv_bwd(&c, din2, dw, db, c.R);
    for (size_t i = 0; i < c.nw; i++) dw[i] -= dw0[i];
    for (int i = 0; i < c.s.OC; i++) db[i] -= db0[i];
    assert_true(check_tensor(dw, g1w, c.nw, TOL_ACCUM, 1.0f, "conv dw twice"));
    assert_true(check_tensor(db, g1b, c.s.OC, TOL_ACCUM, 1.0f, "conv db twice"));
    assert_memory_equal(din1, din2, c.nin * sizeof *din1);

    // First layer: din == NULL still accumulates dw/db by one gradient.
    memcpy(dwn, dw0, c.nw * sizeof *dwn);
    memcpy(dbn, db0, c.s.OC * sizeof *dbn);
    conv_bwd(&c, NULL, dwn, dbn, c.R);
    for (size_t i = 0; i < c.nw; i++) dwn[i] = 2 * (dwn[i] - dw0[i]);
    assert_true(check_tensor(dwn, g1w, c.nw, TOL_ACCUM, 1.0f, "conv dw din=NULL"));

    free(dw0), free(db0), free(dw), free(db), free(dwn), free(dbn);
    free(din1), free(din2), free(g1w), free(g1b);
    conv_case_free(&c);
}

// nthreads=1 and nthreads=2 agree; a repeated nthreads=2 run is bit-identical.
static void test_conv_threads_agree(void **state) {
    (void)state;
    const conv_shape s = {7, 3, 9, 9, 4, 3, 1, 1};
    conv_case c1, c2;
    conv_case_init(&c1, s, 1, 400);
    conv_case_init(&c2, s, 2, 400);
    float *din[3], *dw[3], *db[3];
    for (int r = 0; r < 3; r++) {
        din[r] = malloc(c1.nin * sizeof(float));
        dw[r] = calloc(c1.nw, sizeof(float));
        db[r] = calloc(s.OC, sizeof(float));
    }
    conv_fwd(&c1);
    conv_fwd(&c2);
    assert_true(check_tensor(c1.out, c2.out, c1.nout, TOL_THREADS, 1.0f, "conv out 1 vs 2"));
    conv_bwd(&c1, din[0], dw[0], db[0], c1.R);
    conv_bwd(&c2, din[1], dw[1], db[1], c2.R);
    conv_bwd(&c2, din[2], dw[2], db[2], c2.R);
    assert_true(check_tensor(din[0], din[1], c1.nin, TOL_THREADS, 1.0f, "conv din 1 vs 2"));
    assert_true(check_tensor(dw[0], dw[1], c1.nw, TOL_THREADS_SUM, 1.0f, "conv dw 1 vs 2"));
    assert_true(check_tensor(db[0], db[1], s.OC, TOL_THREADS_SUM, 1.0f, "conv db 1 vs 2"));
    assert_memory_equal(dw[1], dw[2], c1.nw * sizeof(float));
    assert_memory_equal(db[1], db[2], s.OC * sizeof(float));
    for (int r = 0; r < 3; r++) free(din[r]), free(dw[r]), free(db[r]);
    conv_case_free(&c1);
    conv_case_free(&c2);
}

// ---- max and average pooling ----

typedef struct pool_case {
    int avg; // 0 max pooling, 1 average pooling, 2 global average pooling
    int B, C, H, W, K, stride, pad, OH, OW;
    float *in, *out, *R;
    int32_t *argmax;
    size_t nin, nout;
} pool_case;

static double pool_loss(void *ctx) {
    pool_case *p = ctx;
    if (p->avg == 2)
        ref_gavgpool_forward(p->out, p->in, p->B, p->C, p->H * p->W);
    else if (p->avg)
        ref_avgpool_forward(p->out, p->in, p->B, p->C, p->H, p->W, p->K, p->stride, p->pad,
                            p->OH, p->OW);
    else
        ref_maxpool_forward(p->out, p->argmax, p->in, p->B, p->C, p->H, p->W, p->K, p->stride,
                            p->pad, p->OH, p->OW, 2);
    return dot(p->out, p->R, p->nout);
}

// same: Keras "same" padding (windows clipped at both ends), else valid.
static void pool_fd(int avg, int B, int C, int H, int W, int K, int stride, int same,
                    uint64_t seed) {
    pool_case p = {.avg = avg, .B = B, .C = C, .H = H, .W = W, .K = K, .stride = stride};
    if (avg == 2) {
        p.OH = p.OW = 1;
    } else if (same) {
        p.pad = same_pad_before(H, K, stride);
        assert_int_equal(p.pad, same_pad_before(W, K, stride));
        p.OH = same_out_dim(H, stride);
        p.OW = same_out_dim(W, stride);
    } else {
        p.OH = conv_out_dim(H, K, stride, 0);
        p.OW = conv_out_dim(W, K, stride, 0);
    }
    p.nin = (size_t)B * C * H * W;
    p.nout = (size_t)B * C * p.OH * p.OW;
    // Distinct values 0.05 apart (a shuffled ramp): no window has a tie within 2*FD_EPS.
    p.in = malloc(p.nin * sizeof *p.in);
    for (size_t i = 0; i < p.nin; i++) p.in[i] = 0.05f * (float)i - 1.0f;
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = p.nin - 1; i > 0; i--) {
        size_t j = ht_rng_below(&r, (uint32_t)(i + 1));
        float t = p.in[i];
        p.in[i] = p.in[j];
        p.in[j] = t;
    }
    p.R = fill_uniform(p.nout, -1, 1, seed + 1);
    p.out = malloc(p.nout * sizeof *p.out);
    p.argmax = malloc(p.nout * sizeof *p.argmax);
    float *din = malloc(p.nin * sizeof *din), *num = malloc(p.nin * sizeof *num);

    pool_loss(&p);
    memset(din, 0x7f, p.nin * sizeof *din); // must be overwritten, not added to
    if (avg == 2)
        ref_gavgpool_backward(din, p.R, B, C, H * W);
    else if (avg)
        ref_avgpool_backward(din, p.R, B, C, H, W, K, stride, p.pad, p.OH, p.OW);
    else
        ref_maxpool_backward(din, p.R, p.argmax, B, C, H, W, p.OH, p.OW, 2);
    fd_grad(num, p.in, p.nin, pool_loss, &p);
    char name[64];
    snprintf(name, sizeof name, "%s K=%d s=%d%s din",
             avg == 2 ? "global avgpool" : avg ? "avgpool" : "maxpool", K, stride,
             same ? " same" : "");
    expect_grad(din, num, p.nin, TOL_POOL_FD, name);

    free(p.in), free(p.R), free(p.out), free(p.argmax), free(din), free(num);
}

static void test_maxpool_grad_fd(void **state) {
    (void)state;
    pool_fd(0, 2, 3, 6, 8, 2, 2, 0, 500); // the usual 2x2
    pool_fd(0, 2, 2, 7, 9, 3, 2, 0, 501); // overlapping windows: shared winners receive sums
    pool_fd(0, 2, 2, 7, 7, 2, 2, 1, 502); // "same": the last window clipped (pad 0 + 1)
    pool_fd(0, 2, 2, 8, 8, 3, 2, 1, 503); // "same" overlapping, pad 0 before, 1 after
    pool_fd(0, 1, 3, 7, 7, 3, 1, 1, 504); // "same" stride 1: pad 1 at both ends
}

static void test_avgpool_grad_fd(void **state) {
    (void)state;
    pool_fd(1, 2, 3, 6, 8, 2, 2, 0, 510); // the usual 2x2
    pool_fd(1, 2, 2, 7, 9, 3, 2, 0, 511); // overlapping windows
    pool_fd(1, 2, 2, 7, 7, 2, 2, 1, 512); // "same": clipped windows average fewer inputs
    pool_fd(1, 2, 2, 8, 8, 3, 2, 1, 513); // "same" overlapping, pad 0 before, 1 after
    pool_fd(1, 1, 3, 7, 7, 3, 1, 1, 514); // "same" stride 1: pad 1 at both ends
    pool_fd(2, 2, 3, 2, 3, 0, 0, 0, 515); // global average pooling (a small plane: din = R/6)
}

// Known values: "same" average pooling does not count the padding; "same" max pooling never
// picks it (inputs all negative, padding would be 0).
static void test_pool_same_known(void **state) {
    (void)state;
    // 1 plane 3x3, K=2 stride 2, same: out 2x2, pad 0 before, 1 after.
    const float in[9] = {-1, -2, -3, //
                         -4, -5, -6, //
                         -7, -8, -9};
    assert_int_equal(same_pad_before(3, 2, 2), 0);
    assert_int_equal(same_out_dim(3, 2), 2);
    float out[4];
    int32_t am[4];
    ref_avgpool_forward(out, in, 1, 1, 3, 3, 2, 2, 0, 2, 2);
    const float want_avg[4] = {-3, -4.5f, -7.5f, -9};
    assert_memory_equal(out, want_avg, sizeof out);
    ref_maxpool_forward(out, am, in, 1, 1, 3, 3, 2, 2, 0, 2, 2, 1);
    const float want_max[4] = {-1, -3, -7, -9};
    const int32_t want_am[4] = {0, 2, 6, 8};
    assert_memory_equal(out, want_max, sizeof out);
    assert_memory_equal(am, want_am, sizeof am);
    const float dout[4] = {4, 2, 2, 1};
    float din[9];
    ref_avgpool_backward(din, dout, 1, 1, 3, 3, 2, 2, 0, 2, 2);
    const float want_din[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_memory_equal(din, want_din, sizeof din);
}

// A conv without a bias (Keras use_bias = False): the reference takes b NULL and db NULL,
// its gradients are the finite differences', and the output is the biased one minus the bias.
static void test_conv_no_bias(void **state) {
    (void)state;
    conv_case c;
    conv_case_init(&c, (conv_shape){2, 3, 8, 8, 4, 3, 2, -1}, 1, 900);
    float *biased = malloc(c.nout * sizeof *biased);
    conv_fwd(&c);
    memcpy(biased, c.out, c.nout * sizeof *biased);
    free(c.b);
    c.b = NULL;
    conv_fwd(&c);
    const int P = c.OH * c.OW;
    float *bias = fill_uniform(c.s.OC, -1, 1, 902); // conv_case_init's bias draw
    for (int n = 0; n < c.s.B; n++)
        for (int oc = 0; oc < c.s.OC; oc++)
            for (int p = 0; p < P; p++) {
                const size_t i = ((size_t)n * c.s.OC + oc) * P + p;
                assert_true(fabsf(biased[i] - bias[oc] - c.out[i]) <= 1e-5f);
            }
    float *din = malloc(c.nin * sizeof *din), *dw = calloc(c.nw, sizeof *dw);
    conv_bwd(&c, din, dw, NULL, c.R);
    float *num = malloc((c.nin > c.nw ? c.nin : c.nw) * sizeof *num);
    fd_grad(num, c.in, c.nin, conv_loss, &c);
    expect_grad(din, num, c.nin, TOL_CONV_FD, "conv no bias din");
    fd_grad(num, c.w, c.nw, conv_loss, &c);
    expect_grad(dw, num, c.nw, TOL_CONV_FD, "conv no bias dw");
    free(num), free(din), free(dw), free(bias), free(biased);
    conv_case_free(&c);
}

// Known values: first maximum wins a tie; an input that wins two overlapping windows gets
// both gradients.
static void test_maxpool_ties_and_overlap(void **state) {
    (void)state;
    // 1 plane 3x3, K=2 stride 1 -> 2x2 outputs.
    const float in[9] = {1, 5, 5,  //
                         2, 5, 0,  //
                         3, 4, 4};
    float out[4];
    int32_t am[4];
    ref_maxpool_forward(out, am, in, 1, 1, 3, 3, 2, 1, 0, 2, 2, 1);
    const int32_t want_am[4] = {1, 1, 4, 4};
    const float want_out[4] = {5, 5, 5, 5};
    assert_memory_equal(am, want_am, sizeof am);
    assert_memory_equal(out, want_out, sizeof out);
    const float dout[4] = {1, 2, 3, 4};
    float din[9];
    ref_maxpool_backward(din, dout, am, 1, 1, 3, 3, 2, 2, 1);
    const float want_din[9] = {0, 3, 0, 0, 7, 0, 0, 0, 0};
    assert_memory_equal(din, want_din, sizeof din);
}

// ---- channels-last (NHWC) on its own; its parity with the reference: test_parity_cpu ----

// Every pad channel (c >= C) of a (B*HW, Cs) tensor is exactly zero.
static int pad_channels_zero(const float *x, size_t rows, int C, int Cs) {
    for (size_t r = 0; r < rows; r++)
        for (int c = C; c < Cs; c++)
            if (x[r * Cs + c] != 0.0f) return 0;
    return 1;
}

typedef struct nhwc_shape {
    int B, C, Cs, H, W, OC, K, stride, pad;
} nhwc_shape;

typedef struct nhwc_run {
    float *out, *din, *dw, *db; // out and din in NCHW order; dw, db start from dw0, db0
} nhwc_run;

// Forward and backward of shape s through the NHWC functions with `nthreads` threads, on the
// NCHW tensors in/w/b/R (R the output gradient). Pad channels of the inputs hold NaN, which
// must never reach a result; the outputs' pad channels must be zero.
static nhwc_run nhwc_conv_run(const nhwc_shape *s, conv_impl impl, int relu, int nthreads,
                              const float *in,
                              const float *w, const float *b, const float *R, const float *dw0,
                              const float *db0) {
    const int OH = conv_out_dim(s->H, s->K, s->stride, s->pad);
    const int OW = conv_out_dim(s->W, s->K, s->stride, s->pad), OCs = conv_cpad(s->OC);
    const conv_geom g = {.C = s->C, .Cs = s->Cs, .H = s->H, .W = s->W, .OC = s->OC, .K = s->K,
                         .stride = s->stride, .pad = s->pad, .OH = OH, .OW = OW,
                         .fwd = impl, .din = impl, .dw = impl};
    const size_t nin = (size_t)s->B * s->C * s->H * s->W, nout = (size_t)s->B * s->OC * OH * OW;
    const size_t nw = (size_t)s->OC * s->C * s->K * s->K;
    const size_t in_rows = (size_t)s->B * s->H * s->W, out_rows = (size_t)s->B * OH * OW;
    float *xin = malloc(in_rows * s->Cs * sizeof *xin);
    float *xout = malloc(out_rows * OCs * sizeof *xout);
    float *xR = malloc(out_rows * OCs * sizeof *xR), *xdin = malloc(in_rows * s->Cs * sizeof *xdin);
    // Exactly the advertised size, so ASan catches any write past it.
    float *ws = malloc(conv2d_nhwc_ws_floats(&g, nthreads) * sizeof *ws);
    ref_to_nhwc(xin, in, s->B, s->C, s->Cs, s->H * s->W, NAN);
    ref_to_nhwc(xR, R, s->B, s->OC, OCs, OH * OW, NAN);
    nhwc_run r = {malloc(nout * sizeof(float)), malloc(nin * sizeof(float)),
                  malloc(nw * sizeof(float)), malloc(s->OC * sizeof(float))};
    memcpy(r.dw, dw0, nw * sizeof(float));
    memcpy(r.db, db0, s->OC * sizeof(float));
    memset(xdin, 0x7f, in_rows * s->Cs * sizeof *xdin); // garbage that must be overwritten
    conv2d_nhwc_forward(xout, xin, w, b, s->B, &g, relu, ws, nthreads);
    conv2d_nhwc_backward(xdin, r.dw, r.db, xR, relu ? xout : NULL, xin, w, s->B, &g, ws,
                         nthreads);
    assert_true(pad_channels_zero(xout, out_rows, s->OC, OCs));
    assert_true(pad_channels_zero(xdin, in_rows, s->C, s->Cs));
    ref_to_nchw(r.out, xout, s->B, s->OC, OCs, OH * OW);
    ref_to_nchw(r.din, xdin, s->B, s->C, s->Cs, s->H * s->W);
    free(xin), free(xout), free(xR), free(xdin), free(ws);
    return r;
}

static void nhwc_run_free(nhwc_run *r) { free(r->out), free(r->din), free(r->dw), free(r->db); }

// One thread and two agree (out and din bit for bit: each sample is computed alone; dw and db
// up to the order of the per-thread sums), and two runs with two threads are bit-identical.
static void test_conv_nhwc_threads_agree(void **state) {
    (void)state;
    const nhwc_shape s = {7, 32, 32, 9, 9, 48, 3, 1, 1};
    const size_t nin = (size_t)s.B * s.C * s.H * s.W, nout = (size_t)s.B * s.OC * s.H * s.W;
    const size_t nw = (size_t)s.OC * s.C * 9;
    float *in = fill_uniform(nin, -1, 1, 1700), *w = fill_uniform(nw, -1, 1, 1701);
    float *b = fill_uniform(s.OC, -1, 1, 1702), *R = fill_uniform(nout, -1, 1, 1703);
    float *dw0 = calloc(nw, sizeof *dw0), *db0 = calloc(s.OC, sizeof *db0);
    nhwc_run r1 = nhwc_conv_run(&s, CONV_DIRECT, 1, 1, in, w, b, R, dw0, db0);
    nhwc_run r2 = nhwc_conv_run(&s, CONV_DIRECT, 1, 2, in, w, b, R, dw0, db0);
    nhwc_run r3 = nhwc_conv_run(&s, CONV_DIRECT, 1, 2, in, w, b, R, dw0, db0);
    assert_memory_equal(r1.out, r2.out, nout * sizeof(float));
    assert_memory_equal(r1.din, r2.din, nin * sizeof(float));
    assert_true(check_tensor(r1.dw, r2.dw, nw, TOL_THREADS_SUM, 1.0f, "nhwc dw 1 vs 2"));
    assert_true(check_tensor(r1.db, r2.db, s.OC, TOL_THREADS_SUM, 1.0f, "nhwc db 1 vs 2"));
    assert_memory_equal(r2.dw, r3.dw, nw * sizeof(float));
    assert_memory_equal(r2.db, r3.db, s.OC * sizeof(float));
    nhwc_run_free(&r1), nhwc_run_free(&r2), nhwc_run_free(&r3);
    free(in), free(w), free(b), free(R), free(dw0), free(db0);
}

// Convolutions run as GEMMs over the batch (CONV_GEMM) against the reference: 1x1 at stride 1
// (rows read in place, more of them than one chunk of the backward) and stride 2 (the input
// gradient scattered, the skipped positions zero), 3x3 and 7x7 windows reaching into the
// padding and overlapping, with and without a fused relu, pad channels on both sides.
static void test_conv_nhwc_gemm(void **state) {
    (void)state;
    static const nhwc_shape shapes[] = {
        // B  C  Cs   H   W  OC K  s  p
        {3, 20, 32, 16, 16, 24, 1, 1, 0}, // 768 output rows: two chunks of the backward
        {2, 17, 32, 7, 9, 33, 1, 2, 0},   // stride 2, odd sizes (4x5 outputs)
        {5, 48, 48, 2, 2, 64, 1, 1, 0},   // ResNet's last stage: few positions, many channels
        {3, 20, 32, 4, 4, 24, 3, 1, 1},   // 3x3 "same" on 4x4: windows reach into the padding
        {2, 5, 16, 7, 6, 9, 3, 2, 1},     // 3x3 stride 2 (4x3 outputs): windows overlap
        {2, 3, 16, 9, 9, 8, 7, 2, 3},     // 7x7 stride 2 on 3 channels (ResNet's stem, small)
        // Taps that only read padding, left out (gemm_trim): 3x3 and 5x5 "same" on 1x1 (the
        // middle tap alone, read in place), 5x5 on 2x2 (the middle 3x3), 3x3 stride 2 on 2x2
        // (the lower-right 2x2, no padding left)
        {3, 40, 48, 1, 1, 36, 3, 1, 1},
        {2, 20, 32, 1, 1, 24, 5, 1, 2},
        {2, 12, 16, 2, 2, 10, 5, 1, 2},
        {2, 10, 16, 2, 2, 12, 3, 2, 1},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int relu = 0; relu < 2; relu++) {
            const nhwc_shape s = shapes[k];
            const int OH = conv_out_dim(s.H, s.K, s.stride, s.pad);
            const int OW = conv_out_dim(s.W, s.K, s.stride, s.pad);
            const size_t nin = (size_t)s.B * s.C * s.H * s.W, nout = (size_t)s.B * s.OC * OH * OW;
            const size_t nw = (size_t)s.OC * s.C * s.K * s.K;
            const uint64_t seed = 2100 + 10 * k + relu;
            float *in = fill_uniform(nin, -1, 1, seed), *w = fill_uniform(nw, -1, 1, seed + 1);
            float *b = fill_uniform(s.OC, -1, 1, seed + 2), *R = fill_uniform(nout, -1, 1, seed + 3);
            // The gradients are added to what dw and db hold (a trimmed kernel's other taps
            // must keep theirs).
            float *dw0 = fill_uniform(nw, -1, 1, seed + 4), *db0 = fill_uniform(s.OC, -1, 1, seed + 5);
            nhwc_run r = nhwc_conv_run(&s, CONV_GEMM, relu, 2, in, w, b, R, dw0, db0);
            // One thread: the same up to the rounding of BLAS's own blocking of a product
            // split otherwise (its kernels vary with the block's size); the same thread count
            // twice: the same bits.
            nhwc_run r1 = nhwc_conv_run(&s, CONV_GEMM, relu, 1, in, w, b, R, dw0, db0);
            nhwc_run r2 = nhwc_conv_run(&s, CONV_GEMM, relu, 2, in, w, b, R, dw0, db0);
            assert_memory_equal(r.out, r2.out, nout * sizeof(float));
            assert_memory_equal(r.din, r2.din, nin * sizeof(float));
            assert_memory_equal(r.dw, r2.dw, nw * sizeof(float));
            nhwc_run_free(&r2);
            assert_true(check_tensor(r.out, r1.out, nout, TOL_CONV_REF, REF_FLOOR, "gemm out 1 vs 2"));
            assert_true(check_tensor(r.din, r1.din, nin, TOL_CONV_REF, REF_FLOOR, "gemm din 1 vs 2"));
            assert_true(check_tensor(r.dw, r1.dw, nw, TOL_GEMM_SUM, 1.0f, "gemm dw 1 vs 2"));
            assert_true(check_tensor(r.db, r1.db, s.OC, TOL_GEMM_SUM, 1.0f, "gemm db 1 vs 2"));
            nhwc_run_free(&r1);
            // The reference: NCHW im2col + SGEMM, the relu and its mask applied around it.
            float *rws = malloc(ref_conv2d_ws_floats(s.C, s.K, s.OC, OH, OW, 1) * sizeof *rws);
            float *out = malloc(nout * sizeof *out), *din = malloc(nin * sizeof *din);
            float *dw = malloc(nw * sizeof *dw), *db = malloc(s.OC * sizeof *db);
            memcpy(dw, dw0, nw * sizeof *dw);
            memcpy(db, db0, s.OC * sizeof *db);
            ref_conv2d_forward(out, in, w, b, s.B, s.C, s.H, s.W, s.OC, s.K, s.stride, s.pad, OH,
                               OW, rws, 1);
            for (size_t i = 0; relu && i < nout; i++) {
                if (!(out[i] > 0.0f)) R[i] = 0.0f;
                out[i] = out[i] > 0.0f ? out[i] : 0.0f;
            }
            ref_conv2d_backward(din, dw, db, R, in, w, s.B, s.C, s.H, s.W, s.OC, s.K, s.stride,
                                s.pad, OH, OW, rws, 1);
            char name[64];
            snprintf(name, sizeof name, "gemm shape %zu relu %d", k, relu);
            if (!check_tensor(r.out, out, nout, TOL_CONV_REF, REF_FLOOR, name) ||
                !check_tensor(r.din, din, nin, TOL_CONV_REF, REF_FLOOR, name) ||
                !check_tensor(r.dw, dw, nw, TOL_GEMM_SUM, REF_FLOOR, name) ||
                !check_tensor(r.db, db, s.OC, TOL_GEMM_SUM, REF_FLOOR, name))
                fail_msg("%s", name);
            nhwc_run_free(&r);
            free(in), free(w), free(b), free(R), free(dw0), free(db0), free(rws), free(out);
            free(din), free(dw), free(db);
        }
}

// The same GEMMs with bfloat16 factors (CONV_GEMM_BF16, --precision bf16): given factors that
// bfloat16 holds exactly (in, w and the output gradient rounded to it first), every product is
// float32's and only the order of the sums differs, so float32's GEMMs are the reference within
// the tolerances above; the AVX512_BF16 kernel where the CPU has it, and the emulation.
static void test_conv_nhwc_gemm_bf16(void **state) {
    (void)state;
    static const nhwc_shape shapes[] = {
        // B  C  Cs   H   W  OC K  s  p
        {3, 20, 32, 16, 16, 24, 1, 1, 0},
        {2, 17, 32, 7, 9, 33, 1, 2, 0},
        {5, 48, 48, 2, 2, 64, 1, 1, 0},
        {3, 20, 32, 4, 4, 24, 3, 1, 1},
        {2, 3, 16, 9, 9, 8, 7, 2, 3},
        {3, 40, 48, 1, 1, 36, 3, 1, 1},
    };
    for (int emul = 0; emul < 2; emul++) {
        if (!emul && !gemm_bf16_native()) continue; // the emulation below
        gemm_bf16_emulate(emul);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int relu = 0; relu < 2; relu++) {
                const nhwc_shape s = shapes[k];
                const int OH = conv_out_dim(s.H, s.K, s.stride, s.pad);
                const int OW = conv_out_dim(s.W, s.K, s.stride, s.pad);
                const size_t nin = (size_t)s.B * s.C * s.H * s.W;
                const size_t nout = (size_t)s.B * s.OC * OH * OW;
                const size_t nw = (size_t)s.OC * s.C * s.K * s.K;
                const uint64_t seed = 2300 + 10 * k + relu;
                float *in = fill_uniform(nin, -1, 1, seed), *w = fill_uniform(nw, -1, 1, seed + 1);
                float *b = fill_uniform(s.OC, -1, 1, seed + 2);
                float *R = fill_uniform(nout, -1, 1, seed + 3);
                float *dw0 = fill_uniform(nw, -1, 1, seed + 4);
                float *db0 = fill_uniform(s.OC, -1, 1, seed + 5);
                for (size_t i = 0; i < nin; i++) in[i] = bf16_round(in[i]);
                for (size_t i = 0; i < nw; i++) w[i] = bf16_round(w[i]);
                for (size_t i = 0; i < nout; i++) R[i] = bf16_round(R[i]);
                nhwc_run f = nhwc_conv_run(&s, CONV_GEMM, relu, 2, in, w, b, R, dw0, db0);
                nhwc_run h = nhwc_conv_run(&s, CONV_GEMM_BF16, relu, 2, in, w, b, R, dw0, db0);
                char name[80];
                snprintf(name, sizeof name, "bf16 gemm shape %zu relu %d%s", k, relu,
                         emul ? " (emulated)" : "");
                assert_true(check_tensor(h.out, f.out, nout, TOL_CONV_REF, REF_FLOOR, name));
                assert_true(check_tensor(h.din, f.din, nin, TOL_CONV_REF, REF_FLOOR, name));
                assert_true(check_tensor(h.dw, f.dw, nw, TOL_GEMM_SUM, 1.0f, name));
                assert_true(check_tensor(h.db, f.db, s.OC, TOL_GEMM_SUM, 1.0f, name));
                nhwc_run_free(&f), nhwc_run_free(&h);
                free(in), free(w), free(b), free(R), free(dw0), free(db0);
            }
    }
    gemm_bf16_emulate(0);
    // Factors with all of float's bits: bfloat16's outputs are not float32's (the rounding is
    // there), off by about 2^-9 of the terms' magnitude, far more than the tolerance above.
    const nhwc_shape s = shapes[0];
    const size_t nin = (size_t)s.B * s.C * s.H * s.W, nout = (size_t)s.B * s.OC * s.H * s.W;
    const size_t nw = (size_t)s.OC * s.C;
    float *in = fill_uniform(nin, -1, 1, 2390), *w = fill_uniform(nw, -1, 1, 2391);
    float *R = fill_uniform(nout, -1, 1, 2392), *z = calloc(nw, sizeof *z);
    nhwc_run f = nhwc_conv_run(&s, CONV_GEMM, 0, 2, in, w, NULL, R, z, z);
    nhwc_run h = nhwc_conv_run(&s, CONV_GEMM_BF16, 0, 2, in, w, NULL, R, z, z);
    double worst = 0;
    for (size_t i = 0; i < nout; i++) worst = fmax(worst, fabs((double)h.out[i] - f.out[i]));
    assert_true(worst > 10 * TOL_CONV_REF * REF_FLOOR);
    nhwc_run_free(&f), nhwc_run_free(&h);
    free(in), free(w), free(R), free(z);
}

// Every kernel set this CPU runs (isa_kernels.h: AVX-512, AVX2, SSE2 on x86), chosen in
// turn: direct convolutions (3x3, 5x5, stride 2, one input channel unpadded, output channels
// that fill no whole number of vectors) against the reference and the widest set's within
// float rounding (the sets differ only in FMA against multiply-then-add), F(4x4,3x3)'s within
// its parity bound (a rounding difference in the transformed domain comes back amplified:
// 3.9e-5 measured between SSE2's and AVX2's). By default the widest set runs.
static void test_conv_kernel_sets(void **state) {
    (void)state;
    static const nhwc_shape shapes[] = {
        // B  C  Cs   H   W  OC K  s  p
        {3, 20, 32, 9, 9, 40, 3, 1, 1}, // 40 outputs: 2.5 vectors of 16, 5 of 8, 10 of 4
        {2, 17, 32, 8, 7, 20, 3, 2, 1}, // stride 2: the input gradient scattered
        {2, 1, 1, 12, 12, 24, 5, 1, 2}, // one input channel, not padded (a first layer)
        {2, 48, 48, 14, 14, 32, 3, 1, 1},
    };
    const isa_kernels *sets[8];
    const int n = isa_kernels_supported(sets, 8);
    assert_true(n >= 1);
    if (!getenv("HETRAIN_ISA")) assert_ptr_equal(isa_kernels_active(), sets[0]);
    for (int i = 1; i < n; i++) assert_true(sets[i]->vl < sets[i - 1]->vl);
#if defined(__x86_64__)
    assert_string_equal(sets[n - 1]->isa, "sse2");
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        assert_true(sets[0]->vl >= 8);
#endif
    const isa_kernels *was = isa_kernels_active();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int impl = 0; impl < 2; impl++) {
            const nhwc_shape s = shapes[k];
            const conv_impl ci = impl ? CONV_WINO4 : CONV_DIRECT;
            const int OH = conv_out_dim(s.H, s.K, s.stride, s.pad);
            const int OW = conv_out_dim(s.W, s.K, s.stride, s.pad);
            const conv_geom g = {.H = s.H, .W = s.W, .K = s.K, .stride = s.stride, .pad = s.pad,
                                 .OH = OH, .OW = OW};
            if (impl && !conv2d_wino_impl_ok(&g, ci, CONV_DIR_FWD)) continue;
            const size_t nin = (size_t)s.B * s.C * s.H * s.W, nout = (size_t)s.B * s.OC * OH * OW;
            const size_t nw = (size_t)s.OC * s.C * s.K * s.K;
            const uint64_t seed = 2500 + 10 * k;
            float *in = fill_uniform(nin, -1, 1, seed), *w = fill_uniform(nw, -1, 1, seed + 1);
            float *b = fill_uniform(s.OC, -1, 1, seed + 2);
            float *R = fill_uniform(nout, -1, 1, seed + 3);
            float *dw0 = calloc(nw, sizeof *dw0), *db0 = calloc(s.OC, sizeof *db0);
            float *rws = malloc(ref_conv2d_ws_floats(s.C, s.K, s.OC, OH, OW, 1) * sizeof *rws);
            float *out = malloc(nout * sizeof *out), *din = malloc(nin * sizeof *din);
            float *dw = malloc(nw * sizeof *dw), *db = malloc(s.OC * sizeof *db);
            memcpy(dw, dw0, nw * sizeof *dw);
            memcpy(db, db0, s.OC * sizeof *db);
            ref_conv2d_forward(out, in, w, b, s.B, s.C, s.H, s.W, s.OC, s.K, s.stride, s.pad, OH,
                               OW, rws, 1);
            ref_conv2d_backward(din, dw, db, R, in, w, s.B, s.C, s.H, s.W, s.OC, s.K, s.stride,
                                s.pad, OH, OW, rws, 1);
            const float tol = impl ? TOL_WINO : TOL_CONV_REF;
            const float tol_sum = impl ? TOL_WINO : TOL_GEMM_SUM;
            nhwc_run first = {0};
            for (int i = 0; i < n; i++) {
                isa_kernels_set(sets[i]);
                nhwc_run r = nhwc_conv_run(&s, ci, 0, 2, in, w, b, R, dw0, db0);
                char name[96];
                snprintf(name, sizeof name, "%s shape %zu %s", sets[i]->isa, k,
                         impl ? "winograd" : "direct");
                if (!check_tensor(r.out, out, nout, tol, REF_FLOOR, name) ||
                    !check_tensor(r.din, din, nin, tol, REF_FLOOR, name) ||
                    !check_tensor(r.dw, dw, nw, tol_sum, REF_FLOOR, name) ||
                    !check_tensor(r.db, db, s.OC, TOL_GEMM_SUM, REF_FLOOR, name))
                    fail_msg("%s against the reference", name);
                if (i == 0) {
                    first = r;
                    continue;
                }
                if (!check_tensor(r.out, first.out, nout, tol, REF_FLOOR, name) ||
                    !check_tensor(r.din, first.din, nin, tol, REF_FLOOR, name) ||
                    !check_tensor(r.dw, first.dw, nw, tol_sum, REF_FLOOR, name))
                    fail_msg("%s against %s", name, sets[0]->isa);
                nhwc_run_free(&r);
            }
            nhwc_run_free(&first);
            free(in), free(w), free(b), free(R), free(dw0), free(db0), free(rws), free(out);
            free(din), free(dw), free(db);
        }
    isa_kernels_set(was);
    print_message("kernel sets checked:");
    for (int i = 0; i < n; i++) print_message(" %s", sets[i]->isa);
    print_message("\n");
}

// Max pooling's backward (pool_vec.c) under every kernel set the CPU runs against the reference's
// argmax: windows that tile the input (2x2 stride 2, assigned) and overlapping ones reaching
// into the padding (3x3 stride 2, added); 20 channels, so a block of 16 or 8 and a tail; inputs
// in steps of 0.25, so windows hold ties, which go to the first maximum in row-major order.
// Exact: a gradient is moved, not computed.
static void test_maxpool_kernel_sets(void **state) {
    (void)state;
    static const struct {
        int K, stride, pad, Cs;
    } cases[] = {{2, 2, 0, 32}, {3, 2, 1, 20}, {2, 2, 0, 20}};
    const int B = 2, C = 20, H = 7, W = 8;
    const isa_kernels *sets[8], *was = isa_kernels_active();
    const int n = isa_kernels_supported(sets, 8);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int K = cases[k].K, st = cases[k].stride, pad = cases[k].pad, Cs = cases[k].Cs;
        const int Hc = K == 2 ? 8 : H; // the tiling case covers its input exactly
        const int OH = (Hc + 2 * pad - K) / st + 1, OW = (W + 2 * pad - K) / st + 1;
        const size_t nin = (size_t)B * C * Hc * W, nout = (size_t)B * C * OH * OW;
        float *in = fill_uniform(nin, -2, 2, 2700 + k), *g = fill_uniform(nout, -1, 1, 2710 + k);
        for (size_t i = 0; i < nin; i++) in[i] = roundf(in[i] * 4.0f) / 4.0f;
        float *out = malloc(nout * sizeof *out), *want = malloc(nin * sizeof *want);
        int32_t *am = malloc(nout * sizeof *am);
        ref_maxpool_forward(out, am, in, B, C, Hc, W, K, st, pad, OH, OW, 1);
        ref_maxpool_backward(want, g, am, B, C, Hc, W, OH, OW, 1);
        float *xin = malloc((size_t)B * Hc * W * Cs * sizeof *xin);
        float *xg = malloc((size_t)B * OH * OW * Cs * sizeof *xg);
        float *xd = malloc((size_t)B * Hc * W * Cs * sizeof *xd), *got = malloc(nin * sizeof *got);
        ref_to_nhwc(xin, in, B, C, Cs, Hc * W, 0.0f);
        ref_to_nhwc(xg, g, B, C, Cs, OH * OW, 0.0f);
        const pool_geom pg = {.Cs = Cs, .H = Hc, .W = W, .K = K, .stride = st, .pad = pad,
                              .OH = OH, .OW = OW};
        for (int i = 0; i < n; i++) {
            isa_kernels_set(sets[i]);
            memset(xd, 0x7f, (size_t)B * Hc * W * Cs * sizeof *xd); // to be overwritten
            maxpool_nhwc_backward(xd, xg, xin, B, &pg, 2);
            ref_to_nchw(got, xd, B, C, Cs, Hc * W);
            for (size_t j = 0; j < nin; j++)
                if (got[j] != want[j])
                    fail_msg("%s, case %zu: din[%zu] %g, want %g", sets[i]->isa, k, j,
                             (double)got[j], (double)want[j]);
        }
        free(in), free(g), free(out), free(want), free(am), free(xin), free(xg), free(xd);
        free(got);
    }
    isa_kernels_set(was);
}

// nchw_to_nhwc / nhwc_to_nchw match the reference layouts; to_nhwc zeroes the pad channels.
static void test_nhwc_layouts(void **state) {
    (void)state;
    const int B = 3, C = 20, Cs = 32, HW = 12;
    const size_t n = (size_t)B * C * HW, nx = (size_t)B * HW * Cs;
    float *in = fill_uniform(n, 0.5f, 1.5f, 2000);
    float *x = malloc(nx * sizeof *x), *y = malloc(nx * sizeof *y);
    float *back = malloc(n * sizeof *back);
    memset(y, 0x7f, nx * sizeof *y);
    nchw_to_nhwc(y, in, B, C, Cs, HW, 2);
    ref_to_nhwc(x, in, B, C, Cs, HW, 0.0f);
    assert_memory_equal(x, y, nx * sizeof *x);
    nhwc_to_nchw(back, y, B, C, Cs, HW, 2);
    assert_memory_equal(back, in, n * sizeof *in);
    free(in), free(x), free(y), free(back);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_matches_direct),
        cmocka_unit_test(test_conv_grad_fd),
        cmocka_unit_test(test_conv_accumulates),
        cmocka_unit_test(test_conv_threads_agree),
        cmocka_unit_test(test_maxpool_grad_fd),
        cmocka_unit_test(test_maxpool_ties_and_overlap),
        cmocka_unit_test(test_avgpool_grad_fd),
        cmocka_unit_test(test_pool_same_known),
        cmocka_unit_test(test_conv_no_bias),
        cmocka_unit_test(test_conv_nhwc_threads_agree),
        cmocka_unit_test(test_conv_nhwc_gemm),
        cmocka_unit_test(test_conv_nhwc_gemm_bf16),
        cmocka_unit_test(test_conv_kernel_sets),
        cmocka_unit_test(test_maxpool_kernel_sets),
        cmocka_unit_test(test_nhwc_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
