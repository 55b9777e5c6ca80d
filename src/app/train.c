// The training job: loads data and model, opens the devices, runs epochs through the step
// engine, evaluates, and writes the run's files.
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "device.h"
#include "engine.h"
#include "checkpoint.h"
#include "conv_algo.h"
#include "fault.h"
#include "ht_omp.h"
#include "model.h"
#include "net.h"
#include "optim.h"
#include "profile_table.h"
#include "progress.h"
#include "ranks.h"
#include "results.h"
#include "rng.h"
#include "runopts.h"
#include "safetensors.h"

volatile int train_interrupted;

// Where the data comes from: a folder (IDX or CIFAR) or files, each with its labels file when
// it is a .npy.
typedef struct data_src {
    const char *dir, *train, *train_labels, *test, *test_labels;
} data_src;

// What the loaders need of the model (its classes and channels) and of the options.
static data_opts data_opts_of(const model *m, int layout, int coarse) {
    return (data_opts){.classes = m->n_classes, .channels = m->in_c,
                       .layout = layout > 0 ? (data_layout)layout : DATA_LAYOUT_AUTO,
                       .coarse = coarse > 0};
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// Loads the training set and (optionally) the test set named by the options. A training .npz
// brings its x_test/y_test as the test set when no --test is given.
static int load_data(const data_src *src, const data_opts *dop, dataset *train, dataset *test,
                     int want_train, ht_error *e) {
    if (src->train || (src->test && !want_train)) {
        if (want_train) {
            if (dataset_load_file(train, src->train, src->train_labels, 0, dop, e) < 0) return -1;
            if (!train->y && ends_with(src->train, ".npy"))
                return ht_fail(e, "%s: training images need labels: give --train-labels FILE.npy",
                               src->train);
            if (!train->y)
                return ht_fail(e, "%s: training data needs a label column (header \"label,pixel0,...\")",
                               src->train);
        }
        if (src->test)
            return dataset_load_file(test, src->test, src->test_labels, 1, dop, e) < 0 ? -1 : 0;
        if (want_train && ends_with(src->train, ".npz"))
            return dataset_load_npz(test, src->train, 1, 1, dop, e) < 0 ? -1 : 0;
        return 0;
    }
    const char *dir = src->dir ? src->dir : TRAIN_DEFAULT_DATA;
    if (want_train) {
        if (dataset_load_dir(train, test, dir, dop, e) < 0) return -1;
    } else {
        if (dataset_load_dir(NULL, test, dir, dop, e) < 0) return -1;
    }
    if (src->test) {
        dataset_free(test);
        if (dataset_load_file(test, src->test, src->test_labels, 1, dop, e) < 0) return -1;
    }
    return 0;
}

// The data set must have the model's input shape and labels below its class count.
static int check_fits(const model *m, const dataset *d, const char *what, ht_error *e) {
    if (d->n == 0) return 0;
    if (d->c != m->in_c || d->h != m->in_h || d->w != m->in_w)
        return ht_fail(e, "%s has samples of %dx%dx%d, but model %s takes %dx%dx%d", what, d->c,
                       d->h, d->w, m->name, m->in_c, m->in_h, m->in_w);
    if (d->y)
        for (int i = 0; i < d->n; i++)
            if (d->y[i] >= m->n_classes)
                return ht_fail(e, "%s: sample %d has label %d, but model %s has %d classes", what,
                               i, d->y[i], m->name, m->n_classes);
    return 0;
}

// Mean loss and accuracy over a labelled set (pred may be NULL; loss/acc skipped without labels).
// A sample whose probabilities are not all finite (weights that overflow) makes both NaN, never
// a clamped number; *nonfinite (may be NULL) gets the first such sample, else -1.
static int evaluate(engine *g, const model *m, int chunk, const dataset *d, double *loss,
                    double *acc, int32_t *pred, int *nonfinite, ht_error *e) {
    int nc = m->n_classes;
    float *probs = ht_malloc((size_t)chunk * nc, sizeof(float), e);
    if (!probs) return -1;
    double lsum = 0;
    long correct = 0;
    int bad = -1;
    for (int off = 0; off < d->n; off += chunk) {
        int n = d->n - off < chunk ? d->n - off : chunk;
        if (engine_infer(g, d, off, n, probs, e) < 0) {
            free(probs);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            const float *p = probs + (size_t)i * nc;
            int k = net_argmax(p, nc), finite = 1;
            for (int c = 0; c < nc; c++) finite &= isfinite(p[c]);
            if (!finite && bad < 0) bad = off + i;
            if (pred) pred[off + i] = k;
            if (d->y) {
                float py = p[d->y[off + i]];
                lsum += -log(py > 1e-30f ? py : 1e-30f); // only an exact 0 is clamped
                correct += k == d->y[off + i];
            }
        }
    }
    free(probs);
    if (loss) *loss = d->n && bad < 0 ? lsum / d->n : NAN;
    if (acc) *acc = d->n && bad < 0 ? (double)correct / d->n : NAN;
    if (nonfinite) *nonfinite = bad;
    return 0;
}

static void shuffle(uint32_t *idx, int n, uint64_t seed, int epoch) {
    ht_rng r;
    ht_rng_seed(&r, ht_mix64(seed ^ (0x5EED0000ull + (uint64_t)epoch)));
    for (int i = 0; i < n; i++) idx[i] = (uint32_t)i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t j = ht_rng_below(&r, (uint32_t)i + 1), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
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
    run_log(rf, 0, "model: %s, %zu parameters, %.1f M multiply-adds per sample\n", m->name,
            m->n_params, model_forward_macs(m) / 1e6);
}

typedef struct job {
    model m;
    dataset all, train, val, test;
    float *params;
    device *devs;
    int n_devs;
    engine *g;
    run_files rf;
    uint32_t *idx;
    float *loss;
    int32_t *pred;
    // Where training stands: whole epochs done, and steps done of the next one, with that
    // epoch's sums so far (a checkpoint keeps them, so a resumed epoch reports the same row).
    int epochs_done, steps_into;
    float step_lr;          // the learning rate of the last step (before Adam's bias correction)
    double lsum, epoch_s;
    long correct, seen, counted;
    // The metrics CSV as written so far (header and rows), for checkpoints.
    char *metrics;
    size_t metrics_len, metrics_cap;
    int metrics_rows;
    char ckpt_path[1200];
    int ckpt_warned;        // a failed checkpoint was reported (default checkpoints only)
    int ckpt_count;
    double ckpt_s;          // time spent writing checkpoints
    int resumed_caps;       // the capacities came from a checkpoint: no calibration
    // The job's devices over every rank, in the plan's order (rank, then device): this
    // process's specs alone, "r<rank>/<spec>" over several ranks (job_span).
    int n_all;
    char all_name[HT_MAX_DEVICES][80];
    int all_rank[HT_MAX_DEVICES], all_local[HT_MAX_DEVICES];
    char *ranks_text;       // over several ranks: each rank's host and devices (job_span)
    int events_out;         // this rank prints its events (not --quiet)
    // --profile: the devices keep records from the first step this process runs; the steps'
    // phases are summed here (prof_start: when the first of them began).
    int profiling;
    profile_steps prof_steps;
    double prof_start;
    const char *conv_choices; // auto's decisions kept by the checkpoint being resumed, or NULL
} job;

// Frees the job itself too (it is on the heap: a device's context points at j->m).
static void job_free(job *j) {
    // A device the engine gave up on is its worker thread's to close.
    for (int d = 0; j->g && d < j->n_devs; d++)
        if (engine_gave_up(j->g, d)) device_disown(&j->devs[d]);
    engine_close(j->g);
    device_close_list(j->devs, j->n_devs);
    ht_error ignore; // train_run closes the files itself and reports what failed
    run_files_close(&j->rf, &ignore);
    dataset_free(&j->all);
    dataset_free(&j->train);
    dataset_free(&j->val);
    dataset_free(&j->test);
    free(j->params);
    free(j->idx);
    free(j->loss);
    free(j->pred);
    free(j->metrics);
    free(j->ranks_text);
    // A worker the engine gave up on may still be inside its device, which reads the model:
    // leave the model to the process's end (main leaves with _exit then).
    fault_release_hangs(); // an injected hang (HETRAIN_FAULT) comes back now
    if (engine_wait_strays(2.0) > 0) return;
    model_free(&j->m);
    free(j);
}

// Opens the devices of spec for batches of `batch`, each behind a fault-injecting wrapper when
// $HETRAIN_FAULT names it (fault.h; for testing the failure paths).
// A device that opened with a warning (an unusable tuning cache) says so on stderr; the run log
// repeats it under the device.
static int open_devices(job *j, const char *spec, int batch, uint64_t mem_limit, ht_error *e) {
    if (device_open_list(&j->devs, &j->n_devs, spec, &j->m, batch, mem_limit, e) < 0) return -1;
    for (int d = 0; d < j->n_devs; d++)
        if (j->devs[d].warning[0]) fprintf(stderr, "hetrain: warning: %s\n", j->devs[d].warning);
    return fault_wrap_devices(j->devs, j->n_devs, &j->m, getenv("HETRAIN_FAULT"), e);
}

// Under --conv-algo auto every process of a job, and a resumed run, compute with the same
// algorithms, so that they give the bits of one process that never stopped: a resumed run
// takes the decisions its checkpoint kept; over several ranks rank 0 decides (times) and
// every rank takes its decisions. A lone new process decides as its CPU devices open.
static int conv_decide(job *j, ht_error *e) {
    if (j->conv_choices) {
        if (conv_choices_restore(j->conv_choices) < 0)
            return ht_fail(e, "%s: malformed conv_choices \"%.60s\"", j->ckpt_path,
                           j->conv_choices);
        return 0;
    }
    if (ranks_size() == 1) return 0;
    char text[CONV_CHOICES_TEXT] = "";
    if (ranks_rank() == 0) {
        net_conv_decide(&j->m, omp_get_max_threads());
        conv_choices_text(text, sizeof text);
    }
    if (ranks_bcast_text(text, sizeof text, e) < 0) return -1;
    if (ranks_rank() > 0 && conv_choices_restore(text) < 0)
        return ht_fail(e, "rank 0's convolution algorithms are malformed: \"%.60s\"", text);
    return 0;
}

// Everything before the first step: model, data, weights, devices, engine. Nothing is written.
static int job_prepare(job *j, const train_opts *o, ht_error *e) {
    if (o->save && access(o->save, F_OK) == 0)
        return ht_fail(e, "%s already exists; choose another --save path or remove it", o->save);
    if (model_init(&j->m, o->model ? o->model : TRAIN_DEFAULT_MODEL, e) < 0) return -1;
    train_setup *s = &j->m.setup;
    if (o->epochs > 0) s->epochs = o->epochs;
    if (o->batch > 0) s->batch = o->batch;
    if (o->optimizer && optimizer_parse(s, o->optimizer, e) < 0) return ht_wrap(e, "--optimizer");
    if (o->lr >= 0) s->lr = o->lr;
    if (o->val_split >= 0) s->val_split = o->val_split;
    if (o->conv_algo >= 0) s->conv_algo = (conv_algo)o->conv_algo;
    if (o->lr_schedule && lr_schedule_parse(&s->sched, o->lr_schedule, e) < 0)
        return ht_wrap(e, "--lr-schedule");
    if (o->weight_decay >= 0) s->weight_decay = o->weight_decay;
    if (o->wd_mode >= 0) s->wd_mode = (wd_mode)o->wd_mode;
    data_src src = {o->data_dir, o->train_csv, o->train_labels, o->test_csv, o->test_labels};
    data_opts dop = data_opts_of(&j->m, o->layout, o->coarse);
    if (load_data(&src, &dop, &j->all, &j->test, 1, e) < 0) return -1;
    dataset_limit(&j->all, o->limit);
    if (dataset_split(&j->all, s->val_split, o->seed, &j->train, &j->val, e) < 0) return -1;
    dataset_free(&j->all);
    if (j->train.n < 1) return ht_fail(e, "no training samples left after the validation split");
    if (check_fits(&j->m, &j->train, "training data", e) < 0 ||
        check_fits(&j->m, &j->test, "test data", e) < 0)
        return -1;
    if (s->batch > j->train.n) s->batch = j->train.n;
    j->params = ht_malloc(j->m.n_params, sizeof(float), e);
    if (!j->params) return -1;
    if (o->load) {
        if (safetensors_load(o->load, &j->m, j->params, e) < 0) return -1;
    } else {
        model_init_params(&j->m, j->params, o->seed);
    }
    if (s->conv_algo == CONV_ALGO_AUTO && conv_decide(j, e) < 0) return -1;
    if (open_devices(j, o->devices, s->batch, o->mem_limit, e) < 0) return -1;
    data_augment aug = {0};
    if (o->augment && data_augment_parse(&aug, o->augment, e) < 0) return -1;
    engine_config c = {
        .m = &j->m, .devs = j->devs, .n_devs = j->n_devs, .params = j->params,
        .max_batch = s->batch, .seed = o->seed,
        .rebalance = o->balance != BALANCE_AUTO ? 0
                     : o->rebalance > 0         ? o->rebalance
                                                : TRAIN_DEFAULT_REBALANCE,
        .timeout_s = o->device_timeout, .nan_stop = o->nan_stop, .augment = aug,
        .stop_flag = &train_interrupted};
    if (engine_open(&j->g, &c, e) < 0) return -1;
    j->idx = ht_malloc((size_t)j->train.n, sizeof *j->idx, e);
    j->loss = ht_malloc((size_t)s->batch, sizeof *j->loss, e);
    j->pred = ht_malloc((size_t)(j->test.n > s->batch ? j->test.n : s->batch), sizeof *j->pred, e);
    if (!j->idx || !j->loss || !j->pred) return -1;
    return 0;
}

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
            uint32_t b;
            memcpy(&b, &d->x[i], sizeof b);
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

// Bytes of one rank's description: its host, then a line per device (spec, name, capacity,
// micro-batch), never cut short.
#define JOB_RANK_TEXT (256 + HT_MAX_DEVICES * (64 + 512 + 64))

// The job over every rank: names the devices of all ranks in the plan's order ("r<rank>/<spec>";
// a job of one rank, its specs), and checks that every rank has the same data and weights as
// rank 0.
static int job_span(job *j, ht_error *e) {
    int R = ranks_size();
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
    int rc = ranks_allgather(&mine, prints, 1, e) < 0 ||
             ranks_allgather_text(text, j->ranks_text, JOB_RANK_TEXT, e) < 0 ? -1 : 0;
    free(text);
    for (int r = 1; rc == 0 && r < R; r++)
        if (prints[r] != prints[0])
            rc = ht_fail(e, "rank %d's data, batch or initial weights differ from rank 0's (every "
                            "rank reads the same files itself, with the same options)", r);
    free(prints);
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

// The run's --augment in its canonical spelling ("crop:4,flip", "none").
static void augment_text(const train_opts *o, char *buf, size_t len) {
    data_augment a = {0};
    ht_error ignore; // job_prepare has parsed it already
    if (o->augment) data_augment_parse(&a, o->augment, &ignore);
    data_augment_text(&a, buf, len);
}

static void log_header(job *j, const train_opts *o) {
    run_files *rf = &j->rf;
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    run_log(rf, 0, "hetrain %s, run started %s\n", HT_VERSION, when);
    if (o->command_line) run_log(rf, 0, "command: %s\n", o->command_line);
    run_log(rf, 0, "built with: %s, OpenBLAS %s\n", __VERSION__, openblas_get_config());
    describe_setup(rf, &j->m, &j->m.setup, o->seed);
    run_log(rf, 0, "data: %s, %d training, %d validation, %d test samples\n",
            o->train_csv ? o->train_csv : (o->data_dir ? o->data_dir : TRAIN_DEFAULT_DATA),
            j->train.n, j->val.n, j->test.n);
    char aug[DATA_AUGMENT_TEXT];
    augment_text(o, aug, sizeof aug);
    run_log(rf, 0, "augment: %s%s\n", aug, strcmp(aug, "none") ? " (training batches only)" : "");
    for (int d = 0; ranks_size() == 1 && d < j->n_devs; d++) {
        run_log(rf, 0, "device %s: %s, capacity %g, micro-batch %d\n", j->devs[d].spec,
                j->devs[d].name, j->devs[d].capacity, j->devs[d].micro);
        for (const char *p = j->devs[d].detail; *p; p += strcspn(p, "\n"), p += *p == '\n')
            run_log(rf, 0, "device %s: %.*s\n", j->devs[d].spec, (int)strcspn(p, "\n"), p);
        if (j->devs[d].warning[0]) run_log(rf, 0, "warning: %s\n", j->devs[d].warning);
    }
    for (int r = 0; ranks_size() > 1 && r < ranks_size(); r++) { // over several ranks: each rank's host and devices
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
    run_log(rf, 0, "device timeout: %g s per shard\n",
            o->device_timeout > 0 ? o->device_timeout : ENGINE_DEFAULT_TIMEOUT);
    run_log(rf, 0, "files: %s.{metrics.csv,predictions.csv,log}\n", rf->prefix);
}

// Per-epoch sums of the step engine's measurements.
typedef struct epoch_stats {
    double busy[HT_MAX_DEVICES];
    long share[HT_MAX_DEVICES];
    double wait, host;
    double compute;    // the slowest device's compute time, summed over the steps
    int skipped;
    char events[1024]; // this epoch's events for the metrics CSV, "; "-separated
} epoch_stats;

// Logs what the engine reported (device failures, smaller micro-batches, skipped steps) and
// keeps a short form for the epoch's metrics row.
static void drain_events(job *j, const train_opts *o, epoch_stats *es) {
    (void)o;
    const char *raw = engine_take_events(j->g);
    if (!*raw) return;
    // Over several ranks every event says whose it is; each rank prints its own at once, and
    // rank 0 logs every rank's at the epoch's end (epoch_view).
    char ev[4600];
    size_t k = 0;
    for (const char *p = raw; *p && k + 1 < sizeof ev;) {
        size_t n = strcspn(p, "\n");
        char tag[24] = "";
        if (ranks_size() > 1) snprintf(tag, sizeof tag, "rank %d: ", ranks_rank());
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

static void stats_add(epoch_stats *es, const step_stats *st, int n_devs) {
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
static int metrics_keep(job *j, const char *line, ht_error *e) {
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
static void metrics_header(char *buf, size_t len, const job *j) {
    size_t k = (size_t)snprintf(buf, len, "epoch,accuracy,loss,val_accuracy,val_loss,time_s,"
                                          "samples_per_s,sync_s,idle_frac,lr");
    for (int d = 0; d < j->n_all && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, ",share_%s,busy_s_%s", j->all_name[d], j->all_name[d]);
    for (int r = 0; ranks_size() > 1 && r < ranks_size() && k < len; r++)
        k += (size_t)snprintf(buf + k, len - k, ",share_r%d,busy_s_r%d,comm_s_r%d", r, r, r);
    if (ranks_size() > 1 && k < len) k += (size_t)snprintf(buf + k, len - k, ",comm_s");
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
    int R = ranks_size();
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
    int rc = ranks_allgather(mine, all, PER, e) < 0 ||
             ranks_allgather_text(es->events, ev, sizeof es->events, e) < 0 ? -1 : 0;
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
static int epoch_report(job *j, const train_opts *o, int ep, double loss, double acc,
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
        if (ranks_size() > 1 &&
            (sscanf(name, "share_r%d%7s", &r, tail) == 1 ? (rk = 1) :
             sscanf(name, "busy_s_r%d%7s", &r, tail) == 1 ? (rk = 2) :
             sscanf(name, "comm_s_r%d%7s", &r, tail) == 1 ? (rk = 3) : 0) &&
            (r < 0 || r >= ranks_size()))
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
        else if (!strcmp(name, "comm_s") && ranks_size() > 1) snprintf(val, sizeof val, "%.3f", v->comm);
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
    if ((j->rf.metrics && run_metrics_row(&j->rf, row, e) < 0) || metrics_keep(j, row, e) < 0)
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
        if (ranks_size() > 1) snprintf(comm, sizeof comm, "  mpi %.2fs", v->comm);
        run_log(&j->rf, !o->quiet, "%s | sync %.2fs  idle %.1f%%%s\n", line, v->host, 100 * idle, comm);
    }
    return run_files_check(&j->rf, e);
}

// Compares every device with a single-threaded native CPU device on `probe` samples of the
// first epoch (engine_self_check).
static int self_check(job *j, int probe, ht_error *e) {
    device *ref;
    int n;
    // The reference computes its convolutions direct, so the check also bounds what Winograd
    // changes (rounding only). It is closed before the copy of the model it reads goes.
    model direct = j->m;
    direct.setup.conv_algo = CONV_ALGO_DIRECT;
    if (device_open_list(&ref, &n, "cpu:1", &direct, probe, 0, e) < 0)
        return ht_wrap(e, "self-check: the reference device");
    int rc = engine_self_check(j->g, ref, &j->train, j->idx, probe, e);
    device_close_list(ref, n);
    return rc;
}

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
    r->conv_algo = (int)s->conv_algo;
    lr_schedule_text(&s->sched, sched, len);
    r->lr_schedule = sched;
}

// Every rank's per-device values (w per device, local[d * w + i] for this rank's device d) in
// the job's device order, into out (n_all * w). Every rank calls it at the same point.
static int job_gather(const job *j, const double *local, int w, double *out, ht_error *e) {
    int R = ranks_size();
    double *all = ht_malloc((size_t)R * HT_MAX_DEVICES * w, sizeof(double), e);
    if (!all || ranks_allgather(local, all, HT_MAX_DEVICES * w, e) < 0) {
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
static void job_pick(const job *j, const double *list, int w, double *local) {
    for (int k = 0; k < j->n_all; k++)
        if (j->all_rank[k] == ranks_rank())
            memcpy(local + (size_t)j->all_local[k] * w, list + (size_t)k * w, sizeof(double) * (size_t)w);
}

// The job's devices as a checkpoint names them: "cpu:1,cl:0.0", or over several ranks
// "r0/cpu:1,r1/cl:0.0".
static void job_device_list(const job *j, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < j->n_all && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", d ? "," : "", j->all_name[d]);
}

// Writes the job's checkpoint: parameters, optimiser moments, and in the metadata the options
// that define the run, where it stands (epoch, step, the epoch's sums `es`, NULL at an epoch's
// end), the engine's state and the metrics CSV so far. Returns 1 when written, 0 when a default
// checkpoint failed (reported once; training goes on), -1 when an asked-for one failed.
static int save_checkpoint(job *j, const train_opts *o, const epoch_stats *es, ht_error *e) {
    // Every rank's capacities, time fits and epoch sums, in the job's device order; rank 0
    // writes them with the rest.
    engine_state gs;
    engine_get_state(j->g, &gs);
    double loc[7 * HT_MAX_DEVICES] = {0}, *all = ht_malloc((size_t)j->n_all * 7, sizeof(double), e);
    if (!all) return -1;
    for (int d = 0; d < j->n_devs; d++) {
        loc[7 * d] = gs.capacity[d];
        memcpy(&loc[7 * d + 1], gs.fit[d], sizeof gs.fit[d]);
        loc[7 * d + 5] = es ? es->busy[d] : 0;
        loc[7 * d + 6] = es ? (double)es->share[d] : 0;
    }
    int gathered = job_gather(j, loc, 7, all, e);
    if (gathered < 0 || ranks_rank() > 0) { // rank 0 writes the job's checkpoint
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
    meta_fmt(&m, "metrics_rows", "%d", j->metrics_rows);
    char choices[CONV_CHOICES_TEXT];
    conv_choices_text(choices, sizeof choices);
    meta_set(&m, "conv_choices", choices);
    const float *mm, *vv;
    engine_moments(j->g, &mm, &vv);
    ckpt_blob blobs[2] = {{"optim.m", mm, j->m.n_params}, {"optim.v", vv, j->m.n_params}};
    double t0 = ht_now();
    ht_error ce;
    int rc = checkpoint_write(j->ckpt_path, &j->m, engine_params(j->g), blobs, vv ? 2 : 1, m.kv,
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

// --profile: every device that can empties its record and starts filling it, after the
// self-check and calibration, so the records hold the training steps alone.
static int profile_start(job *j, ht_error *e) {
    for (int d = 0; d < j->n_devs; d++) {
        int rc = device_profile_start(&j->devs[d], e);
        if (rc < 0) return ht_wrap(e, "--profile: device %s", j->devs[d].spec);
        if (rc == 0) run_log(&j->rf, 0, "profile: device %s keeps no record of its own\n", j->devs[d].spec);
    }
    j->profiling = 1;
    memset(&j->prof_steps, 0, sizeof j->prof_steps);
    return 0;
}

// --profile, at the end of training: every device's table, printed (unless --quiet) and
// logged, and all of them as <out>/<name>.profile.csv. Over several ranks rank 0 writes its own
// devices' tables.
static int profile_report(job *j, const train_opts *o, ht_error *e) {
    if (!j->profiling || j->prof_steps.steps == 0 || ranks_rank() > 0) return 0;
    int L = j->m.n_layers, n = 0, rc = 0;
    device_profile *profs = ht_calloc((size_t)j->n_devs, sizeof *profs, e);
    const char **specs = ht_calloc((size_t)j->n_devs, sizeof *specs, e);
    char *text = NULL;
    size_t len = 0;
    FILE *f = profs && specs ? open_memstream(&text, &len) : NULL;
    if (!f) {
        free(profs);
        free(specs);
        return profs && specs ? ht_fail(e, "--profile: out of memory") : -1;
    }
    if (ranks_size() > 1) fprintf(f, "profile: rank 0's devices only\n");
    for (int d = 0; d < j->n_devs && rc == 0; d++) {
        device_profile *p = &profs[n];
        if (device_profile_init(p, L, e) < 0) {
            rc = -1;
            break;
        }
        if (engine_gave_up(j->g, d) || !device_profile_get(&j->devs[d], p)) {
            fprintf(f, "profile of %s: no record (the device keeps none, or stopped answering)\n",
                    j->devs[d].spec);
            device_profile_free(p);
            continue;
        }
        profile_table_write(f, &j->m, j->devs[d].spec, j->devs[d].name, p, &j->prof_steps);
        specs[n++] = j->devs[d].spec;
    }
    fclose(f);
    if (rc == 0) {
        run_log(&j->rf, !o->quiet, "%s", text);
        char path[1200];
        snprintf(path, sizeof path, "%s.profile.csv", j->rf.prefix);
        rc = profile_csv_write(path, &j->m, n, specs, profs, &j->prof_steps, e);
        if (rc == 0) run_log(&j->rf, !o->quiet, "profile: %s\n", path);
    }
    for (int d = 0; d < n; d++) device_profile_free(&profs[d]);
    free(profs);
    free(specs);
    free(text);
    return rc;
}

static int run_epochs(job *j, const train_opts *o, epoch_stats *resumed, ht_error *e) {
    const train_setup *s = &j->m.setup;
    int n = j->train.n, start = j->epochs_done;
    for (int ep = start; ep < s->epochs; ep++) {
        double t0 = ht_now();
        shuffle(j->idx, n, o->seed, ep);
        if (ep == start && !o->no_self_check) {
            int probe = s->batch < TRAIN_SELF_CHECK_SAMPLES ? s->batch : TRAIN_SELF_CHECK_SAMPLES;
            if (self_check(j, probe, e) < 0) return -1;
            drain_events(j, o, NULL);
            run_log(&j->rf, 0, "self-check: %d of %d device%s agree with the CPU reference\n",
                    engine_active(j->g), j->n_devs, j->n_devs == 1 ? "" : "s");
        }
        int calibrated = 0;
        if (ep == start && !j->resumed_caps && o->balance == BALANCE_AUTO &&
            (calibrated = engine_calibrate(j->g, &j->train, j->idx, s->batch, e)) < 0)
            return -1;
        if (calibrated) {
            // Every rank's capacities, in the job's device order.
            double w[HT_MAX_DEVICES], *all = ht_malloc((size_t)ranks_size() * HT_MAX_DEVICES, sizeof(double), e);
            if (!all) return -1;
            engine_capacities(j->g, w);
            if (ranks_allgather(w, all, HT_MAX_DEVICES, e) < 0) {
                free(all);
                return -1;
            }
            char line[2048];
            size_t m = 0;
            for (int d = 0; d < j->n_all && m < sizeof line; d++)
                m += (size_t)snprintf(line + m, sizeof line - m, "%s%s@%.3g", d ? "," : "",
                                      j->all_name[d], all[j->all_rank[d] * HT_MAX_DEVICES + j->all_local[d]]);
            free(all);
            run_log(&j->rf, !o->quiet, "calibrated capacities: %s\n", line);
            t0 = ht_now();
        }
        if (ep == start && o->profile && profile_start(j, e) < 0) return -1;
        ranks_take_comm_s(); // the epoch's time in MPI starts now
        epoch_stats es;
        memset(&es, 0, sizeof es);
        // The job's sums are this epoch's: zero, or a resumed epoch's so far (reset at the end
        // of every epoch, below).
        if (ep == start && j->steps_into > 0 && resumed) es = *resumed;
        t0 -= j->epoch_s; // time the epoch took before a checkpoint it resumes from
        progress pr;
        progress_begin(&pr, o->progress, ep + 1, s->epochs, n);
        for (int off = j->steps_into * s->batch; off < n; off += s->batch) {
            if (engine_stopping(j->g)) {
                // Over several ranks a rank that was not signalled stops with the others.
                if (!train_interrupted) train_interrupted = SIGTERM;
                progress_end(&pr);
                j->epoch_s = ht_now() - t0;
                int saved = save_checkpoint(j, o, &es, e);
                if (saved < 0) return -1;
                return ht_fail(e, "interrupted in epoch %d after %ld samples%s%s", ep + 1, j->seen,
                               saved ? "; checkpoint: " : "", saved ? j->ckpt_path : "");
            }
            int B = n - off < s->batch ? n - off : s->batch;
            // The schedule's factor is a function of where the step is in the run, so a
            // resumed run continues it exactly.
            long per_epoch = (n + s->batch - 1) / s->batch;
            engine_set_lr_factor(j->g, lr_schedule_factor(&s->sched, ep, ep * per_epoch + off / s->batch,
                                                          s->epochs * per_epoch));
            j->step_lr = engine_lr(j->g);
            step_stats st;
            if (j->profiling && j->prof_steps.steps == 0) j->prof_start = ht_now();
            if (engine_train_step(j->g, &j->train, j->idx + off, B, (uint32_t)ep, j->loss,
                                  j->pred, &st, e) < 0) {
                progress_end(&pr);
                drain_events(j, o, NULL);
                return ht_wrap(e, "epoch %d, step %d", ep + 1, off / s->batch + 1);
            }
            if (j->profiling) {
                profile_steps_add(&j->prof_steps, &st, B);
                j->prof_steps.span_s = ht_now() - j->prof_start;
            }
            j->steps_into++;
            stats_add(&es, &st, j->n_devs);
            drain_events(j, o, &es);
            if (!st.skipped) { // a skipped step's losses may be NaN: leave them out
                for (int i = 0; i < B; i++) {
                    j->lsum += j->loss[i];
                    j->correct += j->pred[i] == j->train.y[j->idx[off + i]];
                }
                j->counted += B;
            }
            j->seen += B;
            progress_update(&pr, j->seen, j->counted ? j->lsum / j->counted : NAN,
                            j->counted ? (double)j->correct / j->counted : NAN);
            if (o->checkpoint_every > 0 && off + B < n) {
                engine_state gs;
                engine_get_state(j->g, &gs);
                if (gs.step % o->checkpoint_every == 0) {
                    j->epoch_s = ht_now() - t0;
                    if (save_checkpoint(j, o, &es, e) < 0) return -1;
                }
            }
        }
        progress_end(&pr);
        double train_s = ht_now() - t0;
        double vloss = NAN, vacc = NAN;
        if (j->val.n > 0 && evaluate(j->g, &j->m, s->batch, &j->val, &vloss, &vacc, NULL, NULL, e) < 0)
            return ht_wrap(e, "validation after epoch %d", ep + 1);
        if (epoch_report(j, o, ep, j->counted ? j->lsum / j->counted : NAN,
                         j->counted ? (double)j->correct / j->counted : NAN, vloss, vacc,
                         ht_now() - t0, train_s, &es, ranks_take_comm_s(), e) < 0)
            return -1;
        j->epochs_done = ep + 1;
        j->steps_into = 0;
        j->lsum = j->epoch_s = 0;
        j->correct = j->seen = j->counted = 0;
        if (save_checkpoint(j, o, NULL, e) < 0) return -1;
    }
    return 0;
}

static int finish(job *j, const train_opts *o, ht_error *e) {
    if (j->test.n > 0) {
        double tloss, tacc;
        if (evaluate(j->g, &j->m, j->m.setup.batch, &j->test, &tloss, &tacc, j->pred, NULL, e) < 0)
            return ht_wrap(e, "test evaluation");
        if (ranks_rank() == 0 && predictions_write(j->rf.predictions_path, j->pred, j->test.n, e) < 0)
            return -1;
        if (j->test.y)
            run_log(&j->rf, !o->quiet, "test: loss %.4f  accuracy %.4f  (%d samples)\n", tloss,
                    tacc, j->test.n);
        run_log(&j->rf, !o->quiet, "predictions: %s\n", j->rf.predictions_path);
    }
    return 0;
}

// The run a checkpoint continues: `arg` is the run's prefix (<out>/<name>) or its .ckpt.
static int resume_paths(const char *arg, char *prefix, char *path, ht_error *e) {
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

// Puts the job where the checkpoint left it: parameters, optimiser, engine state (capacities
// only on the same devices), position and sums, and the run's files reopened.
static int resume_from(job *j, const train_opts *o, const checkpoint *c, const char *prefix,
                       epoch_stats *es, ht_error *e);
static int resume_state(job *j, const train_opts *o, const char *prefix, epoch_stats *es,
                        ht_error *e) {
    const char *path = j->ckpt_path;
    checkpoint full, *c = &full;
    if (checkpoint_read(path, &j->m, j->params, c, e) < 0) return -1;
    int rc = resume_from(j, o, c, prefix, es, e);
    checkpoint_free(c);
    return rc;
}

static int resume_from(job *j, const train_opts *o, const checkpoint *c, const char *prefix,
                       epoch_stats *es, ht_error *e) {
    const char *path = j->ckpt_path;
    size_t nm = 0, nv = 0;
    const float *mm = checkpoint_blob(c, "optim.m", &nm), *vv = checkpoint_blob(c, "optim.v", &nv);
    if (!mm || nm != j->m.n_params || (vv && nv != j->m.n_params))
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
    j->epochs_done = (int)meta_long(c, "epochs_done");
    j->steps_into = (int)meta_long(c, "steps_into");
    j->lsum = meta_double(c, "loss_sum");
    j->correct = meta_long(c, "correct");
    j->seen = meta_long(c, "seen");
    j->counted = meta_long(c, "counted");
    j->epoch_s = meta_double(c, "epoch_s");
    memset(es, 0, sizeof *es);
    double sums[2 + 2 * HT_MAX_DEVICES], per[2 * HT_MAX_DEVICES] = {0};
    if (same && meta_list(c, "epoch_stats", sums, 2 + 2 * na) == 2 + 2 * na) {
        if (ranks_rank() == 0) { // the job's sums are rank 0's in the view (epoch_view_make)
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
        if (metrics_keep(j, line, e) < 0) return -1;
        p += n + (p[n] == '\n');
    }
    if (ranks_rank() == 0 && run_files_resume(&j->rf, prefix, j->metrics, j->metrics_rows, e) < 0)
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
    for (int d = 0; ranks_size() == 1 && d < j->n_devs; d++) // as the header logs them
        for (const char *p = j->devs[d].detail; *p; p += strcspn(p, "\n"), p += *p == '\n')
            run_log(&j->rf, 0, "device %s: %.*s\n", j->devs[d].spec, (int)strcspn(p, "\n"), p);
    return 0;
}

// train_run with the metadata of the checkpoint it resumes from in *ck (the options in use point
// into it, so the caller frees it after the run).
// This rank's --devices: the KEY=SPEC naming its rank, else the one naming its host, else a
// SPEC without a key. NULL (the default devices) when none applies.
static const char *devices_of_rank(const train_opts *o, ht_error *e, int *bad) {
    char host[256] = "", rank[16];
    gethostname(host, sizeof host - 1);
    snprintf(rank, sizeof rank, "%d", ranks_rank());
    const char *by_rank = NULL, *by_host = NULL, *plain = NULL;
    *bad = 0;
    for (int i = 0; i < o->n_devices_by; i++) {
        const char *v = o->devices_by[i], *eq = strchr(v, '=');
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

static int run_job(const train_opts *given, checkpoint *ck, ht_error *e) {
    job *j = ht_calloc(1, sizeof *j, e);
    if (!j) return -1;
    train_opts ro, follower, mine;
    run_opts_store store;
    char resume_notes[1024] = "";
    const train_opts *o = given;
    char prefix[1100];
    epoch_stats res_es, *resumed_es = NULL;
    // A resumed run is the command it continues (runopts.h): its options first, then this
    // rank's share of them.
    if (given->resume) {
        if (resume_paths(given->resume, prefix, j->ckpt_path, e) < 0 ||
            checkpoint_read_meta(j->ckpt_path, ck, e) < 0 ||
            run_opts_resume(given, ck, j->ckpt_path, &ro, &store, resume_notes,
                            sizeof resume_notes, e) < 0) {
            free(j);
            return -1;
        }
        if (ro.save && !(ro.given & RUN_OPT_GIVEN(RUN_OPT_SAVE)) && access(ro.save, F_OK) == 0) {
            ht_fail(e, "%s already exists: it is the --save of the run being resumed (%s); give "
                       "--save another path, or remove it", ro.save, j->ckpt_path);
            free(j);
            return -1;
        }
        given = o = &ro;
        j->conv_choices = checkpoint_meta(ck, "conv_choices");
    }
    if (given->n_devices_by > 0) {
        int bad;
        mine = *given;
        mine.devices = devices_of_rank(given, e, &bad);
        if (bad) {
            free(j);
            return -1;
        }
        given = o = &mine;
    }
    j->events_out = !given->quiet;
    if (ranks_rank() > 0) { // rank 0 speaks and writes for the job; the others train and warn
        follower = *given;
        follower.quiet = 1;
        follower.progress = 0;
        follower.save = NULL;
        given = o = &follower;
    }
    if (o->save && output_check(o->save, "--save", e) < 0) {
        free(j);
        return -1;
    }
    if (job_prepare(j, o, e) < 0 || job_span(j, e) < 0) {
        job_free(j);
        return -1;
    }
    if (o->resume) {
        int rc = resume_state(j, o, prefix, &res_es, e);
        if (rc < 0) {
            job_free(j);
            return -1;
        }
        resumed_es = &res_es;
        char kept[2048];
        run_opts_kept_cli(o, kept, sizeof kept);
        if (*kept) run_log(&j->rf, 0, "resume: the run's %s\n", kept);
        if (*resume_notes) run_log(&j->rf, !o->quiet, "resume: %s\n", resume_notes);
    } else {
        char name[256];
        if (o->run_name) {
            snprintf(name, sizeof name, "%s", o->run_name);
        } else {
            char stamp[32];
            time_t now = time(NULL);
            strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
            snprintf(name, sizeof name, "%s-%s", j->m.name, stamp);
        }
        char header[4096];
        metrics_header(header, sizeof header, j);
        if ((ranks_rank() == 0 &&
             run_files_open(&j->rf, o->out_dir ? o->out_dir : "results", name, header, e) < 0) ||
            metrics_keep(j, header, e) < 0) {
            job_free(j);
            return -1;
        }
        snprintf(j->ckpt_path, sizeof j->ckpt_path, "%s.ckpt", j->rf.prefix);
        log_header(j, o);
    }
    if (run_files_check(&j->rf, e) < 0) {
        job_free(j);
        return -1;
    }
    if (!o->quiet) {
        char list[1024];
        size_t k = 0;
        for (int d = 0; d < j->n_all && k < sizeof list; d++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", d ? "," : "", j->all_name[d]);
        printf("training %s on %d samples (%d validation) with %s; results in %s.*\n", j->m.name,
               j->train.n, j->val.n, list, j->rf.prefix);
    }
    int rc = run_epochs(j, o, resumed_es, e);
    // The profile of the steps that ran, even when the run stopped early.
    ht_error pe;
    if (profile_report(j, o, &pe) < 0) {
        if (rc == 0) *e = pe;
        else run_log(&j->rf, 0, "error writing the profile: %s\n", pe.msg);
        rc = -1;
    }
    if (rc == 0) rc = finish(j, o, e);
    if (o->save) {
        // Weights are saved even after a failure, so an interrupted run can be resumed.
        ht_error se;
        if (safetensors_save(o->save, &j->m, engine_params(j->g), &se) < 0) {
            if (rc == 0) *e = se;
            else run_log(&j->rf, 0, "error saving weights: %s\n", se.msg);
            rc = -1;
        } else {
            // Say exactly what they hold: a run stopped mid-epoch saves that epoch's steps too.
            char part[96] = "";
            if (j->steps_into > 0)
                snprintf(part, sizeof part, " and %d of %d steps of epoch %d", j->steps_into,
                         (j->train.n + j->m.setup.batch - 1) / j->m.setup.batch, j->epochs_done + 1);
            run_log(&j->rf, !o->quiet, "weights: %s (after %d epoch%s%s)\n", o->save,
                    j->epochs_done, j->epochs_done == 1 ? "" : "s", part);
        }
    }
    if (j->ckpt_count > 0)
        run_log(&j->rf, 0, "checkpoints: %d written to %s, %.3f s in all\n", j->ckpt_count,
                j->ckpt_path, j->ckpt_s);
    if (rc < 0) run_log(&j->rf, 0, "error: %s\n", e->msg);
    ht_error ce;
    if (run_files_close(&j->rf, &ce) < 0 && rc == 0) {
        *e = ce;
        rc = -1;
    }
    job_free(j);
    return rc;
}

int train_run(const train_opts *o, ht_error *e) {
    checkpoint ck;
    memset(&ck, 0, sizeof ck);
    int rc = run_job(o, &ck, e);
    checkpoint_free(&ck);
    return rc;
}

int predict_run(const predict_opts *o, ht_error *e) {
    job *j = ht_calloc(1, sizeof *j, e);
    if (!j) return -1;
    int rc = -1;
    if (access(o->out, F_OK) == 0) {
        ht_fail(e, "%s already exists; choose another --out or remove it", o->out);
        goto out;
    }
    if (output_check(o->out, "--out", e) < 0) goto out;
    if (model_init(&j->m, o->model ? o->model : TRAIN_DEFAULT_MODEL, e) < 0) goto out;
    if (o->conv_algo >= 0) j->m.setup.conv_algo = (conv_algo)o->conv_algo;
    data_src src = {o->data_dir, NULL, NULL, o->test_csv, o->test_labels};
    data_opts dop = data_opts_of(&j->m, o->layout, o->coarse);
    if (load_data(&src, &dop, NULL, &j->test, 0, e) < 0) goto out;
    dataset_limit(&j->test, o->limit);
    if (j->test.n < 1) {
        ht_fail(e, "no test samples to predict");
        goto out;
    }
    if (check_fits(&j->m, &j->test, "test data", e) < 0) goto out;
    j->params = ht_malloc(j->m.n_params, sizeof(float), e);
    if (!j->params || safetensors_load(o->load, &j->m, j->params, e) < 0) goto out;
    int chunk = j->test.n < 1000 ? j->test.n : 1000;
    if (open_devices(j, o->devices, chunk, 0, e) < 0)
        goto out;
    engine_config c = {.m = &j->m, .devs = j->devs, .n_devs = j->n_devs, .params = j->params,
                       .max_batch = chunk};
    if (engine_open(&j->g, &c, e) < 0) goto out;
    j->pred = ht_malloc((size_t)j->test.n, sizeof *j->pred, e);
    double loss, acc;
    int bad;
    if (!j->pred || evaluate(j->g, &j->m, chunk, &j->test, &loss, &acc, j->pred, &bad, e) < 0) goto out;
    if (bad >= 0) {
        ht_fail(e, "%s: the network's output for test sample %d is not finite (the weights "
                   "overflow it); no predictions written", o->load, bad + 1);
        goto out;
    }
    if (predictions_write(o->out, j->pred, j->test.n, e) < 0) goto out;
    if (j->test.y) printf("accuracy %.4f  loss %.4f  (%d samples)\n", acc, loss, j->test.n);
    printf("predictions: %s\n", o->out);
    rc = 0;
out:
    job_free(j);
    return rc;
}
