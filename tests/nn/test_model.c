// Model building, the two presets, initialisers, shapes and parameter counts of every layer
// option, the summary and the tensor table. Config files: test_config.c.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"
#include "tests/lib/testutil.h"
#include "tests/lib/model_expect.h"

// Relative tolerance on the empirical std of a uniform or truncated-normal tensor with n of a
// few thousand samples or more (the std of a sample std is about std/sqrt(2n), ~1% at n=5000).
#define STD_RTOL 0.05
// Absolute tolerance on the mean, in units of the distribution's std.
#define MEAN_TOL_STD 0.05
// std of N(0, s) truncated at +-2s, divided by s.
#define TRUNC2_STD_FACTOR 0.879596

static const expect_layer cnn3_expect[] = {
    {LAYER_CONV2D, "conv1", 32, 28, 28, 32 * 9 + 32},
    {LAYER_RELU, "relu1", 32, 28, 28, 0},
    {LAYER_CONV2D, "conv2", 48, 28, 28, 48 * 32 * 9 + 48},
    {LAYER_RELU, "relu2", 48, 28, 28, 0},
    {LAYER_MAXPOOL, "pool1", 48, 14, 14, 0},
    {LAYER_CONV2D, "conv3", 32, 14, 14, 32 * 48 * 9 + 32},
    {LAYER_RELU, "relu3", 32, 14, 14, 0},
    {LAYER_MAXPOOL, "pool2", 32, 7, 7, 0},
    {LAYER_DENSE, "fc1", 128, 1, 1, 1568 * 128 + 128},
    {LAYER_RELU, "relu4", 128, 1, 1, 0},
    {LAYER_DROPOUT, "drop1", 128, 1, 1, 0},
    {LAYER_DENSE, "fc2", 128, 1, 1, 128 * 128 + 128},
    {LAYER_RELU, "relu5", 128, 1, 1, 0},
    {LAYER_DROPOUT, "drop2", 128, 1, 1, 0},
    {LAYER_DENSE, "fc3", 10, 1, 1, 128 * 10 + 10},
    {LAYER_SOFTMAX_XENT, "softmax", 10, 1, 1, 0},
};
static const expect_layer cnn2_expect[] = {
    {LAYER_CONV2D, "conv1", 32, 28, 28, 32 * 25 + 32},
    {LAYER_RELU, "relu1", 32, 28, 28, 0},
    {LAYER_MAXPOOL, "pool1", 32, 14, 14, 0},
    {LAYER_CONV2D, "conv2", 64, 14, 14, 64 * 32 * 25 + 64},
    {LAYER_RELU, "relu2", 64, 14, 14, 0},
    {LAYER_MAXPOOL, "pool2", 64, 7, 7, 0},
    {LAYER_DENSE, "fc1", 1024, 1, 1, 3136 * 1024 + 1024},
    {LAYER_RELU, "relu3", 1024, 1, 1, 0},
    {LAYER_DROPOUT, "drop1", 1024, 1, 1, 0},
    {LAYER_DENSE, "fc2", 10, 1, 1, 1024 * 10 + 10},
    {LAYER_SOFTMAX_XENT, "softmax", 10, 1, 1, 0},
};

// Hand totals: 320 + 13872 + 13856 + 200832 + 16512 + 1290 and 832 + 51264 + 3212288 + 10250.
#define CNN3_PARAMS 246682
#define CNN2_PARAMS 3274634
// 225792 + 10838016 + 2709504 + 200704 + 16384 + 1280; 627200 + 10035200 + 3211264 + 10240.
#define CNN3_MACS 13991680.0
#define CNN2_MACS 13883904.0

