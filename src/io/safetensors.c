// Weights in the safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// naming each tensor's dtype, shape and byte range, then the raw little-endian data.
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jsonkeys.h"

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
#define ST_MAX_HEADER 100000000ull
#define ST_MAX_DIMS 8
#define ST_CHUNK 65536 // bytes converted per read/write call

typedef enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64 } st_dtype;
static const char *const st_dtype_names[] = {"F32", "F16", "BF16", "F64"};
static const unsigned st_dtype_size[] = {4, 2, 2, 8};

static void fmt_shape(char *buf, size_t cap, const uint64_t *d, int nd) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRIu64, i ? "," : "", d[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

// The model's tensor table (model_tensors), which must cover all of its parameters.
static int tensors_of(const char *path, const model *m, const model_tensor **ts, int *nt,
                      ht_error *e) {
    *nt = model_tensors(m, ts);
    size_t total = 0;
    for (int i = 0; i < *nt; i++) total += (*ts)[i].n;
    if (total != m->n_params)
        return ht_fail(e, "%s: model %s: its tensor table holds %zu of its %zu parameters (not "
                          "built by model_finish?)", path, m->name, total, m->n_params);
    return 0;
}

// ---- save ----

typedef struct strbuf {
    char *s;
    size_t len, cap;
    int failed;
} strbuf;

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        b->failed = 1;
        return;
    }
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + (size_t)need + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

static void sb_json_string(strbuf *b, const char *s) {
    sb_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') sb_add(b, "\\%c", *p);
        else if (*p < 0x20) sb_add(b, "\\u%04x", *p);
        else sb_add(b, "%c", *p);
    }
    sb_add(b, "\"");
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void put_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

// Best effort: makes the rename itself durable. Some filesystems refuse fsync on directories.
static void fsync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int safetensors_save(const char *path, const model *m, const float *params, ht_error *e) {
    const model_tensor *ts;
    int nt;
    if (tensors_of(path, m, &ts, &nt, e)) return -1;

    // Header: __metadata__ first, then tensors in layer order with contiguous data, padded with
    // spaces so the data starts 8-byte aligned.
    strbuf h = {0};
    sb_add(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        sb_add(&h, ",");
        sb_json_string(&h, ts[i].name);
        sb_add(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < ts[i].ndim; d++) sb_add(&h, "%s%" PRIu64, d ? "," : "", ts[i].shape[d]);
        uint64_t end = off + (uint64_t)ts[i].n * 4;
        sb_add(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, end);
        off = end;
    }
    sb_add(&h, "}");
    while (!h.failed && h.len % 8) sb_add(&h, " ");

    int rc = -1, fd = -1, created = 0;
    unsigned char *chunk = NULL;
    size_t tmplen = strlen(path) + 32;
    char *tmp = malloc(tmplen);
    if (h.failed || !tmp) {
        ht_fail(e, "%s: out of memory building the header", path);
        goto done;
    }
    snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
    chunk = malloc(ST_CHUNK);
    if (!chunk) {
        ht_fail(e, "%s: out of memory", path);
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        ht_fail(e, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        goto done;
    }
    created = 1;

    unsigned char lenb[8];
    put_le64(lenb, (uint64_t)h.len);
    if (write_all(fd, lenb, 8) || write_all(fd, h.s, h.len)) goto write_error;
    for (int i = 0; i < nt; i++) {
        const float *src = params + ts[i].off;
        size_t left = ts[i].n;
        while (left > 0) {
            size_t k = left < ST_CHUNK / 4 ? left : ST_CHUNK / 4;
            for (size_t j = 0; j < k; j++) {
                uint32_t u;
                memcpy(&u, &src[j], 4);
                for (int b = 0; b < 4; b++) chunk[4 * j + b] = (unsigned char)(u >> (8 * b));
            }
            if (write_all(fd, chunk, 4 * k)) goto write_error;
            src += k;
            left -= k;
        }
    }
    if (fsync(fd)) goto write_error;
    int cr = close(fd);
    fd = -1;
    if (cr) goto write_error;
    if (rename(tmp, path)) {
        ht_fail(e, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
        goto done;
    }
    fsync_dir_of(path);
    rc = 0;
    goto done;

write_error:
    ht_fail(e, "%s: writing %s: %s", path, tmp, strerror(errno));
done:
    if (fd >= 0) close(fd);
    if (rc && created) unlink(tmp);
    free(tmp);
    free(chunk);
    free(h.s);
    return rc;
}

// ---- load ----

static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); // inf, NaN (payload kept)
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (man << 13); // rebias 15 -> 127
    } else {
        float f = (float)man * 0x1p-24f; // zero or subnormal: man * 2^-24, exact in float
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void convert_f64(double *d, const unsigned char *b) {
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | b[i];
    memcpy(d, &u, 8);
}

static void convert(float *dst, const unsigned char *b, size_t k, st_dtype dt) {
    for (size_t j = 0; j < k; j++) {
        switch (dt) {
        case ST_F32: {
            const unsigned char *p = b + 4 * j;
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&dst[j], &u, 4);
            break;
        }
        case ST_F16:
            dst[j] = f16_to_float((uint16_t)(b[2 * j] | b[2 * j + 1] << 8));
            break;
        case ST_BF16: {
            uint32_t u = ((uint32_t)b[2 * j] | (uint32_t)b[2 * j + 1] << 8) << 16;
            memcpy(&dst[j], &u, 4);
            break;
        }
        case ST_F64: {
            double d;
            convert_f64(&d, b + 8 * j);
            dst[j] = (float)d;
            break;
        }
        }
    }
}

