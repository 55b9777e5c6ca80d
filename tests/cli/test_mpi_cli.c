// hetrain train under mpirun, through the CLI: 2 ranks, each with its own --devices (KEY=SPEC
// by rank), give the metrics and predictions of one process over the same devices in the same
// order, on one machine and across two simulated nodes over TCP; only rank 0 writes files; a
// stopped or killed rank's job resumes to the same bits; automatic balance spans the ranks; a
// rank failing alone ends the job; ranks bound to one core are warned of.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/model.h"
#include "tests/lib/testutil.h"

// Runs the 2-rank job through `launch` (a command line ending where the program goes, which
// starts 2 ranks) and the same devices in one process, for cnn2 (whose fc1 gradient crosses as
// factors, the run log says so, and its other layers' as the plain reduction every network's
// takes); the predictions are the same bytes and the metrics' deterministic columns the same
// text. test_mpi_step checks the plain reduction over cnn3 and graphs, without the CLI.
static void two_ranks_model(const char *launch, const char *tag, const char *model,
                            const char *extra);
static void two_ranks_equal_one_process(const char *launch, const char *tag) {
    two_ranks_model(launch, tag, "cnn2", "");
}

// extra: more options for both runs.
static void two_ranks_model(const char *launch, const char *tag, const char *model,
                            const char *extra) {
    char *dir = test_tmpdir(tag);
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 500, 1);
    char *test = test_fashion_csv(dir, FASHION_TEST, 200, 1);
    assert_non_null(train);
    assert_non_null(test);
    char cmd[8192], *out;
    char common[512];
    snprintf(common, sizeof common, "train --model %s --epochs 2 --batch 50 --val-split 0.2 --balance static "
             "--conv-algo direct --no-self-check --no-progress --quiet %s", model, extra);
    snprintf(cmd, sizeof cmd, "%s '%s' %s --train '%s' --test '%s' --devices 0=cpu:1 "
             "--devices 1=cpu:1@2 --out '%s' --name two 2>&1", launch, HT_BINARY, common,
             train, test, dir);
    int rc = test_run_shell(cmd, &out);
    if (rc != 0) fail_msg("%s: exit %d\n%s", launch, rc, out);
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
    snprintf(a, sizeof a, "%s/two.log", dir);
    char *log = test_read_file(a, NULL);
    assert_non_null(log);
    const char *line = "; fc1's weight (3211264 values) as factors (50 x 4160 floats a batch), summed";
    const int factored = strstr(log, line) != NULL;
    if (factored != !strcmp(model, "cnn2")) fail_msg("%s: the log's exchange line:\n%s", model, log);
    free(log);
    free(train);
    free(test);
    free(dir);
}

static void test_two_ranks_equal_one_process(void **state) {
    (void)state;
    char launch[512];
    snprintf(launch, sizeof launch, "%s -np 2", HT_MPIEXEC);
    two_ranks_equal_one_process(launch, "mpi-cli");
}

// The same under --precision bf16: the host recomputes fc1's gradient from its factors in
// bfloat16 as the ranks' devices computed it, so two ranks still give one process's bits.
static void test_two_ranks_bf16(void **state) {
    (void)state;
    char launch[512];
    snprintf(launch, sizeof launch, "%s -np 2", HT_MPIEXEC);
    two_ranks_model(launch, "mpi-cli-bf16", "cnn2", "--precision bf16");
}

// tools/netsim.sh needs root and iproute2, as CI has; skipped elsewhere, saying why.
static void need_netns(void) {
    char *out;
    int rc = test_run_shell("id -u | grep -qx 0 && command -v ip >/dev/null && command -v tc >/dev/null "
                            "&& ip netns add ht-probe-$$ && ip netns delete ht-probe-$$ 2>&1", &out);
    free(out);
    if (rc != 0) {
        printf("skipped: network namespaces need root and iproute2 (tools/netsim.sh)\n");
        skip();
    }
}

