// Whole-network checks on the CPU path: finite-difference gradients through every layer kind,
// micro-batch and batch-composition invariance (dropout included), net.c's layout planning
// against the reference walker (ref.c) on layer orders the presets do not have, and one engine
// step on one device against the same step split over two devices.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data/data.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/model.h"
#include "nn/layer_desc.h"
#include "nn/net.h"
#include "tests/lib/ref.h"
#include "core/rng.h"
#include "tests/lib/testutil.h"

// Central differences on a float network. The loss of 3 samples (~5) carries ~3e-7 of float
// rounding, which the quotient divides by 2 FD_EPS: ~5e-5 absolute at FD_EPS 3e-3, 1e-3 of the
// floor. With FD_EPS 1e-3 and a floor of 5e-3 that noise was the whole tolerance: 2.8e-2
// under OpenBLAS's Sandybridge kernels (a failure), 1.2e-2 under the default one. Now the
// worst over the default, Haswell, Sandybridge and Prescott kernels is 2.5e-3, and a gradient
// 3% off fails (3.0e-2). FD_EPS 1e-2 would step over ReLU and max-pool kinks (errors 0.45).
#define FD_EPS 3e-3f
#define TOL_NET_FD 2e-2f
#define FLOOR_NET_FD 5e-2f
// Reordering float sums (micro-batches, devices) changes results only by rounding.
#define TOL_SUM_ORDER 1e-5f
#define FLOOR_SUM_ORDER 1e-6f

// A small network using every layer kind: 1x8x8 -> conv(4,3,pad1) relu pool2 -> conv(3,3,s1)
// relu -> dense 6 relu dropout .3 -> dense 5 -> softmax.
static void small_model(model *m) {
    ht_error e;
    assert_int_equal(model_begin(m, "small", 1, 8, 8, 5, &e), 0);
    layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 1, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_CONV2D, .filters = 3, .k = 3, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DENSE, .units = 6, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_CONSTANT,
         .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DROPOUT, .rate = 0.3f},
        {.kind = LAYER_DENSE, .units = 5, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_ZEROS},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %zu: %s", i, e.msg);
    }
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
}

static void random_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)ht_rng_double(&r);
}

static double loss_sum(net_ws *ws, const model *m, const float *p, const float *x,
                       const uint8_t *y, int B, const net_dropout *d) {
    net_forward(ws, m, p, x, y, B, d);
    double s = 0;
    for (int i = 0; i < B; i++) s += ws->loss[i];
    return s;
}

static void test_network_finite_differences(void **state) {
    (void)state;
    model m;
    small_model(&m);
    const int B = 3;
    float *p = malloc(sizeof(float) * m.n_params), *g = calloc(m.n_params, sizeof(float));
    float *num = malloc(sizeof(float) * m.n_params);
    float x[3 * 64];
    uint8_t y[3] = {0, 3, 4};
    uint32_t ids[3] = {11, 5, 902};
    model_init_params(&m, p, 7);
    random_fill(x, sizeof x / sizeof x[0], 99, 0, 1);
    net_dropout d = {.seed = 3, .epoch = 1, .ids = ids};
    net_ws ws;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, &m, B, 1, &e), 0);
    net_forward(&ws, &m, p, x, y, B, &d);
    net_backward(&ws, &m, p, g, x, y, B, &d);
    for (size_t i = 0; i < m.n_params; i++) {
        float keep = p[i];
        p[i] = keep + FD_EPS;
        double lp = loss_sum(&ws, &m, p, x, y, B, &d);
        p[i] = keep - FD_EPS;
        double lm = loss_sum(&ws, &m, p, x, y, B, &d);
        p[i] = keep;
        num[i] = (float)((lp - lm) / (2 * FD_EPS));
    }
    assert_true(check_tensor(g, num, m.n_params, TOL_NET_FD, FLOOR_NET_FD, "network d(loss)/dparams"));
    // The gradient is not trivially zero.
    double norm = 0;
    for (size_t i = 0; i < m.n_params; i++) norm += fabs(g[i]);
    assert_true(norm > 1e-3);
    net_ws_free(&ws);
    free(p);
    free(g);
    free(num);
    model_free(&m);
}

