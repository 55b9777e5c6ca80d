// The tuning cache of an OpenCL device (ocl_tune.h): its data, its JSON file, the lookup the
// ops make before every GEMM, and the rules a CLBlast configuration must keep.
#include "devices/ocl_tune.h"

#include <errno.h>
#include <json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef HT_CLBLAST_VERSION
#define HT_CLBLAST_VERSION "unknown"
#endif

// ---- parameters ----

size_t ocl_kparam(const ocl_kparams *p, const char *name, size_t dflt) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->name[i], name)) return p->value[i];
    return dflt;
}

int ocl_kparam_set(ocl_kparams *p, const char *name, size_t value) {
    int i = 0;
    while (i < p->n && strcmp(p->name[i], name) < 0) i++;
    if (i < p->n && !strcmp(p->name[i], name)) {
        p->value[i] = value;
        return 0;
    }
    if (p->n == OCL_KP_MAX || strlen(name) >= sizeof p->name[0]) return -1;
    memmove(p->name[i + 1], p->name[i], (size_t)(p->n - i) * sizeof p->name[0]);
    memmove(&p->value[i + 1], &p->value[i], (size_t)(p->n - i) * sizeof p->value[0]);
    memset(p->name[i], 0, sizeof p->name[0]);
    memcpy(p->name[i], name, strlen(name));
    p->value[i] = value;
    p->n++;
    return 0;
}

void ocl_gemm_shape_str(char *out, size_t cap, const ocl_gemm_shape *s) {
    snprintf(out, cap, "%c%c %zux%zux%zu", s->ta, s->tb, s->m, s->n, s->k);
}

static int multiple(size_t a, size_t b) { return b != 0 && a % b == 0; }

static int pow2(size_t v) { return v && !(v & (v - 1)); }

#define RULE(cond, ...)                         \
    do {                                        \
        if (!(cond)) {                          \
            snprintf(why, why_len, __VA_ARGS__); \
            return 0;                           \
        }                                       \
    } while (0)

// The rules of CLBlast 1.5's tuners (src/tuning/kernels/xgemm.hpp, xgemm_direct.hpp) and what
// its kernels assume besides (work-group sizes the device runs, vector widths of 1..16).
static int valid_direct(const ocl_kparams *p, uint64_t local_mem, size_t max_wg, char *why,
                        size_t why_len) {
    size_t wgd = ocl_kparam(p, "WGD", 0), mdimc = ocl_kparam(p, "MDIMCD", 0),
           ndimc = ocl_kparam(p, "NDIMCD", 0), mdima = ocl_kparam(p, "MDIMAD", 0),
           ndimb = ocl_kparam(p, "NDIMBD", 0), kwi = ocl_kparam(p, "KWID", 0),
           vwm = ocl_kparam(p, "VWMD", 0), vwn = ocl_kparam(p, "VWND", 0),
           pada = ocl_kparam(p, "PADA", 9), padb = ocl_kparam(p, "PADB", 9);
    RULE(wgd && mdimc && ndimc && mdima && ndimb && kwi, "XgemmDirect: a size is 0");
    RULE(pow2(vwm) && vwm <= 16 && pow2(vwn) && vwn <= 16,
         "XgemmDirect: vector widths VWMD %zu, VWND %zu not 1, 2, 4, 8 or 16", vwm, vwn);
    RULE(pada <= 1 && padb <= 1, "XgemmDirect: PADA, PADB must be 0 or 1");
    RULE(multiple(wgd, kwi), "XgemmDirect: WGD %zu not a multiple of KWID %zu", wgd, kwi);
    RULE(multiple(wgd, mdimc * vwm) && multiple(wgd, ndimc * vwn) &&
             multiple(wgd, mdima * vwm) && multiple(wgd, ndimb * vwn),
         "XgemmDirect: WGD %zu not a multiple of MDIMCD*VWMD, NDIMCD*VWND, MDIMAD*VWMD and "
         "NDIMBD*VWND", wgd);
    RULE(multiple(mdimc * ndimc, mdima) && multiple(mdimc * ndimc, ndimb) &&
             multiple(wgd, mdimc * ndimc / mdima) && multiple(wgd, mdimc * ndimc / ndimb),
         "XgemmDirect: WGD %zu not a multiple of MDIMCD*NDIMCD/MDIMAD and /NDIMBD", wgd);
    RULE(mdimc * ndimc <= max_wg, "XgemmDirect: %zu work-items per group, the device takes %zu",
         mdimc * ndimc, max_wg);
    RULE(4 * (wgd * (wgd + pada) + wgd * (wgd + padb)) <= local_mem,
         "XgemmDirect: needs %zu bytes of local memory, the device has %llu",
         4 * (wgd * (wgd + pada) + wgd * (wgd + padb)), (unsigned long long)local_mem);
    return 1;
}

