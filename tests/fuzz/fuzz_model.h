// The small fixed model the file-format harnesses read into: 1x4x4 input, conv1 (2 filters
// 3x3, same padding), relu, 2x2 maxpool, fc1 (3 units), softmax. Its tensors are conv1.weight
// [2,1,3,3], conv1.bias [2], fc1.weight [3,8], fc1.bias [3].
#ifndef HETRAIN_FUZZ_MODEL_H
#define HETRAIN_FUZZ_MODEL_H

#include <stdlib.h>

#include "nn/model.h"

static inline void fuzz_small_model(model *m) {
    ht_error e;
    const layer_spec layers[] = {
        {.kind = LAYER_CONV2D, .filters = 2, .k = 3, .pad = -1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2},
        {.kind = LAYER_DENSE, .units = 3, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    if (model_begin(m, "fuzz", 1, 4, 4, 3, &e)) abort();
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        if (model_add(m, &layers[i], &e)) abort();
    if (model_finish(m, &e)) abort();
}

#endif
