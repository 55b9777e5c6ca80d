// The training job: prepares the job, runs the epochs through the step engine (self-check,
// calibration, steps, validation, checkpoints), evaluates the test set and writes the run's
// files. train_run is `hetrain train`.
#include "app/job.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "nn/conv_algo.h"
#include "io/kerash5.h"
#include "nn/net.h"
#include "nn/optim.h"
#include "app/report/progress.h"
#include "sharding/span.h"
#include "core/rng.h"
#include "app/runopts.h"
#include "io/safetensors.h"

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

// Compares every device with a single-threaded native CPU device on `probe` samples of the
// first epoch (engine_self_check).
static int self_check(job *j, int probe, ht_error *e) {
    device *ref;
    int n;
    // The reference computes its convolutions direct, so the check also bounds what Winograd
    // changes (rounding only). Under --precision bf16 it computes as the devices do (their
    // algorithms, bfloat16 GEMMs): what bfloat16 changes is the option's to make, and at
    // initialisation it moves some gradients by 5-20% of themselves (cnn3's below its dense
    // layers, where a sum of 128 products cancels to a few percent of its terms), more than any
    // bound that would still catch a device computing wrong values; the check then bounds what
    // the split of the batch changes. It is closed before the copy of the model it reads goes.
    model direct = j->m;
    if (direct.setup.precision != PRECISION_BF16) direct.setup.conv_algo = CONV_ALGO_DIRECT;
    if (device_open_list(&ref, &n, "cpu:1", &direct, probe, 0, e) < 0)
        return ht_wrap(e, "self-check: the reference device");
    int rc = engine_self_check(j->g, ref, &j->train, j->idx, probe, e);
    device_close_list(ref, n);
    return rc;
}

// The epoch that just ended is the best so far: --save-best writes its weights (rank 0,
// replacing the file whole), --restore-best-weights keeps them.
static int watch_keep_best(job *j, int ep, ht_error *e) {
    const float *p = engine_params(j->g);
    if (j->wopts.restore_best) {
        if (!j->best_params && !(j->best_params = ht_malloc(j->m.n_params, sizeof(float), e)))
            return -1;
        memcpy(j->best_params, p, j->m.n_params * sizeof(float));
    }
    const char *f = j->wopts.save_best;
    if (!f || span_job().rank > 0) return 0;
    if ((kerash5_is_path(f, 0) ? kerash5_save : safetensors_save)(f, &j->m, p, e) < 0)
        return ht_wrap(e, "--save-best");
    run_log(&j->rf, 0, "save-best: %s (epoch %d, %s %.6g)\n", f, ep + 1,
            watch_metric_names[j->wopts.monitor], j->watch.best);
    return 0;
}