static int valid_indirect(const ocl_kparams *p, uint64_t local_mem, size_t max_wg, char *why,
                          size_t why_len) {
    size_t gemmk = ocl_kparam(p, "GEMMK", 0), kreg = ocl_kparam(p, "KREG", 1),
           mwg = ocl_kparam(p, "MWG", 0), nwg = ocl_kparam(p, "NWG", 0),
           kwg = ocl_kparam(p, "KWG", 0), mdimc = ocl_kparam(p, "MDIMC", 0),
           ndimc = ocl_kparam(p, "NDIMC", 0), mdima = ocl_kparam(p, "MDIMA", 0),
           ndimb = ocl_kparam(p, "NDIMB", 0), kwi = ocl_kparam(p, "KWI", 0),
           vwm = ocl_kparam(p, "VWM", 0), vwn = ocl_kparam(p, "VWN", 0),
           strm = ocl_kparam(p, "STRM", 9), strn = ocl_kparam(p, "STRN", 9),
           sa = ocl_kparam(p, "SA", 9), sb = ocl_kparam(p, "SB", 9);
    RULE(mwg && nwg && kwg && mdimc && ndimc && mdima && ndimb && kwi && kreg,
         "Xgemm: a size is 0");
    RULE(gemmk <= 1 && strm <= 1 && strn <= 1 && sa <= 1 && sb <= 1,
         "Xgemm: GEMMK, STRM, STRN, SA, SB must be 0 or 1");
    RULE(pow2(vwm) && vwm <= 16 && pow2(vwn) && vwn <= 16,
         "Xgemm: vector widths VWM %zu, VWN %zu not 1, 2, 4, 8 or 16", vwm, vwn);
    RULE(multiple(kwg, kwi), "Xgemm: KWG %zu not a multiple of KWI %zu", kwg, kwi);
    RULE(multiple(mwg, mdimc * vwm) && multiple(nwg, ndimc * vwn) && multiple(mwg, mdima * vwm) &&
             multiple(nwg, ndimb * vwn),
         "Xgemm: MWG %zu, NWG %zu not multiples of MDIMC*VWM, NDIMC*VWN, MDIMA*VWM, NDIMB*VWN",
         mwg, nwg);
    if (gemmk == 0) {
        RULE(multiple(mdimc * ndimc, mdima) && multiple(mdimc * ndimc, ndimb) &&
                 multiple(kwg, mdimc * ndimc / mdima) && multiple(kwg, mdimc * ndimc / ndimb),
             "Xgemm: KWG %zu not a multiple of MDIMC*NDIMC/MDIMA and /NDIMB", kwg);
    } else {
        // The 2-D register-tiled kernel, as CLBlast's tuner explores it.
        RULE(mdimc == mdima && ndimc == ndimb && sa == 0 && sb == 0 && strm == 0 && strn == 0 &&
                 multiple(kreg, vwn),
             "Xgemm: GEMMK 1 needs MDIMA = MDIMC, NDIMB = NDIMC, SA = SB = STRM = STRN = 0 and "
             "KREG a multiple of VWN");
    }
    RULE(mdimc * ndimc <= max_wg, "Xgemm: %zu work-items per group, the device takes %zu",
         mdimc * ndimc, max_wg);
    RULE(4 * (sa * kwg * mwg + sb * kwg * nwg) <= local_mem,
         "Xgemm: needs %zu bytes of local memory, the device has %llu",
         4 * (sa * kwg * mwg + sb * kwg * nwg), (unsigned long long)local_mem);
    return 1;
}

