// What a Keras model JSON changes in training (keras.c, model.c, optim.c): kernel and bias
// regularizers (L1, L2, L1L2) and frozen layers (trainable false), as real Keras 3 and Keras 2
// wrote them (tools/keras_reg_fixture.py). At the fixture's weights and batch hetrain's
// regularization term, loss, the term's gradient and one SGD step are Keras's own numbers
// (reg_k*.txt, frozen_k*.txt, frozen_bn_k3.txt: a frozen BatchNormalization, in inference mode
// in fit too); frozen layers' parameters and optimizer moments stay as they are; the counts are
// Keras's; malformed regularizers give one-line errors.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/keras.h"
#include "nn/model.h"
#include "nn/net.h"
#include "nn/optim.h"
#include "core/rng.h"
#include "tests/lib/keras_expect.h"
#include "tests/lib/testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

// Keras computes the term in float32 (factor * a float sum), hetrain in double: a few float
// roundings of the term (1.3 for reg, 0.13 or 0.017 for frozen).
#define TOL_PENALTY 1e-6
// The loss: the cross-entropy of 4 samples through 4 layers in float32 on both sides (JAX or
// TensorFlow against hetrain's kernels), plus the term: measured at most 4e-7 apart.
#define TOL_LOSS 5e-6
// The term's gradient is elementwise (2 * l2 * w + l1 * sign(w)): float roundings, relative.
#define TOL_GRAD_PENALTY 1e-6f
// One SGD step (lr 0.1) from the same weights: the data gradient's float sums in another order
// plus the term's gradient; measured at most 2e-7 off in a weight; relative to max(|w|, 0.01).
#define TOL_STEP 5e-6f

static void load(model *m, const char *path) {
    ht_error e = {{0}};
    if (model_init(m, path, &e) < 0) fail_msg("%s: %s", path, e.msg);
}

// ---- Keras's numbers (tools/keras_reg_fixture.py) ----------------------------------------------

typedef struct keras_numbers {
    size_t n;                   // parameters
    float *params, *grad, *after;
    float *x;                   // B inputs (NCHW)
    uint8_t y[16];
    int B;
    double penalty, loss, lr, fit_loss;
} keras_numbers;

// The values of the line "key count v..." in text (n of them in *n); a malloc'd array.
static double *values(const char *text, const char *key, size_t *n) {
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, klen) || p[klen] != ' ') continue;
        char *end;
        *n = strtoul(p + klen + 1, &end, 10);
        double *v = malloc((*n ? *n : 1) * sizeof *v);
        for (size_t i = 0; i < *n; i++) v[i] = strtod(end, &end);
        return v;
    }
    fail_msg("no line \"%s\"", key);
    return NULL;
}

static float *floats(const char *text, const char *key, size_t want) {
    size_t n;
    double *v = values(text, key, &n);
    if (n != want) fail_msg("%s: %zu values, expected %zu", key, n, want);
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = (float)v[i];
    free(v);
    return f;
}

static double number(const char *text, const char *key) {
    size_t n;
    double *v = values(text, key, &n);
    assert_int_equal(n, 1);
    double x = v[0];
    free(v);
    return x;
}

static void numbers_read(keras_numbers *k, const model *m, const char *file) {
    char *text = test_read_file(file, NULL);
    assert_non_null(text);
    size_t n, in = (size_t)m->in_c * m->in_h * m->in_w;
    double *y = values(text, "y", &n);
    assert_true(n >= 1 && n <= 16);
    k->B = (int)n;
    for (size_t i = 0; i < n && i < 16; i++) k->y[i] = (uint8_t)y[i];
    free(y);
    k->n = m->n_params;
    k->params = floats(text, "params", k->n);
    k->grad = floats(text, "grad_penalty", k->n);
    k->after = floats(text, "after_sgd", k->n);
    k->x = floats(text, "x", (size_t)k->B * in);
    k->penalty = number(text, "penalty");
    k->loss = number(text, "loss");
    k->lr = number(text, "lr");
    k->fit_loss = number(text, "fit_loss");
    free(text);
}

static void numbers_free(keras_numbers *k) {
    free(k->params);
    free(k->grad);
    free(k->after);
    free(k->x);
}