// A JSON array of non-negative integers: its length into *len, the first `max` into v.
// Returns -1 when it is not such an array.
static int json_uints(json_object *a, uint64_t *v, size_t max, size_t *len) {
    if (!a || !json_object_is_type(a, json_type_array)) return -1;
    *len = json_object_array_length(a);
    for (size_t i = 0; i < *len; i++) {
        json_object *x = json_object_array_get_idx(a, i);
        if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0) return -1;
        if (i < max) v[i] = json_object_get_uint64(x); // exact above INT64_MAX too
    }
    return 0;
}

typedef struct st_entry {
    st_dtype dt;
    uint64_t begin, end;
} st_entry;

// Checks one header entry against the model's tensor t and the data buffer's length.
static int check_entry(const char *path, const model_tensor *t, json_object *ent, uint64_t data_len,
                       st_entry *out, ht_error *e) {
    if (!json_object_is_type(ent, json_type_object))
        return ht_fail(e, "%s: tensor \"%s\": header entry is not a JSON object", path, t->name);
    json_object *jd = NULL, *js = NULL, *jo = NULL;
    json_object_object_get_ex(ent, "dtype", &jd);
    json_object_object_get_ex(ent, "shape", &js);
    json_object_object_get_ex(ent, "data_offsets", &jo);

    if (!jd || !json_object_is_type(jd, json_type_string))
        return ht_fail(e, "%s: tensor \"%s\": \"dtype\" missing or not a string", path, t->name);
    const char *dname = json_object_get_string(jd);
    size_t dlen = (size_t)json_object_get_string_len(jd);
    int dt = -1;
    for (int i = 0; i < 4; i++)
        if (dlen == strlen(st_dtype_names[i]) && !memcmp(dname, st_dtype_names[i], dlen)) dt = i;
    if (dt < 0) {
        char found[48];
        return ht_fail(e, "%s: tensor \"%s\": unsupported dtype \"%s\" (supported: F32, F16, "
                          "BF16, F64)", path, t->name, ht_escape(found, sizeof found, dname, dlen));
    }

    uint64_t shape[ST_MAX_DIMS];
    size_t nd;
    if (json_uints(js, shape, ST_MAX_DIMS, &nd))
        return ht_fail(e, "%s: tensor \"%s\": \"shape\" missing or not a list of non-negative "
                          "integers", path, t->name);
    int same = nd == (size_t)t->ndim;
    for (size_t i = 0; same && i < nd; i++) same = shape[i] == t->shape[i];
    if (!same) {
        char want[128], found[128];
        fmt_shape(want, sizeof want, t->shape, t->ndim);
        if (nd <= ST_MAX_DIMS) fmt_shape(found, sizeof found, shape, (int)nd);
        else snprintf(found, sizeof found, "%zu dimensions", nd);
        return ht_fail(e, "%s: tensor \"%s\": expected shape %s, found %s", path, t->name, want,
                       found);
    }

    uint64_t offs[2];
    size_t no;
    if (json_uints(jo, offs, 2, &no) || no != 2)
        return ht_fail(e, "%s: tensor \"%s\": \"data_offsets\" missing or not two non-negative "
                          "integers", path, t->name);
    uint64_t b = offs[0], end = offs[1];
    if (b > end || end > data_len)
        return ht_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ",%" PRIu64 "] out of range "
                          "(data buffer is %" PRIu64 " bytes)", path, t->name, b, end, data_len);
    uint64_t need = (uint64_t)t->n * st_dtype_size[dt]; // t->n <= n_params, no overflow
    if (end - b != need)
        return ht_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ",%" PRIu64 "] hold %" PRIu64
                          " bytes, but %zu values of %s need %" PRIu64, path, t->name, b, end,
                       end - b, t->n, st_dtype_names[dt], need);
    out->dt = (st_dtype)dt;
    out->begin = b;
    out->end = end;
    return 0;
}

