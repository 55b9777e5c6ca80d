// Memory-aware micro-batching, the device self-check, and surviving a device that fails in the
// middle of a run (error, out of memory, no answer, non-finite values): every case must leave
// the training result as it would have been without the fault.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "devices/ocl_blas.h"
#include "devices/ocl_util.h"
#include "data/data.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "devices/fault.h"
#include "nn/model.h"
#include "tests/lib/testutil.h"

#define BATCH 96

static model net;
static dataset data;
static int have_cl;

static int setup(void **state) {
    (void)state;
    ht_error e;
    if (model_init_preset(&net, "cnn2d_3layer_fullconnected_3layer", &e) < 0) fail_msg("%s", e.msg);
    test_fashion_set(&data, FASHION_TEST, 1000);
    have_cl = test_have_opencl("OpenCL cases are skipped");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    dataset_free(&data);
    // A hung device's worker closes its device (which reads the model) once the engine stops.
    assert_int_equal(engine_wait_strays(10), 0);
    model_free(&net);
    ocl_blas_release_all();
    return 0;
}

typedef test_rig run;

// The rig for every test here: net from seed 9's parameters, faults wrapped around the devices.
static void run_open(run *r, const char *spec, uint64_t mem, const char *faults) {
    float *p = malloc(sizeof(float) * net.n_params);
    model_init_params(&net, p, 9);
    test_rig_open(r, &net, spec, faults, p, BATCH, 9, mem);
    free(p);
}

static void run_close(run *r) { test_rig_close(r); }

static void batch_idx(uint32_t *idx, int step) {
    for (int i = 0; i < BATCH; i++) idx[i] = (uint32_t)((step * BATCH + i * 7) % data.n);
}

// One step; checks that every position got a loss (none lost) and that shares add up to B.
static void step(run *r, int k, step_stats *st) {
    uint32_t idx[BATCH];
    float loss[BATCH];
    batch_idx(idx, k);
    for (int i = 0; i < BATCH; i++) loss[i] = NAN;
    ht_error e;
    if (engine_train_step(r->g, &data, idx, BATCH, 0, loss, NULL, st, &e) < 0) fail_msg("%s", e.msg);
    int total = 0;
    for (int d = 0; d < r->n; d++) total += st->share[d];
    assert_int_equal(total, BATCH);
    for (int i = 0; i < BATCH; i++)
        if (!isfinite(loss[i])) fail_msg("step %d: position %d has no loss", k, i);
}

// A shard larger than the device's micro-batch gives the gradient of the whole shard.
static void test_micro_batches_equal_whole_shard(void **state) {
    (void)state;
    const char *specs[] = {"cpu", "cl:0.0"};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !have_cl) continue;
        run whole, small;
        run_open(&whole, specs[k], 0, NULL);
        run_open(&small, specs[k], 24u << 20, NULL); // 24 MiB: a few dozen samples at a time
        printf("%s: micro-batch %d without a limit, %d under 24 MiB\n", specs[k], whole.devs[0].micro,
               small.devs[0].micro);
        assert_true(small.devs[0].micro < BATCH);
        assert_true(small.devs[0].micro < whole.devs[0].micro);
        step_stats st;
        step(&whole, 0, &st);
        step(&small, 0, &st);
        char what[64];
        snprintf(what, sizeof what, "%s micro-batched vs whole shard", specs[k]);
        assert_true(check_step_grad(&net, engine_grad(small.g), engine_grad(whole.g), what));
        run_close(&whole);
        run_close(&small);
    }
}

// An out-of-memory failure halves the micro-batch and the step still gives the same gradient.
static void test_injected_oom_shrinks_micro_batch(void **state) {
    (void)state;
    const char *specs[] = {"cpu", "cl:0.0"};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !have_cl) continue;
        char fault[64];
        snprintf(fault, sizeof fault, "oom:%s@1", specs[k]);
        run ref, oom;
        run_open(&ref, specs[k], 0, NULL);
        run_open(&oom, specs[k], 0, fault);
        int before = oom.devs[0].micro;
        step_stats st;
        step(&ref, 0, &st);
        step(&oom, 0, &st);
        const char *ev = engine_take_events(oom.g);
        printf("%s", ev);
        assert_non_null(strstr(ev, "micro-batch"));
        assert_int_equal(engine_micro(oom.g, 0), before / 2);
        assert_true(check_step_grad(&net, engine_grad(oom.g), engine_grad(ref.g),
                                    "gradient after an injected out-of-memory"));
        run_close(&ref);
        run_close(&oom);
    }
}

