// Smooth weighted round robin over per-device counts apportioned by largest remainder.
#include "sharding/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int shard_plan_init(shard_plan *p, const double *capacity, int n_devs, int batch, ht_error *e) {
    memset(p, 0, sizeof *p);
    if (n_devs < 1 || batch < 1) return ht_fail(e, "shard plan: %d devices, batch %d", n_devs, batch);
    double total = 0;
    for (int d = 0; d < n_devs; d++) {
        if (!(capacity[d] > 0) || !isfinite(capacity[d]))
            return ht_fail(e, "shard plan: device %d has capacity %g, expected > 0", d, capacity[d]);
        total += capacity[d];
    }
    p->n_devs = n_devs;
    p->len = batch;
    p->pattern = ht_malloc((size_t)batch, sizeof *p->pattern, e);
    p->count = ht_calloc((size_t)n_devs, sizeof *p->count, e);
    double *rem = ht_malloc((size_t)n_devs, sizeof *rem, e);
    long long *cur = ht_calloc((size_t)n_devs, sizeof *cur, e);
    if (!p->pattern || !p->count || !rem || !cur) {
        free(rem);
        free(cur);
        shard_plan_free(p);
        return -1;
    }
    // Largest remainder: floor of each exact share, then one more to the largest remainders
    // (lowest index first on ties) until the counts add up to batch.
    int given = 0;
    for (int d = 0; d < n_devs; d++) {
        double exact = batch * capacity[d] / total;
        p->count[d] = (int)floor(exact);
        rem[d] = exact - p->count[d];
        given += p->count[d];
    }
    while (given < batch) {
        int best = 0;
        for (int d = 1; d < n_devs; d++)
            if (rem[d] > rem[best]) best = d;
        p->count[best]++;
        rem[best] = -1;
        given++;
    }
    // Smooth weighted round robin with the integer counts as weights: each slot, every device
    // gains its count, the richest (lowest index on ties) takes the slot and pays `batch`.
    for (int j = 0; j < batch; j++) {
        int best = -1;
        for (int d = 0; d < n_devs; d++) {
            cur[d] += p->count[d];
            if (p->count[d] > 0 && (best < 0 || cur[d] > cur[best])) best = d;
        }
        p->pattern[j] = best;
        cur[best] -= batch;
    }
    free(rem);
    free(cur);
    return 0;
}

void shard_plan_free(shard_plan *p) {
    free(p->pattern);
    free(p->count);
    memset(p, 0, sizeof *p);
}
