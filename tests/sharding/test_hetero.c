// Heterogeneous data parallelism: the reduced gradient of a batch is the same whatever mix of
// devices and weights computes it (dropout included; a residual graph with batchnorm and a
// squeeze-and-excite graph with per-sample dropout too; keras.applications' ResNet50 and
// MobileNetV2 at 32x32; and,
// on a 3-channel network, with the training batches augmented by random crops and flips), and
// a short run over a PoCL pthread
// device, a PoCL basic (single-threaded) device and a CPU worker splits its batches by the
// weights its calibration measured, and moves the weights as the same run on one device does.
// PoCL is asked for both device kinds before anything touches OpenCL.
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
#include "nn/keras.h"
#include "nn/model.h"
#include "nn/net.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

#define BATCH 60
// Steps compared per mix, each on its own batch: the second runs on weights that the update
// changed and the engine sent to the devices again.
#define STEPS 2

static char pthread_spec[16], basic_spec[16];

// Finds the PoCL pthread and basic devices' specs; returns 0 when OpenCL has neither.
static int find_pocl(void) {
    ocl_dev_info *devs = NULL;
    int n = 0;
    ht_error e;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    for (int i = 0; i < n; i++) {
        if (!strncmp(devs[i].name, "pthread", 7) && !pthread_spec[0])
            snprintf(pthread_spec, sizeof pthread_spec, "%s", devs[i].spec);
        if (!strncmp(devs[i].name, "basic", 5) && !basic_spec[0])
            snprintf(basic_spec, sizeof basic_spec, "%s", devs[i].spec);
    }
    free(devs);
    return pthread_spec[0] && basic_spec[0];
}

// The CPU device's trajectory over STEPS steps from seed 3: the weights before each step and
// the mean gradient of each.
typedef struct reference {
    float *params[STEPS], *grad[STEPS];
} reference;

static void batch_idx(const dataset *ds, int s, uint32_t *idx) {
    for (int i = 0; i < BATCH; i++) idx[i] = (uint32_t)(((s * BATCH + i) * 53 + 7) % ds->n);
}

// Runs STEPS steps on `spec`, each from the reference's weights before it, with the training
// batches augmented by `aug` (NULL: none); with `ref->grad[0]` NULL, records the reference
// instead. Checks each step's gradient against the reference.
static void run_mix(const model *m, const dataset *ds, const char *spec, int balance_auto,
                    const data_augment *aug, reference *ref) {
    ht_error e;
    float *p = malloc(sizeof(float) * m->n_params);
    model_init_params(m, p, 3);
    test_rig rig;
    engine_config c = {.m = m, .params = p, .max_batch = BATCH, .seed = 3,
                       .rebalance = balance_auto ? 1 : 0, .augment = aug ? *aug : (data_augment){0}};
    test_rig_open_with(&rig, spec, NULL, 0, &c);
    engine *g = rig.g;
    int n = rig.n;
    uint32_t idx[BATCH];
    batch_idx(ds, 0, idx);
    if (balance_auto && engine_calibrate(g, ds, idx, BATCH, &e) < 0) fail_msg("%s", e.msg);
    int record = ref->grad[0] == NULL;
    for (int s = 0; s < STEPS; s++) {
        batch_idx(ds, s, idx);
        // engine_set_params broadcasts to every device, so each step
        // starts from the reference's weights and only its own rounding is compared.
        if (record) {
            ref->params[s] = malloc(sizeof(float) * m->n_params);
            memcpy(ref->params[s], engine_params(g), sizeof(float) * m->n_params);
        } else {
            if (engine_set_params(g, ref->params[s], &e) < 0) fail_msg("%s", e.msg);
        }
        step_stats st;
        if (engine_train_step(g, ds, idx, BATCH, 2, NULL, NULL, &st, &e) < 0)
            fail_msg("%s", e.msg);
        int total = 0;
        for (int d = 0; d < n; d++) total += st.share[d];
        assert_int_equal(total, BATCH);
        if (record) {
            ref->grad[s] = malloc(sizeof(float) * m->n_params);
            memcpy(ref->grad[s], engine_grad(g), sizeof(float) * m->n_params);
            continue;
        }
        char what[512];
        snprintf(what, sizeof what, "step %d mean gradient of %.200s (%s%s) vs cpu", s + 1, spec,
                 balance_auto ? "calibrated" : "static weights", aug ? ", augmented" : "");
        assert_true(check_step_grad(m, engine_grad(g), ref->grad[s], what));
    }
    test_rig_close(&rig);
    free(p);
}