int ocl_gemm_cfg_valid(const ocl_gemm_cfg *cfg, const ocl_kparams *own, uint64_t local_mem,
                       size_t max_wg, char *why, size_t why_len) {
    const char *kernel = ocl_blas_kernel(cfg->direct);
    RULE(cfg->kp.n == own->n, "%s: %d parameters, CLBlast has %d", kernel, cfg->kp.n, own->n);
    for (int i = 0; i < own->n; i++) {
        RULE(!strcmp(cfg->kp.name[i], own->name[i]), "%s: parameter %s, CLBlast has %s", kernel,
             cfg->kp.name[i], own->name[i]);
        RULE(cfg->kp.value[i] <= 4096, "%s: %s = %zu is out of range", kernel, cfg->kp.name[i],
             cfg->kp.value[i]);
    }
    return cfg->direct ? valid_direct(&cfg->kp, local_mem, max_wg, why, why_len)
                       : valid_indirect(&cfg->kp, local_mem, max_wg, why, why_len);
}

// ---- the data ----

void ocl_tuning_init(ocl_tuning *t, const ocl_dev_info *dev) {
    memset(t, 0, sizeof *t);
    if (!dev) return;
    snprintf(t->device, sizeof t->device, "%s", dev->name);
    snprintf(t->platform, sizeof t->platform, "%s", dev->platform_name);
    snprintf(t->driver, sizeof t->driver, "%s", dev->driver);
    snprintf(t->version, sizeof t->version, "%s", dev->version);
    snprintf(t->clblast, sizeof t->clblast, "%s", HT_CLBLAST_VERSION);
}

void ocl_tuning_free(ocl_tuning *t) {
    free(t->gemm);
    memset(t, 0, sizeof *t);
}

void ocl_tuning_path(char *out, size_t cap, const ocl_dev_info *dev) {
    char dir[PATH_MAX];
    ocl_cache_dir(dir, sizeof dir);
    if (!*dir) {
        out[0] = 0;
        return;
    }
    uint64_t h = OCL_HASH_INIT;
    h = ocl_hash(h, OCL_TUNE_FORMAT);
    h = ocl_hash(h, dev->platform_name);
    h = ocl_hash(h, dev->name);
    h = ocl_hash(h, dev->driver);
    h = ocl_hash(h, dev->version);
    h = ocl_hash(h, HT_CLBLAST_VERSION);
    ocl_cache_file(out, cap, dir, dev, h, ".tune.json");
}

static int same_shape(const ocl_gemm_shape *a, const ocl_gemm_shape *b) {
    return a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n && a->k == b->k;
}

int ocl_tuning_put_gemm(ocl_tuning *t, const ocl_tuned_gemm *g, ht_error *e) {
    for (int i = 0; i < t->n_gemm; i++)
        if (same_shape(&t->gemm[i].shape, &g->shape)) {
            t->gemm[i] = *g;
            return 0;
        }
    if (t->n_gemm == t->cap_gemm) {
        int cap = t->cap_gemm ? 2 * t->cap_gemm : 16;
        ocl_tuned_gemm *grown = realloc(t->gemm, (size_t)cap * sizeof *grown);
        if (!grown) return ht_fail(e, "out of memory for the tuning of %s", t->device);
        t->gemm = grown;
        t->cap_gemm = cap;
    }
    t->gemm[t->n_gemm++] = *g;
    return 0;
}

