// The --devices grammar (devices/registry.c): items parsed alone, sizes, and device lists that
// must fail before anything is opened; the table of device kinds (devices/kinds.c) that the
// grammar, auto, `hetrain devices` and the layer check go through.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <json.h>

#include "core/ht_omp.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_util.h"
#include "devices/device.h"
#include "devices/device_kind.h"
#include "devices/opencl.h"
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
    assert_ptr_equal(it.kind, &device_kind_cpu);
    assert_string_equal(it.name, "cpu");
    assert_int_equal(it.threads, 0);
    assert_true(it.capacity == 1.0);
    assert_true(it.mem == -1);

    assert_int_equal(device_parse_item("cpu:3@2.5:mem=256M", &it, &e), 0);
    assert_string_equal(it.name, "cpu:3");
    assert_int_equal(it.threads, 3);
    assert_true(it.capacity == 2.5);
    assert_true(it.mem == 256ll << 20);

    // Which OpenCL devices an item names: one answer (opencl_item_names) for opening, auto's
    // core count and tune.
    ocl_dev_info cl12 = {.p = 1, .d = 2, .type = "cpu"}, gpu03 = {.p = 0, .d = 3, .type = "gpu"};
    assert_int_equal(device_parse_item("cl:1.2@0.5", &it, &e), 0);
    assert_ptr_equal(it.kind, &device_kind_opencl);
    assert_int_equal(it.platform, 1);
    assert_int_equal(it.dev, 2);
    assert_true(it.capacity == 0.5);
    assert_true(opencl_item_names(&it, &cl12));
    assert_false(opencl_item_names(&it, &gpu03));

    assert_int_equal(device_parse_item("cl:all:mem=1G", &it, &e), 0);
    assert_ptr_equal(it.kind, &device_kind_opencl);
    assert_true(it.mem == 1ll << 30);
    assert_true(opencl_item_names(&it, &cl12) && opencl_item_names(&it, &gpu03));
    assert_int_equal(device_parse_item("gpu@3", &it, &e), 0);
    assert_ptr_equal(it.kind, &device_kind_opencl);
    assert_false(opencl_item_names(&it, &cl12));
    assert_true(opencl_item_names(&it, &gpu03));
    assert_int_equal(device_parse_item("cpu:2", &it, &e), 0);
    assert_false(opencl_item_names(&it, &cl12));

    expect_item_error("cpu:0", "expected cpu:THREADS with THREADS 1..1024");
    expect_item_error("cpu:1025", "expected cpu:THREADS with THREADS 1..1024");
    expect_item_error("cl:0", "expected cl:PLATFORM.DEVICE");
    expect_item_error("cl:0.1001", "expected cl:PLATFORM.DEVICE");
    expect_item_error("cpu@0", "expected a capacity after '@'");
    expect_item_error("cpu@2x", "expected a capacity after '@'");
    expect_item_error("cpu:mem=0", "expected mem=SIZE");
    expect_item_error("tpu", "unknown device \"tpu\" (known: cpu, cpu:THREADS, cl:P.D, cl:all, gpu; "
                             "add @W for a capacity)");
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

// A kind for the tests: the item "fake" (a one-thread CPU worker under that name), one device
// for auto, one row in the listing; while fake_refuses_dense is set it cannot run dense layers.
static int fake_refuses_dense;

static int fake_parse(const char *item, device_item *it, ht_error *e) {
    (void)item;
    (void)e;
    if (strcmp(it->name, "fake")) return 0;
    it->threads = 1;
    return 1;
}

static int fake_enumerate(device_entry *out, int *n, int cap, ht_error *e) {
    if (*n == cap) return ht_fail(e, "too many");
    snprintf(out[(*n)++].spec, sizeof out->spec, "fake");
    return 0;
}

static int fake_open(device *list, int *count, const device_item *it, const device_open_req *r,
                     ht_error *e) {
    return device_kind_cpu.open(list, count, it, r, e);
}

static int fake_describe(device_listing *l, ht_error *e) {
    device_row *r = device_listing_add(l);
    if (!r) return ht_fail(e, "out of memory");
    for (int c = 0; c < DEVICE_NCOL; c++) snprintf(r->cell[c], sizeof r->cell[c], "-");
    snprintf(r->cell[DEVICE_COL_SPEC], sizeof r->cell[0], "fake");
    r->json = json_object_new_object();
    json_object_object_add(r->json, "spec", json_object_new_string("fake"));
    fprintf(l->notes, "fake: listed by the test's kind\n");
    return 0;
}

static int fake_supports(const layer *L) {
    return !(fake_refuses_dense && L->kind == LAYER_DENSE);
}

static const device_kind fake_kind = {
    .name = "fake",
    .grammar = "fake",
    .parse = fake_parse,
    .enumerate = fake_enumerate,
    .cores = NULL,
    .open = fake_open,
    .describe = fake_describe,
    .tune_none = "a test's device",
    .supports = fake_supports,
};

// `hetrain devices` into a malloc'd string.
static char *listing(int json) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ht_error e;
    if (device_print_list(f, json, &e) < 0) fail_msg("%s", e.msg);
    fclose(f);
    return text;
}

