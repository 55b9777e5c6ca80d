// Functional Keras models and mixed data_format (keras_graph.c, keras_layers.c): a Functional
// model whose graph is a single path, as real Keras 3 and Keras 2 wrote it
// (tools/keras_graph_fixture.py), reads as the same network built as Sequential, with Keras's
// parameter count; a residual Add reads as a graph with Keras's count; other merges, shared
// layers, second inputs or outputs, layers out of order and outputs nothing reads are refused
// with one line naming the layer; layers of the other data_format than their model's are read
// between permutes, with Keras's shapes and counts.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/keras.h"
#include "nn/model.h"
#include "tests/lib/keras_expect.h"
#include "tests/lib/testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"

static void load(model *m, const char *path) {
    ht_error e = {{0}};
    if (model_init(m, path, &e) < 0) fail_msg("%s: %s", path, e.msg);
}

static void expect_file_error(const char *file, const char *want) {
    char path[512];
    snprintf(path, sizeof path, KDIR "%s", file);
    model m;
    ht_error e = {{0}};
    if (model_init(&m, path, &e) == 0) fail_msg("%s: accepted", file);
    const char *msg = strstr(e.msg, file); // after the fixture folder
    if (!msg || strcmp(msg, want)) fail_msg("%s:\n  \"%s\"\nexpected\n  \"%s\"", file, e.msg, want);
    assert_null(strchr(e.msg, '\n'));
}

// The single path reads as the Sequential network (mnist_small, tools/keras_models.py): the
// same layers, names, shapes, initialisers, tensors; Keras's parameter count for each file of
// graph_params.txt hetrain reads.
static void test_functional(void **state) {
    (void)state;
    for (int v = 2; v <= 3; v++) {
        char a_path[256], b_path[256];
        snprintf(a_path, sizeof a_path, KDIR "functional_k%d.json", v);
        snprintf(b_path, sizeof b_path, KDIR "mnist_small_k%d.json", v);
        model a, b;
        load(&a, a_path);
        load(&b, b_path);
        snprintf(a_path, sizeof a_path, "functional_k%d", v);
        assert_string_equal(a.name, a_path); // Keras's default names say less than the file's
        assert_int_equal(a.n_layers, b.n_layers);
        assert_int_equal(a.n_params, b.n_params);
        assert_int_equal(a.n_classes, b.n_classes);
        for (int l = 0; l < a.n_layers; l++) {
            const layer *x = &a.layers[l], *y = &b.layers[l];
            if (x->kind != y->kind || strcmp(x->name, y->name) || x->oc != y->oc ||
                x->oh != y->oh || x->ow != y->ow || x->k != y->k || x->stride != y->stride ||
                x->rate != y->rate || x->w_init != y->w_init || x->w_off != y->w_off ||
                x->n_w != y->n_w || x->n_b != y->n_b || x->frozen || x->w_l2 != 0)
                fail_msg("k%d layer %d: %s differs from %s", v, l, x->name, y->name);
        }
        model_free(&a);
        model_free(&b);
    }
    char *list = test_read_file(KDIR "graph_params.txt", NULL);
    assert_non_null(list);
    int n = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char file[128], path[512];
        size_t want;
        assert_int_equal(sscanf(line, "%127s %zu", file, &want), 2);
        if (strncmp(file, "functional_", 11) && strncmp(file, "add_", 4) &&
            strncmp(file, "concat_", 7))
            continue; // the others are refused, below
        snprintf(path, sizeof path, KDIR "%s", file);
        model m;
        load(&m, path);
        assert_int_equal(m.n_params, want);
        model_free(&m);
        n++;
    }
    assert_int_equal(n, 6);
    free(list);
    // The residual Add: conv2d_1 reads conv2d, add both; each Conv2D's output is its relu's
    // (activation="relu" appends it).
    for (int v = 2; v <= 3; v++) {
        char path[256];
        snprintf(path, sizeof path, KDIR "add_k%d.json", v);
        model m;
        load(&m, path);
        int add = model_find_layer(&m, "add");
        assert_true(add >= 0 && m.layers[add].kind == LAYER_ADD);
        assert_int_equal(m.layers[add].n_in, 2);
        assert_int_equal(m.layers[add].in[0], model_find_layer(&m, "conv2d_relu"));
        assert_int_equal(m.layers[add].in[1], model_find_layer(&m, "conv2d_1_relu"));
        assert_int_equal(m.layers[model_find_layer(&m, "conv2d_1")].in[0],
                         model_find_layer(&m, "conv2d_relu"));
        model_free(&m);
    }
}


