// Optimizer steps against values worked out independently (Python, double precision) from
// the formulas in optim.h; each case would fail if its feature were dropped.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/optim.h"
#include "tests/lib/testutil.h"

// Relative error against the double-precision reference. Below the floor it is absolute
// (2e-7): values like 0.0105 come from cancelling terms near 1, whose float rounding
// (~6e-8 each) remains. Every feature tested changes some value by more than 1e-3.
#define OPTIM_TOL 2e-6f
#define OPTIM_FLOOR 0.1f

#define N 4
static const float P0[N] = {1.0f, -2.0f, 0.5f, 3.0f};
// Gradients of steps 1..3; the last element's gradient is always 0.
static const float G[3][N] = {
    {1.0f, -0.5f, 2.0f, 0.0f},
    {-0.5f, 1.0f, 0.25f, 0.0f},
    {2.0f, 0.0f, -1.0f, 0.0f},
};

static train_setup sgd_setup(float lr, float momentum, int nesterov, float decay) {
    return (train_setup){.optim = OPTIM_SGD, .lr = lr, .momentum = momentum,
                         .nesterov = nesterov, .decay = decay};
}

static train_setup adam_setup(float lr, float b1, float b2, float eps, float decay) {
    return (train_setup){.optim = OPTIM_ADAM, .lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps,
                         .decay = decay};
}

// Runs three steps from P0 with G and checks the parameters after each against want.
static void run3(const train_setup *s, const float want[3][N], const char *name) {
    optim o;
    ht_error e;
    assert_int_equal(optim_init(&o, s, N, &e), 0);
    float p[N];
    memcpy(p, P0, sizeof p);
    for (int t = 0; t < 3; t++) {
        optim_step(&o, p, G[t]);
        assert_int_equal(o.t, t + 1);
        char label[64];
        snprintf(label, sizeof label, "%s step %d", name, t + 1);
        assert_true(check_tensor(p, want[t], N, OPTIM_TOL, OPTIM_FLOOR, label));
    }
    optim_free(&o);
}

static void test_sgd_plain(void **state) {
    (void)state;
    static const float want[3][N] = {
        {0.9f, -1.95f, 0.3f, 3.0f},
        {0.95f, -2.05f, 0.275f, 3.0f},
        {0.75f, -2.05f, 0.375f, 3.0f},
    };
    train_setup s = sgd_setup(0.1f, 0.0f, 0, 0.0f);
    run3(&s, want, "sgd");
}

static void test_sgd_momentum(void **state) {
    (void)state;
    // Step 2: v = 0.9*(-0.1) + 0.05 = -0.04, p = 0.9 - 0.04 = 0.86 (plain SGD gives 0.95).
    static const float want[3][N] = {
        {0.9f, -1.95f, 0.3f, 3.0f},
        {0.86f, -2.005f, 0.095f, 3.0f},
        {0.624f, -2.0545f, 0.0105f, 3.0f},
    };
    train_setup s = sgd_setup(0.1f, 0.9f, 0, 0.0f);
    run3(&s, want, "sgd momentum");
}

static void test_sgd_nesterov(void **state) {
    (void)state;
    // Step 1: v = -0.1, p += 0.9*v - 0.1 = -0.19 (plain momentum gives 0.9).
    static const float want[3][N] = {
        {0.81f, -1.905f, 0.12f, 3.0f},
        {0.824f, -2.0545f, -0.0895f, 3.0f},
        {0.4116f, -2.09905f, -0.06555f, 3.0f},
    };
    train_setup s = sgd_setup(0.1f, 0.9f, 1, 0.0f);
    run3(&s, want, "sgd nesterov");
}

