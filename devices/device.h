// The device interface: everything the host knows about a device is this struct of function
// pointers plus a context. Implementations fill it with designated initialisers; the registry
// (registry.c) turns a spec such as "cpu" or "cpu:2" into an open device.
#ifndef HETRAIN_DEVICE_H
#define HETRAIN_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/common.h"
#include "nn/model.h"

// One shard of a training step: the samples a device must process, already contiguous.
typedef struct shard_job {
    const float *x;       // (n, C, H, W)
    const uint8_t *y;     // (n, m->label_width) labels
    const uint32_t *ids;  // (n) global sample ids: key the dropout masks
    int n;
    uint64_t seed;
    uint32_t epoch;
    long step;            // training step this shard belongs to, from 1; 0 for passes outside
                          // training (self-check, calibration, evaluation). Faults key on it.
    // NULL, or called by a device that can tell (the CPU device) as its backward pass
    // finishes layers: the shard's gradient sum from element `from` to n_trainable is final
    // (net_grad_ready_from), so the engine can start sending it during the pass.
    void (*grad_ready)(void *arg, size_t from);
    void *grad_ready_arg;
    // NULL, or called by a device whose dense weight gradients the host can compute again bit
    // for bit (device.factors) after each dense layer's backward pass of each micro-batch, in
    // order, before grad_ready reports the layer: the layer's input in (n, IN) and output
    // gradient dout (n, OUT) of those n samples (net_ws.factor).
    void (*factor)(void *arg, int layer, const float *in, const float *dout, int n);
    void *factor_arg;
} shard_job;

// What a device hands back for a shard.
typedef struct shard_result {
    float *grad_sum;  // (n_params) overwritten with the sum of the per-sample gradients
    float *loss;      // (n) per-sample cross-entropy
    int32_t *pred;    // (n) predicted class
    int micro;        // micro-batch size in use after the shard (it shrinks on out-of-memory)
    char note[256];   // what the device changed on its own, e.g. a smaller micro-batch; or ""
} shard_result;

// What a device measured of its own work while profiling (--profile): every train_shard and
// set_params since profile_start, nothing else (self-check, calibration and inference passes
// come before it or are not counted). time_s is wall time on the device's thread; the other
// three come from OpenCL event profiling (devices without it leave them 0): the device's own
// kernels, buffer writes/reads/copies, and CLBlast GEMMs (from just before the call to the end
// of its last kernel, so with CLBlast's padding and transposing kernels).
typedef struct device_prof_time {
    double time_s, kernel_s, transfer_s, gemm_s;
} device_prof_time;

typedef struct device_profile {
    int n_layers;            // the model's; layer[] holds 2 * n_layers entries
    int events;              // kernel_s, transfer_s and gemm_s are measured (OpenCL)
    device_prof_time *layer; // layer l's forward at [2 * l], its backward at [2 * l + 1]
    device_prof_time rest;   // train_shard outside the layers: inputs in, outputs and gradient
                             // sum out, zeroing, the micro-batch loop
    device_prof_time params; // set_params: taking the broadcast parameters
    long shards, samples;    // train_shard calls and their samples
} device_profile;

// A record for the model's layers, all zero; -1 with e when out of memory.
int device_profile_init(device_profile *p, int n_layers, ht_error *e);
void device_profile_free(device_profile *p);
// Zeroes every time and count (n_layers and events stay).
void device_profile_clear(device_profile *p);
// Copies src's times and counts into dst (both for the same n_layers).
void device_profile_copy(device_profile *dst, const device_profile *src);

typedef struct device_ops {
    // Copies the flat parameter buffer (model->n_params floats) to the device.
    int (*set_params)(void *ctx, const float *params, ht_error *e);
    // Optional (NULL: only set_params): reads the parameters from `params` itself from now on,
    // without a copy, until the next bind_params or set_params. The caller keeps the buffer
    // alive and writes it only while the device runs nothing; what it holds when a pass starts
    // are the parameters. Saves a device in host memory the copy of every broadcast.
    int (*bind_params)(void *ctx, const float *params, ht_error *e);
    // Forward + backward of a shard with dropout on, in micro-batches that fit the device.
    int (*train_shard)(void *ctx, const shard_job *job, shard_result *res, ht_error *e);
    // Inference (dropout off): probs (n, n_classes).
    int (*infer)(void *ctx, const float *x, int n, float *probs, ht_error *e);
    // After running out of memory: halves the micro-batch (again while even that does not
    // fit) and notes "WHY at micro-batch OLD; now NEW" in note. The next shard uses the new
    // size and reports it in shard_result.micro. Optional (NULL: the device cannot shrink).
    int (*shrink)(void *ctx, const char *why, char *note, size_t note_len, ht_error *e);
    void (*close)(void *ctx);
    // Profiling, optional (NULL: the device measures nothing; both or neither). profile_start
    // empties the device's record and starts filling it (an OpenCL device switches its queue
    // to event profiling); until then no pass costs more than a NULL test. Returns 1 when
    // profiling, 0 when the device cannot (a wrapper around one that cannot), -1 with e.
    // profile copies the record into out (device_profile_init'd for the model) while the
    // device is idle.
    int (*profile_start)(void *ctx, ht_error *e);
    void (*profile)(void *ctx, device_profile *out);
} device_ops;

