// Fault injection for tests: HETRAIN_FAULT lists faults to inject, so the failure paths of the
// engine and the devices can be exercised on demand. fault_wrap_devices puts a wrapper device
// in front of each device the plan names; it hands every call on to that device and injects
// the faults into its shards, so nothing above the devices needs to know of them.
//   HETRAIN_FAULT := fault (',' fault)*
//   fault         := KIND ':' DEVICE_SPEC ['@' STEP]
//   KIND          := fail     the shard fails with an error (as a lost device's would), at STEP
//                  | oom      the device runs out of memory: it halves its micro-batch
//                  |          (device_ops.shrink) and runs the shard again, at STEP
//                  | hang     the shard does not return, as from a device that stopped
//                  |          answering, until fault_release_hangs, at STEP
//                  | nan      the shard's gradient sum gets a NaN, at STEP
//                  | corrupt  every shard's gradient sum is 1.5 times the true one, in and out
//                  |          of training (self-check and calibration too)
//                  | kill     the whole process is killed (SIGKILL) as the shard starts, at
//                  |          STEP: a power loss, the OOM killer, a preempted node
//                  | term     the process is asked to stop (SIGTERM to itself) as the shard
//                  |          starts, at STEP: a scheduler's or mpirun's stop request
// DEVICE_SPEC is a device's spec as the registry gives it ("cpu:1#2", "cl:0.0"). STEP is
// shard_job.step, the training step from 1 over the whole run; without it the fault fires at
// step 1 (corrupt: always). Shards outside training (step 0) see only corrupt.
// e.g. HETRAIN_FAULT=fail:cl:0.1@30
#ifndef HETRAIN_FAULT_H
#define HETRAIN_FAULT_H

#include "core/common.h"
#include "devices/device.h"
#include "nn/model.h"

typedef enum fault_kind {
    FAULT_FAIL, FAULT_OOM, FAULT_HANG, FAULT_NAN, FAULT_CORRUPT, FAULT_KILL, FAULT_TERM
} fault_kind;

#define FAULT_MAX 16

typedef struct fault_plan {
    int n;
    struct {
        fault_kind kind;
        char spec[64];
        long step; // 0: every step (corrupt)
    } f[FAULT_MAX];
} fault_plan;

// Parses text (NULL or "" gives an empty plan).
int fault_plan_parse(fault_plan *p, const char *text, ht_error *e);

// Whether fault `kind` is planned for device `spec` at training step `step` (0: a self-check
// or calibration, where only corrupt fires).
int fault_planned(const fault_plan *p, fault_kind kind, const char *spec, long step);

// Parses plan_text (HETRAIN_FAULT's grammar; NULL or "": no faults) and wraps each of
// devs[0..n) whose spec a fault names: its ops and ctx become the wrapper's, which owns the
// device from then on (closing the wrapper closes it); spec, name, capacity and micro stay.
// Devices the plan does not name are left as they are. m is the model the devices were opened
// for (the wrapper scales its gradient). -1 with e when plan_text is malformed, names a device
// that is not among devs, or memory runs out; nothing is wrapped then.
int fault_wrap_devices(device *devs, int n, const model *m, const char *plan_text, ht_error *e);

// Releases the hangs of every device wrapped before this call, now and later: a shard hung
// there (or hanging from then on) fails within ~20 ms with "stopped while hung
// (HETRAIN_FAULT)". Devices wrapped after the call hang again. For the end of a run or a test,
// so that a thread left inside a hung device comes back (and closes it). Thread-safe.
void fault_release_hangs(void);

#endif
