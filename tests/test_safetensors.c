// safetensors save/load: bitwise round trips, files laid out as Python's writer lays them out,
// dtype conversion, and one specific message per kind of malformed file.
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

#include "checkpoint.h"
#include "jsonkeys.h"
#include "safetensors.h"
#include "testutil.h"

// ---- models built by hand (model.c only builds their tensor table) ----

#define MAX_LAYERS 8

typedef struct test_model {
    model m;
    layer layers[MAX_LAYERS];
} test_model;

static void tm_begin(test_model *t, const char *name) {
    memset(t, 0, sizeof *t);
    snprintf(t->m.name, sizeof t->m.name, "%s", name);
    t->m.layers = t->layers;
}

static layer *tm_add(test_model *t, layer_kind kind, const char *name, int c, int h, int w) {
    layer *L = &t->layers[t->m.n_layers++];
    L->kind = kind;
    snprintf(L->name, sizeof L->name, "%s", name);
    L->c = c, L->h = h, L->w = w;
    L->oc = c, L->oh = h, L->ow = w;
    L->w_off = L->b_off = LAYER_NO_PARAM;
    return L;
}

static void tm_params(test_model *t, layer *L, size_t n_w, size_t n_b) {
    L->n_w = n_w, L->n_b = n_b;
    L->w_off = t->m.n_params;
    L->b_off = t->m.n_params + n_w;
    t->m.n_params += n_w + n_b;
}

// The tensor table (model_finish), which safetensors reads names, shapes and offsets from.
static void tm_finish(test_model *t) {
    ht_error e;
    if (model_finish(&t->m, &e)) fail_msg("model_finish: %s", e.msg);
}

// Frees the table; the layers are the test's own array.
static void tm_free(test_model *t) {
    t->m.layers = NULL;
    model_free(&t->m);
}

// conv k x k, pad k/2, stride 1: (c,h,w) -> (oc,h,w)
static void tm_conv(test_model *t, const char *name, int c, int h, int w, int oc, int k) {
    layer *L = tm_add(t, LAYER_CONV2D, name, c, h, w);
    L->oc = oc, L->k = k, L->stride = 1, L->pad = k / 2;
    tm_params(t, L, (size_t)oc * c * k * k, (size_t)oc);
}

static void tm_dense(test_model *t, const char *name, int c, int h, int w, int oc) {
    layer *L = tm_add(t, LAYER_DENSE, name, c, h, w);
    L->oc = oc, L->oh = L->ow = 1;
    tm_params(t, L, (size_t)oc * c * h * w, (size_t)oc);
}

// PyTorch-style names whose alphabetical order (what Python's writer uses) differs from the
// layer order, and a dense layer fed by a (3,3,3) map: weight [5,27].
static void model_a(test_model *t) {
    tm_begin(t, "tiny");
    tm_conv(t, "features.0", 1, 6, 6, 2, 3); // w 18, b 2
    tm_add(t, LAYER_RELU, "relu1", 2, 6, 6);
    layer *P = tm_add(t, LAYER_MAXPOOL, "pool1", 2, 6, 6);
    P->oh = P->ow = 3, P->k = P->stride = 2;
    tm_conv(t, "features.3", 2, 3, 3, 3, 3); // w 54, b 3
    tm_dense(t, "classifier.1", 3, 3, 3, 5); // w 135, b 5
    tm_add(t, LAYER_RELU, "relu2", 5, 1, 1);
    tm_dense(t, "classifier.4", 5, 1, 1, 3); // w 15, b 3
    tm_add(t, LAYER_SOFTMAX_XENT, "softmax", 3, 1, 1);
    tm_finish(t);
}

// One dense layer "fc" 3 -> 2: weight [2,3] (24 bytes), bias [2] (8 bytes).
static void model_fc(test_model *t, int in) {
    tm_begin(t, "fc");
    tm_dense(t, "fc", in, 1, 1, 2);
    tm_add(t, LAYER_SOFTMAX_XENT, "softmax", 2, 1, 1);
    tm_finish(t);
}

