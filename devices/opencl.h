// The OpenCL device (opencl.c): its open, and what only an OpenCL device has (its ops and its
// tuning), for the registry, the tuner and their tests.
#ifndef HETRAIN_OPENCL_H
#define HETRAIN_OPENCL_H

#include <stdint.h>

#include "core/common.h"
#include "devices/device.h"
#include "nn/model.h"

struct ocl_dev_info;
struct ocl_ops;
struct ocl_tuning;

int opencl_device_open(device *d, const struct ocl_dev_info *info, const model *m, int max_batch,
                       uint64_t mem_limit, ht_error *e);
// Whether item `it` (of any kind) names OpenCL device `info`: the one answer to "which OpenCL
// devices does this spec select", for opening, auto's core count and `hetrain tune`.
int opencl_item_names(const device_item *it, const struct ocl_dev_info *info);
// The ops of an OpenCL device (its kernels, queue, tuning and profile), for the tuner; NULL
// when d is not one.
struct ocl_ops *opencl_device_ops(device *d);
// The tuning an OpenCL device loaded when it opened; NULL when it has none (or d is not one).
const struct ocl_tuning *opencl_device_tuning(const device *d);

#endif
