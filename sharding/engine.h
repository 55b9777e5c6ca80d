// The step engine: scatter a batch over the devices by the shard plan, run every shard on its
// own thread, reduce the gradient sums in fixed device order, update on the host, and
// broadcast the new parameters to every device. The data of a step flows one way: loader ->
// planner -> devices -> reduce -> update -> broadcast. A device that fails (an error, a wrong
// self-check, no answer within the timeout) is dropped and its share of the step is run again
// on the others.
#ifndef HETRAIN_ENGINE_H
#define HETRAIN_ENGINE_H

#include <stdint.h>

#include "common.h"
#include "data.h"
#include "device.h"
#include "model.h"

typedef struct engine engine; // opaque (engine.c)

typedef struct step_stats {
    double wall_s;   // the whole step
    double host_s;   // host update + broadcast (update_s + bcast_s)
    double wait_s;   // summed time devices waited for the slowest
    double compute_s; // the slowest device's compute time in the step's pass
    double busy_s[HT_MAX_DEVICES]; // per device: compute + broadcast
    int share[HT_MAX_DEVICES];     // per device: samples (re-runs of failed shares included)
    int skipped;     // the update was skipped (non-finite values, --on-nan skip)
    // The step's wall time in phases, one after the other: prep_s + pass_s + reduce_s +
    // update_s + bcast_s = wall_s (a re-fit of the capacities comes after wall_s).
    double prep_s;   // host: planning, and gathering each device's samples into its buffers
    double pass_s;   // the devices' passes: from waking them until the last one answered
                     // (re-runs of a failed device's samples included)
    double reduce_s; // host: adding up the gradient sums and outputs (over ranks too)
    double update_s; // host: the optimiser
    double bcast_s;  // host: the new parameters to every device (their set_params)
} step_stats;

// How device capacities are kept: as given (--devices @W), or measured (balance.h) at a
// calibration before training and re-fitted every few steps.
typedef enum balance_mode { BALANCE_AUTO, BALANCE_STATIC } balance_mode;

// The self-check compares a device's probe gradient with the reference device's tensor by
// tensor (relative L2). The output layer's gradient is made of forward values alone, so only
// rounding separates two sound devices there (measured <= 1.2e-6 with PoCL generating plain
// x86-64 code). Below it, a ReLU input or a max-pool pair within rounding of its branch can send
// one sample's gradient another way on each side (measured 2.8e-3 in conv2.bias over an
// 8-sample probe), so those layers get room; a device computing wrong values misses either by
// far (a gradient 1.5x too large: 0.5). Per-sample losses are forward values too.
#define ENGINE_SELF_CHECK_TOL_OUT 1e-4
#define ENGINE_SELF_CHECK_TOL_BRANCH 5e-2
#define ENGINE_SELF_CHECK_TOL_LOSS 1e-3 // absolute, per sample
#define ENGINE_DEFAULT_TIMEOUT 600.0 // seconds a device may take for one shard

// Opens an engine over devices (not owned; keep them open until engine_close) with a copy of
// the initial parameters, which it broadcasts to every device before returning (a device that
// fails to take them is dropped, with an event). The optimiser comes from s; batches hold at
// most max_batch samples; seed keys the dropout masks.
int engine_open(engine **out, const model *m, device *devs, int n_devs, const float *params,
                const train_setup *s, int max_batch, uint64_t seed, ht_error *e);
void engine_close(engine *g);

// Sets how capacities are kept (default: static; rebalance >= 1 steps between re-fits).
void engine_set_balance(engine *g, balance_mode mode, int rebalance);
// Seconds a device may take for one shard before it is declared hung and dropped.
void engine_set_timeout(engine *g, double seconds);
// Non-finite loss or gradient from a device: stop (1) or skip the step (0, default).
void engine_set_nan_stop(engine *g, int stop);
// Augments training steps' samples (data.h; NULL: none, the default) as the engine gathers
// them for the devices, keyed by (the engine's seed, the step's epoch, sample id): the same
// sample gets the same augmentation on any device or rank. Self-check, calibration and
// inference see the samples as they are.
void engine_set_augment(engine *g, const data_augment *a);
// Whether training steps span every rank of the job (ranks.h): one plan over every rank's
// devices, gradient sums added in rank order, the same update everywhere. Default: on under
// mpirun with more than one rank.
void engine_span_ranks(engine *g, int on);