void ocl_tuning_put_wg(ocl_tuning *t, const char *kernel, unsigned local) {
    int i = 0;
    while (i < t->n_wg && strcmp(t->wg[i].kernel, kernel)) i++;
    if (local == 0) {
        if (i < t->n_wg) {
            memmove(&t->wg[i], &t->wg[i + 1], (size_t)(t->n_wg - i - 1) * sizeof t->wg[0]);
            t->n_wg--;
        }
        return;
    }
    if (i == t->n_wg) {
        if (t->n_wg == OCL_TUNE_MAX_WG) return;
        t->n_wg++;
        snprintf(t->wg[i].kernel, sizeof t->wg[i].kernel, "%s", kernel);
    }
    t->wg[i].local = local;
}

void ocl_tuning_put_run(ocl_tuning *t, const char *model, int batch, int micro, const char *date) {
    int i = 0;
    while (i < t->n_runs && !(!strcmp(t->runs[i].model, model) && t->runs[i].batch == batch)) i++;
    if (i == t->n_runs) {
        if (t->n_runs == OCL_TUNE_MAX_RUNS) { // the oldest goes
            memmove(&t->runs[0], &t->runs[1], (OCL_TUNE_MAX_RUNS - 1) * sizeof t->runs[0]);
            i = OCL_TUNE_MAX_RUNS - 1;
        } else {
            t->n_runs++;
        }
    }
    ocl_tuned_run *r = &t->runs[i];
    snprintf(r->model, sizeof r->model, "%s", model);
    r->batch = batch;
    r->micro = micro;
    snprintf(r->date, sizeof r->date, "%s", date ? date : "");
}

const ocl_gemm_cfg *ocl_tuning_find(const ocl_tuning *t, const ocl_gemm_shape *s) {
    if (!t) return NULL;
    const ocl_gemm_cfg *best = NULL;
    double best_d = INFINITY;
    for (int i = 0; i < t->n_gemm; i++) {
        const ocl_gemm_shape *g = &t->gemm[i].shape;
        if (g->ta != s->ta || g->tb != s->tb) continue;
        if (same_shape(g, s)) return &t->gemm[i].cfg;
        int eq = (g->m == s->m) + (g->n == s->n) + (g->k == s->k);
        if (eq != 2) continue;
        double a = g->m != s->m ? (double)g->m : g->n != s->n ? (double)g->n : (double)g->k;
        double b = g->m != s->m ? (double)s->m : g->n != s->n ? (double)s->n : (double)s->k;
        double d = fabs(log(a / b));
        if (d < best_d) {
            best_d = d;
            best = &t->gemm[i].cfg;
        }
    }
    if (!best && t->has_class && s->m >= OCL_CLASS_MIN_DIM && s->n >= OCL_CLASS_MIN_DIM &&
        s->k >= OCL_CLASS_MIN_DIM)
        best = s->k >= OCL_CLASS_LONG_K * (s->m > s->n ? s->m : s->n) ? &t->class_long_k
                                                                       : &t->class_cfg;
    return best;
}

// A configuration of Xgemm: CLBlast's own with `values` for the parameters named below.
static int class_cfg(ocl_gemm_cfg *c, const ocl_dev_info *dev, const ocl_kparams *own,
                     const size_t *values) {
    static const char *const names[] = {"MWG", "NWG", "KWG", "MDIMC", "NDIMC", "MDIMA",
                                        "NDIMB", "VWM", "VWN", "SA", "SB"};
    *c = (ocl_gemm_cfg){.direct = 0, .kp = *own};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (ocl_kparam_set(&c->kp, names[i], values[i]) < 0) return 0;
    char why[200];
    return ocl_gemm_cfg_valid(c, own, dev->local_mem, dev->max_wg, why, sizeof why);
}

int ocl_tuning_has_class(const ocl_dev_info *dev) { return !strcmp(dev->type, "cpu"); }

