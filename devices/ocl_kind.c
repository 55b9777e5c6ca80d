// OpenCL as a device kind (device_kind.h): items cl:P.D, cl:all and gpu, the GPUs auto opens,
// the devices' rows of `hetrain devices` with their tunings, and `hetrain tune`. The device
// itself is opencl.c's.
#include <errno.h>
#include <json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/device_kind.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_tune.h"
#include "devices/ocl_tuner.h"
#include "devices/ocl_util.h"
#include "devices/opencl.h"

// What an OpenCL item selects (device_item.sel).
enum { OCL_SEL_ONE, OCL_SEL_ALL, OCL_SEL_GPU };

// OpenCL devices, enumerated once per process for opening (the listing and tune enumerate
// afresh, as they always did).
static ocl_dev_info *ocl_devs;
static int ocl_n = -1;

static int cl_list(ht_error *e) {
    if (ocl_n >= 0) return 0;
    int n;
    if (ocl_enumerate(&ocl_devs, &n, e) < 0) return -1;
    ocl_n = n;
    return 0;
}

int opencl_item_names(const device_item *it, const ocl_dev_info *info) {
    if (it->kind != &device_kind_opencl) return 0;
    switch (it->sel) {
    case OCL_SEL_ALL: return 1;
    case OCL_SEL_GPU: return !strcmp(info->type, "gpu");
    default: return info->p == it->platform && info->d == it->dev;
    }
}

static int ocl_parse(const char *item, device_item *it, ht_error *e) {
    const char *name = it->name;
    if (!strcmp(name, "cl:all")) {
        it->sel = OCL_SEL_ALL;
    } else if (!strcmp(name, "gpu")) {
        it->sel = OCL_SEL_GPU;
    } else if (!strncmp(name, "cl:", 3)) {
        char *end;
        errno = 0;
        long lp = strtol(name + 3, &end, 10), ld = -1;
        if (!errno && end != name + 3 && *end == '.') {
            char *end2;
            ld = strtol(end + 1, &end2, 10);
            if (end2 == end + 1 || *end2) ld = -1;
        }
        if (lp < 0 || ld < 0 || lp > 1000 || ld > 1000)
            return ht_fail(e, "--devices: \"%s\": expected cl:PLATFORM.DEVICE (e.g. cl:0.0), cl:all or gpu", item);
        it->sel = OCL_SEL_ONE;
        it->platform = (int)lp;
        it->dev = (int)ld;
    } else {
        return 0;
    }
    return 1;
}

// auto: every OpenCL GPU.
static int ocl_enumerate_auto(device_entry *out, int *n, int cap, ht_error *e) {
    if (cl_list(e) < 0) return -1;
    for (int i = 0; i < ocl_n; i++) {
        if (strcmp(ocl_devs[i].type, "gpu")) continue;
        if (*n == cap) return ht_fail(e, "--devices: more than %d devices", cap);
        snprintf(out[(*n)++].spec, sizeof out->spec, "%s", ocl_devs[i].spec);
    }
    return 0;
}

// Each GPU an item names keeps a host core busy driving it.
static int ocl_cores(const device_item *it) {
    ht_error e;
    if (cl_list(&e) < 0) return 0; // opening the item says why
    int n = 0;
    for (int i = 0; i < ocl_n; i++)
        if (!strcmp(ocl_devs[i].type, "gpu") && opencl_item_names(it, &ocl_devs[i])) n++;
    return n;
}

static int ocl_open(device *list, int *count, const device_item *it, const device_open_req *r,
                    ht_error *e) {
    if (cl_list(e) < 0) return -1;
    int opened = 0;
    for (int i = 0; i < ocl_n; i++) {
        const ocl_dev_info *info = &ocl_devs[i];
        if (!opencl_item_names(it, info)) continue;
        if (*count == HT_MAX_DEVICES) return ht_fail(e, "--devices: more than %d devices", HT_MAX_DEVICES);
        for (int k = 0; k < *count; k++)
            if (!strcmp(list[k].spec, info->spec))
                return ht_fail(e, "--devices: %s is selected twice", info->spec);
        if (opencl_device_open(&list[*count], info, r->m, r->max_batch, r->mem, e) < 0) return -1;
        list[*count].capacity = it->capacity;
        (*count)++;
        opened++;
    }
    if (opened == 0) {
        if (ocl_n == 0)
            return ht_fail(e, "--devices: \"%s\": no OpenCL platform found (the ICD loader lists none); use cpu", r->item);
        if (it->sel == OCL_SEL_GPU)
            return ht_fail(e, "--devices: \"%s\": no OpenCL GPU found (see 'hetrain devices')", r->item);
        return ht_fail(e, "--devices: \"%s\": no such OpenCL device (see 'hetrain devices')", r->item);
    }
    return 0;
}

