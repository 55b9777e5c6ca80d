// 'hetrain compare' on hand-written results CSVs in every dialect it reads (tests/fixtures/:
// hetrain metrics with device columns, a PyTorch-reference-like file, old Keras acc/val_acc, new
// Keras with shuffled columns, an lr column and CRLF lines; two predictions files), plus the
// CSV reader's edge cases and one test per malformed input.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "app/report/compare.h"
#include "app/report/runcsv.h"
#include "tests/lib/testutil.h"

#define EXIT_USAGE 2
#define FIX HT_SOURCE_DIR "/tests/fixtures/"
#define HETRAIN FIX "hetrain.metrics.csv"
#define TORCH FIX "torch_reference.metrics.csv"
#define KERAS_OLD FIX "keras_old.csv"
#define KERAS_NEW FIX "keras_new.csv"
#define PRED_A FIX "a.predictions.csv"
#define PRED_B FIX "b.predictions.csv"

#define expect_cli test_expect_cli

static void expect_cli_free(const char *args, int status, const char *want) {
    free(expect_cli(args, status, want));
}

// Numbers at the start of a line (up to max), stopping at its end.
static int line_numbers(const char *line, double *v, int max) {
    char buf[1024];
    size_t n = strcspn(line, "\n");
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, line, n);
    buf[n] = 0;
    int k = 0;
    for (char *p = buf, *end; k < max; p = end) {
        v[k] = strtod(p, &end);
        if (end == p) break;
        k++;
    }
    return k;
}

// The line in the block after the line `head` whose first number is `first`; NULL if none.
// A block ends at an empty line.
static const char *block_line(const char *out, const char *head, long first) {
    char key[128];
    snprintf(key, sizeof key, "\n%s\n", head);
    const char *p = strstr(out, key);
    if (!p) return NULL;
    for (p = strchr(p + 1, '\n') + 1; *p && *p != '\n'; p = strchr(p, '\n') + 1) {
        char *end;
        if (strtol(p, &end, 10) == first && end != p) return p;
        if (!strchr(p, '\n')) break;
    }
    return NULL;
}

// The numbers of one table row: section `metric`, the line for `epoch`. Returns how many.
static int table_row(const char *out, const char *metric, int epoch, double *v, int max) {
    const char *line = block_line(out, metric, epoch);
    double all[32];
    int k = line ? line_numbers(line, all, max + 1 < 32 ? max + 1 : 32) : 0;
    for (int i = 1; i < k; i++) v[i - 1] = all[i]; // after the epoch
    return k > 0 ? k - 1 : 0;
}

typedef struct summary_row {
    char metric[32], time[16], ratio[16];
    double final, best;
    int final_epoch, best_epoch;
} summary_row;

static int summary_of(const char *out, const char *label, summary_row *s) {
    const char *p = strstr(out, "\nsummary\n");
    if (!p) return 0;
    char key[64];
    snprintf(key, sizeof key, "\n%s ", label);
    p = strstr(p, key);
    if (!p) return 0;
    char name[64];
    return sscanf(p + 1, "%63s %31s %lf %d %lf %d %15s %15s", name, s->metric, &s->final,
                  &s->final_epoch, &s->best, &s->best_epoch, s->time, s->ratio) == 8;
}

