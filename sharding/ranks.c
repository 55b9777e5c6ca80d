// MPI behind ranks.h.
#include "sharding/ranks.h"

#include <mpi.h>
#include <stdint.h>
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

void ranks_slice(size_t n, int r, size_t *lo, size_t *hi) {
    size_t per = (n + (size_t)size - 1) / (size_t)size;
    per = (per + RANKS_SLICE_ALIGN - 1) / RANKS_SLICE_ALIGN * RANKS_SLICE_ALIGN;
    *lo = (size_t)r * per < n ? (size_t)r * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

// A float's bits rounded to bfloat16's (the low 16 bits zero): to nearest, ties to even; a
// NaN stays a NaN (sign and top bits kept, the quiet bit set). Branch-free, so that loops over
// it vectorise.
static inline uint32_t bf16_bits(uint32_t b) {
    const uint32_t nan = (b & 0x7fffffffu) > 0x7f800000u;
    return nan ? (b | 0x400000u) & 0xffff0000u : (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(bf16_bits(u) >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ranks_bf16_round(float x) { return from_bf16(to_bf16(x)); }

void ranks_bf16_round_n(float *x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, sizeof b);
        b = bf16_bits(b);
        memcpy(x + i, &b, sizeof b);
    }
}

struct ranks_rs {
    MPI_Request req;
    ranks_dtype dt;
    size_t lo, m;      // this rank's part of the range: [lo, lo + m)
    void *in, *out;    // every rank's values of that part, in rank order; bf16: what is sent
    int *counts;       // send counts, displacements; receive counts, displacements (4 R)
};

// rank r's part of [a, b): its slice of [0, n) cut to the range.
static void part_of(size_t n, int r, size_t a, size_t b, size_t *lo, size_t *hi) {
    ranks_slice(n, r, lo, hi);
    if (*lo < a) *lo = a;
    if (*hi > b) *hi = b;
    if (*hi < *lo) *hi = *lo;
}

static void rs_free(ranks_rs *r) {
    if (!r) return;
    free(r->in);
    free(r->out);
    free(r->counts);
    free(r);
}

int ranks_rs_start(ranks_rs **out, const float *buf, size_t n, size_t a, size_t b,
                   ranks_dtype dt, ht_error *e) {
    *out = NULL;
    if (size == 1) return 0;
    if (n > (size_t)1 << 30) return ht_fail(e, "rank %d: %zu floats in one reduction", rank, n);
    double t0 = MPI_Wtime();
    ranks_rs *r = ht_calloc(1, sizeof *r, e);
    if (!r) return -1;
    r->dt = dt;
    size_t lo, hi, esz = dt == RANKS_BF16 ? sizeof(uint16_t) : sizeof(float);
    part_of(n, rank, a, b, &lo, &hi);
    r->lo = lo;
    r->m = hi - lo;
    r->counts = ht_malloc((size_t)size * 4, sizeof(int), e);
    r->in = r->counts ? ht_malloc(r->m * (size_t)size + 1, esz, e) : NULL;
    if (r->in && dt == RANKS_BF16) r->out = ht_malloc(b - a + 1, esz, e);
    if (!r->in || (dt == RANKS_BF16 && !r->out)) {
        rs_free(r);
        return -1;
    }
    int *sc = r->counts, *sd = sc + size, *rc = sc + 2 * size, *rd = sc + 3 * size;
    for (int q = 0; q < size; q++) {
        size_t ql, qh;
        part_of(n, q, a, b, &ql, &qh);
        sc[q] = (int)(qh - ql);
        sd[q] = (int)(dt == RANKS_BF16 ? ql - a : ql);
        rc[q] = (int)r->m;
        rd[q] = (int)(r->m * (size_t)q);
    }
    int err;
    if (dt == RANKS_BF16) {
        uint16_t *h = r->out;
        for (size_t i = a; i < b; i++) h[i - a] = to_bf16(buf[i]);
        err = MPI_Ialltoallv(r->out, sc, sd, MPI_UINT16_T, r->in, rc, rd, MPI_UINT16_T,
                             MPI_COMM_WORLD, &r->req);
    } else {
        err = MPI_Ialltoallv(buf, sc, sd, MPI_FLOAT, r->in, rc, rd, MPI_FLOAT, MPI_COMM_WORLD,
                             &r->req);
    }
    comm_s += MPI_Wtime() - t0;
    if (err != MPI_SUCCESS) {
        rs_free(r);
        return mpi_fail(e, "starting a reduce-scatter over the ranks", err);
    }
    *out = r;
    return 0;
}

// Whether a started request has arrived (moving it along); an error counts as arrived, for
// the finish to report.
static int test_request(MPI_Request *req) {
    double t0 = MPI_Wtime();
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
    comm_s += MPI_Wtime() - t0;
    return done;
}

// Waits for a started request; MPI's status.
static int wait_request(MPI_Request *req) {
    double t0 = MPI_Wtime();
    int err = MPI_Wait(req, MPI_STATUS_IGNORE);
    comm_s += MPI_Wtime() - t0;
    return err;
}

int ranks_rs_test(ranks_rs *r) { return r ? test_request(&r->req) : 1; }

int ranks_rs_finish(ranks_rs *r, float *buf, ht_error *e) {
    if (!r) return 0;
    int err = wait_request(&r->req);
    if (err == MPI_SUCCESS && buf) {
        float *dst = buf + r->lo;
        const size_t m = r->m;
        if (r->dt == RANKS_F32) {
            const float *x = r->in;
            memcpy(dst, x, m * sizeof(float));
            for (int q = 1; q < size; q++)
                for (size_t i = 0; i < m; i++) dst[i] += x[(size_t)q * m + i];
        } else {
            const uint16_t *x = r->in;
            for (size_t i = 0; i < m; i++) dst[i] = from_bf16(x[i]);
            for (int q = 1; q < size; q++)
                for (size_t i = 0; i < m; i++) dst[i] += from_bf16(x[(size_t)q * m + i]);
        }
    }
    rs_free(r);
    return err == MPI_SUCCESS ? 0 : mpi_fail(e, "reduce-scatter over the ranks", err);
}

int ranks_reduce_scatter(float *buf, size_t n, ranks_dtype dt, ht_error *e) {
    ranks_rs *r;
    if (ranks_rs_start(&r, buf, n, 0, n, dt, e) < 0) return -1;
    return ranks_rs_finish(r, buf, e);
}


// counts as displacements, after a check that the sum is a valid count: -1 with e if not.
static int displacements(const int *counts, int *displ, ht_error *e) {
    long long sum = 0;
    for (int r = 0; r < size; r++) {
        if (counts[r] < 0) return ht_fail(e, "rank %d: %d floats from rank %d", rank, counts[r], r);
        displ[r] = (int)sum;
        sum += counts[r];
        if (sum > (1LL << 30)) return ht_fail(e, "rank %d: %lld floats in one gather", rank, sum);
    }
    return 0;
}

int ranks_allgatherv(float *all, const int *counts, ht_error *e) {
    if (size == 1) return 0;
    double t0 = MPI_Wtime();
    int *displ = ht_malloc((size_t)size, sizeof(int), e);
    if (!displ || displacements(counts, displ, e) < 0) {
        free(displ);
        return -1;
    }
    int err = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displ, MPI_FLOAT,
                             MPI_COMM_WORLD);
    free(displ);
    comm_s += MPI_Wtime() - t0;
    return err == MPI_SUCCESS ? 0 : mpi_fail(e, "gathering the ranks' parts", err);
}

int ranks_allgather_slices(float *buf, size_t n, ht_error *e) {
    if (size == 1) return 0;
    if (n > (size_t)1 << 30) return ht_fail(e, "rank %d: %zu floats in one gather", rank, n);
    // The slices lie in rank order, so their counts place them.
    int *c = ht_malloc((size_t)size, sizeof(int), e);
    if (!c) return -1;
    for (int r = 0; r < size; r++) {
        size_t lo, hi;
        ranks_slice(n, r, &lo, &hi);
        c[r] = (int)(hi - lo);
    }
    int rc = ranks_allgatherv(buf, c, e);
    free(c);
    return rc;
}

struct ranks_ag {
    MPI_Request req;
    int *counts; // counts, displacements (2 R)
};

int ranks_ag_start(ranks_ag **out, const float *mine, const int *counts, float *all, ht_error *e) {
    *out = NULL;
    if (size == 1) {
        memcpy(all, mine, sizeof(float) * (size_t)counts[0]);
        return 0;
    }
    double t0 = MPI_Wtime();
    ranks_ag *r = ht_calloc(1, sizeof *r, e);
    if (!r || !(r->counts = ht_malloc((size_t)size * 2, sizeof(int), e))) {
        free(r);
        return -1;
    }
    memcpy(r->counts, counts, sizeof(int) * (size_t)size);
    int err = displacements(r->counts, r->counts + size, e) < 0 ? -1 : MPI_SUCCESS;
    if (err == MPI_SUCCESS)
        err = MPI_Iallgatherv(mine, counts[rank], MPI_FLOAT, all, r->counts, r->counts + size,
                              MPI_FLOAT, MPI_COMM_WORLD, &r->req);
    comm_s += MPI_Wtime() - t0;
    if (err != MPI_SUCCESS) {
        free(r->counts);
        free(r);
        return err == -1 ? -1 : mpi_fail(e, "starting a gather over the ranks", err);
    }
    *out = r;
    return 0;
}

int ranks_ag_test(ranks_ag *r) { return r ? test_request(&r->req) : 1; }

int ranks_ag_finish(ranks_ag *r, ht_error *e) {
    if (!r) return 0;
    int err = wait_request(&r->req);
    free(r->counts);
    free(r);
    return err == MPI_SUCCESS ? 0 : mpi_fail(e, "gathering over the ranks", err);
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
