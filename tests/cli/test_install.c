// `cmake --install` into a fresh prefix, nothing else copied: the installed binary, run from
// another folder, finds its own kernels (P/share/hetrain/kernels), shows a summary of a preset
// and of an installed example model, lists the devices and trains on a small Kaggle CSV on the
// native CPU and on PoCL; the man page renders without warnings and names every command and
// every option the --help texts list.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/testutil.h"

static char prefix[PATH_MAX], elsewhere[PATH_MAX];
#define CMD_MAX (4 * PATH_MAX + 2600) // a command naming the prefix and the data (test_csv_data)
static test_csv_data data;

// Runs `cmd` under sh in the folder `elsewhere` without $HETRAIN_KERNELS; returns the exit
// status and the output (stdout and stderr) in *out.
static int sh(const char *cmd, char **out) {
    size_t len = strlen(elsewhere) + strlen(cmd) + 64;
    char *full = malloc(len);
    assert_non_null(full);
    snprintf(full, len, "cd '%s' && unset HETRAIN_KERNELS && %s 2>&1", elsewhere, cmd);
    int rc = test_run_shell(full, out);
    free(full);
    return rc;
}

static int setup(void **state) {
    (void)state;
    char *p = test_tmpdir("install-prefix"), *w = test_tmpdir("install-cwd");
    if (!realpath(p, prefix) || !realpath(w, elsewhere)) return -1;
    free(p);
    free(w);
    if (test_csv_data_init(&data, "install-data", 200, 40) < 0) return -1;
    char cmd[CMD_MAX], *out;
    snprintf(cmd, sizeof cmd, "'%s' --install '%s' --prefix '%s'", HT_CMAKE, HT_BUILD_DIR, prefix);
    int rc = sh(cmd, &out);
    if (rc != 0) fprintf(stderr, "%s: exit %d\n%s", cmd, rc, out);
    free(out);
    return rc == 0 ? 0 : -1;
}

// Whether dir/name is a file with the same bytes as the source tree's src_dir/name.
static void expect_copy(const char *src_dir, const char *dir, const char *name) {
    char a[PATH_MAX + 256], b[PATH_MAX + 256];
    snprintf(a, sizeof a, "%s/%s", src_dir, name);
    snprintf(b, sizeof b, "%s/%s", dir, name);
    size_t na, nb;
    char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
    if (!y) fail_msg("%s was not installed", b);
    if (!x || na != nb || memcmp(x, y, na)) fail_msg("%s differs from %s", b, a);
    free(x);
    free(y);
}

// Every file of the source folder `sub` ending in one of the suffixes is in P/dest.
static int expect_folder(const char *sub, const char *dest, const char *suffix1, const char *suffix2) {
    char src[PATH_MAX], dst[PATH_MAX + 64];
    snprintf(src, sizeof src, "%s/%s", HT_SOURCE_DIR, sub);
    snprintf(dst, sizeof dst, "%s/%s", prefix, dest);
    DIR *d = opendir(src);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *ent; (ent = readdir(d));) {
        size_t len = strlen(ent->d_name);
        const char *suf[] = {suffix1, suffix2};
        for (int k = 0; k < 2; k++)
            if (suf[k] && len > strlen(suf[k]) && !strcmp(ent->d_name + len - strlen(suf[k]), suf[k])) {
                expect_copy(src, dst, ent->d_name);
                n++;
            }
    }
    closedir(d);
    return n;
}

static void test_installed_files(void **state) {
    (void)state;
    assert_true(expect_folder("kernels", "share/hetrain/kernels", ".cl", NULL) >= 1);
    assert_true(expect_folder("models", "share/hetrain/models", ".cfg", ".json") >= 2);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/bin/hetrain", prefix);
    assert_int_equal(access(path, X_OK), 0);
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/docs", HT_SOURCE_DIR);
    snprintf(path, sizeof path, "%s/share/man/man1", prefix);
    expect_copy(src, path, "hetrain.1");
}

// The installed binary, from another folder: its kernels are the installed ones, and it
// describes networks, lists devices and trains on the CPU and on PoCL.
static void test_runs_from_prefix(void **state) {
    (void)state;
    char cmd[CMD_MAX], want[PATH_MAX + 128], *out;
    snprintf(cmd, sizeof cmd, "'%s/bin/hetrain' version", prefix);
    assert_int_equal(sh(cmd, &out), 0);
    snprintf(want, sizeof want, "kernels: %s/share/hetrain/kernels\n", prefix);
    if (!strstr(out, want)) fail_msg("expected \"%s\" in:\n%s", want, out);
    free(out);

    snprintf(cmd, sizeof cmd, "'%s/bin/hetrain' summary", prefix);
    if (sh(cmd, &out) != 0 || !strstr(out, "cnn2d_3layer_fullconnected_3layer"))
        fail_msg("%s:\n%s", cmd, out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s/bin/hetrain' summary --model '%s/share/hetrain/models/cnn2.cfg'",
             prefix, prefix);
    if (sh(cmd, &out) != 0 || !strstr(out, "cnn2d_2layer_full_connected_2layer"))
        fail_msg("%s:\n%s", cmd, out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s/bin/hetrain' devices", prefix);
    if (sh(cmd, &out) != 0 || !strstr(out, "cpu")) fail_msg("%s:\n%s", cmd, out);
    free(out);

    const char *specs[] = {"cpu", "cl:0.0"};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !test_have_opencl("the installed binary not run on PoCL")) break;
        snprintf(cmd, sizeof cmd,
                 "'%s/bin/hetrain' train %s --epochs 1 --batch 50 --val-split 0 --devices %s "
                 "--lr-schedule cosine --no-progress --out out --name run%d",
                 prefix, data.args, specs[k], k);
        if (sh(cmd, &out) != 0 || !strstr(out, "epoch 1/1")) fail_msg("%s:\n%s", cmd, out);
        free(out);
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/out/run%d.metrics.csv", elsewhere, k);
        assert_int_equal((int)test_metrics_value(path, 0, "epoch"), 0);
        snprintf(path, sizeof path, "%s/out/run%d.predictions.csv", elsewhere, k);
        assert_int_equal(access(path, R_OK), 0);
    }
}

