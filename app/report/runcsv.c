// Results CSVs of hetrain and other frameworks: a small RFC 4180 reader (quoted fields, "" for a
// quote, \n or \r\n, blank lines skipped, a UTF-8 BOM skipped), then the header tells metrics
// from predictions and maps each dialect's column names onto one set.
#include "app/report/runcsv.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const run_metric_names[RUN_METRIC_COUNT] = {
    [RUN_METRIC_ACCURACY] = "accuracy", [RUN_METRIC_LOSS] = "loss",
    [RUN_METRIC_VAL_ACCURACY] = "val_accuracy", [RUN_METRIC_VAL_LOSS] = "val_loss",
    [RUN_METRIC_TIME] = "time_s"};

// The whole file, split record by record in place (unquoting never makes a field longer).
typedef struct csv_doc {
    const char *path;
    char *buf;
    size_t len, pos;
    int line, next_line; // where the current record starts, where the next one does
    char **f;
    int nf, cap;
} csv_doc;

static int csv_open(csv_doc *d, const char *path, ht_error *e) {
    memset(d, 0, sizeof *d);
    d->path = path;
    d->next_line = 1;
    FILE *fp = fopen(path, "rb");
    if (!fp) return ht_fail(e, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16;
    d->buf = malloc(cap);
    for (;;) {
        if (!d->buf) break;
        d->len += fread(d->buf + d->len, 1, cap - d->len - 1, fp);
        if (d->len < cap - 1) break;
        char *nb = realloc(d->buf, cap *= 2);
        if (!nb) free(d->buf);
        d->buf = nb;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (!d->buf) return ht_fail(e, "%s: out of memory reading the file", path);
    if (bad) {
        free(d->buf);
        d->buf = NULL;
        return ht_fail(e, "%s: read error", path);
    }
    d->buf[d->len] = 0;
    if (d->len >= 3 && !memcmp(d->buf, "\xEF\xBB\xBF", 3)) d->pos = 3;
    if (d->pos + strspn(d->buf + d->pos, " \t\r\n") == d->len) {
        free(d->buf);
        d->buf = NULL;
        return ht_fail(e, "%s: empty file", path);
    }
    return 0;
}

static void csv_close(csv_doc *d) {
    free(d->buf);
    free(d->f);
    memset(d, 0, sizeof *d);
}

static int csv_push(csv_doc *d, char *field, ht_error *e) {
    if (d->nf == d->cap) {
        int cap = d->cap ? d->cap * 2 : 16;
        char **nf = realloc(d->f, (size_t)cap * sizeof *nf);
        if (!nf) return ht_fail(e, "%s:%d: out of memory", d->path, d->line);
        d->f = nf;
        d->cap = cap;
    }
    d->f[d->nf++] = field;
    return 0;
}

// Next record into d->f[0..nf): 1, or 0 at the end, or -1 on a malformed quote.
static int csv_next(csv_doc *d, ht_error *e) {
    char *end = d->buf + d->len, *p = d->buf + d->pos;
    for (;;) { // skip blank lines
        char *q = p + strspn(p, " \t");
        if (q == end) {
            d->pos = d->len;
            return 0;
        }
        if (*q != '\r' && *q != '\n') break;
        p = q + (*q == '\r' && q[1] == '\n' ? 2 : 1);
        d->next_line++;
    }
    d->line = d->next_line;
    d->nf = 0;
    for (;;) {
        char *w = p, *start = p;
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        if (p < end && *p == '"') {
            for (p++;; p++) {
                if (p == end)
                    return ht_fail(e, "%s:%d: quoted field without its closing quote", d->path, d->line);
                if (*p == '"') {
                    if (p[1] != '"') break;
                    p++;
                } else if (*p == '\n') {
                    d->next_line++;
                }
                *w++ = *p;
            }
            p++;
            while (p < end && (*p == ' ' || *p == '\t')) p++;
            if (p < end && *p != ',' && *p != '\r' && *p != '\n')
                return ht_fail(e, "%s:%d: field %d: text after the closing quote", d->path,
                               d->next_line, d->nf + 1);
        } else {
            start = p;
            while (p < end && *p != ',' && *p != '\r' && *p != '\n') p++;
            w = p;
            while (w > start && (w[-1] == ' ' || w[-1] == '\t')) w--;
        }
        char sep = p < end ? *p : 0;
        *w = 0; // w <= p: the separator was read into sep first
        if (csv_push(d, start, e) < 0) return -1;
        if (sep == ',') {
            p++;
            continue;
        }
        if (sep) {
            p++;
            if (sep == '\r' && p < end && *p == '\n') p++;
            d->next_line++;
        }
        break;
    }
    d->pos = (size_t)(p - d->buf);
    return 1;
}

// A number with nothing after it; "nan" and "inf" count (a diverged loss is data).
static int parse_number(const char *s, double *v) {
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end) return -1;
    *v = x;
    return 0;
}

static int parse_long(const char *s, long lo, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo) return -1;
    *v = x;
    return 0;
}

