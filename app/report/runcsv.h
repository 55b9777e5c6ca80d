// Reads the results CSVs that runs leave behind, from hetrain or from other frameworks: metrics
// (hetrain, a PyTorch reference, Keras CSVLogger old and new) and predictions (ImageId,Label).
// Used by 'hetrain compare' and 'hetrain plot'.
#ifndef HETRAIN_RUNCSV_H
#define HETRAIN_RUNCSV_H

#include <stdint.h>

#include "core/common.h"

typedef enum run_csv_kind { RUN_CSV_METRICS = 1, RUN_CSV_PREDICTIONS } run_csv_kind;

// The metric columns compare and plot know; Keras's old names map onto them (acc -> accuracy,
// val_acc -> val_accuracy).
typedef enum run_metric {
    RUN_METRIC_ACCURACY, RUN_METRIC_LOSS, RUN_METRIC_VAL_ACCURACY, RUN_METRIC_VAL_LOSS,
    RUN_METRIC_TIME, RUN_METRIC_COUNT
} run_metric;

extern const char *const run_metric_names[RUN_METRIC_COUNT];

// One column of values per row. An empty field is missing (have[i] == 0); "nan" in the file is
// a value (a diverged loss) and stays NaN with have[i] == 1.
typedef struct run_series {
    double *v;
    uint8_t *have;
} run_series;

// One device of a heterogeneous hetrain run: its share_<spec> and busy_s_<spec> columns.
typedef struct run_device {
    char spec[64];
    run_series share, busy_s; // v == NULL when that column is absent
} run_device;

typedef struct run_csv {
    run_csv_kind kind;
    char path[1024];
    char label[24]; // base name without .csv/.metrics/.predictions, shortened; for columns
    int n_rows;
    int *line; // file line of each row, for messages
    // Metrics: rows sorted by epoch; col[m].v == NULL when the file has no such column.
    int *epoch;
    run_series col[RUN_METRIC_COUNT];
    int n_devices;
    run_device *devices;
    // Predictions: rows sorted by ImageId.
    long *image_id;
    int *pred;
    int max_label;
} run_csv;

// Reads `path` and tells its kind from the header. Fails with "<path>:<line>: ..." on a missing
// or empty file, a header of neither kind, ragged rows, a non-number in a metric column, a
// duplicate epoch or ImageId, or a file without data rows. r is zeroed on failure.
int run_csv_load(run_csv *r, const char *path, ht_error *e);
void run_csv_free(run_csv *r);

// Index of the row for `epoch`, or -1.
int run_csv_find_epoch(const run_csv *r, int epoch);

// 1 when the metric column exists and has at least one value.
int run_csv_has(const run_csv *r, run_metric m);

// Gives labels that collide (the same base name in two folders) a "#2", "#3" suffix.
void run_csv_unique_labels(run_csv *runs, int n);

#endif
