// `hetrain devices`: the native CPU and every OpenCL device, as aligned text or JSON.
#include <json.h>
#include "core/ht_omp.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/ocl_tune.h"
#include "devices/ocl_util.h"

typedef struct cpu_info {
    char vendor[64];
    char name[256];
    unsigned cores;
    unsigned clock_mhz; // 0 when unknown
    uint64_t memory;
} cpu_info;

static void cpu_describe(cpu_info *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->vendor, sizeof c->vendor, "-");
    snprintf(c->name, sizeof c->name, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        int have_name = 0, have_vendor = 0;
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (!colon) continue;
            char *val = colon + 1;
            while (*val == ' ' || *val == '\t') val++;
            val[strcspn(val, "\n")] = 0;
            if (!*val) continue;
            if (!have_name && (!strncmp(line, "model name", 10) || !strncmp(line, "Model", 5))) {
                snprintf(c->name, sizeof c->name, "%s", val);
                have_name = 1;
            } else if (!have_vendor && !strncmp(line, "vendor_id", 9)) {
                const char *v = !strcmp(val, "GenuineIntel")   ? "Intel"
                                : !strcmp(val, "AuthenticAMD") ? "AMD"
                                                               : val;
                snprintf(c->vendor, sizeof c->vendor, "%s", v);
                have_vendor = 1;
            } else if (!c->clock_mhz && !strncmp(line, "cpu MHz", 7)) {
                c->clock_mhz = (unsigned)(atof(val) + 0.5);
            }
        }
        fclose(f);
    }
    int n = omp_get_num_procs();
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->cores = n > 0 ? (unsigned)n : 1;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    c->memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

static void fmt_bytes(char *out, size_t cap, uint64_t b) {
    if (b == 0) snprintf(out, cap, "-");
    else if (b >= (1ULL << 30)) snprintf(out, cap, "%.1f GiB", (double)b / (1ULL << 30));
    else snprintf(out, cap, "%.0f MiB", (double)b / (1ULL << 20));
}

enum {
    COL_SPEC, COL_TYPE, COL_VENDOR, COL_NAME, COL_UNITS, COL_CLOCK, COL_MEM, COL_ALLOC, COL_C,
    COL_TUNED, NCOL
};

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