static void test_dialects(void **state) {
    (void)state;
    char *out = expect_cli("compare '" HETRAIN "' '" TORCH "' '" KERAS_OLD "' '" KERAS_NEW "'", 0,
                           "runs (d:X columns are X minus hetrain)");
    double v[8];
    // val_accuracy at epoch 0: four runs, then torch - hetrain, keras_old - hetrain, ...
    assert_int_equal(table_row(out, "val_accuracy", 0, v, 8), 7);
    assert_true(fabs(v[0] - 0.7392) < 1e-9 && fabs(v[1] - 0.7515) < 1e-9);
    assert_true(fabs(v[2] - 0.7300) < 1e-9 && fabs(v[3] - 0.7400) < 1e-9);
    assert_true(fabs(v[4] - 0.0123) < 1e-9 && fabs(v[5] + 0.0092) < 1e-9);
    assert_non_null(strstr(out, "+0.0123"));
    assert_non_null(strstr(out, "-0.0200")); // keras_old's final val_accuracy delta
    // keras_new's columns come in another order (loss,lr,val_loss,val_accuracy,accuracy).
    assert_int_equal(table_row(out, "accuracy", 4, v, 8), 7);
    assert_true(fabs(v[3] - 0.8500) < 1e-9 && fabs(v[6] + 0.0005) < 1e-9);
    assert_int_equal(table_row(out, "loss", 2, v, 8), 7);
    assert_true(fabs(v[3] - 0.4950) < 1e-9 && fabs(v[2] - 0.5000) < 1e-9);
    assert_null(strstr(out, "\nlr\n"));
    assert_null(strstr(out, "note:")); // same epochs everywhere

    summary_row s;
    assert_true(summary_of(out, "hetrain", &s));
    assert_string_equal(s.metric, "val_accuracy");
    assert_true(fabs(s.final - 0.8600) < 1e-9 && s.final_epoch == 4);
    assert_true(fabs(s.best - 0.8618) < 1e-9 && s.best_epoch == 3);
    assert_string_equal(s.time, "20.00");
    assert_string_equal(s.ratio, "1.00x");
    assert_true(summary_of(out, "torch_reference", &s));
    assert_true(fabs(s.final - 0.8723) < 1e-9 && s.best_epoch == 4);
    assert_string_equal(s.time, "10.00");
    assert_string_equal(s.ratio, "0.50x");
    assert_true(summary_of(out, "keras_old", &s));
    assert_string_equal(s.metric, "val_accuracy"); // from val_acc
    assert_true(fabs(s.best - 0.8500) < 1e-9 && s.best_epoch == 2);
    assert_string_equal(s.time, "n/a");
    assert_string_equal(s.ratio, "n/a");
    assert_true(summary_of(out, "keras_new", &s));
    assert_true(fabs(s.final - 0.8655) < 1e-9 && s.final_epoch == 4);
    assert_null(strstr(out, "verdict")); // no --tol, no verdict
    free(out);
}

static void test_tolerance(void **state) {
    (void)state;
    // Largest final val_accuracy difference from hetrain: keras_old, -0.0200.
    const char *all = "compare '" HETRAIN "' '" TORCH "' '" KERAS_OLD "' '" KERAS_NEW "'";
    char args[2048];
    snprintf(args, sizeof args, "%s --tol 0.05", all);
    expect_cli_free(args, 0, "verdict: within tolerance: final val_accuracy (epoch 4)");
    snprintf(args, sizeof args, "%s --tol 0.01", all);
    expect_cli_free(args, 1, "verdict: BEYOND tolerance: final val_accuracy (epoch 4): keras_old "
                             "differs from hetrain by -0.0200");
    expect_cli_free("compare --tol 0.01 '" HETRAIN "' '" KERAS_NEW "'", 0, "within tolerance");
    expect_cli_free("compare '" HETRAIN "' '" KERAS_NEW "' --tol 0.005", 1, "+0.0055, more than 0.005");
    // Exactly the printed difference is within (binary rounding does not tip it over).
    expect_cli_free("compare '" HETRAIN "' '" TORCH "' --tol 0.0123", 0, "within tolerance");

    // The library call gives the same verdicts.
    char *paths[] = {HETRAIN, KERAS_OLD};
    FILE *sink = fopen("/dev/null", "w");
    int verdict = -1;
    ht_error e;
    assert_int_equal(compare_run(sink, 2, paths, 0.03, &verdict, &e), 0);
    assert_int_equal(verdict, 0);
    assert_int_equal(compare_run(sink, 2, paths, 0.019, &verdict, &e), 0);
    assert_int_equal(verdict, 1);
    assert_int_equal(compare_run(sink, 2, paths, -1, &verdict, &e), 0);
    assert_int_equal(verdict, 0);
    assert_int_equal(compare_run(sink, 1, paths, -1, &verdict, &e), -1);
    assert_non_null(strstr(e.msg, "at least two"));
    fclose(sink);
}

