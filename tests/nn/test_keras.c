// Keras model JSON (keras.c): the reference networks as real Keras 2 and Keras 3 wrote them give
// the presets' layers, shapes and first-step gradient bit for bit; every fixture has the
// parameter count Keras printed, every activation Keras's values; malformed inputs give their
// one-line errors. Also Keras's initialisers (model.c) by their bounds and moments, and
// Keras's names in the config format. Through the command line: tests/cli/test_keras_cli.c.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nn/keras.h"
#include "nn/layer_desc.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/net.h"
#include "core/rng.h"
#include "tests/lib/keras_expect.h"
#include "tests/lib/testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

// ---- the reference networks ------------------------------------------------------------------

static void load(model *m, const char *name_or_path) {
    ht_error e = {{0}};
    if (model_init(m, name_or_path, &e) < 0) fail_msg("%s: %s", name_or_path, e.msg);
}

// Everything that decides what a layer computes and how it is initialised; names may differ.
static void same_layers(const model *a, const model *b, const char *what) {
    assert_int_equal(a->in_c, b->in_c);
    assert_int_equal(a->in_h, b->in_h);
    assert_int_equal(a->in_w, b->in_w);
    assert_int_equal(a->n_classes, b->n_classes);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->n_params, b->n_params);
    for (int l = 0; l < a->n_layers; l++) {
        const layer *x = &a->layers[l], *y = &b->layers[l];
        if (x->kind != y->kind || x->c != y->c || x->h != y->h || x->w != y->w ||
            x->oc != y->oc || x->oh != y->oh || x->ow != y->ow || x->k != y->k ||
            x->stride != y->stride || x->pad != y->pad || x->rate != y->rate ||
            x->w_init != y->w_init || x->b_init != y->b_init || x->w_arg != y->w_arg ||
            x->b_arg != y->b_arg || x->w_arg2 != y->w_arg2 || x->b_arg2 != y->b_arg2 ||
            x->w_vs != y->w_vs || x->b_vs != y->b_vs || x->w_off != y->w_off ||
            x->b_off != y->b_off || x->n_w != y->n_w || x->n_b != y->n_b)
            fail_msg("%s: layer %d (%s / %s) differs from the preset's", what, l, x->name,
                     y->name);
    }
    const model_tensor *ta, *tb;
    int n = model_tensors(a, &ta);
    assert_int_equal(n, model_tensors(b, &tb));
    for (int i = 0; i < n; i++) {
        assert_int_equal(ta[i].ndim, tb[i].ndim);
        assert_int_equal(ta[i].off, tb[i].off);
        assert_memory_equal(ta[i].shape, tb[i].shape, sizeof ta[i].shape);
    }
}

// One step's summed gradient over B synthetic samples, from the parameters of `seed`.
static float *first_step_grad(model *m, uint64_t seed) {
    enum { B = 6 };
    m->setup.conv_algo = CONV_ALGO_DIRECT;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    float *x = malloc(B * in * sizeof *x), *p = malloc(m->n_params * sizeof *p);
    float *g = calloc(m->n_params, sizeof *g);
    uint8_t y[B];
    uint32_t ids[B];
    ht_rng r;
    ht_rng_seed(&r, 99);
    for (size_t i = 0; i < B * in; i++) x[i] = (float)ht_rng_double(&r);
    for (int i = 0; i < B; i++) y[i] = (uint8_t)(i * 7 % m->n_classes), ids[i] = (uint32_t)i;
    model_init_params(m, p, seed);
    net_ws ws;
    ht_error e = {{0}};
    if (net_ws_init(&ws, m, B, 1, &e) < 0) fail_msg("%s", e.msg);
    net_dropout drop = {.seed = seed, .epoch = 0, .ids = ids};
    net_forward(&ws, m, p, x, y, B, &drop);
    net_backward(&ws, m, p, g, x, y, B, &drop);
    net_ws_free(&ws);
    free(x);
    free(p);
    return g;
}

static void check_reference(const char *preset, const char *file) {
    model a, b;
    load(&a, file);
    load(&b, preset);
    same_layers(&a, &b, file);
    // The setup of a JSON model is a config's [net] defaults, the 3-layer preset's.
    assert_true(a.setup.optim == OPTIM_SGD && a.setup.lr == 0.05f && a.setup.batch == 1000);
    // The same layers from the same seed and data: the same bits.
    float *ga = first_step_grad(&a, 5), *gb = first_step_grad(&b, 5);
    double norm = 0;
    for (size_t i = 0; i < a.n_params; i++) norm += (double)ga[i] * ga[i];
    assert_true(norm > 0);
    assert_memory_equal(ga, gb, a.n_params * sizeof *ga);
    free(ga);
    free(gb);
    model_free(&a);
    model_free(&b);
}

static void test_reference_networks(void **state) {
    (void)state;
    check_reference("cnn3", KDIR "cnn3_k3.json");
    check_reference("cnn3", KDIR "cnn3_k2.json");
    check_reference("cnn3", KDIR "cnn3_k2old.json");
    check_reference("cnn2", KDIR "cnn2_k3.json");
    check_reference("cnn2", KDIR "cnn2_k2.json");
}

// Keras's layer names become hetrain's, so safetensors files name tensors as Keras does.
static void test_names(void **state) {
    (void)state;
    model m;
    load(&m, KDIR "cnn3_k3.json");
    assert_string_equal(m.name, "cnn3_k3"); // Keras's default name "sequential" says less
    assert_string_equal(m.layers[0].name, "conv2d");
    assert_string_equal(m.layers[1].name, "conv2d_relu");
    assert_string_equal(m.layers[14].name, "dense_2");
    assert_string_equal(m.layers[15].name, "softmax");
    model_free(&m);
}

