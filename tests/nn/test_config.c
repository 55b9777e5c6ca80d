// Model config files: every section and key, Keras's names for them, the activations, the
// presets' config-file twins, and one clear line for each kind of mistake.
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

static void check_same_model(const model *a, const model *b) {
    assert_string_equal(a->name, b->name);
    assert_true(a->in_c == b->in_c && a->in_h == b->in_h && a->in_w == b->in_w);
    assert_int_equal(a->n_classes, b->n_classes);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->n_params, b->n_params);
    for (int i = 0; i < a->n_layers; i++) {
        const layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->kind != y->kind || strcmp(x->name, y->name) || x->c != y->c || x->h != y->h ||
            x->w != y->w || x->oc != y->oc || x->oh != y->oh || x->ow != y->ow || x->k != y->k ||
            x->stride != y->stride || x->pad != y->pad || x->rate != y->rate ||
            x->w_init != y->w_init || x->b_init != y->b_init || x->w_arg != y->w_arg ||
            x->b_arg != y->b_arg || x->w_off != y->w_off || x->b_off != y->b_off ||
            x->n_w != y->n_w || x->n_b != y->n_b)
            fail_msg("layer %d (%s vs %s) differs", i, x->name, y->name);
    }
    const train_setup *s = &a->setup, *t = &b->setup;
    assert_int_equal(s->optim, t->optim);
    assert_true(s->lr == t->lr && s->momentum == t->momentum && s->nesterov == t->nesterov);
    assert_true(s->decay == t->decay && s->beta1 == t->beta1 && s->beta2 == t->beta2 &&
                s->eps == t->eps);
    assert_true(s->batch == t->batch && s->epochs == t->epochs && s->val_split == t->val_split);
    assert_int_equal(s->conv_algo, t->conv_algo);
}

static void test_config_files_match_presets(void **state) {
    (void)state;
    static const char *const pairs[][2] = {
        {HT_SOURCE_DIR "/models/cnn3.cfg", "cnn3"},
        {HT_SOURCE_DIR "/models/cnn2.cfg", "cnn2"},
    };
    for (int i = 0; i < 2; i++) {
        model a, b;
        ht_error err = {{0}};
        if (model_init(&a, pairs[i][0], &err)) fail_msg("%s", err.msg);
        assert_int_equal(model_init(&b, pairs[i][1], &err), 0);
        check_same_model(&a, &b);
        model_free(&a);
        model_free(&b);
    }
}

// ---- config files ----------------------------------------------------------------------------

static char *tmpdir;

static int setup_tmp(void **state) {
    (void)state;
    tmpdir = test_tmpdir("model");
    return tmpdir ? 0 : -1;
}

static int teardown_tmp(void **state) {
    (void)state;
    free(tmpdir);
    return 0;
}

// Parses text as name; returns 0/-1 and leaves the message in err.
static int load_text(model *m, const char *name, const char *text, ht_error *err) {
    char *path = test_write_file(tmpdir, name, text, strlen(text));
    assert_non_null(path);
    int rc = model_init_config(m, path, err);
    free(path);
    return rc;
}

static void expect_cfg_error(const char *text, const char *fragment) {
    model m;
    ht_error err = {{0}};
    assert_int_equal(load_text(&m, "bad.cfg", text, &err), -1);
    if (!strstr(err.msg, fragment)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, fragment);
    assert_null(strchr(err.msg, '\n'));
    assert_null(m.layers);
    model_free(&m);
}

#define NET "[net]\ninput = 1x8x8\nclasses = 4\n" // lines 1-3
#define TAIL "[dense]\nunits = 4\n[softmax]\n"