int ocl_tuning_class_defaults(ocl_tuning *t, const ocl_dev_info *dev,
                              const ocl_kparams *own_indirect) {
    t->has_class = 0;
    if (!ocl_tuning_has_class(dev)) return 0;
    static const size_t general[] = {64, 64, 16, 8, 8, 8, 8, 8, 4, 0, 0};
    static const size_t long_k[] = {64, 32, 32, 8, 8, 8, 8, 8, 4, 1, 1};
    if (!class_cfg(&t->class_cfg, dev, own_indirect, general) ||
        !class_cfg(&t->class_long_k, dev, own_indirect, long_k))
        return 0;
    t->has_class = 1;
    return 1;
}

unsigned ocl_tuning_wg(const ocl_tuning *t, const char *kernel) {
    if (!t) return 0;
    for (int i = 0; i < t->n_wg; i++)
        if (!strcmp(t->wg[i].kernel, kernel)) return t->wg[i].local;
    return 0;
}

// ---- the file ----

static json_object *jstr(const char *s) { return json_object_new_string(s); }

static json_object *params_json(const ocl_kparams *p) {
    json_object *o = json_object_new_object();
    for (int i = 0; i < p->n; i++)
        json_object_object_add(o, p->name[i], json_object_new_int64((int64_t)p->value[i]));
    return o;
}

static json_object *tuning_json(const ocl_tuning *t) {
    json_object *root = json_object_new_object();
    json_object_object_add(root, "format", jstr(OCL_TUNE_FORMAT));
    json_object_object_add(root, "device", jstr(t->device));
    json_object_object_add(root, "platform", jstr(t->platform));
    json_object_object_add(root, "driver", jstr(t->driver));
    json_object_object_add(root, "device_version", jstr(t->version));
    json_object_object_add(root, "clblast", jstr(t->clblast));
    json_object *runs = json_object_new_array();
    for (int i = 0; i < t->n_runs; i++) {
        json_object *r = json_object_new_object();
        json_object_object_add(r, "model", jstr(t->runs[i].model));
        json_object_object_add(r, "batch", json_object_new_int(t->runs[i].batch));
        json_object_object_add(r, "micro", json_object_new_int(t->runs[i].micro));
        json_object_object_add(r, "date", jstr(t->runs[i].date));
        json_object_array_add(runs, r);
    }
    json_object_object_add(root, "tuned_for", runs);
    json_object *gemm = json_object_new_array();
    for (int i = 0; i < t->n_gemm; i++) {
        const ocl_tuned_gemm *g = &t->gemm[i];
        json_object *o = json_object_new_object();
        char tr[3] = {g->shape.ta, g->shape.tb, 0};
        json_object_object_add(o, "transposes", jstr(tr));
        json_object_object_add(o, "m", json_object_new_int64((int64_t)g->shape.m));
        json_object_object_add(o, "n", json_object_new_int64((int64_t)g->shape.n));
        json_object_object_add(o, "k", json_object_new_int64((int64_t)g->shape.k));
        json_object_object_add(o, "op", jstr(g->op));
        json_object_object_add(o, "routine", jstr(ocl_blas_kernel(g->cfg.direct)));
        json_object_object_add(o, "params", params_json(&g->cfg.kp));
        char ms[32];
        snprintf(ms, sizeof ms, "%.3f", g->ms_default);
        json_object_object_add(o, "default_ms", json_object_new_double_s(g->ms_default, ms));
        snprintf(ms, sizeof ms, "%.3f", g->ms_tuned);
        json_object_object_add(o, "tuned_ms", json_object_new_double_s(g->ms_tuned, ms));
        json_object_array_add(gemm, o);
    }
    json_object_object_add(root, "gemm", gemm);
    json_object *wg = json_object_new_object();
    for (int i = 0; i < t->n_wg; i++)
        json_object_object_add(wg, t->wg[i].kernel, json_object_new_int64(t->wg[i].local));
    json_object_object_add(root, "work_groups", wg);
    return root;
}

