// Graph models, the merge family (add, subtract, multiply, average, maximum), concat, dwconv,
// rescale and normalize: the reference's gradients through a residual network, a dense block
// with a depthwise convolution, a squeeze-and-excite block with the other merges and a network
// of rescale and normalize layers by finite differences (a
// buffer two layers read: its gradient the sum of theirs), the schedule a
// graph config makes, the config's `from` and its errors, and the summary's "Connected to".
// Every backend against the reference on graphs is the parity suite's (parity_cases_merge).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/model.h"
#include "nn/schedule.h"
#include "tests/lib/fd.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

static char *dir;

static int model_from_text(model *m, const char *text, ht_error *e) {
    char *path = test_write_file(dir, "graph.cfg", text, strlen(text));
    int rc = model_init_config(m, path, e);
    free(path);
    return rc;
}

// A residual block on a smooth network (tanh, no relu or pooling, so that the loss is smooth
// around the point): conv1 -> tanh -> conv2 -> add(conv2, tanh) -> conv3 -> add(conv3, add1)
// -> dense. tanh1's output is read by conv2 and add1, add1's by conv3 and add2.
static const char residual[] = "[net]\ninput = 2x5x5\nclasses = 3\n"
                               "[conv]\nfilters = 3\nsize = 3\npad = same\n[tanh]\n"
                               "[conv]\nfilters = 3\nsize = 3\npad = same\n[add]\nfrom = -1, -2\n"
                               "[conv]\nfilters = 3\nsize = 1\n[add]\nfrom = -1, add1\n"
                               "[dense]\nunits = 3\n[softmax]\n";

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

// A dense block and a depthwise convolution, smooth as the residual one: conv1 -> tanh1 ->
// concat(tanh1, input) -> dwconv (multiplier 2, stride 2, "same") -> tanh2, and conv2(tanh1)
// -> avgpool -> concat(tanh2, avgpool) -> dense. tanh1's output and the input are read twice.
static const char dense_block[] = "[net]\ninput = 2x6x6\nclasses = 3\n"
                                  "[conv]\nfilters = 3\nsize = 3\npad = same\n[tanh]\n"
                                  "[concat]\nfrom = -1, input\n"
                                  "[dwconv]\nsize = 3\nstride = 2\npad = same\nmultiplier = 2\n"
                                  "[tanh]\n[conv]\nfilters = 2\nsize = 1\nfrom = tanh1\n"
                                  "[avgpool]\nsize = 2\n[concat]\nfrom = tanh2, -1\n"
                                  "[dense]\nunits = 3\n[softmax]\n";

// Squeeze-and-excite, smooth: conv1 -> tanh1 -> gap -> dense (tanh) -> dense (sigmoid) ->
// multiply(tanh1, the (3,1,1) scale) as se, then the other merges of two smooth branches:
// subtract(multiply, conv2(tanh1)), an average of three, a maximum of it and conv2, and the
// dense head. tanh1's output is read by the pooling, the multiply and conv3. The scale's
// second dense layer and the head have weights up to 2 and conv1 a bias of 1 (the pooled means away from 0), so
// that their gradients through the sigmoid are not small.
static const char squeeze_excite[] = "[net]\ninput = 2x5x4\nclasses = 3\n"
                                     "[conv]\nfilters = 3\nsize = 3\npad = same\n"
                                     "bias_init = constant(value = 1)\n[tanh]\n"
                                     "[globalavgpool]\n[dense]\nunits = 2\nactivation = tanh\n"
                                     "[dense]\nunits = 3\nactivation = sigmoid\n"
                                     "init = random_uniform(minval = -2, maxval = 2)\n"
                                     "[multiply]\nname = se\nfrom = tanh1, -1\n"
                                     "[conv]\nfilters = 3\nsize = 1\nfrom = tanh1\n"
                                     "[subtract]\nfrom = se, -1\n"
                                     "[average]\nfrom = -1, conv2, se\n"
                                     "[maximum]\nfrom = -1, conv2\n"
                                     "[dense]\nunits = 3\n"
                                     "init = random_uniform(minval = -2, maxval = 2)\n"
                                     "[softmax]\n";