// A hetrain run without a validation split: empty val columns, judged by accuracy.
static void test_no_validation(void **state) {
    (void)state;
    char *dir = test_tmpdir("compare-noval");
    const char *csv = "epoch,accuracy,loss,val_accuracy,val_loss,time_s,samples_per_s\n"
                      "0,0.4300,1.5000,,,30.000,1600.0\n"
                      "1,0.7500,0.6500,,,30.000,1600.0\n"
                      "2,0.8100,0.5000,,,30.000,1600.0\n"
                      "3,0.8400,0.4500,,,30.000,1600.0\n"
                      "4,0.8605,0.4100,,,30.000,1600.0\n";
    char *p = test_write_file(dir, "noval.metrics.csv", csv, strlen(csv));
    char args[2048];
    snprintf(args, sizeof args, "compare '%s' '%s' --tol 0.02", HETRAIN, p);
    char *out = expect_cli(args, 0, "verdict: within tolerance: final accuracy (epoch 4): noval "
                                    "differs from hetrain by +0.0100");
    summary_row s;
    assert_true(summary_of(out, "noval", &s));
    assert_string_equal(s.metric, "accuracy");
    assert_true(fabs(s.best - 0.8605) < 1e-9 && s.best_epoch == 4);
    assert_string_equal(s.ratio, "1.50x");
    double v[4];
    assert_int_equal(table_row(out, "val_accuracy", 1, v, 4), 1); // noval and its delta are "-"
    assert_true(fabs(v[0] - 0.8274) < 1e-9);
    free(out);
    snprintf(args, sizeof args, "compare '%s' '%s' --tol 0.005", HETRAIN, p);
    expect_cli_free(args, 1, "BEYOND tolerance: final accuracy");
    free(p);
    free(dir);
}

static void test_missing_epochs(void **state) {
    (void)state;
    char *dir = test_tmpdir("compare-epochs");
    const char *longer = "epoch,accuracy,loss\n0,0.4,1.5\n1,0.7,0.7\n2,0.8,0.5\n3,0.82,0.45\n"
                         "4,0.84,0.42\n5,0.85,0.40\n6,0.86,0.39\n7,0.87,0.38\n";
    const char *gap = "epoch,accuracy,loss\n4,0.85,0.41\n0,0.41,1.6\n1,0.72,0.69\n3,0.83,0.46\n";
    char *pl = test_write_file(dir, "longer.csv", longer, strlen(longer));
    char *pg = test_write_file(dir, "gap.csv", gap, strlen(gap));
    char args[2048];
    snprintf(args, sizeof args, "compare '%s' '%s' '%s' --tol 0.5", HETRAIN, pl, pg);
    char *out = expect_cli(args, 0, "note: hetrain lacks epochs 5..7; tables show the 4 common epochs");
    assert_non_null(strstr(out, "note: gap lacks epochs 2, 5..7;"));
    assert_null(strstr(out, "note: longer"));
    double v[8];
    assert_int_equal(table_row(out, "accuracy", 2, v, 8), 0); // not common: no row
    assert_int_equal(table_row(out, "accuracy", 3, v, 8), 5);
    assert_true(fabs(v[2] - 0.83) < 1e-9 && fabs(v[4] - (0.83 - 0.8382)) < 1e-9);
    assert_int_equal(table_row(out, "accuracy", 5, v, 8), 0);
    // gap's rows were out of order; its summary still finds the last epoch.
    summary_row s;
    assert_true(summary_of(out, "gap", &s));
    assert_true(s.final_epoch == 4 && fabs(s.final - 0.85) < 1e-9);
    assert_true(summary_of(out, "longer", &s));
    assert_true(s.final_epoch == 7 && fabs(s.best - 0.87) < 1e-9);
    assert_non_null(strstr(out, "final accuracy (epoch 4, the last common one)"));
    free(out);
    const char *apart = "epoch,accuracy\n10,0.9\n11,0.91\n";
    char *pa = test_write_file(dir, "apart.csv", apart, strlen(apart));
    snprintf(args, sizeof args, "compare '%s' '%s'", HETRAIN, pa);
    expect_cli_free(args, 1, "no epoch in common");
    free(pl);
    free(pg);
    free(pa);
    free(dir);
}