int ocl_tuning_save(const ocl_tuning *t, const char *path, ht_error *e) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        ht_mkdirs(dir, NULL); // best effort, as the kernel cache's folders
    }
    json_object *root = tuning_json(t);
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_SPACED |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        json_object_put(root);
        return ht_fail(e, "%s: cannot write: %s", path, strerror(errno));
    }
    fchmod(fd, 0644);
    FILE *f = fdopen(fd, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    int saved = errno;
    if (f) ok &= fclose(f) == 0;
    else close(fd);
    json_object_put(root);
    if (!ok || rename(tmp, path) < 0) {
        if (ok) saved = errno;
        unlink(tmp);
        return ht_fail(e, "%s: cannot write: %s", path, strerror(saved ? saved : EIO));
    }
    return 0;
}

// Readers of one field: each returns 0, or -1 with why.
static int get_str(json_object *o, const char *key, char *out, size_t cap, char *why, size_t n) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) {
        snprintf(why, n, "no string \"%s\"", key);
        return -1;
    }
    if ((size_t)json_object_get_string_len(v) >= cap) {
        snprintf(why, n, "\"%s\" is too long", key);
        return -1;
    }
    snprintf(out, cap, "%s", json_object_get_string(v));
    return 0;
}

static int get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   char *why, size_t n) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int)) {
        snprintf(why, n, "no integer \"%s\"", key);
        return -1;
    }
    errno = 0;
    *out = json_object_get_int64(v);
    if (errno || *out < lo || *out > hi) {
        snprintf(why, n, "\"%s\" is %lld, expected %lld..%lld", key, (long long)*out,
                 (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

static int get_ms(json_object *o, const char *key, double *out) {
    json_object *v;
    *out = 0;
    if (!json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return 0; // informative only
    double d = json_object_get_double(v);
    *out = isfinite(d) && d >= 0 ? d : 0;
    return 0;
}

static int parse_gemm(json_object *o, ocl_tuned_gemm *g, char *why, size_t n) {
    memset(g, 0, sizeof *g);
    char tr[8], routine[32];
    int64_t m, nn, k;
    if (!json_object_is_type(o, json_type_object)) {
        snprintf(why, n, "an entry is not an object");
        return -1;
    }
    if (get_str(o, "transposes", tr, sizeof tr, why, n) < 0 ||
        get_int(o, "m", 1, INT_MAX, &m, why, n) < 0 || get_int(o, "n", 1, INT_MAX, &nn, why, n) < 0 ||
        get_int(o, "k", 1, INT_MAX, &k, why, n) < 0 ||
        get_str(o, "routine", routine, sizeof routine, why, n) < 0)
        return -1;
    if (strlen(tr) != 2 || (tr[0] != 'N' && tr[0] != 'T') || (tr[1] != 'N' && tr[1] != 'T')) {
        snprintf(why, n, "\"transposes\" is \"%s\", expected NN, NT, TN or TT", tr);
        return -1;
    }
    g->shape = (ocl_gemm_shape){tr[0], tr[1], (size_t)m, (size_t)nn, (size_t)k};
    if (!strcmp(routine, ocl_blas_kernel(1))) g->cfg.direct = 1;
    else if (strcmp(routine, ocl_blas_kernel(0))) {
        snprintf(why, n, "\"routine\" is \"%s\", expected XgemmDirect or Xgemm", routine);
        return -1;
    }
    json_object *p;
    if (!json_object_object_get_ex(o, "params", &p) || !json_object_is_type(p, json_type_object)) {
        snprintf(why, n, "no object \"params\"");
        return -1;
    }
    json_object_object_foreach(p, key, val) {
        errno = 0;
        int64_t v = json_object_is_type(val, json_type_int) ? json_object_get_int64(val) : -1;
        if (errno || v < 0 || v > 4096) {
            snprintf(why, n, "parameter \"%.30s\": expected an integer 0..4096", key);
            return -1;
        }
        if (ocl_kparam_set(&g->cfg.kp, key, (size_t)v) < 0) {
            snprintf(why, n, "too many parameters, or the name \"%.30s\" too long", key);
            return -1;
        }
    }
    json_object *op;
    if (json_object_object_get_ex(o, "op", &op) && json_object_is_type(op, json_type_string))
        snprintf(g->op, sizeof g->op, "%s", json_object_get_string(op));
    get_ms(o, "default_ms", &g->ms_default);
    get_ms(o, "tuned_ms", &g->ms_tuned);
    return 0;
}

int ocl_tuning_parse(ocl_tuning *t, const char *text, size_t len, const ocl_kparams *own_direct,
                     const ocl_kparams *own_indirect, uint64_t local_mem, size_t max_wg,
                     char *why, size_t n) {
    if (len > INT_MAX || memchr(text, 0, len)) {
        snprintf(why, n, "%s", len > INT_MAX ? "too large" : "holds a NUL byte");
        return -1;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    // Strict: nothing but blanks after the object.
    if (root && je == json_tokener_success)
        for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
            if (text[i] != ' ' && text[i] != '\n' && text[i] != '\t' && text[i] != '\r') {
                je = json_tokener_error_parse_unexpected;
                break;
            }
    json_tokener_free(tok);
    int rc = -1;
    if (!root || je != json_tokener_success) {
        snprintf(why, n, "not JSON (%s)", json_tokener_error_desc(je));
        goto done;
    }
    if (!json_object_is_type(root, json_type_object)) {
        snprintf(why, n, "not a JSON object");
        goto done;
    }
    char format[64], device[256], platform[128], driver[128], version[128], clblast[32];
    if (get_str(root, "format", format, sizeof format, why, n) < 0) goto done;
    if (strcmp(format, OCL_TUNE_FORMAT)) {
        snprintf(why, n, "format \"%s\", expected \"%s\"", format, OCL_TUNE_FORMAT);
        goto done;
    }
    if (get_str(root, "device", device, sizeof device, why, n) < 0 ||
        get_str(root, "platform", platform, sizeof platform, why, n) < 0 ||
        get_str(root, "driver", driver, sizeof driver, why, n) < 0 ||
        get_str(root, "device_version", version, sizeof version, why, n) < 0 ||
        get_str(root, "clblast", clblast, sizeof clblast, why, n) < 0)
        goto done;
    // Only the device, platform, driver and CLBlast it was tuned with may use it.
    const char *fields[][3] = {{"device", device, t->device},
                               {"platform", platform, t->platform},
                               {"driver", driver, t->driver},
                               {"device_version", version, t->version},
                               {"CLBlast", clblast, t->clblast}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(fields[i][1], fields[i][2])) {
            snprintf(why, n, "tuned for %s \"%.100s\", this is \"%.100s\"", fields[i][0],
                     fields[i][1], fields[i][2]);
            goto done;
        }
    json_object *runs, *gemm, *wg;
    if (!json_object_object_get_ex(root, "tuned_for", &runs) ||
        !json_object_is_type(runs, json_type_array) ||
        !json_object_object_get_ex(root, "gemm", &gemm) ||
        !json_object_is_type(gemm, json_type_array) ||
        !json_object_object_get_ex(root, "work_groups", &wg) ||
        !json_object_is_type(wg, json_type_object)) {
        snprintf(why, n, "no \"tuned_for\" and \"gemm\" arrays and \"work_groups\" object");
        goto done;
    }
    for (size_t i = 0; i < json_object_array_length(runs); i++) {
        json_object *r = json_object_array_get_idx(runs, i);
        char model[64], date[32] = "";
        int64_t batch, micro;
        if (!json_object_is_type(r, json_type_object) ||
            get_str(r, "model", model, sizeof model, why, n) < 0 ||
            get_int(r, "batch", 1, INT_MAX, &batch, why, n) < 0 ||
            get_int(r, "micro", 1, INT_MAX, &micro, why, n) < 0) {
            if (!json_object_is_type(r, json_type_object)) snprintf(why, n, "a run is not an object");
            goto done;
        }
        json_object *d;
        if (json_object_object_get_ex(r, "date", &d) && json_object_is_type(d, json_type_string))
            snprintf(date, sizeof date, "%s", json_object_get_string(d));
        ocl_tuning_put_run(t, model, (int)batch, (int)micro, date);
    }
    for (size_t i = 0; i < json_object_array_length(gemm); i++) {
        ocl_tuned_gemm g;
        char rule[200], shape[64];
        if (parse_gemm(json_object_array_get_idx(gemm, i), &g, rule, sizeof rule) < 0) {
            snprintf(why, n, "gemm entry %zu: %s", i + 1, rule);
            goto done;
        }
        const ocl_kparams *own = g.cfg.direct ? own_direct : own_indirect;
        if (!ocl_gemm_cfg_valid(&g.cfg, own, local_mem, max_wg, rule, sizeof rule)) {
            ocl_gemm_shape_str(shape, sizeof shape, &g.shape);
            snprintf(why, n, "gemm %s: %s", shape, rule);
            goto done;
        }
        ht_error e;
        if (ocl_tuning_put_gemm(t, &g, &e) < 0) {
            snprintf(why, n, "%.200s", e.msg);
            goto done;
        }
    }
    json_object_object_foreach(wg, key, val) {
        int64_t v = json_object_is_type(val, json_type_int) ? json_object_get_int64(val) : -1;
        if (!pow2((size_t)(v > 0 ? v : 0)) || v > 1024 || strlen(key) >= sizeof t->wg[0].kernel) {
            snprintf(why, n, "work_groups \"%.30s\": expected a power of two up to 1024", key);
            goto done;
        }
        ocl_tuning_put_wg(t, key, (unsigned)v);
    }
    rc = 0;
done:
    json_object_put(root);
    if (rc < 0) { // nothing of a file that cannot be used
        ocl_tuning id = *t;
        ocl_tuning_free(t);
        memcpy(t->device, id.device, sizeof t->device);
        memcpy(t->platform, id.platform, sizeof t->platform);
        memcpy(t->driver, id.driver, sizeof t->driver);
        memcpy(t->version, id.version, sizeof t->version);
        memcpy(t->clblast, id.clblast, sizeof t->clblast);
    }
    return rc;
}

int ocl_tuning_read(ocl_tuning *t, const char *path, const ocl_dev_info *dev, char *why,
                    size_t why_len) {
    ocl_tuning_init(t, dev);
    if (why_len) why[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(why, why_len, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    // A tuning file holds tens of entries; anything past 4 MiB is not one.
    enum { MAX_BYTES = 4 << 20 };
    char *text = malloc(MAX_BYTES + 1);
    size_t len = text ? fread(text, 1, MAX_BYTES + 1, f) : 0;
    if (text && len <= MAX_BYTES) text[len] = 0;
    int err = ferror(f);
    fclose(f);
    char what[300];
    int rc = -1, st;
    ocl_gemm_cfg own_direct, own_indirect;
    if (!text) snprintf(what, sizeof what, "out of memory");
    else if (err) snprintf(what, sizeof what, "cannot read");
    else if (len > MAX_BYTES) snprintf(what, sizeof what, "larger than %d MiB", MAX_BYTES >> 20);
    else if ((st = ocl_blas_defaults(dev->device, &own_direct, &own_indirect, NULL)) != 0)
        snprintf(what, sizeof what, "CLBlast does not tell its parameters (%s)",
                 ocl_blas_status_name(st));
    else
        rc = ocl_tuning_parse(t, text, len, &own_direct.kp, &own_indirect.kp, dev->local_mem,
                              dev->max_wg, what, sizeof what);
    free(text);
    if (rc < 0) {
        snprintf(why, why_len, "%s: %s", path, what);
        return -1;
    }
    return 1;
}

int ocl_tuning_load(ocl_tuning *t, const ocl_dev_info *dev, char *why, size_t why_len) {
    char path[PATH_MAX + 128];
    ocl_tuning_path(path, sizeof path, dev);
    if (!*path) {
        ocl_tuning_init(t, dev);
        if (why_len) why[0] = 0;
        return 0;
    }
    return ocl_tuning_read(t, path, dev, why, why_len);
}
