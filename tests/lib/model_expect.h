// What the model tests expect of a model's layers: kind, name, output shape and parameters of
// each, inputs chained from outputs and parameters laid out without gaps.
#ifndef HETRAIN_TEST_MODEL_EXPECT_H
#define HETRAIN_TEST_MODEL_EXPECT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "nn/model.h"

typedef struct expect_layer {
    layer_kind kind;
    const char *name;
    int oc, oh, ow;
    size_t params;
} expect_layer;

static inline void check_layers(const model *m, const expect_layer *e, int n) {
    assert_int_equal(m->n_layers, n);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const layer *L = &m->layers[i];
        if (L->kind != e[i].kind || strcmp(L->name, e[i].name) || L->oc != e[i].oc ||
            L->oh != e[i].oh || L->ow != e[i].ow || L->n_w + L->n_b != e[i].params)
            fail_msg("layer %d: got %s kind %d %dx%dx%d %zu params, expected %s kind %d "
                     "%dx%dx%d %zu", i, L->name, (int)L->kind, L->oc, L->oh, L->ow,
                     L->n_w + L->n_b, e[i].name, (int)e[i].kind, e[i].oc, e[i].oh, e[i].ow,
                     e[i].params);
        // Each layer's input is the previous layer's output (flattened for dense/softmax).
        size_t in = i ? layer_out_size(&m->layers[i - 1]) : (size_t)m->in_c * m->in_h * m->in_w;
        assert_int_equal(layer_in_size(L), in);
        if (L->n_w) { // offsets: weight then bias, in layer order, no gaps
            assert_int_equal(L->w_off, off);
            assert_int_equal(L->b_off, off + L->n_w);
            off += L->n_w + L->n_b;
        } else {
            assert_true(L->w_off == LAYER_NO_PARAM && L->b_off == LAYER_NO_PARAM);
            assert_int_equal(L->n_b, 0);
        }
    }
    assert_int_equal(m->n_params, off);
}

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
