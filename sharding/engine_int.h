// What the engine's files share (engine.h is the engine's interface): the engine's state, its
// view of each device (engine_slot) and the worker blocks, and the functions one file of the
// engine calls in another. From the bottom up:
//   engine_workers.c  the worker threads and the passes they run: dispatch, time-outs,
//                     devices dropped, stray workers, events
//   engine_balance.c  how a batch is shared: capacities, plans, re-runs of failed shares,
//                     re-fits, calibration
//   engine_check.c    the self-check against a reference device
//   engine_infer.c    inference
//   engine_reduce.c   over several ranks: the gradient's buckets reduce-scattered, started
//                     during the pass as the devices finish layers
//   engine.c          open and close, the training step, the broadcast, the state
#ifndef HETRAIN_ENGINE_INT_H
#define HETRAIN_ENGINE_INT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sharding/capacity.h"
#include "sharding/engine.h"
#include "nn/optim.h"
#include "sharding/plan.h"
#include "sharding/span.h"

#define ENGINE_PAR_MIN 65536 // elements below which a parallel pass costs more than it saves
#define ENGINE_CHUNK 4096    // elements a thread sums over every device before moving on
// A bucket of the gradient (engine_reduce.c) holds whole layers, at least this many floats
// (1 MB) unless the layers before it are fewer: smaller ones would pay a collective's latency
// for little traffic.
#define ENGINE_BUCKET_MIN 262144
// Factored dense layers (engine_factors_init): batches of at most this many samples. A rank
// then computes the other ranks' part of the weight gradient too, (R-1)/R of 2 B in out flops,
// and updates the whole layer, where the reduce-scatter and the gather would move (R-1)/R of
// 8 in out bytes in and out: one core's GEMM rate against a 10 Gbit/s link puts the break-even
// a little above this batch (bench/README.md has the rates and the runs it was set from).
#define ENGINE_FAC_MAX_BATCH 128
#define ENGINE_POLL_S 0.0005 // while buckets travel, the engine's thread moves them this often
#define ENGINE_REPLAN_GAIN 0.03 // re-plan only for a predicted step this much faster
#define ENGINE_MIN_SHARE 0.005  // a device keeps at least this fraction of the largest capacity
#define ENGINE_PROBE_EVERY 20   // steps between probes of devices the plan gives no samples
// A device is left out of the plan (it rests: capacity 0, still healthy, still sent the
// parameters, probed every ENGINE_PROBE_EVERY steps) when the fits predict the step without it
// at most this much slower: a gain within the step's noise, the same margin a re-plan needs,
// does not pay for a device's share of the step's fixed costs (its launch and wait, its gradient
// in the sum), which the fits do not see.
#define ENGINE_REST_GAIN ENGINE_REPLAN_GAIN

// A dense layer whose weight gradient crosses between ranks as its factors: every rank's
// samples' inputs and output gradients, from which each rank computes the whole sum
// (engine_reduce.c).
typedef struct engine_fac {
    int layer;
    int in, out;    // the weight is out x in
    size_t w_off;   // at [w_off, w_off + in * out) of the parameters
} engine_fac;

typedef enum task_kind { TASK_TRAIN, TASK_INFER, TASK_PARAMS } task_kind;

// What one pass asks of the devices. Training: idx[j] is the sample at batch position j;
// inference: position j is sample start + j; a broadcast carries no samples.
typedef struct engine_task {
    task_kind kind;
    const dataset *ds;
    const uint32_t *idx;
    int start;
    uint32_t epoch;
    long step; // the training step (from 1); 0 outside training
} engine_task;

// What the engine and its workers share. Reference-counted: a worker the engine gave up on
// keeps it alive until it comes back, so that it never touches freed memory.
typedef struct engine_hub {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen; // pass number
    int stop;
    int refs;          // the engine and each running worker
    float *params;     // the master parameters (n_params)
    float **retired;   // master buffers a worker given up on may still read (engine_workers.c's retire_params)
    int n_retired;
} engine_hub;

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
    int stale;        // the device's copy of the parameters is older than the hub's: the
                      // worker copies them before its next task (engine.c's broadcast)
    int want_ready;   // pass grad_ready to the device (a sliced training pass)
    size_t ready_from; // the gradient from here on is final (SIZE_MAX: nothing yet); written
                       // by the worker under the hub's lock
    int want_fac;     // keep the factored layers' factors (shard_job.factor) in fac_buf
    const int *fac_of; // (n_layers) the engine's: a layer's index in fac, or -1
    const engine_fac *fac;
    int n_fac;
    // Factored layer f's factors of this pass: the first micro-batch's size (the device's
    // step), then each micro-batch's inputs (k x in) and output gradients (k x out).
    float **fac_buf;  // (n_fac), each 1 + max_batch * (in + out) floats
    size_t *fac_len;  // (n_fac) floats written
    size_t fac_cap;   // floats each fac_buf holds
    task_kind kind;
    int n;            // samples, gathered by the engine into x, y, ids
    uint64_t seed;
    uint32_t epoch;
    long step;
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
    double busy_s;
    unsigned long done_gen; // the last pass it finished
    int abandoned;    // the engine gave up on it: the worker owns this struct now
} engine_work;

