// The step engine: scatter a batch over the devices by the shard plan, run every shard on its
// own thread, reduce the gradient sums in fixed device order, update on the host, and
// broadcast the new parameters. A device that fails (an error, a wrong self-check, no answer
// within the timeout) is dropped and its share of the step is run again on the others.
#ifndef HETRAIN_ENGINE_H
#define HETRAIN_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "common.h"
#include "data.h"
#include "device.h"
#include "fault.h"
#include "model.h"
#include "optim.h"
#include "plan.h"

typedef struct engine_slot engine_slot;


typedef struct step_stats {
    double wall_s;   // the whole step
    double host_s;   // host reduce + update, plus the slowest broadcast
    double wait_s;   // summed time devices waited for the slowest
    double busy_s[HT_MAX_DEVICES]; // per device: broadcast + gather + compute
    int share[HT_MAX_DEVICES];     // per device: samples (re-runs of failed shares included)
    int skipped;     // the update was skipped (non-finite values, --on-nan skip)
} step_stats;

// How device capacities are kept: as given, or measured. Measured: each device's step time is
// modelled as t = a + b*n for a shard of n samples (a: launches, transfers, fixed costs; b: per
// sample), fitted by least squares over recent steps with exponential forgetting; the shares
// that make every device finish together are then n_d = (T - a_d) / b_d with sum n_d = B. A
// pure rate model (a = 0) wastes time whenever a slow device's fixed costs matter.
typedef enum balance_mode { BALANCE_AUTO, BALANCE_STATIC } balance_mode;

#define ENGINE_FORGET 0.85        // weight kept by older steps at each new one
#define ENGINE_REPLAN_GAIN 0.03   // re-plan only for a predicted step this much faster
#define ENGINE_MIN_SHARE 0.005    // a device keeps at least this fraction of the largest capacity
#define ENGINE_PROBE_EVERY 20     // steps between probes of devices the plan gives no samples
// The self-check compares a device's probe gradient with the CPU's tensor by tensor (relative
// L2). The output layer's gradient is made of forward values alone, so only rounding separates
// two sound devices there (measured <= 1.2e-6 with PoCL generating plain x86-64 code). Below
// it, a ReLU input or a max-pool pair within rounding of its branch can send one sample's
// gradient another way on each side (measured 2.8e-3 in conv2.bias over an 8-sample probe),
// so those layers get room; a device computing wrong values misses either by far (a gradient
// 1.5x too large: 0.5). Per-sample losses are forward values too.
#define ENGINE_SELF_CHECK_TOL_OUT 1e-4
#define ENGINE_SELF_CHECK_TOL_BRANCH 5e-2
#define ENGINE_SELF_CHECK_TOL_LOSS 1e-3 // absolute, per sample
#define ENGINE_DEFAULT_TIMEOUT 600.0 // seconds a device may take for one shard

typedef struct engine {
    const model *m;
    device *devs;
    int n_devs;
    int max_batch;
    uint64_t seed;
    float *params;   // master parameters (n_params), shared with the workers through the hub
    float *grad;     // reduced mean gradient of the last step (n_params)
    optim opt;
    shard_plan plan; // over the active devices, for plan.len positions; remade when needed
    int plan_dev[HT_MAX_DEVICES]; // plan index -> device index
    engine_slot *slots;
    int *orphans;    // batch positions whose device failed, to run again (max_batch)
    int n_orphans;
    long step;       // training steps done (faults count these)
    double timeout_s;
    int nan_stop;    // non-finite values stop the run instead of skipping the step
    fault_plan faults;
    char events[4096]; // what happened since engine_take_events, one line each
    char last_failure[600]; // the last device failure, for the error when none is left
    // Capacity.
    balance_mode balance;
    int rebalance;   // re-plan every this many steps (auto)
    int since;       // steps since the last re-plan
    // Per device, forgetting sums of 1, n, t, n*n, n*t over observed shards (the fit's input).
    double fit[HT_MAX_DEVICES][5];
    // Worker threads, one per device, and what they share with the engine (engine.c).
    pthread_t *threads;
    struct engine_hub *hub;
    // The task being dispatched.
    int task_kind;
    const dataset *task_ds;
    const uint32_t *task_idx; // training: the sample of each batch position
    int task_start;           // inference: the sample of position 0
    uint32_t task_epoch;
} engine;

// Worker threads that engines gave up on (a device that stopped answering) and that are still
// inside their device. While there are any, the process must not run library destructors
// under them: exit with _exit after closing the files.
int engine_stray_workers(void);
// Waits up to `seconds` for such workers to come back; returns how many are still out. Once
// it returns 0, everything they used (the model their devices read) may be freed.
int engine_wait_strays(double seconds);

// Takes the devices (not owned; keep them open until engine_free) and the initial parameters
// (copied). Faults to inject come from $HETRAIN_FAULT (see fault.h).
int engine_init(engine *g, const model *m, device *devs, int n_devs, const float *params,
                const train_setup *s, int max_batch, uint64_t seed, ht_error *e);
void engine_free(engine *g);

// Sets how capacities are kept (engine_init's default: static; rebalance >= 1).
void engine_set_balance(engine *g, balance_mode mode, int rebalance);
// Seconds a device may take for one shard before it is declared hung and dropped.
void engine_set_timeout(engine *g, double seconds);
// Non-finite loss or gradient from a device: stop (1) or skip the step (0, default).
void engine_set_nan_stop(engine *g, int stop);

// Runs one forward/backward of samples idx[0..n) on every device and compares each with the
// CPU reference (net.c); a device off by more than the ENGINE_SELF_CHECK_TOL_* above is
// dropped, with an event naming it, its worst tensor and element. Fails only when no device is
// left.
int engine_self_check(engine *g, const dataset *ds, const uint32_t *idx, int n, ht_error *e);

// Measures every device's time on shards of the batch idx[0..B) (no update) and sets the
// capacities from the fitted time model. Only meaningful with several devices.
int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e);

// Drops device d from now on, as a failure would (used by tests to build the reference run).
void engine_drop_device(engine *g, int d);

// The device capacities now in use (n_devs values; 0 for a dropped device).
void engine_capacities(const engine *g, double *w);
// Devices still taking part.
int engine_active(const engine *g);
// The events since the last call (lines, possibly ""); valid until the next engine call.
const char *engine_take_events(engine *g);

// One training step on samples idx[0..B) of ds (global sample ids = the indices). Writes each
// position's loss and prediction (batch order) when loss/pred are not NULL.
int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e);

// Class probabilities for samples [start, start+n) of ds into probs (n, n_classes).
int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e);

#endif
