// The native CPU as a device kind (device_kind.h): items cpu and cpu:THREADS, the worker that
// auto adds, and the CPU's row of `hetrain devices`. The device itself is cpu.c's.
#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ht_omp.h"
#include "devices/device_kind.h"

static int cpu_parse(const char *item, device_item *it, ht_error *e) {
    const char *name = it->name;
    if (strcmp(name, "cpu") && strncmp(name, "cpu:", 4)) return 0;
    if (name[3] == ':') {
        char *end;
        errno = 0;
        long t = strtol(name + 4, &end, 10);
        if (errno || end == name + 4 || *end || t < 1 || t > 1024)
            return ht_fail(e, "--devices: \"%s\": expected cpu:THREADS with THREADS 1..1024",
                           item);
        // Past a few threads per core a compute-bound worker only adds switching, and when
        // the system refuses libgomp a thread it aborts the process mid-run, after the run's
        // files exist. 8 per core (up to the 1024 above) still lets one oversubscribe on
        // purpose or mimic a larger machine.
        int cores = omp_get_num_procs() > 0 ? omp_get_num_procs() : 1;
        int most = cores > 128 ? 1024 : 8 * cores;
        if (t > most)
            return ht_fail(e, "--devices: \"%s\": %ld threads is too many for this machine's "
                              "%d cores (at most %d)", item, t, cores, most);
        it->threads = (int)t;
    }
    return 1;
}

// auto's one CPU worker, on the cores the other devices leave.
static int cpu_enumerate(device_entry *out, int *n, int cap, ht_error *e) {
    if (*n == cap) return ht_fail(e, "--devices: more than %d devices", cap);
    snprintf(out[(*n)++].spec, sizeof out->spec, "cpu");
    return 0;
}

static int cpu_cores(const device_item *it) {
    return it->threads ? it->threads : -1;
}

static int cpu_open(device *list, int *count, const device_item *it, const device_open_req *r,
                    ht_error *e) {
    if (*count == HT_MAX_DEVICES) return ht_fail(e, "--devices: more than %d devices", HT_MAX_DEVICES);
    device *d = &list[*count];
    const char *name = it->name;
    int threads = it->threads ? it->threads : r->plain_threads;
    if (cpu_device_open(d, r->m, threads, r->max_batch, r->mem, e) < 0)
        return ht_wrap(e, "device %s", name);
    // Specs name metrics columns and log entries, so repeated workers are numbered.
    int same = 1;
    for (int k = 0; k < *count; k++)
        if (!strncmp(list[k].spec, name, strlen(name)) &&
            (list[k].spec[strlen(name)] == 0 || list[k].spec[strlen(name)] == '#'))
            same++;
    if (same > 1) snprintf(d->spec, sizeof d->spec, "%.48s#%d", name, same);
    else snprintf(d->spec, sizeof d->spec, "%s", name);
    d->capacity = it->capacity;
    (*count)++;
    return 0;
}

typedef struct cpu_info {
    char vendor[64];
    char name[256];
    unsigned cores;
    unsigned clock_mhz; // 0 when unknown
    uint64_t memory;
} cpu_info;

static void cpu_info_read(cpu_info *c) {
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

static int cpu_describe(device_listing *l, ht_error *e) {
    cpu_info cpu;
    cpu_info_read(&cpu);
    device_row *row = device_listing_add(l);
    if (!row) return ht_fail(e, "out of memory listing devices");
    char(*r)[160] = row->cell;
    snprintf(r[DEVICE_COL_SPEC], 160, "cpu");
    snprintf(r[DEVICE_COL_TYPE], 160, "cpu");
    snprintf(r[DEVICE_COL_VENDOR], 160, "%s", cpu.vendor);
    snprintf(r[DEVICE_COL_NAME], 160, "%.159s", cpu.name);
    snprintf(r[DEVICE_COL_UNITS], 160, "%u", cpu.cores);
    if (cpu.clock_mhz) snprintf(r[DEVICE_COL_CLOCK], 160, "%u MHz", cpu.clock_mhz);
    else snprintf(r[DEVICE_COL_CLOCK], 160, "-");
    device_fmt_bytes(r[DEVICE_COL_MEM], 160, cpu.memory);
    snprintf(r[DEVICE_COL_ALLOC], 160, "-");
    snprintf(r[DEVICE_COL_C], 160, "-");
    snprintf(r[DEVICE_COL_TUNED], 160, "-");
    json_object *c = row->json = json_object_new_object();
    if (!c) return ht_fail(e, "out of memory listing devices");
    json_object_object_add(c, "spec", json_object_new_string("cpu"));
    json_object_object_add(c, "type", json_object_new_string("cpu"));
    json_object_object_add(c, "vendor", json_object_new_string(cpu.vendor));
    json_object_object_add(c, "name", json_object_new_string(cpu.name));
    json_object_object_add(c, "compute_units", json_object_new_int64(cpu.cores));
    json_object_object_add(c, "clock_mhz",
                           cpu.clock_mhz ? json_object_new_int64(cpu.clock_mhz) : NULL);
    json_object_object_add(c, "global_mem_bytes", json_object_new_int64((int64_t)cpu.memory));
    return 0;
}

const device_kind device_kind_cpu = {
    .name = "cpu",
    .grammar = "cpu, cpu:THREADS",
    .parse = cpu_parse,
    .enumerate = cpu_enumerate,
    .auto_last = 1,
    .cores = cpu_cores,
    .open = cpu_open,
    .describe = cpu_describe,
    .tune_none = "a native CPU worker",
};
