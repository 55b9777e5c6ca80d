// Data sets in memory: freeing, trimming, the seeded train/val split, gathering batches (with
// the training-time augmentation). The file formats live in data_idx.c, data_csv.c,
// data_cifar.c and data_npy.c; data_file.c picks one by a file's name.
#include "data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/rng.h"

void dataset_free(dataset *d) {
    if (!d) return;
    if (d->x8_mapped) munmap(d->x8_base, d->x8_len);
    else free(d->x8_base);
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

static size_t dataset_sample_size(const dataset *d) {
    return (size_t)d->c * (size_t)d->h * (size_t)d->w;
}

void dataset_limit(dataset *d, int n) {
    if (n <= 0 || n >= d->n) return;
    d->n = n;
    float *x = d->x ? realloc(d->x, (size_t)n * dataset_sample_size(d) * sizeof(float)) : NULL;
    if (x) d->x = x;
    if (d->y) {
        uint8_t *y = realloc(d->y, (size_t)n * dataset_ylen(d));
        if (y) d->y = y;
    }
}

void dataset_gather(const dataset *src, const uint32_t *idx, int n, float *x, uint8_t *y) {
    dataset_gather_augment(src, idx, n, x, y, NULL, 0, 0);
}

const char *const data_layout_names[] = {"auto", "nhwc", "nchw", NULL};

// ---- augmentation ------------------------------------------------------------------------

int data_augment_parse(data_augment *a, const char *spec, ht_error *e) {
    memset(a, 0, sizeof *a);
    if (!strcmp(spec, "none")) return 0;
    const char *p = spec;
    int have_crop = 0;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 4 && !strncmp(p, "flip", 4) && !a->flip) {
            a->flip = 1;
        } else if (n > 5 && !strncmp(p, "crop:", 5) && !have_crop) {
            char *end;
            long v = strtol(p + 5, &end, 10);
            if (end != p + n || (unsigned)(p[5] - '0') > 9u || v < 1 || v > DATA_AUGMENT_MAX_CROP)
                return ht_fail(e, "--augment: crop:P needs a padding P of 1..%d, found \"%.*s\"",
                               DATA_AUGMENT_MAX_CROP, (int)n, p);
            a->crop = (int)v;
            have_crop = 1;
        } else {
            return ht_fail(e, "--augment: expected crop:P, flip, both (crop:4,flip) or none, "
                              "found \"%.*s\" in \"%s\"", (int)n, p, spec);
        }
        p += n;
        if (*p == ',' && !*++p) return ht_fail(e, "--augment: \"%s\" ends with a comma", spec);
    }
    if (!a->flip && !have_crop) return ht_fail(e, "--augment: empty");
    return 0;
}

void data_augment_text(const data_augment *a, char *buf, size_t len) {
    if (!data_augment_on(a)) {
        snprintf(buf, len, "none");
        return;
    }
    if (a->crop > 0) snprintf(buf, len, "crop:%d%s", a->crop, a->flip ? ",flip" : "");
    else snprintf(buf, len, "flip");
}

void data_augment_draw(const data_augment *a, uint64_t seed, uint32_t epoch, uint32_t id,
                       int *dy, int *dx, int *flip) {
    uint64_t key = ht_rng_key(seed, epoch, DATA_AUGMENT_RNG_LAYER);
    *dy = *dx = a->crop;
    if (a->crop > 0) {
        int span = 2 * a->crop + 1;
        *dy = (int)((double)ht_rng_uniform(key, id, 0) * span);
        *dx = (int)((double)ht_rng_uniform(key, id, 1) * span);
    }
    *flip = a->flip && ht_rng_uniform(key, id, 2) < 0.5f;
}