// Every fixture has the parameter count Keras's count_params() printed (params.txt).
static void test_keras_param_counts(void **state) {
    (void)state;
    char *list = test_read_file(KDIR "params.txt", NULL);
    assert_non_null(list);
    int n = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char file[128], path[512];
        size_t want;
        assert_int_equal(sscanf(line, "%127s %zu", file, &want), 2);
        snprintf(path, sizeof path, KDIR "%s", file);
        model m;
        load(&m, path);
        if (m.n_params != want)
            fail_msg("%s: %zu parameters, Keras has %zu", file, m.n_params, want);
        model_free(&m);
        n++;
    }
    assert_true(n >= 10);
    free(list);
}

// Keras's activations read as hetrain's act family with Keras's parameters: the activation
// strings (leaky_relu's function slope 0.2; hard_sigmoid 1/6 from Keras 3, 0.2 from Keras 2),
// the LeakyReLU and ELU classes with and without their argument; and hetrain's CPU functions
// give the values Keras's own functions printed (activations_k*.txt, tools/keras_models.py) to
// a few float roundings.
static void test_keras_activations(void **state) {
    (void)state;
    for (int v = 2; v <= 3; v++) {
        char path[256];
        snprintf(path, sizeof path, KDIR "activations_k%d.json", v);
        model m;
        load(&m, path);
        const float hsig = v == 3 ? 1.0f / 6 : 0.2f;
        static const layer_kind kinds[] = {
            LAYER_CONV2D, LAYER_TANH, LAYER_MAXPOOL, LAYER_CONV2D, LAYER_SIGMOID, LAYER_SWISH,
            LAYER_MAXPOOL,
            LAYER_GELU, LAYER_CONV2D, LAYER_ELU, LAYER_LEAKY_RELU, LAYER_ELU, LAYER_HARD_SIGMOID,
            LAYER_DENSE, LAYER_SELU, LAYER_SOFTPLUS, LAYER_LEAKY_RELU, LAYER_DENSE,
            LAYER_LEAKY_RELU, LAYER_SWISH, LAYER_ELU, LAYER_DENSE, LAYER_SOFTMAX_XENT};
        const float alphas[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0f, 0.1f, 0.5f, hsig, 0, 0, 0, 0.3f,
                                0, 0.2f, 0, 1.0f, 0, 0};
        assert_int_equal(m.n_layers, (int)(sizeof kinds / sizeof kinds[0]));
        for (int l = 0; l < m.n_layers; l++) {
            if (m.layers[l].kind != kinds[l] || m.layers[l].alpha != alphas[l])
                fail_msg("%s: layer %d is %s(%g), want %s(%g)", path, l,
                         model_kind_name(m.layers[l].kind), (double)m.layers[l].alpha,
                         model_kind_name(kinds[l]), (double)alphas[l]);
        }
        model_free(&m);

        snprintf(path, sizeof path, KDIR "activations_k%d.txt", v);
        char *text = test_read_file(path, NULL);
        assert_non_null(text);
        int n = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
            char name[32];
            float x, want, got;
            assert_int_equal(sscanf(line, "%31s %f %f", name, &x, &want), 3);
            int k = layer_kind_by_activation(name);
            assert_true(k >= 0 && layer_act_fn((layer_kind)k) >= 0);
            float a = k == LAYER_LEAKY_RELU ? 0.2f : k == LAYER_HARD_SIGMOID ? hsig
                    : k == LAYER_ELU        ? 1.0f : 0.0f; // Keras's functions' defaults
            act_forward((act_fn)layer_act_fn((layer_kind)k), a, &got, &x, 1, 1);
            if (!(fabsf(got - want) <= 1e-6f * fmaxf(1.0f, fabsf(want))))
                fail_msg("%s: %s(%g) = %.9g, Keras %.9g", path, name, (double)x, (double)got,
                         (double)want);
        }
        assert_int_equal(n, 9 * 9);
        free(text);
    }
}

// The CIFAR-shaped network: 3x32x32 channels-last input, strided "same", average pooling,
// a bias-free convolution, global average pooling, a Softmax layer.
static void test_cifar_shapes(void **state) {
    (void)state;
    static const char *const files[] = {KDIR "cifar_k3.json", KDIR "cifar_k2.json"};
    for (int f = 0; f < 2; f++) {
        model m;
        load(&m, files[f]);
        assert_true(m.in_c == 3 && m.in_h == 32 && m.in_w == 32 && m.n_classes == 10);
        static const struct {
            layer_kind kind;
            int oc, oh, ow;
            size_t params;
        } want[] = {
            {LAYER_CONV2D, 16, 32, 32, 3 * 9 * 16 + 16}, {LAYER_RELU, 16, 32, 32, 0},
            {LAYER_CONV2D, 32, 16, 16, 16 * 9 * 32 + 32}, {LAYER_RELU, 32, 16, 16, 0},
            {LAYER_AVGPOOL, 32, 8, 8, 0},                {LAYER_CONV2D, 32, 6, 6, 32 * 9 * 32},
            {LAYER_RELU, 32, 6, 6, 0},                   {LAYER_GLOBAL_AVGPOOL, 32, 1, 1, 0},
            {LAYER_DENSE, 64, 1, 1, 32 * 64 + 64},       {LAYER_RELU, 64, 1, 1, 0},
            {LAYER_DROPOUT, 64, 1, 1, 0},                {LAYER_DENSE, 10, 1, 1, 64 * 10 + 10},
            {LAYER_SOFTMAX_XENT, 10, 1, 1, 0},
        };
        assert_int_equal(m.n_layers, sizeof want / sizeof want[0]);
        for (int l = 0; l < m.n_layers; l++) {
            const layer *L = &m.layers[l];
            if (L->kind != want[l].kind || L->oc != want[l].oc || L->oh != want[l].oh ||
                L->ow != want[l].ow || L->n_w + L->n_b != want[l].params)
                fail_msg("%s layer %d %s: kind %d %dx%dx%d %zu params", files[f], l, L->name,
                         (int)L->kind, L->oc, L->oh, L->ow, L->n_w + L->n_b);
        }
        assert_int_equal(m.layers[0].w_init, INIT_HE_NORMAL);
        assert_int_equal(m.layers[2].w_init, INIT_HE_UNIFORM);
        assert_int_equal(m.layers[5].w_init, INIT_VARIANCE_SCALING);
        assert_true(m.layers[5].w_arg == 2.0f &&
                    m.layers[5].w_vs == (INIT_VS_FAN_OUT | INIT_VS_UNTRUNCATED));
        assert_int_equal(m.layers[8].w_init, INIT_GLOROT_NORMAL);
        assert_int_equal(m.layers[11].w_init, INIT_RANDOM_UNIFORM);
        assert_true(m.layers[11].w_arg == -0.05f && m.layers[11].w_arg2 == 0.05f);
        model_free(&m);
    }
}