// Every mix of devices against the CPU device alone, for model m on 500 Fashion-MNIST images.
static void invariance_over_mixes(const model *m) {
    int have_cl = find_pocl();
    if (!have_cl) printf("no PoCL pthread+basic devices: checking CPU mixes only\n");
    dataset ds;
    test_fashion_set(&ds, FASHION_TEST, 500);
    reference ref = {0};
    run_mix(m, &ds, "cpu", 0, NULL, &ref);
    char mixes[6][128];
    int nm = 0;
    snprintf(mixes[nm++], 128, "cpu:1,cpu:1");
    snprintf(mixes[nm++], 128, "cpu:1@5,cpu:1@1");
    if (have_cl) {
        snprintf(mixes[nm++], 128, "cpu,%s", pthread_spec);
        snprintf(mixes[nm++], 128, "%s,%s,cpu", pthread_spec, basic_spec);
        snprintf(mixes[nm++], 128, "%s@1,%s@0.2,cpu@3", pthread_spec, basic_spec);
    }
    // Static weights on every mix; calibrated (weights measured, so shares of their own) on
    // the even CPU pair and on the three devices, where the shares differ most.
    for (int k = 0; k < nm; k++)
        for (int bal = 0; bal < 2; bal++)
            if (!bal || k == 0 || k == 3) run_mix(m, &ds, mixes[k], bal, NULL, &ref);
    for (int s = 0; s < STEPS; s++) {
        free(ref.params[s]);
        free(ref.grad[s]);
    }
    dataset_free(&ds);
}

static void test_sharding_invariance(void **state) {
    (void)state;
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn2d_3layer_fullconnected_3layer", &e) < 0) fail_msg("%s", e.msg);
    invariance_over_mixes(&m);
    model_free(&m);
}

// A graph: models/residual.cfg (identity and strided residual blocks with batchnorm; a buffer
// read by two layers, whose gradients add), on the same mixes.
static void test_sharding_invariance_residual(void **state) {
    (void)state;
    ht_error e;
    model m;
    if (model_init(&m, HT_SOURCE_DIR "/models/residual.cfg", &e) < 0) fail_msg("%s", e.msg);
    invariance_over_mixes(&m);
    model_free(&m);
}

// Squeeze-and-excite graphs as models/squeeze_excite.cfg builds them (rescale, depthwise
// convolutions, hard_swish, multiplies by a broadcast (C,1,1) gate, a residual branch dropped
// whole for a sample at a time), on the same mixes. Unlike the example, block 1's output goes
// through an activation: there, a batchnorm (beta 0 at the start) and a bias-free 1x1
// convolution before the next batchnorm make that one's group means exactly 0, whose rounding
// (1e-10 against inputs near 1) no relative comparison measures. A 1x1 convolution, mix, is
// called twice in a row (a shared layer: its gradients add over the calls on every device).
static const char se_cfg[] =
    "[net]\ninput = 1x28x28\nclasses = 10\n"
    "[rescale]\nscale = 2\noffset = -1\n"
    "[conv]\nfilters = 16\nsize = 3\nstride = 2\npad = same\nbias = 0\n[batchnorm]\n"
    "[hard_swish]\n"
    "[conv]\nfilters = 32\nsize = 1\nbias = 0\n[batchnorm]\n[relu]\n"
    "[dwconv]\nsize = 3\nstride = 2\npad = same\nbias = 0\n[batchnorm]\n[relu]\nname = b1_dw\n"
    "[globalavgpool]\n[dense]\nunits = 8\nactivation = relu\n"
    "[dense]\nunits = 32\nactivation = hard_sigmoid\n[multiply]\nfrom = b1_dw, -1\n"
    "[conv]\nfilters = 24\nsize = 1\nbias = 0\n[batchnorm]\n[hard_swish]\nname = b1_out\n"
    "[conv]\nname = mix\nfilters = 24\nsize = 1\nactivation = tanh\n[conv]\nshare = mix\n"
    "[conv]\nfilters = 48\nsize = 1\nbias = 0\n[batchnorm]\n[hard_swish]\n"
    "[dwconv]\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n[hard_swish]\nname = b2_dw\n"
    "[globalavgpool]\n[dense]\nunits = 12\nactivation = relu\n"
    "[dense]\nunits = 48\nactivation = hard_sigmoid\n[multiply]\nfrom = b2_dw, -1\n"
    "[conv]\nfilters = 24\nsize = 1\nbias = 0\n[batchnorm]\n"
    "[dropout]\nrate = 0.1\nper_sample = 1\n[add]\nfrom = -1, b1_out\n"
    "[globalavgpool]\n[dense]\nunits = 10\n[softmax]\n";

