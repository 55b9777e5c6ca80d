// How the engine shares a batch among the devices: their capacities, the plan of each pass
// over every rank's devices, re-runs of a failed device's share on the others, and, under auto
// balance, the time fits that calibration and the steps feed (capacity.h: the model itself) and
// the re-fits they give.
#include "sharding/engine_int.h"

#include <stdlib.h>

void engine_capacities(const engine *g, double *cap) {
    for (int d = 0; d < g->n_devs; d++) cap[d] = g->slots[d].failed ? 0 : g->slots[d].capacity;
}

// A device's capacity from the fits' or a checkpoint's cap, top the largest: 0 (resting,
// ENGINE_REST_GAIN) stays 0, anything else at least ENGINE_MIN_SHARE of top.
static double capacity_of(double cap, double top) {
    return cap == 0 && top > 0 ? 0 : cap > top * ENGINE_MIN_SHARE ? cap : top * ENGINE_MIN_SHARE;
}

// Dropped devices stay 0; a 0 for a device that is not dropped keeps it resting, as a
// checkpoint of a run with a resting device has it.
void engine_set_capacities(engine *g, const double *cap) {
    double top = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (!g->slots[d].failed && cap[d] > top) top = cap[d];
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->slots[d].capacity = capacity_of(cap[d], top);
    }
    shard_plan_free(&g->plan);
}

// Capacities from the fits for batches of B, over the devices of every rank of the step: every
// rank gathers every rank's fits and computes the same capacities (in plan_batch's (rank,
// device) order), keeping its own devices'. The plan itself is made from the capacities every
// rank then has (plan_batch), so the ranks agree on it even if their arithmetic differed.
// Unless forced, the plan changes only when the fit predicts a step at least
// ENGINE_REPLAN_GAIN faster: every re-plan changes the shard shapes a device sees, and some
// drivers pay for new shapes (new GEMM kernels).
void engine_refit(engine *g, int B, int force) {
    enum { PER = 6 * HT_MAX_DEVICES }; // 5 fit sums and an active flag per device
    int R = g->sp.size, me = g->sp.rank;
    double mine[PER] = {0}, *all = malloc(sizeof(double) * (size_t)R * PER);
    ht_error e;
    if (!all) return; // the capacities stay as they are
    for (int d = 0; d < g->n_devs; d++) {
        memcpy(&mine[5 * d], g->fits.fit[d], sizeof g->fits.fit[d]);
        mine[5 * HT_MAX_DEVICES + d] = !g->slots[d].failed;
    }
    // A failed gather leaves the capacities alone; the step's own reduction reports the error.
    if (span_allgather(g->sp, mine, all, PER, &e) < 0) {
        free(all);
        return;
    }
    capacity_model glob;
    int loc[HT_MAX_DEVICES], active[HT_MAX_DEVICES], rd[HT_MAX_DEVICES], k = 0;
    capacity_reset(&glob, HT_MAX_DEVICES);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < HT_MAX_DEVICES; d++) {
            const double *a = all + (size_t)r * PER;
            if (!(a[5 * HT_MAX_DEVICES + d] > 0)) continue;
            if (k == HT_MAX_DEVICES) { // plan_batch refuses this many
                free(all);
                return;
            }
            memcpy(glob.fit[k], &a[5 * d], sizeof glob.fit[k]);
            loc[k] = r == me ? d : -1;
            rd[k] = r * HT_MAX_DEVICES + d;
            active[k++] = 1;
        }
    free(all);
    glob.n = k;
    double cap[HT_MAX_DEVICES], now[HT_MAX_DEVICES] = {0}, top = 0;
    if (k == 0 || capacity_solve(&glob, active, B, cap) < 0) return; // not all measured yet
    capacity_resting(&glob, active, B, ENGINE_REST_GAIN, cap);
    if (!force && g->plan.pattern && g->plan.len == B) {
        // The current plan's counts in glob's order (a resting device has none); a change of
        // which devices rest always re-plans, the fits alone cannot tell it pays.
        int same = 1;
        for (int i = 0; i < k; i++) {
            for (int p = 0; p < g->plan.n_devs; p++)
                if (g->plan_rd[p] == rd[i]) now[i] = g->plan.count[p];
            same &= (now[i] > 0) == (cap[i] > 0);
        }
        if (same && capacity_predict(&glob, active, now) <=
                        capacity_predict(&glob, active, cap) * (1 + ENGINE_REPLAN_GAIN))
            return;
    }
    for (int i = 0; i < k; i++) top = cap[i] > top ? cap[i] : top;
    for (int i = 0; i < k; i++)
        if (loc[i] >= 0) g->slots[loc[i]].capacity = capacity_of(cap[i], top);
    shard_plan_free(&g->plan);
}

