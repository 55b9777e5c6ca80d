// NumPy loaders: .npy files (format versions 1.0, 2.0 and 3.0) and .npz archives of them (a zip,
// read with libzip, members stored or deflated). An array is read whole into memory and its
// header, a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}, parsed
// strictly: exactly those keys, a dtype we take, C order, a payload of exactly the shape's size.
// Images become a dataset's NCHW floats, labels its bytes.
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#define NPY_MAX_DIMS 4
#define NPY_MAX_HEADER 65536 // numpy itself refuses longer headers to read
#define NPY_CHUNK (1u << 20)

typedef enum npy_dtype { NPY_U1, NPY_F4, NPY_I4, NPY_I8 } npy_dtype;
static const struct {
    const char *descr;
    const char *name;
    int size;
} npy_dtypes[] = {
    [NPY_U1] = {"|u1", "uint8", 1},
    [NPY_F4] = {"<f4", "float32", 4},
    [NPY_I4] = {"<i4", "int32", 4},
    [NPY_I8] = {"<i8", "int64", 8},
};

// One array: its dtype and shape, and its payload inside the buffer it was parsed from.
typedef struct npy_array {
    npy_dtype dtype;
    int ndim;
    long long shape[NPY_MAX_DIMS];
    const uint8_t *data;
    size_t count; // elements
} npy_array;

// A shape as numpy prints it: "(50000, 32, 32, 3)", "(10,)".
static void shape_text(const npy_array *a, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < a->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", a->shape[i]);
    if (k < len) snprintf(buf + k, len - k, a->ndim == 1 ? ",)" : ")");
}

// ---- the header dict -----------------------------------------------------------------------

typedef struct hdr_parser {
    const char *p, *end;
    const char *name; // for messages
} hdr_parser;

// Up to 20 bytes of the header from where the parser stands, escaped for a one-line message.
static const char *hp_here(const hdr_parser *h, char *buf, size_t cap) {
    size_t n = (size_t)(h->end - h->p);
    return ht_escape(buf, cap, h->p, n > 20 ? 20 : n);
}

static void hp_space(hdr_parser *h) {
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t')) h->p++;
}

static int hp_char(hdr_parser *h, char c) {
    hp_space(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

// A quoted string ('...' or "..."; no escapes, which no key or dtype we take contains).
static int hp_string(hdr_parser *h, char *out, size_t cap, ht_error *e) {
    hp_space(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) {
        char at[96];
        return ht_fail(e, "%s: malformed header: expected a quoted string at \"%s\"", h->name,
                       hp_here(h, at, sizeof at));
    }
    char q = *h->p++;
    const char *s = h->p;
    while (h->p < h->end && *h->p != q && *h->p != '\\') h->p++;
    if (h->p >= h->end || *h->p != q)
        return ht_fail(e, "%s: malformed header: unterminated or escaped string", h->name);
    size_t n = (size_t)(h->p - s);
    h->p++;
    if (n >= cap) return ht_fail(e, "%s: malformed header: a string of %zu bytes, too long", h->name, n);
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
}

static int hp_word(hdr_parser *h, const char *w) {
    hp_space(h);
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) >= n && !memcmp(h->p, w, n)) {
        h->p += n;
        return 1;
    }
    return 0;
}

// (d0, d1, ...) with an optional trailing comma; () is a scalar.
static int hp_shape(hdr_parser *h, npy_array *a, ht_error *e) {
    if (!hp_char(h, '('))
        return ht_fail(e, "%s: malformed header: 'shape' is not a tuple", h->name);
    a->ndim = 0;
    for (;;) {
        if (hp_char(h, ')')) break;
        hp_space(h);
        if (h->p >= h->end || (unsigned)(*h->p - '0') > 9u) {
            char at[96];
            return ht_fail(e, "%s: malformed header: 'shape' holds \"%s\", expected whole "
                              "numbers", h->name, hp_here(h, at, sizeof at));
        }
        if (a->ndim == NPY_MAX_DIMS)
            return ht_fail(e, "%s: shape has more than %d dimensions", h->name, NPY_MAX_DIMS);
        long long v = 0;
        while (h->p < h->end && (unsigned)(*h->p - '0') <= 9u) {
            v = v * 10 + (*h->p++ - '0');
            if (v > DATA_MAX_SAMPLES)
                return ht_fail(e, "%s: shape has a dimension over %d", h->name, DATA_MAX_SAMPLES);
        }
        a->shape[a->ndim++] = v;
        if (hp_char(h, ',')) continue;
        if (hp_char(h, ')')) {
            if (a->ndim == 1)
                return ht_fail(e, "%s: malformed header: a 1-tuple needs its comma, \"(%lld,)\"",
                               h->name, v);
            break;
        }
        return ht_fail(e, "%s: malformed header: 'shape' tuple not closed", h->name);
    }
    return 0;
}