// ---- malformed input -------------------------------------------------------------------------

// A Sequential model whose InputLayer takes 8x8x1, then `layers` (JSON, comma-separated).
static char *seq(const char *layers) {
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"t\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, "
             "1], \"name\": \"in\"}}, %s]}}",
             layers);
    return buf;
}
#define DENSE_SOFTMAX                                                                          \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4, "                \
    "\"activation\": \"softmax\"}}"
#define FLATTEN "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}"

static void test_errors(void **state) {
    (void)state;
    // The frame itself works: 64 inputs -> 4 classes.
    keras_expect_ok(seq(FLATTEN ", " DENSE_SOFTMAX), 64 * 4 + 4);

    keras_expect_error("{\"class_name\": \"Sequential\", \"config\": {", "bad.json: not valid JSON: "
                 "it ends early");
    keras_expect_error("{\"class_name\": \"Sequential\",\n \"config\": x}",
                 "bad.json: not valid JSON at line 2, column 12: unexpected character");
    keras_expect_error("{\"class_name\": \"Sequential\"} x",
                 "bad.json: not valid JSON: more after the model's object (byte 29)");
    keras_expect_error("[1, 2]", "bad.json: expected a JSON object (Keras's model.to_json()), found "
                 "a list");
    keras_expect_error("{\"class_name\": \"MyModel\", \"config\": {}}",
                 "bad.json: class_name \"MyModel\": hetrain reads Sequential models, and "
                 "Functional ones whose graph is a single path");
    keras_expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": 3}}",
                 "bad.json: config: expected an object with a list of \"layers\", or that list");
    // missing input shape
    keras_expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [" FLATTEN ", "
                 DENSE_SOFTMAX "]}}",
                 "bad.json: no input shape: expected an InputLayer with batch_shape (Keras 3) or "
                 "batch_input_shape (Keras 2), or batch_input_shape on the first layer");
    keras_expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
                 "\"InputLayer\", \"config\": {\"batch_shape\": [null, null, 8, 1]}}, " FLATTEN
                 ", " DENSE_SOFTMAX "]}}",
                 "bad.json: batch_shape: axis 1 has no size (null): hetrain needs every size");
    // unknown class
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm_1\", "
                     "\"units\": 3}}, " DENSE_SOFTMAX),
                 "bad.json: layer 2 \"lstm_1\" (LSTM): not supported; hetrain reads InputLayer, "
                 "Conv2D, MaxPooling2D, Dense, ReLU, Dropout, Softmax, AveragePooling2D, "
                 "GlobalAveragePooling2D, LeakyReLU, ELU, BatchNormalization, ZeroPadding2D, "
                 "Add, Subtract, Multiply, Average, Maximum, Concatenate, DepthwiseConv2D, "
                 "Rescaling, Normalization, LayerNormalization, LayerScale, SeparableConv2D, "
                 "Flatten, Reshape, Activation");
    // the JSON's strings never break the line
    keras_expect_error(seq("{\"class_name\": \"A\\nB\", \"config\": {\"name\": \"x\\\"y\"}}"),
                 "bad.json: layer 1 \"x\\\"y\" (A\\x0aB): not supported; hetrain reads "
                 "InputLayer, Conv2D, MaxPooling2D, Dense, ReLU, Dropout, Softmax, "
                 "AveragePooling2D, GlobalAveragePooling2D, LeakyReLU, ELU, BatchNormalization, "
                 "ZeroPadding2D, Add, Subtract, Multiply, Average, Maximum, Concatenate, "
                 "DepthwiseConv2D, Rescaling, Normalization, LayerNormalization, LayerScale, "
                 "SeparableConv2D, Flatten, Reshape, Activation");
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4, \"activation\": \"re\\nlu\"}}"),
                 "bad.json: layer 2 \"d\" (Dense): activation \"re?lu\": hetrain has linear, relu, "
                 "sigmoid, tanh, leaky_relu, elu, selu, swish, softplus, hard_sigmoid, gelu, "
                 "relu6, hard_swish, softmax (softmax as the last step)");
    // activity regularizer, constraint (weight regularizers: test_keras_train.c)
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4, \"activation\": \"softmax\", \"activity_regularizer\": "
                     "{\"class_name\": \"L2\", \"config\": {\"l2\": 0.01}}}}"),
                 "bad.json: layer 2 \"d\" (Dense): activity_regularizer: not supported (hetrain "
                 "adds no activity regularizers, constraints or adapters)");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3, \"bias_constraint\": {\"class_name\": \"NonNeg\"}}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): bias_constraint: not supported (hetrain adds "
                 "no activity regularizers, constraints or adapters)");
    // no final softmax
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4}}"),
                 "bad.json: layer 2 \"d\" (Dense): the network must end in a softmax over the "
                 "classes (Dense(..., "
                 "activation=\"softmax\"), Activation(\"softmax\") or Softmax), which hetrain "
                 "trains as its softmax cross-entropy, or in a sigmoid (binary cross-entropy: one "
                 "output, or k labels of a multi-label head)");
    keras_expect_error(seq(FLATTEN ", " DENSE_SOFTMAX ", {\"class_name\": \"Dropout\", \"config\": "
                     "{\"name\": \"x\", \"rate\": 0.5}}"),
                 "bad.json: layer 2 \"out\" (Dense): softmax before the last layer: hetrain reads "
                 "softmax only as the network's last step (its softmax cross-entropy)");
    // wrong types
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": "
                     "\"32\", \"kernel_size\": 3}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): filters: expected an integer, found a "
                 "string");
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4.5, \"activation\": \"softmax\"}}"),
                 "bad.json: layer 2 \"d\" (Dense): units: expected an integer, found a number");
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4, \"use_bias\": \"yes\", \"activation\": \"softmax\"}}"),
                 "bad.json: layer 2 \"d\" (Dense): use_bias: expected true or false, found a "
                 "string");
    keras_expect_error(seq("{\"class_name\": \"Dropout\", \"config\": {\"name\": \"x\", \"rate\": "
                     "[0.5]}}"),
                 "bad.json: layer 1 \"x\" (Dropout): rate: expected a number, found a list");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": [3, 5]}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): kernel_size [3, 5]: hetrain takes the same "
                 "size along both axes");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): kernel_size missing");
    // what hetrain lacks
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4, \"activation\": \"mish\"}}"),
                 "bad.json: layer 2 \"d\" (Dense): activation \"mish\": hetrain has linear, relu, "
                 "sigmoid, tanh, leaky_relu, elu, selu, swish, softplus, hard_sigmoid, gelu, "
                 "relu6, hard_swish, softmax (softmax as the last step)");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3, \"dilation_rate\": [2, 2]}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): dilation_rate 2: hetrain's convolutions are "
                 "dense (1)");
    keras_expect_error(seq("{\"class_name\": \"ReLU\", \"config\": {\"name\": \"r\", \"max_value\": "
                     "0.0}}"),
                 "bad.json: layer 1 \"r\" (ReLU): max_value 0: expected a number > 0");
    keras_expect_error(seq("{\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", "
                     "\"target_shape\": [4, 2]}}"),
                 "bad.json: layer 1 \"r\" (Reshape): target_shape [4,2] of a 1x8x8 (CxHxW) "
                 "tensor: hetrain reshapes only between 1 features and a 1x1 image of 1 channels");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3, \"kernel_initializer\": {\"class_name\": "
                     "\"Orthogonal\", \"config\": {\"gain\": 1.0}}}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): kernel_initializer: initializer "
                 "\"Orthogonal\" is not supported; hetrain has zeros, ones, constant, "
                 "random_uniform, random_normal, truncated_normal, glorot_uniform, glorot_normal, "
                 "he_uniform, he_normal, lecun_uniform, lecun_normal, variance_scaling");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3, \"kernel_initializer\": {\"class_name\": "
                     "\"VarianceScaling\", \"config\": {\"mode\": \"fan_sum\"}}}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): kernel_initializer: variance_scaling: mode "
                 "\"fan_sum\": expected fan_in, fan_out, fan_avg");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3, \"dtype\": {\"module\": \"keras\", \"class_name\": "
                     "\"DTypePolicy\", \"config\": {\"name\": \"mixed_float16\"}}}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): dtype \"mixed_float16\": hetrain computes in "
                 "float32");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"module\": \"my\", \"registered_name\": "
                     "\"my>Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 3}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): a custom layer (registered as my>Conv2D) is "
                 "not supported");
    // shapes Keras and hetrain would read differently; Dense on an image is Keras's on each
    // position's channels (a 1x1 convolution), whose softmax is no loss head
    keras_expect_error(seq("{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, "
                     "\"activation\": \"softmax\"}}"),
                 "bad.json: layer 1 \"d\" (Dense): softmax over a 4x8x8 (CxHxW) output: "
                 "hetrain's is over one vector of classes; put Flatten or GlobalAveragePooling2D "
                 "before it");
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
                     "\"filters\": 2, \"kernel_size\": 3}}"),
                 "bad.json: layer 2 \"c\" (Conv2D): expects an image (height, width, channels), "
                 "but its input has 1 axis");
    keras_expect_error(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                     "\"kernel_size\": 9}}"),
                 "bad.json: layer 1 \"c\" (Conv2D): kernel 9 does not fit its 8x8 input");
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 300, \"activation\": \"softmax\"}}"),
                 "bad.json: layer 2 \"d\" (Dense): softmax over 300 classes: hetrain takes "
                 "2..256");
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"InputLayer\", \"config\": {\"name\": \"i2\", "
                     "\"batch_input_shape\": [null, 4]}}"),
                 "bad.json: layer 2 \"i2\" (InputLayer): an InputLayer is read only as the first "
                 "layer");
    // Keras 3's build_config must agree with the shapes the layers before give
    keras_expect_error(seq(FLATTEN ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                     "\"units\": 4, \"activation\": \"softmax\"}, \"build_config\": "
                     "{\"input_shape\": [null, 63]}}"),
                 "bad.json: layer 2 \"d\" (Dense): build_config input_shape [null,63], but the "
                 "layers before it give [64]");
}