// One SGD step of rate lr (no momentum) on params with the summed gradient g of B samples (NULL:
// a zero gradient), through the optimizer as the engine drives it (optim_use_model).
static void sgd_step(const model *m, float *params, const float *g, int B, double lr) {
    train_setup s = m->setup;
    s.optim = OPTIM_SGD, s.lr = (float)lr, s.momentum = 0, s.nesterov = 0, s.decay = 0;
    s.weight_decay = 0;
    optim o;
    ht_error e = {{0}};
    if (optim_init(&o, &s, m->n_trainable, &e) < 0 || optim_use_model(&o, m, &e) < 0)
        fail_msg("%s", e.msg);
    float *zero = calloc(m->n_params, sizeof *zero);
    optim_step_scaled(&o, params, g ? g : zero, 1.0f / (float)B);
    free(zero);
    optim_free(&o);
}

// hetrain against Keras's numbers for one fixture.
static void check_fixture(const char *json, const char *txt) {
    model m;
    load(&m, json);
    m.setup.conv_algo = CONV_ALGO_DIRECT;
    keras_numbers k;
    numbers_read(&k, &m, txt);
    char what[256];

    // The term, and the loss Keras's evaluate and fit report: cross-entropy plus the term.
    double pen = model_reg_penalty(&m, k.params);
    if (!(fabs(pen - k.penalty) <= TOL_PENALTY))
        fail_msg("%s: penalty %.9g, Keras %.9g", json, pen, k.penalty);
    net_ws ws;
    ht_error e = {{0}};
    if (net_ws_init(&ws, &m, k.B, 1, &e) < 0) fail_msg("%s", e.msg);
    uint32_t ids[16];
    for (int i = 0; i < k.B; i++) ids[i] = (uint32_t)i;
    net_dropout drop = {.seed = 1, .epoch = 0, .ids = ids};
    net_forward(&ws, &m, k.params, k.x, k.y, k.B, &drop);
    double ce = 0;
    for (int i = 0; i < k.B; i++) ce += ws.loss[i];
    double loss = ce / k.B + pen;
    if (!(fabs(loss - k.loss) <= TOL_LOSS) || !(fabs(loss - k.fit_loss) <= TOL_LOSS))
        fail_msg("%s: loss %.9g (cross-entropy %.9g + term %.9g), Keras evaluate %.9g, fit %.9g",
                 json, loss, ce / k.B, pen, k.loss, k.fit_loss);
    if (getenv("HT_TEST_MARGINS") && *getenv("HT_TEST_MARGINS") != '0')
        printf("margin: %s: term %.9g vs Keras %.9g (tol %g), loss %.9g vs %.9g (tol %g)\n", json,
               pen, k.penalty, TOL_PENALTY, loss, k.loss, TOL_LOSS);

    // The term's gradient alone: a step of rate 1024 on a zero data gradient moves each
    // trainable parameter by 1024 times minus it (a step far larger than the weight, so that
    // the weight's rounding does not hide the gradient's digits), a frozen one not at all.
    float *p = malloc(k.n * sizeof *p), *g = malloc(k.n * sizeof *g);
    memcpy(p, k.params, k.n * sizeof *p);
    sgd_step(&m, p, NULL, 1, 1024.0);
    for (size_t i = 0; i < k.n; i++) g[i] = (k.params[i] - p[i]) / 1024.0f;
    snprintf(what, sizeof what, "%s: gradient of the regularization term", json);
    assert_true(check_tensor(g, k.grad, k.n, TOL_GRAD_PENALTY, 1e-3f, what));

    // One step of Keras's fit (SGD, the whole batch): the data gradient plus the term's.
    memcpy(p, k.params, k.n * sizeof *p);
    net_backward_to(&ws, &m, k.params, g, k.x, k.y, k.B, &drop, NET_GRAD_WRITE);
    sgd_step(&m, p, g, k.B, k.lr);
    snprintf(what, sizeof what, "%s: weights after one SGD step", json);
    assert_true(check_tensor(p, k.after, k.n, TOL_STEP, 1e-2f, what));
    for (int l = 0; l < m.n_layers; l++) { // frozen: exactly as they were
        const layer *L = &m.layers[l];
        if (!L->frozen) continue;
        assert_memory_equal(p + L->w_off, k.params + L->w_off, L->n_w * sizeof *p);
        if (L->n_b) assert_memory_equal(p + L->b_off, k.params + L->b_off, L->n_b * sizeof *p);
    }
    net_ws_free(&ws);
    free(p);
    free(g);
    numbers_free(&k);
    model_free(&m);
}