static int run_epochs(job *j, const train_opts *o, epoch_stats *resumed, ht_error *e) {
    const train_setup *s = &j->m.setup;
    int n = j->train.n, start = j->epochs_done;
    const size_t yw = (size_t)j->m.label_width; // labels a sample
    for (int ep = start; ep < s->epochs && !j->watch.stopped; ep++) {
        double t0 = ht_now();
        shuffle(j->idx, n, o->seed, ep);
        if (ep == start && !o->no_self_check) {
            int probe = s->batch < TRAIN_SELF_CHECK_SAMPLES ? s->batch : TRAIN_SELF_CHECK_SAMPLES;
            if (self_check(j, probe, e) < 0) return -1;
            job_drain_events(j, NULL);
            run_log(&j->rf, 0, "self-check: %d of %d device%s agree with the CPU reference\n",
                    engine_active(j->g), j->n_devs, j->n_devs == 1 ? "" : "s");
        }
        int calibrated = 0;
        if (ep == start && !j->resumed_caps && o->balance == BALANCE_AUTO &&
            (calibrated = engine_calibrate(j->g, &j->train, j->idx, s->batch, e)) < 0)
            return -1;
        if (calibrated) {
            // Every rank's capacities, in the job's device order.
            double w[HT_MAX_DEVICES] = {0}, caps[HT_MAX_DEVICES];
            engine_capacities(j->g, w);
            if (job_gather(j, w, 1, caps, e) < 0) return -1;
            char line[2048];
            size_t m = 0;
            for (int d = 0; d < j->n_all && m < sizeof line; d++)
                m += (size_t)snprintf(line + m, sizeof line - m, "%s%s@%.3g", d ? "," : "",
                                      j->all_name[d], caps[d]);
            run_log(&j->rf, !o->quiet, "calibrated capacities: %s\n", line);
            t0 = ht_now();
        }
        if (ep == start && o->profile && job_profile_start(j, e) < 0) return -1;
        span_take_comm_s(); // the epoch's time in MPI starts now
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
                int saved = job_save_checkpoint(j, o, &es, e);
                if (saved < 0) return -1;
                return ht_fail(e, "interrupted in epoch %d after %ld samples%s%s", ep + 1, j->seen,
                               saved ? "; checkpoint: " : "", saved ? j->ckpt_path : "");
            }
            int B = n - off < s->batch ? n - off : s->batch;
            // The schedule's factor is a function of where the step is in the run, so a
            // resumed run continues it exactly.
            long per_epoch = (n + s->batch - 1) / s->batch;
            engine_set_lr_factor(j->g, lr_schedule_factor(&s->sched, ep, ep * per_epoch + off / s->batch,
                                                          s->epochs * per_epoch) *
                                           j->watch.lr_scale);
            j->step_lr = engine_lr(j->g);
            // Keras's loss adds its regularizers' term (model_reg_penalty), at the weights the
            // step starts from, to each batch's mean: B times it to the sum of the samples'.
            double penalty = model_reg_penalty(&j->m, engine_params(j->g));
            step_stats st;
            if (j->profiling && j->prof_steps.steps == 0) j->prof_start = ht_now();
            if (engine_train_step(j->g, &j->train, j->idx + off, B, (uint32_t)ep, j->loss,
                                  j->pred, &st, e) < 0) {
                progress_end(&pr);
                job_drain_events(j, NULL);
                return ht_wrap(e, "epoch %d, step %d", ep + 1, off / s->batch + 1);
            }
            if (j->profiling) {
                profile_steps_add(&j->prof_steps, &st, B);
                j->prof_steps.span_s = ht_now() - j->prof_start;
            }
            j->steps_into++;
            epoch_stats_add(&es, &st, j->n_devs);
            job_drain_events(j, &es);
            double step_loss = NAN; // the step's mean (--tensorboard's batch_loss)
            if (!st.skipped) { // a skipped step's losses may be NaN: leave them out
                step_loss = 0;
                for (int i = 0; i < B; i++) {
                    step_loss += j->loss[i];
                    j->lsum += j->loss[i];
                    j->correct += net_labels_right(&j->m, j->pred[i],
                                                   j->train.y + (size_t)j->idx[off + i] * yw);
                }
                j->lsum += B * penalty;
                j->counted += B;
                step_loss = step_loss / B + penalty;
            }
            j->seen += B;
            if (job_tb_step(j, ep * per_epoch + off / s->batch, step_loss, &st, B, e) < 0)
                return -1;
            progress_update(&pr, j->seen, j->counted ? j->lsum / j->counted : NAN,
                            j->counted ? (double)j->correct / ((double)j->counted * yw) : NAN);
            if (o->checkpoint_every > 0 && off + B < n) {
                engine_state gs;
                engine_get_state(j->g, &gs);
                if (gs.step % o->checkpoint_every == 0) {
                    j->epoch_s = ht_now() - t0;
                    if (job_save_checkpoint(j, o, &es, e) < 0) return -1;
                }
            }
        }
        progress_end(&pr);
        double train_s = ht_now() - t0;
        double vloss = NAN, vacc = NAN;
        if (j->val.n > 0 && job_evaluate(j->g, &j->m, s->batch, &j->val, &vloss, &vacc, NULL, NULL, NULL, e) < 0)
            return ht_wrap(e, "validation after epoch %d", ep + 1);
        const double loss = j->counted ? j->lsum / j->counted : NAN;
        const double acc = j->counted ? (double)j->correct / ((double)j->counted * yw) : NAN;
        // Keras's callbacks decide on every rank alike; rank 0 writes their events and files.
        char ev[512] = "";
        watch_step ws = watch_epoch(&j->watch, &j->wopts, ep + 1, loss, acc, vloss, vacc, s->lr,
                                    ev, sizeof ev);
        if (ws.improved && watch_keep_best(j, ep, e) < 0) return -1;
        if (ev[0]) {
            if (span_job().rank == 0) {
                size_t k = strlen(es.events);
                snprintf(es.events + k, sizeof es.events - k, "%s%s", k ? "; " : "", ev);
            }
            run_log(&j->rf, !o->quiet, "epoch %d: %s\n", ep + 1, ev);
        }
        if (job_epoch_report(j, o, ep, loss, acc, vloss, vacc,
                             ht_now() - t0, train_s, &es, span_take_comm_s(), e) < 0 ||
            job_tb_epoch(j, ep, loss, acc, vloss, vacc, e) < 0)
            return -1;
        if (ws.stop && j->best_params) {
            if (engine_set_params(j->g, j->best_params, e) < 0) return -1;
            run_log(&j->rf, !o->quiet, "restored the weights of epoch %d (%s %.6g)\n",
                    j->watch.best_epoch, watch_metric_names[j->wopts.monitor], j->watch.best);
        }
        j->epochs_done = ep + 1;
        j->steps_into = 0;
        j->lsum = j->epoch_s = 0;
        j->correct = j->seen = j->counted = 0;
        if (job_save_checkpoint(j, o, NULL, e) < 0) return -1;
    }
    return 0;
}

