// Fuzzes the model config parser (model_init_config, INI through inih) and what a parsed model
// feeds: its summary and its cost.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    const char *path = fuzz_write_tmp(0, "model.cfg", data, size);
    model m;
    ht_error e;
    if (model_init_config(&m, path, &e) == 0) {
        if (m.n_layers < 1 || m.layers[m.n_layers - 1].kind != LAYER_SOFTMAX_XENT) abort();
        model_print_summary(&m, devnull);
        (void)model_forward_macs(&m);
        model_free(&m);
    }
    return 0;
}