// The confusion-matrix row for `label`: `n` counts after the row label.
static int confusion_row(const char *out, int label, int *c, int n) {
    const char *p = strstr(out, "\nconfusion (");
    if (!p) return 0;
    p = strchr(p + 1, '\n'); // the end of the title line; the column labels follow
    double v[16];
    for (p = strchr(p + 1, '\n'); p && p[1] && p[1] != '\n'; p = strchr(p + 1, '\n')) {
        int k = line_numbers(p + 1, v, n + 1 < 16 ? n + 1 : 16);
        if (k > 0 && (int)v[0] == label) {
            for (int i = 1; i < k; i++) c[i - 1] = (int)v[i];
            return k - 1;
        }
    }
    return 0;
}

static void test_predictions(void **state) {
    (void)state;
    // b lists the same ImageIds in reverse order; 4 and 14 say 5 for 3, 9 says 0 for 8.
    char *out = expect_cli("compare '" PRED_A "' '" PRED_B "'", 0, "agreement: 17 of 20 (85.00%)");
    int c[10];
    assert_int_equal(confusion_row(out, 3, c, 10), 10);
    assert_int_equal(c[3], 0);
    assert_int_equal(c[5], 2);
    assert_int_equal(confusion_row(out, 8, c, 10), 10);
    assert_int_equal(c[0], 1);
    assert_int_equal(c[8], 1);
    assert_int_equal(confusion_row(out, 0, c, 10), 10);
    assert_int_equal(c[0], 2);
    free(out);
    expect_cli_free("compare '" PRED_A "' '" PRED_B "' --tol 0.2", 0,
                    "within tolerance: a and b disagree on 0.1500 of the images");
    expect_cli_free("compare '" PRED_A "' '" PRED_B "' --tol 0.1", 1, "BEYOND tolerance");
    expect_cli_free("compare '" PRED_A "' '" PRED_A "' --tol 0", 0, "agreement: 20 of 20 (100.00%)");
    expect_cli_free("compare '" PRED_A "' '" PRED_B "' '" PRED_A "'", 1,
                    "predictions CSVs are compared two at a time, found 3 files");

    char *dir = test_tmpdir("compare-pred");
    char buf[512];
    size_t len = (size_t)snprintf(buf, sizeof buf, "ImageId,Label\r\n");
    for (int i = 1; i <= 20; i++) len += (size_t)snprintf(buf + len, sizeof buf - len, "%d,%d\r\n", i == 20 ? 21 : i, i % 10);
    char *pc = test_write_file(dir, "c.csv", buf, len);
    char args[2048];
    snprintf(args, sizeof args, "compare '%s' '%s'", PRED_A, pc);
    expect_cli_free(args, 1, "a.predictions.csv:21: ImageId 20 is not in");
    snprintf(args, sizeof args, "compare '%s' '%s'", pc, PRED_A);
    expect_cli_free(args, 1, "a.predictions.csv:21: ImageId 20 is not in");
    const char *short_ = "ImageId,Label\n1,0\n2,1\n";
    char *ps = test_write_file(dir, "short.csv", short_, strlen(short_));
    snprintf(args, sizeof args, "compare '%s' '%s'", PRED_A, ps);
    expect_cli_free(args, 1, "a.predictions.csv:4: ImageId 3 is not in");
    const char *dup = "ImageId,Label\n1,0\n2,1\n1,3\n";
    char *pd = test_write_file(dir, "dup.csv", dup, strlen(dup));
    snprintf(args, sizeof args, "compare '%s' '%s'", PRED_A, pd);
    expect_cli_free(args, 1, "dup.csv:4: duplicate ImageId 1 (also on line 2)");
    free(pc);
    free(ps);
    free(pd);
    free(dir);
}