// Parses the dict of hdr[0..len) (its padding and final '\n' included) into a.
static int parse_dict(const char *hdr, size_t len, const char *name, npy_array *a, ht_error *e) {
    hdr_parser h = {hdr, hdr + len, name};
    if (len == 0 || hdr[len - 1] != '\n')
        return ht_fail(e, "%s: malformed header: it does not end with a newline", name);
    h.end--;
    if (!hp_char(&h, '{')) return ht_fail(e, "%s: malformed header: expected a dict \"{...}\"", name);
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
    char descr[32];
    for (;;) {
        if (hp_char(&h, '}')) break;
        char key[32];
        if (hp_string(&h, key, sizeof key, e) < 0) return -1;
        if (!hp_char(&h, ':'))
            return ht_fail(e, "%s: malformed header: expected ':' after '%s'", name, key);
        if (!strcmp(key, "descr") && !have_descr) {
            if (hp_string(&h, descr, sizeof descr, e) < 0) return -1;
            have_descr = 1;
        } else if (!strcmp(key, "fortran_order") && !have_fortran) {
            if (hp_word(&h, "False")) fortran = 0;
            else if (hp_word(&h, "True")) fortran = 1;
            else return ht_fail(e, "%s: malformed header: 'fortran_order' is not True or False", name);
            have_fortran = 1;
        } else if (!strcmp(key, "shape") && !have_shape) {
            if (hp_shape(&h, a, e) < 0) return -1;
            have_shape = 1;
        } else if (!strcmp(key, "descr") || !strcmp(key, "fortran_order") || !strcmp(key, "shape")) {
            return ht_fail(e, "%s: malformed header: key '%s' given twice", name, key);
        } else {
            return ht_fail(e, "%s: malformed header: unexpected key '%s' (expected descr, "
                              "fortran_order, shape)", name, key);
        }
        if (hp_char(&h, ',')) continue;
        if (hp_char(&h, '}')) break;
        char at[96];
        return ht_fail(e, "%s: malformed header: expected ',' or '}' at \"%s\"", name,
                       hp_here(&h, at, sizeof at));
    }
    hp_space(&h);
    if (h.p != h.end) {
        char at[96];
        return ht_fail(e, "%s: malformed header: \"%s\" after the dict", name,
                       hp_here(&h, at, sizeof at));
    }
    if (!have_descr || !have_fortran || !have_shape)
        return ht_fail(e, "%s: malformed header: no '%s' key", name,
                       !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    if (fortran)
        return ht_fail(e, "%s: fortran_order is True; save the array in C order "
                          "(np.ascontiguousarray)", name);
    int t = -1;
    for (int i = 0; i < (int)(sizeof npy_dtypes / sizeof npy_dtypes[0]); i++)
        if (!strcmp(descr, npy_dtypes[i].descr)) t = i;
    if (t < 0)
        return ht_fail(e, "%s: dtype '%s' is not one hetrain reads (images: uint8 '|u1' or "
                          "float32 '<f4'; labels: '|u1', '<i4' or '<i8')", name, descr);
    a->dtype = (npy_dtype)t;
    return 0;
}

// Parses a whole .npy image of len bytes: magic, version, header, then exactly the payload.
static int npy_parse(const uint8_t *buf, size_t len, const char *name, npy_array *a, ht_error *e) {
    memset(a, 0, sizeof *a);
    static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (len < 6 || memcmp(buf, magic, 6) != 0)
        return ht_fail(e, "%s: not a .npy file (bad magic; expected \"\\x93NUMPY\")", name);
    if (len < 10) return ht_fail(e, "%s: file ends inside the .npy preamble", name);
    int major = buf[6], minor = buf[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return ht_fail(e, "%s: .npy format version %d.%d, expected 1.0, 2.0 or 3.0", name, major,
                       minor);
    size_t hl, off;
    if (major == 1) {
        hl = (size_t)buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else {
        if (len < 12) return ht_fail(e, "%s: file ends inside the .npy preamble", name);
        hl = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        off = 12;
    }
    if (hl > NPY_MAX_HEADER)
        return ht_fail(e, "%s: header of %zu bytes, more than %d", name, hl, NPY_MAX_HEADER);
    if (len - off < hl)
        return ht_fail(e, "%s: file ends inside the %zu-byte header", name, hl);
    const char *hdr = (const char *)buf + off;
    for (size_t i = 0; i < hl; i++) // latin-1 (1.0, 2.0) or UTF-8 (3.0); the dict itself is ASCII
        if ((unsigned char)hdr[i] >= 0x80 || (hdr[i] < 0x20 && hdr[i] != '\n' && hdr[i] != '\t'))
            return ht_fail(e, "%s: malformed header: byte 0x%02x at offset %zu", name,
                           (unsigned char)hdr[i], off + i);
    if (parse_dict(hdr, hl, name, a, e) < 0) return -1;
    size_t count = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] > 0 && count > SIZE_MAX / 8 / (size_t)a->shape[i])
            return ht_fail(e, "%s: shape too large", name);
        count *= (size_t)a->shape[i];
    }
    size_t need = count * (size_t)npy_dtypes[a->dtype].size, have = len - off - hl;
    char sh[96];
    shape_text(a, sh, sizeof sh);
    if (have < need) {
        size_t per = a->ndim > 0 && a->shape[0] > 0 ? need / (size_t)a->shape[0] : need;
        return ht_fail(e, "%s: shape %s of %s needs %zu bytes of data but the file holds %zu "
                          "(%zu whole rows): truncated", name, sh, npy_dtypes[a->dtype].name, need,
                       have, per ? have / per : 0);
    }
    if (have > need)
        return ht_fail(e, "%s: %zu trailing bytes after the %s %s data", name, have - need, sh,
                       npy_dtypes[a->dtype].name);
    a->data = buf + off + hl;
    a->count = count;
    return 0;
}

