// A job's preparation and end: the model and its setup from the options, the data, the
// initial weights, the devices and the engine over them; freeing all of it. And the evaluation
// of a data set through the engine, for validation, test and predict.
#include "app/job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/conv_algo.h"
#include "devices/fault.h"
#include "core/ht_omp.h"
#include "io/kerash5.h"
#include "nn/net.h"
#include "nn/optim.h"
#include "sharding/span.h"
#include "io/safetensors.h"

volatile int train_interrupted; // train.h; the engine watches it (engine_config.stop_flag)

// Mean loss and accuracy over a labelled set (pred may be NULL; loss/acc skipped without labels).
// A sample whose probabilities are not all finite (weights that overflow) makes both NaN, never
// a clamped number; *nonfinite (may be NULL) gets the first such sample, else -1.
int job_evaluate(engine *g, const model *m, int chunk, const dataset *d, double *loss,
                 double *acc, int32_t *pred, float *scores, int *nonfinite, ht_error *e) {
    int nc = m->n_classes;
    float *probs = ht_malloc((size_t)chunk * nc, sizeof(float), e);
    if (!probs) return -1;
    double lsum = 0;
    long correct = 0;
    int bad = -1;
    const size_t yw = (size_t)m->label_width;
    for (int off = 0; off < d->n; off += chunk) {
        int n = d->n - off < chunk ? d->n - off : chunk;
        if (engine_infer(g, d, off, n, probs, e) < 0) {
            free(probs);
            return -1;
        }
        if (scores) memcpy(scores + (size_t)off * nc, probs, sizeof(float) * (size_t)n * nc);
        for (int i = 0; i < n; i++) {
            const float *p = probs + (size_t)i * nc;
            int32_t k = net_predict(m, p);
            int finite = 1;
            for (int c = 0; c < nc; c++) finite &= isfinite(p[c]);
            if (!finite && bad < 0) bad = off + i;
            if (pred) pred[off + i] = k;
            if (d->y) {
                const uint8_t *y = d->y + (size_t)(off + i) * yw;
                lsum += net_prob_loss(m, p, y);
                correct += net_labels_right(m, k, y);
            }
        }
    }
    free(probs);
    // As Keras's evaluate: the regularizers' term (at the weights evaluated) is in the loss.
    if (loss)
        *loss = d->n && bad < 0 ? lsum / d->n + model_reg_penalty(m, engine_params(g)) : NAN;
    if (acc) *acc = d->n && bad < 0 ? (double)correct / ((double)d->n * m->label_width) : NAN;
    if (nonfinite) *nonfinite = bad;
    return 0;
}

