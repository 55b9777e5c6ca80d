// The step engine: scatter a batch over the devices by the shard plan, run every shard on its
// own thread, reduce the gradient sums in fixed device order, update on the host, and
// broadcast the new parameters to every device. The data of a step flows one way: loader ->
// planner -> devices -> reduce -> update -> broadcast. A device that fails (an error, a wrong
// self-check, no answer within the timeout) is dropped and its share of the step is run again
// on the others.
#ifndef HETRAIN_ENGINE_H
#define HETRAIN_ENGINE_H

#include <stdint.h>

#include "core/common.h"
#include "data/data.h"
#include "devices/device.h"
#include "nn/model.h"

typedef struct engine engine; // opaque (engine_int.h)

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
// A parameter tensor's gradient is compared relative to at least this fraction of the whole
// gradient's L2 norm: a bias right before a batchnorm has a true gradient of zero (its values
// are rounding noise, ~1e-7 of the rest), and a tensor of a device computing wrong values is
// off by far more than this times the tolerance.
#define ENGINE_SELF_CHECK_FLOOR 1e-4
// The output layer's and the losses' bounds grow with the layers with weights past this many
// (engine_self_check_depth): rounding compounds through each, Winograd's more than a direct
// convolution's. Measured on ResNet50 (107 such layers, a factor 13.4): the output layer's
// gradient 3.3e-4 and the losses 8.1e-4 apart on a correct CPU device, against 1.3e-3 and 1.3e-2;
// a device computing wrong values still misses them by far (0.5).
#define ENGINE_SELF_CHECK_DEPTH 8
#define ENGINE_DEFAULT_TIMEOUT 600.0 // seconds a device may take for one shard

// What an engine runs on and how, filled with designated initialisers: the model, devices,
// parameters and max_batch are required; in every other field zero (or NULL) is the default.
typedef struct engine_config {
    const model *m;        // the network; its setup's optimiser and weight decay make the update
    device *devs;          // not owned: keep them open until engine_close
    int n_devs;
    const float *params;   // the initial parameters (n_params), copied and broadcast at open
    int max_batch;         // samples in a batch at most
    uint64_t seed;         // keys the dropout masks and the augmentation
    // Auto balance: every this many steps the capacities are fitted again to the steps'
    // measured times (engine_calibrate measures them before the first step). 0: the capacities
    // stay as the devices were given (static balance).
    int rebalance;
    double timeout_s;      // seconds a device may take for one shard before it is declared hung
                           // and dropped, from the first pass after engine_open's broadcast
                           // (which a driver's set-up may slow); 0: ENGINE_DEFAULT_TIMEOUT
    int nan_stop;          // a non-finite loss or gradient from a device stops the run (else,
                           // by default, the step's update is skipped)
    // Augments training steps' samples (data.h; zero: none) as the engine gathers them for the
    // devices, keyed by (seed, the step's epoch, sample id): the same sample gets the same
    // augmentation on any device or rank. Self-check, calibration and inference see the samples
    // as they are.
    data_augment augment;
    // Training steps span every rank of the job (span.h) by default: one plan over every rank's
    // devices, gradient sums added in rank order, the same update everywhere. 1: this process
    // alone, even under mpirun (a test's reference run). A job of one rank is the same code over
    // one rank.
    int alone;
    // Over several ranks the gradient is reduce-scattered: each rank sums one slice of it over
    // the ranks (in rank order), updates that slice of the parameters with that slice of the
    // optimiser's moments (ZeRO stage 1), and the ranks then gather each other's updated
    // slices. comm_bf16 = 1 carries the gradient between ranks as bfloat16 (half the bytes;
    // it changes the numerics: every rank's sum is rounded to 8 bits of mantissa before the
    // float sum). The parameters always travel as they are.
    int comm_bf16;
    // Over several ranks, the dense layers whose factors are smaller than their weights send
    // those (engine_reduce.c) unless no_factors (or HETRAIN_FACTORS=0): the same sums, bit for
    // bit, other traffic and work.
    int no_factors;
    // The job's stop request (set on a signal); NULL: none. See engine_stopping.
    const volatile int *stop_flag;
} engine_config;

