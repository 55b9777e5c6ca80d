// The command line as a user meets it: help texts, bad flags and bad files (non-zero exit,
// one clear line, no files left behind), run names that never overwrite, and a small
// train -> save -> predict round trip on Kaggle-style CSVs cut from Fashion-MNIST.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "data/data.h"
#include "tests/lib/testutil.h"

#define EXIT_USAGE 2

// Runs the CLI, checks its exit status and that its output contains `want`.
#define expect_cli(args, status, want) free(test_expect_cli(args, status, want))

static void test_help_texts(void **state) {
    (void)state;
    expect_cli("--help", 0, "usage: hetrain COMMAND");
    expect_cli("", EXIT_USAGE, "usage: hetrain COMMAND");
    const char *flags[] = {"--model", "--data", "--train", "--test", "--epochs", "--batch",
                           "--lr", "--seed", "--limit", "--val-split", "--devices", "--out",
                           "--save", "--load", "--conv-algo", "--lr-schedule", "--weight-decay",
                           "--weight-decay-mode"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        expect_cli("train --help", 0, flags[i]);
    expect_cli("predict --help", 0, "--load");
    expect_cli("predict --help", 0, "--conv-algo");
    expect_cli("summary --help", 0, "usage: hetrain summary");
    expect_cli("version", 0, "hetrain ");
}

static void test_bad_flags(void **state) {
    (void)state;
    expect_cli("frobnicate", EXIT_USAGE, "unknown command \"frobnicate\"");
    expect_cli("train --bogus", EXIT_USAGE, "unknown option \"--bogus\"");
    expect_cli("train --epochs", EXIT_USAGE, "--epochs needs a value");
    expect_cli("train --epochs abc", EXIT_USAGE, "--epochs: expected an integer 1..100000, found \"abc\"");
    expect_cli("train --batch 0", EXIT_USAGE, "--batch: expected an integer");
    expect_cli("train --val-split 1.5", EXIT_USAGE, "--val-split: expected a number");
    expect_cli("train --lr nan", EXIT_USAGE, "--lr: expected a number");
    expect_cli("train extra", EXIT_USAGE, "unexpected argument \"extra\"");
    expect_cli("train --train a.csv --data /tmp", EXIT_USAGE, "give one");
    expect_cli("train --conv-algo fft", EXIT_USAGE,
               "--conv-algo: expected direct, auto, winograd, winograd2 or gemm, found \"fft\"");
    expect_cli("predict --conv-algo Winograd --load w --out p", EXIT_USAGE,
               "--conv-algo: expected direct, auto");
    expect_cli("predict --out x.csv", EXIT_USAGE, "--load FILE.safetensors is required");
    // export: its usage, and a weights file that is not there named, nothing written.
    expect_cli("export --help", 0, "usage: hetrain export");
    expect_cli("export --onnx m.onnx", EXIT_USAGE, "--load FILE is required");
    expect_cli("export --load w.st", EXIT_USAGE, "--onnx FILE.onnx is required");
    expect_cli("export --load w.st --onnx m.onnx --frob", EXIT_USAGE, "unknown option \"--frob\"");
    expect_cli("export --load /nonexistent/w.st --onnx /tmp/hetrain-never.onnx", 1,
               "/nonexistent/w.st");
    assert_int_equal(access("/tmp/hetrain-never.onnx", F_OK), -1);
    // Schedules and weight decay: one line each, quoting what was given.
    expect_cli("train --lr-schedule step:0:0.5", EXIT_USAGE,
               "--lr-schedule: \"step:0:0.5\": EPOCHS must be an integer 1..1000000");
    expect_cli("train --lr-schedule exp:-1", EXIT_USAGE,
               "--lr-schedule: \"exp:-1\": GAMMA must be a number 0 < GAMMA <= 1");
    expect_cli("train --lr-schedule warmup", EXIT_USAGE,
               "--lr-schedule: expected step:EPOCHS:GAMMA, exp:GAMMA, cosine or none, found \"warmup\"");
    expect_cli("train --weight-decay -0.1", EXIT_USAGE, "--weight-decay: expected a number");
    expect_cli("train --weight-decay-mode adamw", EXIT_USAGE,
               "--weight-decay-mode: expected l2 or decoupled, found \"adamw\"");
    expect_cli("summary --model nosuchnet", 1, "cnn2d_3layer_fullconnected_3layer");
}

static void test_summary(void **state) {
    (void)state;
    // 320 + 13872 + 13856 + 200832 + 16512 + 1290 parameters.
    expect_cli("summary", 0, "Total params: 246,682");
    expect_cli("summary --model cnn2", 0, "Total params: 3,274,634");
    // Each layer's forward multiply-adds: conv2 of the 3-layer network, fc1 of the 2-layer one.
    expect_cli("summary", 0, "10,838,016");
    expect_cli("summary --model cnn2", 0, "3,211,264");
    expect_cli("summary --model " HT_SOURCE_DIR "/models/cnn3.cfg", 0, "Total params: 246,682");
    // The RGB example, counted as Keras counts it: conv1 3*3*3*32 + 32, conv2 3*3*32*32 (no
    // bias), conv3 3*3*32*64 + 64, fc1 64*10 + 10; its stride-2 "same" conv1 gives 16x16.
    const char *cifar = "summary --model " HT_SOURCE_DIR "/models/cifar_small.cfg";
    expect_cli(cifar, 0, "Total params: 29,258");
    expect_cli(cifar, 0, "(32, 16, 16)");
    expect_cli(cifar, 0, "avgpool1 (avgpool)");
    expect_cli(cifar, 0, "gap1 (globalavgpool)");
}

static void test_bad_files(void **state) {
    (void)state;
    char *dir = test_tmpdir("cli-bad");
    char *out = test_tmpdir("cli-bad-out");
    const char *ragged = "label,pixel0,pixel1,pixel2,pixel3\n1,0,0,0,0\n2,0,0,0\n";
    char *p = test_write_file(dir, "ragged.csv", ragged, strlen(ragged));
    char args[2048];
    snprintf(args, sizeof args, "train --train '%s' --out '%s' --no-progress", p, out);
    expect_cli(args, 1, "ragged.csv:3");
    assert_int_equal(test_count_files(out), 0); // nothing written for a run that never started
    snprintf(args, sizeof args, "train --data '%s/nowhere' --out '%s'", dir, out);
    expect_cli(args, 1, "nowhere");
    assert_int_equal(test_count_files(out), 0);
    snprintf(args, sizeof args, "train --devices gpu7 --limit 100 --out '%s'", out);
    expect_cli(args, 1, "unknown device \"gpu7\"");
    snprintf(args, sizeof args, "train --load '%s/missing.safetensors' --limit 100 --out '%s'", dir, out);
    expect_cli(args, 1, "missing.safetensors");
    assert_int_equal(test_count_files(out), 0);
    // A 4-pixel CSV is a valid 2x2 image set, but not the shape the model takes.
    const char *tiny = "label,pixel0,pixel1,pixel2,pixel3\n1,0,0,0,0\n2,0,0,0,9\n";
    char *t = test_write_file(dir, "tiny.csv", tiny, strlen(tiny));
    snprintf(args, sizeof args, "train --train '%s' --out '%s'", t, out);
    expect_cli(args, 1, "1x2x2");
    assert_int_equal(test_count_files(out), 0);
    free(p);
    free(t);
    free(dir);
    free(out);
}

static void test_train_save_predict_round_trip(void **state) {
    (void)state;
    char *dir = test_tmpdir("cli-e2e");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 300, 1);
    char *test = test_fashion_csv(dir, FASHION_TEST, 120, 0);
    char args[4096];
    snprintf(args, sizeof args,
             "train --train '%s' --test '%s' --epochs 2 --batch 50 --val-split 0.2 --out '%s' "
             "--name run --save '%s/w.safetensors' --no-progress",
             train, test, dir, dir);
    expect_cli(args, 0, "epoch 2/2");
    char path[1200];
    snprintf(path, sizeof path, "%s/run.metrics.csv", dir);
    char *metrics = test_read_file(path, NULL);
    assert_non_null(metrics);
    assert_true(strncmp(metrics, "epoch,accuracy,loss,val_accuracy,val_loss,time_s,samples_per_s,"
                                 "sync_s,idle_frac,lr,share_cpu,busy_s_cpu,events\n0,", 113) == 0);
    assert_non_null(strstr(metrics, "\n1,"));
    snprintf(path, sizeof path, "%s/run.predictions.csv", dir);
    char *preds = test_read_file(path, NULL);
    assert_non_null(preds);
    assert_true(strncmp(preds, "ImageId,Label\n1,", 16) == 0);
    assert_non_null(strstr(preds, "\n120,"));
    snprintf(path, sizeof path, "%s/run.log", dir);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "command: "));
    assert_non_null(strstr(log, "epoch 1/2"));

    // Saving over existing weights is refused before training starts.
    expect_cli(args, 1, "w.safetensors already exists");
    // Same name again: the first run's files stay, the new run becomes run-2.
    snprintf(args, sizeof args,
             "train --train '%s' --test '%s' --epochs 2 --batch 50 --val-split 0.2 --out '%s' "
             "--name run --save '%s/w2.safetensors' --no-progress",
             train, test, dir, dir);
    expect_cli(args, 0, "run-2");
    snprintf(path, sizeof path, "%s/run.metrics.csv", dir);
    char *again = test_read_file(path, NULL);
    assert_string_equal(again, metrics);
    snprintf(path, sizeof path, "%s/run-2.metrics.csv", dir);
    free(again);
    again = test_read_file(path, NULL);
    assert_non_null(again);

    // predict from the second run's saved weights reproduces its predictions.
    snprintf(args, sizeof args, "predict --load '%s/w2.safetensors' --test '%s' --out '%s/p.csv'",
             dir, test, dir);
    expect_cli(args, 0, "predictions:");
    snprintf(path, sizeof path, "%s/p.csv", dir);
    char *p = test_read_file(path, NULL);
    snprintf(path, sizeof path, "%s/run-2.predictions.csv", dir);
    char *p2 = test_read_file(path, NULL);
    assert_non_null(p);
    assert_non_null(p2);
    assert_string_equal(p, p2);
    // predict never overwrites.
    expect_cli(args, 1, "already exists");
    // predict on an IDX folder's test files, reporting accuracy since they have labels.
    snprintf(args, sizeof args,
             "predict --load '%s/w2.safetensors' --data " FASHION_DIR " --limit 100 --out '%s/q.csv'",
             dir, dir);
    expect_cli(args, 0, "(100 samples)");
    free(p);
    free(p2);
    free(again);
    free(metrics);
    free(preds);
    free(log);
    free(train);
    free(test);
    free(dir);
}

