// Checkpoints: writing the job's (parameters, optimiser moments, and as metadata every run
// option of runopts.c's table, where training stands, the engine's state and the metrics so
// far) and putting a job back where one left it.
#include "app/job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/batchnorm.h"
#include "io/checkpoint.h"
#include "nn/conv_algo.h"
#include "nn/optim.h"
#include "sharding/span.h"
#include "app/runopts.h"

// A checkpoint's metadata: string keys and values, the values owned here.
#define META_MAX (RUN_OPT_COUNT + 32)
typedef struct meta {
    const char *kv[2 * META_MAX];
    int n;
} meta;

static void meta_set(meta *m, const char *key, const char *value) {
    char *v = strdup(value);
    if (m->n == META_MAX || !v) {
        free(v); // checkpoint_read refuses a checkpoint without its keys: never silently short
        return;
    }
    m->kv[2 * m->n] = key;
    m->kv[2 * m->n + 1] = v;
    m->n++;
}

static void meta_fmt(meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_fmt(meta *m, const char *key, const char *fmt, ...) {
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    meta_set(m, key, buf);
}

// A comma list of n doubles at full precision.
static void meta_doubles(meta *m, const char *key, const double *v, int n) {
    char *buf = malloc((size_t)n * 26 + 1);
    if (!buf) return;
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) k += (size_t)sprintf(buf + k, "%s%.17g", i ? "," : "", v[i]);
    meta_set(m, key, buf);
    free(buf);
}

static void meta_free(meta *m) {
    for (int i = 0; i < m->n; i++) free((char *)m->kv[2 * i + 1]);
}

// The run's options as they take effect: the model's setup where an option was not given (the
// epochs, batch, rate, schedule... the run uses), which a checkpoint keeps.
static void job_resolved_opts(const job *j, const train_opts *o, train_opts *r, char *sched, size_t len) {
    const train_setup *s = &j->m.setup;
    *r = *o;
    r->epochs = s->epochs;
    r->batch = s->batch;
    r->lr = s->lr;
    r->val_split = s->val_split;
    r->weight_decay = s->weight_decay;
    r->wd_mode = (int)s->wd_mode;
    r->bn_group = model_bn_group(&j->m);
    r->conv_algo = (int)s->conv_algo;
    lr_schedule_text(&s->sched, sched, len);
    r->lr_schedule = sched;
}

