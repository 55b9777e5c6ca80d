// Fuzzes the Kaggle CSV loader (dataset_load_csv), reading the file as given or gzip-compressed
// here (whole or cut short).
// Input: a mode byte (bit 0: gzip the file; bits 1..7: bytes cut off the end of the gzip
// stream), then the CSV file.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/data.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_CLASSES 10 // labels the loader must refuse above

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    data++, size--;
    const char *path = mode & 1 ? fuzz_write_tmp_gz(0, "data.csv", data, size, (size_t)(mode >> 1))
                                : fuzz_write_tmp(0, "data.csv", data, size);
    dataset d;
    ht_error e;
    if (dataset_load_csv(&d, path, FUZZ_CLASSES, &e) == 0) {
        if (d.n < 1 || d.c != 1 || d.h < 1 || d.h != d.w || !d.x) abort();
        size_t n = (size_t)d.n * (size_t)d.h * (size_t)d.w;
        for (size_t i = 0; i < n; i++)
            if (!(d.x[i] >= 0.0f && d.x[i] <= 1.0f)) abort();
        for (int i = 0; d.y && i < d.n; i++)
            if (d.y[i] >= FUZZ_CLASSES) abort();
        dataset_free(&d);
    }
    return 0;
}
