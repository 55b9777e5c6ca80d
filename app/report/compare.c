// 'hetrain compare': metrics tables by epoch with deltas against the first run, per-run final/
// best accuracy and time, or agreement and a confusion matrix for two predictions files; and a
// tolerance verdict for scripts.
#include "app/report/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app/report/runcsv.h"

// Two printed values that differ from tol only by binary rounding (0.8723 - 0.8600 vs 0.0123)
// are within it.
#define COMPARE_TOL_SLACK 1e-9

static int label_width(const run_csv *runs, int n) {
    int w = 3;
    for (int i = 0; i < n; i++)
        if ((int)strlen(runs[i].label) > w) w = (int)strlen(runs[i].label);
    return w;
}

static int max_int(int a, int b) {
    return a > b ? a : b;
}

// "3, 5..9, 12" for a sorted list.
static void print_epoch_list(FILE *out, const int *ep, int n) {
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ep[j + 1] == ep[j] + 1) j++;
        fprintf(out, "%s%d", i ? ", " : "", ep[i]);
        if (j > i) fprintf(out, "%s%d", j == i + 1 ? ", " : "..", ep[j]);
        i = j + 1;
    }
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// One cell: "-" when missing, "nan" for a NaN value (a diverged loss), else 4 decimals.
static void print_cell(FILE *out, int w, int have, double v, int sign) {
    if (!have) fprintf(out, "  %*s", w, "-");
    else if (isnan(v)) fprintf(out, "  %*s", w, "nan");
    else fprintf(out, sign ? "  %+*.4f" : "  %*.4f", w, v);
}

static void print_table(FILE *out, const run_csv *runs, int n, run_metric m, const int *common,
                        int n_common) {
    fprintf(out, "\n%s\n%5s", run_metric_names[m], "epoch");
    for (int i = 0; i < n; i++) fprintf(out, "  %*s", max_int(7, (int)strlen(runs[i].label)), runs[i].label);
    for (int i = 1; i < n; i++) {
        char h[32];
        snprintf(h, sizeof h, "d:%s", runs[i].label);
        fprintf(out, "  %*s", max_int(7, (int)strlen(h)), h);
    }
    fputc('\n', out);
    for (int k = 0; k < n_common; k++) {
        fprintf(out, "%5d", common[k]);
        int row0 = run_csv_find_epoch(&runs[0], common[k]);
        const run_series *a = &runs[0].col[m];
        int have0 = a->v && a->have[row0];
        for (int i = 0; i < n; i++) {
            const run_series *b = &runs[i].col[m];
            int row = run_csv_find_epoch(&runs[i], common[k]);
            print_cell(out, max_int(7, (int)strlen(runs[i].label)), b->v && b->have[row],
                       b->v ? b->v[row] : 0, 0);
        }
        for (int i = 1; i < n; i++) {
            const run_series *b = &runs[i].col[m];
            int row = run_csv_find_epoch(&runs[i], common[k]);
            int have = have0 && b->v && b->have[row];
            double d = have ? b->v[row] - a->v[row0] : 0;
            if (fabs(d) < 5e-5) d = 0; // no "-0.0000" from rounding
            print_cell(out, max_int(7, 2 + (int)strlen(runs[i].label)), have, d, 1);
        }
        fputc('\n', out);
    }
}

// Last and best value of a run's accuracy column (val_accuracy when it has one).
typedef struct run_summary {
    run_metric metric;
    int final_row, best_row; // -1 when the column has no value
    double mean_time;        // NaN without time_s
} run_summary;