static uint32_t xorshift(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

// Arbitrary bit patterns: NaNs with payloads, infinities, subnormals, -0 all turn up.
static float *random_bits(size_t n, uint32_t seed) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = xorshift(&seed);
        memcpy(&p[i], &u, 4);
    }
    return p;
}

// The same, with every NaN or infinity made finite (load refuses those): subnormals, -0 and
// the largest floats still turn up.
static float *finite_bits(size_t n, uint32_t seed) {
    float *p = random_bits(n, seed);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        if ((u & 0x7f800000u) == 0x7f800000u) u ^= 0x00800000u; // exponent 255 -> 254
        memcpy(&p[i], &u, 4);
    }
    return p;
}

// ---- writing files by hand ----

static void put_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

// Writes u64 LE hlen, the header bytes and the data.
static char *write_st_len(const char *dir, const char *name, uint64_t hlen, const char *hdr,
                          size_t hdr_bytes, const void *data, size_t dlen) {
    unsigned char *buf = malloc(8 + hdr_bytes + dlen + 1);
    assert_non_null(buf);
    put_le64(buf, hlen);
    memcpy(buf + 8, hdr, hdr_bytes);
    if (dlen) memcpy(buf + 8 + hdr_bytes, data, dlen);
    char *path = test_write_file(dir, name, buf, 8 + hdr_bytes + dlen);
    assert_non_null(path);
    free(buf);
    return path;
}

static char *write_st(const char *dir, const char *name, const char *hdr, const void *data,
                      size_t dlen) {
    return write_st_len(dir, name, strlen(hdr), hdr, strlen(hdr), data, dlen);
}

typedef struct ent {
    const char *name, *dtype, *shape;
    size_t bytes;
} ent;

// The header as Python's safetensors writes it (serde_json, compact, __metadata__ first,
// dtype/shape/data_offsets in that order, contiguous offsets, spaces up to a multiple of 8).
// `mixed` moves __metadata__ last, reorders each entry's keys and adds whitespace, no padding.
static void make_header(char *buf, size_t cap, const ent *es, int ne, int mixed) {
    size_t len = 0, off = 0;
    len += (size_t)snprintf(buf, cap, mixed ? "{\n" : "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < ne; i++) {
        const ent *x = &es[i];
        if (!mixed)
            len += (size_t)snprintf(buf + len, cap - len,
                                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,"
                                    "\"data_offsets\":[%zu,%zu]}",
                                    x->name, x->dtype, x->shape, off, off + x->bytes);
        else
            len += (size_t)snprintf(buf + len, cap - len,
                                    "  \"%s\": {\"data_offsets\": [%zu, %zu], \"shape\": %s, "
                                    "\"dtype\": \"%s\"},\n",
                                    x->name, off, off + x->bytes, x->shape, x->dtype);
        off += x->bytes;
    }
    if (!mixed) {
        len += (size_t)snprintf(buf + len, cap - len, "}");
        while (len % 8) len += (size_t)snprintf(buf + len, cap - len, " ");
    } else {
        snprintf(buf + len, cap - len,
                 "  \"__metadata__\": {\"format\": \"pt\", \"note\": \"x\"}\n}");
    }
    assert_true(strlen(buf) < cap - 1);
}

static const layer *find_layer(const test_model *t, const char *name) {
    for (int i = 0; i < t->m.n_layers; i++)
        if (!strcmp(t->layers[i].name, name)) return &t->layers[i];
    fail_msg("no layer %s", name);
    return NULL;
}

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

// Header entries for model_fc(3): W_(dtype, shape, offsets), and the correct ones.
#define ENTRY_(name, dt, sh, of) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" sh ",\"data_offsets\":" of "}"
#define W_(dt, sh, of) ENTRY_("fc.weight", dt, sh, of)
#define B_(dt, sh, of) ENTRY_("fc.bias", dt, sh, of)
#define W_OK_ W_("F32", "[2,3]", "[0,24]")
#define B_OK_ B_("F32", "[2]", "[24,32]")

