// ranks.h under mpirun -np 3 (ctest runs it so): the ordered sum gives every rank the bits of
// ((r0 + r1) + r2), and so does the reduce-scatter on each rank's slice (as float or as
// bfloat16), broadcasts and gathers carry rank 0's and every rank's values. span.h over the
// job's ranks gives the same, and over this process alone (span_alone) only its own.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sharding/ranks.h"
#include "sharding/span.h"
#include "core/rng.h"

// Rank r's i-th value: varied magnitudes, so the order of the sum shows in the bits.
static float value(int r, size_t i) {
    uint64_t x = ht_mix64((uint64_t)r * 1000003u + i);
    return (float)((double)(x >> 40) / (1 << 24) - 0.5) * (float)(1 << (i % 20));
}

// buf: this rank's values; want: the rank-order sum ((v0 + v1) + v2) ... of every rank's.
static void fill(float *buf, float *want, size_t n) {
    const int size = ranks_size(), rank = ranks_rank();
    for (size_t i = 0; i < n; i++) {
        buf[i] = value(rank, i);
        float s = value(0, i);
        for (int r = 1; r < size; r++) s += value(r, i);
        want[i] = s;
    }
}

static void test_sum_ordered(void **state) {
    (void)state;
    int size = ranks_size();
    const char *world = getenv("OMPI_COMM_WORLD_SIZE"); // set by Open MPI's mpirun
    assert_non_null(world);
    assert_int_equal(size, atoi(world));
    assert_true(size > 1);
    enum { N = 100003 };
    float *buf = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    fill(buf, want, N);
    ht_error e;
    if (ranks_sum_ordered(buf, N, &e) < 0) fail_msg("%s", e.msg);
    assert_memory_equal(buf, want, sizeof(float) * N);
    free(buf);
    free(want);
}

// The reduce-scatter: this rank's slice holds the ordered sum's bits, the rest of the buffer
// is untouched; the slices tile [0, n) in rank order, aligned, none longer than its share (so
// each rank receives (R-1)/R of n); gathering the slices gives every rank every owner's values.
static void test_reduce_scatter_and_gather(void **state) {
    (void)state;
    int size = ranks_size(), rank = ranks_rank();
    enum { N = 100003 };
    float *buf = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    size_t end = 0, share = (N + (size_t)size - 1) / (size_t)size;
    for (int r = 0; r < size; r++) {
        size_t lo, hi;
        ranks_slice(N, r, &lo, &hi);
        assert_int_equal(lo, end);
        assert_int_equal(lo % RANKS_SLICE_ALIGN, 0);
        assert_true(hi - lo <= share + RANKS_SLICE_ALIGN);
        end = hi;
    }
    assert_int_equal(end, N);
    fill(buf, want, N);
    ht_error e;
    if (ranks_reduce_scatter(buf, N, RANKS_F32, &e) < 0) fail_msg("%s", e.msg);
    size_t lo, hi;
    ranks_slice(N, rank, &lo, &hi);
    assert_true(hi > lo);
    assert_memory_equal(buf + lo, want + lo, sizeof(float) * (hi - lo));
    for (size_t i = 0; i < N; i++)
        if (i < lo || i >= hi) assert_true(buf[i] == value(rank, i));
    if (ranks_allgather_slices(buf, N, &e) < 0) fail_msg("%s", e.msg);
    assert_memory_equal(buf, want, sizeof(float) * N);
    free(buf);
    free(want);
}

