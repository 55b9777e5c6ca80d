// Checkpoints and resume through the CLI. A run killed at any instant (SIGKILL at a step, in
// the middle of writing a checkpoint) or stopped by SIGTERM, then resumed, ends with the same
// bits and the same metrics as a run that never stopped; resumed on other devices it stays on
// the run's trajectory; a resume that would change the run, or a damaged checkpoint, is refused
// with a clear message.
#include <setjmp.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "nn/model.h"
#include "tests/lib/testutil.h"

static test_csv_data data;

// 600 training images (480 after the 20% split: 10 steps of 50 an epoch) and 100 test images,
// and a small network with every kind of state a resume must restore (convolutions, dropout's
// masks, the optimiser's moments), a tenth of the 3-layer preset's work per sample so that the
// suite's many runs stay quick under the sanitizers. The runs' arguments carry its --model.
static const char small_cfg[] = "[net]\ninput = 1x28x28\n"
                                "[conv]\nfilters = 8\nsize = 3\npad = same\nactivation = relu\n"
                                "[maxpool]\nsize = 2\n"
                                "[conv]\nfilters = 16\nsize = 3\npad = same\nactivation = relu\n"
                                "[maxpool]\nsize = 2\n"
                                "[dense]\nunits = 64\nactivation = relu\n[dropout]\nrate = 0.25\n"
                                "[dense]\nunits = 10\n[softmax]\n";
static char small_path[1200];
static int setup(void **state) {
    (void)state;
    if (test_csv_data_init(&data, "resume", 600, 100) < 0) return -1;
    char *cfg = test_write_file(data.dir, "small.cfg", small_cfg, sizeof small_cfg - 1);
    if (!cfg) return -1;
    snprintf(small_path, sizeof small_path, "%s", cfg);
    free(cfg);
    size_t n = strlen(data.args);
    int w = snprintf(data.args + n, sizeof data.args - n, " --model '%s'", small_path);
    return w > 0 && (size_t)w < sizeof data.args - n ? 0 : -1;
}

// What defines the run, and where it runs (given again on resume).
#define RUN "train %s --epochs 3 --batch 50 --val-split 0.2"
#define WHERE "--devices cpu:1,cpu:1@2 --balance static --conv-algo direct --no-self-check --no-progress --quiet"

// The metrics CSV's columns that do not depend on timing (epoch, accuracy, loss, val_*).
static char *det_columns(const char *path) {
    char *text = test_read_file(path, NULL);
    if (!text) fail_msg("%s: missing", path);
    char *out = malloc(strlen(text) + 1), *o = out;
    for (char *line = text; *line;) {
        size_t n = strcspn(line, "\n");
        int commas = 0;
        for (size_t i = 0; i < n && commas < 5; i++) {
            if (line[i] == ',') commas++;
            if (commas < 5) *o++ = line[i];
        }
        *o++ = '\n';
        line += n + (line[n] == '\n');
    }
    *o = 0;
    free(text);
    return out;
}

static void expect_same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
    if (!x || !y) fail_msg("missing %s or %s", a, b);
    if (na != nb || memcmp(x, y, na)) fail_msg("%s and %s differ", a, b);
    free(x);
    free(y);
}

// The exit status the shell reports for a process killed by SIGKILL (or the checkpoint
// writer's test hook, which exits as if it were).
#define KILLED (128 + SIGKILL)

// Runs hetrain with args under the fault plan `faults` (NULL: none); returns its output.
static int run(const char *faults, const char *args, char **out) {
    if (faults) setenv("HETRAIN_FAULT", faults, 1);
    int rc = test_run_cli(args, out);
    unsetenv("HETRAIN_FAULT");
    return rc;
}