static void test_preset_cnn3(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init_preset(&m, "cnn2d_3layer_fullconnected_3layer", &err), 0);
    assert_string_equal(m.name, "cnn2d_3layer_fullconnected_3layer");
    assert_true(m.in_c == 1 && m.in_h == 28 && m.in_w == 28 && m.n_classes == 10);
    check_layers(&m, cnn3_expect, N_OF(cnn3_expect));
    assert_int_equal(m.n_params, CNN3_PARAMS);
    assert_true(model_forward_macs(&m) == CNN3_MACS);
    const layer *c1 = &m.layers[0], *c2 = &m.layers[2];
    assert_true(c1->k == 3 && c1->pad == 1 && c1->stride == 1 && c2->c == 32);
    assert_int_equal(m.layers[4].k, 2);
    assert_int_equal(m.layers[4].stride, 2);
    assert_true(m.layers[10].rate == 0.25f && m.layers[13].rate == 0.25f);
    assert_int_equal(m.layers[8].c, 1568);
    assert_int_equal(c1->w_init, INIT_GLOROT_UNIFORM);
    assert_int_equal(m.layers[8].w_init, INIT_LECUN_UNIFORM);
    assert_int_equal(m.layers[14].b_init, INIT_ZEROS);
    const train_setup *s = &m.setup;
    assert_int_equal(s->optim, OPTIM_SGD);
    assert_true(s->lr == 0.05f && s->momentum == 0.9f && s->nesterov == 1 && s->decay == 1e-6f);
    assert_true(s->batch == 1000 && s->epochs == 10 && s->val_split == 0.2f);
    assert_int_equal(s->conv_algo, MODEL_DEFAULT_CONV_ALGO);
    assert_int_equal(model_find_layer(&m, "fc2"), 11);
    assert_int_equal(model_find_layer(&m, "fc4"), -1);
    model_free(&m);

    assert_int_equal(model_init(&m, "cnn3", &err), 0); // alias
    assert_string_equal(m.name, "cnn2d_3layer_fullconnected_3layer");
    assert_int_equal(m.n_params, CNN3_PARAMS);
    model_free(&m);
}

// Per-layer multiply-adds of the 3-layer network (the terms of CNN3_MACS, as `hetrain summary`
// prints them): backward is the weight gradient plus the input gradient, but for layer 0 only
// the weight gradient.
static void test_layer_macs(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn3", &err), 0);
    static const struct {
        int l;
        double fwd;
    } want[] = {{0, 225792}, {2, 10838016}, {5, 2709504}, {8, 200704}, {11, 16384}, {14, 1280}};
    double sum = 0;
    for (int l = 0; l < m.n_layers; l++) {
        double fwd = 0;
        for (int k = 0; k < N_OF(want); k++)
            if (want[k].l == l) fwd = want[k].fwd;
        assert_true(model_layer_macs(&m, l, 0) == fwd);
        assert_true(model_layer_macs(&m, l, 1) == (l == 0 ? fwd : 2 * fwd));
        sum += model_layer_macs(&m, l, 0);
    }
    assert_true(sum == CNN3_MACS);
    assert_string_equal(model_kind_name(m.layers[0].kind), "conv");
    assert_string_equal(model_kind_name(m.layers[15].kind), "softmax");
    model_free(&m);
}

static void test_preset_cnn2(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn2d_2layer_full_connected_2layer", &err), 0);
    check_layers(&m, cnn2_expect, N_OF(cnn2_expect));
    assert_int_equal(m.n_params, CNN2_PARAMS);
    assert_true(model_forward_macs(&m) == CNN2_MACS);
    assert_true(m.layers[0].k == 5 && m.layers[0].pad == 2 && m.layers[3].pad == 2);
    assert_true(m.layers[8].rate == 0.5f);
    for (int i = 0; i < m.n_layers; i++) {
        const layer *L = &m.layers[i];
        if (!L->n_w) continue;
        assert_true(L->w_init == INIT_TRUNCATED_NORMAL && L->w_arg == 0.1f);
        assert_true(L->b_init == INIT_CONSTANT && L->b_arg == 0.1f);
    }
    const train_setup *s = &m.setup;
    assert_int_equal(s->optim, OPTIM_ADAM);
    assert_true(s->lr == 5e-4f && s->beta1 == 0.9f && s->beta2 == 0.999f && s->eps == 1e-8f);
    assert_true(s->decay == 0 && s->batch == 50 && s->epochs == 10 && s->val_split == 0.2f);
    model_free(&m);

    assert_int_equal(model_init_preset(&m, "cnn2", &err), 0);
    assert_int_equal(m.n_params, CNN2_PARAMS);
    model_free(&m);

    // Every listed preset builds.
    int n = 0;
    for (const char *const *p = model_preset_names; *p; p++, n++) {
        assert_int_equal(model_init_preset(&m, *p, &err), 0);
        assert_string_equal(m.name, *p);
        model_free(&m);
    }
    assert_int_equal(n, 2);
}