// Real Keras's graphs that are not one path.
static void test_refused_fixtures(void **state) {
    (void)state;
    char want[512];
    for (int v = 2; v <= 3; v++) {
        char file[64];
        const char *in0 = v == 3 ? "input_layer" : "input_1";
        const char *in1 = v == 3 ? "input_layer_1" : "input_2";
        snprintf(file, sizeof file, "two_inputs_k%d.json", v);
        snprintf(want, sizeof want, "%s: layer 1 \"%s\" (InputLayer): a second input (the model "
                 "has 2): hetrain reads models of one input", file, in1);
        (void)in0;
        expect_file_error(file, want);
        snprintf(file, sizeof file, "two_outputs_k%d.json", v);
        snprintf(want, sizeof want, "%s: layer 3 \"dense_1\" (Dense): one of the model's 2 "
                 "outputs: hetrain trains a model of one output", file);
        expect_file_error(file, want);
    }
}

// A Dense called twice in a row (real Keras's shared_k*.json): its second call computes with
// the first's parameters, which Keras's count has once.
static void test_shared_fixtures(void **state) {
    (void)state;
    for (int v = 2; v <= 3; v++) {
        char path[512];
        snprintf(path, sizeof path, KDIR "shared_k%d.json", v);
        model m;
        load(&m, path);
        const int d = model_find_layer(&m, "dense"), again = model_find_layer(&m, "dense-1");
        assert_true(d >= 0 && again > d);
        assert_int_equal(m.layers[again].share, d + 1);
        assert_int_equal(m.layers[again].w_off, m.layers[d].w_off);
        assert_int_equal(m.n_params, 16 * 16 + 16 + 16 * 10 + 10);
        model_free(&m);
    }
}

// A channels_first MaxPooling2D in a channels_last model (real Keras's fixtures): read as Keras
// computes it, between permutes, with Keras's shapes (Keras pools the (26, 26, 8) tensor's width
// and channels into (26, 13, 4), what tools/keras_graph_fixture.py checked by running it) and
// parameter count. (Its outputs against Keras's: tests/io/test_kerash5.c.)
static void test_mixed_fixtures(void **state) {
    (void)state;
    for (int v = 2; v <= 3; v++) {
        char path[512];
        snprintf(path, sizeof path, KDIR "mixed_k%d.json", v);
        model m;
        ht_error e;
        if (model_init_keras(&m, path, &e) < 0) fail_msg("%s", e.msg);
        assert_int_equal(m.n_params, 13610);
        int l = model_find_layer(&m, "max_pooling2d");
        assert_true(l > 0 && l + 1 < m.n_layers);
        const layer *in = &m.layers[l - 1], *P = &m.layers[l], *out = &m.layers[l + 1];
        assert_int_equal(in->kind, LAYER_PERMUTE);
        assert_int_equal(out->kind, LAYER_PERMUTE);
        // (8, 26, 26) -> (26, 26, 8): the pooling's channels are the tensor's height
        assert_int_equal(P->c, 26), assert_int_equal(P->h, 26), assert_int_equal(P->w, 8);
        // Keras's (26, 13, 4) (H, W, C) is hetrain's (4, 26, 13)
        assert_int_equal(out->oc, 4), assert_int_equal(out->oh, 26), assert_int_equal(out->ow, 13);
        model_free(&m);
    }
}

