// RGB data end to end through the CLI: a 3-channel network (input = 3x32x32) trains on a
// generated CIFAR-10 folder, a CIFAR-100 file and a NumPy .npz (x_train/y_train with its
// x_test/y_test as the test set) and .npy pair, with --augment, on the CPU device and on PoCL,
// writing metrics and predictions; a data set that does not fit the model, a label beyond its
// classes or a broken archive stops the run with one line before anything is written; a
// resume keeps the run's augmentation and refuses another.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <zip.h>

#include "core/rng.h"
#include "tests/lib/testutil.h"

static const char rgb_cfg[] =
    "[net]\nname = rgb_tiny\ninput = 3x32x32\nclasses = 10\noptimizer = sgd\nlr = 0.02\n"
    "momentum = 0.9\nbatch = 40\nepochs = 1\nval_split = 0.2\n"
    "[conv]\nfilters = 4\nsize = 3\npad = 1\nactivation = relu\n"
    "[maxpool]\nsize = 4\n"
    "[dense]\nunits = 10\n[softmax]\n";

typedef struct rgb_data {
    char *dir;
    char cfg[1100], cifar[1100], npz[1100], x_npy[1100], y_npy[1100], out[1100];
} rgb_data;

// n records of random CIFAR-10 pixels, labels i % 10 (CIFAR-100: fine i % 100, coarse i % 20).
static void write_cifar(const char *dir, const char *name, int n, int hundred, ht_rng *r) {
    int rec = 3072 + (hundred ? 2 : 1);
    uint8_t *b = malloc((size_t)n * rec);
    for (int i = 0; i < n; i++) {
        uint8_t *p = b + (size_t)i * rec;
        if (hundred) p[0] = (uint8_t)(i % 20), p[1] = (uint8_t)(i % 100);
        else p[0] = (uint8_t)(i % 10);
        for (int k = hundred ? 2 : 1; k < rec; k++) p[k] = (uint8_t)(ht_rng_next(r) >> 56);
    }
    free(test_write_file(dir, name, b, (size_t)n * rec));
    free(b);
}

// A .npy (format 1.0) of the dict and payload.
static uint8_t *npy(const char *dict, const void *payload, size_t len, size_t *out_len) {
    size_t dl = strlen(dict), hdr = (10 + dl + 1 + 63) / 64 * 64;
    uint8_t *b = malloc(hdr + len);
    memcpy(b, "\x93NUMPY\1\0", 8);
    b[8] = (uint8_t)(hdr - 10);
    b[9] = (uint8_t)((hdr - 10) >> 8);
    memcpy(b + 10, dict, dl);
    memset(b + 10 + dl, ' ', hdr - 10 - dl - 1);
    b[hdr - 1] = '\n';
    memcpy(b + hdr, payload, len);
    *out_len = hdr + len;
    return b;
}

// n random images (N,32,32,3) uint8 and int64 labels i % 10 as .npy bytes.
static void npy_pair(int n, ht_rng *r, uint8_t **x, size_t *xl, uint8_t **y, size_t *yl) {
    size_t px = (size_t)n * 3072;
    uint8_t *pix = malloc(px);
    for (size_t i = 0; i < px; i++) pix[i] = (uint8_t)(ht_rng_next(r) >> 56);
    int64_t *lab = malloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) lab[i] = i % 10;
    char d[128];
    snprintf(d, sizeof d, "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, 32, 32, 3), }", n);
    *x = npy(d, pix, px, xl);
    snprintf(d, sizeof d, "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }", n);
    *y = npy(d, lab, sizeof(int64_t) * (size_t)n, yl);
    free(pix);
    free(lab);
}

