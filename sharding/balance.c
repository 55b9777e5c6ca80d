// Capacities: a least-squares time model per device (fixed + per-sample cost) with
// exponential forgetting, and the shares that make all devices finish a step together.
#include <string.h>

#include "engine_internal.h"

// Sets the capacities of the active devices (dropped ones stay 0) and drops the cached plan.
static void set_capacities_replan(engine *g, const double *w) {
    double top = 0;
    for (int d = 0; d < g->n_devs; d++)
        if (!g->slots[d].failed && w[d] > top) top = w[d];
    for (int d = 0; d < g->n_devs; d++) {
        if (g->slots[d].failed) continue;
        g->devs[d].capacity = w[d] > top * ENGINE_MIN_SHARE ? w[d] : top * ENGINE_MIN_SHARE;
    }
    shard_plan_free(&g->plan);
}

void balance_reset(engine *g) { memset(g->fit, 0, sizeof g->fit); }

void balance_drop(engine *g, int d) {
    g->devs[d].capacity = 0;
    memset(g->fit[d], 0, sizeof g->fit[d]);
    shard_plan_free(&g->plan);
}

// Adds one shard's (n, busy) to device d's forgetting sums.
static void fit_add(engine *g, int d, double n, double t) {
    double *f = g->fit[d];
    for (int k = 0; k < 5; k++) f[k] *= ENGINE_FORGET;
    f[0] += 1;
    f[1] += n;
    f[2] += t;
    f[3] += n * n;
    f[4] += n * t;
}

void balance_fit_pass(engine *g) {
    for (int d = 0; d < g->n_devs; d++) {
        engine_slot *s = &g->slots[d];
        if (s->dispatched && !s->failed && s->rc == 0 && s->n > 0 && s->busy_s > 0)
            fit_add(g, d, s->n, s->busy_s - s->bcast_s);
    }
}

// Least-squares t = a + b*n for device d; with too little spread in n, a = 0 and b = t/n.
static int fit_line(const engine *g, int d, double *a, double *b) {
    const double *f = g->fit[d];
    if (f[1] <= 0 || f[2] <= 0) return -1;
    double den = f[0] * f[3] - f[1] * f[1];
    *b = f[2] / f[1];
    *a = 0;
    if (den > 1e-9 * f[0] * f[3]) {
        double bb = (f[0] * f[4] - f[1] * f[2]) / den, aa = (f[2] - bb * f[1]) / f[0];
        if (bb > 0 && aa >= 0) {
            *a = aa;
            *b = bb;
        }
        // Otherwise (a negative intercept or slope is noise) keep the rate model.
    }
    return 0;
}

// Weights from the fits for batches of B: equal finish times; devices that cannot even cover
// their fixed costs get the minimum share. Unless forced, the plan changes only when the fit
// predicts a step at least ENGINE_REPLAN_GAIN faster: every re-plan changes the shard shapes a
// device sees, and some drivers pay for new shapes (new GEMM kernels).
void balance_now(engine *g, int B, int force) {
    double a[HT_MAX_DEVICES], b[HT_MAX_DEVICES], w[HT_MAX_DEVICES];
    int on[HT_MAX_DEVICES], n = g->n_devs;
    for (int d = 0; d < n; d++) {
        on[d] = !g->slots[d].failed;
        if (on[d] && fit_line(g, d, &a[d], &b[d]) < 0) return; // not every device measured yet
    }
    for (int iter = 0; iter < n; iter++) {
        double num = B, den = 0;
        for (int d = 0; d < n; d++)
            if (on[d]) {
                num += a[d] / b[d];
                den += 1 / b[d];
            }
        if (den <= 0) return;
        double T = num / den;
        int dropped = 0;
        for (int d = 0; d < n; d++) {
            w[d] = on[d] ? (T - a[d]) / b[d] : 0;
            if (on[d] && w[d] <= 0) {
                on[d] = 0;
                dropped = 1;
            }
        }
        if (!dropped) break;
    }
    if (!force && g->plan.pattern && g->plan.len == B) {
        double t_now = 0, t_new = 0;
        for (int k = 0; k < g->plan.n_devs; k++) {
            int d = g->plan_dev[k];
            double tn = g->plan.count[k] ? a[d] + b[d] * g->plan.count[k] : 0;
            if (tn > t_now) t_now = tn;
        }
        for (int d = 0; d < n; d++) {
            double tw = on[d] ? a[d] + b[d] * w[d] : 0;
            if (tw > t_new) t_new = tw;
        }
        if (t_now <= t_new * (1 + ENGINE_REPLAN_GAIN)) return;
    }
    set_capacities_replan(g, w);
}

void balance_observe(engine *g, int B) {
    if (g->balance != BALANCE_AUTO || engine_active(g) < 2) return;
    if (++g->since < g->rebalance) return;
    g->since = 0;
    balance_now(g, B, 0);
}

void engine_set_balance(engine *g, balance_mode mode, int rebalance) {
    g->balance = mode;
    g->rebalance = rebalance < 1 ? 1 : rebalance;
}

void engine_capacities(const engine *g, double *w) {
    for (int d = 0; d < g->n_devs; d++) w[d] = g->slots[d].failed ? 0 : g->devs[d].capacity;
}
