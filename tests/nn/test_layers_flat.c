// CPU dense, relu, dropout, the act family and softmax cross-entropy, and the reference's act
// functions: finite-difference gradient checks, accumulate semantics, dropout's masks against
// their definition, softmax's stability and known values.
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
#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "tests/lib/ref.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

// ---- dense ----

typedef struct dense_case {
    int B, IN, OUT;
    float *in, *w, *b, *out, *R;
} dense_case;

static double dense_loss(void *ctx) {
    dense_case *d = ctx;
    dense_forward(d->out, d->in, d->w, d->b, d->B, d->IN, d->OUT, 2);
    return dot(d->out, d->R, (size_t)d->B * d->OUT);
}

static void dense_fd(int B, int IN, int OUT, uint64_t seed) {
    dense_case d = {.B = B, .IN = IN, .OUT = OUT};
    const size_t nin = (size_t)B * IN, nw = (size_t)OUT * IN, nout = (size_t)B * OUT;
    d.in = fill_uniform(nin, -1, 1, seed);
    d.w = fill_uniform(nw, -1, 1, seed + 1);
    d.b = fill_uniform(OUT, -1, 1, seed + 2);
    d.R = fill_uniform(nout, -1, 1, seed + 3);
    d.out = malloc(nout * sizeof *d.out);
    float *din = malloc(nin * sizeof *din), *dw = calloc(nw, sizeof *dw);
    float *db = calloc(OUT, sizeof *db), *num = malloc((nin > nw ? nin : nw) * sizeof *num);

    dense_loss(&d);
    dense_backward(din, dw, db, d.R, d.in, d.w, B, IN, OUT, 2);
    char name[64];
    snprintf(name, sizeof name, "dense %dx%dx%d din", B, IN, OUT);
    fd_grad(num, d.in, nin, dense_loss, &d);
    expect_grad(din, num, nin, TOL_DENSE_FD, name);
    snprintf(name, sizeof name, "dense %dx%dx%d dw", B, IN, OUT);
    fd_grad(num, d.w, nw, dense_loss, &d);
    expect_grad(dw, num, nw, TOL_DENSE_FD, name);
    snprintf(name, sizeof name, "dense %dx%dx%d db", B, IN, OUT);
    fd_grad(num, d.b, OUT, dense_loss, &d);
    expect_grad(db, num, OUT, TOL_DENSE_FD, name);

    free(d.in), free(d.w), free(d.b), free(d.R), free(d.out);
    free(din), free(dw), free(db), free(num);
}

static void test_dense_grad_fd(void **state) {
    (void)state;
    dense_fd(3, 7, 5, 600);
    dense_fd(2, 40, 37, 610); // more than one 16-wide block: the split across threads
    dense_fd(37, 9, 4, 620);  // split along the batch
}

// Also checks the output against a direct double loop at the larger sizes, across 1 and 2
// threads.
static void test_dense_accumulates(void **state) {
    (void)state;
    const int B = 33, IN = 50, OUT = 20;
    const size_t nin = (size_t)B * IN, nw = (size_t)OUT * IN, nout = (size_t)B * OUT;
    float *in = fill_uniform(nin, -1, 1, 700), *w = fill_uniform(nw, -1, 1, 701);
    float *b = fill_uniform(OUT, -1, 1, 702), *g = fill_uniform(nout, -1, 1, 703);
    float *out = malloc(nout * sizeof *out), *ref = malloc(nout * sizeof *ref);
    for (int nt = 1; nt <= 2; nt++) {
        dense_forward(out, in, w, b, B, IN, OUT, nt);
        for (int i = 0; i < B; i++)
            for (int o = 0; o < OUT; o++) {
                double acc = b[o];
                for (int k = 0; k < IN; k++) acc += (double)in[i * IN + k] * w[o * IN + k];
                ref[i * OUT + o] = (float)acc;
            }
        assert_true(check_tensor(out, ref, nout, TOL_CONV_REF, REF_FLOOR, "dense out"));
    }

    float *dw0 = fill_uniform(nw, -1, 1, 704), *db0 = fill_uniform(OUT, -1, 1, 705);
    float *dw = malloc(nw * sizeof *dw), *db = malloc(OUT * sizeof *db);
    float *g1w = malloc(nw * sizeof *g1w), *g1b = malloc(OUT * sizeof *g1b);
    float *din1 = malloc(nin * sizeof *din1), *din2 = malloc(nin * sizeof *din2);
    memcpy(dw, dw0, nw * sizeof *dw);
    memcpy(db, db0, OUT * sizeof *db);
    dense_backward(din1, dw, db, g, in, w, B, IN, OUT, 2);
    for (size_t i = 0; i < nw; i++) g1w[i] = 2 * (dw[i] - dw0[i]);
    for (int i = 0; i < OUT; i++) g1b[i] = 2 * (db[i] - db0[i]);
    memset(din2, 0x7f, nin * sizeof *din2);
    dense_backward(din2, dw, db, g, in, w, B, IN, OUT, 2);
    for (size_t i = 0; i < nw; i++) dw[i] -= dw0[i];
    for (int i = 0; i < OUT; i++) db[i] -= db0[i];
    assert_true(check_tensor(dw, g1w, nw, TOL_ACCUM, 1.0f, "dense dw twice"));
    assert_true(check_tensor(db, g1b, OUT, TOL_ACCUM, 1.0f, "dense db twice"));
    assert_memory_equal(din1, din2, nin * sizeof *din1);
    dense_backward(NULL, dw, db, g, in, w, B, IN, OUT, 2); // din NULL: must not crash

    free(in), free(w), free(b), free(g), free(out), free(ref), free(dw0), free(db0);
    free(dw), free(db), free(g1w), free(g1b), free(din1), free(din2);
}

