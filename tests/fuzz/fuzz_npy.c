// Fuzzes the NumPy loaders: dataset_load_npy (an images .npy alone or with a labels .npy) and
// dataset_load_npz (a zip archive of .npy members, read with libzip), under each layout rule.
// Input: a mode byte (bit 0: the rest is one .npz; bit 1: npz: read its test set, npy: a labels
// file follows; bits 2..3: the layout, 0 auto, 1 NHWC, 2 NCHW; bit 4: a 1-channel model, else
// 3 channels; bit 5: a multi-label model of FUZZ_LABELS labels), the images file's length as
// 16-bit little-endian (npy only), the images file, then the labels file.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/data.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_CLASSES 10 // labels the loader must refuse above
#define FUZZ_LABELS 3   // a multi-label model's labels a sample, each 0 or 1

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    data++, size--;
    int layout = (mode >> 2) & 3; // 3: auto as 0
    const int multi = (mode & 32) != 0;
    data_opts o = {.classes = FUZZ_CLASSES, .channels = mode & 16 ? 1 : 3,
                   .layout = layout == 3 ? DATA_LAYOUT_AUTO : (data_layout)layout,
                   .labels = multi ? FUZZ_LABELS : 0};
    dataset d;
    ht_error e;
    int rc, labelled;
    if (mode & 1) {
        const char *path = fuzz_write_tmp(0, "data.npz", data, size);
        rc = dataset_load_npz(&d, path, (mode >> 1) & 1, 0, &o, &e);
        labelled = !((mode >> 1) & 1);
    } else {
        if (size < 2) return 0;
        size_t ilen = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        if (ilen > size) ilen = size;
        const char *images = fuzz_write_tmp(0, "x.npy", data, ilen);
        const char *labels = mode & 2 ? fuzz_write_tmp(1, "y.npy", data + ilen, size - ilen) : NULL;
        rc = dataset_load_npy(&d, images, labels, &o, &e);
        labelled = labels != NULL;
    }
    if (rc == 0) {
        if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || !d.x || (labelled && !d.y)) abort();
        size_t n = (size_t)d.n * (size_t)d.c * (size_t)d.h * (size_t)d.w;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(d.x[i])) abort();
        if (d.y && (int)dataset_ylen(&d) != (multi ? FUZZ_LABELS : 1)) abort();
        for (size_t i = 0; d.y && i < (size_t)d.n * dataset_ylen(&d); i++)
            if (d.y[i] >= (multi ? 2 : FUZZ_CLASSES)) abort();
        dataset_free(&d);
    } else if (d.x || d.y) {
        abort(); // a failed load leaves the dataset empty
    }
    return 0;
}
