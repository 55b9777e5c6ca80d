// What a run writes as it goes: the run log's header, the engine's events, and each epoch's
// metrics row (the CSV's header too) and log lines, with the measurements of every rank.
#include "app/job.h"
#include "nn/gemm_bf16.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/blas_core.h"
#include "core/omp_wait.h"
#include "nn/batchnorm.h"
#include "nn/isa_kernels.h"
#include "nn/optim.h"
#include "sharding/span.h"

// A Keras model's regularizers and frozen layers, a line each where it has any.
static void describe_keras_extras(run_files *rf, const model *m) {
    char line[1024];
    size_t at = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        const float f[2][2] = {{L->w_l1, L->w_l2}, {L->b_l1, L->b_l2}};
        for (int b = 0; b < 2 && at < sizeof line; b++)
            if (f[b][0] > 0 || f[b][1] > 0)
                at += (size_t)snprintf(line + at, sizeof line - at, "%s%s.%s l1 %g l2 %g",
                                       at ? ", " : "", L->name, b ? "bias" : "weight",
                                       (double)f[b][0], (double)f[b][1]);
    }
    if (at)
        run_log(rf, 0, "regularizers (Keras's: their term, at the weights each step starts from, "
                "is in the loss; their gradient in the update): %s\n", line);
    at = 0;
    for (int l = 0; l < m->n_layers && at < sizeof line; l++)
        if (m->layers[l].frozen)
            at += (size_t)snprintf(line + at, sizeof line - at, "%s%s", at ? ", " : "",
                                   m->layers[l].name);
    if (at)
        run_log(rf, 0, "frozen (Keras's trainable false; not updated): %s (%zu parameters)\n",
                line, model_frozen_params(m));
}

static void describe_setup(run_files *rf, const model *m, const train_setup *s, uint64_t seed) {
    if (s->optim == OPTIM_SGD)
        run_log(rf, 0, "optimizer: SGD lr %g momentum %g%s decay %g\n", s->lr, s->momentum,
                s->nesterov ? " nesterov" : "", s->decay);
    else
        run_log(rf, 0, "optimizer: Adam lr %g beta1 %g beta2 %g eps %g decay %g\n", s->lr,
                s->beta1, s->beta2, s->eps, s->decay);
    char sched[64];
    lr_schedule_text(&s->sched, sched, sizeof sched);
    run_log(rf, 0, "lr schedule %s, weight decay %g%s\n", sched, s->weight_decay,
            s->weight_decay == 0 ? "" : s->wd_mode == WD_L2 ? " (L2 on the kernels)"
                                                             : " (decoupled, on the kernels)");
    run_log(rf, 0, "batch %d, epochs %d, val_split %g, seed %llu\n", s->batch, s->epochs,
            s->val_split, (unsigned long long)seed);
    if (s->precision == PRECISION_BF16)
        run_log(rf, 0, "precision: bf16 (the dense layers and convolutions multiply bfloat16 "
                "factors into float32 sums; %s)\n", gemm_bf16_describe());
    if (m->n_state)
        run_log(rf, 0, "model: %s, %zu parameters (and %zu of batchnorm state), %.1f M "
                "multiply-adds per sample\n", m->name, m->n_trainable, m->n_state,
                model_forward_macs(m) / 1e6);
    else
        run_log(rf, 0, "model: %s, %zu parameters, %.1f M multiply-adds per sample\n", m->name,
                m->n_trainable, model_forward_macs(m) / 1e6);
    describe_keras_extras(rf, m);
    int G = model_bn_group(m);
    if (G)
        run_log(rf, 0, "batchnorm: statistics over groups of %d consecutive samples of each "
                "batch (--bn-group; %s)\n", G < s->batch ? G : s->batch,
                G >= s->batch ? "the whole batch, as Keras on one device"
                              : "each group as one of Keras's replicas under a distribution "
                                "strategy");
}

// The run's --augment in its canonical spelling ("crop:4,flip", "none").
static void augment_text(const train_opts *o, char *buf, size_t len) {
    data_augment a = {0};
    ht_error ignore; // job_prepare has parsed it already
    if (o->augment) data_augment_parse(&a, o->augment, &ignore);
    data_augment_text(&a, buf, len);
}

