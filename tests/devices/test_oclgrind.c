// hetrain's OpenCL path on oclgrind, a simulated device that reports what real GPUs punish and
// PoCL forgives: out-of-bounds accesses, data races, barrier divergence, API misuse. Every kernel
// family the OpenCL device has runs on its device through the CLI, in training (forward,
// backward, the host's update, the broadcast weights) and in inference (predict): a small
// network of conv, max and average pooling, dense and dropout layers; one of every other kind
// (batch normalisation 2-D and 1-D, training and frozen, both max-pool backward kernels, zero
// padding, permutes, a residual add and a concatenation (the gradient of a tensor two layers
// read added up), global average pooling, each activation of the act family; its 3x3
// convolutions by Winograd F(4x4,3x3)); and a multi-label sigmoid head after a 5x5 convolution
// by Winograd F(2x2,5x5). Each run must exit 0 with an empty oclgrind log. The exit path is
// part of the check: CLBlast's caches of programs and kernels must go before the contexts do
// (ocl_blas_release_all), or the process aborts at exit with a corrupted heap.
//
// oclgrind's uninitialised-memory check (--uninitialized) is left off: on a multi-threaded host
// it crashes inside oclgrind itself (its shadow memory is not thread-safe) before any report.
// Skipped when oclgrind is not installed (tools/setup.sh installs it).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/lib/testutil.h"

static test_csv_data data;
static char cfg[1200];


// A few of every layer kind the OpenCL device runs in training, on 1x28x28, small enough that
// the simulator's work-item by work-item run takes seconds.
static const char net_cfg[] = "[net]\ninput = 1x28x28\n"
                              "[conv]\nfilters = 3\nsize = 3\npad = same\nactivation = relu\n"
                              "[maxpool]\nsize = 2\n"
                              "[conv]\nfilters = 4\nsize = 3\nstride = 2\nbias = 0\nactivation = relu\n"
                              "[avgpool]\nsize = 2\n"
                              "[dense]\nunits = 8\nactivation = relu\n[dropout]\nrate = 0.25\n"
                              "[dense]\nunits = 10\n[softmax]\n";

// The kinds the first network lacks, on 1x12x12: batch normalisation after a convolution and
// (frozen: its moving statistics in training too) after a dense layer, a max pool whose windows
// tile its input (maxpool_bwd_tiled) and one whose windows overlap (maxpool_bwd), uneven zero
// padding, a permute and its inverse, global average pooling, and every activation of the act
// family, each after its own dense layer; a rescale and two normalizes first (the second's mean
// and variance constants), layer normalisation over an image's channels and over a vector, a
// layerscale on a residual branch, a dropout of whole samples, a squeeze-and-excite multiply (a
// broadcast 1x1 input) and a maximum after the concatenation.
static const char all_cfg[] = "[net]\ninput = 1x12x12\nconv_algo = winograd\n"
                              "[rescale]\nscale = 0.5\noffset = -0.25\n[normalize]\n"
                              "[normalize]\nmean = 0.25\nvariance = 2\n"
                              "[conv]\nfilters = 4\nsize = 3\npad = same\nactivation = relu\n"
                              "[batchnorm]\n[maxpool]\nsize = 2\n"
                              "[zeropad]\npadding = ((0, 1), (2, 0))\n"
                              "[permute]\ndims = 2,3,1\n[permute]\ndims = 3,1,2\n"
                              "[conv]\nfilters = 4\nsize = 3\npad = same\nbias = 0\nactivation = tanh\n"
                              "[layernorm]\n"
                              "[conv]\nfilters = 4\nsize = 3\npad = same\n"
                              "[layerscale]\ninit_values = 0.5\n[add]\nfrom = -1, -3\n"
                              "[concat]\nname = cat\nfrom = -1, -3\n"
                              "[dropout]\nrate = 0.25\nper_sample = 1\n"
                              "[globalavgpool]\n[dense]\nunits = 8\nactivation = sigmoid\n"
                              "[multiply]\nfrom = drop1, -1\n[maximum]\nfrom = -1, cat\n"
                              "[avgpool]\nsize = 2\n"
                              "[conv]\nfilters = 6\nsize = 1\nactivation = elu\n"
                              "[maxpool]\nsize = 2\nstride = 1\n[globalavgpool]\n"
                              "[dense]\nunits = 8\nactivation = sigmoid\n"
                              "[dense]\nunits = 8\nactivation = leaky_relu\n"
                              "[dense]\nunits = 8\nactivation = selu\n"
                              "[dense]\nunits = 8\nactivation = swish\n"
                              "[dense]\nunits = 8\nactivation = softplus\n"
                              "[dense]\nunits = 8\nactivation = hard_sigmoid\n"
                              "[dense]\nunits = 8\nactivation = hard_swish\n"
                              "[dense]\nunits = 8\nactivation = gelu\n[layernorm]\n"
                              "[batchnorm]\ntrainable = 0\n[dropout]\nrate = 0.25\n"
                              "[dense]\nunits = 10\n[softmax]\n";

