// OpenCL plumbing shared by the OpenCL device, `hetrain devices` and the tests: error names,
// platform/device discovery, kernel sources (files or the embedded copy), and program builds
// with an on-disk binary cache. OpenCL 1.2 host API only.
#ifndef HETRAIN_CL_UTIL_H
#define HETRAIN_CL_UTIL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>

#include "core/common.h"

// "CL_OUT_OF_RESOURCES" for -5; "CL_UNKNOWN_ERROR(-1234)" style (static buffer) otherwise.
const char *ocl_error_name(cl_int err);

// Fills e with "CALL: ERRNAME on DEVICE" and returns -1. device may be NULL. Also records err
// as this thread's last OpenCL error (see ocl_last_error).
int ocl_fail(ht_error *e, const char *call, cl_int err, const char *device);

// The error code of this thread's last ocl_fail (or ocl_note_error), CL_SUCCESS after
// ocl_clear_error: lets a caller tell "out of memory" from other failures without parsing text.
cl_int ocl_last_error(void);
void ocl_note_error(cl_int err);
void ocl_clear_error(void);

typedef struct ocl_dev_info {
    cl_platform_id platform;
    cl_device_id device;
    int p, d;              // platform and device index: selected as "cl:P.D"
    char spec[16];         // "cl:P.D"
    const char *type;      // "gpu", "cpu", "accelerator", "custom"
    char platform_name[128];
    char vendor[128];
    char name[256];
    char driver[128];      // CL_DRIVER_VERSION
    char version[128];     // CL_DEVICE_VERSION
    char c_version[64];    // CL_DEVICE_OPENCL_C_VERSION
    unsigned compute_units;
    unsigned clock_mhz;
    uint64_t global_mem;
    uint64_t max_alloc;
    uint64_t local_mem;    // CL_DEVICE_LOCAL_MEM_SIZE
    size_t max_wg;         // CL_DEVICE_MAX_WORK_GROUP_SIZE
} ocl_dev_info;

// Every device of every platform, platforms and devices in the ICD loader's order. No platform
// at all (CL_PLATFORM_NOT_FOUND_KHR, or zero platforms) is not an error: *n = 0, returns 0.
int ocl_enumerate(ocl_dev_info **devs, int *n, ht_error *e);

// Number of OpenCL platforms (0 when the loader finds none, which is not an error).
int ocl_platform_count(cl_uint *np, ht_error *e);

// The kernel sources, kernels/*.cl concatenated in name order, from the first of: the folder
// in $HETRAIN_KERNELS; <exe dir>/../share/hetrain/kernels; <exe dir>/kernels;
// <exe dir>/../kernels; the source tree's kernels/ (HT_SOURCE_DIR); else the copy embedded at
// build time. Returns a malloc'd string; origin (may be NULL) receives the folder or
// "embedded". Programs are built from it after a prelude the host generates from its own
// definitions (the act family's act_fn enum, layer_kinds.h).
char *ocl_kernel_source(char *origin, size_t origin_len, ht_error *e);

// Folder of the program-binary cache: NULL resets to the default ($XDG_CACHE_HOME/hetrain,
// else $HOME/.cache/hetrain); "" turns the cache off. Set once, before devices are opened.
void ocl_set_cache_dir(const char *dir);

// The cache folder now in force into out: "" when the cache is off.
void ocl_cache_dir(char *out, size_t cap);

// FNV-1a over s and its NUL, continuing from h (start from OCL_HASH_INIT): the cache keys.
#define OCL_HASH_INIT 0xcbf29ce484222325ULL
uint64_t ocl_hash(uint64_t h, const char *s);

// "<dir>/<device name, [A-Za-z0-9._-] kept, other runs as one '_'>-<h, 16 hex digits><ext>": the
// name of a file of the caches (compiled programs, tuning) for dev.
void ocl_cache_file(char *out, size_t cap, const char *dir, const ocl_dev_info *dev, uint64_t h,
                    const char *ext);


// A device's context and built program, created on first use and shared by every later
// caller in the process (programs are built once per device per process). The build first
// looks in the cache (key: hash of device name, platform, driver version, source and options);
// a miss builds from source and stores the binary. *from_cache tells which happened. A build
// failure's message names the device and carries the build log's first lines.
int ocl_device_runtime(const ocl_dev_info *dev, cl_context *ctx, cl_program *prog, int *from_cache,
                      ht_error *e);

// Releases every shared context/program (at exit; safe to call when none exist). Callers go
// through ocl_blas_release_all, which first empties CLBlast's caches of them.
void ocl_runtime_release_all(void);

// Counters for tests: programs built from source, and loaded from the cache, in this process.
int ocl_builds_from_source(void);
int ocl_builds_from_cache(void);

#endif