// Frees the job itself too (it is on the heap: a device's context points at j->m).
void job_free(job *j) {
    // A device the engine gave up on is its worker thread's to close.
    for (int d = 0; j->g && d < j->n_devs; d++)
        if (engine_gave_up(j->g, d)) device_disown(&j->devs[d]);
    engine_close(j->g);
    device_close_list(j->devs, j->n_devs);
    ht_error ignore; // train_run closes the files itself and reports what failed
    run_files_close(&j->rf, &ignore);
    job_tb_close(j, NULL);
    dataset_free(&j->all);
    dataset_free(&j->train);
    dataset_free(&j->val);
    dataset_free(&j->test);
    for (int i = 0; i < 3; i++) data_images_info_free(&j->images[i]);
    free(j->load_left);
    free(j->best_params);
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
int job_open_devices(job *j, const char *spec, int batch, uint64_t mem_limit, ht_error *e) {
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
    if (span_job().size == 1) return 0;
    char text[CONV_CHOICES_TEXT] = "";
    if (span_job().rank == 0) {
        net_conv_decide(&j->m, omp_get_max_threads());
        conv_choices_text(text, sizeof text);
    }
    if (span_bcast_text(span_job(), text, sizeof text, e) < 0) return -1;
    if (span_job().rank > 0 && conv_choices_restore(text) < 0)
        return ht_fail(e, "rank 0's convolution algorithms are malformed: \"%.60s\"", text);
    return 0;
}

// Everything before the first step: model, data, weights, devices, engine. Nothing is written.
int job_prepare(job *j, const train_opts *o, ht_error *e) {
    if (o->save && access(o->save, F_OK) == 0)
        return ht_fail(e, "%s already exists; choose another --save path or remove it", o->save);
    if (model_init(&j->m, o->model ? o->model : TRAIN_DEFAULT_MODEL, e) < 0) return -1;
    // A Keras weights file that could not be written is refused now, not after training.
    if (o->save && kerash5_is_path(o->save, 0) && kerash5_check_save(o->save, &j->m, e) < 0)
        return ht_wrap(e, "--save");
    train_setup *s = &j->m.setup;
    if (o->epochs > 0) s->epochs = o->epochs;
    if (o->batch > 0) s->batch = o->batch;
    if (o->optimizer && optimizer_parse(s, o->optimizer, e) < 0) return ht_wrap(e, "--optimizer");
    if (o->lr >= 0) s->lr = o->lr;
    if (o->val_split >= 0) s->val_split = o->val_split;
    if (o->conv_algo >= 0) s->conv_algo = (conv_algo)o->conv_algo;
    s->precision = (precision)o->precision;
    if (o->lr_schedule && lr_schedule_parse(&s->sched, o->lr_schedule, e) < 0)
        return ht_wrap(e, "--lr-schedule");
    if (o->weight_decay >= 0) s->weight_decay = o->weight_decay;
    if (o->wd_mode >= 0) s->wd_mode = (wd_mode)o->wd_mode;
    if (o->bn_group > 0) s->bn_group = o->bn_group;
    data_images_opts img;
    if (job_image_opts(&j->m, o->model, o->image_size, o->crop_aspect, o->strict_images, &img,
                       e) < 0)
        return -1;
    data_src src = {o->data_dir, o->train_csv,  o->train_labels, o->test_csv,
                    o->test_labels, &img, j->images};
    data_opts dop = job_data_opts(&j->m, o->layout, o->coarse);
    if (job_load_data(&src, &dop, &j->all, &j->test, 1, e) < 0) return -1;
    dataset_limit(&j->all, o->limit);
    if (o->validation) { // a folder of its own: the training set whole
        const char *train_dir = data_is_dir(o->train_csv) ? o->train_csv : NULL;
        if (job_load_images(j, 1, o->validation, train_dir, &img, &j->val, e) < 0) return -1;
        j->train = j->all;
        memset(&j->all, 0, sizeof j->all);
        s->val_split = 0;
    } else {
        if (dataset_split(&j->all, s->val_split, o->seed, &j->train, &j->val, e) < 0) return -1;
        dataset_free(&j->all);
    }
    if (j->train.n < 1) return ht_fail(e, "no training samples left after the validation split");
    // The class names: the training folder's, else those of the weights the run starts from.
    const int from_file = o->load && !o->by_name && !j->images[0].n_classes;
    if (job_folder_classes(&j->m, &j->images[0], from_file ? o->load : NULL, e) < 0) return -1;
    if (job_check_fits(&j->m, &j->train, "training data", e) < 0 ||
        job_check_fits(&j->m, &j->test, "test data", e) < 0)
        return -1;
    if (s->batch > j->train.n) s->batch = j->train.n;
    // Keras's callbacks: what they watch must be there.
    watch_init(&j->watch);
    j->wopts = (watch_opts){.patience = o->early_stopping, .min_delta = o->min_delta,
                            .restore_best = o->restore_best, .save_best = o->save_best};
    j->wopts.monitor = o->monitor && *o->monitor ? (watch_metric)watch_metric_by_name(o->monitor)
                                                 : WATCH_VAL_LOSS;
    if (o->reduce_lr && *o->reduce_lr && watch_parse_plateau(&j->wopts, o->reduce_lr, e) < 0)
        return -1;
    const int watching = j->wopts.patience || j->wopts.lr_factor > 0 || j->wopts.save_best ||
                         j->wopts.restore_best;
    if (watching && j->wopts.monitor <= WATCH_VAL_ACCURACY && j->val.n == 0)
        return ht_fail(e, "--monitor %s needs a validation set (--val-split or --validation), or "
                          "watch loss or accuracy", watch_metric_names[j->wopts.monitor]);
    if (j->wopts.save_best && !o->resume && output_check(j->wopts.save_best, "--save-best", e) < 0)
        return -1;
    if (j->wopts.save_best && !o->resume && access(j->wopts.save_best, F_OK) == 0)
        return ht_fail(e, "%s already exists; choose another --save-best path or remove it",
                       j->wopts.save_best);
    if (j->wopts.save_best && kerash5_is_path(j->wopts.save_best, 0) &&
        kerash5_check_save(j->wopts.save_best, &j->m, e) < 0)
        return ht_wrap(e, "--save-best");
    j->params = ht_malloc(j->m.n_params, sizeof(float), e);
    if (!j->params) return -1;
    if (o->freeze && model_freeze_names(&j->m, o->freeze, e) < 0) return -1;
    if (o->trainable_from && model_trainable_from(&j->m, o->trainable_from, e) < 0) return -1;
    if (o->load && o->by_name) { // into the initial values: what the file lacks keeps them
        model_init_params(&j->m, j->params, o->seed);
        load_partial pl = {.skip_mismatch = o->skip_mismatch};
        const int keras = kerash5_is_path(o->load, 1);
        const int rc = (keras ? kerash5_load_partial : safetensors_load_partial)(
            o->load, &j->m, j->params, &pl, e);
        if (rc == 0 && pl.n_listed)
            fprintf(stderr, "%s%s: %d layer%s left at %s initial values (above)\n", pl.listed,
                    o->load, pl.n_listed, pl.n_listed == 1 ? "" : "s",
                    pl.n_listed == 1 ? "its" : "their");
        j->load_left = pl.listed; // for the log
        j->n_load_left = pl.n_listed;
        if (rc < 0) return -1;
    } else if (o->load) {
        int keras = kerash5_is_path(o->load, 1);
        if ((keras ? kerash5_load : safetensors_load)(o->load, &j->m, j->params, e) < 0)
            return -1;
    } else {
        model_init_params(&j->m, j->params, o->seed);
    }
    if (s->conv_algo == CONV_ALGO_AUTO && conv_decide(j, e) < 0) return -1;
    if (job_open_devices(j, o->devices, s->batch, o->mem_limit, e) < 0) return -1;
    data_augment aug = {0};
    if (o->augment && data_augment_parse(&aug, o->augment, e) < 0) return -1;
    engine_config c = {
        .m = &j->m, .devs = j->devs, .n_devs = j->n_devs, .params = j->params,
        .max_batch = s->batch, .seed = o->seed,
        .rebalance = o->balance != BALANCE_AUTO ? 0
                     : o->rebalance > 0         ? o->rebalance
                                                : TRAIN_DEFAULT_REBALANCE,
        .timeout_s = o->device_timeout, .nan_stop = o->nan_stop, .augment = aug,
        .comm_bf16 = o->comm_bf16,
        .stop_flag = &train_interrupted};
    if (engine_open(&j->g, &c, e) < 0) return -1;
    j->idx = ht_malloc((size_t)j->train.n, sizeof *j->idx, e);
    j->loss = ht_malloc((size_t)s->batch, sizeof *j->loss, e);
    j->pred = ht_malloc((size_t)(j->test.n > s->batch ? j->test.n : s->batch), sizeof *j->pred, e);
    if (!j->idx || !j->loss || !j->pred) return -1;
    return 0;
}
