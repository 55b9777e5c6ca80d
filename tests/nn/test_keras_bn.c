// Keras's BatchNormalization in model JSON (keras.c): a network with three of them as Keras 3
// and Keras 2 wrote it (tools/keras_bn_fixture.py) reads as hetrain's batchnorm layers with
// Keras's momentum, epsilon and initialisers, and `hetrain summary`'s totals are the ones Keras
// printed; what hetrain would compute differently (another axis, a flattened image, renorm,
// regularizers, other moving-statistics initialisers) is refused with one line naming the layer.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/keras.h"
#include "nn/model.h"
#include "tests/lib/keras_expect.h"
#include "tests/lib/testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

// model.count_params() of bn_k3.json and bn_k2.json as Keras 3.15.1 and tf-keras 2.21.0 printed
// it (bn_params.txt): 19,338 trainable (gamma and beta included) and 64 non-trainable (the
// moving means and variances of 8 + 8 + 16 channels).
#define KERAS_BN_TOTAL 19402
#define KERAS_BN_TRAINABLE 19338
#define KERAS_BN_NON_TRAINABLE 64

static void load(model *m, const char *path) {
    ht_error e = {{0}};
    if (model_init(m, path, &e) < 0) fail_msg("%s: %s", path, e.msg);
}

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

static void check_bn_fixture(const char *file) {
    model m;
    load(&m, file);
    static const struct {
        layer_kind kind;
        const char *name;
        int oc, oh, ow;
        size_t params; // trainable: n_w + n_b
    } want[] = {
        {LAYER_CONV2D, "conv2d", 8, 26, 26, 72},
        {LAYER_BATCHNORM, "batch_normalization", 8, 26, 26, 16},
        {LAYER_RELU, "re_lu", 8, 26, 26, 0},
        {LAYER_CONV2D, "conv2d_1", 8, 24, 24, 584},
        {LAYER_BATCHNORM, "batch_normalization_1", 8, 24, 24, 16},
        {LAYER_MAXPOOL, "max_pooling2d", 8, 12, 12, 0},
        {LAYER_DENSE, "dense", 16, 1, 1, 1152 * 16 + 16},
        {LAYER_BATCHNORM, "batch_normalization_2", 16, 1, 1, 32},
        {LAYER_DENSE, "dense_1", 10, 1, 1, 170},
        {LAYER_SOFTMAX_XENT, "softmax", 10, 1, 1, 0},
    };
    assert_int_equal(m.n_layers, sizeof want / sizeof want[0]);
    for (int l = 0; l < m.n_layers; l++) {
        const layer *L = &m.layers[l];
        if (L->kind != want[l].kind || strcmp(L->name, want[l].name) || L->oc != want[l].oc ||
            L->oh != want[l].oh || L->ow != want[l].ow || L->n_w + L->n_b != want[l].params)
            fail_msg("%s layer %d %s: kind %d %dx%dx%d %zu params", file, l, L->name,
                     (int)L->kind, L->oc, L->oh, L->ow, L->n_w + L->n_b);
        if (L->kind == LAYER_BATCHNORM) {
            // Keras's gamma and beta (weight, bias), its moving statistics and hetrain's count.
            assert_int_equal(L->w_init, INIT_ONES);
            assert_int_equal(L->b_init, INIT_ZEROS);
            assert_int_equal(L->n_s, 2 * (size_t)L->oc + 1);
        }
    }
    // The first convolution has no bias (use_bias = false).
    assert_int_equal(m.layers[0].n_b, 0);
    assert_true(m.layers[0].b_off == LAYER_NO_PARAM);
    assert_true(m.layers[3].n_b == 8);
    // Keras's defaults, and the third layer's PyTorch-like values.
    assert_true(m.layers[1].momentum == 0.99f && m.layers[1].eps == 1e-3f);
    assert_true(m.layers[4].momentum == 0.99f && m.layers[4].eps == 1e-3f);
    assert_true(m.layers[7].momentum == 0.9f && m.layers[7].eps == 1e-5f);

    // The counts: hetrain's buffer holds Keras's parameters and one update count a batchnorm.
    assert_int_equal(m.n_trainable, KERAS_BN_TRAINABLE);
    assert_int_equal(m.n_state, KERAS_BN_NON_TRAINABLE + 3);
    assert_int_equal(m.n_params, KERAS_BN_TOTAL + 3);
    char *s = summary_text(&m);
    char line[64];
    snprintf(line, sizeof line, "Total params: %d,%03d\n", KERAS_BN_TOTAL / 1000,
             KERAS_BN_TOTAL % 1000);
    if (!strstr(s, line)) fail_msg("%s: summary lacks \"%s\":\n%s", file, line, s);
    snprintf(line, sizeof line, "Trainable params: %d,%03d\n", KERAS_BN_TRAINABLE / 1000,
             KERAS_BN_TRAINABLE % 1000);
    if (!strstr(s, line)) fail_msg("%s: summary lacks \"%s\":\n%s", file, line, s);
    snprintf(line, sizeof line, "Non-trainable params: %d\n", KERAS_BN_NON_TRAINABLE);
    if (!strstr(s, line)) fail_msg("%s: summary lacks \"%s\":\n%s", file, line, s);
    free(s);

    // PyTorch's names and shapes for the state: running_mean [8] ... num_batches_tracked [].
    const model_tensor *t;
    int nt = model_tensors(&m, &t), found = 0;
    for (int i = 0; i < nt; i++) {
        if (!strcmp(t[i].name, "batch_normalization.weight"))
            found++, assert_true(t[i].ndim == 1 && t[i].shape[0] == 8 && !t[i].state);
        if (!strcmp(t[i].name, "batch_normalization_2.running_var"))
            found++, assert_true(t[i].ndim == 1 && t[i].shape[0] == 16 &&
                                 t[i].state == TENSOR_RUNNING_VAR);
        if (!strcmp(t[i].name, "batch_normalization_1.num_batches_tracked"))
            found++, assert_true(t[i].ndim == 0 && t[i].n == 1 &&
                                 t[i].state == TENSOR_NUM_BATCHES);
    }
    assert_int_equal(found, 3);
    model_free(&m);
}