// ---- arrays into a dataset -----------------------------------------------------------------

// Images of a into d (shape checked, layout settled, values converted).
static int take_images(const npy_array *a, const char *name, const data_opts *o, dataset *d,
                       ht_error *e) {
    char sh[96];
    shape_text(a, sh, sizeof sh);
    if (a->dtype != NPY_U1 && a->dtype != NPY_F4)
        return ht_fail(e, "%s: images of dtype %s, expected uint8 or float32", name,
                       npy_dtypes[a->dtype].name);
    if (a->ndim != 3 && a->ndim != 4)
        return ht_fail(e, "%s: images of shape %s, expected (N,H,W,C), (N,C,H,W) or (N,H,W)", name, sh);
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] < 1 || (i > 0 && a->shape[i] > DATA_MAX_DIM))
            return ht_fail(e, "%s: images of shape %s: every dimension must be 1..%d (samples "
                              "1..%d)", name, sh, DATA_MAX_DIM, DATA_MAX_SAMPLES);
    int n = (int)a->shape[0], c = 1, h, w, nhwc = 0;
    if (a->ndim == 3) {
        h = (int)a->shape[1];
        w = (int)a->shape[2];
    } else {
        data_layout l = o ? o->layout : DATA_LAYOUT_AUTO;
        if (l == DATA_LAYOUT_AUTO) {
            int ch = o ? o->channels : 0, last = a->shape[3] == ch, first = a->shape[1] == ch;
            if (ch < 1)
                return ht_fail(e, "%s: images of shape %s: NHWC or NCHW? give --layout", name, sh);
            if (last && first)
                return ht_fail(e, "%s: images of shape %s are ambiguous: axes 1 and 3 both have "
                                  "the model's %d channels; give --layout nhwc or nchw", name, sh, ch);
            if (!last && !first)
                return ht_fail(e, "%s: images of shape %s have the model's %d channels on neither "
                                  "axis 3 (NHWC) nor axis 1 (NCHW)", name, sh, ch);
            l = last ? DATA_LAYOUT_NHWC : DATA_LAYOUT_NCHW;
        }
        nhwc = l == DATA_LAYOUT_NHWC;
        c = (int)a->shape[nhwc ? 3 : 1];
        h = (int)a->shape[nhwc ? 1 : 2];
        w = (int)a->shape[nhwc ? 2 : 3];
    }
    size_t chw = (size_t)c * h * w, hw = (size_t)h * w;
    d->x = ht_malloc((size_t)n * chw, sizeof(float), e);
    if (!d->x) return -1;
    for (int s = 0; s < n; s++) {
        const uint8_t *src = a->data + (size_t)s * chw * (size_t)npy_dtypes[a->dtype].size;
        float *dst = d->x + (size_t)s * chw;
        for (size_t k = 0; k < chw; k++) {
            // Source element k in its own order; its place in CHW.
            size_t at = nhwc ? (k % (size_t)c) * hw + k / (size_t)c : k;
            float v;
            if (a->dtype == NPY_U1) {
                v = (float)src[k] / 255.0f;
            } else {
                memcpy(&v, src + 4 * k, 4); // little-endian '<f4' on a little-endian host
                if (!isfinite(v))
                    return ht_fail(e, "%s: sample %d: element %zu is %s, expected a finite number",
                                   name, s, k, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
            }
            dst[at] = v;
        }
    }
    d->n = n;
    d->c = c;
    d->h = h;
    d->w = w;
    return 0;
}