static run_summary summarize(const run_csv *r) {
    run_summary s = {.metric = run_csv_has(r, RUN_METRIC_VAL_ACCURACY) ? RUN_METRIC_VAL_ACCURACY
                                                                       : RUN_METRIC_ACCURACY,
                     .final_row = -1, .best_row = -1, .mean_time = NAN};
    const run_series *c = &r->col[s.metric];
    for (int i = 0; c->v && i < r->n_rows; i++) {
        if (!c->have[i]) continue;
        s.final_row = i;
        if (!isnan(c->v[i]) && (s.best_row < 0 || c->v[i] > c->v[s.best_row])) s.best_row = i;
    }
    const run_series *t = &r->col[RUN_METRIC_TIME];
    double sum = 0;
    int k = 0;
    for (int i = 0; t->v && i < r->n_rows; i++)
        if (t->have[i]) sum += t->v[i], k++;
    if (k) s.mean_time = sum / k;
    return s;
}

static void print_summary(FILE *out, const run_csv *runs, int n, int w) {
    fprintf(out, "\nsummary\n%-*s  %-12s  %8s  %5s  %8s  %5s  %9s  %10s\n", w, "run", "metric",
            "final", "epoch", "best", "epoch", "s/epoch", "time ratio");
    run_summary s0 = summarize(&runs[0]);
    for (int i = 0; i < n; i++) {
        const run_csv *r = &runs[i];
        run_summary s = summarize(r);
        const run_series *c = &r->col[s.metric];
        fprintf(out, "%-*s  %-12s", w, r->label, run_metric_names[s.metric]);
        if (s.final_row >= 0) fprintf(out, "  %8.4f  %5d", c->v[s.final_row], r->epoch[s.final_row]);
        else fprintf(out, "  %8s  %5s", "n/a", "");
        if (s.best_row >= 0) fprintf(out, "  %8.4f  %5d", c->v[s.best_row], r->epoch[s.best_row]);
        else fprintf(out, "  %8s  %5s", "n/a", "");
        if (isnan(s.mean_time)) fprintf(out, "  %9s", "n/a");
        else fprintf(out, "  %9.2f", s.mean_time);
        if (isnan(s.mean_time) || isnan(s0.mean_time) || s0.mean_time <= 0)
            fprintf(out, "  %10s\n", "n/a");
        else fprintf(out, "  %9.2fx\n", s.mean_time / s0.mean_time);
    }
}

// Final accuracies at the last common epoch: val_accuracy when every run has a value there.
static int metrics_verdict(FILE *out, const run_csv *runs, int n, int epoch, int all_same,
                           double tol, int *verdict, ht_error *e) {
    run_metric m = RUN_METRIC_VAL_ACCURACY;
    for (int i = 0; i < n; i++) {
        const run_series *c = &runs[i].col[m];
        if (!c->v || !c->have[run_csv_find_epoch(&runs[i], epoch)]) m = RUN_METRIC_ACCURACY;
    }
    double v0 = 0, d = 0;
    int worst = -1;
    for (int i = 0; i < n; i++) {
        const run_series *c = &runs[i].col[m];
        int row = run_csv_find_epoch(&runs[i], epoch);
        if (!c->v || !c->have[row])
            return ht_fail(e, "%s: no val_accuracy or accuracy at epoch %d to judge --tol by",
                           runs[i].path, epoch);
        if (i == 0) v0 = c->v[row];
        else if (worst < 0 || !(fabs(c->v[row] - v0) <= fabs(d))) worst = i, d = c->v[row] - v0;
    }
    *verdict = !(fabs(d) <= tol + COMPARE_TOL_SLACK);
    fprintf(out, "\nverdict: %s: final %s (epoch %d%s): %s differs from %s by %+.4f, %s %g\n",
            *verdict ? "BEYOND tolerance" : "within tolerance", run_metric_names[m], epoch,
            all_same ? "" : ", the last common one", runs[worst].label, runs[0].label, d,
            *verdict ? "more than" : "within", tol);
    return 0;
}