static void test_config_errors(void **state) {
    (void)state;
    expect_cfg_error(NET "[foo]\nx = 1\n", "bad.cfg:4: unknown section [foo]");
    expect_cfg_error(NET "[conv]\nfilter = 3\n",
                     "bad.cfg:5: [conv] unknown key \"filter\"; expected one of: name, filters");
    expect_cfg_error(NET "[conv]\nfilters = abc\nsize = 3\n" TAIL,
                     "bad.cfg:5: [conv] filters: expected an integer 1..65536, found \"abc\"");
    expect_cfg_error(NET "[conv]\nsize = 3\nfilters = 0\n" TAIL,
                     "bad.cfg:6: [conv] filters: expected an integer 1..65536, found \"0\"");
    expect_cfg_error(NET "[dropout]\nrate = 0.5x\n",
                     "bad.cfg:5: [dropout] rate: expected a number in [0, 1), found \"0.5x\"");
    expect_cfg_error(NET "[conv]\nfilters = 2\nsize = 3\ninit = xavier\n",
                     "bad.cfg:7: [conv] init: initializer \"xavier\" is not supported; hetrain "
                     "has zeros, ones, constant");
    // missing softmax: reported at the last section
    expect_cfg_error(NET "[dense]\nunits = 4\n",
                     "bad.cfg:4: layer 0 (dense): the model must end with softmax");
    // softmax not last
    expect_cfg_error(NET TAIL "[relu]\n", "bad.cfg:7: layer 2 (relu): nothing may follow softmax");
    expect_cfg_error("[net]\ninput = 1x8x8\nconv_algo = fft\n" TAIL,
                     "bad.cfg:3: [net] conv_algo: expected direct|auto|winograd|winograd2|gemm, found "
                     "\"fft\"");
    expect_cfg_error(NET "lr_schedule = step:0:0.5\n" TAIL,
                     "bad.cfg:4: [net] lr_schedule: \"step:0:0.5\": EPOCHS must be an integer");
    expect_cfg_error(NET "lr_schedule = linear\n" TAIL,
                     "bad.cfg:4: [net] lr_schedule: expected step:EPOCHS:GAMMA, exp:GAMMA, cosine");
    expect_cfg_error(NET "weight_decay = -1\n" TAIL, "bad.cfg:4: [net] weight_decay: expected a number");
    expect_cfg_error(NET "weight_decay_mode = adamw\n" TAIL,
                     "bad.cfg:4: [net] weight_decay_mode: expected l2|decoupled, found \"adamw\"");
    // 8x8 -> conv3 6x6 -> pool 3x3 -> pool 1x1 -> pool: nothing left
    expect_cfg_error(NET "[conv]\nfilters = 2\nsize = 3\n[maxpool]\nsize = 2\n[maxpool]\n"
                         "size = 2\n[maxpool]\nsize = 2\n" TAIL,
                     "bad.cfg:11: layer 3 (maxpool): window 2 does not fit input 1x1");
    expect_cfg_error(NET "[maxpool]\nsize = 2\npad = 1\n" TAIL,
                     "bad.cfg:4: layer 0 (maxpool): pad 1: pooling pads 0 (valid) or \"same\"");
    expect_cfg_error(NET "[conv]\nfilters = 2\nsize = 3\nbias = no\n" TAIL,
                     "bad.cfg:7: [conv] bias: expected 0|1|false|true, found \"no\"");
    expect_cfg_error(NET "[globalavgpool]\nsize = 2\n" TAIL,
                     "bad.cfg:5: [globalavgpool] unknown key \"size\"; expected one of: name");
    expect_cfg_error(NET "[avgpool]\nstride = 2\n" TAIL, "bad.cfg:4: [avgpool] needs size");
    // "same" on 8x7 with stride 2: 1 row but 0 columns of padding before.
    expect_cfg_error("[net]\ninput = 1x8x7\nclasses = 4\n[conv]\nfilters = 2\nsize = 3\n"
                     "stride = 2\npad = same\n" TAIL,
                     "bad.cfg:4: layer 0 (conv): \"same\" padding of input 8x7 (window 3, "
                     "stride 2) pads 0 rows but 1 columns before");
    expect_cfg_error(NET "[dense]\nunits = 5\n[softmax]\n",
                     "bad.cfg:6: layer 1 (softmax): input has 5 features");
    expect_cfg_error("[net]\nclasses = 4\n" TAIL, "bad.cfg:1: [net] input missing");
    expect_cfg_error("[net]\ninput = 1x8\n", "bad.cfg:2: [net] input: expected CxHxW");
    expect_cfg_error("[conv]\nfilters = 2\n", "bad.cfg:1: [conv] before [net]");
    expect_cfg_error("# nothing\n", "bad.cfg:1: no [net] section");
    expect_cfg_error("input = 1x8x8\n", "bad.cfg:1: key \"input\" outside any section");
    expect_cfg_error(NET "[conv]\nfilters 3\n", "bad.cfg:5: expected \"key = value\"");
    expect_cfg_error(NET "[conv\n", "bad.cfg:4: expected \"[section]\"");
    expect_cfg_error(NET "[net]\n", "bad.cfg:4: second [net] section");
    expect_cfg_error(NET "[dense]\nunits = 4\nunits = 5\n", "bad.cfg:6: [dense] units given twice");
    expect_cfg_error(NET "[dense]\n[softmax]\n", "bad.cfg:4: [dense] needs units");
    expect_cfg_error(NET "[dense]\nunits = 4\nactivation = mish\n",
                     "bad.cfg:6: [dense] activation: expected linear|relu|softmax|sigmoid|tanh|"
                     "leaky_relu|elu|selu|swish|softplus|hard_sigmoid|gelu|relu6|hard_swish, found \"mish\"");
    expect_cfg_error(NET "[dense]\nunits = 4\nname = fc.x\n" "[softmax]\n",
                     "bad.cfg:4: layer 0 (dense): name \"fc.x\"");

    model m;
    ht_error err = {{0}};
    assert_int_equal(model_init_config(&m, "/nonexistent/no-such.cfg", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/no-such.cfg: cannot open"));
    model_free(&m);
    assert_int_equal(model_init(&m, "no/such/model", &err), -1); // '/' means a path
    assert_non_null(strstr(err.msg, "no/such/model: cannot open"));
    model_free(&m);
}

// The act family in a config: its sections with their parameters (default, given, Keras's
// names for both), `activation =` with every activation name (silu is swish), and what is
// refused.
static void test_config_activations(void **state) {
    (void)state;
    static const char text[] = NET "[conv]\nfilters = 2\nsize = 3\nactivation = gelu\n"
                                   "[leaky_relu]\n[LeakyReLU]\nnegative_slope = 0.1\n"
                                   "[elu]\nalpha = 0.5\n[hard_sigmoid]\n[hard_sigmoid]\nslope = 0.2\n"
                                   "[gelu]\napproximate = 1\n[sigmoid]\n[Activation]\n"
                                   "activation = silu\n[dense]\nunits = 4\nactivation = tanh\n"
                                   "[selu]\n[softplus]\n[softmax]\n";
    model m;
    ht_error err = {{0}};
    if (load_text(&m, "act.cfg", text, &err)) fail_msg("%s", err.msg);
    static const struct {
        layer_kind kind;
        float alpha;
    } want[] = {{LAYER_CONV2D, 0},       {LAYER_GELU, 0},         {LAYER_LEAKY_RELU, 0.3f},
                {LAYER_LEAKY_RELU, 0.1f}, {LAYER_ELU, 0.5f},       {LAYER_HARD_SIGMOID, 1.0f / 6},
                {LAYER_HARD_SIGMOID, 0.2f}, {LAYER_GELU, 1},       {LAYER_SIGMOID, 0},
                {LAYER_SWISH, 0},        {LAYER_DENSE, 0},        {LAYER_TANH, 0},
                {LAYER_SELU, 0},         {LAYER_SOFTPLUS, 0},     {LAYER_SOFTMAX_XENT, 0}};
    assert_int_equal(m.n_layers, (int)N_OF(want));
    for (int l = 0; l < m.n_layers; l++) {
        assert_int_equal(m.layers[l].kind, want[l].kind);
        assert_true(m.layers[l].alpha == want[l].alpha);
    }
    assert_string_equal(m.layers[2].name, "lrelu1");
    assert_string_equal(m.layers[3].name, "lrelu2");
    assert_int_equal(m.n_params, 2 * 9 + 2 + 2 * 6 * 6 * 4 + 4);
    model_free(&m);
    expect_cfg_error(NET "[sigmoid]\nalpha = 1\n" TAIL,
                     "bad.cfg:5: [sigmoid] unknown key \"alpha\"; expected one of: name");
    expect_cfg_error(NET "[gelu]\napproximate = 2\n" TAIL,
                     "bad.cfg:4: layer 0 (gelu): approximate 2: expected 0 (erf) or 1 (tanh)");
    expect_cfg_error(NET "[hard_sigmoid]\nslope = 0\n" TAIL,
                     "bad.cfg:4: layer 0 (hard_sigmoid): slope 0: expected a number > 0");
    expect_cfg_error(NET "[Activation]\nactivation = mish\n" TAIL,
                     "bad.cfg:5: [Activation] activation: expected linear|relu|softmax|sigmoid|"
                     "tanh|leaky_relu|elu|selu|swish|softplus|hard_sigmoid|gelu|relu6|hard_swish, found \"mish\"");
}

static void test_config_sections(void **state) {
    (void)state;
    // Empty and repeated sections, indented keys (not inih continuations), both comment styles,
    // aliases, and a last line without a newline.
    static const char text[] =
        "; leading comment\n"
        "[net]\n"
        "input = 3x8x8   # CxHxW\n"
        "classes = 4\n"
        "optimizer = adam\n"
        "lr = 0.001\n"
        "conv_algo = winograd2\n"
        "lr_schedule = step:3:0.5\n"
        "weight_decay = 5e-4\n"
        "weight_decay_mode = decoupled\n"
        "[conv]\n"
        "  filters = 2\n"
        "  size = 3\n"
        "[relu]\n"
        "[convolutional]\n"
        "filters = 3\n"
        "size = 3 ; valid\n"
        "stride = 1\n"
        "pad = same\n"
        "init = truncated_normal\n"
        "init_arg = 0.05\n"
        "bias_init = constant\n"
        "bias_arg = 0.25\n"
        "[relu]\n"
        "\n"
        "[ relu ]\n"
        "[dense]\n"
        "units = 4\n"
        "name = head\n"
        "[softmax]";
    model m;
    ht_error err = {{0}};
    if (load_text(&m, "seq.cfg", text, &err)) fail_msg("%s", err.msg);
    static const expect_layer want[] = {
        {LAYER_CONV2D, "conv1", 2, 6, 6, 2 * 3 * 9 + 2},
        {LAYER_RELU, "relu1", 2, 6, 6, 0},
        {LAYER_CONV2D, "conv2", 3, 6, 6, 3 * 2 * 9 + 3},
        {LAYER_RELU, "relu2", 3, 6, 6, 0},
        {LAYER_RELU, "relu3", 3, 6, 6, 0},
        {LAYER_DENSE, "head", 4, 1, 1, 108 * 4 + 4},
        {LAYER_SOFTMAX_XENT, "softmax", 4, 1, 1, 0},
    };
    check_layers(&m, want, N_OF(want));
    assert_string_equal(m.name, "seq"); // from the file name
    assert_int_equal(m.setup.conv_algo, CONV_ALGO_WINOGRAD2);
    assert_int_equal(m.layers[0].w_init, INIT_GLOROT_UNIFORM); // defaults
    assert_int_equal(m.layers[0].pad, 0);
    assert_int_equal(m.layers[5].w_init, INIT_LECUN_UNIFORM);
    assert_true(m.layers[2].pad == 1 && m.layers[2].w_init == INIT_TRUNCATED_NORMAL &&
                m.layers[2].w_arg == 0.05f && m.layers[2].b_init == INIT_CONSTANT &&
                m.layers[2].b_arg == 0.25f);
    // Setup: given keys override, the rest are the 3-layer preset's.
    assert_int_equal(m.setup.optim, OPTIM_ADAM);
    assert_true(m.setup.lr == 0.001f && m.setup.batch == 1000 && m.setup.beta2 == 0.999f);
    assert_true(m.setup.sched.kind == LR_SCHED_STEP && m.setup.sched.every == 3 &&
                m.setup.sched.gamma == 0.5f);
    assert_true(m.setup.weight_decay == 5e-4f && m.setup.wd_mode == WD_DECOUPLED);
    model_free(&m);
}

// bias = 0 and the new sections in a config.
static void test_config_new_keys(void **state) {
    (void)state;
    static const char text[] = "[net]\ninput = 3x9x9\nclasses = 4\n"
                               "[conv]\nfilters = 4\nsize = 3\nstride = 2\npad = same\n"
                               "bias = 0\nactivation = relu\n"
                               "[maxpool]\nsize = 2\nstride = 1\npad = same\n"
                               "[avgpool]\nsize = 3\nstride = 2\npad = same\n"
                               "[globalavgpool]\nname = gap\n"
                               "[dense]\nunits = 4\nbias = 1\n[softmax]\n";
    model m;
    ht_error err = {{0}};
    if (load_text(&m, "new.cfg", text, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m.n_layers, 7);
    assert_int_equal(m.layers[0].oh, 5); // ceil(9/2), pad 1 before and after
    assert_int_equal(m.layers[0].pad, 1);
    assert_int_equal(m.layers[0].n_b, 0);
    assert_int_equal(m.layers[2].kind, LAYER_MAXPOOL);
    assert_int_equal(m.layers[2].oh, 5); // stride 1 same: pad 0 before, 1 after
    assert_int_equal(m.layers[3].kind, LAYER_AVGPOOL);
    assert_int_equal(m.layers[3].oh, 3);
    assert_int_equal(m.layers[4].kind, LAYER_GLOBAL_AVGPOOL);
    assert_string_equal(m.layers[4].name, "gap");
    assert_int_equal(m.layers[5].c, 4);
    assert_int_equal(m.n_params, 3 * 3 * 3 * 4 + 4 * 4 + 4);
    model_free(&m);
}

// ConvNeXt's families in the config: normalize with constant means and variances (one for
// all, or one a channel), layernorm (epsilon, center, scale), layerscale (init_values), and
// what is refused of them.
static void test_config_convnext_keys(void **state) {
    (void)state;
    static const char text[] = "[net]\ninput = 3x4x4\nclasses = 4\n"
                               "[normalize]\nmean = 1, 2.5, -3\nvariance = 4, 0.25, 9\n"
                               "[layernorm]\nepsilon = 1e-6\ncenter = 0\n"
                               "[layerscale]\ninit_values = 0.5\n"
                               "[normalize]\nmean = 2\nvariance = 3\n"
                               "[globalavgpool]\n[layernorm]\n" TAIL;
    model m;
    ht_error err = {{0}};
    if (load_text(&m, "cnx.cfg", text, &err)) fail_msg("%s", err.msg);
    const layer *L = m.layers;
    assert_int_equal(L[0].n_const, 3);
    assert_int_equal(L[0].n_s, 0);
    assert_float_equal(L[0].c_mean[2], -3.0f, 0);
    assert_float_equal(L[0].c_var[1], 0.25f, 0);
    assert_int_equal(L[1].kind, LAYER_LAYERNORM);
    assert_float_equal(L[1].eps, 1e-6f, 0);
    assert_int_equal(L[1].n_w, 3);
    assert_int_equal(L[1].n_b, 0);
    assert_int_equal(L[2].kind, LAYER_LAYERSCALE);
    assert_int_equal(L[2].n_w, 3);
    assert_int_equal(L[3].n_const, 3); // one for all
    assert_float_equal(L[3].c_var[2], 3.0f, 0);
    assert_float_equal(L[5].eps, 1e-3f, 0); // Keras's default
    float *p = malloc(sizeof(float) * m.n_params);
    assert_non_null(p);
    model_init_params(&m, p, 1);
    for (int c = 0; c < 3; c++) {
        assert_float_equal(p[L[1].w_off + c], 1.0f, 0);   // gamma: ones
        assert_float_equal(p[L[2].w_off + c], 0.5f, 0);   // init_values
    }
    free(p);
    model_free(&m);
    expect_cfg_error("[net]\ninput = 3x4x4\nclasses = 4\n[normalize]\nmean = 1, 2\n"
                     "variance = 1, 2, 3\n" TAIL,
                     "bad.cfg:6: variance = 1, 2, 3: expected 2 numbers, as many as the other of "
                     "mean and variance gave");
    expect_cfg_error("[net]\ninput = 3x4x4\nclasses = 4\n[normalize]\nmean = 1, x\n" TAIL,
                     "bad.cfg:5: mean = 1, x: expected 1 to 4 numbers, separated by commas");
    expect_cfg_error("[net]\ninput = 3x4x4\nclasses = 4\n[normalize]\nmean = 1, 2, 3\n" TAIL,
                     "the mean without the variance: give both as constants, or neither");
    expect_cfg_error("[net]\ninput = 3x4x4\nclasses = 4\n[normalize]\nmean = 1, 2\n"
                     "variance = 1, 2\n" TAIL,
                     "2 means and variances for 3 channels: expected one for each channel, or "
                     "one for all");
    expect_cfg_error("[net]\ninput = 3x4x4\nclasses = 4\n[normalize]\nmean = 1\n"
                     "variance = -1\n" TAIL,
                     "channel 0's mean 1 and variance -1: expected finite numbers, the variance "
                     "0 or more");
    expect_cfg_error(NET "[layernorm]\nepsilon = 0\n" TAIL,
                     "bad.cfg:5: [layernorm] epsilon: expected a number in (0, 1], found \"0\"");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_files_match_presets),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_config_sections),
        cmocka_unit_test(test_config_activations),
        cmocka_unit_test(test_config_new_keys),
        cmocka_unit_test(test_config_convnext_keys),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