// channels_first input is hetrain's own layout; a Keras 2 model without an InputLayer takes its
// shape from the first layer; ReLU/Activation/Softmax layers, use_bias and rank-1 inputs.
static void test_variants(void **state) {
    (void)state;
    // DepthwiseConv2D (depth_multiplier 2, ReLU(6) as its activation's cap) and
    // SeparableConv2D (a depthwise convolution without bias, then a 1x1 one with it): Keras's
    // counts, (K*K*C*M + C*M) and (K*K*C*M + C*M*F + F).
    {
        model m;
        ht_error e = {{0}};
        const char *json =
            "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
            "\"DepthwiseConv2D\", \"config\": {\"name\": \"dw\", \"batch_input_shape\": [null, "
            "8, 8, 3], \"kernel_size\": 3, \"depth_multiplier\": 2, \"padding\": \"same\"}}, "
            "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"r\", \"max_value\": 6.0}}, "
            "{\"class_name\": \"SeparableConv2D\", \"config\": {\"name\": \"sep\", \"filters\": "
            "5, \"kernel_size\": 3, \"strides\": 2, \"activation\": \"relu\"}}, " FLATTEN ", "
            DENSE_SOFTMAX "]}}";
        if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e)) fail_msg("%s", e.msg);
        const layer *dw = &m.layers[0], *r6 = &m.layers[1], *sd = &m.layers[2], *sp = &m.layers[3];
        assert_int_equal(dw->kind, LAYER_DWCONV);
        assert_int_equal(dw->oc, 6);
        assert_int_equal(dw->n_w + dw->n_b, 3 * 3 * 6 + 6);
        assert_int_equal(r6->kind, LAYER_RELU6);
        assert_true(r6->alpha == 6.0f);
        assert_int_equal(sd->kind, LAYER_DWCONV);
        assert_string_equal(sd->name, "sep_dw");
        assert_int_equal(sd->n_w + sd->n_b, 3 * 3 * 6);
        assert_int_equal(sp->kind, LAYER_CONV2D);
        assert_string_equal(sp->name, "sep");
        assert_int_equal(sp->n_w + sp->n_b, 6 * 5 + 5);
        assert_int_equal(sp->oh, 3); // (8 - 3) / 2 + 1
        assert_int_equal(m.layers[4].kind, LAYER_RELU);
        model_free(&m);
    }
    keras_expect_ok("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
              "\"Conv2D\", \"config\": {\"name\": \"c\", \"batch_input_shape\": [null, 3, 10, 6], "
              "\"filters\": 2, \"kernel_size\": 3, \"data_format\": \"channels_first\"}}, "
              FLATTEN ", " DENSE_SOFTMAX "]}}",
              3 * 9 * 2 + 2 + 2 * 8 * 4 * 4 + 4);
    model m;
    ht_error e = {{0}};
    const char *json =
        "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": \"Conv2D\", "
        "\"config\": {\"name\": \"c\", \"batch_input_shape\": [null, 10, 6, 3], \"filters\": 2, "
        "\"kernel_size\": 3, \"use_bias\": false}}, {\"class_name\": \"ReLU\", \"config\": "
        "{\"name\": \"r\", \"negative_slope\": 0.0}}, {\"class_name\": \"Activation\", \"config\": "
        "{\"name\": \"a\", \"activation\": \"linear\"}}, " FLATTEN ", {\"class_name\": \"Dense\", "
        "\"config\": {\"name\": \"d\", \"units\": 5}}, {\"class_name\": \"Softmax\", \"config\": "
        "{\"name\": \"sm\", \"axis\": -1}}]}}";
    if (model_init_keras_text(&m, json, strlen(json), "v.json", &e) < 0) fail_msg("%s", e.msg);
    assert_true(m.in_c == 3 && m.in_h == 10 && m.in_w == 6 && m.n_classes == 5);
    assert_int_equal(m.n_layers, 4); // conv, relu, dense, softmax: linear and Flatten add none
    assert_int_equal(m.layers[0].n_b, 0);
    assert_int_equal(m.n_params, 3 * 9 * 2 + 2 * 8 * 4 * 5 + 5);
    assert_string_equal(m.layers[3].name, "sm");
    model_free(&m);
    // a plain vector input (an MLP): [null, 20]
    keras_expect_ok("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
              "\"Dense\", \"config\": {\"name\": \"d\", \"batch_input_shape\": [null, 20], "
              "\"units\": 3, \"activation\": \"softmax\"}}]}}",
              20 * 3 + 3);
}

