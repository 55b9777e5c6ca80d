// What engine.c and balance.c share beyond engine.h.
#ifndef HETRAIN_ENGINE_INTERNAL_H
#define HETRAIN_ENGINE_INTERNAL_H

#include "engine.h"

enum { TASK_TRAIN, TASK_INFER };

typedef struct engine_hub engine_hub;

// Everything a worker thread touches, allocated per device on its own so that the engine can
// give up on a worker that stopped answering (hung) and leave this to it: such a worker frees
// it, and closes its device, when (if ever) it comes back. The engine writes the task fields
// before a pass and reads the results after it, never while the worker runs.
typedef struct engine_work {
    engine_hub *hub;
    const device_ops *ops;
    void *ctx;
    // The task of this pass.
    int go;           // takes part in this pass
    int kind;         // TASK_TRAIN or TASK_INFER
    int n;            // samples, gathered by the engine into x, y, ids
    uint64_t seed;
    uint32_t epoch;
    long step;        // for messages
    unsigned faults;  // injected faults for this pass: bit (1 << FAULT_*)
    int send_params;  // copy the hub's parameters to the device first
    size_t n_params;
    float *x;         // (max_batch, in)
    uint8_t *y;
    uint32_t *ids;
    // The results.
    float *grad_sum;  // (n_params)
    float *loss;
    int32_t *pred;
    float *probs;     // (max_batch, n_classes)
    int rc;
    ht_error err;
    char note[256];   // the device's own note from its last shard
    int micro;        // the device's micro-batch after the shard (0: unchanged)
    double busy_s, bcast_s;
    unsigned long done_gen; // the last pass it finished
    int abandoned;    // the engine gave up on it: the worker owns this struct now
} engine_work;

// The engine's view of a device.
struct engine_slot {
    device *dev;
    engine_work *work; // NULL once the device hung
    int n;            // positions this pass
    int *pos;         // (max_batch) batch positions of this device
    int params_stale; // the device lacks the current parameters
    // The outcome of the last pass, copied from work when it finished.
    double busy_s, bcast_s;
    int rc;
    ht_error err;
    int dispatched;   // takes part in the current pass
    int failed;       // dropped for good
    int started;      // its worker thread runs
};

// balance.c
void balance_reset(engine *g);
void balance_observe(engine *g, int B);         // after a step: re-weigh every g->rebalance
void balance_fit_pass(engine *g);               // add the last pass's timings to the fits
void balance_now(engine *g, int B, int force);  // re-weigh from the fits
void balance_drop(engine *g, int d);            // a device left: its capacity goes to 0

#endif
