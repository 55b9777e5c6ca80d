// Keras model JSONs through the command line: summary and training of the fixtures, a
// CIFAR-shaped network on a CIFAR folder, the 3-layer network's JSON giving the preset's run bit
// for bit, and the network of every activation on one and two devices.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "keras.h"
#include "layer_desc.h"
#include "layers.h"
#include "model.h"
#include "net.h"
#include "rng.h"
#include "testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

static void load(model *m, const char *name_or_path) {
    ht_error e = {{0}};
    if (model_init(m, name_or_path, &e) < 0) fail_msg("%s: %s", name_or_path, e.msg);
}

// ---- the command line -------------------------------------------------------------------------

static void test_cli(void **state) {
    (void)state;
    free(test_expect_cli("train --help", 0, "FILE.json"));
    free(test_expect_cli("summary --model " KDIR "cnn3_k3.json", 0, "Total params: 246,682"));
    free(test_expect_cli("summary --model " KDIR "cnn2_k2.json", 0, "Total params: 3,274,634"));
    free(test_expect_cli("summary --model " KDIR "mnist_small_k3.json", 0,
                         "Total params: 43,706"));
    // Keras's count of a network with BatchNormalization: gamma, beta, moving mean and variance.
    free(test_expect_cli("summary --model " KDIR "bn_k3.json", 0, "Total params: 19,402"));
    free(test_expect_cli("summary --model " KDIR "bn_k2.json", 0, "Non-trainable params: 64"));
    free(test_expect_cli("summary --model /nonexistent/m.json", 1,
                         "/nonexistent/m.json: cannot open Keras model"));

    // A short run of a JSON model on a Kaggle CSV, with the options that override its setup.
    test_csv_data d;
    assert_int_equal(test_csv_data_init(&d, "keras-cli", 200, 40), 0);
    char args[8192];
    snprintf(args, sizeof args,
             "train --model " KDIR "mnist_small_k3.json %s --epochs 1 --batch 50 --lr 0.01 "
             "--devices cpu --out '%s' --name k --no-progress",
             d.args, d.dir);
    free(test_expect_cli(args, 0, "epoch 1/1"));
    char path[1200];
    snprintf(path, sizeof path, "%s/k.metrics.csv", d.dir);
    double loss = test_metrics_value(path, -1, "loss");
    assert_true(isfinite(loss) && loss > 0);
}

// The CIFAR-shaped Keras network (channels-last JSON) trains on a generated CIFAR-10 folder:
// 3x32x32 samples reach it as (C,H,W) without a word from the user.
static void test_cli_cifar(void **state) {
    (void)state;
    free(test_expect_cli("summary --model " KDIR "cifar_k3.json", 0, "Total params: 17,066"));
    char *dir = test_tmpdir("keras-cifar"), folder[1100];
    snprintf(folder, sizeof folder, "%s/cifar-10-batches-bin", dir);
    assert_int_equal(mkdir(folder, 0755), 0);
    ht_rng r;
    ht_rng_seed(&r, 8);
    static const struct {
        const char *name;
        int n;
    } files[] = {{"data_batch_1.bin", 60}, {"test_batch.bin", 20}};
    for (int f = 0; f < 2; f++) { // records: label byte, then 3x32x32 pixels (R, G, B planes)
        size_t len = (size_t)files[f].n * 3073;
        uint8_t *b = malloc(len);
        for (size_t i = 0; i < len; i++)
            b[i] = i % 3073 == 0 ? (uint8_t)(i / 3073 % 10) : (uint8_t)(ht_rng_next(&r) >> 56);
        free(test_write_file(folder, files[f].name, b, len));
        free(b);
    }
    char args[4096], path[1300];
    snprintf(args, sizeof args,
             "train --model " KDIR "cifar_k3.json --data '%s' --epochs 1 --batch 16 --devices cpu "
             "--optimizer adam:epsilon=1e-8 --out '%s' --name c --no-progress",
             folder, dir);
    free(test_expect_cli(args, 0, "epoch 1/1"));
    // --optimizer: Keras's Adam defaults in place of the JSON's (the config format's) SGD.
    snprintf(path, sizeof path, "%s/c.log", dir);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "optimizer: Adam lr 0.001 beta1 0.9 beta2 0.999 eps 1e-08 decay 0"));
    free(log);
    free(test_expect_cli("train --optimizer adamw", 2, "--optimizer: expected sgd or adam"));
    snprintf(path, sizeof path, "%s/c.metrics.csv", dir);
    double loss = test_metrics_value(path, -1, "loss");
    assert_true(isfinite(loss) && loss > 0);
    snprintf(path, sizeof path, "%s/c.predictions.csv", dir);
    char *preds = test_read_file(path, NULL);
    assert_non_null(preds);
    assert_non_null(strstr(preds, "\n20,")); // the 20 test samples
    free(preds);
    free(dir);
}

// The JSON of the 3-layer network trains exactly as the preset does, through the whole CLI:
// the same weights after a step, the same loss.
static void test_cli_same_run(void **state) {
    (void)state;
    test_csv_data d;
    assert_int_equal(test_csv_data_init(&d, "keras-same", 64, 16), 0);
    const char *models[] = {"cnn3", KDIR "cnn3_k3.json"};
    float *w[2];
    double loss[2];
    model m;
    load(&m, "cnn3");
    for (int i = 0; i < 2; i++) {
        char args[8192], path[1200];
        snprintf(args, sizeof args,
                 "train --model %s %s --epochs 1 --batch 32 --val-split 0 --devices cpu:1 "
                 "--conv-algo direct --out '%s' --name r%d --save '%s/w%d.safetensors' "
                 "--no-progress",
                 models[i], d.args, d.dir, i, d.dir, i);
        free(test_expect_cli(args, 0, "epoch 1/1"));
        snprintf(path, sizeof path, "%s/w%d.safetensors", d.dir, i);
        model mi;
        load(&mi, models[i]);
        w[i] = test_load_params(&mi, path);
        model_free(&mi);
        snprintf(path, sizeof path, "%s/r%d.metrics.csv", d.dir, i);
        loss[i] = test_metrics_value(path, -1, "loss");
    }
    assert_memory_equal(w[0], w[1], m.n_params * sizeof *w[0]);
    assert_true(loss[0] == loss[1]);
    free(w[0]);
    free(w[1]);
    model_free(&m);
}

