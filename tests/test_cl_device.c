// The OpenCL device end to end against the CPU device: one training step gives the same mean
// gradient and weights, inference the same probabilities, and a short training run through
// the CLI on cl:0.0 reaches the accuracy of the same run on cpu.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cl_util.h"
#include "data.h"
#include "device.h"
#include "engine.h"
#include "model.h"
#include "testutil.h"

// Same math in another summation order (GEMM blocking, reductions): float rounding only.
#define TOL_STEP_REL 1e-5f
// A probability's relative error is about the absolute error of the logits it comes from, and
// logits of magnitude ~10 summed in another order differ by ~1e-5 each.
#define TOL_PROBS 1e-4f
#define FLOOR_PROBS 1e-3f
// Two runs whose gradients agree to 1e-5 still drift apart: early training amplifies rounding.
// Relative difference of losses after a short run at a small learning rate: float32
// rounding of ~1e-6 per step, grown by at most a few times over eight steps, is far below it
// (measured: equal to 6 digits). Per-step gradients are checked by test_step_matches_cpu.
#define TOL_RUN_LOSS 1e-4

static int have_opencl(void) {
    cl_dev_info *devs = NULL;
    int n = 0;
    ht_error e;
    if (cl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    free(devs);
    if (n == 0) printf("SKIPPED: no OpenCL platform found; the OpenCL device is not tested here\n");
    return n > 0;
}

typedef struct step_out {
    float *params, *grad, *probs;
} step_out;

static void one_step(const model *m, const dataset *ds, const char *spec, step_out *o) {
    ht_error e;
    device *devs;
    int n;
    if (device_open_list(&devs, &n, spec, m, 96, 0, &e) < 0) fail_msg("%s", e.msg);
    float *p = malloc(sizeof(float) * m->n_params);
    model_init_params(m, p, 5);
    engine g;
    if (engine_init(&g, m, devs, n, p, &m->setup, 96, 5, &e) < 0) fail_msg("%s", e.msg);
    uint32_t idx[96];
    for (int i = 0; i < 96; i++) idx[i] = (uint32_t)((i * 37) % ds->n);
    if (engine_train_step(&g, ds, idx, 96, 1, NULL, NULL, NULL, &e) < 0) fail_msg("%s", e.msg);
    o->params = malloc(sizeof(float) * m->n_params);
    o->grad = malloc(sizeof(float) * m->n_params);
    o->probs = malloc(sizeof(float) * 150 * m->n_classes);
    memcpy(o->params, g.params, sizeof(float) * m->n_params);
    memcpy(o->grad, g.grad, sizeof(float) * m->n_params);
    if (engine_infer(&g, ds, 0, 150, o->probs, &e) < 0) fail_msg("%s", e.msg);
    engine_free(&g);
    device_close_list(devs, n);
    free(p);
}

static void free_out(step_out *o) {
    free(o->params);
    free(o->grad);
    free(o->probs);
}

static void test_step_matches_cpu(void **state) {
    (void)state;
    if (!have_opencl()) skip();
    const char *nets[] = {"cnn2d_3layer_fullconnected_3layer", "cnn2d_2layer_full_connected_2layer"};
    dataset ds;
    ht_error e;
    if (dataset_load_idx(&ds, FASHION_DIR "/t10k-images-idx3-ubyte.gz",
                         FASHION_DIR "/t10k-labels-idx1-ubyte.gz", &e) < 0)
        fail_msg("%s", e.msg);
    dataset_limit(&ds, 300);
    for (int k = 0; k < 2; k++) {
        model m;
        if (model_init_preset(&m, nets[k], &e) < 0) fail_msg("%s", e.msg);
        step_out cpu, cl;
        one_step(&m, &ds, "cpu", &cpu);
        one_step(&m, &ds, "cl:0.0", &cl);
        char what[128];
        snprintf(what, sizeof what, "%s mean gradient, cl:0.0 vs cpu", nets[k]);
        assert_true(check_params(&m, cl.grad, cpu.grad, TOL_STEP_REL, what));
        snprintf(what, sizeof what, "%s weights after one step, cl:0.0 vs cpu", nets[k]);
        assert_true(check_params(&m, cl.params, cpu.params, TOL_STEP_REL, what));
        assert_true(check_tensor(cl.probs, cpu.probs, 150 * (size_t)m.n_classes, TOL_PROBS,
                                 FLOOR_PROBS, "inference probabilities, cl:0.0 vs cpu"));
        free_out(&cpu);
        free_out(&cl);
        model_free(&m);
    }
    dataset_free(&ds);
}

// The last metrics row's training loss and validation loss.
static void final_losses(const char *dir, const char *name, double *loss, double *vloss) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.metrics.csv", dir, name);
    char *csv = test_read_file(path, NULL);
    assert_non_null(csv);
    char *last = csv + strlen(csv) - 1;
    while (last > csv && last[-1] != '\n') last--;
    int ep;
    double acc, vacc;
    assert_int_equal(sscanf(last, "%d,%lf,%lf,%lf,%lf", &ep, &acc, loss, &vacc, vloss), 5);
    free(csv);
}

// The whole CLI run on the OpenCL device gives the CPU's numbers. Eight steps at lr 0.002
// keep the two runs on one trajectory: the per-step gradients agree to ~1e-6 (the parity
// tests), and so small a step cannot amplify that into a different path, unlike an epoch at
// lr 0.05, where two correct roundings (another CPU model, PoCL's code generation) part ways.
// The mean training loss and the validation loss then agree to TOL_RUN_LOSS relative; a
// wrong forward kernel or a lost sample moves them by far more.
static void test_short_run_matches_cpu(void **state) {
    (void)state;
    if (!have_opencl()) skip();
    char *dir = test_tmpdir("cl-run");
    char *train = test_write_kaggle_csv(dir, "train.csv", FASHION_DIR "/train-images-idx3-ubyte.gz",
                                        FASHION_DIR "/train-labels-idx1-ubyte.gz", 320, 1);
    char *test = test_write_kaggle_csv(dir, "test.csv", FASHION_DIR "/t10k-images-idx3-ubyte.gz",
                                       FASHION_DIR "/t10k-labels-idx1-ubyte.gz", 100, 1);
    assert_non_null(train);
    assert_non_null(test);
    const char *specs[] = {"cpu", "cl:0.0"};
    double loss[2], vloss[2];
    for (int k = 0; k < 2; k++) {
        char args[4096], *out;
        snprintf(args, sizeof args,
                 "train --devices %s --train '%s' --test '%s' --epochs 1 --batch 32 --lr 0.002 "
                 "--out '%s' --name %c --no-progress", specs[k], train, test, dir, 'a' + k);
        int rc = test_run_cli(args, &out);
        if (rc != 0) fail_msg("hetrain %s failed (%d):\n%s", args, rc, out);
        printf("%s", out);
        free(out);
        char name[2] = {(char)('a' + k), 0};
        final_losses(dir, name, &loss[k], &vloss[k]);
    }
    printf("cpu: loss %.6f val_loss %.6f; cl:0.0: loss %.6f val_loss %.6f\n", loss[0], vloss[0],
           loss[1], vloss[1]);
    assert_true(fabs(loss[0] - loss[1]) <= TOL_RUN_LOSS * loss[0]);
    assert_true(fabs(vloss[0] - vloss[1]) <= TOL_RUN_LOSS * vloss[0]);
    free(train);
    free(test);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_matches_cpu),
        cmocka_unit_test(test_short_run_matches_cpu),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cl_runtime_release_all();
    return rc;
}
