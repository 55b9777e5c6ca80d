// The sigmoid heads through the command line: a network ending in [binary_crossentropy] trains on
// 0/1 labels on a CPU and an OpenCL device (self-check on), predicts 0 or 1, and a CSV with other
// labels is refused naming file, line and label; the multi-label head trains on (N, 4) NumPy
// labels, predicts four 0/1 columns, and its Keras models are read with Keras's counts.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/lib/testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

// Through the command line: a 0/1 CSV (Fashion-MNIST's classes 5..9 against 0..4) on a CPU and an
// OpenCL device with the self-check on; predictions are 0 or 1; a label 2 is refused.
static void test_bce_cli(void **state) {
    (void)state;
    char *dir = test_tmpdir("bce-cli");
    char *csv = test_fashion_csv(dir, FASHION_TRAIN, 400, 1);
    assert_non_null(csv);
    size_t len;
    char *text = test_read_file(csv, &len);
    char *bin = malloc(len + 1), *o = bin;
    int line = 0;
    for (char *p = text; *p;) { // label -> label >= 5, the header as it is
        size_t n = strcspn(p, "\n");
        if (line++ == 0 || n == 0) {
            memcpy(o, p, n);
            o += n;
        } else {
            int lab = atoi(p);
            size_t comma = strcspn(p, ",");
            *o++ = lab >= 5 ? '1' : '0';
            memcpy(o, p + comma, n - comma);
            o += n - comma;
        }
        if (p[n] == '\n') *o++ = '\n';
        p += n + (p[n] == '\n');
    }
    *o = 0;
    char *bcsv = test_write_file(dir, "bin.csv", bin, strlen(bin));
    static const char cfg[] = "[net]\ninput = 1x28x28\nclasses = 2\noptimizer = adam\n"
                              "lr = 0.002\nbatch = 40\n[conv]\nfilters = 4\nsize = 3\n"
                              "activation = relu\n[maxpool]\nsize = 2\n[dense]\nunits = 8\n"
                              "activation = relu\n[dense]\nunits = 1\n[binary_crossentropy]\n";
    char *cpath = test_write_file(dir, "bin.cfg", cfg, sizeof cfg - 1);
    const char *devices = test_have_opencl("cpu:1,cpu:1 instead") ? "cpu:1,cl:0.0" : "cpu:1,cpu:1";
    char args[8192];
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --test '%s' --epochs 3 "
             "--devices %s --out '%s' --name b --no-progress", cpath, bcsv, bcsv, devices, dir);
    char *out = test_expect_cli(args, 0, "epoch 3/3");
    assert_null(strstr(out, "excluded"));
    free(out);
    char path[1200];
    snprintf(path, sizeof path, "%s/b.metrics.csv", dir);
    double acc = test_metrics_value(path, -1, "val_accuracy");
    assert_true(acc > 0.7); // far above a coin: the head learns (Keras's binary accuracy at 0.5)
    snprintf(path, sizeof path, "%s/b.predictions.csv", dir);
    char *pred = test_read_file(path, NULL);
    assert_non_null(pred);
    int zeros = 0, ones = 0;
    for (char *p = strchr(pred, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        const char *c = strchr(p + 1, ',');
        assert_non_null(c);
        assert_true(c[1] == '0' || c[1] == '1');
        zeros += c[1] == '0', ones += c[1] == '1';
    }
    assert_true(zeros > 0 && ones > 0);
    // The Keras 3 network ending in Dense(1, activation="sigmoid") trains on the same labels.
    snprintf(args, sizeof args, "train --model " KDIR "binary_k3.json --train '%s' --epochs 1 "
             "--batch 40 --optimizer adam --devices cpu --out '%s' --name k --no-progress",
             bcsv, dir);
    free(test_expect_cli(args, 0, "epoch 1/1"));
    // The original 0..9 labels: refused, naming the file and the sample.
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --epochs 1 --devices cpu "
             "--out '%s' --name c --no-progress", cpath, csv, dir);
    out = test_expect_cli(args, 1, NULL);
    test_expect_frags(out, 0, "train.csv:2", "expected a label 0..1", NULL);
    free(out);
    free(pred), free(text), free(bin), free(bcsv), free(cpath), free(csv), free(dir);
}

// Keras models ending in a sigmoid over one output, written by Keras 3 and 2
// (tools/keras_binary_fixture.py): Keras's parameter counts, and a short run on 0/1 labels; a
// sigmoid over a spatial output (a label per position) is refused naming the layer.
static void test_bce_keras(void **state) {
    (void)state;
    free(test_expect_cli("summary --model " KDIR "binary_k3.json", 0, "Total params: 5,465"));
    free(test_expect_cli("summary --model " KDIR "binary_k2.json", 0, "binary_crossentropy"));
    free(test_expect_cli("summary --model " KDIR "binary_act_k3.json", 0, "Total params: 785"));
    free(test_expect_cli("summary --model " KDIR "binary_act_k2.json", 0, "Total params: 785"));
    free(test_expect_cli("summary --model " KDIR "multilabel_k3.json", 0, "Total params: 14,212"));
    free(test_expect_cli("summary --model " KDIR "multilabel_k2.json", 0, "Total params: 14,212"));
    char *dir = test_tmpdir("bce-keras");
    static const char spatial[] =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 6, 6, 1]}},"
        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"seg\", \"filters\": 3,"
        " \"kernel_size\": [3, 3], \"activation\": \"sigmoid\"}}]}, \"keras_version\": \"3.15.1\"}";
    char *path = test_write_file(dir, "spatial.json", spatial, sizeof spatial - 1);
    char args[2048];
    snprintf(args, sizeof args, "summary --model '%s'", path);
    char *out = test_expect_cli(args, 1, "\"seg\" (Conv2D)");
    test_expect_frags(out, 0, "sigmoid over 3x4x4 outputs", "a label per position", NULL);
    free(out), free(path), free(dir);
}