// The Keras JSON with every activation trains through the CLI, on the CPU alone and on the CPU
// and OpenCL together: finite losses, and from the same start the mixed run's weights move as
// the CPU run's do, within the tolerance of runs on different devices (testutil.h).
static void test_cli_activations(void **state) {
    (void)state;
    test_csv_data d;
    assert_int_equal(test_csv_data_init(&d, "keras-act", 96, 16), 0);
    const char *devices[] = {"cpu:1", test_have_opencl("cpu:1,cpu:1 instead") ? "cpu:1,cl:0.0"
                                                                               : "cpu:1,cpu:1"};
    float *w[2];
    for (int i = 0; i < 2; i++) {
        char args[8192], path[1200];
        snprintf(args, sizeof args,
                 "train --model " KDIR "activations_k3.json %s --optimizer adam --epochs 1 "
                 "--batch 32 --val-split 0 --devices %s --balance static --no-self-check "
                 "--out '%s' --name a%d --save '%s/a%d.safetensors' --no-progress",
                 d.args, devices[i], d.dir, i, d.dir, i);
        free(test_expect_cli(args, 0, "epoch 1/1"));
        snprintf(path, sizeof path, "%s/a%d.metrics.csv", d.dir, i);
        assert_true(isfinite(test_metrics_value(path, -1, "loss")));
        snprintf(path, sizeof path, "%s/a%d.safetensors", d.dir, i);
        model m;
        load(&m, KDIR "activations_k3.json");
        w[i] = test_load_params(&m, path);
        model_free(&m);
    }
    model m;
    load(&m, KDIR "activations_k3.json");
    float *init = malloc(m.n_params * sizeof *init);
    model_init_params(&m, init, 1);
    assert_true(check_updates(&m, w[1], w[0], init, TOL_RUN_OUTPUT, TOL_RUN_OTHER,
                              "activations network: cpu + second device vs cpu"));
    free(init), free(w[0]), free(w[1]);
    model_free(&m);
}

// The Keras 3 network with BatchNormalization (after a bias-less conv, a conv and a dense layer)
// trains through the command line on one device and on two (the second an OpenCL device where
// there is one), with the self-check on (a dense bias right before a batchnorm has a zero
// gradient, which the self-check must not take for a fault): the moving averages agree to
// rounding, and so do the losses.
#define TOL_BN_RUN_STATS 1e-5
static void test_cli_batchnorm(void **state) {
    (void)state;
    test_csv_data d;
    assert_int_equal(test_csv_data_init(&d, "keras-bn", 128, 16), 0);
    const char *devices[] = {"cpu:1", test_have_opencl("cpu:1,cpu:1 instead") ? "cpu:1,cl:0.0"
                                                                               : "cpu:1,cpu:1"};
    float *w[2];
    double loss[2];
    for (int i = 0; i < 2; i++) {
        char args[8192], path[1200];
        snprintf(args, sizeof args,
                 "train --model " KDIR "bn_k3.json %s --epochs 1 --batch 64 --bn-group 16 "
                 "--lr 0.01 --val-split 0 --devices %s --balance static --out '%s' --name b%d "
                 "--save '%s/b%d.safetensors' --no-progress",
                 d.args, devices[i], d.dir, i, d.dir, i);
        char *out = test_expect_cli(args, 0, "epoch 1/1");
        assert_null(strstr(out, "excluded"));
        free(out);
        snprintf(path, sizeof path, "%s/b%d.log", d.dir, i);
        char *log = test_read_file(path, NULL);
        assert_non_null(log);
        assert_non_null(strstr(log, "batchnorm: statistics over groups of 16"));
        free(log);
        snprintf(path, sizeof path, "%s/b%d.metrics.csv", d.dir, i);
        loss[i] = test_metrics_value(path, -1, "loss");
        snprintf(path, sizeof path, "%s/b%d.safetensors", d.dir, i);
        model m;
        load(&m, KDIR "bn_k3.json");
        w[i] = test_load_params(&m, path);
        model_free(&m);
    }
    model m;
    load(&m, KDIR "bn_k3.json");
    assert_true(fabs(loss[1] - loss[0]) <= 1e-4 * loss[0]);
    double err = test_state_err(&m, w[1], w[0]);
    printf("bn_k3.json on %s vs cpu:1: moving averages off by %.1e\n", devices[1], err);
    assert_true(err <= TOL_BN_RUN_STATS);
    // Two steps were taken: each batchnorm's update count says so.
    const model_tensor *t;
    int nt = model_tensors(&m, &t);
    assert_string_equal(t[nt - 1].name + strlen(t[nt - 1].name) - 19, "num_batches_tracked");
    assert_float_equal(w[0][t[nt - 1].off], 2.0f, 0);
    free(w[0]), free(w[1]);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_batchnorm),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_cli_cifar),
        cmocka_unit_test(test_cli_same_run),
        cmocka_unit_test(test_cli_activations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