static void test_bn_fixtures(void **state) {
    (void)state;
    check_bn_fixture(KDIR "bn_k3.json");
    check_bn_fixture(KDIR "bn_k2.json");
    // The sidecar the fixture tool wrote holds the same counts for both files.
    char *list = test_read_file(KDIR "bn_params.txt", NULL);
    assert_non_null(list);
    int n = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n"), n++) {
        char file[64];
        long total, trainable, fixed;
        assert_int_equal(sscanf(line, "%63s %ld %ld %ld", file, &total, &trainable, &fixed), 4);
        assert_true(total == KERAS_BN_TOTAL && trainable == KERAS_BN_TRAINABLE &&
                    fixed == KERAS_BN_NON_TRAINABLE);
    }
    assert_int_equal(n, 2);
    free(list);
}

// ---- inline models ---------------------------------------------------------------------------

// A Sequential model whose InputLayer takes `shape` ([null, ...]), then `layers`.
static const char *seq_in(const char *shape, const char *layers) {
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"t\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": %s, "
             "\"name\": \"in\"}}, %s]}}",
             shape, layers);
    return buf;
}
#define IMG "[null, 8, 8, 1]"
#define CONV "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, " \
             "\"kernel_size\": 3}}"
#define FLATTEN "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}"
#define GAP "{\"class_name\": \"GlobalAveragePooling2D\", \"config\": {\"name\": \"g\"}}"
#define SOFTMAX "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4, " \
                "\"activation\": \"softmax\"}}"
#define DENSE "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}"
// A BatchNormalization called "bn" with the config's other keys `extra` (may be empty).
#define BN(extra) "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"" \
                  extra "}}"

// Reads json and checks the batchnorm "bn": its trainable count and its initialisers.
static void expect_bn(const char *json, size_t trainable, init_kind gamma, init_kind beta) {
    model m;
    ht_error e = {{0}};
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    int l = model_find_layer(&m, "bn");
    assert_true(l >= 0 && m.layers[l].kind == LAYER_BATCHNORM);
    const layer *L = &m.layers[l];
    if (L->n_w + L->n_b != trainable)
        fail_msg("%s: %zu trainable, expected %zu", json, L->n_w + L->n_b, trainable);
    if (L->n_w) assert_int_equal(L->w_init, gamma);
    if (L->n_b) assert_int_equal(L->b_init, beta);
    assert_int_equal(L->n_s, 2 * (size_t)L->oc + 1);
    model_free(&m);
}

#define HEAD "bad.json: layer 2 \"bn\" (BatchNormalization): "