// net_backward_to with NET_GRAD_WRITE writes every gradient element (a buffer full of NaN comes
// out clean) and gives the values that adding to a zeroed buffer gives, with and without the
// convolution trunk (2 threads, the 3-layer preset) and for the small model.
static void test_backward_overwrites(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        model m;
        ht_error e;
        if (k == 0) small_model(&m);
        else if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
        const int B = 5;
        size_t in = (size_t)m.in_c * m.in_h * m.in_w;
        float *p = malloc(sizeof(float) * m.n_params), *x = malloc(sizeof(float) * B * in);
        float *add = calloc(m.n_params, sizeof(float)), *put = malloc(sizeof(float) * m.n_params);
        for (size_t i = 0; i < m.n_params; i++) put[i] = NAN;
        uint8_t y[5] = {0, 1, 2, 3, 4};
        uint32_t ids[5] = {3, 10, 17, 4, 55};
        model_init_params(&m, p, 11);
        random_fill(x, B * in, 5, 0, 1);
        net_dropout d = {.seed = 9, .epoch = 2, .ids = ids};
        net_ws ws;
        assert_int_equal(net_ws_init(&ws, &m, B, 2, NULL), 0);
        net_forward(&ws, &m, p, x, y, B, &d);
        net_backward(&ws, &m, p, add, x, y, B, &d);
        net_forward(&ws, &m, p, x, y, B, &d);
        net_backward_to(&ws, &m, p, put, x, y, B, &d, NET_GRAD_WRITE);
        // Equal as numbers (a sum that starts from +0 turns a -0 into +0; nothing else moves).
        for (size_t i = 0; i < m.n_params; i++)
            if (!(put[i] == add[i])) fail_msg("element %zu: %g written, %g added", i, put[i], add[i]);
        net_ws_free(&ws);
        free(p);
        free(x);
        free(add);
        free(put);
        model_free(&m);
    }
}

// Gradient of a batch == sum of the gradients of its parts, with dropout keyed by sample id:
// this is what makes micro-batching and sharding leave the result unchanged.
static void test_batch_composition_invariance(void **state) {
    (void)state;
    model m;
    small_model(&m);
    const int B = 7;
    float *p = malloc(sizeof(float) * m.n_params);
    float *whole = calloc(m.n_params, sizeof(float)), *parts = calloc(m.n_params, sizeof(float));
    float x[7 * 64];
    uint8_t y[7] = {0, 1, 2, 3, 4, 0, 1};
    uint32_t ids[7] = {3, 1000, 17, 4, 55, 56, 2};
    model_init_params(&m, p, 11);
    random_fill(x, sizeof x / sizeof x[0], 5, 0, 1);
    net_dropout d = {.seed = 9, .epoch = 2, .ids = ids};
    net_ws ws;
    assert_int_equal(net_ws_init(&ws, &m, B, 2, NULL), 0);
    net_forward(&ws, &m, p, x, y, B, &d);
    float whole_loss[7];
    memcpy(whole_loss, ws.loss, sizeof whole_loss);
    net_backward(&ws, &m, p, whole, x, y, B, &d);
    // Parts of 1, 4 and 2 samples, the last part processed first.
    int cut[][2] = {{5, 2}, {0, 1}, {1, 4}};
    for (int k = 0; k < 3; k++) {
        int off = cut[k][0], n = cut[k][1];
        net_dropout dp = {.seed = 9, .epoch = 2, .ids = ids + off};
        net_forward(&ws, &m, p, x + off * 64, y + off, n, &dp);
        assert_true(check_tensor(ws.loss, whole_loss + off, (size_t)n, TOL_SUM_ORDER,
                                 FLOOR_SUM_ORDER, "per-sample loss"));
        net_backward(&ws, &m, p, parts, x + off * 64, y + off, n, &dp);
    }
    // Per tensor, relative L2: an element whose terms cancel can differ by far more than
    // TOL_SUM_ORDER of itself while the tensor agrees to 1e-7 (see check_params).
    assert_true(check_params(&m, parts, whole, TOL_SUM_ORDER, "grad(batch) vs sum of grad(parts)"));
    // A different epoch gives different dropout masks, so a different gradient.
    float *other = calloc(m.n_params, sizeof(float));
    net_dropout d3 = {.seed = 9, .epoch = 3, .ids = ids};
    net_forward(&ws, &m, p, x, y, B, &d3);
    net_backward(&ws, &m, p, other, x, y, B, &d3);
    double diff = 0;
    for (size_t i = 0; i < m.n_params; i++) diff += fabs(other[i] - whole[i]);
    assert_true(diff > 1e-4);
    net_ws_free(&ws);
    free(p);
    free(whole);
    free(parts);
    free(other);
    model_free(&m);
}