// Rescale and normalize (a stored mean and variance, inverted too), smooth: rescale ->
// normalize -> conv1 -> tanh -> normalize (inverted) as inv -> conv2 (1x1) -> add(conv2, inv)
// -> dense. inv's output is read by conv2 and the add.
static const char normalized[] = "[net]\ninput = 2x5x5\nclasses = 3\n"
                                 "[rescale]\nscale = 0.5\noffset = 0.25\n[normalize]\n"
                                 "[conv]\nfilters = 3\nsize = 3\npad = same\n[tanh]\n"
                                 "[normalize]\nname = inv\ninvert = 1\n"
                                 "[conv]\nfilters = 3\nsize = 1\n[add]\nfrom = -1, inv\n"
                                 "[dense]\nunits = 3\n[softmax]\n";

// ConvNeXt's block: a depthwise convolution, layer normalisation over the channels, an inverted
// bottleneck with gelu, layerscale on the residual branch; its head's layernorm on a vector.
static const char convnext_block[] = "[net]\ninput = 2x5x5\nclasses = 3\n"
                                     "[conv]\nname = stem\nfilters = 6\nsize = 1\n"
                                     "[dwconv]\nsize = 3\npad = same\n[layernorm]\n"
                                     "epsilon = 0.5\n[conv]\nfilters = 8\nsize = 1\n"
                                     "activation = gelu\n[conv]\nfilters = 6\nsize = 1\n"
                                     "[layerscale]\ninit_values = 0.5\n[add]\nfrom = -1, stem\n"
                                     "[globalavgpool]\n[layernorm]\n[dense]\nunits = 3\n"
                                     "[softmax]\n";

// Shared layers, smooth: a convolution called three times (on its own output, then on tanh1's
// again) and a dense layer twice (on its own output), their gradients added over the calls.
static const char shared_layers[] = "[net]\ninput = 2x5x5\nclasses = 3\n"
                                    "[conv]\nfilters = 3\nsize = 3\npad = same\n[tanh]\n"
                                    "[conv]\nname = shared\nfilters = 3\nsize = 3\n"
                                    "pad = same\nactivation = tanh\n[conv]\nshare = shared\n"
                                    "[add]\nfrom = -1, tanh1\n"
                                    "[conv]\nshare = shared\nfrom = tanh1\n[add]\n"
                                    "from = -1, add1\n[globalavgpool]\n"
                                    "[dense]\nname = sq\nunits = 3\nactivation = tanh\n"
                                    "init = random_uniform(minval = -1, maxval = 1)\n"
                                    "[dense]\nshare = sq\n[dense]\nunits = 3\n"
                                    "init = random_uniform(minval = -2, maxval = 2)\n"
                                    "[softmax]\n";

