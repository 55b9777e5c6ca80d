// The collectives of span.h: over one rank (a lone process, or an engine alone under mpirun)
// copies here, over the job's ranks ranks.c's MPI.
#include "sharding/span.h"

#include <stdio.h>
#include <string.h>

#include "sharding/ranks.h"

int span_init(int *argc, char ***argv, ht_error *e) { return ranks_init(argc, argv, e); }
void span_finalize(void) { ranks_finalize(); }
void span_abort(int code) { ranks_abort(code); }
double span_take_comm_s(void) { return ranks_take_comm_s(); }

span span_job(void) { return (span){.size = ranks_size(), .rank = ranks_rank()}; }
span span_alone(void) { return (span){.size = 1, .rank = 0}; }

static ranks_dtype dtype_of(span_dtype dt) { return dt == SPAN_BF16 ? RANKS_BF16 : RANKS_F32; }

int span_allgather(span s, const double *mine, double *all, int n, ht_error *e) {
    if (s.size > 1) return ranks_allgather(mine, all, n, e);
    memcpy(all, mine, sizeof(double) * (size_t)n);
    return 0;
}

int span_allgather_text(span s, const char *mine, char *all, size_t cap, ht_error *e) {
    if (s.size > 1) return ranks_allgather_text(mine, all, cap, e);
    memset(all, 0, cap);
    snprintf(all, cap, "%s", mine);
    return 0;
}

int span_bcast_text(span s, char *text, size_t cap, ht_error *e) {
    return s.size > 1 ? ranks_bcast_text(text, cap, e) : 0;
}

int span_sum(span s, float *buf, size_t n, ht_error *e) {
    return s.size > 1 ? ranks_sum_ordered(buf, n, e) : 0;
}

void span_slice(span s, size_t n, int r, size_t *lo, size_t *hi) {
    if (s.size > 1) {
        ranks_slice(n, r, lo, hi);
        return;
    }
    *lo = 0;
    *hi = n;
}

void span_bf16_round_n(float *x, size_t n) { ranks_bf16_round_n(x, n); }

int span_reduce_begin(span s, span_op *op, const float *buf, size_t n, size_t a, size_t b,
                      span_dtype dt, ht_error *e) {
    *op = (span_op){0};
    if (s.size == 1) return 0; // this rank's slice is the whole, and the sum its own
    return ranks_rs_start(&op->rs, buf, n, a, b, dtype_of(dt), e);
}

int span_gather_begin(span s, span_op *op, const float *mine, const int *counts, float *all,
                      ht_error *e) {
    *op = (span_op){0};
    if (s.size == 1) {
        memcpy(all, mine, sizeof(float) * (size_t)counts[0]);
        return 0;
    }
    return ranks_ag_start(&op->ag, mine, counts, all, e);
}

int span_poll(span_op *op) {
    if (op->rs) return ranks_rs_test(op->rs);
    return op->ag ? ranks_ag_test(op->ag) : 1;
}

int span_finish(span_op *op, float *buf, ht_error *e) {
    int rc = 0;
    if (op->rs) rc = ranks_rs_finish(op->rs, buf, e);
    else if (op->ag) rc = ranks_ag_finish(op->ag, e);
    *op = (span_op){0};
    return rc;
}

int span_reduce_scatter(span s, float *buf, size_t n, span_dtype dt, ht_error *e) {
    return s.size > 1 ? ranks_reduce_scatter(buf, n, dtype_of(dt), e) : 0;
}

int span_allgather_slices(span s, float *buf, size_t n, ht_error *e) {
    return s.size > 1 ? ranks_allgather_slices(buf, n, e) : 0;
}

int span_allgatherv(span s, float *all, const int *counts, ht_error *e) {
    return s.size > 1 ? ranks_allgatherv(all, counts, e) : 0;
}
