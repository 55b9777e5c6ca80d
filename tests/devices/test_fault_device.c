// HETRAIN_FAULT's wrapper device (devices/fault.c): each kind of fault fires at its step only
// and does what fault.h says, against the same device called without the wrapper.
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "devices/ocl_blas.h"
#include "devices/ocl_util.h"
#include "devices/device.h"
#include "devices/fault.h"
#include "nn/model.h"
#include "tests/lib/testutil.h"

#define N 32 // samples per shard, and the devices' largest batch: their micro-batch at start

static model net;
static float *params;
static float x[N * 28 * 28];
static uint8_t y[N];
static uint32_t ids[N];
static int have_cl;

static int setup(void **state) {
    (void)state;
    ht_error e;
    if (model_init_preset(&net, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(net.in_c * net.in_h * net.in_w, 28 * 28);
    params = malloc(sizeof(float) * net.n_params);
    model_init_params(&net, params, 9);
    // Pixels in [0, 1) from a fixed LCG: the wrapper cares about the numbers, not the images.
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / (float)(1u << 24);
    }
    for (int i = 0; i < N; i++) {
        y[i] = (uint8_t)(i % 10);
        ids[i] = (uint32_t)i;
    }
    have_cl = test_have_opencl("OpenCL cases are skipped");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(params);
    model_free(&net);
    ocl_blas_release_all();
    return 0;
}

// What one shard gave back.
typedef struct shard_out {
    int rc;
    ht_error err;
    float *grad, loss[N];
    int32_t pred[N];
    int micro;
    char note[256];
} shard_out;

static void out_init(shard_out *o) {
    memset(o, 0, sizeof *o);
    o->grad = malloc(sizeof(float) * net.n_params);
}

// Runs the shard of step `step` through ops/ctx (a wrapper or the device under it).
static void run_shard(const device_ops *ops, void *ctx, long step, shard_out *o) {
    ht_error e = {{0}};
    if (ops->set_params(ctx, params, &e) < 0) fail_msg("set_params: %s", e.msg);
    shard_job job = {.x = x, .y = y, .ids = ids, .n = N, .seed = 7, .epoch = 0, .step = step};
    shard_result res = {.grad_sum = o->grad, .loss = o->loss, .pred = o->pred};
    memset(o->err.msg, 0, sizeof o->err.msg);
    o->rc = ops->train_shard(ctx, &job, &res, &o->err);
    o->micro = res.micro;
    memcpy(o->note, res.note, sizeof o->note);
}

// Opens spec's devices and wraps them with plan. Keeps device 0's own ops and ctx in *ops/*ctx,
// so the tests can call it without the wrapper (the same state, so the same numbers).
static device *open_wrapped(const char *spec, const char *plan, int *n, const device_ops **ops,
                            void **ctx) {
    device *devs;
    ht_error e;
    if (device_open_list(&devs, n, spec, &net, N, 0, &e) < 0) fail_msg("%s: %s", spec, e.msg);
    *ops = devs[0].ops;
    *ctx = devs[0].ctx;
    if (fault_wrap_devices(devs, *n, &net, plan, &e) < 0) fail_msg("%s: %s", plan, e.msg);
    assert_ptr_not_equal(devs[0].ops, *ops);
    return devs;
}

// The gradient, losses and predictions of a and b are the same bits.
static void assert_same_shard(const shard_out *a, const shard_out *b, const char *what) {
    assert_int_equal(a->rc, 0);
    assert_int_equal(b->rc, 0);
    if (memcmp(a->grad, b->grad, sizeof(float) * net.n_params))
        fail_msg("%s: gradient differs from the unwrapped device's", what);
    assert_memory_equal(a->loss, b->loss, sizeof a->loss);
    assert_memory_equal(a->pred, b->pred, sizeof a->pred);
}

// fail: an error at its step, and the device's own results at every other step.
static void test_fail_at_step(void **state) {
    (void)state;
    int n;
    const device_ops *ops;
    void *ctx;
    device *devs = open_wrapped("cpu:1", "fail:cpu:1@2", &n, &ops, &ctx);
    shard_out ref, got;
    out_init(&ref);
    out_init(&got);
    run_shard(ops, ctx, 1, &ref);
    const long steps[] = {0, 1, 3};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        run_shard(devs[0].ops, devs[0].ctx, steps[k], &got);
        assert_same_shard(&got, &ref, "fail@2 at another step");
    }
    run_shard(devs[0].ops, devs[0].ctx, 2, &got);
    assert_int_equal(got.rc, -1);
    assert_string_equal(got.err.msg, "injected failure (HETRAIN_FAULT) at step 2");
    device_close_list(devs, n);
    free(ref.grad);
    free(got.grad);
}

