// 'hetrain plot': writes a gnuplot script with the runs as inline data blocks into a temporary
// folder, runs gnuplot on it (stderr kept for the error message) and renames the finished PNGs
// into place.
#include "app/report/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/report/runcsv.h"

extern char **environ;

#define PLOT_GNUPLOT_MISSING "plot needs gnuplot (Debian package gnuplot-nox): not found on PATH"

// execvp's search: PATH's folders in order ("" is the current one; unset PATH is /bin:/usr/bin).
static int find_on_path(const char *prog, char *buf, size_t cap) {
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    for (const char *p = path;; p++) {
        const char *q = strchr(p, ':');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        int n = len ? snprintf(buf, cap, "%.*s/%s", (int)len, p, prog) : snprintf(buf, cap, "%s", prog);
        struct stat st;
        if (n > 0 && (size_t)n < cap && !stat(buf, &st) && S_ISREG(st.st_mode) && !access(buf, X_OK))
            return 0;
        if (!q) return -1;
        p = q;
    }
}

// A gnuplot single-quoted string: ' doubles, control characters (newlines) become '?'.
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputs("''", f);
        else fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, f);
    }
    fputc('\'', f);
}

static void put_value(FILE *f, const run_series *s, int row) {
    if (s->v && s->have[row] && isfinite(s->v[row])) fprintf(f, " %.9g", s->v[row]);
    else fputs(" NaN", f);
}

static int series_has(const run_series *s, int n) {
    for (int i = 0; s->v && i < n; i++)
        if (s->have[i] && isfinite(s->v[i])) return 1;
    return 0;
}

// Integer epoch tics while there are few epochs (gnuplot would label 0.5, 1.5, ...).
static void put_header(FILE *f, const char *tmp_png, int width, int height, int max_epoch) {
    fprintf(f, "if (strstrt(' '.GPVAL_TERMINALS.' ', ' pngcairo ') > 0) {\n"
               "    set terminal pngcairo noenhanced size %d,%d\n"
               "} else {\n"
               "    set terminal png noenhanced size %d,%d\n"
               "}\nset output ", width, height, width, height);
    put_quoted(f, tmp_png);
    fputs("\nset grid\nset xlabel 'epoch'\nset key box opaque\n", f);
    if (max_epoch <= 20) fputs("set xtics 1\n", f);
}

static void put_empty_panel(FILE *f, const char *why) {
    fputs("unset key\nset label 1 ", f);
    put_quoted(f, why);
    fputs(" at graph 0.5,0.5 center\nplot [0:1][0:1] NaN notitle\nunset label 1\n"
          "set key box opaque\n", f);
}

static int max_epoch(const run_csv *runs, int n) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].epoch[runs[i].n_rows - 1] > m) m = runs[i].epoch[runs[i].n_rows - 1];
    return m;
}

// Chart 1: loss and accuracy, training and validation, one line (and colour) per run.
static void write_curves(FILE *f, const run_csv *runs, int n, const char *title,
                         const char *tmp_png) {
    put_header(f, tmp_png, 1200, 900, max_epoch(runs, n));
    for (int i = 0; i < n; i++) {
        fprintf(f, "$run%d << EOD\n# epoch accuracy loss val_accuracy val_loss\n", i);
        for (int r = 0; r < runs[i].n_rows; r++) {
            fprintf(f, "%d", runs[i].epoch[r]);
            for (int m = 0; m < RUN_METRIC_TIME; m++) put_value(f, &runs[i].col[m], r);
            fputc('\n', f);
        }
        fputs("EOD\n", f);
    }
    fputs("set multiplot layout 2,2 title ", f);
    put_quoted(f, title);
    fputc('\n', f);
    static const struct { run_metric m; const char *title; } panels[] = {
        {RUN_METRIC_LOSS, "training loss"}, {RUN_METRIC_VAL_LOSS, "validation loss"},
        {RUN_METRIC_ACCURACY, "training accuracy"}, {RUN_METRIC_VAL_ACCURACY, "validation accuracy"}};
    for (int k = 0; k < 4; k++) {
        run_metric m = panels[k].m;
        int acc = m == RUN_METRIC_ACCURACY || m == RUN_METRIC_VAL_ACCURACY;
        fprintf(f, "set title '%s'\nset ylabel '%s'\nset key %s right\n", panels[k].title,
                acc ? "accuracy" : "loss", acc ? "bottom" : "top");
        int first = 1;
        for (int i = 0; i < n; i++) {
            if (!series_has(&runs[i].col[m], runs[i].n_rows)) continue;
            fprintf(f, "%s$run%d using 1:%d with linespoints lt %d lw 2 pt 7 ps 0.7 title ",
                    first ? "plot " : ", \\\n     ", i, 2 + (int)m, i + 1);
            put_quoted(f, runs[i].label);
            first = 0;
        }
        if (first) put_empty_panel(f, "no data in any file");
        else fputc('\n', f);
    }
    fputs("unset multiplot\nset output\n", f);
}