// As the reference reader requires, the tensors' byte ranges tile the data buffer: in order of
// their offsets each begins where the one before ended, the first at 0, the last at its end.
static int check_tiling(const char *path, const model_tensor *ts, const st_entry *en, int nt,
                        uint64_t data_len, ht_error *e) {
    int *order = ht_malloc((size_t)nt, sizeof *order, e);
    if (!order) return -1;
    for (int i = 0; i < nt; i++) { // insertion sort: a model has a few dozen tensors
        int k = i;
        for (; k > 0 && en[order[k - 1]].begin > en[i].begin; k--) order[k] = order[k - 1];
        order[k] = i;
    }
    uint64_t pos = 0;
    int prev = -1, rc = 0;
    for (int k = 0; k < nt && !rc; k++) {
        const st_entry *x = &en[order[k]];
        const char *name = ts[order[k]].name;
        if (x->begin < pos)
            rc = ht_fail(e, "%s: tensors \"%s\" [%" PRIu64 ",%" PRIu64 "] and \"%s\" [%" PRIu64
                            ",%" PRIu64 "] overlap in the data buffer", path, ts[prev].name,
                         en[prev].begin, en[prev].end, name, x->begin, x->end);
        else if (x->begin > pos && prev < 0)
            rc = ht_fail(e, "%s: data buffer bytes [0,%" PRIu64 ") before tensor \"%s\" belong to "
                            "no tensor", path, x->begin, name);
        else if (x->begin > pos)
            rc = ht_fail(e, "%s: data buffer bytes [%" PRIu64 ",%" PRIu64 ") between tensors \"%s\" "
                            "and \"%s\" belong to no tensor", path, pos, x->begin,
                         ts[prev].name, name);
        pos = x->end;
        prev = order[k];
    }
    if (!rc && pos != data_len)
        rc = ht_fail(e, "%s: data buffer bytes [%" PRIu64 ",%" PRIu64 ") after %s%s%s belong to no "
                        "tensor", path, pos, data_len, prev < 0 ? "the header" : "tensor \"",
                     prev < 0 ? "" : ts[prev].name, prev < 0 ? "" : "\"");
    free(order);
    return rc;
}

// Weights must be finite: a NaN or an infinity would poison every step and every prediction,
// and later show up only as a failed self-check or skipped updates. Names element i (a flat
// index into the tensor, and its position by dimension).
static int check_finite(const char *path, const model_tensor *t, const st_entry *en,
                        const unsigned char *raw, const float *v, size_t k, size_t first,
                        ht_error *e) {
    for (size_t j = 0; j < k; j++) {
        if (isfinite(v[j])) continue;
        size_t i = first + j, rest = i;
        uint64_t idx[4];
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = t->shape[d] ? rest % t->shape[d] : 0;
            rest = t->shape[d] ? rest / t->shape[d] : 0;
        }
        char where[128] = "", why[64] = "";
        if (t->ndim > 1) {
            char s[112];
            fmt_shape(s, sizeof s, idx, t->ndim);
            snprintf(where, sizeof where, " %s", s);
        }
        if (en->dt == ST_F64) {
            double d;
            convert_f64(&d, raw + 8 * j);
            if (isfinite(d)) snprintf(why, sizeof why, " (F64 value %g is beyond float's range)", d);
        }
        return ht_fail(e, "%s: tensor \"%s\" element %zu%s is %s%s", path, t->name, i, where,
                       isnan(v[j]) ? "NaN" : v[j] > 0 ? "+Inf" : "-Inf", why);
    }
    return 0;
}

