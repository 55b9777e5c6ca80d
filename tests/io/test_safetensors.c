// safetensors save/load: bitwise round trips, files laid out as Python's writer lays them out,
// dtype conversion, non-finite values. Malformed files: test_safetensors_errors.c.
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
#include "tests/lib/testutil.h"
#include "tests/lib/st_build.h"

// ---- tests ----

static void test_round_trip(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-roundtrip");
    assert_non_null(dir);
    char path[1024];
    ht_error e;

    test_model t;
    model_a(&t);
    assert_int_equal(t.m.n_params, 235);
    float *src = finite_bits(t.m.n_params, 12345), *dst = random_bits(t.m.n_params, 999);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, src, &e), 0);
    assert_int_equal(safetensors_load(path, &t.m, dst, &e), 0);
    assert_memory_equal(src, dst, t.m.n_params * sizeof *src);

    // Overwriting an existing file replaces it.
    float *src2 = finite_bits(t.m.n_params, 777);
    assert_int_equal(safetensors_save(path, &t.m, src2, &e), 0);
    assert_int_equal(safetensors_load(path, &t.m, dst, &e), 0);
    assert_memory_equal(src2, dst, t.m.n_params * sizeof *src);
    free(src);
    free(src2);
    free(dst);
    tm_free(&t);

    // Larger than one I/O chunk, and a layer name that needs JSON escaping.
    tm_begin(&t, "big");
    tm_dense(&t, "fc\"odd\\name", 300, 1, 1, 200);
    tm_add(&t, LAYER_SOFTMAX_XENT, "softmax", 200, 1, 1);
    tm_finish(&t);
    src = finite_bits(t.m.n_params, 4242);
    dst = calloc(t.m.n_params, sizeof *dst);
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, src, &e), 0);
    assert_int_equal(safetensors_load(path, &t.m, dst, &e), 0);
    assert_memory_equal(src, dst, t.m.n_params * sizeof *src);
    free(src);
    free(dst);
    free(dir);
    tm_free(&t);
}

// Whether the string s occurs in the len bytes at p.
static int has_bytes(const char *p, size_t len, const char *s) {
    const size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(p + i, s, n)) return 1;
    return 0;
}

// A model with layers without a bias (models/cifar_small.cfg: conv2 has bias = 0): its
// weights file and checkpoint hold no "conv2.bias" and load back bit for bit; a file of the
// same model with the bias is refused, naming the tensor.
static void test_round_trip_no_bias(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-nobias");
    assert_non_null(dir);
    char path[1024];
    ht_error e;
    model m;
    if (model_init_config(&m, HT_SOURCE_DIR "/models/cifar_small.cfg", &e)) fail_msg("%s", e.msg);
    const int conv2 = model_find_layer(&m, "conv2");
    assert_true(conv2 >= 0 && m.layers[conv2].n_b == 0);
    for (int i = 0; i < m.n_tensors; i++) assert_string_not_equal(m.tensors[i].name, "conv2.bias");
    float *src = finite_bits(m.n_params, 31), *dst = random_bits(m.n_params, 32);
    snprintf(path, sizeof path, "%s/nb.safetensors", dir);
    assert_int_equal(safetensors_save(path, &m, src, &e), 0);
    assert_int_equal(safetensors_load(path, &m, dst, &e), 0);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);
    size_t len = 0;
    char *text = test_read_file(path, &len);
    assert_non_null(text);
    assert_false(has_bytes(text, len, "\"conv2.bias\""));
    assert_true(has_bytes(text, len, "\"conv1.bias\""));
    free(text);

    snprintf(path, sizeof path, "%s/nb.ckpt", dir);
    const char *meta[] = {"k", "v"};
    assert_int_equal(checkpoint_write(path, &m, src, NULL, 0, meta, 1, &e), 0);
    checkpoint c;
    memset(dst, 0, m.n_params * sizeof *dst);
    if (checkpoint_read(path, &m, dst, &c, &e)) fail_msg("%s", e.msg);
    assert_memory_equal(src, dst, m.n_params * sizeof *src);
    checkpoint_free(&c);

    // The same network with conv2's bias: its weights do not load into the model without.
    model mb;
    if (model_init_config(&mb, HT_SOURCE_DIR "/models/cifar_small.cfg", &e)) fail_msg("%s", e.msg);
    mb.layers[conv2].n_b = (size_t)mb.layers[conv2].oc;
    mb.layers[conv2].b_off = mb.layers[conv2].w_off + mb.layers[conv2].n_w;
    for (int l = conv2 + 1; l < mb.n_layers; l++)
        if (mb.layers[l].w_off != LAYER_NO_PARAM) {
            mb.layers[l].w_off += mb.layers[conv2].n_b;
            if (mb.layers[l].n_b) mb.layers[l].b_off += mb.layers[conv2].n_b;
        }
    mb.n_params += mb.layers[conv2].n_b;
    if (model_finish(&mb, &e)) fail_msg("%s", e.msg);
    float *sb = finite_bits(mb.n_params, 33);
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    assert_int_equal(safetensors_save(path, &mb, sb, &e), 0);
    assert_int_equal(safetensors_load(path, &m, dst, &e), -1);
    printf("expected failure: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "conv2.bias"));
    free(sb);
    model_free(&mb);
    free(src);
    free(dst);
    model_free(&m);
    free(dir);
}