static void test_unknown_and_free(void **state) {
    (void)state;
    model m;
    memset(&m, 0, sizeof m);
    model_free(&m); // zeroed struct
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn7", &err), -1);
    assert_non_null(strstr(err.msg, "unknown model \"cnn7\""));
    assert_non_null(strstr(err.msg, "cnn2d_3layer_fullconnected_3layer (cnn3)"));
    assert_non_null(strstr(err.msg, "cnn2d_2layer_full_connected_2layer (cnn2)"));
    assert_null(m.layers);
    model_free(&m); // after a failed init
    model_free(&m);
}

// ---- initialisers ----------------------------------------------------------------------------

typedef struct stats {
    double mean, std, maxabs;
} stats;

static stats tensor_stats(const float *p, size_t n) {
    double s = 0, s2 = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        s += p[i];
        s2 += (double)p[i] * p[i];
        if (fabs(p[i]) > mx) mx = fabs(p[i]);
    }
    stats st = {s / n, 0, mx};
    st.std = sqrt(s2 / n - st.mean * st.mean);
    return st;
}

// Uniform on (-limit, limit): std limit/sqrt(3), no value beyond the limit, some near it.
static void check_uniform(const float *p, size_t n, double limit, const char *what) {
    stats st = tensor_stats(p, n);
    double want_std = limit / sqrt(3.0);
    if (st.maxabs > limit || st.maxabs < 0.99 * limit ||
        fabs(st.std - want_std) > STD_RTOL * want_std || fabs(st.mean) > MEAN_TOL_STD * want_std)
        fail_msg("%s: n %zu mean %g std %g (want %g) max|x| %g (limit %g)", what, n, st.mean,
                 st.std, want_std, st.maxabs, limit);
}

static void test_init_keras(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn3", &err), 0);
    float *p = malloc(m.n_params * sizeof *p);
    model_init_params(&m, p, 42);
    const layer *conv2 = &m.layers[2], *fc1 = &m.layers[8];
    // glorot: fan_in = 32*3*3, fan_out = 48*3*3
    check_uniform(p + conv2->w_off, conv2->n_w, sqrt(6.0 / (32 * 9 + 48 * 9)), "conv2.weight");
    // lecun: fan_in = 1568
    check_uniform(p + fc1->w_off, fc1->n_w, sqrt(3.0 / 1568), "fc1.weight");
    for (int i = 0; i < m.n_layers; i++) {
        const layer *L = &m.layers[i];
        for (size_t j = 0; j < L->n_b; j++) assert_true(p[L->b_off + j] == 0.0f);
    }
    free(p);
    model_free(&m);
}

static void test_init_truncated_normal(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn2", &err), 0);
    float *p = malloc(m.n_params * sizeof *p);
    model_init_params(&m, p, 7);
    for (int i = 0; i < m.n_layers; i++) {
        const layer *L = &m.layers[i];
        if (!L->n_w) continue;
        stats st = tensor_stats(p + L->w_off, L->n_w);
        assert_true(st.maxabs <= 2 * 0.1f); // never beyond 2 stddev
        for (size_t j = 0; j < L->n_b; j++) assert_true(p[L->b_off + j] == 0.1f);
        if (L->n_w < 5000) continue; // too few samples for the moment checks
        double want = 0.1 * TRUNC2_STD_FACTOR;
        if (fabs(st.std - want) > STD_RTOL * want || fabs(st.mean) > MEAN_TOL_STD * want ||
            st.maxabs < 0.19)
            fail_msg("%s.weight: mean %g std %g (want %g) max|x| %g", L->name, st.mean, st.std,
                     want, st.maxabs);
    }
    free(p);
    model_free(&m);
}

