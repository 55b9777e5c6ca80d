// What engine.c and balance.c share beyond engine.h.
#ifndef HETRAIN_ENGINE_INTERNAL_H
#define HETRAIN_ENGINE_INTERNAL_H

#include "engine.h"

enum { TASK_TRAIN, TASK_INFER };

struct engine_slot {
    device *dev;
    int n;            // positions this pass
    int *pos;         // (max_batch) batch positions of this device
    float *x;         // (max_batch, in) gathered inputs
    uint8_t *y;
    uint32_t *ids;
    float *grad_sum;  // (n_params)
    float *loss;
    int32_t *pred;
    float *probs;     // (max_batch, n_classes)
    int weights_stale;
    double busy_s, bcast_s;
    int rc;
    ht_error err;
    char note[256];   // the device's own note from its last shard
    int dispatched;   // takes part in the current pass
    int failed;       // dropped for good
    unsigned long done_gen; // the last pass it finished
};

// balance.c
void balance_reset(engine *g);
void balance_observe(engine *g, int B);         // after a step: re-weigh every g->rebalance
void balance_fit_pass(engine *g);               // add the last pass's timings to the fits
void balance_now(engine *g, int B, int force);  // re-weigh from the fits
void balance_drop(engine *g, int d);            // a device left: its weight goes to 0

#endif