// ---- initialisers ----------------------------------------------------------------------------

typedef struct moments {
    double mean, std, min, max;
} moments;

static moments moments_of(const float *p, size_t n) {
    moments s = {0, 0, INFINITY, -INFINITY};
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        sum += p[i];
        if (p[i] < s.min) s.min = p[i];
        if (p[i] > s.max) s.max = p[i];
    }
    s.mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += (p[i] - s.mean) * (p[i] - s.mean);
    s.std = sqrt(sq / (double)n);
    return s;
}

// Sampling error: the mean of n draws is off by std/sqrt(n) (one standard error), the std by a
// relative sqrt((kurtosis - 1) / 4n), at most sqrt(1/2n) for the distributions here (normal:
// kurtosis 3; truncated normal and uniform below). Allowed: 5 standard errors, which a correct
// draw exceeds with probability < 1e-6 and which a wrong fan (a factor of 3 or more, or the
// 0.88 truncation correction missing) misses by far at n >= 20000.
#define SE_COUNT 5.0

// Checks n draws against a distribution of the given mean and std, within [lo, hi]; also that
// the draws reach within 1% of bounds that the distribution reaches (uniform, truncated).
static void check_draws(const float *p, size_t n, double mean, double std, double lo, double hi,
                        int reaches, const char *what) {
    moments s = moments_of(p, n);
    double se_mean = std / sqrt((double)n), se_std = std * sqrt(0.5 / (double)n);
    if (fabs(s.mean - mean) > SE_COUNT * se_mean || fabs(s.std - std) > SE_COUNT * se_std ||
        s.min < lo || s.max > hi ||
        (reaches && (s.min > lo + 0.01 * (hi - lo) || s.max < hi - 0.01 * (hi - lo))))
        fail_msg("%s: n %zu mean %g (want %g +- %g) std %g (want %g +- %g) range [%g, %g] "
                 "(want within [%g, %g])", what, n, s.mean, mean, SE_COUNT * se_mean, s.std, std,
                 SE_COUNT * se_std, s.min, s.max, lo, hi);
}

