// 'hetrain plot': real PNGs from the fixtures when gnuplot is installed (skipped otherwise), and
// with stand-in gnuplots on a private PATH: none at all, one that fails, one that writes nothing.
// Every case checks that no partial image or temporary file is left behind.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "app/report/plot.h"
#include "tests/lib/testutil.h"

#define EXIT_USAGE 2
#define FIX HT_SOURCE_DIR "/tests/fixtures/"
#define HETRAIN FIX "hetrain.metrics.csv"
#define TORCH FIX "torch_reference.metrics.csv"
#define KERAS_OLD FIX "keras_old.csv"
#define KERAS_NEW FIX "keras_new.csv"

#define expect_cli test_expect_cli

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)))
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) n++;
    closedir(d);
    return n;
}

static int is_png(const char *dir, const char *name) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len = 0;
    char *b = test_read_file(path, &len);
    int ok = b && len > 1000 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8);
    free(b);
    return ok;
}

// Each test gets its own TMPDIR (to see that the script folder goes away) and output folder.
typedef struct fixture {
    char *tmp, *outdir, *old_path;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->tmp = test_tmpdir("plot-tmp");
    f->outdir = test_tmpdir("plot-out");
    const char *p = getenv("PATH");
    f->old_path = strdup(p ? p : "/usr/bin:/bin");
    setenv("TMPDIR", f->tmp, 1);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    setenv("PATH", f->old_path, 1);
    unsetenv("TMPDIR");
    free(f->tmp);
    free(f->outdir);
    free(f->old_path);
    free(f);
    return 0;
}

static int have_gnuplot(void) {
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

#define NEED_GNUPLOT()                                        \
    do {                                                      \
        if (!have_gnuplot()) {                                \
            printf("SKIPPED: gnuplot not installed\n");       \
            skip();                                           \
        }                                                     \
    } while (0)

static void test_curves_and_devices(void **state) {
    fixture *f = *state;
    NEED_GNUPLOT();
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' '%s' '%s' '%s' -o '%s/curves.png' --title \"it's a test\"",
             HETRAIN, TORCH, KERAS_OLD, KERAS_NEW, f->outdir);
    char *out = expect_cli(args, 0, "curves-devices.png");
    assert_non_null(strstr(out, "/curves.png\n"));
    free(out);
    assert_true(is_png(f->outdir, "curves.png"));
    assert_true(is_png(f->outdir, "curves-devices.png"));
    assert_int_equal(count_files(f->outdir), 2); // no temporary names left
    assert_int_equal(count_files(f->tmp), 0);    // script folder removed
    // Again over the existing files: replaced, still exactly two.
    snprintf(args, sizeof args, "plot '%s' --out '%s/curves.png'", HETRAIN, f->outdir);
    free(expect_cli(args, 0, "wrote"));
    assert_true(is_png(f->outdir, "curves.png"));
    assert_int_equal(count_files(f->outdir), 2);
}

// No device columns: no -devices image. Also an output name without .png.
static void test_no_devices(void **state) {
    fixture *f = *state;
    NEED_GNUPLOT();
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' '%s' -o '%s/chart'", KERAS_OLD, KERAS_NEW, f->outdir);
    char *out = expect_cli(args, 0, "wrote");
    assert_null(strstr(out, "devices"));
    free(out);
    assert_true(is_png(f->outdir, "chart"));
    assert_int_equal(count_files(f->outdir), 1);
}

// Runs without validation data (and one without loss) still draw: empty panels say so.
static void test_sparse_runs(void **state) {
    fixture *f = *state;
    NEED_GNUPLOT();
    const char *noval = "epoch,accuracy,loss,val_accuracy,val_loss,time_s\n0,0.5,1.2,,,3\n1,0.6,0.9,,,3\n";
    const char *acconly = "epoch,acc\n0,0.4\n1,0.55\n2,0.62\n";
    char *p1 = test_write_file(f->tmp, "noval.csv", noval, strlen(noval));
    char *p2 = test_write_file(f->tmp, "acconly.csv", acconly, strlen(acconly));
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' '%s' -o '%s/sparse.png'", p1, p2, f->outdir);
    free(expect_cli(args, 0, "wrote"));
    assert_true(is_png(f->outdir, "sparse.png"));
    assert_int_equal(count_files(f->outdir), 1);
    free(p1);
    free(p2);
}

