// The processes of one training job (MPI ranks under mpirun; one rank otherwise). Everything
// hetrain asks of MPI goes through here, so the rest of the code sees ranks, not MPI. Without
// mpirun (no Open MPI environment) MPI is never initialised: no start-up cost, no warnings.
#ifndef HETRAIN_RANKS_H
#define HETRAIN_RANKS_H

#include <stddef.h>

#include "common.h"

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
