// The binary head (sigmoid + binary cross-entropy, [binary_crossentropy]): its values against
// the formula in double and finite differences, far into both tails; a network ending in it
// through net.c against the reference walker; the shapes it refuses. The multi-label head (the
// same over k logits): its losses against Keras's (tests/fixtures/keras/multilabel_loss.txt),
// its gradient against finite differences, a network against the reference, its predictions
// and accuracy. (Through the command line
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

#include "data/data.h"
#include "sharding/engine.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/net.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

// bce_forward computes in double and rounds to float: against the double formula within a few
// float ulps of the value.
#define TOL_BCE_VALUE 1e-6
// Central differences of the double loss: truncation O(h^2) at h = 1e-4.
#define TOL_BCE_FD 1e-6
// A network through net.c against the reference (float layers around the head).
#define TOL_BCE_NET 1e-4f
// Keras's float32 binary_crossentropy from the logits: a few float ulps of the loss.
#define TOL_KERAS_LOSS 1e-6
// From the probabilities (the evaluation's loss): float probabilities carry ~6e-8 relative, and
// Keras clips them at 1e-7 (a sigmoid of 12 is 1 - 6e-6: the clip moves its log by ~1e-7).
#define TOL_KERAS_PROB_LOSS 2e-6

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

static void test_bce_values(void **state) {
    (void)state;
    const float z[] = {-100.0f, -20.0f, -3.5f, -0.25f, 0.0f, 0.25f, 3.5f, 20.0f, 100.0f};
    enum { N = sizeof z / sizeof z[0] };
    for (int y = 0; y < 2; y++) {
        uint8_t lab[N];
        float probs[2 * N], loss[N], d[N];
        memset(lab, y, sizeof lab);
        bce_forward(probs, loss, z, lab, N, 1);
        bce_backward(d, probs, lab, N, 1);
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
    bce_forward(p2, &l, &z0, &one, 1, 1);
    assert_float_equal(l, 100.0f, 1e-4);
    bce_forward(p2, &l, &z0, &two, 1, 1); // a label that is neither 0 nor 1
    assert_true(isnan(l));
}

// conv -> relu -> pool -> dense 6 -> tanh -> dense k -> a sigmoid head: the binary head of 2
// classes (k = 1) or the multi-label head of k labels.
static void bce_model(model *m, int k) {
    ht_error e;
    assert_int_equal(model_begin(m, "bce", 1, 8, 8, k == 1 ? 2 : k, &e), 0);
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DENSE, .units = 6, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_TANH},
        {.kind = LAYER_DENSE, .units = k, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_CONSTANT,
         .b_arg = 0.1f},
        {.kind = LAYER_SIGMOID_BCE},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %zu: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
}

// B samples of a network ending in a sigmoid head, with labels y, through net.c against the
// reference walker: probabilities, losses and the gradient.
static void head_vs_reference(const model *m, const uint8_t *y, int B, const char *what) {
    const size_t in = (size_t)m->in_c * m->in_h * m->in_w, np = (size_t)B * m->n_classes;
    float *p = malloc(sizeof(float) * m->n_params), *x = malloc(sizeof(float) * B * in);
    float *gr = calloc(m->n_params, sizeof(float)), *g = calloc(m->n_params, sizeof(float));
    uint32_t *ids = malloc(sizeof(uint32_t) * B);
    for (size_t i = 0; i < B * in; i++) x[i] = (float)((i * 37 % 101) / 101.0);
    for (int i = 0; i < B; i++) ids[i] = (uint32_t)i;
    model_init_params(m, p, 4);
    net_dropout d = {.seed = 1, .ids = ids};
    ref_net r;
    ref_net_init(&r, m, B);
    const float *pr = ref_forward(&r, m, p, x, y, B, &d);
    ref_backward(&r, m, p, gr, x, y, B, &d);
    net_ws ws;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, m, B, 2, &e), 0);
    const float *pn = net_forward(&ws, m, p, x, y, B, &d);
    char tag[96];
    snprintf(tag, sizeof tag, "%s probabilities", what);
    assert_true(check_tensor(pn, pr, np, TOL_BCE_NET, 0.01f, tag));
    snprintf(tag, sizeof tag, "%s loss", what);
    assert_true(check_tensor(ws.loss, r.loss, B, TOL_BCE_NET, 1.0f, tag));
    net_backward_to(&ws, m, p, g, x, y, B, &d, NET_GRAD_WRITE);
    snprintf(tag, sizeof tag, "%s network vs reference", what);
    assert_true(check_params(m, g, gr, TOL_BCE_NET, tag));
    net_ws_free(&ws);
    ref_net_free(&r);
    free(p), free(x), free(gr), free(g), free(ids);
}

static void test_bce_net_against_reference(void **state) {
    (void)state;
    enum { B = 7 };
    model m;
    bce_model(&m, 1);
    assert_int_equal(m.layers[m.n_layers - 1].oc, 2); // the two classes' probabilities
    uint8_t y[B] = {0, 1, 1, 0, 1, 0, 0};
    head_vs_reference(&m, y, B, "binary head");
    model_free(&m);
}

