// One training step over 3 ranks, each with one cpu:1 device, against the same step in one
// process over cpu:1,cpu:1,cpu:1 (the same plan: equal capacities, the same device order): the
// mean gradient and the update agree tensor by tensor (check_step_grad's tolerances), on every
// rank, and every position's loss comes back to every rank; with augmented batches too (each
// rank augments its own samples, from their ids); batchnorm and graph models over the ranks.
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
#include "sharding/engine.h"
#include "nn/model.h"
#include "sharding/ranks.h"
#include "tests/lib/testutil.h"

enum { B = 60 };

// A preset network with direct convolutions (each rank's process would time auto's choice
// itself; the comparisons want one algorithm), 300 test images, initial weights from seed.
static float *preset_fixture(const char *preset, model *m, dataset *ds, uint64_t seed) {
    ht_error e;
    if (model_init_preset(m, preset, &e) < 0) fail_msg("%s", e.msg);
    m->setup.conv_algo = CONV_ALGO_DIRECT;
    test_fashion_set(ds, FASHION_TEST, 300);
    float *init = malloc(sizeof(float) * m->n_params);
    model_init_params(m, init, seed);
    return init;
}

static float *cnn3_fixture(model *m, dataset *ds, uint64_t seed) {
    return preset_fixture("cnn3", m, ds, seed);
}