// ---- net.c's layouts on unusual layer orders ----

// net.c against the reference walker (ref.c: NCHW layer functions, one layer at a time): the
// same sums in another order (gradients summed over a batch of 3), float rounding only.
#define TOL_NET_REF 1e-5f
// nthreads=1 vs nthreads=2, and a batch vs its parts: out and din are computed per sample by
// the same single-threaded calls either way; dw/db differ in the order the per-thread sums are
// added, a few ulps (observed 4.8e-7 for one layer, test_layers_conv), so they get twice the room.
#define TOL_THREADS_SUM 2e-6f

static void build_model(model *m, int c, int h, int w, int classes, const layer_spec *s, int n) {
    ht_error e;
    assert_int_equal(model_begin(m, "layouts", c, h, w, classes, &e), 0);
    for (int i = 0; i < n; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %d: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
}

// net_forward/net_backward against the reference with two threads; and the same gradient
// from one thread and from the batch split over two calls.
static void net_ref_check(const model *m, uint64_t seed) {
    enum { B = 3 };
    const size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    float *p = malloc(sizeof(float) * m->n_params), *gr = calloc(m->n_params, sizeof(float));
    float *g = calloc(m->n_params, sizeof(float)), *g1 = calloc(m->n_params, sizeof(float));
    float *gp = calloc(m->n_params, sizeof(float));
    float *x = malloc(sizeof(float) * B * in);
    random_fill(x, B * in, seed, 0, 1);
    uint8_t y[B] = {0, 1, 2};
    uint32_t ids[B] = {4, 70, 9};
    model_init_params(m, p, seed + 1);
    net_dropout d = {.seed = 5, .epoch = 2, .ids = ids};
    ref_net r;
    ref_net_init(&r, m, B);
    ref_forward(&r, m, p, x, y, B, &d);
    ref_backward(&r, m, p, gr, x, y, B, &d);
    net_ws ws, ws1;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, m, B, 2, &e), 0);
    assert_int_equal(net_ws_init(&ws1, m, B, 1, &e), 0);
    net_forward(&ws, m, p, x, y, B, &d);
    assert_true(check_tensor(ws.loss, r.loss, B, TOL_NET_REF, 1.0f, "layouts network loss"));
    net_backward(&ws, m, p, g, x, y, B, &d);
    net_forward(&ws1, m, p, x, y, B, &d);
    net_backward(&ws1, m, p, g1, x, y, B, &d);
    for (int off = 0; off < B; off += 2) { // parts of 2 and 1
        int n = B - off < 2 ? B - off : 2;
        net_dropout dp = {.seed = 5, .epoch = 2, .ids = ids + off};
        net_forward(&ws, m, p, x + off * in, y + off, n, &dp);
        net_backward(&ws, m, p, gp, x + off * in, y + off, n, &dp);
    }
    double norm = 0;
    for (size_t i = 0; i < m->n_params; i++) norm += fabs(gr[i]);
    assert_true(norm > 1e-3); // not a vacuous comparison
    assert_true(check_params(m, g, gr, TOL_NET_REF, "layouts network vs NCHW reference"));
    assert_true(check_params(m, g1, g, TOL_THREADS_SUM, "layouts network, 1 vs 2 threads"));
    assert_true(check_params(m, gp, g, TOL_THREADS_SUM, "layouts network, parts vs whole"));
    net_ws_free(&ws);
    net_ws_free(&ws1);
    ref_net_free(&r);
    free(p), free(gr), free(g), free(g1), free(gp), free(x);
}