static void test_init_deterministic(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn3", &err), 0);
    size_t n = m.n_params;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    model_init_params(&m, a, 123);
    model_init_params(&m, b, 123);
    assert_memory_equal(a, b, n * sizeof *a);
    model_init_params(&m, b, 124);
    size_t same = 0, nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        same += a[i] == b[i] && a[i] != 0;
        nonzero += a[i] != 0;
    }
    assert_true(nonzero > n / 2);
    assert_true(same < n / 1000);

    // A layer's draws depend on its index only: widening fc1 leaves the convs unchanged.
    model w;
    assert_int_equal(model_begin(&w, "wide", 1, 28, 28, 10, &err), 0);
    for (int i = 0; i < 8; i++) {
        layer_spec s = {.kind = m.layers[i].kind, .filters = m.layers[i].oc,
                        .k = m.layers[i].k, .pad = m.layers[i].pad,
                        .w_init = m.layers[i].w_init};
        assert_int_equal(model_add(&w, &s, &err), 0);
    }
    layer_spec fc = {.kind = LAYER_DENSE, .units = 10, .w_init = INIT_LECUN_UNIFORM};
    layer_spec sm = {.kind = LAYER_SOFTMAX_XENT};
    assert_int_equal(model_add(&w, &fc, &err), 0);
    assert_int_equal(model_add(&w, &sm, &err), 0);
    assert_int_equal(model_finish(&w, &err), 0);
    float *c = malloc(w.n_params * sizeof *c);
    model_init_params(&w, c, 123);
    size_t conv_end = m.layers[5].b_off + m.layers[5].n_b;
    assert_int_equal(w.layers[5].b_off + w.layers[5].n_b, conv_end);
    assert_true(w.n_params < m.n_params);
    assert_memory_equal(a, c, conv_end * sizeof *a);
    free(a);
    free(b);
    free(c);
    model_free(&w);
    model_free(&m);
}

// ---- building errors -------------------------------------------------------------------------

static void expect_add_error(model *m, const layer_spec *s, const char *fragment) {
    ht_error err = {{0}};
    int n = m->n_layers;
    assert_int_equal(model_add(m, s, &err), -1);
    if (!strstr(err.msg, fragment)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, fragment);
    assert_int_equal(m->n_layers, n);
}

static void test_model_add_errors(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_begin(&m, "t", 1, 6, 6, 4, &err), 0);
    expect_add_error(&m, &(layer_spec){.kind = LAYER_CONV2D, .filters = 0, .k = 3},
                     "layer 0 (conv): filters 0: expected 1..65536");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_CONV2D, .filters = 4, .k = 65},
                     "kernel size 65: expected 1..64");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_CONV2D, .filters = 4, .k = 7},
                     "kernel 7 does not fit input 6x6");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_MAXPOOL, .k = 2, .pad = 1},
                     "layer 0 (maxpool): pad 1: pooling pads 0 (valid) or \"same\"");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_AVGPOOL, .k = 7},
                     "layer 0 (avgpool): window 7 does not fit input 6x6");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_RELU, .no_bias = 1},
                     "layer 0 (relu): only conv and dense layers have a bias to leave out");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_DENSE, .units = 70000},
                     "units 70000: expected 1..65536");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_DENSE, .units = 4,
                                       .w_init = INIT_TRUNCATED_NORMAL},
                     "truncated_normal needs a stddev > 0");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_DROPOUT, .rate = 1.0f},
                     "rate 1: expected 0 <= rate < 1");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_RELU, .name = "a.b"}, "name \"a.b\"");
    expect_add_error(&m, &(layer_spec){.kind = LAYER_SOFTMAX_XENT},
                     "input has 36 features (1x6x6), expected the 4 classes");
    assert_int_equal(model_finish(&m, &err), -1);
    assert_non_null(strstr(err.msg, "has no layers"));

    assert_int_equal(model_add(&m, &(layer_spec){.kind = LAYER_RELU, .name = "x"}, &err), 0);
    expect_add_error(&m, &(layer_spec){.kind = LAYER_RELU, .name = "x"},
                     "layer 1 (relu): name \"x\" is already used by layer 0");
    assert_int_equal(model_add(&m, &(layer_spec){.kind = LAYER_MAXPOOL, .k = 3}, &err), 0);
    assert_true(m.layers[1].oh == 2 && m.layers[1].stride == 3);
    assert_int_equal(model_finish(&m, &err), -1);
    assert_non_null(strstr(err.msg, "layer 1 (maxpool): the model must end with softmax"));
    model_free(&m);

    assert_int_equal(model_begin(&m, "t", 1, 6, 6, 1, &err), -1);
    assert_non_null(strstr(err.msg, "classes 1: expected 2..256"));
    assert_int_equal(model_begin(&m, "t", 0, 6, 6, 10, &err), -1);
    assert_non_null(strstr(err.msg, "input 0x6x6"));
    model_free(&m);
}