static int read_tensor(const char *path, FILE *f, const model_tensor *t, const st_entry *en,
                       uint64_t data_start, unsigned char *chunk, float *dst, ht_error *e) {
    unsigned size = st_dtype_size[en->dt];
    if (fseeko(f, (off_t)(data_start + en->begin), SEEK_SET))
        return ht_fail(e, "%s: tensor \"%s\": seek failed: %s", path, t->name, strerror(errno));
    size_t left = t->n;
    while (left > 0) {
        size_t k = left < ST_CHUNK / size ? left : ST_CHUNK / size;
        if (fread(chunk, size, k, f) != k) {
            const char *why = ferror(f) ? strerror(errno) : "file ended early (changed meanwhile?)";
            return ht_fail(e, "%s: tensor \"%s\": %s", path, t->name, why);
        }
        convert(dst, chunk, k, en->dt);
        if (check_finite(path, t, en, chunk, dst, k, t->n - left, e)) return -1;
        dst += k;
        left -= k;
    }
    return 0;
}

int safetensors_load(const char *path, const model *m, float *params, ht_error *e) {
    const model_tensor *ts = NULL;
    st_entry *ents = NULL;
    int nt = 0, rc = -1;
    FILE *f = NULL;
    char *hdr = NULL;
    json_object *root = NULL;
    json_tokener *tok = NULL;
    float *tmp = NULL;
    unsigned char *chunk = NULL;

    if (tensors_of(path, m, &ts, &nt, e)) return -1;
    f = fopen(path, "rb");
    if (!f) {
        ht_fail(e, "%s: cannot open: %s", path, strerror(errno));
        goto done;
    }
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        ht_fail(e, "%s: not a regular file", path);
        goto done;
    }
    uint64_t fsize = (uint64_t)st.st_size;
    unsigned char lenb[8];
    if (fsize < 8 || fread(lenb, 1, 8, f) != 8) {
        ht_fail(e, "%s: file is %" PRIu64 " bytes, too short for a safetensors file (needs an "
                   "8-byte header length)", path, fsize);
        goto done;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    if (hlen > ST_MAX_HEADER) {
        ht_fail(e, "%s: header length %" PRIu64 " exceeds the 100 MB limit (not a safetensors "
                   "file?)", path, hlen);
        goto done;
    }
    if (hlen > fsize - 8) {
        ht_fail(e, "%s: header length %" PRIu64 " is larger than the rest of the file (%" PRIu64
                   " bytes)", path, hlen, fsize - 8);
        goto done;
    }
    if (!(hdr = ht_malloc(hlen + 1, 1, e))) goto done;
    if (fread(hdr, 1, hlen, f) != hlen) {
        ht_fail(e, "%s: cannot read the %" PRIu64 "-byte header", path, hlen);
        goto done;
    }
    hdr[hlen] = 0;
    uint64_t data_start = 8 + hlen, data_len = fsize - data_start;

    // Strict JSON; the parser stops after the top-level value and we allow only the padding
    // spaces (any JSON whitespace) after it.
    if (!(tok = json_tokener_new())) {
        ht_fail(e, "%s: out of memory", path);
        goto done;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    root = json_tokener_parse_ex(tok, hdr, (int)hlen);
    if (!root) {
        enum json_tokener_error je = json_tokener_get_error(tok);
        if (je == json_tokener_continue || je == json_tokener_success)
            ht_fail(e, "%s: invalid JSON in header: it ends early", path);
        else
            ht_fail(e, "%s: invalid JSON in header at byte %zu: %s", path,
                    json_tokener_get_parse_end(tok), json_tokener_error_desc(je));
        goto done;
    }
    for (size_t i = json_tokener_get_parse_end(tok); i < hlen; i++)
        if (!strchr(" \t\r\n", hdr[i]) || !hdr[i]) {
            ht_fail(e, "%s: invalid JSON in header: unexpected bytes after the object at byte %zu",
                    path, i);
            goto done;
        }
    if (!json_object_is_type(root, json_type_object)) {
        ht_fail(e, "%s: header is not a JSON object", path);
        goto done;
    }
    // json-c keeps the last of two equal keys and cuts a key at an escaped NUL; the text says
    // whether either happened.
    jsonkeys_finding dup;
    if (jsonkeys_scan(hdr, json_tokener_get_parse_end(tok), &dup) < 0) {
        ht_fail(e, "%s: out of memory checking the header's keys", path);
        goto done;
    }
    if (dup.kind != JSONKEYS_NONE) {
        char where[128] = "in the header";
        if (dup.nested) snprintf(where, sizeof where, "in \"%s\"", dup.parent);
        if (dup.kind == JSONKEYS_DUPLICATE)
            ht_fail(e, "%s: duplicate key \"%s\" %s (second one at header byte %zu)", path,
                    dup.key, where, dup.offset);
        else
            ht_fail(e, "%s: key \"%s\" %s holds a NUL character (header byte %zu)", path,
                    dup.key, where, dup.offset);
        goto done;
    }
    json_object *meta;
    if (json_object_object_get_ex(root, "__metadata__", &meta)) {
        if (!json_object_is_type(meta, json_type_object)) {
            ht_fail(e, "%s: \"__metadata__\" is not a JSON object", path);
            goto done;
        }
        json_object_object_foreach(meta, mkey, mval) {
            if (!json_object_is_type(mval, json_type_string)) {
                char k[64];
                ht_fail(e, "%s: \"__metadata__\" value of \"%s\" is not a string", path,
                        ht_escape(k, sizeof k, mkey, strlen(mkey)));
                goto done;
            }
        }
    }

    // Check the whole header before reading any data: every model tensor present and
    // consistent, then nothing else in the file.
    if (!(ents = ht_malloc((size_t)nt, sizeof *ents, e))) goto done;
    size_t total = 0;
    for (int i = 0; i < nt; i++) {
        json_object *ent;
        if (!json_object_object_get_ex(root, ts[i].name, &ent)) {
            ht_fail(e, "%s: missing tensor \"%s\" (model %s)", path, ts[i].name, m->name);
            goto done;
        }
        if (check_entry(path, &ts[i], ent, data_len, &ents[i], e)) goto done;
        total += ts[i].n;
    }
    json_object_object_foreach(root, key, val) {
        (void)val;
        if (!strcmp(key, "__metadata__")) continue;
        int known = 0;
        for (int i = 0; i < nt && !known; i++) known = !strcmp(key, ts[i].name);
        if (!known) {
            ht_fail(e, "%s: extra tensor \"%.64s\" is not in model %s", path, key, m->name);
            goto done;
        }
    }
    if (check_tiling(path, ts, ents, nt, data_len, e)) goto done;

    // Read into a scratch buffer so a failure leaves params untouched.
    if (!(tmp = ht_malloc(total, sizeof *tmp, e)) || !(chunk = ht_malloc(ST_CHUNK, 1, e)))
        goto done;
    size_t pos = 0;
    for (int i = 0; i < nt; i++) {
        if (read_tensor(path, f, &ts[i], &ents[i], data_start, chunk, tmp + pos, e)) goto done;
        pos += ts[i].n;
    }
    pos = 0;
    for (int i = 0; i < nt; i++) {
        memcpy(params + ts[i].off, tmp + pos, ts[i].n * sizeof *tmp);
        pos += ts[i].n;
    }
    rc = 0;

done:
    if (tok) json_tokener_free(tok);
    json_object_put(root);
    if (f) fclose(f);
    free(hdr);
    free(tmp);
    free(chunk);
    free(ents);
    return rc;
}
