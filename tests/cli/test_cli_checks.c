// Inputs the command line must refuse with one clear line and a non-zero exit, before or
// instead of writing anything: broken weights, bad output names, bad device specs. Runs a
// one-dense-layer network on a few hundred Fashion-MNIST samples so each case takes a moment.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <math.h>

#include "devices/device.h"
#include "nn/model.h"
#include "app/report/results.h"
#include "io/safetensors.h"
#include "tests/lib/testutil.h"

#define EXIT_USAGE 2

#define expect_cli(args, status, want) free(test_expect_cli(args, status, want))

// The command fails with status and one line of output holding want.
static void expect_one_line(const char *args, int status, const char *want) {
    char *text = test_expect_cli(args, status, want);
    if (strchr(text, '\n') != strrchr(text, '\n')) fail_msg("expected one line, got:\n%s", text);
    free(text);
}

static const char tiny_cfg[] = "[net]\nname = tiny\ninput = 1x28x28\nclasses = 10\nbatch = 50\n"
                               "epochs = 1\nval_split = 0.2\n[dense]\nname = fc\nunits = 10\n"
                               "[softmax]\n";

typedef struct fixture {
    char *dir, *cfg, *train, *test;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = test_tmpdir("cli-checks");
    f->cfg = test_write_file(f->dir, "tiny.cfg", tiny_cfg, strlen(tiny_cfg));
    f->train = test_fashion_csv(f->dir, FASHION_TRAIN, 200, 1);
    f->test = test_fashion_csv(f->dir, FASHION_TEST, 100, 1);
    if (!f->dir || !f->cfg || !f->train || !f->test) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    free(f->dir), free(f->cfg), free(f->train), free(f->test);
    free(f);
    return 0;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Weights for the tiny network: every value v, except weight element bad_at set to bad.
static char *tiny_weights(const fixture *f, const char *name, float v, int bad_at, float bad) {
    model m;
    ht_error e;
    if (model_init(&m, f->cfg, &e) < 0) fail_msg("%s", e.msg);
    float *p = malloc(m.n_params * sizeof *p);
    for (size_t i = 0; i < m.n_params; i++) p[i] = v;
    if (bad_at >= 0) p[m.layers[0].w_off + (size_t)bad_at] = bad;
    size_t n = strlen(f->dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", f->dir, name);
    if (safetensors_save(path, &m, p, &e) < 0) fail_msg("%s", e.msg);
    free(p);
    model_free(&m);
    return path;
}

// A weights file holding a NaN is refused when it is loaded, by train (with or without the
// self-check) and by predict alike, naming the tensor and element; nothing is written.
static void test_non_finite_weights(void **state) {
    fixture *f = *state;
    char *w = tiny_weights(f, "nan.safetensors", 0.001f, 17, NAN);
    char out[1200], args[4096];
    snprintf(out, sizeof out, "%s/out-nan", f->dir);
    const char *want = "nan.safetensors: tensor \"fc.weight\" element 17 [0,17] is NaN";
    for (int check = 0; check < 2; check++) {
        snprintf(args, sizeof args,
                 "train --model '%s' --train '%s' --load '%s' --out '%s' --devices cpu:1 "
                 "--no-progress%s",
                 f->cfg, f->train, w, out, check ? "" : " --no-self-check");
        expect_cli(args, 1, want);
        assert_int_equal(test_count_files(out), 0);
    }
    snprintf(args, sizeof args, "predict --model '%s' --test '%s' --load '%s' --out '%s/p.csv' "
             "--devices cpu:1", f->cfg, f->test, w, f->dir);
    expect_cli(args, 1, want);
    snprintf(out, sizeof out, "%s/p.csv", f->dir);
    assert_false(exists(out));
    free(w);
}

// Finite weights so large that the network's outputs overflow: evaluation never shows a
// number made from NaN (the clamp of -log p used to turn it into 69.0776); predict refuses.
static void test_overflowing_outputs(void **state) {
    fixture *f = *state;
    char *w = tiny_weights(f, "huge.safetensors", 3e38f, -1, 0);
    char out[1200], args[4096];
    snprintf(args, sizeof args, "predict --model '%s' --test '%s' --load '%s' --out '%s/q.csv' "
             "--devices cpu:1", f->cfg, f->test, w, f->dir);
    char *text = test_expect_cli(args, 1, "the network's output for test sample 1 is not finite");
    assert_null(strstr(text, "69.07"));
    free(text);
    snprintf(out, sizeof out, "%s/q.csv", f->dir);
    assert_false(exists(out));

    snprintf(out, sizeof out, "%s/out-huge", f->dir);
    snprintf(args, sizeof args,
             "train --model '%s' --train '%s' --test '%s' --load '%s' --out '%s' --name h "
             "--devices cpu:1 --no-self-check --no-progress",
             f->cfg, f->train, f->test, w, out);
    text = test_expect_cli(args, 0, "val_loss nan  val_acc nan");
    assert_null(strstr(text, "69.07"));
    assert_non_null(strstr(text, "test: loss nan  accuracy nan"));
    free(text);
    free(w);
}

// An empty --out is refused up front (it used to reach a folder walk that read past the name
// into uninitialised memory); the library call refuses it too.
static void test_empty_out(void **state) {
    fixture *f = *state;
    char args[4096];
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '' --devices cpu:1 "
             "--no-progress", f->cfg, f->train);
    expect_cli(args, EXIT_USAGE, "--out: expected a folder name, found \"\"");
    snprintf(args, sizeof args, "predict --model '%s' --test '%s' --load x --out ''", f->cfg,
             f->test);
    expect_cli(args, 1, "--out: expected a file name, found \"\"");
    run_files r;
    ht_error e = {{0}};
    assert_int_equal(run_files_open(&r, "", "run", "epoch", &e), -1);
    if (!strstr(e.msg, "expected a folder name for the run's files, found \"\""))
        fail_msg("%s", e.msg);
}

// The run log states the device timeout as given: 0.5 s is not "0 s".
static void test_timeout_logged(void **state) {
    fixture *f = *state;
    char out[1200], args[4096], path[1300];
    snprintf(out, sizeof out, "%s/out-timeout", f->dir);
    const char *given[] = {" --device-timeout 0.5", " --device-timeout 0.125", ""};
    const char *want[] = {"device timeout: 0.5 s", "device timeout: 0.125 s",
                          "device timeout: 600 s"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --name t%d "
                 "--devices cpu:1 --no-progress --quiet%s", f->cfg, f->train, out, i, given[i]);
        expect_cli(args, 0, NULL);
        snprintf(path, sizeof path, "%s/t%d.log", out, i);
        char *log = test_read_file(path, NULL);
        assert_non_null(log);
        if (!strstr(log, want[i])) fail_msg("%s lacks \"%s\":\n%s", path, want[i], log);
        free(log);
    }
}