// The same over TCP between two simulated nodes (tools/netsim.sh: network namespaces, a
// bridge, links shaped to 1 Gbit/s): the reduce-scatter, the gathers and the 2-layer network's
// factored exchange cross a real link (the 3-layer network's plain reduction is the same code
// as the 2-layer network's other layers).
static void test_two_nodes_over_tcp(void **state) {
    (void)state;
    need_netns();
    two_ranks_model(HT_SOURCE_DIR "/tools/netsim.sh --nodes 2 --rate 1gbit --timeout 300 "
                    "--mpi-args \"" HT_MPI_CONTEXT "\" --", "mpi-tcp", "cnn2", "");
}

// The simulated nodes share this machine's host name and /tmp: each node's Open MPI daemon
// gets a session directory of its own (the job's ranks inherit its setting), where daemons
// started together once made the same one at once and one of them failed or crashed, leaving
// mpirun waiting (about 1 launch in 10 across 4 nodes).
static void test_nodes_own_session_dirs(void **state) {
    (void)state;
    need_netns();
    char *out;
    int rc = test_run_shell(HT_SOURCE_DIR "/tools/netsim.sh --nodes 3 --rate 1gbit --timeout 120 -- "
                            "sh -c 'echo \"tmp=${OMPI_MCA_orte_tmpdir_base:-none}\"' 2>/dev/null", &out);
    if (rc != 0) fail_msg("netsim: exit %d\n%s", rc, out);
    char dirs[3][512];
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "tmp=", 4) != 0) continue;
        if (n == 3) fail_msg("more than 3 ranks answered");
        snprintf(dirs[n], sizeof dirs[n], "%s", line + 4);
        for (int k = 0; k < n; k++)
            if (!strcmp(dirs[k], dirs[n])) fail_msg("two nodes share the session directory %s", dirs[n]);
        n++;
    }
    free(out);
    assert_int_equal(n, 3);
}

// One rank dies mid-run (SIGKILL in step 6: Open MPI then ends the whole job), or one rank is
// asked to stop (SIGTERM in step 6: every rank stops after the same step and rank 0 writes a
// checkpoint); resumed with mpirun ... --resume, the final weights are the bits of the 2-rank
// run that never stopped. mpirun's MPMD form gives the fault to rank 1 alone.
static void test_stopped_rank_resumes(void **state) {
    (void)state;
    char *dir = test_tmpdir("mpi-kill");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 500, 1);
    assert_non_null(train);
    char cmd[16384], args[4096], *out;
    const char *devs = "--devices 0=cpu:1 --devices 1=cpu:1@2 --balance static --conv-algo direct --no-self-check --no-progress --quiet";
    const char *fault[] = {"", "kill:cpu:1@6", "term:cpu:1@6"};
    const char *name[] = {"ref", "k", "t"};
    const int want[] = {0, 137, 143};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "'%s' train --train '%s' --epochs 2 --batch 50 --val-split 0.2 "
                 "%s --checkpoint-every 2 --out '%s' --name %s%s%s%s", HT_BINARY, train, devs, dir,
                 name[k], k ? "" : " --save '", k ? "" : dir, k ? "" : "/ref.safetensors'");
        snprintf(cmd, sizeof cmd, "%s -np 1 %s : -np 1 %s -x HETRAIN_FAULT=%s %s 2>&1",
                 HT_MPIEXEC, args, HT_MPI_CONTEXT, fault[k], args);
        int rc = test_run_shell(cmd, &out);
        if (rc != want[k]) fail_msg("%s: exit %d, not %d\n%s", name[k], rc, want[k], out);
        if (k == 2) { // both ranks stopped after step 6; rank 0's checkpoint says so
            assert_non_null(strstr(out, "rank 1 ("));
            assert_non_null(strstr(out, "interrupted in epoch 1 after 300 samples; checkpoint:"));
        }
        free(out);
    }
    for (int k = 1; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "%s -np 2 '%s' train --resume '%s/%s' %s --save '%s/%s.safetensors' 2>&1",
                 HT_MPIEXEC, HT_BINARY, dir, name[k], devs, dir, name[k]);
        int rc = test_run_shell(cmd, &out);
        if (rc != 0) fail_msg("resume %s: exit %d\n%s", name[k], rc, out);
        free(out);
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/ref.safetensors", dir);
        snprintf(b, sizeof b, "%s/%s.safetensors", dir, name[k]);
        size_t na, nb;
        char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
        assert_non_null(x);
        assert_non_null(y);
        if (!(na == nb && !memcmp(x, y, na))) fail_msg("%s: the resumed run's weights differ", name[k]);
        free(x);
        free(y);
    }
    free(train);
    free(dir);
}