static void test_bn_read(void **state) {
    (void)state;
    // Keras 3's axis -1, Keras 2's built [3], the positive 3, none: the channels.
    expect_bn(seq_in(IMG, CONV ", " BN(", \"axis\": -1") ", " FLATTEN ", " SOFTMAX), 4,
              INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in(IMG, CONV ", " BN(", \"axis\": [3]") ", " FLATTEN ", " SOFTMAX), 4,
              INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in(IMG, CONV ", " BN(", \"axis\": 3") ", " FLATTEN ", " SOFTMAX), 4, INIT_ONES,
              INIT_ZEROS);
    expect_bn(seq_in(IMG, CONV ", " BN("") ", " FLATTEN ", " SOFTMAX), 4, INIT_ONES, INIT_ZEROS);
    // After Dense, and on a model's vector input: the features, -1 or 1.
    expect_bn(seq_in(IMG, FLATTEN ", " DENSE ", " BN(", \"axis\": [1]") ", " SOFTMAX), 6,
              INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in("[null, 5]", BN(", \"axis\": -1") ", " SOFTMAX), 10, INIT_ONES, INIT_ZEROS);
    // After GlobalAveragePooling2D and after Flatten of a 1x1 image: one value a channel.
    expect_bn(seq_in(IMG, CONV ", " GAP ", " BN("") ", " SOFTMAX), 4, INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in("[null, 1, 1, 3]", FLATTEN ", " BN("") ", " SOFTMAX), 6, INIT_ONES,
              INIT_ZEROS);
    // channels_first: axis 1 is the channels.
    expect_bn(seq_in("[null, 1, 8, 8]",
                     "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3, \"data_format\": \"channels_first\"}}, " BN(
                         ", \"axis\": 1") ", " FLATTEN ", " SOFTMAX),
              4, INIT_ONES, INIT_ZEROS);
    // center and scale off; other initialisers; Keras's defaults spelled out, Keras 3 style.
    expect_bn(seq_in(IMG, CONV ", " BN(", \"center\": false") ", " FLATTEN ", " SOFTMAX), 2,
              INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in(IMG, CONV ", " BN(", \"scale\": false") ", " FLATTEN ", " SOFTMAX), 2,
              INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in(IMG, CONV ", " BN(", \"scale\": false, \"center\": false") ", " FLATTEN
                     ", " SOFTMAX),
              0, INIT_ONES, INIT_ZEROS);
    expect_bn(seq_in(IMG, CONV ", " BN(", \"gamma_initializer\": \"zeros\", \"beta_initializer\""
                                       ": {\"class_name\": \"Constant\", \"config\": {\"value\": "
                                       "0.5}}") ", " FLATTEN ", " SOFTMAX),
              4, INIT_ZEROS, INIT_CONSTANT);
    expect_bn(seq_in(IMG, CONV ", " BN(", \"moving_mean_initializer\": {\"module\": "
                                       "\"keras.initializers\", \"class_name\": \"Zeros\", "
                                       "\"config\": {}, \"registered_name\": null}, "
                                       "\"moving_variance_initializer\": \"ones\", "
                                       "\"synchronized\": false, \"renorm\": false, "
                                       "\"renorm_clipping\": null, \"renorm_momentum\": 0.99, "
                                       "\"beta_regularizer\": null") ", " FLATTEN ", " SOFTMAX),
              4, INIT_ONES, INIT_ZEROS);

    // momentum and epsilon, as given and as Keras's defaults.
    model m;
    ht_error e = {{0}};
    const char *j = seq_in(IMG, CONV ", " BN(", \"momentum\": 0.5, \"epsilon\": 0.01") ", " FLATTEN
                                ", " SOFTMAX);
    if (model_init_keras_text(&m, j, strlen(j), "ok.json", &e)) fail_msg("%s", e.msg);
    assert_true(m.layers[1].momentum == 0.5f && m.layers[1].eps == 0.01f);
    model_free(&m);
    j = seq_in(IMG, CONV ", " BN("") ", " FLATTEN ", " SOFTMAX);
    if (model_init_keras_text(&m, j, strlen(j), "ok.json", &e)) fail_msg("%s", e.msg);
    assert_true(m.layers[1].momentum == 0.99f && m.layers[1].eps == 1e-3f);
    model_free(&m);
    // trainable false: a frozen batchnorm (inference mode in training, test_batchnorm.c), its
    // gamma and beta among Keras's non-trainable parameters.
    j = seq_in(IMG, CONV ", " BN(", \"trainable\": false") ", " FLATTEN ", " SOFTMAX);
    if (model_init_keras_text(&m, j, strlen(j), "ok.json", &e)) fail_msg("%s", e.msg);
    assert_true(m.layers[1].frozen && !m.layers[0].frozen);
    assert_int_equal(model_frozen_params(&m), 4);
    model_free(&m);
}

