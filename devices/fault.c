// HETRAIN_FAULT: parsing, matching, and the wrapper device that injects the faults (fault.h).
#include "devices/fault.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct {
    const char *name;
    fault_kind kind;
} kinds[] = {{"fail", FAULT_FAIL}, {"oom", FAULT_OOM}, {"hang", FAULT_HANG},
             {"nan", FAULT_NAN},   {"corrupt", FAULT_CORRUPT}, {"kill", FAULT_KILL},
             {"term", FAULT_TERM}};

int fault_plan_parse(fault_plan *p, const char *text, ht_error *e) {
    memset(p, 0, sizeof *p);
    if (!text || !*text) return 0;
    char *copy = strdup(text), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (!colon || colon == item || !colon[1]) {
            rc = ht_fail(e, "HETRAIN_FAULT: \"%s\": expected KIND:DEVICE[@STEP]", item);
            break;
        }
        *colon = 0;
        if (p->n == FAULT_MAX) {
            rc = ht_fail(e, "HETRAIN_FAULT: more than %d faults", FAULT_MAX);
            break;
        }
        int k = -1;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (!strcmp(item, kinds[i].name)) k = (int)i;
        if (k < 0) {
            rc = ht_fail(e, "HETRAIN_FAULT: unknown fault \"%s\" (fail, oom, hang, nan, corrupt, kill, term)", item);
            break;
        }
        char *spec = colon + 1, *at = strrchr(spec, '@');
        long step = kinds[k].kind == FAULT_CORRUPT ? 0 : 1;
        if (at) {
            *at = 0;
            char *end;
            errno = 0;
            step = strtol(at + 1, &end, 10);
            if (errno || end == at + 1 || *end || step < 1) {
                rc = ht_fail(e, "HETRAIN_FAULT: \"%s\": expected a step number >= 1 after '@'", at + 1);
                break;
            }
        }
        if (!*spec) {
            rc = ht_fail(e, "HETRAIN_FAULT: \"%s\" names no device: expected KIND:DEVICE[@STEP]",
                         item);
            break;
        }
        if (strlen(spec) >= sizeof p->f[0].spec) {
            rc = ht_fail(e, "HETRAIN_FAULT: device \"%s\" is too long", spec);
            break;
        }
        p->f[p->n].kind = kinds[k].kind;
        strcpy(p->f[p->n].spec, spec);
        p->f[p->n].step = step;
        p->n++;
    }
    free(copy);
    return rc;
}