// ---- hand-written graphs ----------------------------------------------------------------------

static const char *const input3 =
    "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"name\": \"in\", "
    "\"batch_shape\": [null, 8]}, \"inbound_nodes\": []}";

// A Keras 3 tensor from layer `from`.
static void tensor3(char *buf, size_t cap, const char *from) {
    snprintf(buf, cap, "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, "
             "8], \"keras_history\": [\"%s\", 0, 0]}}", from);
}

// A Keras 3 Dense layer `name` called on `from` with `kwargs`.
static void dense3(char *buf, size_t cap, const char *name, const char *from, int units,
                   const char *act, const char *kwargs) {
    char t[256];
    tensor3(t, sizeof t, from);
    snprintf(buf, cap, "{\"class_name\": \"Dense\", \"name\": \"%s\", \"config\": {\"name\": "
             "\"%s\", \"units\": %d, \"activation\": \"%s\"}, \"inbound_nodes\": [{\"args\": "
             "[%s], \"kwargs\": {%s}}]}", name, name, units, act, t, kwargs);
}

// A Keras 3 Functional model of `layers` with its input and output.
static char *functional3(const char *layers, const char *inputs, const char *outputs) {
    static char buf[8192];
    snprintf(buf, sizeof buf, "{\"class_name\": \"Functional\", \"config\": {\"name\": "
             "\"net\", \"layers\": [%s], \"input_layers\": %s, \"output_layers\": %s}}", layers,
             inputs, outputs);
    return buf;
}

// A Keras 3 layer `name` of class `cls` (module: a layer's or an operation's) called on args.
static void layer3(char *buf, size_t cap, const char *module, const char *cls, const char *name,
                   const char *cfg, const char *args) {
    snprintf(buf, cap, "{\"module\": \"%s\", \"class_name\": \"%s\", \"name\": \"%s\", "
             "\"config\": {\"name\": \"%s\"%s}, \"inbound_nodes\": [{\"args\": [%s], "
             "\"kwargs\": {}}]}", module, cls, name, name, cfg, args);
}

// in -> layer `cls` (cfg, its call's args around the tensor: pre, post) -> Dense softmax.
static char *one_layer(const char *module, const char *cls, const char *cfg, const char *pre,
                       const char *post) {
    static char layers[4096];
    char t[256], args[512], x[1024], d[1024];
    tensor3(t, sizeof t, "in");
    snprintf(args, sizeof args, "%s%s%s", pre, t, post);
    layer3(x, sizeof x, module, cls, "x", cfg, args);
    dense3(d, sizeof d, "d", "x", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, x, d);
    return functional3(layers, "[\"in\", 0, 0]", "[\"d\", 0, 0]");
}

