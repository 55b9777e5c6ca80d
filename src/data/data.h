// Data sets in memory and their loaders: IDX (raw or gzip), Kaggle CSV, CIFAR-10/100 binary and
// NumPy .npy/.npz. Pixels become float32 NCHW (bytes scaled to [0,1], float32 arrays as they
// are); labels are bytes below the model's class count. Also the training-time augmentation
// (random crop with zero padding, horizontal flip) applied where a step's samples are gathered.
#ifndef HETRAIN_DATA_H
#define HETRAIN_DATA_H

#include <stdint.h>

#include "core/common.h"

typedef struct dataset {
    int n;          // samples
    int c, h, w;    // shape of one sample
    float *x;       // (n,c,h,w)
    uint8_t *y;     // (n, ylen) labels, NULL when the set has none (Kaggle test CSV)
    int ylen;       // labels a sample: 1 (0 reads as 1), or k 0/1 labels for a multi-label head
    // Or, where x is NULL, the pixels as bytes (n,c,h,w), each value x8[i] * x8_scale (an
    // image folder's: its cache file mapped, or what was decoded), made floats as batches are
    // gathered. x8_base (x8_len bytes) is what dataset_free releases: munmap'd when x8_mapped,
    // else freed.
    const uint8_t *x8;
    float x8_scale;
    void *x8_base;
    size_t x8_len;
    int x8_mapped;
} dataset;

// Value i of the pixels (either form).
static inline float dataset_px(const dataset *d, size_t i) {
    return d->x ? d->x[i] : (float)d->x8[i] * d->x8_scale;
}

// Bytes of labels a sample.
static inline size_t dataset_ylen(const dataset *d) { return d->ylen > 1 ? (size_t)d->ylen : 1; }

#define DATA_MAX_SAMPLES 10000000
#define DATA_MAX_DIM 4096
#define DATA_MAX_CLASSES 256 // labels are bytes

// Every loader refuses a label >= classes (the model's class count; 0 stands for
// DATA_MAX_CLASSES), naming the file and the record.

// IDX: images (magic 0x00000803, dims n,h,w) and, unless labels_path is NULL, labels
// (0x00000801, dim n). Either file may be gzip-compressed (detected by content, not name).
int dataset_load_idx(dataset *d, const char *images_path, const char *labels_path, int classes,
                     ht_error *e);

// Kaggle CSV with a header line. A first header column called "label" means labelled rows
// (label,pixel0..pixelN-1); otherwise every column is a pixel. N must be a square (784 -> 28x28).
// Pixels are numbers in 0..255.
int dataset_load_csv(dataset *d, const char *path, int classes, ht_error *e);

// How a 4-D NumPy image array is laid out: found from which axis holds the model's channel
// count (AUTO), or as the user said.
typedef enum data_layout { DATA_LAYOUT_AUTO, DATA_LAYOUT_NHWC, DATA_LAYOUT_NCHW } data_layout;
extern const char *const data_layout_names[]; // "auto", "nhwc", "nchw"

// What the loaders of the newer formats need to know of the model and the options.
typedef struct data_opts {
    int classes;        // labels must be below it (0: DATA_MAX_CLASSES)
    int channels;       // the model's input channels, which settle an AUTO layout (0: unknown)
    data_layout layout;
    int coarse;         // CIFAR-100: the 20 coarse labels instead of the 100 fine ones
    int labels;         // labels a sample: 0 or 1 a class; k >= 2 a multi-label head's k 0/1
                        // (only .npy/.npz carry those)
} data_opts;

// A folder in the MNIST layout (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]) or a CIFAR binary folder: CIFAR-10
// (data_batch_1.bin .. data_batch_5.bin, test_batch.bin) or CIFAR-100 (train.bin, test.bin),
// recognised by its files. Either of train and test may be NULL (its files are then neither
// needed nor read).
int dataset_load_dir(dataset *train, dataset *test, const char *dir, const data_opts *o,
                     ht_error *e);

// CIFAR binary files, concatenated in the order given: records of a label byte (CIFAR-100: the
// coarse then the fine label) and 3072 pixel bytes, the R, G and B planes of 32x32 row-major.
// Which of the two a file is: by its name (data_batch_*, test_batch* are CIFAR-10; train.bin,
// test.bin CIFAR-100), else by which record size divides its size.
int dataset_load_cifar(dataset *d, const char *const *paths, int n_paths, const data_opts *o,
                       ht_error *e);
// dataset_load_dir's CIFAR half: 1 when dir is a CIFAR folder and loaded, 0 when it is none (the
// sets untouched), -1 on an error.
int dataset_load_cifar_dir(dataset *train, dataset *test, const char *dir, const data_opts *o,
                           ht_error *e);