// Opens an engine over c's devices with a copy of the initial parameters, which it broadcasts
// to every device before returning (a device that fails to take them is dropped, with an
// event).
int engine_open(engine **out, const engine_config *c, ht_error *e);
void engine_close(engine *g);

// Changes the seconds a device may take for one shard, between steps (e.g. shorter once every
// device has compiled its kernels); <= 0: ENGINE_DEFAULT_TIMEOUT.
void engine_set_timeout(engine *g, double seconds);

// Whether to stop now, on the stop flag (engine_config.stop_flag). Alone: the flag itself.
// Over several ranks the flag travels with each step's reduction and engine_stopping says
// whether any rank's was set at the last step, so every rank stops after the same step (a
// rank that stopped alone would leave the others waiting for it).
int engine_stopping(const engine *g);

// The master parameters (n_params), as of the last update.
const float *engine_params(const engine *g);
// Replaces the master parameters and broadcasts them (the optimiser state stays).
int engine_set_params(engine *g, const float *params, ht_error *e);
// The reduced mean gradient of the last step (n_params), made when asked for (the update takes
// the sum and 1/B); valid until the next training pass. Over several ranks every rank must
// ask (the ranks gather each other's slices); NULL if that gather failed.
const float *engine_grad(engine *g);

// What an engine has learned beyond its parameters, for a checkpoint: with the parameters
// and the optimiser's moments (engine_moments) it continues a run exactly where it stopped.
typedef struct engine_state {
    long step;      // training steps done
    long optim_t;   // optimiser updates done (the lr decay and Adam's bias correction use it)
    int since;      // steps since the last re-fit of the capacities
    int n_devs;     // the devices the capacities and fits below are for, in engine order
    double capacity[HT_MAX_DEVICES]; // 0 for a dropped device
    double fit[HT_MAX_DEVICES][5];   // capacity.h's sums
} engine_state;

void engine_get_state(const engine *g, engine_state *st);
// The optimiser's moment buffers (n_trainable floats each): SGD's velocity as m and v NULL, or
// Adam's first and second moments. Over several ranks each rank keeps only its slice current:
// engine_gather_moments (every rank calls it) brings every slice to every rank first.
void engine_moments(const engine *g, const float **m, const float **v);
int engine_gather_moments(engine *g, ht_error *e);
// Over several ranks: how many dense layers' weight gradients cross as their factors
// (engine_config.no_factors), and one line for the run log saying how the gradient crosses.
int engine_factored(const engine *g);
void engine_describe_exchange(const engine *g, char *buf, size_t len);
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
// The factor on the output layer's and the losses' bounds for m: 1, or its layers with
// weights over ENGINE_SELF_CHECK_DEPTH.
double engine_self_check_depth(const model *m);

// Measures every device's time on shards of the batch idx[0..B) (no update) and sets the
// capacities from the fitted time model. Only meaningful with several devices: returns 1 when
// it calibrated, 0 when the ranks of the step had one device in all. Over several ranks every
// rank calls it, and the capacities are fitted over every rank's devices together.
int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e);

// Drops device d from now on, as a failure would (used by tests to build the reference run).
void engine_drop_device(engine *g, int d);

// The device capacities now in use (n_devs values; 0 for a dropped device).
void engine_capacities(const engine *g, double *cap);
// Device d's micro-batch as of its last shard: the one it opened with, or smaller after it ran
// out of memory.
int engine_micro(const engine *g, int d);
// Whether the engine gave device d up because it stopped answering: its worker thread may
// still be inside it and closes it if it ever comes back, so its owner must neither call into
// it nor close it (device_disown).
int engine_gave_up(const engine *g, int d);
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
