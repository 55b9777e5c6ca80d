// --tensorboard: the run's event files (src/io/tfevents.h) as Keras's TensorBoard callback lays
// them out, train/ and validation/ with its epoch_loss and epoch_accuracy (and
// epoch_learning_rate) at step = the epoch, and a run of hetrain's own, steps/, a scalar each
// step: batch_loss, learning_rate, sync_s, and each of this rank's devices' share of the batch
// and busy seconds.
#include "app/job.h"

#include <stdio.h>

#include "sharding/span.h"

enum { TB_TRAIN, TB_VAL, TB_STEPS };
static const char *const tb_runs[3] = {"train", "validation", "steps"};

int job_tb_open(job *j, const char *dir, int resumed, ht_error *e) {
    if (!dir || span_job().rank != 0) return 0;
    const long per_epoch = (j->train.n + j->m.setup.batch - 1) / j->m.setup.batch;
    for (int k = 0; k < 3; k++) {
        if (k == TB_VAL && j->val.n == 0) continue; // as Keras: no validation, no folder
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/%s", dir, tb_runs[k]);
        if (tfevents_open(&j->tb[k], sub, e) < 0) {
            job_tb_close(j, NULL);
            return -1;
        }
        j->tb_on = 1;
        // Resumed: what the stopped run wrote past its checkpoint goes (TensorBoard drops the
        // earlier files' events from this step on), so no step or epoch is there twice.
        if (resumed &&
            tfevents_start(&j->tb[k], k == TB_STEPS ? j->epochs_done * per_epoch + j->steps_into
                                                    : j->epochs_done,
                           e) < 0)
            return -1;
    }
    return 0;
}

int job_tb_step(job *j, long step, double loss, const step_stats *st, int B, ht_error *e) {
    if (!j->tb_on) return 0;
    tfevents *w = &j->tb[TB_STEPS];
    if (tfevents_scalar(w, "batch_loss", step, loss, e) < 0 ||
        tfevents_scalar(w, "learning_rate", step, j->step_lr, e) < 0 ||
        tfevents_scalar(w, "sync_s", step, st->host_s, e) < 0)
        return -1;
    for (int k = 0; k < j->n_all; k++) {
        if (j->all_rank[k] != 0) continue; // another rank's: its own numbers are not here
        const int d = j->all_local[k];
        char tag[128];
        snprintf(tag, sizeof tag, "share/%s", j->all_name[k]);
        if (tfevents_scalar(w, tag, step, B ? (double)st->share[d] / B : 0.0, e) < 0) return -1;
        snprintf(tag, sizeof tag, "busy_s/%s", j->all_name[k]);
        if (tfevents_scalar(w, tag, step, st->busy_s[d], e) < 0) return -1;
    }
    return tfevents_flush(w, e);
}

int job_tb_epoch(job *j, int ep, double loss, double acc, double vloss, double vacc,
                 ht_error *e) {
    if (!j->tb_on) return 0;
    tfevents *t = &j->tb[TB_TRAIN], *v = &j->tb[TB_VAL];
    if (tfevents_scalar(t, "epoch_loss", ep, loss, e) < 0 ||
        tfevents_scalar(t, "epoch_accuracy", ep, acc, e) < 0 ||
        tfevents_scalar(t, "epoch_learning_rate", ep, j->step_lr, e) < 0 ||
        tfevents_flush(t, e) < 0)
        return -1;
    if (j->val.n > 0 &&
        (tfevents_scalar(v, "epoch_loss", ep, vloss, e) < 0 ||
         tfevents_scalar(v, "epoch_accuracy", ep, vacc, e) < 0 || tfevents_flush(v, e) < 0))
        return -1;
    return 0;
}

int job_tb_close(job *j, ht_error *e) {
    int rc = 0;
    ht_error dummy;
    for (int k = 0; k < 3; k++)
        if (tfevents_close(&j->tb[k], e ? e : &dummy) < 0) rc = -1;
    j->tb_on = 0;
    return rc;
}
