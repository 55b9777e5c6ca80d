// Data sets in memory: freeing, trimming, the seeded train/val split, gathering batches, and
// finding the four files of an MNIST-layout folder. The file formats live in data_idx.c and
// data_csv.c.
#include "data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

void dataset_free(dataset *d) {
    if (!d) return;
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
    float *x = realloc(d->x, (size_t)n * dataset_sample_size(d) * sizeof(float));
    if (x) d->x = x;
    if (d->y) {
        uint8_t *y = realloc(d->y, (size_t)n);
        if (y) d->y = y;
    }
}

void dataset_gather(const dataset *src, const uint32_t *idx, int n, float *x, uint8_t *y) {
    size_t chw = dataset_sample_size(src);
    for (int i = 0; i < n; i++) {
        memcpy(x + (size_t)i * chw, src->x + (size_t)idx[i] * chw, chw * sizeof(float));
        if (y && src->y) y[i] = src->y[idx[i]];
    }
}

// Allocates `part` for n samples shaped like `all` and copies samples idx[0..n) into it.
static int split_part(const dataset *all, const uint32_t *idx, int n, dataset *part,
                      ht_error *e) {
    part->c = all->c;
    part->h = all->h;
    part->w = all->w;
    if (n == 0) return 0;
    part->x = ht_malloc((size_t)n * dataset_sample_size(all), sizeof(float), e);
    if (!part->x) return -1;
    if (all->y && !(part->y = ht_malloc((size_t)n, 1, e))) return -1;
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