// The reference's input and weight gradients of the network in text against central
// differences of its loss. Stored means and variances (normalize's) are set away from 0 and
// 1, where the layer would be the identity.
static void graph_ref_fd_step(const char *text, int in_floats, const char *what, double h) {
    model m;
    ht_error e;
    if (model_from_text(&m, text, &e) < 0) fail_msg("%s", e.msg);
    fd_ctx c = {.m = &m, .y = {1, 2}};
    const size_t in = (size_t)in_floats;
    c.x = fill_away_from_zero(2 * in, 31);
    c.p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, c.p, 32);
    const model_tensor *ts;
    const int nt = model_tensors(&m, &ts);
    for (int t = 0; t < nt; t++)
        for (size_t i = 0; i < ts[t].n && ts[t].state != TENSOR_NUM_BATCHES; i++)
            if (ts[t].state == TENSOR_RUNNING_MEAN) c.p[ts[t].off + i] = 0.3f - 0.2f * (float)i;
            else if (ts[t].state == TENSOR_RUNNING_VAR) c.p[ts[t].off + i] = 0.25f + 1.5f * (float)i;
    ref_net_init(&c.r, &m, 2);
    float *g = calloc(m.n_params, sizeof(float));
    ref_forward(&c.r, &m, c.p, c.x, c.y, 2, NULL);
    ref_backward(&c.r, &m, c.p, g, c.x, c.y, 2, NULL);
    float *dx = malloc(sizeof(float) * 2 * in);
    memcpy(dx, c.r.dinput[0], sizeof(float) * 2 * in);
    float *num = malloc(sizeof(float) * (2 * in > m.n_params ? 2 * in : m.n_params));
    fd_grad_step(num, c.x, 2 * in, fd_loss, &c, h);
    // The input's gradient is node 0's input gradient (the reference's dinput[0]) where node 0
    // alone reads it; the walkers make no gradient of the model's input beyond that.
    int readers = 0;
    for (int l = 0; l < m.n_layers; l++)
        for (int k = 0; k < m.layers[l].n_in; k++) readers += m.layers[l].in[k] == MODEL_INPUT;
    char name[96];
    snprintf(name, sizeof name, "%s: input gradient", what);
    if (readers == 1) expect_grad(dx, num, 2 * in, TOL_CONV_FD, name);
    for (int l = 0; l < m.n_layers; l++) {
        const layer *L = &m.layers[l];
        if (!L->n_w || L->share) continue; // a shared layer's: its first call's
        snprintf(name, sizeof name, "%s: %s weight", what, L->name);
        fd_grad_step(num, c.p + L->w_off, L->n_w + L->n_b, fd_loss, &c, h);
        expect_grad(g + L->w_off, num, L->n_w + L->n_b, TOL_CONV_FD, name);
    }
    ref_net_free(&c.r);
    free(c.x), free(c.p), free(g), free(dx), free(num);
    model_free(&m);
}

static void graph_ref_fd(const char *text, int in_floats, const char *what) {
    graph_ref_fd_step(text, in_floats, what, FD_EPS);
}

static void test_residual_ref_fd(void **state) {
    (void)state;
    graph_ref_fd(residual, 2 * 5 * 5, "residual network");
}

static void test_dense_block_ref_fd(void **state) {
    (void)state;
    graph_ref_fd(dense_block, 2 * 6 * 6, "dense block with a depthwise convolution");
}

static void test_normalize_ref_fd(void **state) {
    (void)state;
    graph_ref_fd(normalized, 2 * 5 * 5, "rescale, normalize and an inverted normalize");
}

static void test_convnext_block_ref_fd(void **state) {
    (void)state;
    // ConvNeXt's epsilon of 1e-6 over 6 channels: differences of FD_EPS / 8, where FD_EPS's
    // miss by 3% (the curvature), and the gradients agree within TOL_CONV_FD.
    graph_ref_fd_step(convnext_block, 2 * 5 * 5, "ConvNeXt block: layernorm and layerscale",
                      FD_EPS / 8);
}

static void test_shared_layers_ref_fd(void **state) {
    (void)state;
    graph_ref_fd(shared_layers, 2 * 5 * 5, "shared layers");
}

static void test_squeeze_excite_ref_fd(void **state) {
    (void)state;
    graph_ref_fd(squeeze_excite, 2 * 5 * 4, "squeeze-and-excite and the other merges");
}

