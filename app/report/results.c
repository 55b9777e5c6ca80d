// Run files: unique names, incremental metrics rows, predictions written atomically.
#include "app/report/results.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int mkdir_p(const char *dir, ht_error *e) {
    if (!*dir) return ht_fail(e, "expected a folder name for the run's files, found \"\"");
    return ht_mkdirs(dir, e);
}

static FILE *create_excl(const char *path, int *taken, ht_error *e) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    *taken = fd < 0 && errno == EEXIST;
    if (fd < 0) {
        if (!*taken) ht_fail(e, "%s: cannot create: %s", path, strerror(errno));
        return NULL;
    }
    return fdopen(fd, "w");
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Remembers the first failed write (errno holds the reason); later ones add nothing.
static void note_write_error(run_files *r, const char *path) {
    if (!r->write_error[0])
        snprintf(r->write_error, sizeof r->write_error, "%s: cannot write: %s", path,
                 strerror(errno ? errno : EIO));
}

// Flushes f to the kernel, and with sync to the disk; 0 or -1 with errno set.
static int flush_file(FILE *f, int sync) {
    errno = 0;
    if (ferror(f) || fflush(f) != 0) return -1;
    if (sync && fsync(fileno(f)) != 0 && errno != EINVAL) return -1; // EINVAL: a pipe, a tty
    return 0;
}

// The longest suffix a run name gets: "-9999" for a taken name, then ".predictions.csv".
#define RUN_NAME_SUFFIX_MAX (sizeof "-9999.predictions.csv" - 1)

int run_name_check(const char *name, ht_error *e) {
    char shown[80];
    size_t n = strlen(name);
    ht_escape(shown, sizeof shown, name, n);
    if (n == 0) return ht_fail(e, "run name is empty");
    if (name[0] == '.')
        return ht_fail(e, "run name \"%s\" starts with '.', which would hide its files", shown);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/')
            return ht_fail(e, "run name \"%s\" contains '/' at byte %zu; expected a plain file "
                              "name", shown, i + 1);
        if (c < 0x20 || c == 0x7f)
            return ht_fail(e, "run name \"%s\" contains control character 0x%02x at byte %zu",
                           shown, c, i + 1);
    }
    if (n > NAME_MAX - RUN_NAME_SUFFIX_MAX)
        return ht_fail(e, "run name \"%s\" is %zu bytes; at most %zu fit in a file name with "
                          "\"-9999.predictions.csv\"", shown, n, NAME_MAX - RUN_NAME_SUFFIX_MAX);
    return 0;
}

int run_files_open(run_files *r, const char *out_dir, const char *name, const char *header,
                   ht_error *e) {
    memset(r, 0, sizeof *r);
    if (run_name_check(name, e) < 0) return -1;
    if (strlen(out_dir) + 1 + strlen(name) + 5 >= sizeof r->prefix)
        return ht_fail(e, "%s/%s: path too long", out_dir, name);
    if (mkdir_p(out_dir, e) < 0) return -1;
    for (int k = 1; k < 10000; k++) {
        if (k == 1) snprintf(r->prefix, sizeof r->prefix, "%s/%s", out_dir, name);
        else snprintf(r->prefix, sizeof r->prefix, "%s/%s-%d", out_dir, name, k);
        snprintf(r->metrics_path, sizeof r->metrics_path, "%s.metrics.csv", r->prefix);
        snprintf(r->predictions_path, sizeof r->predictions_path, "%s.predictions.csv", r->prefix);
        snprintf(r->log_path, sizeof r->log_path, "%s.log", r->prefix);
        if (exists(r->predictions_path) || exists(r->log_path)) continue;
        int taken;
        r->metrics = create_excl(r->metrics_path, &taken, e);
        if (!r->metrics && taken) continue;
        if (!r->metrics) return -1;
        r->log = create_excl(r->log_path, &taken, e);
        if (!r->log) {
            fclose(r->metrics);
            unlink(r->metrics_path);
            r->metrics = NULL;
            if (taken) continue;
            return -1;
        }
        fprintf(r->metrics, "%s\n", header);
        if (flush_file(r->metrics, 0) < 0) {
            note_write_error(r, r->metrics_path);
            fclose(r->metrics);
            fclose(r->log);
            unlink(r->metrics_path);
            unlink(r->log_path);
            r->metrics = r->log = NULL;
            return run_files_check(r, e);
        }
        return 0;
    }
    return ht_fail(e, "%s: no free run name for %s", out_dir, name);
}

