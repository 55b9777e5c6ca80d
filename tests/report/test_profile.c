// --profile: a device's record has one entry per layer and direction, with times, the model's
// multiply-adds and shares that add up to the steps' time; OpenCL entries split into kernel,
// transfer and GEMM time within the layer's own; profiling off keeps the record empty and
// profiling on leaves the gradient's bits as they were; the CLI prints, logs and writes it.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data/data.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/model.h"
#include "app/report/profile_table.h"
#include "tests/lib/testutil.h"

#define BATCH 16
#define STEPS 2
// The rows' shares are their times over the steps' wall time, and the rows tile it (the last
// ones are the remainders of the phases the device's own rows sit in): they add up to 100 but
// for float rounding.
#define TOL_SHARE_SUM 1e-6
// An OpenCL layer's commands are enqueued after the queue was drained at the layer's start and
// have finished when it is drained at its end; they run one after another (in-order queue), so
// their event times add up to at most the wall time between the two. The clocks of events and
// of the host may differ in resolution and origin: 1 ms a row allows for that.
#define TOL_EVENTS_S 1e-3

// Random pixels and labels: profiling needs no real images.
static void synthetic(dataset *ds, int n) {
    *ds = (dataset){0};
    ds->n = n;
    ds->c = 1;
    ds->h = ds->w = 28;
    ds->x = malloc(sizeof(float) * (size_t)n * 784);
    ds->y = malloc((size_t)n);
    uint32_t r = 12345;
    for (size_t i = 0; i < (size_t)n * 784; i++) {
        r = r * 1664525u + 1013904223u;
        ds->x[i] = (float)(r >> 8) / 16777216.0f;
    }
    for (int i = 0; i < n; i++) ds->y[i] = (uint8_t)(i % 10);
}

// STEPS steps of the 3-layer network on spec, profiled or not; the record of its first device
// (device_profile_init'd by the caller), the steps' phases and the last step's mean gradient
// (malloc'd) come back.
static float *run_steps(const model *m, const dataset *ds, const char *spec, int profile,
                        device_profile *p, profile_steps *ps) {
    ht_error e;
    float *init = malloc(sizeof(float) * m->n_params);
    model_init_params(m, init, 5);
    test_rig rig;
    test_rig_open(&rig, m, spec, NULL, init, BATCH, 5, 0);
    if (profile && device_profile_start(&rig.devs[0], &e) != 1) fail_msg("%s: %s", spec, e.msg);
    memset(ps, 0, sizeof *ps);
    uint32_t idx[BATCH];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < BATCH; i++) idx[i] = (uint32_t)(s * BATCH + i);
        step_stats st;
        if (engine_train_step(rig.g, ds, idx, BATCH, 0, NULL, NULL, &st, &e) < 0)
            fail_msg("%s: %s", spec, e.msg);
        profile_steps_add(ps, &st, BATCH);
    }
    float *grad = malloc(sizeof(float) * m->n_params);
    memcpy(grad, engine_grad(rig.g), sizeof(float) * m->n_params);
    assert_int_equal(device_profile_get(&rig.devs[0], p), 1);
    test_rig_close(&rig);
    free(init);
    return grad;
}