// Run names that cannot be a plain file name are refused before anything is written: "..",
// which made hidden files "...log", any leading '.', '/', control characters, and names too
// long for "-9999.predictions.csv" to fit. The library refuses them too.
static void test_run_names(void **state) {
    fixture *f = *state;
    char out[1200], args[4096], long_name[240];
    snprintf(out, sizeof out, "%s/out-names", f->dir);
    memset(long_name, 'x', 235);
    long_name[235] = 0;
    const struct {
        const char *name, *want;
    } cases[] = {
        {"..", "--name: run name \"..\" starts with '.', which would hide its files"},
        {".", "run name \".\" starts with '.'"},
        {".run", "run name \".run\" starts with '.'"},
        {"", "--name: run name is empty"},
        {"a/b", "run name \"a/b\" contains '/' at byte 2"},
        {"a\tb", "run name \"a\\x09b\" contains control character 0x09 at byte 2"},
        {long_name, "is 235 bytes; at most 234 fit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --name '%s' "
                 "--devices cpu:1 --no-progress", f->cfg, f->train, out, cases[i].name);
        expect_cli(args, EXIT_USAGE, cases[i].want);
        assert_int_equal(test_count_files(out), 0);
        run_files r;
        ht_error e = {{0}};
        assert_int_equal(run_files_open(&r, out, cases[i].name, "epoch", &e), -1);
        if (!strstr(e.msg, cases[i].want + (cases[i].want[0] == '-' ? 8 : 0)))
            fail_msg("run_files_open(\"%s\"): %s", cases[i].name, e.msg);
        assert_int_equal(test_count_files(out), 0);
    }
    ht_error e;
    assert_int_equal(run_name_check("a name, with spaces; caf\xc3\xa9", &e), 0);
    long_name[234] = 0;
    assert_int_equal(run_name_check(long_name, &e), 0);
}