// relu -> dropout after the trunk goes backward in one pass (the plan's drop_fold): the same
// bits as relu's and dropout's separate passes, with 1 and 2 threads and a batch of an odd
// size, for two dropout rates; a relu inside the trunk or after a conv is left alone.
static void test_relu_dropout_fold_same_bits(void **state) {
    (void)state;
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 1, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DROPOUT, .rate = 0.2f},
        {.kind = LAYER_DENSE, .units = 40, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_CONSTANT,
         .b_arg = 0.01f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DROPOUT, .rate = 0.5f},
        {.kind = LAYER_DENSE, .units = 24, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_ZEROS},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DROPOUT, .rate = 0.3f},
        {.kind = LAYER_DENSE, .units = 5, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_ZEROS},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    enum { B = 7 };
    model m;
    build_model(&m, 1, 8, 8, 5, s, (int)(sizeof s / sizeof s[0]));
    const size_t in = (size_t)m.in_c * m.in_h * m.in_w;
    float *p = malloc(sizeof(float) * m.n_params), *x = malloc(sizeof(float) * B * in);
    float *g_on = malloc(sizeof(float) * m.n_params), *g_off = malloc(sizeof(float) * m.n_params);
    random_fill(x, B * in, 31, -1, 1);
    model_init_params(&m, p, 32);
    uint8_t y[B] = {0, 1, 2, 3, 4, 0, 1};
    uint32_t ids[B] = {11, 3, 250, 7, 90, 12, 1000};
    net_dropout d = {.seed = 77, .epoch = 4, .ids = ids};
    for (int nt = 1; nt <= 2; nt++) {
        net_ws ws;
        ht_error e;
        assert_int_equal(net_ws_init(&ws, &m, B, nt, &e), 0);
        // Folded: the relus after the dense layers; not the conv's (its relu is skipped).
        for (int l = 0; l < m.n_layers; l++)
            assert_int_equal(ws.plan[l].drop_fold, l == 5 || l == 8);
        for (int fold = 1; fold >= 0; fold--) {
            ws.plan[5].drop_fold = ws.plan[8].drop_fold = fold;
            float *g = fold ? g_on : g_off;
            memset(g, 0, sizeof(float) * m.n_params);
            net_forward(&ws, &m, p, x, y, B, &d);
            net_backward(&ws, &m, p, g, x, y, B, &d);
        }
        // Both dense relus had units cut by the mask and units at zero before it, so the fold
        // was tested where it matters.
        int dropped = 0, kept = 0;
        for (size_t i = 0; i < (size_t)B * 40; i++) {
            dropped += ws.act[5][i] == 0.0f;
            kept += ws.act[5][i] > 0.0f;
        }
        assert_true(dropped > 40 && kept > 40);
        double norm = 0;
        for (size_t i = 0; i < m.n_params; i++) norm += fabs(g_on[i]);
        assert_true(norm > 1e-3);
        assert_memory_equal(g_on, g_off, sizeof(float) * m.n_params);
        net_ws_free(&ws);
    }
    model_free(&m);
    free(p), free(x), free(g_on), free(g_off);
}

