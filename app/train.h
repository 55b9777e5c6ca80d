// The training job behind `hetrain train` and `hetrain predict`: data, model, devices, epochs,
// validation, test evaluation and the run's files.
#ifndef HETRAIN_TRAIN_H
#define HETRAIN_TRAIN_H

#include <stdint.h>

#include "core/common.h"

#define TRAIN_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define TRAIN_DEFAULT_MODEL "cnn2d_3layer_fullconnected_3layer"
#define TRAIN_DEFAULT_REBALANCE 5
#define TRAIN_SELF_CHECK_SAMPLES 8

#define TRAIN_DEVICES_BY_MAX 16

// How device capacities are kept: as given (--devices @W), or measured at a calibration before
// training and re-fitted every few steps (engine_config.rebalance).
typedef enum balance_mode { BALANCE_AUTO, BALANCE_STATIC } balance_mode;

typedef struct train_opts {
    const char *model;     // preset name or config path
    const char *data_dir;  // IDX or CIFAR folder (default TRAIN_DEFAULT_DATA) unless train_csv
    const char *train_csv; // a file: Kaggle CSV, CIFAR .bin, NumPy .npy or .npz
    const char *test_csv;  // likewise
    const char *train_labels; // labels .npy of a .npy train_csv
    const char *test_labels;  // labels .npy of a .npy test_csv (optional)
    // Image folders (data_images.h): train_csv or test_csv a folder of class folders, and the
    // validation set as one (validation; NULL: val_split's share of the training set);
    // image_size "HxW" as given (NULL: the model's input), crop_aspect Keras's
    // crop_to_aspect_ratio, strict_images a broken file an error (1) or skipped.
    const char *validation;
    const char *image_size;
    int crop_aspect, strict_images;
    // Fine-tuning: --load by layer name (partial.h), layers of other shapes left
    // (skip_mismatch); layers frozen by name (freeze: "a,b") or all before one (trainable_from).
    int by_name, skip_mismatch;
    const char *freeze, *trainable_from;
    // Keras's callbacks (watch.h): EarlyStopping's patience (0: off), monitor (NULL: val_loss),
    // min_delta and restore_best_weights; ReduceLROnPlateau's "FACTOR[,PATIENCE[,MIN_LR]]"
    // (NULL: off); ModelCheckpoint's save_best_only file (NULL: none).
    int early_stopping;
    const char *monitor;
    float min_delta;
    int restore_best;
    const char *reduce_lr, *save_best;
    const char *export_onnx; // the trained model as ONNX at the end (onnx.h; NULL: none)
    const char *tensorboard; // TensorBoard event files under this folder (job_tb.c; NULL: none)
    int layout;            // data_layout of 4-D NumPy images; -1: not given (auto)
    int coarse;            // CIFAR-100's coarse labels: 1; fine: 0; -1: not given (fine)
    const char *augment;   // --augment spec (data_augment_parse); NULL: none
    int epochs;            // 0: the model's default
    int batch;             // 0: the model's default
    const char *optimizer; // --optimizer spec (optim.h's optimizer_parse); NULL: the model's
    float lr;              // < 0: the model's default (or --optimizer's)
    float val_split;       // < 0: the model's default
    const char *lr_schedule; // NULL: the model's (optim.h's lr_schedule_parse takes it)
    float weight_decay;    // < 0: the model's default
    int wd_mode;           // wd_mode (model.h); -1: the model's
    int bn_group;          // samples per group of batchnorm statistics; 0: the model's
    uint64_t seed;
    int limit;             // 0: all training samples
    const char *devices;   // NULL or "auto": every OpenCL GPU plus a CPU worker
    const char *devices_by[TRAIN_DEVICES_BY_MAX]; // --devices as given: [KEY=]SPEC, KEY a host
    int n_devices_by;                             // name or a rank number (under mpirun)
    uint64_t mem_limit;    // bytes per device without its own ':mem=' (0: what it reports)
    int conv_algo;         // conv_algo (model.h) of the CPU devices; -1: the model's setup
    int no_self_check;     // skip the check of every device against the CPU before training
    int nan_stop;          // a non-finite loss/gradient stops the run (else the step is skipped)
    int comm_bf16;         // --comm-dtype bf16: the gradient travels between ranks as bfloat16
    int precision;         // --precision: precision (model.h) of the CPU devices' GEMMs
    double device_timeout; // seconds a device may take for a shard (0: the default)
    int balance;           // BALANCE_AUTO (default, 0) or BALANCE_STATIC
    int rebalance;         // re-weigh every N steps under auto balance (0: default)
    const char *out_dir;   // default "results"
    const char *run_name;  // default "<model>-<timestamp>"
    const char *save;      // safetensors to write at the end
    const char *load;      // safetensors to start from
    int progress;          // -1: when stderr is a terminal; 0 never; 1 always
    int quiet;             // no per-epoch lines on stdout
    const char *command_line; // for the run log
    int checkpoint_every;  // steps between checkpoints (0: at each epoch's end and a stop only)
    int profile;           // per-layer profile of every device at the end (<name>.profile.csv)
    const char *resume;    // a run prefix or .ckpt to continue
    uint64_t given;        // RUN_OPT_GIVEN(id) of the options given (runopts.h)
} train_opts;

// Trains; returns 0, or -1 with e filled (results written so far are kept).
int train_run(const train_opts *o, ht_error *e);

typedef struct predict_opts {
    const char *model;
    const char *load;      // required
    const char *data_dir;  // uses its test files (IDX t10k-, CIFAR test_batch.bin/test.bin)
    const char *test_csv;  // a file, as train_opts' test_csv
    const char *test_labels;
    const char *image_size; // as train_opts, for a test folder
    int crop_aspect, strict_images;
    int layout;            // as train_opts
    int coarse;
    const char *out;       // predictions CSV path (required)
    const char *devices;   // as for train_opts (a ':mem=' per device still applies)
    int conv_algo;         // as for train_opts
    int limit;
    const char *scores;    // the network's outputs as a NumPy .npy (N, outputs) float32; NULL: none
} predict_opts;

int predict_run(const predict_opts *o, ht_error *e);

// `hetrain export`: a model and its weights as ONNX (onnx.h).
typedef struct export_opts {
    const char *model; // as predict's
    const char *load;  // required
    const char *onnx;  // required: the file to write (never overwritten)
} export_opts;

int export_run(const export_opts *o, ht_error *e);

// The job's model with params as ONNX at path: Keras's (N,H,W,C) input for a model read from
// Keras JSON (model_path ending in .json), else (N,C,H,W).
int export_onnx_model(const model *m, const float *params, const char *model_path,
                      const char *path, ht_error *e);

// Set from a signal handler to the signal's number: stop after the current step, write a
// checkpoint, keep what was written.
extern volatile int train_interrupted;

#endif