// A multi-label head: 4 sigmoid outputs, binary cross-entropy.
static const char ml_cfg[] = "[net]\ninput = 1x12x12\nclasses = 4\nconv_algo = winograd2\n"
                             "[conv]\nfilters = 3\nsize = 5\npad = same\nactivation = relu\n"
                             "[maxpool]\nsize = 2\n"
                             "[dense]\nunits = 4\n[binary_crossentropy]\n";

#define N_TRAIN 20
#define N_TEST 12
#define N_LABELS 4
static char all_path[1200], ml_path[1200], x_tr[1200], y_tr[1200], ml_tr[1200], x_te[1200],
    ml_te[1200];

// dir/name as an .npy of uint8 values drawn from seed below `below`, shape as given.
static int write_npy(char *path, const char *name, const char *shape, size_t n, int below,
                     uint32_t seed) {
    snprintf(path, 1200, "%s/%s", data.dir, name);
    uint8_t *v = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (uint8_t)((seed >> 16) % (uint32_t)below);
    }
    int rc = test_write_npy_u8(path, shape, v, n);
    free(v);
    return rc;
}

static int write_cfg(char *path, const char *name, const char *text) {
    char *p = test_write_file(data.dir, name, text, strlen(text));
    if (!p) return -1;
    snprintf(path, 1200, "%s", p);
    free(p);
    return 0;
}

static int setup(void **state) {
    (void)state;
    if (test_csv_data_init(&data, "oclgrind", N_TRAIN, N_TEST) < 0) return -1;
    char shape[64];
    snprintf(shape, sizeof shape, "(%d, 12, 12)", N_TRAIN);
    if (write_npy(x_tr, "x_train.npy", shape, N_TRAIN * 144, 256, 1)) return -1;
    snprintf(shape, sizeof shape, "(%d,)", N_TRAIN);
    if (write_npy(y_tr, "y_train.npy", shape, N_TRAIN, 10, 2)) return -1;
    snprintf(shape, sizeof shape, "(%d, %d)", N_TRAIN, N_LABELS);
    if (write_npy(ml_tr, "ml_train.npy", shape, N_TRAIN * N_LABELS, 2, 3)) return -1;
    snprintf(shape, sizeof shape, "(%d, 12, 12)", N_TEST);
    if (write_npy(x_te, "x_test.npy", shape, N_TEST * 144, 256, 4)) return -1;
    snprintf(shape, sizeof shape, "(%d, %d)", N_TEST, N_LABELS);
    if (write_npy(ml_te, "ml_test.npy", shape, N_TEST * N_LABELS, 2, 5)) return -1;
    if (write_cfg(cfg, "small.cfg", net_cfg) || write_cfg(all_path, "all.cfg", all_cfg) ||
        write_cfg(ml_path, "ml.cfg", ml_cfg))
        return -1;
    return 0;
}

