// The self-check: every device runs one forward/backward of the same probe as a reference
// device the engine does not use, and a device whose gradient or losses differ beyond the
// ENGINE_SELF_CHECK_TOL_* bounds (engine.h) is dropped.
#include "sharding/engine_int.h"

#include <math.h>
#include <stdlib.h>

// The relative L2 difference of a[off..off+n) from b (relative to at least `floor`), and the
// index of the largest element difference.
static double rel_diff(const float *a, const float *b, size_t off, size_t n, double floor,
                       size_t *worst_at) {
    double num = 0, den = floor * floor, worst = -1;
    *worst_at = off;
    for (size_t i = off; i < off + n; i++) {
        double diff = (double)a[i] - b[i];
        num += diff * diff;
        den += (double)b[i] * b[i];
        if (!(fabs(diff) <= worst)) {
            worst = fabs(diff);
            *worst_at = i;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double engine_self_check_depth(const model *m) {
    int weighted = 0;
    for (int l = 0; l < m->n_layers; l++) weighted += m->layers[l].n_w > 0;
    return weighted > ENGINE_SELF_CHECK_DEPTH ? (double)weighted / ENGINE_SELF_CHECK_DEPTH : 1.0;
}

// A batchnorm's sums of its groups' means count relative to at least ENGINE_SELF_CHECK_FLOOR
// of the groups' spread: sqrt(groups * the sum of their variances). A channel whose mean is 0
// in exact arithmetic (a batchnorm's output, which has mean beta = 0 over its group, through a
// bias-free 1x1 convolution: MobileNetV2's blocks) has a mean of rounding noise, which no
// relative measure of its own can judge.
static double mean_floor(const model *m, const model_tensor *t, const float *ref) {
    const layer *L = &m->layers[t->layer];
    const float *var = ref + L->s_off + L->oc, groups = var[L->oc];
    double sum = 0;
    for (int c = 0; c < L->oc; c++) sum += var[c] > 0 ? var[c] : 0;
    return groups > 0 ? ENGINE_SELF_CHECK_FLOOR * sqrt(groups * sum) : 0;
}

// Compares device slot s's probe results with the reference's; drops it with an event when
// they differ beyond the ENGINE_SELF_CHECK_TOL_* bounds.
// ref_norm: the L2 norm of the reference's gradient over the trainable parameters.
static void check_one(engine *g, int d, const float *ref_grad, double ref_norm,
                      const float *ref_loss, int n) {
    const engine_work *w = g->slots[d].work;
    const model_tensor *ts;
    int nt = model_tensors(g->m, &ts);
    // Per tensor, against its own tolerance; the tensor furthest over it is reported. A
    // parameter tensor's difference counts relative to at least ENGINE_SELF_CHECK_FLOOR of the
    // whole gradient: a bias right before a batchnorm has a gradient of zero, computed as
    // rounding noise, which no relative measure of its own can judge.
    double excess = 0, rel_at = 0, tol_at = 0;
    const model_tensor *bad = NULL;
    size_t wi = 0;
    const double depth = engine_self_check_depth(g->m);
    for (int k = 0; k < nt; k++) {
        // A frozen layer's gradient is never used; a device may leave it uncomputed.
        if (g->m->layers[ts[k].layer].frozen) continue;
        double tol = ts[k].output ? ENGINE_SELF_CHECK_TOL_OUT * depth : ENGINE_SELF_CHECK_TOL_BRANCH;
        size_t wj;
        double floor = ts[k].state ? 0 : ENGINE_SELF_CHECK_FLOOR * ref_norm;
        if (ts[k].state == TENSOR_RUNNING_MEAN) floor = mean_floor(g->m, &ts[k], ref_grad);
        double rel = rel_diff(w->grad_sum, ref_grad, ts[k].off, ts[k].n, floor, &wj);
        if (!(rel / tol <= excess)) {
            excess = isnan(rel) ? INFINITY : rel / tol;
            rel_at = rel;
            tol_at = tol;
            bad = &ts[k];
            wi = wj;
        }
    }
    double lworst = 0;
    for (int i = 0; i < n; i++) {
        double dl = fabs((double)w->loss[i] - ref_loss[i]);
        if (!(dl <= lworst)) lworst = dl;
    }
    if (excess <= 1 && lworst <= ENGINE_SELF_CHECK_TOL_LOSS * depth) return;
    const device *dev = g->slots[d].dev;
    engine_drop(g, d);
    engine_event(g, "self-check: device %s (%s) excluded: its gradient of %s differs from the "
             "reference by %.3g (relative L2, tolerance %.3g), worst element [%zu] %.6g vs "
             "%.6g; largest loss difference %.3g (tolerance %.3g)",
          dev->spec, dev->name, bad ? bad->name : "(no tensor)", rel_at, tol_at,
          bad ? wi - bad->off : 0, (double)w->grad_sum[wi],
          (double)ref_grad[wi], lworst, ENGINE_SELF_CHECK_TOL_LOSS * depth);
}

int engine_self_check(engine *g, device *ref, const dataset *ds, const uint32_t *idx, int n,
                      ht_error *e) {
    const model *m = g->m;
    if (n > g->max_batch) n = g->max_batch;
    if (n < 1) return 0;
    // Every device runs the whole probe, as a pass outside training (step 0).
    engine_task t = {.kind = TASK_TRAIN, .ds = ds, .idx = idx};
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        s->dispatched = !s->failed;
        s->n = s->dispatched ? n : 0;
        for (int i = 0; i < s->n; i++) s->pos[i] = i;
    }
    g->n_orphans = 0;
    engine_dispatch(g, &t);
    // The reference, on the same samples (gathered as the devices got them).
    size_t in = (size_t)ds->c * ds->h * ds->w;
    float *x = ht_malloc((size_t)n * in, sizeof(float), e);
    uint8_t *y = ht_malloc((size_t)n, (size_t)m->label_width, e);
    float *grad = ht_malloc(m->n_params, sizeof(float), e), *loss = ht_malloc((size_t)n, sizeof(float), e);
    int32_t *pred = ht_malloc((size_t)n, sizeof(int32_t), e);
    int rc = -1;
    if (!x || !y || !grad || !loss || !pred) goto out;
    dataset_gather(ds, idx, n, x, y);
    shard_job job = {.x = x, .y = y, .ids = idx, .n = n, .seed = g->seed};
    shard_result res = {.grad_sum = grad, .loss = loss, .pred = pred};
    if (ref->ops->set_params(ref->ctx, g->params, e) < 0 ||
        ref->ops->train_shard(ref->ctx, &job, &res, e) < 0) {
        ht_wrap(e, "self-check: the reference device %s", ref->spec);
        goto out;
    }
    double ref_norm = 0;
    for (size_t i = 0; i < m->n_trainable; i++) ref_norm += (double)grad[i] * grad[i];
    ref_norm = sqrt(ref_norm);
    for (int d = 0; d < g->n_devs; d++)
        if (g->slots[d].dispatched && !g->slots[d].failed)
            check_one(g, d, grad, ref_norm, loss, n);
    rc = 0;
    if (engine_active(g) == 0) rc = ht_fail(e, "no device passed the self-check:\n%s", g->events);
out:
    free(x);
    free(y);
    free(grad);
    free(loss);
    free(pred);
    return rc;
}