static void test_sgd_decay(void **state) {
    (void)state;
    // lr_t = 0.1, 0.1/1.5, 0.1/2 on steps 1..3.
    static const float want[3][N] = {
        {0.9f, -1.95f, 0.3f, 3.0f},
        {0.933333333f, -2.01666667f, 0.283333333f, 3.0f},
        {0.833333333f, -2.01666667f, 0.333333333f, 3.0f},
    };
    train_setup s = sgd_setup(0.1f, 0.0f, 0, 0.5f);
    run3(&s, want, "sgd decay");

    optim o;
    ht_error e;
    assert_int_equal(optim_init(&o, &s, N, &e), 0);
    float p[N];
    memcpy(p, P0, sizeof p);
    const float lrs[4] = {0.1f, 0.0666666667f, 0.05f, 0.04f};
    for (int t = 0; t < 4; t++) {
        assert_true(check_tensor((float[]){optim_lr(&o)}, &lrs[t], 1, OPTIM_TOL, 0, "optim_lr"));
        if (t < 3) optim_step(&o, p, G[t]);
    }
    optim_free(&o);
}

// The reference preset's setup: Nesterov momentum with decay together.
static void test_sgd_nesterov_decay(void **state) {
    (void)state;
    static const float want[3][N] = {
        {0.81f, -1.905f, 0.12f, 3.0f},
        {0.792333333f, -1.99116667f, -0.0736666667f, 3.0f},
        {0.556433333f, -2.00871667f, -0.137966667f, 3.0f},
    };
    train_setup s = sgd_setup(0.1f, 0.9f, 1, 0.5f);
    run3(&s, want, "sgd nesterov decay");
}

static void test_adam(void **state) {
    (void)state;
    // Step 1: m = 0.1 g, v = 0.001 g^2, lr_t = 0.1 sqrt(0.001)/0.1, so p moves by 0.1 sign(g)
    // (0.316 without bias correction). A zero gradient leaves p alone (0 / (0 + eps)).
    static const float want[3][N] = {
        {0.900000032f, -1.90000006f, 0.400000016f, 3.0f},
        {0.873366335f, -1.93661041f, 0.324277713f, 3.0f},
        {0.807555184f, -1.96491031f, 0.300267599f, 3.0f},
    };
    train_setup s = adam_setup(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f);
    run3(&s, want, "adam");
}

// A large epsilon makes its place in the formula visible; decay uses t-1 (step 1 undecayed).
static void test_adam_eps_decay(void **state) {
    (void)state;
    static const float want[3][N] = {
        {0.975974693f, -1.98634729f, 0.461257411f, 3.0f},
        {0.971338179f, -1.992722f, 0.44161251f, 3.0f},
        {0.957514784f, -1.99641638f, 0.436624072f, 3.0f},
    };
    train_setup s = adam_setup(0.1f, 0.9f, 0.999f, 0.1f, 0.5f);
    run3(&s, want, "adam eps decay");

    optim o;
    ht_error e;
    assert_int_equal(optim_init(&o, &s, N, &e), 0);
    assert_non_null(o.v);
    float p[N];
    memcpy(p, P0, sizeof p);
    optim_step(&o, p, G[0]);
    float lr = optim_lr(&o), want_lr = 0.0666666667f;
    assert_true(check_tensor(&lr, &want_lr, 1, OPTIM_TOL, 0, "adam optim_lr"));
    optim_free(&o);
}

// Enough parameters to take the OpenMP path: every element must match the small case.
static void test_large_buffer(void **state) {
    (void)state;
    static const float want_sgd[N] = {0.556433333f, -2.00871667f, -0.137966667f, 3.0f};
    static const float want_adam[N] = {0.957514784f, -1.99641638f, 0.436624072f, 3.0f};
    const size_t n = 4 * 50001;
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *want = malloc(n * sizeof *want);
    assert_non_null(p);
    assert_non_null(g);
    assert_non_null(want);
    for (int k = 0; k < 2; k++) {
        train_setup s = k ? adam_setup(0.1f, 0.9f, 0.999f, 0.1f, 0.5f)
                          : sgd_setup(0.1f, 0.9f, 1, 0.5f);
        optim o;
        ht_error e;
        assert_int_equal(optim_init(&o, &s, n, &e), 0);
        for (size_t i = 0; i < n; i++) p[i] = P0[i % N];
        for (int t = 0; t < 3; t++) {
            for (size_t i = 0; i < n; i++) g[i] = G[t][i % N];
            optim_step(&o, p, g);
        }
        for (size_t i = 0; i < n; i++) want[i] = (k ? want_adam : want_sgd)[i % N];
        const char *name = k ? "adam large" : "sgd large";
        assert_true(check_tensor(p, want, n, OPTIM_TOL, OPTIM_FLOOR, name));
        optim_free(&o);
    }
    free(p);
    free(g);
    free(want);
}