// Layer orders the presets do not have: a 3-channel input (converted to channels-last), relu
// after a pool, dropout and a stride-2 conv inside the per-sample trunk, convs after a dense
// layer (batch-wise on 1x1 inputs whose channel stride is no multiple of 16, one with its relu
// fused, the last feeding softmax from padded channels); and a pool first, a conv of exactly
// 16 filters, a K=2 conv without padding.
static void test_net_layouts(void **state) {
    (void)state;
    const layer_spec a[] = {
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 1, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DROPOUT, .rate = 0.2f},
        {.kind = LAYER_CONV2D, .filters = 5, .k = 3, .stride = 2, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_DENSE, .units = 6, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_CONSTANT,
         .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_CONV2D, .filters = 7, .k = 1, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_CONV2D, .filters = 4, .k = 1, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_ZEROS},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    const layer_spec b[] = {
        {.kind = LAYER_MAXPOOL, .k = 3, .stride = 2},
        {.kind = LAYER_CONV2D, .filters = 16, .k = 3, .stride = 1, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_CONV2D, .filters = 3, .k = 2, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_DROPOUT, .rate = 0.3f},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM, .b_init = INIT_ZEROS},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    model m;
    build_model(&m, 3, 6, 6, 4, a, (int)(sizeof a / sizeof a[0]));
    net_ref_check(&m, 2100);
    model_free(&m);
    build_model(&m, 1, 9, 9, 3, b, (int)(sizeof b / sizeof b[0]));
    net_ref_check(&m, 2200);
    model_free(&m);
}

