// The zeropad family on the OpenCL device (kernels/zeropad.cl): a training shard's gradient
// sum, losses and inference probabilities against the NCHW reference walker (tests/lib/ref.c).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "devices/device.h"
#include "nn/model.h"
#include "tests/lib/fd.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

enum { N = 5, CLASSES = 3 };
// The device's sums in another order than the reference's: float rounding (the OpenCL
// device's conv and dense through CLBlast), as test_cl_device.c's step gradients.
#define TOL_CL_REF 1e-4f

// Zero padding first, between convolutions and before a pool, each side its own count.
static void zeropad_model(model *m) {
    const layer_spec s[] = {
        {.kind = LAYER_ZEROPAD, .pad_top = 1, .pad_bottom = 0, .pad_left = 2, .pad_right = 1},
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_ZEROPAD, .pad_top = 2, .pad_bottom = 1, .pad_left = 0, .pad_right = 3},
        {.kind = LAYER_CONV2D, .filters = 3, .k = 3, .stride = 2, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_ZEROPAD, .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DENSE, .units = CLASSES, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    ht_error e;
    assert_int_equal(model_begin(m, "zeropad_cl", 2, 7, 6, CLASSES, &e), 0);
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %zu: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
}

static void test_zeropad_cl_matches_ref(void **state) {
    (void)state;
    if (!test_have_opencl("SKIPPED: the OpenCL zeropad is not tested here")) skip();
    model m;
    zeropad_model(&m);
    const size_t in = (size_t)m.in_c * m.in_h * m.in_w;
    float *x = fill_uniform(N * in, 0, 1, 41), *p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, p, 42);
    uint8_t y[N] = {0, 1, 2, 1, 0};
    uint32_t ids[N] = {0, 1, 2, 3, 4};
    ref_net r;
    ref_net_init(&r, &m, N);
    float *gr = calloc(m.n_params, sizeof(float)), *probs = malloc(sizeof(float) * N * CLASSES);
    memcpy(probs, ref_forward(&r, &m, p, x, y, N, NULL), sizeof(float) * N * CLASSES);
    float loss[N];
    memcpy(loss, r.loss, sizeof loss);
    ref_backward(&r, &m, p, gr, x, y, N, NULL);

    device *d;
    int n;
    ht_error e;
    if (device_open_list(&d, &n, "cl:0.0", &m, N, 0, &e) < 0) fail_msg("%s", e.msg);
    float *g = malloc(sizeof(float) * m.n_params), dl[N], dp[N * CLASSES];
    int32_t pred[N];
    shard_job job = {.x = x, .y = y, .ids = ids, .n = N, .seed = 1, .step = 1};
    shard_result res = {.grad_sum = g, .loss = dl, .pred = pred};
    if (d->ops->set_params(d->ctx, p, &e) < 0 || d->ops->train_shard(d->ctx, &job, &res, &e) < 0 ||
        d->ops->infer(d->ctx, x, N, dp, &e) < 0)
        fail_msg("cl:0.0: %s", e.msg);
    device_close_list(d, n);

    double norm = 0;
    for (size_t i = 0; i < m.n_trainable; i++) norm += fabs(gr[i]);
    assert_true(norm > 1e-3); // not a vacuous comparison
    assert_true(check_tensor(dl, loss, N, TOL_CL_REF, 1e-3f, "zeropad network loss, cl vs ref"));
    assert_true(check_tensor(dp, probs, N * CLASSES, TOL_CL_REF, 1e-3f,
                             "zeropad network probabilities, cl vs ref"));
    assert_true(check_params(&m, g, gr, TOL_CL_REF, "zeropad network gradient, cl vs ref"));
    ref_net_free(&r);
    free(x), free(p), free(gr), free(probs), free(g);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zeropad_cl_matches_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
