// The job over every rank of an MPI job (one rank without mpirun, the same code): the devices
// of all ranks in the plan's order, the check that every rank has the same data and weights,
// gathers of per-device values into the job's order and back, and each rank's --devices.
#define _GNU_SOURCE // sched_getaffinity and the CPU_SET macros
#include "app/job.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sharding/span.h"
#include "core/rng.h"

// What every rank must agree on, as one number: the data (sizes, labels, a sample of the
// pixels), the batch and the initial weights. Each rank reads the data itself, so a rank given
// another file or seed would otherwise train silently on something else.
static double job_fingerprint(const job *j) {
    uint64_t h = ht_mix64((uint64_t)j->train.n << 32 ^ (uint64_t)j->val.n << 16 ^ (uint64_t)j->test.n);
    h = ht_mix64(h ^ (uint64_t)j->m.setup.batch);
    const dataset *sets[] = {&j->train, &j->val, &j->test};
    for (int k = 0; k < 3; k++) {
        const dataset *d = sets[k];
        size_t in = (size_t)d->c * d->h * d->w, n = (size_t)d->n * in;
        for (size_t i = 0; i < n; i += 4099) {
            const float v = dataset_px(d, i);
            uint32_t b;
            memcpy(&b, &v, sizeof b);
            h = ht_mix64(h ^ b);
        }
        for (int i = 0; d->y && i < d->n; i++) h = ht_mix64(h ^ d->y[i] ^ (uint64_t)i << 8);
    }
    for (size_t i = 0; i < j->m.n_params; i += 97) {
        uint32_t b;
        memcpy(&b, &j->params[i], sizeof b);
        h = ht_mix64(h ^ b);
    }
    return (double)(h >> 11); // exact in a double
}

// The cores this process may run on, as bits of JOB_CPU_WORDS 32-bit words (each in a double,
// exactly), after a hash of the host's name; returns how many cores.
#define JOB_CPU_WORDS 32 // 1024 cores
static int job_cpus(double *out) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 0;
    for (const char *c = host; *c; c++) h = ht_mix64(h ^ (uint8_t)*c);
    out[0] = (double)(h >> 11);
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    for (int w = 0; w < JOB_CPU_WORDS; w++) {
        uint32_t bits = 0;
        for (int b = 0; b < 32 && w * 32 + b < CPU_SETSIZE; b++)
            if (CPU_ISSET(w * 32 + b, &set)) bits |= 1u << b, n++;
        out[1 + w] = bits;
    }
    return n;
}

// Ranks of one host bound to the same cores run by turns (Open MPI binds each rank to a core by
// default, and with one rank per simulated node or container it binds them all to core 0): a
// warning naming them, in j->ranks_warning. Two ranks are said to share when each is bound
// (may run on fewer cores than the host has online) and their cores meet, or when the ranks
// of a host have fewer cores among them than there are ranks.
static int job_check_cores(job *j, ht_error *e) {
    enum { W = 1 + JOB_CPU_WORDS };
    const int R = span_job().size;
    double mine[W], *all = ht_malloc((size_t)R * W, sizeof(double), e);
    if (!all) return -1;
    int n_mine = job_cpus(mine);
    mine[0] = n_mine > 0 ? mine[0] : -1; // unknown: no check
    if (span_allgather(span_job(), mine, all, W, e) < 0) {
        free(all);
        return -1;
    }
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    j->ranks_warning[0] = 0;
    for (int a = 0; a < R && !j->ranks_warning[0]; a++) {
        const double *x = all + (size_t)a * W;
        if (x[0] < 0) continue;
        int ranks = 0, uni = 0, na = 0;
        uint32_t u[JOB_CPU_WORDS] = {0};
        for (int w = 0; w < JOB_CPU_WORDS; w++) na += __builtin_popcount((uint32_t)x[1 + w]);
        for (int b = 0; b < R; b++) {
            const double *y = all + (size_t)b * W;
            if (y[0] != x[0]) continue;
            ranks++;
            int nb = 0, meet = 0;
            for (int w = 0; w < JOB_CPU_WORDS; w++) {
                uint32_t yb = (uint32_t)y[1 + w];
                u[w] |= yb;
                nb += __builtin_popcount(yb);
                meet += __builtin_popcount(yb & (uint32_t)x[1 + w]);
            }
            if (b > a && meet > 0 && na < online && nb < online) {
                snprintf(j->ranks_warning, sizeof j->ranks_warning,
                         "ranks %d and %d on one host are bound to %d shared core%s and take turns "
                         "on %s; start mpirun with --bind-to none, or give each rank cores of its "
                         "own (--map-by, a rankfile)", a, b, meet, meet == 1 ? "" : "s",
                         meet == 1 ? "it" : "them");
                break;
            }
        }
        for (int w = 0; w < JOB_CPU_WORDS; w++) uni += __builtin_popcount(u[w]);
        if (!j->ranks_warning[0] && ranks > uni)
            snprintf(j->ranks_warning, sizeof j->ranks_warning,
                     "%d ranks on one host (rank %d's) may run on %d core%s among them: they take "
                     "turns; start fewer ranks there, or mpirun with --bind-to none", ranks, a, uni,
                     uni == 1 ? "" : "s");
    }
    free(all);
    if (j->ranks_warning[0] && span_job().rank == 0)
        fprintf(stderr, "hetrain: warning: %s\n", j->ranks_warning);
    return 0;
}