static int finish(job *j, const train_opts *o, ht_error *e) {
    if (j->test.n > 0) {
        double tloss, tacc;
        if (job_evaluate(j->g, &j->m, j->m.setup.batch, &j->test, &tloss, &tacc, j->pred, NULL, NULL, e) < 0)
            return ht_wrap(e, "test evaluation");
        if (span_job().rank == 0 && predictions_write(j->rf.predictions_path, j->pred, j->test.n, j->m.label_width,
                                                    job_test_names(j), e) < 0)
            return -1;
        if (j->test.y)
            run_log(&j->rf, !o->quiet, "test: loss %.4f  accuracy %.4f  (%d samples)\n", tloss,
                    tacc, j->test.n);
        run_log(&j->rf, !o->quiet, "predictions: %s\n", j->rf.predictions_path);
    }
    return 0;
}

// train_run with the metadata of the checkpoint it resumes from in *ck (the options in use point
// into it, so the caller frees it after the run).
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
        if (job_resume_paths(given->resume, prefix, j->ckpt_path, e) < 0 ||
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
        mine.devices = job_devices_of_rank(given, e, &bad);
        if (bad) {
            free(j);
            return -1;
        }
        given = o = &mine;
    }
    j->events_out = !given->quiet;
    if (span_job().rank > 0) { // rank 0 speaks and writes for the job; the others train and warn
        follower = *given;
        follower.quiet = 1;
        follower.progress = 0;
        follower.save = NULL;
        follower.export_onnx = NULL;
        given = o = &follower;
    }
    if (o->save && output_check(o->save, "--save", e) < 0) {
        free(j);
        return -1;
    }
    if (o->export_onnx && output_check_new(o->export_onnx, "--export-onnx", e) < 0) {
        free(j);
        return -1;
    }
    if (job_prepare(j, o, e) < 0 || job_span(j, e) < 0) {
        job_free(j);
        return -1;
    }
    if (o->resume) {
        int rc = job_resume(j, o, prefix, &res_es, e);
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
        job_metrics_header(header, sizeof header, j);
        if ((span_job().rank == 0 &&
             run_files_open(&j->rf, o->out_dir ? o->out_dir : "results", name, header, e) < 0) ||
            job_metrics_keep(j, header, e) < 0) {
            job_free(j);
            return -1;
        }
        snprintf(j->ckpt_path, sizeof j->ckpt_path, "%s.ckpt", j->rf.prefix);
        job_log_header(j, o);
    }
    if (run_files_check(&j->rf, e) < 0 || job_tb_open(j, o->tensorboard, o->resume != NULL, e) < 0) {
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
    if (job_profile_report(j, o, &pe) < 0) {
        if (rc == 0) *e = pe;
        else run_log(&j->rf, 0, "error writing the profile: %s\n", pe.msg);
        rc = -1;
    }
    if (rc == 0) rc = finish(j, o, e);
    if (o->save) {
        // Weights are saved even after a failure, so an interrupted run can be resumed.
        ht_error se;
        if ((kerash5_is_path(o->save, 0) ? kerash5_save : safetensors_save)(
                o->save, &j->m, engine_params(j->g), &se) < 0) {
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
    // The trained model as ONNX, after a run that finished (rank 0's).
    if (rc == 0 && o->export_onnx) {
        if (export_onnx_model(&j->m, engine_params(j->g), o->model, o->export_onnx, e) < 0)
            rc = -1;
        else
            run_log(&j->rf, !o->quiet, "onnx: %s\n", o->export_onnx);
    }
    if (j->ckpt_count > 0)
        run_log(&j->rf, 0, "checkpoints: %d written to %s, %.3f s in all\n", j->ckpt_count,
                j->ckpt_path, j->ckpt_s);
    ht_error te;
    if (job_tb_close(j, &te) < 0 && rc == 0) {
        *e = te;
        rc = -1;
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

int train_run(const train_opts *o, ht_error *e) {
    checkpoint ck;
    memset(&ck, 0, sizeof ck);
    int rc = run_job(o, &ck, e);
    checkpoint_free(&ck);
    return rc;
}
