// The train and predict jobs' own interface, shared by the files of app that make them up.
// From the bottom up (each calls only those above it in this list, and runopts.c):
//   job_data.c     the data sets a job loads, and whether they fit the model
//   job.c          preparing a job (model, data, weights, devices, engine) and freeing it;
//                  evaluating a data set
//   job_ranks.c    the job over every rank: device names, the agreement check, gathers, each
//                  rank's --devices
//   job_report.c   what a run writes as it goes: the log's header, events, the metrics CSV's
//                  header and each epoch's row and lines
//   job_ckpt.c     checkpoints: writing one, and resuming from one
//   job_profile.c  --profile: starting the devices' records, and the tables at the end
//   train.c        the epoch loop and train_run
//   predict.c      predict_run
#ifndef HETRAIN_JOB_H
#define HETRAIN_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "data/data.h"
#include "data/data_images.h"
#include "io/tfevents.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/model.h"
#include "app/report/profile_table.h"
#include "app/report/results.h"
#include "app/train.h"
#include "app/watch.h"

// Where the data comes from: a folder (IDX or CIFAR) or files, each with its labels file when
// it is a .npy.
typedef struct data_src {
    const char *dir, *train, *train_labels, *test, *test_labels;
    // A train or test path that is a folder holds class folders of images, read with img
    // (job_image_opts) into info[0] (training) and info[2] (test) of the job's.
    const data_images_opts *img;
    data_images_info *info;
} data_src;

// One train or predict job: what it loaded and opened, where training stands, and what it
// has written. Each group of fields is kept by the file named beside it.
typedef struct job {
    // What the job works with (job.c): the model, data, parameters, devices and engine.
    model m;
    dataset all, train, val, test;
    // What image folders gave (data_images.h): training, validation, test ("none": n 0).
    data_images_info images[3];
    // What --load --by-name left at its initial values (partial.h's lines; NULL: nothing).
    char *load_left;
    int n_load_left;
    // Keras's callbacks (watch.h): their options, where they stand (a checkpoint keeps it), and
    // the best epoch's parameters (--restore-best-weights; NULL otherwise).
    watch_opts wopts;
    watch watch;
    float *best_params;
    float *params;
    device *devs;
    int n_devs;
    engine *g;
    run_files rf;
    uint32_t *idx;
    float *loss;
    int32_t *pred;
    const char *conv_choices; // auto's decisions kept by the checkpoint being resumed, or NULL
    // Where training stands (train.c): whole epochs done, and steps done of the next one, with
    // that epoch's sums so far (a checkpoint keeps them, so a resumed epoch reports the same
    // row).
    int epochs_done, steps_into;
    float step_lr;          // the learning rate of the last step (before Adam's bias correction)
    double lsum, epoch_s;
    long correct, seen, counted;
    // The metrics CSV as written so far, header and rows (job_report.c), for checkpoints.
    char *metrics;
    size_t metrics_len, metrics_cap;
    int metrics_rows;
    int events_out;         // this rank prints its events (not --quiet)
    // TensorBoard (job_tb.c): rank 0's event files under --tensorboard's folder, its runs
    // train/ and validation/ (Keras's epoch_ scalars) and steps/ (a step's loss, rate, sync
    // and devices); tb_on 0: none.
    tfevents tb[3];
    int tb_on;
    // Checkpoints (job_ckpt.c).
    char ckpt_path[1200];
    int ckpt_warned;        // a failed checkpoint was reported (default checkpoints only)
    int ckpt_count;
    double ckpt_s;          // time spent writing checkpoints
    int resumed_caps;       // the capacities came from a checkpoint: no calibration
    // The job's devices over every rank, in the plan's order (rank, then device): this
    // process's specs alone, "r<rank>/<spec>" over several ranks (job_ranks.c's job_span).
    int n_all;
    char all_name[HT_MAX_DEVICES][80];
    int all_rank[HT_MAX_DEVICES], all_local[HT_MAX_DEVICES];
    char *ranks_text;       // each rank's host and devices, JOB_RANK_TEXT bytes a rank
    char ranks_warning[400]; // ranks of one host that share cores (job_span), or ""
    // --profile (job_profile.c): the devices keep records from the first step this process
    // runs; the steps' phases are summed here (prof_start: when the first of them began).
    int profiling;
    profile_steps prof_steps;
    double prof_start;
} job;

