// The capacity model (sharding/capacity.c) on synthetic timings, no threads or devices: a
// device whose shards take exactly a + b*n seconds must get the share that makes every device
// finish together, a device that cannot cover its fixed cost none, and old timings must fade; a
// device whose share saves less than the margin rests.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "sharding/capacity.h"

// Exact timings give the exact solution up to float rounding of the sums.
#define TOL_EXACT 1e-9

// Feeds device d shards of n1 and n2 samples, `times` each, timed by a + b*n.
static void feed(capacity_model *bal, int d, double a, double b, int n1, int n2, int times) {
    for (int i = 0; i < times; i++) {
        capacity_add(bal, d, n1, a + b * n1);
        capacity_add(bal, d, n2, a + b * n2);
    }
}

static void test_equal_finish_times(void **state) {
    (void)state;
    const double a[3] = {0.010, 0.000, 0.002}, b[3] = {0.001, 0.004, 0.0005};
    capacity_model bal;
    capacity_reset(&bal, 3);
    for (int d = 0; d < 3; d++) feed(&bal, d, a[d], b[d], 50, 200, 3);
    int active[3] = {1, 1, 1};
    double cap[3];
    const int B = 1000;
    assert_int_equal(capacity_solve(&bal, active, B, cap), 0);
    double sum = 0, t0 = a[0] + b[0] * cap[0];
    for (int d = 0; d < 3; d++) {
        sum += cap[d];
        assert_true(fabs(a[d] + b[d] * cap[d] - t0) < TOL_EXACT * B);
    }
    assert_true(fabs(sum - B) < TOL_EXACT * B);
    // The slowest device (b = 0.004, no fixed cost) gets the smallest share, not zero.
    assert_true(cap[1] > 0 && cap[1] < cap[0] && cap[1] < cap[2]);
    // The predicted step is that common finish time; an equal split is slower.
    assert_true(fabs(capacity_predict(&bal, active, cap) - t0) < TOL_EXACT * B);
    double equal[3] = {B / 3.0, B / 3.0, B / 3.0};
    assert_true(capacity_predict(&bal, active, equal) > t0 * 1.5);
}

// A device whose fixed cost alone exceeds what the others need for the whole batch gets 0, and
// the others share the batch between them.
static void test_fixed_cost_too_high(void **state) {
    (void)state;
    capacity_model bal;
    capacity_reset(&bal, 2);
    feed(&bal, 0, 0.0, 0.001, 100, 300, 2);  // 1000 samples: 1 s
    feed(&bal, 1, 5.0, 0.0001, 100, 300, 2); // 5 s before its first sample
    int active[2] = {1, 1};
    double cap[2];
    assert_int_equal(capacity_solve(&bal, active, 1000, cap), 0);
    assert_true(cap[1] == 0);
    assert_true(fabs(cap[0] - 1000) < TOL_EXACT * 1000);
}

// No capacities until every active device was measured; a dropped device does not count.
static void test_needs_every_active_device(void **state) {
    (void)state;
    capacity_model bal;
    capacity_reset(&bal, 2);
    feed(&bal, 0, 0.0, 0.001, 10, 20, 1);
    int active[2] = {1, 1};
    double cap[2] = {-1, -1};
    assert_int_equal(capacity_solve(&bal, active, 100, cap), -1);
    assert_true(cap[0] == -1); // untouched
    active[1] = 0;
    assert_int_equal(capacity_solve(&bal, active, 100, cap), 0);
    assert_true(fabs(cap[0] - 100) < TOL_EXACT * 100 && cap[1] == 0);
    // Forgetting a device's measurements makes it unmeasured again.
    feed(&bal, 1, 0.0, 0.001, 10, 20, 1);
    active[1] = 1;
    assert_int_equal(capacity_solve(&bal, active, 100, cap), 0);
    capacity_forget(&bal, 1);
    assert_int_equal(capacity_solve(&bal, active, 100, cap), -1);
}

// A device that became 4x slower: after 40 shards at the new speed (weight of the old ones
// CAPACITY_FORGET^40 ~ 1.5e-3) its share is within 1% of the new exact one.
static void test_old_timings_fade(void **state) {
    (void)state;
    capacity_model bal;
    capacity_reset(&bal, 2);
    feed(&bal, 0, 0.0, 0.001, 100, 200, 20);
    feed(&bal, 1, 0.0, 0.001, 100, 200, 20);
    int active[2] = {1, 1};
    double cap[2];
    assert_int_equal(capacity_solve(&bal, active, 1000, cap), 0);
    assert_true(fabs(cap[0] - 500) < 1e-6 && fabs(cap[1] - 500) < 1e-6);
    feed(&bal, 1, 0.0, 0.004, 100, 200, 20);
    assert_int_equal(capacity_solve(&bal, active, 1000, cap), 0);
    assert_true(fabs(cap[1] - 200) < 2); // exact: 1000 * (1/4) / (1 + 1/4)
}