// The uninterrupted reference run, once.
static void reference(void) {
    static int done;
    if (done) return;
    char args[8192], *out;
    snprintf(args, sizeof args, RUN " " WHERE " --out '%s' --name ref --save '%s/ref.safetensors'",
             data.args, data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("reference run failed:\n%s", out);
    free(out);
    done = 1;
}

// The metrics CSV at b has a's deterministic columns, and (lr_rows > 0) a's lr column in its
// first lr_rows rows.
static void expect_same_metrics(const char *a, const char *b, int lr_rows) {
    char *x = det_columns(a), *y = det_columns(b);
    if (strcmp(x, y)) fail_msg("metrics of %s differ:\n%s\nvs reference %s\n%s", b, y, a, x);
    free(x);
    free(y);
    for (int ep = 0; ep < lr_rows; ep++)
        assert_true(test_metrics_value(b, ep, "lr") == test_metrics_value(a, ep, "lr"));
}

// Resumes run `name` until it completes and checks it against the reference: the same final
// weights, bit for bit, and the same metrics.
static void resume_and_compare(const char *name) {
    char args[8192], *out;
    snprintf(args, sizeof args, "train --resume '%s/%s' " WHERE " --save '%s/%s.safetensors'", data.dir,
             name, data.dir, name);
    int rc = run(NULL, args, &out);
    if (rc != 0) fail_msg("resume of %s: exit %d\n%s", name, rc, out);
    free(out);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/%s.log", data.dir, name);
    char *log = test_read_file(a, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "resumed from"));
    free(log);
    snprintf(a, sizeof a, "%s/ref.safetensors", data.dir);
    snprintf(b, sizeof b, "%s/%s.safetensors", data.dir, name);
    expect_same_file(a, b);
    snprintf(a, sizeof a, "%s/ref.metrics.csv", data.dir);
    snprintf(b, sizeof b, "%s/%s.metrics.csv", data.dir, name);
    expect_same_metrics(a, b, 0);
}