// What safetensors_save writes, read back with json-c: names, shapes, offsets, alignment.
static void test_saved_layout(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-layout");
    char path[1024];
    ht_error e;
    test_model t;
    model_a(&t);
    float *src = random_bits(t.m.n_params, 5);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, src, &e), 0);

    size_t len;
    unsigned char *buf = (unsigned char *)test_read_file(path, &len);
    assert_non_null(buf);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    assert_int_equal(hlen % 8, 0); // data starts 8-byte aligned
    assert_int_equal(len, 8 + hlen + 4 * t.m.n_params);
    assert_int_equal(buf[8], '{');

    char *hdr = strndup((char *)buf + 8, hlen);
    json_object *root = json_tokener_parse(hdr);
    assert_non_null(root);
    json_object *meta, *fmt;
    assert_true(json_object_object_get_ex(root, "__metadata__", &meta));
    assert_true(json_object_object_get_ex(meta, "format", &fmt));
    assert_string_equal(json_object_get_string(fmt), "pt");

    static const struct {
        const char *name;
        int nd;
        int shape[4];
        int begin, end;
    } want[] = {
        {"features.0.weight", 4, {2, 1, 3, 3}, 0, 72},
        {"features.0.bias", 1, {2}, 72, 80},
        {"features.3.weight", 4, {3, 2, 3, 3}, 80, 296},
        {"features.3.bias", 1, {3}, 296, 308},
        {"classifier.1.weight", 2, {5, 27}, 308, 848},
        {"classifier.1.bias", 1, {5}, 848, 868},
        {"classifier.4.weight", 2, {3, 5}, 868, 928},
        {"classifier.4.bias", 1, {3}, 928, 940},
    };
    assert_int_equal(json_object_object_length(root), 9);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        json_object *ent, *dt, *sh, *of;
        if (!json_object_object_get_ex(root, want[i].name, &ent)) fail_msg("no %s", want[i].name);
        assert_true(json_object_object_get_ex(ent, "dtype", &dt));
        assert_string_equal(json_object_get_string(dt), "F32");
        assert_true(json_object_object_get_ex(ent, "shape", &sh));
        assert_int_equal(json_object_array_length(sh), want[i].nd);
        for (int d = 0; d < want[i].nd; d++)
            assert_int_equal(json_object_get_int(json_object_array_get_idx(sh, d)),
                             want[i].shape[d]);
        assert_true(json_object_object_get_ex(ent, "data_offsets", &of));
        assert_int_equal(json_object_array_length(of), 2);
        assert_int_equal(json_object_get_int(json_object_array_get_idx(of, 0)), want[i].begin);
        assert_int_equal(json_object_get_int(json_object_array_get_idx(of, 1)), want[i].end);
    }
    // The data is the flat buffer in layer order, little-endian (this host is little-endian).
    uint32_t one = 1;
    if (*(unsigned char *)&one == 1) assert_memory_equal(buf + 8 + hlen, src, 4 * t.m.n_params);

    json_object_put(root);
    free(hdr);
    free(buf);
    free(src);
    free(dir);
    tm_free(&t);
}