static void three_ranks_equal_one_process(const data_augment *aug) {
    assert_int_equal(ranks_size(), 3);
    ht_error e;
    model m;
    dataset ds;
    float *init = cnn3_fixture(&m, &ds, 3);
    uint32_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 37 + 5) % ds.n);
    float loss_mpi[B], loss_one[B];
    int32_t pred_mpi[B], pred_one[B];
    test_rig mpi, one;
    engine_config c = {.m = &m, .params = init, .max_batch = B, .seed = 3,
                       .augment = aug ? *aug : (data_augment){0}};
    test_rig_open_with(&mpi, "cpu:1", NULL, 0, &c);
    c.alone = 1; // the reference: this process alone
    test_rig_open_with(&one, "cpu:1,cpu:1,cpu:1", NULL, 0, &c);
    if (engine_train_step(mpi.g, &ds, idx, B, 0, loss_mpi, pred_mpi, NULL, &e) < 0 ||
        engine_train_step(one.g, &ds, idx, B, 0, loss_one, pred_one, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    // Each rank's sum is its one device's; added in rank order they are the single process's
    // device-order sum, operation for operation: the same bits.
    assert_memory_equal(engine_grad(mpi.g), engine_grad(one.g), sizeof(float) * m.n_params);
    assert_memory_equal(engine_params(mpi.g), engine_params(one.g), sizeof(float) * m.n_params);
    assert_memory_equal(loss_mpi, loss_one, sizeof loss_one);
    assert_memory_equal(pred_mpi, pred_one, sizeof pred_one);
    // The augmented step is another step: its losses differ from the plain one's (cmocka runs
    // the plain test first).
    static float plain_loss[B];
    if (!aug) memcpy(plain_loss, loss_one, sizeof plain_loss);
    else assert_memory_not_equal(plain_loss, loss_one, sizeof plain_loss);
    test_rig_close(&mpi);
    test_rig_close(&one);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

static void test_three_ranks_equal_one_process(void **state) {
    (void)state;
    three_ranks_equal_one_process(NULL);
}

static void test_three_ranks_augmented(void **state) {
    (void)state;
    const data_augment aug = {.crop = 4, .flip = 1};
    three_ranks_equal_one_process(&aug);
}

// Every rank's parameters are rank 0's bits.
static void same_on_every_rank(const model *m, const float *params) {
    ht_error e;
    float *p = malloc(sizeof(float) * m->n_params);
    memcpy(p, params, sizeof(float) * m->n_params);
    if (ranks_bcast(p, m->n_params, &e) < 0) fail_msg("%s", e.msg);
    assert_memory_equal(p, params, sizeof(float) * m->n_params);
    free(p);
}

// Per tensor, the relative L2 difference of a from b is at most tol.
static void check_tensors(const model *m, const float *a, const float *b, double tol, const char *what) {
    const model_tensor *ts;
    int nt = model_tensors(m, &ts);
    for (int k = 0; k < nt; k++) {
        double num = 0, den = 0;
        for (size_t i = ts[k].off; i < ts[k].off + ts[k].n; i++) {
            num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            den += (double)b[i] * b[i];
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= tol)) fail_msg("%s: %s differs by %.3g (relative L2, tolerance %.3g)", what, ts[k].name, rel, tol);
    }
}

// --comm-dtype bf16: the gradient crosses between ranks rounded to bfloat16 (8 significant
// bits, relative rounding at most 2^-9 of each rank's sum), summed in float. Against the float
// transport's step (the one-process sum's bits): no longer the same bits, and within TOL_BF16
// per tensor (2^-8: twice the rounding, for the ranks' sums partly cancelling). The parameters
// travel as float: every rank holds the same bits.
#define TOL_BF16 (1.0 / 256)
static void test_bf16_transport(void **state) {
    (void)state;
    ht_error e;
    model m;
    dataset ds;
    float *init = cnn3_fixture(&m, &ds, 9);
    uint32_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 41 + 3) % ds.n);
    test_rig half, one;
    engine_config c = {.m = &m, .params = init, .max_batch = B, .seed = 3, .comm_bf16 = 1};
    test_rig_open_with(&half, "cpu:1", NULL, 0, &c);
    c.alone = 1;
    c.comm_bf16 = 0;
    test_rig_open_with(&one, "cpu:1,cpu:1,cpu:1", NULL, 0, &c);
    if (engine_train_step(half.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0 ||
        engine_train_step(one.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    const float *gh = engine_grad(half.g), *go = engine_grad(one.g);
    assert_non_null(gh);
    assert_memory_not_equal(gh, go, sizeof(float) * m.n_trainable);
    check_tensors(&m, gh, go, TOL_BF16, "mean gradient, bf16 transport");
    if (ranks_rank() == 0)
        printf("bf16 transport: mean gradient %.1e relative L2 from float's\n",
               test_rel_l2(gh, go, m.n_trainable));
    same_on_every_rank(&m, engine_params(half.g));
    test_rig_close(&half);
    test_rig_close(&one);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

// The 2-layer network's fc1 (3136 -> 1024) at 60 samples: its weight gradient crosses as the
// ranks' factors (60 x 4160 floats against 3.2 M), each rank computing the whole sum. Rank 1's
// device has micro-batches of 7 (a 32 MiB workspace), so its sum is a sequence of micro-batch
// GEMMs; in a second set-up rank 1 has two devices, so its sum is their device-order sum. Over
// two steps (the second updates from moments the first left on every rank), with float and
// with bfloat16 transport: the gradient and the parameters are the bits of the same ranks with
// the weight reduce-scattered (engine_config.no_factors), every rank's parameters the same;
// with one device a rank under float, the bits of one process over the same devices too (two
// devices on one rank add up in another order than four in one process).
static void test_factored_dense(void **state) {
    (void)state;
    ht_error e;
    model m;
    dataset ds;
    float *init = preset_fixture("cnn2", &m, &ds, 7);
    const char *mine[2] = {ranks_rank() == 1 ? "cpu:1:mem=32M" : "cpu:1",
                           ranks_rank() == 1 ? "cpu:1,cpu:1:mem=32M" : "cpu:1"};
    for (int k = 0; k < 4; k++) {
        const int two = k / 2, bf = k % 2;
        test_rig fac, whole, one;
        engine_config c = {.m = &m, .params = init, .max_batch = B, .seed = 3, .comm_bf16 = bf};
        test_rig_open_with(&fac, mine[two], NULL, 0, &c);
        c.no_factors = 1;
        test_rig_open_with(&whole, mine[two], NULL, 0, &c);
        engine_config alone = {.m = &m, .params = init, .max_batch = B, .seed = 3, .alone = 1};
        test_rig_open_with(&one, "cpu:1,cpu:1:mem=32M,cpu:1", NULL, 0, &alone);
        assert_int_equal(engine_factored(fac.g), 1);
        assert_int_equal(engine_factored(whole.g), 0);
        assert_int_equal(engine_micro(fac.g, fac.n - 1), ranks_rank() == 1 ? 7 : B);
        for (int s = 0; s < 2; s++) {
            uint32_t idx[B];
            for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 29 + 7 + s * B) % ds.n);
            if (engine_train_step(fac.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0 ||
                engine_train_step(whole.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0 ||
                engine_train_step(one.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0)
                fail_msg("%s", e.msg);
            assert_memory_equal(engine_grad(fac.g), engine_grad(whole.g), sizeof(float) * m.n_params);
            const size_t bytes = sizeof(float) * m.n_params;
            assert_memory_equal(engine_params(fac.g), engine_params(whole.g), bytes);
            if (!bf && !two) assert_memory_equal(engine_params(fac.g), engine_params(one.g), bytes);
            else assert_memory_not_equal(engine_params(fac.g), engine_params(one.g), bytes);
            same_on_every_rank(&m, engine_params(fac.g));
        }
        test_rig_close(&fac);
        test_rig_close(&whole);
        test_rig_close(&one);
    }
    // An OpenCL device on one rank computes its own weight gradients, which no rank can redo
    // bit for bit: every rank sends the gradient whole.
    if (test_have_opencl("no mixed set-up for the factors' refusal")) {
        test_rig mixed;
        engine_config c = {.m = &m, .params = init, .max_batch = B, .seed = 3};
        test_rig_open_with(&mixed, ranks_rank() == 1 ? "cl:0.0" : "cpu:1", NULL, 0, &c);
        assert_int_equal(engine_factored(mixed.g), 0);
        test_rig_close(&mixed);
    }
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

// A device of rank 1 fails in the second step's pass: every rank reduces that step whole (its
// re-run changed rank 1's sums after the factors left) and updates by slices, then gathers the
// moments; the third step is factored again. Each step's parameters are the bits of the same
// ranks without factors.
static void test_factored_device_fails(void **state) {
    (void)state;
    ht_error e;
    model m;
    dataset ds;
    float *init = preset_fixture("cnn2", &m, &ds, 11);
    const char *mine = ranks_rank() == 1 ? "cpu:1,cpu:1" : "cpu:1";
    const char *fault = ranks_rank() == 1 ? "fail:cpu:1#2@2" : NULL;
    test_rig fac, whole;
    engine_config c = {.m = &m, .params = init, .max_batch = B, .seed = 3};
    test_rig_open_with(&fac, mine, fault, 0, &c);
    c.no_factors = 1;
    test_rig_open_with(&whole, mine, fault, 0, &c);
    assert_int_equal(engine_factored(fac.g), 1);
    for (int s = 0; s < 3; s++) {
        uint32_t idx[B];
        for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 31 + 5 + s * B) % ds.n);
        if (engine_train_step(fac.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0 ||
            engine_train_step(whole.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0)
            fail_msg("%s", e.msg);
        assert_memory_equal(engine_params(fac.g), engine_params(whole.g), sizeof(float) * m.n_params);
    }
    // The failure happened (rank 1 lost a device) and the ranks went on.
    if (ranks_rank() == 1) assert_int_equal(engine_active(fac.g), 1);
    test_rig_close(&fac);
    test_rig_close(&whole);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

// Mixed devices over the ranks: rank 1 runs PoCL (cl:0.0), ranks 0 and 2 a cpu:1 each, against
// one process over cpu:1,cl:0.0,cpu:1. The same plan gives every device the same samples, and
// the ranks' sums are the process's device-order sum, so the step agrees to TOL_MPI_STEP per
// tensor (measured: the same bits). Inference spans the ranks too: each computes its devices'
// rows and every rank gets them all.
#define TOL_MPI_STEP 1e-5
static void test_mixed_ranks_equal_one_process(void **state) {
    (void)state;
    ht_error e;
    model m;
    dataset ds;
    int cl = test_have_opencl("rank 1 runs cpu:1 instead of cl:0.0");
    float *init = cnn3_fixture(&m, &ds, 5);
    uint32_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 53 + 11) % ds.n);
    float loss_mpi[B], loss_one[B];
    test_rig mpi, one;
    test_rig_open(&mpi, &m, ranks_rank() == 1 && cl ? "cl:0.0" : "cpu:1", NULL, init, B, 3, 0);
    engine_config alone = {.m = &m, .params = init, .max_batch = B, .seed = 3, .alone = 1};
    test_rig_open_with(&one, cl ? "cpu:1,cl:0.0,cpu:1" : "cpu:1,cpu:1,cpu:1", NULL, 0, &alone);
    if (engine_train_step(mpi.g, &ds, idx, B, 0, loss_mpi, NULL, NULL, &e) < 0 ||
        engine_train_step(one.g, &ds, idx, B, 0, loss_one, NULL, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    check_tensors(&m, engine_grad(mpi.g), engine_grad(one.g), TOL_MPI_STEP, "mean gradient");
    check_tensors(&m, engine_params(mpi.g), engine_params(one.g), TOL_MPI_STEP, "parameters after the update");
    for (int i = 0; i < B; i++) assert_true(fabsf(loss_mpi[i] - loss_one[i]) <= 1e-6f * loss_one[i]);
    enum { N = 150 };
    float *pm = malloc(sizeof(float) * N * 10), *po = malloc(sizeof(float) * N * 10);
    if (engine_infer(mpi.g, &ds, 20, N, pm, &e) < 0 || engine_infer(one.g, &ds, 20, N, po, &e) < 0)
        fail_msg("%s", e.msg);
    for (int i = 0; i < N * 10; i++) assert_true(fabsf(pm[i] - po[i]) <= 1e-6f);
    free(pm);
    free(po);
    test_rig_close(&mpi);
    test_rig_close(&one);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

// batchnorm over the ranks: 3 ranks of one cpu:1 each against one process over the same three
// devices (the same bits: the same plan hands out the same groups), and against one process on
// a single device: the statistics agree to rounding (test_bn_sharding.c's tolerance), the
// gradient to the invariance tolerances, with a batch whose last group is short (62 = 7 x 8
// + 6), over two steps so that the second uses moving averages the first updated.
#define TOL_BN_STATS 1e-5
static void test_bn_ranks(void **state) {
    (void)state;
    ht_error e;
    model m;
    dataset ds;
    test_bn_model(&m, 8);
    // Each rank's process would time auto's choice itself; the comparison wants one algorithm.
    m.setup.conv_algo = CONV_ALGO_DIRECT;
    test_fashion_set(&ds, FASHION_TEST, 300);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 5);
    enum { NB = 62 };
    uint32_t idx[NB];
    test_rig mpi, one, single;
    test_rig_open(&mpi, &m, "cpu:1", NULL, init, NB, 3, 0);
    engine_config alone = {.m = &m, .params = init, .max_batch = NB, .seed = 3, .alone = 1};
    test_rig_open_with(&one, "cpu:1,cpu:1,cpu:1", NULL, 0, &alone);
    test_rig_open_with(&single, "cpu:1", NULL, 0, &alone);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < NB; i++) idx[i] = (uint32_t)((i * 53 + 11 + s * NB) % ds.n);
        if (s > 0 && engine_set_params(single.g, engine_params(one.g), &e) < 0) fail_msg("%s", e.msg);
        if (engine_train_step(mpi.g, &ds, idx, NB, 0, NULL, NULL, NULL, &e) < 0 ||
            engine_train_step(one.g, &ds, idx, NB, 0, NULL, NULL, NULL, &e) < 0 ||
            engine_train_step(single.g, &ds, idx, NB, 0, NULL, NULL, NULL, &e) < 0)
            fail_msg("%s", e.msg);
        assert_memory_equal(engine_grad(mpi.g), engine_grad(one.g), sizeof(float) * m.n_params);
        assert_memory_equal(engine_params(mpi.g), engine_params(one.g), sizeof(float) * m.n_params);
        assert_true(check_step_grad(&m, engine_grad(mpi.g), engine_grad(single.g), "3 ranks vs 1 device"));
        double err = test_state_err(&m, engine_grad(mpi.g), engine_grad(single.g));
        if (ranks_rank() == 0) printf("step %d: statistics, 3 ranks vs 1 device: %.1e\n", s + 1, err);
        assert_true(err <= TOL_BN_STATS);
    }
    test_rig_close(&mpi);
    test_rig_close(&one);
    test_rig_close(&single);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

// Graphs over the ranks: models/residual.cfg (identity and strided residual blocks) and the
// float64 PyTorch parity graph (tests/fixtures/torch_graph/graph.cfg: a residual block, a
// squeeze-and-excite broadcast multiply, a depthwise convolution concatenated with its input),
// batchnorm throughout: 3 ranks of one cpu:1 each give the bits of one process over the same
// three devices, and one device's step within the invariance tolerances.
static void test_graph_ranks(void **state) {
    (void)state;
    static const char *const cfgs[] = {HT_SOURCE_DIR "/models/residual.cfg",
                                       HT_SOURCE_DIR "/tests/fixtures/torch_graph/graph.cfg"};
    ht_error e;
    dataset ds;
    test_fashion_set(&ds, FASHION_TEST, 300);
    for (int k = 0; k < 2; k++) {
        model m;
        if (model_init(&m, cfgs[k], &e) < 0) fail_msg("%s", e.msg);
        m.setup.conv_algo = CONV_ALGO_DIRECT;
        m.setup.bn_group = 8;
        float *init = malloc(sizeof(float) * m.n_params);
        model_init_params(&m, init, 9);
        uint32_t idx[B];
        for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 41 + 7) % ds.n);
        test_rig mpi, one, single;
        test_rig_open(&mpi, &m, "cpu:1", NULL, init, B, 3, 0);
        engine_config alone = {.m = &m, .params = init, .max_batch = B, .seed = 3, .alone = 1};
        test_rig_open_with(&one, "cpu:1,cpu:1,cpu:1", NULL, 0, &alone);
        test_rig_open_with(&single, "cpu:1", NULL, 0, &alone);
        if (engine_train_step(mpi.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0 ||
            engine_train_step(one.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0 ||
            engine_train_step(single.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0)
            fail_msg("%s", e.msg);
        assert_memory_equal(engine_grad(mpi.g), engine_grad(one.g), sizeof(float) * m.n_params);
        assert_memory_equal(engine_params(mpi.g), engine_params(one.g),
                            sizeof(float) * m.n_params);
        assert_true(check_step_grad(&m, engine_grad(mpi.g), engine_grad(single.g), cfgs[k]));
        test_rig_close(&mpi);
        test_rig_close(&one);
        test_rig_close(&single);
        free(init);
        model_free(&m);
    }
    dataset_free(&ds);
}

int main(int argc, char **argv) {
    ht_error e;
    if (ranks_init(&argc, &argv, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_ranks_equal_one_process),
        cmocka_unit_test(test_three_ranks_augmented),
        cmocka_unit_test(test_bf16_transport),
        cmocka_unit_test(test_factored_dense),
        cmocka_unit_test(test_factored_device_fails),
        cmocka_unit_test(test_mixed_ranks_equal_one_process),
        cmocka_unit_test(test_bn_ranks),
        cmocka_unit_test(test_graph_ranks),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ranks_finalize();
    return rc;
}