// SIGKILL at several steps (mid-epoch, the first step after an epoch's checkpoint, a later
// epoch), with checkpoints every 3 steps or only at epochs' ends: each resumes to the
// reference's bits.
static void test_kill_and_resume(void **state) {
    (void)state;
    reference();
    const struct {
        const char *name, *fault, *every;
    } cases[] = {
        {"k4", "kill:cpu:1@4", " --checkpoint-every 3"},
        {"k11", "kill:cpu:1@11", " --checkpoint-every 3"},
        {"k17", "kill:cpu:1@17", ""},
        {"k23", "kill:cpu:1#2@23", " --checkpoint-every 7"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[8192], *out;
        snprintf(args, sizeof args, RUN " " WHERE "%s --out '%s' --name %s", data.args,
                 cases[k].every, data.dir, cases[k].name);
        int rc = run(cases[k].fault, args, &out);
        if (rc != KILLED) fail_msg("%s: expected the run to be killed, exit %d\n%s", cases[k].name, rc, out);
        free(out);
        resume_and_compare(cases[k].name);
    }
}

// Killed while writing a checkpoint: the one before stays valid, and the run resumes from it.
static void test_kill_while_writing_checkpoint(void **state) {
    (void)state;
    reference();
    char args[8192], *out;
    snprintf(args, sizeof args, RUN " " WHERE " --checkpoint-every 3 --out '%s' --name kw",
             data.args, data.dir);
    assert_int_equal(run("kill:cpu:1@5", args, &out), KILLED); // a checkpoint of step 3 exists
    free(out);
    // Resumed, it dies halfway through writing its first checkpoint (step 6).
    snprintf(args, sizeof args, "train --resume '%s/kw' " WHERE, data.dir);
    setenv("HETRAIN_CKPT_DIE_AFTER", "4096", 1);
    int rc = run(NULL, args, &out);
    unsetenv("HETRAIN_CKPT_DIE_AFTER");
    if (rc != KILLED) fail_msg("expected death while writing, exit %d\n%s", rc, out);
    free(out);
    resume_and_compare("kw");
}

// SIGTERM (as from timeout or a batch scheduler) stops after the step with a checkpoint and
// exit status 143; the run resumes from it to the end.
static void test_sigterm_writes_checkpoint(void **state) {
    (void)state;
    char out_dir[1200];
    snprintf(out_dir, sizeof out_dir, "%s/term", data.dir);
    char *argv[] = {"hetrain", "train", "--train", data.train, "--limit", "100", "--epochs", "60",
                    "--batch", "50", "--val-split", "0", "--devices", "cpu:1", "--no-self-check",
                    "--no-progress", "--out", out_dir, "--name", "t", NULL};
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execv(HT_BINARY, argv);
        _exit(127);
    }
    close(fds[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    buf[0] = 0;
    while (!strstr(buf, "epoch 1/60")) {
        ssize_t got = read(fds[0], buf + len, cap - len - 1);
        if (got <= 0) break;
        len += (size_t)got;
        buf[len] = 0;
    }
    kill(pid, SIGTERM);
    for (ssize_t got; (got = read(fds[0], buf + len, cap - len - 1)) > 0;) len += (size_t)got;
    buf[len] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 143 || !strstr(buf, "checkpoint: "))
        fail_msg("status %d, output:\n%s", st, buf);
    free(buf);
    char args[2048], *out;
    snprintf(args, sizeof args, "train --resume '%s/t.ckpt' --devices cpu:1 --no-self-check "
             "--no-progress --quiet", out_dir);
    int rc = run(NULL, args, &out);
    if (rc != 0) fail_msg("exit %d\n%s", rc, out);
    free(out);
    char path[1300];
    snprintf(path, sizeof path, "%s/t.metrics.csv", out_dir);
    assert_int_equal((int)test_metrics_value(path, -1, "epoch"), 59);
}

// Resumed on other devices, a run continues the same trajectory: its final weights match the
// uninterrupted run's within the tolerance of runs on different devices (testutil.h).
static void test_resume_on_other_devices(void **state) {
    (void)state;
    const char *mix = test_have_opencl("resuming on cpu:1,cpu:1 instead") ? "cpu:1,cl:0.0" : "cpu:1,cpu:1";
    char args[8192], *out;
    const char *common = "--limit 250 --epochs 1 --batch 50 --val-split 0 --lr 0.01 "
                         "--no-self-check --no-progress --quiet --balance static";
    snprintf(args, sizeof args, "train %s %s --devices cpu:1 --out '%s' --name od0 --save '%s/od0.safetensors'",
             data.args, common, data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("%s", out);
    free(out);
    snprintf(args, sizeof args, "train %s %s --devices cpu:1 --checkpoint-every 1 --out '%s' --name od1",
             data.args, common, data.dir);
    assert_int_equal(run("kill:cpu:1@4", args, &out), KILLED);
    free(out);
    snprintf(args, sizeof args, "train --resume '%s/od1' --devices %s --balance static "
             "--no-self-check --no-progress --save '%s/od1.safetensors'", data.dir, mix, data.dir);
    int rc = run(NULL, args, &out);
    if (rc != 0 || !strstr(out, "other devices")) fail_msg("exit %d\n%s", rc, out);
    free(out);
    ht_error e;
    model m;
    if (model_init(&m, small_path, &e) < 0) fail_msg("%s", e.msg);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 1);
    char p0[1200], p1[1200];
    snprintf(p0, sizeof p0, "%s/od0.safetensors", data.dir);
    snprintf(p1, sizeof p1, "%s/od1.safetensors", data.dir);
    float *a = test_load_params(&m, p0), *b = test_load_params(&m, p1);
    assert_true(check_updates(&m, b, a, init, TOL_RUN_OUTPUT, TOL_RUN_OTHER,
                              "weights after 5 steps, resumed at step 4 on other devices"));
    free(a);
    free(b);
    free(init);
    model_free(&m);
}

// A resume that would change the run is refused, naming the option; a damaged, foreign or
// missing checkpoint is a one-line error; nothing is written.
static void test_resume_refusals(void **state) {
    (void)state;
    reference(); // its checkpoint: data.dir/ref.ckpt
    const char *changes[][2] = {
        {"--batch 20", "--batch"},        {"--lr 0.5", "--lr"},
        {"--seed 5", "--seed"},           {"--epochs 9", "--epochs"},
        {"--model cnn2", "--model"},      {"--limit 100", "--limit"},
        {"--name other", "--name"},       {"--val-split 0.5", "--val-split"},
        {"--precision bf16", "--precision"},
    };
    for (size_t k = 0; k < sizeof changes / sizeof changes[0]; k++) {
        char args[2048];
        snprintf(args, sizeof args, "train --resume '%s/ref' %s " WHERE, data.dir, changes[k][0]);
        char *out = test_expect_cli(args, 1, changes[k][1]);
        assert_non_null(strstr(out, "differs from the run being resumed"));
        free(out);
    }
    // Damaged: the first half of the checkpoint.
    char src[1200], path[1200], args[2048];
    snprintf(src, sizeof src, "%s/ref.ckpt", data.dir);
    size_t n;
    char *bytes = test_read_file(src, &n);
    assert_non_null(bytes);
    free(test_write_file(data.dir, "half.ckpt", bytes, n / 2));
    free(bytes);
    snprintf(path, sizeof path, "%s/half.ckpt", data.dir);
    snprintf(args, sizeof args, "train --resume '%s' " WHERE, path);
    free(test_expect_cli(args, 1, "half.ckpt"));
    // Foreign: a weights file is not a checkpoint.
    snprintf(src, sizeof src, "%s/ref.safetensors", data.dir);
    bytes = test_read_file(src, &n);
    free(test_write_file(data.dir, "weights.ckpt", bytes, n));
    free(bytes);
    snprintf(args, sizeof args, "train --resume '%s/weights.ckpt' " WHERE, data.dir);
    free(test_expect_cli(args, 1, "weights.ckpt"));
    snprintf(args, sizeof args, "train --resume '%s/none' " WHERE, data.dir);
    free(test_expect_cli(args, 1, "none.ckpt"));
}

// A full disk (a 1 MiB file size limit: the log and CSVs fit, a 2 MB checkpoint does not): a
// default checkpoint that fails is a warning and the run completes; one asked for with
// --checkpoint-every stops the run with an error naming the file.
static void test_checkpoint_disk_full(void **state) {
    (void)state;
    const char *cases[][2] = {{"", "warning: "}, {" --checkpoint-every 2", "checkpoint (asked for"}};
    for (int k = 0; k < 2; k++) {
        char cmd[8192], *out;
        snprintf(cmd, sizeof cmd,
                 "bash -c \"trap '' XFSZ; ulimit -f 1024; exec '%s' train --train '%s' --test '%s' "
                 "--epochs 1 --batch 50 --val-split 0 --limit 200 --devices cpu:1 --no-self-check "
                 "--no-progress --out '%s' --name full%d%s\" 2>&1", // the 3-layer preset: its
                 HT_BINARY, data.train, data.test, data.dir, k, cases[k][0]); // checkpoint > 1 MiB
        int rc = test_run_shell(cmd, &out);
        if (rc != (k == 0 ? 0 : 1) || !strstr(out, cases[k][1]) || !strstr(out, ".ckpt"))
            fail_msg("case %d: exit %d\n%s", k, rc, out);
        free(out);
    }
}

// A learning-rate schedule, weight decay and --optimizer are part of the run: killed mid-epoch
// and resumed, a cosine-scheduled Adam run (--optimizer) with L2 weight decay ends with the uninterrupted run's bits and
// metrics, lr column included; its lr column is the schedule's rate of each epoch's last step;
// a resume that names another schedule, weight decay or optimizer is refused.
#define SCHED "--lr-schedule cosine --weight-decay 0.01 --optimizer adam"
static void test_schedule_resume(void **state) {
    (void)state;
    char args[8192], *out;
    snprintf(args, sizeof args, RUN " " WHERE " " SCHED " --out '%s' --name sref --save '%s/sref.safetensors'",
             data.args, data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("scheduled reference run failed:\n%s", out);
    free(out);
    // 3 epochs of 10 steps: epoch e's last step is s = 10e + 9 of T = 30, after s updates;
    // lr_t = 0.001 * 0.5 * (1 + cos(pi*s/T)) (Keras's Adam: lr 0.001, no decay; the rate
    // before Adam's bias correction).
    char path[1200];
    snprintf(path, sizeof path, "%s/sref.metrics.csv", data.dir);
    for (int ep = 0; ep < 3; ep++) {
        int st = 10 * ep + 9;
        double want = 0.001 * 0.5 * (1 + cos(M_PI * st / 30.0));
        double got = test_metrics_value(path, ep, "lr");
        if (!(fabs(got - want) <= 1e-6 * want)) // the rate is a float: 2^-24 relative
            fail_msg("epoch %d: lr column %.9g, want %.9g", ep, got, want);
    }
    snprintf(args, sizeof args, RUN " " WHERE " " SCHED " --checkpoint-every 4 --out '%s' --name sk",
             data.args, data.dir);
    int rc = run("kill:cpu:1@14", args, &out);
    if (rc != KILLED) fail_msg("expected the run to be killed, exit %d\n%s", rc, out);
    free(out);
    // Resumed without the options: the checkpoint keeps them.
    snprintf(args, sizeof args, "train --resume '%s/sk' " WHERE " --save '%s/sk.safetensors'",
             data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("resume: %s", out);
    free(out);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/sref.safetensors", data.dir);
    snprintf(b, sizeof b, "%s/sk.safetensors", data.dir);
    expect_same_file(a, b);
    snprintf(b, sizeof b, "%s/sk.metrics.csv", data.dir);
    expect_same_metrics(path, b, 3);
    // Another schedule or weight decay on resume is refused, in one line.
    const char *changes[][2] = {
        {"--lr-schedule exp:0.5", "--lr-schedule"},
        {"--lr-schedule none", "--lr-schedule"},
        {"--weight-decay 0.02", "--weight-decay"},
        {"--weight-decay-mode decoupled", "--weight-decay-mode"},
        {"--optimizer sgd", "--optimizer"},
    };
    for (size_t k = 0; k < sizeof changes / sizeof changes[0]; k++) {
        snprintf(args, sizeof args, "train --resume '%s/sref' %s " WHERE, data.dir, changes[k][0]);
        char *msg = test_expect_cli(args, 1, changes[k][1]);
        if (!strstr(msg, "differs from the run being resumed") || strchr(msg, '\n') != strrchr(msg, '\n'))
            fail_msg("%s: expected a one-line refusal, got:\n%s", changes[k][0], msg);
        free(msg);
    }
}

// Keras's callbacks are part of the run: early stopping on val_accuracy (which cannot improve
// by --min-delta 0.5 after its first epoch: the run stops after epoch 3 of 6, back at epoch 1's
// weights), ReduceLROnPlateau and --save-best; killed in epoch 2 and resumed with --resume
// alone, it stops where the unbroken run stopped with its bits, and its --save, its
// --save-best file and the restored weights are the same file.
#define WATCH "--early-stopping 2 --monitor val_accuracy --min-delta 0.5 --restore-best-weights " \
              "--reduce-lr-on-plateau 0.5,1"
static void test_callbacks_resume(void **state) {
    (void)state;
    char args[8192], *out;
    snprintf(args, sizeof args, "train %s --epochs 6 --batch 50 --val-split 0.2 " WHERE " " WATCH
             " --out '%s' --name wref --save '%s/wref.safetensors' --save-best '%s/wref.best.safetensors'",
             data.args, data.dir, data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("reference run failed:\n%s", out);
    free(out);
    char path[1200], a[1200], b[1200];
    snprintf(path, sizeof path, "%s/wref.metrics.csv", data.dir);
    char *csv = test_read_file(path, NULL);
    assert_non_null(csv);
    int rows = 0;
    for (char *p = csv; *p; p++) rows += *p == '\n';
    assert_int_equal(rows, 1 + 3); // the header and epochs 1..3
    test_expect_frags(csv, 0, "early stop: val_accuracy has not improved for 2 epochs", NULL);
    free(csv);
    snprintf(a, sizeof a, "%s/wref.safetensors", data.dir);
    snprintf(b, sizeof b, "%s/wref.best.safetensors", data.dir);
    expect_same_file(a, b); // restored to the best epoch, which --save-best wrote
    snprintf(args, sizeof args, "train %s --epochs 6 --batch 50 --val-split 0.2 " WHERE " " WATCH
             " --checkpoint-every 4 --out '%s' --name wk --save-best '%s/wk.best.safetensors'",
             data.args, data.dir, data.dir);
    int rc = run("kill:cpu:1@14", args, &out);
    if (rc != KILLED) fail_msg("expected the run to be killed, exit %d\n%s", rc, out);
    free(out);
    snprintf(args, sizeof args, "train --resume '%s/wk' " WHERE " --save '%s/wk.safetensors'",
             data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("resume: %s", out);
    free(out);
    snprintf(b, sizeof b, "%s/wk.safetensors", data.dir);
    expect_same_file(a, b);
    snprintf(b, sizeof b, "%s/wk.best.safetensors", data.dir);
    expect_same_file(a, b);
    snprintf(b, sizeof b, "%s/wk.metrics.csv", data.dir);
    expect_same_metrics(path, b, 3);
    // A finished run resumed does nothing more than finish its command: no epoch more, and
    // weights saved elsewhere are the same.
    snprintf(args, sizeof args, "train --resume '%s/wref' " WHERE " --save '%s/again.safetensors'",
             data.dir, data.dir);
    if (run(NULL, args, &out) != 0) fail_msg("resume of a finished run: %s", out);
    free(out);
    snprintf(b, sizeof b, "%s/again.safetensors", data.dir);
    expect_same_file(a, b);
    csv = test_read_file(path, NULL);
    rows = 0;
    for (char *p = csv; *p; p++) rows += *p == '\n';
    assert_int_equal(rows, 4);
    free(csv);
}

// The profile CSV's columns that do not depend on timing: device, layer, kind, direction.
static char *profile_rows(const char *path) {
    char *text = test_read_file(path, NULL);
    if (!text) fail_msg("%s: missing", path);
    char *out = malloc(strlen(text) + 1), *o = out;
    for (char *line = text; *line;) {
        size_t n = strcspn(line, "\n");
        int commas = 0;
        for (size_t i = 0; i < n && commas < 4; i++) {
            if (line[i] == ',') commas++;
            if (commas < 4) *o++ = line[i];
        }
        *o++ = '\n';
        line += n + (line[n] == '\n');
    }
    *o = 0;
    free(text);
    return out;
}

// A bare --resume finishes the command it resumes: killed in epoch 2, a run that asked for
// --save, --profile and --checkpoint-every on its devices is resumed with nothing but --resume
// and writes every file the run that never stopped writes, where the command said: the same
// weights and predictions byte for byte, the same metrics and profile rows. A resume that gives
// --save anew writes there instead, notes it in the log, and leaves the old path alone.
static void test_bare_resume_finishes_command(void **state) {
    (void)state;
    char args[16384], *out, a[1200], b[1200];
    const char *cmd = RUN " " WHERE " --checkpoint-every 3 --profile";
    snprintf(args, sizeof args, "%s --out '%s' --name bref --save '%s/bref.st'", cmd, data.dir,
             data.dir);
    char full[8192];
    snprintf(full, sizeof full, args, data.args);
    if (run(NULL, full, &out) != 0) fail_msg("reference run failed:\n%s", out);
    free(out);
    snprintf(args, sizeof args, "%s --out '%s' --name bare --save '%s/bare.st'", cmd, data.dir,
             data.dir);
    snprintf(full, sizeof full, args, data.args);
    int rc = run("kill:cpu:1@14", full, &out); // step 4 of epoch 2, after the checkpoint of step 12
    if (rc != KILLED) fail_msg("expected the run to be killed, exit %d\n%s", rc, out);
    free(out);
    snprintf(b, sizeof b, "%s/bare.st", data.dir);
    assert_null(test_read_file(b, NULL)); // not written by the killed run
    snprintf(args, sizeof args, "train --resume '%s/bare'", data.dir);
    if ((rc = run(NULL, args, &out)) != 0) fail_msg("bare resume: exit %d\n%s", rc, out);
    free(out);
    const char *same[] = {".st", ".predictions.csv"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/bref%s", data.dir, same[k]);
        snprintf(b, sizeof b, "%s/bare%s", data.dir, same[k]);
        expect_same_file(a, b);
    }
    snprintf(a, sizeof a, "%s/bref.metrics.csv", data.dir);
    snprintf(b, sizeof b, "%s/bare.metrics.csv", data.dir);
    expect_same_metrics(a, b, 0);
    snprintf(a, sizeof a, "%s/bref.profile.csv", data.dir);
    snprintf(b, sizeof b, "%s/bare.profile.csv", data.dir);
    char *x = profile_rows(a), *y = profile_rows(b);
    if (strcmp(x, y)) fail_msg("profile rows differ:\n%s\nvs reference\n%s", y, x);
    free(x);
    free(y);
    snprintf(b, sizeof b, "%s/bare.log", data.dir);
    char *log = test_read_file(b, NULL);
    char want[2600];
    snprintf(want, sizeof want, "resume: the run's --devices cpu:1,cpu:1@2 --balance static "
             "--no-self-check --conv-algo direct --save %s/bare.st --checkpoint-every 3 --profile",
             data.dir);
    if (!log || !strstr(log, want)) fail_msg("log lacks \"%s\":\n%s", want, log ? log : "");
    free(log);

    // Given anew, --save goes where the resume says, and the log says so.
    snprintf(full, sizeof full, cmd, data.args);
    snprintf(args, sizeof args, "%s --out '%s' --name moved --save '%s/old.st'", full, data.dir,
             data.dir);
    assert_int_equal(run("kill:cpu:1@14", args, &out), KILLED);
    free(out);
    snprintf(args, sizeof args, "train --resume '%s/moved' --save '%s/new.st'", data.dir, data.dir);
    if ((rc = run(NULL, args, &out)) != 0) fail_msg("resume: exit %d\n%s", rc, out);
    snprintf(want, sizeof want, "resume: --save %s/new.st in place of the run's %s/old.st",
             data.dir, data.dir);
    if (!strstr(out, want)) fail_msg("expected \"%s\" in:\n%s", want, out);
    free(out);
    snprintf(a, sizeof a, "%s/bref.st", data.dir);
    snprintf(b, sizeof b, "%s/new.st", data.dir);
    expect_same_file(a, b);
    snprintf(b, sizeof b, "%s/old.st", data.dir);
    assert_null(test_read_file(b, NULL));
    // The run's --save is never overwritten: resumed once more, the finished run says whose file
    // is in the way.
    snprintf(args, sizeof args, "train --resume '%s/bare'", data.dir);
    free(test_expect_cli(args, 1, "bare.st already exists: it is the --save of the run being resumed"));
}

// A run killed and resumed ends as its uninterrupted twin: `ref` (run as ref_args) and `k` (run
// as k_args under the fault plan `fault`, which kills it; then the bare --resume) leave the same
// weights (NAME.st, bit for bit) and metrics.
static void killed_twin_matches(const char *ref_args, const char *ref, const char *k_args,
                                const char *k, const char *fault) {
    char args[8192], *out;
    if (run(NULL, ref_args, &out) != 0) fail_msg("%s: the reference run failed:\n%s", ref, out);
    free(out);
    int rc = run(fault, k_args, &out);
    if (rc != KILLED) fail_msg("%s: expected the run to be killed, exit %d\n%s", k, rc, out);
    free(out);
    snprintf(args, sizeof args, "train --resume '%s/%s'", data.dir, k);
    if (run(NULL, args, &out) != 0) fail_msg("%s: resume failed:\n%s", k, out);
    free(out);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/%s.st", data.dir, ref);
    snprintf(b, sizeof b, "%s/%s.st", data.dir, k);
    expect_same_file(a, b);
    snprintf(a, sizeof a, "%s/%s.metrics.csv", data.dir, ref);
    snprintf(b, sizeof b, "%s/%s.metrics.csv", data.dir, k);
    expect_same_metrics(a, b, 0);
}

// The run log of run `name` holds every one of the NULL-terminated lines.
static void log_has(const char *name, const char *const *lines) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.log", data.dir, name);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    for (int i = 0; lines[i]; i++)
        if (!strstr(log, lines[i])) fail_msg("%s lacks \"%s\"", path, lines[i]);
    free(log);
}

// A batchnorm network killed mid-epoch and resumed: the moving averages and their update count
// (state, not parameters: no optimiser moments) come back from the checkpoint, and the run ends
// with the bits of the run that never stopped (the saved file holds the statistics too).
static const char bn_cfg[] = "[net]\ninput = 1x28x28\nbn_group = 16\n"
                             "[conv]\nfilters = 8\nsize = 3\npad = same\nbias = 0\n"
                             "[batchnorm]\n[relu]\n[maxpool]\nsize = 2\n"
                             "[dense]\nunits = 32\nbias = 0\n[batchnorm]\nmomentum = 0.9\n"
                             "[relu]\n[dense]\nunits = 10\n[softmax]\n";
static void test_bn_kill_and_resume(void **state) {
    (void)state;
    char *cfg = test_write_file(data.dir, "bn.cfg", bn_cfg, sizeof bn_cfg - 1);
    char ref[8192], k[8192];
    const char *bn_run = "train --train '%s' --test '%s' --model '%s' --epochs 2 --batch 50 "
                         "--val-split 0.2 " WHERE " --out '%s' --name %s --save '%s/%s.st'%s";
    snprintf(ref, sizeof ref, bn_run, data.train, data.test, cfg, data.dir, "bnref", data.dir,
             "bnref", "");
    snprintf(k, sizeof k, bn_run, data.train, data.test, cfg, data.dir, "bnk", data.dir, "bnk",
             " --checkpoint-every 3");
    // Killed at step 4 of epoch 2, after the checkpoint of step 12.
    killed_twin_matches(ref, "bnref", k, "bnk", "kill:cpu:1@14");
    log_has("bnref", (const char *const[]){"batchnorm: statistics over groups of 16", NULL});
    free(cfg);
}

// --precision bf16 (every convolution a GEMM, --conv-algo gemm; bfloat16 in those wide enough:
// conv2's input gradient, the 64-unit dense layer) killed mid-epoch on two CPU devices and
// resumed with the bare --resume: the bits of the run that never stopped.
static void test_bf16_kill_and_resume(void **state) {
    (void)state;
    char ref[8192], k[8192];
    const char *where = "--devices cpu:1,cpu:1@2 --balance static --conv-algo gemm "
                        "--no-self-check --no-progress --quiet";
    snprintf(ref, sizeof ref, RUN " --precision bf16 %s --out '%s' --name b16ref --save '%s/b16ref.st'",
             data.args, where, data.dir, data.dir);
    snprintf(k, sizeof k, RUN " --precision bf16 %s --checkpoint-every 3 --out '%s' --name b16k "
             "--save '%s/b16k.st'", data.args, where, data.dir, data.dir);
    killed_twin_matches(ref, "b16ref", k, "b16k", "kill:cpu:1@11");
    log_has("b16ref", (const char *const[]){"precision: bf16", "gemm bf16", NULL});
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_kill_while_writing_checkpoint),
        cmocka_unit_test(test_sigterm_writes_checkpoint),
        cmocka_unit_test(test_resume_on_other_devices),
        cmocka_unit_test(test_resume_refusals),
        cmocka_unit_test(test_checkpoint_disk_full),
        cmocka_unit_test(test_schedule_resume),
        cmocka_unit_test(test_callbacks_resume),
        cmocka_unit_test(test_bare_resume_finishes_command),
        cmocka_unit_test(test_bn_kill_and_resume),
        cmocka_unit_test(test_bf16_kill_and_resume),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