// ---- average pooling, global average pooling, no bias, "same" padding for any stride -----

// Keras's arithmetic, written out here independently of layers.h: "same" gives ceil(in/s)
// outputs and pads max((out-1)*s + k - in, 0) in all, half of it (rounded down) before.
static int keras_same_out(int in, int s) { return (int)ceil((double)in / s); }
static int keras_same_before(int in, int k, int s) {
    int total = (keras_same_out(in, s) - 1) * s + k - in;
    return total > 0 ? total / 2 : 0;
}

static void test_same_padding_any_stride(void **state) {
    (void)state;
    // Odd and even sizes, strides 1..3, kernels 1..5, conv and both poolings.
    static const layer_kind kinds[] = {LAYER_CONV2D, LAYER_MAXPOOL, LAYER_AVGPOOL};
    for (int in = 5; in <= 8; in++)
        for (int st = 1; st <= 3; st++)
            for (int k = 1; k <= 5; k++)
                for (int ki = 0; ki < 3; ki++) {
                    model m;
                    ht_error err = {{0}};
                    assert_int_equal(model_begin(&m, "t", 2, in, in, 4, &err), 0);
                    layer_spec s = {.kind = kinds[ki], .filters = 3, .k = k, .stride = st,
                                    .pad = -1, .w_init = INIT_ZEROS};
                    if (model_add(&m, &s, &err))
                        fail_msg("in %d k %d s %d: %s", in, k, st, err.msg);
                    const layer *L = &m.layers[0];
                    assert_int_equal(L->oh, keras_same_out(in, st));
                    assert_int_equal(L->ow, keras_same_out(in, st));
                    assert_int_equal(L->pad, keras_same_before(in, k, st));
                    assert_int_equal(L->stride, st);
                    model_free(&m);
                }
}