// A file laid out byte for byte as Python's safetensors.torch.save_file writes it for a
// PyTorch model with these names: tensors sorted by name, so biases first and classifier
// before features.
static void test_python_layout(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-python");
    ht_error e;
    test_model t;
    model_a(&t);
    static const ent es[] = {
        {"classifier.1.bias", "F32", "[5]", 20},   {"classifier.1.weight", "F32", "[5,27]", 540},
        {"classifier.4.bias", "F32", "[3]", 12},   {"classifier.4.weight", "F32", "[3,5]", 60},
        {"features.0.bias", "F32", "[2]", 8},      {"features.0.weight", "F32", "[2,1,3,3]", 72},
        {"features.3.bias", "F32", "[3]", 12},     {"features.3.weight", "F32", "[3,2,3,3]", 216},
    };
    const int ne = sizeof es / sizeof es[0];
    // Tensor i, element j holds i*1000 + j (exact in float), as little-endian bytes.
    unsigned char data[940];
    size_t pos = 0;
    for (int i = 0; i < ne; i++)
        for (size_t j = 0; j < es[i].bytes / 4; j++, pos += 4) {
            float f = (float)(i * 1000 + (int)j);
            uint32_t u;
            memcpy(&u, &f, 4);
            for (int b = 0; b < 4; b++) data[pos + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
    assert_int_equal(pos, sizeof data);

    for (int mixed = 0; mixed < 2; mixed++) {
        char hdr[4096];
        make_header(hdr, sizeof hdr, es, ne, mixed);
        if (!mixed) {
            assert_int_equal(strlen(hdr) % 8, 0);
            const char *pre = "{\"__metadata__\":{\"format\":\"pt\"},\"classifier.1.bias\":"
                              "{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,20]},";
            assert_memory_equal(hdr, pre, strlen(pre));
        }
        char *path = write_st(dir, mixed ? "mixed.safetensors" : "py.safetensors", hdr, data,
                              sizeof data);
        float *p = calloc(t.m.n_params, sizeof *p);
        if (safetensors_load(path, &t.m, p, &e)) fail_msg("%s", e.msg);
        for (int i = 0; i < ne; i++) {
            char lname[32];
            const char *dot = strrchr(es[i].name, '.');
            snprintf(lname, sizeof lname, "%.*s", (int)(dot - es[i].name), es[i].name);
            const layer *L = find_layer(&t, lname);
            int is_w = !strcmp(dot, ".weight");
            size_t off = is_w ? L->w_off : L->b_off, n = is_w ? L->n_w : L->n_b;
            assert_int_equal(n * 4, es[i].bytes);
            for (size_t j = 0; j < n; j++)
                if (p[off + j] != (float)(i * 1000 + (int)j))
                    fail_msg("%s[%zu] = %g, expected %d", es[i].name, j, (double)p[off + j],
                             i * 1000 + (int)j);
        }
        free(p);
        free(path);
    }
    free(dir);
    tm_free(&t);
}

static void test_dtype_conversion(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-dtype");
    ht_error e;
    test_model t;
    model_fc(&t, 4); // weight [2,4], bias [2]

    // Weight F16: 1, -2, 0x3555, 65504 (max), 2^-24 (min subnormal), -0, -65504, 2^-14 (min
    // normal). Bias BF16: 0x4049 = 3.140625, 0xC2F7 = -123.5. (NaN and Inf: test_non_finite.)
    static const uint16_t w16[8] = {0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x8000, 0xFBFF, 0x0400};
    static const uint16_t b16[2] = {0x4049, 0xC2F7};
    const float want_w[8] = {1.0f, -2.0f, 0.333251953125f, 65504.0f, 5.9604644775390625e-08f,
                             -0.0f, -65504.0f, 6.103515625e-05f};
    const float want_b[2] = {3.140625f, -123.5f};
    unsigned char data[20];
    le16s(data, w16, 8);
    le16s(data + 16, b16, 2);
    char *path = write_st(dir, "half.safetensors",
                          "{" W_("F16", "[2,4]", "[0,16]") "," B_("BF16", "[2]", "[16,20]") "}",
                          data, sizeof data);
    float p[10];
    if (safetensors_load(path, &t.m, p, &e)) fail_msg("%s", e.msg);
    check_bits(p, want_w, 8, "F16 weight");
    check_bits(p + 8, want_b, 2, "BF16 bias");
    free(path);

    // Weight F64 (rounded to nearest float), bias F16: -2^-24, largest subnormal 1023 * 2^-24.
    const double w64[8] = {0.1, -1e-3, 1.5, 3.0, -0.0, 1e-50, 123456789.0, -7.25};
    const float want_w64[8] = {0.1f, -1e-3f, 1.5f, 3.0f, -0.0f, 0.0f, 123456792.0f, -7.25f};
    static const uint16_t b16b[2] = {0x8001, 0x03FF};
    const float want_b2[2] = {-5.9604644775390625e-08f, 6.097555160522461e-05f};
    unsigned char data2[68];
    for (int i = 0; i < 8; i++) {
        uint64_t u;
        memcpy(&u, &w64[i], 8);
        put_le64(data2 + 8 * i, u);
    }
    le16s(data2 + 64, b16b, 2);
    path = write_st(dir, "f64.safetensors",
                    "{" B_("F16", "[2]", "[64,68]") "," W_("F64", "[2,4]", "[0,64]") "}",
                    data2, sizeof data2);
    if (safetensors_load(path, &t.m, p, &e)) fail_msg("%s", e.msg);
    check_bits(p, want_w64, 8, "F64 weight");
    check_bits(p + 8, want_b2, 2, "F16 bias");
    free(path);
    free(dir);
    tm_free(&t);
}

// Loads a file of model_fc(in) and expects failure with frag and params untouched.
static void expect_bad_values(const char *dir, const char *fname, int in, const char *hdr,
                              const void *data, size_t dlen, const char *frag) {
    test_model t;
    model_fc(&t, in);
    char *path = write_st(dir, fname, hdr, data, dlen);
    float p[16], before[16];
    for (int i = 0; i < 16; i++) p[i] = before[i] = 7.0f + (float)i;
    ht_error e = {{0}};
    if (safetensors_load(path, &t.m, p, &e) != -1)
        fail_msg("%s: loaded, expected an error with \"%s\"", fname, frag);
    if (!strstr(e.msg, frag)) fail_msg("%s: message \"%s\" lacks \"%s\"", fname, e.msg, frag);
    if (!strstr(e.msg, path)) fail_msg("%s: message \"%s\" does not name the file", fname, e.msg);
    assert_memory_equal(p, before, sizeof p);
    free(path);
    tm_free(&t);
}

// NaN and infinities are refused, in every dtype and after conversion, naming the tensor, the
// element's flat index and its index by dimension.
static void test_non_finite(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-nonfinite");
    float f32[8] = {1, 2, 3, 4, NAN, 6, 7, 8}; // weight [2,3], bias [2]
    expect_bad_values(dir, "nan32.st", 3, "{" W_OK_ "," B_OK_ "}", f32, 32,
                      "tensor \"fc.weight\" element 4 [1,1] is NaN");
    f32[4] = 5, f32[7] = -INFINITY;
    expect_bad_values(dir, "inf32.st", 3, "{" W_OK_ "," B_OK_ "}", f32, 32,
                      "tensor \"fc.bias\" element 1 is -Inf");

    // F16 NaN in weight [2,4] element 6; F16 +inf and BF16 -inf in the bias.
    unsigned char d16[20];
    uint16_t w16[8] = {0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x7E00, 0x3C00};
    uint16_t b16[2] = {0x3C00, 0x3C00};
    le16s(d16, w16, 8);
    le16s(d16 + 16, b16, 2);
    const char *h16 = "{" W_("F16", "[2,4]", "[0,16]") "," B_("F16", "[2]", "[16,20]") "}";
    expect_bad_values(dir, "nan16.st", 4, h16, d16, 20,
                      "tensor \"fc.weight\" element 6 [1,2] is NaN");
    w16[6] = 0x3C00, b16[0] = 0x7C00;
    le16s(d16, w16, 8);
    le16s(d16 + 16, b16, 2);
    expect_bad_values(dir, "inf16.st", 4, h16, d16, 20, "tensor \"fc.bias\" element 0 is +Inf");
    b16[0] = 0x3F80, b16[1] = 0xFF80; // BF16 1, -inf
    le16s(d16 + 16, b16, 2);
    expect_bad_values(dir, "infbf16.st", 4,
                      "{" W_("F16", "[2,4]", "[0,16]") "," B_("BF16", "[2]", "[16,20]") "}", d16, 20,
                      "tensor \"fc.bias\" element 1 is -Inf");

    // A finite F64 beyond float's range becomes an infinity: refused, saying why.
    unsigned char d64[40];
    const double w64[4] = {0, 1, 2, 1e300};
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        memcpy(&u, &w64[i], 8);
        put_le64(d64 + 8 * i, u);
    }
    const float fb[2] = {1, 2};
    memcpy(d64 + 32, fb, 8); // little-endian host, as in test_saved_layout
    expect_bad_values(dir, "big64.st", 2,
                      "{" W_("F64", "[2,2]", "[0,32]") "," B_("F32", "[2]", "[32,40]") "}", d64, 40,
                      "tensor \"fc.weight\" element 3 [1,1] is +Inf (F64 value 1e+300 is beyond "
                      "float's range)");

    // Past the first I/O chunk: what save writes, load refuses, at the right index.
    test_model t;
    tm_begin(&t, "big");
    tm_dense(&t, "fc", 300, 1, 1, 200); // weight [200,300]
    tm_add(&t, LAYER_SOFTMAX_XENT, "softmax", 200, 1, 1);
    tm_finish(&t);
    float *src = finite_bits(t.m.n_params, 31), *dst = calloc(t.m.n_params, sizeof *dst);
    src[20000] = NAN;
    char path[1200];
    ht_error e;
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, src, &e), 0);
    assert_int_equal(safetensors_load(path, &t.m, dst, &e), -1);
    if (!strstr(e.msg, "tensor \"fc.weight\" element 20000 [66,200] is NaN")) fail_msg("%s", e.msg);
    free(src);
    free(dst);
    free(dir);
    tm_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_round_trip_no_bias),
        cmocka_unit_test(test_saved_layout),  cmocka_unit_test(test_python_layout),
        cmocka_unit_test(test_dtype_conversion), cmocka_unit_test(test_non_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