// Bytes of one rank's description: its host, then a line per device (spec, name, capacity,
// micro-batch), never cut short.
#define JOB_RANK_TEXT (256 + HT_MAX_DEVICES * (64 + 512 + 64))

// Per-epoch sums of the step engine's measurements.
typedef struct epoch_stats {
    double busy[HT_MAX_DEVICES];
    long share[HT_MAX_DEVICES];
    double wait, host;
    double compute;    // the slowest device's compute time, summed over the steps
    int skipped;
    char events[1024]; // this epoch's events for the metrics CSV, "; "-separated
} epoch_stats;

// job_data.c
// What the loaders need of the model (its classes and channels) and of the options.
data_opts job_data_opts(const model *m, int layout, int coarse);
// Loads the training set (when want_train) and the test set, if any, named by src. A training
// .npz brings its x_test/y_test as the test set when no --test is given.
int job_load_data(const data_src *src, const data_opts *dop, dataset *train, dataset *test,
                  int want_train, ht_error *e);
// How the model takes images from folders: its input's size (image_size "HxW" must match it;
// NULL: not given) and channels, pixels of 0..255 for a Keras JSON model (its Rescaling scales
// them, as Keras's pipeline hands them over), else 0..1 as from the other formats; decoded
// into the device cache folder's images/.
int job_image_opts(const model *m, const char *model_path, const char *image_size, int crop,
                   int strict, data_images_opts *img, ht_error *e);
// A folder of images (train, validation or test: which = 0, 1, 2) into d and j->images[which],
// with the classes of the training folder train_dir when it is one (else NULL); its skipped
// files named on stderr.
int job_load_images(job *j, int which, const char *dir, const char *train_dir,
                    const data_images_opts *img, dataset *d, ht_error *e);
// The test set's class names and files for the predictions file (predictions_write), when it
// came from a folder of images whose files are all there (no --limit); else NULL. The classes
// are the training folder's when the test set has none of its own.
const predictions_names *job_test_names(job *j);
// Sets m's class names from the weights file at path (Keras HDF5 or safetensors): 1 when it
// records them, 0 when not (m untouched), -1 with e.
int job_read_classes(model *m, const char *path, ht_error *e);
// The class names of a run: a folder's (im, when it has classes), else those the weights file
// `load` records (load may be NULL). A file recording other classes than the folder's is an
// error naming the first that differs.
int job_folder_classes(model *m, const data_images_info *im, const char *load, ht_error *e);
// m's classes against those a weights file or checkpoint (path) recorded, rec's: m takes them
// when it has none; when both have classes, the first that differs is an error naming path
// (worded for a resumed run's checkpoint when `resumed`).
int job_match_classes(model *m, const model *rec, const char *path, int resumed, ht_error *e);
// The data set must have the model's input shape and labels below its class count; `what`
// names it in the error.
int job_check_fits(const model *m, const dataset *d, const char *what, ht_error *e);

// job.c
// Everything before the first step: model, data, weights, devices, engine. Nothing is written.
int job_prepare(job *j, const train_opts *o, ht_error *e);
// Opens the devices of spec for batches of `batch` (fault-wrapped when $HETRAIN_FAULT names
// them), saying on stderr what any of them warned of.
int job_open_devices(job *j, const char *spec, int batch, uint64_t mem_limit, ht_error *e);
// Mean loss and accuracy over a labelled set, in chunks through the engine (pred may be NULL;
// loss and acc are NaN without labels or when a sample's output is not finite, *nonfinite,
// may be NULL, then names the first such sample, else -1). scores (NULL: none): every sample's
// outputs, d->n x classes.
int job_evaluate(engine *g, const model *m, int chunk, const dataset *d, double *loss,
                 double *acc, int32_t *pred, float *scores, int *nonfinite, ht_error *e);
// Frees the job itself too (it is on the heap: a device's context points at j->m).
void job_free(job *j);

