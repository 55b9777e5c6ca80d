// batchnorm on the CPU path: the double-precision reference against finite differences, the
// network's channels-last batchnorm (after a conv and after a dense layer) against the
// reference in training and inference, micro-batches of whole groups against the whole, the
// host's moving-average update, and the model's state layout and summary counts.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/batchnorm.h"
#include "nn/isa_kernels.h"
#include "tests/lib/fd.h"
#include "nn/model.h"
#include "nn/net.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

// The reference computes in double and rounds each output to float; the loss sums ~60 outputs,
// so the quotient's float noise is ~60 * 6e-8 / (2 FD_EPS) ~ 1e-4 absolute, and batchnorm is
// smooth (its truncation error is of order FD_EPS^2 ~ 2e-4 relative). Worst observed 4e-4.
#define TOL_BN_FD 3e-3f
// The network's float batchnorm against the double reference: per tensor relative L2. The
// statistics are accumulated in double on both sides; what differs is the float rounding of
// the layers around them (the same as the other kinds: TOL_NET_REF in test_net.c).
#define TOL_BN_NET 1e-4f
// Whole groups in several calls against one call: only the order of float sums differs.
#define TOL_BN_PARTS 2e-6f

// Loss L = sum_i w_i * out_i of a batchnorm in training over (B, C, P), groups of G.
static double bn_loss(const float *x, const float *gamma, const float *beta, const float *w,
                      int B, int C, int P, int G, float eps, float *out) {
    ref_bn_train_forward(out, x, gamma, beta, B, C, P, G, eps);
    double L = 0;
    for (int i = 0; i < B * C * P; i++) L += (double)w[i] * out[i];
    return L;
}

// The reference's backward (input, gamma and beta gradients) against central differences, over
// groups of 3, 3 and 1... of 5 samples: 3 and 2.
static void test_bn_reference_finite_differences(void **state) {
    (void)state;
    enum { B = 5, C = 3, P = 4, G = 3, N = B * C * P };
    const float eps = 1e-3f;
    float *x = fill_uniform(N, -1, 2, 1), *w = fill_uniform(N, -1, 1, 2);
    float *gamma = fill_uniform(C, 0.5f, 1.5f, 3), *beta = fill_uniform(C, -0.5f, 0.5f, 4);
    float out[N], din[N], dgamma[C] = {0}, dbeta[C] = {0}, sums[2 * C + 1] = {0};
    ref_bn_train_backward(din, dgamma, dbeta, sums, w, x, gamma, B, C, P, G, eps);
    assert_float_equal(sums[2 * C], 2.0f, 0); // two groups
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float keep = x[i];
        x[i] = keep + (float)FD_EPS;
        double lp = bn_loss(x, gamma, beta, w, B, C, P, G, eps, out);
        x[i] = keep - (float)FD_EPS;
        double lm = bn_loss(x, gamma, beta, w, B, C, P, G, eps, out);
        x[i] = keep;
        double num = (lp - lm) / (2 * FD_EPS);
        double err = fabs(num - din[i]) / fmax(fmax(fabs(num), fabs(din[i])), FD_FLOOR);
        if (err > worst) worst = err;
    }
    for (int c = 0; c < C; c++)
        for (int which = 0; which < 2; which++) {
            float *p = which ? &beta[c] : &gamma[c], keep = *p;
            *p = keep + (float)FD_EPS;
            double lp = bn_loss(x, gamma, beta, w, B, C, P, G, eps, out);
            *p = keep - (float)FD_EPS;
            double lm = bn_loss(x, gamma, beta, w, B, C, P, G, eps, out);
            *p = keep;
            double num = (lp - lm) / (2 * FD_EPS), an = which ? dbeta[c] : dgamma[c];
            double err = fabs(num - an) / fmax(fmax(fabs(num), fabs(an)), FD_FLOOR);
            if (err > worst) worst = err;
        }
    printf("batchnorm reference vs finite differences: worst %.2e (tolerance %.0e)\n", worst,
           (double)TOL_BN_FD);
    assert_true(worst < TOL_BN_FD);
    // Each group is normalised on its own: the outputs of a group have mean beta.
    ref_bn_train_forward(out, x, gamma, beta, B, C, P, G, eps);
    for (int c = 0; c < C; c++) {
        double m = 0;
        for (int b = 3; b < 5; b++)
            for (int p = 0; p < P; p++) m += out[(b * C + c) * P + p];
        assert_float_equal(m / (2 * P), beta[c], 1e-5);
    }
    free(x), free(w), free(gamma), free(beta);
}