static void le16s(unsigned char *b, const uint16_t *v, int n) {
    for (int i = 0; i < n; i++) {
        b[2 * i] = (unsigned char)v[i];
        b[2 * i + 1] = (unsigned char)(v[i] >> 8);
    }
}

static void check_bits(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) && !(isnan(got[i]) && isnan(want[i])))
            fail_msg("%s[%d] = %.9g, expected %.9g", what, i, (double)got[i], (double)want[i]);
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

// Loads hdr + dlen bytes of data into the "fc" model and expects failure mentioning frag and
// the file's path, with params untouched.
static void expect_fail_len(const char *dir, const char *fname, uint64_t hlen, const char *hdr,
                            size_t dlen, const char *frag) {
    test_model t;
    model_fc(&t, 3);
    unsigned char data[64] = {0};
    assert_true(dlen <= sizeof data);
    char *path = write_st_len(dir, fname, hlen, hdr, strlen(hdr), data, dlen);
    float p[8], before[8];
    for (int i = 0; i < 8; i++) p[i] = before[i] = 42.0f + (float)i;
    ht_error e = {{0}};
    int rc = safetensors_load(path, &t.m, p, &e);
    if (rc != -1) fail_msg("%s: loaded, expected an error with \"%s\"", fname, frag);
    if (!strstr(e.msg, frag)) fail_msg("%s: message \"%s\" lacks \"%s\"", fname, e.msg, frag);
    if (!strstr(e.msg, path)) fail_msg("%s: message \"%s\" does not name the file", fname, e.msg);
    assert_null(strchr(e.msg, '\n'));
    assert_memory_equal(p, before, sizeof p);
    free(path);
    tm_free(&t);
}

static void expect_fail(const char *dir, const char *fname, const char *hdr, size_t dlen,
                        const char *frag) {
    expect_fail_len(dir, fname, strlen(hdr), hdr, dlen, frag);
}