// bfloat16 transport: values bfloat16 holds exactly sum as in float; others round to nearest,
// ties to even, on every rank (the owner's own values too) before the float sum.
static void test_reduce_scatter_bf16(void **state) {
    (void)state;
    int size = ranks_size(), rank = ranks_rank();
    enum { N = 64 };
    float buf[N], want[N];
    for (size_t i = 0; i < N; i++) {
        buf[i] = (float)(rank + 1) * (float)i - 7.0f; // small integers: exact in bfloat16
        want[i] = 0;
        for (int r = 0; r < size; r++) want[i] += (float)(r + 1) * (float)i - 7.0f;
    }
    // Halfway cases on rank 0 (every other rank adds 0 there): 1 + 2^-8 lies between 1 and
    // 1 + 2^-7 and goes to the even 1; 1 + 3 * 2^-8 goes to 1 + 2^-6; 1 + 2^-8 + 2^-12 is
    // above the halfway point and goes up to 1 + 2^-7.
    const float in[3] = {1.00390625f, 1.01171875f, 1.00415039f}, out[3] = {1.0f, 1.015625f, 1.0078125f};
    for (int k = 0; k < 3; k++) {
        buf[k] = rank == 0 ? in[k] : 0.0f;
        want[k] = out[k];
    }
    ht_error e;
    if (ranks_reduce_scatter(buf, N, RANKS_BF16, &e) < 0 || ranks_allgather_slices(buf, N, &e) < 0)
        fail_msg("%s", e.msg);
    assert_memory_equal(buf, want, sizeof want);
}

static void test_bcast_and_gather(void **state) {
    (void)state;
    int size = ranks_size(), rank = ranks_rank();
    ht_error e;
    float v[3] = {(float)rank, 1.5f * rank, -2.0f};
    if (ranks_bcast(v, 3, &e) < 0) fail_msg("%s", e.msg);
    assert_true(v[0] == 0 && v[1] == 0 && v[2] == -2.0f);
    double mine[2] = {rank, 10.0 * rank}, *all = malloc(sizeof(double) * 2 * (size_t)size);
    if (ranks_allgather(mine, all, 2, &e) < 0) fail_msg("%s", e.msg);
    for (int r = 0; r < size; r++) assert_true(all[2 * r] == r && all[2 * r + 1] == 10.0 * r);
    free(all);
    char text[32] = "";
    if (rank == 0) strcpy(text, "from rank 0");
    if (ranks_bcast_text(text, sizeof text, &e) < 0) fail_msg("%s", e.msg);
    assert_string_equal(text, "from rank 0");
}

// Rank r's r + 2 floats (r * 100 + i), rank 1's none: every rank gets them all in rank order,
// blocking in place and started-then-finished; bf16 rounding is nearest-even.
static void test_gather_uneven(void **state) {
    (void)state;
    int size = ranks_size(), rank = ranks_rank(), total = 0;
    int *counts = malloc(sizeof(int) * (size_t)size);
    for (int r = 0; r < size; r++) total += counts[r] = r == 1 ? 0 : r + 2;
    float *a = calloc((size_t)total + 1, sizeof(float)), *b = calloc((size_t)total + 1, sizeof(float));
    float mine[64];
    int at = 0;
    for (int r = 0; r < rank; r++) at += counts[r];
    for (int i = 0; i < counts[rank]; i++) a[at + i] = mine[i] = (float)(rank * 100 + i);
    ht_error e;
    ranks_ag *req;
    if (ranks_allgatherv(a, counts, &e) < 0 || ranks_ag_start(&req, mine, counts, b, &e) < 0)
        fail_msg("%s", e.msg);
    while (!ranks_ag_test(req)) {}
    if (ranks_ag_finish(req, &e) < 0) fail_msg("%s", e.msg);
    at = 0;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < counts[r]; i++, at++) assert_true(a[at] == r * 100 + i && b[at] == a[at]);
    // The vector form gives the scalar one's bits, NaN included.
    float v[8] = {1.0f + 0x1p-8f, 1.0f + 0x1.8p-7f, -3.14159f, 1e-40f,
                  INFINITY,        -INFINITY,          NAN,       3.4e38f};
    float w[8];
    memcpy(w, v, sizeof v);
    ranks_bf16_round_n(w, 8);
    for (int i = 0; i < 8; i++) {
        const float r = ranks_bf16_round(v[i]);
        assert_memory_equal(&w[i], &r, sizeof r);
    }
    assert_true(isnan(w[6]) && w[7] == INFINITY && w[2] == -3.140625f);
    assert_true(ranks_bf16_round(1.0f + 0x1p-8f) == 1.0f);            // halfway: to even
    assert_true(ranks_bf16_round(1.0f + 0x1.8p-7f) == 1.0f + 0x1p-6f); // halfway: to even
    free(a);
    free(b);
    free(counts);
}

