// IDX loader (the MNIST format), raw or gzip-compressed. zlib's gzread reads both, so there is
// one read path; raw files are additionally checked against their size before anything is
// allocated, and gzip payloads are read into a buffer that grows only as data really arrives.
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u

typedef struct idx_file {
    const char *path;
    gzFile gz;
    long long size; // on-disk size
} idx_file;

// zlib's message without the "<path>: " it prefixes (its own messages hold no ": ").
static const char *zlib_msg(const char *m) {
    const char *s = m;
    for (const char *p = m; (p = strstr(p, ": ")); p += 2) s = p + 2;
    return s;
}

static int idx_open(idx_file *f, const char *path, ht_error *e) {
    f->path = path;
    f->gz = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ht_fail(e, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return ht_fail(e, "%s: %s", path, strerror(err));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return ht_fail(e, "%s: is a directory, expected an IDX file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return ht_fail(e, "%s: empty file", path);
    }
    f->size = (long long)st.st_size;
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return ht_fail(e, "%s: cannot open (out of memory in zlib)", path);
    }
    gzbuffer(f->gz, 1 << 18);
    return 0;
}

static void idx_close(idx_file *f) {
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

// Reads up to n bytes; returns how many arrived (short at end of data) or -1 on a zlib error
// other than a truncated stream, with the zlib message in e.
static long long idx_read(idx_file *f, void *buf, size_t n, ht_error *e) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(f->gz, (char *)buf + got, (unsigned)want);
        if (r < 0) {
            int errnum;
            const char *m = gzerror(f->gz, &errnum);
            if (errnum == Z_ERRNO) return ht_fail(e, "%s: %s", f->path, strerror(errno));
            return ht_fail(e, "%s: corrupt gzip data: %s", f->path, zlib_msg(m));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (long long)got;
}

// " (gzip stream truncated)" when zlib saw the compressed stream end early.
static const char *idx_trunc_note(idx_file *f) {
    int errnum = Z_OK;
    gzerror(f->gz, &errnum);
    return errnum == Z_BUF_ERROR ? " (gzip stream truncated)" : "";
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

// Reads the magic and the dims that follow it; ndims is the low byte of the expected magic.
static int idx_header(idx_file *f, uint32_t magic, const char *what, uint32_t *dims,
                      ht_error *e) {
    unsigned char hdr[16];
    int ndims = (int)(magic & 0xff);
    size_t len = 4 + 4 * (size_t)ndims;
    long long got = idx_read(f, hdr, len, e);
    if (got < 0) return -1;
    if (got >= 4 && be32(hdr) != magic)
        return ht_fail(e, "%s: bad magic 0x%08x, expected 0x%08x (IDX %s)", f->path, be32(hdr),
                       magic, what);
    if ((size_t)got < len)
        return ht_fail(e, "%s: file ends inside the %zu-byte IDX header, after %lld bytes%s",
                       f->path, len, got, idx_trunc_note(f));
    for (int i = 0; i < ndims; i++) dims[i] = be32(hdr + 4 + 4 * i);
    return 0;
}

// Reads exactly count * rec payload bytes into a new buffer; `noun` and `shape` name the
// records for messages ("images", " of 28x28"). Checks a raw file's size first and grows the
// buffer for a gzip file only as data arrives, so a lying header allocates nothing big.
static uint8_t *idx_payload(idx_file *f, size_t hdr_len, uint32_t count, size_t rec,
                            const char *noun, const char *shape, ht_error *e) {
    size_t n = (size_t)count * rec;
    int direct = gzdirect(f->gz);
    if (direct) {
        long long have = f->size - (long long)hdr_len;
        if (have < (long long)n) {
            ht_fail(e, "%s: header says %u %s%s but the file ends after %lld %s", f->path,
                    count, noun, shape, have / (long long)rec, noun);
            return NULL;
        }
        if (have > (long long)n) {
            ht_fail(e, "%s: %lld trailing bytes after %u %s%s", f->path, have - (long long)n,
                    count, noun, shape);
            return NULL;
        }
    }
    size_t cap = direct ? n : (n < (1u << 20) ? n : (1u << 20));
    uint8_t *buf = ht_malloc(cap, 1, e);
    if (!buf) return NULL;
    size_t got = 0;
    for (;;) {
        long long r = idx_read(f, buf + got, cap - got, e);
        if (r < 0) goto fail;
        got += (size_t)r;
        if (got < cap || cap == n) break;
        size_t ncap = cap > n / 2 ? n : cap * 2;
        uint8_t *nb = realloc(buf, ncap);
        if (!nb) {
            ht_fail(e, "%s: out of memory reading %zu bytes", f->path, ncap);
            goto fail;
        }
        buf = nb;
        cap = ncap;
    }
    if (got < n) {
        ht_fail(e, "%s: header says %u %s%s but the file ends after %zu %s%s", f->path, count,
                noun, shape, got / rec, noun, idx_trunc_note(f));
        goto fail;
    }
    unsigned char extra[4096];
    long long trailing = 0, r;
    while ((r = idx_read(f, extra, sizeof extra, e)) > 0) trailing += r;
    if (r < 0) goto fail;
    if (trailing > 0) {
        ht_fail(e, "%s: %lld trailing bytes after %u %s%s", f->path, trailing, count, noun,
                shape);
        goto fail;
    }
    int errnum = Z_OK;
    gzerror(f->gz, &errnum);
    if (errnum != Z_OK) { // all data arrived but the gzip trailer (CRC, length) did not
        ht_fail(e, "%s: gzip stream truncated after its %u %s%s", f->path, count, noun, shape);
        goto fail;
    }
    return buf;
fail:
    free(buf);
    return NULL;
}

static int load_images(dataset *d, const char *path, ht_error *e) {
    idx_file f;
    if (idx_open(&f, path, e)) return -1;
    uint32_t dims[3];
    uint8_t *bytes = NULL;
    if (idx_header(&f, IDX_MAGIC_IMAGES, "images", dims, e)) goto fail;
    if (dims[0] < 1 || dims[0] > DATA_MAX_SAMPLES || dims[1] < 1 || dims[1] > DATA_MAX_DIM ||
        dims[2] < 1 || dims[2] > DATA_MAX_DIM) {
        ht_fail(e,
                "%s: header dims %u images of %ux%u out of range (images 1..%d, rows and "
                "columns 1..%d)",
                path, dims[0], dims[1], dims[2], DATA_MAX_SAMPLES, DATA_MAX_DIM);
        goto fail;
    }
    char shape[32];
    snprintf(shape, sizeof shape, " of %ux%u", dims[1], dims[2]);
    size_t hw = (size_t)dims[1] * dims[2];
    bytes = idx_payload(&f, 16, dims[0], hw, "images", shape, e);
    if (!bytes) goto fail;
    idx_close(&f);
    size_t total = (size_t)dims[0] * hw;
    d->x = ht_malloc(total, sizeof(float), e);
    if (!d->x) goto fail;
    for (size_t i = 0; i < total; i++) d->x[i] = (float)bytes[i] / 255.0f;
    free(bytes);
    d->n = (int)dims[0];
    d->c = 1;
    d->h = (int)dims[1];
    d->w = (int)dims[2];
    return 0;
fail:
    idx_close(&f);
    free(bytes);
    return -1;
}

static int load_labels(uint8_t **y, uint32_t *count, const char *path, int classes,
                       ht_error *e) {
    idx_file f;
    if (idx_open(&f, path, e)) return -1;
    uint32_t n = 0;
    uint8_t *bytes = NULL;
    if (idx_header(&f, IDX_MAGIC_LABELS, "labels", &n, e)) goto fail;
    if (n < 1 || n > DATA_MAX_SAMPLES) {
        ht_fail(e, "%s: header says %u labels, expected 1..%d", path, n, DATA_MAX_SAMPLES);
        goto fail;
    }
    bytes = idx_payload(&f, 8, n, 1, "labels", "", e);
    if (!bytes) goto fail;
    idx_close(&f);
    for (uint32_t i = 0; i < n; i++)
        if (bytes[i] >= classes) {
            ht_fail(e, "%s: label %u at record %u is outside 0..%d", path, bytes[i], i,
                    classes - 1);
            goto fail;
        }
    *y = bytes;
    *count = n;
    return 0;
fail:
    idx_close(&f);
    free(bytes);
    return -1;
}

int dataset_load_idx(dataset *d, const char *images_path, const char *labels_path, int classes,
                     ht_error *e) {
    memset(d, 0, sizeof *d);
    if (classes <= 0 || classes > DATA_MAX_CLASSES) classes = DATA_MAX_CLASSES;
    if (load_images(d, images_path, e)) return -1;
    if (labels_path) {
        uint32_t n = 0;
        if (load_labels(&d->y, &n, labels_path, classes, e)) goto fail;
        if ((int)n != d->n) {
            ht_fail(e, "%s has %d images but %s has %u labels", images_path, d->n, labels_path,
                    n);
            goto fail;
        }
    }
    return 0;
fail:
    dataset_free(d);
    return -1;
}

// dir/name if it exists, else dir/name.gz, into out.
static int find_idx(char *out, size_t cap, const char *dir, const char *name, ht_error *e) {
    static const char *const suffixes[] = {"", ".gz"};
    for (int i = 0; i < 2; i++) {
        int len = snprintf(out, cap, "%s/%s%s", dir, name, suffixes[i]);
        if (len < 0 || (size_t)len >= cap) return ht_fail(e, "%s: path too long", dir);
        struct stat st;
        if (stat(out, &st) == 0) return 0;
    }
    return ht_fail(e, "%s: missing %s (or %s.gz) in this folder%s", dir, name, name,
                   strncmp(name, "train-images", 12) ? ""
                   : " (nor is it a CIFAR folder: no data_batch_1.bin, test_batch.bin, train.bin "
                     "or test.bin)");
}

int dataset_load_dir(dataset *train, dataset *test, const char *dir, const data_opts *o,
                     ht_error *e) {
    if (train) memset(train, 0, sizeof *train);
    if (test) memset(test, 0, sizeof *test);
    if (!train && !test) return 0;
    struct stat st;
    if (stat(dir, &st) != 0) return ht_fail(e, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ht_fail(e, "%s: not a folder", dir);
    int cifar = dataset_load_cifar_dir(train, test, dir, o, e);
    if (cifar != 0) return cifar < 0 ? -1 : 0;
    int classes = o ? o->classes : 0;

    char xi[4096], yi[4096];
    if (train && (find_idx(xi, sizeof xi, dir, "train-images-idx3-ubyte", e) ||
                  find_idx(yi, sizeof yi, dir, "train-labels-idx1-ubyte", e)))
        return -1;
    if (test) { // check for the test files before the slow train load
        char tx[4096], ty[4096];
        if (find_idx(tx, sizeof tx, dir, "t10k-images-idx3-ubyte", e) ||
            find_idx(ty, sizeof ty, dir, "t10k-labels-idx1-ubyte", e))
            return -1;
        if (dataset_load_idx(test, tx, ty, classes, e)) return -1;
    }
    if (!train) return 0;
    if (dataset_load_idx(train, xi, yi, classes, e)) goto fail;
    if (test && (test->h != train->h || test->w != train->w)) {
        ht_fail(e, "%s: test images are %dx%d but train images are %dx%d", dir, test->h,
                test->w, train->h, train->w);
        goto fail;
    }
    return 0;
fail:
    if (train) dataset_free(train);
    if (test) dataset_free(test);
    return -1;
}
