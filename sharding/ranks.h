// The processes of one training job (MPI ranks under mpirun; one rank otherwise). Everything
// hetrain asks of MPI goes through here, so the rest of the code sees ranks, not MPI. Without
// mpirun (no Open MPI environment) MPI is never initialised: no start-up cost, no warnings.
#ifndef HETRAIN_RANKS_H
#define HETRAIN_RANKS_H

#include <stddef.h>

#include "core/common.h"

// Starts MPI when the process was started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMIx's
// PMIX_RANK, in the environment); a lone process is rank 0 of 1.
int ranks_init(int *argc, char ***argv, ht_error *e);
void ranks_finalize(void);
int ranks_rank(void);
int ranks_size(void);
// Seconds spent in MPI calls since the last call (comm_s in the metrics).
double ranks_take_comm_s(void);

// Sums n floats over the ranks in rank order, ((r0 + r1) + r2) + ..., the same bits on every
// rank: rank 0 gathers, adds in order and broadcasts the sum into buf everywhere.
int ranks_sum_ordered(float *buf, size_t n, ht_error *e);
// The ranks' slices of n floats: rank r's is [lo, hi), equal up to RANKS_SLICE_ALIGN floats,
// in rank order; a slice may be empty.
#define RANKS_SLICE_ALIGN 16
void ranks_slice(size_t n, int r, size_t *lo, size_t *hi);
// How the reduce-scatter carries the ranks' values: as they are, or rounded to bfloat16 (half
// the bytes; the sums are still taken in float, but of rounded values).
typedef enum ranks_dtype { RANKS_F32, RANKS_BF16 } ranks_dtype;
// x as RANKS_BF16 carries it: rounded to bfloat16 (to nearest, ties to even) and back; the n
// floats of x so, in place (vector code).
float ranks_bf16_round(float x);
void ranks_bf16_round_n(float *x, size_t n);
// Reduce-scatter in rank order: afterwards this rank's slice of buf (ranks_slice) holds
// ((x_0 + x_1) + x_2) + ... over every rank's buf, the same bits as ranks_sum_ordered gives;
// the rest of buf is left as it was. Each rank sends and receives (R-1)/R of n values (one
// all-to-all exchange of slices, then the sums in rank order here). Under RANKS_BF16 every
// rank's values are rounded first, its own included, so the sum does not depend on which rank
// owns the slice.
int ranks_reduce_scatter(float *buf, size_t n, ranks_dtype dt, ht_error *e);
// The same for the range [a, b) of buf (n floats) alone, started now and finished later, so
// that it travels while the caller computes: each rank's slice cut to the range is summed
// there. Every rank starts the same ranges in the same order. buf's range must stay unchanged
// until ranks_rs_finish, which waits, writes this rank's part of the range (buf NULL: drops
// it) and frees r. ranks_rs_test lets MPI move it along (Open MPI's TCP transport moves only
// inside MPI calls) and says whether it arrived. A lone process gets r NULL: nothing to do.
typedef struct ranks_rs ranks_rs;
int ranks_rs_start(ranks_rs **r, const float *buf, size_t n, size_t a, size_t b,
                   ranks_dtype dt, ht_error *e);
int ranks_rs_test(ranks_rs *r);
int ranks_rs_finish(ranks_rs *r, float *buf, ht_error *e);
// Every rank's slice of buf (ranks_slice) into every rank's buf: (R-1)/R of n floats in and out.
int ranks_allgather_slices(float *buf, size_t n, ht_error *e);
// Every rank's counts[r] floats, in rank order, into all (their sum): this rank's block, at
// its place in all, is sent as it is there.
int ranks_allgatherv(float *all, const int *counts, ht_error *e);
// The same started now and finished later (as ranks_rs_*): this rank's counts[rank] floats
// from mine, which stays unchanged until ranks_ag_finish; all is written by then. counts is
// copied. A lone process copies mine into all and gets r NULL.
typedef struct ranks_ag ranks_ag;
int ranks_ag_start(ranks_ag **r, const float *mine, const int *counts, float *all, ht_error *e);
int ranks_ag_test(ranks_ag *r);
int ranks_ag_finish(ranks_ag *r, ht_error *e);
// Rank 0's n floats into buf on every rank.
int ranks_bcast(float *buf, size_t n, ht_error *e);
// Every rank's `n` doubles, in rank order, into all (ranks_size() * n).
int ranks_allgather(const double *mine, double *all, int n, ht_error *e);
// Every rank's string (NUL-terminated, cut to cap bytes), in rank order, into all
// (ranks_size() * cap bytes; rank r's at all + r * cap).
int ranks_allgather_text(const char *mine, char *all, size_t cap, ht_error *e);
// Ends every rank of the job with exit status code (MPI_Abort): for an error on one rank while
// the others may be waiting for it. Does nothing in a lone process.
void ranks_abort(int code);
// A string (NUL-terminated, at most cap bytes) from rank 0 to every rank.
int ranks_bcast_text(char *text, size_t cap, ht_error *e);

#endif
