// Runs that go wrong outside hetrain's control, through the CLI as a user meets them: a device
// that is still working when its time is up, a device that stops answering mid-run, a disk
// that fills up. Each ends with a clear message and the exit status it promises, never a crash.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/lib/testutil.h"

// Fashion-MNIST cut to Kaggle CSVs of 4000 training and 1000 test images (the sanitizer
// builds run many times slower: the whole test set would cost them minutes per run).
static test_csv_data data;

static int setup(void **state) {
    (void)state;
    return test_csv_data_init(&data, "robust-data", 4000, 1000);
}

// One epoch, no validation or self-check: the quickest real run.
#define QUICK "train %s --epochs 1 --val-split 0 --no-self-check --balance static"

// Both CPU workers get 2000 samples, which takes one core well over 0.1 s: both are given up
// while their threads are still inside the device. The engine must neither free nor close
// what those threads use (this crashed with SIGSEGV), and the run ends with the error.
static void test_timeout_while_working(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-timeout");
    char args[4096];
    snprintf(args, sizeof args,
             QUICK " --limit 4000 --batch 4000 --devices cpu:1,cpu:1 --device-timeout 0.1 --out '%s'",
             data.args, dir);
    char *out = test_expect_cli(args, 1, "every device has failed");
    assert_non_null(strstr(out, "no answer within 0.1 s"));
    free(out);
    free(dir);
}

// One of two devices stops answering at step 2: the run goes on without it and finishes. The
// timeout leaves room for a slow build (50 samples take ~0.03 s here, ~1 s under TSan).
static void test_hang_mid_run(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-hang");
    char args[4096];
    snprintf(args, sizeof args,
             QUICK " --limit 800 --batch 100 --devices cpu:1,cpu:1 --device-timeout 5 --out '%s' --name h",
             data.args, dir);
    setenv("HETRAIN_FAULT", "hang:cpu:1#2@2", 1);
    char *out = test_expect_cli(args, 0, "step 2: device cpu:1#2 failed and was dropped: no answer within 5 s");
    unsetenv("HETRAIN_FAULT");
    assert_non_null(strstr(out, "test: loss"));
    free(out);
    free(dir);
}

// Runs the CLI under a file size limit of `kib` KiB, so that writes fail as on a full disk
// (EFBIG; SIGXFSZ ignored, as a full disk sends no signal either). Returns the exit status.
static int run_limited(int kib, const char *args, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash -c \"trap '' XFSZ; ulimit -f %d; exec '%s' %s\" 2>&1", kib,
             HT_BINARY, args);
    return test_run_shell(cmd, out);
}

static int count_lines(const char *path) {
    char *text = test_read_file(path, NULL);
    if (!text) return -1;
    int n = 0;
    for (const char *c = text; *c; c++) n += *c == '\n';
    free(text);
    return n;
}

// The log reaches the 3 KiB limit after its header (about 1.5 KiB: the command line, the build,
// the devices) and some twenty epochs of 70 bytes, before the metrics CSV's shorter rows do: the
// run stops with an error that names the file, and the metrics rows written before stay.
// (Before, every write error was ignored and the run exited 0.)
static void test_disk_full_mid_run(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-full");
    char args[4096], path[1200];
    snprintf(args, sizeof args,
             "train %s --limit 50 --batch 50 --epochs 60 --val-split 0 --devices cpu --out '%s' --name d",
             data.args, dir);
    char *out;
    int rc = run_limited(3, args, &out);
    if (rc != 1 || !strstr(out, "d.log: cannot write: File too large"))
        fail_msg("exit %d, output:\n%s", rc, out);
    free(out);
    snprintf(path, sizeof path, "%s/d.metrics.csv", dir);
    int rows = count_lines(path) - 1;
    assert_in_range(rows, 5, 59);
    snprintf(path, sizeof path, "%s/d.predictions.csv", dir);
    assert_int_equal(count_lines(path), -1); // never reached
    // A limit the predictions CSV (1000 rows, ~6 KiB) cannot fit: the error names it.
    snprintf(args, sizeof args,
             "train %s --limit 50 --batch 50 --epochs 1 --val-split 0 --devices cpu --out '%s' --name p",
             data.args, dir);
    rc = run_limited(4, args, &out);
    if (rc != 1 || !strstr(out, "p.predictions.csv: cannot write: File too large"))
        fail_msg("exit %d, output:\n%s", rc, out);
    free(out);
    // --tensorboard's steps/ file (five scalars a step, ~250 bytes) reaches the limit before the
    // log does: the run stops naming it, the metrics rows stay.
    snprintf(args, sizeof args,
             "train %s --limit 50 --batch 50 --epochs 60 --val-split 0 --devices cpu --out '%s' "
             "--name t --tensorboard '%s/tb'",
             data.args, dir, dir);
    rc = run_limited(3, args, &out);
    if (rc != 1 || !strstr(out, "/tb/steps/events.out.tfevents.") || !strstr(out, "File too large"))
        fail_msg("exit %d, output:\n%s", rc, out);
    free(out);
    snprintf(path, sizeof path, "%s/t.metrics.csv", dir);
    assert_in_range(count_lines(path) - 1, 1, 59);
    // An ONNX file (cnn3's, 1.2 MB) that cannot fit: refused naming it, nothing left behind.
    snprintf(path, sizeof path, "%s/d.safetensors", dir);
    snprintf(args, sizeof args,
             "train %s --limit 50 --batch 50 --epochs 1 --val-split 0 --devices cpu --out '%s' "
             "--name w --save '%s' --quiet",
             data.args, dir, path);
    rc = run_limited(1 << 20, args, &out);
    if (rc != 0) fail_msg("exit %d, output:\n%s", rc, out);
    free(out);
    snprintf(args, sizeof args, "export --load '%s' --onnx '%s/m.onnx'", path, dir);
    rc = run_limited(64, args, &out);
    if (rc != 1 || !strstr(out, "m.onnx") || !strstr(out, "File too large"))
        fail_msg("exit %d, output:\n%s", rc, out);
    free(out);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));)
        if (strstr(de->d_name, "m.onnx")) fail_msg("%s/%s left behind", dir, de->d_name);
    closedir(d);
    free(dir);
}