static void test_keras_numbers(void **state) {
    (void)state;
    check_fixture(KDIR "reg_k3.json", KDIR "reg_k3.txt");
    check_fixture(KDIR "reg_k2.json", KDIR "reg_k2.txt");
    check_fixture(KDIR "frozen_k3.json", KDIR "frozen_k3.txt");
    check_fixture(KDIR "frozen_k2.json", KDIR "frozen_k2.txt");
    // A frozen BatchNormalization: inference mode in fit too, its moving averages kept.
    check_fixture(KDIR "frozen_bn_k3.json", KDIR "frozen_bn_k3.txt");
}

// ---- what is read ----------------------------------------------------------------------------

// `hetrain summary`'s table for m, as a string to free.
static char *summary_text(const model *m) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    model_print_summary(m, f);
    fclose(f);
    return buf;
}

static const char *group(size_t n, char *buf) { // 1984 -> "1,984"
    if (n >= 1000) sprintf(buf, "%zu,%03zu", n / 1000, n % 1000);
    else sprintf(buf, "%zu", n);
    return buf;
}

// Every fixture of reg_params.txt has Keras's total, trainable and non-trainable counts (a
// frozen layer's parameters are non-trainable).
static void test_counts(void **state) {
    (void)state;
    char *list = test_read_file(KDIR "reg_params.txt", NULL);
    assert_non_null(list);
    int n = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n"), n++) {
        char file[128], path[512], want[64], num[32];
        size_t total, trainable, frozen;
        assert_int_equal(sscanf(line, "%127s %zu %zu %zu", file, &total, &trainable, &frozen), 4);
        snprintf(path, sizeof path, KDIR "%s", file);
        model m;
        load(&m, path);
        size_t counts = 0; // a batchnorm's count of updates, which Keras does not keep
        for (int l = 0; l < m.n_layers; l++) counts += m.layers[l].n_s > 0;
        assert_int_equal(m.n_params - counts, total);
        assert_int_equal(m.n_trainable - model_frozen_params(&m), trainable);
        char *s = summary_text(&m);
        snprintf(want, sizeof want, "Total params: %s\n", group(total, num));
        assert_non_null(strstr(s, want));
        if (frozen) {
            snprintf(want, sizeof want, "Trainable params: %s\n", group(trainable, num));
            assert_non_null(strstr(s, want));
            snprintf(want, sizeof want, "Non-trainable params: %s\n", group(frozen, num));
            assert_non_null(strstr(s, want));
        }
        free(s);
        model_free(&m);
    }
    assert_int_equal(n, 5);
    free(list);
}

// The factors as Keras wrote them: by class (L1, L2, L1L2) and by Keras's names ("l1", "l2",
// 0.01 each); a Keras 3 model's frozen layers keep no term (Keras 3 adds the trainable weights'
// alone), a Keras 2 model's keep theirs.
static void test_read(void **state) {
    (void)state;
    static const struct {
        const char *name;
        float w_l1, w_l2, b_l1, b_l2;
    } want[] = {{"conv2d", 0, 0.01f, 0.02f, 0}, {"conv2d_1", 0.001f, 0.005f, 0, 0.01f},
                {"dense", 0.01f, 0, 0.003f, 0.004f}, {"dense_1", 0, 0.002f, 0, 0}};
    const char *files[] = {KDIR "reg_k3.json", KDIR "reg_k2.json"};
    for (int f = 0; f < 2; f++) {
        model m;
        load(&m, files[f]);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            int l = model_find_layer(&m, want[i].name);
            assert_true(l >= 0);
            const layer *L = &m.layers[l];
            if (L->w_l1 != want[i].w_l1 || L->w_l2 != want[i].w_l2 || L->b_l1 != want[i].b_l1 ||
                L->b_l2 != want[i].b_l2 || L->frozen)
                fail_msg("%s %s: %g %g %g %g", files[f], L->name, (double)L->w_l1,
                         (double)L->w_l2, (double)L->b_l1, (double)L->b_l2);
        }
        assert_true(model_has_reg(&m));
        model_free(&m);
    }
    for (int v = 2; v <= 3; v++) {
        char path[256];
        snprintf(path, sizeof path, KDIR "frozen_k%d.json", v);
        model m;
        load(&m, path);
        const layer *c = &m.layers[model_find_layer(&m, "conv2d")];
        const layer *d = &m.layers[model_find_layer(&m, "dense")];
        const layer *c1 = &m.layers[model_find_layer(&m, "conv2d_1")];
        assert_true(c->frozen && d->frozen && !c1->frozen);
        assert_true(v == 2 ? c->w_l2 == 0.01f && d->b_l1 == 0.02f : c->w_l2 == 0 && d->b_l1 == 0);
        assert_int_equal(model_frozen_params(&m), c->n_w + c->n_b + d->n_w + d->n_b);
        model_free(&m);
    }
}

