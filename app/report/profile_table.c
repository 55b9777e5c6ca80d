// The --profile table (profile_table.h): a device's layers, its wait for the others and the
// host's phases of the step, as text for the run's output and log, and as CSV.
#include "app/report/profile_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void profile_steps_add(profile_steps *s, const step_stats *st, int samples) {
    s->steps++;
    s->samples += samples;
    s->wall_s += st->wall_s;
    s->prep_s += st->prep_s;
    s->pass_s += st->pass_s;
    s->reduce_s += st->reduce_s;
    s->update_s += st->update_s;
    s->bcast_s += st->bcast_s;
}

static void other_row(profile_row *r, const char *kind, const char *prefix, const char *name,
                      double time_s) {
    memset(r, 0, sizeof *r);
    snprintf(r->what, sizeof r->what, "%s%s", prefix, name);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->kind = kind;
    r->layer = r->dir = -1;
    r->time_s = time_s;
}

static void split_of(profile_row *r, const device_prof_time *t, int events) {
    r->split = events;
    r->kernel_s = t->kernel_s;
    r->transfer_s = t->transfer_s;
    r->gemm_s = t->gemm_s;
}

int profile_rows(const model *m, const device_profile *p, const profile_steps *s, profile_row *rows) {
    int n = 0, L = m->n_layers;
    double layers = 0;
    for (int k = 0; k < 2 * L; k++) {
        int dir = k >= L, l = dir ? 2 * L - 1 - k : k;
        const layer *ly = &m->layers[l];
        const device_prof_time *t = &p->layer[2 * l + dir];
        profile_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->what, sizeof r->what, "%s (%s)", ly->name, model_kind_name(ly->kind));
        snprintf(r->name, sizeof r->name, "%s", ly->name);
        r->kind = model_kind_name(ly->kind);
        r->layer = l;
        r->dir = dir;
        r->time_s = t->time_s;
        r->gflop = 2e-9 * model_layer_macs(m, l, dir) * (double)p->samples;
        split_of(r, t, p->events);
        layers += t->time_s;
    }
    // The device's passes took its layers, the rest, and its copy of the parameters (a device
    // that copies them does so at the start of its next pass); each pass lasted until the
    // slowest device answered (waking the device's thread is in it too); the broadcast binds
    // or marks the devices. Names stay free of commas: they are CSV fields.
    other_row(&rows[n], "device", "device: ", "outside layers", p->rest.time_s);
    split_of(&rows[n++], &p->rest, p->events);
    other_row(&rows[n], "device", "device: ", "set_params", p->params.time_s);
    split_of(&rows[n++], &p->params, p->events);
    other_row(&rows[n++], "wait", "wait: ", "until the pass ends",
              s->pass_s - layers - p->rest.time_s - p->params.time_s);
    other_row(&rows[n++], "host", "host: ", "plan + gather inputs", s->prep_s);
    other_row(&rows[n++], "host", "host: ", "reduce", s->reduce_s);
    other_row(&rows[n++], "host", "host: ", "update", s->update_s);
    other_row(&rows[n++], "host", "host: ", "broadcast to others", s->bcast_s);
    for (int i = 0; i < n; i++) rows[i].share = s->wall_s > 0 ? 100 * rows[i].time_s / s->wall_s : 0;
    return n;
}

static profile_row *rows_of(const model *m, const device_profile *p, const profile_steps *s,
                            int *n) {
    profile_row *rows = malloc(sizeof *rows * (size_t)(2 * m->n_layers + PROFILE_EXTRA_ROWS));
    if (rows) *n = profile_rows(m, p, s, rows);
    return rows;
}

void profile_table_write(FILE *f, const model *m, const char *spec, const char *name,
                         const device_profile *p, const profile_steps *s) {
    fprintf(f, "profile of %s (%s): %ld steps of %ld samples, %ld of them here in %ld shards; "
               "%.3f s in the steps", spec, name, s->steps, s->samples, p->samples, p->shards,
            s->wall_s);
    if (s->span_s > 0)
        fprintf(f, " (%.3f s from the first one's start to the last one's end)", s->span_s);
    fprintf(f, "\n");
    int n;
    profile_row *rows = rows_of(m, p, s, &n);
    if (!rows) {
        fprintf(f, "(out of memory for the table)\n");
        return;
    }
    int w = (int)strlen("layer");
    for (int i = 0; i < n; i++)
        if ((int)strlen(rows[i].what) > w) w = (int)strlen(rows[i].what);
    fprintf(f, "%-*s  %-9s %10s %7s %9s", w, "layer", "direction", "time_s", "share%", "GFLOP/s");
    if (p->events) fprintf(f, " %10s %10s %10s", "kernel_s", "transfer_s", "gemm_s");
    fprintf(f, "\n");
    double total = 0, gflop = 0;
    for (int i = 0; i < n; i++) {
        const profile_row *r = &rows[i];
        char rate[32] = "";
        if (r->gflop > 0 && r->time_s > 0) snprintf(rate, sizeof rate, "%.1f", r->gflop / r->time_s);
        fprintf(f, "%-*s  %-9s %10.4f %7.2f %9s", w, r->what,
                r->dir < 0 ? "" : r->dir ? "backward" : "forward", r->time_s, r->share, rate);
        if (r->split)
            fprintf(f, " %10.4f %10.4f %10.4f", r->kernel_s, r->transfer_s, r->gemm_s);
        fprintf(f, "\n");
        total += r->time_s;
        gflop += r->gflop;
    }
    char rate[32] = "";
    if (gflop > 0 && total > 0) snprintf(rate, sizeof rate, "%.1f", gflop / total);
    fprintf(f, "%-*s  %-9s %10.4f %7.2f %9s\n", w, "total", "", total,
            s->wall_s > 0 ? 100 * total / s->wall_s : 0, rate);
    free(rows);
}

int profile_csv_write(const char *path, const model *m, int n_devs, const char *const *specs,
                      const device_profile *profs, const profile_steps *s, ht_error *e) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ht_fail(e, "%s: cannot create: %s", tmp, strerror(errno));
    fprintf(f, "device,layer,kind,direction,time_s,share_pct,gflop,gflops,kernel_s,transfer_s,"
               "gemm_s,steps,samples\n");
    int bad = 0, err = 0;
    for (int d = 0; d < n_devs && !bad; d++) {
        int n;
        profile_row *rows = rows_of(m, &profs[d], s, &n);
        if (!rows) {
            bad = 1;
            err = ENOMEM;
            break;
        }
        for (int i = 0; i < n; i++) {
            const profile_row *r = &rows[i];
            fprintf(f, "%s,%s,%s,%s,%.6f,%.3f,", specs[d], r->name, r->kind,
                    r->dir < 0 ? "" : r->dir ? "backward" : "forward", r->time_s, r->share);
            if (r->gflop > 0) fprintf(f, "%.6g,", r->gflop);
            else fprintf(f, ",");
            if (r->gflop > 0 && r->time_s > 0) fprintf(f, "%.3f,", r->gflop / r->time_s);
            else fprintf(f, ",");
            if (r->split) fprintf(f, "%.6f,%.6f,%.6f,", r->kernel_s, r->transfer_s, r->gemm_s);
            else fprintf(f, ",,,");
            fprintf(f, "%ld,%ld\n", s->steps, profs[d].samples);
        }
        free(rows);
    }
    errno = 0;
    if (!bad && (ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0)) {
        bad = 1;
        err = errno ? errno : EIO;
    }
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        err = errno;
    }
    if (bad) {
        unlink(tmp);
        return ht_fail(e, "%s: cannot write: %s", path, strerror(err ? err : EIO));
    }
    return 0;
}
