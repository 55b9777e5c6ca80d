// Keras's callbacks' decisions (app/watch.c) on sequences worked by hand: EarlyStopping's
// patience and min_delta in both directions (losses down, accuracies up; a NaN never
// improves), ReduceLROnPlateau's factor, patience, its 1e-4 and its floor, and the parsing of
// their options.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "app/watch.h"
#include "tests/lib/testutil.h"

// Feeds values of the monitored metric; returns the epoch (1-based) that stops, or 0.
static int feed(watch *w, const watch_opts *o, const double *v, int n, char *ev, size_t len) {
    for (int i = 0; i < n; i++) {
        ev[0] = 0;
        const double m = v[i];
        watch_step s = watch_epoch(w, o, i + 1, m, m, m, m, 1.0, ev, len);
        if (s.stop) return i + 1;
    }
    return 0;
}

static void test_early_stopping(void **state) {
    (void)state;
    char ev[256];
    watch w;
    // val_loss 1.0, 0.9 (better by more than 0.05), 0.95, 0.91: two epochs without: stop at 4.
    watch_opts o = {.patience = 2, .monitor = WATCH_VAL_LOSS, .min_delta = 0.05};
    watch_init(&w);
    const double loss[] = {1.0, 0.9, 0.95, 0.91, 0.5};
    assert_int_equal(feed(&w, &o, loss, 5, ev, sizeof ev), 4);
    assert_int_equal(w.best_epoch, 2);
    assert_float_equal(w.best, 0.9, 0);
    test_expect_frags(ev, 1, "early stop: val_loss has not improved for 2 epochs (best 0.9 at "
                      "epoch 2)", NULL);
    // Without min_delta 0.91 < 0.9 is no improvement either, 0.89 is: no stop in 4.
    o.min_delta = 0;
    watch_init(&w);
    const double loss2[] = {1.0, 0.9, 0.95, 0.89};
    assert_int_equal(feed(&w, &o, loss2, 4, ev, sizeof ev), 0);
    assert_int_equal(w.best_epoch, 4);
    // Accuracy goes up; a NaN never improves.
    o = (watch_opts){.patience = 1, .monitor = WATCH_VAL_ACCURACY, .min_delta = 0.01};
    watch_init(&w);
    const double acc[] = {0.5, 0.6, 0.605};
    assert_int_equal(feed(&w, &o, acc, 3, ev, sizeof ev), 3);
    watch_init(&w);
    const double bad[] = {0.5, NAN};
    assert_int_equal(feed(&w, &o, bad, 2, ev, sizeof ev), 2);
    // A first NaN is no best either: it counts as an epoch without improvement.
    o.patience = 2;
    watch_init(&w);
    const double first_bad[] = {NAN, 0.3, 0.2};
    assert_int_equal(feed(&w, &o, first_bad, 3, ev, sizeof ev), 0);
    assert_int_equal(w.best_epoch, 2);
    assert_int_equal(w.wait, 1);
}

static void test_plateau(void **state) {
    (void)state;
    char ev[256];
    watch w;
    watch_opts o = {.monitor = WATCH_LOSS};
    ht_error e;
    assert_int_equal(watch_parse_plateau(&o, "0.5,2,0.3", &e), 0);
    assert_float_equal(o.lr_factor, 0.5, 0);
    assert_int_equal(o.lr_patience, 2);
    watch_init(&w);
    // 1.0, then 0.99995 (not better by 1e-4), 1.0: cut to 0.5; 0.9 better; two more without:
    // cut to 0.3 (the floor, not 0.25); two more: nothing below the floor.
    const double v[] = {1.0, 0.99995, 1.0, 0.9, 0.95, 0.95, 0.95, 0.95};
    const double scale[] = {1, 1, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3};
    for (int i = 0; i < 8; i++) {
        ev[0] = 0;
        watch_step s = watch_epoch(&w, &o, i + 1, v[i], 0, 0, 0, 1.0, ev, sizeof ev);
        assert_float_equal(w.lr_scale, scale[i], 1e-12);
        assert_int_equal(s.lr_cut, i == 2 || i == 5);
        if (i == 2) test_expect_frags(ev, 1, "lr 1 -> 0.5 (loss on a plateau for 2 epochs)", NULL);
        assert_int_equal(s.stop, 0);
    }
    // Keras's defaults; what is refused.
    assert_int_equal(watch_parse_plateau(&o, "0.2", &e), 0);
    assert_int_equal(o.lr_patience, 10);
    assert_float_equal(o.min_lr, 0, 0);
    static const char *const refused[] = {"1.5", "0.5,0", "0.5,2.5", "0.5,2,-1", "x", "0.5,", ""};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        assert_int_equal(watch_parse_plateau(&o, refused[i], &e), -1);
        test_expect_frags(e.msg, 1, "--reduce-lr-on-plateau: expected FACTOR[,PATIENCE[,MIN_LR]]",
                          NULL);
    }
    assert_int_equal(watch_metric_by_name("val_acc"), WATCH_VAL_ACCURACY);
    assert_int_equal(watch_metric_by_name("f1"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_stopping),
        cmocka_unit_test(test_plateau),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