// ---- relu, dropout ----

typedef struct elt_case {
    size_t n;
    int B;
    float rate;
    uint64_t key;
    const uint32_t *ids;
    float *in, *out, *R;
} elt_case;

static double relu_loss(void *ctx) {
    elt_case *e = ctx;
    relu_forward(e->out, e->in, e->n, 2);
    return dot(e->out, e->R, e->n);
}

static void test_relu_grad_fd(void **state) {
    (void)state;
    elt_case e = {.n = 300};
    e.in = fill_away_from_zero(e.n, 800);
    e.R = fill_uniform(e.n, -1, 1, 801);
    e.out = malloc(e.n * sizeof *e.out);
    float *din = malloc(e.n * sizeof *din), *num = malloc(e.n * sizeof *num);
    relu_loss(&e);
    relu_backward(din, e.R, e.out, e.n, 2);
    fd_grad(num, e.in, e.n, relu_loss, &e);
    expect_grad(din, num, e.n, TOL_ACT_FD, "relu din");

    // In place, forward and backward.
    float *x = malloc(e.n * sizeof *x);
    memcpy(x, e.in, e.n * sizeof *x);
    relu_forward(x, x, e.n, 2);
    assert_memory_equal(x, e.out, e.n * sizeof *x);
    memcpy(num, e.R, e.n * sizeof *num);
    relu_backward(num, num, e.out, e.n, 2);
    assert_memory_equal(num, din, e.n * sizeof *din);

    free(e.in), free(e.R), free(e.out), free(din), free(num), free(x);
}

static double dropout_loss(void *ctx) {
    elt_case *e = ctx;
    dropout_forward(e->out, e->in, e->B, e->n, e->rate, e->key, e->ids, 2);
    return dot(e->out, e->R, (size_t)e->B * e->n);
}

static void test_dropout_grad_fd(void **state) {
    (void)state;
    const uint32_t ids[3] = {11, 4, 90};
    elt_case e = {.n = 80, .B = 3, .rate = 0.3f, .key = ht_rng_key(1, 2, 3), .ids = ids};
    const size_t total = (size_t)e.B * e.n;
    e.in = fill_uniform(total, -1, 1, 900);
    e.R = fill_uniform(total, -1, 1, 901);
    e.out = malloc(total * sizeof *e.out);
    float *din = malloc(total * sizeof *din), *num = malloc(total * sizeof *num);
    dropout_loss(&e);
    dropout_forward(din, e.R, e.B, e.n, e.rate, e.key, ids, 2); // backward: the same call
    fd_grad(num, e.in, total, dropout_loss, &e);
    expect_grad(din, num, total, TOL_ACT_FD, "dropout din");

    // Some elements are dropped, and kept ones are scaled by exactly 1/(1-rate).
    size_t zeros = 0;
    const float scale = 1.0f / (1.0f - e.rate);
    for (size_t i = 0; i < total; i++) {
        if (e.out[i] == 0.0f) zeros++;
        else assert_true(e.out[i] == e.in[i] * scale);
    }
    assert_true(zeros > 0 && zeros < total);
    free(e.in), free(e.R), free(e.out), free(din), free(num);
}

