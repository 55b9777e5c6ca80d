// Device registry: parses --devices specs and opens each device through its implementation.
//   spec  := item (',' item)*
//   item  := ('cpu' [':' THREADS] | 'cl:' P '.' D | 'cl:all' | 'gpu') ['@' WEIGHT] [':mem=' SIZE]
//   'auto' (the default) := every OpenCL GPU, plus 'cpu'
// cl:all opens every OpenCL device, gpu every OpenCL GPU; each gets the item's capacity. A plain
// 'cpu' worker takes the cores nobody else claims: all cores, less the threads of cpu:N
// workers and one core to drive each OpenCL GPU, shared among the plain 'cpu' items.
#include <ctype.h>
#include <errno.h>
#include "core/ht_omp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/ocl_util.h"
#include "devices/device.h"
#include "devices/opencl.h"


// Parses "@W" at *s (if present) into *capacity; returns -1 on a malformed one.
static int parse_capacity(const char *s, double *capacity) {
    if (*s == 0) return 0;
    if (*s != '@') return -1;
    char *end;
    errno = 0;
    double w = strtod(s + 1, &end);
    if (errno || end == s + 1 || *end || !(w > 0) || w > 1e6) return -1;
    *capacity = w;
    return 0;
}

// OpenCL devices, enumerated once per process.
static ocl_dev_info *ocl_devs;
static int ocl_n = -1;

static int cl_list(ht_error *e) {
    if (ocl_n >= 0) return 0;
    int n;
    if (ocl_enumerate(&ocl_devs, &n, e) < 0) return -1;
    ocl_n = n;
    return 0;
}

int64_t device_parse_bytes(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return -1;
    double unit = 1;
    switch (*end) {
    case 'K': case 'k': unit = 1024.0; end++; break;
    case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
    case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') end += *end == 'i' && end[1] == 'B' ? 2 : 1;
    if (*end || v * unit > 9e18 || v * unit < 1) return -1;
    return (int64_t)(v * unit);
}

// Opens the OpenCL devices an item names into list[*count...]; returns -1 with e on failure.
static int open_cl(device *list, int *count, const device_item *it, const char *item,
                   uint64_t mem, const model *m, int max_batch, ht_error *e) {
    if (cl_list(e) < 0) return -1;
    int want_all = it->kind == DEVICE_ITEM_CL_ALL, want_gpu = it->kind == DEVICE_ITEM_GPU;
    int p = want_all || want_gpu ? -1 : it->platform, d = want_all || want_gpu ? -1 : it->dev;
    int opened = 0;
    for (int i = 0; i < ocl_n; i++) {
        const ocl_dev_info *info = &ocl_devs[i];
        int match = want_all || (want_gpu && !strcmp(info->type, "gpu")) || (info->p == p && info->d == d);
        if (!match) continue;
        if (*count == HT_MAX_DEVICES) return ht_fail(e, "--devices: more than %d devices", HT_MAX_DEVICES);
        for (int k = 0; k < *count; k++)
            if (!strcmp(list[k].spec, info->spec))
                return ht_fail(e, "--devices: %s is selected twice", info->spec);
        if (opencl_device_open(&list[*count], info, m, max_batch, mem, e) < 0) return -1;
        list[*count].capacity = it->capacity;
        (*count)++;
        opened++;
    }
    if (opened == 0) {
        if (ocl_n == 0)
            return ht_fail(e, "--devices: \"%s\": no OpenCL platform found (the ICD loader lists none); use cpu", item);
        if (want_gpu)
            return ht_fail(e, "--devices: \"%s\": no OpenCL GPU found (see 'hetrain devices')", item);
        return ht_fail(e, "--devices: \"%s\": no such OpenCL device (see 'hetrain devices')", item);
    }
    return 0;
}

// Threads for each plain 'cpu' item of specs (see the grammar above).
static int plain_cpu_threads(const char *specs) {
    int cores = omp_get_num_procs(), claimed = 0, plain = 0;
    char *copy = strdup(specs), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item)) item++;
        // A malformed item fails the whole list when it is opened; it claims nothing here.
        device_item it;
        if (device_parse_item(item, &it, NULL) < 0) continue;
        if (it.kind == DEVICE_ITEM_CPU && !it.threads) {
            plain++;
        } else if (it.kind == DEVICE_ITEM_CPU) {
            if (claimed < cores) claimed += it.threads; // no int overflow on long lists
        } else if (ocl_n > 0) {
            int all = it.kind == DEVICE_ITEM_CL_ALL, gpu = it.kind == DEVICE_ITEM_GPU;
            for (int i = 0; i < ocl_n; i++)
                if (!strcmp(ocl_devs[i].type, "gpu") && (all || gpu || !strcmp(ocl_devs[i].spec, it.name)))
                    claimed++;
        }
    }
    free(copy);
    int free_cores = cores - claimed;
    int t = plain ? free_cores / plain : 0;
    return t < 1 ? 1 : t;
}

