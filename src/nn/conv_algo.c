// Choosing each convolution's algorithm per direction (conv_algo.h): fixed by the request, or
// timed. A timing runs the layer's own per-sample functions (conv.c) on random data, on every
// thread at once as the network runs them, and counts each thread's CPU time, so a shared
// machine's waits for a core do not decide; the decisions are kept per process and shape.
#include "conv_algo.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ht_omp.h"
#include "rng.h"

#define TUNE_SAMPLES 4 // samples each thread runs per repetition
#define TUNE_REPS 5    // repetitions after a warm-up one; the median counts
// Winograd is kept where it takes under this share of direct's time: a close call stays
// direct, so that timings repeated in another process decide alike.
#define TUNE_MARGIN 0.9

static const char *impl_name(conv_impl i) {
    return i == CONV_WINO4 ? "winograd F(4x4,3x3)" : i == CONV_WINO2 ? "winograd F(2x2,3x3)" : "direct";
}

static void fill(float *p, size_t n, float scale, uint64_t seed) {
    ht_rng r;
    ht_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = scale * (float)(2.0 * ht_rng_double(&r) - 1.0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0.0;
}

// What one thread times: per repetition and algorithm (direct, Winograd), the seconds a sample
// of the forward, of the weight gradient alone, and of the input and weight gradients with
// the weight gradient direct.
typedef struct tune_meas {
    double fwd[TUNE_REPS][2], dw[TUNE_REPS][2], both[TUNE_REPS][2];
} tune_meas;

// Times g (fwd, din, dw ignored) direct and with `wino` into t; returns -1 when the buffers
// cannot be had (nothing timed).
static int time_layer(const conv_geom *g0, conv_impl wino, int need_din, int nthreads,
                      double t[3][2]) {
    const int OCs = conv_cpad(g0->OC), S = TUNE_SAMPLES;
    const size_t in_n = (size_t)g0->H * g0->W * g0->Cs, out_n = (size_t)g0->OH * g0->OW * OCs;
    const size_t pack_n = conv2d_nhwc_pack_floats(g0), scr_n = conv2d_nhwc_scratch_floats(g0);
    const size_t w_n = (size_t)g0->OC * g0->C * g0->K * g0->K;
    // Per thread: scratch, then S inputs, outputs, output gradients, input gradients.
    const size_t slice = (scr_n + S * (2 * in_n + 2 * out_n) + 15) & ~(size_t)15;
    const size_t total = ((pack_n + 15) & ~(size_t)15) + w_n + (size_t)OCs +
                         (size_t)nthreads * slice + 16;
    float *mem = aligned_alloc(64, ((total * sizeof(float) + 63) & ~(size_t)63));
    tune_meas *meas = calloc((size_t)nthreads, sizeof *meas);
    if (!mem || !meas) {
        free(mem);
        free(meas);
        return -1;
    }
    float *pack = mem, *w = pack + ((pack_n + 15) & ~(size_t)15), *b = w + w_n;
    float *slices = (float *)(((uintptr_t)(b + OCs) + 63) & ~(uintptr_t)63);
    fill(w, w_n, 0.2f, 1);
    fill(b, (size_t)OCs, 0.1f, 2);
    int nt = 1;
    for (int k = 0; k < 2; k++) {
        conv_geom g = *g0, gd;
        g.fwd = g.din = g.dw = k ? wino : CONV_DIRECT;
        gd = g;
        gd.dw = CONV_DIRECT;
        conv2d_nhwc_pack(pack, w, b, &g);
#pragma omp parallel num_threads(nthreads)
        {
            const int tid = omp_get_thread_num();
#pragma omp single
            nt = omp_get_num_threads();
            float *scr = slices + (size_t)tid * slice, *in = scr + scr_n;
            float *out = in + S * in_n, *dout = out + S * out_n, *din = dout + S * out_n;
            if (k == 0) {
                fill(in, S * in_n, 1.0f, 10 + (uint64_t)tid);
                fill(dout, S * out_n, 1.0f, 1000 + (uint64_t)tid);
            }
            conv2d_nhwc_scratch_init(scr, &g);
            tune_meas *me = &meas[tid];
            for (int r = -1; r < TUNE_REPS; r++) { // r = -1: warm-up
                double t0 = ht_thread_cpu();
                for (int s = 0; s < S; s++)
                    conv2d_nhwc_forward_one(out + s * out_n, in + s * in_n, pack, &g, 1, scr);
                double t1 = ht_thread_cpu();
                for (int s = 0; s < S; s++)
                    conv2d_nhwc_backward_one(NULL, dout + s * out_n, out + s * out_n,
                                             in + s * in_n, pack, &g, scr);
                double t2 = ht_thread_cpu();
                for (int s = 0; s < S && need_din; s++)
                    conv2d_nhwc_backward_one(din + s * in_n, dout + s * out_n, out + s * out_n,
                                             in + s * in_n, pack, &gd, scr);
                double t3 = ht_thread_cpu();
                if (r < 0) continue;
                me->fwd[r][k] = (t1 - t0) / S;
                me->dw[r][k] = (t2 - t1) / S;
                me->both[r][k] = (t3 - t2) / S;
            }
        }
    }
    double v[3][2][TUNE_REPS * 64];
    int n = 0;
    for (int i = 0; i < nt && n + TUNE_REPS <= TUNE_REPS * 64; i++)
        for (int r = 0; r < TUNE_REPS; r++, n++)
            for (int k = 0; k < 2; k++) {
                v[CONV_DIR_FWD][k][n] = meas[i].fwd[r][k];
                v[CONV_DIR_DW][k][n] = meas[i].dw[r][k];
                v[CONV_DIR_DIN][k][n] = meas[i].both[r][k];
            }
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 2; k++) t[d][k] = median(v[d][k], n);
    // The input gradient's own time: its pass less the direct weight gradient in it.
    for (int k = 0; k < 2; k++) t[CONV_DIR_DIN][k] = need_din ? t[CONV_DIR_DIN][k] - t[CONV_DIR_DW][0] : 0.0;
    free(mem);
    free(meas);
    return 0;
}