// ---- the optimizer ----------------------------------------------------------------------------

// A frozen layer's parameters and moments stay exactly as they were through Adam with
// decoupled weight decay and SGD with momentum, while the others move; a model without
// regularizers or frozen layers updates bit for bit as without optim_use_model.
static void test_optimizer(void **state) {
    (void)state;
    model m;
    load(&m, KDIR "frozen_k3.json");
    size_t n = m.n_trainable;
    float *p0 = malloc(n * sizeof *p0), *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    model_init_params(&m, p0, 3);
    ht_rng r;
    ht_rng_seed(&r, 4);
    for (size_t i = 0; i < n; i++) g[i] = (float)(ht_rng_double(&r) - 0.5);
    for (int kind = 0; kind < 2; kind++) {
        train_setup s = m.setup;
        s.optim = kind ? OPTIM_ADAM : OPTIM_SGD, s.lr = 0.01f, s.momentum = 0.9f;
        s.beta1 = 0.9f, s.beta2 = 0.999f, s.eps = 1e-7f;
        s.weight_decay = 0.1f, s.wd_mode = kind ? WD_DECOUPLED : WD_L2;
        optim o;
        ht_error e = {{0}};
        if (optim_init(&o, &s, n, &e) < 0 || optim_use_model(&o, &m, &e) < 0)
            fail_msg("%s", e.msg);
        memcpy(p, p0, n * sizeof *p);
        for (int t = 0; t < 3; t++) optim_step(&o, p, g);
        for (int l = 0; l < m.n_layers; l++) {
            const layer *L = &m.layers[l];
            if (!L->n_w) continue;
            size_t lo = L->w_off, hi = L->w_off + L->n_w + L->n_b;
            int moved = 0, moments = 0;
            for (size_t i = lo; i < hi; i++) {
                moved |= p[i] != p0[i];
                moments |= o.m[i] != 0 || (o.v && o.v[i] != 0);
            }
            if (moved != !L->frozen || moments != !L->frozen)
                fail_msg("%s %s: moved %d, moments %d", kind ? "adam" : "sgd", L->name, moved,
                         moments);
        }
        optim_free(&o);
    }
    model_free(&m);

    // Without regularizers, frozen layers or weight decay: the same bits as the whole buffer.
    load(&m, KDIR "functional_k3.json");
    n = m.n_trainable;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *gg = malloc(n * sizeof *gg);
    model_init_params(&m, a, 5);
    memcpy(b, a, n * sizeof *b);
    for (size_t i = 0; i < n; i++) gg[i] = (float)(ht_rng_double(&r) - 0.5);
    train_setup s = m.setup;
    s.optim = OPTIM_ADAM, s.beta1 = 0.9f, s.beta2 = 0.999f, s.eps = 1e-7f;
    optim oa, ob;
    ht_error e = {{0}};
    assert_int_equal(optim_init(&oa, &s, n, &e), 0);
    assert_int_equal(optim_init(&ob, &s, n, &e), 0);
    assert_int_equal(optim_use_model(&ob, &m, &e), 0);
    for (int t = 0; t < 2; t++) optim_step(&oa, a, gg), optim_step(&ob, b, gg);
    assert_memory_equal(a, b, n * sizeof *a);
    optim_free(&oa);
    optim_free(&ob);
    model_free(&m);
    free(a), free(b), free(gg), free(p0), free(p), free(g);
}