// conv -> batchnorm -> relu -> maxpool -> dense -> batchnorm -> tanh -> dense -> softmax, the
// first batchnorm without beta (center = 0), the layers before a batchnorm without bias (its
// gradient would be zero: the batchnorm takes the mean out).
static void bn_model(model *m, int group) {
    ht_error e;
    assert_int_equal(model_begin(m, "bn", 2, 6, 6, 4, &e), 0);
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 5, .k = 3, .pad = 1, .no_bias = 1,
         .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_BATCHNORM, .no_center = 1, .w_init = INIT_RANDOM_UNIFORM, .w_arg = 0.5f,
         .w_arg2 = 1.5f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DENSE, .units = 7, .no_bias = 1, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_BATCHNORM, .momentum = 0.9f, .momentum_set = 1, .eps = 1e-5f,
         .eps_set = 1, .w_init = INIT_ONES, .b_init = INIT_RANDOM_UNIFORM, .b_arg = -0.3f,
         .b_arg2 = 0.3f},
        {.kind = LAYER_TANH}, // not fused: bn1's relu is
        {.kind = LAYER_DENSE, .units = 4, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %zu: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
    m->setup.bn_group = group;
}

static void test_bn_model_layout(void **state) {
    (void)state;
    model m;
    bn_model(&m, 4);
    const layer *b1 = &m.layers[1], *b2 = &m.layers[5];
    assert_int_equal(b1->n_w, 5);
    assert_int_equal(b1->n_b, 0);
    assert_int_equal(b2->n_b, 7);
    // The state follows every trainable parameter: 2C + 1 floats per batchnorm.
    assert_int_equal(m.n_state, 11 + 15);
    assert_int_equal(m.n_trainable + m.n_state, m.n_params);
    assert_int_equal(b1->s_off, m.n_trainable);
    assert_int_equal(b2->s_off, m.n_trainable + 11);
    const model_tensor *t;
    int nt = model_tensors(&m, &t);
    assert_string_equal(t[nt - 6].name, "bn1.running_mean");
    assert_string_equal(t[nt - 4].name, "bn1.num_batches_tracked");
    assert_int_equal(t[nt - 4].ndim, 0);
    assert_string_equal(t[nt - 1].name, "bn2.num_batches_tracked");
    assert_int_equal(model_bn_group(&m), 4);
    // Keras's counts: gamma, beta, moving mean and variance; not the update count.
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    model_print_summary(&m, f);
    fclose(f);
    char want[96];
    snprintf(want, sizeof want, "Total params: %zu\n", m.n_params - 2);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, "Non-trainable params: %d\n", 2 * 5 + 2 * 7);
    assert_non_null(strstr(buf, want));
    free(buf);
    // Moving averages start as Keras's: mean 0, variance 1, no updates.
    float *p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, p, 3);
    assert_float_equal(p[b2->s_off + 6], 0, 0);
    assert_float_equal(p[b2->s_off + 7], 1, 0);
    assert_float_equal(p[b2->s_off + 14], 0, 0);
    free(p);
    model_free(&m);
}