// "auto": every OpenCL GPU plus one CPU worker (malloc'd spec string).
static char *expand_auto(void) {
    size_t cap = 16 + (size_t)(ocl_n > 0 ? ocl_n : 0) * 24, k = 0;
    char *s = malloc(cap);
    for (int i = 0; i < ocl_n; i++)
        if (!strcmp(ocl_devs[i].type, "gpu")) k += (size_t)snprintf(s + k, cap - k, "%s,", ocl_devs[i].spec);
    snprintf(s + k, cap - k, "cpu");
    return s;
}

int device_parse_item(const char *item, device_item *it, ht_error *e) {
    memset(it, 0, sizeof *it);
    char rest[64];
    size_t len = strcspn(item, "@");
    const char *memopt = strstr(item, ":mem=");
    if (memopt && (size_t)(memopt - item) < len) len = (size_t)(memopt - item);
    if (len >= sizeof it->name) return ht_fail(e, "--devices: \"%s\" is too long", item);
    memcpy(it->name, item, len);
    it->name[len] = 0;
    // What follows the name: "@W", ":mem=SIZE", or "@W:mem=SIZE".
    size_t wlen = memopt ? (size_t)(memopt - item) - len : strlen(item + len);
    if (wlen >= sizeof rest) return ht_fail(e, "--devices: \"%s\" is too long", item);
    memcpy(rest, item + len, wlen);
    rest[wlen] = 0;
    it->capacity = 1.0;
    if (parse_capacity(rest, &it->capacity) < 0)
        return ht_fail(e, "--devices: \"%s\": expected a capacity after '@' (a number > 0), found \"%s\"",
                       item, rest + (rest[0] == '@'));
    it->mem = -1;
    if (memopt) {
        it->mem = device_parse_bytes(memopt + 5);
        if (it->mem < 0)
            return ht_fail(e, "--devices: \"%s\": expected mem=SIZE like 256M or 2G, found \"%s\"",
                           item, memopt + 5);
    }
    const char *name = it->name;
    if (!strcmp(name, "cl:all")) {
        it->kind = DEVICE_ITEM_CL_ALL;
    } else if (!strcmp(name, "gpu")) {
        it->kind = DEVICE_ITEM_GPU;
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
        it->kind = DEVICE_ITEM_CL;
        it->platform = (int)lp;
        it->dev = (int)ld;
    } else if (!strcmp(name, "cpu") || !strncmp(name, "cpu:", 4)) {
        it->kind = DEVICE_ITEM_CPU;
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
    } else {
        return ht_fail(e, "--devices: unknown device \"%s\" (known: cpu, cpu:THREADS, cl:P.D, cl:all, "
                          "gpu; add @W for a capacity)", name);
    }
    return 0;
}

static int open_one(device *list, int *count, const char *item, int plain_threads,
                    const model *m, int max_batch, uint64_t mem_default, ht_error *e) {
    device *d = &list[*count];
    device_item it;
    if (device_parse_item(item, &it, e) < 0) return -1;
    uint64_t mem = it.mem >= 0 ? (uint64_t)it.mem : mem_default;
    if (it.kind != DEVICE_ITEM_CPU) return open_cl(list, count, &it, item, mem, m, max_batch, e);
    if (*count == HT_MAX_DEVICES) return ht_fail(e, "--devices: more than %d devices", HT_MAX_DEVICES);
    const char *name = it.name;
    int threads = it.threads ? it.threads : plain_threads;
    if (cpu_device_open(d, m, threads, max_batch, mem, e) < 0) return ht_wrap(e, "device %s", name);
    // Specs name metrics columns and log entries, so repeated workers are numbered.
    int same = 1;
    for (int k = 0; k < *count; k++)
        if (!strncmp(list[k].spec, name, strlen(name)) &&
            (list[k].spec[strlen(name)] == 0 || list[k].spec[strlen(name)] == '#'))
            same++;
    if (same > 1) snprintf(d->spec, sizeof d->spec, "%.48s#%d", name, same);
    else snprintf(d->spec, sizeof d->spec, "%s", name);
    d->capacity = it.capacity;
    (*count)++;
    return 0;
}

int device_open_list(device **devs, int *n, const char *specs, const model *m, int max_batch,
                     uint64_t mem_limit, ht_error *e) {
    *devs = NULL;
    *n = 0;
    if (specs && !*specs) return ht_fail(e, "--devices: empty device list");
    if (cl_list(e) < 0) return -1;
    char *copy = !specs || !strcmp(specs, "auto") ? expand_auto() : strdup(specs);
    int plain_threads = plain_cpu_threads(copy);
    device *list = ht_calloc(HT_MAX_DEVICES, sizeof *list, e);
    if (!list) {
        free(copy);
        return -1;
    }
    int count = 0, rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item)) item++;
        if ((rc = open_one(list, &count, item, plain_threads, m, max_batch, mem_limit, e)) < 0)
            break;
    }
    free(copy);
    if (rc == 0 && count == 0) rc = ht_fail(e, "--devices: empty device list \"%s\"", specs);
    if (rc < 0) {
        device_close_list(list, count);
        return -1;
    }
    *devs = list;
    *n = count;
    return 0;
}

void device_close_list(device *devs, int n) {
    for (int i = 0; i < n; i++)
        if (devs[i].ops && devs[i].ops->close) devs[i].ops->close(devs[i].ctx);
    free(devs);
}

void device_disown(device *d) {
    d->ops = NULL;
    d->ctx = NULL;
}