// Starts the CLI with its output on a pipe; returns its pid and the pipe's read end.
static pid_t spawn_cli(char *const argv[], int *out_fd) {
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
    *out_fd = fds[0];
    return pid;
}

// Reads from fd until `want` appears in what was read (or end of output); returns all of it.
static char *read_until(int fd, char *buf, size_t *len, size_t cap, const char *want) {
    for (;;) {
        buf[*len] = 0;
        if (want && strstr(buf, want)) return buf;
        ssize_t got = read(fd, buf + *len, cap - *len - 1);
        if (got <= 0) return buf;
        *len += (size_t)got;
    }
}

// Ctrl-C in the middle of epoch 2 with --save: the weights hold epoch 1 and the steps of
// epoch 2 done before the signal, and the log says so (it said "after 1 epoch").
static void test_interrupt_save_says_what(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-int");
    char save[1200];
    snprintf(save, sizeof save, "%s/w.safetensors", dir);
    char *argv[] = {"hetrain", "train", "--train", data.train, "--test", data.test, "--batch", "50",
                    "--epochs", "3", "--no-self-check",
                    "--val-split", "0", "--devices", "cpu", "--out", dir, "--name", "i",
                    "--save", save, NULL};
    int fd;
    pid_t pid = spawn_cli(argv, &fd);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    read_until(fd, buf, &len, cap, "epoch 1/3");
    usleep(300000); // inside epoch 2's 80 steps
    kill(pid, SIGINT);
    read_until(fd, buf, &len, cap, NULL);
    close(fd);
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 130 || !strstr(buf, "(after 1 epoch and ") ||
        !strstr(buf, " of 80 steps of epoch 2)"))
        fail_msg("status %d, output:\n%s", st, buf);
    free(buf);
    free(dir);
}

// --save to a folder that does not exist, or to a folder: refused before any training.
static void test_outputs_checked_first(void **state) {
    (void)state;
    char *dir = test_tmpdir("robust-out");
    char args[4096];
    snprintf(args, sizeof args, "train %s --limit 100 --epochs 1 --out '%s' --save '%s/no/such/w.safetensors'",
             data.args, dir, dir);
    char *out = test_expect_cli(args, 1, "/no/such/w.safetensors: cannot create a file there");
    assert_null(strstr(out, "epoch 1/1")); // nothing was trained
    free(out);
    snprintf(args, sizeof args, "train %s --limit 100 --epochs 1 --out '%s' --save '%s'", data.args, dir, dir);
    free(test_expect_cli(args, 1, "is a folder, expected a file name"));
    snprintf(args, sizeof args, "predict --load nosuch.safetensors --out '%s/no/p.csv'", dir);
    free(test_expect_cli(args, 1, "/no/p.csv: cannot create a file there"));
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_while_working),
        cmocka_unit_test(test_hang_mid_run),
        cmocka_unit_test(test_disk_full_mid_run),
        cmocka_unit_test(test_interrupt_save_says_what),
        cmocka_unit_test(test_outputs_checked_first),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