// dropout_forward against its definition, element by element: kept where
// ht_rng_uniform(key, id, e) >= rate, scaled by 1/(1-rate) (bit for bit), on sizes that are
// and are not whole multiples of its blocks, with 1 and 2 threads, into out and in place.
static void test_dropout_matches_definition(void **state) {
    (void)state;
    const uint32_t ids[3] = {7, 123456, 0};
    const size_t sizes[] = {1, 1000, 1024, 2500, 20000}; // 3 x 20000 runs in parallel
    const uint64_t key = ht_rng_key(11, 3, 6);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t N = sizes[k], total = 3 * N;
        float *in = fill_uniform(total, -1, 1, 1100 + k), *want = malloc(total * sizeof *want);
        float *out = malloc(total * sizeof *out), *x = malloc(total * sizeof *x);
        const float rate = 0.4f, scale = 1.0f / (1.0f - rate);
        size_t dropped = 0;
        for (int i = 0; i < 3; i++)
            for (size_t e = 0; e < N; e++) {
                const size_t at = (size_t)i * N + e;
                const int keep = ht_rng_uniform(key, ids[i], (uint32_t)e) >= rate;
                want[at] = keep ? in[at] * scale : 0.0f;
                dropped += !keep;
            }
        if (N >= 1000) assert_true(dropped > total / 4 && dropped < total / 2 + total / 20);
        for (int nt = 1; nt <= 2; nt++) {
            dropout_forward(out, in, 3, N, rate, key, ids, nt);
            assert_memory_equal(out, want, total * sizeof *out);
            memcpy(x, in, total * sizeof *x);
            dropout_forward(x, x, 3, N, rate, key, ids, nt);
            assert_memory_equal(x, want, total * sizeof *x);
        }
        free(in), free(want), free(out), free(x);
    }
}

// Sample id 42's mask is the same alone at position 0 of a batch of 1 and at position 5 of a
// batch of 8 with other ids.
static void test_dropout_sample_invariance(void **state) {
    (void)state;
    const size_t N = 1000;
    const uint64_t key = ht_rng_key(7, 3, 9);
    const uint32_t one[1] = {42}, eight[8] = {7, 100, 3, 9, 11, 42, 13, 1000};
    float *in = fill_uniform(8 * N, 0.5f, 1.5f, 1000); // nonzero, so out==0 means dropped
    float *a = malloc(N * sizeof *a), *b = malloc(8 * N * sizeof *b);
    dropout_forward(a, in + 5 * N, 1, N, 0.5f, key, one, 1);
    dropout_forward(b, in, 8, N, 0.5f, key, eight, 2);
    assert_memory_equal(a, b + 5 * N, N * sizeof *a);
    // ...and differs from the mask of its batch neighbour (a sanity check the test can fail).
    dropout_forward(a, in + 5 * N, 1, N, 0.5f, key, eight + 4, 1);
    assert_true(memcmp(a, b + 5 * N, N * sizeof *a) != 0);

    // In place, as backward runs it on the gradient: the same mask.
    float *g = malloc(8 * N * sizeof *g);
    memcpy(g, in, 8 * N * sizeof *g);
    dropout_forward(g, g, 8, N, 0.5f, key, eight, 2);
    assert_memory_equal(g, b, 8 * N * sizeof *g);
    free(in), free(a), free(b), free(g);
}