static void test_init_free(void **state) {
    (void)state;
    optim o = {0};
    optim_free(&o); // zeroed struct: nothing to free

    ht_error e;
    train_setup s = sgd_setup(0.1f, 0.9f, 0, 0.0f);
    assert_int_equal(optim_init(&o, &s, 1000, &e), 0);
    assert_non_null(o.m);
    assert_null(o.v);
    assert_int_equal(o.t, 0);
    for (size_t i = 0; i < 1000; i++) assert_true(o.m[i] == 0.0f);
    optim_free(&o);
    optim_free(&o); // twice is fine

    s = adam_setup(0.001f, 0.9f, 0.999f, 1e-8f, 0.0f);
    assert_int_equal(optim_init(&o, &s, 1000, &e), 0);
    assert_non_null(o.m);
    assert_non_null(o.v);
    for (size_t i = 0; i < 1000; i++) assert_true(o.m[i] == 0.0f && o.v[i] == 0.0f);
    optim_free(&o);

    s = adam_setup(0.001f, 1.0f, 0.999f, 1e-8f, 0.0f);
    assert_int_equal(optim_init(&o, &s, 10, &e), -1);
    assert_non_null(strstr(e.msg, "beta1"));
    assert_null(o.m);
    s = sgd_setup(0.1f, 0.9f, 0, -1.0f);
    assert_int_equal(optim_init(&o, &s, 10, &e), -1);
    assert_non_null(strstr(e.msg, "decay"));
}

// GAMMA is held as a float: 0.9f^3 is 0.729 to within 3 roundings of 2^-24 (relative); the
// cosine is computed in double.
#define SCHED_TOL 1e-6

