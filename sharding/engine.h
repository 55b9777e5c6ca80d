// The step engine: scatter a batch over the devices by the shard plan, run every shard on its
// own thread, reduce the gradient sums in fixed device order, update on the host, and
// broadcast the new weights.
#ifndef HETRAIN_ENGINE_H
#define HETRAIN_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "common.h"
#include "data.h"
#include "device.h"
#include "model.h"
#include "optim.h"
#include "plan.h"

typedef struct engine_slot engine_slot;

typedef struct step_stats {
    double wall_s;   // the whole step
    double host_s;   // host reduce + update, plus the slowest broadcast
    double wait_s;   // summed time devices waited for the slowest
    double busy_s[64]; // per device: broadcast + gather + compute
    int share[64];   // per device: samples
} step_stats;

// How device weights are kept: as given, or measured. Measured: each device's step time is
// modelled as t = a + b*n for a shard of n samples (a: launches, transfers, fixed costs; b: per
// sample), fitted by least squares over recent steps with exponential forgetting; the shares
// that make every device finish together are then n_d = (T - a_d) / b_d with sum n_d = B. A
// pure rate model (a = 0) wastes time whenever a slow device's fixed costs matter.
typedef enum balance_mode { BALANCE_AUTO, BALANCE_STATIC } balance_mode;

#define ENGINE_FORGET 0.85        // weight kept by older steps at each new one
#define ENGINE_REPLAN_GAIN 0.03   // re-plan only for a predicted step this much faster
#define ENGINE_MIN_SHARE 0.005    // a device keeps at least this fraction of the largest weight

typedef struct engine {
    const model *m;
    device *devs;
    int n_devs;
    int max_batch;
    uint64_t seed;
    float *params;   // master weights (n_params)
    float *grad;     // reduced mean gradient (n_params)
    optim opt;
    shard_plan plan; // for plan.len positions; remade when the batch size changes
    engine_slot *slots;
    // Worker threads (one per device when there are several).
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;
    int pending;
    int stop;
    // Capacity.
    balance_mode balance;
    int rebalance;   // re-plan every this many steps (auto)
    int since;       // steps since the last re-plan
    // Per device, forgetting sums of 1, n, t, n*n, n*t over observed shards (the fit's input).
    double fit[64][5];
    // The task being dispatched (read by the workers).
    int task_kind;
    const dataset *task_ds;
    const uint32_t *task_idx; // training: the sample of each batch position
    int task_start;           // inference: the sample of position 0
    uint32_t task_epoch;
} engine;

// Takes the devices (not owned) and the initial parameters (copied).
int engine_init(engine *g, const model *m, device *devs, int n_devs, const float *params,
                const train_setup *s, int max_batch, uint64_t seed, ht_error *e);
void engine_free(engine *g);

// Sets how weights are kept (engine_init's default: static; rebalance >= 1).
void engine_set_balance(engine *g, balance_mode mode, int rebalance);

// Measures every device's samples/s on shards of the batch idx[0..B) (run twice, the first
// as warm-up; no update) and sets the weights from it. Only meaningful with several devices.
int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e);

// The device weights now in use (n_devs values) after calibration or re-balancing.
void engine_weights(const engine *g, double *w);

// One training step on samples idx[0..B) of ds (global sample ids = the indices). Writes each
// position's loss and prediction (batch order) when loss/pred are not NULL.
int engine_train_step(engine *g, const dataset *ds, const uint32_t *idx, int B, uint32_t epoch,
                      float *loss, int32_t *pred, step_stats *st, ht_error *e);

// Class probabilities for samples [start, start+n) of ds into probs (n, n_classes).
int engine_infer(engine *g, const dataset *ds, int start, int n, float *probs, ht_error *e);

#endif