static int compare_metrics(FILE *out, const run_csv *runs, int n, double tol, int *verdict,
                           ht_error *e) {
    int total = 0;
    for (int i = 0; i < n; i++) total += runs[i].n_rows;
    int *all = ht_malloc((size_t)total, sizeof *all, e), n_all = 0, n_common = 0;
    int *common = ht_malloc((size_t)runs[0].n_rows, sizeof *common, e);
    int *missing = ht_malloc((size_t)total, sizeof *missing, e);
    int rc = -1;
    if (!all || !common || !missing) goto done;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < runs[i].n_rows; r++) all[n_all++] = runs[i].epoch[r];
    qsort(all, (size_t)n_all, sizeof *all, cmp_int);
    int u = 0;
    for (int k = 0; k < n_all; k++)
        if (!u || all[k] != all[u - 1]) all[u++] = all[k];
    n_all = u;
    for (int r = 0; r < runs[0].n_rows; r++) {
        int in_all = 1;
        for (int i = 1; i < n && in_all; i++) in_all = run_csv_find_epoch(&runs[i], runs[0].epoch[r]) >= 0;
        if (in_all) common[n_common++] = runs[0].epoch[r];
    }
    if (!n_common) {
        for (int i = 1; i < n; i++) {
            int k = 0;
            for (int r = 0; r < runs[0].n_rows && !k; r++) k = run_csv_find_epoch(&runs[i], runs[0].epoch[r]) >= 0;
            if (!k) {
                ht_fail(e, "no epoch in common: %s has epochs %d..%d, %s has %d..%d", runs[0].path,
                        runs[0].epoch[0], runs[0].epoch[runs[0].n_rows - 1], runs[i].path,
                        runs[i].epoch[0], runs[i].epoch[runs[i].n_rows - 1]);
                goto done;
            }
        }
        ht_fail(e, "no epoch is in all %d files", n);
        goto done;
    }
    int w = label_width(runs, n);
    fprintf(out, "runs (d:X columns are X minus %s):\n", runs[0].label);
    for (int i = 0; i < n; i++)
        fprintf(out, "  %-*s  %s: %d epochs, %d..%d\n", w, runs[i].label, runs[i].path,
                runs[i].n_rows, runs[i].epoch[0], runs[i].epoch[runs[i].n_rows - 1]);
    for (int i = 0; i < n; i++) {
        int n_miss = 0;
        for (int k = 0; k < n_all; k++)
            if (run_csv_find_epoch(&runs[i], all[k]) < 0) missing[n_miss++] = all[k];
        if (!n_miss) continue;
        fprintf(out, "note: %s lacks epoch%s ", runs[i].label, n_miss > 1 ? "s" : "");
        print_epoch_list(out, missing, n_miss);
        fprintf(out, "; tables show the %d common epochs\n", n_common);
    }
    static const run_metric shown[] = {RUN_METRIC_ACCURACY, RUN_METRIC_LOSS,
                                       RUN_METRIC_VAL_ACCURACY, RUN_METRIC_VAL_LOSS};
    for (int k = 0; k < 4; k++) {
        int any = 0;
        for (int i = 0; i < n; i++) any |= run_csv_has(&runs[i], shown[k]);
        if (any) print_table(out, runs, n, shown[k], common, n_common);
        else fprintf(out, "\n%s: in none of the files\n", run_metric_names[shown[k]]);
    }
    print_summary(out, runs, n, w);
    rc = 0;
    if (tol >= 0)
        rc = metrics_verdict(out, runs, n, common[n_common - 1], n_common == n_all, tol, verdict, e);
done:
    free(all);
    free(common);
    free(missing);
    return rc;
}

// Both files sorted by ImageId: the first place where they part names the odd one out.
static int match_ids(const run_csv *a, const run_csv *b, ht_error *e) {
    for (int i = 0; i < a->n_rows || i < b->n_rows; i++) {
        if (i < a->n_rows && i < b->n_rows && a->image_id[i] == b->image_id[i]) continue;
        const run_csv *x = a, *y = b;
        if (i >= a->n_rows || (i < b->n_rows && b->image_id[i] < a->image_id[i])) x = b, y = a;
        return ht_fail(e, "%s:%d: ImageId %ld is not in %s (%s has %d predictions, %s has %d)",
                       x->path, x->line[i], x->image_id[i], y->path, a->path, a->n_rows, b->path,
                       b->n_rows);
    }
    return 0;
}