// Each malformed input: one line naming the file (and line), exit 1.
static void test_malformed(void **state) {
    (void)state;
    char *dir = test_tmpdir("compare-bad");
    static const struct {
        const char *name, *text, *want;
    } cases[] = {
        {"empty.csv", "", "empty.csv: empty file"},
        {"blank.csv", "\n \r\n", "blank.csv: empty file"},
        {"noepoch.csv", "step,accuracy,loss\n0,0.5,1.0\n", "noepoch.csv:1: no epoch column"},
        {"nometrics.csv", "epoch,lr\n0,0.1\n", "nometrics.csv:1: no known metric columns"},
        {"bad.csv", "epoch,accuracy,loss,val_accuracy,val_loss\n0,0.5,1.0,0.6,0.9\n"
                    "1,0.6,0.8,0.7,0.7\n2,0.7,0.6,0.75,abc\n",
         "bad.csv:4: column val_loss: expected a number, found \"abc\""},
        {"badepoch.csv", "epoch,loss\n0,1.0\nx,0.9\n",
         "badepoch.csv:3: column epoch: expected an integer >= 0, found \"x\""},
        {"dup.csv", "epoch,acc\n1,0.5\n2,0.6\n2,0.7\n", "dup.csv:4: duplicate epoch 2 (also on line 3)"},
        {"ragged.csv", "epoch,accuracy,loss,val_accuracy,val_loss\n0,0.5,1.0,0.6,0.9\n1,0.6,0.8,0.7\n",
         "ragged.csv:3: 4 fields, but the header has 5"},
        {"headeronly.csv", "epoch,accuracy,loss\n", "headeronly.csv: a header but no data rows"},
        {"quote.csv", "epoch,loss\n0,\"1.0\n1,0.5\n", "quote.csv:2: quoted field without its closing quote"},
        {"twice.csv", "epoch,acc,accuracy\n0,0.5,0.5\n", "twice.csv:1: columns \"acc\" and \"accuracy\" both give accuracy"},
        // A quoted field over two lines: the bad value is on line 4, not record 3.
        {"multiline.csv", "epoch,loss,note\n0,1.0,\"two\nlines\"\n1,abc,x\n",
         "multiline.csv:4: column loss: expected a number, found \"abc\""},
    };
    char args[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = test_write_file(dir, cases[i].name, cases[i].text, strlen(cases[i].text));
        snprintf(args, sizeof args, "compare '%s' '%s'", HETRAIN, p);
        char *out = expect_cli(args, 1, cases[i].want);
        assert_null(strchr(strchr(out, '\n') + 1, '\n')); // one line
        assert_non_null(strstr(out, "hetrain: "));
        free(out);
        free(p);
    }
    snprintf(args, sizeof args, "compare '%s' '%s/nope.csv'", HETRAIN, dir);
    expect_cli_free(args, 1, "nope.csv: cannot open: No such file or directory");
    expect_cli_free("compare '" HETRAIN "' '" PRED_A "'", 1,
                    "hetrain.metrics.csv is a metrics CSV but " FIX "a.predictions.csv is a predictions CSV");
    expect_cli_free("compare '" HETRAIN "'", EXIT_USAGE, "needs at least two CSV files, found 1");
    expect_cli_free("compare", EXIT_USAGE, "needs at least two CSV files, found 0");
    expect_cli_free("compare --tol abc '" HETRAIN "' '" TORCH "'", EXIT_USAGE, "--tol: expected a number");
    expect_cli_free("compare --bogus '" HETRAIN "' '" TORCH "'", EXIT_USAGE, "unknown option \"--bogus\"");
    expect_cli_free("compare --help", 0, "usage: hetrain compare");
    expect_cli_free("--help", 0, "compare");
    free(dir);
}

