// Keras model JSONs through the command line: summary and training of the fixtures, a
// CIFAR-shaped network on a CIFAR folder, the 3-layer network's JSON giving the preset's run bit
// for bit, the network of every activation on one and two devices, and Functional models,
// regularizers (their term in the logged training and validation loss) and frozen layers (not
// updated) as Keras 3 and Keras 2 wrote them.
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
#include <json.h>
#include "nn/keras.h"
#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/net.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

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
    // A channels_first pooling in a channels_last model, read as Keras computes it, trains on a
    // CPU and an OpenCL device with the self-check on (the permutes on both).
    free(test_expect_cli("summary --model " KDIR "mixed_k3.json", 0, "(permute)"));
    const char *devices = test_have_opencl("cpu:1,cpu:1 instead") ? "cpu:1,cl:0.0" : "cpu:1,cpu:1";
    snprintf(args, sizeof args,
             "train --model " KDIR "mixed_k3.json %s --epochs 1 --batch 50 --lr 0.01 "
             "--devices %s --out '%s' --name mixed --no-progress",
             d.args, devices, d.dir);
    char *out = test_expect_cli(args, 0, "epoch 1/1");
    assert_null(strstr(out, "excluded"));
    free(out);
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

// A copy of the Keras JSON src with every kernel and bias regularizer null, as dir/name (a path
// to free).
static char *without_regularizers(const char *src, const char *dir, const char *name) {
    json_object *root = json_object_from_file(src), *cfg, *layers;
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "config", &cfg) &&
                json_object_object_get_ex(cfg, "layers", &layers));
    for (size_t i = 0; i < json_object_array_length(layers); i++) {
        json_object *lc;
        if (!json_object_object_get_ex(json_object_array_get_idx(layers, i), "config", &lc))
            continue;
        json_object_object_add(lc, "kernel_regularizer", NULL);
        json_object_object_add(lc, "bias_regularizer", NULL);
    }
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    assert_int_equal(json_object_to_file_ext(path, root, JSON_C_TO_STRING_PLAIN), 0);
    json_object_put(root);
    return path;
}

static void expect_in_log(const char *dir, const char *name, const char *want) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.log", dir, name);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    if (!strstr(log, want)) fail_msg("%s lacks \"%s\"", path, want);
    free(log);
}

// Two losses the metrics CSV printed to 6 decimals.
#define TOL_CSV_LOSS 3e-6
// Functional models train; a model with regularizers logs a training and a validation loss
// that are the same model's without them plus Keras's term at the weights (lr 0 keeps them); a
// frozen layer's parameters come out of two steps as they went in, the others' do not.
static void test_cli_reg_frozen(void **state) {
    (void)state;
    test_csv_data d;
    assert_int_equal(test_csv_data_init(&d, "keras-reg", 100, 20), 0);
    char args[8192], path[1200], name[64];
    for (int v = 2; v <= 3; v++) {
        snprintf(args, sizeof args,
                 "train --model " KDIR "functional_k%d.json %s --epochs 1 --batch 50 --devices "
                 "cpu --out '%s' --name f%d --no-progress", v, d.args, d.dir, v);
        free(test_expect_cli(args, 0, "epoch 1/1"));
        snprintf(path, sizeof path, "%s/f%d.metrics.csv", d.dir, v);
        assert_true(isfinite(test_metrics_value(path, -1, "loss")));

        // Regularizers: the same weights with and without them, lr 0.
        char json[256];
        snprintf(json, sizeof json, KDIR "reg_k%d.json", v);
        model m;
        load(&m, json);
        float *w0 = malloc(m.n_params * sizeof *w0);
        model_init_params(&m, w0, 11);
        snprintf(name, sizeof name, "reg%d.safetensors", v);
        char *wpath = test_save_params(&m, w0, d.dir, name);
        double pen = model_reg_penalty(&m, w0);
        snprintf(name, sizeof name, "reg%d_plain.json", v);
        char *plain = without_regularizers(json, d.dir, name);
        double loss[2], vloss[2];
        for (int i = 0; i < 2; i++) {
            snprintf(args, sizeof args,
                     "train --model '%s' %s --load '%s' --lr 0 --epochs 1 --batch 50 "
                     "--val-split 0.2 --devices cpu --out '%s' --name r%d_%d --no-progress",
                     i ? plain : json, d.args, wpath, d.dir, v, i);
            free(test_expect_cli(args, 0, "epoch 1/1"));
            snprintf(path, sizeof path, "%s/r%d_%d.metrics.csv", d.dir, v, i);
            loss[i] = test_metrics_value(path, -1, "loss");
            vloss[i] = test_metrics_value(path, -1, "val_loss");
        }
        printf("reg_k%d.json: term %.6f, training loss %.6f - %.6f, validation %.6f - %.6f\n",
               v, pen, loss[0], loss[1], vloss[0], vloss[1]);
        assert_true(pen > 0.1);
        assert_true(fabs(loss[0] - loss[1] - pen) <= TOL_CSV_LOSS);
        assert_true(fabs(vloss[0] - vloss[1] - pen) <= TOL_CSV_LOSS);
        snprintf(name, sizeof name, "r%d_0", v);
        expect_in_log(d.dir, name, "conv2d.weight l1 0 l2 0.01, conv2d.bias l1 0.02 l2 0");
        free(wpath), free(plain), free(w0);
        model_free(&m);

        // Frozen layers: two steps.
        snprintf(json, sizeof json, KDIR "frozen_k%d.json", v);
        load(&m, json);
        w0 = malloc(m.n_params * sizeof *w0);
        model_init_params(&m, w0, 12);
        snprintf(name, sizeof name, "frozen%d.safetensors", v);
        wpath = test_save_params(&m, w0, d.dir, name);
        snprintf(args, sizeof args,
                 "train --model '%s' %s --load '%s' --lr 0.05 --epochs 1 --batch 50 "
                 "--val-split 0 --devices cpu --out '%s' --name z%d --save '%s/z%d.safetensors' "
                 "--no-progress", json, d.args, wpath, d.dir, v, d.dir, v);
        free(test_expect_cli(args, 0, "epoch 1/1"));
        snprintf(name, sizeof name, "z%d", v);
        expect_in_log(d.dir, name, "frozen (Keras's trainable false; not updated): conv2d, "
                      "dense (1592 parameters)");
        snprintf(path, sizeof path, "%s/z%d.safetensors", d.dir, v);
        float *w1 = test_load_params(&m, path);
        for (int l = 0; l < m.n_layers; l++) {
            const layer *L = &m.layers[l];
            if (!L->n_w) continue;
            size_t n = L->n_w + L->n_b;
            int same = !memcmp(w1 + L->w_off, w0 + L->w_off, n * sizeof *w0);
            if (same != L->frozen) fail_msg("%s %s: %s", json, L->name, same ? "kept" : "moved");
        }
        free(w1), free(w0), free(wpath);
        model_free(&m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_reg_frozen),
        cmocka_unit_test(test_cli_batchnorm),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_cli_cifar),
        cmocka_unit_test(test_cli_same_run),
        cmocka_unit_test(test_cli_activations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
