// Keras's HDF5 weight files (kerash5.h) against files real Keras wrote: the fixtures
// tests/fixtures/keras/weights_k3.* (Keras 3.15, .weights.h5) and weights_k2.* (tf_keras 2.21,
// save_weights("x.h5")), written by tools/keras_weights_roundtrip.py --write-fixtures: a tiny
// model with every variable kind and reordering, its weights, and Keras's class probabilities
// for three fixed inputs. Then bit-exact round trips, the layout hetrain writes against
// Keras's own file, what must be refused, and --save/--load through the CLI.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/kerash5.h"
#include "nn/keras.h"
#include "nn/net.h"
#include "tests/lib/testutil.h"

#define KDIR HT_SOURCE_DIR "/tests/fixtures/keras/"
#define K3_JSON KDIR "weights_k3.json"
#define K3_FILE KDIR "weights_k3.weights.h5"
#define K2_JSON KDIR "weights_k2.json"
#define K2_FILE KDIR "weights_k2.h5"

// hetrain's forward from Keras's weights against Keras's probabilities: both compute in float32,
// summing in different orders (XLA's or TensorFlow's convolutions and GEMMs against hetrain's
// loops), so they differ by rounding. Measured (relative, floor 1e-3, over the 12
// probabilities): 3.9e-7 for the Keras 3 fixture, 4.9e-7 for the Keras 2 one; Keras 3 and
// tf_keras differ from each other by 4.3e-7 on the same weights. A variable read in the wrong
// order moves them by 0.87 or more (measured: the Dense kernel's rows taken in Keras's (H,W,C)
// order as hetrain's (C,H,W), a Conv2D kernel misplaced, gamma and beta swapped). 1e-5 sits
// 20x above the one and 80000x below the other.
#define TOL_KERAS_PROB 1e-5f

typedef struct keras_ref {
    int n, c, h, w, classes;
    float *x, *p;
} keras_ref;

static float *read_floats(char **s, size_t n) {
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        char *end;
        v[i] = strtof(*s, &end);
        assert_true(end != *s);
        *s = end;
    }
    return v;
}

// The fixture's text: "n N c C h H w W classes K", "x ..." (N,C,H,W), "p ..." (N,K).
static void ref_read(keras_ref *r, const char *path) {
    char *text = test_read_file(path, NULL);
    if (!text) fail_msg("%s: missing", path);
    char *s = strstr(text, "\nn ");
    assert_non_null(s);
    assert_int_equal(sscanf(s, "\nn %d c %d h %d w %d classes %d", &r->n, &r->c, &r->h, &r->w,
                            &r->classes), 5);
    s = strstr(s, "\nx ");
    assert_non_null(s);
    s += 3;
    r->x = read_floats(&s, (size_t)r->n * r->c * r->h * r->w);
    s = strstr(s, "\np ");
    assert_non_null(s);
    s += 3;
    r->p = read_floats(&s, (size_t)r->n * r->classes);
    free(text);
}

static float *load_model(model *m, const char *json, const char *weights) {
    ht_error e;
    if (model_init_keras(m, json, &e)) fail_msg("%s", e.msg);
    m->setup.conv_algo = CONV_ALGO_DIRECT;
    float *p = malloc(m->n_params * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < m->n_params; i++) p[i] = NAN;
    if (weights && kerash5_load(weights, m, p, &e)) fail_msg("%s", e.msg);
    return p;
}

// Checks m with params against Keras's probabilities in ref_path.
static void expect_keras_outputs(const model *m, const float *params, const char *ref_path,
                                 const char *what) {
    keras_ref r;
    ref_read(&r, ref_path);
    assert_int_equal(r.c, m->in_c);
    assert_int_equal(r.h, m->in_h);
    assert_int_equal(r.classes, m->n_classes);
    net_ws ws;
    ht_error e;
    if (net_ws_init(&ws, m, r.n, 1, &e)) fail_msg("%s", e.msg);
    const float *probs = net_forward(&ws, m, params, r.x, NULL, r.n, NULL);
    if (!check_tensor(probs, r.p, (size_t)r.n * r.classes, TOL_KERAS_PROB, 1e-3f, what))
        fail_msg("%s: hetrain's probabilities are not Keras's", what);
    net_ws_free(&ws);
    free(r.x);
    free(r.p);
}

// ---- files real Keras wrote ----------------------------------------------------------------