// Each OpenCL device's tuning file (ocl_tune.h): read, or why it cannot be used.
typedef struct dev_tuning {
    int state; // 1 tuned, 0 none, -1 a file that cannot be used
    ocl_tuning t;
    char path[PATH_MAX + 128];
    char why[400];
} dev_tuning;

static dev_tuning *load_tunings(const ocl_dev_info *devs, int n) {
    dev_tuning *dt = calloc((size_t)(n ? n : 1), sizeof *dt);
    for (int i = 0; dt && i < n; i++) {
        ocl_tuning_path(dt[i].path, sizeof dt[i].path, &devs[i]);
        dt[i].state = ocl_tuning_load(&dt[i].t, &devs[i], dt[i].why, sizeof dt[i].why);
    }
    return dt;
}

static void free_tunings(dev_tuning *dt, int n) {
    for (int i = 0; dt && i < n; i++) ocl_tuning_free(&dt[i].t);
    free(dt);
}

// The "tuned" member of a device: null, or the file, its networks and counts.
static json_object *tuning_json(const dev_tuning *dt) {
    if (dt->state <= 0) return NULL;
    json_object *o = json_object_new_object(), *runs = json_object_new_array();
    json_object_object_add(o, "file", json_object_new_string(dt->path));
    for (int k = 0; k < dt->t.n_runs; k++) {
        json_object *r = json_object_new_object();
        json_object_object_add(r, "model", json_object_new_string(dt->t.runs[k].model));
        json_object_object_add(r, "batch", json_object_new_int(dt->t.runs[k].batch));
        json_object_object_add(r, "micro", json_object_new_int(dt->t.runs[k].micro));
        json_object_object_add(r, "date", json_object_new_string(dt->t.runs[k].date));
        json_object_array_add(runs, r);
    }
    json_object_object_add(o, "tuned_for", runs);
    json_object_object_add(o, "gemm_shapes", json_object_new_int(dt->t.n_gemm));
    json_object *shapes = json_object_new_array();
    for (int k = 0; k < dt->t.n_gemm; k++) {
        const ocl_tuned_gemm *g = &dt->t.gemm[k];
        json_object *r = json_object_new_object();
        char shape[64];
        ocl_gemm_shape_str(shape, sizeof shape, &g->shape);
        json_object_object_add(r, "shape", json_object_new_string(shape));
        json_object_object_add(r, "op", json_object_new_string(g->op));
        json_object_object_add(r, "routine", json_object_new_string(ocl_blas_kernel(g->cfg.direct)));
        json_object_object_add(r, "default_ms", json_object_new_double(g->ms_default));
        json_object_object_add(r, "tuned_ms", json_object_new_double(g->ms_tuned));
        json_object_array_add(shapes, r);
    }
    json_object_object_add(o, "gemm", shapes);
    json_object_object_add(o, "work_groups", json_object_new_int(dt->t.n_wg));
    return o;
}

