// Fuzzes the Keras model JSON reader (model_init_keras_text: json-c, then keras.c's mapping
// onto model_add) and what a model it accepts feeds: its tensor table, summary, cost and
// initialisation. The input is the JSON text itself.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/keras.h"
#include "nn/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    model m;
    ht_error e;
    if (model_init_keras_text(&m, (const char *)data, size, "fuzz.json", &e) == 0) {
        layer_kind last = m.n_layers ? m.layers[m.n_layers - 1].kind : LAYER_KIND_COUNT;
        if (last != LAYER_SOFTMAX_XENT && last != LAYER_SIGMOID_BCE) abort();
        if (m.label_width < 1 || m.label_width > MODEL_MAX_LABELS) abort();
        if (m.n_classes < 2 || m.n_classes > 256) abort();
        model_print_summary(&m, devnull);
        (void)model_forward_macs(&m);
        if (m.n_params <= ((size_t)1 << 22)) { // initialise what is small enough to be quick
            float *p = malloc(m.n_params * sizeof *p + 1);
            if (!p) abort();
            model_init_params(&m, p, 1);
            free(p);
        }
        model_free(&m);
    } else {
        if (m.layers || m.n_layers) abort(); // a failed read leaves the model empty
        for (const char *p = e.msg; *p; p++)      // and says why on one line
            if (*p == '\n' || *p == '\r') abort();
    }
    return 0;
}