// Writes the job's checkpoint: parameters, optimiser moments, and in the metadata the options
// that define the run, where it stands (epoch, step, the epoch's sums `es`, NULL at an epoch's
// end), the engine's state and the metrics CSV so far. Returns 1 when written, 0 when a default
// checkpoint failed (reported once; training goes on), -1 when an asked-for one failed.
int job_save_checkpoint(job *j, const train_opts *o, const epoch_stats *es, ht_error *e) {
    // Every rank's capacities, time fits and epoch sums, in the job's device order; rank 0
    // writes them with the rest.
    engine_state gs;
    engine_get_state(j->g, &gs);
    // Over several ranks each keeps its own slice of the moments current: all of them first.
    if (engine_gather_moments(j->g, e) < 0) return -1;
    double loc[7 * HT_MAX_DEVICES] = {0}, *all = ht_malloc((size_t)j->n_all * 7, sizeof(double), e);
    if (!all) return -1;
    for (int d = 0; d < j->n_devs; d++) {
        loc[7 * d] = gs.capacity[d];
        memcpy(&loc[7 * d + 1], gs.fit[d], sizeof gs.fit[d]);
        loc[7 * d + 5] = es ? es->busy[d] : 0;
        loc[7 * d + 6] = es ? (double)es->share[d] : 0;
    }
    int gathered = job_gather(j, loc, 7, all, e);
    if (gathered < 0 || span_job().rank > 0) { // rank 0 writes the job's checkpoint
        free(all);
        return gathered;
    }
    double caps[HT_MAX_DEVICES], fits[5 * HT_MAX_DEVICES], sums[2 + 2 * HT_MAX_DEVICES] = {0};
    for (int k = 0; k < j->n_all; k++) {
        caps[k] = all[7 * k];
        memcpy(&fits[5 * k], &all[7 * k + 1], 5 * sizeof(double));
        sums[2 + 2 * k] = all[7 * k + 5];
        sums[3 + 2 * k] = all[7 * k + 6];
    }
    free(all);
    if (es) {
        sums[0] = es->wait;
        sums[1] = es->host;
    }
    meta m = {0};
    train_opts res;
    char sched[64], text[TRAIN_DEVICES_BY_MAX * 128];
    job_resolved_opts(j, o, &res, sched, sizeof sched);
    for (int id = 0; id < RUN_OPT_COUNT; id++) {
        if (!run_opts[id].key) continue;
        run_opt_text(&res, (run_opt_id)id, text, sizeof text);
        meta_set(&m, run_opts[id].key, text);
    }
    meta_fmt(&m, "epochs_done", "%d", j->epochs_done);
    meta_fmt(&m, "steps_into", "%d", j->steps_into);
    meta_fmt(&m, "loss_sum", "%.17g", j->lsum);
    meta_fmt(&m, "correct", "%ld", j->correct);
    meta_fmt(&m, "seen", "%ld", j->seen);
    meta_fmt(&m, "counted", "%ld", j->counted);
    meta_fmt(&m, "epoch_s", "%.17g", j->epoch_s);
    meta_fmt(&m, "step", "%ld", gs.step);
    meta_fmt(&m, "optim_t", "%ld", gs.optim_t);
    meta_fmt(&m, "since", "%d", gs.since);
    char devs[HT_MAX_DEVICES * 80 + 1];
    job_device_list(j, devs, sizeof devs);
    meta_set(&m, "devices", devs);
    meta_doubles(&m, "capacity", caps, j->n_all);
    meta_doubles(&m, "fit", fits, 5 * j->n_all);
    meta_doubles(&m, "epoch_stats", sums, 2 + 2 * j->n_all);
    meta_set(&m, "metrics", j->metrics ? j->metrics : "");
    char *classes = model_classes_json(&j->m, NULL);
    if (classes) meta_set(&m, "class_names", classes);
    free(classes);
    meta_fmt(&m, "metrics_rows", "%d", j->metrics_rows);
    char choices[CONV_CHOICES_TEXT];
    conv_choices_text(choices, sizeof choices);
    meta_set(&m, "conv_choices", choices);
    // Keras's callbacks where they stand (watch.h), the best epoch's weights with them.
    const watch *w = &j->watch;
    meta_fmt(&m, "watch_best", "%.17g", w->best);
    meta_fmt(&m, "watch_lr_best", "%.17g", w->lr_best);
    meta_fmt(&m, "watch_best_epoch", "%d", w->best_epoch);
    meta_fmt(&m, "watch_wait", "%d", w->wait);
    meta_fmt(&m, "watch_lr_wait", "%d", w->lr_wait);
    meta_fmt(&m, "watch_lr_scale", "%.17g", w->lr_scale);
    meta_fmt(&m, "watch_stopped", "%d", w->stopped);
    const float *mm, *vv;
    engine_moments(j->g, &mm, &vv);
    ckpt_blob blobs[3] = {{"optim.m", mm, j->m.n_trainable}, {"optim.v", vv, j->m.n_trainable}};
    int nb = vv ? 2 : 1;
    if (j->best_params) blobs[nb++] = (ckpt_blob){"watch.best", j->best_params, j->m.n_params};
    double t0 = ht_now();
    ht_error ce;
    int rc = checkpoint_write(j->ckpt_path, &j->m, engine_params(j->g), blobs, nb, m.kv,
                              m.n, &ce);
    meta_free(&m);
    if (rc == 0) {
        j->ckpt_s += ht_now() - t0;
        j->ckpt_count++;
        return 1;
    }
    if (o->checkpoint_every > 0) {
        *e = ce;
        return ht_wrap(e, "checkpoint (asked for by --checkpoint-every)");
    }
    if (!j->ckpt_warned) {
        run_log(&j->rf, 0, "warning: %s; training goes on without checkpoints\n", ce.msg);
        fprintf(stderr, "hetrain: warning: %s; training goes on without checkpoints (with "
                        "--checkpoint-every a failed checkpoint stops the run)\n", ce.msg);
        j->ckpt_warned = 1;
    }
    return 0;
}