// A flag the job sets to stop (on a signal), and whether to stop now. Alone: the flag itself.
// Over several ranks the flag travels with each step's reduction and engine_stopping says
// whether any rank's was set at the last step, so every rank stops after the same step (a
// rank that stopped alone would leave the others waiting for it).
void engine_watch_stop(engine *g, const volatile int *flag);
int engine_stopping(const engine *g);

// The master parameters (n_params), as of the last update.
const float *engine_params(const engine *g);
// Replaces the master parameters and broadcasts them (the optimiser state stays).
int engine_set_params(engine *g, const float *params, ht_error *e);
// The reduced mean gradient of the last step (n_params), made when asked for (the update takes
// the sum and 1/B); valid until the next training pass.
const float *engine_grad(engine *g);

// What an engine has learned beyond its parameters, for a checkpoint: with the parameters
// and the optimiser's moments (engine_moments) it continues a run exactly where it stopped.
typedef struct engine_state {
    long step;      // training steps done
    long optim_t;   // optimiser updates done (the lr decay and Adam's bias correction use it)
    int since;      // steps since the last re-fit of the capacities
    int n_devs;     // the devices the capacities and fits below are for, in engine order
    double capacity[HT_MAX_DEVICES]; // 0 for a dropped device
    double fit[HT_MAX_DEVICES][5];   // balance.h's sums
} engine_state;

void engine_get_state(const engine *g, engine_state *st);
// The optimiser's moment buffers (n_params floats each): SGD's velocity as m and v NULL, or
// Adam's first and second moments.
void engine_moments(const engine *g, const float **m, const float **v);
// The learning-rate schedule's factor for the following steps (optim_set_lr_factor), and the
// rate the next step will use (optim_lr).
void engine_set_lr_factor(engine *g, double f);
float engine_lr(const engine *g);
// Restores what engine_get_state and engine_moments gave, and the parameters (broadcast). m
// and v must match the optimiser's (v NULL for SGD). The capacities and fits are taken only
// when st->n_devs is this engine's device count (the caller checks the devices are the same);
// otherwise the engine keeps its own (a run resumed on other devices balances afresh).
int engine_restore(engine *g, const engine_state *st, const float *params, const float *m,
                   const float *v, ht_error *e);

// Runs one forward/backward of samples idx[0..n) on every device and on `ref` (a device the
// engine does not use, e.g. a single-threaded native CPU device) and compares them; a device
// off by more than the ENGINE_SELF_CHECK_TOL_* above is dropped, with an event naming it, its
// worst tensor and element. Fails only when no device is left.
int engine_self_check(engine *g, device *ref, const dataset *ds, const uint32_t *idx, int n,
                      ht_error *e);

// Measures every device's time on shards of the batch idx[0..B) (no update) and sets the
// capacities from the fitted time model. Only meaningful with several devices: returns 1 when
// it calibrated, 0 when there was one device. Over several ranks every rank calls it, and the
// capacities are fitted over every rank's devices together.
int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e);

// Drops device d from now on, as a failure would (used by tests to build the reference run).
void engine_drop_device(engine *g, int d);

// The device capacities now in use (n_devs values; 0 for a dropped device).
void engine_capacities(const engine *g, double *cap);
// Devices still taking part.
int engine_active(const engine *g);
// The events since the last call (lines, possibly ""); valid until the next engine call.
const char *engine_take_events(engine *g);

// One training step on samples idx[0..B) of ds (global sample ids = the indices). Writes each
// position's loss and prediction (batch order) when loss/pred are not NULL.
int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e);

// Class probabilities for samples [start, start+n) of ds into probs (n, n_classes). Over
// several ranks every rank calls it with the same samples; each computes its share of them
// and every rank gets all the rows.
int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e);

// Worker threads that engines gave up on (a device that stopped answering) and that are still
// inside their device. While there are any, the process must not run library destructors
// under them: exit with _exit after closing the files.
int engine_stray_workers(void);
// Waits up to `seconds` for such workers to come back; returns how many are still out. Once
// it returns 0, everything they used (the model their devices read) may be freed.
int engine_wait_strays(double seconds);

#endif