// One forward and backward of B samples in training through net.c (2 threads) and through the
// reference, with dropout's context (training); then inference with moving statistics.
static void test_bn_net_against_reference(void **state) {
    (void)state;
    enum { B = 10 };
    model m;
    bn_model(&m, 4); // groups of 4, 4 and 2
    const size_t in = (size_t)m.in_c * m.in_h * m.in_w;
    float *p = malloc(sizeof(float) * m.n_params), *x = fill_uniform(B * in, 0, 1, 11);
    float *gr = calloc(m.n_params, sizeof(float)), *g = calloc(m.n_params, sizeof(float));
    float *gp = calloc(m.n_params, sizeof(float));
    model_init_params(&m, p, 5);
    uint8_t y[B] = {0, 1, 2, 3, 0, 1, 2, 3, 1, 2};
    uint32_t ids[B] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    net_dropout d = {.seed = 1, .ids = ids};
    ref_net r;
    ref_net_init(&r, &m, B);
    ref_forward(&r, &m, p, x, y, B, &d);
    ref_backward(&r, &m, p, gr, x, y, B, &d);
    net_ws ws;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, &m, B, 2, &e), 0);
    net_forward(&ws, &m, p, x, y, B, &d);
    assert_true(check_tensor(ws.loss, r.loss, B, TOL_BN_NET, 1.0f, "batchnorm network loss"));
    net_backward_to(&ws, &m, p, g, x, y, B, &d, NET_GRAD_WRITE);
    assert_true(check_params(&m, g, gr, TOL_BN_NET, "batchnorm network vs reference"));
    // The state's sums: three groups' means and variances, and the count.
    assert_float_equal(g[m.layers[1].s_off + 10], 3.0f, 0);
    assert_float_equal(g[m.layers[5].s_off + 14], 3.0f, 0);
    // Whole groups in two calls (8 + 2) add up to the whole.
    for (int off = 0; off < B; off += 8) {
        int n = B - off < 8 ? B - off : 8;
        net_dropout dp = {.seed = 1, .ids = ids + off};
        net_forward(&ws, &m, p, x + off * in, y + off, n, &dp);
        net_backward_to(&ws, &m, p, gp, x + off * in, y + off, n, &dp,
                        off == 0 ? NET_GRAD_WRITE : NET_GRAD_ADD);
    }
    assert_true(check_params(&m, gp, g, TOL_BN_PARTS, "batchnorm network, parts vs whole"));
    // Another grouping is another computation: all 10 as one group moves the gradient far.
    m.setup.bn_group = B;
    float *gw = calloc(m.n_params, sizeof(float));
    net_ws ws2;
    assert_int_equal(net_ws_init(&ws2, &m, B, 2, &e), 0);
    net_forward(&ws2, &m, p, x, y, B, &d);
    net_backward_to(&ws2, &m, p, gw, x, y, B, &d, NET_GRAD_WRITE);
    const layer *fc1 = &m.layers[4];
    double diff = 0, norm = 0;
    for (size_t i = 0; i < fc1->n_w; i++) {
        diff += pow(gw[fc1->w_off + i] - g[fc1->w_off + i], 2);
        norm += pow(g[fc1->w_off + i], 2);
    }
    assert_true(sqrt(diff / norm) > 100 * TOL_BN_NET);
    net_ws_free(&ws2);
    m.setup.bn_group = 4;
    // Inference: the moving statistics, set away from their start.
    for (int l = 0; l < m.n_layers; l++) {
        const layer *L = &m.layers[l];
        for (int c = 0; L->n_s && c < L->oc; c++) {
            p[L->s_off + c] = 0.1f * (float)c - 0.2f;
            p[L->s_off + L->oc + c] = 0.5f + 0.25f * (float)c;
        }
    }
    const float *pr = ref_forward(&r, &m, p, x, NULL, B, NULL);
    const float *pn = net_forward(&ws, &m, p, x, NULL, B, NULL);
    assert_true(check_tensor(pn, pr, (size_t)B * m.n_classes, TOL_BN_NET, 0.01f,
                             "batchnorm network inference"));
    net_ws_free(&ws);
    ref_net_free(&r);
    free(p), free(x), free(gr), free(g), free(gp), free(gw);
    model_free(&m);
}