// PATH is an empty folder: the one-line error, exit 1, nothing written.
static void test_missing_gnuplot(void **state) {
    fixture *f = *state;
    char *empty = test_tmpdir("plot-emptypath");
    setenv("PATH", empty, 1); // the shell test_run_cli starts, and hetrain, see only this
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' -o '%s/curves.png'", HETRAIN, f->outdir);
    char *out = expect_cli(args, 1, "hetrain: plot needs gnuplot (Debian package gnuplot-nox): "
                                    "not found on PATH\n");
    assert_int_equal(strchr(out, '\n')[1], 0); // one line
    free(out);
    setenv("PATH", f->old_path, 1);
    assert_int_equal(count_files(f->outdir), 0);
    // The library call says the same.
    setenv("PATH", empty, 1);
    char *paths[] = {HETRAIN};
    char outpng[2048];
    snprintf(outpng, sizeof outpng, "%s/lib.png", f->outdir);
    plot_opts o = {.n = 1, .paths = paths, .out = outpng};
    ht_error e;
    int rc = plot_run(NULL, &o, &e);
    setenv("PATH", f->old_path, 1);
    assert_int_equal(rc, -1);
    assert_string_equal(e.msg, "plot needs gnuplot (Debian package gnuplot-nox): not found on PATH");
    assert_int_equal(count_files(f->outdir), 0);
    free(empty);
}

// A stand-in gnuplot (a shell script) on a private PATH.
static char *fake_gnuplot(const char *body) {
    char *dir = test_tmpdir("plot-fakebin");
    char text[512];
    snprintf(text, sizeof text, "#!/bin/sh\n%s\n", body);
    char *p = test_write_file(dir, "gnuplot", text, strlen(text));
    chmod(p, 0755);
    free(p);
    return dir;
}

// gnuplot fails: its error line in the message, the old image untouched, no temporaries.
static void test_gnuplot_fails(void **state) {
    fixture *f = *state;
    char *bin = fake_gnuplot("echo >&2\necho '        plot $run0 using 1:2' >&2\n"
                             "echo \"\\\"$1\\\" line 3: all points y value undefined!\" >&2\nexit 1");
    char *old = test_write_file(f->outdir, "curves.png", "old", 3);
    setenv("PATH", bin, 1);
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' -o '%s'", HETRAIN, old);
    char *out = expect_cli(args, 1, "curves.png: gnuplot failed (exit status 1): \"");
    setenv("PATH", f->old_path, 1);
    assert_non_null(strstr(out, ".gp\" line 3: all points y value undefined!"));
    free(out);
    size_t len;
    char *kept = test_read_file(old, &len);
    assert_true(kept && len == 3 && !memcmp(kept, "old", 3));
    free(kept);
    assert_int_equal(count_files(f->outdir), 1);
    assert_int_equal(count_files(f->tmp), 0);
    free(old);
    free(bin);
}

// gnuplot "succeeds" without drawing: not taken for an image.
static void test_gnuplot_writes_nothing(void **state) {
    fixture *f = *state;
    char *bin = fake_gnuplot("exit 0");
    setenv("PATH", bin, 1);
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' -o '%s/x.png'", KERAS_OLD, f->outdir);
    free(expect_cli(args, 1, "x.png: gnuplot exited cleanly but wrote no PNG"));
    setenv("PATH", f->old_path, 1);
    assert_int_equal(count_files(f->outdir), 0);
    assert_int_equal(count_files(f->tmp), 0);
    free(bin);
}

static void test_bad_input(void **state) {
    fixture *f = *state;
    char args[4096];
    snprintf(args, sizeof args, "plot '%s' -o '%s/p.png'", FIX "a.predictions.csv", f->outdir);
    free(expect_cli(args, 1, "a.predictions.csv is a predictions CSV; plot draws metrics CSVs"));
    snprintf(args, sizeof args, "plot '%s/missing.csv' -o '%s/p.png'", f->tmp, f->outdir);
    free(expect_cli(args, 1, "missing.csv: cannot open: No such file or directory"));
    snprintf(args, sizeof args, "plot '%s' -o '%s/nodir/p.png'", HETRAIN, f->outdir);
    if (have_gnuplot()) free(expect_cli(args, 1, "nodir/p.png: cannot write: No such file or directory"));
    assert_int_equal(count_files(f->outdir), 0);
    free(expect_cli("plot '" HETRAIN "'", EXIT_USAGE, "-o FILE.png is required"));
    free(expect_cli("plot -o x.png", EXIT_USAGE, "needs at least one metrics CSV"));
    free(expect_cli("plot -o", EXIT_USAGE, "-o needs a value"));
    free(expect_cli("plot --help", 0, "usage: hetrain plot"));
    free(expect_cli("--help", 0, "  plot "));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_curves_and_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sparse_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_gnuplot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gnuplot_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gnuplot_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
