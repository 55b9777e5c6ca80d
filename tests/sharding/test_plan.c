// Shard planner properties over many (batch, weights) pairs: every position goes to exactly
// one device, equal weights give x[i::n], shares follow the weights within one sample, and
// each device's positions are spread evenly.
#include <math.h>
#include <string.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sharding/plan.h"
#include "core/rng.h"

static void test_equal_capacities_is_index_modulo(void **state) {
    (void)state;
    double w[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int n = 1; n <= 8; n++) {
        for (int B = 1; B <= 300; B += 7) {
            shard_plan p;
            assert_int_equal(shard_plan_init(&p, w, n, B, NULL), 0);
            for (int j = 0; j < B; j++) assert_int_equal(p.pattern[j], j % n);
            shard_plan_free(&p);
        }
    }
}

static void test_coverage_and_proportion(void **state) {
    (void)state;
    ht_rng r;
    ht_rng_seed(&r, 42);
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)ht_rng_below(&r, 6);
        int B = 1 + (int)ht_rng_below(&r, 2000);
        double w[6], total = 0;
        for (int d = 0; d < n; d++) total += w[d] = 0.05 + 10 * ht_rng_double(&r);
        shard_plan p;
        assert_int_equal(shard_plan_init(&p, w, n, B, NULL), 0);
        int count[6] = {0};
        for (int j = 0; j < B; j++) {
            assert_true(p.pattern[j] >= 0 && p.pattern[j] < n);
            count[p.pattern[j]]++;
        }
        int sum = 0;
        for (int d = 0; d < n; d++) {
            assert_int_equal(count[d], p.count[d]);
            double exact = B * w[d] / total;
            // Within one sample of the exact share.
            if (fabs(count[d] - exact) >= 1.0)
                fail_msg("B=%d n=%d device %d: %d positions for exact share %.3f", B, n, d,
                         count[d], exact);
            sum += count[d];
        }
        assert_int_equal(sum, B);
        // Evenly spread: in every prefix of length k, device d has within 2 of k*count/B
        // (smooth weighted round robin's bound; a block-wise split would be off by up to B/2).
        int seen[6] = {0};
        for (int j = 0; j < B; j++) {
            seen[p.pattern[j]]++;
            for (int d = 0; d < n; d++) {
                double want = (double)(j + 1) * p.count[d] / B;
                if (fabs(seen[d] - want) > 2.0)
                    fail_msg("B=%d: device %d has %d of the first %d positions, expected ~%.2f",
                             B, d, seen[d], j + 1, want);
            }
        }
        shard_plan_free(&p);
    }
}

static void test_bad_capacities_rejected(void **state) {
    (void)state;
    double w[2] = {1, 0};
    shard_plan p;
    ht_error e;
    assert_int_equal(shard_plan_init(&p, w, 2, 10, &e), -1);
    assert_non_null(strstr(e.msg, "capacity"));
    double nanw[1] = {NAN};
    assert_int_equal(shard_plan_init(&p, nanw, 1, 10, &e), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_capacities_is_index_modulo),
        cmocka_unit_test(test_coverage_and_proportion),
        cmocka_unit_test(test_bad_capacities_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