void job_log_header(job *j, const train_opts *o) {
    run_files *rf = &j->rf;
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    run_log(rf, 0, "hetrain %s, run started %s\n", HT_VERSION, when);
    if (o->command_line) run_log(rf, 0, "command: %s\n", o->command_line);
    char blas[256];
    blas_core_describe(blas, sizeof blas);
    char isa[160];
    isa_kernels_describe(isa, sizeof isa);
    char waits[256];
    omp_wait_describe(waits, sizeof waits);
    run_log(rf, 0, "built with: %s, %s; BLAS: %s; vector code: %s; OpenMP waits: %s\n",
            __VERSION__, openblas_get_config(), blas, isa, waits);
    describe_setup(rf, &j->m, &j->m.setup, o->seed);
    run_log(rf, 0, "data: %s, %d training, %d validation, %d test samples\n",
            o->train_csv ? o->train_csv : (o->data_dir ? o->data_dir : TRAIN_DEFAULT_DATA),
            j->train.n, j->val.n, j->test.n);
    // Image folders: their classes, files, skips and whether the cache held them.
    static const char *const set[] = {"training", "validation", "test"};
    for (int i = 0; i < 3; i++) {
        const data_images_info *im = &j->images[i];
        if (!im->n) continue;
        run_log(rf, 0, "images (%s): %d decoded, %d skipped, %d classes, %s in %.3f s%s%s\n",
                set[i], im->n, im->n_skipped, im->n_classes,
                im->cached ? "read from the cache" : "decoded", im->seconds,
                im->cache_path[0] ? ", cache " : "", im->cache_path);
        run_log_lines(rf, "skipped: ", im->skipped);
    }
    // The class names (a folder's, or those of the weights the run started from).
    char names[1024];
    size_t at = 0;
    for (int c = 0; c < j->m.n_class_names && at < sizeof names; c++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%d %s", c ? ", " : "", c,
                               j->m.class_names[c]);
    if (j->m.n_class_names) run_log(rf, 0, "classes: %s\n", names);
    if (o->load)
        run_log(rf, 0, "weights: %s%s, %d layer%s left at initial values\n", o->load,
                o->by_name ? " by name" : "", j->n_load_left, j->n_load_left == 1 ? "" : "s");
    run_log_lines(rf, "left: ", j->load_left);
    char aug[DATA_AUGMENT_TEXT];
    augment_text(o, aug, sizeof aug);
    run_log(rf, 0, "augment: %s%s\n", aug, strcmp(aug, "none") ? " (training batches only)" : "");
    for (int d = 0; span_job().size == 1 && d < j->n_devs; d++) {
        run_log(rf, 0, "device %s: %s, capacity %g, micro-batch %d\n", j->devs[d].spec,
                j->devs[d].name, j->devs[d].capacity, j->devs[d].micro);
        char prefix[160];
        snprintf(prefix, sizeof prefix, "device %s: ", j->devs[d].spec);
        run_log_lines(rf, prefix, j->devs[d].detail);
        if (j->devs[d].warning[0]) run_log(rf, 0, "warning: %s\n", j->devs[d].warning);
    }
    if (j->ranks_warning[0]) run_log(rf, 0, "warning: %s\n", j->ranks_warning);
    for (int r = 0; span_job().size > 1 && r < span_job().size; r++) { // over several ranks: each rank's host and devices
        const char *p = j->ranks_text + (size_t)r * JOB_RANK_TEXT;
        int n = (int)strcspn(p, "\n");
        run_log(rf, 0, "rank %d on %.*s\n", r, n, p);
        for (p += n; *p == '\n' && p[1]; p += strcspn(p, "\n")) {
            p++;
            int t = (int)strcspn(p, "\t");
            run_log(rf, 0, "device r%d/%.*s: %.*s\n", r, t, p, (int)strcspn(p + t + 1, "\n"),
                    p + t + 1);
        }
    }
    if (span_job().size > 1) {
        char ex[512];
        engine_describe_exchange(j->g, ex, sizeof ex);
        run_log(rf, 0, "exchange: %s\n", ex);
    }
    run_log(rf, 0, "device timeout: %g s per shard\n",
            o->device_timeout > 0 ? o->device_timeout : ENGINE_DEFAULT_TIMEOUT);
    run_log(rf, 0, "files: %s.{metrics.csv,predictions.csv,log}\n", rf->prefix);
}