static void test_sharding_invariance_squeeze_excite(void **state) {
    (void)state;
    ht_error e;
    model m;
    char *dir = test_tmpdir("hetero-se");
    char *cfg = test_write_file(dir, "se.cfg", se_cfg, sizeof se_cfg - 1);
    if (model_init(&m, cfg, &e) < 0) fail_msg("%s", e.msg);
    invariance_over_mixes(&m);
    model_free(&m);
    free(cfg);
    free(dir);
}

// A small 3-channel network (conv, max-pool, conv, dense) and 240 random 3x12x12 images.
static const char rgb_cfg[] =
    "[net]\nname = rgb_small\ninput = 3x12x12\nclasses = 10\noptimizer = sgd\nlr = 0.05\n"
    "momentum = 0.9\nbatch = 60\nepochs = 1\nval_split = 0\n"
    "[conv]\nfilters = 8\nsize = 3\npad = 1\nactivation = relu\n"
    "[maxpool]\nsize = 2\n"
    "[conv]\nfilters = 8\nsize = 3\npad = 1\nactivation = relu\n"
    "[dense]\nunits = 10\n[softmax]\n";

static void rgb_setup(model *m, dataset *ds) {
    ht_error e;
    char *dir = test_tmpdir("hetero-rgb");
    char *cfg = test_write_file(dir, "rgb.cfg", rgb_cfg, sizeof rgb_cfg - 1);
    if (model_init(m, cfg, &e) < 0) fail_msg("%s", e.msg);
    free(cfg);
    free(dir);
    *ds = (dataset){.n = 240, .c = 3, .h = 12, .w = 12};
    ds->x = malloc(sizeof(float) * 240 * 432);
    ds->y = malloc(240);
    ht_rng r;
    ht_rng_seed(&r, 99);
    for (int i = 0; i < 240 * 432; i++) ds->x[i] = (float)ht_rng_double(&r);
    for (int i = 0; i < 240; i++) ds->y[i] = (uint8_t)(i % 10);
}


// With crops and flips on, each device augments the samples the plan gives it, from (seed,
// epoch, id): any mix computes the step that the CPU device alone computes, to the tolerances
// of the unaugmented steps. That the batches were augmented at all shows in the reference: its
// gradient is far from the same step's without augmentation.
static void test_sharding_invariance_augmented(void **state) {
    (void)state;
    int have_cl = find_pocl();
    model m;
    dataset ds;
    rgb_setup(&m, &ds);
    const data_augment aug = {.crop = 3, .flip = 1};
    reference ref = {0}, plain = {0};
    run_mix(&m, &ds, "cpu", 0, &aug, &ref);
    run_mix(&m, &ds, "cpu", 0, NULL, &plain);
    double moved = test_rel_l2(ref.grad[0], plain.grad[0], m.n_params);
    printf("augmented vs plain step 1 gradient: %.3g (relative L2)\n", moved);
    assert_true(moved > 50 * TOL_GRAD_ROUNDING);
    char mixes[5][128];
    int nm = 0;
    snprintf(mixes[nm++], 128, "cpu:1,cpu:1");
    snprintf(mixes[nm++], 128, "cpu:1@5,cpu:1@1,cpu:1@2");
    if (have_cl) {
        snprintf(mixes[nm++], 128, "cpu,%s", pthread_spec);
        snprintf(mixes[nm++], 128, "%s@1,%s@0.5,cpu@3", pthread_spec, basic_spec);
    }
    for (int k = 0; k < nm; k++) run_mix(&m, &ds, mixes[k], 0, &aug, &ref);
    for (int s = 0; s < STEPS; s++) {
        free(ref.params[s]);
        free(ref.grad[s]);
        free(plain.params[s]);
        free(plain.grad[s]);
    }
    dataset_free(&ds);
    model_free(&m);
}

