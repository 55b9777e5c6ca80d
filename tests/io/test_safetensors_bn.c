// safetensors files of a model with batchnorm: its state under PyTorch's names, the count of
// updates (num_batches_tracked) as PyTorch's int64 scalar (dtype I64, shape []) with its data
// aligned as Python's writer aligns it, a bitwise round trip, I64 and F32 counts read back,
// I64 refused for every other tensor; and checkpoints, which keep the count as F32.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "io/jsonkeys.h"
#include "io/safetensors.h"
#include "io/stfile.h"
#include "tests/lib/testutil.h"
#include "tests/lib/st_build.h"

// 1x6x6 -> conv 3x3 without bias -> batchnorm -> relu -> dense 5 -> batchnorm without beta
// (center = false) -> dense 4 -> softmax: two batchnorms, 3 + 5 channels.
static void model_bn(model *m) {
    ht_error e = {{0}};
    if (model_begin(m, "bn", 1, 6, 6, 4, &e)) fail_msg("%s", e.msg);
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 3, .k = 3, .stride = 1, .no_bias = 1,
         .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_BATCHNORM, .name = "bn1", .w_init = INIT_ONES, .b_init = INIT_ZEROS},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DENSE, .units = 5, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_BATCHNORM, .name = "bn2", .no_center = 1, .w_init = INIT_ONES},
        {.kind = LAYER_DENSE, .units = 4, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (model_add(m, &s[i], &e)) fail_msg("model_add %zu: %s", i, e.msg);
    if (model_finish(m, &e)) fail_msg("%s", e.msg);
}