// job_tb.c: --tensorboard. Opens the job's event files (rank 0; a resumed run opens new ones
// that start at the step and epoch it resumes from); a step's scalars (step counted over the
// run from 0, its loss with Keras's regularizer term); an epoch's (loss, accuracy, rate under
// train/; validation's loss and accuracy); closing. Each flushes what it wrote.
int job_tb_open(job *j, const char *dir, int resumed, ht_error *e);
int job_tb_step(job *j, long step, double loss, const step_stats *st, int B, ht_error *e);
int job_tb_epoch(job *j, int ep, double loss, double acc, double vloss, double vacc,
                 ht_error *e);
int job_tb_close(job *j, ht_error *e);

// job_ranks.c
// Names the job's devices over every rank (j->n_all, all_name...) and checks that every rank
// has rank 0's data, batch and weights. Every rank calls it at the same point.
int job_span(job *j, ht_error *e);
// Every rank's per-device values (w per device, local[d * w + i] for this rank's device d;
// local holds HT_MAX_DEVICES * w) in the job's device order, into out (n_all * w). Every rank
// calls it at the same point.
int job_gather(const job *j, const double *local, int w, double *out, ht_error *e);
// This rank's values out of a list in the job's device order (job_gather's inverse).
void job_pick(const job *j, const double *list, int w, double *local);
// The job's devices as a checkpoint names them: "cpu:1,cl:0.0", or over several ranks
// "r0/cpu:1,r1/cl:0.0".
void job_device_list(const job *j, char *buf, size_t len);
// This rank's --devices: the KEY=SPEC naming its rank, else the one naming its host, else a
// SPEC without a key. NULL (the default devices) when none applies; *bad with e when two
// SPECs without a key were given.
const char *job_devices_of_rank(const train_opts *o, ht_error *e, int *bad);

// job_report.c
// The run log's header: version, command, setup, data, devices of every rank, files.
void job_log_header(job *j, const train_opts *o);
// Logs what the engine reported (device failures, smaller micro-batches, skipped steps) and,
// with es, keeps a short form for the epoch's metrics row.
void job_drain_events(job *j, epoch_stats *es);
// Adds a step's measurements to the epoch's sums.
void epoch_stats_add(epoch_stats *es, const step_stats *st, int n_devs);
// Appends a line to the job's copy of the metrics CSV.
int job_metrics_keep(job *j, const char *line, ht_error *e);
// The metrics CSV header: Keras's CSVLogger columns, hetrain's timing, then per device of the
// job; over several ranks also per rank and the job's comm_s.
void job_metrics_header(char *buf, size_t len, const job *j);
// Writes epoch ep's metrics row and log lines (every rank calls it: it gathers their
// measurements; rank 0 writes); fails when a write to the run's files did.
int job_epoch_report(job *j, const train_opts *o, int ep, double loss, double acc,
                     double vloss, double vacc, double el, double train_s,
                     const epoch_stats *es, double comm_s, ht_error *e);

// job_ckpt.c
// Writes the job's checkpoint (es: the epoch's sums so far, NULL at an epoch's end). Returns 1
// when written, 0 when a default checkpoint failed (reported once; training goes on), -1 when
// an asked-for one failed.
int job_save_checkpoint(job *j, const train_opts *o, const epoch_stats *es, ht_error *e);
// The run a checkpoint continues: `arg` is the run's prefix (<out>/<name>) or its .ckpt.
int job_resume_paths(const char *arg, char *prefix, char *path, ht_error *e);
// Puts the job where its checkpoint (j->ckpt_path) left it: parameters, optimiser, engine state
// (capacities only on the same devices), position and sums (the epoch's into es), and the
// run's files (prefix) reopened.
int job_resume(job *j, const train_opts *o, const char *prefix, epoch_stats *es, ht_error *e);

// job_profile.c
// --profile: every device that can empties its record and starts filling it.
int job_profile_start(job *j, ht_error *e);
// --profile, at the end: every device's table, printed (unless --quiet) and logged, and all of
// them as <out>/<name>.profile.csv.
int job_profile_report(job *j, const train_opts *o, ht_error *e);

#endif