static int print_text(FILE *f, const cpu_info *cpu, const ocl_dev_info *devs, int n, cl_uint np,
                      const dev_tuning *dt) {
    static const char *head[NCOL] = {"SPEC",   "TYPE",   "VENDOR",    "NAME",     "UNITS",
                                     "CLOCK",  "MEMORY", "MAX ALLOC", "OPENCL C", "TUNED"};
    int rows = n + 2;
    char(*cell)[NCOL][160] = calloc((size_t)rows, sizeof *cell);
    if (!cell) return -1;
    for (int c = 0; c < NCOL; c++) snprintf(cell[0][c], sizeof cell[0][c], "%s", head[c]);
    snprintf(cell[1][COL_SPEC], 160, "cpu");
    snprintf(cell[1][COL_TYPE], 160, "cpu");
    snprintf(cell[1][COL_VENDOR], 160, "%s", cpu->vendor);
    snprintf(cell[1][COL_NAME], 160, "%.159s", cpu->name);
    snprintf(cell[1][COL_UNITS], 160, "%u", cpu->cores);
    if (cpu->clock_mhz) snprintf(cell[1][COL_CLOCK], 160, "%u MHz", cpu->clock_mhz);
    else snprintf(cell[1][COL_CLOCK], 160, "-");
    fmt_bytes(cell[1][COL_MEM], 160, cpu->memory);
    snprintf(cell[1][COL_ALLOC], 160, "-");
    snprintf(cell[1][COL_C], 160, "-");
    snprintf(cell[1][COL_TUNED], 160, "-");
    for (int i = 0; i < n; i++) {
        char(*r)[160] = cell[i + 2];
        const ocl_dev_info *d = &devs[i];
        snprintf(r[COL_SPEC], 160, "%s", d->spec);
        snprintf(r[COL_TYPE], 160, "%s", d->type);
        snprintf(r[COL_VENDOR], 160, "%s", d->vendor);
        snprintf(r[COL_NAME], 160, "%.159s", d->name);
        snprintf(r[COL_UNITS], 160, "%u", d->compute_units);
        snprintf(r[COL_CLOCK], 160, "%u MHz", d->clock_mhz);
        fmt_bytes(r[COL_MEM], 160, d->global_mem);
        fmt_bytes(r[COL_ALLOC], 160, d->max_alloc);
        // "OpenCL C 1.2 pocl" -> "1.2 pocl": the column header already says OpenCL C.
        const char *cv = d->c_version;
        if (!strncmp(cv, "OpenCL C ", 9)) cv += 9;
        snprintf(r[COL_C], 160, "%s", cv);
        // "class": no file, the device class's starting configurations (ocl_tune.h).
        snprintf(r[COL_TUNED], 160, "%s",
                 dt[i].state > 0                       ? "yes"
                 : dt[i].state < 0                     ? "unusable"
                 : ocl_tuning_has_class(&devs[i])      ? "class"
                                                       : "no");
    }
    int width[NCOL] = {0};
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < NCOL; c++) {
            int w = (int)strlen(cell[r][c]);
            if (w > width[c]) width[c] = w;
        }
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < NCOL; c++) {
            int right = c == COL_UNITS || c == COL_CLOCK || c == COL_MEM || c == COL_ALLOC;
            if (c == NCOL - 1) fprintf(f, "%s\n", cell[r][c]);
            else fprintf(f, right ? "%*s  " : "%-*s  ", width[c], cell[r][c]);
        }
    }
    free(cell);
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
    return 0;
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

static int print_json(FILE *f, const cpu_info *cpu, const ocl_dev_info *devs, int n, cl_uint np,
                      const dev_tuning *dt) {
    json_object *root = json_object_new_object(), *list = json_object_new_array();
    if (!root || !list) {
        json_object_put(root);
        json_object_put(list);
        return -1;
    }
    json_object *c = json_object_new_object();
    json_object_object_add(c, "spec", json_object_new_string("cpu"));
    json_object_object_add(c, "type", json_object_new_string("cpu"));
    json_object_object_add(c, "vendor", json_object_new_string(cpu->vendor));
    json_object_object_add(c, "name", json_object_new_string(cpu->name));
    json_object_object_add(c, "compute_units", json_object_new_int64(cpu->cores));
    json_object_object_add(c, "clock_mhz",
                           cpu->clock_mhz ? json_object_new_int64(cpu->clock_mhz) : NULL);
    json_object_object_add(c, "global_mem_bytes", json_object_new_int64((int64_t)cpu->memory));
    json_object_array_add(list, c);
    for (int i = 0; i < n; i++) {
        const ocl_dev_info *d = &devs[i];
        json_object *o = json_object_new_object();
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
        json_object_array_add(list, o);
    }
    json_object_object_add(root, "devices", list);
    json_object_object_add(root, "opencl_platforms", json_object_new_int64(np));
    fprintf(f, "%s\n",
            json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return 0;
}

int ocl_print_devices(FILE *f, int json, ht_error *e) {
    cpu_info cpu;
    cpu_describe(&cpu);
    cl_uint np;
    if (ocl_platform_count(&np, e) < 0) return -1;
    ocl_dev_info *devs = NULL;
    int n = 0;
    if (np > 0 && ocl_enumerate(&devs, &n, e) < 0) return -1;
    dev_tuning *dt = load_tunings(devs, n);
    int rc = !dt ? -1 : json ? print_json(f, &cpu, devs, n, np, dt) : print_text(f, &cpu, devs, n, np, dt);
    free_tunings(dt, n);
    free(devs);
    if (rc < 0) return ht_fail(e, "out of memory listing devices");
    return 0;
}