// The augmentation's copy, of floats or of scaled bytes (T the input's type).
#define AUGMENT_APPLY(T, in, SCALE)                                                            \
    do {                                                                                       \
        /* Output (y, x) shows padded input (y + dy, x' + dx) with x' = x, or w-1-x when      \
           flipped, which is input (y + dy - crop, x' + dx - crop) or a zero outside it. */   \
        int oy = dy - crop, ox = dx - crop;                                                    \
        for (int ch = 0; ch < c; ch++) {                                                       \
            const T *src = in + (size_t)ch * h * w;                                            \
            float *dst = out + (size_t)ch * h * w;                                             \
            for (int y = 0; y < h; y++) {                                                      \
                int sy = y + oy;                                                               \
                float *row = dst + (size_t)y * w;                                              \
                if (sy < 0 || sy >= h) {                                                       \
                    memset(row, 0, sizeof(float) * (size_t)w);                                 \
                    continue;                                                                  \
                }                                                                              \
                const T *srow = src + (size_t)sy * w;                                          \
                for (int x = 0; x < w; x++) {                                                  \
                    int sx = (flip ? w - 1 - x : x) + ox;                                      \
                    row[x] = sx >= 0 && sx < w ? (float)srow[sx] * (SCALE) : 0.0f;             \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    } while (0)

void data_augment_apply(const float *in, float *out, int c, int h, int w, int crop, int dy,
                        int dx, int flip) {
    AUGMENT_APPLY(float, in, 1.0f);
}

void data_augment_apply8(const uint8_t *in8, float scale, float *out, int c, int h, int w,
                         int crop, int dy, int dx, int flip) {
    AUGMENT_APPLY(uint8_t, in8, scale);
}

void dataset_gather_augment(const dataset *src, const uint32_t *idx, int n, float *x, uint8_t *y,
                            const data_augment *a, uint64_t seed, uint32_t epoch) {
    size_t chw = dataset_sample_size(src), yw = dataset_ylen(src);
    int on = data_augment_on(a);
    for (int i = 0; i < n; i++) {
        float *out = x + (size_t)i * chw;
        int dy = 0, dx = 0, flip = 0;
        if (on) data_augment_draw(a, seed, epoch, idx[i], &dy, &dx, &flip);
        if (src->x) {
            const float *in = src->x + (size_t)idx[i] * chw;
            if (on) data_augment_apply(in, out, src->c, src->h, src->w, a->crop, dy, dx, flip);
            else memcpy(out, in, chw * sizeof(float));
        } else {
            const uint8_t *in = src->x8 + (size_t)idx[i] * chw;
            const float s = src->x8_scale;
            if (on)
                data_augment_apply8(in, s, out, src->c, src->h, src->w, a->crop, dy, dx, flip);
            else
                for (size_t k = 0; k < chw; k++) out[k] = (float)in[k] * s;
        }
        if (y && src->y) memcpy(y + i * yw, src->y + idx[i] * yw, yw);
    }
}

// Allocates `part` for n samples shaped like `all` and copies samples idx[0..n) into it.
static int split_part(const dataset *all, const uint32_t *idx, int n, dataset *part,
                      ht_error *e) {
    part->c = all->c;
    part->h = all->h;
    part->w = all->w;
    part->ylen = all->ylen;
    if (n == 0) return 0;
    if (all->y && !(part->y = ht_malloc((size_t)n, dataset_ylen(all), e))) return -1;
    const size_t chw = dataset_sample_size(all), yw = dataset_ylen(all);
    if (!all->x) { // bytes stay bytes
        uint8_t *x8 = ht_malloc((size_t)n, chw, e);
        if (!x8) return -1;
        for (int i = 0; i < n; i++) {
            memcpy(x8 + (size_t)i * chw, all->x8 + (size_t)idx[i] * chw, chw);
            if (part->y) memcpy(part->y + (size_t)i * yw, all->y + (size_t)idx[i] * yw, yw);
        }
        part->x8 = x8, part->x8_base = x8, part->x8_len = (size_t)n * chw;
        part->x8_scale = all->x8_scale;
        part->n = n;
        return 0;
    }
    part->x = ht_malloc((size_t)n * chw, sizeof(float), e);
    if (!part->x) return -1;
    dataset_gather(all, idx, n, part->x, part->y);
    part->n = n;
    return 0;
}

int dataset_split(const dataset *all, float frac, uint64_t seed, dataset *train, dataset *val,
                  ht_error *e) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (!(frac >= 0.0f && frac < 1.0f))
        return ht_fail(e, "validation fraction %g is outside [0,1)", (double)frac);
    int n = all->n;
    if (n < 1) return ht_fail(e, "cannot split an empty data set");
    int n_val = (int)lround(frac * n);
    if (n_val >= n)
        return ht_fail(e, "validation fraction %g of %d samples leaves no training samples",
                       (double)frac, n);
    uint32_t *perm = ht_malloc((size_t)n, sizeof *perm, e);
    if (!perm) return -1;
    for (int i = 0; i < n; i++) perm[i] = (uint32_t)i;
    ht_rng rng;
    ht_rng_seed(&rng, seed);
    for (int i = n - 1; i >= 1; i--) {
        uint32_t j = ht_rng_below(&rng, (uint32_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int n_train = n - n_val;
    if (split_part(all, perm, n_train, train, e) ||
        split_part(all, perm + n_train, n_val, val, e)) {
        free(perm);
        dataset_free(train);
        dataset_free(val);
        return -1;
    }
    free(perm);
    return 0;
}