// The man page source with roff's escapes taken out of option names: "\-" is "-", font
// changes and "\c" go.
static char *man_text(void) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/share/man/man1/hetrain.1", prefix);
    char *src = test_read_file(path, NULL);
    if (!src) fail_msg("%s: missing", path);
    char *o = src;
    for (const char *p = src; *p;) {
        if (p[0] == '\\' && p[1] == '-') {
            *o++ = '-';
            p += 2;
        } else if (p[0] == '\\' && p[1] == 'f' && p[2]) {
            p += 3;
        } else if (p[0] == '\\' && p[1] == 'c') {
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return src;
}

// Whether `word` occurs in text not followed by another letter, digit or '-' (so "--lr" is not
// found in "--lr-schedule" alone).
static int has_word(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = text; (p = strstr(p, word)); p++) {
        char next = p[n];
        if (!isalnum((unsigned char)next) && next != '-') return 1;
    }
    return 0;
}

// The options one --help text names: "--word" and short "-x" ones.
static int help_options(const char *help, char opts[][48], int max) {
    int n = 0;
    for (const char *p = help; *p && n < max; p++) {
        if (*p != '-' || (p > help && (isalnum((unsigned char)p[-1]) || p[-1] == '-'))) continue;
        const char *q = p + 1 + (p[1] == '-');
        size_t len = 0;
        while (isalnum((unsigned char)q[len]) || q[len] == '-') len++;
        int is_long = p[1] == '-' && len > 0 && isalpha((unsigned char)q[0]);
        int is_short = p[1] != '-' && len == 1 && isalpha((unsigned char)q[0]);
        if (!is_long && !is_short) continue;
        size_t total = (size_t)(q - p) + len;
        if (total >= 48) continue;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= strlen(opts[i]) == total && !strncmp(opts[i], p, total);
        if (!seen) snprintf(opts[n++], 48, "%.*s", (int)total, p);
        p += total - 1;
    }
    return n;
}

static void test_man_page(void **state) {
    (void)state;
    char cmd[CMD_MAX], *out;
    snprintf(cmd, sizeof cmd, "groff -man -ww -z '%s/share/man/man1/hetrain.1'", prefix);
    int rc = sh(cmd, &out);
    if (rc != 0 || *out)
        fail_msg("%s: exit %d (groff is Debian's groff-base; tools/setup.sh installs it)\n%s", cmd,
                 rc, out);
    free(out);
    // `man hetrain` finds it under the prefix's man folder and formats it.
    snprintf(cmd, sizeof cmd, "man -M '%s/share/man' -w hetrain", prefix);
    if (sh(cmd, &out) != 0 || !strstr(out, "man1/hetrain.1")) fail_msg("%s:\n%s", cmd, out);
    free(out);
    snprintf(cmd, sizeof cmd, "MANWIDTH=80 man -M '%s/share/man' hetrain | grep -c ''", prefix);
    if (sh(cmd, &out) != 0 || atoi(out) < 100) fail_msg("%s: %s", cmd, out);
    free(out);

    char *man = man_text();
    // Every command of the main --help, and every option of every --help text.
    snprintf(cmd, sizeof cmd, "'%s/bin/hetrain' --help", prefix);
    assert_int_equal(sh(cmd, &out), 0);
    const char *cmds = strstr(out, "commands:\n");
    assert_non_null(cmds);
    int n_cmds = 0;
    for (const char *line = cmds + 10; line[0] == ' ' && line[1] == ' ' && line[2] != ' ';) {
        char name[32], want[48];
        if (sscanf(line, " %31s", name) != 1) break;
        snprintf(want, sizeof want, "\n.B %s\n", name);
        if (!strstr(man, want)) fail_msg("the man page has no entry for the command %s", name);
        n_cmds++;
        line = strchr(line, '\n');
        if (!line) break;
        line++;
    }
    assert_true(n_cmds >= 8);
    free(out);
    const char *helps[] = {"", "train", "predict", "summary", "devices", "tune", "compare", "plot"};
    int checked = 0;
    for (size_t k = 0; k < sizeof helps / sizeof helps[0]; k++) {
        snprintf(cmd, sizeof cmd, "'%s/bin/hetrain' %s --help", prefix, helps[k]);
        assert_int_equal(sh(cmd, &out), 0);
        char opts[128][48];
        int n = help_options(out, opts, 128);
        for (int i = 0; i < n; i++)
            if (!has_word(man, opts[i]))
                fail_msg("the man page does not name %s, which 'hetrain %s --help' lists", opts[i],
                         helps[k]);
        checked += n;
        free(out);
    }
    assert_true(checked >= 40);
    free(man);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_installed_files),
        cmocka_unit_test(test_runs_from_prefix),
        cmocka_unit_test(test_man_page),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