static const model_tensor *tensor_named(const model *m, const char *name) {
    const model_tensor *t;
    int n = model_tensors(m, &t);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

// Arbitrary finite bits everywhere, and whole-number counts: 12345, and 3e9 (beyond int32).
static float *bn_params(const model *m, uint32_t seed) {
    float *p = finite_bits(m->n_params, seed);
    p[tensor_named(m, "bn1.num_batches_tracked")->off] = 12345.0f;
    p[tensor_named(m, "bn2.num_batches_tracked")->off] = 3e9f;
    return p;
}

// The file's header as a JSON object (to put) and the size of the header field in *hlen.
static json_object *read_header(const char *path, uint64_t *hlen, char **bytes) {
    size_t len = 0;
    char *b = test_read_file(path, &len);
    assert_non_null(b);
    assert_true(len >= 8);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | (unsigned char)b[i];
    assert_true(8 + h <= len);
    char *text = strndup(b + 8, h);
    json_object *root = json_tokener_parse(text);
    assert_non_null(root);
    free(text);
    *hlen = h;
    *bytes = b;
    return root;
}

// Tensor `name`'s entry: its dtype, its shape as "[..]" text and its data offsets.
static void entry(json_object *root, const char *name, const char **dtype, char *shape,
                  size_t cap, uint64_t *begin, uint64_t *end) {
    json_object *ent, *v;
    if (!json_object_object_get_ex(root, name, &ent)) fail_msg("no entry %s", name);
    assert_true(json_object_object_get_ex(ent, "dtype", &v));
    *dtype = json_object_get_string(v);
    assert_true(json_object_object_get_ex(ent, "shape", &v));
    snprintf(shape, cap, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    assert_true(json_object_object_get_ex(ent, "data_offsets", &v));
    *begin = json_object_get_uint64(json_object_array_get_idx(v, 0));
    *end = json_object_get_uint64(json_object_array_get_idx(v, 1));
}

static int64_t le_i64(const char *b) {
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | (unsigned char)b[i];
    return (int64_t)u;
}

// Save, then load into arbitrary bits: the same bits back. The header names every tensor with
// PyTorch's shape; the counts are I64 [] holding their values, aligned to 8 bytes.
static void test_bn_round_trip(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-bn");
    char path[1024];
    ht_error e = {{0}};
    model m;
    model_bn(&m);
    assert_int_equal(m.n_trainable, 27 + 6 + 48 * 5 + 5 + 5 + 5 * 4 + 4);
    assert_int_equal(m.n_state, 7 + 11);
    float *src = bn_params(&m, 7), *dst = random_bits(m.n_params, 8);
    snprintf(path, sizeof path, "%s/bn.safetensors", dir);
    if (safetensors_save(path, &m, src, &e)) fail_msg("%s", e.msg);
    if (safetensors_load(path, &m, dst, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);

    uint64_t hlen;
    char *bytes;
    json_object *root = read_header(path, &hlen, &bytes);
    const char *data = bytes + 8 + hlen;
    const model_tensor *t;
    int nt = model_tensors(&m, &t);
    for (int i = 0; i < nt; i++) {
        const char *dtype;
        char shape[64], want[64];
        uint64_t b, end;
        entry(root, t[i].name, &dtype, shape, sizeof shape, &b, &end);
        stfile_fmt_shape(want, sizeof want, t[i].shape, t[i].ndim);
        if (strcmp(shape, want)) fail_msg("%s: shape %s, expected %s", t[i].name, shape, want);
        if (t[i].state == TENSOR_NUM_BATCHES) {
            assert_string_equal(dtype, "I64");
            assert_string_equal(shape, "[]");
            assert_int_equal(end - b, 8);
            assert_int_equal(b % 8, 0);
            assert_true(le_i64(data + b) == (int64_t)src[t[i].off]);
        } else {
            assert_string_equal(dtype, "F32");
            assert_int_equal(end - b, 4 * t[i].n);
            assert_memory_equal(data + b, src + t[i].off, 4 * t[i].n); // little-endian hosts
        }
    }
    // As Python's writer lays them out: the 8-byte values first.
    const char *dtype;
    char shape[64];
    uint64_t b, end;
    entry(root, "bn1.num_batches_tracked", &dtype, shape, sizeof shape, &b, &end);
    assert_true(b == 0 && end == 8);
    entry(root, "bn2.num_batches_tracked", &dtype, shape, sizeof shape, &b, &end);
    assert_true(b == 8 && end == 16);
    assert_int_equal(le_i64(data + 8), 3000000000LL);
    json_object_put(root);
    free(bytes);

    // A fresh model's state: means 0, variances 1, counts 0.
    model_init_params(&m, src, 3);
    if (safetensors_save(path, &m, src, &e) || safetensors_load(path, &m, dst, &e))
        fail_msg("%s", e.msg);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);
    assert_true(dst[tensor_named(&m, "bn2.num_batches_tracked")->off] == 0.0f);
    assert_true(dst[tensor_named(&m, "bn1.running_var")->off] == 1.0f);

    // A count that is no whole number cannot be written, and nothing is.
    src[tensor_named(&m, "bn2.num_batches_tracked")->off] = 2.5f;
    snprintf(path, sizeof path, "%s/half.safetensors", dir);
    assert_int_equal(safetensors_save(path, &m, src, &e), -1);
    if (!strstr(e.msg, "tensor \"bn2.num_batches_tracked\" element 0 is 2.5, which I64 cannot "
                       "hold"))
        fail_msg("%s", e.msg);
    struct stat st;
    assert_int_equal(stat(path, &st), -1);
    free(src);
    free(dst);
    model_free(&m);
    free(dir);
}

// Writes m's tensors with dtype[i] (NULL: all F32), tensor `reshape` as [1] when not NULL.
static void write_as(const char *path, const model *m, const float *p, const stfile_dtype *dt,
                     const char *reshape) {
    const model_tensor *t;
    int nt = model_tensors(m, &t);
    stfile_tensor st[16];
    static const uint64_t one[1] = {1};
    assert_true(nt <= 16);
    for (int i = 0; i < nt; i++) {
        int re = reshape && !strcmp(t[i].name, reshape);
        st[i] = (stfile_tensor){t[i].name, re ? 1 : t[i].ndim, re ? one : t[i].shape,
                                p + t[i].off};
    }
    static const char *const meta[] = {"format", "pt"};
    ht_error e = {{0}};
    if (stfile_write_dtypes(path, st, dt, nt, meta, 1, -1, &e)) fail_msg("%s", e.msg);
}

static void expect_load_fail(const char *path, const model *m, const char *frag) {
    float *p = calloc(m->n_params, sizeof *p);
    ht_error e = {{0}};
    assert_int_equal(safetensors_load(path, m, p, &e), -1);
    if (!strstr(e.msg, frag)) fail_msg("\"%s\" lacks \"%s\"", e.msg, frag);
    assert_non_null(strstr(e.msg, path));
    free(p);
}

// The count read as F32 (or a negative I64, as a file may hold one); I64 for any other tensor
// and a count of another shape are refused.
static void test_bn_read_dtypes(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-bn-dtypes");
    char path[1024];
    ht_error e = {{0}};
    model m;
    model_bn(&m);
    const model_tensor *t;
    int nt = model_tensors(&m, &t);
    float *src = bn_params(&m, 11), *dst = calloc(m.n_params, sizeof *dst);

    snprintf(path, sizeof path, "%s/f32.safetensors", dir);
    write_as(path, &m, src, NULL, NULL);
    if (safetensors_load(path, &m, dst, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);

    stfile_dtype dt[16];
    for (int i = 0; i < nt; i++)
        dt[i] = t[i].state == TENSOR_NUM_BATCHES ? STFILE_I64 : STFILE_F32;
    src[tensor_named(&m, "bn1.num_batches_tracked")->off] = -7.0f;
    snprintf(path, sizeof path, "%s/neg.safetensors", dir);
    write_as(path, &m, src, dt, NULL);
    if (safetensors_load(path, &m, dst, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);

    // I64 for a trainable tensor and for a running mean (whole numbers, so writable).
    static const char *const names[] = {"conv1.weight", "bn1.running_mean"};
    for (int k = 0; k < 2; k++) {
        const model_tensor *x = tensor_named(&m, names[k]);
        for (size_t j = 0; j < x->n; j++) src[x->off + j] = (float)j;
        dt[x - t] = STFILE_I64;
        snprintf(path, sizeof path, "%s/i64_%d.safetensors", dir, k);
        write_as(path, &m, src, dt, NULL);
        char want[160];
        snprintf(want, sizeof want, "tensor \"%s\" is I64: hetrain's weights are floats "
                 "(integers only in a batchnorm's num_batches_tracked)", names[k]);
        expect_load_fail(path, &m, want);
        dt[x - t] = STFILE_F32;
    }

    // PyTorch's count is a scalar: [1] is another shape.
    snprintf(path, sizeof path, "%s/shape.safetensors", dir);
    write_as(path, &m, src, dt, "bn2.num_batches_tracked");
    expect_load_fail(path, &m, "tensor \"bn2.num_batches_tracked\": expected shape [], found [1]");
    free(src);
    free(dst);
    model_free(&m);
    free(dir);
}

// Checkpoints keep every tensor F32, the count too (shape []), and round-trip bit for bit.
static void test_bn_checkpoint(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-bn-ckpt");
    char path[1024];
    ht_error e = {{0}};
    model m;
    model_bn(&m);
    float *src = bn_params(&m, 21), *dst = random_bits(m.n_params, 22);
    float moment[4] = {1, 2, 3, 4};
    ckpt_blob blob = {"optim.m", moment, 4};
    snprintf(path, sizeof path, "%s/bn.ckpt", dir);
    if (checkpoint_write(path, &m, src, &blob, 1, NULL, 0, &e)) fail_msg("%s", e.msg);
    checkpoint c;
    if (checkpoint_read(path, &m, dst, &c, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);
    size_t n;
    assert_non_null(checkpoint_blob(&c, "optim.m", &n));
    assert_int_equal(n, 4);
    checkpoint_free(&c);

    uint64_t hlen, b, end;
    char *bytes, shape[64];
    const char *dtype;
    json_object *root = read_header(path, &hlen, &bytes);
    entry(root, "bn2.num_batches_tracked", &dtype, shape, sizeof shape, &b, &end);
    assert_string_equal(dtype, "F32");
    assert_string_equal(shape, "[]");
    assert_int_equal(end - b, 4);
    json_object_put(root);
    free(bytes);
    free(src);
    free(dst);
    model_free(&m);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_round_trip),
        cmocka_unit_test(test_bn_read_dtypes),
        cmocka_unit_test(test_bn_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