// Label element k of a (any of its dtypes) as a number; a float32 that is no whole number
// gives -1.
static long long label_value(const npy_array *a, size_t k) {
    const uint8_t *p = a->data + k * (size_t)npy_dtypes[a->dtype].size;
    switch (a->dtype) {
    case NPY_U1: return p[0];
    case NPY_I4: {
        int32_t t;
        memcpy(&t, p, 4);
        return t;
    }
    case NPY_I8: {
        int64_t t;
        memcpy(&t, p, 8);
        return t;
    }
    case NPY_F4: {
        float t;
        memcpy(&t, p, 4);
        return t == 0.0f ? 0 : t == 1.0f ? 1 : -1;
    }
    }
    return -1;
}

// Labels of a into d->y: one per sample of d, each below the class count; or for a multi-label
// model (o->labels = k >= 2) k a sample, each 0 or 1 (Keras's (N, k) multi-hot arrays, any
// integer dtype or float32).
static int take_labels(const npy_array *a, const char *name, const char *images, const data_opts *o,
                       dataset *d, ht_error *e) {
    char sh[96];
    shape_text(a, sh, sizeof sh);
    int k = o && o->labels > 1 ? o->labels : 1;
    if (k > 1) {
        if (a->ndim != 2 || a->shape[1] != k)
            return ht_fail(e, "%s: labels of shape %s, expected (N, %d): the model's multi-label "
                           "head takes %d labels of 0 or 1 a sample", name, sh, k, k);
    } else {
        if (a->dtype == NPY_F4)
            return ht_fail(e, "%s: labels of dtype float32, expected uint8, int32 or int64", name);
        if (!(a->ndim == 1 || (a->ndim == 2 && a->shape[1] == 1)))
            return ht_fail(e, "%s: labels of shape %s, expected (N,) or (N, 1)", name, sh);
    }
    if (a->shape[0] != d->n)
        return ht_fail(e, "%s has %d samples but %s has %lld labels", images, d->n, name, a->shape[0]);
    int classes = k > 1 ? 2
                  : o && o->classes > 0 && o->classes < DATA_MAX_CLASSES ? o->classes
                                                                         : DATA_MAX_CLASSES;
    d->y = ht_malloc((size_t)d->n, (size_t)k, e);
    if (!d->y) return -1;
    d->ylen = k;
    for (int i = 0; i < d->n; i++)
        for (int j = 0; j < k; j++) {
            long long v = label_value(a, (size_t)i * k + j);
            if (v < 0 || v >= classes) {
                if (k == 1)
                    return ht_fail(e, "%s: label %lld at record %d is outside 0..%d", name, v, i,
                                   classes - 1);
                return ht_fail(e, "%s: record %d, label %d is not 0 or 1", name, i, j);
            }
            d->y[(size_t)i * k + j] = (uint8_t)v;
        }
    return 0;
}