// The schedules' factors at given epochs and steps, and the rate optim_lr reports with one.
static void test_lr_schedules(void **state) {
    (void)state;
    ht_error e;
    lr_schedule s;
    const struct {
        const char *text;
        int epoch;
        long step, total;
        double want;
    } cases[] = {
        {"none", 7, 70, 100, 1.0},
        {"step:2:0.5", 0, 0, 100, 1.0},    {"step:2:0.5", 1, 19, 100, 1.0},
        {"step:2:0.5", 2, 20, 100, 0.5},   {"step:2:0.5", 5, 50, 100, 0.25},
        {"step:3:0.1", 6, 60, 100, 0.01},
        {"exp:0.9", 0, 0, 100, 1.0},       {"exp:0.9", 3, 30, 100, 0.729},
        {"cosine", 0, 0, 10, 1.0},         {"cosine", 0, 2, 10, 0.904508497187},
        {"cosine", 2, 5, 10, 0.5},         {"cosine", 3, 7, 10, 0.206107373854},
        {"cosine", 4, 10, 10, 0.0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (lr_schedule_parse(&s, cases[k].text, &e) < 0) fail_msg("%s: %s", cases[k].text, e.msg);
        double f = lr_schedule_factor(&s, cases[k].epoch, cases[k].step, cases[k].total);
        if (fabs(f - cases[k].want) > SCHED_TOL)
            fail_msg("%s at epoch %d step %ld of %ld: factor %.12g, want %.12g", cases[k].text,
                     cases[k].epoch, cases[k].step, cases[k].total, f, cases[k].want);
        // Written out and read back, the schedule is the same one.
        char text[64];
        lr_schedule_text(&s, text, sizeof text);
        lr_schedule back;
        assert_int_equal(lr_schedule_parse(&back, text, &e), 0);
        assert_memory_equal(&back, &s, sizeof s);
    }
    // The factor scales lr before Keras's decay divides it: 0.1 * 0.25 / (1 + 0.5 * 2).
    train_setup ts = sgd_setup(0.1f, 0.0f, 0, 0.5f);
    optim o;
    assert_int_equal(optim_init(&o, &ts, N, &e), 0);
    float p[N];
    memcpy(p, P0, sizeof p);
    optim_step(&o, p, G[0]);
    optim_step(&o, p, G[1]);
    optim_set_lr_factor(&o, 0.25);
    float lr = optim_lr(&o), want_lr = 0.0125f;
    assert_true(check_tensor(&lr, &want_lr, 1, OPTIM_TOL, 0, "optim_lr with a schedule"));
    // The step uses it: p -= 0.0125 * g (no momentum).
    float before[N], want[N];
    memcpy(before, p, sizeof p);
    optim_step(&o, p, G[2]);
    for (int i = 0; i < N; i++) want[i] = before[i] - 0.0125f * G[2][i];
    assert_true(check_tensor(p, want, N, OPTIM_TOL, OPTIM_FLOOR, "sgd step with a schedule"));
    optim_free(&o);
}

// Malformed schedules are one-line errors that quote what was given.
static void test_lr_schedule_errors(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"step:0:0.5", "EPOCHS"}, {"step:2", "EPOCHS"},  {"step:x:0.5", "EPOCHS"},
        {"step:2:0", "GAMMA"},    {"step:2:1.5", "GAMMA"}, {"exp:-1", "GAMMA"},
        {"exp:", "GAMMA"},        {"exp:0.5x", "GAMMA"}, {"linear", "expected step:EPOCHS:GAMMA"},
        {"cosine:3", "expected"}, {"", "expected"},
        {"exp:1E-124", "GAMMA"}, // a float would hold 0 (found by fuzzing)
        {"step:2:1e-40", "GAMMA"}, // a float would hold it denormalised
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        lr_schedule s = {.kind = LR_SCHED_COSINE};
        ht_error e;
        if (lr_schedule_parse(&s, bad[k][0], &e) != -1) fail_msg("\"%s\" was accepted", bad[k][0]);
        if (!strstr(e.msg, bad[k][1]) || strchr(e.msg, '\n') || !strstr(e.msg, bad[k][0]))
            fail_msg("\"%s\": message \"%s\" should name %s on one line", bad[k][0], e.msg, bad[k][1]);
        assert_int_equal(s.kind, LR_SCHED_COSINE); // left as it was
    }
}

// Two steps with weight decay 0.01 on every parameter (no model: optim_decay_kernels not
// called), against the double-precision hand computation of optim.h's formulas: L2 adds W*p to
// the gradient; decoupled takes lr*W*p (p before the step) off the weight. With SGD's momentum
// the two part from the second step; Adam's normalisation parts them from the first.
static void test_weight_decay_steps(void **state) {
    (void)state;
    static const float sgd_l2[2][N] = {{0.899f, -1.948f, 0.2995f, 2.997f},
                                       {0.857201f, -1.999252f, 0.0937505f, 2.991303f}};
    static const float sgd_dec[2][N] = {{0.899f, -1.948f, 0.2995f, 2.997f},
                                        {0.858101f, -2.001052f, 0.0942005f, 2.994003f}};
    static const float adam_l2[2][N] = {{0.975792599f, -1.98587831f, 0.461198137f, 2.99906023f},
                                        {0.968519589f, -1.9947999f, 0.431631419f, 2.9977369f}};
    static const float adam_dec[2][N] = {{0.974974693f, -1.98434729f, 0.460757411f, 2.997f},
                                         {0.967044948f, -1.99192501f, 0.430829302f, 2.994003f}};
    const struct {
        const char *name;
        train_setup s;
        const float (*want)[N];
    } cases[] = {
        {"sgd l2", sgd_setup(0.1f, 0.9f, 0, 0.0f), sgd_l2},
        {"sgd decoupled", sgd_setup(0.1f, 0.9f, 0, 0.0f), sgd_dec},
        {"adam l2", adam_setup(0.1f, 0.9f, 0.999f, 0.1f, 0.0f), adam_l2},
        {"adam decoupled", adam_setup(0.1f, 0.9f, 0.999f, 0.1f, 0.0f), adam_dec},
    };
    for (int k = 0; k < 4; k++) {
        train_setup s = cases[k].s;
        s.weight_decay = 0.01f;
        s.wd_mode = k % 2 ? WD_DECOUPLED : WD_L2;
        optim o;
        ht_error e;
        assert_int_equal(optim_init(&o, &s, N, &e), 0);
        float p[N];
        memcpy(p, P0, sizeof p);
        for (int t = 0; t < 2; t++) {
            optim_step(&o, p, G[t]);
            char label[64];
            snprintf(label, sizeof label, "%s step %d", cases[k].name, t + 1);
            assert_true(check_tensor(p, cases[k].want[t], N, OPTIM_TOL, OPTIM_FLOOR, label));
        }
        optim_free(&o);
    }
    train_setup s = sgd_setup(0.1f, 0.9f, 0, 0.0f);
    s.weight_decay = -0.5f;
    optim o;
    ht_error e;
    assert_int_equal(optim_init(&o, &s, N, &e), -1);
    assert_non_null(strstr(e.msg, "weight decay"));
}

