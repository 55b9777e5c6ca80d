// Kaggle CSV loader: a header line, then one sample per line, optionally led by its label.
// Reads through zlib (so a .csv.gz works too) into a growing buffer and scans fields in place:
// the 100 MB Kaggle train file has 47 M fields, so integers take a fast path and only odd
// fields ("12.0", "1e2", garbage) go through strtod.
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

typedef struct csv_reader {
    const char *path;
    gzFile gz;
    char *buf;
    size_t cap, start, end; // unread bytes are buf[start..end)
    size_t scanned;         // no '\n' in buf[start..scanned)
    long line;                       // number of the last line returned, from 1
    int eof;
} csv_reader;

// zlib's message without the "<path>: " it prefixes (its own messages hold no ": ").
static const char *zlib_msg(const char *m) {
    const char *s = m;
    for (const char *p = m; (p = strstr(p, ": ")); p += 2) s = p + 2;
    return s;
}

// Next line without its "\n" or "\r\n": 1 when there is one, 0 at the end, -1 on error.
static int csv_line(csv_reader *r, char **s, size_t *len, ht_error *e) {
    for (;;) {
        char *nl = memchr(r->buf + r->scanned, '\n', r->end - r->scanned);
        if (nl || (r->eof && r->start < r->end)) {
            char *last = nl ? nl : r->buf + r->end;
            *s = r->buf + r->start;
            *len = (size_t)(last - *s);
            if (*len && (*s)[*len - 1] == '\r') (*len)--;
            r->start = r->scanned = (size_t)(last - r->buf) + (nl ? 1 : 0);
            r->line++;
            return 1;
        }
        if (r->eof) return 0;
        r->scanned = r->end;
        if (r->start > 0) { // keep the partial line, drop what was consumed
            memmove(r->buf, r->buf + r->start, r->end - r->start);
            r->end -= r->start;
            r->scanned -= r->start;
            r->start = 0;
        }
        if (r->end == r->cap) {
            char *nb = realloc(r->buf, r->cap * 2);
            if (!nb)
                return ht_fail(e, "%s:%ld: out of memory for a line over %zu bytes", r->path,
                               r->line + 1, r->cap);
            r->buf = nb;
            r->cap *= 2;
        }
        size_t want = r->cap - r->end;
        if (want > (1u << 30)) want = 1u << 30;
        int got = gzread(r->gz, r->buf + r->end, (unsigned)want);
        if (got < 0) {
            int errnum;
            const char *m = gzerror(r->gz, &errnum);
            if (errnum == Z_ERRNO) return ht_fail(e, "%s: %s", r->path, strerror(errno));
            return ht_fail(e, "%s: corrupt gzip data: %s", r->path, zlib_msg(m));
        }
        if (got == 0) {
            int errnum = Z_OK;
            gzerror(r->gz, &errnum);
            if (errnum != Z_OK) return ht_fail(e, "%s: gzip stream truncated", r->path);
            r->eof = 1;
        }
        r->end += (size_t)got;
    }
}

// Parses a whole field as a decimal number (surrounding blanks allowed); 0 when it is not one.
static int parse_number(const char *p, const char *end, double *v) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
    char tmp[64];
    size_t n = (size_t)(end - p);
    if (n == 0 || n >= sizeof tmp) return 0;
    // Grammar check first: strtod would also take "nan", "inf" and hex.
    const char *t = p;
    int digits = 0;
    if (*t == '+' || *t == '-') t++;
    while (t < end && *t >= '0' && *t <= '9') t++, digits++;
    if (t < end && *t == '.') {
        t++;
        while (t < end && *t >= '0' && *t <= '9') t++, digits++;
    }
    if (!digits) return 0;
    if (t < end && (*t == 'e' || *t == 'E')) {
        t++;
        if (t < end && (*t == '+' || *t == '-')) t++;
        if (t == end || *t < '0' || *t > '9') return 0;
        while (t < end && *t >= '0' && *t <= '9') t++;
    }
    if (t != end) return 0;
    memcpy(tmp, p, n);
    tmp[n] = 0;
    *v = strtod(tmp, NULL);
    return isfinite(*v);
}

typedef struct csv_shape {
    int labelled;
    int ncols; // columns per line, label included
    int side;  // image is side x side
    int classes; // labels must be below it
} csv_shape;

static int parse_header(const char *path, char *s, size_t len, csv_shape *sh, ht_error *e) {
    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, len -= 3; // UTF-8 BOM
    if (len == 0) return ht_fail(e, "%s:1: empty header line", path);
    long ncols = 1;
    for (size_t i = 0; i < len; i++) ncols += s[i] == ',';
    const char *f = s, *fe = memchr(s, ',', len);
    if (!fe) fe = s + len;
    while (f < fe && (*f == ' ' || *f == '\t' || *f == '"')) f++;
    while (fe > f && (fe[-1] == ' ' || fe[-1] == '\t' || fe[-1] == '"')) fe--;
    sh->labelled = fe - f == 5 && strncasecmp(f, "label", 5) == 0;
    long npix = ncols - sh->labelled;
    long side = lround(sqrt((double)npix));
    if (npix < 1 || side * side != npix || side > DATA_MAX_DIM) {
        double v;
        return ht_fail(e, "%s:1: %ld pixel columns is not a square image (784 would be 28x28)%s",
                       path, npix,
                       parse_number(f, fe, &v) ? "; is the header line missing?" : "");
    }
    sh->ncols = (int)ncols;
    sh->side = (int)side;
    return 0;
}