// Adds the last pass's compute times to the fits.
void engine_observe_pass(engine *g) {
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->dispatched && !s->failed && s->rc == 0 && s->n > 0 && s->busy_s > 0)
            capacity_add(&g->fits, d, s->n, s->busy_s);
    }
}

// Plans `n` positions over this rank's active devices: a re-run of failed devices' positions.
static int plan_local(engine *g, shard_plan *p, int n, ht_error *e) {
    double cap[HT_MAX_DEVICES];
    int k = 0;
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->plan_dev[k] = d;
        cap[k++] = g->slots[d].capacity > 0 ? g->slots[d].capacity : 1;
    }
    if (k == 0) return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    return shard_plan_init(p, cap, k, n, e);
}

// The plan of a whole batch over the active devices of every rank of the step, in (rank,
// device) order: each rank gathers every rank's capacities and makes the same plan;
// g->plan_dev maps a plan index to a device of this rank, or -1 for another rank's.
static int plan_batch(engine *g, shard_plan *p, int n, ht_error *e) {
    int R = g->sp.size, me = g->sp.rank;
    double mine[HT_MAX_DEVICES] = {0}, *all = ht_malloc((size_t)R * HT_MAX_DEVICES, sizeof(double), e);
    if (!all) return -1;
    // -1: resting (no samples, but a peer: it counts for the re-fits); 0: dropped.
    for (int d = 0; d < g->n_devs; d++)
        if (!g->slots[d].failed) mine[d] = g->slots[d].capacity > 0 ? g->slots[d].capacity : -1;
    if (span_allgather(g->sp, mine, all, HT_MAX_DEVICES, e) < 0) {
        free(all);
        return -1;
    }
    double cap[HT_MAX_DEVICES];
    int k = 0, peers = 0, rc = 0;
    for (int r = 0; r < R && rc == 0; r++)
        for (int d = 0; d < HT_MAX_DEVICES && rc == 0; d++) {
            const double v = all[(size_t)r * HT_MAX_DEVICES + d];
            if (v == 0) continue;
            peers += r != me;
            if (v < 0) continue;
            if (k == HT_MAX_DEVICES) {
                rc = ht_fail(e, "more than %d devices over all ranks", HT_MAX_DEVICES);
                break;
            }
            g->plan_dev[k] = r == me ? d : -1;
            g->plan_rd[k] = r * HT_MAX_DEVICES + d;
            cap[k++] = v;
        }
    free(all);
    if (rc < 0) return -1;
    if (k == 0 && R > 1) return ht_fail(e, "every device of every rank has failed");
    if (k == 0) return ht_fail(e, "every device has failed; the last: %s", g->last_failure);
    g->peers_active = peers;
    return shard_plan_init(p, cap, k, n, e);
}

// Gives every active device its positions among `positions` (NULL: 0..n-1) and marks it
// dispatched. A whole batch (`batch`) is planned over every rank's devices into g->plan, made
// again for every batch from every rank's capacities now (a rank alone cannot know that
// another one's changed); a re-run of failed devices' positions over this rank's devices left.
static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int engine_assign(engine *g, const int *positions, int n, int batch, ht_error *e) {
    // The plan hands out units: single positions, or under batchnorm whole groups of G
    // consecutive positions (model_bn_group), in order, so that each group's statistics are
    // computed on one device from the same samples whichever device that is. A re-run's
    // positions are whole groups of the devices that failed: sorted, they are whole groups in
    // order again (the short last group of a batch last).
    const int G = g->group > 1 ? g->group : 1;
    if (n > g->max_batch) return ht_fail(e, "engine: %d positions, more than %d", n, g->max_batch);
    int *unit = NULL, units = n;
    if (positions && G > 1) {
        memcpy(g->sorted, positions, sizeof(int) * (size_t)n);
        qsort(g->sorted, (size_t)n, sizeof(int), cmp_int);
        positions = g->sorted;
    }
    if (G > 1) { // unit k starts at position index unit[k]
        unit = g->unit;
        units = 0;
        for (int j = 0; j < n; j++) {
            int pj = positions ? positions[j] : j;
            if (j == 0 || pj / G != (positions ? positions[j - 1] : j - 1) / G) unit[units++] = j;
        }
        unit[units] = n;
    }
    shard_plan tmp, *p = &g->plan;
    int rc = 0;
    if (batch) {
        shard_plan_free(&g->plan);
        rc = plan_batch(g, &g->plan, units, e);
    } else {
        rc = plan_local(g, &tmp, units, e);
        p = &tmp;
    }
    if (rc < 0) return -1;
    for (int d = 0; d < g->n_devs; d++) {
        g->slots[d].n = 0;
        g->slots[d].dispatched = 0;
    }
    // Every rank's devices' positions of a whole batch (the factored layers' gathers).
    if (batch) memset(g->plan_n, 0, sizeof g->plan_n), g->plan_len = p->n_devs;
    for (int k = 0; batch && k < units; k++)
        g->plan_n[p->pattern[k]] += unit ? unit[k + 1] - unit[k] : 1;
    for (int k = 0; k < units; k++) {
        int d = g->plan_dev[p->pattern[k]];
        if (d < 0) continue; // another rank's
        engine_slot *s = &g->slots[d];
        for (int j = unit ? unit[k] : k; j < (unit ? unit[k + 1] : k + 1); j++)
            s->pos[s->n++] = positions ? positions[j] : j;
    }
    // A device with no samples this pass sits it out: no launch, no wait.
    for (int d = 0; d < g->n_devs; d++) g->slots[d].dispatched = g->slots[d].n > 0;
    if (!batch) shard_plan_free(&tmp);
    return 0;
}

