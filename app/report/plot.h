// 'hetrain plot': training curves of one or more runs as PNG, drawn by gnuplot.
#ifndef HETRAIN_PLOT_H
#define HETRAIN_PLOT_H

#include <stdio.h>

#include "core/common.h"

typedef struct plot_opts {
    int n;                // metrics CSVs, any dialect compare reads (see runcsv.h)
    char *const *paths;
    const char *out;      // PNG to write; replaced when it exists
    const char *title;    // NULL: the runs' names
} plot_opts;

// Draws a 2x2 chart (training/validation loss and accuracy by epoch, one line per run) into
// o->out and, when some run has share_/busy_s_ columns, each such run's per-device share of
// samples and busy seconds into <out without .png>-devices.png. Runs gnuplot from PATH (pngcairo
// terminal, else png) on a script in a temporary folder that is always removed; images are
// written under temporary names and renamed only when all are done, so a failure leaves no
// partial file. Prints "wrote PATH" lines to `log` when it is not NULL.
int plot_run(FILE *log, const plot_opts *o, ht_error *e);

#endif
