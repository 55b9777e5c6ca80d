// batchnorm's ghost batches make a step's result independent of who computes it: the same
// mean gradient, and the same batchnorm statistics, from one CPU device, two equal or unequal
// ones, micro-batches of two groups, a device failing mid-step (its groups re-run on the
// other), PoCL devices beside a CPU worker, and a batch whose last group is short. Each step
// starts from the reference's weights, so only that step's rounding is compared.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/batchnorm.h"
#include "data/data.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/model.h"
#include "nn/net.h"
#include "devices/ocl_util.h"
#include "tests/lib/testutil.h"

#define STEPS 2
#define GROUP 8
// The statistics' sums (the state's place in the gradient) are forward values: no ReLU or
// max-pool branch lies between them and the input, so two computations differ only by
// rounding: measured <= 2e-7 relative L2 (CPU against PoCL). Statistics of another split of
// the batch (a per-device batch statistic) are off by 1e-2 and more.
#define TOL_BN_STATS 1e-5f

static char pthread_spec[16];

static void find_pocl(void) {
    ocl_dev_info *devs = NULL;
    int n = 0;
    ht_error e;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    for (int i = 0; i < n && !pthread_spec[0]; i++)
        if (!strncmp(devs[i].name, "pthread", 7))
            snprintf(pthread_spec, sizeof pthread_spec, "%s", devs[i].spec);
    free(devs);
}


typedef struct reference {
    float *params[STEPS], *grad[STEPS], *after;
} reference;

static void batch_idx(const dataset *ds, int s, int B, uint32_t *idx) {
    for (int i = 0; i < B; i++) idx[i] = (uint32_t)(((s * B + i) * 53 + 7) % ds->n);
}

// STEPS steps of batch B on spec (with faults and a memory limit): records the reference when
// ref->grad[0] is NULL, else checks each step's mean gradient and statistics against it.
static void run_mix(const model *m, const dataset *ds, int B, const char *spec,
                    const char *faults, uint64_t mem_limit, reference *ref) {
    ht_error e;
    float *p = malloc(sizeof(float) * m->n_params);
    model_init_params(m, p, 3);
    test_rig rig;
    test_rig_open(&rig, m, spec, faults, p, B, 3, mem_limit);
    if (mem_limit) { // micro-batches of 2 groups (and 3 samples it cannot use)
        assert_true(engine_micro(rig.g, 0) >= 2 * GROUP && engine_micro(rig.g, 0) < 3 * GROUP);
    }
    int record = ref->grad[0] == NULL;
    uint32_t idx[128];
    for (int s = 0; s < STEPS; s++) {
        batch_idx(ds, s, B, idx);
        if (record) {
            ref->params[s] = malloc(sizeof(float) * m->n_params);
            memcpy(ref->params[s], engine_params(rig.g), sizeof(float) * m->n_params);
        } else if (engine_set_params(rig.g, ref->params[s], &e) < 0) {
            fail_msg("%s", e.msg);
        }
        step_stats st;
        if (engine_train_step(rig.g, ds, idx, B, 1, NULL, NULL, &st, &e) < 0)
            fail_msg("%s: %s", spec, e.msg);
        const float *g = engine_grad(rig.g);
        if (record) {
            ref->grad[s] = malloc(sizeof(float) * m->n_params);
            memcpy(ref->grad[s], g, sizeof(float) * m->n_params);
            continue;
        }
        char what[300];
        snprintf(what, sizeof what, "step %d of %d on %s%s%s vs cpu", s + 1, B, spec,
                 faults ? " with " : "", faults ? faults : "");
        assert_true(check_step_grad(m, g, ref->grad[s], what));
        double err = test_state_err(m, g, ref->grad[s]);
        printf("%s: statistics off by %.1e\n", what, err);
        assert_true(err < TOL_BN_STATS);
    }
    // The moving averages after the last step, from the same statistics.
    if (record) {
        ref->after = malloc(sizeof(float) * m->n_params);
        memcpy(ref->after, engine_params(rig.g), sizeof(float) * m->n_params);
    } else {
        assert_true(test_state_err(m, engine_params(rig.g), ref->after) < TOL_BN_STATS);
    }
    test_rig_close(&rig);
    free(p);
}

static void free_ref(reference *r) {
    for (int s = 0; s < STEPS; s++) free(r->params[s]), free(r->grad[s]);
    free(r->after);
    memset(r, 0, sizeof *r);
}

static void test_bn_same_on_any_split(void **state) {
    (void)state;
    find_pocl();
    model m;
    dataset ds;
    test_bn_model(&m, GROUP);
    test_fashion_set(&ds, FASHION_TEST, 500);
    // Micro-batches of two groups: the memory of a workspace of 2 groups and a bit.
    uint64_t two_groups = 2 * sizeof(float) * m.n_params + net_ws_bytes(&m, 2 * GROUP + 3, 1);
    const int batches[] = {64, 60}; // 8 groups; 7 and a short one of 4
    for (int k = 0; k < 2; k++) {
        const int B = batches[k];
        reference ref = {0};
        run_mix(&m, &ds, B, "cpu", NULL, 0, &ref);
        run_mix(&m, &ds, B, "cpu:1,cpu:1", NULL, 0, &ref);
        run_mix(&m, &ds, B, "cpu:1@5,cpu:1@1", NULL, 0, &ref);
        run_mix(&m, &ds, B, "cpu:1", NULL, two_groups, &ref);
        run_mix(&m, &ds, B, "cpu:1,cpu:1", "fail:cpu:1#2@2", 0, &ref);
        if (pthread_spec[0]) {
            char mix[64];
            snprintf(mix, sizeof mix, "cpu:1@2,%s", pthread_spec);
            run_mix(&m, &ds, B, mix, NULL, 0, &ref);
        } else {
            printf("no PoCL pthread device: CPU mixes only\n");
        }
        free_ref(&ref);
    }
    dataset_free(&ds);
    model_free(&m);
}

// A device whose memory does not hold one group is refused with a message that says so.
static void test_bn_group_must_fit(void **state) {
    (void)state;
    model m;
    test_bn_model(&m, GROUP);
    device d;
    ht_error e;
    uint64_t small = 2 * sizeof(float) * m.n_params + net_ws_bytes(&m, GROUP - 2, 1);
    assert_int_equal(cpu_device_open(&d, &m, 1, 64, small, &e), -1);
    test_expect_frags(e.msg, 1, "batchnorm group of 8 samples", "--bn-group", NULL);
    model_free(&m);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_same_on_any_split),
        cmocka_unit_test(test_bn_group_must_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