// ---- malformed regularizers -------------------------------------------------------------------

// A Sequential model of 8 inputs, then a Dense softmax layer with `extra` in its config.
static char *dense_with(const char *extra) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"t\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8], "
             "\"name\": \"in\"}}, {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
             "\"units\": 4, \"activation\": \"softmax\"%s}}]}}",
             extra);
    return buf;
}

static void expect_reg(const char *extra, float w_l1, float w_l2, float b_l1, float b_l2) {
    const char *json = dense_with(extra);
    model m;
    ht_error e = {{0}};
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    const layer *L = &m.layers[0];
    if (L->w_l1 != w_l1 || L->w_l2 != w_l2 || L->b_l1 != b_l1 || L->b_l2 != b_l2)
        fail_msg("%s: %g %g %g %g", extra, (double)L->w_l1, (double)L->w_l2, (double)L->b_l1,
                 (double)L->b_l2);
    model_free(&m);
}

#define HEAD "bad.json: layer 1 \"d\" (Dense): "

static void test_errors(void **state) {
    (void)state;
    // Keras's names and their defaults; a null factor is the default, as Keras takes None.
    expect_reg(", \"kernel_regularizer\": \"l1\", \"bias_regularizer\": \"l2\"", 0.01f, 0, 0,
               0.01f);
    expect_reg(", \"kernel_regularizer\": \"l1_l2\"", 0.01f, 0.01f, 0, 0);
    expect_reg(", \"kernel_regularizer\": \"l1l2\"", 0, 0, 0, 0);
    expect_reg(", \"kernel_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.0, "
               "\"l2\": 0.5}}", 0, 0.5f, 0, 0);
    expect_reg(", \"kernel_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": null}}",
               0, 0.01f, 0, 0);
    expect_reg(", \"bias_regularizer\": {\"class_name\": \"L1\", \"config\": {\"l1\": 2}}", 0, 0,
               2.0f, 0);
    // No bias: nothing to regularize (Keras makes no bias weight).
    expect_reg(", \"use_bias\": false, \"bias_regularizer\": \"l2\"", 0, 0, 0, 0);

    keras_expect_error(dense_with(", \"kernel_regularizer\": {\"class_name\": "
                            "\"OrthogonalRegularizer\", \"config\": {\"factor\": 0.01}}"),
                 HEAD "kernel_regularizer: regularizer \"OrthogonalRegularizer\" is not "
                 "supported; hetrain has L1, L2 and L1L2 (l1, l2, l1_l2)");
    keras_expect_error(dense_with(", \"kernel_regularizer\": {\"class_name\": \"L2\", "
                            "\"registered_name\": \"my>L2\", \"config\": {}}"),
                 HEAD "kernel_regularizer: a custom regularizer (registered as my>L2) is not "
                 "supported");
    keras_expect_error(dense_with(", \"bias_regularizer\": {\"class_name\": \"L2\", \"config\": "
                            "{\"l2\": -0.1}}"),
                 HEAD "bias_regularizer: l2 -0.1: expected a finite number >= 0");
    keras_expect_error(dense_with(", \"bias_regularizer\": {\"class_name\": \"L1\", \"config\": "
                            "{\"l2\": 0.1}}"),
                 HEAD "bias_regularizer: L1: unknown key \"l2\" (l1)");
    keras_expect_error(dense_with(", \"bias_regularizer\": {\"class_name\": \"L1\", \"config\": "
                            "{\"l1\": \"0.1\"}}"),
                 HEAD "bias_regularizer: l1: expected a number, found a string");
    keras_expect_error(dense_with(", \"kernel_regularizer\": 0.01"),
                 HEAD "kernel_regularizer: expected a name or a regularizer object, found a "
                 "number");
    keras_expect_error(dense_with(", \"activity_regularizer\": \"l2\""),
                 HEAD "activity_regularizer: not supported (hetrain adds no activity "
                 "regularizers, constraints or adapters)");
    // The whole model frozen.
    const char *all = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"t\", "
                      "\"trainable\": false, \"layers\": [{\"class_name\": \"Flatten\", "
                      "\"config\": {}}]}}";
    keras_expect_error(all, "bad.json: trainable false on the whole model: nothing would train");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras_numbers),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_optimizer),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