// A CPU worker with far more threads than the machine has cores is refused while --devices is
// read, before any file exists (libgomp used to abort mid-run if it could not get the threads,
// leaving a header-only metrics CSV); the parser alone refuses it too.
static void test_cpu_thread_bound(void **state) {
    fixture *f = *state;
    long cores = sysconf(_SC_NPROCESSORS_ONLN); // >= what OpenMP may use under an affinity mask
    long over = 8 * (cores > 0 ? cores : 1) + 1;
    if (over > 1024) skip(); // the 1..1024 syntax check covers such machines
    char out[1200], args[4096], spec[32], want[160];
    snprintf(out, sizeof out, "%s/out-threads", f->dir);
    snprintf(spec, sizeof spec, "cpu:%ld", over);
    snprintf(want, sizeof want, "--devices: \"%s\": %ld threads is too many for this machine's",
             spec, over);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --devices '%s' "
             "--no-progress", f->cfg, f->train, out, spec);
    expect_cli(args, 1, want);
    assert_false(exists(out));
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --devices 'cpu:1,%s@2' "
             "--no-progress", f->cfg, f->train, out, spec);
    expect_cli(args, 1, "threads is too many");
    assert_false(exists(out));
    char *w = tiny_weights(f, "ok.safetensors", 0.001f, -1, 0);
    snprintf(args, sizeof args, "predict --model '%s' --test '%s' --load '%s' --out '%s/p.csv' "
             "--devices '%s'", f->cfg, f->test, w, f->dir, spec);
    expect_cli(args, 1, want);
    snprintf(out, sizeof out, "%s/p.csv", f->dir);
    assert_false(exists(out));
    free(w);
    device_item it;
    ht_error e = {{0}};
    assert_int_equal(device_parse_item(spec, &it, &e), -1);
    if (!strstr(e.msg, want)) fail_msg("%s", e.msg);
    snprintf(spec, sizeof spec, "cpu:%ld", over - 1);
    if (device_parse_item(spec, &it, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(it.threads, over - 1);
}

// A HETRAIN_FAULT entry for a device the run did not open would never fire: the run is refused
// with one line naming the entry and the devices that are open, before any file is written.
static void test_fault_names_no_device(void **state) {
    fixture *f = *state;
    char out[1200], args[4096];
    snprintf(out, sizeof out, "%s/out-fault", f->dir);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --devices cpu:1,cpu:1 "
             "--no-progress", f->cfg, f->train, out);
    setenv("HETRAIN_FAULT", "fail:cpu:1#2@2,kill:cpu:2@3", 1);
    expect_one_line(args, 1, "HETRAIN_FAULT: \"cpu:2\" names no open device (open: cpu:1, cpu:1#2)");
    unsetenv("HETRAIN_FAULT");
    assert_false(exists(out));
}

// --precision: a value it does not know is a usage error; bf16 beside an OpenCL device (which
// would compute its share in float32) is refused naming the device; neither writes anything.
static void test_precision_refusals(void **state) {
    fixture *f = *state;
    char out[1200], args[4096];
    snprintf(out, sizeof out, "%s/out-precision", f->dir);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --devices cpu:1 "
             "--precision fp8 --no-progress", f->cfg, f->train, out);
    expect_cli(args, EXIT_USAGE, "--precision: expected f32 or bf16, found \"fp8\"");
    setenv("POCL_DEVICES", "pthread", 1);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s' --devices cpu:1,cl:0.0 "
             "--precision bf16 --no-self-check --no-progress", f->cfg, f->train, out);
    expect_one_line(args, 1, "--precision bf16 runs on the cpu device only, and --devices opened cl:0.0");
    assert_false(exists(out));
    // Two plain cpu devices (the second's spec is cpu#2) are the cpu device twice: accepted.
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --out '%s-ok' --devices cpu,cpu "
             "--precision bf16 --no-progress --quiet", f->cfg, f->train, out);
    expect_cli(args, 0, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precision_refusals),
        cmocka_unit_test(test_non_finite_weights),
        cmocka_unit_test(test_overflowing_outputs),
        cmocka_unit_test(test_empty_out),
        cmocka_unit_test(test_timeout_logged),
        cmocka_unit_test(test_run_names),
        cmocka_unit_test(test_cpu_thread_bound),
        cmocka_unit_test(test_fault_names_no_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
