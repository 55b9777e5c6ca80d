// Micro-batch sizing shared by the devices: the largest micro-batch whose memory fits a
// budget, and halving it after an out-of-memory error.
#ifndef HETRAIN_MICRO_H
#define HETRAIN_MICRO_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

// What a bytes callback returns for a micro-batch that cannot be allocated at any budget
// (e.g. one of its buffers is larger than the device's largest allocation).
#define MICRO_NEVER SIZE_MAX

// Bytes a device needs for a micro-batch of B samples (non-decreasing in B), or MICRO_NEVER.
typedef size_t (*micro_bytes_fn)(const void *arg, int B);

// The largest micro-batch B in 1..most with bytes(arg, B) <= budget; 0 when not even 1 fits.
// Steps of 1 up to 8, then of an eighth, then one at a time from the last size that fitted:
// a few dozen calls of bytes, not `most`.
int micro_fit(int most, uint64_t budget, micro_bytes_fn bytes, const void *arg);

// What a realloc callback returns when the new size did not fit either: halve again.
#define MICRO_OOM (-2)

// Frees a device's micro-batch buffers and allocates them for B samples, storing B as the
// device's micro-batch: 0, MICRO_OOM (out of memory, e says where), or -1 (any other error).
typedef int (*micro_realloc_fn)(void *arg, int B, ht_error *e);

// After an out-of-memory error (`why`, e.g. "CL_OUT_OF_RESOURCES") at micro-batch `micro`:
// halves it and reallocates, halving again while that runs out of memory too. Returns the new
// micro-batch and notes "WHY at micro-batch OLD; now NEW" in note. Fails with MICRO_OOM when
// even a micro-batch of 1 does not fit (e: "WHY even with a micro-batch of 1"), or -1 when
// realloc fails otherwise; the device's buffers are then whatever realloc left: close it.
int micro_halve(int micro, const char *why, micro_realloc_fn realloc_for, void *arg, char *note,
                size_t note_len, ht_error *e);

// Under batchnorm a training micro-batch is made of whole groups of `group` samples
// (model_bn_group; 0 for a model without batchnorm): the step a shard of n samples is cut by.
// A shard that fits in micro is one piece (its groups are whole, the last perhaps short: the
// shards are cut at group boundaries); a larger one goes by micro rounded down to whole
// groups, 0 when not even one group fits in micro.
static inline int micro_step(int micro, int group, int n) {
    if (n <= micro) return n > 0 ? n : 1;
    return group > 1 ? micro / group * group : micro;
}

// The smallest micro-batch a device may open with for batches of up to max_batch: one group.
static inline int micro_least(int group, int max_batch) {
    return group > 1 ? (group < max_batch ? group : max_batch) : 1;
}

#endif