// The devices' rows: their properties, and whether a tuning is there for them.
static int add_rows(device_listing *l, const ocl_dev_info *devs, int n, const dev_tuning *dt,
                    ht_error *e) {
    for (int i = 0; i < n; i++) {
        device_row *row = device_listing_add(l);
        if (!row) return ht_fail(e, "out of memory listing devices");
        char(*r)[160] = row->cell;
        const ocl_dev_info *d = &devs[i];
        snprintf(r[DEVICE_COL_SPEC], 160, "%s", d->spec);
        snprintf(r[DEVICE_COL_TYPE], 160, "%s", d->type);
        snprintf(r[DEVICE_COL_VENDOR], 160, "%s", d->vendor);
        snprintf(r[DEVICE_COL_NAME], 160, "%.159s", d->name);
        snprintf(r[DEVICE_COL_UNITS], 160, "%u", d->compute_units);
        snprintf(r[DEVICE_COL_CLOCK], 160, "%u MHz", d->clock_mhz);
        device_fmt_bytes(r[DEVICE_COL_MEM], 160, d->global_mem);
        device_fmt_bytes(r[DEVICE_COL_ALLOC], 160, d->max_alloc);
        // "OpenCL C 1.2 pocl" -> "1.2 pocl": the column header already says OpenCL C.
        const char *cv = d->c_version;
        if (!strncmp(cv, "OpenCL C ", 9)) cv += 9;
        snprintf(r[DEVICE_COL_C], 160, "%s", cv);
        // "class": no file, the device class's starting configurations (ocl_tune.h).
        snprintf(r[DEVICE_COL_TUNED], 160, "%s",
                 dt[i].state > 0                       ? "yes"
                 : dt[i].state < 0                     ? "unusable"
                 : ocl_tuning_has_class(&devs[i])      ? "class"
                                                       : "no");
        json_object *o = row->json = json_object_new_object();
        if (!o) return ht_fail(e, "out of memory listing devices");
        json_object_object_add(o, "spec", json_object_new_string(d->spec));
        json_object_object_add(o, "type", json_object_new_string(d->type));
        json_object_object_add(o, "platform", json_object_new_string(d->platform_name));
        json_object_object_add(o, "vendor", json_object_new_string(d->vendor));
        json_object_object_add(o, "name", json_object_new_string(d->name));
        json_object_object_add(o, "compute_units", json_object_new_int64(d->compute_units));
        json_object_object_add(o, "clock_mhz", json_object_new_int64(d->clock_mhz));
        json_object_object_add(o, "global_mem_bytes",
                               json_object_new_int64((int64_t)d->global_mem));
        json_object_object_add(o, "max_alloc_bytes",
                               json_object_new_int64((int64_t)d->max_alloc));
        json_object_object_add(o, "driver_version", json_object_new_string(d->driver));
        json_object_object_add(o, "device_version", json_object_new_string(d->version));
        json_object_object_add(o, "opencl_c_version", json_object_new_string(d->c_version));
        json_object_object_add(o, "tuned", tuning_json(&dt[i]));
        if (dt[i].state < 0)
            json_object_object_add(o, "tuning_ignored", json_object_new_string(dt[i].why));
    }
    return 0;
}

// Below the table: each tuning, or why it is ignored; and why there is no OpenCL device.
static void add_notes(FILE *f, const ocl_dev_info *devs, int n, cl_uint np, const dev_tuning *dt) {
    for (int i = 0; i < n; i++) {
        const ocl_tuning *t = &dt[i].t;
        if (dt[i].state < 0) fprintf(f, "%s: tuning cache ignored: %s\n", devs[i].spec, dt[i].why);
        if (dt[i].state <= 0) continue;
        fprintf(f, "%s tuned: %d GEMM shapes, %d kernel work-group sizes, for", devs[i].spec,
                t->n_gemm, t->n_wg);
        for (int k = 0; k < t->n_runs; k++)
            fprintf(f, "%s %s at batch %d (micro-batch %d, %s)", k ? ";" : "", t->runs[k].model,
                    t->runs[k].batch, t->runs[k].micro, t->runs[k].date);
        fprintf(f, "%s\n  %s (--json lists the GEMM shapes)\n", t->n_runs ? "" : " no network",
                dt[i].path);
    }
    if (np == 0)
        fputs("no OpenCL platform found (the ICD loader lists none); hetrain runs on the CPU\n", f);
    else if (n == 0)
        fprintf(f, "%u OpenCL platform%s found, but no devices on %s\n", np, np == 1 ? "" : "s",
                np == 1 ? "it" : "them");
}

