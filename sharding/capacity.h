// Capacities from measured times: each device's time for a shard of n samples is modelled as
// t = a + b*n (a: launches, transfers, fixed costs; b: per sample), fitted by least squares over
// recent shards with exponential forgetting; the shares that make every device finish together
// are then n_d = (T - a_d) / b_d with sum n_d = B. A pure rate model (a = 0) wastes time whenever
// a slow device's fixed costs matter. Pure: observations in, capacities out; no threads.
#ifndef HETRAIN_CAPACITY_H
#define HETRAIN_CAPACITY_H

#include "core/common.h"

#define CAPACITY_FORGET 0.85 // weight kept by older shards at each new one
// The line needs shard sizes this far apart (standard deviation over mean) in the remembered
// shards; closer together, the slope is the times' noise over a few samples' difference (a
// device whose share barely moves could be fitted a slope near 0 and a huge fixed cost, and
// the rest of the batch sent to it), so the device is modelled by its rate there, a = 0 and
// b = t/n: near the shard size it runs at, which is where the plan keeps it, that is its cost.
#define CAPACITY_MIN_SPREAD 0.1

typedef struct capacity_model {
    int n; // devices
    // Per device, forgetting sums of 1, n, t, n*n, n*t over observed shards.
    double fit[HT_MAX_DEVICES][5];
} capacity_model;

void capacity_reset(capacity_model *b, int n_devs);
// Forgets what was measured of device d (it left, or its measurements no longer apply).
void capacity_forget(capacity_model *b, int d);
// One shard of n samples that took device d `seconds` (compute only, no broadcast).
void capacity_add(capacity_model *b, int d, int n, double seconds);

// The capacities for batches of B over the devices with active[d] != 0, making them finish
// together; a device that cannot even cover its fixed costs gets 0. Returns -1 (and leaves
// cap alone) while some active device has no measurement yet.
int capacity_solve(const capacity_model *b, const int *active, int B, double *cap);

// The predicted step time (the slowest device) when device d runs counts[d] samples.
double capacity_predict(const capacity_model *b, const int *active, const double *counts);

// The devices worth leaving out (resting): one at a time, the device without which the fits
// predict the quickest step, while that step is at most `gain` (a fraction) slower than with
// every active device, and one device is left. cap: capacity_solve' capacities for the
// active devices, then (out) with each resting one's at 0. A device capacity_solve already
// gave 0 (its fixed cost exceeds the step) rests too.
void capacity_resting(const capacity_model *b, const int *active, int B, double gain, double *cap);

#endif