// Over 2^17 elements the kept fraction is within 0.01 of 1-rate (the binomial standard
// deviation is ~0.0012 for rate 0.25, so 0.01 is ~8 sigma); a different epoch or layer key
// gives a mask that disagrees on about 2 p (1-p) = 37.5% of elements.
#define TOL_KEEP_FRACTION 0.01
static void test_dropout_keep_fraction_and_keys(void **state) {
    (void)state;
    const int B = 4;
    const size_t N = 1u << 15, total = (size_t)B * N;
    const float rate = 0.25f;
    const uint32_t ids[4] = {0, 1, 2, 59999};
    float *ones = malloc(total * sizeof *ones);
    for (size_t i = 0; i < total; i++) ones[i] = 1.0f;
    float *m[3];
    const uint64_t keys[3] = {ht_rng_key(5, 0, 6), ht_rng_key(5, 1, 6), ht_rng_key(5, 0, 8)};
    for (int k = 0; k < 3; k++) {
        m[k] = malloc(total * sizeof(float));
        dropout_forward(m[k], ones, B, N, rate, keys[k], ids, 2);
        size_t kept = 0;
        for (size_t i = 0; i < total; i++) kept += m[k][i] != 0.0f;
        double frac = (double)kept / (double)total;
        assert_true(fabs(frac - (1.0 - rate)) < TOL_KEEP_FRACTION);
    }
    for (int k = 1; k < 3; k++) {
        size_t differ = 0;
        for (size_t i = 0; i < total; i++) differ += (m[0][i] != 0.0f) != (m[k][i] != 0.0f);
        double frac = (double)differ / (double)total;
        assert_true(fabs(frac - 2.0 * rate * (1.0 - rate)) < TOL_KEEP_FRACTION);
    }
    // rate 0 keeps everything unscaled.
    dropout_forward(m[0], ones, B, N, 0.0f, keys[0], ids, 2);
    assert_memory_equal(m[0], ones, total * sizeof *ones);
    for (int k = 0; k < 3; k++) free(m[k]);
    free(ones);
}

// ---- the act family ----

typedef struct act_case {
    act_fn f;
    float alpha;
    size_t n;
    float *in, *out, *R;
} act_case;

static double act_loss(void *ctx) {
    act_case *a = ctx;
    ref_act_forward(a->f, a->alpha, a->out, a->in, a->n);
    return dot(a->out, a->R, a->n);
}

// The reference's act functions (ref.h), every kind of the family with its default parameter
// and another: their derivatives against central differences of their values, at inputs across
// +-[0.4, 4] kept two steps off the kinks (hard_sigmoid's and hard_swish's clamps); truncation adds an error of
// FD_EPS^2/6 |f'''| (< 1e-4 here) to the float rounding the tolerance covers. The CPU's and the
// OpenCL kernels' activations are checked against these in the parity tests.
static void test_act_grad_fd(void **state) {
    (void)state;
    int kinds = 0;
    for (int k = 0; k < LAYER_KIND_COUNT; k++) {
        const layer_desc *d = layer_desc_of((layer_kind)k);
        if (layer_act_fn((layer_kind)k) < 0) continue;
        kinds++;
        for (int v = 0; v < (d->param_key ? 2 : 1); v++) {
            float alpha = (float)d->param_default;
            if (v)
                alpha = k == LAYER_GELU           ? 1.0f
                        : k == LAYER_HARD_SIGMOID ? 0.2f
                        : k == LAYER_HARD_SWISH   ? 0.2f
                        : k == LAYER_RELU6        ? 2.0f
                                                  : 0.05f;
            act_case a = {.f = (act_fn)layer_act_fn((layer_kind)k), .alpha = alpha, .n = 200};
            a.in = fill_away_from_zero(a.n, 1000 + (uint64_t)k);
            for (size_t i = 0; i < a.n; i++) {
                a.in[i] *= 4.0f;
                if (k == LAYER_RELU6 && fabsf(a.in[i] - alpha) < 4 * FD_EPS) // its cap's kink
                    a.in[i] = alpha + (a.in[i] >= alpha ? 0.5f : -0.5f);
                if (k != LAYER_HARD_SIGMOID && k != LAYER_HARD_SWISH) continue;
                for (int side = -1; side <= 1; side += 2) { // kinks where alpha x + 0.5 = 0, 1
                    float kink = side * 0.5f / alpha;
                    if (fabsf(a.in[i] - kink) < 4 * FD_EPS)
                        a.in[i] = kink + (a.in[i] >= kink ? 0.5f : -0.5f);
                }
            }
            a.R = fill_uniform(a.n, -1, 1, 2000 + (uint64_t)k);
            a.out = malloc(a.n * sizeof *a.out);
            float *din = malloc(a.n * sizeof *din), *num = malloc(a.n * sizeof *num);
            act_loss(&a);
            ref_act_backward(a.f, alpha, din, a.R, a.in, a.n);
            fd_grad(num, a.in, a.n, act_loss, &a);
            char name[64];
            snprintf(name, sizeof name, "%s(%g) din", d->name, (double)alpha);
            expect_grad(din, num, a.n, TOL_ACT_FD, name);
            free(a.in), free(a.R), free(a.out), free(din), free(num);
        }
    }
    assert_int_equal(kinds, ACT_FN_COUNT);
}