// Chart 2: for each run with device columns, share of samples and busy seconds per device.
static void write_devices(FILE *f, const run_csv *runs, int n, const char *title,
                          const char *tmp_png) {
    int rows = 0;
    for (int i = 0; i < n; i++) rows += runs[i].n_devices > 0;
    put_header(f, tmp_png, 1200, 420 * rows + 60, max_epoch(runs, n));
    for (int i = 0; i < n; i++) {
        const run_csv *r = &runs[i];
        if (!r->n_devices) continue;
        fprintf(f, "$dev%d << EOD\n", i);
        for (int k = 0; k < r->n_rows; k++) {
            fprintf(f, "%d", r->epoch[k]);
            for (int d = 0; d < r->n_devices; d++) {
                put_value(f, &r->devices[d].share, k);
                put_value(f, &r->devices[d].busy_s, k);
            }
            fputc('\n', f);
        }
        fputs("EOD\n", f);
    }
    fprintf(f, "set multiplot layout %d,2 title ", rows);
    put_quoted(f, title);
    fputc('\n', f);
    for (int i = 0; i < n; i++) {
        const run_csv *r = &runs[i];
        if (!r->n_devices) continue;
        for (int busy = 0; busy < 2; busy++) {
            fputs("set title ", f);
            char t[96];
            snprintf(t, sizeof t, "%s: %s", r->label, busy ? "busy seconds" : "share of samples");
            put_quoted(f, t);
            fprintf(f, "\nset ylabel '%s'\nset yrange [0:%s]\nset key bottom right\n",
                    busy ? "seconds" : "share", busy ? "*" : "1");
            int first = 1;
            for (int d = 0; d < r->n_devices; d++) {
                const run_series *s = busy ? &r->devices[d].busy_s : &r->devices[d].share;
                if (!series_has(s, r->n_rows)) continue;
                fprintf(f, "%s$dev%d using 1:%d with linespoints lt %d lw 2 pt 7 ps 0.7 title ",
                        first ? "plot " : ", \\\n     ", i, 2 + 2 * d + busy, d + 1);
                put_quoted(f, r->devices[d].spec);
                first = 0;
            }
            if (first) put_empty_panel(f, "no values");
            else fputc('\n', f);
        }
    }
    fputs("unset multiplot\nset output\n", f);
}

// Runs gnuplot on a script; on failure the message carries its most telling stderr line (the
// one with the script line number, else the first non-blank one).
static int run_gnuplot(const char *gnuplot, const char *script, const char *errfile, ht_error *e) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)"gnuplot", (char *)script, NULL};
    pid_t pid;
    int err = posix_spawn(&pid, gnuplot, &fa, NULL, argv, environ), st = 0;
    posix_spawn_file_actions_destroy(&fa);
    if (err) return ht_fail(e, "cannot run %s: %s", gnuplot, strerror(err));
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return ht_fail(e, "waiting for gnuplot: %s", strerror(errno));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    char line[400] = "", best[400] = "";
    FILE *f = fopen(errfile, "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[strspn(line, " \t")]) continue;
        if (strstr(line, "\" line ")) {
            snprintf(best, sizeof best, "%s", line);
            break;
        }
        if (!best[0]) snprintf(best, sizeof best, "%s", line);
    }
    if (f) fclose(f);
    if (!WIFEXITED(st)) return ht_fail(e, "gnuplot was killed by signal %d", WTERMSIG(st));
    return ht_fail(e, "gnuplot failed (exit status %d): %s", WEXITSTATUS(st),
                   best[0] ? best : "(nothing on stderr)");
}

// Reserves "<out>.tmp-<pid>-<k>" beside out (same file system, so rename is atomic).
static int reserve_temp(const char *out, char *buf, size_t cap, ht_error *e) {
    for (int k = 0; k < 100; k++) {
        int n = snprintf(buf, cap, "%s.tmp-%ld-%d", out, (long)getpid(), k);
        if (n < 0 || (size_t)n >= cap) return ht_fail(e, "%s: path too long", out);
        int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (errno != EEXIST) return ht_fail(e, "%s: cannot write: %s", out, strerror(errno));
    }
    return ht_fail(e, "%s: cannot find a free temporary name beside it", out);
}

static int check_png(const char *tmp, const char *out, ht_error *e) {
    unsigned char sig[8] = {0};
    FILE *f = fopen(tmp, "rb");
    size_t got = f ? fread(sig, 1, sizeof sig, f) : 0;
    if (f) fclose(f);
    if (got != 8 || memcmp(sig, "\x89PNG\r\n\x1a\n", 8))
        return ht_fail(e, "%s: gnuplot exited cleanly but wrote no PNG", out);
    return 0;
}

