// Where a run's files go and how they are written: the metrics CSV (Keras CSVLogger columns
// first), the predictions CSV (Kaggle submission format) and the run log.
#ifndef HETRAIN_RESULTS_H
#define HETRAIN_RESULTS_H

#include <stdint.h>
#include <stdio.h>

#include "core/common.h"

typedef struct run_files {
    char prefix[1024];      // "<out>/<run>"; files are prefix + ".metrics.csv" etc.
    char metrics_path[1100];
    char predictions_path[1100];
    char log_path[1100];
    FILE *metrics;
    FILE *log;
    int metrics_rows;
    // The first write that failed (a full disk, a file size limit): it ends the run, and
    // what was written before it stays.
    char write_error[1300];
} run_files;

// Whether `name` can name a run's files: not empty, not starting with '.' (hidden files, and
// "." or ".." would name folders), no '/' or control characters, short enough for the longest
// file name made from it. Fails with a message that quotes it.
int run_name_check(const char *name, ht_error *e);

// Creates out_dir if needed and claims a run name that no existing file uses: `name`, or
// name-2, name-3, ... when taken. Opens the metrics CSV (header written) and the log.
int run_files_open(run_files *r, const char *out_dir, const char *name, const char *header,
                   ht_error *e);
// Reopens the files of the run at `prefix` ("<out>/<name>") to continue it: the metrics CSV is
// rewritten (through a temporary file renamed into place) to hold exactly `metrics` (its header
// and the rows a checkpoint recorded; rows a killed run wrote after that checkpoint go), and
// is then appended to; the log is appended to.
int run_files_resume(run_files *r, const char *prefix, const char *metrics, int rows, ht_error *e);
// Closes the files; a metrics CSV without a single row is removed (nothing to keep). Fails
// when a write failed, now or before (see run_files_check).
int run_files_close(run_files *r, ht_error *e);

// printf to the log (flushed) and, when also_stdout, to stdout. A failed write to the log is
// kept for run_files_check.
void run_log(run_files *r, int also_stdout, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Each '\n'-separated line of text (NULL: none) to the log alone, after prefix.
void run_log_lines(run_files *r, const char *prefix, const char *text);

// Appends one metrics row (already formatted, no newline) and flushes it to disk; fails
// naming the file when the write fails.
int run_metrics_row(run_files *r, const char *row, ht_error *e);

// Fails, naming the file and the reason, when any write to the run's files failed so far.
int run_files_check(const run_files *r, ht_error *e);

// Fails, naming the option and the reason, unless a file can be written at path: its folder
// exists and takes new files (tried with a scratch file beside it, removed at once), and path
// is not a folder. Called before the work whose result goes there.
int output_check(const char *path, const char *option, ht_error *e);
// output_check, and path must not exist yet (an output hetrain never overwrites).
int output_check_new(const char *path, const char *option, ht_error *e);

// Writes ImageId,Label (ImageId from 1) through a temporary file renamed into place; for a
// multi-label head (labels = k >= 2) ImageId,label_0,..,label_k-1, each 0 or 1 (pred's bit j).
// With classes (the test set's image folder: its n_classes class names, and each sample's file
// in files) two more columns, class_name and file (quoted as CSV quotes).
typedef struct predictions_names {
    int n_classes;
    char *const *classes;
    char *const *files;
} predictions_names;
int predictions_write(const char *path, const int32_t *pred, int n, int labels,
                      const predictions_names *names, ht_error *e);

#endif