// The job over every rank: names the devices of all ranks in the plan's order ("r<rank>/<spec>";
// a job of one rank, its specs), and checks that every rank has the same data and weights as
// rank 0.
int job_span(job *j, ht_error *e) {
    int R = span_job().size;
    double mine = job_fingerprint(j), *prints = ht_malloc((size_t)R, sizeof(double), e);
    char *text = ht_calloc(1, JOB_RANK_TEXT, e);
    j->ranks_text = ht_malloc((size_t)R, JOB_RANK_TEXT, e);
    if (!prints || !text || !j->ranks_text) {
        free(prints);
        free(text);
        return -1;
    }
    size_t k = 0;
    gethostname(text, 255);
    k = strlen(text);
    k += (size_t)snprintf(text + k, JOB_RANK_TEXT - k, "\n");
    for (int d = 0; d < j->n_devs && k < JOB_RANK_TEXT; d++)
        k += (size_t)snprintf(text + k, JOB_RANK_TEXT - k, "%s\t%s, capacity %g, micro-batch %d\n",
                              j->devs[d].spec, j->devs[d].name, j->devs[d].capacity, j->devs[d].micro);
    int rc = span_allgather(span_job(), &mine, prints, 1, e) < 0 ||
             span_allgather_text(span_job(), text, j->ranks_text, JOB_RANK_TEXT, e) < 0 ? -1 : 0;
    free(text);
    for (int r = 1; rc == 0 && r < R; r++)
        if (prints[r] != prints[0])
            rc = ht_fail(e, "rank %d's data, batch or initial weights differ from rank 0's (every "
                            "rank reads the same files itself, with the same options)", r);
    free(prints);
    if (rc == 0 && R > 1 && job_check_cores(j, e) < 0) rc = -1;
    j->n_all = 0;
    for (int r = 0; rc == 0 && r < R; r++) {
        const char *p = j->ranks_text + (size_t)r * JOB_RANK_TEXT;
        p += strcspn(p, "\n");
        for (int d = 0; *p == '\n' && p[1]; d++) {
            p++;
            if (j->n_all == HT_MAX_DEVICES) {
                rc = ht_fail(e, "more than %d devices over all ranks", HT_MAX_DEVICES);
                break;
            }
            int n = (int)strcspn(p, "\t");
            if (R > 1) snprintf(j->all_name[j->n_all], sizeof j->all_name[0], "r%d/%.*s", r, n, p);
            else snprintf(j->all_name[j->n_all], sizeof j->all_name[0], "%.*s", n, p);
            j->all_rank[j->n_all] = r;
            j->all_local[j->n_all++] = d;
            p += strcspn(p, "\n");
        }
    }
    return rc;
}

// Every rank's per-device values (w per device, local[d * w + i] for this rank's device d) in
// the job's device order, into out (n_all * w). Every rank calls it at the same point.
int job_gather(const job *j, const double *local, int w, double *out, ht_error *e) {
    int R = span_job().size;
    double *all = ht_malloc((size_t)R * HT_MAX_DEVICES * w, sizeof(double), e);
    if (!all || span_allgather(span_job(), local, all, HT_MAX_DEVICES * w, e) < 0) {
        free(all);
        return -1;
    }
    for (int k = 0; k < j->n_all; k++)
        memcpy(out + (size_t)k * w,
               all + ((size_t)j->all_rank[k] * HT_MAX_DEVICES + j->all_local[k]) * w,
               sizeof(double) * (size_t)w);
    free(all);
    return 0;
}

// This rank's values out of a list in the job's device order (job_gather's inverse).
void job_pick(const job *j, const double *list, int w, double *local) {
    for (int k = 0; k < j->n_all; k++)
        if (j->all_rank[k] == span_job().rank)
            memcpy(local + (size_t)j->all_local[k] * w, list + (size_t)k * w, sizeof(double) * (size_t)w);
}

// The job's devices as a checkpoint names them: "cpu:1,cl:0.0", or over several ranks
// "r0/cpu:1,r1/cl:0.0".
void job_device_list(const job *j, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < j->n_all && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", d ? "," : "", j->all_name[d]);
}

// This rank's --devices: the KEY=SPEC naming its rank, else the one naming its host, else a
// SPEC without a key. NULL (the default devices) when none applies.
const char *job_devices_of_rank(const train_opts *o, ht_error *e, int *bad) {
    char host[256] = "", rank[16];
    gethostname(host, sizeof host - 1);
    snprintf(rank, sizeof rank, "%d", span_job().rank);
    const char *by_rank = NULL, *by_host = NULL, *plain = NULL;
    *bad = 0;
    for (int i = 0; i < o->n_devices_by; i++) {
        const char *v = o->devices_by[i], *eq = strchr(v, '=');
        // A key is a rank or a host name: the '=' of a device's ":mem=SIZE" follows a ':'.
        if (eq && strcspn(v, ":,@") < (size_t)(eq - v)) eq = NULL;
        if (!eq) {
            if (plain) {
                *bad = 1;
                ht_fail(e, "--devices: \"%s\" and \"%s\" both apply to every rank; give one, or "
                           "KEY=SPEC for a host or rank", plain, v);
                return NULL;
            }
            plain = v;
            continue;
        }
        size_t k = (size_t)(eq - v);
        if (k == strlen(rank) && !strncmp(v, rank, k)) by_rank = eq + 1;
        else if (k == strlen(host) && !strncmp(v, host, k)) by_host = eq + 1;
    }
    return by_rank ? by_rank : by_host ? by_host : plain;
}