// The self-check of r's devices against a single-threaded CPU device, as train runs it.
static void self_check(run *r, const uint32_t *idx, int n) {
    ht_error e;
    device *ref;
    int nref;
    if (device_open_list(&ref, &nref, "cpu:1", &net, n, 0, &e) < 0) fail_msg("%s", e.msg);
    if (engine_self_check(r->g, ref, &data, idx, n, &e) < 0) fail_msg("%s", e.msg);
    device_close_list(ref, nref);
}

// A device whose results are wrong is excluded by the self-check, with its worst error named.
static void test_self_check_excludes_corrupt_device(void **state) {
    (void)state;
    const char *mixes[][2] = {{"cpu:1,cpu:1", "cpu:1#2"}, {"cl:0.0,cpu", "cl:0.0"}};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !have_cl) continue;
        char fault[64];
        snprintf(fault, sizeof fault, "corrupt:%s", mixes[k][1]);
        run r;
        run_open(&r, mixes[k][0], 0, fault);
        uint32_t idx[BATCH]; // batch_idx fills a whole batch; the check uses the first 8
        batch_idx(idx, 0);
        self_check(&r, idx, 8);
        const char *ev = engine_take_events(r.g);
        printf("%s", ev);
        assert_int_equal(engine_active(r.g), 1);
        assert_non_null(strstr(ev, mixes[k][1]));
        assert_non_null(strstr(ev, "excluded"));
        run_close(&r);
        // Without the fault every device passes.
        run_open(&r, mixes[k][0], 0, NULL);
        self_check(&r, idx, 8);
        assert_int_equal(engine_active(r.g), 2);
        run_close(&r);
    }
}

// The output layer's and the losses' bounds grow with depth past ENGINE_SELF_CHECK_DEPTH
// layers with weights: 1 for the 3-layer network (5), 43/8 for ResNet-20 (21 convolutions, 21
// batchnorms, a dense layer), whose correct CPU device passes (test_rgb_cli's presets).
static void test_self_check_depth(void **state) {
    (void)state;
    assert_true(engine_self_check_depth(&net) == 1.0);
    model m;
    ht_error e;
    if (model_init(&m, "resnet20", &e) < 0) fail_msg("%s", e.msg);
    assert_true(fabs(engine_self_check_depth(&m) - 43.0 / ENGINE_SELF_CHECK_DEPTH) < 1e-12);
    model_free(&m);
}

// One of three devices fails at step 2 (an error, or no answer): the run goes on, and every
// step, the failure step included, gives the gradient and update of a run where that device's
// shards went to the others from step 2.
static void test_failure_mid_run(void **state) {
    (void)state;
    const char *spec = have_cl ? "cpu:1,cl:0.0,cpu:1" : "cpu:1,cpu:1,cpu:1";
    const char *victim = have_cl ? "cl:0.0" : "cpu:1#2";
    const char *kinds[] = {"fail", "hang"};
    float *before = malloc(sizeof(float) * net.n_params);
    for (int k = 0; k < 2; k++) {
        char fault[64];
        snprintf(fault, sizeof fault, "%s:%s@2", kinds[k], victim);
        run ref, hit;
        run_open(&ref, spec, 0, NULL);
        run_open(&hit, spec, 0, fault);
        step_stats st;
        for (int s = 1; s <= 3; s++) {
            // The short timeout starts once every device is warm: a first step that compiles
            // kernels on a loaded machine may take longer. 4 s leaves room for the sanitizer
            // builds too (a step here takes ~0.05 s, ~1.5 s under TSan).
            if (s == 2) engine_set_timeout(hit.g, 4.0);
            if (s == 2) engine_drop_device(ref.g, 1);
            // Each step starts from the reference's parameters (engine_set_params broadcasts
            // them), so only this step's rounding is compared, never two trajectories.
            ht_error e;
            if (engine_set_params(hit.g, engine_params(ref.g), &e) < 0) fail_msg("%s", e.msg);
            memcpy(before, engine_params(ref.g), sizeof(float) * net.n_params);
            step(&ref, s, &st);
            step(&hit, s, &st);
            char what[96];
            snprintf(what, sizeof what, "'%s' at step 2: gradient of step %d", kinds[k], s);
            assert_true(check_step_grad(&net, engine_grad(hit.g), engine_grad(ref.g), what));
            if (s != 2) continue;
            assert_int_equal(st.share[1], 0); // none of the failed device's work counted
            // The failure step's update was made, once (its size is the gradient's business).
            snprintf(what, sizeof what, "'%s' at step 2: update of the failure step", kinds[k]);
            assert_true(check_updates(&net, engine_params(hit.g), engine_params(ref.g), before,
                                      TOL_GRAD_ROUNDING, TOL_GRAD_BRANCH, what));
        }
        const char *ev = engine_take_events(hit.g);
        printf("%s", ev);
        assert_non_null(strstr(ev, "step 2: device"));
        assert_int_equal(engine_active(hit.g), 2);
        run_close(&ref);
        run_close(&hit);
    }
    free(before);
}

