// The training job: loads data and model, opens the devices, runs epochs through the step
// engine, evaluates, and writes the run's files.
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "device.h"
#include "engine.h"
#include "fault.h"
#include "model.h"
#include "net.h"
#include "progress.h"
#include "results.h"
#include "rng.h"
#include "safetensors.h"

volatile int train_interrupted;

// Loads the training set and (optionally) the test set named by the options.
static int load_data(const char *data_dir, const char *train_csv, const char *test_csv,
                     dataset *train, dataset *test, int want_train, ht_error *e) {
    if (train_csv || (test_csv && !want_train)) {
        if (want_train && dataset_load_csv(train, train_csv, e) < 0) return -1;
        if (want_train && !train->y)
            return ht_fail(e, "%s: training data needs a label column (header \"label,pixel0,...\")",
                           train_csv);
        if (test_csv && dataset_load_csv(test, test_csv, e) < 0) return -1;
        return 0;
    }
    const char *dir = data_dir ? data_dir : TRAIN_DEFAULT_DATA;
    if (want_train) {
        if (dataset_load_dir(train, test, dir, e) < 0) return -1;
    } else {
        if (dataset_load_dir(NULL, test, dir, e) < 0) return -1;
    }
    if (test_csv) {
        dataset_free(test);
        if (dataset_load_csv(test, test_csv, e) < 0) return -1;
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
    // Where training stands: whole epochs done, and steps done of the next one.
    int epochs_done, steps_into;
} job;

// Frees the job itself too (it is on the heap: a device's context points at j->m).
static void job_free(job *j) {
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
    // A worker the engine gave up on may still be inside its device, which reads the model:
    // leave the model to the process's end (main leaves with _exit then).
    fault_release_hangs(); // an injected hang (HETRAIN_FAULT) comes back now
    if (engine_wait_strays(2.0) > 0) return;
    model_free(&j->m);
    free(j);
}

// Opens the devices of spec for batches of `batch`, each behind a fault-injecting wrapper when
// $HETRAIN_FAULT names it (fault.h; for testing the failure paths).
static int open_devices(job *j, const char *spec, int batch, uint64_t mem_limit, ht_error *e) {
    if (device_open_list(&j->devs, &j->n_devs, spec, &j->m, batch, mem_limit, e) < 0) return -1;
    return fault_wrap_devices(j->devs, j->n_devs, &j->m, getenv("HETRAIN_FAULT"), e);
}

// Everything before the first step: model, data, weights, devices, engine. Nothing is written.
static int job_prepare(job *j, const train_opts *o, ht_error *e) {
    if (o->save && access(o->save, F_OK) == 0)
        return ht_fail(e, "%s already exists; choose another --save path or remove it", o->save);
    if (model_init(&j->m, o->model ? o->model : TRAIN_DEFAULT_MODEL, e) < 0) return -1;
    train_setup *s = &j->m.setup;
    if (o->epochs > 0) s->epochs = o->epochs;
    if (o->batch > 0) s->batch = o->batch;
    if (o->lr >= 0) s->lr = o->lr;
    if (o->val_split >= 0) s->val_split = o->val_split;
    if (load_data(o->data_dir, o->train_csv, o->test_csv, &j->all, &j->test, 1, e) < 0) return -1;
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
    if (open_devices(j, o->devices, s->batch, o->mem_limit, e) < 0) return -1;
    if (engine_open(&j->g, &j->m, j->devs, j->n_devs, j->params, s, s->batch, o->seed, e) < 0)
        return -1;
    engine_set_balance(j->g, o->balance, o->rebalance > 0 ? o->rebalance : TRAIN_DEFAULT_REBALANCE);
    engine_set_timeout(j->g, o->device_timeout);
    engine_set_nan_stop(j->g, o->nan_stop);
    j->idx = ht_malloc((size_t)j->train.n, sizeof *j->idx, e);
    j->loss = ht_malloc((size_t)s->batch, sizeof *j->loss, e);
    j->pred = ht_malloc((size_t)(j->test.n > s->batch ? j->test.n : s->batch), sizeof *j->pred, e);
    if (!j->idx || !j->loss || !j->pred) return -1;
    return 0;
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
    for (int d = 0; d < j->n_devs; d++)
        run_log(rf, 0, "device %s: %s, capacity %g, micro-batch %d\n", j->devs[d].spec,
                j->devs[d].name, j->devs[d].capacity, j->devs[d].micro);
    run_log(rf, 0, "device timeout: %g s per shard\n",
            o->device_timeout > 0 ? o->device_timeout : ENGINE_DEFAULT_TIMEOUT);
    run_log(rf, 0, "files: %s.{metrics.csv,predictions.csv,log}\n", rf->prefix);
}

// Per-epoch sums of the step engine's measurements.
typedef struct epoch_stats {
    double busy[HT_MAX_DEVICES];
    long share[HT_MAX_DEVICES];
    double wait, host;
    int skipped;
    char events[1024]; // this epoch's events for the metrics CSV, "; "-separated
} epoch_stats;

// Logs what the engine reported (device failures, smaller micro-batches, skipped steps) and
// keeps a short form for the epoch's metrics row.
static void drain_events(job *j, const train_opts *o, epoch_stats *es) {
    const char *ev = engine_take_events(j->g);
    if (!*ev) return;
    run_log(&j->rf, 0, "%s", ev);
    if (!o->quiet) fputs(ev, stderr);
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
    es->skipped += st->skipped;
}

// The metrics CSV header: Keras's CSVLogger columns, hetrain's timing, then per device.
static void metrics_header(char *buf, size_t len, const device *devs, int n) {
    size_t k = (size_t)snprintf(buf, len, "epoch,accuracy,loss,val_accuracy,val_loss,time_s,"
                                          "samples_per_s,sync_s,idle_frac");
    for (int d = 0; d < n && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, ",share_%s,busy_s_%s", devs[d].spec, devs[d].spec);
    if (k < len) snprintf(buf + k, len - k, ",events");
}

// Writes the epoch's metrics row and log lines; fails when a write to the run's files did.
static int epoch_report(job *j, const train_opts *o, int ep, double loss, double acc,
                        double vloss, double vacc, double el, double train_s,
                        const epoch_stats *es, ht_error *e) {
    const train_setup *s = &j->m.setup;
    int n = j->train.n, nd = j->n_devs;
    double busy_total = 0;
    for (int d = 0; d < nd; d++) busy_total += es->busy[d];
    double idle = busy_total + es->wait > 0 ? es->wait / (busy_total + es->wait) : 0;
    char row[4096], vpart[128] = ",";
    if (j->val.n > 0) snprintf(vpart, sizeof vpart, "%.6f,%.6f", vacc, vloss);
    size_t k = (size_t)snprintf(row, sizeof row, "%d,%.6f,%.6f,%s,%.3f,%.1f,%.3f,%.4f", ep, acc,
                                loss, vpart, el, n / train_s, es->host, idle);
    for (int d = 0; d < nd && k < sizeof row; d++)
        k += (size_t)snprintf(row + k, sizeof row - k, ",%.4f,%.3f", (double)es->share[d] / n,
                              es->busy[d]);
    char quoted[2100];
    csv_quote(quoted, sizeof quoted, es->events);
    if (k < sizeof row) snprintf(row + k, sizeof row - k, ",%s", es->events[0] ? quoted : "");
    if (run_metrics_row(&j->rf, row, e) < 0) return -1;
    char vtext[96] = "";
    if (j->val.n > 0) snprintf(vtext, sizeof vtext, "  val_loss %.4f  val_acc %.4f", vloss, vacc);
    run_log(&j->rf, !o->quiet, "epoch %d/%d  loss %.4f  acc %.4f%s  %.1fs  %.0f samples/s\n",
            ep + 1, s->epochs, loss, acc, vtext, el, n / train_s);
    if (nd > 1) {
        char line[2048];
        size_t m = (size_t)snprintf(line, sizeof line, "epoch %d/%d ", ep + 1, s->epochs);
        for (int d = 0; d < nd && m < sizeof line; d++)
            m += (size_t)snprintf(line + m, sizeof line - m, "%s %s %.0f%% %.1fs", d ? " |" : "",
                                  j->devs[d].spec, 100.0 * es->share[d] / n, es->busy[d]);
        run_log(&j->rf, !o->quiet, "%s | sync %.2fs  idle %.1f%%\n", line, es->host, 100 * idle);
    }
    return run_files_check(&j->rf, e);
}

// Compares every device with a single-threaded native CPU device on `probe` samples of the
// first epoch (engine_self_check).
static int self_check(job *j, int probe, ht_error *e) {
    device *ref;
    int n;
    if (device_open_list(&ref, &n, "cpu:1", &j->m, probe, 0, e) < 0)
        return ht_wrap(e, "self-check: the reference device");
    int rc = engine_self_check(j->g, ref, &j->train, j->idx, probe, e);
    device_close_list(ref, n);
    return rc;
}

static int run_epochs(job *j, const train_opts *o, ht_error *e) {
    const train_setup *s = &j->m.setup;
    int n = j->train.n;
    for (int ep = 0; ep < s->epochs; ep++) {
        double t0 = ht_now();
        shuffle(j->idx, n, o->seed, ep);
        if (ep == 0 && !o->no_self_check) {
            int probe = s->batch < TRAIN_SELF_CHECK_SAMPLES ? s->batch : TRAIN_SELF_CHECK_SAMPLES;
            if (self_check(j, probe, e) < 0) return -1;
            drain_events(j, o, NULL);
            run_log(&j->rf, 0, "self-check: %d of %d device%s agree with the CPU reference\n",
                    engine_active(j->g), j->n_devs, j->n_devs == 1 ? "" : "s");
        }
        if (ep == 0 && engine_active(j->g) > 1 && o->balance == BALANCE_AUTO) {
            if (engine_calibrate(j->g, &j->train, j->idx, s->batch, e) < 0) return -1;
            double w[HT_MAX_DEVICES];
            engine_capacities(j->g, w);
            char line[1024];
            size_t m = 0;
            for (int d = 0; d < j->n_devs && m < sizeof line; d++)
                m += (size_t)snprintf(line + m, sizeof line - m, "%s%s@%.3g", d ? "," : "",
                                      j->devs[d].spec, w[d]);
            run_log(&j->rf, !o->quiet, "calibrated capacities: %s\n", line);
            t0 = ht_now();
        }
        progress pr;
        progress_begin(&pr, o->progress, ep + 1, s->epochs, n);
        double lsum = 0;
        long correct = 0, seen = 0, counted = 0;
        epoch_stats es;
        memset(&es, 0, sizeof es);
        for (int off = 0; off < n; off += s->batch) {
            if (train_interrupted) {
                progress_end(&pr);
                return ht_fail(e, "interrupted in epoch %d after %ld samples", ep + 1, seen);
            }
            int B = n - off < s->batch ? n - off : s->batch;
            step_stats st;
            if (engine_train_step(j->g, &j->train, j->idx + off, B, (uint32_t)ep, j->loss,
                                  j->pred, &st, e) < 0) {
                progress_end(&pr);
                drain_events(j, o, NULL);
                return ht_wrap(e, "epoch %d, step %d", ep + 1, off / s->batch + 1);
            }
            j->steps_into++;
            stats_add(&es, &st, j->n_devs);
            drain_events(j, o, &es);
            if (!st.skipped) { // a skipped step's losses may be NaN: leave them out
                for (int i = 0; i < B; i++) {
                    lsum += j->loss[i];
                    correct += j->pred[i] == j->train.y[j->idx[off + i]];
                }
                counted += B;
            }
            seen += B;
            progress_update(&pr, seen, counted ? lsum / counted : NAN,
                            counted ? (double)correct / counted : NAN);
        }
        progress_end(&pr);
        double train_s = ht_now() - t0;
        double vloss = NAN, vacc = NAN;
        if (j->val.n > 0 && evaluate(j->g, &j->m, s->batch, &j->val, &vloss, &vacc, NULL, NULL, e) < 0)
            return ht_wrap(e, "validation after epoch %d", ep + 1);
        if (epoch_report(j, o, ep, counted ? lsum / counted : NAN,
                         counted ? (double)correct / counted : NAN, vloss, vacc, ht_now() - t0,
                         train_s, &es, e) < 0)
            return -1;
        j->epochs_done = ep + 1;
        j->steps_into = 0;
    }
    return 0;
}

static int finish(job *j, const train_opts *o, ht_error *e) {
    if (j->test.n > 0) {
        double tloss, tacc;
        if (evaluate(j->g, &j->m, j->m.setup.batch, &j->test, &tloss, &tacc, j->pred, NULL, e) < 0)
            return ht_wrap(e, "test evaluation");
        if (predictions_write(j->rf.predictions_path, j->pred, j->test.n, e) < 0) return -1;
        if (j->test.y)
            run_log(&j->rf, !o->quiet, "test: loss %.4f  accuracy %.4f  (%d samples)\n", tloss,
                    tacc, j->test.n);
        run_log(&j->rf, !o->quiet, "predictions: %s\n", j->rf.predictions_path);
    }
    return 0;
}

int train_run(const train_opts *o, ht_error *e) {
    job *j = ht_calloc(1, sizeof *j, e);
    if (!j) return -1;
    if (o->save && output_check(o->save, "--save", e) < 0) return -1;
    if (job_prepare(j, o, e) < 0) {
        job_free(j);
        return -1;
    }
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
    metrics_header(header, sizeof header, j->devs, j->n_devs);
    if (run_files_open(&j->rf, o->out_dir ? o->out_dir : "results", name, header, e) < 0) {
        job_free(j);
        return -1;
    }
    log_header(j, o);
    if (run_files_check(&j->rf, e) < 0) {
        job_free(j);
        return -1;
    }
    if (!o->quiet) {
        char list[1024];
        size_t k = 0;
        for (int d = 0; d < j->n_devs && k < sizeof list; d++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", d ? "," : "", j->devs[d].spec);
        printf("training %s on %d samples (%d validation) with %s; results in %s.*\n", j->m.name,
               j->train.n, j->val.n, list, j->rf.prefix);
    }
    int rc = run_epochs(j, o, e);
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
    if (rc < 0) run_log(&j->rf, 0, "error: %s\n", e->msg);
    ht_error ce;
    if (run_files_close(&j->rf, &ce) < 0 && rc == 0) {
        *e = ce;
        rc = -1;
    }
    job_free(j);
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
    if (load_data(o->data_dir, NULL, o->test_csv, NULL, &j->test, 0, e) < 0) goto out;
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
    if (engine_open(&j->g, &j->m, j->devs, j->n_devs, j->params, &j->m.setup, chunk, 0, e) < 0) goto out;
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