// Known values of the act family's reference: Keras's and PyTorch's definitions.
static void test_act_known_values(void **state) {
    (void)state;
    static const struct {
        layer_kind k;
        float alpha, x, y;
    } v[] = {
        {LAYER_SIGMOID, 0, 0.0f, 0.5f},
        {LAYER_RELU6, 6, 7.5f, 6.0f},
        {LAYER_RELU6, 6, 3.25f, 3.25f},
        {LAYER_RELU6, 6, -2.0f, 0.0f},
        {LAYER_TANH, 0, 1.0f, 0.7615941559557649f},
        {LAYER_LEAKY_RELU, 0.3f, -2.0f, -0.6f},
        {LAYER_ELU, 1.0f, -1.0f, -0.6321205588285577f},
        {LAYER_SELU, 0, 1.0f, 1.0507009873554805f},
        {LAYER_SELU, 0, -1.0f, -1.1113307378125625f},
        {LAYER_SWISH, 0, 1.0f, 0.7310585786300049f},
        {LAYER_SOFTPLUS, 0, 0.0f, 0.6931471805599453f},
        {LAYER_SOFTPLUS, 0, 100.0f, 100.0f},          // no overflow
        {LAYER_HARD_SIGMOID, 1.0f / 6, 1.5f, 0.75f},  // Keras 3: relu6(x + 3) / 6
        {LAYER_HARD_SIGMOID, 0.2f, 1.5f, 0.8f},       // Keras 2: 0.2 x + 0.5
        {LAYER_HARD_SIGMOID, 0.2f, 3.0f, 1.0f},
        {LAYER_HARD_SWISH, 1.0f / 6, 1.5f, 1.125f},   // Keras 3's hard_silu: x relu6(x + 3) / 6
        {LAYER_HARD_SWISH, 1.0f / 6, -3.5f, 0.0f},
        {LAYER_HARD_SWISH, 1.0f / 6, 4.0f, 4.0f},
        {LAYER_GELU, 0, 1.0f, 0.8413447460685429f},   // x * Phi(x)
        {LAYER_GELU, 1, 1.0f, 0.8411919906082768f},   // the tanh form
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        float y;
        ref_act_forward((act_fn)layer_act_fn(v[i].k), v[i].alpha, &y, &v[i].x, 1);
        if (!(fabsf(y - v[i].y) <= 1e-6f * fmaxf(1.0f, fabsf(v[i].y))))
            fail_msg("%s(%g) at %g: %.9g, want %.9g", layer_desc_of(v[i].k)->name,
                     (double)v[i].alpha, (double)v[i].x, (double)y, (double)v[i].y);
    }
}

// The vectorised activations (act_vec.c: sigmoid and swish with exp by a polynomial, the
// piecewise-linear functions as compares and blends) of every instruction set the CPU runs
// against the reference's double formulas, through the CPU path's entry points: channels-last
// rows whose used channels fill no whole vector (13 of a stride of 16; the pad lanes, NaN in the
// input, come out zero) and a flat tensor of two full rows and a part, two threads. Inputs across
// +-100 (past exp's clamp at -87.3 and 88.3), zero, NaN and +-inf. Within TOL_VEC_ACT of
// max(|reference|, 1): v_exp is within 2 ulp of expf, a sigmoid adds a division's rounding, the
// piecewise-linear ones round a product and a sum in float. Where the input is NaN the
// reference (fmin/fmax) and the layer differ by design: sigmoid and swish keep it (--on-nan sees
// it), and the piecewise-linear functions give every set the same bits there and everywhere
// (same_bits: one result on any CPU).
#define TOL_VEC_ACT 1e-6f
static int act_close(const float *y, const float *want, const float *in, size_t n,
                     const char *what) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(in[i]) || (isnan(want[i]) && isnan(y[i])) || y[i] == want[i]) continue;
        if (!(fabsf(y[i] - want[i]) <= TOL_VEC_ACT * fmaxf(1.0f, fabsf(want[i])))) {
            print_error("%s [%zu]: %.9g, want %.9g\n", what, i, (double)y[i], (double)want[i]);
            return 0;
        }
    }
    return 1;
}

static int same_bits(const float *y, const float *first, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        if ((isnan(y[i]) && isnan(first[i])) || !memcmp(&y[i], &first[i], sizeof y[i])) continue;
        print_error("%s [%zu]: %.9g, the first set %.9g\n", what, i, (double)y[i],
                    (double)first[i]);
        return 0;
    }
    return 1;
}