// keras.applications' ResNet50 (its Keras JSON, tests/fixtures/keras/applications) and
// MobileNetV2 (models/mobilenetv2.cfg, Keras's block for block) at 32x32x3: one step of
// APP_BATCH random images (batchnorm groups of 4) on two CPU workers, on uneven weights, in
// micro-batches of 2 groups and, with HT_TEST_APPS_CL=1 (PoCL compiling the kernels of these
// networks' many shapes costs a fresh CI machine minutes; the parity cases run their families
// on every driver), on PoCL beside a CPU worker equals the CPU device's step alone (tolerances
// below); each mix's largest relative L2 difference over the tensors is printed.
#define APP_BATCH 16
#define APP_FLOOR 1e-4 // of the gradient's RMS an element, where a tensor's own vanishes
// Any split rounds differently: the CPU worker computes the layers after the trunk as GEMMs
// over its micro-batch's rows, and BLAS's kernels sum an output differently by where its row
// falls among their register tiles (OpenBLAS's Haswell kernels: in no two splits alike), as
// PoCL's kernels round differently from the CPU's. A randomly initialised ResNet50 amplifies
// that through its 53 batchnorms (gradients of 4e3 at conv1, groups of 4 samples at 1x1 in
// conv5): measured, its output layer's gradient 8e-4 (CPU splits) and 2e-3 (PoCL) from the
// CPU's alone, the lower layers' up to 0.11 and 0.12; MobileNetV2's 8e-6 / 3e-5 and 0.011 /
// 0.016. How much the batchnorms amplify depends on which roundings they are fed: with auto's
// timed choice between direct and Winograd for ResNet50's 8x8 layers (per process, so every
// mix of one run shares it), ResNet50's lower layers measured 0.10 on a quiet machine and 0.20
// on a loaded one (conv1_bn's bias). Bounded with room over that; the output layer stays at
// 1e-2. A wrong kernel is off by far more (O(1)), and each kernel is checked against the
// reference to 1e-5 on its own (test_layers_conv).
#define APP_TOL_OUT 1e-2
#define APP_TOL 0.4
static void app_invariance(const model *m, const char *what) {
    const char *cl_env = getenv("HT_TEST_APPS_CL");
    int have_cl = cl_env && !strcmp(cl_env, "1") && find_pocl();
    const size_t per = (size_t)m->in_c * m->in_h * m->in_w;
    dataset ds = {.n = APP_BATCH, .c = m->in_c, .h = m->in_h, .w = m->in_w};
    ds.x = malloc(sizeof(float) * APP_BATCH * per);
    ds.y = malloc(APP_BATCH);
    ht_rng r;
    ht_rng_seed(&r, 17);
    for (size_t i = 0; i < APP_BATCH * per; i++) ds.x[i] = (float)ht_rng_double(&r);
    for (int i = 0; i < APP_BATCH; i++) ds.y[i] = (uint8_t)(i % m->n_classes);
    uint32_t idx[APP_BATCH];
    for (int i = 0; i < APP_BATCH; i++) idx[i] = (uint32_t)i;
    char mixes[5][128];
    uint64_t mem[5] = {0};
    int nm = 0;
    snprintf(mixes[nm++], 128, "cpu");
    snprintf(mixes[nm++], 128, "cpu:1,cpu:1");
    snprintf(mixes[nm++], 128, "cpu:1@5,cpu:1@1");
    // Micro-batches of 2 batchnorm groups of 4 (the model's groups for every mix).
    mem[nm] = 2 * sizeof(float) * m->n_params + net_ws_bytes(m, 2 * m->setup.bn_group + 1, 1);
    snprintf(mixes[nm++], 128, "cpu:1");
    if (have_cl) snprintf(mixes[nm++], 128, "%s,cpu:1", pthread_spec);
    float *p = malloc(sizeof(float) * m->n_params), *ref = malloc(sizeof(float) * m->n_params);
    model_init_params(m, p, 3);
    for (int k = 0; k < nm; k++) {
        ht_error e;
        test_rig rig;
        test_rig_open(&rig, m, mixes[k], NULL, p, APP_BATCH, 3, mem[k]);
        step_stats st;
        if (engine_train_step(rig.g, &ds, idx, APP_BATCH, 1, NULL, NULL, &st, &e) < 0)
            fail_msg("%s on %s: %s", what, mixes[k], e.msg);
        const float *g = engine_grad(rig.g);
        if (k == 0) {
            memcpy(ref, g, sizeof(float) * m->n_params);
        } else {
            // Each tensor within the suite's step tolerance of its own size, or of the
            // gradient's RMS where its own vanishes: the beta of a batchnorm whose output a
            // bias-free 1x1 convolution takes to another batchnorm (every MobileNetV2 block's
            // projection) has a gradient of 0 in exact arithmetic, and of rounding (1e-9 against
            // the gradient's 1e-4) in floats, which no relative comparison measures.
            const model_tensor *ts;
            const int nt = model_tensors(m, &ts);
            double all = 0, worst = 0, out = 0;
            for (size_t i = 0; i < m->n_trainable; i++) all += (double)ref[i] * ref[i];
            const double rms = sqrt(all / (double)m->n_trainable);
            for (int t = 0; t < nt; t++) {
                if (ts[t].state != TENSOR_TRAINABLE) continue;
                double num = 0, den = 0;
                for (size_t i = ts[t].off; i < ts[t].off + ts[t].n; i++) {
                    const double d = (double)g[i] - ref[i];
                    num += d * d, den += (double)ref[i] * ref[i];
                }
                const double floor = APP_FLOOR * rms * sqrt((double)ts[t].n);
                const double tol = ts[t].output ? APP_TOL_OUT : APP_TOL;
                if (!(sqrt(num) <= tol * sqrt(den) + floor))
                    fail_msg("%s step on %s: %s: relative L2 error %.3g (tol %.3g, floor %.3g)",
                             what, mixes[k], ts[t].name, sqrt(num / den), (double)tol, floor);
                if (sqrt(den) > floor / APP_FLOOR * 1e-3 && sqrt(num / den) > worst)
                    worst = sqrt(num / den);
                if (ts[t].output && sqrt(num / den) > out) out = sqrt(num / den);
            }
            printf("%s on %s%s: largest relative L2 difference %.3g (of the tensors whose "
                   "gradient does not vanish), output layer %.3g\n", what, mixes[k],
                   mem[k] ? " (micro-batches)" : "", worst, out);
        }
        test_rig_close(&rig);
    }
    free(p);
    free(ref);
    dataset_free(&ds);
}

