// Keras's EarlyStopping, ReduceLROnPlateau and save_best_only decisions (watch.h).
#include "app/watch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const watch_metric_names[] = {"val_loss", "val_accuracy", "loss", "accuracy", NULL};

int watch_metric_by_name(const char *name) {
    for (int i = 0; watch_metric_names[i]; i++)
        if (!strcmp(name, watch_metric_names[i])) return i;
    if (!strcmp(name, "val_acc")) return WATCH_VAL_ACCURACY; // Keras 2's names
    if (!strcmp(name, "acc")) return WATCH_ACCURACY;
    return -1;
}

int watch_parse_plateau(watch_opts *o, const char *spec, ht_error *e) {
    double v[3] = {0.1, 10, 0};
    int n = 0;
    const char *p = spec;
    int comma = 0; // a comma ends the last number: another must follow
    while (n < 3 && *p) {
        char *end;
        v[n] = strtod(p, &end);
        if (end == p || (*end && *end != ',')) break;
        n++;
        comma = *end == ',';
        p = *end ? end + 1 : end;
    }
    if (*p || comma || n == 0 || !(v[0] > 0 && v[0] < 1) || !(v[1] >= 1 && v[1] <= 100000) ||
        v[1] != floor(v[1]) || !(v[2] >= 0 && isfinite(v[2])))
        return ht_fail(e, "--reduce-lr-on-plateau: expected FACTOR[,PATIENCE[,MIN_LR]] (a factor "
                          "in (0,1), a whole number of epochs >= 1, a rate >= 0; Keras's defaults "
                          "0.1,10,0), found \"%s\"", spec);
    o->lr_factor = v[0], o->lr_patience = (int)v[1], o->min_lr = v[2];
    return 0;
}

void watch_init(watch *w) {
    *w = (watch){.best = NAN, .lr_best = NAN, .lr_scale = 1};
}

static void add_event(char *events, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_event(char *events, size_t len, const char *fmt, ...) {
    size_t at = strlen(events);
    if (at + 3 >= len) return;
    if (at) at += (size_t)snprintf(events + at, len - at, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(events + at, len - at, fmt, ap);
    va_end(ap);
}

// Whether v improves on best by more than delta (the metric's direction: losses down,
// accuracies up); a first finite value always does, a non-finite one never.
static int improves(watch_metric m, double v, double best, double delta) {
    if (!isfinite(v)) return 0;
    if (isnan(best)) return 1;
    return m == WATCH_VAL_LOSS || m == WATCH_LOSS ? v < best - delta : v > best + delta;
}

watch_step watch_epoch(watch *w, const watch_opts *o, int epoch, double loss, double acc,
                       double vloss, double vacc, double base_lr, char *events, size_t len) {
    watch_step s = {0};
    const double vals[] = {vloss, vacc, loss, acc};
    const double v = vals[o->monitor];
    const char *name = watch_metric_names[o->monitor];
    if (o->patience > 0 || o->save_best || o->restore_best) {
        if (improves(o->monitor, v, w->best, o->min_delta)) {
            w->best = v, w->best_epoch = epoch, w->wait = 0;
            s.improved = 1;
        } else {
            w->wait++;
        }
        if (o->patience > 0 && w->wait >= o->patience) {
            s.stop = 1;
            w->stopped = 1;
            add_event(events, len, "early stop: %s has not improved for %d epoch%s (best %.6g at "
                      "epoch %d)", name, w->wait, w->wait == 1 ? "" : "s", w->best, w->best_epoch);
        }
    }
    if (o->lr_factor > 0) {
        if (improves(o->monitor, v, w->lr_best, WATCH_LR_MIN_DELTA)) {
            w->lr_best = v, w->lr_wait = 0;
        } else if (++w->lr_wait >= o->lr_patience) {
            w->lr_wait = 0;
            const double old = base_lr * w->lr_scale;
            double lr = old * o->lr_factor;
            if (lr < o->min_lr) lr = o->min_lr;
            if (lr < old && base_lr > 0) {
                w->lr_scale = lr / base_lr;
                s.lr_cut = 1;
                add_event(events, len, "lr %.6g -> %.6g (%s on a plateau for %d epoch%s)", old, lr,
                          name, o->lr_patience, o->lr_patience == 1 ? "" : "s");
            }
        }
    }
    return s;
}