// Keras 3's operations of a tensor and a number (x + 3.0, x * (1 / 6), as MobileNetV3's hard
// sigmoid) and Rescaling read as the rescale family; their refusals; Dropout's noise_shape;
// Normalization.
static void test_ops_rescale_dropout(void **state) {
    (void)state;
    static const char ops[] = "keras.src.ops.numpy", lay[] = "keras.layers";
    static const struct {
        const char *module, *cls, *cfg, *pre, *post;
        float scale, offset;
    } ok[] = {
        {lay, "Rescaling", ", \"scale\": 0.00784313725490196, \"offset\": -1.0", "", "",
         0.00784313725490196f, -1.0f},
        {lay, "Rescaling", ", \"scale\": 2", "", "", 2.0f, 0.0f},
        {ops, "Add", "", "", ", 3.0", 1.0f, 3.0f},
        {ops, "Add", "", "3, ", "", 1.0f, 3.0f},
        {ops, "Multiply", "", "", ", 0.16666666666666666", 1.0f / 6, 0.0f},
        {ops, "Subtract", "", "", ", 0.5", 1.0f, -0.5f},
        {ops, "Subtract", "", "0.5, ", "", -1.0f, 0.5f},
        {ops, "TrueDivide", "", "", ", 4.0", 0.25f, 0.0f},
        {ops, "Divide", "", "", ", -2", -0.5f, 0.0f},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const char *json = one_layer(ok[i].module, ok[i].cls, ok[i].cfg, ok[i].pre, ok[i].post);
        model m;
        ht_error e = {{0}};
        if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0)
            fail_msg("%s: %s", ok[i].cls, e.msg);
        assert_int_equal(m.layers[0].kind, LAYER_RESCALE);
        if (m.layers[0].scale != ok[i].scale || m.layers[0].offset != ok[i].offset)
            fail_msg("%s (case %zu): x * %g + %g, want x * %g + %g", ok[i].cls, i,
                     (double)m.layers[0].scale, (double)m.layers[0].offset,
                     (double)ok[i].scale, (double)ok[i].offset);
        assert_int_equal(m.n_params, 8 * 4 + 4);
        model_free(&m);
    }
    keras_expect_error(one_layer(ops, "Divide", "", "2.0, ", ""),
                       "bad.json: layer 1 \"x\" (Divide): Divide of a number by a tensor is not "
                       "supported; hetrain divides a tensor by a number");
    keras_expect_error(one_layer(ops, "Divide", "", "", ", 0"), "bad.json: layer 1 \"x\" (Divide): "
                       "Divide by 0");
    keras_expect_error(one_layer(ops, "Power", "", "", ", 2.0"),
                       "bad.json: layer 1 \"x\" (Power): the operation Power is not supported; "
                       "hetrain reads Add, Subtract, Multiply and Divide of a tensor and a number, "
                       "and Add, Subtract and Multiply of two tensors");
    keras_expect_error(one_layer(ops, "Add", "", "1.0, ", ", 2.0"),
                       "bad.json: layer 1 \"x\" (Add): Add: expected a tensor and one finite "
                       "number");
    keras_expect_error(one_layer(lay, "Rescaling", ", \"scale\": [1, 2]", "", ""),
                       "bad.json: layer 1 \"x\" (Rescaling): scale: expected a number (hetrain "
                       "rescales every channel alike), found [1,2]");
    // Dropout: one draw a sample for noise_shape (None, 1, ...), else refused.
    const char *json = one_layer(lay, "Dropout", ", \"rate\": 0.2, \"noise_shape\": [null, 1]",
                                 "", "");
    model m;
    ht_error e = {{0}};
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(m.layers[0].kind, LAYER_DROPOUT);
    assert_int_equal(m.layers[0].drop_sample, 1);
    model_free(&m);
    json = one_layer(lay, "Dropout", ", \"rate\": 0.2, \"noise_shape\": null", "", "");
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(m.layers[0].drop_sample, 0);
    model_free(&m);
    keras_expect_error(one_layer(lay, "Dropout", ", \"rate\": 0.2, \"noise_shape\": [null, 8]",
                                 "", ""),
                       "bad.json: layer 1 \"x\" (Dropout): noise_shape [null,8]: hetrain drops "
                       "each element on its own (none) or whole samples ([null, 1, 1, 1])");
    // Normalization over the features: its mean, variance and count are state Keras counts.
    json = one_layer(lay, "Normalization", ", \"axis\": [-1], \"invert\": true, \"mean\": null",
                     "", "");
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(m.layers[0].kind, LAYER_NORMALIZE);
    assert_int_equal(m.layers[0].invert, 1);
    assert_int_equal(m.n_state, 2 * 8 + 1);
    assert_int_equal(model_keras_uncounted(&m), 0);
    assert_true(m.layers[0].frozen); // constants: no step changes them
    model_free(&m);
    keras_expect_error(one_layer(lay, "Normalization", ", \"axis\": [0]", "", ""),
                       "bad.json: layer 1 \"x\" (Normalization): axis 0: hetrain normalises over "
                       "the features (axis -1 or 1)");
    // Its mean and variance given as constants (ConvNeXt's): an image's channels' (test_keras_apps
    // reads ConvNeXtTiny's), or refused naming what is wrong.
    keras_expect_error(one_layer(lay, "Normalization", ", \"mean\": [1, 2], \"variance\": [3, 4]",
                                 "", ""),
                       "bad.json: layer 1 \"x\" (Normalization): 2 means and variances for 8 "
                       "channels: expected one for each channel, or one for all");
    keras_expect_error(one_layer(lay, "Normalization", ", \"mean\": 0.5, \"variance\": 4", "", ""),
                       "bad.json: layer 1 \"x\" (Normalization): 8 channels: a normalize layer "
                       "with constants takes up to 4 (an image's); give its mean and variance as "
                       "weights");
    keras_expect_error(one_layer(lay, "Normalization", ", \"mean\": [1, 2]", "", ""),
                       "bad.json: layer 1 \"x\" (Normalization): 2 means and 0 variances: Keras "
                       "takes both or neither");
    keras_expect_error(one_layer(lay, "Normalization",
                                 ", \"mean\": [1, \"a\"], \"variance\": [1, 2]", "", ""),
                       "bad.json: layer 1 \"x\" (Normalization): mean: expected a number or a "
                       "list of numbers, found [1,\"a\"]");
}