static void test_sharding_invariance_apps(void **state) {
    (void)state;
    ht_error e;
    model m;
    if (model_init(&m, HT_SOURCE_DIR "/models/mobilenetv2.cfg", &e) < 0) fail_msg("%s", e.msg);
    m.setup.bn_group = 4;
    app_invariance(&m, "MobileNetV2");
    model_free(&m);
    size_t len;
    char *json = test_read_gz(HT_SOURCE_DIR "/tests/fixtures/keras/applications/ResNet50.json.gz",
                              &len);
    assert_non_null(json);
    if (model_init_keras_text(&m, json, len, "ResNet50.json", &e) < 0) fail_msg("%s", e.msg);
    free(json);
    m.setup.bn_group = 4;
    app_invariance(&m, "ResNet50");
    model_free(&m);
}

// The weights of a "calibrated capacities: SPEC@W,SPEC@W,..." line in out, in the order of
// specs[0..n), as fractions of their sum.
static void calibrated_weights(const char *out, const char *const *specs, int n, double *w) {
    const char *line = strstr(out, "calibrated capacities: ");
    assert_non_null(line);
    line += strlen("calibrated capacities: ");
    const char *end = line + strcspn(line, "\n");
    double sum = 0;
    for (int d = 0; d < n; d++) {
        char want[64];
        snprintf(want, sizeof want, "%s@", specs[d]);
        const char *at = strstr(line, want);
        if (!at || at > end) fail_msg("no weight for %s in: %.*s", specs[d], (int)(end - line), line);
        w[d] = atof(at + strlen(want));
        sum += w[d];
    }
    for (int d = 0; d < n; d++) w[d] /= sum;
}