// The schedule of the residual config: each add's inputs, who writes and who adds each
// gradient (the later reader going backward writes), and no in-place relu over a shared buffer.
static void test_residual_schedule(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_from_text(&m, residual, &e) < 0) fail_msg("%s", e.msg);
    // 0 conv1, 1 tanh1, 2 conv2, 3 add1, 4 conv3, 5 add2, 6 fc1, 7 softmax
    assert_int_equal(m.layers[3].n_in, 2);
    assert_int_equal(m.layers[3].in[0], 2);
    assert_int_equal(m.layers[3].in[1], 1);
    assert_int_equal(m.layers[5].in[1], 3);
    schedule s;
    assert_int_equal(schedule_build(&s, &m, &e), 0);
    // tanh1's output: add1 (node 3) is its last reader going backward, so writes; conv2 adds.
    assert_int_equal(s.node[3].grad_add[1], 0);
    assert_int_equal(s.node[2].grad_add[0], 1);
    // add1's output: add2 writes, conv3 adds.
    assert_int_equal(s.node[5].grad_add[1], 0);
    assert_int_equal(s.node[4].grad_add[0], 1);
    assert_int_equal(s.node[1].n_out, 2);
    assert_int_equal(s.max_add, 1);
    schedule_free(&s);
    model_free(&m);
}

// Bad graphs: each a one-line error naming the file, line or layer and what is wrong.
static void test_graph_errors(void **state) {
    (void)state;
    static const struct {
        const char *cfg, *frag1, *frag2;
    } bad[] = {
        {"[conv]\nfilters = 2\nsize = 3\n[add]\nfrom = -1, -3\n", "graph.cfg:8", "-3"},
        {"[conv]\nfilters = 2\nsize = 3\n[add]\nfrom = -1, conv9\n", "graph.cfg:8",
         "no layer before this one is named \"conv9\""},
        {"[conv]\nfilters = 2\nsize = 3\n[add]\nfrom = -1, 1\n", "graph.cfg:8", "from: 1"},
        {"[conv]\nfilters = 2\nsize = 3\n[add]\nfrom = -1, input\n", "input 2 (the model's input)",
         "must have one shape"},
        {"[conv]\nfilters = 2\nsize = 3\n[add]\n", "add", "merges 2..4 inputs, given 1"},
        {"[conv]\nfilters = 2\nsize = 3\n[relu]\nfrom = -1, -2\n", "relu",
         "takes one input, given 2"},
        {"[conv]\nfilters = 2\nsize = 3\n[conv]\nfilters = 2\nsize = 3\nfrom = input\n",
         "layer 0 (conv1)", "no layer reads its output"},
        {"[conv]\nfilters = 2\nsize = 3\n[add]\nfrom = -1, -1, -1, -1, -1\n", "graph.cfg:8",
         "more than 4 inputs"},
        {"[conv]\nfilters = 2\nsize = 3\n[add]\nfrom = \n", "graph.cfg:8", "found nothing"},
        {"[conv]\nfilters = 2\nsize = 3\n[subtract]\nfrom = -1, -1, -1\n", "subtract",
         "given 3 inputs, expected 2"},
        // A 1x1 input broadcasts after the first only, and with the first's channels.
        {"[conv]\nfilters = 2\nsize = 3\n[globalavgpool]\n[multiply]\nfrom = -1, -2\n",
         "input 2 (conv1) is 2x4x4", "after the first be 1x1 with its channels"},
        {"[conv]\nfilters = 2\nsize = 3\n[globalavgpool]\n[dense]\nunits = 3\n"
         "[multiply]\nfrom = conv1, -1\n", "input 2 (fc1) is 3x1x1", "must have one shape"},
        // A shared layer: of the kind of the layer it shares, with that layer's settings and
        // input shape, and without a state.
        {"[conv]\nfilters = 1\nsize = 3\n[dense]\nshare = conv1\n", "graph.cfg:7",
         "a layer shares the parameters of a layer of its kind"},
        {"[conv]\nfilters = 1\nsize = 3\n[conv]\nshare = conv1\nsize = 1\n", "[conv] size",
         "takes that layer's settings"},
        {"[conv]\nfilters = 2\nsize = 3\n[conv]\nshare = conv1\n", "layer 1 (conv)",
         "inputs must have the first call's shape"},
        {"[batchnorm]\n[batchnorm]\nshare = bn1\n", "layer 1 (batchnorm)", "not a state"},
        {"[conv]\nfilters = 1\nsize = 3\n[conv]\nshare = conv9\n", "[conv] share",
         "no layer before this one is named \"conv9\""},
        {"[conv]\nfilters = 1\nsize = 3\n[conv]\nshare = 1\n", "[conv] share: 1",
         "expected an earlier layer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "[net]\ninput = 1x6x6\nclasses = 3\n%s[dense]\nunits = 3\n"
                 "[softmax]\n", bad[i].cfg);
        model m;
        ht_error e = {{0}};
        if (model_from_text(&m, text, &e) == 0) fail_msg("case %zu read without an error", i);
        test_expect_frags(e.msg, 1, bad[i].frag1, bad[i].frag2, NULL);
    }
}

