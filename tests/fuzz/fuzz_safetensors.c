// Fuzzes the safetensors reader (safetensors_load) against the small fixed model of
// fuzz_model.h: conv1.weight [2,1,3,3], conv1.bias [2], fc1.weight [3,8], fc1.bias [3].
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_model.h"
#include "tests/fuzz/fuzz_util.h"
#include "io/safetensors.h"

static model net;
static float *params, *before;

static void build_model(void) {
    fuzz_small_model(&net);
    params = malloc(net.n_params * sizeof *params);
    before = malloc(net.n_params * sizeof *before);
    if (!params || !before) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!params) build_model();
    const char *path = fuzz_write_tmp(0, "w.safetensors", data, size);
    for (size_t i = 0; i < net.n_params; i++) params[i] = before[i] = (float)i;
    ht_error e;
    // A failed load must leave the parameters as they were.
    if (safetensors_load(path, &net, params, &e) != 0 &&
        memcmp(params, before, net.n_params * sizeof *params))
        abort();
    return 0;
}