// The span of the job: a range begun, polled and finished holds the ordered sum in this rank's
// slice of it and nothing else changed; a gather begun and finished every rank's values. The
// span of this process alone under the same mpirun: every collective leaves this rank's own
// values (a sum over the job's ranks would not).
static void test_span_job_and_alone(void **state) {
    (void)state;
    const span job = span_job(), me = span_alone();
    assert_int_equal(job.size, ranks_size());
    assert_int_equal(job.rank, ranks_rank());
    assert_true(job.size > 1 && me.size == 1 && me.rank == 0);
    enum { N = 4099, A = 1000, B = 3001 };
    float *buf = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    fill(buf, want, N);
    ht_error e;
    span_op op;
    if (span_reduce_begin(job, &op, buf, N, A, B, SPAN_F32, &e) < 0) fail_msg("%s", e.msg);
    assert_non_null(op.rs);
    while (!span_poll(&op)) {}
    if (span_finish(&op, buf, &e) < 0) fail_msg("%s", e.msg);
    assert_null(op.rs);
    size_t lo, hi;
    span_slice(job, N, job.rank, &lo, &hi);
    for (size_t i = 0; i < N; i++) {
        const int summed = i >= A && i < B && i >= lo && i < hi;
        assert_true(buf[i] == (summed ? want[i] : value(job.rank, i)));
    }
    int counts[8];
    float mine[2] = {(float)job.rank, -1.0f}, all[16];
    for (int r = 0; r < job.size; r++) counts[r] = 2;
    if (span_gather_begin(job, &op, mine, counts, all, &e) < 0 || span_finish(&op, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    for (int r = 0; r < job.size; r++) assert_true(all[2 * r] == r && all[2 * r + 1] == -1.0f);

    fill(buf, want, N);
    if (span_sum(me, buf, N, &e) < 0 || span_reduce_scatter(me, buf, N, SPAN_F32, &e) < 0 ||
        span_allgather_slices(me, buf, N, &e) < 0 ||
        span_reduce_begin(me, &op, buf, N, 0, N, SPAN_F32, &e) < 0)
        fail_msg("%s", e.msg);
    assert_true(span_poll(&op));
    if (span_finish(&op, buf, &e) < 0) fail_msg("%s", e.msg);
    for (size_t i = 0; i < N; i++) assert_true(buf[i] == value(job.rank, i));
    span_slice(me, N, 0, &lo, &hi);
    assert_true(lo == 0 && hi == N);
    double d = job.rank + 0.5, dall[8] = {0};
    char text[16] = "", tall[32];
    snprintf(text, sizeof text, "rank %d", job.rank);
    counts[0] = 2;
    all[1] = 7.0f;
    if (span_allgather(me, &d, dall, 1, &e) < 0 || span_allgather_text(me, text, tall, 16, &e) < 0 ||
        span_bcast_text(me, text, sizeof text, &e) < 0 ||
        span_gather_begin(me, &op, mine, counts, all, &e) < 0 || span_finish(&op, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    assert_true(dall[0] == job.rank + 0.5 && dall[1] == 0);
    assert_string_equal(tall, text);
    assert_true(all[0] == job.rank && all[1] == -1.0f);
    free(buf);
    free(want);
}

int main(int argc, char **argv) {
    ht_error e;
    if (ranks_init(&argc, &argv, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_ordered),
        cmocka_unit_test(test_bcast_and_gather),
        cmocka_unit_test(test_reduce_scatter_and_gather),
        cmocka_unit_test(test_reduce_scatter_bf16),
        cmocka_unit_test(test_gather_uneven),
        cmocka_unit_test(test_span_job_and_alone),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ranks_finalize();
    return rc;
}
