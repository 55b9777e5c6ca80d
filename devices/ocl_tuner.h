// `hetrain tune` for one OpenCL device: finds the GEMM shapes the device calls for a model at a
// shard size (by running one shard), searches CLBlast configurations for each (starting from
// CLBlast's own, each result checked against OpenBLAS) and work-group sizes for our kernels,
// within a time budget, and merges what it found into the device's tuning file (ocl_tune.h),
// which later runs load by themselves.
#ifndef HETRAIN_OCL_TUNER_H
#define HETRAIN_OCL_TUNER_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "core/common.h"
#include "nn/model.h"
#include "devices/ocl_util.h"

typedef struct ocl_tuner_opts {
    const model *m;
    int batch;          // the shard to tune for; the device's micro-batch follows from it
    uint64_t mem_limit; // as for training (it sets the micro-batch); 0: none
    double budget_s;    // seconds for the device, running one shard included; the search stops
                        // starting configurations when the next would not fit (the shard runs
                        // and CLBlast's own configurations are always timed)
    FILE *progress;     // progress lines; NULL for none
} ocl_tuner_opts;

typedef struct ocl_tuner_result {
    char path[PATH_MAX + 128]; // the tuning file written
    int micro;                 // the device's micro-batch for the shard
    int n_shapes, n_timed;     // GEMM shapes of the shard; those timed within the budget
    int n_faster;              // shapes with a configuration faster than CLBlast's own
    int n_configs, n_rejected; // configurations tried; refused by CLBlast or with wrong results
    double gemm_own_s, gemm_tuned_s; // GEMM time of one shard: CLBlast's own, tuned
    int n_wg;                  // kernels given a work-group size
    double elapsed_s;
} ocl_tuner_result;

int ocl_tuner_run(const ocl_dev_info *dev, const ocl_tuner_opts *o, ocl_tuner_result *r,
                  ht_error *e);

#endif