// nan: grad_sum[0] is NaN at its step and everything else is the device's own.
static void test_nan_at_step(void **state) {
    (void)state;
    int n;
    const device_ops *ops;
    void *ctx;
    device *devs = open_wrapped("cpu:1", "nan:cpu:1@2", &n, &ops, &ctx);
    shard_out ref, got;
    out_init(&ref);
    out_init(&got);
    run_shard(ops, ctx, 2, &ref);
    run_shard(devs[0].ops, devs[0].ctx, 1, &got);
    assert_same_shard(&got, &ref, "nan@2 at step 1");
    run_shard(devs[0].ops, devs[0].ctx, 0, &got);
    assert_same_shard(&got, &ref, "nan@2 outside training");
    run_shard(devs[0].ops, devs[0].ctx, 2, &got);
    assert_int_equal(got.rc, 0);
    assert_true(isnan(got.grad[0]));
    assert_false(isnan(ref.grad[0]));
    got.grad[0] = ref.grad[0];
    assert_same_shard(&got, &ref, "nan@2 past element 0");
    device_close_list(devs, n);
    free(ref.grad);
    free(got.grad);
}

// corrupt: every shard's gradient is exactly 1.5 times the device's own (a float product of the
// same bits), in training and out of it (step 0: self-check, calibration); losses unchanged.
static void test_corrupt_always(void **state) {
    (void)state;
    int n;
    const device_ops *ops;
    void *ctx;
    device *devs = open_wrapped("cpu:1", "corrupt:cpu:1", &n, &ops, &ctx);
    shard_out ref, got;
    out_init(&ref);
    out_init(&got);
    run_shard(ops, ctx, 0, &ref);
    for (size_t i = 0; i < net.n_params; i++) ref.grad[i] *= 1.5f;
    const long steps[] = {0, 1, 5};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        run_shard(devs[0].ops, devs[0].ctx, steps[k], &got);
        assert_same_shard(&got, &ref, "corrupt: 1.5 x the device's gradient");
    }
    device_close_list(devs, n);
    free(ref.grad);
    free(got.grad);
}

// oom: at its step the device halves its micro-batch, says so, and runs the shard again. The
// gradient is then summed over micro-batches of N/2 instead of one of N: other GEMM shapes and
// another order of the float sums, so it agrees to rounding only. check_step_grad allows
// that (output layer TOL_GRAD_ROUNDING; the layers below TOL_GRAD_BRANCH, for a ReLU or
// max-pool input within rounding of its branch; testutil.h has the measurements), while a
// shard run twice into the sum or not at all is off by 100%.
static void test_oom_halves_micro_batch(void **state) {
    (void)state;
    const char *specs[] = {"cpu:1", "cl:0.0"};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !have_cl) continue;
        char plan[64];
        snprintf(plan, sizeof plan, "oom:%s@3", specs[k]);
        int n;
        const device_ops *ops;
        void *ctx;
        device *devs = open_wrapped(specs[k], plan, &n, &ops, &ctx);
        assert_int_equal(devs[0].micro, N);
        shard_out ref, got;
        out_init(&ref);
        out_init(&got);
        run_shard(ops, ctx, 3, &ref);
        assert_int_equal(ref.micro, N);
        run_shard(devs[0].ops, devs[0].ctx, 2, &got); // not its step: nothing changes
        assert_int_equal(got.micro, N);
        assert_string_equal(got.note, "");
        run_shard(devs[0].ops, devs[0].ctx, 3, &got);
        printf("%s: %s\n", specs[k], got.note);
        assert_int_equal(got.rc, 0);
        assert_int_equal(got.micro, N / 2);
        char want[96];
        snprintf(want, sizeof want, "out of memory (injected) at micro-batch %d; now %d", N, N / 2);
        assert_string_equal(got.note, want);
        char what[64];
        snprintf(what, sizeof what, "%s after an injected out-of-memory", specs[k]);
        assert_true(check_step_grad(&net, got.grad, ref.grad, what));
        assert_true(check_tensor(got.loss, ref.loss, N, TOL_GRAD_ROUNDING, 1e-3f, "loss"));
        run_shard(devs[0].ops, devs[0].ctx, 4, &got); // the smaller size stays
        assert_int_equal(got.micro, N / 2);
        device_close_list(devs, n);
        free(ref.grad);
        free(got.grad);
    }
}