// Two one-layer models: a conv layer (fan_in 9*48 = 432, fan_out 9*96 = 864, 41472 weights)
// and a dense layer with one input (fan_in 1, fan_out 20000) whose bias has 20000 values.
static void init_models(model *conv, model *dense, init_desc w, init_desc b) {
    ht_error e = {{0}};
    assert_int_equal(model_begin(conv, "conv", 48, 10, 10, 2, &e), 0);
    layer_spec c = {.kind = LAYER_CONV2D, .filters = 96, .k = 3, .w_init = w.kind,
                    .w_arg = w.arg, .w_arg2 = w.arg2, .w_vs = w.vs, .b_init = b.kind,
                    .b_arg = b.arg, .b_arg2 = b.arg2, .b_vs = b.vs};
    assert_int_equal(model_add(conv, &c, &e), 0);
    assert_int_equal(model_begin(dense, "dense", 1, 1, 1, 2, &e), 0);
    layer_spec d = {.kind = LAYER_DENSE, .units = 20000, .w_init = w.kind, .w_arg = w.arg,
                    .w_arg2 = w.arg2, .w_vs = w.vs, .b_init = b.kind, .b_arg = b.arg,
                    .b_arg2 = b.arg2, .b_vs = b.vs};
    assert_int_equal(model_add(dense, &d, &e), 0);
}

static float *init_draw(const model *m) {
    float *p = malloc(m->n_params * sizeof *p);
    model_init_params(m, p, 11);
    return p;
}

typedef struct init_case {
    const char *what;
    init_desc d;
    // expected std from (fan_in, fan_out); truncated: bounds at 2 stddev before the
    // correction; uniform: bounds at sqrt(3) std
    double mean;
    int shape; // 0 normal, 1 truncated normal (Keras's 0.8796 correction), 2 uniform,
               // 3 truncated normal of stddev arg (TruncatedNormal: no correction)
    double scale;
    int mode; // INIT_VS_FAN_*; -1: std given as scale
} init_case;

static double fan_of(int mode, double fi, double fo) {
    return mode == INIT_VS_FAN_IN ? fi : mode == INIT_VS_FAN_OUT ? fo : (fi + fo) / 2;
}

static void check_case(const init_case *c, const float *p, size_t n, double fi, double fo,
                       const char *tensor) {
    char what[96];
    snprintf(what, sizeof what, "%s %s", c->what, tensor);
    double std = c->mode < 0 ? c->scale : sqrt(c->scale / fan_of(c->mode, fi, fo));
    switch (c->shape) {
    case 0:
        check_draws(p, n, c->mean, std, -INFINITY, INFINITY, 0, what);
        break;
    case 1: // the stddev drawn is std / 0.8796..., truncated at twice that
        check_draws(p, n, c->mean, std, c->mean - 2 * std / INIT_TRUNC_STDDEV,
                    c->mean + 2 * std / INIT_TRUNC_STDDEV, 1, what);
        break;
    case 2:
        check_draws(p, n, c->mean, std, c->mean - sqrt(3) * std, c->mean + sqrt(3) * std, 1,
                    what);
        break;
    case 3:
        check_draws(p, n, c->mean, std * INIT_TRUNC_STDDEV, c->mean - 2 * std,
                    c->mean + 2 * std, 1, what);
        break;
    }
}