typedef struct plot_job {
    char out[1100], tmp[1200], script[1100];
    int reserved;
} plot_job;

// Writes the script of one chart and runs it into the job's temporary PNG.
static int render(plot_job *j, const char *gnuplot, const char *dir, const char *name,
                  const run_csv *runs, int n, const char *title, int devices, ht_error *e) {
    if (reserve_temp(j->out, j->tmp, sizeof j->tmp, e) < 0) return -1;
    j->reserved = 1;
    snprintf(j->script, sizeof j->script, "%s/%s.gp", dir, name);
    FILE *f = fopen(j->script, "w");
    if (!f) return ht_fail(e, "%s: cannot write: %s", j->script, strerror(errno));
    if (devices) write_devices(f, runs, n, title, j->tmp);
    else write_curves(f, runs, n, title, j->tmp);
    if (fclose(f) != 0) return ht_fail(e, "%s: write error", j->script);
    char errfile[1100];
    snprintf(errfile, sizeof errfile, "%s/%s.err", dir, name);
    int rc = run_gnuplot(gnuplot, j->script, errfile, e);
    unlink(errfile);
    if (rc < 0) return ht_wrap(e, "%s", j->out);
    return check_png(j->tmp, j->out, e);
}

static int has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20) return 1;
    return 0;
}

int plot_run(FILE *log, const plot_opts *o, ht_error *e) {
    char gnuplot[4096];
    if (o->n < 1) return ht_fail(e, "plot needs at least one metrics CSV");
    if (has_control(o->out)) return ht_fail(e, "output path has a control character: \"%s\"", o->out);
    if (strlen(o->out) > 1000) return ht_fail(e, "output path too long: \"%.40s...\"", o->out);
    run_csv *runs = ht_calloc((size_t)o->n, sizeof *runs, e);
    if (!runs) return -1;
    plot_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    char dir[1100] = "", title[512];
    int rc = -1, any_devices = 0;
    for (int i = 0; i < o->n; i++) {
        if (run_csv_load(&runs[i], o->paths[i], e) < 0) goto done;
        if (runs[i].kind != RUN_CSV_METRICS) {
            ht_fail(e, "%s is a predictions CSV; plot draws metrics CSVs", runs[i].path);
            goto done;
        }
        any_devices |= runs[i].n_devices > 0;
    }
    run_csv_unique_labels(runs, o->n);
    if (find_on_path("gnuplot", gnuplot, sizeof gnuplot) < 0) {
        ht_fail(e, PLOT_GNUPLOT_MISSING);
        goto done;
    }
    if (o->title) {
        snprintf(title, sizeof title, "%s", o->title);
    } else {
        size_t len = 0;
        title[0] = 0;
        for (int i = 0; i < o->n && len < sizeof title - 40; i++)
            len += (size_t)snprintf(title + len, sizeof title - len, "%s%s", i ? " vs " : "",
                                    runs[i].label);
    }
    const char *tmpdir = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/hetrain-plot-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) {
        ht_fail(e, "cannot make a temporary folder %s: %s", dir, strerror(errno));
        dir[0] = 0;
        goto done;
    }
    snprintf(jobs[0].out, sizeof jobs[0].out, "%s", o->out);
    if (render(&jobs[0], gnuplot, dir, "curves", runs, o->n, title, 0, e) < 0) goto done;
    if (any_devices) {
        size_t len = strlen(o->out);
        if (len > 4 && !strcasecmp(o->out + len - 4, ".png")) len -= 4;
        snprintf(jobs[1].out, sizeof jobs[1].out, "%.*s-devices.png", (int)len, o->out);
        char t2[600];
        snprintf(t2, sizeof t2, "%s: devices", title);
        if (render(&jobs[1], gnuplot, dir, "devices", runs, o->n, t2, 1, e) < 0) goto done;
    }
    rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!jobs[k].reserved) continue;
        if (rename(jobs[k].tmp, jobs[k].out) < 0)
            rc = ht_fail(e, "%s: cannot rename %s into place: %s", jobs[k].out, jobs[k].tmp,
                         strerror(errno));
        else jobs[k].reserved = 0;
        if (rc == 0 && log) fprintf(log, "wrote %s\n", jobs[k].out);
    }
done:
    for (int k = 0; k < 2; k++) {
        if (jobs[k].reserved) unlink(jobs[k].tmp);
        if (jobs[k].script[0]) unlink(jobs[k].script);
    }
    if (dir[0]) rmdir(dir);
    for (int i = 0; i < o->n; i++) run_csv_free(&runs[i]);
    free(runs);
    return rc;
}