static void test_malformed(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-bad");
    char path[1024];
    ht_error e;
    test_model t;
    model_fc(&t, 3);
    float p[8] = {0};

    // The good file loads, so each failure below is due to its one change.
    char *good = write_st(dir, "good.st", "{" W_OK_ "," B_OK_ "}", (unsigned char[32]){0}, 32);
    if (safetensors_load(good, &t.m, p, &e)) fail_msg("%s", e.msg);
    free(good);

    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    assert_int_equal(safetensors_load(path, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "cannot open"));

    char *shortf = test_write_file(dir, "short.st", "abcde", 5);
    assert_int_equal(safetensors_load(shortf, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, shortf));
    assert_non_null(strstr(e.msg, "too short"));
    free(shortf);

    expect_fail_len(dir, "huge.st", 200000000ull, "{}", 0, "exceeds the 100 MB limit");
    expect_fail_len(dir, "long.st", 1000, "{}", 0, "header length 1000 is larger than the rest");
    expect_fail_len(dir, "neg.st", UINT64_MAX, "{}", 0, "exceeds the 100 MB limit");
    expect_fail(dir, "empty.st", "", 0, "invalid JSON");
    expect_fail(dir, "json.st", "{\"fc.weight\":", 0, "invalid JSON");
    expect_fail(dir, "json2.st", "{\"fc.weight\":{\"dtype\":\"F32\",}}", 0, "invalid JSON");
    expect_fail(dir, "trail.st", "{" W_OK_ "," B_OK_ "} x", 32, "invalid JSON");
    { // header length covers a NUL after the object
        char *nul = write_st_len(dir, "nul.st", 4, "{}\0 ", 4, NULL, 0);
        assert_int_equal(safetensors_load(nul, &t.m, p, &e), -1);
        assert_non_null(strstr(e.msg, "invalid JSON"));
        free(nul);
    }
    expect_fail(dir, "array.st", "[1,2]", 0, "header is not a JSON object");
    expect_fail(dir, "meta.st", "{\"__metadata__\":3," W_OK_ "," B_OK_ "}", 32,
                "\"__metadata__\" is not a JSON object");
    expect_fail(dir, "missing.st", "{" W_OK_ "}", 32, "missing tensor \"fc.bias\"");
    expect_fail(dir, "shape.st", "{" W_("F32", "[3,2]", "[0,24]") "," B_OK_ "}", 32,
                "tensor \"fc.weight\": expected shape [2,3], found [3,2]");
    expect_fail(dir, "rank.st", "{" W_OK_ "," B_("F32", "[2,1]", "[24,32]") "}", 32,
                "tensor \"fc.bias\": expected shape [2], found [2,1]");
    expect_fail(dir, "shape2.st", "{" W_("F32", "[2.0,3]", "[0,24]") "," B_OK_ "}", 32,
                "\"shape\" missing or not a list");
    expect_fail(dir, "dtype.st", "{" W_OK_ "," B_("I32", "[2]", "[24,32]") "}", 32,
                "tensor \"fc.bias\": unsupported dtype \"I32\"");
    expect_fail(dir, "nodtype.st",
                "{" W_OK_ ",\"fc.bias\":{\"shape\":[2],\"data_offsets\":[24,32]}}", 32,
                "\"dtype\" missing");
    expect_fail(dir, "range.st", "{" W_OK_ "," B_("F32", "[2]", "[24,40]") "}", 32,
                "data_offsets [24,40] out of range (data buffer is 32 bytes)");
    expect_fail(dir, "range2.st", "{" W_OK_ "," B_("F32", "[2]", "[32,24]") "}", 32,
                "out of range");
    expect_fail(dir, "range3.st",
                "{" W_OK_ "," B_("F32", "[2]", "[18446744073709551615,8]") "}",
                32, "data_offsets [18446744073709551615,8] out of range");
    expect_fail(dir, "size.st", "{" W_("F32", "[2,3]", "[0,20]") "," B_OK_ "}", 32,
                "data_offsets [0,20] hold 20 bytes, but 6 values of F32 need 24");
    expect_fail(dir, "size16.st", "{" W_("F16", "[2,3]", "[0,24]") "," B_OK_ "}", 32,
                "6 values of F16 need 12");
    expect_fail(dir, "offs.st", "{" W_("F32", "[2,3]", "[0]") "," B_OK_ "}", 32,
                "\"data_offsets\" missing or not two");
    expect_fail(dir, "entry.st", "{\"fc.weight\":[0,24]," B_OK_ "}", 32,
                "tensor \"fc.weight\": header entry is not a JSON object");
    expect_fail(dir, "extra.st",
                "{" W_OK_ "," B_OK_ "," ENTRY_("fc2.weight", "F32", "[1]", "[0,4]") ",\"aaa\":{}}",
                32, "extra tensor \"fc2.weight\" is not in model fc");
    free(dir);
    tm_free(&t);
}