// --conv-algo and the config's conv_algo reach the CPU device, which logs each convolution's
// algorithms (and under auto what it timed); --conv-algo wins over the config. Every run
// passes the self-check, whose reference computes direct.
static void test_conv_algo(void **state) {
    (void)state;
    char *dir = test_tmpdir("cli-conv-algo");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 64, 1);
    const char *cfg_text = "[net]\ninput = 1x28x28\nconv_algo = winograd2\nbatch = 32\n"
                           "[conv]\nfilters = 8\nsize = 3\npad = same\nactivation = relu\n"
                           "[conv]\nfilters = 16\nsize = 3\npad = same\nactivation = relu\n"
                           "[maxpool]\nsize = 4\n[dense]\nunits = 10\n[softmax]\n";
    char *cfg = test_write_file(dir, "small.cfg", cfg_text, strlen(cfg_text));
    static const struct {
        const char *model, *option, *want;
    } runs[] = {
        {"cnn3", "--conv-algo winograd",
         "conv algorithms (winograd): conv1 winograd F(4x4,3x3); conv2 winograd F(4x4,3x3); "
         "conv3 winograd F(4x4,3x3)"},
        {"cnn3", "--conv-algo direct", "conv algorithms (direct): conv1 direct; conv2 direct"},
        {"cnn3", "", "conv algorithms (auto; us a sample direct/winograd): conv1 "},
        {"cfg", "", "conv algorithms (winograd2): conv1 winograd F(2x2,3x3); conv2 winograd"},
        {"cfg", "--conv-algo direct", "conv algorithms (direct): conv1 direct; conv2 direct"},
        {"cnn2", "--conv-algo winograd",
         "conv algorithms (winograd): conv1 winograd F(4x4,5x5); conv2 winograd F(4x4,5x5)"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char args[4096], path[1200];
        snprintf(args, sizeof args,
                 "train --model '%s' --train '%s' --epochs 1 --batch 32 --val-split 0 %s "
                 "--devices cpu:1 --out '%s' --name r%zu --no-progress",
                 strcmp(runs[i].model, "cfg") ? runs[i].model : cfg, train, runs[i].option, dir, i);
        expect_cli(args, 0, "epoch 1/1");
        snprintf(path, sizeof path, "%s/r%zu.log", dir, i);
        char *log = test_read_file(path, NULL);
        assert_non_null(log);
        if (!strstr(log, runs[i].want)) fail_msg("%s: log lacks \"%s\":\n%s", args, runs[i].want, log);
        free(log);
    }
    // A resumed run computes with the algorithms its checkpoint kept: auto's decisions come
    // back untimed (run r2 was auto).
    char args[2048], path[1200];
    snprintf(args, sizeof args, "train --resume '%s/r2' --no-progress", dir);
    expect_cli(args, 0, "resumed from");
    snprintf(path, sizeof path, "%s/r2.log", dir);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    const char *resumed = strstr(log, "resumed from");
    assert_non_null(resumed);
    if (!strstr(resumed, ": conv algorithms (auto): conv1 "))
        fail_msg("the resumed run's log lacks the checkpoint's decisions:\n%s", resumed);
    free(log);
    free(cfg);
    free(train);
    free(dir);
}