static int ocl_describe(device_listing *l, ht_error *e) {
    cl_uint np;
    if (ocl_platform_count(&np, e) < 0) return -1;
    ocl_dev_info *devs = NULL;
    int n = 0;
    if (np > 0 && ocl_enumerate(&devs, &n, e) < 0) return -1;
    dev_tuning *dt = load_tunings(devs, n);
    int rc = !dt ? ht_fail(e, "out of memory listing devices") : add_rows(l, devs, n, dt, e);
    if (rc == 0) {
        add_notes(l->notes, devs, n, np, dt);
        json_object_object_add(l->extra, "opencl_platforms", json_object_new_int64(np));
    }
    free_tunings(dt, n);
    free(devs);
    return rc;
}

// The devices items name, in the listing's order of each item, each once; -1 with e for an
// item that names no device.
static int tune_pick(const device_item *items, int n_items, const ocl_dev_info *devs, int n,
                     int *pick, ht_error *e) {
    int np = 0;
    for (int j = 0; j < n_items; j++) {
        const device_item *it = &items[j];
        int found = 0;
        for (int i = 0; i < n; i++) {
            int match = opencl_item_names(it, &devs[i]);
            int taken = 0;
            for (int k = 0; k < np; k++) taken |= pick[k] == i;
            if (match) found = 1;
            if (match && !taken && np < HT_MAX_DEVICES) pick[np++] = i;
        }
        if (!found && it->sel == OCL_SEL_ONE)
            return ht_fail(e, "--devices: no OpenCL device %s (see 'hetrain devices')", it->name);
    }
    return np;
}

static int ocl_tune(const device_item *items, int n_items, const device_tune_opts *o,
                    ht_error *e) {
    ocl_dev_info *devs = NULL;
    int n = 0, rc = 0, pick[HT_MAX_DEVICES];
    if (ocl_enumerate(&devs, &n, e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e->msg);
        return 1;
    }
    int np = tune_pick(items, n_items, devs, n, pick, e);
    if (np < 0) {
        free(devs);
        return -1;
    }
    if (np == 0) printf("no OpenCL device to tune (see 'hetrain devices')\n");
    ocl_tuner_opts to = {o->m, o->batch, o->mem_limit, o->budget_s, o->progress};
    for (int k = 0; k < np; k++) {
        const ocl_dev_info *d = &devs[pick[k]];
        printf("tuning %s (%s, %s) for %s at batch %d, budget %g s\n", d->spec, d->name,
               d->platform_name, o->m->name, o->batch, o->budget_s);
        fflush(stdout);
        ocl_tuner_result r;
        if (ocl_tuner_run(d, &to, &r, e) < 0) {
            fprintf(stderr, "hetrain: %s: %s\n", d->spec, e->msg);
            rc = 1;
            continue;
        }
        printf("%s: micro-batch %d; %d GEMM shapes, %d timed, %d faster than CLBlast's own; "
               "GEMMs of one shard %.3f s -> %.3f s (%.2fx); %d kernel work-group sizes; "
               "%d configurations tried, %d rejected; %.0f s\n  tuning written to %s\n",
               d->spec, r.micro, r.n_shapes, r.n_timed, r.n_faster, r.gemm_own_s, r.gemm_tuned_s,
               r.gemm_tuned_s > 0 ? r.gemm_own_s / r.gemm_tuned_s : 1.0, r.n_wg, r.n_configs,
               r.n_rejected, r.elapsed_s, r.path);
        fflush(stdout);
    }
    free(devs);
    return rc;
}

// `hetrain version`: where the kernels come from (an install finds its own share/hetrain/kernels).
static void ocl_about(FILE *f) {
    char origin[PATH_MAX];
    ht_error e;
    char *src = ocl_kernel_source(origin, sizeof origin, &e);
    fprintf(f, "kernels: %s\n", src ? origin : e.msg);
    free(src);
}

const device_kind device_kind_opencl = {
    .name = "OpenCL",
    .grammar = "cl:P.D, cl:all, gpu",
    .parse = ocl_parse,
    .enumerate = ocl_enumerate_auto,
    .cores = ocl_cores,
    .open = ocl_open,
    .describe = ocl_describe,
    .tune = ocl_tune,
    .set_cache_dir = ocl_set_cache_dir,
    .cache_dir = ocl_cache_dir,
    .release = ocl_blas_release_all,
    .about = ocl_about,
};