static void test_graph_errors(void **state) {
    (void)state;
    char a[1024], b[1024], layers[4096];
    // The frame: in -> a -> b (softmax); Keras 3's recorded training argument is let be.
    dense3(a, sizeof a, "a", "in", 8, "relu", "\"training\": false");
    dense3(b, sizeof b, "b", "a", 4, "softmax", "\"mask\": null");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_ok(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"), 8 * 8 + 8 + 8 * 4 + 4);
    // Keras 2's spelling: the class Model, [[layer, node, tensor, kwargs]] calls.
    keras_expect_ok("{\"class_name\": \"Model\", \"keras_version\": \"2.2.4\", \"config\": {\"name\": "
              "\"model_1\", \"layers\": [{\"class_name\": \"InputLayer\", \"name\": \"i\", "
              "\"config\": {\"batch_input_shape\": [null, 8], \"name\": \"i\"}, "
              "\"inbound_nodes\": []}, {\"class_name\": \"Dense\", \"name\": \"d\", \"config\": "
              "{\"name\": \"d\", \"units\": 4, \"activation\": \"softmax\"}, \"inbound_nodes\": "
              "[[[\"i\", 0, 0, {}]]]}], \"input_layers\": [[\"i\", 0, 0]], \"output_layers\": "
              "[[\"d\", 0, 0]]}}", 36);
    // ... but Keras 2 keeps a call's training=True (dropout at inference too).
    keras_expect_error("{\"class_name\": \"Model\", \"keras_version\": \"2.2.4\", \"config\": "
                 "{\"name\": \"m\", \"layers\": [{\"class_name\": \"InputLayer\", \"name\": "
                 "\"i\", \"config\": {\"batch_input_shape\": [null, 8], \"name\": \"i\"}, "
                 "\"inbound_nodes\": []}, {\"class_name\": \"Dropout\", \"name\": \"x\", "
                 "\"config\": {\"name\": \"x\", \"rate\": 0.5}, \"inbound_nodes\": [[[\"i\", 0, "
                 "0, {\"training\": true}]]]}], \"input_layers\": [[\"i\", 0, 0]], "
                 "\"output_layers\": [[\"x\", 0, 0]]}}",
                 "bad.json: layer 1 \"x\" (Dropout): called with training=true: hetrain calls a "
                 "layer on its input alone");
    // Another argument of a Keras 3 call.
    dense3(a, sizeof a, "a", "in", 8, "relu", "\"scale\": 2");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): called with scale=2: hetrain calls a layer on "
                 "its input alone");
    // A branch nothing reads: b takes the input, not a's output.
    dense3(a, sizeof a, "a", "in", 8, "relu", "");
    dense3(b, sizeof b, "b", "in", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): no layer reads its output, and it is not the "
                 "model's: hetrain trains a model of one output");
    // A layer listed before its input runs after it.
    char c[1024];
    dense3(a, sizeof a, "a", "c", 8, "relu", "");
    dense3(c, sizeof c, "c", "in", 8, "relu", "");
    dense3(b, sizeof b, "b", "a", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, %s, %s, %s", input3, a, c, b);
    keras_expect_ok(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                    2 * (8 * 8 + 8) + 8 * 4 + 4);
    // ... but not where two layers read each other, nor a layer reading the model's output.
    dense3(c, sizeof c, "c", "a", 8, "relu", "");
    snprintf(layers, sizeof layers, "%s, %s, %s, %s", input3, a, c, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): call 0 reads what it computes itself (a cycle "
                 "in the graph)");
    dense3(a, sizeof a, "a", "b", 8, "relu", "");
    dense3(b, sizeof b, "b", "in", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): its input \"b\" is the model's output: "
                 "hetrain reads a model whose output is its last step");
    // A call of a layer that has fewer; a layer that is not in the model.
    char ti[256];
    tensor3(ti, sizeof ti, "in");
    snprintf(a, sizeof a, "{\"class_name\": \"Dense\", \"name\": \"a\", \"config\": {\"name\": "
             "\"a\", \"units\": 8}, \"inbound_nodes\": [{\"args\": [%s]}]}", ti);
    snprintf(b, sizeof b, "{\"class_name\": \"Dense\", \"name\": \"b\", \"config\": {\"name\": "
             "\"b\", \"units\": 4, \"activation\": \"softmax\"}, \"inbound_nodes\": [{\"args\": "
             "[{\"class_name\": \"__keras_tensor__\", \"config\": {\"keras_history\": [\"a\", 1, "
             "0]}}]}]}");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 2 \"b\" (Dense): its input is call 1 of \"a\", which is called "
                 "1 time");
    dense3(b, sizeof b, "b", "zz", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 2 \"b\" (Dense): its input \"zz\" is no layer of the model");
    dense3(a, sizeof a, "a", "in", 8, "relu", "");
    // The output is not the last layer.
    dense3(b, sizeof b, "b", "a", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, %s, %s", input3, a, b);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"a\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): the model's output is \"a\", not its last "
                 "layer: hetrain reads a Functional model whose output is its last layer");
    // The input is not the first layer; a second input that nothing merges.
    keras_expect_error(functional3(layers, "[\"a\", 0, 0]", "[\"b\", 0, 0]"),
                 "bad.json: layer 0 \"in\" (InputLayer): the first layer must be the model's "
                 "input, \"a\" (an InputLayer)");
    keras_expect_error(functional3(layers, "[[\"in\", 0, 0], [\"a\", 0, 0]]", "[\"b\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): a second input (the model has 2): hetrain "
                 "reads models of one input");
    keras_expect_error(functional3(layers, "3", "[\"b\", 0, 0]"),
                 "bad.json: input_layers: expected a list of [layer, node, tensor]");
    // A layer that nothing calls; a malformed tensor; a model inside the model.
    snprintf(layers, sizeof layers, "%s, {\"class_name\": \"Dense\", \"name\": \"a\", "
             "\"config\": {\"name\": \"a\", \"units\": 4}, \"inbound_nodes\": []}", input3);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"a\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): called on no input: hetrain reads a "
                 "Functional model of one input");
    snprintf(layers, sizeof layers, "%s, {\"class_name\": \"Dense\", \"name\": \"a\", "
             "\"config\": {\"name\": \"a\", \"units\": 4}, \"inbound_nodes\": [{\"args\": "
             "[{\"class_name\": \"__keras_tensor__\", \"config\": {\"keras_history\": "
             "[\"in\"]}}]}]}", input3);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"a\", 0, 0]"),
                 "bad.json: layer 1 \"a\" (Dense): inbound_nodes: a tensor without its "
                 "keras_history [layer, node, tensor]");
    char t[256];
    tensor3(t, sizeof t, "in");
    snprintf(layers, sizeof layers, "%s, {\"class_name\": \"Sequential\", \"name\": \"s\", "
             "\"config\": {\"name\": \"s\", \"layers\": []}, \"inbound_nodes\": [{\"args\": "
             "[%s]}]}", input3, t);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"s\", 0, 0]"),
                 "bad.json: layer 1 \"s\" (Sequential): a Sequential inside the model without "
                 "layers");
    snprintf(layers, sizeof layers, "%s, {\"class_name\": \"Functional\", \"name\": \"s\", "
             "\"config\": {\"name\": \"s\", \"layers\": []}, \"inbound_nodes\": [{\"args\": "
             "[%s]}]}", input3, t);
    keras_expect_error(functional3(layers, "[\"in\", 0, 0]", "[\"s\", 0, 0]"),
                 "bad.json: layer 1 \"s\" (Functional): a model inside the model is not "
                 "supported; hetrain reads one list of layers, and Sequential models inside a "
                 "Functional one");
    // A Sequential inside (ConvNeXt's stem): its layers in its place, in a chain, its reader
    // reading its last; a second one reading the first.
    char d[1024];
    static const char inner[] =
        "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"name\": "
        "\"%s_in\", \"batch_shape\": [null, 8]}}, {\"module\": \"keras.layers\", \"class_name\": "
        "\"Dense\", \"config\": {\"name\": \"%s_a\", \"units\": 8, \"activation\": \"relu\"}}, "
        "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": "
        "\"%s_b\", \"units\": 6}}";
    char in1[1024], in2[1024], t2[256];
    snprintf(in1, sizeof in1, inner, "s", "s", "s");
    snprintf(in2, sizeof in2, inner, "u", "u", "u");
    tensor3(t2, sizeof t2, "s");
    dense3(d, sizeof d, "d", "u", 4, "softmax", "");
    snprintf(layers, sizeof layers, "%s, {\"class_name\": \"Sequential\", \"name\": \"s\", "
             "\"config\": {\"name\": \"s\", \"layers\": [%s]}, \"inbound_nodes\": [{\"args\": "
             "[%s]}]}, {\"class_name\": \"Sequential\", \"name\": \"u\", \"config\": {\"name\": "
             "\"u\", \"layers\": [{\"class_name\": \"Sequential\", \"config\": {\"name\": \"v\", "
             "\"layers\": [%s]}}]}, \"inbound_nodes\": [{\"args\": [%s]}]}, %s", input3, in1, t,
             in2, t2, d);
    model m;
    ht_error e = {{0}};
    const char *json = functional3(layers, "[\"in\", 0, 0]", "[\"d\", 0, 0]");
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    // s_a, relu, s_b, u_a, relu, u_b, d, softmax: a chain, each reading the one before.
    assert_int_equal(m.n_layers, 8);
    assert_string_equal(m.layers[2].name, "s_b");
    assert_string_equal(m.layers[3].name, "u_a");
    assert_int_equal(m.layers[3].in[0], 2);
    assert_int_equal(m.layers[6].in[0], 5);
    assert_int_equal(m.n_params, 8 * 8 + 8 + 8 * 6 + 6 + 6 * 8 + 8 + 8 * 6 + 6 + 6 * 4 + 4);
    model_free(&m);
    keras_expect_error("{\"class_name\": \"Functional\", \"config\": [1]}",
                 "bad.json: config: expected an object with \"layers\", \"input_layers\" and "
                 "\"output_layers\"");
}

