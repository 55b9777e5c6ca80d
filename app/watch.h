// Keras's training callbacks on hetrain's epochs: EarlyStopping (--early-stopping PATIENCE,
// --monitor, --min-delta, --restore-best-weights), ReduceLROnPlateau (--reduce-lr-on-plateau
// FACTOR[,PATIENCE[,MIN_LR]]) and ModelCheckpoint's save_best_only (--save-best FILE): what
// each epoch's metrics decide, the events they write to the metrics CSV, and what a checkpoint
// keeps of them so a resumed run decides the same.
#ifndef HETRAIN_WATCH_H
#define HETRAIN_WATCH_H

#include <stddef.h>

#include "core/common.h"

// The metric watched: Keras's names.
typedef enum watch_metric { WATCH_VAL_LOSS, WATCH_VAL_ACCURACY, WATCH_LOSS, WATCH_ACCURACY } watch_metric;
extern const char *const watch_metric_names[]; // "val_loss", ..., NULL

// The options (train_opts keeps them as given; watch_parse reads them).
typedef struct watch_opts {
    int patience;        // early stopping after this many epochs without improvement; 0: off
    watch_metric monitor;
    double min_delta;    // an improvement must exceed it (EarlyStopping's; default 0)
    int restore_best;    // at an early stop, the best epoch's weights
    double lr_factor;    // ReduceLROnPlateau: the rate times this (0: off)
    int lr_patience;     // after this many epochs without an improvement of 1e-4 (Keras's)
    double min_lr;       // never below
    const char *save_best; // the best epoch's weights written here (safetensors or Keras h5)
} watch_opts;

// Where the watching stands: what a checkpoint keeps (watch_meta_*).
typedef struct watch {
    double best, lr_best;   // the best value for early stopping and for the plateau (NAN: none)
    int best_epoch;         // 1-based; 0 none
    int wait, lr_wait;      // epochs since each improved
    double lr_scale;        // the plateau's product of factors (1: none)
    int stopped;            // early stopping ended the run after epochs_done
} watch;

#define WATCH_LR_MIN_DELTA 1e-4 // ReduceLROnPlateau's min_delta (Keras's default)

// Parses "FACTOR[,PATIENCE[,MIN_LR]]" (Keras's defaults 0.1, 10, 0) into o.
int watch_parse_plateau(watch_opts *o, const char *spec, ht_error *e);
// The name of a metric, or -1 when it is none of them.
int watch_metric_by_name(const char *name);

void watch_init(watch *w);

// An epoch's metrics (NaN where there are none) against the watch: its decisions, each with
// its event ("; "-joined into events, room len): improved (the best so far: save-best writes
// and restore-best keeps the weights), the rate's new scale, stop. lr is the rate the epoch
// ended at (before the plateau), base_lr the model's.
typedef struct watch_step {
    int improved;  // the early-stopping metric improved (or is the first)
    int lr_cut;    // lr_scale changed
    int stop;      // stop after this epoch
} watch_step;
watch_step watch_epoch(watch *w, const watch_opts *o, int epoch, double loss, double acc,
                       double vloss, double vacc, double base_lr, char *events, size_t len);

#endif