static void test_keras_files(void **state) {
    (void)state;
    model m3, m2;
    float *p3 = load_model(&m3, K3_JSON, K3_FILE);
    float *p2 = load_model(&m2, K2_JSON, K2_FILE);
    expect_keras_outputs(&m3, p3, KDIR "weights_k3.txt", "Keras 3 .weights.h5");
    expect_keras_outputs(&m2, p2, KDIR "weights_k2.txt", "Keras 2 .h5");
    // Both files hold the same float32 values (the script sets them from one seed): the two
    // readers must place them alike, to the bit, whichever JSON built the model.
    assert_int_equal(m3.n_params, m2.n_params);
    assert_memory_equal(p3, p2, m3.n_params * sizeof *p3);
    // A channels_first model whose Flatten keeps the (C,H,W) order (its default data_format):
    // the dense kernel's rows are in hetrain's order already, not permuted from (H,W,C).
    model mc;
    float *pc = load_model(&mc, KDIR "weights_cf_k3.json", KDIR "weights_cf_k3.weights.h5");
    assert_true(mc.keras_flatten_chw);
    expect_keras_outputs(&mc, pc, KDIR "weights_cf_k3.txt", "Keras 3, channels_first");
    free(pc);
    model_free(&mc);
    // Layers of the other data_format than their model's, run between permutes as Keras
    // computes them (tools/keras_mixed_fixture.py): Keras's probabilities with Keras's weights.
    static const char *const mixed[] = {"mixed_cl_k3", "mixed_cf_k3"};
    for (int i = 0; i < 2; i++) {
        char json[512], h5[512], txt[512];
        snprintf(json, sizeof json, KDIR "%s.json", mixed[i]);
        snprintf(h5, sizeof h5, KDIR "%s.weights.h5", mixed[i]);
        snprintf(txt, sizeof txt, KDIR "%s.txt", mixed[i]);
        model mm;
        float *pm = load_model(&mm, json, h5);
        int permutes = 0;
        for (int l = 0; l < mm.n_layers; l++) permutes += mm.layers[l].kind == LAYER_PERMUTE;
        assert_true(permutes >= 3);
        expect_keras_outputs(&mm, pm, txt, mixed[i]);
        free(pm);
        model_free(&mm);
    }
    // A Functional residual network (tools/keras_residual_fixture.py): a graph of two Adds, one
    // with a strided 1x1 shortcut, a depthwise convolution (Keras's (K,K,C,M) kernel, M = 2),
    // ReLU(6) and a Concatenate, batchnorms in inference: Keras's probabilities with its
    // weights.
    {
        model mr;
        float *pr = load_model(&mr, KDIR "residual_k3.json", KDIR "residual_k3.weights.h5");
        int adds = 0;
        for (int l = 0; l < mr.n_layers; l++) adds += mr.layers[l].kind == LAYER_ADD;
        assert_int_equal(adds, 2);
        expect_keras_outputs(&mr, pr, KDIR "residual_k3.txt", "Keras 3 residual graph");
        free(pr);
        model_free(&mr);
    }
    model mx;
    float *x = load_model(&mx, K2_JSON, K3_FILE);
    assert_memory_equal(x, p3, m3.n_params * sizeof *p3);
    free(x);
    model_free(&mx);
    // The count of updates has no Keras counterpart: read as 0.
    const model_tensor *ts;
    int nt = model_tensors(&m3, &ts), counts = 0;
    for (int i = 0; i < nt; i++)
        if (ts[i].state == TENSOR_NUM_BATCHES) {
            assert_true(p3[ts[i].off] == 0.0f);
            counts++;
        }
    assert_int_equal(counts, 3);
    free(p3);
    free(p2);
    model_free(&m3);
    model_free(&m2);
}

// ---- round trips and the layout written ----------------------------------------------------

static hid_t h5_open_rw(const char *path) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) fail_msg("%s: cannot open", path);
    return f;
}

// Dataset `ds` of file a and of file b hold the same shape and float bits.
static void expect_same_dataset(const char *a, const char *b, const char *ds) {
    float va[512], vb[512];
    hsize_t da[4] = {0}, db[4] = {0};
    const char *files[2] = {a, b};
    float *vals[2] = {va, vb};
    hsize_t *dims[2] = {da, db};
    int nd[2];
    for (int k = 0; k < 2; k++) {
        hid_t f = H5Fopen(files[k], H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = f >= 0 ? H5Dopen2(f, ds, H5P_DEFAULT) : -1;
        if (d < 0) fail_msg("%s: no dataset %s", files[k], ds);
        hid_t s = H5Dget_space(d), t = H5Dget_type(d);
        nd[k] = H5Sget_simple_extent_dims(s, dims[k], NULL);
        assert_true(H5Sget_simple_extent_npoints(s) <= 512);
        assert_true(H5Tequal(t, H5T_IEEE_F32LE) > 0); // float32, as Keras writes them
        assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals[k]) >= 0);
        H5Tclose(t);
        H5Sclose(s);
        H5Dclose(d);
        H5Fclose(f);
    }
    assert_int_equal(nd[0], nd[1]);
    assert_memory_equal(da, db, sizeof da);
    size_t n = 1;
    for (int i = 0; i < nd[0]; i++) n *= da[i];
    if (memcmp(va, vb, n * sizeof *va)) fail_msg("%s differs between %s and %s", ds, a, b);
}

