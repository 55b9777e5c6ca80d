// The binary head (sigmoid + binary cross-entropy, [binary_crossentropy]): its values against
// the formula in double and finite differences, far into both tails; a network ending in it
// through net.c against the reference walker; the shapes it refuses. (Through the command line
// on CPU and OpenCL devices: tests/cli/test_bce_cli.c.)
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data.h"
#include "engine.h"
#include "layers.h"
#include "model.h"
#include "net.h"
#include "ref.h"
#include "testutil.h"

// bce_forward computes in double and rounds to float: against the double formula within a few
// float ulps of the value.
#define TOL_BCE_VALUE 1e-6
// Central differences of the double loss: truncation O(h^2) at h = 1e-4.
#define TOL_BCE_FD 1e-6
// A network through net.c against the reference (float layers around the head).
#define TOL_BCE_NET 1e-4f

static void test_bce_values(void **state) {
    (void)state;
    const float z[] = {-100.0f, -20.0f, -3.5f, -0.25f, 0.0f, 0.25f, 3.5f, 20.0f, 100.0f};
    enum { N = sizeof z / sizeof z[0] };
    for (int y = 0; y < 2; y++) {
        uint8_t lab[N];
        float probs[2 * N], loss[N], d[N];
        memset(lab, y, sizeof lab);
        bce_forward(probs, loss, z, lab, N);
        bce_backward(d, probs, lab, N);
        for (int i = 0; i < N; i++) {
            double p = 1.0 / (1.0 + exp(-(double)z[i]));
            // -(y log p + (1-y) log(1-p)) = softplus(z) - y z, exactly, without log(0)
            double want = log1p(exp(-fabs((double)z[i]))) + fmax(z[i], 0.0) - y * (double)z[i];
            assert_true(isfinite(loss[i]));
            assert_true(fabs(loss[i] - want) <= TOL_BCE_VALUE * fmax(1.0, want));
            assert_true(fabs(probs[2 * i + 1] - p) <= TOL_BCE_VALUE);
            assert_true(fabs(probs[2 * i] + probs[2 * i + 1] - 1.0) <= TOL_BCE_VALUE);
            // d loss / d z = p - y, against central differences of the formula
            const double h = 1e-4, zp = z[i] + h, zm = z[i] - h;
            double lp = log1p(exp(-fabs(zp))) + fmax(zp, 0.0) - y * zp;
            double lm = log1p(exp(-fabs(zm))) + fmax(zm, 0.0) - y * zm;
            assert_true(fabs((lp - lm) / (2 * h) - d[i]) <= TOL_BCE_FD + 1e-7);
        }
    }
    // The wrong side of a confident logit costs its size, not infinity.
    uint8_t one = 1, two = 2;
    float z0 = -100.0f, p2[2], l;
    bce_forward(p2, &l, &z0, &one, 1);
    assert_float_equal(l, 100.0f, 1e-4);
    bce_forward(p2, &l, &z0, &two, 1); // a label that is neither 0 nor 1
    assert_true(isnan(l));
}

// conv -> relu -> pool -> dense 6 -> tanh -> dense 1 -> binary head, 2 classes.
static void bce_model(model *m) {
    ht_error e;
    assert_int_equal(model_begin(m, "bce", 1, 8, 8, 2, &e), 0);
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DENSE, .units = 6, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_TANH},
        {.kind = LAYER_DENSE, .units = 1, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_CONSTANT,
         .b_arg = 0.1f},
        {.kind = LAYER_SIGMOID_BCE},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %zu: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
}

static void test_bce_net_against_reference(void **state) {
    (void)state;
    enum { B = 7 };
    model m;
    bce_model(&m);
    assert_int_equal(m.layers[m.n_layers - 1].oc, 2); // the two classes' probabilities
    const size_t in = (size_t)m.in_c * m.in_h * m.in_w;
    float *p = malloc(sizeof(float) * m.n_params), *x = malloc(sizeof(float) * B * in);
    float *gr = calloc(m.n_params, sizeof(float)), *g = calloc(m.n_params, sizeof(float));
    for (size_t i = 0; i < B * in; i++) x[i] = (float)((i * 37 % 101) / 101.0);
    model_init_params(&m, p, 4);
    uint8_t y[B] = {0, 1, 1, 0, 1, 0, 0};
    uint32_t ids[B] = {0, 1, 2, 3, 4, 5, 6};
    net_dropout d = {.seed = 1, .ids = ids};
    ref_net r;
    ref_net_init(&r, &m, B);
    const float *pr = ref_forward(&r, &m, p, x, y, B, &d);
    ref_backward(&r, &m, p, gr, x, y, B, &d);
    net_ws ws;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, &m, B, 2, &e), 0);
    const float *pn = net_forward(&ws, &m, p, x, y, B, &d);
    assert_true(check_tensor(pn, pr, 2 * B, TOL_BCE_NET, 0.01f, "binary head probabilities"));
    assert_true(check_tensor(ws.loss, r.loss, B, TOL_BCE_NET, 1.0f, "binary head loss"));
    net_backward_to(&ws, &m, p, g, x, y, B, &d, 1);
    assert_true(check_params(&m, g, gr, TOL_BCE_NET, "binary head network vs reference"));
    net_ws_free(&ws);
    ref_net_free(&r);
    free(p), free(x), free(gr), free(g);
    model_free(&m);
}

// Not a binary head: more than one input feature, or other than 2 classes.
static void test_bce_shape_errors(void **state) {
    (void)state;
    model m;
    ht_error e;
    assert_int_equal(model_begin(&m, "bad", 1, 4, 4, 2, &e), 0);
    layer_spec d2 = {.kind = LAYER_DENSE, .units = 2, .w_init = INIT_LECUN_UNIFORM};
    layer_spec head = {.kind = LAYER_SIGMOID_BCE};
    assert_int_equal(model_add(&m, &d2, &e), 0);
    assert_int_equal(model_add(&m, &head, &e), -1);
    test_expect_frags(e.msg, 1, "binary_crossentropy", "expected 1", NULL);
    model_free(&m);
    assert_int_equal(model_begin(&m, "bad", 1, 4, 4, 3, &e), 0);
    layer_spec d1 = {.kind = LAYER_DENSE, .units = 1, .w_init = INIT_LECUN_UNIFORM};
    assert_int_equal(model_add(&m, &d1, &e), 0);
    assert_int_equal(model_add(&m, &head, &e), -1);
    test_expect_frags(e.msg, 1, "needs 2 classes", NULL);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bce_values),
        cmocka_unit_test(test_bce_net_against_reference),
        cmocka_unit_test(test_bce_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