// NumPy .npy (format 1.0, 2.0, 3.0): images of dtype uint8 (scaled to [0,1]) or float32 (kept,
// but every value must be finite), shape (N,H,W,C), (N,C,H,W) or (N,H,W); labels (NULL: none)
// of dtype uint8, int32 or int64, shape (N) or (N,1); for a multi-label model (o->labels = k
// >= 2) shape (N,k) of 0 and 1, dtype uint8, int32, int64 or float32.
int dataset_load_npy(dataset *d, const char *images_path, const char *labels_path,
                     const data_opts *o, ht_error *e);

// NumPy .npz (a zip of .npy members, stored or deflated): the training arrays x_train and
// y_train, else x and y (test: x_test and y_test, else x and y; y_test/y may be absent for a
// test set). With only_named, only x_test/y_test are looked for and 1 is returned when the
// archive has no x_test (the test set that comes with a training archive).
int dataset_load_npz(dataset *d, const char *path, int test, int only_named, const data_opts *o,
                     ht_error *e);

// A file by its name: .npy (labels from labels_path), .npz (test picks its members), .bin
// (CIFAR), anything else Kaggle CSV (labels_path must then be NULL).
int dataset_load_file(dataset *d, const char *path, const char *labels_path, int test,
                      const data_opts *o, ht_error *e);

void dataset_free(dataset *d);

// Keeps the first n samples (no-op when n <= 0 or n >= d->n).
void dataset_limit(dataset *d, int n);

// Splits `all` into train and val by a seeded permutation: val gets round(frac * n) samples.
// The permutation is a Fisher-Yates shuffle with ht_rng seeded by `seed`, drawing
// j = ht_rng_below(i + 1) for i = n-1 .. 1; val is the *last* round(frac*n) entries of the
// permuted order, train the rest, each kept in permuted order. Copies the data.
int dataset_split(const dataset *all, float frac, uint64_t seed, dataset *train, dataset *val,
                  ht_error *e);

// Copies sample idx[i] of src into row i of x (and its labels into y, ylen bytes a sample,
// when both are not NULL).
void dataset_gather(const dataset *src, const uint32_t *idx, int n, float *x, uint8_t *y);

// Training-time augmentation: crop pads each side with `crop` zeros and takes an HxW window at
// an offset (dy, dx) in 0..2*crop per axis; flip then mirrors the window left-right with
// probability 1/2. The draws of a sample are a pure function of (seed, epoch, sample id), from
// the counter RNG (rng.h) under its own key, so every device and rank, and a resumed run, give
// a sample the same augmentation.
typedef struct data_augment {
    int crop;   // padding P (0: no crop)
    int flip;   // random horizontal flip
} data_augment;

#define DATA_AUGMENT_MAX_CROP 64
#define DATA_AUGMENT_RNG_LAYER 0xA4600000u // ht_rng_key's layer for augmentation (no real layer)
#define DATA_AUGMENT_TEXT 32

// Parses "crop:P", "flip", "crop:P,flip" (either order) or "none" into a.
int data_augment_parse(data_augment *a, const char *spec, ht_error *e);
// The spec back ("crop:4,flip", "none").
void data_augment_text(const data_augment *a, char *buf, size_t len);
static inline int data_augment_on(const data_augment *a) { return a && (a->crop > 0 || a->flip); }

// The draws for sample `id`: crop offsets dy, dx in 0..2*crop (crop when a->crop > 0, else
// crop) and whether to flip.
void data_augment_draw(const data_augment *a, uint64_t seed, uint32_t epoch, uint32_t id,
                       int *dy, int *dx, int *flip);

// One sample (c,h,w) from in to out (not overlapping) under given draws; from bytes in8 (each
// times scale) instead where in is NULL.
void data_augment_apply(const float *in, float *out, int c, int h, int w, int crop, int dy,
                        int dx, int flip);
void data_augment_apply8(const uint8_t *in8, float scale, float *out, int c, int h, int w,
                         int crop, int dy, int dx, int flip);

// dataset_gather with each sample augmented as it is copied (a plain copy when a is off).
void dataset_gather_augment(const dataset *src, const uint32_t *idx, int n, float *x, uint8_t *y,
                            const data_augment *a, uint64_t seed, uint32_t epoch);

// Writes x (rows x cols floats) to path as a NumPy .npy of float32 ('<f4', C order): whole or
// not at all (a temporary file renamed into place).
int npy_save_f32(const char *path, const float *x, int rows, int cols, ht_error *e);

#endif