static void make_label(char *label, size_t cap, const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char name[1024];
    snprintf(name, sizeof name, "%s", base);
    static const char *const suffixes[] = {".csv", ".metrics", ".predictions"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(name), s = strlen(suffixes[i]);
        if (n > s && !strcasecmp(name + n - s, suffixes[i])) name[n - s] = 0;
    }
    size_t n = strlen(name), max = 20;
    if (n > max) { // keep both ends: runs differ in prefixes (model) and suffixes (device)
        memmove(name + 9, "..", 2);
        memmove(name + 11, name + n - 9, 10);
    }
    snprintf(label, cap, "%s", name);
}

void run_csv_unique_labels(run_csv *runs, int n) {
    for (int i = 1; i < n; i++) {
        int k = 1;
        for (int j = 0; j < i; j++)
            if (!strcmp(runs[i].label, runs[j].label)) k++;
        if (k > 1 && k < 100) {
            char suffix[4];
            snprintf(suffix, sizeof suffix, "#%d", k % 100);
            size_t at = strlen(runs[i].label);
            if (at > sizeof runs[i].label - 4) at = sizeof runs[i].label - 4;
            memcpy(runs[i].label + at, suffix, strlen(suffix) + 1);
        }
    }
}

void run_csv_free(run_csv *r) {
    free(r->line);
    free(r->epoch);
    for (int m = 0; m < RUN_METRIC_COUNT; m++) {
        free(r->col[m].v);
        free(r->col[m].have);
    }
    for (int d = 0; d < r->n_devices; d++) {
        free(r->devices[d].share.v);
        free(r->devices[d].share.have);
        free(r->devices[d].busy_s.v);
        free(r->devices[d].busy_s.have);
    }
    free(r->devices);
    free(r->image_id);
    free(r->pred);
    memset(r, 0, sizeof *r);
}

