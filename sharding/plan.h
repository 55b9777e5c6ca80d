// The shard planner: batch position j goes to device pattern[j mod L]. The pattern spreads
// each device over slots in proportion to its capacity as evenly as possible (smooth weighted
// round robin); equal capacities give exactly x[i::n].
#ifndef HETRAIN_PLAN_H
#define HETRAIN_PLAN_H

#include "core/common.h"

typedef struct shard_plan {
    int n_devs;
    int len;       // L: the pattern length (the batch size it was made for)
    int *pattern;  // (len) device of each position
    int *count;    // (n_devs) positions per device
} shard_plan;

// Plan for a batch of `batch` positions over n_devs devices with positive capacities: device d
// gets count[d] positions, the capacities' share of `batch` rounded by largest remainder (so
// within one sample of its exact share), spread by smooth weighted round robin.
int shard_plan_init(shard_plan *p, const double *capacity, int n_devs, int batch, ht_error *e);
void shard_plan_free(shard_plan *p);

#endif