// A non-finite gradient skips the step (weights unchanged), or stops when asked to.
static void test_non_finite_values(void **state) {
    (void)state;
    run r;
    run_open(&r, "cpu", 0, "nan:cpu@2");
    step_stats st;
    step(&r, 1, &st);
    float *before = malloc(sizeof(float) * net.n_params);
    memcpy(before, engine_params(r.g), sizeof(float) * net.n_params);
    uint32_t idx[BATCH];
    batch_idx(idx, 2);
    ht_error e;
    assert_int_equal(engine_train_step(r.g, &data, idx, BATCH, 0, NULL, NULL, &st, &e), 0);
    assert_int_equal(st.skipped, 1);
    assert_memory_equal(before, engine_params(r.g), sizeof(float) * net.n_params);
    assert_non_null(strstr(engine_take_events(r.g), "non-finite"));
    run_close(&r);
    float *p = malloc(sizeof(float) * net.n_params);
    model_init_params(&net, p, 9);
    engine_config c = {.m = &net, .params = p, .max_batch = BATCH, .seed = 9, .nan_stop = 1};
    test_rig_open_with(&r, "cpu", "nan:cpu@1", 0, &c);
    free(p);
    batch_idx(idx, 1);
    assert_int_equal(engine_train_step(r.g, &data, idx, BATCH, 0, NULL, NULL, &st, &e), -1);
    assert_non_null(strstr(e.msg, "non-finite"));
    run_close(&r);
    free(before);
}

