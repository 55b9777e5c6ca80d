// Fault injection for tests: HETRAIN_FAULT lists faults to inject, so the failure paths of the
// engine and the devices can be exercised on demand.
//   HETRAIN_FAULT := fault (',' fault)*
//   fault         := KIND ':' DEVICE_SPEC ['@' STEP]
//   KIND          := fail     the device's shard fails (as a lost device would), at STEP
//                  | oom      the device runs out of memory on its first micro-batch, at STEP
//                  | hang     the device stops answering (its worker sleeps), at STEP
//                  | nan      the device returns a non-finite gradient, at STEP
//                  | corrupt  the device returns wrong gradients, at every step and self-check
// STEP counts training steps from 1 over the whole run; without it the fault fires at step 1
// (corrupt: always). e.g. HETRAIN_FAULT=fail:cl:0.1@30
#ifndef HETRAIN_FAULT_H
#define HETRAIN_FAULT_H

#include "common.h"

typedef enum fault_kind { FAULT_FAIL, FAULT_OOM, FAULT_HANG, FAULT_NAN, FAULT_CORRUPT } fault_kind;

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

#endif
