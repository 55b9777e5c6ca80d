// Every OpenCL implementation this machine has, side by side: one training step of the 3-layer
// reference network on real Fashion-MNIST images (blank backgrounds: exact ties in max pooling
// and ReLU inputs at 0, where a driver's rounding shows) on each OpenCL device against the CPU
// device, tensor by tensor; and one step on a mix of three platforms (the native CPU, PoCL and
// Mesa's rusticl) against the CPU alone. ctest runs it with RUSTICL_ENABLE=llvmpipe; where Mesa's
// OpenCL ICD is installed (/etc/OpenCL/vendors/rusticl.icd) a missing rusticl platform fails.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "data.h"
#include "engine.h"
#include "model.h"
#include "ocl_util.h"
#include "testutil.h"

#define BATCH 96
#define RUSTICL_ICD "/etc/OpenCL/vendors/rusticl.icd"

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

// The OpenCL devices; fails when Mesa's ICD is installed and no rusticl device shows.
static int devices(ocl_dev_info **devs) {
    int n = 0;
    ht_error e;
    if (ocl_enumerate(devs, &n, &e) < 0) fail_msg("%s", e.msg);
    int rusticl = -1;
    for (int i = 0; i < n; i++)
        if (strstr((*devs)[i].platform_name, "rusticl")) rusticl = i;
    if (access(RUSTICL_ICD, R_OK) == 0 && rusticl < 0)
        fail_msg("%s is installed but no rusticl device is listed (RUSTICL_ENABLE=%s)",
                 RUSTICL_ICD, getenv("RUSTICL_ENABLE") ? getenv("RUSTICL_ENABLE") : "unset");
    return n;
}

// Relative L2 difference of a and b over tensor t.
static double tensor_rel(const float *a, const float *b, const model_tensor *t) {
    double d = 0, r = 0;
    for (size_t i = t->off; i < t->off + t->n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
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
    if (n == 0) {
        free(devs);
        printf("no OpenCL device: skipped\n");
        skip();
    }
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    m.setup.conv_algo = CONV_ALGO_DIRECT; // the OpenCL path's algorithm
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
                printf(" %s %.1e", ts[t].name, tensor_rel(got, ref, &ts[t]));
            printf("\n");
            char what[256];
            snprintf(what, sizeof what, "%s step %d mean gradient vs cpu", devs[d].spec, step + 1);
            assert_true(check_step_grad(&m, got, ref, what));
        }
    }
    free(init), free(ref), free(got), free(devs);
    model_free(&m);
}

int main(void) {
    setenv("RUSTICL_ENABLE", "llvmpipe", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_device_against_cpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
