// CIFAR-10 and CIFAR-100 loaders (the data sets' "binary version"): fixed-size records of the
// label byte(s) and 3072 pixel bytes, the R, G and B planes of 32x32 row-major, which is already
// the CHW order a dataset keeps. Files are checked against their size before anything is
// allocated, so a file that is not a whole number of records costs nothing.
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_CHUNK 1024 // records read at a time

typedef enum cifar_kind { CIFAR_UNKNOWN = 0, CIFAR_10 = 10, CIFAR_100 = 100 } cifar_kind;

// Bytes per record: CIFAR-10 has one label byte, CIFAR-100 a coarse and a fine one.
static long cifar_record(cifar_kind k) { return CIFAR_PIXELS + (k == CIFAR_100 ? 2 : 1); }

static cifar_kind kind_by_name(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    if (!strncmp(b, "data_batch", 10) || !strncmp(b, "test_batch", 10)) return CIFAR_10;
    if (!strcmp(b, "train.bin") || !strcmp(b, "test.bin")) return CIFAR_100;
    return CIFAR_UNKNOWN;
}

// The kind and record count of one file, from its name and size.
static int cifar_probe(const char *path, cifar_kind *kind, long *records, ht_error *e) {
    struct stat st;
    if (stat(path, &st) != 0) return ht_fail(e, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return ht_fail(e, "%s: is a directory, expected a CIFAR .bin file", path);
    long long size = (long long)st.st_size;
    if (size == 0) return ht_fail(e, "%s: empty file", path);
    cifar_kind k = kind_by_name(path);
    long r10 = cifar_record(CIFAR_10), r100 = cifar_record(CIFAR_100);
    if (k == CIFAR_UNKNOWN) {
        int is10 = size % r10 == 0, is100 = size % r100 == 0;
        if (is10 && is100)
            return ht_fail(e, "%s: %lld bytes are whole numbers of both CIFAR-10 (%ld-byte) and "
                              "CIFAR-100 (%ld-byte) records; name the file data_batch_N.bin "
                              "(CIFAR-10) or train.bin/test.bin (CIFAR-100)", path, size, r10, r100);
        if (!is10 && !is100)
            return ht_fail(e, "%s: %lld bytes are not a whole number of CIFAR-10 (%ld-byte) or "
                              "CIFAR-100 (%ld-byte) records", path, size, r10, r100);
        k = is10 ? CIFAR_10 : CIFAR_100;
    }
    long rec = cifar_record(k);
    if (size % rec != 0)
        return ht_fail(e, "%s: %lld bytes are not a whole number of %ld-byte CIFAR-%d records "
                          "(%lld records and %lld bytes over)", path, size, rec, (int)k,
                       size / rec, size % rec);
    if (size / rec > DATA_MAX_SAMPLES)
        return ht_fail(e, "%s: %lld records, more than %d", path, size / rec, DATA_MAX_SAMPLES);
    *kind = k;
    *records = (long)(size / rec);
    return 0;
}

// Reads `records` records of path into x (records * 3072 floats) and y.
static int cifar_read(const char *path, cifar_kind k, long records, const data_opts *o,
                      float *x, uint8_t *y, ht_error *e) {
    int classes = o && o->classes > 0 && o->classes < DATA_MAX_CLASSES ? o->classes : DATA_MAX_CLASSES;
    int coarse = k == CIFAR_100 && o && o->coarse;
    long rec = cifar_record(k);
    FILE *f = fopen(path, "rb");
    if (!f) return ht_fail(e, "%s: %s", path, strerror(errno));
    uint8_t *buf = ht_malloc(CIFAR_CHUNK, (size_t)rec, e);
    int rc = -1;
    if (!buf) goto out;
    for (long r0 = 0; r0 < records; r0 += CIFAR_CHUNK) {
        long n = records - r0 < CIFAR_CHUNK ? records - r0 : CIFAR_CHUNK;
        size_t got = fread(buf, (size_t)rec, (size_t)n, f);
        if (got != (size_t)n) {
            ht_fail(e, "%s: %s after %ld of %ld records", path,
                    ferror(f) ? strerror(errno) : "file ended (changed while read?)", r0 + (long)got,
                    records);
            goto out;
        }
        for (long i = 0; i < n; i++) {
            const uint8_t *p = buf + i * rec;
            uint8_t label = k == CIFAR_100 ? p[coarse ? 0 : 1] : p[0];
            if (label >= classes) {
                ht_fail(e, "%s: %slabel %u at record %ld is outside 0..%d", path,
                        k == CIFAR_100 ? (coarse ? "coarse " : "fine ") : "", label, r0 + i,
                        classes - 1);
                goto out;
            }
            y[r0 + i] = label;
            const uint8_t *px = p + (k == CIFAR_100 ? 2 : 1);
            float *dst = x + (size_t)(r0 + i) * CIFAR_PIXELS;
            for (int j = 0; j < CIFAR_PIXELS; j++) dst[j] = (float)px[j] / 255.0f;
        }
    }
    rc = 0;
out:
    free(buf);
    fclose(f);
    return rc;
}

int dataset_load_cifar(dataset *d, const char *const *paths, int n_paths, const data_opts *o,
                       ht_error *e) {
    memset(d, 0, sizeof *d);
    if (n_paths < 1) return ht_fail(e, "no CIFAR files given");
    cifar_kind kind = CIFAR_UNKNOWN;
    long total = 0;
    long *counts = ht_malloc((size_t)n_paths, sizeof *counts, e);
    if (!counts) return -1;
    for (int i = 0; i < n_paths; i++) {
        cifar_kind k = CIFAR_UNKNOWN;
        if (cifar_probe(paths[i], &k, &counts[i], e) < 0) goto fail;
        if (i > 0 && k != kind) {
            ht_fail(e, "%s is CIFAR-%d but %s is CIFAR-%d", paths[i], (int)k, paths[0], (int)kind);
            goto fail;
        }
        kind = k;
        total += counts[i];
        if (total > DATA_MAX_SAMPLES) {
            ht_fail(e, "%s: more than %d samples in all", paths[i], DATA_MAX_SAMPLES);
            goto fail;
        }
    }
    if (kind == CIFAR_10 && o && o->coarse) {
        ht_fail(e, "%s: CIFAR-10 has no coarse labels (those are CIFAR-100's)", paths[0]);
        goto fail;
    }
    d->x = ht_malloc((size_t)total * CIFAR_PIXELS, sizeof(float), e);
    d->y = d->x ? ht_malloc((size_t)total, 1, e) : NULL;
    if (!d->y) goto fail;
    long at = 0;
    for (int i = 0; i < n_paths; i++) {
        if (cifar_read(paths[i], kind, counts[i], o, d->x + (size_t)at * CIFAR_PIXELS, d->y + at,
                       e) < 0)
            goto fail;
        at += counts[i];
    }
    free(counts);
    d->n = (int)total;
    d->c = 3;
    d->h = d->w = CIFAR_SIDE;
    return 0;
fail:
    free(counts);
    dataset_free(d);
    return -1;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// dir/name into out; 0, or -1 when it does not fit.
static int join(char *out, size_t cap, const char *dir, const char *name, ht_error *e) {
    int len = snprintf(out, cap, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= cap) return ht_fail(e, "%s: path too long", dir);
    return 0;
}

#define CIFAR10_BATCHES 5

int dataset_load_cifar_dir(dataset *train, dataset *test, const char *dir, const data_opts *o,
                           ht_error *e) {
    char batch[CIFAR10_BATCHES][4096], tpath[4096], probe[4096];
    const char *train_paths[CIFAR10_BATCHES];
    int n_train = 0;
    const char *test_name;
    if (join(probe, sizeof probe, dir, "data_batch_1.bin", e) < 0) return -1;
    int is10 = exists(probe);
    if (!is10 && join(probe, sizeof probe, dir, "test_batch.bin", e) == 0) is10 = exists(probe);
    if (is10) {
        // data_batch_1.bin .. up to the first missing one; none may follow a gap.
        int gap = 0;
        for (int b = 0; b < CIFAR10_BATCHES; b++) {
            char name[32];
            snprintf(name, sizeof name, "data_batch_%d.bin", b + 1);
            if (join(batch[b], sizeof batch[b], dir, name, e) < 0) return -1;
            if (!exists(batch[b])) {
                gap = gap ? gap : b + 1;
                continue;
            }
            if (gap)
                return ht_fail(e, "%s: data_batch_%d.bin is missing but %s is there", dir, gap, name);
            train_paths[n_train++] = batch[b];
        }
        test_name = "test_batch.bin";
        if (train && n_train == 0)
            return ht_fail(e, "%s: missing data_batch_1.bin in this CIFAR-10 folder", dir);
    } else {
        char tr[4096];
        if (join(tr, sizeof tr, dir, "train.bin", e) < 0 || join(probe, sizeof probe, dir, "test.bin", e) < 0)
            return -1;
        if (!exists(tr) && !exists(probe)) return 0; // not a CIFAR folder
        snprintf(batch[0], sizeof batch[0], "%s", tr);
        test_name = "test.bin";
        if (train && !exists(tr)) return ht_fail(e, "%s: missing train.bin in this CIFAR-100 folder", dir);
        train_paths[n_train++] = batch[0];
    }
    if (test) {
        if (join(tpath, sizeof tpath, dir, test_name, e) < 0) return -1;
        if (!exists(tpath))
            return ht_fail(e, "%s: missing %s in this CIFAR-%d folder", dir, test_name, is10 ? 10 : 100);
        const char *tp = tpath;
        if (dataset_load_cifar(test, &tp, 1, o, e) < 0) return -1;
    }
    if (train && dataset_load_cifar(train, train_paths, n_train, o, e) < 0) {
        if (test) dataset_free(test);
        return -1;
    }
    return 1;
}