static int compare_predictions(FILE *out, const run_csv *a, const run_csv *b, double tol,
                               int *verdict, ht_error *e) {
    if (match_ids(a, b, e) < 0) return -1;
    int n = a->n_rows, agree = 0;
    for (int i = 0; i < n; i++) agree += a->pred[i] == b->pred[i];
    fprintf(out, "predictions: %s (%s) vs %s (%s), %d images\n", a->label, a->path, b->label,
            b->path, n);
    fprintf(out, "agreement: %d of %d (%.2f%%)\n", agree, n, 100.0 * agree / n);
    int L = (a->max_label > b->max_label ? a->max_label : b->max_label) + 1;
    if (L > 100) {
        fprintf(out, "confusion matrix left out: labels go up to %d\n", L - 1);
    } else {
        long *cm = ht_calloc((size_t)L * (size_t)L, sizeof *cm, e);
        if (!cm) return -1;
        for (int i = 0; i < n; i++) cm[(size_t)a->pred[i] * (size_t)L + (size_t)b->pred[i]]++;
        int w = snprintf(NULL, 0, "%d", n) + 1;
        if (w < 5) w = 5;
        fprintf(out, "\nconfusion (rows: %s's labels, columns: %s's)\n%5s", a->label, b->label, "");
        for (int c = 0; c < L; c++) fprintf(out, " %*d", w, c);
        fputc('\n', out);
        for (int r = 0; r < L; r++) {
            fprintf(out, "%5d", r);
            for (int c = 0; c < L; c++) fprintf(out, " %*ld", w, cm[(size_t)r * (size_t)L + (size_t)c]);
            fputc('\n', out);
        }
        free(cm);
    }
    if (tol >= 0) {
        double d = 1.0 - (double)agree / n;
        *verdict = !(d <= tol + COMPARE_TOL_SLACK);
        fprintf(out, "\nverdict: %s: %s and %s disagree on %.4f of the images, %s %g\n",
                *verdict ? "BEYOND tolerance" : "within tolerance", a->label, b->label, d,
                *verdict ? "more than" : "within", tol);
    }
    return 0;
}

static const char *kind_name(run_csv_kind k) {
    return k == RUN_CSV_METRICS ? "metrics" : "predictions";
}

int compare_run(FILE *out, int n, char *const *paths, double tol, int *verdict, ht_error *e) {
    *verdict = 0;
    if (n < 2) return ht_fail(e, "compare needs at least two CSV files, found %d", n);
    run_csv *runs = ht_calloc((size_t)n, sizeof *runs, e);
    if (!runs) return -1;
    int rc = -1;
    for (int i = 0; i < n; i++)
        if (run_csv_load(&runs[i], paths[i], e) < 0) goto done;
    for (int i = 1; i < n; i++)
        if (runs[i].kind != runs[0].kind) {
            ht_fail(e, "%s is a %s CSV but %s is a %s CSV; compare takes files of one kind",
                    runs[0].path, kind_name(runs[0].kind), runs[i].path, kind_name(runs[i].kind));
            goto done;
        }
    run_csv_unique_labels(runs, n);
    if (runs[0].kind == RUN_CSV_PREDICTIONS) {
        if (n != 2) {
            ht_fail(e, "predictions CSVs are compared two at a time, found %d files", n);
            goto done;
        }
        rc = compare_predictions(out, &runs[0], &runs[1], tol, verdict, e);
    } else {
        rc = compare_metrics(out, runs, n, tol, verdict, e);
    }
done:
    for (int i = 0; i < n; i++) run_csv_free(&runs[i]);
    free(runs);
    return rc;
}