// One data line into x (npix floats) and *y. Column numbers in messages count from 1.
static int parse_row(const csv_reader *r, const csv_shape *sh, const char *s, size_t len,
                     float *x, uint8_t *y, ht_error *e) {
    const char *p = s, *end = s + len;
    for (int c = 0; c < sh->ncols; c++) {
        if (c > 0) {
            if (p == end)
                return ht_fail(e, "%s:%ld: %d columns, expected %d as in the header", r->path,
                               r->line, c, sh->ncols);
            p++; // the ',' the previous field stopped at
        }
        double v;
        const char *t = p;
        unsigned iv = 0;
        while (t < end && (unsigned)(*t - '0') < 10u && iv < 1000u)
            iv = iv * 10u + (unsigned)(*t++ - '0');
        if (t > p && (t == end || *t == ',')) {
            v = iv;
        } else {
            t = memchr(p, ',', (size_t)(end - p));
            if (!t) t = end;
            if (!parse_number(p, t, &v)) v = NAN;
        }
        int is_label = sh->labelled && c == 0;
        if (is_label ? !(v >= 0 && v < sh->classes && v == floor(v)) : !(v >= 0 && v <= 255)) {
            // Quoted with its odd bytes escaped: a NUL shows as \0, not as an empty field.
            size_t flen = (size_t)(t - p);
            char shown[4 * 40 + 1];
            ht_escape(shown, sizeof shown, p, flen > 40 ? 40 : flen);
            char want[32];
            if (is_label) snprintf(want, sizeof want, "a label 0..%d", sh->classes - 1);
            else snprintf(want, sizeof want, "a number 0..255");
            return ht_fail(e, "%s:%ld: column %d: expected %s, found \"%s\"%s", r->path,
                           r->line, c + 1, want, shown, flen > 40 ? "..." : "");
        }
        if (is_label) *y = (uint8_t)v;
        else *x++ = (float)v / 255.0f;
        p = t;
    }
    if (p != end) {
        long n = sh->ncols;
        for (; p < end; p++) n += *p == ',';
        return ht_fail(e, "%s:%ld: %ld columns, expected %d as in the header", r->path, r->line,
                       n, sh->ncols);
    }
    return 0;
}

int dataset_load_csv(dataset *d, const char *path, int classes, ht_error *e) {
    memset(d, 0, sizeof *d);
    csv_reader r = {.path = path, .cap = 1 << 20};
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) return ht_fail(e, "%s: %s", path, errno ? strerror(errno) : "cannot open");
    r.gz = gz;
    gzbuffer(gz, 1 << 18);
    r.buf = ht_malloc(r.cap, 1, e);
    if (!r.buf) goto fail;

    char *s;
    size_t len;
    int st = csv_line(&r, &s, &len, e);
    if (st < 0) goto fail;
    if (st == 0) {
        ht_fail(e, "%s: empty file", path);
        goto fail;
    }
    csv_shape sh = {0};
    if (parse_header(path, s, len, &sh, e)) goto fail;
    sh.classes = classes > 0 && classes < DATA_MAX_CLASSES ? classes : DATA_MAX_CLASSES;
    size_t npix = (size_t)sh.side * (size_t)sh.side, rows = 0, cap_rows = 0;
    long blank = 0; // first empty line seen; allowed only at the end of the file
    while ((st = csv_line(&r, &s, &len, e)) > 0) {
        if (len == 0) {
            if (!blank) blank = r.line;
            continue;
        }
        if (blank) {
            ht_fail(e, "%s:%ld: empty line before more data", path, blank);
            goto fail;
        }
        if (rows == cap_rows) {
            if (rows >= DATA_MAX_SAMPLES) {
                ht_fail(e, "%s:%ld: more than %d samples", path, r.line, DATA_MAX_SAMPLES);
                goto fail;
            }
            size_t nc = cap_rows ? cap_rows * 2 : 1024;
            if (nc > DATA_MAX_SAMPLES) nc = DATA_MAX_SAMPLES;
            if (nc > SIZE_MAX / sizeof(float) / npix) {
                ht_fail(e, "%s:%ld: data set too large for memory", path, r.line);
                goto fail;
            }
            float *nx = realloc(d->x, nc * npix * sizeof(float));
            if (nx) d->x = nx;
            uint8_t *ny = sh.labelled ? realloc(d->y, nc) : NULL;
            if (ny) d->y = ny;
            if (!nx || (sh.labelled && !ny)) {
                ht_fail(e, "%s:%ld: out of memory for %zu samples", path, r.line, nc);
                goto fail;
            }
            cap_rows = nc;
        }
        if (parse_row(&r, &sh, s, len, d->x + rows * npix, sh.labelled ? d->y + rows : NULL, e))
            goto fail;
        rows++;
    }
    if (st < 0) goto fail;
    if (rows == 0) {
        ht_fail(e, "%s: header but no data rows", path);
        goto fail;
    }
    float *nx = realloc(d->x, rows * npix * sizeof(float)); // give back the doubling slack
    if (nx) d->x = nx;
    d->n = (int)rows;
    d->c = 1;
    d->h = d->w = sh.side;
    free(r.buf);
    gzclose(gz);
    return 0;
fail:
    free(r.buf);
    gzclose(gz);
    dataset_free(d);
    return -1;
}
