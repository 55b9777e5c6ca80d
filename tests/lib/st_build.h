// safetensors files and models built by hand for the safetensors tests: a tensor table without
// model.c's layers, raw files with any header, and bitwise checks.
#ifndef HETRAIN_TEST_ST_BUILD_H
#define HETRAIN_TEST_ST_BUILD_H

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

// ---- models built by hand (model.c only builds their tensor table) ----

#define MAX_LAYERS 8

typedef struct test_model {
    model m;
    layer layers[MAX_LAYERS];
} test_model;

static inline void tm_begin(test_model *t, const char *name) {
    memset(t, 0, sizeof *t);
    snprintf(t->m.name, sizeof t->m.name, "%s", name);
    t->m.layers = t->layers;
}

static inline layer *tm_add(test_model *t, layer_kind kind, const char *name, int c, int h, int w) {
    layer *L = &t->layers[t->m.n_layers++];
    L->kind = kind;
    snprintf(L->name, sizeof L->name, "%s", name);
    L->c = c, L->h = h, L->w = w;
    L->oc = c, L->oh = h, L->ow = w;
    L->w_off = L->b_off = LAYER_NO_PARAM;
    return L;
}

static inline void tm_params(test_model *t, layer *L, size_t n_w, size_t n_b) {
    L->n_w = n_w, L->n_b = n_b;
    L->w_off = t->m.n_params;
    L->b_off = t->m.n_params + n_w;
    t->m.n_params += n_w + n_b;
}

// The tensor table (model_finish), which safetensors reads names, shapes and offsets from.
static inline void tm_finish(test_model *t) {
    ht_error e;
    if (model_finish(&t->m, &e)) fail_msg("model_finish: %s", e.msg);
}

// Frees the table; the layers are the test's own array.
static inline void tm_free(test_model *t) {
    t->m.layers = NULL;
    model_free(&t->m);
}

// conv k x k, pad k/2, stride 1: (c,h,w) -> (oc,h,w)
static inline void tm_conv(test_model *t, const char *name, int c, int h, int w, int oc, int k) {
    layer *L = tm_add(t, LAYER_CONV2D, name, c, h, w);
    L->oc = oc, L->k = k, L->stride = 1, L->pad = k / 2;
    tm_params(t, L, (size_t)oc * c * k * k, (size_t)oc);
}

static inline void tm_dense(test_model *t, const char *name, int c, int h, int w, int oc) {
    layer *L = tm_add(t, LAYER_DENSE, name, c, h, w);
    L->oc = oc, L->oh = L->ow = 1;
    tm_params(t, L, (size_t)oc * c * h * w, (size_t)oc);
}

// PyTorch-style names whose alphabetical order (what Python's writer uses) differs from the
// layer order, and a dense layer fed by a (3,3,3) map: weight [5,27].
static inline void model_a(test_model *t) {
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
static inline void model_fc(test_model *t, int in) {
    tm_begin(t, "fc");
    tm_dense(t, "fc", in, 1, 1, 2);
    tm_add(t, LAYER_SOFTMAX_XENT, "softmax", 2, 1, 1);
    tm_finish(t);
}

static inline uint32_t xorshift(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

// Arbitrary bit patterns: NaNs with payloads, infinities, subnormals, -0 all turn up.
static inline float *random_bits(size_t n, uint32_t seed) {
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
static inline float *finite_bits(size_t n, uint32_t seed) {
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

static inline void put_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

// Writes u64 LE hlen, the header bytes and the data.
static inline char *write_st_len(const char *dir, const char *name, uint64_t hlen, const char *hdr,
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

static inline char *write_st(const char *dir, const char *name, const char *hdr, const void *data,
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
static inline void make_header(char *buf, size_t cap, const ent *es, int ne, int mixed) {
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

static inline const layer *find_layer(const test_model *t, const char *name) {
    for (int i = 0; i < t->m.n_layers; i++)
        if (!strcmp(t->layers[i].name, name)) return &t->layers[i];
    fail_msg("no layer %s", name);
    return NULL;
}

// Header entries for model_fc(3): W_(dtype, shape, offsets), and the correct ones.
#define ENTRY_(name, dt, sh, of) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" sh ",\"data_offsets\":" of "}"
#define W_(dt, sh, of) ENTRY_("fc.weight", dt, sh, of)
#define B_(dt, sh, of) ENTRY_("fc.bias", dt, sh, of)
#define W_OK_ W_("F32", "[2,3]", "[0,24]")
#define B_OK_ B_("F32", "[2]", "[24,32]")

static inline void le16s(unsigned char *b, const uint16_t *v, int n) {
    for (int i = 0; i < n; i++) {
        b[2 * i] = (unsigned char)v[i];
        b[2 * i + 1] = (unsigned char)(v[i] >> 8);
    }
}

static inline void check_bits(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) && !(isnan(got[i]) && isnan(want[i])))
            fail_msg("%s[%d] = %.9g, expected %.9g", what, i, (double)got[i], (double)want[i]);
}


#endif
