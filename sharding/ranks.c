// MPI behind ranks.h.
#include "ranks.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int size = 1, rank = 0, started = 0;
static double comm_s = 0;

static int under_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static int mpi_fail(ht_error *e, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ht_fail(e, "rank %d: %s: %.*s", rank, call, len, msg);
}

int ranks_init(int *argc, char ***argv, ht_error *e) {
    if (!under_mpirun()) return 0;
    int provided, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return ht_fail(e, "MPI_Init_thread failed (%d)", rc);
    started = 1;
    // Errors come back as codes, so that a failed call is a message, not an abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return 0;
}

void ranks_finalize(void) {
    if (started) MPI_Finalize();
    started = 0;
}

int ranks_rank(void) { return rank; }
int ranks_size(void) { return size; }

double ranks_take_comm_s(void) {
    double s = comm_s;
    comm_s = 0;
    return s;
}

int ranks_sum_ordered(float *buf, size_t n, ht_error *e) {
    if (size == 1) return 0;
    if (n > (size_t)1 << 30) return ht_fail(e, "rank %d: %zu floats in one reduction", rank, n);
    double t0 = MPI_Wtime();
    float *all = NULL;
    if (rank == 0 && !(all = ht_malloc(n * (size_t)size, sizeof(float), e))) return -1;
    int rc = MPI_Gather(buf, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && rank == 0) {
        memcpy(buf, all, n * sizeof(float));
        for (int r = 1; r < size; r++) {
            const float *p = all + (size_t)r * n;
            for (size_t i = 0; i < n; i++) buf[i] += p[i];
        }
    }
    free(all);
    if (rc == MPI_SUCCESS) rc = MPI_Bcast(buf, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    comm_s += MPI_Wtime() - t0;
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, "summing over the ranks", rc);
}

int ranks_bcast(float *buf, size_t n, ht_error *e) {
    if (size == 1) return 0;
    double t0 = MPI_Wtime();
    int rc = MPI_Bcast(buf, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    comm_s += MPI_Wtime() - t0;
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, "MPI_Bcast", rc);
}

int ranks_allgather(const double *mine, double *all, int n, ht_error *e) {
    if (size == 1) {
        memcpy(all, mine, sizeof(double) * (size_t)n);
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = MPI_Allgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD);
    comm_s += MPI_Wtime() - t0;
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, "MPI_Allgather", rc);
}

int ranks_bcast_text(char *text, size_t cap, ht_error *e) {
    if (size == 1) return 0;
    int rc = MPI_Bcast(text, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
    text[cap - 1] = 0;
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, "MPI_Bcast", rc);
}

int ranks_allgather_text(const char *mine, char *all, size_t cap, ht_error *e) {
    char *buf = ht_calloc(1, cap, e);
    if (!buf) return -1;
    snprintf(buf, cap, "%s", mine);
    int rc = MPI_SUCCESS;
    if (size == 1) memcpy(all, buf, cap);
    else rc = MPI_Allgather(buf, (int)cap, MPI_CHAR, all, (int)cap, MPI_CHAR, MPI_COMM_WORLD);
    free(buf);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, "MPI_Allgather", rc);
}

void ranks_abort(int code) {
    if (started && size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}