// What every device's rows must show: one per layer and direction, in execution order, with
// the model's multiply-adds, times > 0 where a layer does work, and shares adding up to 100.
static void check_rows(const model *m, const device_profile *p, const profile_steps *ps,
                       profile_row *rows) {
    int L = m->n_layers, n = profile_rows(m, p, ps, rows);
    assert_int_equal(n, 2 * L + PROFILE_EXTRA_ROWS);
    assert_int_equal(p->samples, STEPS * BATCH);
    assert_int_equal(p->shards, STEPS);
    int seen[2 * 64] = {0};
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const profile_row *r = &rows[i];
        sum += r->share;
        if (r->time_s < 0) fail_msg("row \"%s\": %g s", r->what, r->time_s);
        if (r->layer < 0) continue;
        assert_true(i < 2 * L);
        seen[2 * r->layer + r->dir]++;
        // Execution order: forwards from the bottom, then backwards from the top.
        assert_int_equal(r->layer, i < L ? i : 2 * L - 1 - i);
        assert_int_equal(r->dir, i >= L);
        double want = 2e-9 * model_layer_macs(m, r->layer, r->dir) * STEPS * BATCH;
        assert_true(r->gflop == want);
        // A relu after a conv is the conv's (its rows hold only the timing around nothing).
        layer_kind k = m->layers[r->layer].kind;
        if (k != LAYER_RELU && !(r->time_s > 0)) fail_msg("row \"%s %s\": no time", r->what,
                                                          r->dir ? "backward" : "forward");
    }
    for (int k = 0; k < 2 * L; k++) assert_int_equal(seen[k], 1);
    if (fabs(sum - 100) > TOL_SHARE_SUM) fail_msg("shares add up to %.9f%%", sum);
    // Known counts: conv2 of the 3-layer network does 10,838,016 multiply-adds a sample
    // forward (hetrain summary), twice that backward; conv1 backward only its weights'.
    assert_true(rows[2].gflop == 2e-9 * 10838016.0 * STEPS * BATCH);
    assert_true(rows[2 * L - 1 - 2].gflop == 2e-9 * 2 * 10838016.0 * STEPS * BATCH);
    assert_true(rows[2 * L - 1].gflop == 2e-9 * 225792.0 * STEPS * BATCH);
}