// What the reference reader refuses beyond single entries: byte ranges that overlap, leave
// gaps or stop short of the buffer's end; duplicate keys at any depth (json-c would keep the
// last); a key cut by an escaped NUL; metadata values that are not strings.
static void test_header_strictness(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-strict");
    // Layout: the two tensors tile [0,32), weight first or bias first.
    expect_fail(dir, "overlap.st", "{" W_OK_ "," B_("F32", "[2]", "[16,24]") "}", 24,
                "tensors \"fc.weight\" [0,24] and \"fc.bias\" [16,24] overlap in the data buffer");
    expect_fail(dir, "overlap2.st", "{" W_("F32", "[2,3]", "[4,28]") "," B_("F32", "[2]", "[0,8]") "}",
                32, "tensors \"fc.bias\" [0,8] and \"fc.weight\" [4,28] overlap");
    expect_fail(dir, "gap.st", "{" W_OK_ "," B_("F32", "[2]", "[28,36]") "}", 36,
                "data buffer bytes [24,28) between tensors \"fc.weight\" and \"fc.bias\" belong "
                "to no tensor");
    expect_fail(dir, "lead.st", "{" W_("F32", "[2,3]", "[12,36]") "," B_("F32", "[2]", "[4,12]") "}",
                36, "data buffer bytes [0,4) before tensor \"fc.bias\" belong to no tensor");
    expect_fail(dir, "tail.st", "{" W_OK_ "," B_OK_ "}", 40,
                "data buffer bytes [32,40) after tensor \"fc.bias\" belong to no tensor");

    // Duplicate keys: top level (also spelt with an escape), __metadata__, inside an entry and
    // inside the metadata. The second copy is the one named, by its byte in the header.
    expect_fail(dir, "dup.st", "{" W_OK_ "," B_OK_ "," W_OK_ "}", 32,
                "duplicate key \"fc.weight\" in the header (second one at header byte 126)");
    expect_fail(dir, "dupesc.st",
                "{" W_OK_ "," B_OK_ "," ENTRY_("fc\\u002eweight", "F32", "[2,3]", "[0,24]") "}", 32,
                "duplicate key \"fc.weight\" in the header");
    expect_fail(dir, "dupmeta.st",
                "{\"__metadata__\":{\"format\":\"pt\"}," W_OK_ "," B_OK_ ",\"__metadata__\":{}}", 32,
                "duplicate key \"__metadata__\" in the header");
    expect_fail(dir, "dupdtype.st",
                "{" W_OK_ ",\"fc.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"dtype\":\"F32\","
                "\"data_offsets\":[24,32]}}", 32,
                "duplicate key \"dtype\" in \"fc.bias\"");
    expect_fail(dir, "dupdeep.st",
                "{\"__metadata__\":{\"a\":\"x\",\"b\":\"{\\\"a\\\":1}\",\"a\":\"y\"}," W_OK_ ","
                B_OK_ "}", 32, "duplicate key \"a\" in \"__metadata__\"");
    expect_fail(dir, "nulkey.st",
                "{" ENTRY_("fc.weight\\u0000x", "F32", "[2,3]", "[0,24]") "," B_OK_ "}", 32,
                "key \"fc.weight\\0x\" in the header holds a NUL character");
    expect_fail(dir, "nuldtype.st", "{" W_("F32\\u0000x", "[2,3]", "[0,24]") "," B_OK_ "}", 32,
                "unsupported dtype \"F32\\0x\"");
    expect_fail(dir, "metaint.st", "{\"__metadata__\":{\"epochs\":10}," W_OK_ "," B_OK_ "}", 32,
                "\"__metadata__\" value of \"epochs\" is not a string");

    // Equal keys in different objects are fine, and so are keys that only look alike.
    test_model t;
    model_fc(&t, 3);
    float p[8];
    ht_error e;
    char *ok = write_st(dir, "ok.st",
                        "{\"__metadata__\":{\"fc.bias\":\"x\",\"dtype\":\"y\",\"fc.bias \":\"z\"},"
                        B_OK_ "," W_OK_ "}", (unsigned char[32]){0}, 32);
    if (safetensors_load(ok, &t.m, p, &e)) fail_msg("%s", e.msg);
    free(ok);
    free(dir);
    tm_free(&t);
}