static void test_act_vector_sets(void **state) {
    (void)state;
    const int C = 13, Cs = 16, rows = 40, n_flat = 2 * 1024 + 452;
    const size_t nx = (size_t)rows * Cs, nf = (size_t)n_flat;
    float *x = fill_uniform(nx, -100, 100, 3100), *xf = fill_uniform(nf, -12, 12, 3101);
    float *g = fill_uniform(nx, -1, 1, 3102), *gf = fill_uniform(nf, -1, 1, 3103);
    const float special[] = {0.0f, -0.0f, 87.5f, -87.5f, 88.5f, -88.5f, 1e-30f, NAN, INFINITY,
                             -INFINITY, 20.0f, -20.0f, 0.5f, 6.0f, -6.0f, 3.0f, -3.0f, 2.5f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i * Cs] = special[i];
    for (int r = 0; r < rows; r++)
        for (int c = C; c < Cs; c++) x[(size_t)r * Cs + c] = NAN, g[(size_t)r * Cs + c] = NAN;
    // This set's results (y, d: rows; yf, df: flat) and the first set's.
    float *out = malloc((2 * nx + 2 * nf) * 2 * sizeof *out), *want = malloc(nx * sizeof *want);
    float *wantf = malloc(nf * sizeof *wantf);
    float *y = out, *d = y + nx, *yf = d + nx, *df = yf + nf, *first = df + nf;
    const size_t all = 2 * nx + 2 * nf;
    const isa_kernels *sets[8], *was = isa_kernels_active();
    const int n = isa_kernels_supported(sets, 8);
    static const struct {
        act_fn f;
        float alpha; // Keras's default parameter
        int same;    // every set the same bits
        const char *name;
    } fns[] = {{ACT_SIGMOID, 0, 0, "sigmoid"},          {ACT_SWISH, 0, 0, "swish"},
               {ACT_LEAKY_RELU, 0.3f, 1, "leaky relu"}, {ACT_RELU6, 6.0f, 1, "relu6"},
               {ACT_HARD_SIGMOID, 0.2f, 1, "hard sigmoid"},
               {ACT_HARD_SWISH, 1.0f / 6.0f, 1, "hard swish"}};
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        const act_fn fn = fns[f].f;
        const float a = fns[f].alpha;
        for (int i = 0; i < n; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s %s", sets[i]->isa, fns[f].name);
            isa_kernels_set(sets[i]);
            act_nhwc_forward(fn, a, y, x, (size_t)rows, C, Cs, 2);
            act_nhwc_backward(fn, a, d, g, x, (size_t)rows, C, Cs, 2);
            for (int r = 0; r < rows; r++) {
                const size_t k = (size_t)r * Cs;
                ref_act_forward(fn, a, want + k, x + k, (size_t)C);
                if (!act_close(y + k, want + k, x + k, (size_t)C, what))
                    fail_msg("%s forward", what);
                ref_act_backward(fn, a, want + k, g + k, x + k, (size_t)C);
                if (!act_close(d + k, want + k, x + k, (size_t)C, what))
                    fail_msg("%s backward", what);
                for (int c = C; c < Cs; c++) {
                    assert_true(y[k + c] == 0.0f);
                    assert_true(d[k + c] == 0.0f);
                }
            }
            if (!fns[f].same) // NaN in, NaN out: --on-nan sees it
                assert_true(isnan(y[7 * Cs]));
            act_forward(fn, a, yf, xf, nf, 2);
            ref_act_forward(fn, a, wantf, xf, nf);
            if (!act_close(yf, wantf, xf, nf, what)) fail_msg("%s flat forward", what);
            act_backward(fn, a, df, gf, xf, nf, 2);
            ref_act_backward(fn, a, wantf, gf, xf, nf);
            if (!act_close(df, wantf, xf, nf, what)) fail_msg("%s flat backward", what);
            if (i == 0) memcpy(first, out, all * sizeof *out);
            else if (fns[f].same && !same_bits(out, first, all, what))
                fail_msg("%s: not the bits of %s", what, sets[0]->isa);
        }
    }
    isa_kernels_set(was);
    free(x), free(xf), free(g), free(gf), free(out), free(want), free(wantf);
}

// ---- softmax cross-entropy ----

typedef struct xent_case {
    int B, NC;
    float *logits, *probs, *loss;
    const uint8_t *labels;
} xent_case;

