// The binary head through the command line: a network ending in [binary_crossentropy] trains on
// 0/1 labels on a CPU and an OpenCL device (self-check on), predicts 0 or 1, and a CSV with other
// labels is refused naming file, line and label.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

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
// sigmoid over several outputs (multi-label) is refused naming the layer.
static void test_bce_keras(void **state) {
    (void)state;
    free(test_expect_cli("summary --model " KDIR "binary_k3.json", 0, "Total params: 5,465"));
    free(test_expect_cli("summary --model " KDIR "binary_k2.json", 0, "binary_crossentropy"));
    free(test_expect_cli("summary --model " KDIR "binary_act_k3.json", 0, "Total params: 785"));
    free(test_expect_cli("summary --model " KDIR "binary_act_k2.json", 0, "Total params: 785"));
    char *dir = test_tmpdir("bce-keras");
    static const char multi[] =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4]}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 3,"
        " \"activation\": \"sigmoid\"}}]}, \"keras_version\": \"3.15.1\"}";
    char *path = test_write_file(dir, "multi.json", multi, sizeof multi - 1);
    char args[2048];
    snprintf(args, sizeof args, "summary --model '%s'", path);
    char *out = test_expect_cli(args, 1, "\"out\" (Dense)");
    test_expect_frags(out, 0, "sigmoid over 3 outputs", "multi-label", NULL);
    free(out), free(path), free(dir);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bce_cli),
        cmocka_unit_test(test_bce_keras),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