// The run a checkpoint continues: `arg` is the run's prefix (<out>/<name>) or its .ckpt.
int job_resume_paths(const char *arg, char *prefix, char *path, ht_error *e) {
    size_t n = strlen(arg);
    if (n > 5 && !strcmp(arg + n - 5, ".ckpt")) n -= 5;
    if (n > 1000) return ht_fail(e, "--resume: path too long");
    sprintf(prefix, "%.*s", (int)n, arg);
    sprintf(path, "%s.ckpt", prefix);
    return 0;
}

static long meta_long(const checkpoint *c, const char *key) {
    const char *v = checkpoint_meta(c, key);
    return v ? strtol(v, NULL, 10) : 0;
}

static double meta_double(const checkpoint *c, const char *key) {
    const char *v = checkpoint_meta(c, key);
    return v ? strtod(v, NULL) : 0;
}

// Up to n comma-separated doubles of key into v; returns how many there were.
static int meta_list(const checkpoint *c, const char *key, double *v, int n) {
    const char *p = checkpoint_meta(c, key);
    int k = 0;
    for (char *end; p && *p && k < n; p = end + 1) {
        double x = strtod(p, &end);
        if (end == p) break; // not a number: the count tells the caller
        v[k++] = x;
        if (*end != ',') break;
    }
    return k;
}

