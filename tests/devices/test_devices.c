// The --devices grammar (devices/registry.c): items parsed alone, sizes, and device lists that
// must fail before anything is opened.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/ht_omp.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_util.h"
#include "devices/device.h"
#include "nn/model.h"
#include "tests/lib/testutil.h"

static void expect_item_error(const char *item, const char *fragment) {
    device_item it;
    ht_error e = {{0}};
    if (device_parse_item(item, &it, &e) == 0) fail_msg("\"%s\" parsed", item);
    if (!strstr(e.msg, fragment)) fail_msg("\"%s\": expected \"%s\" in \"%s\"", item, fragment, e.msg);
}

static void test_items(void **state) {
    (void)state;
    device_item it;
    ht_error e;
    assert_int_equal(device_parse_item("cpu", &it, &e), 0);
    assert_int_equal(it.kind, DEVICE_ITEM_CPU);
    assert_string_equal(it.name, "cpu");
    assert_int_equal(it.threads, 0);
    assert_true(it.capacity == 1.0);
    assert_true(it.mem == -1);

    assert_int_equal(device_parse_item("cpu:3@2.5:mem=256M", &it, &e), 0);
    assert_string_equal(it.name, "cpu:3");
    assert_int_equal(it.threads, 3);
    assert_true(it.capacity == 2.5);
    assert_true(it.mem == 256ll << 20);

    assert_int_equal(device_parse_item("cl:1.2@0.5", &it, &e), 0);
    assert_int_equal(it.kind, DEVICE_ITEM_CL);
    assert_int_equal(it.platform, 1);
    assert_int_equal(it.dev, 2);
    assert_true(it.capacity == 0.5);

    assert_int_equal(device_parse_item("cl:all:mem=1G", &it, &e), 0);
    assert_int_equal(it.kind, DEVICE_ITEM_CL_ALL);
    assert_true(it.mem == 1ll << 30);
    assert_int_equal(device_parse_item("gpu@3", &it, &e), 0);
    assert_int_equal(it.kind, DEVICE_ITEM_GPU);

    expect_item_error("cpu:0", "expected cpu:THREADS with THREADS 1..1024");
    expect_item_error("cpu:1025", "expected cpu:THREADS with THREADS 1..1024");
    expect_item_error("cl:0", "expected cl:PLATFORM.DEVICE");
    expect_item_error("cl:0.1001", "expected cl:PLATFORM.DEVICE");
    expect_item_error("cpu@0", "expected a capacity after '@'");
    expect_item_error("cpu@2x", "expected a capacity after '@'");
    expect_item_error("cpu:mem=0", "expected mem=SIZE");
    expect_item_error("tpu", "unknown device \"tpu\"");
    char longname[80];
    memset(longname, 'c', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    expect_item_error(longname, "is too long");
}

static void test_sizes(void **state) {
    (void)state;
    assert_true(device_parse_bytes("1048576") == 1048576);
    assert_true(device_parse_bytes("512K") == 512 << 10);
    assert_true(device_parse_bytes("256M") == 256 << 20);
    assert_true(device_parse_bytes("256MiB") == 256 << 20);
    assert_true(device_parse_bytes("1.5G") == 3ll << 29);
    assert_true(device_parse_bytes("0") == -1);
    assert_true(device_parse_bytes("-1M") == -1);
    assert_true(device_parse_bytes("10X") == -1);
    assert_true(device_parse_bytes("1e30") == -1);
}

static void test_lists(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    device *devs;
    int n;
    assert_int_equal(device_open_list(&devs, &n, "cpu:1, cpu:1", &m, 8, 0, &e), 0);
    assert_int_equal(n, 2);
    assert_string_equal(devs[0].spec, "cpu:1");
    assert_string_equal(devs[1].spec, "cpu:1#2");
    device_close_list(devs, n);
    // Thread counts far beyond the limit used to be summed (an int overflow) while the
    // plain 'cpu' item's share was worked out, before any item was checked.
    assert_int_equal(device_open_list(&devs, &n, "cpu:2000000000,cpu:2000000000,cpu", &m, 8, 0, &e), -1);
    assert_non_null(strstr(e.msg, "THREADS 1..1024"));
    assert_int_equal(device_open_list(&devs, &n, "cpu,tpu", &m, 8, 0, &e), -1);
    assert_non_null(strstr(e.msg, "unknown device \"tpu\""));
    model_free(&m);
    ocl_blas_release_all();
}

// The CPU device sets its thread count for its own shard and gives the calling thread its
// setting back: the engine's host thread runs the optimiser with it after the self-check ran
// the single-threaded reference device there (left at 1, the update runs on one core).
static void test_cpu_device_keeps_caller_threads(void **state) {
    (void)state;
#ifndef _OPENMP
    skip(); // the ThreadSanitizer build has no OpenMP
#endif
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn2", &e) < 0) fail_msg("%s", e.msg);
    device *devs;
    int n;
    if (device_open_list(&devs, &n, "cpu:1", &m, 4, 0, &e) < 0) fail_msg("%s", e.msg);
    float *params = calloc(m.n_params, sizeof(float)), *grad = malloc(sizeof(float) * m.n_params);
    float x[4 * 784] = {0}, loss[4], probs[4 * 10];
    uint8_t y[4] = {1, 2, 3, 4};
    uint32_t ids[4] = {0, 1, 2, 3};
    int32_t pred[4];
    shard_job job = {.x = x, .y = y, .ids = ids, .n = 4, .seed = 1};
    shard_result res = {.grad_sum = grad, .loss = loss, .pred = pred};
    omp_set_num_threads(2);
    assert_int_equal(devs[0].ops->set_params(devs[0].ctx, params, &e), 0);
    assert_int_equal(devs[0].ops->train_shard(devs[0].ctx, &job, &res, &e), 0);
    assert_int_equal(omp_get_max_threads(), 2);
    omp_set_num_threads(3);
    assert_int_equal(devs[0].ops->infer(devs[0].ctx, x, 4, probs, &e), 0);
    assert_int_equal(omp_get_max_threads(), 3);
    device_close_list(devs, n);
    free(params);
    free(grad);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_cpu_device_keeps_caller_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