static void test_initializers(void **state) {
    (void)state;
    const init_case cases[] = {
        {"glorot_uniform", {INIT_GLOROT_UNIFORM, 0, 0, 0}, 0, 2, 1, INIT_VS_FAN_AVG},
        {"glorot_normal", {INIT_GLOROT_NORMAL, 0, 0, 0}, 0, 1, 1, INIT_VS_FAN_AVG},
        {"he_uniform", {INIT_HE_UNIFORM, 0, 0, 0}, 0, 2, 2, INIT_VS_FAN_IN},
        {"he_normal", {INIT_HE_NORMAL, 0, 0, 0}, 0, 1, 2, INIT_VS_FAN_IN},
        {"lecun_uniform", {INIT_LECUN_UNIFORM, 0, 0, 0}, 0, 2, 1, INIT_VS_FAN_IN},
        {"lecun_normal", {INIT_LECUN_NORMAL, 0, 0, 0}, 0, 1, 1, INIT_VS_FAN_IN},
        {"variance_scaling(3, fan_out, untruncated_normal)",
         {INIT_VARIANCE_SCALING, 3, 0, INIT_VS_FAN_OUT | INIT_VS_UNTRUNCATED}, 0, 0, 3,
         INIT_VS_FAN_OUT},
        {"variance_scaling(0.5, fan_avg, uniform)",
         {INIT_VARIANCE_SCALING, 0.5f, 0, INIT_VS_FAN_AVG | INIT_VS_UNIFORM}, 0, 2, 0.5,
         INIT_VS_FAN_AVG},
        {"variance_scaling(2, fan_out, truncated_normal)",
         {INIT_VARIANCE_SCALING, 2, 0, INIT_VS_FAN_OUT | INIT_VS_TRUNCATED}, 0, 1, 2,
         INIT_VS_FAN_OUT},
        {"random_uniform(-0.1, 0.3)", {INIT_RANDOM_UNIFORM, -0.1f, 0.3f, 0}, 0.1f, 2,
         0.4f / sqrt(12), -1},
        {"random_normal(0.5, 0.2)", {INIT_RANDOM_NORMAL, 0.2f, 0.5f, 0}, 0.5f, 0, 0.2f, -1},
        {"truncated_normal(0.5, 0.2)", {INIT_TRUNCATED_NORMAL, 0.2f, 0.5f, 0}, 0.5f, 3, 0.2f,
         -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const init_case *c = &cases[i];
        model mc, md;
        init_models(&mc, &md, c->d, c->d);
        float *pc = init_draw(&mc), *pd = init_draw(&md);
        const layer *conv = &mc.layers[0], *dense = &md.layers[0];
        check_case(c, pc + conv->w_off, conv->n_w, 9 * 48, 9 * 96, "conv weight");
        check_case(c, pd + dense->w_off, dense->n_w, 1, 20000, "dense weight");
        // Keras's fans of a bias are its length
        check_case(c, pd + dense->b_off, dense->n_b, 20000, 20000, "dense bias");
        free(pc);
        free(pd);
        model_free(&mc);
        model_free(&md);
    }
    // constants
    const init_desc consts[] = {{INIT_ZEROS, 0, 0, 0}, {INIT_ONES, 0, 0, 0},
                                {INIT_CONSTANT, 0.25f, 0, 0}};
    const float value[] = {0, 1, 0.25f};
    for (int i = 0; i < 3; i++) {
        model mc, md;
        init_models(&mc, &md, consts[i], consts[i]);
        for (int k = 0; k < 2; k++) {
            const model *m = k ? &md : &mc;
            float *p = init_draw(m);
            for (size_t j = 0; j < m->n_params; j++)
                if (p[j] != value[i])
                    fail_msg("%s: p[%zu] = %g", init_kind_names[consts[i].kind], j,
                             (double)p[j]);
            free(p);
        }
        model_free(&mc);
        model_free(&md);
    }
}

// Keras's names and configs map to the kinds above; Keras's defaults fill what is absent.
static int no_args(void *ctx, const char *key, double *num, const char **str) {
    (void)ctx, (void)key, (void)num, (void)str;
    return 0;
}

static void test_init_names(void **state) {
    (void)state;
    init_desc d;
    char why[300];
    static const struct {
        const char *name;
        init_kind kind;
        float arg, arg2;
    } names[] = {
        {"GlorotUniform", INIT_GLOROT_UNIFORM, 0, 0}, {"glorot_normal", INIT_GLOROT_NORMAL, 0, 0},
        {"HeNormal", INIT_HE_NORMAL, 0, 0},           {"he_uniform", INIT_HE_UNIFORM, 0, 0},
        {"LecunNormal", INIT_LECUN_NORMAL, 0, 0},     {"Zeros", INIT_ZEROS, 0, 0},
        {"Ones", INIT_ONES, 0, 0},                    {"Constant", INIT_CONSTANT, 0, 0},
        {"RandomUniform", INIT_RANDOM_UNIFORM, -0.05f, 0.05f},
        {"uniform", INIT_RANDOM_UNIFORM, -0.05f, 0.05f},
        {"RandomNormal", INIT_RANDOM_NORMAL, 0.05f, 0},
        {"TruncatedNormal", INIT_TRUNCATED_NORMAL, 0.05f, 0},
        {"VarianceScaling", INIT_VARIANCE_SCALING, 1, 0},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (model_init_keras_name(&d, names[i].name, no_args, NULL, why, sizeof why))
            fail_msg("%s: %s", names[i].name, why);
        if (d.kind != names[i].kind || d.arg != names[i].arg || d.arg2 != names[i].arg2)
            fail_msg("%s: kind %d arg %g arg2 %g", names[i].name, (int)d.kind, (double)d.arg,
                     (double)d.arg2);
    }
    assert_int_equal(model_init_keras_name(&d, "VarianceScaling", no_args, NULL, why, sizeof why),
                     0);
    assert_int_equal(d.vs, INIT_VS_FAN_IN | INIT_VS_TRUNCATED); // Keras's defaults
    assert_int_equal(model_init_keras_name(&d, "Orthogonal", no_args, NULL, why, sizeof why), -1);
    assert_non_null(strstr(why, "initializer \"Orthogonal\" is not supported"));
}

// ---- Keras's names in the config format ------------------------------------------------------

static void test_config_keras_names(void **state) {
    (void)state;
    char *dir = test_tmpdir("keras-cfg");
    // cnn3 as Keras would spell it; Flatten is a no-op, like Keras's.
    const char *cfg =
        "[net]\ninput = 1x28x28\noptimizer = SGD\nlearning_rate = 0.01\nbatch_size = 64\n"
        "validation_split = 0.1\n"
        "[Conv2D]\nfilters = 32\nkernel_size = 3\npadding = same\nactivation = relu\n"
        "kernel_initializer = GlorotUniform\n"
        "[Conv2D]\nfilters = 48\nkernel_size = 3\nstrides = 1\npadding = same\n"
        "activation = relu\n"
        "[MaxPooling2D]\npool_size = 2\n"
        "[Conv2D]\nfilters = 32\nkernel_size = 3\npadding = same\n[ReLU]\n"
        "[MaxPooling2D]\npool_size = 2\nstrides = 2\n[Flatten]\n"
        "[Dense]\nunits = 128\nactivation = relu\nkernel_initializer = lecun_uniform\n"
        "bias_initializer = zeros\n[Dropout]\nrate = 0.25\n"
        "[Dense]\nunits = 128\nkernel_initializer = lecun_uniform\n[Activation]\n"
        "activation = relu\n[Dropout]\nrate = 0.25\n"
        "[Dense]\nunits = 10\nkernel_initializer = lecun_uniform\nactivation = softmax\n";
    char *path = test_write_file(dir, "keras.cfg", cfg, strlen(cfg));
    model a, b;
    load(&a, path);
    load(&b, "cnn3");
    same_layers(&a, &b, path);
    assert_true(a.setup.optim == OPTIM_SGD && a.setup.lr == 0.01f && a.setup.batch == 64 &&
                fabsf(a.setup.val_split - 0.1f) < 1e-7f);
    model_free(&a);
    model_free(&b);
    free(path);

    // The CIFAR-shaped network in Keras's words: the layers its Keras 3 JSON gives.
    cfg = "[net]\ninput = 3x32x32\n"
          "[Conv2D]\nfilters = 16\nkernel_size = 3\npadding = same\nactivation = relu\n"
          "kernel_initializer = he_normal\n"
          "[Conv2D]\nfilters = 32\nkernel_size = 3\nstrides = 2\npadding = same\n"
          "activation = relu\nkernel_initializer = HeUniform\n"
          "[AveragePooling2D]\npool_size = 2\n"
          "[Conv2D]\nfilters = 32\nkernel_size = 3\npadding = valid\nuse_bias = false\n"
          "kernel_initializer = VarianceScaling(scale = 2.0, mode = fan_out, "
          "distribution = untruncated_normal, seed = 1)\n"
          "[ReLU]\n[GlobalAveragePooling2D]\n"
          "[Dense]\nunits = 64\nactivation = relu\nkernel_initializer = glorot_normal\n"
          "[Dropout]\nrate = 0.3\n"
          "[Dense]\nunits = 10\nkernel_initializer = random_uniform(minval = -0.05, "
          "maxval = 0.05)\n[Softmax]\n";
    path = test_write_file(dir, "cifar.cfg", cfg, strlen(cfg));
    load(&a, path);
    load(&b, KDIR "cifar_k3.json");
    same_layers(&a, &b, path);
    model_free(&a);
    model_free(&b);
    free(path);

    // Initialisers with their arguments, and [Softmax] as the last section.
    cfg = "[net]\ninput = 1x4x4\nclasses = 3\noptimizer = Adam\n"
          "[Dense]\nunits = 3\nkernel_initializer = variance_scaling(scale = 2, mode = fan_out, "
          "distribution = uniform)\nbias_initializer = random_normal(mean = 1, stddev = 0.5)\n"
          "[Softmax]\n";
    path = test_write_file(dir, "init.cfg", cfg, strlen(cfg));
    load(&a, path);
    assert_int_equal(a.setup.optim, OPTIM_ADAM);
    assert_int_equal(a.layers[0].w_init, INIT_VARIANCE_SCALING);
    assert_true(a.layers[0].w_arg == 2 && a.layers[0].w_vs == (INIT_VS_FAN_OUT | INIT_VS_UNIFORM));
    assert_int_equal(a.layers[0].b_init, INIT_RANDOM_NORMAL);
    assert_true(a.layers[0].b_arg == 0.5f && a.layers[0].b_arg2 == 1.0f);
    assert_int_equal(a.layers[1].kind, LAYER_SOFTMAX_XENT);
    model_free(&a);
    free(path);

    // init_arg/bias_arg win over an init's defaults whichever comes first.
    cfg = "[net]\ninput = 1x4x4\nclasses = 3\n[Dense]\nunits = 3\ninit_arg = 0.5\n"
          "kernel_initializer = constant\nbias_initializer = truncated_normal\nbias_arg = 0.2\n"
          "[Softmax]\n";
    path = test_write_file(dir, "args.cfg", cfg, strlen(cfg));
    load(&a, path);
    assert_true(a.layers[0].w_init == INIT_CONSTANT && a.layers[0].w_arg == 0.5f);
    assert_true(a.layers[0].b_init == INIT_TRUNCATED_NORMAL && a.layers[0].b_arg == 0.2f);
    model_free(&a);
    free(path);

    // Errors name the line as for every key.
    cfg = "[net]\ninput = 1x4x4\n[Dense]\nunits = 3\nkernel_initializer = orthogonal\n";
    path = test_write_file(dir, "bad.cfg", cfg, strlen(cfg));
    ht_error e = {{0}};
    assert_int_equal(model_init(&a, path, &e), -1);
    assert_non_null(strstr(e.msg, "bad.cfg:5: [Dense] kernel_initializer: initializer "
                                  "\"orthogonal\" is not supported"));
    free(path);
    cfg = "[net]\ninput = 1x4x4\n[Dense]\nunits = 3\n"
          "kernel_initializer = random_uniform(low = 1)\n";
    path = test_write_file(dir, "bad2.cfg", cfg, strlen(cfg));
    assert_int_equal(model_init(&a, path, &e), -1);
    assert_non_null(strstr(e.msg, "bad2.cfg:5: [Dense] kernel_initializer: random_uniform takes "
                                  "no argument \"low\""));
    free(path);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_networks),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_keras_param_counts),
        cmocka_unit_test(test_cifar_shapes),
        cmocka_unit_test(test_keras_activations),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_initializers),
        cmocka_unit_test(test_init_names),
        cmocka_unit_test(test_config_keras_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