// The engine's view of a device: what it decided of it and learned from it. The device itself
// is only read (its ops, context, spec and name).
typedef struct engine_slot {
    device *dev;
    double capacity;  // relative capacity: its share of a batch is capacity / sum (0: dropped)
    int micro;        // its micro-batch as of its last shard (it shrinks on out-of-memory)
    int hung;         // stopped answering: its worker may still be inside it (engine_gave_up)
    engine_work *work; // NULL once the device hung
    int n;            // positions this pass
    int *pos;         // (max_batch) batch positions of this device
    // The outcome of the last pass, copied from work when it finished.
    double busy_s;
    int rc;
    ht_error err;
    int dispatched;   // takes part in the current pass
    int failed;       // dropped for good
    int started;      // its worker thread runs
} engine_slot;

struct engine {
    const model *m;
    device *devs;
    int n_devs;
    int max_batch;
    uint64_t seed;
    data_augment aug; // applied to training steps' samples as they are gathered (engine_config)
    float *params;   // master parameters (n_params), read by the workers through the hub
    float *grad;     // the step's gradient sum, then the rest of the step's one reduction
                     // (engine.c's reduce_group): losses, predictions, flags
    const float *sum; // the last step's gradient sum: grad, or (one device alone) its buffer
    int grad_ready;  // grad holds the last step's gradient sum
    float grad_scale; // 1/B: the mean gradient is the sum * grad_scale
    int group;       // model_bn_group: batch positions are planned in groups of this many
    int grad_mean;   // grad holds the mean gradient instead (engine_grad made it)
    int bound;       // some device reads the master parameters in place (bind_params)
    optim opt;
    shard_plan plan; // over the active devices, for plan.len positions; remade when needed
    int plan_dev[HT_MAX_DEVICES]; // plan index -> device index
    int plan_rd[HT_MAX_DEVICES];  // plan index -> rank * HT_MAX_DEVICES + that rank's device
    engine_slot *slots;
    int *orphans;    // batch positions whose device failed, to run again (max_batch)
    int *unit;       // engine_assign's scratch: where each group of positions starts (max_batch + 1)
    int *sorted;     // engine_assign's scratch: a re-run's positions in order (max_batch)
    uint8_t *own;    // (max_batch) positions this rank computed in the current step
    int sliced;      // over several ranks: the gradient is reduce-scattered, each rank updates
                     // its slice (span_slice of n_trainable) and the slices are gathered
    span_dtype comm_dt; // how the reduce-scatter carries the gradient
    // The factored dense layers (engine_reduce.c's engine_factors_init): their weight
    // gradients travel as every rank's factors, each rank computes the whole sums and updates
    // those layers whole; fac_of maps a layer to its index here, or -1.
    engine_fac *fac;
    int n_fac;
    int *fac_of;
    int want_fac;         // the pass under way keeps the factors
    int *bucket_fac;      // (n_buckets) the factored layer bucket k carries, or -1
    float **fac_send, **fac_recv; // (n_fac) this rank's factors; every rank's
    int *fac_counts;      // (ranks) floats of each rank's factors, of the gather under way
    float *fac_tmp[3];    // scratch for the sums, each as large as the largest factored weight
    float *packed;        // the parameters' gather: every rank's slice less the factored weights
    // The last batch's plan as the factored layers' gathers read it, kept when a device's
    // failure drops the plan: its length and each index's positions (plan_rd: whose).
    int plan_len;
    int plan_n[HT_MAX_DEVICES];
    // engine_reduce.c: the buckets (bucket k is [bucket[k + 1], bucket[k]), bucket[0] =
    // n_trainable, bucket[n_buckets] = 0), this step's started ones and their state.
    size_t *bucket;
    int n_buckets;
    span_op *inflight;    // (n_buckets) started, not yet finished: a reduce-scatter, or a
                          // factored layer's gather of factors
    int next_bucket;      // buckets started this step
    int travelling;       // of those, the last this many have not been seen to arrive
    int overlap;          // the pass under way may start buckets
    float overlap_nan;    // NaN when a started bucket's local sum held a non-finite element
    int overlap_err;      // a start failed: overlap_e says why (engine_overlap_finish)
    ht_error overlap_e;
    int no_overlap;       // HETRAIN_OVERLAP=0: every bucket starts after the pass (measurements)
    span sp;         // the ranks steps are planned and reduced over: every rank of the job,
                     // or this process alone (engine_config.alone); over one rank the
                     // collectives (span.h) are copies, so both run the same code
    const volatile int *stop_flag; // the job's stop request (a signal), engine_config's
    int stop_agreed; // over several ranks: some rank's stop_flag was set at the last step
    int peers_active; // the other ranks' active devices, as of the last plan
    int n_orphans;
    long step;       // training steps done
    double timeout_s;
    int nan_stop;    // non-finite values stop the run instead of skipping the step
    char events[4096]; // what happened since engine_take_events, one line each
    char last_failure[600]; // the last device failure, for the error when none is left
    int rebalance;   // auto balance: re-fit every this many steps; 0: static
    int since;       // steps since the last re-fit
    capacity_model fits; // the devices' measured times (capacity.h)
    pthread_t *threads;
    engine_hub *hub;
    double prep_s, pass_s; // training passes' times since engine_train_step began
                           // (engine_dispatch)
};