// On a real model weight decay reaches the kernels only: every bias comes out of the step
// bit for bit as without weight decay, every kernel element moves by what the decay adds. And
// with W = 0 the update is the formula's float arithmetic exactly (today's bits).
static void test_weight_decay_spares_biases(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    size_t n = m.n_params;
    float *p0 = malloc(n * sizeof *p0), *g = malloc(n * sizeof *g), *a = malloc(n * sizeof *a),
          *b = malloc(n * sizeof *b);
    assert_true(p0 && g && a && b);
    model_init_params(&m, p0, 3);
    for (size_t i = 0; i < n; i++) {
        p0[i] += 0.01f * (float)((i % 7) + 1); // biases start at zero: give them a value
        g[i] = 0.001f * (float)((int)(i % 11) - 5);
    }
    const float W = 0.05f, lr = 0.1f;
    for (int k = 0; k < 4; k++) {
        // Adam's eps 0.1: with a tiny eps its first step is lr_t*sign(g), which the L2 term
        // would not change.
        train_setup s = k < 2 ? sgd_setup(lr, 0.9f, 1, 0.0f) : adam_setup(lr, 0.9f, 0.999f, 0.1f, 0.0f);
        optim plain, dec;
        assert_int_equal(optim_init(&plain, &s, n, &e), 0);
        s.weight_decay = W;
        s.wd_mode = k % 2 ? WD_DECOUPLED : WD_L2;
        assert_int_equal(optim_init(&dec, &s, n, &e), 0);
        if (optim_decay_kernels(&dec, &m, &e) < 0) fail_msg("%s", e.msg);
        memcpy(a, p0, n * sizeof *a);
        memcpy(b, p0, n * sizeof *b);
        optim_step(&plain, a, g);
        optim_step(&dec, b, g);
        int kernels = 0;
        for (int t = 0; t < m.n_tensors; t++) {
            const model_tensor *mt = &m.tensors[t];
            if (mt->bias) {
                if (memcmp(a + mt->off, b + mt->off, mt->n * sizeof(float)))
                    fail_msg("case %d: bias %s changed by weight decay", k, mt->name);
                continue;
            }
            kernels++;
            // First step (v = 0): Nesterov SGD's L2 term moves p by -(1+mu)*lr*W*p; decoupled
            // (SGD, Adam) by -lr*W*p. Adam's L2 term goes through its normalisation, so only a
            // change is asserted there.
            for (size_t i = mt->off; i < mt->off + mt->n; i++) {
                float d = b[i] - a[i], want = (k == 0 ? -1.9f : -1.0f) * lr * W * p0[i];
                int ok = k == 2 ? d != 0 || p0[i] == 0
                                : fabsf(d - want) <= 1e-6f * fabsf(p0[i]) + 2e-7f * fabsf(a[i]) + 1e-9f;
                if (!ok)
                    fail_msg("case %d: %s[%zu]: moved by %g, want %g", k, mt->name, i - mt->off,
                             (double)d, (double)want);
            }
        }
        assert_true(kernels >= 4);
        optim_free(&plain);
        optim_free(&dec);
    }
    // W = 0 (with the kernels named): SGD Nesterov's float arithmetic, bit for bit.
    train_setup s = sgd_setup(lr, 0.9f, 1, 0.0f);
    optim o;
    assert_int_equal(optim_init(&o, &s, n, &e), 0);
    assert_int_equal(optim_decay_kernels(&o, &m, &e), 0);
    memcpy(a, p0, n * sizeof *a);
    optim_step(&o, a, g);
    for (size_t i = 0; i < n; i++) {
        float vi = 0.9f * 0.0f - lr * g[i];
        b[i] = p0[i] + (0.9f * vi - lr * g[i]);
    }
    assert_memory_equal(a, b, n * sizeof *a);
    optim_free(&o);
    free(p0);
    free(g);
    free(a);
    free(b);
    model_free(&m);
}

