// Fuzzes the model config parser (model_init_config, INI through inih) and what a parsed model
// feeds: its summary, its cost, and, for a network small enough, one forward and backward pass
// of two samples through the CPU path (net.c: every layer kind, window, stride and padding a
// config can describe must run within its buffers).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_util.h"
#include "nn/model.h"
#include "nn/net.h"

// Larger networks are parsed and summarised only: a pass would slow the search down.
#define FUZZ_MAX_PARAMS 20000
#define FUZZ_MAX_ACT 20000 // floats of any one layer's input or output, per sample

static void run_net(const model *m) {
    for (int l = 0; l < m->n_layers; l++)
        if (layer_in_size(&m->layers[l]) > FUZZ_MAX_ACT ||
            layer_out_size(&m->layers[l]) > FUZZ_MAX_ACT)
            return;
    if (m->n_params > FUZZ_MAX_PARAMS) return;
    enum { B = 2 };
    const size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    float *p = malloc(sizeof(float) * (m->n_params + 1));
    float *g = calloc(m->n_params + 1, sizeof(float));
    float *x = malloc(sizeof(float) * in * B);
    if (!p || !g || !x) abort();
    model_init_params(m, p, 1);
    for (size_t i = 0; i < in * B; i++) x[i] = (float)(i % 7) / 7.0f;
    // a class each (the first and the last), or a multi-label head's labels, alternating
    uint8_t y[B * MODEL_MAX_LABELS];
    for (int i = 0; i < B * m->label_width; i++)
        y[i] = m->label_width > 1 ? (uint8_t)(i % 2) : (uint8_t)(i ? m->n_classes - 1 : 0);
    uint32_t ids[B] = {3, 9};
    net_dropout d = {.seed = 1, .epoch = 0, .ids = ids};
    net_ws ws;
    ht_error e;
    model mm = *m;
    mm.setup.conv_algo = CONV_ALGO_DIRECT; // no timing inside the fuzzer
    if (net_ws_init(&ws, &mm, B, 1, &e) == 0) {
        net_forward(&ws, &mm, p, x, y, B, &d);
        net_backward(&ws, &mm, p, g, x, y, B, &d);
        net_ws_free(&ws);
    }
    free(p), free(g), free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    const char *path = fuzz_write_tmp(0, "model.cfg", data, size);
    model m;
    ht_error e;
    if (model_init_config(&m, path, &e) == 0) {
        layer_kind last = m.n_layers ? m.layers[m.n_layers - 1].kind : LAYER_KIND_COUNT;
        if (last != LAYER_SOFTMAX_XENT && last != LAYER_SIGMOID_BCE) abort();
        if (m.label_width < 1 || m.label_width > MODEL_MAX_LABELS) abort();
        model_print_summary(&m, devnull);
        (void)model_forward_macs(&m);
        run_net(&m);
        model_free(&m);
    }
    return 0;
}