// Timings at a single shard size cannot separate fixed from per-sample cost: the model falls
// back to a rate (a = 0). So does a fit whose intercept comes out negative (noise).
static void test_rate_model_fallback(void **state) {
    (void)state;
    capacity_model bal;
    capacity_reset(&bal, 2);
    for (int i = 0; i < 4; i++) {
        capacity_add(&bal, 0, 100, 0.2); // 2 ms a sample
        capacity_add(&bal, 1, 100, 0.1); // 1 ms a sample
    }
    int active[2] = {1, 1};
    double cap[2];
    assert_int_equal(capacity_solve(&bal, active, 300, cap), 0);
    assert_true(fabs(cap[0] - 100) < 1e-6 && fabs(cap[1] - 200) < 1e-6);
    // Device 0: 100 samples in 0.01 s, 200 in 0.5 s: the line has a = -0.48, which is noise.
    // As a line it would get 132 of 300 samples next to a device at 1 ms a sample; as a rate
    // (~1.7 ms a sample, the two sizes weighted by how recent they are) 107..115.
    capacity_reset(&bal, 2);
    for (int i = 0; i < 4; i++) {
        capacity_add(&bal, 0, 100, 0.01);
        capacity_add(&bal, 0, 200, 0.5);
        capacity_add(&bal, 1, 150, 0.15);
    }
    assert_int_equal(capacity_solve(&bal, active, 300, cap), 0);
    assert_in_range(cap[0], 107, 115);
}

// bench/mixed.sh's pair, as the fits saw it: a CPU worker at 0.36 ms a sample and a one-thread
// PoCL device at 19 ms (plus 5 ms of fixed cost). Balanced, the PoCL device takes about 3 of 200
// samples and the step is 1.6% quicker than the CPU alone: under a 3% margin it rests, under a
// 1% one it keeps its share. Three equal devices all keep theirs; a device whose fixed cost
// exceeds the step rests whatever the margin.
static void test_resting(void **state) {
    (void)state;
    const int B = 200;
    capacity_model bal;
    capacity_reset(&bal, 3);
    feed(&bal, 0, 0.001, 0.00036, 100, 200, 3);
    feed(&bal, 1, 0.005, 0.019, 1, 4, 3);
    int active[3] = {1, 1, 0};
    double cap[3], all[3];
    assert_int_equal(capacity_solve(&bal, active, B, all), 0);
    assert_true(all[1] > 1 && all[1] < 6);
    double t_all = capacity_predict(&bal, active, all), alone = 0.001 + 0.00036 * B;
    assert_true(alone > t_all * 1.01 && alone < t_all * 1.03);
    memcpy(cap, all, sizeof cap);
    capacity_resting(&bal, active, B, 0.03, cap);
    assert_true(cap[1] == 0);
    assert_true(fabs(cap[0] - B) < TOL_EXACT * B);
    memcpy(cap, all, sizeof cap);
    capacity_resting(&bal, active, B, 0.01, cap);
    assert_memory_equal(cap, all, sizeof cap);

    capacity_reset(&bal, 3);
    for (int d = 0; d < 3; d++) feed(&bal, d, 0.002, 0.001, 50, 100, 3);
    int three[3] = {1, 1, 1};
    assert_int_equal(capacity_solve(&bal, three, B, all), 0);
    memcpy(cap, all, sizeof cap);
    capacity_resting(&bal, three, B, 0.03, cap);
    assert_memory_equal(cap, all, sizeof cap);

    capacity_reset(&bal, 2);
    feed(&bal, 0, 0.0, 0.001, 100, 300, 2);
    feed(&bal, 1, 5.0, 0.0001, 100, 300, 2);
    int two[2] = {1, 1};
    assert_int_equal(capacity_solve(&bal, two, 1000, cap), 0);
    capacity_resting(&bal, two, 1000, 0.0, cap);
    assert_true(cap[1] == 0 && fabs(cap[0] - 1000) < TOL_EXACT * 1000);
}

// The same pair in a run's steady state: the CPU worker's shard barely moves (185..200
// samples) and its times vary by more than those few samples cost. Least squares would read
// the noise as a slope near 0 and a fixed cost of most of the step: the PoCL device's 15
// samples would then seem to save under 3% and it would rest, and come back, and rest (seen in
// bench/mixed.sh). Too little spread in n makes each device a rate: the CPU's ~0.43 ms a sample
// makes the PoCL device's share worth ~8%, and it keeps it.
static void test_narrow_spread_is_a_rate(void **state) {
    (void)state;
    const int B = 200;
    capacity_model bal;
    capacity_reset(&bal, 2);
    for (int i = 0; i < 2; i++) {
        capacity_add(&bal, 0, 186, 0.080);
        capacity_add(&bal, 0, 185, 0.081);
        capacity_add(&bal, 0, 200, 0.082);
    }
    for (int i = 0; i < 3; i++) {
        capacity_add(&bal, 1, 14, 0.071);
        capacity_add(&bal, 1, 15, 0.075);
    }
    int active[2] = {1, 1};
    double cap[2];
    assert_int_equal(capacity_solve(&bal, active, B, cap), 0);
    assert_in_range((long)cap[1], 12, 18);
    capacity_resting(&bal, active, B, 0.03, cap);
    assert_in_range((long)cap[1], 12, 18);
    // Spread out (100 and 200 samples), the same device's line is trusted: a fixed cost of
    // 0.04 s and 0.2 ms a sample give a different share than the rate would.
    capacity_reset(&bal, 2);
    feed(&bal, 0, 0.040, 0.0002, 100, 200, 3);
    feed(&bal, 1, 0.0, 0.005, 10, 20, 3);
    assert_int_equal(capacity_solve(&bal, active, B, cap), 0);
    // T = 0.04 + 0.0002 n0 = 0.005 (200 - n0): n0 = 0.96 / 0.0052 = 184.6
    assert_true(fabs(cap[0] - 0.96 / 0.0052) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_finish_times),
        cmocka_unit_test(test_fixed_cost_too_high),
        cmocka_unit_test(test_needs_every_active_device),
        cmocka_unit_test(test_old_timings_fade),
        cmocka_unit_test(test_rate_model_fallback),
        cmocka_unit_test(test_resting),
        cmocka_unit_test(test_narrow_spread_is_a_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