typedef struct hang_call {
    device *d;
    long step;
    shard_out out;
    atomic_int done;
} hang_call;

static void *hang_thread(void *arg) {
    hang_call *h = arg;
    run_shard(h->d->ops, h->d->ctx, h->step, &h->out);
    atomic_store(&h->done, 1);
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// hang: at its step the shard does not come back until fault_release_hangs, then fails; from
// then on that device's hangs fail at once, while a device wrapped afterwards hangs again.
static void test_hang_until_released(void **state) {
    (void)state;
    int n;
    const device_ops *ops;
    void *ctx;
    device *devs = open_wrapped("cpu:1", "hang:cpu:1@4", &n, &ops, &ctx);
    hang_call h = {.d = &devs[0], .step = 3};
    out_init(&h.out);
    hang_thread(&h); // not its step: answers
    assert_int_equal(h.out.rc, 0);
    for (int round = 0; round < 2; round++) {
        h.step = 4;
        atomic_store(&h.done, 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, hang_thread, &h), 0);
        struct timespec wait = {0, 100 * 1000 * 1000};
        nanosleep(&wait, NULL);
        if (atomic_load(&h.done)) fail_msg("round %d: the shard of step 4 came back", round);
        double t0 = now_s();
        fault_release_hangs();
        // 2 s for the ~20 ms promised: a loaded machine or a sanitizer may be slow to schedule.
        while (!atomic_load(&h.done) && now_s() - t0 < 2.0) {
            struct timespec tick = {0, 1000 * 1000};
            nanosleep(&tick, NULL);
        }
        if (!atomic_load(&h.done)) fail_msg("round %d: still hung 2 s after the release", round);
        printf("round %d: released in %.1f ms\n", round, 1e3 * (now_s() - t0));
        pthread_join(t, NULL);
        assert_int_equal(h.out.rc, -1);
        assert_string_equal(h.out.err.msg, "stopped while hung (HETRAIN_FAULT)");
        // Released for good: the next hang of this device fails at once.
        h.step = 4;
        hang_thread(&h);
        assert_int_equal(h.out.rc, -1);
        assert_string_equal(h.out.err.msg, "stopped while hung (HETRAIN_FAULT)");
        // A device wrapped after the release hangs again (the second round).
        device_close_list(devs, n);
        devs = open_wrapped("cpu:1", "hang:cpu:1@4", &n, &ops, &ctx);
        h.d = &devs[0];
    }
    device_close_list(devs, n);
    free(h.out.grad);
}