// The SPEC column of a text listing (the rows between the header and the notes), comma-joined.
static void spec_column(const char *text, char *out, size_t cap) {
    out[0] = 0;
    const char *line = strchr(text, '\n') + 1;
    for (; *line; line = strchr(line, '\n') + 1) {
        size_t w = strcspn(line, " \n");
        if (strncmp(line + w, "  ", 2)) break; // a note, not a row (columns part by two spaces)
        snprintf(out + strlen(out), cap - strlen(out), "%s%.*s", *out ? "," : "", (int)w, line);
    }
}

// Every row of the table of kinds can be named, opened by auto, listed and told apart: the
// listing's devices each parse to a kind of the table, and the kinds with devices are listed.
static void test_kind_table(void **state) {
    (void)state;
    int rows = 0, seen_cpu = 0, seen_cl = 0;
    for (const device_kind *const *k = device_kinds; *k; k++, rows++) {
        assert_non_null((*k)->name);
        assert_non_null((*k)->parse);
        assert_non_null((*k)->open);
        assert_non_null((*k)->describe);
        assert_true((*k)->tune || (*k)->tune_none);
        device_entry ent[HT_MAX_DEVICES];
        int n = 0;
        ht_error e;
        if ((*k)->enumerate && (*k)->enumerate(ent, &n, HT_MAX_DEVICES, &e) < 0) fail_msg("%s", e.msg);
        for (int i = 0; i < n; i++) {
            device_item it;
            if (device_parse_item(ent[i].spec, &it, &e) < 0) fail_msg("%s", e.msg);
            assert_ptr_equal(it.kind, *k);
        }
    }
    assert_int_equal(rows, 2);
    char *text = listing(1);
    json_object *root = json_tokener_parse(text), *list;
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "devices", &list));
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *spec;
        assert_true(json_object_object_get_ex(json_object_array_get_idx(list, i), "spec", &spec));
        device_item it;
        ht_error e;
        if (device_parse_item(json_object_get_string(spec), &it, &e) < 0) fail_msg("%s", e.msg);
        seen_cpu |= it.kind == &device_kind_cpu;
        seen_cl |= it.kind == &device_kind_opencl;
    }
    assert_true(seen_cpu);
    assert_int_equal(seen_cl, test_have_opencl("no OpenCL row is checked"));
    json_object_put(root);
    free(text);
}

// `hetrain devices` and auto list what the table lists, in its order, and nothing else.
static void test_listing_follows_table(void **state) {
    (void)state;
    const device_kind *only_fake[] = {&fake_kind, NULL}, *fake_cpu[] = {&fake_kind, &device_kind_cpu, NULL};
    char specs[512];
    device_kinds_use(only_fake);
    char *text = listing(0);
    spec_column(text, specs, sizeof specs);
    assert_string_equal(specs, "fake");
    assert_non_null(strstr(text, "fake: listed by the test's kind\n"));
    free(text);
    device_kinds_use(fake_cpu);
    text = listing(0);
    spec_column(text, specs, sizeof specs);
    assert_string_equal(specs, "fake,cpu");
    free(text);
    ht_error e;
    device_item it;
    assert_int_equal(device_parse_item("cl:0.0", &it, &e), -1);
    assert_non_null(strstr(e.msg, "(known: fake, cpu, cpu:THREADS; add @W"));
    model m;
    if (model_init_preset(&m, "cnn2", &e) < 0) fail_msg("%s", e.msg);
    device *devs;
    int n;
    if (device_open_list(&devs, &n, "auto", &m, 4, 0, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(n, 2);
    assert_string_equal(devs[0].spec, "fake");
    assert_string_equal(devs[1].spec, "cpu");
    device_close_list(devs, n);
    device_kinds_use(NULL);
    text = listing(0);
    spec_column(text, specs, sizeof specs);
    assert_true(!strncmp(specs, "cpu", 3) && !strstr(specs, "fake"));
    free(text);
    model_free(&m);
}

// A kind that cannot run one of the model's layers gets no device for it: one line naming the
// device and the layer; the same kind opens for a model it can run.
static void test_kind_refuses_layer(void **state) {
    (void)state;
    const device_kind *table[] = {&fake_kind, &device_kind_cpu, NULL};
    device_kinds_use(table);
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn2", &e) < 0) fail_msg("%s", e.msg);
    int dense = -1;
    for (int l = m.n_layers - 1; l >= 0; l--)
        if (m.layers[l].kind == LAYER_DENSE) dense = l;
    assert_true(dense >= 0);
    device *devs;
    int n;
    fake_refuses_dense = 1;
    assert_int_equal(device_open_list(&devs, &n, "cpu:1,fake", &m, 4, 0, &e), -1);
    char want[256];
    snprintf(want, sizeof want, "--devices: fake: a fake device cannot run layer %d (%s, dense) of %s",
             dense + 1, m.layers[dense].name, m.name);
    assert_string_equal(e.msg, want);
    fake_refuses_dense = 0;
    if (device_open_list(&devs, &n, "cpu:1,fake", &m, 4, 0, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(n, 2);
    assert_string_equal(devs[1].spec, "fake");
    device_close_list(devs, n);
    device_kinds_use(NULL);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_cpu_device_keeps_caller_threads),
        cmocka_unit_test(test_kind_table),
        cmocka_unit_test(test_listing_follows_table),
        cmocka_unit_test(test_kind_refuses_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