// 625 samples, 125 held out: 5 steps of 100 at lr 0.01 from the same weights, on the CPU
// device alone and on the three devices balanced automatically (calibrated at the start,
// re-weighed after 5 steps). The self-check is off: its 8-sample probe can exclude a sound
// device (see test_faults).
static void test_three_devices_balance_and_match(void **state) {
    (void)state;
    if (!find_pocl()) {
        printf("SKIPPED: PoCL pthread and basic devices not found\n");
        skip();
    }
    ht_error e;
    model m;
    if (model_init_preset(&m, "cnn2d_3layer_fullconnected_3layer", &e) < 0) fail_msg("%s", e.msg);
    char *dir = test_tmpdir("hetero");
    char *train = test_fashion_csv(dir, FASHION_TRAIN, 625, 1);
    assert_non_null(train);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 11);
    char *init_path = test_save_params(&m, init, dir, "init.safetensors");
    char specs[2][128];
    snprintf(specs[0], 128, "cpu");
    snprintf(specs[1], 128, "%s,%s,cpu", pthread_spec, basic_spec);
    float *w[2];
    const char *names[3] = {pthread_spec, basic_spec, "cpu"};
    double loss[2], vloss[2], shares[3], cw[3];
    for (int k = 0; k < 2; k++) {
        char args[4096], *out;
        snprintf(args, sizeof args,
                 "train --devices %s --train '%s' --epochs 1 --batch 100 --lr 0.01 --val-split 0.2 "
                 "--load '%s' --save '%s/w%d.safetensors' --out '%s' --name run%d --no-progress "
                 "--no-self-check",
                 specs[k], train, init_path, dir, k, dir, k);
        int rc = test_run_cli(args, &out);
        if (rc != 0) fail_msg("hetrain %s failed (%d):\n%s", args, rc, out);
        printf("%s", out);
        if (k == 1) {
            calibrated_weights(out, names, 3, cw);
            assert_non_null(strstr(out, "| sync "));
        }
        free(out);
        char path[1200];
        snprintf(path, sizeof path, "%s/w%d.safetensors", dir, k);
        w[k] = test_load_params(&m, path);
        snprintf(path, sizeof path, "%s/run%d.metrics.csv", dir, k);
        loss[k] = test_metrics_value(path, 0, "loss");
        vloss[k] = test_metrics_value(path, 0, "val_loss");
        if (k == 0) assert_true(fabs(test_metrics_value(path, 0, "share_cpu") - 1.0) < 1e-9);
        if (k == 1) {
            for (int d = 0; d < 3; d++) {
                char col[64];
                snprintf(col, sizeof col, "share_%s", names[d]);
                shares[d] = test_metrics_value(path, 0, col);
                assert_true(shares[d] >= 0 && shares[d] <= 1);
            }
        }
    }
    printf("shares: %s %.3f, %s %.3f, cpu %.3f (calibrated %.3f %.3f %.3f); loss: cpu %.6f, "
           "mix %.6f; val_loss: cpu %.6f, mix %.6f\n", pthread_spec, shares[0], basic_spec,
           shares[1], shares[2], cw[0], cw[1], cw[2], loss[0], loss[1], vloss[0], vloss[1]);
    assert_true(fabs(shares[0] + shares[1] + shares[2] - 1.0) < 1e-3);
    // Each device's share of the epoch is the weight its calibration measured, to whole
    // samples (the re-plan after step 5 comes too late to change this epoch). Which device is
    // fastest depends on the build, the machine and its load, so no order is asserted: the
    // native CPU worker takes most of the epoch in Release builds and far less under
    // ASan+UBSan, where its code is instrumented and PoCL's kernels are not; the
    // single-threaded PoCL device got more than the pthread one there and about as much on a
    // loaded 2-core machine (bench/README.md).
    // But they are measurements: 0.13 (ASan+UBSan) to 0.55 (Release) away from the equal
    // thirds of a static split, which calibration that did nothing would keep, and 0.03 when
    // the three devices shared the 2 cores with other tests (all three then as fast as each
    // other): more than 0.01 away, which equal thirds plus rounding are not.
    double off_third = 0;
    for (int d = 0; d < 3; d++) {
        assert_true(fabs(shares[d] - cw[d]) < 0.05);
        if (fabs(cw[d] - 1.0 / 3) > off_third) off_third = fabs(cw[d] - 1.0 / 3);
    }
    assert_true(off_third > 0.01);
    assert_true(check_updates(&m, w[1], w[0], init, TOL_RUN_OUTPUT, TOL_RUN_OTHER,
                              "weights after 5 steps, three devices vs cpu"));
    assert_true(fabs(loss[1] - loss[0]) <= TOL_RUN_LOSS * loss[0]);
    assert_true(fabs(vloss[1] - vloss[0]) <= TOL_RUN_LOSS * vloss[0]);
    for (int k = 0; k < 2; k++) free(w[k]);
    free(init);
    free(init_path);
    free(train);
    free(dir);
    model_free(&m);
}