// Runs the positions that failed devices left in g->orphans on the others, until none is left;
// after each pass, `collect` takes what it produced.
int engine_rerun_orphans(engine *g, const engine_task *t, void (*collect)(engine *, void *),
                         void *arg, ht_error *e) {
    while (g->n_orphans > 0) {
        int n = g->n_orphans;
        int *left = malloc(sizeof(int) * (size_t)n);
        if (!left) return ht_fail(e, "out of memory re-planning the failed devices' samples");
        memcpy(left, g->orphans, sizeof(int) * (size_t)n);
        g->n_orphans = 0;
        int rc = engine_assign(g, left, n, 0, e);
        free(left);
        if (rc < 0) return -1;
        engine_dispatch(g, t);
        collect(g, arg);
    }
    return 0;
}

// Gives every active device that the plan left without samples one position, taken from the
// busiest device: a device the balance once wrote off (its fixed cost seemed larger than a
// step, perhaps only while its driver was compiling) is measured again now and then and can
// earn its share back.
void engine_probe_idle(engine *g) {
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->failed || s->n > 0) continue;
        engine_slot *big = NULL;
        for (int k = 0; k < g->n_devs; k++)
            if (!g->slots[k].failed && (!big || g->slots[k].n > big->n)) big = &g->slots[k];
        if (!big || big->n < 2) return;
        // One unit: a position, or under batchnorm the busiest device's last group (if it
        // has another to keep).
        const int G = g->group > 1 ? g->group : 1, last = big->pos[big->n - 1] / G;
        int from = big->n - 1;
        while (from > 0 && big->pos[from - 1] / G == last) from--;
        if (from == 0) return;
        for (int j = from; j < big->n; j++) s->pos[s->n++] = big->pos[j];
        big->n = from;
        s->dispatched = 1;
    }
}

int engine_calibrate(engine *g, const dataset *ds, const uint32_t *idx, int B, ht_error *e) {
    // Only with several devices over the ranks of the step.
    double mine = engine_active(g), *all = ht_malloc((size_t)g->sp.size, sizeof(double), e);
    if (!all || span_allgather(g->sp, &mine, all, 1, e) < 0) {
        free(all);
        return ht_wrap(e, "calibration");
    }
    double devices = 0;
    for (int r = 0; r < g->sp.size; r++) devices += all[r];
    free(all);
    if (devices < 2) return 0;
    if (B > g->max_batch) B = g->max_batch;
    capacity_reset(&g->fits, g->n_devs);
    // Some drivers compile or tune on the first launch of each new shape, so every measured
    // round follows a warm-up round at the same shares: round 0 warms up at the given capacities,
    // round 1 measures them; round 2 warms up at the capacities fitted from round 1, round 3
    // measures those. Each device is thus seen at two shard sizes, and the fit can separate
    // fixed from per-sample cost.
    engine_task t = {.kind = TASK_TRAIN, .ds = ds, .idx = idx};
    for (int round = 0; round < 4; round++) {
        if (engine_assign(g, NULL, B, 1, e) < 0) return ht_wrap(e, "calibration");
        g->n_orphans = 0;
        engine_dispatch(g, &t);
        if (engine_active(g) == 0) return ht_fail(e, "calibration: every device failed");
        if (round % 2 == 0) continue;
        engine_observe_pass(g);
        engine_refit(g, B, 1);
    }
    g->since = 0;
    return 1;
}