// Two ranks balanced automatically (calibrated over both ranks' devices) against a 1-rank job
// on one device: 5 steps of 100 from the same weights agree within the invariance tolerances
// (testutil.h), and the metrics give each rank's share, compute and MPI time.
static void test_balanced_ranks_match_one_rank(void **state) {
    (void)state;
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    char *dir = test_tmpdir("mpi-auto");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 625, 1);
    assert_non_null(train);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 11);
    char *init_path = test_save_params(&m, init, dir, "init.safetensors");
    const char *devs[2] = {"cpu:1", "0=cpu:1 --devices 1=cpu:1@3"};
    float *w[2];
    double loss[2], vloss[2];
    for (int k = 0; k < 2; k++) {
        char cmd[8192], *out;
        snprintf(cmd, sizeof cmd, "%s -np %d '%s' train --devices %s --train '%s' --epochs 1 "
                 "--batch 100 --lr 0.01 --val-split 0.2 --load '%s' --save '%s/w%d.safetensors' "
                 "--out '%s' --name run%d --no-progress --no-self-check 2>&1", HT_MPIEXEC, k + 1,
                 HT_BINARY, devs[k], train, init_path, dir, k, dir, k);
        int rc = test_run_shell(cmd, &out);
        if (rc != 0) fail_msg("%s: exit %d\n%s", cmd, rc, out);
        if (k == 1) { // both ranks' devices were timed and given a capacity
            double c0 = 0, c1 = 0;
            const char *cal = strstr(out, "calibrated capacities: r0/cpu:1@");
            assert_non_null(cal);
            assert_int_equal(sscanf(cal, "calibrated capacities: r0/cpu:1@%lf,r1/cpu:1@%lf", &c0, &c1), 2);
            assert_true(c0 > 0 && c1 > 0);
        }
        free(out);
        char path[1200];
        snprintf(path, sizeof path, "%s/w%d.safetensors", dir, k);
        w[k] = test_load_params(&m, path);
        snprintf(path, sizeof path, "%s/run%d.metrics.csv", dir, k);
        loss[k] = test_metrics_value(path, 0, "loss");
        vloss[k] = test_metrics_value(path, 0, "val_loss");
        if (k == 1) {
            double s0 = test_metrics_value(path, 0, "share_r0/cpu:1");
            double s1 = test_metrics_value(path, 0, "share_r1/cpu:1");
            assert_true(fabs(s0 - test_metrics_value(path, 0, "share_r0")) < 1e-9);
            assert_true(fabs(s0 + s1 - 1.0) < 1e-3);
            // How much each rank got is timing: a loaded machine can starve one rank's process
            // in calibration, and a capacity 200 times another's gets no sample of a batch of
            // 100 in five steps. So the shares only add up; both ranks' capacities were checked
            // above, and both took part in every step's reduction (comm_s below).
            assert_true(s0 >= 0 && s1 >= 0);
            double comm = test_metrics_value(path, 0, "comm_s");
            assert_true(comm > 0 && comm < test_metrics_value(path, 0, "time_s"));
            assert_true(comm >= test_metrics_value(path, 0, "comm_s_r1"));
        }
    }
    assert_true(check_updates(&m, w[1], w[0], init, TOL_RUN_OUTPUT, TOL_RUN_OTHER,
                              "weights after 5 steps, two ranks vs one"));
    assert_true(fabs(loss[1] - loss[0]) <= TOL_RUN_LOSS * loss[0]);
    assert_true(fabs(vloss[1] - vloss[0]) <= TOL_RUN_LOSS * vloss[0]);
    for (int k = 0; k < 2; k++) free(w[k]);
    free(init);
    free(init_path);
    free(train);
    free(dir);
    model_free(&m);
}