static void test_bn_errors(void **state) {
    (void)state;
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"axis\": 1") ", " FLATTEN ", " SOFTMAX),
                 HEAD "axis 1: hetrain normalises over the channels (axis -1 or 3)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"axis\": [1, 2]") ", " FLATTEN ", " SOFTMAX),
                 HEAD "axis: expected an integer or a list of one, found a list");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"axis\": \"x\"") ", " FLATTEN ", " SOFTMAX),
                 HEAD "axis: expected an integer or a list of one, found a string");
    keras_expect_error(seq_in("[null, 5]", BN(", \"axis\": 0") ", " SOFTMAX),
                 "bad.json: layer 1 \"bn\" (BatchNormalization): axis 0: hetrain normalises "
                 "over the features (axis -1 or 1)");
    keras_expect_error(seq_in("[null, 1, 8, 8]",
                        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": "
                        "2, \"kernel_size\": 3, \"data_format\": \"channels_first\"}}, " BN(
                            ", \"axis\": -1") ", " FLATTEN ", " SOFTMAX),
                 HEAD "axis -1: hetrain normalises over the channels (axis 1)");
    keras_expect_error(seq_in("[null, 8, 8]", BN("") ", " FLATTEN ", " SOFTMAX),
                 "bad.json: layer 1 \"bn\" (BatchNormalization): an input of 2 axes (height, "
                 "width): hetrain normalises the channels of an image or the features of a "
                 "vector");
    // Keras normalises each of a flattened image's features; hetrain would each channel.
    keras_expect_error(seq_in(IMG, CONV ", " FLATTEN ", " BN("") ", " SOFTMAX),
                 "bad.json: layer 3 \"bn\" (BatchNormalization): after Flatten of a 2x6x6 "
                 "(CxHxW) output: Keras normalises each of its 72 features, hetrain each "
                 "channel; put BatchNormalization before Flatten");
    keras_expect_error(seq_in(IMG, FLATTEN ", {\"class_name\": \"Dropout\", \"config\": {\"name\": "
                             "\"dr\", \"rate\": 0.1}}, " BN("") ", " SOFTMAX),
                 "bad.json: layer 3 \"bn\" (BatchNormalization): after Flatten of a 1x8x8 "
                 "(CxHxW) output: Keras normalises each of its 64 features, hetrain each "
                 "channel; put BatchNormalization before Flatten");
    // The moving statistics start where Keras's defaults start them.
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"moving_mean_initializer\": \"ones\"") ", " FLATTEN
                                          ", " SOFTMAX),
                 HEAD "moving_mean_initializer ones: hetrain starts the moving mean at zeros "
                      "(Keras's default)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"moving_variance_initializer\": {\"class_name\": "
                                          "\"RandomNormal\", \"config\": {}}") ", " FLATTEN
                                          ", " SOFTMAX),
                 HEAD "moving_variance_initializer random_normal: hetrain starts the moving "
                      "variance at ones (Keras's default)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"gamma_initializer\": \"mystery\"") ", " FLATTEN
                                          ", " SOFTMAX),
                 HEAD "gamma_initializer: initializer \"mystery\" is not supported; *");
    // What hetrain has no counterpart for.
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"gamma_regularizer\": {\"class_name\": \"L2\", "
                                          "\"config\": {\"l2\": 0.01}}") ", " FLATTEN
                                          ", " SOFTMAX),
                 HEAD "gamma_regularizer: not supported (hetrain regularizes Conv2D and Dense "
                      "weights alone, and adds no constraints)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"beta_constraint\": {\"class_name\": \"NonNeg\", "
                                          "\"config\": {}}") ", " FLATTEN ", " SOFTMAX),
                 HEAD "beta_constraint: not supported (hetrain regularizes Conv2D and Dense "
                      "weights alone, and adds no constraints)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"renorm\": true") ", " FLATTEN ", " SOFTMAX),
                 HEAD "renorm true: hetrain's batchnorm is Keras's plain one");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"virtual_batch_size\": 16") ", " FLATTEN
                                          ", " SOFTMAX),
                 HEAD "virtual_batch_size: not supported (hetrain's statistics are over groups "
                      "of --bn-group or [net] bn_group samples)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"center\": 1") ", " FLATTEN ", " SOFTMAX),
                 HEAD "center: expected true or false, found an integer");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"momentum\": \"x\"") ", " FLATTEN ", " SOFTMAX),
                 HEAD "momentum: expected a number, found a string");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"momentum\": 1.5") ", " FLATTEN ", " SOFTMAX),
                 HEAD "momentum 1.5: expected 0..1 (Keras's: the moving averages keep this much "
                      "of their value at each step)");
    keras_expect_error(seq_in(IMG, CONV ", " BN(", \"epsilon\": 0") ", " FLATTEN ", " SOFTMAX),
                 HEAD "epsilon 0: expected a number in (0, 1]");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_fixtures),
        cmocka_unit_test(test_bn_read),
        cmocka_unit_test(test_bn_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