// A frozen batchnorm (trainable false) in training: the reference normalises with the moving
// statistics exactly as in inference, its input gradient matches finite differences of the
// reference's training loss, the CPU path matches the reference, gamma, beta and the
// statistics' place get nothing, and model_bn_update leaves the moving averages as they were.
// The layer before it trains (so its backward runs); the one after is a trainable batchnorm.
static void test_bn_frozen(void **state) {
    (void)state;
    enum { B = 6 };
    model m;
    bn_model(&m, 4);
    m.layers[1].frozen = 1;
    const layer *F = &m.layers[1];
    const size_t in = (size_t)m.in_c * m.in_h * m.in_w;
    float *p = malloc(sizeof(float) * m.n_params), *x = fill_uniform(B * in, 0, 1, 21);
    float *gr = calloc(m.n_params, sizeof(float)), *g = calloc(m.n_params, sizeof(float));
    model_init_params(&m, p, 7);
    for (int c = 0; c < F->oc; c++) {
        p[F->s_off + c] = 0.1f * (float)c - 0.2f;
        p[F->s_off + F->oc + c] = 0.5f + 0.25f * (float)c;
    }
    uint8_t y[B] = {0, 1, 2, 3, 0, 1};
    uint32_t ids[B] = {0, 1, 2, 3, 4, 5};
    net_dropout d = {.seed = 1, .ids = ids};
    ref_net r;
    ref_net_init(&r, &m, B);
    // Its output in training is its output at inference (the node after it is a relu).
    const size_t fo = layer_out_size(F) * B;
    float *train_out = malloc(sizeof(float) * fo);
    ref_forward(&r, &m, p, x, y, B, &d);
    memcpy(train_out, r.act[1], sizeof(float) * fo);
    ref_forward(&r, &m, p, x, y, B, NULL);
    assert_memory_equal(train_out, r.act[1], sizeof(float) * fo);
    // The input gradient through it against central differences of the training loss, on a
    // network smooth around the point (no relu or pooling): conv -> frozen batchnorm -> dense.
    {
        model f;
        ht_error fe;
        assert_int_equal(model_begin(&f, "frozen_fd", 2, 5, 5, 4, &fe), 0);
        const layer_spec fs[] = {
            {.kind = LAYER_CONV2D, .filters = 3, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
            {.kind = LAYER_BATCHNORM, .w_init = INIT_RANDOM_UNIFORM, .w_arg = 0.5f,
             .w_arg2 = 1.5f, .b_init = INIT_RANDOM_UNIFORM, .b_arg = -0.3f, .b_arg2 = 0.3f,
             .frozen = 1},
            {.kind = LAYER_DENSE, .units = 4, .w_init = INIT_LECUN_UNIFORM},
            {.kind = LAYER_SOFTMAX_XENT},
        };
        for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
            if (model_add(&f, &fs[i], &fe) < 0) fail_msg("model_add %zu: %s", i, fe.msg);
        if (model_finish(&f, &fe) < 0) fail_msg("model_finish: %s", fe.msg);
        const layer *FB = &f.layers[1], *fc = &f.layers[0];
        float *fp = malloc(sizeof(float) * f.n_params), *fg = calloc(f.n_params, sizeof(float));
        model_init_params(&f, fp, 9);
        for (int c = 0; c < FB->oc; c++) {
            fp[FB->s_off + c] = 0.2f * (float)c - 0.1f;
            fp[FB->s_off + FB->oc + c] = 0.4f + 0.3f * (float)c;
        }
        ref_net fr;
        ref_net_init(&fr, &f, B);
        ref_forward(&fr, &f, fp, x, y, B, &d);
        ref_backward(&fr, &f, fp, fg, x, y, B, &d);
        double worst = 0;
        for (size_t i = 0; i < fc->n_w + fc->n_b; i++) {
            float *w = &fp[fc->w_off + i], keep = *w;
            double l[2];
            for (int k = 0; k < 2; k++) {
                *w = keep + (float)(k ? -FD_EPS : FD_EPS);
                ref_forward(&fr, &f, fp, x, y, B, &d);
                l[k] = 0;
                for (int j = 0; j < B; j++) l[k] += fr.loss[j];
            }
            *w = keep;
            double fd = (l[0] - l[1]) / (2 * FD_EPS), an = fg[fc->w_off + i];
            worst = fmax(worst, fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), FD_FLOOR));
        }
        if (worst > TOL_BN_FD) fail_msg("frozen batchnorm: worst FD relative error %g", worst);
        ref_net_free(&fr);
        free(fp), free(fg);
        model_free(&f);
    }
    ref_forward(&r, &m, p, x, y, B, &d);
    memset(gr, 0, sizeof(float) * m.n_params);
    ref_backward(&r, &m, p, gr, x, y, B, &d);
    // The CPU path (its relu fused) against the reference; nothing for the frozen layer.
    net_ws ws;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, &m, B, 2, &e), 0);
    for (size_t i = 0; i < m.n_params; i++) g[i] = 1.0f; // the pass must overwrite
    net_forward(&ws, &m, p, x, y, B, &d);
    assert_true(check_tensor(ws.loss, r.loss, B, TOL_BN_NET, 1.0f, "frozen batchnorm loss"));
    net_backward_to(&ws, &m, p, g, x, y, B, &d, NET_GRAD_WRITE);
    assert_true(check_params(&m, g, gr, TOL_BN_NET, "frozen batchnorm network vs reference"));
    for (size_t i = 0; i < F->n_w; i++) assert_float_equal(g[F->w_off + i], 0, 0);
    for (size_t i = 0; i < F->n_s; i++) assert_float_equal(g[F->s_off + i], 0, 0);
    assert_float_equal(g[m.layers[5].s_off + 14], 2.0f, 0); // the trainable one: 2 groups
    float *before = malloc(sizeof(float) * m.n_params);
    memcpy(before, p, sizeof(float) * m.n_params);
    model_bn_update(&m, p, g);
    assert_memory_equal(p + F->s_off, before + F->s_off, sizeof(float) * F->n_s);
    assert_true(p[m.layers[5].s_off + 14] == before[m.layers[5].s_off + 14] + 1.0f);
    net_ws_free(&ws);
    ref_net_free(&r);
    free(p), free(x), free(gr), free(g), free(train_out), free(before);
    model_free(&m);
}