int run_files_resume(run_files *r, const char *prefix, const char *metrics, int rows, ht_error *e) {
    memset(r, 0, sizeof *r);
    if (strlen(prefix) + 20 >= sizeof r->prefix) return ht_fail(e, "%s: path too long", prefix);
    snprintf(r->prefix, sizeof r->prefix, "%s", prefix);
    snprintf(r->metrics_path, sizeof r->metrics_path, "%s.metrics.csv", prefix);
    snprintf(r->predictions_path, sizeof r->predictions_path, "%s.predictions.csv", prefix);
    snprintf(r->log_path, sizeof r->log_path, "%s.log", prefix);
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", r->metrics_path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ht_fail(e, "%s: cannot create: %s", tmp, strerror(errno));
    size_t len = strlen(metrics);
    int bad = fwrite(metrics, 1, len, f) != len || flush_file(f, 1) < 0;
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, r->metrics_path) != 0) {
        int err = errno;
        unlink(tmp);
        return ht_fail(e, "%s: cannot write: %s", r->metrics_path, strerror(err));
    }
    r->metrics = fopen(r->metrics_path, "a");
    r->log = r->metrics ? fopen(r->log_path, "a") : NULL;
    if (!r->metrics || !r->log) {
        int err = errno;
        const char *which = r->metrics ? r->log_path : r->metrics_path;
        if (r->metrics) fclose(r->metrics);
        r->metrics = NULL;
        return ht_fail(e, "%s: cannot open: %s", which, strerror(err));
    }
    r->metrics_rows = rows;
    return 0;
}

int run_files_check(const run_files *r, ht_error *e) {
    if (r->write_error[0]) return ht_fail(e, "%s", r->write_error);
    return 0;
}

int run_files_close(run_files *r, ht_error *e) {
    if (r->metrics) {
        if (flush_file(r->metrics, 1) < 0) note_write_error(r, r->metrics_path);
        if (fclose(r->metrics) != 0) note_write_error(r, r->metrics_path);
        if (r->metrics_rows == 0) unlink(r->metrics_path);
    }
    if (r->log) {
        if (flush_file(r->log, 1) < 0) note_write_error(r, r->log_path);
        if (fclose(r->log) != 0) note_write_error(r, r->log_path);
    }
    r->metrics = r->log = NULL;
    return run_files_check(r, e);
}

void run_log_lines(run_files *r, const char *prefix, const char *text) {
    for (const char *p = text ? text : ""; *p; p += strcspn(p, "\n"), p += *p == '\n')
        run_log(r, 0, "%s%.*s\n", prefix, (int)strcspn(p, "\n"), p);
}

void run_log(run_files *r, int also_stdout, const char *fmt, ...) {
    va_list ap;
    if (r && r->log) {
        va_start(ap, fmt);
        vfprintf(r->log, fmt, ap);
        va_end(ap);
        if (flush_file(r->log, 0) < 0) note_write_error(r, r->log_path);
    }
    if (also_stdout) {
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fflush(stdout);
    }
}

int run_metrics_row(run_files *r, const char *row, ht_error *e) {
    fprintf(r->metrics, "%s\n", row);
    if (flush_file(r->metrics, 1) < 0) {
        note_write_error(r, r->metrics_path);
        return run_files_check(r, e);
    }
    r->metrics_rows++;
    return 0;
}

int output_check(const char *path, const char *option, ht_error *e) {
    if (!*path) return ht_fail(e, "%s: expected a file name, found \"\"", option);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ht_fail(e, "%s %s: is a folder, expected a file name", option, path);
    char tmp[1200];
    if (snprintf(tmp, sizeof tmp, "%s.check.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return ht_fail(e, "%s %s: path too long", option, path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return ht_fail(e, "%s %s: cannot create a file there: %s", option, path, strerror(errno));
    close(fd);
    unlink(tmp);
    return 0;
}

int output_check_new(const char *path, const char *option, ht_error *e) {
    if (output_check(path, option, e) < 0) return -1;
    if (access(path, F_OK) == 0)
        return ht_fail(e, "%s already exists; choose another %s or remove it", path, option);
    return 0;
}

// A CSV field: as it is, or quoted with its quotes doubled where it holds , " or a line break.
static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int predictions_write(const char *path, const int32_t *pred, int n, int labels,
                      const predictions_names *names, ht_error *e) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ht_fail(e, "%s: cannot create: %s", tmp, strerror(errno));
    if (labels <= 1 && names && names->n_classes) {
        fprintf(f, "ImageId,Label,class_name,file\n");
        for (int i = 0; i < n; i++) {
            fprintf(f, "%d,%d,", i + 1, pred[i]);
            csv_field(f, pred[i] >= 0 && pred[i] < names->n_classes ? names->classes[pred[i]] : "");
            fputc(',', f);
            csv_field(f, names->files ? names->files[i] : "");
            fputc('\n', f);
        }
    } else if (labels <= 1) {
        fprintf(f, "ImageId,Label\n");
        for (int i = 0; i < n; i++) fprintf(f, "%d,%d\n", i + 1, pred[i]);
    } else { // a multi-label head's prediction: label j as bit j
        fprintf(f, "ImageId");
        for (int j = 0; j < labels; j++) fprintf(f, ",label_%d", j);
        fputc('\n', f);
        for (int i = 0; i < n; i++) {
            fprintf(f, "%d", i + 1);
            for (int j = 0; j < labels; j++) fprintf(f, ",%d", (pred[i] >> j) & 1);
            fputc('\n', f);
        }
    }
    int bad = ferror(f);
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return ht_fail(e, "%s: cannot write: %s", path, strerror(err));
    }
    return 0;
}