// An open device, as it describes itself. What a user of it decides or learns later (its share
// of a batch now, a smaller micro-batch, that it stopped answering) is the user's to keep.
typedef struct device {
    const device_ops *ops; // NULL once disowned (device_disown)
    void *ctx;
    char spec[64];    // how the user selects it: "cpu", "cpu:2"
    char name[512];   // human description for logs
    double capacity;  // relative capacity as given (--devices SPEC@W, else 1): its share of a
                      // batch is capacity / sum
    int micro;        // samples per micro-batch at open
    int factors;      // reports shard_job.factor, and its dense weight gradients are
                      // dense_weight_grad's over its micro-batches, first beta 0, then 1 (the
                      // CPU device): the host can compute them again from the factors
    char detail[1024]; // what it decided at open, one line per item, for the run log; or ""
    char warning[512]; // what opening it found wrong and went on without (an unusable tuning
                       // cache), one line for the caller to show; "" when nothing
} device;

// Opens the devices named by a comma list of specs (see registry.c for the grammar), for model
// m and batches of up to max_batch samples; mem_limit (bytes, 0 = none) caps every device
// without its own ':mem=' limit. On success *devs is an array of *n open devices.
int device_open_list(device **devs, int *n, const char *specs, const model *m, int max_batch,
                     uint64_t mem_limit, ht_error *e);

// Starts profiling device d (device_ops.profile_start): 1 when it profiles from now on, 0 when
// it cannot (or was disowned), -1 with e.
int device_profile_start(device *d, ht_error *e);
// Fills out (device_profile_init'd for the model) with d's record and returns 1; 0 (out
// cleared) when d does not profile or was disowned.
int device_profile_get(const device *d, device_profile *out);

// "256M", "1G", "512K", "1048576" -> bytes; -1 when malformed or zero.
int64_t device_parse_bytes(const char *s);
// Closes every device of the list but the disowned ones, and frees the list.
void device_close_list(device *devs, int n);
// Gives up d's context for good: another thread holds it now (a worker an engine gave up on
// while it was inside the device, which closes it if it comes back). Nothing calls into d
// again; device_close_list leaves it alone.
void device_disown(device *d);

// One item of a --devices list, parsed without opening anything.
struct device_kind;
typedef struct device_item {
    const struct device_kind *kind; // whose item it is (device_kind.h)
    int sel;            // the kind's own variant: OpenCL's one device, cl:all or gpu (ocl_kind.c)
    char name[64];      // the item without its capacity and memory: "cpu:2", "cl:0.1"
    int threads;        // cpu:THREADS; 0 for a plain cpu (it takes the unclaimed cores)
    int platform, dev;  // cl:P.D
    double capacity;    // @W, else 1
    int64_t mem;        // bytes from :mem=SIZE, else -1
} device_item;

// Parses one item (see registry.c for the grammar); -1 with e when it is malformed.
int device_parse_item(const char *item, device_item *it, ht_error *e);

// `hetrain devices`: every device of every kind (device_kind.h), as aligned text or JSON.
int device_print_list(FILE *f, int json, ht_error *e);
// `hetrain tune --devices SPEC`: each kind that tunes, for the items of spec that are its own
// (a kind with nothing to tune says so). 0 done, 1 a device failed (said on stderr), 2 a wrong
// spec (said on stderr as a usage error of `hetrain tune`).
int device_tune(const char *spec, const model *m, int batch, uint64_t mem_limit, double budget_s,
                int quiet);
// --cache-dir: the folder every kind keeps its caches in (NULL: the default).
void device_set_cache_dir(const char *dir);
// That folder as the kinds resolve it (--cache-dir, else $XDG_CACHE_HOME/hetrain, else
// ~/.cache/hetrain), for other caches (image folders'); "" when no kind keeps one.
void device_cache_dir(char *out, size_t cap);
// Releases what the kinds hold for the whole process (compiled programs, library caches).
void device_release_all(void);
// The kinds' lines of `hetrain version` (where the OpenCL kernels are read from).
void device_print_about(FILE *f);

// The native CPU device (cpu.c); the OpenCL device's open is in opencl.h.
int cpu_device_open(device *d, const model *m, int threads, int max_batch, uint64_t mem_limit,
                    ht_error *e);

#endif