// Through the CLI: a batch of 250 trains on an OpenCL device limited to 64 MiB (micro-batches
// of 16) and under POCL_MEMORY_LIMIT=1 (184), and moves the weights and the losses as the CPU
// device does: 625 samples, 125 held out, two steps from the same weights at the default lr
// 0.05. (Without a limit PoCL would take ~500 at a time, from the memory it reports;
// test_micro_batches_equal_whole_shard compares micro-batches and the whole shard on the
// device itself.) The self-check is off: its 8-sample probe can exclude a sound device (see
// test_self_check_excludes_corrupt_device).
static void test_memory_limits_same_curve(void **state) {
    (void)state;
    if (!have_cl) {
        printf("SKIPPED: no OpenCL platform\n");
        skip();
    }
    char *dir = test_tmpdir("memlimit");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 625, 1);
    assert_non_null(train);
    float *init = malloc(sizeof(float) * net.n_params);
    model_init_params(&net, init, 13);
    char *init_path = test_save_params(&net, init, dir, "init.safetensors");
    const char *what[] = {"cpu", "cl:0.0 --mem-limit 64M", "cl:0.0 under POCL_MEMORY_LIMIT=1"};
    const char *opts[] = {"--devices cpu", "--devices cl:0.0 --mem-limit 64M", "--devices cl:0.0"};
    double loss[3], vloss[3];
    float *w[3];
    for (int k = 0; k < 3; k++) {
        char args[4096], *out;
        if (k == 2) setenv("POCL_MEMORY_LIMIT", "1", 1);
        snprintf(args, sizeof args,
                 "train %s --train '%s' --batch 250 --epochs 1 --val-split 0.2 --load '%s' "
                 "--save '%s/w%d.safetensors' --out '%s' --name m%d --no-progress --no-self-check",
                 opts[k], train, init_path, dir, k, dir, k);
        int rc = test_run_cli(args, &out);
        unsetenv("POCL_MEMORY_LIMIT");
        if (rc != 0) fail_msg("hetrain %s failed (%d):\n%s", args, rc, out);
        free(out);
        char path[1200];
        snprintf(path, sizeof path, "%s/m%d.log", dir, k);
        char *log = test_read_file(path, NULL);
        char *mb = strstr(log, "micro-batch");
        printf("%s: %.*s\n", what[k], mb ? 20 : 0, mb ? mb : "");
        assert_non_null(mb);
        if (k > 0) assert_true(atoi(mb + 12) < 250);
        if (k == 1) assert_true(atoi(mb + 12) < 64);
        free(log);
        snprintf(path, sizeof path, "%s/w%d.safetensors", dir, k);
        w[k] = test_load_params(&net, path);
        snprintf(path, sizeof path, "%s/m%d.metrics.csv", dir, k);
        loss[k] = test_metrics_value(path, 0, "loss");
        vloss[k] = test_metrics_value(path, 0, "val_loss");
    }
    for (int k = 1; k < 3; k++) {
        printf("loss %.6f vs %.6f, val_loss %.6f vs %.6f\n", loss[k], loss[0], vloss[k], vloss[0]);
        char msg[96];
        snprintf(msg, sizeof msg, "weights after 2 steps, %s vs cpu", what[k]);
        assert_true(check_updates(&net, w[k], w[0], init, TOL_RUN_OUTPUT, TOL_RUN_OTHER, msg));
        assert_true(fabs(loss[k] - loss[0]) <= TOL_RUN_LOSS * loss[0]);
        assert_true(fabs(vloss[k] - vloss[0]) <= TOL_RUN_LOSS * vloss[0]);
    }
    for (int k = 0; k < 3; k++) free(w[k]);
    free(init);
    free(init_path);
    free(train);
    free(dir);
}

// HETRAIN_FAULT's grammar: what parses, and one message per kind of mistake.
static void test_fault_plan_grammar(void **state) {
    (void)state;
    fault_plan p;
    ht_error e;
    assert_int_equal(fault_plan_parse(&p, "fail:cl:0.1@30,corrupt:cpu#2", &e), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.f[0].kind, FAULT_FAIL);
    assert_string_equal(p.f[0].spec, "cl:0.1");
    assert_int_equal(p.f[0].step, 30);
    assert_int_equal(p.f[1].kind, FAULT_CORRUPT);
    assert_string_equal(p.f[1].spec, "cpu#2");
    assert_int_equal(p.f[1].step, 0);
    assert_true(fault_planned(&p, FAULT_FAIL, "cl:0.1", 30));
    assert_false(fault_planned(&p, FAULT_FAIL, "cl:0.1", 29));
    assert_int_equal(fault_plan_parse(&p, NULL, &e), 0);
    assert_int_equal(p.n, 0);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"fail", "expected KIND:DEVICE[@STEP]"},
        {"boom:cpu", "unknown fault \"boom\""},
        {"oom:cpu@0", "expected a step number >= 1"},
        {"fail:@5", "\"fail\" names no device"}, // found by fuzzing: an empty device was taken
        {"nan:@", "expected a step number >= 1"},
        {"hang:@1,oom:cpu", "\"hang\" names no device"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        if (fault_plan_parse(&p, bad[i].text, &e) == 0) fail_msg("\"%s\" parsed", bad[i].text);
        if (!strstr(e.msg, bad[i].msg))
            fail_msg("\"%s\": expected \"%s\" in \"%s\"", bad[i].text, bad[i].msg, e.msg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_micro_batches_equal_whole_shard),
        cmocka_unit_test(test_injected_oom_shrinks_micro_batch),
        cmocka_unit_test(test_self_check_excludes_corrupt_device),
        cmocka_unit_test(test_self_check_depth),
        cmocka_unit_test(test_failure_mid_run),
        cmocka_unit_test(test_non_finite_values),
        cmocka_unit_test(test_memory_limits_same_curve),
        cmocka_unit_test(test_fault_plan_grammar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
