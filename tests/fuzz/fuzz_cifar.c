// Fuzzes the CIFAR binary loader (dataset_load_cifar) on one file named as CIFAR-10's
// data_batch_1.bin, CIFAR-100's train.bin, or neutrally (its kind then read from its size).
// Input: a mode byte (bits 0..1: the name, 0 data_batch_1.bin, 1 train.bin, else records.bin;
// bit 2: coarse labels; bit 3: a 20-class model, else 100), then the file.
#include <stdint.h>
#include <stdlib.h>

#include "data/data.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    data++, size--;
    static const char *const names[4] = {"data_batch_1.bin", "train.bin", "records.bin", "x.bin"};
    const char *path = fuzz_write_tmp(0, names[mode & 3], data, size);
    data_opts o = {.classes = mode & 8 ? 20 : 100, .channels = 3, .coarse = (mode >> 2) & 1};
    dataset d;
    ht_error e;
    if (dataset_load_cifar(&d, &path, 1, &o, &e) == 0) {
        if (d.n < 1 || d.c != 3 || d.h != 32 || d.w != 32 || !d.x || !d.y) abort();
        if ((size_t)d.n * 3073 != size && (size_t)d.n * 3074 != size) abort();
        for (int i = 0; i < d.n; i++)
            if (d.y[i] >= o.classes) abort();
        for (size_t i = 0; i < (size_t)d.n * 3072; i++)
            if (!(d.x[i] >= 0.0f && d.x[i] <= 1.0f)) abort();
        dataset_free(&d);
    } else if (d.x || d.y) {
        abort();
    }
    return 0;
}