static double xent_loss(void *ctx) {
    xent_case *x = ctx;
    softmax_xent_forward(x->probs, x->loss, x->logits, x->labels, x->B, x->NC);
    double s = 0;
    for (int i = 0; i < x->B; i++) s += x->loss[i];
    return s;
}

static void test_softmax_xent_grad_fd(void **state) {
    (void)state;
    const uint8_t labels[4] = {3, 0, 9, 5};
    xent_case x = {.B = 4, .NC = 10, .labels = labels};
    const size_t n = (size_t)x.B * x.NC;
    x.logits = fill_uniform(n, -3, 3, 1100);
    x.probs = malloc(n * sizeof *x.probs);
    x.loss = malloc(x.B * sizeof *x.loss);
    float *d = malloc(n * sizeof *d), *num = malloc(n * sizeof *num);
    xent_loss(&x);
    softmax_xent_backward(d, x.probs, labels, x.B, x.NC);
    fd_grad(num, x.logits, n, xent_loss, &x);
    expect_grad(d, num, n, TOL_XENT_FD, "softmax_xent dlogits");
    // In place: dlogits may alias probs.
    softmax_xent_backward(x.probs, x.probs, labels, x.B, x.NC);
    assert_memory_equal(x.probs, d, n * sizeof *d);
    free(x.logits), free(x.probs), free(x.loss), free(d), free(num);
}

static void test_softmax_xent_stable(void **state) {
    (void)state;
    const float logits[2 * 3] = {1e4f, 0.0f, -1e4f, -1e4f, -1e4f + 1.0f, 1e4f};
    const uint8_t labels[2] = {1, 2};
    float probs[6], loss[2];
    softmax_xent_forward(probs, loss, logits, labels, 2, 3);
    for (int i = 0; i < 6; i++) assert_true(isfinite(probs[i]));
    assert_true(isfinite(loss[0]) && isfinite(loss[1]));
    assert_float_equal(probs[0], 1.0f, 1e-6f);
    assert_float_equal(probs[5], 1.0f, 1e-6f);
    assert_float_equal(loss[0], 1e4f, 1e-2f); // logsumexp 1e4 minus logit 0
    assert_float_equal(loss[1], 0.0f, 1e-6f);

    // Probabilities sum to 1 on random rows with a wide range.
    const int B = 16, NC = 10;
    float *lg = fill_uniform((size_t)B * NC, -50, 50, 1200), *p = malloc(B * NC * sizeof *p);
    softmax_xent_forward(p, NULL, lg, NULL, B, NC);
    for (int i = 0; i < B; i++) {
        double s = 0;
        for (int c = 0; c < NC; c++) {
            assert_true(p[i * NC + c] >= 0.0f);
            s += p[i * NC + c];
        }
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    free(lg), free(p);
}

// probs = softmax(1,2,3) = (0.0900306, 0.2447285, 0.6652410); -log(0.6652410) = 0.4076059.
static void test_softmax_xent_known_value(void **state) {
    (void)state;
    const float logits[3] = {1, 2, 3};
    const uint8_t label[1] = {2};
    float probs[3], loss[1] = {-1}, d[3];
    softmax_xent_forward(probs, loss, logits, label, 1, 3);
    assert_float_equal(probs[0], 0.0900306f, 1e-6f);
    assert_float_equal(probs[1], 0.2447285f, 1e-6f);
    assert_float_equal(probs[2], 0.6652410f, 1e-6f);
    assert_float_equal(loss[0], 0.4076059f, 1e-6f);
    softmax_xent_backward(d, probs, label, 1, 3);
    assert_float_equal(d[2], 0.6652410f - 1.0f, 1e-6f);
    assert_float_equal(d[0], 0.0900306f, 1e-6f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_grad_fd),
        cmocka_unit_test(test_dense_accumulates),
        cmocka_unit_test(test_relu_grad_fd),
        cmocka_unit_test(test_dropout_grad_fd),
        cmocka_unit_test(test_dropout_matches_definition),
        cmocka_unit_test(test_dropout_sample_invariance),
        cmocka_unit_test(test_dropout_keep_fraction_and_keys),
        cmocka_unit_test(test_act_grad_fd),
        cmocka_unit_test(test_act_known_values),
        cmocka_unit_test(test_act_vector_sets),
        cmocka_unit_test(test_softmax_xent_grad_fd),
        cmocka_unit_test(test_softmax_xent_stable),
        cmocka_unit_test(test_softmax_xent_known_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