static int have_oclgrind(void) {
    return test_run_shell("command -v oclgrind >/dev/null 2>&1", NULL) == 0;
}

// Runs `hetrain ARGS` under oclgrind with its API checks and race detection, its reports into
// dir/NAME.oclgrind; fails unless it exits 0 and the report is empty.
static void run_clean(const char *name, const char *args) {
    char log[1300], cmd[8192], *out;
    snprintf(log, sizeof log, "%s/%s.oclgrind", data.dir, name);
    // The sanitizer build: oclgrind's runtime is preloaded ahead of ASan's.
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" oclgrind "
             "--check-api --data-races --log '%s' '%s' %s --devices cl:0.0 --cache-dir '' 2>&1",
             log, HT_BINARY, args);
    int rc = test_run_shell(cmd, &out);
    size_t n = 0;
    char *report = test_read_file(log, &n);
    if (rc != 0 || !report || n > 0)
        fail_msg("%s under oclgrind: exit %d\n%s\noclgrind's report:\n%s", name, rc, out,
                 report ? report : "(no log)");
    free(report);
    free(out);
}

static int skip_without_oclgrind(void) {
    if (have_oclgrind()) return 0;
    printf("oclgrind not installed: skipped\n");
    return 1;
}

// Trains `model` for an epoch on `train` (with its validation split) and predicts `test` with
// the weights saved, both under oclgrind; the predictions file has a row per test sample.
static void train_and_predict(const char *name, const char *model, const char *train,
                              const char *test) {
    char args[8192], path[1300];
    // Without a test set: the exit after training alone is where CLBlast's cache, left to its
    // destructors, corrupted the heap (with the test evaluation's programs too it did not).
    snprintf(args, sizeof args, "train %s --model '%s' --epochs 1 --batch 10 --val-split 0.2 "
             "--balance static --no-progress --out '%s' --name %s --save '%s/%s.safetensors'",
             train, model, data.dir, name, data.dir, name);
    snprintf(path, sizeof path, "%s-train", name);
    run_clean(path, args);
    snprintf(args, sizeof args, "predict %s --model '%s' --load '%s/%s.safetensors' "
             "--out '%s/%s-pred.csv'", test, model, data.dir, name, data.dir, name);
    snprintf(path, sizeof path, "%s-predict", name);
    run_clean(path, args);
    snprintf(path, sizeof path, "%s/%s-pred.csv", data.dir, name);
    char *pred = test_read_file(path, NULL);
    assert_non_null(pred);
    int lines = 0;
    for (char *p = pred; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 1 + N_TEST); // header and one row per test sample
    free(pred);
}

static void test_train_and_predict(void **state) {
    (void)state;
    if (skip_without_oclgrind()) skip();
    char tr[1300], te[1300];
    snprintf(tr, sizeof tr, "--train '%s'", data.train);
    snprintf(te, sizeof te, "--test '%s'", data.test);
    train_and_predict("og", cfg, tr, te);
}

static void test_every_kind(void **state) {
    (void)state;
    if (skip_without_oclgrind()) skip();
    char tr[2600], te[1300];
    snprintf(tr, sizeof tr, "--train '%s' --train-labels '%s'", x_tr, y_tr);
    snprintf(te, sizeof te, "--test '%s'", x_te);
    train_and_predict("all", all_path, tr, te);
}

static void test_multilabel_head(void **state) {
    (void)state;
    if (skip_without_oclgrind()) skip();
    char tr[2600], te[2600];
    snprintf(tr, sizeof tr, "--train '%s' --train-labels '%s'", x_tr, ml_tr);
    snprintf(te, sizeof te, "--test '%s' --test-labels '%s'", x_te, ml_te);
    train_and_predict("ml", ml_path, tr, te);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_and_predict),
        cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_multilabel_head),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
