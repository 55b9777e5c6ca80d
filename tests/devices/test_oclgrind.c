// hetrain's OpenCL path on oclgrind, a simulated device that reports what real GPUs punish and
// PoCL forgives: out-of-bounds and uninitialised accesses, data races, API misuse. A short
// train and a predict of a small network of conv, max and average pooling, dense and dropout
// layers run on its device; each must exit 0 with an empty oclgrind log. The exit path is part
// of the check: CLBlast's caches of programs and kernels must go before the contexts do
// (ocl_blas_release_all), or the process aborts at exit with a corrupted heap.
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

#include "testutil.h"

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

static int setup(void **state) {
    (void)state;
    if (test_csv_data_init(&data, "oclgrind", 20, 12) < 0) return -1;
    char *p = test_write_file(data.dir, "small.cfg", net_cfg, sizeof net_cfg - 1);
    if (!p) return -1;
    snprintf(cfg, sizeof cfg, "%s", p);
    free(p);
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

static void test_train_and_predict(void **state) {
    (void)state;
    if (!have_oclgrind()) {
        printf("oclgrind not installed: skipped\n");
        skip();
    }
    char args[8192];
    // Without a test set: the exit after training alone is where CLBlast's cache, left to its
    // destructors, corrupted the heap (with the test evaluation's programs too it did not).
    snprintf(args, sizeof args, "train --train '%s' --model '%s' --epochs 1 --batch 10 "
             "--val-split 0.2 --balance static --no-progress --out '%s' --name og "
             "--save '%s/og.safetensors'", data.train, cfg, data.dir, data.dir);
    run_clean("train", args);
    snprintf(args, sizeof args, "predict --test '%s' --model '%s' --load '%s/og.safetensors' "
             "--out '%s/og-pred.csv'", data.test, cfg, data.dir, data.dir);
    run_clean("predict", args);
    char path[1300];
    snprintf(path, sizeof path, "%s/og-pred.csv", data.dir);
    char *pred = test_read_file(path, NULL);
    assert_non_null(pred);
    int lines = 0;
    for (char *p = pred; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 1 + 12); // header and one row per test sample
    free(pred);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_and_predict),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
