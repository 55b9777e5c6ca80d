// Choosing each convolution's algorithm per direction (conv_algo.h): fixed by the request, or
// timed. A timing runs the layer's own per-sample functions (conv.c) on random data, on every
// thread at once as the network runs them, and counts each thread's CPU time, so a shared
// machine's waits for a core do not decide; the decisions are kept per process and shape.
#include "nn/conv_algo.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "core/common.h"
#include "core/ht_omp.h"
#include "core/rng.h"

#define TUNE_SAMPLES 4 // samples each thread runs per repetition
#define TUNE_REPS 7    // repetitions after a warm-up one; the median counts
// Winograd is kept where it takes under this share of direct's time: a close call stays
// direct, so that timings repeated in another process decide alike.
#define TUNE_MARGIN 0.9

static const char *impl_name(conv_impl i, int K) {
    if (i == CONV_GEMM) return "gemm";
    if (i == CONV_GEMM_BF16) return "gemm bf16";
    if (K == 5)
        return i == CONV_WINO4   ? "winograd F(4x4,5x5)"
               : i == CONV_WINO2 ? "winograd F(2x2,5x5)"
                                 : "direct";
    return i == CONV_WINO4   ? "winograd F(4x4,3x3)"
           : i == CONV_WINO2 ? "winograd F(2x2,3x3)"
                             : "direct";
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
// cannot be had (nothing timed). The two alternate within every repetition, each first in
// every other, so a change in the machine's load between them weighs on both alike.
static int time_layer(const conv_geom *g0, conv_impl wino, int need_din, int nthreads,
                      double t[3][2]) {
    const int OCs = conv_cpad(g0->OC), S = TUNE_SAMPLES;
    const size_t in_n = (size_t)g0->H * g0->W * g0->Cs, out_n = (size_t)g0->OH * g0->OW * OCs;
    const size_t pack_n = (conv2d_nhwc_pack_floats(g0) + 15) & ~(size_t)15;
    const size_t scr_n = conv2d_nhwc_scratch_floats(g0);
    const size_t w_n = (size_t)g0->OC * g0->C * g0->K * g0->K;
    // Per thread: scratch, then S inputs, outputs, output gradients, input gradients.
    const size_t slice = (scr_n + S * (2 * in_n + 2 * out_n) + 15) & ~(size_t)15;
    const size_t total = 2 * pack_n + w_n + (size_t)OCs + (size_t)nthreads * slice + 16;
    float *mem = aligned_alloc(64, ((total * sizeof(float) + 63) & ~(size_t)63));
    tune_meas *meas = calloc((size_t)nthreads, sizeof *meas);
    if (!mem || !meas) {
        free(mem);
        free(meas);
        return -1;
    }
    float *packs[2] = {mem, mem + pack_n}, *w = mem + 2 * pack_n, *b = w + w_n;
    float *slices = (float *)(((uintptr_t)(b + OCs) + 63) & ~(uintptr_t)63);
    fill(w, w_n, 0.2f, 1);
    fill(b, (size_t)OCs, 0.1f, 2);
    conv_geom g[2], gd[2]; // gd: the weight gradient direct, for the input gradient's pass
    for (int k = 0; k < 2; k++) {
        g[k] = *g0;
        g[k].fwd = g[k].din = g[k].dw = k ? wino : CONV_DIRECT;
        gd[k] = g[k];
        gd[k].dw = CONV_DIRECT;
        conv2d_nhwc_pack(packs[k], w, b, &g[k]);
    }
    int nt = 1;
#pragma omp parallel num_threads(nthreads)
    {
        const int tid = omp_get_thread_num();
#pragma omp single
        nt = omp_get_num_threads();
        float *scr = slices + (size_t)tid * slice, *in = scr + scr_n;
        float *out = in + S * in_n, *dout = out + S * out_n, *din = dout + S * out_n;
        fill(in, S * in_n, 1.0f, 10 + (uint64_t)tid);
        fill(dout, S * out_n, 1.0f, 1000 + (uint64_t)tid);
        conv2d_nhwc_scratch_init(scr, g0);
        tune_meas *me = &meas[tid];
        for (int r = -1; r < TUNE_REPS; r++) // r = -1: warm-up
            for (int i = 0; i < 2; i++) {
                const int k = (r & 1) ? 1 - i : i;
                const float *pack = packs[k];
                double t0 = ht_thread_cpu();
                for (int s = 0; s < S; s++)
                    conv2d_nhwc_forward_one(out + s * out_n, in + s * in_n, pack, &g[k], 1, scr);
                double t1 = ht_thread_cpu();
                for (int s = 0; s < S; s++)
                    conv2d_nhwc_backward_one(NULL, dout + s * out_n, out + s * out_n,
                                             in + s * in_n, pack, &g[k], scr);
                double t2 = ht_thread_cpu();
                for (int s = 0; s < S && need_din; s++)
                    conv2d_nhwc_backward_one(din + s * in_n, dout + s * out_n, out + s * out_n,
                                             in + s * in_n, pack, &gd[k], scr);
                double t3 = ht_thread_cpu();
                if (r < 0) continue;
                me->fwd[r][k] = (t1 - t0) / S;
                me->dw[r][k] = (t2 - t1) / S;
                me->both[r][k] = (t3 - t2) / S;
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
    // The input gradient's own time: its pass less the direct weight gradient in it; at least
    // a nanosecond (two medians of a loaded machine, an ASan build's, can cross).
    for (int k = 0; k < 2; k++)
        t[CONV_DIR_DIN][k] = need_din ? fmax(t[CONV_DIR_DIN][k] - t[CONV_DIR_DW][0], 1e-9) : 0.0;
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
    conv_choice c = {.need_din = need_din, .K = g->K};
    const conv_impl wino = CONV_WINO4;
    if (time_layer(&key, wino, need_din, nthreads, c.t) == 0) {
        const int din_ok = need_din && conv2d_wino_ok(g, CONV_DIR_DIN);
        if (c.t[CONV_DIR_FWD][1] < TUNE_MARGIN * c.t[CONV_DIR_FWD][0]) c.fwd = wino;
        if (c.t[CONV_DIR_DW][1] < TUNE_MARGIN * c.t[CONV_DIR_DW][0]) c.dw = wino;
        if (din_ok && c.t[CONV_DIR_DIN][1] < TUNE_MARGIN * c.t[CONV_DIR_DIN][0]) c.din = wino;
        if (!din_ok) c.t[CONV_DIR_DIN][0] = c.t[CONV_DIR_DIN][1] = 0.0;
        if (tune_n < TUNE_CACHE) tune_cache[tune_n++] = (tune_entry){key, need_din, c};
    }
    pthread_mutex_unlock(&tune_lock);
    return c;
}

size_t conv_choices_text(char *buf, size_t len) {
    size_t k = 0;
    if (len) buf[0] = 0;
    pthread_mutex_lock(&tune_lock);
    for (int i = 0; i < tune_n; i++) {
        const tune_entry *t = &tune_cache[i];
        int n = snprintf(buf + k, len - k, "%s%d.%d.%d.%d.%d.%d.%d.%d:%d.%d.%d", k ? ";" : "",
                         t->g.C, t->g.Cs, t->g.H, t->g.W, t->g.OC, t->g.K, t->g.pad, t->need_din,
                         (int)t->c.fwd, (int)t->c.din, (int)t->c.dw);
        if (n < 0 || (size_t)n >= len - k) {
            if (len) buf[k] = 0;
            break;
        }
        k += (size_t)n;
    }
    pthread_mutex_unlock(&tune_lock);
    return k;
}

static int valid_impl(long i) { return i == CONV_DIRECT || i == CONV_WINO2 || i == CONV_WINO4; }

// Reads "v0.v1...:f.i.w" at *p: 8 numbers (C.Cs.H.W.OC.K.pad.need_din), or the earlier 7
// without K, then ':', then 3; each 0..65536. Fills v[0..10] with K in v[5] (3 for the earlier
// format); advances *p.
static int read_entry(const char **p, long v[11]) {
    const char *q = *p;
    long got[11];
    int n = 0, colon = -1;
    while (n < 11) {
        if (*q < '0' || *q > '9') return -1;
        char *end;
        errno = 0;
        got[n] = strtol(q, &end, 10);
        if (errno || got[n] > 65536) return -1;
        q = end;
        n++;
        if (colon < 0 && *q == ':' && (n == 7 || n == 8)) {
            colon = n;
            q++;
        } else if (colon >= 0 && n == colon + 3) {
            break;
        } else if (*q++ != '.') {
            return -1;
        }
    }
    if (colon < 0 || n != colon + 3) return -1;
    const int old = colon == 7; // no K: the format of 3x3-only Winograd
    for (int i = 0, k = 0; i < 11; i++) v[i] = old && i == 5 ? 3 : got[k++];
    *p = q;
    return 0;
}

int conv_choices_restore(const char *text) {
    tune_entry got[TUNE_CACHE];
    int n = 0;
    for (const char *p = text; *p && n < TUNE_CACHE; n++) {
        long v[11];
        if (read_entry(&p, v) < 0) return -1;
        for (int i = 0; i < 5; i++)
            if (v[i] < 1) return -1;
        const long K = v[5];
        if ((K != 3 && K != 5) || v[6] > 64 || v[7] > 1 || !valid_impl(v[8]) ||
            !valid_impl(v[9]) || !valid_impl(v[10]))
            return -1;
        tune_entry *t = &got[n];
        memset(t, 0, sizeof *t);
        t->g.C = (int)v[0], t->g.Cs = (int)v[1], t->g.H = (int)v[2], t->g.W = (int)v[3];
        t->g.OC = (int)v[4], t->g.K = (int)K, t->g.stride = 1, t->g.pad = (int)v[6];
        t->g.OH = conv_out_dim(t->g.H, t->g.K, 1, t->g.pad);
        t->g.OW = conv_out_dim(t->g.W, t->g.K, 1, t->g.pad);
        if (t->g.OH < 1 || t->g.OW < 1 || t->g.Cs < t->g.C) return -1;
        t->need_din = (int)v[7];
        t->c = (conv_choice){.fwd = (conv_impl)v[8], .din = (conv_impl)v[9],
                             .dw = (conv_impl)v[10], .need_din = t->need_din, .K = t->g.K};
        if (*p == ';') p++;
        else if (*p) return -1;
    }
    pthread_mutex_lock(&tune_lock);
    for (int k = 0; k < n; k++) {
        int i = 0;
        while (i < tune_n && !(!memcmp(&tune_cache[i].g, &got[k].g, sizeof got[k].g) &&
                               tune_cache[i].need_din == got[k].need_din))
            i++;
        if (i < TUNE_CACHE) tune_cache[i] = got[k];
        if (i == tune_n && tune_n < TUNE_CACHE) tune_n++;
    }
    pthread_mutex_unlock(&tune_lock);
    return 0;
}

conv_choice conv_choose(const conv_geom *g, conv_algo req, int need_din, int nthreads) {
    conv_choice c = {.need_din = need_din, .K = g->K};
    if (req == CONV_ALGO_GEMM) {
        c.fwd = c.din = c.dw = CONV_GEMM;
        return c;
    }
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
                              same ? "" : dir[d], impl_name(impl[d], c->K));
    }
    for (int d = 0, n = 0; d < 3 && k < len; d++) {
        if (!used[d] || c->t[d][0] <= 0) continue;
        k += (size_t)snprintf(buf + k, len - k, "%s%s %.1f/%.1f", n++ ? ", " : " (", dir[d],
                              1e6 * c->t[d][0], 1e6 * c->t[d][1]);
        if (d == 2 || (d == 1 && !used[2])) k += (size_t)snprintf(buf + k, len - k, ")");
    }
}
