// The ranks a piece of work spans: every rank of the job (under mpirun) or this process alone,
// and the collectives over them. Over one rank every collective is a copy, so the engine and
// the app run one code path alone and under mpirun; ranks.c does the MPI behind it.
#ifndef HETRAIN_SPAN_H
#define HETRAIN_SPAN_H

#include <stddef.h>

#include "core/common.h"

// The job: main starts it (MPI when the process was started by mpirun, else a job of one
// rank), ends it, or on an error that other ranks may be waiting on, ends every rank of it
// with exit status code (nothing in a job of one rank).
int span_init(int *argc, char ***argv, ht_error *e);
void span_finalize(void);
void span_abort(int code);
// Seconds spent in collectives between ranks since the last call (comm_s in the metrics).
double span_take_comm_s(void);

// The ranks work spans, this process being `rank` of them.
typedef struct span {
    int size;
    int rank;
} span;
span span_job(void);   // every rank of the job
span span_alone(void); // this process: one rank, even under mpirun

// Every rank's n doubles, in rank order, into all (s.size * n).
int span_allgather(span s, const double *mine, double *all, int n, ht_error *e);
// Every rank's string (NUL-terminated, cut to cap bytes), in rank order, into all (s.size * cap
// bytes; rank r's at all + r * cap).
int span_allgather_text(span s, const char *mine, char *all, size_t cap, ht_error *e);
// A string (NUL-terminated, at most cap bytes) from rank 0 to every rank.
int span_bcast_text(span s, char *text, size_t cap, ht_error *e);
// n floats summed over the ranks in rank order, ((r0 + r1) + r2) + ..., the same bits on every
// rank.
int span_sum(span s, float *buf, size_t n, ht_error *e);

// The ranks' slices of n floats: rank r's is [lo, hi), equal up to SPAN_SLICE_ALIGN floats, in
// rank order; a slice may be empty. One rank's is the whole.
#define SPAN_SLICE_ALIGN 16
void span_slice(span s, size_t n, int r, size_t *lo, size_t *hi);
// How a reduction carries the ranks' values: as they are, or rounded to bfloat16 (half the
// bytes; the sums are still taken in float, but of rounded values).
typedef enum span_dtype { SPAN_F32, SPAN_BF16 } span_dtype;
// The n floats of x as SPAN_BF16 carries them: rounded to bfloat16 (to nearest, ties to even)
// and back, in place.
void span_bf16_round_n(float *x, size_t n);

// A collective started now and finished later, so that it travels while the caller computes:
// zero when none is under way (or over one rank, where there was nothing to send).
typedef struct span_op {
    struct ranks_rs *rs;
    struct ranks_ag *ag;
} span_op;
// The reduction of the range [a, b) of buf (n floats): each rank's slice (span_slice) cut to the
// range is summed there, in rank order (as span_sum), under dt. Every rank begins the same
// ranges in the same order; buf's range stays unchanged until span_finish.
int span_reduce_begin(span s, span_op *op, const float *buf, size_t n, size_t a, size_t b,
                      span_dtype dt, ht_error *e);
// The gather of every rank's counts[r] floats, in rank order, into all (their sum): this rank's
// from mine, which stays unchanged until span_finish; counts is copied. Over one rank mine is
// copied into all now.
int span_gather_begin(span s, span_op *op, const float *mine, const int *counts, float *all,
                      ht_error *e);
// Moves op along (Open MPI's TCP transport moves data only inside MPI calls) and says whether it
// has arrived (none under way: 1).
int span_poll(span_op *op);
// Waits for op and ends it (op is zero after): a reduction writes this rank's part of its range
// into buf (NULL: drops it), a gather has written all. e may be NULL (a failure dropped).
int span_finish(span_op *op, float *buf, ht_error *e);

// The whole of buf (n floats) reduced so at once: this rank's slice of buf holds the sum, the
// rest of buf is left as it was.
int span_reduce_scatter(span s, float *buf, size_t n, span_dtype dt, ht_error *e);
// Every rank's slice of buf (span_slice) into every rank's buf.
int span_allgather_slices(span s, float *buf, size_t n, ht_error *e);
// Every rank's counts[r] floats, in rank order, into all (their sum): this rank's block, at
// its place in all, is sent as it is there.
int span_allgatherv(span s, float *all, const int *counts, ht_error *e);

#endif
