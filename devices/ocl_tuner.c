// The tuner (ocl_tuner.h). One shard with the profile on gives the GEMM shapes and how often
// each is called. The shapes, heaviest first, each get a share of the budget: CLBlast's own
// configuration is timed, then the configurations that did best on earlier shapes (already
// compiled, so cheap), a starting point of each routine for CPU-like devices, CLBlast's other
// routine, then moves of one parameter at a time from the best so far, nearest values first,
// while the share lasts (a configuration new to the process costs a compile: seconds on
// PoCL). A configuration's first result on every shape is checked against OpenBLAS. Then our
// kernels' work-group sizes are timed over whole micro-batches, and the tuned device's
// gradient is compared with the untuned one's before anything is written.
#include "devices/ocl_tuner.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/device.h"
#include "devices/ocl_ops.h"
#include "devices/opencl.h"
#include "devices/ocl_tune.h"
#include "core/rng.h"

#define TUNE_TOL 1e-4        // relative L2 error of a GEMM against OpenBLAS (rounding: ~1e-6)
#define TUNE_GRAD_TOL 5e-2   // relative L2 of a shard's gradient, tuned against untuned: only a
                             // gross error is caught here (a ReLU or max-pool input within
                             // rounding of its branch may send one sample's gradient elsewhere)
#define TUNE_MAX_CONFIGS 256
#define TUNE_MAX_SHAPES 48
#define TUNE_POOL_TRY 8      // earlier shapes' best configurations tried on each shape
#define TUNE_BETTER 0.97     // a move must be 3% faster to become the new starting point
#define TUNE_WG_BETTER 0.95  // a work-group size must be 5% faster than the driver's choice
#define TUNE_KERNEL_SHARE 0.2 // of the budget, kept for the work-group sizes

typedef struct tcfg {
    ocl_gemm_cfg cfg;
    int bad;                    // refused by CLBlast, or wrong results
    double ms[TUNE_MAX_SHAPES]; // per shape; 0: not timed there
} tcfg;

typedef struct tshape {
    ocl_prof_entry call; // shape, leading dimensions, offsets, beta, op, calls per shard
    double flops;        // per shard
    cl_mem a, b, c;
    size_t a_off, b_off, c_off; // the call's offsets modulo 16: their alignment
    size_t c_floats;
    float *c0, *ref, *got;
    double own_ms, best_ms;
    int best; // configuration index; -1 none
} tshape;

typedef struct tuner {
    const ocl_dev_info *dev;
    const ocl_tuner_opts *o;
    ocl_tuner_result *r;
    device d;
    ocl_ops *ops;
    double start, deadline;
    double new_cost[3]; // what the last three configurations new to the process cost
    int n_new;
    ocl_gemm_cfg own[2]; // [0] Xgemm, [1] XgemmDirect, as CLBlast has them
    size_t min_indirect;
    tcfg *cfgs;
    int n_cfgs;
    tshape shapes[TUNE_MAX_SHAPES];
    int n_shapes;
    // the shard
    float *x, *params, *grad_untuned, *grad;
    uint8_t *y;
    uint32_t *ids;
    float *loss;
    int32_t *pred;
} tuner;

