// Duplicate keys in JSON text: a walk over already-parsed text that collects each object's
// decoded keys, sorts them and reports the first key that an object holds twice.
#include "io/jsonkeys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"

// json-c stops at 32 levels; this bound only keeps the walk's stack small on any input.
#define JSONKEYS_MAX_DEPTH 64

typedef struct key_ref {
    char *s; // decoded, malloc'd
    size_t n;
    size_t off; // its opening quote in the text
} key_ref;

typedef struct walker {
    const char *text, *end;
    jsonkeys_finding *f;
    int oom;
} walker;

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

// Just past the closing quote of the string whose opening quote is at p; NULL if unterminated.
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

static int hex4(const char *p, const char *end, unsigned *v) {
    if (end - p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (unsigned)d;
    }
    return 0;
}

static size_t put_utf8(char *o, uint32_t c) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12);
        o[1] = (char)(0x80 | (c >> 6 & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18);
    o[1] = (char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (char)(0x80 | (c >> 6 & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

// Decodes the string from its opening quote p to just past its closing quote q into k->s and
// k->n (the decoded form is never longer than the text). Unpaired surrogates become U+FFFD, as json-c
// makes them. *nul: it holds an escaped NUL.
static int decode_key(const char *p, const char *q, key_ref *k, int *nul) {
    const char *stop = q - 1;
    char *o = k->s = malloc((size_t)(q - p));
    if (!o) return -1;
    *nul = 0;
    for (const char *s = p + 1; s < stop; s++) {
        if (*s != '\\') {
            *o++ = *s;
            continue;
        }
        if (++s >= stop) break;
        switch (*s) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned c, lo;
            if (hex4(s + 1, stop, &c)) break;
            s += 4;
            if (c >= 0xD800 && c < 0xDC00 && stop - s > 6 && s[1] == '\\' && s[2] == 'u' &&
                !hex4(s + 3, stop, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            } else if (c >= 0xD800 && c < 0xE000) {
                c = 0xFFFD;
            }
            *nul |= c == 0;
            o += put_utf8(o, c);
            break;
        }
        default: *o++ = *s; break; // '"', '\\', '/'
        }
    }
    k->n = (size_t)(o - k->s);
    return 0;
}

// Keeps the finding that comes first in the text.
static void note(walker *w, jsonkeys_kind kind, const key_ref *k, const key_ref *parent) {
    jsonkeys_finding *f = w->f;
    if (f->kind != JSONKEYS_NONE && f->offset <= k->off) return;
    f->kind = kind;
    f->offset = k->off;
    ht_escape(f->key, sizeof f->key, k->s, k->n);
    f->nested = parent != NULL;
    if (parent) ht_escape(f->parent, sizeof f->parent, parent->s, parent->n);
    else f->parent[0] = 0;
}

static int cmp_key(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static const char *walk_value(walker *w, const char *p, const key_ref *parent, int depth);

static const char *walk_object(walker *w, const char *p, const key_ref *parent, int depth) {
    key_ref *keys = NULL;
    size_t nk = 0, cap = 0;
    const char *ret = NULL;
    p = skip_ws(p + 1, w->end);
    if (p < w->end && *p == '}') return p + 1;
    while (p < w->end && *p == '"') {
        const char *q = skip_string(p, w->end);
        if (!q) break;
        if (nk == cap) {
            size_t nc = cap ? cap * 2 : 16;
            key_ref *nkeys = realloc(keys, nc * sizeof *keys);
            if (!nkeys) {
                w->oom = 1;
                break;
            }
            keys = nkeys;
            cap = nc;
        }
        key_ref *k = &keys[nk];
        int nul;
        if (decode_key(p, q, k, &nul) < 0) {
            w->oom = 1;
            break;
        }
        k->off = (size_t)(p - w->text);
        nk++;
        if (nul) note(w, JSONKEYS_NUL, k, parent);
        p = skip_ws(q, w->end);
        if (p >= w->end || *p != ':') break;
        p = walk_value(w, skip_ws(p + 1, w->end), k, depth + 1);
        if (!p) break;
        p = skip_ws(p, w->end);
        if (p < w->end && *p == ',') {
            p = skip_ws(p + 1, w->end);
        } else {
            if (p < w->end && *p == '}') ret = p + 1;
            break;
        }
    }
    if (ret && nk > 1) {
        // Sorted by (key, offset), equal keys sit together, the first occurrence leading.
        qsort(keys, nk, sizeof *keys, cmp_key);
        for (size_t i = 1; i < nk; i++)
            if (keys[i].n == keys[i - 1].n && !memcmp(keys[i].s, keys[i - 1].s, keys[i].n))
                note(w, JSONKEYS_DUPLICATE, &keys[i], parent);
    }
    for (size_t i = 0; i < nk; i++) free(keys[i].s);
    free(keys);
    return ret;
}

static const char *walk_value(walker *w, const char *p, const key_ref *parent, int depth) {
    if (p >= w->end || depth > JSONKEYS_MAX_DEPTH) return NULL;
    if (*p == '{') return walk_object(w, p, parent, depth);
    if (*p == '"') return skip_string(p, w->end);
    if (*p == '[') {
        p = skip_ws(p + 1, w->end);
        if (p < w->end && *p == ']') return p + 1;
        for (;;) {
            p = walk_value(w, p, parent, depth + 1);
            if (!p) return NULL;
            p = skip_ws(p, w->end);
            if (p < w->end && *p == ',') p = skip_ws(p + 1, w->end);
            else return p < w->end && *p == ']' ? p + 1 : NULL;
        }
    }
    // A number, true, false or null: up to the next delimiter.
    const char *start = p;
    while (p < w->end && !memchr(",]} \t\r\n", *p, 7)) p++;
    return p > start ? p : NULL;
}

int jsonkeys_scan(const char *text, size_t len, jsonkeys_finding *f) {
    memset(f, 0, sizeof *f);
    walker w = {.text = text, .end = text + len, .f = f};
    walk_value(&w, skip_ws(text, text + len), NULL, 0);
    return w.oom ? -1 : 0;
}
