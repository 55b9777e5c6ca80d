// Where a run's files go and how they are written: the metrics CSV (Keras CSVLogger columns
// first), the predictions CSV (Kaggle submission format) and the run log.
#ifndef HETRAIN_RESULTS_H
#define HETRAIN_RESULTS_H

#include <stdint.h>
#include <stdio.h>

#include "common.h"

typedef struct run_files {
    char prefix[1024];      // "<out>/<run>"; files are prefix + ".metrics.csv" etc.
    char metrics_path[1100];
    char predictions_path[1100];
    char log_path[1100];
    FILE *metrics;
    FILE *log;
    int metrics_rows;
} run_files;

// Creates out_dir if needed and claims a run name that no existing file uses: `name`, or
// name-2, name-3, ... when taken. Opens the metrics CSV (header written) and the log.
int run_files_open(run_files *r, const char *out_dir, const char *name, const char *header,
                   ht_error *e);
// Closes the files; a metrics CSV without a single row is removed (nothing to keep).
void run_files_close(run_files *r);

// printf to the log (flushed) and, when also_stdout, to stdout.
void run_log(run_files *r, int also_stdout, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Appends one metrics row (already formatted, no newline) and flushes it to disk.
void run_metrics_row(run_files *r, const char *row);

// Writes ImageId,Label (ImageId from 1) through a temporary file renamed into place.
int predictions_write(const char *path, const int32_t *pred, int n, ht_error *e);

#endif
