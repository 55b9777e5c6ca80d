// The --profile table: where the training steps' time went on every device, layer by layer
// and direction (from the device's own record, device.h), with the steps' other phases
// (engine.h's step_stats), so that each device's rows add up to the steps' wall time.
#ifndef HETRAIN_PROFILE_TABLE_H
#define HETRAIN_PROFILE_TABLE_H

#include <stdio.h>

#include "core/common.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/model.h"

// The phases of the profiled steps, summed (profile_steps_add).
typedef struct profile_steps {
    long steps, samples;
    double wall_s, prep_s, pass_s, reduce_s, update_s, bcast_s;
    double span_s; // from the first step's start to the last one's end (0: not known)
} profile_steps;

void profile_steps_add(profile_steps *s, const step_stats *st, int samples);

// Rows after the layers' 2 * n_layers: the device's time outside its layers and in
// set_params, its wait for the other devices in the pass, and the host's phases.
#define PROFILE_EXTRA_ROWS 7

typedef struct profile_row {
    char what[64];     // "conv1 (conv)", "device: outside layers", "host: reduce", ...
    char name[40];     // the layer's name, or the row's without its "device: "/"host: "
    const char *kind;  // the layer's kind; "device", "wait" or "host" for the others
    int layer;         // layer index; -1 for the other rows
    int dir;           // 0 forward, 1 backward; -1 for the other rows
    double time_s;
    double share;      // percent of the steps' wall time
    double gflop;      // 2 * multiply-adds / 1e9 done in it (0: none counted)
    int split;         // kernel_s, transfer_s and gemm_s were measured (OpenCL events)
    double kernel_s, transfer_s, gemm_s;
} profile_row;

// Fills rows (2 * m->n_layers + PROFILE_EXTRA_ROWS of them) for a device's record p over the
// steps s: every layer's forward in order, every layer's backward from the top, then the rest.
// The shares add up to 100 (the last rows are what the device's own do not cover). Returns
// the row count.
int profile_rows(const model *m, const device_profile *p, const profile_steps *s, profile_row *rows);

// The table of one device as aligned text (a heading line naming it and the steps, a header,
// the rows, a total): what the run prints and logs.
void profile_table_write(FILE *f, const model *m, const char *spec, const char *name,
                         const device_profile *p, const profile_steps *s);

// Every device's rows as one CSV (columns device,layer,kind,direction,time_s,share_pct,gflop,
// gflops,kernel_s,transfer_s,gemm_s,steps,samples; empty where not measured), written to a
// temporary file renamed to path. Fails naming the file.
int profile_csv_write(const char *path, const model *m, int n_devs, const char *const *specs,
                      const device_profile *profs, const profile_steps *s, ht_error *e);

#endif