// Updates by slices (ZeRO stage 1 over ranks): three ranges that tile the buffer, updated
// one after another with each its own optimiser (as three ranks would), give the whole update's
// bits, for SGD and Adam with decoupled weight decay over the model's spans (slice edges inside
// a span); each range leaves the rest of the buffer and of the moments alone.
static void test_step_by_slices(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    const size_t n = m.n_trainable, cut[4] = {0, n / 3 + 5, 2 * n / 3 - 17, n};
    float *p0 = malloc(n * sizeof *p0), *g = malloc(n * sizeof *g), *whole = malloc(n * sizeof *whole),
          *part = malloc(n * sizeof *part);
    assert_true(p0 && g && whole && part);
    model_init_params(&m, p0, 4);
    for (size_t i = 0; i < n; i++) g[i] = 0.001f * (float)((int)(i % 13) - 6);
    for (int k = 0; k < 2; k++) {
        train_setup s = k ? adam_setup(0.01f, 0.9f, 0.999f, 1e-7f, 0.0f) : sgd_setup(0.1f, 0.9f, 1, 0.0f);
        s.weight_decay = 0.01f;
        s.wd_mode = WD_DECOUPLED;
        optim ref, r[3], ends;
        assert_int_equal(optim_init(&ref, &s, n, &e), 0);
        assert_int_equal(optim_use_model(&ref, &m, &e), 0);
        assert_int_equal(optim_init(&ends, &s, n, &e), 0);
        assert_int_equal(optim_use_model(&ends, &m, &e), 0);
        memcpy(whole, p0, n * sizeof *whole);
        memcpy(part, p0, n * sizeof *part);
        // The first and the last range in one call (a rank's slice and a layer it updates whole).
        float *both = malloc(n * sizeof *both);
        assert_non_null(both);
        memcpy(both, p0, n * sizeof *both);
        const size_t ranges[2][2] = {{cut[2], cut[3]}, {cut[0], cut[1]}};
        for (int q = 0; q < 3; q++) {
            assert_int_equal(optim_init(&r[q], &s, n, &e), 0);
            assert_int_equal(optim_use_model(&r[q], &m, &e), 0);
        }
        for (int t = 0; t < 2; t++) {
            optim_step_scaled(&ref, whole, g, 0.5f);
            for (int q = 0; q < 3; q++) {
                optim_step_range(&r[q], part, g, 0.5f, cut[q], cut[q + 1]);
                assert_int_equal(r[q].t, t + 1);
                if (q == 0) {
                    optim_step_ranges(&ends, both, g, 0.5f, ranges, 2);
                    assert_int_equal(ends.t, t + 1);
                }
                // Outside its range the moments stay zero.
                for (size_t i = 0; i < n; i++)
                    if ((i < cut[q] || i >= cut[q + 1]) && r[q].m[i] != 0.0f)
                        fail_msg("case %d: range %d moved moment %zu", k, q, i);
            }
        }
        assert_memory_equal(whole, part, n * sizeof *whole);
        for (int q = 0; q < 3; q += 2) {
            assert_memory_equal(whole + cut[q], both + cut[q], (cut[q + 1] - cut[q]) * sizeof(float));
            assert_memory_equal(ref.m + cut[q], ends.m + cut[q], (cut[q + 1] - cut[q]) * sizeof(float));
        }
        assert_memory_equal(both + cut[1], p0 + cut[1], (cut[2] - cut[1]) * sizeof(float));
        optim_free(&ends);
        free(both);
        for (int q = 0; q < 3; q++) {
            assert_memory_equal(ref.m + cut[q], r[q].m + cut[q], (cut[q + 1] - cut[q]) * sizeof(float));
            optim_free(&r[q]);
        }
        optim_free(&ref);
    }
    free(p0);
    free(g);
    free(whole);
    free(part);
    model_free(&m);
}