// A rank that fails alone (its device does not exist; its data differ from rank 0's) ends the
// whole job with an error naming the rank, instead of leaving the others waiting.
static void test_one_rank_fails_the_job(void **state) {
    (void)state;
    char *dir = test_tmpdir("mpi-fail");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 300, 1);
    assert_non_null(train);
    char cmd[8192], *out;
    const char *common = "train --epochs 1 --batch 50 --no-self-check --no-progress --quiet";
    snprintf(cmd, sizeof cmd, "%s -np 2 '%s' %s --train '%s' --devices 0=cpu:1 --devices 1=cpu:99x "
             "--out '%s' --name bad 2>&1", HT_MPIEXEC, HT_BINARY, common, train, dir);
    int rc = test_run_shell(cmd, &out);
    if (rc == 0 || !strstr(out, "hetrain: rank 1 (")) fail_msg("exit %d\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s -np 1 '%s' %s --train '%s' --devices cpu:1 --out '%s' --name d : "
             "-np 1 %s '%s' %s --train '%s' --limit 200 --devices cpu:1 --out '%s' --name d 2>&1",
             HT_MPIEXEC, HT_BINARY, common, train, dir, HT_MPI_CONTEXT, HT_BINARY, common, train, dir);
    rc = test_run_shell(cmd, &out);
    if (rc == 0 || !strstr(out, "rank 1's data, batch or initial weights differ from rank 0's"))
        fail_msg("exit %d\n%s", rc, out);
    free(out);
    free(train);
    free(dir);
}

// Two ranks bound to one core (what Open MPI does with one rank per node in namespaces or
// containers) get a warning naming them and what to do, on stderr and in the run log; the
// same job bound to cores of their own (mpirun's default here) gets none.
static void test_shared_core_warns(void **state) {
    (void)state;
    char *dir = test_tmpdir("mpi-cores");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 200, 1);
    assert_non_null(train);
    const char *bind[2] = {"--cpu-set 0 --bind-to core", "--bind-to core"};
    for (int k = 0; k < 2; k++) {
        char cmd[8192], *out;
        snprintf(cmd, sizeof cmd, "%s -np 2 %s '%s' train --train '%s' --epochs 1 --batch 50 "
                 "--devices cpu:1 --no-self-check --no-progress --quiet --out '%s' --name c%d 2>&1",
                 HT_MPIEXEC, bind[k], HT_BINARY, train, dir, k);
        int rc = test_run_shell(cmd, &out);
        if (rc != 0) fail_msg("%s: exit %d\n%s", cmd, rc, out);
        const char *want = "hetrain: warning: ranks 0 and 1 on one host are bound to 1 shared core";
        if (k == 0 && !strstr(out, want)) fail_msg("no warning:\n%s", out);
        if (k == 1 && strstr(out, "warning")) fail_msg("a warning for ranks on their own cores:\n%s", out);
        free(out);
        char path[1200];
        snprintf(path, sizeof path, "%s/c%d.log", dir, k);
        char *log = test_read_file(path, NULL);
        assert_non_null(log);
        assert_true((strstr(log, "warning: ranks 0 and 1") != NULL) == (k == 0));
        free(log);
    }
    free(train);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_equal_one_process),
        cmocka_unit_test(test_two_ranks_bf16),
        cmocka_unit_test(test_two_nodes_over_tcp),
        cmocka_unit_test(test_nodes_own_session_dirs),
        cmocka_unit_test(test_stopped_rank_resumes),
        cmocka_unit_test(test_balanced_ranks_match_one_rank),
        cmocka_unit_test(test_one_rank_fails_the_job),
        cmocka_unit_test(test_shared_core_warns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
