// The tuning cache of an OpenCL device: for each GEMM shape hetrain calls on it, the CLBlast
// configuration `hetrain tune` (ocl_tuner.h) found fastest, and a work-group size for each of
// our kernels. One JSON file per device, platform, driver and CLBlast version, beside the
// compiled programs: <cache dir>/<device>-<16 hex digits>.tune.json. The OpenCL device loads it
// when it opens (opencl.c) and its ops use it (ocl_ops.c); a file that is corrupt or names
// another device, driver or CLBlast is never applied.
#ifndef HETRAIN_OCL_TUNE_H
#define HETRAIN_OCL_TUNE_H

#include <stddef.h>

#include "core/common.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_util.h"

#define OCL_TUNE_FORMAT "hetrain tuning 1"
#define OCL_TUNE_MAX_RUNS 16 // models and batches one file was tuned for
#define OCL_TUNE_MAX_WG 32   // kernels with a tuned work-group size

// One GEMM shape, as ocl_ops calls CLBlast: row-major C (m,n) = op(A) op(B) (+ C).
typedef struct ocl_gemm_shape {
    char ta, tb; // 'N' or 'T'
    size_t m, n, k;
} ocl_gemm_shape;

typedef struct ocl_tuned_gemm {
    ocl_gemm_shape shape;
    ocl_gemm_cfg cfg;
    double ms_default; // CLBlast's own configuration, as the tuner timed it
    double ms_tuned;   // this one
    char op[64];       // the op that calls it, e.g. "conv2d backward: dW += dtmp x col^T"
} ocl_tuned_gemm;

// A model and shard size the file was tuned for (shapes of other runs may differ).
typedef struct ocl_tuned_run {
    char model[64];
    int batch, micro;
    char date[32];
} ocl_tuned_run;

typedef struct ocl_tuning {
    // Whom the file is for: an OpenCL device's names, and the CLBlast it was built with.
    char device[256], platform[128], driver[128], version[128], clblast[32];
    ocl_tuned_run runs[OCL_TUNE_MAX_RUNS];
    int n_runs;
    ocl_tuned_gemm *gemm;
    int n_gemm, cap_gemm;
    struct {
        char kernel[32];
        unsigned local; // work-items per work-group, a power of two
    } wg[OCL_TUNE_MAX_WG];
    int n_wg;
    // The device class's starting point (ocl_tuning_class_defaults): for shapes the file has
    // nothing near, when has_class.
    int has_class;
    ocl_gemm_cfg class_cfg, class_long_k; // the second for k >= OCL_CLASS_LONG_K * max(m, n)
} ocl_tuning;

// An empty tuning for dev (this CLBlast).
void ocl_tuning_init(ocl_tuning *t, const ocl_dev_info *dev);
void ocl_tuning_free(ocl_tuning *t);

// Where dev's tuning file is under the cache folder in force; "" when the cache is off.
void ocl_tuning_path(char *out, size_t cap, const ocl_dev_info *dev);

// Reads the tuning file at path for dev. Returns 1 with *t filled; 0 when there is no file;
// -1 when there is one that must not be used: unreadable, not this format, for another device,
// platform, driver or CLBlast, or with parameters CLBlast does not take on this device. why
// then holds one line naming the file and what is wrong, and *t is empty. *t is initialised
// in every case (ocl_tuning_free it).
int ocl_tuning_read(ocl_tuning *t, const char *path, const ocl_dev_info *dev, char *why,
                    size_t why_len);

// ocl_tuning_read's parser (the fuzz harness's entry): the text of a tuning file, whose device,
// platform, driver and CLBlast must be those t was initialised with, whose configurations
// must name the parameters of own_direct / own_indirect (CLBlast's) and keep CLBlast's rules
// within local_mem and max_wg. Returns 0 with t filled, or -1 with why (one line, without the
// file's name) and t empty.
int ocl_tuning_parse(ocl_tuning *t, const char *text, size_t len, const ocl_kparams *own_direct,
                     const ocl_kparams *own_indirect, uint64_t local_mem, size_t max_wg,
                     char *why, size_t why_len);

// ocl_tuning_read of ocl_tuning_path; 0 when the cache is off.
int ocl_tuning_load(ocl_tuning *t, const ocl_dev_info *dev, char *why, size_t why_len);

// Writes t to path atomically (a temporary file beside it, renamed over it), making its folder.
int ocl_tuning_save(const ocl_tuning *t, const char *path, ht_error *e);

// Adds g, replacing the entry of the same shape. -1 only when out of memory.
int ocl_tuning_put_gemm(ocl_tuning *t, const ocl_tuned_gemm *g, ht_error *e);
// Sets a kernel's work-group size (0 removes it: the driver chooses).
void ocl_tuning_put_wg(ocl_tuning *t, const char *kernel, unsigned local);
// Records a model and shard size as tuned for, replacing an entry of the same model and batch.
void ocl_tuning_put_run(ocl_tuning *t, const char *model, int batch, int micro, const char *date);

// The configuration for a GEMM of shape s: the entry of that shape; else the entry with the
// same transposes and two of m, n, k equal whose third is nearest (the same layer at another
// micro-batch); else the class's starting point for a shape with m, n and k all at least
// OCL_CLASS_MIN_DIM; else NULL (CLBlast's own).
const ocl_gemm_cfg *ocl_tuning_find(const ocl_tuning *t, const ocl_gemm_shape *s);
#define OCL_CLASS_MIN_DIM 16
#define OCL_CLASS_LONG_K 16 // a weight gradient's shape: k (the batch's positions) this much longer

// Gives t the starting point of dev's class, so that a first run on a device nobody tuned is
// not left with CLBlast's configurations for a device it does not know: for a CPU device (PoCL,
// Mesa's llvmpipe, a vendor's CPU runtime), Xgemm with 8x8 work-groups, 64x64 tiles of
// vectors of 8 by 4, no local memory (what `hetrain tune` found on most large shapes of the
// reference networks on PoCL); for a weight gradient's long k, 64x32 tiles, k unrolled by 32,
// operands staged in local memory (what it found there; bench/README.md). own_indirect: CLBlast's Xgemm parameters on dev. Returns 1 when
// t has a class configuration now, 0 when dev's class has none (GPUs: CLBlast's database knows
// them) or it does not fit dev.
int ocl_tuning_class_defaults(ocl_tuning *t, const ocl_dev_info *dev,
                              const ocl_kparams *own_indirect);
// Whether dev's class has such a starting point (CPU devices).
int ocl_tuning_has_class(const ocl_dev_info *dev);

// A kernel's tuned work-group size, 0 when it has none.
unsigned ocl_tuning_wg(const ocl_tuning *t, const char *kernel);

// Whether cfg satisfies the constraints of CLBlast's kernels (its tuners' rules: tile sizes
// multiples of work-group and vector sizes, local memory and work-group size within the
// device's) and names exactly the parameters of `own` (CLBlast's set for that kernel). 1 if
// so; else 0 with why.
int ocl_gemm_cfg_valid(const ocl_gemm_cfg *cfg, const ocl_kparams *own, uint64_t local_mem,
                       size_t max_wg, char *why, size_t why_len);

// A parameter's value in p, or `dflt` when p has none of that name.
size_t ocl_kparam(const ocl_kparams *p, const char *name, size_t dflt);
// Sets a parameter (adding it in name order when new). -1 when p is full.
int ocl_kparam_set(ocl_kparams *p, const char *name, size_t value);

// "NT 48x288x156800"
void ocl_gemm_shape_str(char *out, size_t cap, const ocl_gemm_shape *s);

#endif