// Outside its faults the wrapper is the device: set_params, infer and shrink reach it.
static void test_delegates(void **state) {
    (void)state;
    int n;
    const device_ops *ops;
    void *ctx;
    device *devs = open_wrapped("cpu:1", "fail:cpu:1@9", &n, &ops, &ctx);
    size_t nc = (size_t)net.n_classes;
    float *other = malloc(sizeof(float) * net.n_params), *probs[3];
    model_init_params(&net, other, 10);
    for (int k = 0; k < 3; k++) probs[k] = malloc(sizeof(float) * N * nc);
    ht_error e;
    assert_int_equal(ops->set_params(ctx, params, &e), 0);
    assert_int_equal(ops->infer(ctx, x, N, probs[0], &e), 0);
    // Other weights through the wrapper: the device infers with them, through either door.
    assert_int_equal(devs[0].ops->set_params(devs[0].ctx, other, &e), 0);
    assert_int_equal(devs[0].ops->infer(devs[0].ctx, x, N, probs[1], &e), 0);
    assert_int_equal(ops->infer(ctx, x, N, probs[2], &e), 0);
    assert_memory_equal(probs[1], probs[2], sizeof(float) * N * nc);
    assert_memory_not_equal(probs[0], probs[1], sizeof(float) * N * nc);
    char note[256];
    assert_int_equal(devs[0].ops->shrink(devs[0].ctx, "out of memory (test)", note, sizeof note, &e), 0);
    char want[96];
    snprintf(want, sizeof want, "out of memory (test) at micro-batch %d; now %d", N, N / 2);
    assert_string_equal(note, want);
    shard_out got;
    out_init(&got);
    run_shard(ops, ctx, 1, &got);
    assert_int_equal(got.micro, N / 2);
    device_close_list(devs, n);
    for (int k = 0; k < 3; k++) free(probs[k]);
    free(other);
    free(got.grad);
}

// Only the devices the plan names are wrapped (by spec, numbered duplicates included); a
// malformed plan, or one naming a device that is not open, wraps none.
static void test_unnamed_devices_untouched(void **state) {
    (void)state;
    device *devs;
    int n;
    ht_error e;
    if (device_open_list(&devs, &n, "cpu:1,cpu:1,cpu:1", &net, N, 0, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(n, 3);
    const device_ops *ops[3];
    void *ctx[3];
    for (int i = 0; i < n; i++) {
        ops[i] = devs[i].ops;
        ctx[i] = devs[i].ctx;
    }
    assert_int_equal(fault_wrap_devices(devs, n, &net, "fail:cpu:1#2@2,oom:cpu:1#2,boom:cpu:1", &e), -1);
    assert_non_null(strstr(e.msg, "unknown fault \"boom\""));
    assert_int_equal(fault_wrap_devices(devs, n, &net, "", &e), 0);
    // A fault for a device that is not open would never fire: refused, naming it, even beside
    // one that is open; nothing is wrapped.
    assert_int_equal(fault_wrap_devices(devs, n, &net, "fail:cpu:1#2@2,nan:cpu:2", &e), -1);
    assert_string_equal(e.msg, "HETRAIN_FAULT: \"cpu:2\" names no open device (open: cpu:1, "
                               "cpu:1#2, cpu:1#3)");
    assert_int_equal(fault_wrap_devices(devs, n, &net, "fail:cl:0.9", &e), -1);
    assert_non_null(strstr(e.msg, "\"cl:0.9\" names no open device"));
    for (int i = 0; i < n; i++) {
        assert_ptr_equal(devs[i].ops, ops[i]);
        assert_ptr_equal(devs[i].ctx, ctx[i]);
    }
    assert_int_equal(fault_wrap_devices(devs, n, &net, "fail:cpu:1#2@2,oom:cpu:1#2", &e), 0);
    const char *spec[] = {"cpu:1", "cpu:1#2", "cpu:1#3"};
    for (int i = 0; i < n; i++) {
        assert_string_equal(devs[i].spec, spec[i]);
        if (i == 1) {
            assert_ptr_not_equal(devs[i].ops, ops[i]);
        } else {
            assert_ptr_equal(devs[i].ops, ops[i]);
            assert_ptr_equal(devs[i].ctx, ctx[i]);
        }
    }
    shard_out got;
    out_init(&got);
    run_shard(devs[1].ops, devs[1].ctx, 2, &got);
    assert_string_equal(got.err.msg, "injected failure (HETRAIN_FAULT) at step 2");
    run_shard(devs[0].ops, devs[0].ctx, 2, &got);
    assert_int_equal(got.rc, 0);
    device_close_list(devs, n);
    free(got.grad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_at_step),
        cmocka_unit_test(test_nan_at_step),
        cmocka_unit_test(test_corrupt_always),
        cmocka_unit_test(test_oom_halves_micro_batch),
        cmocka_unit_test(test_hang_until_released),
        cmocka_unit_test(test_delegates),
        cmocka_unit_test(test_unnamed_devices_untouched),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
