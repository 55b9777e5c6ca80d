// The ten keras.applications architectures as Keras 3 writes them (fixtures/keras/applications:
// model.to_json() with weights=None, a 32x32x3 input (Xception's 71x71x3) and 10 classes,
// gzipped, and Keras's total, trainable and non-trainable counts, by
// tools/keras_applications.py): those hetrain reads it reads with Keras's counts, and each one
// it does not is refused in one line naming the layer where it stops. The table below is the
// state of things; reading another architecture means moving its row.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/keras.h"
#include "nn/model.h"
#include "tests/lib/testutil.h"

#define ADIR HT_SOURCE_DIR "/tests/fixtures/keras/applications/"

// NULL: read, with Keras's counts; else what the refusal says.
static const struct {
    const char *net, *refused;
} apps[] = {
    {"VGG16", NULL},
    {"ResNet50", NULL},
    {"ResNet50V2", NULL},
    {"MobileNet", NULL},
    {"MobileNetV2", NULL},
    {"DenseNet121", NULL},
    {"EfficientNetB0", NULL},
    {"Xception", NULL},
    {"MobileNetV3Small", NULL},
    {"ConvNeXtTiny", NULL},
};

static void test_applications(void **state) {
    (void)state;
    char *counts = test_read_file(ADIR "counts.txt", NULL);
    assert_non_null(counts);
    int read = 0;
    for (size_t i = 0; i < sizeof apps / sizeof apps[0]; i++) {
        char key[64], path[512];
        size_t total, trainable, fixed, len = 0;
        snprintf(key, sizeof key, "%s.json ", apps[i].net);
        const char *line = strstr(counts, key);
        assert_non_null(line);
        assert_int_equal(sscanf(line + strlen(key), "%zu %zu %zu", &total, &trainable, &fixed),
                         3);
        snprintf(path, sizeof path, ADIR "%s.json.gz", apps[i].net);
        char *text = test_read_gz(path, &len);
        assert_non_null(text);
        model m;
        ht_error e = {{0}};
        int rc = model_init_keras_text(&m, text, len, key, &e);
        free(text);
        if (apps[i].refused) {
            if (rc == 0) fail_msg("%s: read, where the table says it is refused", apps[i].net);
            test_expect_frags(e.msg, 1, apps[i].refused, NULL);
            continue;
        }
        if (rc < 0) fail_msg("%s: %s", apps[i].net, e.msg);
        // Keras's counts: a batchnorm's update count is hetrain's own; its moving statistics
        // are non-trainable, as a normalization's mean, variance and count.
        const size_t bn = model_keras_uncounted(&m);
        if (m.n_params - bn != total || m.n_trainable - model_frozen_params(&m) != trainable ||
            m.n_state - bn + model_frozen_params(&m) != fixed)
            fail_msg("%s: %zu total, %zu trainable, %zu non-trainable; Keras %zu, %zu, %zu",
                     apps[i].net, m.n_params - bn, m.n_trainable - model_frozen_params(&m),
                     m.n_state - bn + model_frozen_params(&m), total, trainable, fixed);
        // ConvNeXt's: its Normalization's ImageNet mean and variance, constants of the layer
        // (no state, none counted); its stem (a Sequential inside) read in its place; its
        // grouped 7x7 Conv2D a depthwise one, its Dense on images 1x1 convolutions.
        if (!strcmp(apps[i].net, "ConvNeXtTiny")) {
            const layer *L = &m.layers[0];
            assert_int_equal(L->kind, LAYER_NORMALIZE);
            assert_int_equal(L->n_const, 3);
            assert_int_equal(L->n_s, 0);
            assert_float_equal(L->c_mean[1], 116.28f, 0);
            assert_float_equal(L->c_var[2], 3291.890625f, 0);
            assert_int_equal(m.layers[1].kind, LAYER_CONV2D); // the stem's 4x4 conv
            assert_int_equal(m.layers[1].in[0], 0);
            assert_int_equal(m.layers[2].kind, LAYER_LAYERNORM);
            assert_int_equal(m.layers[3].kind, LAYER_DWCONV);
            assert_int_equal(m.layers[3].keras_as, 1 + LAYER_CONV2D);
            assert_int_equal(m.layers[5].kind, LAYER_CONV2D);
            assert_int_equal(m.layers[5].keras_as, 1 + LAYER_DENSE);
            assert_int_equal(m.layers[5].k, 1);
        }
        model_free(&m);
        read++;
    }
    printf("keras.applications read with Keras's counts: %d of %zu\n", read,
           sizeof apps / sizeof apps[0]);
    free(counts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_applications),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