// Puts the job where the checkpoint c left it: parameters, optimiser, engine state (capacities
// only on the same devices), position and sums, and the run's files reopened.
static int resume_from(job *j, const train_opts *o, const checkpoint *c, const char *prefix,
                       epoch_stats *es, ht_error *e) {
    const char *path = j->ckpt_path;
    size_t nm = 0, nv = 0;
    const float *mm = checkpoint_blob(c, "optim.m", &nm), *vv = checkpoint_blob(c, "optim.v", &nv);
    if (!mm || nm != j->m.n_trainable || (vv && nv != j->m.n_trainable))
        return ht_fail(e, "%s: the optimiser state is missing or of the wrong size", path);
    engine_state st = {0};
    st.step = meta_long(c, "step");
    st.optim_t = meta_long(c, "optim_t");
    st.since = (int)meta_long(c, "since");
    // The same devices in the same order (over several ranks: the same ranks with the same
    // devices) keep their capacities and timings; each rank takes its own from the lists.
    char devs[HT_MAX_DEVICES * 80 + 1];
    job_device_list(j, devs, sizeof devs);
    const char *was = checkpoint_meta(c, "devices");
    int same = was && !strcmp(was, devs), na = j->n_all;
    double caps[HT_MAX_DEVICES], fits[5 * HT_MAX_DEVICES];
    if (same && meta_list(c, "capacity", caps, na) == na && meta_list(c, "fit", fits, 5 * na) == 5 * na) {
        job_pick(j, caps, 1, st.capacity);
        job_pick(j, fits, 5, &st.fit[0][0]);
        st.n_devs = j->n_devs;
    }
    if (engine_restore(j->g, &st, j->params, mm, vv, e) < 0) return ht_wrap(e, "%s", path);
    j->resumed_caps = st.n_devs > 0;
    // The classes the run was trained on: a folder whose classes changed is another task.
    const char *classes = checkpoint_meta(c, "class_names");
    if (classes) {
        model was = {0};
        if (model_classes_from_json(&was, classes, path, e) < 0) return -1;
        const int rc = job_match_classes(&j->m, &was, path, 1, e);
        model_free(&was);
        if (rc < 0) return -1;
    }
    j->epochs_done = (int)meta_long(c, "epochs_done");
    j->steps_into = (int)meta_long(c, "steps_into");
    j->lsum = meta_double(c, "loss_sum");
    j->correct = meta_long(c, "correct");
    j->seen = meta_long(c, "seen");
    j->counted = meta_long(c, "counted");
    j->epoch_s = meta_double(c, "epoch_s");
    // Keras's callbacks where they stood (a checkpoint written before them has none: fresh).
    if (checkpoint_meta(c, "watch_best")) {
        watch *w = &j->watch;
        w->best = meta_double(c, "watch_best");
        w->lr_best = meta_double(c, "watch_lr_best");
        w->best_epoch = (int)meta_long(c, "watch_best_epoch");
        w->wait = (int)meta_long(c, "watch_wait");
        w->lr_wait = (int)meta_long(c, "watch_lr_wait");
        w->lr_scale = meta_double(c, "watch_lr_scale");
        w->stopped = (int)meta_long(c, "watch_stopped");
        size_t nb = 0;
        const float *best = checkpoint_blob(c, "watch.best", &nb);
        if (best && nb == j->m.n_params) {
            if (!(j->best_params = ht_malloc(nb, sizeof(float), e))) return -1;
            memcpy(j->best_params, best, nb * sizeof(float));
        }
    }
    memset(es, 0, sizeof *es);
    double sums[2 + 2 * HT_MAX_DEVICES], per[2 * HT_MAX_DEVICES] = {0};
    if (same && meta_list(c, "epoch_stats", sums, 2 + 2 * na) == 2 + 2 * na) {
        if (span_job().rank == 0) { // the job's sums are rank 0's in the view (epoch_view_make)
            es->wait = sums[0];
            es->host = sums[1];
        }
        job_pick(j, sums + 2, 2, per);
        for (int d = 0; d < j->n_devs; d++) {
            es->busy[d] = per[2 * d];
            es->share[d] = (long)per[2 * d + 1];
        }
    }
    // The metrics CSV as the checkpoint knew it; a header that lacks this run's devices gets
    // their columns at the end, and the rows empty fields for them.
    const char *csv = checkpoint_meta(c, "metrics");
    if (!csv || !*csv) return ht_fail(e, "%s: no metrics header in the checkpoint", path);
    char header[4096], extra[4096] = "";
    size_t hl = strcspn(csv, "\n");
    snprintf(header, sizeof header, "%.*s", (int)hl, csv);
    int added = 0;
    for (int d = 0; d < j->n_all; d++) {
        char col[96];
        snprintf(col, sizeof col, ",share_%s,", j->all_name[d]);
        char h2[4100];
        snprintf(h2, sizeof h2, ",%s,", header);
        if (strstr(h2, col)) continue;
        size_t x = strlen(extra);
        snprintf(extra + x, sizeof extra - x, ",share_%s,busy_s_%s", j->all_name[d], j->all_name[d]);
        added += 2;
    }
    j->metrics_rows = (int)meta_long(c, "metrics_rows");
    for (const char *p = csv; *p;) {
        size_t n = strcspn(p, "\n");
        char line[8192];
        snprintf(line, sizeof line, "%.*s%s", (int)n, p, p == csv ? extra : "");
        if (p != csv)
            for (int a = 0; a < added && strlen(line) + 1 < sizeof line; a++) strcat(line, ",");
        if (job_metrics_keep(j, line, e) < 0) return -1;
        p += n + (p[n] == '\n');
    }
    if (span_job().rank == 0 && run_files_resume(&j->rf, prefix, j->metrics, j->metrics_rows, e) < 0)
        return -1;
    int steps = (j->train.n + j->m.setup.batch - 1) / j->m.setup.batch;
    if (j->epochs_done >= j->m.setup.epochs)
        run_log(&j->rf, !o->quiet, "resumed from %s: all %d epochs were done; the test "
                "evaluation follows\n", path, j->m.setup.epochs);
    else
        run_log(&j->rf, !o->quiet, "resumed from %s: epoch %d of %d after step %d of %d, on "
                "%s%s\n", path, j->epochs_done + 1, j->m.setup.epochs, j->steps_into, steps,
                devs, same ? "" : " (other devices than before: capacities measured afresh)");
    if (o->command_line) run_log(&j->rf, 0, "command: %s\n", o->command_line);
    for (int d = 0; span_job().size == 1 && d < j->n_devs; d++) { // as the header logs them
        char prefix[160];
        snprintf(prefix, sizeof prefix, "device %s: ", j->devs[d].spec);
        run_log_lines(&j->rf, prefix, j->devs[d].detail);
    }
    return 0;
}

int job_resume(job *j, const train_opts *o, const char *prefix, epoch_stats *es, ht_error *e) {
    const char *path = j->ckpt_path;
    checkpoint full, *c = &full;
    if (checkpoint_read(path, &j->m, j->params, c, e) < 0) return -1;
    int rc = resume_from(j, o, c, prefix, es, e);
    checkpoint_free(c);
    return rc;
}
