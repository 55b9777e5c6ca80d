// The ONNX writer (src/io/onnx.c) read back through the same protobuf-c schema: the model's
// opset and input/output shapes with their dynamic batch, every parameter tensor as an
// initializer with the parameters' bits (a shared layer's once), batchnorm in inference form
// with its moving statistics and epsilon, dropout gone, the class names in the metadata, Keras's
// NHWC input transposed first; and a file that exists refused with nothing written. ONNX
// Runtime's agreement with hetrain's outputs is tests/onnx/test_onnx_export.sh's.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/onnx.h"
#include "nn/layer_desc.h"
#include "onnx/onnx.pb-c.h"
#include "tests/lib/testutil.h"

static Onnx__ModelProto *read_model(const char *path) {
    size_t len;
    char *bytes = test_read_file(path, &len);
    assert_non_null(bytes);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, (const uint8_t *)bytes);
    free(bytes);
    assert_non_null(mp);
    return mp;
}

static const Onnx__TensorProto *init_named(const Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_initializer; i++)
        if (!strcmp(g->initializer[i]->name, name)) return g->initializer[i];
    return NULL;
}

static int count_op(const Onnx__GraphProto *g, const char *op) {
    int n = 0;
    for (size_t i = 0; i < g->n_node; i++) n += !strcmp(g->node[i]->op_type, op);
    return n;
}

// A graph of conv -> batchnorm (relu) -> dropout -> a convolution called twice (shared) ->
// add -> pooling -> dense -> softmax, with class names; exported and read back.
static void test_onnx_structure(void **state) {
    (void)state;
    static const char cfg[] = "[net]\ninput = 2x8x8\nclasses = 3\n"
                              "[conv]\nfilters = 4\nsize = 3\npad = same\nbias = 0\n"
                              "[batchnorm]\nepsilon = 0.01\n[relu]\n[dropout]\nrate = 0.5\n"
                              "[conv]\nname = mix\nfilters = 4\nsize = 1\n[conv]\nshare = mix\n"
                              "[add]\nfrom = -1, relu1\n[globalavgpool]\n[dense]\nunits = 3\n"
                              "[softmax]\n";
    char *dir = test_tmpdir("onnx");
    char *path = test_write_file(dir, "g.cfg", cfg, sizeof cfg - 1);
    model m;
    ht_error e;
    if (model_init(&m, path, &e) < 0) fail_msg("%s", e.msg);
    char *const names[3] = {"cat", "dog", "bird"};
    assert_int_equal(model_set_classes(&m, 3, names, &e), 0);
    float *p = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, p, 5);
    for (size_t i = m.n_trainable; i < m.n_params; i++) p[i] = 0.25f + (float)i; // moving stats
    char out[4096];
    snprintf(out, sizeof out, "%s/g.onnx", dir);
    const onnx_opts o = {.nhwc = 0, .source = "g.cfg"};
    assert_int_equal(onnx_export(&m, p, out, &o, &e), 0);

    Onnx__ModelProto *mp = read_model(out);
    assert_int_equal(mp->opset_import[0]->version, ONNX_OPSET);
    const Onnx__GraphProto *g = mp->graph;
    assert_int_equal(g->n_input, 1);
    const Onnx__TensorShapeProto *in = g->input[0]->type->tensor_type->shape;
    assert_int_equal(in->n_dim, 4);
    assert_string_equal(in->dim[0]->dim_param, "N");
    assert_int_equal(in->dim[1]->dim_value, 2); // (N,C,H,W)
    assert_int_equal(in->dim[3]->dim_value, 8);
    const Onnx__TensorShapeProto *os = g->output[0]->type->tensor_type->shape;
    assert_string_equal(g->output[0]->name, "output");
    assert_int_equal(os->dim[1]->dim_value, 3);
    // Every parameter tensor once, with the parameters' bits; the state's as batchnorm's inputs.
    const model_tensor *ts;
    const int nt = model_tensors(&m, &ts);
    for (int t = 0; t < nt; t++) {
        if (ts[t].state == TENSOR_NUM_BATCHES) continue;
        const Onnx__TensorProto *it = init_named(g, ts[t].name);
        if (!it) fail_msg("no initializer %s", ts[t].name);
        assert_int_equal(it->raw_data.len, ts[t].n * sizeof(float));
        assert_memory_equal(it->raw_data.data, p + ts[t].off, it->raw_data.len);
    }
    assert_int_equal(count_op(g, "Conv"), 3); // the shared one's weight is still one initializer
    assert_null(init_named(g, "conv3.weight"));
    assert_int_equal(count_op(g, "BatchNormalization"), 1);
    assert_int_equal(count_op(g, "Dropout"), 0);
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *nd = g->node[i];
        if (strcmp(nd->op_type, "BatchNormalization")) continue;
        assert_string_equal(nd->input[3], "bn1.running_mean");
        assert_float_equal(nd->attribute[0]->f, 0.01f, 0);
    }
    int found = 0;
    for (size_t i = 0; i < mp->n_metadata_props; i++)
        if (!strcmp(mp->metadata_props[i]->key, "class_names")) {
            assert_string_equal(mp->metadata_props[i]->value, "[\"cat\",\"dog\",\"bird\"]");
            found = 1;
        }
    assert_true(found);
    onnx__model_proto__free_unpacked(mp, NULL);

    // An existing file is refused, left as it was, and no temporary file stays.
    assert_int_equal(onnx_export(&m, p, out, &o, &e), -1);
    assert_non_null(strstr(e.msg, "already exists"));
    assert_int_equal(test_count_files(dir), 2); // g.cfg and g.onnx

    // Keras's layout: the input (N,H,W,C), transposed to the graph's (N,C,H,W) first.
    snprintf(out, sizeof out, "%s/k.onnx", dir);
    const onnx_opts k = {.nhwc = 1};
    assert_int_equal(onnx_export(&m, p, out, &k, &e), 0);
    mp = read_model(out);
    in = mp->graph->input[0]->type->tensor_type->shape;
    assert_int_equal(in->dim[3]->dim_value, 2);
    assert_string_equal(mp->graph->node[0]->op_type, "Transpose");
    onnx__model_proto__free_unpacked(mp, NULL);
    free(p);
    model_free(&m);
    free(path);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onnx_structure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
