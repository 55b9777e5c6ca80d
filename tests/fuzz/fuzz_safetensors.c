// Fuzzes the safetensors reader (safetensors_load) against a small fixed model: 1x4x4 input,
// conv1 (2 filters 3x3, same padding), relu, 2x2 maxpool, fc1 (3 units), softmax. Its tensors
// are conv1.weight [2,1,3,3], conv1.bias [2], fc1.weight [3,8], fc1.bias [3].
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "safetensors.h"

static model net;
static float *params, *before;

static void build_model(void) {
    ht_error e;
    const layer_spec layers[] = {
        {.kind = LAYER_CONV2D, .filters = 2, .k = 3, .pad = -1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    if (model_begin(&net, "fuzz", 1, 4, 4, 3, &e)) abort();
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        if (model_add(&net, &layers[i], &e)) abort();
    if (model_finish(&net, &e)) abort();
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