// A CIFAR-shaped network with every new option: shapes, parameter counts as Keras counts
// them (a Conv2D has k*k*C*F weights plus F biases when use_bias), the tensor table without
// the left-out biases, and model_layer_macs.
static void test_new_kinds(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_begin(&m, "cifar", 3, 32, 32, 10, &err), 0);
    const layer_spec specs[] = {
        {.kind = LAYER_CONV2D, .filters = 16, .k = 3, .stride = 2, .pad = -1, .no_bias = 1,
         .w_init = INIT_GLOROT_UNIFORM},                                         // 16x16x16
        {.kind = LAYER_RELU},
        {.kind = LAYER_CONV2D, .filters = 32, .k = 3, .stride = 2, .pad = -1,
         .w_init = INIT_GLOROT_UNIFORM},                                         // 32x8x8
        {.kind = LAYER_AVGPOOL, .k = 3, .stride = 2, .pad = -1},                 // 32x4x4
        {.kind = LAYER_CONV2D, .filters = 24, .k = 2, .stride = 1, .pad = -1,
         .w_init = INIT_GLOROT_UNIFORM},                                         // 24x4x4
        {.kind = LAYER_MAXPOOL, .k = 3, .stride = 3, .pad = -1},                 // 24x2x2
        {.kind = LAYER_AVGPOOL, .k = 2},                                         // 24x1x1
        {.kind = LAYER_GLOBAL_AVGPOOL},                                          // 24x1x1
        {.kind = LAYER_DENSE, .units = 10, .no_bias = 1, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (model_add(&m, &specs[i], &err)) fail_msg("layer %zu: %s", i, err.msg);
    assert_int_equal(model_finish(&m, &err), 0);
    static const int want[][3] = {{16, 16, 16}, {16, 16, 16}, {32, 8, 8}, {32, 4, 4},
                                  {24, 4, 4},   {24, 2, 2},   {24, 1, 1}, {24, 1, 1},
                                  {10, 1, 1},   {10, 1, 1}};
    for (int l = 0; l < m.n_layers; l++) {
        assert_int_equal(m.layers[l].oc, want[l][0]);
        assert_int_equal(m.layers[l].oh, want[l][1]);
        assert_int_equal(m.layers[l].ow, want[l][2]);
    }
    assert_string_equal(m.layers[3].name, "avgpool1");
    assert_string_equal(m.layers[7].name, "gap1");
    assert_string_equal(model_kind_name(LAYER_AVGPOOL), "avgpool");
    assert_string_equal(model_kind_name(LAYER_GLOBAL_AVGPOOL), "globalavgpool");
    // Keras: conv1 3*3*3*16 (no bias), conv2 3*3*16*32 + 32, conv3 2*2*32*24 + 24, dense
    // 24*10 (no bias).
    const size_t keras = 432 + (4608 + 32) + (3072 + 24) + 240;
    assert_int_equal(m.n_params, keras);
    assert_int_equal(m.layers[0].n_b, 0);
    assert_true(m.layers[0].b_off == LAYER_NO_PARAM);
    const model_tensor *t;
    assert_int_equal(model_tensors(&m, &t), 6);
    assert_string_equal(t[0].name, "conv1.weight");
    assert_string_equal(t[1].name, "conv2.weight");
    assert_string_equal(t[2].name, "conv2.bias");
    assert_string_equal(t[4].name, "conv3.bias");
    assert_string_equal(t[5].name, "fc1.weight");
    assert_int_equal(model_output_tensors(&m, &t), 1);
    assert_string_equal(t[0].name, "fc1.weight");
    // Pooling costs no multiply-adds; conv1's output grid is 16x16.
    assert_true(model_layer_macs(&m, 0, 0) == 16.0 * 16 * 16 * 27);
    assert_true(model_layer_macs(&m, 3, 0) == 0 && model_layer_macs(&m, 7, 1) == 0);
    // Initialisation leaves nothing out and touches nothing past the end.
    float *p = malloc(m.n_params * sizeof *p);
    model_init_params(&m, p, 7);
    size_t nonzero = 0;
    for (size_t i = 0; i < m.n_params; i++) nonzero += p[i] != 0;
    assert_true(nonzero >= m.n_params - 56); // all but the two zero-initialised biases
    free(p);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    model_print_summary(&m, f);
    fclose(f);
    assert_non_null(strstr(buf, "avgpool1 (avgpool)"));
    assert_non_null(strstr(buf, "gap1 (globalavgpool)"));
    assert_non_null(strstr(buf, "Total params: 8,408"));
    free(buf);
    model_free(&m);

    // The example config models/cifar_small.cfg parses to the same kinds.
    assert_int_equal(model_init_config(&m, HT_SOURCE_DIR "/models/cifar_small.cfg", &err), 0);
    assert_int_equal(m.in_c, 3);
    int kinds[LAYER_GLOBAL_AVGPOOL + 1] = {0};
    for (int l = 0; l < m.n_layers; l++) kinds[m.layers[l].kind]++;
    assert_true(kinds[LAYER_AVGPOOL] >= 1 && kinds[LAYER_GLOBAL_AVGPOOL] == 1);
    assert_true(m.layers[0].stride == 2 || m.layers[1].stride == 2 || m.layers[2].stride == 2);
    model_free(&m);
}

static void test_summary(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn2", &err), 0);
    FILE *f = tmpfile();
    assert_non_null(f);
    model_print_summary(&m, f);
    long n = ftell(f);
    assert_true(n > 0);
    char *buf = calloc((size_t)n + 1, 1);
    rewind(f);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_non_null(strstr(buf, "Total params: 3,274,634"));
    assert_non_null(strstr(buf, "fc1 (dense)"));
    assert_non_null(strstr(buf, "(64, 7, 7)"));
    assert_non_null(strstr(buf, "3,212,288"));
    assert_non_null(strstr(buf, "13.88 M"));
    free(buf);
    model_free(&m);
}

// The tensor table: names and PyTorch shapes in parameter order, tiling params; the output
// layer's tensors; the tensor of a flat index.
static void test_tensor_table(void **state) {
    (void)state;
    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init(&m, "cnn3", &err), 0);
    const model_tensor *t;
    int n = model_tensors(&m, &t);
    static const struct {
        const char *name;
        int ndim;
        uint64_t shape[4];
    } want[] = {
        {"conv1.weight", 4, {32, 1, 3, 3}}, {"conv1.bias", 1, {32}},
        {"conv2.weight", 4, {48, 32, 3, 3}}, {"conv2.bias", 1, {48}},
        {"conv3.weight", 4, {32, 48, 3, 3}}, {"conv3.bias", 1, {32}},
        {"fc1.weight", 2, {128, 1568}}, {"fc1.bias", 1, {128}},
        {"fc2.weight", 2, {128, 128}}, {"fc2.bias", 1, {128}},
        {"fc3.weight", 2, {10, 128}}, {"fc3.bias", 1, {10}},
    };
    assert_int_equal(n, N_OF(want));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        assert_string_equal(t[i].name, want[i].name);
        assert_int_equal(t[i].ndim, want[i].ndim);
        size_t prod = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            assert_int_equal(t[i].shape[d], want[i].shape[d]);
            prod *= t[i].shape[d];
        }
        const layer *L = &m.layers[t[i].layer];
        assert_int_equal(t[i].off, t[i].bias ? L->b_off : L->w_off);
        assert_int_equal(t[i].n, prod);
        assert_int_equal(t[i].off, off);
        assert_int_equal(t[i].output, i >= 10);
        off += t[i].n;
    }
    assert_int_equal(off, m.n_params);

    const model_tensor *o;
    assert_int_equal(model_output_tensors(&m, &o), 2);
    assert_ptr_equal(o, &t[10]);
    assert_ptr_equal(model_tensor_at(&m, 0), &t[0]);
    assert_ptr_equal(model_tensor_at(&m, t[3].off - 1), &t[2]);
    assert_ptr_equal(model_tensor_at(&m, t[3].off), &t[3]);
    assert_ptr_equal(model_tensor_at(&m, m.n_params - 1), &t[11]);
    assert_null(model_tensor_at(&m, m.n_params));
    model_free(&m);
    assert_int_equal(model_tensors(&m, &t), 0);
    assert_null(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_cnn3),
        cmocka_unit_test(test_preset_cnn2),
        cmocka_unit_test(test_layer_macs),
        cmocka_unit_test(test_unknown_and_free),
        cmocka_unit_test(test_init_keras),
        cmocka_unit_test(test_init_truncated_normal),
        cmocka_unit_test(test_init_deterministic),
        cmocka_unit_test(test_model_add_errors),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_tensor_table),
        cmocka_unit_test(test_same_padding_any_stride),
        cmocka_unit_test(test_new_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
