// Every OpenCL implementation this machine has, side by side, with the default options (the
// convolutions' algorithms auto: Winograd where the CPU device's timings chose it, on every
// device): one training step of the 3-layer reference network on real Fashion-MNIST images (blank backgrounds: exact ties in max pooling
// and ReLU inputs at 0, where a driver's rounding shows) on each OpenCL device against the CPU
// device, tensor by tensor; and one step on a mix of three platforms (the native CPU, PoCL and
// Mesa's rusticl) against the CPU alone. It sets RUSTICL_ENABLE=llvmpipe; where Mesa's OpenCL
// ICD is installed (rusticl.icd in the loader's folder) a missing rusticl platform fails.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "data/data.h"
#include "sharding/engine.h"
#include "nn/model.h"
#include "devices/ocl_util.h"
#include "tests/lib/testutil.h"

#define BATCH 96

static dataset fashion;

static int setup(void **state) {
    (void)state;
    ht_error e;
    if (dataset_load_idx(&fashion, FASHION_DIR "/train-images-idx3-ubyte.gz",
                         FASHION_DIR "/train-labels-idx1-ubyte.gz", 10, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    dataset_limit(&fashion, 4 * BATCH);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    dataset_free(&fashion);
    return 0;
}

// The OpenCL devices; fails when Mesa's ICD is installed and no rusticl device shows, skips
// (visibly) when there is none.
static int devices(ocl_dev_info **devs) {
    int n = 0;
    ht_error e;
    if (ocl_enumerate(devs, &n, &e) < 0) fail_msg("%s", e.msg);
    int rusticl = -1;
    for (int i = 0; i < n; i++)
        if (strstr((*devs)[i].platform_name, "rusticl")) rusticl = i;
    char icd[1100];
    snprintf(icd, sizeof icd, "%s/rusticl.icd", test_icd_dir());
    if (access(icd, R_OK) == 0 && rusticl < 0)
        fail_msg("%s is installed but no rusticl device is listed (RUSTICL_ENABLE=%s)", icd,
                 getenv("RUSTICL_ENABLE") ? getenv("RUSTICL_ENABLE") : "unset");
    if (n == 0) {
        free(*devs);
        printf("no OpenCL device: skipped\n");
        skip();
    }
    return n;
}


// One step of m on batch `step` from init on device `spec`; its mean gradient into grad.
static void one_step(const model *m, const char *spec, const float *init, int step,
                     float *grad) {
    test_rig r;
    test_rig_open(&r, m, spec, NULL, init, BATCH, 5, 0);
    uint32_t idx[BATCH];
    for (int i = 0; i < BATCH; i++) idx[i] = (uint32_t)(step * BATCH + i);
    ht_error e;
    if (engine_train_step(r.g, &fashion, idx, BATCH, 1, NULL, NULL, NULL, &e) < 0)
        fail_msg("%s: %s", spec, e.msg);
    memcpy(grad, engine_grad(r.g), sizeof(float) * m->n_params);
    test_rig_close(&r);
}

static void test_each_device_against_cpu(void **state) {
    (void)state;
    ocl_dev_info *devs = NULL;
    int n = devices(&devs);
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    // The default algorithms (auto): every device computes as the CPU device decided.
    float *init = malloc(sizeof(float) * m.n_params), *ref = malloc(sizeof(float) * m.n_params);
    float *got = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 3);
    const model_tensor *ts;
    int nt = model_tensors(&m, &ts);
    for (int step = 0; step < 2; step++) {
        one_step(&m, "cpu", init, step, ref);
        for (int d = 0; d < n; d++) {
            one_step(&m, devs[d].spec, init, step, got);
            printf("step %d %s (%s):", step + 1, devs[d].spec, devs[d].platform_name);
            for (int t = 0; t < nt; t++)
                printf(" %s %.1e", ts[t].name, test_rel_l2(got + ts[t].off, ref + ts[t].off, ts[t].n));
            printf("\n");
            char what[256];
            snprintf(what, sizeof what, "%s step %d mean gradient vs cpu", devs[d].spec, step + 1);
            assert_true(check_step_grad(&m, got, ref, what));
        }
    }
    free(init), free(ref), free(got), free(devs);
    model_free(&m);
}

// The native CPU and the first device of every OpenCL platform, as one --devices list, each
// with the same capacity (a share of every batch).
static void mixed_spec(char *spec, size_t len, const ocl_dev_info *devs, int n, int *count) {
    snprintf(spec, len, "cpu:1@1");
    *count = 1;
    for (int d = 0; d < n; d++) {
        int first = 1;
        for (int k = 0; k < d; k++) first &= strcmp(devs[k].platform_name, devs[d].platform_name) != 0;
        if (!first) continue;
        size_t l = strlen(spec);
        snprintf(spec + l, len - l, ",%s@1", devs[d].spec);
        ++*count;
    }
}

// One step split over the CPU and every platform (PoCL + rusticl + native CPU where Mesa's ICD
// is installed) against the CPU alone; then the same mix trains through the CLI, whose
// self-check must pass on every device.
static void test_three_platforms(void **state) {
    (void)state;
    ocl_dev_info *devs = NULL;
    int n = devices(&devs);
    char spec[512];
    int count;
    mixed_spec(spec, sizeof spec, devs, n, &count);
    printf("mixed devices: %s\n", spec);
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    float *init = malloc(sizeof(float) * m.n_params), *ref = malloc(sizeof(float) * m.n_params);
    float *got = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 3);
    one_step(&m, "cpu", init, 0, ref);
    one_step(&m, spec, init, 0, got);
    // The whole update's relative difference (the first step's update is -lr times the
    // gradient): the default options' mixed step against the CPU's.
    printf("default options, %s against cpu: mean gradient (= first update) %.2g relative\n",
           spec, test_rel_l2(got, ref, m.n_trainable));
    char what[600];
    snprintf(what, sizeof what, "%s mean gradient vs cpu", spec);
    assert_true(check_step_grad(&m, got, ref, what));
    free(init), free(ref), free(got);
    model_free(&m);

    test_csv_data data;
    assert_int_equal(test_csv_data_init(&data, "platforms", 600, 100), 0);
    char args[4096], want[128], path[1200], *out;
    snprintf(args, sizeof args, "train %s --devices %s --balance static --epochs 1 --batch 100 "
             "--no-progress --out '%s' --name mix", data.args, spec, data.dir);
    int rc = test_run_cli(args, &out);
    if (rc != 0) fail_msg("hetrain %s: exit %d\n%s", args, rc, out);
    snprintf(path, sizeof path, "%s/mix.log", data.dir);
    char *log = test_read_file(path, NULL);
    assert_non_null(log);
    snprintf(want, sizeof want, "self-check: %d of %d devices agree with the CPU reference",
             count, count);
    if (!strstr(log, want)) fail_msg("%s lacks \"%s\":\n%s", path, want, log);
    // Every device computes the convolutions as the CPU device decided (the run log's line of
    // each device names the same algorithms).
    const char *algos = strstr(log, "conv algorithms");
    assert_non_null(algos);
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(algos, "\n"), algos);
    int same = 0;
    for (const char *p = log; (p = strstr(p, line)); p += strlen(line)) same++;
    if (same != count) fail_msg("%d of %d devices compute %s:\n%s", same, count, line, log);
    // Every device had its share of the epoch's samples ("cl:1.0 33% 0.3s").
    for (const char *d = strtok(spec, ","); d; d = strtok(NULL, ",")) {
        char dev[64], *at;
        snprintf(dev, sizeof dev, "%s ", d);
        if ((at = strchr(dev, '@'))) strcpy(at, " ");
        const char *p = strstr(out, dev);
        if (!p || atoi(p + strlen(dev)) < 20) fail_msg("%s did not take a third of the work:\n%s", d, out);
    }
    free(log);
    free(out);
    free(devs);
}

int main(void) {
    setenv("RUSTICL_ENABLE", "llvmpipe", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_device_against_cpu),
        cmocka_unit_test(test_three_platforms),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