// The multi-label head end to end: the Keras 3 model ending in Dense(4, activation="sigmoid")
// trains on (N, 4) 0/1 labels (tests/lib/testutil.c's fashion_label) on a CPU and an OpenCL
// device with the self-check on, well above always answering each label's majority (0.65);
// predictions are four 0/1 columns that mostly match the labels; labels of the wrong shape or
// from a format with one class a sample are refused naming the file.
static void test_multilabel_cli(void **state) {
    (void)state;
    char *dir = test_tmpdir("multilabel");
    char xtr[1100], ytr[1100], xte[1100], yte[1100];
    assert_int_equal(test_fashion_multilabel(dir, FASHION_TRAIN, 1200, xtr, ytr, sizeof xtr), 0);
    assert_int_equal(test_fashion_multilabel(dir, FASHION_TEST, 300, xte, yte, sizeof xte), 0);
    const char *devices = test_have_opencl("cpu:1,cpu:1 instead") ? "cpu:1,cl:0.0" : "cpu:1,cpu:1";
    char args[8192];
    snprintf(args, sizeof args, "train --model " KDIR "multilabel_k3.json --train '%s' "
             "--train-labels '%s' --test '%s' --test-labels '%s' --epochs 3 --batch 50 "
             "--optimizer adam --lr 0.002 --devices %s --out '%s' --name ml --no-progress",
             xtr, ytr, xte, yte, devices, dir);
    char *out = test_expect_cli(args, 0, "epoch 3/3");
    assert_null(strstr(out, "excluded"));
    const char *t = strstr(out, "test: loss ");
    double test_acc = -1;
    assert_non_null(t);
    assert_int_equal(sscanf(t, "test: loss %*f accuracy %lf", &test_acc), 1);
    free(out);
    char path[1200];
    snprintf(path, sizeof path, "%s/ml.metrics.csv", dir);
    double acc = test_metrics_value(path, -1, "val_accuracy");
    assert_true(acc > 0.85); // the share of the 4 labels right: majority answers give 0.65
    snprintf(path, sizeof path, "%s/ml.predictions.csv", dir);
    char *pred = test_read_file(path, NULL);
    assert_non_null(pred);
    assert_true(!strncmp(pred, "ImageId,label_0,label_1,label_2,label_3\n", 40));
    // Against the labels: read back the test classes through the labels file's bytes.
    size_t ylen;
    char *ybytes = test_read_file(yte, &ylen);
    assert_non_null(ybytes);
    const uint8_t *lab = (const uint8_t *)ybytes + ylen - 300 * FASHION_LABELS;
    int rows = 0, right = 0;
    for (char *p = strchr(pred, '\n'); p && p[1]; p = strchr(p + 1, '\n'), rows++) {
        int id, v[FASHION_LABELS];
        assert_int_equal(sscanf(p + 1, "%d,%d,%d,%d,%d", &id, &v[0], &v[1], &v[2], &v[3]), 5);
        assert_int_equal(id, rows + 1);
        for (int j = 0; j < FASHION_LABELS; j++) {
            assert_true(v[j] == 0 || v[j] == 1);
            right += v[j] == lab[rows * FASHION_LABELS + j];
        }
    }
    assert_int_equal(rows, 300);
    // the predictions file agrees with the reported test accuracy (4 decimals in the log)
    assert_true(fabs((double)right / (300 * FASHION_LABELS) - test_acc) < 1e-4);
    // The class labels of an IDX folder: refused before any work, naming the folder.
    snprintf(args, sizeof args, "train --model " KDIR "multilabel_k3.json --epochs 1 "
             "--devices cpu --out '%s' --name x --no-progress", dir);
    out = test_expect_cli(args, 1, "multi-label head takes 4 labels");
    test_expect_frags(out, 0, "fashion-mnist", ".npy or .npz", NULL);
    free(out);
    // One label a sample in a .npy: refused, naming the file and the shape wanted.
    char fp[1200];
    snprintf(fp, sizeof fp, "%s/flat_y.npy", dir);
    uint8_t *ones = malloc(1200);
    memset(ones, 1, 1200);
    assert_int_equal(test_write_npy_u8(fp, "(1200,)", ones, 1200), 0);
    snprintf(args, sizeof args, "train --model " KDIR "multilabel_k3.json --train '%s' "
             "--train-labels '%s' --epochs 1 --devices cpu --out '%s' --name y --no-progress",
             xtr, fp, dir);
    out = test_expect_cli(args, 1, "flat_y.npy: labels of shape (1200,), expected (N, 4)");
    free(out);
    free(ones), free(ybytes), free(pred), free(dir);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bce_cli),
        cmocka_unit_test(test_bce_keras),
        cmocka_unit_test(test_multilabel_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