// model_bn_update: moving = momentum * moving + (1 - momentum) * (sum / groups), once a step.
static void test_bn_update(void **state) {
    (void)state;
    model m;
    bn_model(&m, 4);
    float *p = calloc(m.n_params, sizeof(float)), *s = calloc(m.n_params, sizeof(float));
    model_init_params(&m, p, 1);
    const layer *L = &m.layers[5]; // momentum 0.9, 7 units
    for (int c = 0; c < 7; c++) {
        s[L->s_off + c] = 3.0f * (float)c;      // three groups: mean c
        s[L->s_off + 7 + c] = 3.0f * 2.0f;      // variance 2
    }
    s[L->s_off + 14] = 3.0f;
    model_bn_update(&m, p, s);
    for (int c = 0; c < 7; c++) {
        assert_float_equal(p[L->s_off + c], 0.1f * (float)c, 1e-6);
        assert_float_equal(p[L->s_off + 7 + c], 0.9f + 0.1f * 2.0f, 1e-6);
    }
    assert_float_equal(p[L->s_off + 14], 1.0f, 0);
    // The first batchnorm saw no groups in this buffer: left alone.
    const layer *K = &m.layers[1];
    assert_float_equal(p[K->s_off + 5], 1.0f, 0);
    assert_float_equal(p[K->s_off + 10], 0.0f, 0);
    free(p), free(s);
    model_free(&m);
}

