// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON naming each
// tensor's dtype, shape and byte range (and an optional "__metadata__" map of strings), then
// the raw little-endian data. One writer and one strict reader for every file hetrain keeps.
#include "io/stfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/jsonkeys.h"

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
#define ST_MAX_HEADER 100000000ull
#define ST_CHUNK 65536 // bytes converted per read/write call

const char *const stfile_dtype_names[] = {"F32", "F16", "BF16", "F64", "I64"};
static const unsigned st_dtype_size[] = {4, 2, 2, 8, 8};

void stfile_fmt_shape(char *buf, size_t cap, const uint64_t *d, int nd) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRIu64, i ? "," : "", d[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

// ---- write ----

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

// The temporary file being written, and the test hook's crash point.
typedef struct st_out {
    int fd;
    uint64_t written;
    int64_t die_after;
} st_out;

static int out_write(st_out *o, const void *buf, size_t n) {
    const char *p = buf;
    if (o->die_after >= 0 && o->written + n >= (uint64_t)o->die_after)
        n = (size_t)((uint64_t)o->die_after - o->written);
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(o->fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    o->written += n;
    if (o->die_after >= 0 && o->written == (uint64_t)o->die_after) _exit(137);
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
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int stfile_publish(const char *tmp, const char *path, ht_error *e) {
    if (rename(tmp, path))
        return ht_fail(e, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    fsync_dir_of(path);
    return 0;
}

static uint64_t shape_count(int nd, const uint64_t *shape) {
    uint64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

// Checks that tensor t's values fit dtype dt, which must be one the writer writes.
static int check_writable(const char *path, const stfile_tensor *t, stfile_dtype dt,
                          ht_error *e) {
    if (dt == STFILE_F32) return 0;
    if (dt != STFILE_I64)
        return ht_fail(e, "%s: tensor \"%s\": cannot write dtype %d (F32 and I64 only)", path,
                       t->name, (int)dt);
    uint64_t n = shape_count(t->ndim, t->shape);
    for (uint64_t i = 0; i < n; i++) {
        float v = t->data[i];
        if (!(v == floorf(v) && fabsf(v) < 0x1p63f))
            return ht_fail(e, "%s: tensor \"%s\" element %" PRIu64 " is %g, which I64 cannot "
                           "hold", path, t->name, i, (double)v);
    }
    return 0;
}

// Tensor t's values as little-endian dt, through chunk (ST_CHUNK bytes).
static int write_values(st_out *o, const stfile_tensor *t, stfile_dtype dt,
                        unsigned char *chunk) {
    const float *src = t->data;
    unsigned size = st_dtype_size[dt];
    uint64_t left = shape_count(t->ndim, t->shape);
    while (left > 0) {
        size_t k = left < ST_CHUNK / size ? (size_t)left : ST_CHUNK / size;
        for (size_t j = 0; j < k; j++) {
            uint64_t u = 0;
            if (dt == STFILE_I64) {
                u = (uint64_t)(int64_t)src[j]; // two's complement, as int64 stores it
            } else {
                uint32_t f;
                memcpy(&f, &src[j], 4);
                u = f;
            }
            for (unsigned b = 0; b < size; b++) chunk[size * j + b] = (unsigned char)(u >> (8 * b));
        }
        if (out_write(o, chunk, size * k)) return -1;
        src += k;
        left -= k;
    }
    return 0;
}

static stfile_dtype dtype_at(const stfile_dtype *dtypes, int i) {
    return dtypes ? dtypes[i] : STFILE_F32;
}

int stfile_write(const char *path, const stfile_tensor *ts, int nt, const char *const *meta_kv,
                 int n_meta, int64_t die_after, ht_error *e) {
    return stfile_write_dtypes(path, ts, NULL, nt, meta_kv, n_meta, die_after, e);
}

int stfile_write_dtypes(const char *path, const stfile_tensor *ts, const stfile_dtype *dtypes,
                        int nt, const char *const *meta_kv, int n_meta, int64_t die_after,
                        ht_error *e) {
    for (int i = 0; i < nt; i++)
        if (check_writable(path, &ts[i], dtype_at(dtypes, i), e)) return -1;
    // The data: the I64 tensors' (8-byte values) first, then the F32 tensors', each group in
    // the given order, so that every value is aligned to its size.
    uint64_t *begin = ht_malloc((size_t)nt + 1, sizeof *begin, e);
    if (!begin) return -1;
    uint64_t off = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nt; i++) {
            stfile_dtype dt = dtype_at(dtypes, i);
            if ((dt == STFILE_I64) != (pass == 0)) continue;
            begin[i] = off;
            off += shape_count(ts[i].ndim, ts[i].shape) * st_dtype_size[dt];
        }

    // Header: __metadata__ first, then the tensors, padded with spaces so the data starts
    // 8-byte aligned.
    strbuf h = {0};
    sb_add(&h, "{");
    if (n_meta > 0) {
        sb_add(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_add(&h, ",");
            sb_json_string(&h, meta_kv[2 * i]);
            sb_add(&h, ":");
            sb_json_string(&h, meta_kv[2 * i + 1]);
        }
        sb_add(&h, "}");
    }
    for (int i = 0; i < nt; i++) {
        stfile_dtype dt = dtype_at(dtypes, i);
        if (i || n_meta > 0) sb_add(&h, ",");
        sb_json_string(&h, ts[i].name);
        sb_add(&h, ":{\"dtype\":\"%s\",\"shape\":[", stfile_dtype_names[dt]);
        for (int d = 0; d < ts[i].ndim; d++) sb_add(&h, "%s%" PRIu64, d ? "," : "", ts[i].shape[d]);
        uint64_t end = begin[i] + shape_count(ts[i].ndim, ts[i].shape) * st_dtype_size[dt];
        sb_add(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", begin[i], end);
    }
    sb_add(&h, "}");
    while (!h.failed && h.len % 8) sb_add(&h, " ");
    free(begin);

    int rc = -1, created = 0;
    st_out o = {.fd = -1, .die_after = die_after};
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
    o.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (o.fd < 0) {
        ht_fail(e, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        goto done;
    }
    created = 1;

    unsigned char lenb[8];
    put_le64(lenb, (uint64_t)h.len);
    if (out_write(&o, lenb, 8) || out_write(&o, h.s, h.len)) goto write_error;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nt; i++) {
            stfile_dtype dt = dtype_at(dtypes, i);
            if ((dt == STFILE_I64) == (pass == 0) && write_values(&o, &ts[i], dt, chunk))
                goto write_error;
        }
    if (fsync(o.fd)) goto write_error;
    int cr = close(o.fd);
    o.fd = -1;
    if (cr) goto write_error;
    if (stfile_publish(tmp, path, e)) goto done;
    rc = 0;
    goto done;

write_error:
    ht_fail(e, "%s: writing %s: %s", path, tmp, strerror(errno));
done:
    if (o.fd >= 0) close(o.fd);
    if (rc && created) unlink(tmp);
    free(tmp);
    free(chunk);
    free(h.s);
    return rc;
}

// ---- read ----

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

static void convert(float *dst, const unsigned char *b, size_t k, stfile_dtype dt) {
    for (size_t j = 0; j < k; j++) {
        switch (dt) {
        case STFILE_F32: {
            const unsigned char *p = b + 4 * j;
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&dst[j], &u, 4);
            break;
        }
        case STFILE_F16:
            dst[j] = f16_to_float((uint16_t)(b[2 * j] | b[2 * j + 1] << 8));
            break;
        case STFILE_BF16: {
            uint32_t u = ((uint32_t)b[2 * j] | (uint32_t)b[2 * j + 1] << 8) << 16;
            memcpy(&dst[j], &u, 4);
            break;
        }
        case STFILE_F64: {
            double d;
            convert_f64(&d, b + 8 * j);
            dst[j] = (float)d;
            break;
        }
        case STFILE_I64: {
            uint64_t u = 0;
            for (int i = 7; i >= 0; i--) u = u << 8 | b[8 * j + (size_t)i];
            dst[j] = (float)(int64_t)u;
            break;
        }
        case STFILE_DTYPE_COUNT: break;
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

void stfile_close(stfile *sf) {
    if (sf->f) fclose(sf->f);
    json_object_put(sf->root);
    free(sf->hdr);
    free(sf->names);
    free(sf->meta_kv);
    free(sf->chunk);
    memset(sf, 0, sizeof *sf);
}

// Strict JSON; the parser stops after the top-level value and we allow only the padding spaces
// (any JSON whitespace) after it. Then the checks json-c does not make.
static int parse_header(stfile *sf, uint64_t hlen, ht_error *e) {
    const char *path = sf->path;
    json_tokener *tok = json_tokener_new();
    if (!tok) return ht_fail(e, "%s: out of memory", path);
    int rc = -1;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    sf->root = json_tokener_parse_ex(tok, sf->hdr, (int)hlen);
    if (!sf->root) {
        enum json_tokener_error je = json_tokener_get_error(tok);
        if (je == json_tokener_continue || je == json_tokener_success)
            ht_fail(e, "%s: invalid JSON in header: it ends early", path);
        else
            ht_fail(e, "%s: invalid JSON in header at byte %zu: %s", path,
                    json_tokener_get_parse_end(tok), json_tokener_error_desc(je));
        goto done;
    }
    size_t end = json_tokener_get_parse_end(tok);
    for (size_t i = end; i < hlen; i++)
        if (!strchr(" \t\r\n", sf->hdr[i]) || !sf->hdr[i]) {
            ht_fail(e, "%s: invalid JSON in header: unexpected bytes after the object at byte %zu",
                    path, i);
            goto done;
        }
    if (!json_object_is_type(sf->root, json_type_object)) {
        ht_fail(e, "%s: header is not a JSON object", path);
        goto done;
    }
    // json-c keeps the last of two equal keys and cuts a key at an escaped NUL; the text says
    // whether either happened.
    jsonkeys_finding dup;
    if (jsonkeys_scan(sf->hdr, end, &dup) < 0) {
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
    json_object *meta = NULL;
    if (json_object_object_get_ex(sf->root, "__metadata__", &meta)) {
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

    // The keys in header order (json-c keeps it).
    int nk = json_object_object_length(sf->root);
    int nm = meta ? json_object_object_length(meta) : 0;
    if (!(sf->names = ht_malloc((size_t)nk + 1, sizeof *sf->names, e)) ||
        !(sf->meta_kv = ht_malloc(2 * (size_t)nm + 1, sizeof *sf->meta_kv, e)))
        goto done;
    json_object_object_foreach(sf->root, key, val) {
        (void)val;
        if (strcmp(key, "__metadata__")) sf->names[sf->n_names++] = key;
    }
    if (meta) {
        json_object_object_foreach(meta, mkey, mval) {
            sf->meta_kv[2 * sf->n_meta] = mkey;
            sf->meta_kv[2 * sf->n_meta + 1] = json_object_get_string(mval);
            if (!sf->meta_cut && strlen(json_object_get_string(mval)) !=
                                     (size_t)json_object_get_string_len(mval))
                sf->meta_cut = mkey;
            sf->n_meta++;
        }
    }
    rc = 0;
done:
    json_tokener_free(tok);
    return rc;
}

int stfile_open(stfile *sf, const char *path, ht_error *e) {
    memset(sf, 0, sizeof *sf);
    sf->path = path;
    sf->f = fopen(path, "rb");
    if (!sf->f) {
        ht_fail(e, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(sf->f), &st) || !S_ISREG(st.st_mode)) {
        ht_fail(e, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t fsize = (uint64_t)st.st_size;
    unsigned char lenb[8];
    if (fsize < 8 || fread(lenb, 1, 8, sf->f) != 8) {
        ht_fail(e, "%s: file is %" PRIu64 " bytes, too short for a safetensors file (needs an "
                   "8-byte header length)", path, fsize);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    if (hlen > ST_MAX_HEADER) {
        ht_fail(e, "%s: header length %" PRIu64 " exceeds the 100 MB limit (not a safetensors "
                   "file?)", path, hlen);
        goto fail;
    }
    if (hlen > fsize - 8) {
        ht_fail(e, "%s: header length %" PRIu64 " is larger than the rest of the file (%" PRIu64
                   " bytes)", path, hlen, fsize - 8);
        goto fail;
    }
    if (!(sf->hdr = ht_malloc(hlen + 1, 1, e)) || !(sf->chunk = ht_malloc(ST_CHUNK, 1, e)))
        goto fail;
    if (fread(sf->hdr, 1, hlen, sf->f) != hlen) {
        ht_fail(e, "%s: cannot read the %" PRIu64 "-byte header", path, hlen);
        goto fail;
    }
    sf->hdr[hlen] = 0;
    sf->data_start = 8 + hlen;
    sf->data_len = fsize - sf->data_start;
    if (parse_header(sf, hlen, e)) goto fail;
    return 0;
fail:
    stfile_close(sf);
    return -1;
}

const char *stfile_meta(const stfile *sf, const char *key) {
    for (int i = 0; i < sf->n_meta; i++)
        if (!strcmp(sf->meta_kv[2 * i], key)) return sf->meta_kv[2 * i + 1];
    return NULL;
}

int stfile_entry_get(const stfile *sf, const char *name, int want_ndim, const uint64_t *want_shape,
                     stfile_entry *out, ht_error *e) {
    const char *path = sf->path;
    json_object *ent;
    if (!json_object_object_get_ex(sf->root, name, &ent)) return 1;
    if (!json_object_is_type(ent, json_type_object))
        return ht_fail(e, "%s: tensor \"%s\": header entry is not a JSON object", path, name);
    json_object *jd = NULL, *js = NULL, *jo = NULL;
    json_object_object_get_ex(ent, "dtype", &jd);
    json_object_object_get_ex(ent, "shape", &js);
    json_object_object_get_ex(ent, "data_offsets", &jo);

    if (!jd || !json_object_is_type(jd, json_type_string))
        return ht_fail(e, "%s: tensor \"%s\": \"dtype\" missing or not a string", path, name);
    const char *dname = json_object_get_string(jd);
    size_t dlen = (size_t)json_object_get_string_len(jd);
    int dt = -1;
    for (int i = 0; i < STFILE_DTYPE_COUNT; i++)
        if (dlen == strlen(stfile_dtype_names[i]) && !memcmp(dname, stfile_dtype_names[i], dlen))
            dt = i;
    if (dt < 0) {
        char found[48];
        return ht_fail(e, "%s: tensor \"%s\": unsupported dtype \"%s\" (supported: F32, F16, "
                          "BF16, F64, I64)",
                       path, name, ht_escape(found, sizeof found, dname, dlen));
    }

    uint64_t *shape = out->shape;
    size_t nd;
    if (json_uints(js, shape, STFILE_MAX_DIMS, &nd))
        return ht_fail(e, "%s: tensor \"%s\": \"shape\" missing or not a list of non-negative "
                          "integers", path, name);
    if (want_shape) {
        int same = nd == (size_t)want_ndim;
        for (size_t i = 0; same && i < nd; i++) same = shape[i] == want_shape[i];
        if (!same) {
            char want[200], found[200];
            stfile_fmt_shape(want, sizeof want, want_shape, want_ndim);
            if (nd <= STFILE_MAX_DIMS) stfile_fmt_shape(found, sizeof found, shape, (int)nd);
            else snprintf(found, sizeof found, "%zu dimensions", nd);
            return ht_fail(e, "%s: tensor \"%s\": expected shape %s, found %s", path, name, want,
                           found);
        }
    } else if (nd > STFILE_MAX_DIMS) {
        return ht_fail(e, "%s: tensor \"%s\": shape has %zu dimensions (at most %d supported)",
                       path, name, nd, STFILE_MAX_DIMS);
    }
    // Values and bytes, saturating: a product past 2^64 fits no data buffer either.
    uint64_t n = 1, size = st_dtype_size[dt], need;
    for (size_t i = 0; i < nd; i++)
        n = shape[i] && n > UINT64_MAX / shape[i] ? UINT64_MAX : n * shape[i];
    need = n > UINT64_MAX / size ? UINT64_MAX : n * size;

    uint64_t offs[2];
    size_t no;
    if (json_uints(jo, offs, 2, &no) || no != 2)
        return ht_fail(e, "%s: tensor \"%s\": \"data_offsets\" missing or not two non-negative "
                          "integers", path, name);
    uint64_t b = offs[0], end = offs[1];
    if (b > end || end > sf->data_len)
        return ht_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ",%" PRIu64 "] out of range "
                          "(data buffer is %" PRIu64 " bytes)", path, name, b, end, sf->data_len);
    if (end - b != need) {
        char sh[200];
        stfile_fmt_shape(sh, sizeof sh, shape, (int)nd);
        if (need == UINT64_MAX)
            return ht_fail(e, "%s: tensor \"%s\": shape %s holds more values than any file can",
                           path, name, sh);
        return ht_fail(e, "%s: tensor \"%s\": data_offsets [%" PRIu64 ",%" PRIu64 "] hold %" PRIu64
                          " bytes, but %" PRIu64 " values of %s need %" PRIu64, path, name, b, end,
                       end - b, n, stfile_dtype_names[dt], need);
    }
    out->name = name;
    out->dtype = (stfile_dtype)dt;
    out->ndim = (int)nd;
    out->n = n;
    out->begin = b;
    out->end = end;
    return 0;
}

int stfile_check_tiling(const stfile *sf, const stfile_entry *en, int n, ht_error *e) {
    const char *path = sf->path;
    int *order = ht_malloc((size_t)n + 1, sizeof *order, e);
    if (!order) return -1;
    for (int i = 0; i < n; i++) { // insertion sort: a file has a few dozen tensors
        int k = i;
        for (; k > 0 && en[order[k - 1]].begin > en[i].begin; k--) order[k] = order[k - 1];
        order[k] = i;
    }
    // In order of their offsets each begins where the one before ended, the first at 0, the
    // last at the buffer's end.
    uint64_t pos = 0;
    int prev = -1, rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        const stfile_entry *x = &en[order[k]];
        if (x->begin < pos)
            rc = ht_fail(e, "%s: tensors \"%s\" [%" PRIu64 ",%" PRIu64 "] and \"%s\" [%" PRIu64
                            ",%" PRIu64 "] overlap in the data buffer", path, en[prev].name,
                         en[prev].begin, en[prev].end, x->name, x->begin, x->end);
        else if (x->begin > pos && prev < 0)
            rc = ht_fail(e, "%s: data buffer bytes [0,%" PRIu64 ") before tensor \"%s\" belong to "
                            "no tensor", path, x->begin, x->name);
        else if (x->begin > pos)
            rc = ht_fail(e, "%s: data buffer bytes [%" PRIu64 ",%" PRIu64 ") between tensors \"%s\" "
                            "and \"%s\" belong to no tensor", path, pos, x->begin,
                         en[prev].name, x->name);
        pos = x->end;
        prev = order[k];
    }
    if (!rc && pos != sf->data_len)
        rc = ht_fail(e, "%s: data buffer bytes [%" PRIu64 ",%" PRIu64 ") after %s%s%s belong to no "
                        "tensor", path, pos, sf->data_len, prev < 0 ? "the header" : "tensor \"",
                     prev < 0 ? "" : en[prev].name, prev < 0 ? "" : "\"");
    free(order);
    return rc;
}

// Values must be finite: a NaN or an infinity in weights would poison every step and every
// prediction, and later show up only as a failed self-check or skipped updates. Names element
// i (a flat index into the tensor, and its position by dimension).
static int check_finite(const char *path, const stfile_entry *en, const unsigned char *raw,
                        const float *v, size_t k, uint64_t first, ht_error *e) {
    for (size_t j = 0; j < k; j++) {
        if (isfinite(v[j])) continue;
        uint64_t i = first + j, rest = i;
        uint64_t idx[STFILE_MAX_DIMS];
        for (int d = en->ndim - 1; d >= 0; d--) {
            idx[d] = en->shape[d] ? rest % en->shape[d] : 0;
            rest = en->shape[d] ? rest / en->shape[d] : 0;
        }
        char where[200] = "", why[64] = "";
        if (en->ndim > 1) {
            char s[190];
            stfile_fmt_shape(s, sizeof s, idx, en->ndim);
            snprintf(where, sizeof where, " %s", s);
        }
        if (en->dtype == STFILE_F64) {
            double d;
            convert_f64(&d, raw + 8 * j);
            if (isfinite(d)) snprintf(why, sizeof why, " (F64 value %g is beyond float's range)", d);
        }
        return ht_fail(e, "%s: tensor \"%s\" element %" PRIu64 "%s is %s%s", path, en->name, i,
                       where, isnan(v[j]) ? "NaN" : v[j] > 0 ? "+Inf" : "-Inf", why);
    }
    return 0;
}

int stfile_read(const stfile *sf, const stfile_entry *en, float *dst, ht_error *e) {
    unsigned size = st_dtype_size[en->dtype];
    if (fseeko(sf->f, (off_t)(sf->data_start + en->begin), SEEK_SET))
        return ht_fail(e, "%s: tensor \"%s\": seek failed: %s", sf->path, en->name,
                       strerror(errno));
    uint64_t left = en->n;
    while (left > 0) {
        size_t k = left < ST_CHUNK / size ? (size_t)left : ST_CHUNK / size;
        if (fread(sf->chunk, size, k, sf->f) != k) {
            const char *why =
                ferror(sf->f) ? strerror(errno) : "file ended early (changed meanwhile?)";
            return ht_fail(e, "%s: tensor \"%s\": %s", sf->path, en->name, why);
        }
        convert(dst, sf->chunk, k, en->dtype);
        if (check_finite(sf->path, en, sf->chunk, dst, k, en->n - left, e)) return -1;
        dst += k;
        left -= k;
    }
    return 0;
}