static void test_cpu_profile(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_init(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    assert_true(m.n_layers <= 64);
    dataset ds;
    synthetic(&ds, STEPS * BATCH);
    device_profile on, off;
    profile_steps ps_on, ps_off;
    if (device_profile_init(&on, m.n_layers, &e) < 0 || device_profile_init(&off, m.n_layers, &e) < 0)
        fail_msg("%s", e.msg);
    // Two threads: the trunk's layers are timed on each and share its wall time.
    float *g_off = run_steps(&m, &ds, "cpu:2", 0, &off, &ps_off);
    float *g_on = run_steps(&m, &ds, "cpu:2", 1, &on, &ps_on);
    // Off: nothing measured, not a sample counted.
    assert_int_equal(off.samples, 0);
    assert_int_equal(off.shards, 0);
    for (int k = 0; k < 2 * m.n_layers; k++) assert_true(off.layer[k].time_s == 0);
    assert_true(off.rest.time_s == 0 && off.params.time_s == 0);
    // On: the same gradient to the bit.
    assert_memory_equal(g_on, g_off, sizeof(float) * m.n_params);
    assert_int_equal(on.events, 0);
    // The engine binds the CPU device to its parameters (bind_params): no copy, no time.
    assert_true(on.params.time_s == 0 && on.rest.time_s >= 0);
    profile_row rows[2 * 64 + PROFILE_EXTRA_ROWS];
    check_rows(&m, &on, &ps_on, rows);
    free(g_on);
    free(g_off);
    device_profile_free(&on);
    device_profile_free(&off);
    dataset_free(&ds);
    model_free(&m);
}

static void test_opencl_profile(void **state) {
    (void)state;
    if (!test_have_opencl("the OpenCL profile is not checked")) return;
    model m;
    ht_error e;
    if (model_init(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    dataset ds;
    synthetic(&ds, STEPS * BATCH);
    device_profile p;
    profile_steps ps;
    if (device_profile_init(&p, m.n_layers, &e) < 0) fail_msg("%s", e.msg);
    free(run_steps(&m, &ds, "cl:0.0", 1, &p, &ps));
    assert_int_equal(p.events, 1);
    profile_row rows[2 * 64 + PROFILE_EXTRA_ROWS];
    check_rows(&m, &p, &ps, rows);
    for (int i = 0; i < 2 * m.n_layers + 2; i++) { // the layers, outside them, set_params
        const profile_row *r = &rows[i];
        assert_true(r->split);
        double parts = r->kernel_s + r->transfer_s + r->gemm_s;
        if (r->kernel_s < 0 || r->transfer_s < 0 || r->gemm_s < 0 || parts > r->time_s + TOL_EVENTS_S)
            fail_msg("row \"%s\": kernel %g + transfer %g + gemm %g s against %g s", r->what,
                     r->kernel_s, r->transfer_s, r->gemm_s, r->time_s);
        // Convolutions and dense layers are GEMMs (conv: and im2col/col2im kernels).
        if (r->layer >= 0 && model_layer_macs(&m, r->layer, 0) > 0 && !(r->gemm_s > 0))
            fail_msg("row \"%s\": no GEMM time", r->what);
        if (r->layer >= 0 && m.layers[r->layer].kind == LAYER_CONV2D && !(r->kernel_s > 0))
            fail_msg("row \"%s\": no kernel time", r->what);
        if (r->layer >= 0) assert_true(r->transfer_s == 0);
    }
    // The shard's inputs go in and its gradient comes out; the parameters go in.
    assert_true(p.rest.transfer_s > 0 && p.params.transfer_s > 0);
    device_profile_free(&p);
    dataset_free(&ds);
    model_free(&m);
}

// Sums the share_pct column of a profile CSV for one device; counts its rows.
static double csv_share_sum(const char *csv, const char *device, int *rows) {
    double sum = 0;
    *rows = 0;
    const char *line = strchr(csv, '\n');
    size_t dl = strlen(device);
    while (line && line[1]) {
        line++;
        if (!strncmp(line, device, dl) && line[dl] == ',') {
            const char *f = line;
            for (int k = 0; k < 5; k++) f = strchr(f, ',') + 1; // share_pct is the 6th column
            sum += strtod(f, NULL);
            (*rows)++;
        }
        line = strchr(line, '\n');
    }
    return sum;
}

static void test_cli_profile(void **state) {
    (void)state;
    test_csv_data data;
    assert_int_equal(test_csv_data_init(&data, "profile-cli", 32, 8), 0);
    char args[4096], path[1300];
    snprintf(args, sizeof args, "train %s --batch 16 --epochs 1 --val-split 0 --devices cpu:1 "
                                "--no-progress --profile --out '%s' --name p", data.args, data.dir);
    char *out = test_expect_cli(args, 0, "profile of cpu");
    assert_non_null(strstr(out, "conv2 (conv)"));
    assert_non_null(strstr(out, "host: update"));
    assert_non_null(strstr(out, "p.profile.csv"));
    snprintf(path, sizeof path, "%s/p.log", data.dir);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "profile of cpu"));
    assert_non_null(strstr(log, "wait: until the pass ends"));
    snprintf(path, sizeof path, "%s/p.profile.csv", data.dir);
    char *csv = test_read_file(path, NULL);
    assert_non_null(csv);
    static const char header[] = "device,layer,kind,direction,time_s,share_pct,gflop,gflops,"
                                 "kernel_s,transfer_s,gemm_s,steps,samples\n";
    assert_true(!strncmp(csv, header, sizeof header - 1));
    assert_non_null(strstr(csv, "cpu:1,conv2,conv,forward,"));
    assert_non_null(strstr(csv, "cpu:1,reduce,host,,"));
    int rows;
    double sum = csv_share_sum(csv, "cpu:1", &rows);
    assert_int_equal(rows, 2 * 16 + PROFILE_EXTRA_ROWS); // the 3-layer network has 16 layers
    // Each share is written to 3 decimals.
    if (fabs(sum - 100) > rows * 0.0005 + TOL_SHARE_SUM) fail_msg("CSV shares add up to %g", sum);
    free(csv);
    free(log);
    free(out);
    // --quiet: the table is in the log only; without --profile there is none.
    snprintf(args, sizeof args, "train %s --batch 16 --epochs 1 --val-split 0 --devices cpu:1 "
                                "--no-progress --profile --quiet --out '%s' --name q", data.args,
             data.dir);
    out = test_expect_cli(args, 0, NULL);
    assert_null(strstr(out, "profile of"));
    snprintf(path, sizeof path, "%s/q.log", data.dir);
    log = test_read_file(path, NULL);
    assert_non_null(strstr(log, "profile of cpu"));
    free(log);
    free(out);
    snprintf(args, sizeof args, "train %s --batch 16 --epochs 1 --val-split 0 --devices cpu:1 "
                                "--no-progress --out '%s' --name r", data.args, data.dir);
    out = test_expect_cli(args, 0, NULL);
    assert_null(strstr(out, "profile of"));
    snprintf(path, sizeof path, "%s/r.profile.csv", data.dir);
    assert_null(test_read_file(path, NULL));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_profile),
        cmocka_unit_test(test_opencl_profile),
        cmocka_unit_test(test_cli_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
