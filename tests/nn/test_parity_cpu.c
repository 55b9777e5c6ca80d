// Parity of the native CPU path: parity.c's models through net_forward/net_backward (the real
// walker and net_layer_ops, channels-last inside) against the reference, their convolutions
// direct and, where the case asks, by Winograd; and through the CPU device's interface, as
// training runs it, in micro-batches of half the batch.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "devices/device.h"
#include "nn/batchnorm.h"
#include "nn/net.h"
#include "tests/lib/parity.h"

static const parity_tols cpu_tols = {.direct = TOL_CPU, .wino = TOL_WINO};

// Threads of the CPU path: the trunk runs samples on both, the batch-wise layers split rows.
#define CPU_THREADS 2

static int cpu_run(parity_backend *b, const model *m, const float *params, const parity_batch *in,
                   parity_out *out, ht_error *e) {
    (void)b;
    net_ws ws;
    if (net_ws_init(&ws, m, in->B, CPU_THREADS, e) < 0) return -1;
    const net_dropout drop = {.seed = in->seed, .epoch = in->epoch, .ids = in->ids};
    const size_t nout = (size_t)in->B * layer_out_size(&m->layers[m->n_layers - 1]);
    memcpy(out->probs, net_forward(&ws, m, params, in->x, in->y, in->B, &drop),
           nout * sizeof(float));
    memcpy(out->loss, ws.loss, (size_t)in->B * sizeof(float));
    // Backward writes the sums (the first micro-batch of a shard); out->grads arrives NaN.
    net_backward_to(&ws, m, params, out->grads, in->x, in->y, in->B, &drop, 1);
    memcpy(out->probs_infer, net_forward(&ws, m, params, in->x, NULL, in->B, NULL),
           nout * sizeof(float));
    net_ws_free(&ws);
    return 0;
}

// The CPU device (devices/cpu.c) on the batch: its micro-batch halved where that leaves whole
// batchnorm groups, so that a shard's gradient sum is made of two passes (the first writing it,
// the second adding to it), then inference.
static int cpu_device_run(parity_backend *b, const model *m, const float *params,
                          const parity_batch *in, parity_out *out, ht_error *e) {
    (void)b;
    device d;
    if (cpu_device_open(&d, m, CPU_THREADS, in->B, 0, e) < 0) return -1;
    free(out->probs);
    out->probs = NULL; // train_shard does not hand them back
    const int group = model_bn_group(m);
    char note[256];
    int rc = 0;
    if (in->B >= 2 && (group == 0 || in->B / 2 >= group))
        rc = d.ops->shrink(d.ctx, "a test", note, sizeof note, e);
    int32_t pred[64];
    assert_true(in->B <= 64);
    const shard_job job = {.x = in->x, .y = in->y, .ids = in->ids, .n = in->B, .seed = in->seed,
                           .epoch = in->epoch, .step = 1};
    shard_result res = {.grad_sum = out->grads, .loss = out->loss, .pred = pred};
    if (rc == 0 && (d.ops->set_params(d.ctx, params, e) < 0 ||
                    d.ops->train_shard(d.ctx, &job, &res, e) < 0 ||
                    d.ops->infer(d.ctx, in->x, in->B, out->probs_infer, e) < 0))
        rc = -1;
    d.ops->close(d.ctx);
    return rc;
}

static void test_parity_cpu(void **state) {
    (void)state;
    parity_backend b = {.name = "cpu (net.c)", .tol = &cpu_tols, .run = cpu_run};
    assert_int_equal(parity_run_cases(&b), 0);
}

static void test_parity_cpu_device(void **state) {
    (void)state;
    parity_backend b = {.name = "cpu device (micro-batches)", .tol = &cpu_tols,
                        .run = cpu_device_run};
    assert_int_equal(parity_run_cases(&b), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_cpu),
        cmocka_unit_test(test_parity_cpu_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
