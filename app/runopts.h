// The options of `hetrain train` that a checkpoint keeps, in one table: each option's name, its
// key in the checkpoint's metadata, what a resume does with it, and its value as text both
// ways. Checkpoints are written and resumed from this table alone.
#ifndef HETRAIN_RUNOPTS_H
#define HETRAIN_RUNOPTS_H

#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "core/common.h"
#include "app/train.h"

// One entry per option; train_opts.given has bit RUN_OPT_GIVEN(id) set when it was given.
typedef enum run_opt_id {
    // What the run computes.
    RUN_OPT_MODEL, RUN_OPT_DATA, RUN_OPT_TRAIN, RUN_OPT_TEST, RUN_OPT_TRAIN_LABELS,
    RUN_OPT_TEST_LABELS, RUN_OPT_LAYOUT, RUN_OPT_CIFAR_LABELS, RUN_OPT_AUGMENT, RUN_OPT_LIMIT,
    RUN_OPT_EPOCHS, RUN_OPT_BATCH, RUN_OPT_LR, RUN_OPT_OPTIMIZER, RUN_OPT_LR_SCHEDULE,
    RUN_OPT_WEIGHT_DECAY, RUN_OPT_WD_MODE, RUN_OPT_VAL_SPLIT, RUN_OPT_SEED, RUN_OPT_BN_GROUP,
    RUN_OPT_COMM_DTYPE, RUN_OPT_VALIDATION, RUN_OPT_IMAGE_SIZE, RUN_OPT_CROP_ASPECT,
    RUN_OPT_STRICT_IMAGES, RUN_OPT_FREEZE, RUN_OPT_TRAINABLE_FROM, RUN_OPT_BY_NAME,
    RUN_OPT_SKIP_MISMATCH, RUN_OPT_EARLY_STOPPING, RUN_OPT_MONITOR, RUN_OPT_MIN_DELTA,
    RUN_OPT_RESTORE_BEST, RUN_OPT_REDUCE_LR, RUN_OPT_SAVE_BEST, RUN_OPT_PRECISION,
    // Where and how it runs, and what else it writes.
    RUN_OPT_DEVICES, RUN_OPT_MEM_LIMIT, RUN_OPT_BALANCE, RUN_OPT_REBALANCE, RUN_OPT_DEVICE_TIMEOUT,
    RUN_OPT_ON_NAN, RUN_OPT_SELF_CHECK, RUN_OPT_CONV_ALGO, RUN_OPT_SAVE, RUN_OPT_CHECKPOINT_EVERY,
    RUN_OPT_PROFILE, RUN_OPT_EXPORT_ONNX, RUN_OPT_TENSORBOARD,
    // Which files the run has.
    RUN_OPT_LOAD, RUN_OPT_OUT, RUN_OPT_NAME,
    RUN_OPT_COUNT
} run_opt_id;

#define RUN_OPT_GIVEN(id) ((uint64_t)1 << (id))
_Static_assert(RUN_OPT_COUNT <= 64, "train_opts.given holds a bit per option");

// What --resume does with an option.
typedef enum run_opt_kind {
    RUN_OPT_DEFINES, // the checkpoint's; the same value given again is fine, another is refused
    RUN_OPT_KEPT,    // the checkpoint's, unless given anew: then the new value, noted in the log
    RUN_OPT_FILES,   // refused with --resume: the checkpoint belongs to its run's files
} run_opt_kind;

typedef struct run_opt {
    const char *option; // "--epochs"
    const char *key;    // in the checkpoint's metadata; NULL: not kept (RUN_OPT_FILES)
    run_opt_kind kind;
} run_opt;

extern const run_opt run_opts[RUN_OPT_COUNT];
// The names --weight-decay-mode (wd_mode's order) and --comm-dtype (comm_bf16 0, 1) take,
// NULL-terminated, as the command line parses them and a checkpoint keeps them.
extern const char *const run_wd_modes[];
extern const char *const run_comm_dtypes[];

// Option id's value in o as the checkpoint keeps it ("1000", "0.0500000007", "cosine",
// "cpu:1 cl:0.0"), into buf.
void run_opt_text(const train_opts *o, run_opt_id id, char *buf, size_t len);

// Room for the values run_opts_resume sets that point at text of their own.
typedef struct run_opts_store {
    char devices[TRAIN_DEVICES_BY_MAX * 128];
    char lr_schedule[64];
} run_opts_store;

// The options of the run checkpoint c continues, from the options given with --resume: every
// DEFINES and KEPT option the checkpoint's (string values point into c, so c outlives *r),
// except a KEPT one given anew, which stays as given and is listed in notes ("--save b.st in
// place of the run's a.st; ..."; "" when none). An option the checkpoint has no key for (one
// written before the option existed) keeps its default, or the value given. -1 with e, naming
// the option, when a DEFINES option is given with another value or a FILES option is given.
int run_opts_resume(const train_opts *given, const checkpoint *c, const char *path, train_opts *r,
                    run_opts_store *st, char *notes, size_t len, ht_error *e);

// The KEPT options of o that differ from their defaults, as a command line would give them
// ("--devices cpu:1,cpu:1@2 --balance static --save w.st --profile"), for the resume's log.
void run_opts_kept_cli(const train_opts *o, char *buf, size_t len);

#endif