// The key scanner on its own: strings holding braces and quotes, arrays of objects, surrogate
// pairs against their UTF-8 spelling, and the first finding in the text winning.
static void test_jsonkeys(void **state) {
    (void)state;
    static const struct {
        const char *text;
        jsonkeys_kind kind;
        const char *key, *parent;
        size_t offset;
    } cases[] = {
        {"{}", JSONKEYS_NONE, "", "", 0},
        {"{\"a\":\"}\\\"{\\\"a\\\":\",\"b\":[{\"a\":1},{\"a\":2}]}", JSONKEYS_NONE, "", "", 0},
        {"[{\"x\":1,\"y\":{\"k\":[true,null,-1.5e3]},\"x\":2}]", JSONKEYS_DUPLICATE, "x", "", 37},
        {"{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", JSONKEYS_DUPLICATE,
         "\\xf0\\x9f\\x98\\x80", "", 18},
        {"{\"\\ud800\":1,\"\\udbff\":2}", JSONKEYS_DUPLICATE, "\\xef\\xbf\\xbd", "", 12},
        {"{\"o\":{\"p\":1,\"p\":2},\"o\":0}", JSONKEYS_DUPLICATE, "p", "o", 12},
        {"{\"o\":{\"q\":1,\"r\":2},\"o\":0,\"z\":{\"s\":1,\"s\":2}}", JSONKEYS_DUPLICATE, "o", "", 19},
        {"{\"\":{\"a\\u0000\":1}}", JSONKEYS_NUL, "a\\0", "", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jsonkeys_finding f;
        assert_int_equal(jsonkeys_scan(cases[i].text, strlen(cases[i].text), &f), 0);
        if (f.kind != cases[i].kind || strcmp(f.key, cases[i].key) ||
            strcmp(f.parent, cases[i].parent) || f.offset != cases[i].offset)
            fail_msg("case %zu %s: found kind %d key \"%s\" in \"%s\" at %zu", i, cases[i].text,
                     f.kind, f.key, f.parent, f.offset);
    }
    // An empty parent key is still a parent.
    jsonkeys_finding f;
    const char *empty_parent = "{\"\":{\"a\":1,\"a\":1}}";
    assert_int_equal(jsonkeys_scan(empty_parent, strlen(empty_parent), &f), 0);
    assert_int_equal(f.kind, JSONKEYS_DUPLICATE);
    assert_int_equal(f.nested, 1);
    // Bounded on text no parser would have accepted.
    char deep[4096];
    memset(deep, '[', sizeof deep);
    assert_int_equal(jsonkeys_scan(deep, sizeof deep, &f), 0);
    assert_int_equal(f.kind, JSONKEYS_NONE);
}

static int has_tmp_file(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strstr(de->d_name, ".tmp.")) found = 1;
    closedir(d);
    return found;
}

static void test_save_errors(void **state) {
    (void)state;
    char *dir = test_tmpdir("st-save");
    char path[1024];
    ht_error e;
    test_model t;
    model_fc(&t, 3);
    float p[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "cannot create temporary file"));

    // The target is a directory: the rename fails and the temporary file goes away.
    snprintf(path, sizeof path, "%s/isdir.safetensors", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(safetensors_save(path, &t.m, p, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "cannot rename"));
    assert_false(has_tmp_file(dir));

    tm_free(&t);

    // Two layers with one name would give a file with duplicate tensors: the model's tensor
    // table refuses them, and a model without a table is not saved.
    tm_begin(&t, "dup");
    tm_dense(&t, "fc", 3, 1, 1, 2);
    tm_dense(&t, "fc", 2, 1, 1, 2);
    tm_add(&t, LAYER_SOFTMAX_XENT, "softmax", 2, 1, 1);
    assert_int_equal(model_finish(&t.m, &e), -1);
    assert_non_null(strstr(e.msg, "\"fc.weight\" used twice"));
    assert_null(t.m.tensors);
    float q[14] = {0};
    snprintf(path, sizeof path, "%s/dup.safetensors", dir);
    assert_int_equal(safetensors_save(path, &t.m, q, &e), -1);
    assert_non_null(strstr(e.msg, "tensor table holds 0 of its 14 parameters"));
    struct stat st;
    assert_int_equal(stat(path, &st), -1);
    assert_false(has_tmp_file(dir));
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_round_trip_no_bias),      cmocka_unit_test(test_saved_layout),
        cmocka_unit_test(test_python_layout),   cmocka_unit_test(test_dtype_conversion),
        cmocka_unit_test(test_malformed),       cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_header_strictness), cmocka_unit_test(test_jsonkeys),
        cmocka_unit_test(test_non_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