// Neither head: other than 1 input feature or the model's label count, other than 2 classes
// for one feature, more labels than a prediction's bits carry.
static void test_bce_shape_errors(void **state) {
    (void)state;
    model m;
    ht_error e;
    assert_int_equal(model_begin(&m, "bad", 1, 4, 4, 2, &e), 0);
    layer_spec d3 = {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM};
    layer_spec head = {.kind = LAYER_SIGMOID_BCE};
    assert_int_equal(model_add(&m, &d3, &e), 0);
    assert_int_equal(model_add(&m, &head, &e), -1);
    test_expect_frags(e.msg, 1, "binary_crossentropy", "expected 1", "2 labels", NULL);
    model_free(&m);
    assert_int_equal(model_begin(&m, "wide", 1, 4, 4, MODEL_MAX_LABELS + 1, &e), 0);
    layer_spec dw = {.kind = LAYER_DENSE, .units = MODEL_MAX_LABELS + 1,
                     .w_init = INIT_LECUN_UNIFORM};
    assert_int_equal(model_add(&m, &dw, &e), 0);
    assert_int_equal(model_add(&m, &head, &e), -1);
    test_expect_frags(e.msg, 1, "multi-label head of 25 labels", "at most 24", NULL);
    model_free(&m);
    assert_int_equal(model_begin(&m, "bad", 1, 4, 4, 3, &e), 0);
    layer_spec d1 = {.kind = LAYER_DENSE, .units = 1, .w_init = INIT_LECUN_UNIFORM};
    assert_int_equal(model_add(&m, &d1, &e), 0);
    assert_int_equal(model_add(&m, &head, &e), -1);
    test_expect_frags(e.msg, 1, "needs 2 classes", NULL);
    model_free(&m);
}

// Keras's loss values for the multi-label head: per sample the mean of the labels' binary
// cross-entropies, from the logits (training) and from the probabilities (evaluation).
static void test_multilabel_keras_loss(void **state) {
    (void)state;
    enum { K = 4 };
    FILE *f = fopen(KDIR "multilabel_loss.txt", "r");
    assert_non_null(f);
    model m = {.n_classes = K, .label_width = K}; // what net_prob_loss reads
    int rows = 0;
    float z[K];
    int yi[K];
    double from_logits, from_probs;
    while (fscanf(f, "%f %f %f %f | %d %d %d %d | %lf %lf", &z[0], &z[1], &z[2], &z[3], &yi[0],
                  &yi[1], &yi[2], &yi[3], &from_logits, &from_probs) == 10) {
        uint8_t y[K];
        for (int j = 0; j < K; j++) y[j] = (uint8_t)yi[j];
        float probs[K], loss;
        bce_forward(probs, &loss, z, y, 1, K);
        assert_true(fabs(loss - from_logits) <= TOL_KERAS_LOSS * from_logits);
        double lp = net_prob_loss(&m, probs, y);
        assert_true(fabs(lp - from_probs) <= TOL_KERAS_PROB_LOSS * from_probs);
        rows++;
    }
    fclose(f);
    assert_int_equal(rows, 3);
}

// The multi-label head's gradient (dlogit = (p - y) / K) against central differences of the
// double loss, and its predictions and accuracy: labels over 0.5 as bits, the share right.
static void test_multilabel_gradient_predictions(void **state) {
    (void)state;
    enum { B = 3, K = 5 };
    const float z[B * K] = {-30, -2, -0.5f, 0, 0.75f, 3, 40, -0.01f, 0.01f, -5,
                            1, 2, 3, -4, -6};
    const uint8_t y[B * K] = {0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 1};
    float probs[B * K], loss[B], d[B * K];
    bce_forward(probs, loss, z, y, B, K);
    bce_backward(d, probs, y, B, K);
    for (int i = 0; i < B; i++)
        for (int j = 0; j < K; j++) {
            const int at = i * K + j;
            const double h = 1e-4;
            double lp = 0, lm = 0;
            for (int t = 0; t < K; t++) { // the sample's loss with logit j moved by +-h
                double zp = z[i * K + t] + (t == j ? h : 0), zm = z[i * K + t] - (t == j ? h : 0);
                lp += log1p(exp(-fabs(zp))) + fmax(zp, 0.0) - y[i * K + t] * zp;
                lm += log1p(exp(-fabs(zm))) + fmax(zm, 0.0) - y[i * K + t] * zm;
            }
            assert_true(fabs((lp - lm) / (2 * h * K) - d[at]) <= TOL_BCE_FD + 1e-7);
        }
    model m = {.n_classes = K, .label_width = K};
    // sample 0: p > 0.5 for z = 0.75 only (0 is not over 0.5): bits 4; labels 0 1 0 1 1
    assert_int_equal(net_predict(&m, probs), 1 << 4);
    assert_int_equal(net_labels_right(&m, net_predict(&m, probs), y), 3);
    assert_int_equal(net_predict(&m, probs + K), (1 << 0) | (1 << 1) | (1 << 3));
    assert_int_equal(net_labels_right(&m, net_predict(&m, probs + K), y + K), 4);
    assert_int_equal(net_predict(&m, probs + 2 * K), 7);
    assert_int_equal(net_labels_right(&m, 7, y + 2 * K), 3);
}

// conv -> relu -> pool -> dense 6 -> tanh -> dense 5 -> the multi-label head over 5 labels,
// through net.c against the reference walker.
static void test_multilabel_net_against_reference(void **state) {
    (void)state;
    enum { B = 6, K = 5 };
    model m;
    bce_model(&m, K);
    assert_int_equal(m.label_width, K);
    assert_int_equal(m.layers[m.n_layers - 1].oc, K); // each label's probability
    uint8_t y[B * K];
    for (int i = 0; i < B * K; i++) y[i] = (uint8_t)((i * 7 + 2) % 3 == 0);
    head_vs_reference(&m, y, B, "multi-label head");
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bce_values),
        cmocka_unit_test(test_bce_net_against_reference),
        cmocka_unit_test(test_bce_shape_errors),
        cmocka_unit_test(test_multilabel_keras_loss),
        cmocka_unit_test(test_multilabel_gradient_predictions),
        cmocka_unit_test(test_multilabel_net_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