// A device the balance left out (capacity 0, not dropped: it rests) keeps resting through a
// checkpoint's engine state, takes no samples, and is probed with one at every
// ENGINE_PROBE_EVERY-th step (step 20), as the balance's fits need it measured now and then.
static void test_resting_device(void **state) {
    (void)state;
    ht_error e;
    model m;
    dataset ds;
    if (model_init_preset(&m, "cnn2d_3layer_fullconnected_3layer", &e) < 0) fail_msg("%s", e.msg);
    test_fashion_set(&ds, FASHION_TEST, 500);
    float *p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, p, 3);
    test_rig rig;
    engine_config c = {.m = &m, .params = p, .max_batch = BATCH, .seed = 3, .rebalance = 1000};
    test_rig_open_with(&rig, "cpu:1,cpu:1", NULL, 0, &c);
    engine *g = rig.g;
    engine_state st;
    engine_get_state(g, &st);
    st.step = 19;
    st.capacity[0] = 1, st.capacity[1] = 0;
    const float *mom, *v;
    engine_moments(g, &mom, &v);
    float *m0 = malloc(sizeof(float) * m.n_trainable);
    memcpy(m0, mom, sizeof(float) * m.n_trainable);
    if (engine_restore(g, &st, p, m0, NULL, &e) < 0) fail_msg("%s", e.msg);
    for (int s = 0; s < 3; s++) {
        uint32_t idx[BATCH];
        batch_idx(&ds, s, idx);
        step_stats ss;
        if (engine_train_step(g, &ds, idx, BATCH, 1, NULL, NULL, &ss, &e) < 0)
            fail_msg("%s", e.msg);
        printf("step %d: shares %d, %d\n", 20 + s, ss.share[0], ss.share[1]);
        assert_int_equal(ss.share[1], s == 0 ? 1 : 0); // step 20 probes it
        assert_int_equal(ss.share[0] + ss.share[1], BATCH);
    }
    engine_state after;
    engine_get_state(g, &after);
    assert_true(after.capacity[1] == 0 && after.capacity[0] > 0);
    assert_int_equal(engine_active(g), 2);
    test_rig_close(&rig);
    free(m0), free(p);
    dataset_free(&ds);
    model_free(&m);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread basic", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharding_invariance),
        cmocka_unit_test(test_sharding_invariance_residual),
        cmocka_unit_test(test_sharding_invariance_squeeze_excite),
        cmocka_unit_test(test_sharding_invariance_augmented),
        cmocka_unit_test(test_sharding_invariance_apps),
        cmocka_unit_test(test_three_devices_balance_and_match),
        cmocka_unit_test(test_resting_device),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ocl_blas_release_all();
    return rc;
}