// summary: a graph's layers say what they read, a chain's table has no such column.
static void test_summary_connections(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_from_text(&m, residual, &e) < 0) fail_msg("%s", e.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    model_print_summary(&m, f);
    fclose(f);
    assert_non_null(strstr(buf, "Connected to"));
    assert_non_null(strstr(buf, "conv2, tanh1\n"));
    assert_non_null(strstr(buf, "conv3, add1\n"));
    free(buf);
    model_free(&m);
    if (model_from_text(&m, "[net]\ninput = 1x6x6\nclasses = 3\n[conv]\nfilters = 2\nsize = 3\n"
                            "[dense]\nunits = 3\n[softmax]\n", &e) < 0)
        fail_msg("%s", e.msg);
    f = open_memstream(&buf, &len);
    model_print_summary(&m, f);
    fclose(f);
    assert_null(strstr(buf, "Connected to"));
    free(buf);
    model_free(&m);
}

// Shared layers hold their parameters once: the model's count, its tensors and the summary's
// totals are the first calls', and the summary names whose parameters a later call uses.
static void test_shared_layers_counts(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_from_text(&m, shared_layers, &e) < 0) fail_msg("%s", e.msg);
    // conv1 2->3 3x3, shared 3->3 3x3, sq 3->3, the head 3->3: weights and biases.
    const size_t own = (2 * 9 * 3 + 3) + (3 * 9 * 3 + 3) + (3 * 3 + 3) + (3 * 3 + 3);
    assert_int_equal(m.n_params, own);
    const model_tensor *ts;
    assert_int_equal(model_tensors(&m, &ts), 8);
    const int sh = model_find_layer(&m, "shared"), sq = model_find_layer(&m, "sq");
    int calls = 0;
    for (int l = 0; l < m.n_layers; l++) {
        const layer *L = &m.layers[l];
        if (!L->share) continue;
        calls++;
        assert_true(L->share - 1 == sh || L->share - 1 == sq);
        assert_int_equal(L->w_off, m.layers[L->share - 1].w_off);
    }
    assert_int_equal(calls, 3);
    assert_int_equal(m.layers[sh].n_sharers, 2);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    model_print_summary(&m, f);
    fclose(f);
    char total[64];
    snprintf(total, sizeof total, "Total params: %zu\n", own);
    test_expect_frags(buf, 0, "(the parameters of shared)", "(the parameters of sq)", total,
                      NULL);
    free(buf);
    model_free(&m);
}

static int setup(void **state) {
    (void)state;
    dir = test_tmpdir("merge");
    return dir ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    free(dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_ref_fd),
        cmocka_unit_test(test_dense_block_ref_fd),
        cmocka_unit_test(test_squeeze_excite_ref_fd),
        cmocka_unit_test(test_normalize_ref_fd),
        cmocka_unit_test(test_convnext_block_ref_fd),
        cmocka_unit_test(test_shared_layers_ref_fd),
        cmocka_unit_test(test_residual_schedule),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_summary_connections),
        cmocka_unit_test(test_shared_layers_counts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