// engine_workers.c
// Appends a line to the events engine_take_events hands out.
void engine_event(engine *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Device d leaves for good: no capacity, no measurements, no plan that names it.
void engine_drop(engine *g, int d);
// The hub, the master parameters (g->params, n_params) and the thread handles, before any
// worker starts; -1 with e.
int engine_workers_open(engine *g, ht_error *e);
// Device d's worker: its buffers and its thread; -1 with e.
int engine_worker_start(engine *g, int d, ht_error *e);
// Stops and joins every worker the engine did not give up on, frees their buffers, and lets
// go of the hub (the parameters go with its last user).
void engine_workers_close(engine *g);
// Runs task t on every dispatched device and waits for them; returns how many failed.
int engine_dispatch(engine *g, const engine_task *t);

// engine_reduce.c
// acc[a, b) = the k sums added in order (sums[0] + sums[1]) + ...; NaN if it holds a
// non-finite element, else 0. k = 0 zeroes the range.
float engine_add_sums(const float *const *sums, int k, float *acc, size_t a, size_t b);
int engine_buckets_init(engine *g, ht_error *e);
void engine_buckets_free(engine *g);
// Before a training step's first pass: its buckets may start as the devices report.
void engine_overlap_begin(engine *g);
// Which dense layers' gradients travel as factors (before engine_buckets_init): over several
// ranks whose devices all report factors (device.factors), a trainable dense layer whose
// factors for a whole batch are at most a quarter of its weight (max_batch (in + out) <=
// in out / 4) when batches are at most ENGINE_FAC_MAX_BATCH; none if `off`. Collective.
int engine_factors_init(engine *g, const device *devs, int n_devs, int off, ht_error *e);
// This rank's update of a sliced step: its slice (ZeRO stage 1) and the factored layers whole
// (every rank holds their sums) unless the step was reduced whole (`whole`: then the caller
// gathers the moments); then the parameters gathered: every rank's slice, less the factored
// weights while every rank updated those.
int engine_update_sliced(engine *g, int whole, ht_error *e);
// With the hub's lock held: starts every bucket all dispatched devices have finished, and
// moves the started ones along. Returns 0 when there was nothing to do (the lock stayed held),
// else ENGINE_POLL_RELEASED (it let go of the lock meanwhile), with ENGINE_POLL_TRAVELLING
// while some are still on their way (engine_dispatch then waits in slices of ENGINE_POLL_S
// to call it again).
enum { ENGINE_POLL_RELEASED = 1, ENGINE_POLL_TRAVELLING = 2 };
int engine_overlap_poll(engine *g);
// After the pass: starts the buckets left, and sums the batchnorm statistics; *finite is 0 if
// any local sum held a non-finite element.
void engine_overlap_rest(engine *g, int *finite);
// A device failed in the pass, so its re-runs change this rank's sums: starts the rest (the
// other ranks expect them) and waits for all, keeping nothing (an error waits for the step's
// engine_overlap_finish). The step is then reduced whole.
void engine_overlap_flush(engine *g);
// Waits for every started bucket and (keep) writes this rank's sums of each into g->grad.
int engine_overlap_finish(engine *g, int keep, ht_error *e);

// engine_balance.c
// Sets the capacities of the active devices (at least the minimum share) and drops the plan.
void engine_set_capacities(engine *g, const double *cap);
// Capacities re-fitted to the measured times for batches of B (over every rank's devices).
void engine_refit(engine *g, int B, int force);
// Adds the last pass's compute times to the fits.
void engine_observe_pass(engine *g);
// Gives every active device its positions of a pass: a whole batch (`batch`) over every rank's
// devices, or `positions` of a re-run over this rank's.
int engine_assign(engine *g, const int *positions, int n, int batch, ht_error *e);
// Runs the positions failed devices left on the others until none is left; `collect` takes
// each pass's results.
int engine_rerun_orphans(engine *g, const engine_task *t, void (*collect)(engine *, void *),
                         void *arg, ht_error *e);
// Gives each active device the plan left without samples one position (auto balance).
void engine_probe_idle(engine *g);

#endif