// The config's sections: Keras's names and defaults (also under Keras's class name), PyTorch's
// (momentum 1 - Keras's, eps 1e-5, affine), bn_group in [net], and the errors.
static void test_bn_config(void **state) {
    (void)state;
    char *dir = test_tmpdir("bn-config");
    static const char cfg[] = "[net]\ninput = 1x8x8\nbn_group = 6\n"
                              "[conv]\nfilters = 3\nsize = 3\nbias = 0\n[batchnorm]\n[relu]\n"
                              "[conv]\nfilters = 3\nsize = 3\n[BatchNorm2d]\nmomentum = 0.2\n"
                              "affine = 0\n[dense]\nunits = 5\n"
                              "[BatchNormalization]\ncenter = false\nepsilon = 0.01\nmomentum = 0.9\n"
                              "trainable = false\n"
                              "[dense]\nunits = 10\n[softmax]\n";
    char *path = test_write_file(dir, "bn.cfg", cfg, sizeof cfg - 1);
    model m;
    ht_error e;
    if (model_init_config(&m, path, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(m.setup.bn_group, 6);
    const layer *a = &m.layers[1], *b = &m.layers[4], *c = &m.layers[6];
    assert_int_equal(a->kind, LAYER_BATCHNORM);
    assert_float_equal(a->momentum, 0.99f, 1e-7);
    assert_float_equal(a->eps, 1e-3f, 1e-9);
    assert_int_equal(a->n_w, 3);
    assert_int_equal(a->n_b, 3);
    assert_float_equal(b->momentum, 0.8f, 1e-7); // PyTorch's 0.2
    assert_float_equal(b->eps, 1e-5f, 1e-10);
    assert_int_equal(b->n_w + b->n_b, 0);        // affine = 0
    assert_float_equal(c->eps, 0.01f, 1e-9);
    assert_float_equal(c->momentum, 0.9f, 1e-7); // Keras's class keeps Keras's meaning
    assert_true(c->frozen && !a->frozen && !b->frozen); // trainable = false: frozen
    assert_int_equal(c->n_w, 5);
    assert_int_equal(c->n_b, 0);                 // center = false
    float *p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, p, 1);
    assert_float_equal(p[a->w_off], 1.0f, 0); // gamma starts at 1
    free(p);
    model_free(&m);
    static const char bad[] = "[net]\ninput = 1x8x8\n[conv]\nfilters = 3\nsize = 3\n"
                              "[batchnorm]\nmomentum = 1.5\n[dense]\nunits = 10\n[softmax]\n";
    char *bpath = test_write_file(dir, "bad.cfg", bad, sizeof bad - 1);
    assert_int_equal(model_init_config(&m, bpath, &e), -1);
    test_expect_frags(e.msg, 1, "bad.cfg:7", "momentum", NULL);
    free(path), free(bpath), free(dir);
}

// batchnorm's passes in every instruction set's copy (bn_vec.c): training forward with and
// without the fused relu, its backward through the relu's mask, inference and the frozen
// backward, channels-last with pad channels (NaN in the input's, which must never reach a
// result), two threads, groups of 3 over 7 samples. The statistics are summed in double per
// channel along the rows and every set vectorises across channels only: the same bits in every
// set; and the widest set's forward against the double reference.
static void test_bn_kernel_sets(void **state) {
    (void)state;
    enum { B = 7, P = 9, C = 21, CS = 32, G = 3, NG = (B + G - 1) / G };
    const size_t rows = (size_t)B * P, n = rows * CS;
    const float eps = 1e-3f;
    float *x = fill_uniform(n, -2, 3, 4100), *dy = fill_uniform(n, -1, 1, 4101);
    float *gamma = fill_uniform(C, 0.5f, 1.5f, 4102), *beta = fill_uniform(C, -0.5f, 0.5f, 4103);
    float *mean = fill_uniform(C, -0.2f, 0.2f, 4104), *var = fill_uniform(C, 0.5f, 2.0f, 4105);
    for (size_t r = 0; r < rows; r++)
        for (int c = C; c < CS; c++) x[r * CS + c] = NAN, dy[r * CS + c] = NAN;
    // Per set: out (relu), out (no relu), din, dgamma, dbeta, sums, inference out, frozen din.
    const size_t per = 5 * n + 4 * (size_t)C + 1;
    const isa_kernels *sets[8], *was = isa_kernels_active();
    const int ns = isa_kernels_supported(sets, 8);
    float *res = calloc(per * (size_t)ns, sizeof *res), stats[3 * C * NG];
    for (int i = 0; i < ns; i++) {
        isa_kernels_set(sets[i]);
        float *o = res + per * (size_t)i, *o0 = o + n, *din = o0 + n, *inf = din + n;
        float *fdin = inf + n, *dg = fdin + n, *db = dg + C, *sums = db + C;
        bn_train_forward(o0, x, gamma, beta, stats, B, P, C, CS, G, eps, 0, 2);
        bn_train_forward(o, x, gamma, beta, stats, B, P, C, CS, G, eps, 1, 2);
        assert_int_equal(bn_train_backward(din, dg, db, sums, dy, x, gamma, stats, o, B, P, C, CS,
                                           G, 2), 0);
        assert_true(sums[2 * C] == (float)NG);
        bn_infer_forward(inf, x, gamma, beta, mean, var, rows, C, CS, eps, 1, 2);
        bn_frozen_backward(fdin, dy, gamma, var, inf, rows, C, CS, eps, 2);
        for (size_t r = 0; r < rows; r++)
            for (int c = C; c < CS; c++) {
                assert_true(o[r * CS + c] == 0.0f && o0[r * CS + c] == 0.0f);
                assert_true(din[r * CS + c] == 0.0f && fdin[r * CS + c] == 0.0f);
            }
        if (i == 0) { // the widest set's forward against the reference (NCHW, double)
            float *xc = malloc(sizeof(float) * B * C * P), *want = malloc(sizeof(float) * B * C * P);
            for (int b = 0; b < B; b++)
                for (int c = 0; c < C; c++)
                    for (int p = 0; p < P; p++)
                        xc[((size_t)b * C + c) * P + p] = x[((size_t)b * P + p) * CS + c];
            ref_bn_train_forward(want, xc, gamma, beta, B, C, P, G, eps);
            for (int b = 0; b < B; b++)
                for (int c = 0; c < C; c++)
                    for (int p = 0; p < P; p++) {
                        const float w = want[((size_t)b * C + c) * P + p];
                        assert_float_equal(o0[((size_t)b * P + p) * CS + c], w,
                                           TOL_BN_NET * fmaxf(1.0f, fabsf(w)));
                    }
            free(xc), free(want);
        } else if (memcmp(o, res, per * sizeof *res)) {
            fail_msg("batchnorm in %s: not the bits of %s", sets[i]->isa, sets[0]->isa);
        }
    }
    isa_kernels_set(was);
    free(x), free(dy), free(gamma), free(beta), free(mean), free(var), free(res);
}

// A batchnorm fused into its conv (batchnorm.h's bn_fuse): statistics from the samples' sums
// (bn_sample_parts, each about its own first value) against the pass over the rows, on data
// far from 0 (mean ~100.5, variance ~1/3: a shift that went wrong would cost the variance its
// digits); and the input gradient a sample at a time from the coefficients, against the whole
// backward's din bit for bit, with and without the fused relu's mask, its other sums the same.
// Both statistics are summed in double and rounded to float once: TOL_BN_FUSED_ULPS apart.
#define TOL_BN_FUSED_ULPS 4
static void test_bn_fused_passes(void **state) {
    (void)state;
    enum { B = 10, P = 70, C = 20, CS = 32, G = 4, NG = (B + G - 1) / G };
    const float eps = 1e-3f;
    const size_t n = (size_t)B * P * CS;
    float *x = fill_uniform(n, 99.5f, 101.5f, 41), *dy = fill_uniform(n, -1, 1, 42);
    float *gamma = fill_uniform(C, 0.5f, 1.5f, 43), *beta = fill_uniform(C, -0.5f, 0.5f, 44);
    float *relu = fill_uniform(n, -1, 1, 45);
    for (size_t i = 0; i < n; i++) relu[i] = relu[i] > 0 ? relu[i] : 0.0f;
    double *parts = malloc(sizeof(double) * B * 3 * C);
    for (int s = 0; s < B; s++) bn_sample_parts(parts + s * 3 * C, x + (size_t)s * P * CS, P, C, CS);
    float *out0 = malloc(sizeof(float) * n), *out1 = malloc(sizeof(float) * n);
    float st0[NG * 3 * C], st1[NG * 3 * C];
    bn_train_forward(out0, x, gamma, beta, st0, B, P, C, CS, G, eps, 1, 2);
    bn_train_forward_parts(out1, x, gamma, beta, st1, B, P, C, CS, G, eps, 1, parts, 2);
    for (int i = 0; i < NG * 3 * C; i++)
        assert_float_equal(st1[i], st0[i], TOL_BN_FUSED_ULPS * 0x1p-23f * fabsf(st0[i]));
    // The variance is ~1/3 (uniform over a width of 2) beside a mean of ~100.5.
    assert_true(st0[C] > 0.25f && st0[C] < 0.42f);
    for (int rl = 0; rl < 2; rl++) {
        const float *ro = rl ? relu : NULL;
        float *din = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
        float sums0[2 * C + 1] = {0}, sums1[2 * C + 1] = {0}, dg0[C], dg1[C], db0[C], db1[C];
        memset(dg0, 0, sizeof dg0), memset(dg1, 0, sizeof dg1);
        memset(db0, 0, sizeof db0), memset(db1, 0, sizeof db1);
        float coef[NG * 3 * C];
        assert_int_equal(bn_train_backward(din, dg0, db0, sums0, dy, x, gamma, st0, ro, B, P, C,
                                           CS, G, 2), 0);
        assert_int_equal(bn_train_backward_coef(coef, dg1, db1, sums1, dy, x, gamma, st0, ro, B,
                                                P, C, CS, G, 2), 0);
        const bn_fuse f = {.dout = dy, .relu_out = ro, .stats = st0, .coef = coef, .G = G, .C = C};
        for (int s = 0; s < B; s++) bn_dx_sample(dx + (size_t)s * P * CS, &f, x, s, P, CS);
        assert_memory_equal(dx, din, sizeof(float) * n);
        assert_memory_equal(dg1, dg0, sizeof dg0);
        assert_memory_equal(db1, db0, sizeof db0);
        assert_memory_equal(sums1, sums0, sizeof sums0);
        free(din), free(dx);
    }
    free(x), free(dy), free(gamma), free(beta), free(relu), free(parts), free(out0), free(out1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_reference_finite_differences),
        cmocka_unit_test(test_bn_model_layout),
        cmocka_unit_test(test_bn_net_against_reference),
        cmocka_unit_test(test_bn_update),
        cmocka_unit_test(test_bn_config),
        cmocka_unit_test(test_bn_frozen),
        cmocka_unit_test(test_bn_kernel_sets),
        cmocka_unit_test(test_bn_fused_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