int fault_planned(const fault_plan *p, fault_kind kind, const char *spec, long step) {
    for (int i = 0; i < p->n; i++)
        if (p->f[i].kind == kind && !strcmp(p->f[i].spec, spec) &&
            (p->f[i].step == 0 || p->f[i].step == step))
            return 1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The wrapper device

typedef struct fault_dev {
    const device_ops *ops; // the wrapped device
    void *ctx;
    fault_plan plan;
    char spec[64];
    size_t n_params;
    unsigned hang_gen; // hang_gen when wrapped: a hang lasts until it moves on
} fault_dev;

// Bumped by fault_release_hangs.
static atomic_uint hang_gen;

void fault_release_hangs(void) { atomic_fetch_add(&hang_gen, 1); }

static int planned(const fault_dev *f, fault_kind kind, long step) {
    return fault_planned(&f->plan, kind, f->spec, step);
}

static int fault_set_params(void *vctx, const float *params, ht_error *e) {
    fault_dev *f = vctx;
    return f->ops->set_params(f->ctx, params, e);
}

static int fault_bind_params(void *vctx, const float *params, ht_error *e) {
    fault_dev *f = vctx;
    return f->ops->bind_params(f->ctx, params, e);
}

static int fault_train_shard(void *vctx, const shard_job *job, shard_result *res, ht_error *e) {
    fault_dev *f = vctx;
    res->note[0] = 0;
    if (planned(f, FAULT_KILL, job->step)) raise(SIGKILL); // as a power loss or the OOM killer
    if (planned(f, FAULT_TERM, job->step)) kill(getpid(), SIGTERM); // to the process, not this thread
    if (planned(f, FAULT_HANG, job->step)) {
        // Polled at 10 ms: released hangs come back within ~20 ms.
        struct timespec tick = {0, 10 * 1000 * 1000};
        while (atomic_load(&hang_gen) == f->hang_gen) nanosleep(&tick, NULL);
        return ht_fail(e, "stopped while hung (HETRAIN_FAULT)");
    }
    if (planned(f, FAULT_FAIL, job->step))
        return ht_fail(e, "injected failure (HETRAIN_FAULT) at step %ld", job->step);
    char note[sizeof res->note] = "";
    if (planned(f, FAULT_OOM, job->step)) {
        // As the device itself does on a real out-of-memory error.
        if (!f->ops->shrink)
            return ht_fail(e, "out of memory (injected), and the device cannot shrink its "
                              "micro-batch");
        if (f->ops->shrink(f->ctx, "out of memory (injected)", note, sizeof note, e) < 0) return -1;
    }
    int rc = f->ops->train_shard(f->ctx, job, res, e);
    if (note[0]) { // the device's own note, if any, after ours
        char own[sizeof res->note];
        memcpy(own, res->note, sizeof own);
        if (own[0]) snprintf(res->note, sizeof res->note, "%.120s; %.120s", note, own);
        else memcpy(res->note, note, sizeof note);
    }
    if (rc < 0) return rc;
    if (planned(f, FAULT_CORRUPT, job->step))
        for (size_t i = 0; i < f->n_params; i++) res->grad_sum[i] *= 1.5f;
    if (planned(f, FAULT_NAN, job->step)) res->grad_sum[0] = NAN;
    return 0;
}

static int fault_infer(void *vctx, const float *x, int n, float *probs, ht_error *e) {
    fault_dev *f = vctx;
    return f->ops->infer(f->ctx, x, n, probs, e);
}

static int fault_shrink(void *vctx, const char *why, char *note, size_t note_len, ht_error *e) {
    fault_dev *f = vctx;
    if (!f->ops->shrink) return ht_fail(e, "%s, and the device cannot shrink its micro-batch", why);
    return f->ops->shrink(f->ctx, why, note, note_len, e);
}

// Profiling is the wrapped device's own.
static int fault_profile_start(void *vctx, ht_error *e) {
    fault_dev *f = vctx;
    if (!f->ops->profile_start || !f->ops->profile) return 0;
    return f->ops->profile_start(f->ctx, e);
}

static void fault_profile(void *vctx, device_profile *out) {
    fault_dev *f = vctx;
    if (f->ops->profile) f->ops->profile(f->ctx, out);
}

static void fault_close(void *vctx) {
    fault_dev *f = vctx;
    if (!f) return;
    if (f->ops->close) f->ops->close(f->ctx);
    free(f);
}

static const device_ops fault_ops = {
    .set_params = fault_set_params,
    .train_shard = fault_train_shard,
    .infer = fault_infer,
    .shrink = fault_shrink,
    .close = fault_close,
    .profile_start = fault_profile_start,
    .profile = fault_profile,
};

// The same for a device that can bind the parameters (device_ops.bind_params).
static const device_ops fault_ops_bind = {
    .set_params = fault_set_params,
    .bind_params = fault_bind_params,
    .train_shard = fault_train_shard,
    .infer = fault_infer,
    .shrink = fault_shrink,
    .close = fault_close,
    .profile_start = fault_profile_start,
    .profile = fault_profile,
};

int fault_wrap_devices(device *devs, int n, const model *m, const char *plan_text, ht_error *e) {
    fault_plan plan;
    if (fault_plan_parse(&plan, plan_text, e) < 0) return -1;
    if (plan.n == 0) return 0;
    // A fault for a device that is not open would never fire: a typo, or a spec the registry
    // writes otherwise ("cpu:1#2" for the second cpu:1). Say so rather than test nothing.
    for (int k = 0; k < plan.n; k++) {
        int open = 0;
        for (int i = 0; i < n; i++) open |= !strcmp(plan.f[k].spec, devs[i].spec);
        if (open) continue;
        char list[512] = "";
        size_t len = 0;
        for (int i = 0; i < n && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", devs[i].spec);
        return ht_fail(e, "HETRAIN_FAULT: \"%s\" names no open device (open: %s)", plan.f[k].spec,
                       n > 0 ? list : "none");
    }
    // Every wrapper first, so that running out of memory leaves the devices as they were.
    fault_dev **w = ht_calloc((size_t)n, sizeof *w, e);
    if (!w) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int named = 0;
        for (int k = 0; k < plan.n; k++) named |= !strcmp(plan.f[k].spec, devs[i].spec);
        if (!named) continue;
        if (!(w[i] = ht_calloc(1, sizeof *w[i], e))) rc = -1;
    }
    for (int i = 0; i < n; i++) {
        fault_dev *f = w[i];
        if (!f) continue;
        if (rc < 0) {
            free(f);
            continue;
        }
        f->ops = devs[i].ops;
        f->ctx = devs[i].ctx;
        f->plan = plan;
        snprintf(f->spec, sizeof f->spec, "%s", devs[i].spec);
        f->n_params = m->n_params;
        f->hang_gen = atomic_load(&hang_gen);
        devs[i].ops = f->ops->bind_params ? &fault_ops_bind : &fault_ops;
        devs[i].ctx = f;
    }
    free(w);
    return rc;
}