// The reader itself: BOM, quoted header and fields, "" escapes, CRLF, blank lines, rows out of
// order, an ignored text column with commas, a NaN loss (a value) next to an empty (missing) one.
static void test_reader(void **state) {
    (void)state;
    char *dir = test_tmpdir("compare-reader");
    const char *csv = "\xEF\xBB\xBF\"epoch\",\"acc\",loss,events,share_cpu,busy_s_cl:0.0\r\n"
                      "2,,0.9,,0.5,1.5\r\n"
                      "\r\n"
                      "0,0.5,\"1.25\",\"dropped cl:0.0, re-ran \"\"x\"\"\",0.7,2.5\r\n"
                      "1, 0.6 ,nan,,,3.5";
    char *p = test_write_file(dir, "odd.metrics.csv", csv, strlen(csv));
    run_csv r;
    ht_error e;
    if (run_csv_load(&r, p, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(r.kind, RUN_CSV_METRICS);
    assert_string_equal(r.label, "odd");
    assert_int_equal(r.n_rows, 3);
    assert_int_equal(r.epoch[0], 0);
    assert_int_equal(r.epoch[2], 2);
    assert_int_equal(r.line[0], 4);
    assert_int_equal(r.line[2], 2);
    const run_series *acc = &r.col[RUN_METRIC_ACCURACY], *loss = &r.col[RUN_METRIC_LOSS];
    assert_true(acc->have[0] && acc->v[0] == 0.5);
    assert_true(acc->have[1] && acc->v[1] == 0.6);
    assert_false(acc->have[2]);
    assert_true(loss->have[0] && loss->v[0] == 1.25);
    assert_true(loss->have[1] && isnan(loss->v[1]));
    assert_null(r.col[RUN_METRIC_VAL_ACCURACY].v);
    assert_int_equal(run_csv_find_epoch(&r, 1), 1);
    assert_int_equal(run_csv_find_epoch(&r, 7), -1);
    assert_int_equal(r.n_devices, 2);
    assert_string_equal(r.devices[0].spec, "cpu");
    assert_null(r.devices[0].busy_s.v);
    assert_true(r.devices[0].share.have[2] && !r.devices[0].share.have[1]);
    assert_string_equal(r.devices[1].spec, "cl:0.0");
    assert_true(r.devices[1].busy_s.v[1] == 3.5);
    run_csv_free(&r);

    // A long base name keeps both ends; the same name twice gets "#2".
    char *paths[] = {HT_SOURCE_DIR "/results/cnn2d_3layer_fullconnected_3layer-cpu.metrics.csv",
                     HT_SOURCE_DIR "/results/cnn2d_3layer_fullconnected_3layer-cpu.metrics.csv"};
    run_csv two[2];
    for (int i = 0; i < 2; i++)
        if (run_csv_load(&two[i], paths[i], &e) < 0) fail_msg("%s", e.msg);
    run_csv_unique_labels(two, 2);
    assert_string_equal(two[0].label, "cnn2d_3la..layer-cpu");
    assert_string_equal(two[1].label, "cnn2d_3la..layer-cpu#2");
    assert_true(two[0].n_rows > 0 && two[0].n_rows == two[1].n_rows);
    run_csv_free(&two[0]);
    run_csv_free(&two[1]);
    char args[2048];
    snprintf(args, sizeof args, "compare '%s' '%s' --tol 0", paths[0], paths[1]);
    char *out = expect_cli(args, 0, "within tolerance");
    assert_non_null(strstr(out, "d:cnn2d_3la..layer-cpu#2"));
    assert_null(strstr(out, "-0.0000"));
    assert_non_null(strstr(out, "1.00x"));
    free(out);
    free(p);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dialects),   cmocka_unit_test(test_tolerance),
        cmocka_unit_test(test_no_validation), cmocka_unit_test(test_missing_epochs),
        cmocka_unit_test(test_predictions), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