// Decisions already made in this process, by shape.
typedef struct tune_entry {
    conv_geom g; // fwd, din, dw zero
    int need_din;
    conv_choice c;
} tune_entry;
#define TUNE_CACHE 64
static tune_entry tune_cache[TUNE_CACHE];
static int tune_n;
static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;

static conv_choice choose_auto(const conv_geom *g, int need_din, int nthreads) {
    conv_geom key;
    memset(&key, 0, sizeof key);
    key.C = g->C, key.Cs = g->Cs, key.H = g->H, key.W = g->W, key.OC = g->OC, key.K = g->K;
    key.stride = g->stride, key.pad = g->pad, key.OH = g->OH, key.OW = g->OW;
    pthread_mutex_lock(&tune_lock);
    for (int i = 0; i < tune_n; i++)
        if (!memcmp(&tune_cache[i].g, &key, sizeof key) && tune_cache[i].need_din == need_din) {
            conv_choice c = tune_cache[i].c;
            pthread_mutex_unlock(&tune_lock);
            return c;
        }
    conv_choice c = {CONV_DIRECT, CONV_DIRECT, CONV_DIRECT, need_din, {{0}}};
    if (time_layer(&key, CONV_WINO4, need_din, nthreads, c.t) == 0) {
        const int din_ok = need_din && conv2d_wino_ok(g, CONV_DIR_DIN);
        if (c.t[CONV_DIR_FWD][1] < TUNE_MARGIN * c.t[CONV_DIR_FWD][0]) c.fwd = CONV_WINO4;
        if (c.t[CONV_DIR_DW][1] < TUNE_MARGIN * c.t[CONV_DIR_DW][0]) c.dw = CONV_WINO4;
        if (din_ok && c.t[CONV_DIR_DIN][1] < TUNE_MARGIN * c.t[CONV_DIR_DIN][0])
            c.din = CONV_WINO4;
        if (!din_ok) c.t[CONV_DIR_DIN][0] = c.t[CONV_DIR_DIN][1] = 0.0;
        if (tune_n < TUNE_CACHE) tune_cache[tune_n++] = (tune_entry){key, need_din, c};
    }
    pthread_mutex_unlock(&tune_lock);
    return c;
}

conv_choice conv_choose(const conv_geom *g, conv_algo req, int need_din, int nthreads) {
    conv_choice c = {CONV_DIRECT, CONV_DIRECT, CONV_DIRECT, need_din, {{0}}};
    if (req == CONV_ALGO_DIRECT || !conv2d_wino_ok(g, CONV_DIR_FWD)) return c;
    if (req == CONV_ALGO_AUTO) return choose_auto(g, need_din, nthreads < 1 ? 1 : nthreads);
    const conv_impl impl = req == CONV_ALGO_WINOGRAD2 ? CONV_WINO2 : CONV_WINO4;
    c.fwd = c.dw = impl;
    c.din = need_din && conv2d_wino_ok(g, CONV_DIR_DIN) ? impl : CONV_DIRECT;
    return c;
}

void conv_choice_describe(const conv_choice *c, const char *layer, char *buf, size_t len) {
    static const char *const dir[3] = {"fwd", "din", "dw"};
    const conv_impl impl[3] = {c->fwd, c->din, c->dw};
    const int used[3] = {1, c->need_din, 1};
    int same = 1;
    for (int d = 1; d < 3; d++) same &= !used[d] || impl[d] == impl[0];
    size_t k = (size_t)snprintf(buf, len, "%s", layer);
    for (int d = 0; d < 3 && k < len; d++) {
        if (same && d) break;
        if (!used[d]) continue;
        k += (size_t)snprintf(buf + k, len - k, "%s%s%s %s", d ? "," : "", same ? "" : " ",
                              same ? "" : dir[d], impl_name(impl[d]));
    }
    for (int d = 0, n = 0; d < 3 && k < len; d++) {
        if (!used[d] || c->t[d][0] <= 0) continue;
        k += (size_t)snprintf(buf + k, len - k, "%s%s %.1f/%.1f", n++ ? ", " : " (", dir[d],
                              1e6 * c->t[d][0], 1e6 * c->t[d][1]);
        if (d == 2 || (d == 1 && !used[2])) k += (size_t)snprintf(buf + k, len - k, ")");
    }
}
