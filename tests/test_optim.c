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

#include "optim.h"
#include "testutil.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),      cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),   cmocka_unit_test(test_sgd_decay),
        cmocka_unit_test(test_sgd_nesterov_decay), cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_eps_decay), cmocka_unit_test(test_large_buffer),
        cmocka_unit_test(test_init_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
