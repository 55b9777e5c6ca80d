// What the Keras JSON tests expect of the reader (model_init_keras_text): a text it accepts with
// its parameter count, or a text it refuses with its exact one-line message.
#ifndef HETRAIN_TEST_KERAS_EXPECT_H
#define HETRAIN_TEST_KERAS_EXPECT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "nn/keras.h"
#include "nn/model.h"

// json (read as "bad.json") is refused with the message want, or, when want ends in "*", a
// message beginning with the rest; on one line, the model left empty.
static inline void keras_expect_error(const char *json, const char *want) {
    model m;
    ht_error e = {{0}};
    if (model_init_keras_text(&m, json, strlen(json), "bad.json", &e) == 0)
        fail_msg("accepted: %s", json);
    size_t n = strlen(want);
    if (n && want[n - 1] == '*' ? strncmp(e.msg, want, n - 1) : strcmp(e.msg, want))
        fail_msg("error\n  \"%s\"\nexpected\n  \"%s\"", e.msg, want);
    assert_null(m.layers);
    assert_null(strchr(e.msg, '\n'));
}

// json (read as "ok.json") is accepted with `params` parameters.
static inline void keras_expect_ok(const char *json, size_t params) {
    model m;
    ht_error e = {{0}};
    if (model_init_keras_text(&m, json, strlen(json), "ok.json", &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(m.n_params, params);
    model_free(&m);
}

#endif
