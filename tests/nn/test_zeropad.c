// The zeropad family (Keras's ZeroPadding2D): the reference's gradient by finite differences,
// the CPU path (channels-last, in and after the trunk) against the reference, its config keys
// and its Keras reading, with their errors.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/keras.h"
#include "nn/model.h"
#include "nn/net.h"
#include "tests/lib/fd.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

// As test_net.c's: net.c against the reference walker, float rounding only.
#define TOL_NET_REF 1e-5f

static void build(model *m, int c, int h, int w, int classes, const layer_spec *s, int n) {
    ht_error e;
    assert_int_equal(model_begin(m, "zeropad", c, h, w, classes, &e), 0);
    for (int i = 0; i < n; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %d: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
}

// ---- the reference by finite differences ----

typedef struct fd_ctx {
    const model *m;
    ref_net r;
    float *p, *x;
    uint8_t y[2];
} fd_ctx;

static double fd_loss(void *arg) {
    fd_ctx *c = arg;
    ref_forward(&c->r, c->m, c->p, c->x, c->y, 2, NULL);
    return (double)c->r.loss[0] + c->r.loss[1];
}

// Zero padding first (so the reference's input gradient is its backward's) and after a conv:
// the input's and the conv's weight gradients against central differences of the loss.
static void test_zeropad_ref_fd(void **state) {
    (void)state;
    const layer_spec s[] = {
        {.kind = LAYER_ZEROPAD, .pad_top = 1, .pad_bottom = 2, .pad_left = 0, .pad_right = 3},
        {.kind = LAYER_CONV2D, .filters = 3, .k = 3, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_ZEROPAD, .pad_top = 2, .pad_bottom = 0, .pad_left = 1, .pad_right = 1},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    model m;
    build(&m, 2, 4, 3, 3, s, (int)(sizeof s / sizeof s[0]));
    assert_int_equal(m.layers[0].oh, 7); // 4 + 1 + 2
    assert_int_equal(m.layers[0].ow, 6); // 3 + 0 + 3
    assert_int_equal(m.layers[2].oh, 7); // 5 + 2 + 0
    assert_int_equal(m.layers[2].ow, 6); // 4 + 1 + 1
    fd_ctx c = {.m = &m, .y = {1, 2}};
    const size_t in = 2 * 4 * 3;
    c.x = fill_away_from_zero(2 * in, 77);
    c.p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, c.p, 78);
    ref_net_init(&c.r, &m, 2);
    float *g = calloc(m.n_params, sizeof(float));
    ref_forward(&c.r, &m, c.p, c.x, c.y, 2, NULL);
    ref_backward(&c.r, &m, c.p, g, c.x, c.y, 2, NULL);
    float *dx = malloc(sizeof(float) * 2 * in);
    memcpy(dx, c.r.dinput[0], sizeof(float) * 2 * in);
    float *num = malloc(sizeof(float) * (2 * in > m.n_params ? 2 * in : m.n_params));
    fd_grad(num, c.x, 2 * in, fd_loss, &c);
    expect_grad(dx, num, 2 * in, TOL_CONV_FD, "zeropad input gradient");
    const layer *conv = &m.layers[1];
    fd_grad(num, c.p + conv->w_off, conv->n_w, fd_loss, &c);
    expect_grad(g + conv->w_off, num, conv->n_w, TOL_CONV_FD, "conv weight through zeropad");
    ref_net_free(&c.r);
    free(c.x), free(c.p), free(g), free(dx), free(num);
    model_free(&m);
}

// ---- the CPU path against the reference ----

// net.c's forward and backward (two threads, and the batch in two calls) against the
// reference walker.
static void net_vs_ref(const model *m, uint64_t seed) {
    enum { B = 3 };
    const size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    float *p = malloc(sizeof(float) * m->n_params), *gr = calloc(m->n_params, sizeof(float));
    float *g = calloc(m->n_params, sizeof(float)), *gp = calloc(m->n_params, sizeof(float));
    float *x = fill_uniform(B * in, 0, 1, seed);
    uint8_t y[B] = {0, 1, 2};
    model_init_params(m, p, seed + 1);
    ref_net r;
    ref_net_init(&r, m, B);
    const float *rp = ref_forward(&r, m, p, x, y, B, NULL);
    float *probs = malloc(sizeof(float) * B * m->n_classes);
    memcpy(probs, rp, sizeof(float) * B * m->n_classes);
    ref_backward(&r, m, p, gr, x, y, B, NULL);
    net_ws ws;
    ht_error e;
    assert_int_equal(net_ws_init(&ws, m, B, 2, &e), 0);
    const float *np = net_forward(&ws, m, p, x, y, B, NULL);
    assert_true(check_tensor(np, probs, B * (size_t)m->n_classes, TOL_NET_REF, 1e-3f,
                             "zeropad network probabilities"));
    net_backward(&ws, m, p, g, x, y, B, NULL);
    for (int off = 0; off < B; off += 2) {
        int n = B - off < 2 ? B - off : 2;
        net_forward(&ws, m, p, x + off * in, y + off, n, NULL);
        net_backward(&ws, m, p, gp, x + off * in, y + off, n, NULL);
    }
    double norm = 0;
    for (size_t i = 0; i < m->n_params; i++) norm += fabs(gr[i]);
    assert_true(norm > 1e-3);
    assert_true(check_params(m, g, gr, TOL_NET_REF, "zeropad network vs NCHW reference"));
    assert_true(check_params(m, gp, gr, TOL_NET_REF, "zeropad network, parts vs reference"));
    net_ws_free(&ws);
    ref_net_free(&r);
    free(p), free(gr), free(g), free(gp), free(x), free(probs);
}

// Zero padding in the trunk (between convolutions with pad channels: 5 filters are stored as
// 8), at its end before a pool, first in the network, and after a dense layer's flat input
// was converted back: every place net.c plans it.
static void test_zeropad_cpu_vs_ref(void **state) {
    (void)state;
    const layer_spec a[] = {
        {.kind = LAYER_ZEROPAD, .pad_top = 1, .pad_bottom = 0, .pad_left = 2, .pad_right = 1},
        {.kind = LAYER_CONV2D, .filters = 5, .k = 3, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_RELU},
        {.kind = LAYER_ZEROPAD, .pad_top = 2, .pad_bottom = 1, .pad_left = 0, .pad_right = 3},
        {.kind = LAYER_CONV2D, .filters = 4, .k = 3, .stride = 2, .pad = 1,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_ZEROPAD, .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    model m;
    build(&m, 3, 7, 6, 3, a, (int)(sizeof a / sizeof a[0]));
    assert_int_equal(m.layers[3].oh, 9);  // 6 + 2 + 1
    assert_int_equal(m.layers[3].ow, 10); // 7 + 0 + 3
    net_vs_ref(&m, 3100);
    model_free(&m);
    // After a permute's NCHW output: converted to channels-last first.
    const layer_spec b[] = {
        {.kind = LAYER_PERMUTE, .perm = {2, 3, 1}},
        {.kind = LAYER_ZEROPAD, .pad_top = 0, .pad_bottom = 2, .pad_left = 1, .pad_right = 0},
        {.kind = LAYER_CONV2D, .filters = 2, .k = 2, .stride = 1, .pad = 0,
         .w_init = INIT_GLOROT_UNIFORM, .b_init = INIT_CONSTANT, .b_arg = 0.05f},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    build(&m, 2, 4, 3, 3, b, (int)(sizeof b / sizeof b[0]));
    net_vs_ref(&m, 3200);
    model_free(&m);
}

// A pad past the limit is refused by model_add, naming the layer.
static void test_zeropad_add_errors(void **state) {
    (void)state;
    model m;
    ht_error e;
    assert_int_equal(model_begin(&m, "zp", 1, 4, 4, 2, &e), 0);
    layer_spec s = {.kind = LAYER_ZEROPAD, .pad_top = -1};
    assert_int_equal(model_add(&m, &s, &e), -1);
    test_expect_frags(e.msg, 1, "layer 0 (zeropad): pads -1,0,0,0 (top, bottom, left, right)",
                      NULL);
    s = (layer_spec){.kind = LAYER_ZEROPAD, .pad_left = MODEL_MAX_DIM};
    assert_int_equal(model_add(&m, &s, &e), -1);
    test_expect_frags(e.msg, 1, "layer 0 (zeropad): output 4x65540", NULL);
    model_free(&m);
}

// ---- config ----

static char *tmpdir;

static int load(model *m, const char *name, const char *text, ht_error *e) {
    char *path = test_write_file(tmpdir, name, text, strlen(text));
    int rc = model_init(m, path, e);
    free(path);
    return rc;
}

#define NET "[net]\ninput = 2x5x4\nclasses = 3\n"
#define HEAD "[dense]\nunits = 3\n[softmax]\n"

static void expect_pads(const char *section, int t, int b, int l, int r) {
    model m;
    ht_error e;
    char text[512];
    snprintf(text, sizeof text, NET "%s" HEAD, section);
    if (load(&m, "zp.cfg", text, &e) < 0) fail_msg("%s: %s", section, e.msg);
    const layer *L = &m.layers[0];
    assert_int_equal(L->kind, LAYER_ZEROPAD);
    assert_int_equal(L->pad_top, t);
    assert_int_equal(L->pad_bottom, b);
    assert_int_equal(L->pad_left, l);
    assert_int_equal(L->pad_right, r);
    assert_int_equal(L->oc, 2);
    assert_int_equal(L->oh, 5 + t + b);
    assert_int_equal(L->ow, 4 + l + r);
    model_free(&m);
}

static void expect_cfg_error(const char *section, const char *want) {
    model m;
    ht_error e;
    char text[512];
    snprintf(text, sizeof text, NET "%s" HEAD, section);
    assert_int_equal(load(&m, "zp.cfg", text, &e), -1);
    test_expect_frags(e.msg, 1, want, NULL);
}

// Keras's three forms of padding, the four sides on their own (one over padding), the Keras
// class as the section, and the messages.
static void test_zeropad_config(void **state) {
    (void)state;
    expect_pads("[zeropad]\npadding = 2\n", 2, 2, 2, 2);
    expect_pads("[zeropad]\npadding = (1, 3)\n", 1, 1, 3, 3);
    expect_pads("[zeropad]\npadding = ((1, 2), (0, 3))\n", 1, 2, 0, 3);
    expect_pads("[zeropad]\ntop = 1\nright = 4\n", 1, 0, 0, 4);
    expect_pads("[ZeroPadding2D]\npadding = 1\nbottom = 0\n", 1, 0, 1, 1);
    expect_pads("[zeropad]\n", 0, 0, 0, 0);
    expect_cfg_error("[zeropad]\npadding = (1, 2, 3)\n",
                     "zp.cfg:5: [zeropad] padding: expected N, (H, W) or ((TOP, BOTTOM), (LEFT, "
                     "RIGHT)) of integers 0..65536, found \"(1, 2, 3)\"");
    expect_cfg_error("[zeropad]\npadding = -1\n", "zp.cfg:5: [zeropad] padding: expected N");
    expect_cfg_error("[zeropad]\nleft = x\n",
                     "zp.cfg:5: [zeropad] left: expected an integer 0..65536, found \"x\"");
    expect_cfg_error("[zeropad]\nsize = 2\n",
                     "zp.cfg:5: [zeropad] unknown key \"size\"; expected one of: name, padding, "
                     "top, bottom, left, right");
}

// ---- Keras ----

#define KERAS_HEAD                                                                              \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"zp\", \"layers\": ["            \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 5, 4, 2]}}, "
#define KERAS_TAIL                                                                              \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}}, "                     \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 3, "              \
    "\"activation\": \"softmax\"}}]}, \"keras_version\": \"3.3.3\"}"

static int load_keras(model *m, const char *zeropad_config, ht_error *e) {
    char text[1024];
    snprintf(text, sizeof text, KERAS_HEAD "{\"module\": \"keras.layers\", \"class_name\": "
             "\"ZeroPadding2D\", \"config\": {\"name\": \"zero_padding2d\", \"trainable\": true, "
             "\"dtype\": \"float32\", %s}, \"registered_name\": null}, " KERAS_TAIL,
             zeropad_config);
    return load(m, "zp.json", text, e);
}

static void expect_keras_pads(const char *cfg, int t, int b, int l, int r) {
    model m;
    ht_error e;
    if (load_keras(&m, cfg, &e) < 0) fail_msg("%s: %s", cfg, e.msg);
    const layer *L = &m.layers[0];
    assert_int_equal(L->kind, LAYER_ZEROPAD);
    assert_string_equal(L->name, "zero_padding2d");
    assert_int_equal(L->pad_top, t);
    assert_int_equal(L->pad_bottom, b);
    assert_int_equal(L->pad_left, l);
    assert_int_equal(L->pad_right, r);
    assert_int_equal(m.layers[1].kind, LAYER_DENSE);
    assert_int_equal(m.layers[1].c, 2 * (5 + t + b) * (4 + l + r)); // Keras's count, flattened
    model_free(&m);
}

// Keras 3's ZeroPadding2D with each form of its padding, the default, one of the other
// data_format (between two permutes, Keras's shape after them) and the errors.
static void test_zeropad_keras(void **state) {
    (void)state;
    expect_keras_pads("\"padding\": [[1, 2], [0, 3]], \"data_format\": \"channels_last\"", 1, 2, 0,
                      3);
    expect_keras_pads("\"padding\": [2, 1]", 2, 2, 1, 1);
    expect_keras_pads("\"padding\": 3", 3, 3, 3, 3);
    expect_keras_pads("\"data_format\": null", 1, 1, 1, 1);
    // channels_first in a channels_last model: it pads what Keras holds as (H, W, C)'s W (top
    // and bottom) and C (left and right).
    model m;
    ht_error e;
    if (load_keras(&m, "\"padding\": [[1, 0], [2, 1]], \"data_format\": \"channels_first\"",
                   &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(m.layers[0].kind, LAYER_PERMUTE);
    assert_int_equal(m.layers[1].kind, LAYER_ZEROPAD);
    assert_int_equal(m.layers[2].kind, LAYER_PERMUTE);
    assert_int_equal(m.layers[2].oc, 2 + 2 + 1);
    assert_int_equal(m.layers[2].oh, 5);
    assert_int_equal(m.layers[2].ow, 4 + 1 + 0);
    model_free(&m);
    assert_int_equal(load_keras(&m, "\"padding\": [1, 2, 3]", &e), -1);
    test_expect_frags(e.msg, 1, "zp.json: layer 1 \"zero_padding2d\" (ZeroPadding2D): padding: "
                      "expected an integer, [sym_h, sym_w] or [[top, bottom], [left, right]], "
                      "found [1,2,3]", NULL);
    assert_int_equal(load_keras(&m, "\"padding\": [[1, -2], [0, 0]]", &e), -1);
    test_expect_frags(e.msg, 1, "(ZeroPadding2D): padding: expected integers 0..65536, found -2",
                      NULL);
}

static int setup_tmp(void **state) {
    (void)state;
    tmpdir = test_tmpdir("zeropad");
    return tmpdir ? 0 : -1;
}

static int teardown_tmp(void **state) {
    (void)state;
    free(tmpdir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zeropad_ref_fd),
        cmocka_unit_test(test_zeropad_cpu_vs_ref),
        cmocka_unit_test(test_zeropad_add_errors),
        cmocka_unit_test(test_zeropad_config),
        cmocka_unit_test(test_zeropad_keras),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
