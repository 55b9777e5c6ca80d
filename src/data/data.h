// Data sets in memory and their loaders: IDX (raw or gzip) and Kaggle CSV. Pixels become
// float32 in [0,1], NCHW; labels are 0..9 bytes.
#ifndef HETRAIN_DATA_H
#define HETRAIN_DATA_H

#include <stdint.h>

#include "common.h"

typedef struct dataset {
    int n;          // samples
    int c, h, w;    // shape of one sample
    float *x;       // (n,c,h,w)
    uint8_t *y;     // (n) labels, NULL when the set has none (Kaggle test CSV)
} dataset;

#define DATA_MAX_SAMPLES 10000000
#define DATA_MAX_DIM 4096
#define DATA_N_CLASSES 10

// IDX: images (magic 0x00000803, dims n,h,w) and, unless labels_path is NULL, labels
// (0x00000801, dim n). Either file may be gzip-compressed (detected by content, not name).
int dataset_load_idx(dataset *d, const char *images_path, const char *labels_path, ht_error *e);

// Kaggle CSV with a header line. A first header column called "label" means labelled rows
// (label,pixel0..pixelN-1); otherwise every column is a pixel. N must be a square (784 -> 28x28).
// Pixels are numbers in 0..255.
int dataset_load_csv(dataset *d, const char *path, ht_error *e);

// A folder in the MNIST layout: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]. Either of train and test may be
// NULL (its files are then neither needed nor read).
int dataset_load_dir(dataset *train, dataset *test, const char *dir, ht_error *e);

void dataset_free(dataset *d);

// Keeps the first n samples (no-op when n <= 0 or n >= d->n).
void dataset_limit(dataset *d, int n);

// Splits `all` into train and val by a seeded permutation: val gets round(frac * n) samples.
// The permutation is a Fisher-Yates shuffle with ht_rng seeded by `seed`, drawing
// j = ht_rng_below(i + 1) for i = n-1 .. 1; val is the *last* round(frac*n) entries of the
// permuted order, train the rest, each kept in permuted order. Copies the data.
int dataset_split(const dataset *all, float frac, uint64_t seed, dataset *train, dataset *val,
                  ht_error *e);

// Copies sample idx[i] of src into row i of x (and y when both are not NULL).
void dataset_gather(const dataset *src, const uint32_t *idx, int n, float *x, uint8_t *y);

#endif