static char *attr_name(const char *path, const char *group) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen_by_name(f, group, "name", H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) fail_msg("%s: %s has no attribute name", path, group);
    hid_t t = H5Aget_type(a);
    char *v = NULL;
    assert_true(H5Tis_variable_str(t) > 0);
    assert_true(H5Aread(a, t, &v) >= 0);
    char *copy = strdup(v);
    H5free_memory(v);
    H5Tclose(t);
    H5Aclose(a);
    H5Fclose(f);
    return copy;
}

static void test_round_trip(void **state) {
    (void)state;
    char *dir = test_tmpdir("kh5-roundtrip");
    char path[1024], again[1024];
    ht_error e;
    model m;
    float *keras = load_model(&m, K3_JSON, K3_FILE);

    // Keras's weights, saved by hetrain: every dataset holds Keras's own bits, in Keras 3's
    // groups (by class and position, not by the layers' names), named as Keras names them.
    snprintf(path, sizeof path, "%s/tiny.weights.h5", dir);
    if (kerash5_save(path, &m, keras, &e)) fail_msg("%s", e.msg);
    static const struct {
        const char *group, *name;
        int nv;
    } groups[] = {
        {"layers/conv2d", "features", 2},         {"layers/batch_normalization", "bn_a", 4},
        {"layers/conv2d_1", "mixer", 1},          {"layers/batch_normalization_1", "bn_b", 3},
        {"layers/dense", "hidden", 2},            {"layers/batch_normalization_2", "bn_c", 3},
        {"layers/dense_1", "head", 2},
    };
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        for (int v = 0; v < groups[g].nv; v++) {
            char ds[96];
            snprintf(ds, sizeof ds, "%s/vars/%d", groups[g].group, v);
            expect_same_dataset(K3_FILE, path, ds);
        }
        char vars[96];
        snprintf(vars, sizeof vars, "%s/vars", groups[g].group);
        char *name = attr_name(path, vars);
        assert_string_equal(name, groups[g].name);
        free(name);
    }
    char *top = attr_name(path, "vars"); // the model's own (empty) group, as Keras writes it
    assert_string_equal(top, "tiny");
    free(top);

    // ... and read back, bit for bit.
    float *back = malloc(m.n_params * sizeof *back);
    if (kerash5_load(path, &m, back, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(back, keras, m.n_params * sizeof *back);

    // hetrain's own weights (the initialisers, a batchnorm state of its own): save, load,
    // save again: the same bits each time, and the same file contents.
    float *mine = malloc(m.n_params * sizeof *mine), *got = malloc(m.n_params * sizeof *got);
    model_init_params(&m, mine, 7);
    const model_tensor *ts;
    int nt = model_tensors(&m, &ts);
    for (int i = 0; i < nt; i++)
        for (size_t k = 0; k < ts[i].n; k++)
            if (ts[i].state == TENSOR_RUNNING_MEAN) mine[ts[i].off + k] = 0.1f * (float)k - 0.3f;
            else if (ts[i].state == TENSOR_RUNNING_VAR) mine[ts[i].off + k] = 0.7f + 0.01f * k;
            else if (ts[i].state == TENSOR_NUM_BATCHES) mine[ts[i].off] = 0; // read back as 0
    snprintf(path, sizeof path, "%s/mine.weights.h5", dir);
    if (kerash5_save(path, &m, mine, &e)) fail_msg("%s", e.msg);
    for (size_t i = 0; i < m.n_params; i++) got[i] = 42.0f;
    if (kerash5_load(path, &m, got, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(got, mine, m.n_params * sizeof *got);
    snprintf(again, sizeof again, "%s/again.weights.h5", dir);
    if (kerash5_save(again, &m, got, &e)) fail_msg("%s", e.msg);
    expect_same_dataset(path, again, "layers/dense/vars/0");
    expect_same_dataset(path, again, "layers/conv2d/vars/0");

    // Nothing but the three files: no temporary left behind.
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.') files++;
    closedir(d);
    assert_int_equal(files, 3);
    free(mine);
    free(got);
    free(back);
    free(keras);
    model_free(&m);
    free(dir);
}

// A scalar integer dataset's value (Keras's count), or fails.
static long long scalar_int(const char *path, const char *ds) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, ds, H5P_DEFAULT) : -1;
    if (d < 0) fail_msg("%s: no dataset %s", path, ds);
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    assert_int_equal(H5Sget_simple_extent_ndims(s), 0);
    assert_int_equal(H5Tget_class(t), H5T_INTEGER);
    long long v = -1;
    assert_true(H5Dread(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0);
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    H5Fclose(f);
    return v;
}

// m's parameters p saved as <tmpdir tag>/saved.weights.h5 (the folder returned) hold Keras's
// file's datasets ds[0..n) and read back to the same bits.
static char *expect_saved_as_keras(const model *m, const float *p, const char *keras_file,
                                   const char *tag, const char *const *ds, size_t n) {
    char *dir = test_tmpdir(tag);
    char path[1024];
    ht_error e;
    snprintf(path, sizeof path, "%s/saved.weights.h5", dir);
    if (kerash5_save(path, m, p, &e)) fail_msg("%s", e.msg);
    for (size_t i = 0; i < n; i++) expect_same_dataset(keras_file, path, ds[i]);
    float *back = malloc(m->n_params * sizeof *back);
    assert_non_null(back);
    if (kerash5_load(path, m, back, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(back, p, m->n_params * sizeof *back);
    free(back);
    return dir;
}

// Keras's Normalization (tests/fixtures/keras/normalize_k3.*: EfficientNet's Rescaling then
// Normalization, and an inverted one after a convolution): its mean, variance and integer
// count read from Keras's file give Keras's probabilities (a variable misplaced, or the count
// taken for a variance, moves them far past TOL_KERAS_PROB); saved, the file holds Keras's
// datasets (the count a scalar integer, as Keras's), and reads back to the same bits.
static void test_normalize(void **state) {
    (void)state;
    model m;
    float *p = load_model(&m, KDIR "normalize_k3.json", KDIR "normalize_k3.weights.h5");
    expect_keras_outputs(&m, p, KDIR "normalize_k3.txt", "Keras 3 Normalization");
    const model_tensor *ts;
    const int nt = model_tensors(&m, &ts);
    int counts = 0;
    for (int i = 0; i < nt; i++)
        if (ts[i].state == TENSOR_NUM_BATCHES) {
            assert_float_equal(p[ts[i].off], 1000.0f, 0);
            counts++;
        }
    assert_int_equal(counts, 2);
    static const char *const ds[] = {"layers/normalization/vars/0", "layers/normalization/vars/1",
                                     "layers/normalization_1/vars/0",
                                     "layers/normalization_1/vars/1", "layers/conv2d/vars/0"};
    char *dir = expect_saved_as_keras(&m, p, KDIR "normalize_k3.weights.h5", "kh5-normalize", ds,
                                      sizeof ds / sizeof ds[0]);
    char path[1024];
    snprintf(path, sizeof path, "%s/saved.weights.h5", dir);
    assert_int_equal(scalar_int(path, "layers/normalization/vars/2"), 1000);
    free(p);
    free(dir);
    model_free(&m);
}

// ConvNeXt's families (tests/fixtures/keras/convnext_k3.*): Normalization of constants, a
// Sequential stem inside the model (its weights under layers/sequential/layers/), Conv2D with
// groups = channels (a dwconv, Conv2D's (3,3,1,6) kernel), Dense on the image's channels (a 1x1
// conv, Dense's (6,12) kernel), LayerNormalization and LayerScale: read from Keras's file they
// give Keras's probabilities; saved, the file holds Keras's datasets at Keras's paths, and reads
// back to the same bits.
static void test_convnext(void **state) {
    (void)state;
    model m;
    float *p = load_model(&m, KDIR "convnext_k3.json", KDIR "convnext_k3.weights.h5");
    expect_keras_outputs(&m, p, KDIR "convnext_k3.txt", "Keras 3 ConvNeXt families");
    static const char *const ds[] = {
        "layers/sequential/layers/conv2d/vars/0",
        "layers/sequential/layers/layer_normalization/vars/1",
        "layers/conv2d/vars/0", "layers/layer_normalization/vars/0", "layers/dense/vars/0",
        "layers/dense_1/vars/1", "layers/layer_scale/vars/0", "layers/layer_normalization_1/vars/1",
        "layers/dense_2/vars/0"};
    free(expect_saved_as_keras(&m, p, KDIR "convnext_k3.weights.h5", "kh5-convnext", ds,
                               sizeof ds / sizeof ds[0]));
    free(p);
    model_free(&m);
}

// tf.keras's operations on tensors (tests/fixtures/keras/tfop_k2.*: TFOpLambda's
// __operators__.add of two convolutions, math.multiply and math.subtract by numbers): the
// graph reads as an add merge and two rescales, and Keras 2's .h5 weights give Keras's
// probabilities.
static void test_tfop(void **state) {
    (void)state;
    model m;
    float *p = load_model(&m, KDIR "tfop_k2.json", KDIR "tfop_k2.h5");
    int adds = 0, rescales = 0;
    for (int l = 0; l < m.n_layers; l++) {
        adds += m.layers[l].kind == LAYER_ADD && m.layers[l].n_in == 2;
        rescales += m.layers[l].kind == LAYER_RESCALE;
    }
    assert_int_equal(adds, 1);
    assert_int_equal(rescales, 2);
    expect_keras_outputs(&m, p, KDIR "tfop_k2.txt", "tf.keras TFOpLambda");
    free(p);
    model_free(&m);
    // Another function is refused naming it.
    size_t len;
    char *json = test_read_file(KDIR "tfop_k2.json", &len);
    assert_non_null(json);
    char *at = strstr(json, "\"math.multiply\"");
    assert_non_null(at);
    memcpy(at, "\"math.maximum\" ", 15);
    ht_error e;
    assert_int_equal(model_init_keras_text(&m, json, len, "tfop.json", &e), -1);
    test_expect_frags(e.msg, 1, "(TFOpLambda): function \"math.maximum\" is not supported; "
                      "hetrain reads TFOpLambda's __operators__.add, math.add, math.subtract, "
                      "math.multiply and math.truediv", NULL);
    free(json);
}

// Shared layers (tests/fixtures/keras/shared_conv_k{2,3}.*: a Conv2D called three times, a
// ReLU twice, a Dense twice on its own output): both Keras generations' graphs read with one
// set of parameters a shared layer, and Keras's files give Keras's probabilities; saved, the
// Keras 3 file holds Keras's datasets (a shared layer's once) and reads back to the same bits.
static void test_shared(void **state) {
    (void)state;
    model m;
    float *p = load_model(&m, KDIR "shared_conv_k2.json", KDIR "shared_conv_k2.h5");
    expect_keras_outputs(&m, p, KDIR "shared_conv_k2.txt", "tf.keras shared layers");
    free(p);
    model_free(&m);
    p = load_model(&m, KDIR "shared_conv_k3.json", KDIR "shared_conv_k3.weights.h5");
    int sharers = 0;
    for (int l = 0; l < m.n_layers; l++) sharers += m.layers[l].share != 0;
    assert_int_equal(sharers, 3);
    assert_int_equal(m.n_params, 165);
    expect_keras_outputs(&m, p, KDIR "shared_conv_k3.txt", "Keras 3 shared layers");
    static const char *const ds[] = {"layers/conv2d/vars/0", "layers/conv2d_1/vars/0",
                                     "layers/conv2d_1/vars/1", "layers/dense/vars/0",
                                     "layers/dense_1/vars/1"};
    free(expect_saved_as_keras(&m, p, KDIR "shared_conv_k3.weights.h5", "kh5-shared", ds,
                               sizeof ds / sizeof ds[0]));
    free(p);
    model_free(&m);
}

// By name (Keras 2's load_weights(by_name=True), skip_mismatch): tf_keras's .h5 by layer names
// gives the bits of the ordinary load; a model whose head has 4 classes takes the rest from
// either generation's file, its head listed and left at its initial values with skip_mismatch,
// an error naming it and --skip-mismatch without.
static void test_by_name(void **state) {
    (void)state;
    model m;
    float *full = load_model(&m, KDIR "shared_conv_k3.json", KDIR "shared_conv_k2.h5");
    float *p = malloc(m.n_params * sizeof *p);
    model_init_params(&m, p, 3);
    load_partial pl = {0};
    ht_error e;
    if (kerash5_load_partial(KDIR "shared_conv_k2.h5", &m, p, &pl, &e)) fail_msg("%s", e.msg);
    assert_int_equal(pl.n_listed, 0);
    assert_memory_equal(p, full, m.n_params * sizeof *p);
    free(p), free(full);
    model_free(&m);
    // The head of 4 classes.
    size_t len;
    char *json = test_read_file(KDIR "shared_conv_k3.json", &len);
    assert_non_null(json);
    char *head = strstr(json, "\"name\": \"head\"");
    assert_non_null(head);
    char *units = strstr(head, "\"units\": 3");
    assert_non_null(units);
    units[9] = '4';
    if (model_init_keras_text(&m, json, len, "head4.json", &e)) fail_msg("%s", e.msg);
    free(json);
    const int hl = model_find_layer(&m, "head");
    assert_true(hl >= 0);
    const layer *H = &m.layers[hl];
    static const char *const files[] = {KDIR "shared_conv_k2.h5", KDIR "shared_conv_k3.weights.h5"};
    for (int f = 0; f < 2; f++) {
        float *init = malloc(m.n_params * sizeof *init);
        p = malloc(m.n_params * sizeof *p);
        model_init_params(&m, init, 5);
        memcpy(p, init, m.n_params * sizeof *p);
        pl = (load_partial){0};
        assert_int_equal(kerash5_load_partial(files[f], &m, p, &pl, &e), -1);
        test_expect_frags(e.msg, 1, "layer \"head\" (Dense)", "(--skip-mismatch", NULL);
        assert_memory_equal(p, init, m.n_params * sizeof *p); // untouched
        pl.skip_mismatch = 1;
        if (kerash5_load_partial(files[f], &m, p, &pl, &e)) fail_msg("%s", e.msg);
        assert_int_equal(pl.n_listed, 1);
        test_expect_frags(pl.listed, 0, "layer \"head\" (Dense)", "left at its initial values",
                          NULL);
        // The head as it was; every other layer the file's (not its initial values).
        assert_memory_equal(p + H->w_off, init + H->w_off, (H->n_w + H->n_b) * sizeof *p);
        const int stem = model_find_layer(&m, "stem");
        assert_true(memcmp(p + m.layers[stem].w_off, init + m.layers[stem].w_off,
                           m.layers[stem].n_w * sizeof *p) != 0);
        load_partial_free(&pl);
        free(p), free(init);
    }
    model_free(&m);
}

// ---- refusals --------------------------------------------------------------------------------

// Copies src to dir/name and returns the malloc'd path.
static char *copy_file(const char *src, const char *dir, const char *name) {
    size_t len;
    char *data = test_read_file(src, &len);
    assert_non_null(data);
    char *p = test_write_file(dir, name, data, len);
    free(data);
    return p;
}

// Loading path into the model of json fails with a one-line message that names the file and
// holds every fragment; params stay untouched.
static void expect_load_fail(const char *json, const char *path, ...) {
    model m;
    ht_error e;
    if (model_init_keras(&m, json, &e)) fail_msg("%s", e.msg);
    float *p = malloc(m.n_params * sizeof *p), *before = malloc(m.n_params * sizeof *p);
    for (size_t i = 0; i < m.n_params; i++) p[i] = before[i] = (float)i;
    if (kerash5_load(path, &m, p, &e) == 0) fail_msg("%s: loaded, expected a failure", path);
    test_expect_frags(e.msg, 1, path, NULL);
    va_list ap;
    va_start(ap, path);
    for (const char *frag; (frag = va_arg(ap, const char *));)
        if (!strstr(e.msg, frag)) fail_msg("message \"%s\" lacks \"%s\"", e.msg, frag);
    va_end(ap);
    assert_memory_equal(p, before, m.n_params * sizeof *p);
    free(p);
    free(before);
    model_free(&m);
}

static void write_dataset(hid_t loc, const char *name, hid_t type, int nd, const hsize_t *dims,
                          const void *data, hid_t memtype) {
    H5Ldelete(loc, name, H5P_DEFAULT); // may not exist
    hid_t s = H5Screate_simple(nd, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(d);
    H5Sclose(s);
}

static void test_load_errors(void **state) {
    (void)state;
    char *dir = test_tmpdir("kh5-errors");
    char *p;
    hid_t f;

    // A layer's group missing (renamed away): the group, the layer's name and class.
    p = copy_file(K3_FILE, dir, "nolayer.weights.h5");
    f = h5_open_rw(p);
    assert_true(H5Lmove(f, "layers/dense_1", f, "layers/dense_9", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_load_fail(K3_JSON, p, "no layers/dense_1/vars", "\"head\"", "Dense", NULL);
    free(p);

    // A variable missing.
    p = copy_file(K3_FILE, dir, "novar.weights.h5");
    f = h5_open_rw(p);
    assert_true(H5Ldelete(f, "layers/dense/vars/1", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_load_fail(K3_JSON, p, "layers/dense/vars holds 1 variables", "\"hidden\"",
                     "has 2 (kernel, bias)", NULL);
    free(p);

    // A kernel of the wrong shape: C and OC swapped.
    p = copy_file(K3_FILE, dir, "shape.weights.h5");
    f = h5_open_rw(p);
    float zeros[72] = {0};
    write_dataset(f, "layers/conv2d/vars/0", H5T_IEEE_F32LE, 4, (hsize_t[]){3, 3, 4, 2}, zeros,
                  H5T_NATIVE_FLOAT);
    H5Fclose(f);
    expect_load_fail(K3_JSON, p, "layers/conv2d/vars/0", "kernel of layer \"features\"",
                     "expected shape (3, 3, 2, 4), found (3, 3, 4, 2)", NULL);
    free(p);

    // Integers where floats belong, and a NaN.
    p = copy_file(K3_FILE, dir, "ints.weights.h5");
    f = h5_open_rw(p);
    int ints[4] = {1, 2, 3, 4};
    write_dataset(f, "layers/batch_normalization/vars/0", H5T_STD_I32LE, 1, (hsize_t[]){4},
                  ints, H5T_NATIVE_INT);
    H5Fclose(f);
    expect_load_fail(K3_JSON, p, "gamma of layer \"bn_a\"", "holds integers", NULL);
    free(p);
    p = copy_file(K3_FILE, dir, "nan.weights.h5");
    f = h5_open_rw(p);
    float nan4[4] = {1, 1, NAN, 1};
    write_dataset(f, "layers/batch_normalization/vars/3", H5T_IEEE_F32LE, 1, (hsize_t[]){4},
                  nan4, H5T_NATIVE_FLOAT);
    H5Fclose(f);
    expect_load_fail(K3_JSON, p, "moving_variance of layer \"bn_a\"", "element 2 is NaN", NULL);
    free(p);

    // Weights of a layer the model does not have.
    p = copy_file(K3_FILE, dir, "extra.weights.h5");
    f = h5_open_rw(p);
    assert_true(H5Lcopy(f, "layers/dense_1", f, "layers/dense_2", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_load_fail(K3_JSON, p, "layers/dense_2 holds the weights of a layer", "model tiny",
                     NULL);
    free(p);

    // Another model's file: Keras 3's into a model whose first Conv2D differs, Keras 2's into a
    // model with another count of layers with weights.
    expect_load_fail(KDIR "mnist_small_k3.json", K3_FILE, "layers/conv2d/vars/0",
                     "expected shape (3, 3, 1, 8), found (3, 3, 2, 4)", NULL);
    expect_load_fail(KDIR "mnist_small_k2.json", K2_FILE, "holds the weights of 7 layers",
                     "has 3 layers with weights", NULL);

    // Keras 2: a layer listing one weight fewer than hetrain's layer has.
    p = copy_file(K2_FILE, dir, "k2short.h5");
    f = h5_open_rw(p);
    hid_t g = H5Gopen2(f, "head", H5P_DEFAULT);
    assert_true(H5Adelete(g, "weight_names") >= 0);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t s = H5Screate_simple(1, (hsize_t[]){1}, NULL);
    hid_t a = H5Acreate2(g, "weight_names", t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char *one[] = {"head/kernel:0"};
    assert_true(H5Awrite(a, t, one) >= 0);
    H5Aclose(a), H5Sclose(s), H5Tclose(t), H5Gclose(g), H5Fclose(f);
    expect_load_fail(K2_JSON, p, "the file's layer \"head\" holds 1 weights (head/kernel:0)",
                     "has 2 (kernel, bias)", NULL);
    free(p);

    // Not Keras weights at all.
    const char text[] = "ImageId,Label\n1,2\n";
    p = test_write_file(dir, "text.weights.h5", text, sizeof text - 1);
    expect_load_fail(K3_JSON, p, "not an HDF5 file", NULL);
    free(p);
    const char zip[] = "PK\3\4 a .keras archive";
    p = test_write_file(dir, "model.keras", zip, sizeof zip - 1);
    expect_load_fail(K3_JSON, p, "zip archive", "model.weights.h5", NULL);
    free(p);
    char path[1024];
    snprintf(path, sizeof path, "%s/empty.h5", dir);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    expect_load_fail(K3_JSON, path, "not Keras weights", NULL);
    snprintf(path, sizeof path, "%s/missing.weights.h5", dir);
    expect_load_fail(K3_JSON, path, "No such file", NULL);
    free(dir);
}

static void test_save_errors(void **state) {
    (void)state;
    char *dir = test_tmpdir("kh5-save");
    char path[1024];
    ht_error e;
    model m;
    float *p = load_model(&m, K3_JSON, K3_FILE);

    // A name Keras would not read as .weights.h5: refused before and at the save.
    snprintf(path, sizeof path, "%s/model.h5", dir);
    assert_int_equal(kerash5_check_save(path, &m, &e), -1);
    test_expect_frags(e.msg, 1, path, "*.weights.h5", NULL);
    assert_int_equal(kerash5_save(path, &m, p, &e), -1);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/model.weights.h5", dir);
    if (kerash5_check_save(path, &m, &e)) fail_msg("%s", e.msg);

    // A write that fails (a file where the folder should be): no file, no temporary.
    char *file = test_write_file(dir, "file", "x", 1);
    snprintf(path, sizeof path, "%s/sub.weights.h5", file);
    assert_int_equal(kerash5_save(path, &m, p, &e), -1);
    test_expect_frags(e.msg, 1, path, "cannot create", NULL);
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.') files++;
    closedir(d);
    assert_int_equal(files, 1);
    free(file);
    free(p);
    model_free(&m);
    free(dir);
}

static void test_is_path(void **state) {
    (void)state;
    assert_true(kerash5_is_path("a.weights.h5", 0));
    assert_true(kerash5_is_path("dir/model.H5", 0));
    assert_true(kerash5_is_path("model.hdf5", 0));
    assert_true(kerash5_is_path("model.keras", 0));
    assert_false(kerash5_is_path("model.safetensors", 0));
    assert_false(kerash5_is_path("h5", 0));
    // Reading, the file's signature counts too.
    char *dir = test_tmpdir("kh5-sniff");
    char *p = copy_file(K3_FILE, dir, "weights.bin");
    assert_false(kerash5_is_path(p, 0));
    assert_true(kerash5_is_path(p, 1));
    free(p);
    p = test_write_file(dir, "w.safetensors", "\x08\0\0\0\0\0\0\0{}      ", 16);
    assert_false(kerash5_is_path(p, 1));
    free(p);
    free(dir);
}

// --save x.weights.h5 and --load through the CLI: predict from the saved file gives the
// training run's predictions; a Keras name Keras would not read is refused before training.
static void test_cli(void **state) {
    (void)state;
    char *dir = test_tmpdir("kh5-cli");
    char args[4096], a[1024], b[1024];
    const char *common = "--model " KDIR "mnist_small_k3.json --data " FASHION_DIR
                         " --limit 300 --batch 100 --epochs 1 --quiet";
    snprintf(args, sizeof args, "train %s --save %s/m.h5 --out %s --name bad", common, dir, dir);
    free(test_expect_cli(args, 1, "name the file *.weights.h5"));
    snprintf(a, sizeof a, "%s/bad.metrics.csv", dir);
    assert_int_equal(access(a, F_OK), -1); // refused before the run began
    snprintf(args, sizeof args, "train %s --save %s/m.weights.h5 --out %s --name run", common,
             dir, dir);
    free(test_expect_cli(args, 0, NULL));
    snprintf(args, sizeof args,
             "predict --model " KDIR "mnist_small_k3.json --data " FASHION_DIR
             " --load %s/m.weights.h5 --out %s/p.csv", dir, dir);
    free(test_expect_cli(args, 0, "accuracy"));
    snprintf(a, sizeof a, "%s/run.predictions.csv", dir);
    snprintf(b, sizeof b, "%s/p.csv", dir);
    char *pa = test_read_file(a, NULL), *pb = test_read_file(b, NULL);
    assert_non_null(pa);
    assert_non_null(pb);
    assert_string_equal(pa, pb);
    free(pa);
    free(pb);
    // And training on from it.
    snprintf(args, sizeof args, "train %s --load %s/m.weights.h5 --out %s --name more", common,
             dir, dir);
    free(test_expect_cli(args, 0, NULL));
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras_files), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_normalize),   cmocka_unit_test(test_convnext),
        cmocka_unit_test(test_tfop),        cmocka_unit_test(test_shared),
        cmocka_unit_test(test_by_name),
        cmocka_unit_test(test_load_errors), cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_is_path),     cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