static void say(tuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(tuner *t, const char *fmt, ...) {
    if (!t->o->progress) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(t->o->progress, "  [%5.0f s] ", ht_now() - t->start);
    vfprintf(t->o->progress, fmt, ap);
    fputc('\n', t->o->progress);
    fflush(t->o->progress);
    va_end(ap);
}

static double gflops(const tshape *s, double ms) {
    return ms > 0 ? 2.0 * (double)s->call.shape.m * (double)s->call.shape.n *
                        (double)s->call.shape.k / (ms * 1e6)
                  : 0;
}

// "XgemmDirect: CLBlast's own" or "XgemmDirect: WGD 16, KWID 16 (others CLBlast's)".
static void describe(const tuner *t, const ocl_gemm_cfg *c, char *out, size_t cap) {
    const ocl_kparams *own = &t->own[c->direct].kp;
    size_t k = (size_t)snprintf(out, cap, "%s:", ocl_blas_kernel(c->direct));
    int diff = 0;
    for (int i = 0; i < c->kp.n && k < cap; i++) {
        if (ocl_kparam(own, c->kp.name[i], (size_t)-1) == c->kp.value[i]) continue;
        k += (size_t)snprintf(out + k, cap - k, "%s %s %zu", diff ? "," : "", c->kp.name[i],
                              c->kp.value[i]);
        diff++;
    }
    if (k < cap) snprintf(out + k, cap - k, diff ? " (others CLBlast's)" : " CLBlast's own");
}

// ---- one shard on the device ----

static int run_shard(tuner *t, int n, float *grad, ht_error *e) {
    shard_job job = {.x = t->x, .y = t->y, .ids = t->ids, .n = n, .seed = 1};
    shard_result res = {grad, t->loss, t->pred, 0, ""};
    ocl_prof_reset(t->ops);
    return t->d.ops->train_shard(t->d.ctx, &job, &res, e);
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        if (!isfinite(a[i])) return INFINITY;
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// ---- GEMM shapes ----

static void fill_uniform(float *x, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++) x[i] = ht_rng_uniform(key, (uint32_t)(i >> 32), (uint32_t)i);
}

static void shape_free(tshape *s) {
    cl_mem *bufs[] = {&s->a, &s->b, &s->c};
    for (int i = 0; i < 3; i++) {
        if (*bufs[i]) clReleaseMemObject(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(s->c0);
    free(s->ref);
    free(s->got);
    s->c0 = s->ref = s->got = NULL;
}

static cl_mem upload(tuner *t, const float *host, size_t n, ht_error *e) {
    cl_int err;
    cl_mem m = clCreateBuffer(t->ops->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              n * sizeof(float), (void *)host, &err);
    if (err != CL_SUCCESS) {
        ocl_fail(e, "clCreateBuffer(tuning operand)", err, t->ops->label);
        return NULL;
    }
    return m;
}

// Operands of the shape's size (its leading dimensions, its offsets' alignment) filled with
// values in [0,1), and OpenBLAS's result.
static int shape_setup(tuner *t, tshape *s, ht_error *e) {
    const ocl_gemm_shape *g = &s->call.shape;
    s->a_off = s->call.a_off % 16;
    s->b_off = s->call.b_off % 16;
    s->c_off = s->call.c_off % 16;
    size_t a_rows = g->ta == 'N' ? g->m : g->k, a_cols = g->ta == 'N' ? g->k : g->m;
    size_t b_rows = g->tb == 'N' ? g->k : g->n, b_cols = g->tb == 'N' ? g->n : g->k;
    size_t na = s->a_off + (a_rows - 1) * s->call.lda + a_cols;
    size_t nb = s->b_off + (b_rows - 1) * s->call.ldb + b_cols;
    s->c_floats = s->c_off + (g->m - 1) * s->call.ldc + g->n;
    float *a = ht_malloc(na, sizeof(float), e), *b = ht_malloc(nb, sizeof(float), e);
    s->c0 = ht_malloc(s->c_floats, sizeof(float), e);
    s->ref = ht_malloc(s->c_floats, sizeof(float), e);
    s->got = ht_malloc(s->c_floats, sizeof(float), e);
    int rc = -1;
    if (!a || !b || !s->c0 || !s->ref || !s->got) goto done;
    fill_uniform(a, na, 11);
    fill_uniform(b, nb, 12);
    if (s->call.beta != 0.0f) {
        fill_uniform(s->c0, s->c_floats, 13);
    } else { // a result must not depend on what was there: NaN shows a missed element
        for (size_t i = 0; i < s->c_floats; i++) s->c0[i] = NAN;
    }
    for (size_t i = 0; i < s->c_floats; i++) s->ref[i] = s->call.beta != 0.0f ? s->c0[i] : 0.0f;
    cblas_sgemm(CblasRowMajor, g->ta == 'T' ? CblasTrans : CblasNoTrans,
                g->tb == 'T' ? CblasTrans : CblasNoTrans, (int)g->m, (int)g->n, (int)g->k, 1.0f,
                a + s->a_off, (int)s->call.lda, b + s->b_off, (int)s->call.ldb, s->call.beta,
                s->ref + s->c_off, (int)s->call.ldc);
    if (!(s->a = upload(t, a, na, e)) || !(s->b = upload(t, b, nb, e)) ||
        !(s->c = upload(t, s->c0, s->c_floats, e)))
        goto done;
    rc = 0;
done:
    free(a);
    free(b);
    if (rc < 0) shape_free(s);
    return rc;
}

static int gemm_once(tuner *t, tshape *s, const ocl_gemm_cfg *cfg, double *secs, ht_error *e) {
    const ocl_gemm_shape *g = &s->call.shape;
    double t0 = ht_now();
    if (ocl_gemm(t->ops, s->call.op, cfg, g->ta, g->tb, g->m, g->n, g->k, s->a, s->a_off,
                 s->call.lda, s->b, s->b_off, s->call.ldb, s->call.beta, s->c, s->c_off,
                 s->call.ldc, e) < 0)
        return -1;
    cl_int err = clFinish(t->ops->q);
    if (err != CL_SUCCESS) return ocl_fail(e, "clFinish", err, t->ops->label);
    *secs = ht_now() - t0;
    return 0;
}

// Times configuration ci on shape si (once per pair): a run that is checked against OpenBLAS
// (it also compiles what is new), then up to 3 timed runs, cut short when the first is far
// behind the shape's best. Returns milliseconds, or -1 when the configuration is bad.
static double eval(tuner *t, int ci, int si) {
    tcfg *c = &t->cfgs[ci];
    tshape *s = &t->shapes[si];
    if (c->bad) return -1;
    if (c->ms[si] > 0) return c->ms[si];
    ht_error e;
    char desc[300], shape[64];
    ocl_gemm_shape_str(shape, sizeof shape, &s->call.shape);
    cl_int err = clEnqueueWriteBuffer(t->ops->q, s->c, CL_TRUE, 0, s->c_floats * sizeof(float),
                                      s->c0, 0, NULL, NULL);
    double first = 0, best = INFINITY, spent = 0;
    int rc = err == CL_SUCCESS ? gemm_once(t, s, &c->cfg, &first, &e)
                               : ocl_fail(&e, "clEnqueueWriteBuffer", err, t->ops->label);
    if (rc == 0) {
        err = clEnqueueReadBuffer(t->ops->q, s->c, CL_TRUE, 0, s->c_floats * sizeof(float),
                                  s->got, 0, NULL, NULL);
        if (err != CL_SUCCESS) rc = ocl_fail(&e, "clEnqueueReadBuffer", err, t->ops->label);
    }
    double off = 0;
    if (rc == 0) {
        const ocl_gemm_shape *g = &s->call.shape;
        double num = 0, den = 0;
        for (size_t i = 0; i < g->m && isfinite(num); i++)
            for (size_t j = 0; j < g->n; j++) {
                size_t at = s->c_off + i * s->call.ldc + j;
                double d = (double)s->got[at] - (double)s->ref[at];
                num += isfinite(s->got[at]) ? d * d : INFINITY;
                den += (double)s->ref[at] * s->ref[at];
            }
        off = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(off <= TUNE_TOL)) {
            rc = -1;
            snprintf(e.msg, sizeof e.msg, "wrong results (relative error %.2g against OpenBLAS)",
                     off);
        }
    }
    for (int rep = 0; rc == 0 && rep < 3 && spent < 2.0; rep++) {
        double dt;
        if ((rc = gemm_once(t, s, &c->cfg, &dt, &e)) < 0) break;
        spent += dt;
        if (dt < best) best = dt;
        if (rep == 0 && s->best_ms > 0 && dt * 1e3 > 1.5 * s->best_ms) break;
    }
    describe(t, &c->cfg, desc, sizeof desc);
    if (rc < 0) {
        clFinish(t->ops->q);
        ocl_clear_error();
        c->bad = 1;
        t->r->n_rejected++;
        say(t, "%s: rejected on %s: %s", desc, shape, e.msg);
        return -1;
    }
    c->ms[si] = best * 1e3;
    int better = s->best < 0 || c->ms[si] < s->best_ms;
    if (better) {
        s->best = ci;
        s->best_ms = c->ms[si];
    }
    say(t, "  %9.2f ms %7.1f GFLOP/s %s %s", c->ms[si], gflops(s, c->ms[si]), better ? "*" : " ",
        desc);
    return c->ms[si];
}

static int find_cfg(const tuner *t, const ocl_gemm_cfg *cfg) {
    for (int i = 0; i < t->n_cfgs; i++)
        if (ocl_gemm_cfg_equal(&t->cfgs[i].cfg, cfg)) return i;
    return -1;
}

// The index of cfg among the configurations, added when new; -1 when the table is full.
static int config_index(tuner *t, const ocl_gemm_cfg *cfg) {
    int ci = find_cfg(t, cfg);
    if (ci >= 0) return ci;
    if (t->n_cfgs == TUNE_MAX_CONFIGS) return -1;
    memset(&t->cfgs[t->n_cfgs], 0, sizeof t->cfgs[0]);
    t->cfgs[t->n_cfgs].cfg = *cfg;
    t->r->n_configs++;
    return t->n_cfgs++;
}

// Times cfg on shape si, if a configuration new to the process (a compile: seconds on PoCL)
// still fits before `until`. Returns its milliseconds, -1 when it is bad, -2 when out of time.
static double try_cfg(tuner *t, const ocl_gemm_cfg *cfg, int si, double until) {
    int ci = find_cfg(t, cfg);
    if (ci >= 0) return t->cfgs[ci].bad ? -1 : eval(t, ci, si);
    // What the next new one will cost: the most of the last three (a compile's time varies
    // with the machine's load).
    double cost = 0;
    for (int i = 0; i < 3; i++) cost = t->new_cost[i] > cost ? t->new_cost[i] : cost;
    if (ht_now() + cost > until || (ci = config_index(t, cfg)) < 0) return -2;
    double t0 = ht_now(), ms = eval(t, ci, si);
    t->new_cost[t->n_new++ % 3] = ht_now() - t0;
    return ms;
}

typedef struct move {
    const char *names[2];
    size_t values[6];
    int n;
} move;

static const move direct_moves[] = {
    {{"WGD", NULL}, {8, 16, 32, 64}, 4},          {{"MDIMCD", "MDIMAD"}, {4, 8, 16, 32}, 4},
    {{"NDIMCD", "NDIMBD"}, {4, 8, 16, 32}, 4},    {{"KWID", NULL}, {1, 2, 4, 8, 16}, 5},
    {{"VWMD", NULL}, {1, 2, 4, 8}, 4},            {{"VWND", NULL}, {1, 2, 4, 8}, 4},
    {{"PADA", "PADB"}, {0, 1}, 2},
};
static const move indirect_moves[] = {
    {{"MWG", NULL}, {16, 32, 64, 128}, 4},       {{"NWG", NULL}, {16, 32, 64, 128}, 4},
    {{"KWG", NULL}, {16, 32}, 2},                 {{"MDIMC", "MDIMA"}, {8, 16, 32}, 3},
    {{"NDIMC", "NDIMB"}, {8, 16, 32}, 3},         {{"VWM", NULL}, {1, 2, 4, 8}, 4},
    {{"VWN", NULL}, {1, 2, 4, 8}, 4},             {{"SA", "SB"}, {0, 1}, 2},
    {{"STRM", "STRN"}, {0, 1}, 2},
};

static double log2d(size_t v) { return v ? log2((double)v) : -1; }

// Work per work-item of cfg: the accumulators each keeps. Beyond what CLBlast's own tuners try
// (8x8 for XgemmDirect, 16x16 for Xgemm), code generation takes minutes on PoCL (everything is
// unrolled into registers) and the kernel is rarely fast: such moves are not tried.
static int too_big(const ocl_gemm_cfg *c) {
    const ocl_kparams *p = &c->kp;
    if (c->direct) {
        size_t wgd = ocl_kparam(p, "WGD", 1);
        return (wgd / ocl_kparam(p, "MDIMCD", 1)) * (wgd / ocl_kparam(p, "NDIMCD", 1)) > 64;
    }
    return (ocl_kparam(p, "MWG", 1) / ocl_kparam(p, "MDIMC", 1)) *
               (ocl_kparam(p, "NWG", 1) / ocl_kparam(p, "NDIMC", 1)) > 128;
}

// Moves of one parameter from centre, nearest values first; tries each valid one while time
// lasts and re-centres on a clearly faster one. Returns 1 when out of time.
static int descend(tuner *t, int si, int direct, double until) {
    const move *moves = direct ? direct_moves : indirect_moves;
    int n_moves = direct ? (int)(sizeof direct_moves / sizeof direct_moves[0])
                         : (int)(sizeof indirect_moves / sizeof indirect_moves[0]);
    // The centre: this routine's best configuration on the shape.
    int centre = -1;
    for (int i = 0; i < t->n_cfgs; i++)
        if (!t->cfgs[i].bad && t->cfgs[i].cfg.direct == direct && t->cfgs[i].ms[si] > 0 &&
            (centre < 0 || t->cfgs[i].ms[si] < t->cfgs[centre].ms[si]))
            centre = i;
    if (centre < 0) return 0;
    for (int restart = 1; restart;) {
        restart = 0;
        ocl_gemm_cfg base = t->cfgs[centre].cfg;
        double base_ms = t->cfgs[centre].ms[si];
        for (int mi = 0; mi < n_moves && !restart; mi++) {
            const move *mv = &moves[mi];
            size_t cur = ocl_kparam(&base.kp, mv->names[0], (size_t)-1);
            if (cur == (size_t)-1) continue;
            int order[6], n = 0;
            for (int v = 0; v < mv->n; v++)
                if (mv->values[v] != cur) order[n++] = v;
            for (int a = 0; a < n; a++) // nearest first (in powers of two)
                for (int b = a + 1; b < n; b++)
                    if (fabs(log2d(mv->values[order[b]]) - log2d(cur)) <
                        fabs(log2d(mv->values[order[a]]) - log2d(cur))) {
                        int tmp = order[a];
                        order[a] = order[b];
                        order[b] = tmp;
                    }
            for (int a = 0; a < n && !restart; a++) {
                ocl_gemm_cfg c = base;
                for (int k = 0; k < 2 && mv->names[k]; k++)
                    ocl_kparam_set(&c.kp, mv->names[k], mv->values[order[a]]);
                char why[200];
                if (too_big(&c) || !ocl_gemm_cfg_valid(&c, &t->own[direct].kp, t->dev->local_mem,
                                                       t->dev->max_wg, why, sizeof why))
                    continue;
                double ms = try_cfg(t, &c, si, until);
                if (ms == -2) return 1;
                if (ms > 0 && ms < TUNE_BETTER * base_ms) {
                    centre = find_cfg(t, &c);
                    restart = 1;
                }
            }
        }
    }
    return 0;
}

// Mean over the shapes it was timed on of log(ms / that shape's best): lower is better.
static double score(const tuner *t, int ci) {
    double sum = 0;
    int n = 0;
    for (int si = 0; si < t->n_shapes; si++)
        if (t->cfgs[ci].ms[si] > 0 && t->shapes[si].best_ms > 0) {
            sum += log(t->cfgs[ci].ms[si] / t->shapes[si].best_ms);
            n++;
        }
    return n ? sum / n : INFINITY;
}

static void tune_shape(tuner *t, int si, double until) {
    tshape *s = &t->shapes[si];
    const ocl_gemm_shape *g = &s->call.shape;
    // CLBlast's own: the routine it picks by size, with its parameters (always timed).
    double mnk = (double)g->m * (double)g->n * (double)g->k;
    int own_direct = mnk < pow((double)t->min_indirect, 3);
    int ci = config_index(t, &t->own[own_direct]);
    if (ci >= 0) s->own_ms = eval(t, ci, si);
    // What did well on earlier shapes.
    int order[TUNE_MAX_CONFIGS], n = 0;
    double sc[TUNE_MAX_CONFIGS];
    for (int i = 0; i < t->n_cfgs; i++)
        if (!t->cfgs[i].bad && t->cfgs[i].ms[si] == 0 && isfinite(sc[i] = score(t, i)))
            order[n++] = i;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (sc[order[b]] < sc[order[a]]) {
                int tmp = order[a];
                order[a] = order[b];
                order[b] = tmp;
            }
    // A configuration compiled already costs a check and a few runs: about 4 of CLBlast's own.
    for (int a = 0; a < n && a < TUNE_POOL_TRY; a++)
        if (ht_now() + 4e-3 * s->own_ms < until || s->own_ms < 50) eval(t, order[a], si);
    // A starting point of each routine for CPU-like devices (small work-groups, long unrolled
    // loops), which CLBlast's own parameters for a device it does not know are far from.
    for (int direct = 1; direct >= 0; direct--) {
        ocl_gemm_cfg seed = t->own[direct];
        char why[200];
        if (direct) {
            const char *n[] = {"WGD", "MDIMCD", "NDIMCD", "MDIMAD", "NDIMBD", "KWID", "VWMD", "VWND"};
            const size_t v[] = {16, 4, 4, 4, 4, 16, 4, 4};
            for (int i = 0; i < 8; i++) ocl_kparam_set(&seed.kp, n[i], v[i]);
        } else {
            const char *n[] = {"MWG", "NWG", "MDIMC", "MDIMA", "NDIMC", "NDIMB", "VWM", "VWN"};
            const size_t v[] = {64, 128, 8, 8, 8, 8, 8, 4};
            for (int i = 0; i < 8; i++) ocl_kparam_set(&seed.kp, n[i], v[i]);
        }
        if (ocl_gemm_cfg_valid(&seed, &t->own[direct].kp, t->dev->local_mem, t->dev->max_wg,
                               why, sizeof why) &&
            try_cfg(t, &seed, si, until) == -2)
            return;
    }
    // CLBlast's other routine, then moves from each routine's best, the better routine first.
    if (try_cfg(t, &t->own[!own_direct], si, until) == -2) return;
    int first = s->best >= 0 ? t->cfgs[s->best].cfg.direct : own_direct;
    if (descend(t, si, first, until)) return;
    descend(t, si, !first, until);
}

// ---- our kernels' work-group sizes ----

static const unsigned wg_sizes[] = {0, 16, 32, 64, 128, 256};
#define N_WG (int)(sizeof wg_sizes / sizeof wg_sizes[0])

static int tune_work_groups(tuner *t, ocl_tuning *tu, int micro, ht_error *e) {
    if (ht_now() >= t->deadline) {
        say(t, "no time left for the kernels' work-group sizes");
        return 0;
    }
    say(t, "our kernels' work-group sizes, over micro-batches of %d", micro);
    double ms[N_WG][OCL_MAX_KERNELS];
    const int nk = t->ops->n_k;
    int done = 0;
    for (int w = 0; w < N_WG && (w == 0 || ht_now() < t->deadline); w++) {
        unsigned l = wg_sizes[w];
        for (int k = 0; k < nk; k++) {
            int fits = ocl_kernel_tunable(t->ops->kname[k]) && l <= t->ops->kmax[k];
            t->ops->local[k] = fits ? l : 0;
            ms[w][k] = fits || w == 0 ? INFINITY : -1; // -1: not a candidate for this kernel
        }
        for (int pass = 0; pass < 2; pass++) { // the first compiles what is new
            if (run_shard(t, micro, t->grad, e) < 0) return -1;
            for (int i = 0; i < t->ops->prof_n; i++)
                for (int k = 0; k < nk; k++)
                    if (!strcmp(t->ops->prof[i].name, t->ops->kname[k]) && ms[w][k] >= 0 &&
                        1e3 * t->ops->prof[i].s < ms[w][k])
                        ms[w][k] = 1e3 * t->ops->prof[i].s;
        }
        done = w + 1;
    }
    for (int k = 0; k < nk; k++) {
        if (!isfinite(ms[0][k])) continue; // not called by this model
        int best = 0;
        for (int w = 1; w < done; w++)
            if (ms[w][k] >= 0 && ms[w][k] < ms[best][k]) best = w;
        unsigned l = best > 0 && ms[best][k] < TUNE_WG_BETTER * ms[0][k] ? wg_sizes[best] : 0;
        ocl_tuning_put_wg(tu, t->ops->kname[k], l);
        if (l) {
            t->r->n_wg++;
            say(t, "  %-18s %8.2f ms per micro-batch with work-groups of %u (driver's choice %.2f ms)",
                t->ops->kname[k], ms[best][k], l, ms[0][k]);
        } else {
            say(t, "  %-18s %8.2f ms per micro-batch with the driver's choice (kept)",
                t->ops->kname[k], ms[0][k]);
        }
    }
    ocl_ops_tune(t->ops, tu);
    return 0;
}

// ---- the whole run ----

static int by_flops(const void *a, const void *b) {
    double x = ((const tshape *)a)->flops, y = ((const tshape *)b)->flops;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void tuner_free(tuner *t) {
    for (int i = 0; i < t->n_shapes; i++) shape_free(&t->shapes[i]);
    if (t->d.ops) t->d.ops->close(t->d.ctx);
    free(t->cfgs);
    free(t->x);
    free(t->params);
    free(t->grad_untuned);
    free(t->grad);
    free(t->y);
    free(t->ids);
    free(t->loss);
    free(t->pred);
}

static int tuner_setup(tuner *t, ht_error *e) {
    const model *m = t->o->m;
    int n = t->o->batch;
    size_t in = (size_t)m->in_c * m->in_h * m->in_w;
    if (opencl_device_open(&t->d, t->dev, m, n, t->o->mem_limit, e) < 0) return -1;
    if (t->d.warning[0]) say(t, "%s; it is replaced", t->d.warning);
    t->ops = opencl_device_ops(&t->d);
    ocl_ops_tune(t->ops, NULL); // time CLBlast's own and the driver's choices
    t->ops->prof_on = 1;
    t->r->micro = t->d.micro;
    t->cfgs = ht_calloc(TUNE_MAX_CONFIGS, sizeof *t->cfgs, e);
    t->x = ht_malloc((size_t)n * in, sizeof(float), e);
    t->params = ht_malloc(m->n_params, sizeof(float), e);
    t->grad_untuned = ht_malloc(m->n_params, sizeof(float), e);
    t->grad = ht_malloc(m->n_params, sizeof(float), e);
    const size_t yw = (size_t)m->label_width;
    t->y = ht_malloc((size_t)n, yw, e);
    t->ids = ht_malloc((size_t)n, sizeof(uint32_t), e);
    t->loss = ht_malloc((size_t)n, sizeof(float), e);
    t->pred = ht_malloc((size_t)n, sizeof(int32_t), e);
    if (!t->cfgs || !t->x || !t->params || !t->grad_untuned || !t->grad || !t->y || !t->ids ||
        !t->loss || !t->pred)
        return -1;
    fill_uniform(t->x, (size_t)n * in, 21);
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < yw; j++) // a class each, or a multi-label head's 0s and 1s
            t->y[i * yw + j] = (uint8_t)(yw > 1 ? (i + j) % 2 : (size_t)i % m->n_classes);
        t->ids[i] = (uint32_t)i;
    }
    model_init_params(m, t->params, 1);
    if (t->d.ops->set_params(t->d.ctx, t->params, e) < 0) return -1;
    int st = ocl_blas_defaults(t->dev->device, &t->own[1], &t->own[0], &t->min_indirect);
    if (st != 0)
        return ht_fail(e, "%s: CLBlast does not tell its GEMM parameters: %s", t->dev->spec,
                       ocl_blas_status_name(st));
    return 0;
}

int ocl_tuner_run(const ocl_dev_info *dev, const ocl_tuner_opts *o, ocl_tuner_result *r,
                  ht_error *e) {
    memset(r, 0, sizeof *r);
    ocl_tuning_path(r->path, sizeof r->path, dev);
    if (!*r->path)
        return ht_fail(e, "tune: the cache is off (--cache-dir \"\"); tuning lives in the cache");
    tuner *t = ht_calloc(1, sizeof *t, e);
    if (!t) return -1;
    t->dev = dev;
    t->o = o;
    t->r = r;
    t->start = ht_now();
    t->deadline = t->start + o->budget_s;
    ocl_tuning tu;
    ocl_tuning_init(&tu, dev);
    int rc = -1;
    if (tuner_setup(t, e) < 0) goto done;
    say(t, "%s: micro-batch %d of a %d-sample shard; one shard to find the GEMM shapes",
        dev->spec, t->d.micro, o->batch);
    if (run_shard(t, o->batch, t->grad_untuned, e) < 0) goto done;
    for (int i = 0; i < t->ops->prof_n; i++) {
        const ocl_prof_entry *p = &t->ops->prof[i];
        if (!p->gemm || t->n_shapes == TUNE_MAX_SHAPES) continue;
        tshape *s = &t->shapes[t->n_shapes++];
        memset(s, 0, sizeof *s);
        s->call = *p;
        s->flops = 2.0 * (double)p->shape.m * (double)p->shape.n * (double)p->shape.k *
                   (double)p->calls;
        s->best = -1;
    }
    qsort(t->shapes, (size_t)t->n_shapes, sizeof t->shapes[0], by_flops);
    r->n_shapes = t->n_shapes;
    say(t, "%d GEMM shapes; searching CLBlast configurations, heaviest shape first",
        t->n_shapes);
    // GEMMs: each shape a share of what is left, by its FLOPs.
    double gemm_end = t->deadline - TUNE_KERNEL_SHARE * o->budget_s, left_flops = 0;
    for (int i = 0; i < t->n_shapes; i++) left_flops += t->shapes[i].flops;
    for (int si = 0; si < t->n_shapes; si++) {
        tshape *s = &t->shapes[si];
        double share = left_flops > 0 ? s->flops / left_flops : 1;
        double until = ht_now() + share * (gemm_end - ht_now());
        left_flops -= s->flops;
        char shape[64];
        ocl_gemm_shape_str(shape, sizeof shape, &s->call.shape);
        say(t, "%s (%s, %ld per shard): %.0f s", shape, s->call.op, s->call.calls,
            until > ht_now() ? until - ht_now() : 0);
        if (shape_setup(t, s, e) < 0) goto done;
        tune_shape(t, si, until);
        shape_free(s);
        if (s->best < 0) continue;
        r->n_timed++;
        r->gemm_own_s += s->own_ms * 1e-3 * (double)s->call.calls;
        r->gemm_tuned_s += s->best_ms * 1e-3 * (double)s->call.calls;
        if (s->best_ms < s->own_ms) r->n_faster++;
        ocl_tuned_gemm g = {s->call.shape, t->cfgs[s->best].cfg, s->own_ms, s->best_ms, ""};
        snprintf(g.op, sizeof g.op, "%s", s->call.op);
        if (ocl_tuning_put_gemm(&tu, &g, e) < 0) goto done;
    }
    ocl_ops_tune(t->ops, &tu);
    // Our kernels, over one micro-batch with the tuned GEMMs.
    int micro = t->d.micro < o->batch ? t->d.micro : o->batch;
    if (tune_work_groups(t, &tu, micro, e) < 0) goto done;
    // The tuned device against the untuned one, on the same shard.
    if (run_shard(t, o->batch, t->grad, e) < 0) goto done;
    double off = rel_l2(t->grad, t->grad_untuned, t->o->m->n_params);
    say(t, "gradient of the shard, tuned against untuned: relative error %.2g", off);
    if (!(off <= TUNE_GRAD_TOL)) {
        ht_fail(e, "%s: the tuned device's gradient is %.2g off the untuned one's (more than %g); "
                   "nothing written", dev->spec, off, TUNE_GRAD_TOL);
        goto done;
    }
    // Into the device's file, beside what it holds for other shapes.
    ocl_tuning old;
    char why[400];
    if (ocl_tuning_read(&old, r->path, dev, why, sizeof why) < 0)
        say(t, "%s; it is replaced", why);
    for (int i = 0; i < tu.n_gemm; i++)
        if (ocl_tuning_put_gemm(&old, &tu.gemm[i], e) < 0) {
            ocl_tuning_free(&old);
            goto done;
        }
    for (int k = 0; k < t->ops->n_k; k++)
        ocl_tuning_put_wg(&old, t->ops->kname[k], ocl_tuning_wg(&tu, t->ops->kname[k]));
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", localtime(&now));
    ocl_tuning_put_run(&old, o->m->name, o->batch, t->d.micro, date);
    rc = ocl_tuning_save(&old, r->path, e);
    ocl_tuning_free(&old);
done:
    r->elapsed_s = ht_now() - t->start;
    ocl_tuning_free(&tu);
    tuner_free(t);
    free(t);
    return rc;
}