// --optimizer: Keras's defaults for the named optimizer replace the model's, then the keys;
// everything else in the setup stays; errors leave the setup as it was.
static void test_optimizer_parse(void **state) {
    (void)state;
    const train_setup base = {.optim = OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .nesterov = 1,
                              .decay = 1e-6f, .beta1 = 0.5f, .beta2 = 0.5f, .eps = 1e-3f,
                              .batch = 77, .epochs = 5, .val_split = 0.25f};
    ht_error e;
    train_setup s = base;
    assert_int_equal(optimizer_parse(&s, "Adam", &e), 0);
    assert_int_equal(s.optim, OPTIM_ADAM);
    assert_true(s.lr == 0.001f && s.beta1 == 0.9f && s.beta2 == 0.999f && s.eps == 1e-7f);
    assert_true(s.decay == 0 && s.batch == 77 && s.epochs == 5 && s.val_split == 0.25f);
    s = base;
    assert_int_equal(optimizer_parse(&s, "sgd", &e), 0);
    assert_true(s.optim == OPTIM_SGD && s.lr == 0.01f && s.momentum == 0 && !s.nesterov);
    assert_true(s.decay == 0);
    s = base;
    assert_int_equal(optimizer_parse(&s, "sgd:momentum=0.8,nesterov=true,learning_rate=0.2,"
                                         "decay=0.001", &e), 0);
    assert_true(s.momentum == 0.8f && s.nesterov == 1 && s.lr == 0.2f && s.decay == 0.001f);
    s = base;
    assert_int_equal(optimizer_parse(&s, "adam:beta_1=0.8,beta2=0.99,epsilon=1e-8,lr=0.01", &e), 0);
    assert_true(s.beta1 == 0.8f && s.beta2 == 0.99f && s.eps == 1e-8f && s.lr == 0.01f);
    const char *bad[][2] = {
        {"adamw", "expected sgd or adam"}, {"", "expected sgd or adam"},
        {"sgd:", "KEY=VALUE"},             {"sgd:momentum", "KEY=VALUE"},
        {"sgd:beta1=0.9", "no key"},       {"adam:momentum=0.9", "no key"},
        {"adam:eps=0", "eps must be"},     {"sgd:momentum=1", "momentum must be"},
        {"sgd:lr=x", "lr must be"},        {"sgd:nesterov=2", "nesterov takes"},
        {"adam:lr=0.1,", "KEY=VALUE"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        s = base;
        if (optimizer_parse(&s, bad[k][0], &e) != -1) fail_msg("\"%s\" was accepted", bad[k][0]);
        if (!strstr(e.msg, bad[k][1]) || strchr(e.msg, '\n'))
            fail_msg("\"%s\": message \"%s\" should say %s on one line", bad[k][0], e.msg,
                     bad[k][1]);
        assert_memory_equal(&s, &base, sizeof s); // left as it was
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),      cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),   cmocka_unit_test(test_sgd_decay),
        cmocka_unit_test(test_sgd_nesterov_decay), cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_eps_decay), cmocka_unit_test(test_large_buffer),
        cmocka_unit_test(test_init_free),      cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_lr_schedule_errors), cmocka_unit_test(test_weight_decay_steps),
        cmocka_unit_test(test_weight_decay_spares_biases), cmocka_unit_test(test_optimizer_parse),
        cmocka_unit_test(test_step_by_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