// A device's own memory limit, --devices cpu:1:mem=32M, reaches the device (its workspace
// then holds 7 of cnn2's samples, logged), also when it is the only --devices given: its '='
// is not a KEY=SPEC's (which once opened the default devices instead); 20 MiB holds none.
static void test_device_mem_option(void **state) {
    (void)state;
    char *dir = test_tmpdir("cli-device-mem");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 40, 1);
    char args[4096], path[1200];
    snprintf(args, sizeof args,
             "train --model cnn2 --train '%s' --epochs 1 --batch 20 --val-split 0 --devices "
             "cpu:1:mem=32M --no-self-check --out '%s' --name m --no-progress",
             train, dir);
    expect_cli(args, 0, "epoch 1/1");
    snprintf(path, sizeof path, "%s/m.log", dir);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    if (!strstr(log, "device cpu:1: native CPU, 1 OpenMP thread, capacity 1, micro-batch 7\n"))
        fail_msg("log:\n%s", log);
    free(log);
    // Too little for one sample: the error says what takes the room, and nothing is written.
    snprintf(args, sizeof args,
             "train --model cnn2 --train '%s' --epochs 1 --batch 20 --val-split 0 --devices "
             "cpu:1:mem=20M --no-self-check --out '%s' --name small --no-progress",
             train, dir);
    expect_cli(args, 1, "not even one sample of cnn2d_2layer_full_connected_2layer fits in 20 MiB "
                        "(its parameters and gradient take 24 MiB, a workspace for one sample ");
    snprintf(path, sizeof path, "%s/small.log", dir);
    assert_null(test_read_file(path, NULL));
    free(train);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_texts),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_train_save_predict_round_trip),
        cmocka_unit_test(test_conv_algo),
        cmocka_unit_test(test_device_mem_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