// ---- data_format ------------------------------------------------------------------------------

// A Sequential model of an 8x8x2 (H, W, C) input, then `layers`.
static char *seq(const char *layers) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"t\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, "
             "2], \"name\": \"in\"}}, %s, {\"class_name\": \"Flatten\", \"config\": {}}, "
             "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4, "
             "\"activation\": \"softmax\"}}]}}",
             layers);
    return buf;
}

#define CONV(fmt)                                                                              \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 3, "               \
    "\"kernel_size\": 3, \"data_format\": \"" fmt "\"}}"
#define POOL(cls, fmt, extra)                                                                  \
    "{\"class_name\": \"" cls "\", \"config\": {\"name\": \"p\", \"data_format\": \"" fmt      \
    "\"" extra "}}"

// Layers of the other data_format, read between permutes with Keras's output shapes (as its
// error messages gave them when they were refused: Keras's own, from running the fixtures) and
// parameter counts.
static void test_mixed_format(void **state) {
    (void)state;
    // The model's layout is its first Conv2D's, whatever a pooling layer before it says: a
    // channels_first max-pool of the (8, 8, 2) input into Keras's (8, 4, 1) = hetrain's
    // (1, 8, 4); the conv then gives (6, 2, 3).
    keras_expect_ok(seq(POOL("MaxPooling2D", "channels_first", ", \"padding\": \"same\"") ", "
                        CONV("channels_last")),
                    (3 * 3 * 1 * 3 + 3) + (6 * 2 * 3 * 4 + 4));
    // A channels_last layer in a channels_first model works over the channels and height:
    // (3, 8, 2) average-pooled into (1, 4, 2). (The input reads as 8 channels of 8x2.)
    keras_expect_ok(seq("{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": "
                        "3, \"kernel_size\": 3, \"padding\": \"same\", \"data_format\": "
                        "\"channels_first\"}}, " POOL("AveragePooling2D", "channels_last", "")),
                    (3 * 3 * 8 * 3 + 3) + (1 * 4 * 2 * 4 + 4));
    // Global average over the (6, 6, 3) tensor's width and channels: 6 features.
    keras_expect_ok(seq(CONV("channels_last") ", {\"class_name\": \"GlobalAveragePooling2D\", "
                        "\"config\": {\"name\": \"p\", \"data_format\": \"channels_first\"}}"),
                    (3 * 3 * 2 * 3 + 3) + (6 * 4 + 4));
    // A channels_first conv of 6 channels (the tensor's height) over its width and channels:
    // (4, 4, 1), hetrain's (1, 4, 4).
    keras_expect_ok(seq(CONV("channels_last") ", {\"class_name\": \"Conv2D\", \"config\": "
                        "{\"name\": \"c2\", \"filters\": 4, \"kernel_size\": 3, \"data_format\": "
                        "\"channels_first\"}}"),
                    (3 * 3 * 2 * 3 + 3) + (3 * 3 * 6 * 4 + 4) + (4 * 4 * 1 * 4 + 4));
    // A 1x1 window of stride 1 is the identity over any axes: no permutes.
    keras_expect_ok(seq(CONV("channels_last") ", " POOL("MaxPooling2D", "channels_first",
                                                 ", \"pool_size\": 1, \"strides\": 1")),
              3 * 3 * 2 * 3 + 3 + 6 * 6 * 3 * 4 + 4);
    keras_expect_error(seq(POOL("MaxPooling2D", "channels_middle", "")),
                 "bad.json: layer 1 \"p\" (MaxPooling2D): data_format \"channels_middle\": "
                 "expected channels_last or channels_first");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_functional),
        cmocka_unit_test(test_refused_fixtures),
        cmocka_unit_test(test_shared_fixtures),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_ops_rescale_dropout),
        cmocka_unit_test(test_mixed_format),
        cmocka_unit_test(test_mixed_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