int run_csv_find_epoch(const run_csv *r, int epoch) {
    int lo = 0, hi = r->n_rows - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (r->epoch[mid] == epoch) return mid;
        if (r->epoch[mid] < epoch) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

int run_csv_has(const run_csv *r, run_metric m) {
    if (r->kind != RUN_CSV_METRICS || !r->col[m].v) return 0;
    for (int i = 0; i < r->n_rows; i++)
        if (r->col[m].have[i]) return 1;
    return 0;
}

// What each header column feeds. Metric slots: RUN_METRIC_*, then share/busy pairs per device.
enum { ROLE_IGNORE = -1, ROLE_EPOCH = -2, ROLE_ID = -3, ROLE_LABEL = -4 };

typedef struct sort_key {
    long key;
    int row;
} sort_key;

static int cmp_key(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->row - y->row;
}

// Header -> kind, column roles and devices.
static int read_header(run_csv *r, csv_doc *d, int *role, ht_error *e) {
    int epoch = 0, id = 0, label = 0, known = 0;
    int seen[RUN_METRIC_COUNT];
    for (int m = 0; m < RUN_METRIC_COUNT; m++) seen[m] = -1;
    for (int c = 0; c < d->nf; c++) {
        const char *h = d->f[c];
        role[c] = ROLE_IGNORE;
        if (!strcasecmp(h, "epoch")) role[c] = ROLE_EPOCH, epoch++;
        else if (!strcasecmp(h, "imageid")) role[c] = ROLE_ID, id++;
        else if (!strcasecmp(h, "label")) role[c] = ROLE_LABEL, label++;
        else if (!strcasecmp(h, "accuracy") || !strcasecmp(h, "acc")) role[c] = RUN_METRIC_ACCURACY;
        else if (!strcasecmp(h, "loss")) role[c] = RUN_METRIC_LOSS;
        else if (!strcasecmp(h, "val_accuracy") || !strcasecmp(h, "val_acc")) role[c] = RUN_METRIC_VAL_ACCURACY;
        else if (!strcasecmp(h, "val_loss")) role[c] = RUN_METRIC_VAL_LOSS;
        else if (!strcasecmp(h, "time_s")) role[c] = RUN_METRIC_TIME;
        else if ((!strncmp(h, "share_", 6) && h[6]) || (!strncmp(h, "busy_s_", 7) && h[7])) {
            int busy = h[0] == 'b';
            const char *spec = h + (busy ? 7 : 6);
            int dv = 0;
            while (dv < r->n_devices && strcmp(r->devices[dv].spec, spec)) dv++;
            if (dv == r->n_devices) {
                if (strlen(spec) >= sizeof r->devices[0].spec)
                    return ht_fail(e, "%s:%d: column %d: device name too long: \"%s\"", d->path,
                                   d->line, c + 1, h);
                run_device *nd = realloc(r->devices, (size_t)(dv + 1) * sizeof *nd);
                if (!nd) return ht_fail(e, "%s: out of memory", d->path);
                r->devices = nd;
                memset(&nd[dv], 0, sizeof nd[dv]);
                snprintf(nd[dv].spec, sizeof nd[dv].spec, "%s", spec);
                r->n_devices++;
            }
            role[c] = RUN_METRIC_COUNT + 2 * dv + busy;
        }
        if (role[c] >= 0 && role[c] < RUN_METRIC_COUNT) {
            if (seen[role[c]] >= 0)
                return ht_fail(e, "%s:%d: columns \"%s\" and \"%s\" both give %s", d->path,
                               d->line, d->f[seen[role[c]]], h, run_metric_names[role[c]]);
            seen[role[c]] = c;
            if (role[c] != RUN_METRIC_TIME) known++;
        }
    }
    if (id == 1 && label == 1 && !epoch) {
        r->kind = RUN_CSV_PREDICTIONS;
        for (int c = 0; c < d->nf; c++)
            if (role[c] != ROLE_ID && role[c] != ROLE_LABEL) role[c] = ROLE_IGNORE;
        free(r->devices);
        r->devices = NULL;
        r->n_devices = 0;
        return 0;
    }
    if (!epoch)
        return ht_fail(e, "%s:%d: no epoch column (a metrics CSV needs epoch and accuracy/acc or "
                          "loss; a predictions CSV needs ImageId,Label)", d->path, d->line);
    if (epoch > 1) return ht_fail(e, "%s:%d: more than one epoch column", d->path, d->line);
    if (!known)
        return ht_fail(e, "%s:%d: no known metric columns (expected accuracy or acc, loss, "
                          "val_accuracy or val_acc, val_loss)", d->path, d->line);
    r->kind = RUN_CSV_METRICS;
    return 0;
}

static int grow(void **p, size_t n, size_t size, const char *path, ht_error *e) {
    void *np = realloc(*p, n * size);
    if (!np) return ht_fail(e, "%s: out of memory", path);
    *p = np;
    return 0;
}

static int alloc_series(run_series *s, int n, ht_error *e) {
    s->v = ht_malloc((size_t)n, sizeof *s->v, e);
    s->have = ht_calloc((size_t)n, 1, e);
    return s->v && s->have ? 0 : -1;
}

// Rows of the body: parsed into key[] (epoch or ImageId), vals[] (slots per row) or pred[].
// names[] are the header's fields, which stay valid: parsing later records writes past them.
static int read_rows(run_csv *r, csv_doc *d, const int *role, char *const *names, int ncols,
                     ht_error *e) {
    int slots = RUN_METRIC_COUNT + 2 * r->n_devices, cap = 0, n = 0;
    long *key = NULL;
    double *vals = NULL;
    uint8_t *have = NULL;
    int *pred = NULL, *line = NULL, rc, fail = 0;
    while (!fail && (rc = csv_next(d, e)) > 0) {
        if (d->nf != ncols) {
            fail = ht_fail(e, "%s:%d: %d fields, but the header has %d", d->path, d->line,
                           d->nf, ncols);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            if (grow((void **)&key, (size_t)cap, sizeof *key, d->path, e) < 0 ||
                grow((void **)&line, (size_t)cap, sizeof *line, d->path, e) < 0 ||
                grow((void **)&pred, (size_t)cap, sizeof *pred, d->path, e) < 0 ||
                grow((void **)&vals, (size_t)cap * (size_t)slots, sizeof *vals, d->path, e) < 0 ||
                grow((void **)&have, (size_t)cap * (size_t)slots, 1, d->path, e) < 0) {
                fail = -1;
                break;
            }
        }
        line[n] = d->line;
        memset(have + (size_t)n * (size_t)slots, 0, (size_t)slots);
        for (int c = 0; c < ncols && !fail; c++) {
            const char *s = d->f[c];
            long v = 0;
            if (role[c] == ROLE_EPOCH) {
                if (parse_long(s, 0, &v) < 0 || v > INT_MAX)
                    fail = ht_fail(e, "%s:%d: column epoch: expected an integer >= 0, found \"%s\"",
                                   d->path, d->line, s);
                key[n] = v;
            } else if (role[c] == ROLE_ID) {
                if (parse_long(s, LONG_MIN, &v) < 0)
                    fail = ht_fail(e, "%s:%d: column ImageId: expected an integer, found \"%s\"",
                                   d->path, d->line, s);
                key[n] = v;
            } else if (role[c] == ROLE_LABEL) {
                if (parse_long(s, 0, &v) < 0 || v > INT_MAX)
                    fail = ht_fail(e, "%s:%d: column Label: expected an integer >= 0, found \"%s\"",
                                   d->path, d->line, s);
                else pred[n] = (int)v;
            } else if (role[c] >= 0 && *s) {
                size_t at = (size_t)n * (size_t)slots + (size_t)role[c];
                if (parse_number(s, &vals[at]) < 0)
                    fail = ht_fail(e, "%s:%d: column %s: expected a number, found \"%s\"", d->path,
                                   d->line, names[c], s);
                have[at] = 1;
            }
        }
        n++;
    }
    if (!fail && rc < 0) fail = -1;
    if (!fail && n == 0) fail = ht_fail(e, "%s: a header but no data rows", d->path);
    sort_key *order = NULL;
    if (!fail && !(order = ht_malloc((size_t)n, sizeof *order, e))) fail = -1;
    if (!fail) {
        for (int i = 0; i < n; i++) order[i] = (sort_key){key[i], i};
        qsort(order, (size_t)n, sizeof *order, cmp_key);
        for (int i = 1; i < n && !fail; i++)
            if (order[i].key == order[i - 1].key)
                fail = ht_fail(e, "%s:%d: duplicate %s %ld (also on line %d)", d->path,
                               line[order[i].row], r->kind == RUN_CSV_METRICS ? "epoch" : "ImageId",
                               order[i].key, line[order[i - 1].row]);
    }
    if (!fail) {
        r->n_rows = n;
        r->line = ht_malloc((size_t)n, sizeof *r->line, e);
        if (!r->line) fail = -1;
        if (r->kind == RUN_CSV_PREDICTIONS && !fail) {
            r->image_id = ht_malloc((size_t)n, sizeof *r->image_id, e);
            r->pred = ht_malloc((size_t)n, sizeof *r->pred, e);
            if (!r->image_id || !r->pred) fail = -1;
        } else if (!fail) {
            r->epoch = ht_malloc((size_t)n, sizeof *r->epoch, e);
            if (!r->epoch) fail = -1;
            for (int c = 0; c < ncols && !fail; c++) {
                if (role[c] < 0) continue;
                run_series *s = role[c] < RUN_METRIC_COUNT ? &r->col[role[c]]
                              : (role[c] - RUN_METRIC_COUNT) % 2
                                  ? &r->devices[(role[c] - RUN_METRIC_COUNT) / 2].busy_s
                                  : &r->devices[(role[c] - RUN_METRIC_COUNT) / 2].share;
                if (!s->v && alloc_series(s, n, e) < 0) fail = -1;
            }
        }
    }
    for (int i = 0; i < n && !fail; i++) {
        int row = order[i].row;
        r->line[i] = line[row];
        if (r->kind == RUN_CSV_PREDICTIONS) {
            r->image_id[i] = key[row];
            r->pred[i] = pred[row];
            if (pred[row] > r->max_label) r->max_label = pred[row];
            continue;
        }
        r->epoch[i] = (int)key[row];
        for (int s = 0; s < slots; s++) {
            int dv = (s - RUN_METRIC_COUNT) / 2;
            run_series *ser = s < RUN_METRIC_COUNT ? &r->col[s]
                            : (s - RUN_METRIC_COUNT) % 2 ? &r->devices[dv].busy_s
                                                         : &r->devices[dv].share;
            if (!ser->v) continue;
            size_t at = (size_t)row * (size_t)slots + (size_t)s;
            ser->have[i] = have[at];
            ser->v[i] = have[at] ? vals[at] : NAN;
        }
    }
    free(order);
    free(key);
    free(vals);
    free(have);
    free(pred);
    free(line);
    return fail ? -1 : 0;
}

int run_csv_load(run_csv *r, const char *path, ht_error *e) {
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    make_label(r->label, sizeof r->label, path);
    csv_doc d;
    if (csv_open(&d, path, e) < 0) return -1;
    int rc = csv_next(&d, e), *role = NULL, ncols = d.nf;
    char **names = NULL;
    if (rc > 0) {
        role = ht_malloc((size_t)ncols, sizeof *role, e);
        names = ht_malloc((size_t)ncols, sizeof *names, e);
        if (!role || !names) rc = -1;
        else memcpy(names, d.f, (size_t)ncols * sizeof *names);
    }
    if (rc > 0 && read_header(r, &d, role, e) < 0) rc = -1;
    if (rc > 0) rc = read_rows(r, &d, role, names, ncols, e) < 0 ? -1 : 1;
    free(role);
    free(names);
    csv_close(&d);
    if (rc <= 0) {
        run_csv_free(r);
        return -1;
    }
    return 0;
}