// The layer options of Keras Sequential models on an RGB input: strided convs with "same"
// padding (pad 0 before and 1 after on even sizes), a conv and a dense without a bias, average
// and max pooling with "same" padding in the trunk, global average pooling ending the trunk,
// and an average pooling after the dense layers (batch-wise).
static void test_net_new_kinds(void **state) {
    (void)state;
    const layer_spec c[] = {
        {.kind = LAYER_CONV2D, .filters = 8, .k = 3, .stride = 2, .pad = -1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f}, // 8x8x8
        {.kind = LAYER_RELU},
        {.kind = LAYER_CONV2D, .filters = 6, .k = 4, .stride = 1, .pad = -1, .no_bias = 1,
         .w_init = INIT_GLOROT_UNIFORM},                                            // 6x8x8
        {.kind = LAYER_AVGPOOL, .k = 3, .stride = 2, .pad = -1},                   // 6x4x4
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 3, .stride = 2, .pad = -1},                   // 6x2x2
        {.kind = LAYER_CONV2D, .filters = 5, .k = 3, .stride = 2, .pad = -1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f}, // 5x1x1
        {.kind = LAYER_GLOBAL_AVGPOOL},
        {.kind = LAYER_DENSE, .units = 4, .no_bias = 1, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    const layer_spec d[] = {
        {.kind = LAYER_AVGPOOL, .k = 2, .stride = 1, .pad = -1},                   // 3x7x7
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 3, .pad = -1, .no_bias = 1,
         .w_init = INIT_GLOROT_UNIFORM},                                            // 4x3x3
        {.kind = LAYER_DENSE, .units = 12, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_GLOBAL_AVGPOOL},                                            // 12x1x1
        {.kind = LAYER_AVGPOOL, .k = 1},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    model m;
    build_model(&m, 3, 16, 16, 4, c, (int)(sizeof c / sizeof c[0]));
    assert_int_equal(m.layers[0].oh, 8);
    assert_int_equal(m.layers[6].oh, 1);
    net_ref_check(&m, 2300);
    model_free(&m);
    build_model(&m, 3, 7, 7, 3, d, (int)(sizeof d / sizeof d[0]));
    net_ref_check(&m, 2400);
    model_free(&m);
}

// Permutes (how a Keras layer of the other data_format runs) through net.c's plans against the
// reference's definition: first in the network, after a conv's channels-last output with pad
// channels (converted to NCHW first), before a pool and a conv (converted back), the inverse
// after them, and one before a dense layer.
static void test_net_permute(void **state) {
    (void)state;
    const layer_spec a[] = {
        {.kind = LAYER_PERMUTE, .perm = {2, 3, 1}},                                // 7x5x3
        {.kind = LAYER_CONV2D, .filters = 6, .k = 3, .stride = 1, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f}, // 6x5x3
        {.kind = LAYER_RELU},
        {.kind = LAYER_PERMUTE, .perm = {2, 3, 1}},                                // 5x3x6
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2, .pad = -1},                   // 5x2x3
        {.kind = LAYER_PERMUTE, .perm = {3, 1, 2}},                                // 3x5x2
        {.kind = LAYER_CONV2D, .filters = 4, .k = 2, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f}, // 4x4x1
        {.kind = LAYER_PERMUTE, .perm = {3, 1, 2}},                                // 1x4x4
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    model m;
    build_model(&m, 3, 7, 5, 3, a, (int)(sizeof a / sizeof a[0]));
    assert_int_equal(m.layers[0].oc, 7);
    assert_int_equal(m.layers[0].oh, 5);
    assert_int_equal(m.layers[0].ow, 3);
    assert_int_equal(m.layers[5].oc, 3);
    assert_int_equal(m.layers[5].oh, 5);
    assert_int_equal(m.layers[5].ow, 2);
    net_ref_check(&m, 2500);
    model_free(&m);
}

// The act family through net.c's plans against the reference walker: every kind, in the
// per-sample trunk on channels-last tensors with pad channels (20 filters: a stride of 32),
// first in the network, after a pooling, before a dropout (which overwrites the activation's
// output in place: its backward must not need it), and batch-wise after dense layers.
static void test_net_activations(void **state) {
    (void)state;
    const layer_spec a[] = {
        {.kind = LAYER_TANH},                                                        // 1x8x8
        {.kind = LAYER_CONV2D, .filters = 20, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_SWISH},
        {.kind = LAYER_DROPOUT, .rate = 0.25f},
        {.kind = LAYER_MAXPOOL, .k = 2},                                             // 20x4x4
        {.kind = LAYER_GELU},
        {.kind = LAYER_RELU6, .alpha = 0.5f, .alpha_set = 1},
        {.kind = LAYER_CONV2D, .filters = 6, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_ELU, .alpha = 0.7f, .alpha_set = 1},
        {.kind = LAYER_HARD_SIGMOID},
        {.kind = LAYER_HARD_SWISH},
        {.kind = LAYER_AVGPOOL, .k = 2},                                             // 6x2x2
        {.kind = LAYER_SELU},
        {.kind = LAYER_DENSE, .units = 9, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SIGMOID},
        {.kind = LAYER_DROPOUT, .rate = 0.3f},
        {.kind = LAYER_DENSE, .units = 7, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_LEAKY_RELU, .alpha = 0.1f, .alpha_set = 1},
        {.kind = LAYER_SOFTPLUS},
        {.kind = LAYER_GELU, .alpha = 1, .alpha_set = 1},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DENSE, .units = 4, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    model m;
    build_model(&m, 1, 8, 8, 4, a, (int)(sizeof a / sizeof a[0]));
    int seen = 0;
    for (int l = 0; l < m.n_layers; l++)
        if (layer_act_fn(m.layers[l].kind) >= 0) seen |= 1 << layer_act_fn(m.layers[l].kind);
    assert_int_equal(seen, (1 << ACT_FN_COUNT) - 1); // every kind of the family
    net_ref_check(&m, 2500);
    model_free(&m);
}

// One SGD step of the 3-layer reference network on 64 Fashion-MNIST samples: on one CPU
// device, and split over two CPU devices with unequal weights.
static void run_step(const model *m, const dataset *ds, const char *devices, float *out,
                     float *grad) {
    ht_error e;
    float *p = malloc(sizeof(float) * m->n_params);
    model_init_params(m, p, 1);
    test_rig rig;
    test_rig_open(&rig, m, devices, NULL, p, 64, 1, 0);
    engine *g = rig.g;
    int n = rig.n;
    uint32_t idx[64];
    for (int i = 0; i < 64; i++) idx[i] = (uint32_t)(i * 7 % 200);
    step_stats st;
    if (engine_train_step(g, ds, idx, 64, 0, NULL, NULL, &st, &e) < 0) fail_msg("%s", e.msg);
    memcpy(out, engine_params(g), sizeof(float) * m->n_params);
    memcpy(grad, engine_grad(g), sizeof(float) * m->n_params);
    if (n == 2) assert_true(st.share[0] + st.share[1] == 64 && st.share[0] > st.share[1]);
    test_rig_close(&rig);
    free(p);
}

static void test_engine_two_devices_equal_one(void **state) {
    (void)state;
    model m;
    dataset ds;
    ht_error e;
    if (model_init_preset(&m, "cnn2d_3layer_fullconnected_3layer", &e) < 0) fail_msg("%s", e.msg);
    test_fashion_set(&ds, FASHION_TEST, 200);
    float *one = malloc(sizeof(float) * m.n_params), *two = malloc(sizeof(float) * m.n_params);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 1);
    float *g1 = malloc(sizeof(float) * m.n_params), *g2 = malloc(sizeof(float) * m.n_params);
    run_step(&m, &ds, "cpu:2", one, g1);
    run_step(&m, &ds, "cpu:1@3,cpu:1@1", two, g2);
    assert_true(check_step_grad(&m, g2, g1, "mean gradient, 1 device vs 2"));
    assert_true(check_updates(&m, two, one, init, TOL_GRAD_ROUNDING, TOL_GRAD_BRANCH,
                              "update of a step, 1 device vs 2"));
    // The step did change the weights.
    double moved = 0;
    for (size_t i = 0; i < m.n_params; i++) moved += fabs(one[i] - init[i]);
    assert_true(moved > 1e-3);
    free(one);
    free(two);
    free(g1);
    free(g2);
    free(init);
    dataset_free(&ds);
    model_free(&m);
}

// An engine restored from another's state (engine_get_state, engine_moments, parameters)
// continues exactly: its next steps give bit-identical parameters. For SGD with momentum and
// decay (cnn3) and Adam (cnn2), over two devices with unequal static capacities.
static void test_engine_restore_continues_exactly(void **state) {
    (void)state;
    const char *nets[] = {"cnn3", "cnn2"};
    dataset ds;
    ht_error e;
    test_fashion_set(&ds, FASHION_TEST, 400);
    enum { B = 32, BEFORE = 3, AFTER = 2 };
    for (int k = 0; k < 2; k++) {
        model m;
        if (model_init_preset(&m, nets[k], &e) < 0) fail_msg("%s", e.msg);
        m.setup.decay = 1e-3f; // so that the restored update count matters
        float *init = malloc(sizeof(float) * m.n_params);
        model_init_params(&m, init, 7);
        test_rig a, b;
        test_rig_open(&a, &m, "cpu:1@3,cpu:1@1", NULL, init, B, 7, 0);
        test_rig_open(&b, &m, "cpu:1@3,cpu:1@1", NULL, init, B, 7, 0);
        uint32_t idx[B];
        for (int s = 0; s < BEFORE + AFTER; s++) {
            for (int i = 0; i < B; i++) idx[i] = (uint32_t)((s * B + i * 11) % ds.n);
            if (s == BEFORE) { // b takes a's state; both go on from here
                engine_state st;
                const float *mm, *vv;
                engine_get_state(a.g, &st);
                engine_moments(a.g, &mm, &vv);
                assert_int_equal(st.step, BEFORE);
                assert_int_equal(st.optim_t, BEFORE);
                if (engine_restore(b.g, &st, engine_params(a.g), mm, vv, &e) < 0) fail_msg("%s", e.msg);
            }
            if (engine_train_step(a.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0) fail_msg("%s", e.msg);
            if (s >= BEFORE && engine_train_step(b.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0)
                fail_msg("%s", e.msg);
        }
        assert_memory_equal(engine_params(a.g), engine_params(b.g), sizeof(float) * m.n_params);
        // Without the moments and the update count the same steps end elsewhere.
        test_rig c;
        test_rig_open(&c, &m, "cpu:1@3,cpu:1@1", NULL, init, B, 7, 0);
        test_rig_close(&a);
        test_rig_open(&a, &m, "cpu:1@3,cpu:1@1", NULL, init, B, 7, 0);
        for (int s = 0; s < BEFORE + AFTER; s++) {
            for (int i = 0; i < B; i++) idx[i] = (uint32_t)((s * B + i * 11) % ds.n);
            if (s == BEFORE && engine_set_params(c.g, engine_params(a.g), &e) < 0) fail_msg("%s", e.msg);
            if (engine_train_step(a.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0) fail_msg("%s", e.msg);
            if (s >= BEFORE && engine_train_step(c.g, &ds, idx, B, 0, NULL, NULL, NULL, &e) < 0)
                fail_msg("%s", e.msg);
        }
        assert_memory_not_equal(engine_params(a.g), engine_params(c.g), sizeof(float) * m.n_params);
        test_rig_close(&a);
        test_rig_close(&b);
        test_rig_close(&c);
        free(init);
        model_free(&m);
    }
    dataset_free(&ds);
}

// A frozen prefix (conv1 and conv2 of cnn3-like layers frozen): the backward stops at the first
// trainable layer, which computes no input gradient. The trainable layers' gradients are the
// bits of the same pass with nothing frozen, and the frozen ones come back as zeros.
static void test_frozen_prefix_backward(void **state) {
    (void)state;
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_CONV2D, .filters = 6, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_CONV2D, .filters = 5, .k = 3, .pad = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DENSE, .units = 7, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DENSE, .units = 5, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    enum { B = 6 };
    for (int upto = 2; upto <= 5; upto += 3) { // frozen: conv1 (in the trunk); conv1..conv3
        model m;
        build_model(&m, 1, 8, 8, 5, s, (int)(sizeof s / sizeof s[0]));
        const size_t in = (size_t)m.in_c * m.in_h * m.in_w;
        float *p = malloc(sizeof(float) * m.n_params), *x = malloc(sizeof(float) * B * in);
        float *g_all = malloc(sizeof(float) * m.n_params), *g_fr = malloc(sizeof(float) * m.n_params);
        random_fill(x, B * in, 3, 0, 1);
        model_init_params(&m, p, 8);
        uint8_t y[B] = {0, 1, 2, 3, 4, 0};
        uint32_t ids[B] = {0, 1, 2, 3, 4, 5};
        net_dropout d = {.seed = 1, .ids = ids};
        net_ws ws;
        ht_error e;
        assert_int_equal(net_ws_init(&ws, &m, B, 1, &e), 0);
        net_forward(&ws, &m, p, x, y, B, &d);
        net_backward_to(&ws, &m, p, g_all, x, y, B, &d, NET_GRAD_WRITE);
        // The workspace's schedule says which backwards run: made again for the frozen model.
        net_ws_free(&ws);
        for (int l = 0; l <= upto; l++) m.layers[l].frozen = 1;
        assert_int_equal(net_ws_init(&ws, &m, B, 1, &e), 0);
        assert_int_equal(ws.sched.reach, upto == 2 ? 5 : 7); // conv3, fc1
        for (size_t i = 0; i < m.n_params; i++) g_fr[i] = 1.0f; // the pass must overwrite
        net_forward(&ws, &m, p, x, y, B, &d);
        net_backward_to(&ws, &m, p, g_fr, x, y, B, &d, NET_GRAD_WRITE);
        for (int l = 0; l < m.n_layers; l++) {
            const layer *L = &m.layers[l];
            for (size_t i = 0; i < L->n_w + L->n_b; i++) {
                size_t k = L->w_off + i;
                if (L->frozen) assert_float_equal(g_fr[k], 0.0f, 0);
                else assert_memory_equal(&g_fr[k], &g_all[k], sizeof(float));
            }
        }
        net_ws_free(&ws);
        free(p), free(x), free(g_all), free(g_fr);
        model_free(&m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_restore_continues_exactly),
        cmocka_unit_test(test_network_finite_differences),
        cmocka_unit_test(test_batch_composition_invariance),
        cmocka_unit_test(test_backward_overwrites),
        cmocka_unit_test(test_net_layouts),
        cmocka_unit_test(test_relu_dropout_fold_same_bits),
        cmocka_unit_test(test_net_new_kinds),
        cmocka_unit_test(test_net_permute),
        cmocka_unit_test(test_net_activations),
        cmocka_unit_test(test_engine_two_devices_equal_one),
        cmocka_unit_test(test_frozen_prefix_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
