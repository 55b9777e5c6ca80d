// Least-squares time model per device with exponential forgetting, and the shares that make
// all devices finish a step together.
#include "sharding/capacity.h"

#include <string.h>

void capacity_reset(capacity_model *b, int n_devs) {
    memset(b, 0, sizeof *b);
    b->n = n_devs;
}

void capacity_forget(capacity_model *b, int d) { memset(b->fit[d], 0, sizeof b->fit[d]); }

void capacity_add(capacity_model *b, int d, int n, double t) {
    double *f = b->fit[d];
    for (int k = 0; k < 5; k++) f[k] *= CAPACITY_FORGET;
    f[0] += 1;
    f[1] += n;
    f[2] += t;
    f[3] += (double)n * n;
    f[4] += n * t;
}

// Least-squares t = a + b*n for device d; with too little spread in n, a = 0 and b = t/n.
static int fit_line(const capacity_model *bal, int d, double *a, double *b) {
    const double *f = bal->fit[d];
    if (f[1] <= 0 || f[2] <= 0) return -1;
    // den / f0^2 is the variance of n; against the squared mean, the relative spread.
    double den = f[0] * f[3] - f[1] * f[1];
    *b = f[2] / f[1];
    *a = 0;
    if (den > CAPACITY_MIN_SPREAD * CAPACITY_MIN_SPREAD * f[1] * f[1]) {
        double bb = (f[0] * f[4] - f[1] * f[2]) / den, aa = (f[2] - bb * f[1]) / f[0];
        if (bb > 0 && aa >= 0) {
            *a = aa;
            *b = bb;
        }
        // Otherwise (a negative intercept or slope is noise) keep the rate model.
    }
    return 0;
}

int capacity_solve(const capacity_model *bal, const int *active, int B, double *cap) {
    double a[HT_MAX_DEVICES], b[HT_MAX_DEVICES], w[HT_MAX_DEVICES];
    int on[HT_MAX_DEVICES], n = bal->n;
    for (int d = 0; d < n; d++) {
        on[d] = active[d] != 0;
        if (on[d] && fit_line(bal, d, &a[d], &b[d]) < 0) return -1;
    }
    // Equal finish time T: sum over devices of (T - a_d) / b_d = B. A device whose share comes
    // out <= 0 is left out and T solved again.
    for (int iter = 0; iter < n; iter++) {
        double num = B, den = 0;
        for (int d = 0; d < n; d++)
            if (on[d]) {
                num += a[d] / b[d];
                den += 1 / b[d];
            }
        if (den <= 0) return -1;
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
    for (int d = 0; d < n; d++) cap[d] = w[d] > 0 ? w[d] : 0;
    return 0;
}

double capacity_predict(const capacity_model *bal, const int *active, const double *counts) {
    double worst = 0;
    for (int d = 0; d < bal->n; d++) {
        double a, b;
        if (!active[d] || !(counts[d] > 0) || fit_line(bal, d, &a, &b) < 0) continue;
        double t = a + b * counts[d];
        if (t > worst) worst = t;
    }
    return worst;
}

void capacity_resting(const capacity_model *glob, const int *active_in, int B, double gain,
                     double *cap) {
    const int k = glob->n;
    int active[HT_MAX_DEVICES];
    const double t_all = capacity_predict(glob, active_in, cap);
    for (int i = 0; i < k; i++) active[i] = active_in[i] && cap[i] > 0;
    for (;;) {
        int on = 0, best = -1;
        double best_t = 0, c[HT_MAX_DEVICES], best_c[HT_MAX_DEVICES];
        for (int i = 0; i < k; i++) on += active[i];
        if (on < 2) break;
        for (int i = 0; i < k; i++) {
            if (!active[i]) continue;
            active[i] = 0;
            if (capacity_solve(glob, active, B, c) == 0) {
                double t = capacity_predict(glob, active, c);
                if (t <= t_all * (1 + gain) && (best < 0 || t < best_t)) {
                    best = i;
                    best_t = t;
                    memcpy(best_c, c, sizeof(double) * (size_t)k);
                }
            }
            active[i] = 1;
        }
        if (best < 0) break;
        active[best] = 0;
        memcpy(cap, best_c, sizeof(double) * (size_t)k);
    }
}