static void rgb_data_init(rgb_data *d) {
    d->dir = test_tmpdir("rgb-cli");
    ht_rng r;
    ht_rng_seed(&r, 4);
    free(test_write_file(d->dir, "rgb.cfg", rgb_cfg, sizeof rgb_cfg - 1));
    snprintf(d->cfg, sizeof d->cfg, "%s/rgb.cfg", d->dir);
    snprintf(d->cifar, sizeof d->cifar, "%s/cifar-10-batches-bin", d->dir);
    mkdir(d->cifar, 0755);
    write_cifar(d->cifar, "data_batch_1.bin", 100, 0, &r);
    write_cifar(d->cifar, "data_batch_2.bin", 50, 0, &r);
    write_cifar(d->cifar, "test_batch.bin", 30, 0, &r);
    write_cifar(d->dir, "train.bin", 120, 1, &r); // CIFAR-100
    // The .npz: 150 training and 25 test samples, deflated as np.savez_compressed does.
    uint8_t *xb[2], *yb[2];
    size_t xl[2], yl[2];
    npy_pair(150, &r, &xb[0], &xl[0], &yb[0], &yl[0]);
    npy_pair(25, &r, &xb[1], &xl[1], &yb[1], &yl[1]);
    snprintf(d->npz, sizeof d->npz, "%s/data.npz", d->dir);
    int err;
    zip_t *z = zip_open(d->npz, ZIP_CREATE | ZIP_TRUNCATE, &err);
    assert_non_null(z);
    const char *names[4] = {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"};
    uint8_t *bufs[4] = {xb[0], yb[0], xb[1], yb[1]};
    size_t lens[4] = {xl[0], yl[0], xl[1], yl[1]};
    for (int i = 0; i < 4; i++) {
        zip_int64_t k = zip_file_add(z, names[i], zip_source_buffer(z, bufs[i], lens[i], 0), 0);
        assert_true(k >= 0);
        zip_set_file_compression(z, (zip_uint64_t)k, ZIP_CM_DEFLATE, 0);
    }
    assert_int_equal(zip_close(z), 0);
    free(test_write_file(d->dir, "x.npy", xb[0], xl[0]));
    free(test_write_file(d->dir, "y.npy", yb[0], yl[0]));
    snprintf(d->x_npy, sizeof d->x_npy, "%s/x.npy", d->dir);
    snprintf(d->y_npy, sizeof d->y_npy, "%s/y.npy", d->dir);
    snprintf(d->out, sizeof d->out, "%s/out", d->dir);
    for (int i = 0; i < 2; i++) free(xb[i]), free(yb[i]);
}

// Lines in a file (0 when missing).
static int count_lines(const char *path) {
    size_t len;
    char *s = test_read_file(path, &len);
    int n = 0;
    for (size_t i = 0; s && i < len; i++) n += s[i] == '\n';
    free(s);
    return n;
}

// Trains `name` with the data arguments on devices and checks its files: a metrics row, the
// predictions of n_test samples and the log naming the augmentation.
static void train_ok(const rgb_data *d, const char *name, const char *data_args,
                     const char *devices, int n_test, const char *augment) {
    char args[9000], path[1300];
    snprintf(args, sizeof args,
             "train --model '%s' %s --devices %s --augment %s --balance static --out '%s' "
             "--name %s --no-progress --seed 3",
             d->cfg, data_args, devices, augment, d->out, name);
    char *out = test_expect_cli(args, 0, "epoch 1/1");
    free(out);
    snprintf(path, sizeof path, "%s/%s.metrics.csv", d->out, name);
    double acc = test_metrics_value(path, 0, "accuracy"), loss = test_metrics_value(path, 0, "loss");
    assert_true(acc >= 0 && acc <= 1 && loss > 0 && loss < 10);
    snprintf(path, sizeof path, "%s/%s.predictions.csv", d->out, name);
    assert_int_equal(count_lines(path), n_test + 1);
    snprintf(path, sizeof path, "%s/%s.log", d->out, name);
    size_t len;
    char *log = test_read_file(path, &len), want[64];
    assert_non_null(log);
    snprintf(want, sizeof want, "augment: %s", augment);
    if (!strstr(log, want)) fail_msg("%s lacks \"%s\":\n%s", path, want, log);
    free(log);
}

static void test_rgb_trains_on_cpu_and_pocl(void **state) {
    (void)state;
    rgb_data d;
    rgb_data_init(&d);
    int cl = test_have_opencl("the cl:0.0 runs are skipped");
    char a[4000];
    snprintf(a, sizeof a, "--data '%s'", d.cifar);
    train_ok(&d, "cifar-cpu", a, "cpu", 30, "crop:4,flip");
    if (cl) train_ok(&d, "cifar-mix", a, "cpu@1,cl:0.0@1", 30, "crop:4,flip");
    snprintf(a, sizeof a, "--train '%s'", d.npz); // its x_test/y_test are the test set
    train_ok(&d, "npz-cpu", a, "cpu", 25, "flip");
    if (cl) train_ok(&d, "npz-cl", a, "cl:0.0", 25, "crop:2");
    snprintf(a, sizeof a, "--train '%s' --train-labels '%s' --test '%s/cifar-10-batches-bin/test_batch.bin'",
             d.x_npy, d.y_npy, d.dir);
    train_ok(&d, "npy-cpu", a, "cpu", 30, "none");
    free(d.dir);
}

// The graph presets models/resnet20.cfg and models/mobilenetv2.cfg, by name: He et al.'s
// ResNet-20 count (272,474), Keras's MobileNetV2 counts (keras.applications, 32x32, 10
// classes: tests/fixtures/keras/applications/counts.txt); each trains an epoch of CIFAR-10
// records and predicts its test set.
static void test_graph_presets(void **state) {
    (void)state;
    free(test_expect_cli("summary --model resnet20", 0, "Trainable params: 272,474"));
    static const char *const mnv2[] = {"Total params: 2,270,794", "Trainable params: 2,236,682",
                                       "Non-trainable params: 34,112"};
    for (int i = 0; i < 3; i++) free(test_expect_cli("summary --model mobilenetv2", 0, mnv2[i]));
    rgb_data d;
    rgb_data_init(&d);
    static const char *const nets[] = {"resnet20", "mobilenetv2"};
    for (int i = 0; i < 2; i++) {
        char args[4000], path[1300];
        snprintf(args, sizeof args, "train --model %s --data '%s' --epochs 1 --limit 64 --batch 32 "
                 "--devices cpu --out '%s' --name %s --no-progress", nets[i], d.cifar, d.out,
                 nets[i]);
        free(test_expect_cli(args, 0, "epoch 1/1"));
        snprintf(path, sizeof path, "%s/%s.metrics.csv", d.out, nets[i]);
        double loss = test_metrics_value(path, 0, "loss");
        assert_true(loss > 0 && loss < 20);
        snprintf(path, sizeof path, "%s/%s.predictions.csv", d.out, nets[i]);
        assert_int_equal(count_lines(path), 30 + 1);
    }
    free(d.dir);
}

// Nothing under out/ (the run's files are opened only once the data fits).
static void assert_nothing_written(const char *out) {
    struct stat st;
    if (stat(out, &st) == 0) {
        char cmd[1200], *ls = NULL;
        snprintf(cmd, sizeof cmd, "ls -A '%s'", out);
        test_run_shell(cmd, &ls);
        if (ls && *ls) fail_msg("files written under %s: %s", out, ls);
        free(ls);
    }
}

static void test_rgb_errors(void **state) {
    (void)state;
    rgb_data d;
    rgb_data_init(&d);
    char args[9000];
    struct {
        const char *model, *data, *want;
    } cases[] = {
        // The built-in network takes 1x28x28.
        {"cnn3", "--data '%s/cifar-10-batches-bin'",
         "training data has samples of 3x32x32, but model cnn2d_3layer_fullconnected_3layer takes 1x28x28"},
        // CIFAR-100's fine labels reach 99; the model has 10 classes.
        {NULL, "--train '%s/train.bin'", "train.bin: fine label 10 at record 10 is outside 0..9"},
        {NULL, "--train '%s/x.npy'", "x.npy: training images need labels: give --train-labels FILE.npy"},
        {NULL, "--train '%s/y.npy' --train-labels '%s/y.npy'", "y.npy: images of dtype int64"},
        {NULL, "--train '%s/data.npz' --train-labels '%s/y.npy'", "goes with .npy images only"},
        {NULL, "--train '%s/rgb.cfg.npz'", "rgb.cfg.npz: No such file or directory"},
        {NULL, "--train '%s/x.npy' --train-labels '%s/x.npy'", "x.npy: labels of shape (150, 32, 32, 3)"},
        {NULL, "--train '%s/x.npy' --train-labels '%s/y.npy' --layout nchw",
         "has samples of 32x32x3, but model rgb_tiny takes 3x32x32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char data[3000];
        snprintf(data, sizeof data, cases[i].data, d.dir, d.dir);
        snprintf(args, sizeof args, "train --model '%s' %s --devices cpu --out '%s' --no-progress",
                 cases[i].model ? cases[i].model : d.cfg, data, d.out);
        char *out = test_expect_cli(args, 1, cases[i].want);
        if (strchr(out, '\n') != out + strlen(out) - 1) fail_msg("not one line: %s", out);
        free(out);
        assert_nothing_written(d.out);
    }
    // The coarse labels fit a 20-class model.
    char *cfg20 = strdup(rgb_cfg);
    memcpy(strstr(cfg20, "classes = 10"), "classes = 20", 12);
    memcpy(strstr(cfg20, "units = 10"), "units = 20", 10);
    free(test_write_file(d.dir, "rgb20.cfg", cfg20, strlen(cfg20)));
    snprintf(args, sizeof args, "train --model '%s/rgb20.cfg' --train '%s/train.bin' --cifar-labels "
             "coarse --devices cpu --out '%s' --name c100 --no-progress", d.dir, d.dir, d.out);
    free(test_expect_cli(args, 0, "epoch 1/1"));
    free(cfg20);
    // Usage errors.
    snprintf(args, sizeof args, "train --augment crop:0 --model '%s'", d.cfg);
    free(test_expect_cli(args, 2, "crop:P needs a padding P of 1..64"));
    free(test_expect_cli("train --layout hwc", 2, "--layout: expected nhwc, nchw or auto"));
    free(test_expect_cli("train --train-labels y.npy", 2, "--train-labels goes with --train FILE.npy"));
    free(d.dir);
}

// A run's augmentation is part of what defines it: --resume takes it from the checkpoint and
// refuses another.
static void test_resume_keeps_augment(void **state) {
    (void)state;
    rgb_data d;
    rgb_data_init(&d);
    char args[9000], ckpt[1300];
    snprintf(args, sizeof args, "train --model '%s' --data '%s' --devices cpu --augment crop:2,flip "
             "--epochs 2 --checkpoint-every 1 --out '%s' --name r --no-progress",
             d.cfg, d.cifar, d.out);
    free(test_expect_cli(args, 0, "epoch 2/2"));
    snprintf(ckpt, sizeof ckpt, "%s/r.ckpt", d.out);
    snprintf(args, sizeof args, "train --resume '%s' --augment flip", ckpt);
    free(test_expect_cli(args, 1, "--resume: --augment differs from the run being resumed"));
    snprintf(args, sizeof args, "train --resume '%s' --augment crop:2,flip --no-progress", ckpt);
    free(test_expect_cli(args, 0, "all 2 epochs were done"));
    free(d.dir);
}

// An augmented run killed mid-epoch and resumed from its checkpoint ends with the bits of
// the same run never stopped: the crops and flips of the steps after the resume are the ones
// the unbroken run drew (they depend on seed, epoch and sample id alone).
static void test_resume_augments_the_same(void **state) {
    (void)state;
    rgb_data d;
    rgb_data_init(&d);
    const char *where = "--devices cpu:1 --balance static --conv-algo direct --no-self-check "
                        "--no-progress --quiet";
    char args[9000], *out, a[1300], b[1300];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "train --model '%s' --data '%s' --augment crop:4,flip --epochs 2 "
                 "--checkpoint-every 2 %s --out '%s' --name %s %s%s%s", d.cfg, d.cifar, where, d.out,
                 k ? "cut" : "whole", k ? "" : "--save '", k ? "" : d.dir, k ? "" : "/whole.safetensors'");
        if (k) setenv("HETRAIN_FAULT", "kill:cpu:1@5", 1); // step 5 of 6: after the checkpoint of step 4
        int rc = test_run_cli(args, &out);
        unsetenv("HETRAIN_FAULT");
        if (rc != (k ? 128 + 9 : 0)) fail_msg("run %d: exit %d\n%s", k, rc, out);
        free(out);
    }
    snprintf(args, sizeof args, "train --resume '%s/cut' %s --save '%s/cut.safetensors'", d.out,
             where, d.dir);
    free(test_expect_cli(args, 0, NULL));
    snprintf(a, sizeof a, "%s/whole.safetensors", d.dir);
    snprintf(b, sizeof b, "%s/cut.safetensors", d.dir);
    size_t na, nb;
    char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
    assert_non_null(x);
    assert_non_null(y);
    if (na != nb || memcmp(x, y, na)) fail_msg("%s and %s differ", a, b);
    free(x);
    free(y);
    free(d.dir);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rgb_trains_on_cpu_and_pocl),
        cmocka_unit_test(test_rgb_errors),
        cmocka_unit_test(test_graph_presets),
        cmocka_unit_test(test_resume_keeps_augment),
        cmocka_unit_test(test_resume_augments_the_same),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
