// Fuzzes the IDX loader (dataset_load_idx): an images file alone or with a labels file, each
// as given or gzip-compressed here (whole or cut short).
// Input: a mode byte (bit 0: a labels file follows; bit 1: gzip the images; bit 2: gzip the
// labels; bits 3..7: bytes cut off the end of the gzip streams), the images file's length as
// 16-bit little-endian, the images file, then the labels file.
#include <stdint.h>
#include <stdlib.h>

#include "data/data.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_CLASSES 10 // labels the loader must refuse above

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int mode = data[0];
    size_t ilen = (size_t)data[1] | (size_t)data[2] << 8, cut = (size_t)(mode >> 3);
    data += 3, size -= 3;
    if (ilen > size) ilen = size;
    const char *images = mode & 2 ? fuzz_write_tmp_gz(0, "images", data, ilen, cut)
                                  : fuzz_write_tmp(0, "images", data, ilen);
    const char *labels = NULL;
    if (mode & 1)
        labels = mode & 4 ? fuzz_write_tmp_gz(1, "labels", data + ilen, size - ilen, cut)
                          : fuzz_write_tmp(1, "labels", data + ilen, size - ilen);
    dataset d;
    ht_error e;
    if (dataset_load_idx(&d, images, labels, FUZZ_CLASSES, &e) == 0) {
        if (d.n < 1 || d.c != 1 || d.h < 1 || d.w < 1 || !d.x || (labels && !d.y)) abort();
        for (int i = 0; labels && i < d.n; i++)
            if (d.y[i] >= FUZZ_CLASSES) abort();
        dataset_free(&d);
    }
    return 0;
}
