// One training step over 3 ranks, each with one cpu:1 device, against the same step in one
// process over cpu:1,cpu:1,cpu:1 (the same plan: equal capacities, the same device order): the
// mean gradient and the update agree tensor by tensor (check_step_grad's tolerances), on every
// rank, and every position's loss comes back to every rank.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data.h"
#include "engine.h"
#include "model.h"
#include "ranks.h"
#include "testutil.h"

enum { B = 60 };

static void test_three_ranks_equal_one_process(void **state) {
    (void)state;
    assert_int_equal(ranks_size(), 3);
    ht_error e;
    model m;
    dataset ds;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    if (dataset_load_idx(&ds, FASHION_DIR "/t10k-images-idx3-ubyte.gz",
                         FASHION_DIR "/t10k-labels-idx1-ubyte.gz", &e) < 0)
        fail_msg("%s", e.msg);
    dataset_limit(&ds, 300);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 3);
    uint32_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (uint32_t)((i * 37 + 5) % ds.n);
    float loss_mpi[B], loss_one[B];
    int32_t pred_mpi[B], pred_one[B];
    test_rig mpi, one;
    test_rig_open(&mpi, &m, "cpu:1", NULL, init, B, 3, 0);
    test_rig_open(&one, &m, "cpu:1,cpu:1,cpu:1", NULL, init, B, 3, 0);
    engine_span_ranks(one.g, 0); // the reference: this process alone
    if (engine_train_step(mpi.g, &ds, idx, B, 0, loss_mpi, pred_mpi, NULL, &e) < 0 ||
        engine_train_step(one.g, &ds, idx, B, 0, loss_one, pred_one, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    // Each rank's sum is its one device's; added in rank order they are the single process's
    // device-order sum, operation for operation: the same bits.
    assert_memory_equal(engine_grad(mpi.g), engine_grad(one.g), sizeof(float) * m.n_params);
    assert_memory_equal(engine_params(mpi.g), engine_params(one.g), sizeof(float) * m.n_params);
    assert_memory_equal(loss_mpi, loss_one, sizeof loss_one);
    assert_memory_equal(pred_mpi, pred_one, sizeof pred_one);
    test_rig_close(&mpi);
    test_rig_close(&one);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

int main(int argc, char **argv) {
    ht_error e;
    if (ranks_init(&argc, &argv, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_ranks_equal_one_process),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ranks_finalize();
    return rc;
}