// ---- files ---------------------------------------------------------------------------------

// Reads a whole regular file.
static uint8_t *read_whole(const char *path, size_t *len, ht_error *e) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        ht_fail(e, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        ht_fail(e, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ht_fail(e, "%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        ht_fail(e, "%s: empty file", path);
        close(fd);
        return NULL;
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = ht_malloc(n, 1, e);
    while (buf && got < n) {
        ssize_t r = read(fd, buf + got, n - got > (1u << 30) ? (1u << 30) : n - got);
        if (r <= 0) {
            ht_fail(e, "%s: %s", path, r < 0 ? strerror(errno) : "file shrank while read");
            free(buf);
            buf = NULL;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    *len = n;
    return buf;
}

int dataset_load_npy(dataset *d, const char *images_path, const char *labels_path,
                     const data_opts *o, ht_error *e) {
    memset(d, 0, sizeof *d);
    size_t xl = 0, yl = 0;
    uint8_t *xb = read_whole(images_path, &xl, e), *yb = NULL;
    npy_array xa, ya;
    if (!xb || npy_parse(xb, xl, images_path, &xa, e) < 0 ||
        take_images(&xa, images_path, o, d, e) < 0)
        goto fail;
    free(xb);
    xb = NULL;
    if (labels_path) {
        if (!(yb = read_whole(labels_path, &yl, e)) || npy_parse(yb, yl, labels_path, &ya, e) < 0 ||
            take_labels(&ya, labels_path, images_path, o, d, e) < 0)
            goto fail;
        free(yb);
    }
    return 0;
fail:
    free(xb);
    free(yb);
    dataset_free(d);
    return -1;
}

// The member `name` of an open archive, read whole; NULL with e set (missing: *missing = 1).
// The buffer grows only as data arrives, so a member that lies about its size allocates no
// more than it holds.
static uint8_t *npz_member(zip_t *z, const char *path, const char *name, size_t *len,
                           int *missing, ht_error *e) {
    *missing = 0;
    zip_int64_t i = zip_name_locate(z, name, 0);
    if (i < 0) {
        *missing = 1;
        ht_fail(e, "%s: no member %s", path, name);
        return NULL;
    }
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(z, (zip_uint64_t)i, 0, &st) < 0 || !(st.valid & ZIP_STAT_SIZE)) {
        ht_fail(e, "%s: %s: %s", path, name, zip_strerror(z));
        return NULL;
    }
    if (st.size == 0) {
        ht_fail(e, "%s: %s: empty member", path, name);
        return NULL;
    }
    if (st.size > (zip_uint64_t)SIZE_MAX / 2) {
        ht_fail(e, "%s: %s: member of %llu bytes too large", path, name, (unsigned long long)st.size);
        return NULL;
    }
    zip_file_t *f = zip_fopen_index(z, (zip_uint64_t)i, 0);
    if (!f) {
        ht_fail(e, "%s: %s: %s", path, name, zip_strerror(z));
        return NULL;
    }
    size_t want = (size_t)st.size, cap = want < NPY_CHUNK ? want + 1 : NPY_CHUNK, got = 0;
    uint8_t *buf = ht_malloc(cap, 1, e);
    while (buf) {
        zip_int64_t r = zip_fread(f, buf + got, cap - got);
        if (r < 0) {
            ht_fail(e, "%s: %s: %s", path, name, zip_file_strerror(f));
            break;
        }
        got += (size_t)r;
        if (got > want) {
            ht_fail(e, "%s: %s: member holds more than the %zu bytes its entry says", path, name, want);
            break;
        }
        if (r == 0) {
            if (got < want) {
                ht_fail(e, "%s: %s: member ends after %zu of its %zu bytes", path, name, got, want);
                break;
            }
            zip_fclose(f);
            *len = got;
            return buf;
        }
        if (got == cap) {
            size_t ncap = cap > want / 2 ? want + 1 : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                ht_fail(e, "%s: %s: out of memory reading %zu bytes", path, name, ncap);
                break;
            }
            buf = nb;
            cap = ncap;
        }
    }
    free(buf);
    zip_fclose(f);
    return NULL;
}

// An array of the archive: its bytes (owned by the caller) and parse.
static uint8_t *npz_array(zip_t *z, const char *path, const char *member, char *label,
                          size_t label_len, npy_array *a, ht_error *e) {
    size_t len = 0;
    int missing;
    snprintf(label, label_len, "%s: %s", path, member);
    uint8_t *buf = npz_member(z, path, member, &len, &missing, e);
    if (buf && npy_parse(buf, len, label, a, e) < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

int dataset_load_npz(dataset *d, const char *path, int test, int only_named, const data_opts *o,
                     ht_error *e) {
    memset(d, 0, sizeof *d);
    struct stat fst;
    if (stat(path, &fst) != 0) return ht_fail(e, "%s: %s", path, strerror(errno));
    if (S_ISDIR(fst.st_mode)) return ht_fail(e, "%s: is a directory, expected a .npz file", path);
    int zerr = 0;
    zip_t *z = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
    if (!z) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        ht_fail(e, "%s: not a readable .npz (zip) archive: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return -1;
    }
    const char *xs[2] = {test ? "x_test.npy" : "x_train.npy", "x.npy"};
    const char *ys[2] = {test ? "y_test.npy" : "y_train.npy", "y.npy"};
    int k = zip_name_locate(z, xs[0], 0) >= 0 ? 0 : 1, rc = -1;
    uint8_t *xb = NULL, *yb = NULL;
    if (k == 1 && only_named) {
        rc = 1;
        goto out;
    }
    if (k == 1 && zip_name_locate(z, xs[1], 0) < 0) {
        ht_fail(e, "%s: no member %s or %s (np.savez(..., %s=..., %s=...))", path, xs[0], xs[1],
                test ? "x_test" : "x_train", test ? "y_test" : "y_train");
        goto out;
    }
    char xlabel[4200], ylabel[4200];
    npy_array xa, ya;
    if (!(xb = npz_array(z, path, xs[k], xlabel, sizeof xlabel, &xa, e)) ||
        take_images(&xa, xlabel, o, d, e) < 0)
        goto out;
    free(xb);
    xb = NULL;
    if (zip_name_locate(z, ys[k], 0) < 0) {
        if (!test) {
            ht_fail(e, "%s: no member %s for the labels of %s", path, ys[k], xs[k]);
            goto out;
        }
    } else if (!(yb = npz_array(z, path, ys[k], ylabel, sizeof ylabel, &ya, e)) ||
               take_labels(&ya, ylabel, xlabel, o, d, e) < 0) {
        goto out;
    }
    rc = 0;
out:
    free(xb);
    free(yb);
    zip_discard(z);
    if (rc != 0) dataset_free(d);
    return rc;
}

int npy_save_f32(const char *path, const float *x, int rows, int cols, ht_error *e) {
    char head[128], tmp[4096];
    int n = snprintf(head, sizeof head, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }",
                     rows, cols);
    // Padded with spaces and a newline so that the data starts on a 64-byte boundary.
    const int total = (10 + n + 1 + 63) / 64 * 64;
    while (10 + n + 1 < total) head[n++] = ' ';
    head[n++] = '\n';
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return ht_fail(e, "%s: %s", tmp, strerror(errno));
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const unsigned char hl[2] = {(unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    int bad = fwrite(magic, 1, 8, f) != 8 || fwrite(hl, 1, 2, f) != 2 ||
              fwrite(head, 1, (size_t)n, f) != (size_t)n ||
              fwrite(x, sizeof(float), (size_t)rows * cols, f) != (size_t)rows * cols;
    const int err = errno;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        const int er = bad ? err : errno;
        unlink(tmp);
        return ht_fail(e, "writing %s: %s", path, strerror(er ? er : EIO));
    }
    return 0;
}
