// hetrain train under mpirun, through the CLI: 2 ranks, each with its own --devices (KEY=SPEC
// by rank), give the metrics and predictions of one process over the same devices in the same
// order; only rank 0 writes files; alone, hetrain never starts MPI.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

static void test_two_ranks_equal_one_process(void **state) {
    (void)state;
    char *dir = test_tmpdir("mpi-cli");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 500, 1);
    char *test = test_fashion_csv(dir, FASHION_TEST, 200, 1);
    assert_non_null(train);
    assert_non_null(test);
    char cmd[8192], *out;
    const char *common = "train --epochs 2 --batch 50 --val-split 0.2 --balance static --no-self-check --no-progress --quiet";
    snprintf(cmd, sizeof cmd, "%s -np 2 '%s' %s --train '%s' --test '%s' --devices 0=cpu:1 "
             "--devices 1=cpu:1@2 --out '%s' --name two 2>&1", HT_MPIEXEC, HT_BINARY, common,
             train, test, dir);
    int rc = test_run_shell(cmd, &out);
    if (rc != 0) fail_msg("mpirun: exit %d\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s --train '%s' --test '%s' --devices cpu:1,cpu:1@2 "
             "--out '%s' --name one", common, train, test, dir);
    free(test_expect_cli(cmd, 0, NULL));
    char a[1200], b[1200];
    const char *files[] = {"predictions.csv", "metrics.csv"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/one.%s", dir, files[k]);
        snprintf(b, sizeof b, "%s/two.%s", dir, files[k]);
        char *x = test_read_file(a, NULL), *y = test_read_file(b, NULL);
        assert_non_null(x);
        assert_non_null(y);
        if (k == 0) assert_string_equal(x, y);
        else { // the deterministic columns: epoch, accuracy, loss, val_*
            for (char *p = x, *q = y; *p && *q;) {
                size_t np = strcspn(p, "\n"), nq = strcspn(q, "\n");
                int c = 0;
                size_t i = 0;
                while (i < np && i < nq && c < 5 && p[i] == q[i]) c += p[i++] == ',';
                if (c < 5) fail_msg("metrics differ:\n%.*s\n%.*s", (int)np, p, (int)nq, q);
                p += np + (p[np] == '\n');
                q += nq + (q[nq] == '\n');
            }
        }
        free(x);
        free(y);
    }
    // One rank wrote: the files exist once, under rank 0's name.
    snprintf(a, sizeof a, "%s/two-2.log", dir);
    assert_null(test_read_file(a, NULL));
    free(train);
    free(test);
    free(dir);
}

// Killed mid-run (SIGKILL in step 6: Open MPI then ends the whole job) and resumed with
// mpirun ... --resume from the checkpoint of step 4: the final weights are the bits of the
// 2-rank run that never stopped.
static void test_killed_job_resumes(void **state) {
    (void)state;
    char *dir = test_tmpdir("mpi-kill");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 500, 1);
    assert_non_null(train);
    char cmd[8192], *out;
    const char *devs = "--devices 0=cpu:1 --devices 1=cpu:1@2 --balance static --no-self-check --no-progress --quiet";
    const char *fault[] = {"", "-x HETRAIN_FAULT=kill:cpu:1@6"};
    const char *name[] = {"ref", "k"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s %s -np 2 '%s' train --train '%s' --epochs 2 --batch 50 "
                 "--val-split 0.2 %s --checkpoint-every 2 --out '%s' --name %s%s%s%s 2>&1",
                 HT_MPIEXEC, fault[k], HT_BINARY, train, devs, dir, name[k],
                 k ? "" : " --save '", k ? "" : dir, k ? "" : "/ref.safetensors'");
        int rc = test_run_shell(cmd, &out);
        if (rc != (k ? 137 : 0)) fail_msg("%s: exit %d\n%s", name[k], rc, out);
        free(out);
    }
    snprintf(cmd, sizeof cmd, "%s -np 2 '%s' train --resume '%s/k' %s --save '%s/k.safetensors' 2>&1",
             HT_MPIEXEC, HT_BINARY, dir, devs, dir);
    int rc = test_run_shell(cmd, &out);
    if (rc != 0) fail_msg("resume: exit %d\n%s", rc, out);
    free(out);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/ref.safetensors", dir);
    snprintf(b, sizeof b, "%s/k.safetensors", dir);
    size_t na, nb;
    char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
    assert_non_null(x);
    assert_non_null(y);
    assert_true(na == nb && !memcmp(x, y, na));
    free(x);
    free(y);
    free(train);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_equal_one_process),
        cmocka_unit_test(test_killed_job_resumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