// Logs what the engine reported (device failures, smaller micro-batches, skipped steps) and
// keeps a short form for the epoch's metrics row.
void job_drain_events(job *j, epoch_stats *es) {
    const char *raw = engine_take_events(j->g);
    if (!*raw) return;
    // Over several ranks every event says whose it is; each rank prints its own at once, and
    // rank 0 logs every rank's at the epoch's end (epoch_view).
    char ev[4600];
    size_t k = 0;
    for (const char *p = raw; *p && k + 1 < sizeof ev;) {
        size_t n = strcspn(p, "\n");
        char tag[24] = "";
        if (span_job().size > 1) snprintf(tag, sizeof tag, "rank %d: ", span_job().rank);
        k += (size_t)snprintf(ev + k, sizeof ev - k, "%s%.*s\n", tag, (int)n, p);
        p += n + (p[n] == '\n');
    }
    if (k >= sizeof ev) k = sizeof ev - 1;
    ev[k] = 0;
    run_log(&j->rf, 0, "%s", ev);
    if (j->events_out) fputs(ev, stderr);
    if (!es) return;
    for (const char *p = ev; *p;) {
        size_t n = strcspn(p, "\n"), k = strlen(es->events);
        if (k + n + 3 < sizeof es->events)
            snprintf(es->events + k, sizeof es->events - k, "%s%.*s", k ? "; " : "", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

// A CSV field: quoted, with inner quotes doubled.
static void csv_quote(char *out, size_t len, const char *text) {
    size_t k = 0;
    if (len < 3) return;
    out[k++] = '"';
    for (const char *p = text; *p && k + 3 < len; p++) {
        if (*p == '"') out[k++] = '"';
        out[k++] = *p;
    }
    out[k++] = '"';
    out[k] = 0;
}

void epoch_stats_add(epoch_stats *es, const step_stats *st, int n_devs) {
    for (int d = 0; d < n_devs; d++) {
        es->busy[d] += st->busy_s[d];
        es->share[d] += st->share[d];
    }
    es->wait += st->wait_s;
    es->host += st->host_s;
    es->compute += st->compute_s;
    es->skipped += st->skipped;
}

// Appends a line to the job's copy of the metrics CSV.
int job_metrics_keep(job *j, const char *line, ht_error *e) {
    size_t n = strlen(line);
    if (j->metrics_len + n + 2 > j->metrics_cap) {
        size_t cap = (j->metrics_cap ? j->metrics_cap * 2 : 4096) + n;
        char *p = realloc(j->metrics, cap);
        if (!p) return ht_fail(e, "out of memory keeping the metrics rows");
        j->metrics = p;
        j->metrics_cap = cap;
    }
    memcpy(j->metrics + j->metrics_len, line, n);
    j->metrics_len += n;
    j->metrics[j->metrics_len++] = '\n';
    j->metrics[j->metrics_len] = 0;
    return 0;
}

// The metrics CSV header: Keras's CSVLogger columns, hetrain's timing, then per device of the
// job; over several ranks also per rank (its share, its compute time, its time in MPI) and the
// job's comm_s.
void job_metrics_header(char *buf, size_t len, const job *j) {
    size_t k = (size_t)snprintf(buf, len, "epoch,accuracy,loss,val_accuracy,val_loss,time_s,"
                                          "samples_per_s,sync_s,idle_frac,lr");
    for (int d = 0; d < j->n_all && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, ",share_%s,busy_s_%s", j->all_name[d], j->all_name[d]);
    for (int r = 0; span_job().size > 1 && r < span_job().size && k < len; r++)
        k += (size_t)snprintf(buf + k, len - k, ",share_r%d,busy_s_r%d,comm_s_r%d", r, r, r);
    if (span_job().size > 1 && k < len) k += (size_t)snprintf(buf + k, len - k, ",comm_s");
    if (k < len) snprintf(buf + k, len - k, ",events");
}

// One epoch's measurements over the whole job: every device of every rank (j->all_name order)
// and, over several ranks, each rank's share, compute time (its slowest device, step by step)
// and time in MPI calls, which includes waiting for the slowest rank.
typedef struct epoch_view {
    double busy[HT_MAX_DEVICES];
    long share[HT_MAX_DEVICES];
    double wait, host;
    double rank_share[HT_MAX_DEVICES], rank_busy[HT_MAX_DEVICES], rank_comm[HT_MAX_DEVICES];
    double comm; // the most any rank spent in MPI
    char events[1024];
} epoch_view;

// Every rank calls it at the same point: over several ranks it gathers every rank's sums.
static int epoch_view_make(job *j, const epoch_stats *es, double comm_s, epoch_view *v, ht_error *e) {
    memset(v, 0, sizeof *v);
    int R = span_job().size;
    enum { PER = 2 * HT_MAX_DEVICES + 4 };
    double mine[PER] = {0}, *all = ht_malloc((size_t)R * PER, sizeof(double), e);
    char *ev = ht_malloc((size_t)R, sizeof es->events, e);
    if (!all || !ev) {
        free(all);
        free(ev);
        return -1;
    }
    for (int d = 0; d < j->n_devs; d++) {
        mine[d] = es->busy[d];
        mine[HT_MAX_DEVICES + d] = (double)es->share[d];
    }
    mine[2 * HT_MAX_DEVICES] = es->wait;
    mine[2 * HT_MAX_DEVICES + 1] = es->host;
    mine[2 * HT_MAX_DEVICES + 2] = es->compute;
    mine[2 * HT_MAX_DEVICES + 3] = comm_s;
    int rc = span_allgather(span_job(), mine, all, PER, e) < 0 ||
             span_allgather_text(span_job(), es->events, ev, sizeof es->events, e) < 0 ? -1 : 0;
    for (int k = 0; rc == 0 && k < j->n_all; k++) {
        const double *a = all + (size_t)j->all_rank[k] * PER;
        v->busy[k] = a[j->all_local[k]];
        v->share[k] = (long)a[HT_MAX_DEVICES + j->all_local[k]];
        v->rank_share[j->all_rank[k]] += (double)v->share[k] / j->train.n;
    }
    size_t n = 0;
    for (int r = 0; rc == 0 && r < R; r++) {
        const double *a = all + (size_t)r * PER;
        v->wait += a[2 * HT_MAX_DEVICES];
        v->rank_busy[r] = a[2 * HT_MAX_DEVICES + 2];
        v->rank_comm[r] = a[2 * HT_MAX_DEVICES + 3];
        if (v->rank_comm[r] > v->comm) v->comm = v->rank_comm[r];
        const char *t = ev + (size_t)r * sizeof es->events;
        if (*t && n + 3 < sizeof v->events)
            n += (size_t)snprintf(v->events + n, sizeof v->events - n, "%s%s", n ? "; " : "", t);
        if (r > 0 && *t) run_log(&j->rf, 0, "%s\n", t); // rank 0 logged its own as they came
    }
    v->host = es->host;
    free(all);
    free(ev);
    return rc;
}

// Writes the epoch's metrics row and log lines; fails when a write to the run's files did.
// Every rank calls it (over several ranks it gathers their measurements); rank 0 writes.
int job_epoch_report(job *j, const train_opts *o, int ep, double loss, double acc,
                     double vloss, double vacc, double el, double train_s,
                     const epoch_stats *es, double comm_s, ht_error *e) {
    const train_setup *s = &j->m.setup;
    int n = j->train.n, nd = j->n_all;
    epoch_view view, *v = &view;
    if (epoch_view_make(j, es, comm_s, v, e) < 0) return -1;
    double busy_total = 0;
    for (int d = 0; d < nd; d++) busy_total += v->busy[d];
    double idle = busy_total + v->wait > 0 ? v->wait / (busy_total + v->wait) : 0;
    // The row follows the header's columns by name (a run resumed on other devices has the
    // columns of both sets; a device not in this job gets empty fields).
    char row[4096], quoted[2100];
    csv_quote(quoted, sizeof quoted, v->events);
    const char *hdr = j->metrics;
    size_t k = 0;
    for (const char *c = hdr; *c && *c != '\n' && k < sizeof row;) {
        size_t len = strcspn(c, ",\n");
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)len, c);
        char val[2200] = "";
        int vd = -1, busy = 0, r = -1, rk = 0;
        for (int d = 0; d < nd; d++) {
            char a[96], b[96];
            snprintf(a, sizeof a, "share_%s", j->all_name[d]);
            snprintf(b, sizeof b, "busy_s_%s", j->all_name[d]);
            if (!strcmp(name, a)) vd = d;
            if (!strcmp(name, b)) vd = d, busy = 1;
        }
        char tail[8];
        if (span_job().size > 1 &&
            (sscanf(name, "share_r%d%7s", &r, tail) == 1 ? (rk = 1) :
             sscanf(name, "busy_s_r%d%7s", &r, tail) == 1 ? (rk = 2) :
             sscanf(name, "comm_s_r%d%7s", &r, tail) == 1 ? (rk = 3) : 0) &&
            (r < 0 || r >= span_job().size))
            rk = 0;
        if (!strcmp(name, "epoch")) snprintf(val, sizeof val, "%d", ep);
        else if (!strcmp(name, "accuracy")) snprintf(val, sizeof val, "%.6f", acc);
        else if (!strcmp(name, "loss")) snprintf(val, sizeof val, "%.6f", loss);
        else if (!strcmp(name, "val_accuracy") && j->val.n > 0) snprintf(val, sizeof val, "%.6f", vacc);
        else if (!strcmp(name, "val_loss") && j->val.n > 0) snprintf(val, sizeof val, "%.6f", vloss);
        else if (!strcmp(name, "time_s")) snprintf(val, sizeof val, "%.3f", el);
        else if (!strcmp(name, "samples_per_s")) snprintf(val, sizeof val, "%.1f", n / train_s);
        else if (!strcmp(name, "sync_s")) snprintf(val, sizeof val, "%.3f", v->host);
        else if (!strcmp(name, "idle_frac")) snprintf(val, sizeof val, "%.4f", idle);
        else if (!strcmp(name, "lr")) snprintf(val, sizeof val, "%.9g", (double)j->step_lr);
        else if (!strcmp(name, "comm_s") && span_job().size > 1) snprintf(val, sizeof val, "%.3f", v->comm);
        else if (!strcmp(name, "events")) snprintf(val, sizeof val, "%s", v->events[0] ? quoted : "");
        else if (vd >= 0 && busy) snprintf(val, sizeof val, "%.3f", v->busy[vd]);
        else if (vd >= 0) snprintf(val, sizeof val, "%.4f", (double)v->share[vd] / n);
        else if (rk == 1) snprintf(val, sizeof val, "%.4f", v->rank_share[r]);
        else if (rk == 2) snprintf(val, sizeof val, "%.3f", v->rank_busy[r]);
        else if (rk == 3) snprintf(val, sizeof val, "%.3f", v->rank_comm[r]);
        k += (size_t)snprintf(row + k, sizeof row - k, "%s%s", c == hdr ? "" : ",", val);
        c += len;
        if (*c == ',') c++;
    }
    if ((j->rf.metrics && run_metrics_row(&j->rf, row, e) < 0) || job_metrics_keep(j, row, e) < 0)
        return -1;
    j->metrics_rows++;
    char vtext[96] = "";
    if (j->val.n > 0) snprintf(vtext, sizeof vtext, "  val_loss %.4f  val_acc %.4f", vloss, vacc);
    run_log(&j->rf, !o->quiet, "epoch %d/%d  loss %.4f  acc %.4f%s  lr %.4g  %.1fs  %.0f samples/s\n",
            ep + 1, s->epochs, loss, acc, vtext, (double)j->step_lr, el, n / train_s);
    if (nd > 1) {
        char line[2048];
        size_t m = (size_t)snprintf(line, sizeof line, "epoch %d/%d ", ep + 1, s->epochs);
        for (int d = 0; d < nd && m < sizeof line; d++)
            m += (size_t)snprintf(line + m, sizeof line - m, "%s %s %.0f%% %.1fs", d ? " |" : "",
                                  j->all_name[d], 100.0 * v->share[d] / n, v->busy[d]);
        char comm[64] = "";
        if (span_job().size > 1) snprintf(comm, sizeof comm, "  mpi %.2fs", v->comm);
        run_log(&j->rf, !o->quiet, "%s | sync %.2fs  idle %.1f%%%s\n", line, v->host, 100 * idle, comm);
    }
    return run_files_check(&j->rf, e);
}
