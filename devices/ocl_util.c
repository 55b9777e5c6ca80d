// OpenCL plumbing: error names, platform/device discovery, kernel sources, and per-device
// programs built once per process with an on-disk binary cache.
#include "devices/ocl_util.h"

#include "nn/layer_kinds.h"

#include <CL/cl_ext.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

// Generated at build time from kernels/*.cl by tools/cmake/embed_kernels.cmake.
extern const char ht_cl_embedded_source[];

#define OCL_BUILD_OPTIONS "-cl-std=CL1.2"

// ---------------------------------------------------------------------------------------------
// Errors

const char *ocl_error_name(cl_int err) {
    switch (err) {
#define NAME(x) \
    case x: return #x;
        NAME(CL_SUCCESS) NAME(CL_DEVICE_NOT_FOUND) NAME(CL_DEVICE_NOT_AVAILABLE)
        NAME(CL_COMPILER_NOT_AVAILABLE) NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        NAME(CL_OUT_OF_RESOURCES) NAME(CL_OUT_OF_HOST_MEMORY) NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
        NAME(CL_MEM_COPY_OVERLAP) NAME(CL_IMAGE_FORMAT_MISMATCH) NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        NAME(CL_BUILD_PROGRAM_FAILURE) NAME(CL_MAP_FAILURE) NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) NAME(CL_COMPILE_PROGRAM_FAILURE)
        NAME(CL_LINKER_NOT_AVAILABLE) NAME(CL_LINK_PROGRAM_FAILURE) NAME(CL_DEVICE_PARTITION_FAILED)
        NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) NAME(CL_INVALID_VALUE) NAME(CL_INVALID_DEVICE_TYPE)
        NAME(CL_INVALID_PLATFORM) NAME(CL_INVALID_DEVICE) NAME(CL_INVALID_CONTEXT)
        NAME(CL_INVALID_QUEUE_PROPERTIES) NAME(CL_INVALID_COMMAND_QUEUE) NAME(CL_INVALID_HOST_PTR)
        NAME(CL_INVALID_MEM_OBJECT) NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        NAME(CL_INVALID_IMAGE_SIZE) NAME(CL_INVALID_SAMPLER) NAME(CL_INVALID_BINARY)
        NAME(CL_INVALID_BUILD_OPTIONS) NAME(CL_INVALID_PROGRAM) NAME(CL_INVALID_PROGRAM_EXECUTABLE)
        NAME(CL_INVALID_KERNEL_NAME) NAME(CL_INVALID_KERNEL_DEFINITION) NAME(CL_INVALID_KERNEL)
        NAME(CL_INVALID_ARG_INDEX) NAME(CL_INVALID_ARG_VALUE) NAME(CL_INVALID_ARG_SIZE)
        NAME(CL_INVALID_KERNEL_ARGS) NAME(CL_INVALID_WORK_DIMENSION)
        NAME(CL_INVALID_WORK_GROUP_SIZE) NAME(CL_INVALID_WORK_ITEM_SIZE)
        NAME(CL_INVALID_GLOBAL_OFFSET) NAME(CL_INVALID_EVENT_WAIT_LIST) NAME(CL_INVALID_EVENT)
        NAME(CL_INVALID_OPERATION) NAME(CL_INVALID_GL_OBJECT) NAME(CL_INVALID_BUFFER_SIZE)
        NAME(CL_INVALID_MIP_LEVEL) NAME(CL_INVALID_GLOBAL_WORK_SIZE) NAME(CL_INVALID_PROPERTY)
        NAME(CL_INVALID_IMAGE_DESCRIPTOR) NAME(CL_INVALID_COMPILER_OPTIONS)
        NAME(CL_INVALID_LINKER_OPTIONS) NAME(CL_INVALID_DEVICE_PARTITION_COUNT)
        NAME(CL_PLATFORM_NOT_FOUND_KHR)
#undef NAME
    }
    static _Thread_local char buf[40];
    snprintf(buf, sizeof buf, "CL_UNKNOWN_ERROR(%d)", (int)err);
    return buf;
}

static _Thread_local cl_int last_error;

cl_int ocl_last_error(void) { return last_error; }
void ocl_note_error(cl_int err) { last_error = err; }
void ocl_clear_error(void) { last_error = CL_SUCCESS; }

int ocl_fail(ht_error *e, const char *call, cl_int err, const char *device) {
    last_error = err;
    if (device) return ht_fail(e, "%s: %s on %s", call, ocl_error_name(err), device);
    return ht_fail(e, "%s: %s", call, ocl_error_name(err));
}

// ---------------------------------------------------------------------------------------------
// Discovery

// Copies a string property into buf (cut to fit, surrounding blanks removed: some drivers pad
// device names). Returns the OpenCL status.
static cl_int info_str(cl_platform_id p, cl_device_id d, cl_uint what, char *buf, size_t cap) {
    size_t n = 0;
    cl_int err = d ? clGetDeviceInfo(d, what, 0, NULL, &n)
                   : clGetPlatformInfo(p, what, 0, NULL, &n);
    if (err != CL_SUCCESS) return err;
    char *tmp = malloc(n + 1);
    if (!tmp) return CL_OUT_OF_HOST_MEMORY;
    err = d ? clGetDeviceInfo(d, what, n, tmp, NULL) : clGetPlatformInfo(p, what, n, tmp, NULL);
    if (err == CL_SUCCESS) {
        tmp[n] = 0;
        char *s = tmp;
        while (*s == ' ' || *s == '\t') s++;
        size_t len = strlen(s);
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n')) len--;
        s[len] = 0;
        snprintf(buf, cap, "%s", s);
    }
    free(tmp);
    return err;
}

static const char *type_name(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return "gpu";
    if (t & CL_DEVICE_TYPE_CPU) return "cpu";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    return "custom";
}

static int fill_device(ocl_dev_info *di, ht_error *e) {
    static const struct {
        cl_device_info what;
        const char *call;
        size_t off, cap;
    } strs[] = {
        {CL_DEVICE_VENDOR, "clGetDeviceInfo(CL_DEVICE_VENDOR)", offsetof(ocl_dev_info, vendor),
         sizeof((ocl_dev_info *)0)->vendor},
        {CL_DEVICE_NAME, "clGetDeviceInfo(CL_DEVICE_NAME)", offsetof(ocl_dev_info, name),
         sizeof((ocl_dev_info *)0)->name},
        {CL_DRIVER_VERSION, "clGetDeviceInfo(CL_DRIVER_VERSION)", offsetof(ocl_dev_info, driver),
         sizeof((ocl_dev_info *)0)->driver},
        {CL_DEVICE_VERSION, "clGetDeviceInfo(CL_DEVICE_VERSION)", offsetof(ocl_dev_info, version),
         sizeof((ocl_dev_info *)0)->version},
        {CL_DEVICE_OPENCL_C_VERSION, "clGetDeviceInfo(CL_DEVICE_OPENCL_C_VERSION)",
         offsetof(ocl_dev_info, c_version), sizeof((ocl_dev_info *)0)->c_version},
    };
    cl_int err;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        err = info_str(NULL, di->device, strs[i].what, (char *)di + strs[i].off, strs[i].cap);
        if (err != CL_SUCCESS) return ocl_fail(e, strs[i].call, err, di->spec);
    }
    cl_device_type type;
    cl_uint units, clock;
    cl_ulong mem, alloc, local;
    size_t max_wg;
#define QUERY(what, var)                                                   \
    if ((err = clGetDeviceInfo(di->device, what, sizeof var, &var, NULL))) \
        return ocl_fail(e, "clGetDeviceInfo(" #what ")", err, di->spec);
    QUERY(CL_DEVICE_TYPE, type)
    QUERY(CL_DEVICE_MAX_COMPUTE_UNITS, units)
    QUERY(CL_DEVICE_MAX_CLOCK_FREQUENCY, clock)
    QUERY(CL_DEVICE_GLOBAL_MEM_SIZE, mem)
    QUERY(CL_DEVICE_MAX_MEM_ALLOC_SIZE, alloc)
    QUERY(CL_DEVICE_LOCAL_MEM_SIZE, local)
    QUERY(CL_DEVICE_MAX_WORK_GROUP_SIZE, max_wg)
#undef QUERY
    di->type = type_name(type);
    di->compute_units = units;
    di->clock_mhz = clock;
    di->global_mem = mem;
    di->max_alloc = alloc;
    di->local_mem = local;
    di->max_wg = max_wg;
    return 0;
}

// Platform count; CL_PLATFORM_NOT_FOUND_KHR (the ICD loader found no vendor) counts as none.
int ocl_platform_count(cl_uint *np, ht_error *e) {
    *np = 0;
    cl_int err = clGetPlatformIDs(0, NULL, np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR) {
        *np = 0;
        return 0;
    }
    if (err != CL_SUCCESS) return ocl_fail(e, "clGetPlatformIDs", err, NULL);
    return 0;
}

int ocl_enumerate(ocl_dev_info **devs, int *n, ht_error *e) {
    *devs = NULL;
    *n = 0;
    cl_uint np;
    if (ocl_platform_count(&np, e) < 0) return -1;
    if (np == 0) return 0;
    cl_platform_id *plats = ht_calloc(np, sizeof *plats, e);
    if (!plats) return -1;
    cl_int err = clGetPlatformIDs(np, plats, NULL);
    if (err != CL_SUCCESS) {
        free(plats);
        return ocl_fail(e, "clGetPlatformIDs", err, NULL);
    }
    ocl_dev_info *out = NULL;
    int count = 0;
    for (cl_uint p = 0; p < np; p++) {
        char pname[128] = "";
        err = info_str(plats[p], NULL, CL_PLATFORM_NAME, pname, sizeof pname);
        if (err != CL_SUCCESS) {
            char where[32];
            snprintf(where, sizeof where, "platform %u", p);
            ocl_fail(e, "clGetPlatformInfo(CL_PLATFORM_NAME)", err, where);
            goto fail;
        }
        cl_uint nd = 0;
        err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
        if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && nd == 0)) continue;
        if (err != CL_SUCCESS) {
            ht_fail(e, "clGetDeviceIDs: %s on platform %u (%s)", ocl_error_name(err), p, pname);
            goto fail;
        }
        cl_device_id *ids = ht_calloc(nd, sizeof *ids, e);
        if (!ids) goto fail;
        err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, ids, NULL);
        ocl_dev_info *grown = err == CL_SUCCESS ? realloc(out, (count + nd) * sizeof *out) : NULL;
        if (!grown) {
            free(ids);
            if (err != CL_SUCCESS)
                ht_fail(e, "clGetDeviceIDs: %s on platform %u (%s)", ocl_error_name(err), p, pname);
            else
                ht_fail(e, "out of memory listing OpenCL devices");
            goto fail;
        }
        out = grown;
        for (cl_uint d = 0; d < nd; d++) {
            ocl_dev_info *di = &out[count];
            memset(di, 0, sizeof *di);
            di->platform = plats[p];
            di->device = ids[d];
            di->p = (int)p;
            di->d = (int)d;
            snprintf(di->spec, sizeof di->spec, "cl:%u.%u", p & 0xffffu, d & 0xffffu);
            snprintf(di->platform_name, sizeof di->platform_name, "%s", pname);
            if (fill_device(di, e) < 0) {
                free(ids);
                goto fail;
            }
            count++;
        }
        free(ids);
    }
    free(plats);
    *devs = out;
    *n = count;
    return 0;
fail:
    free(plats);
    free(out);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Kernel sources

// Whole file into a malloc'd NUL-terminated buffer; NULL (errno set) on failure.
static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f)) break;
        if (feof(f)) {
            buf[n] = 0;
            fclose(f);
            *len = n;
            return buf;
        }
        if (cap - n < 2) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) break;
            buf = grown;
        }
    }
    int saved = errno ? errno : ENOMEM;
    free(buf);
    fclose(f);
    errno = saved;
    return NULL;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Concatenates dir/*.cl in strcmp order, each followed by "\n" (as embed_kernels.cmake does).
// Returns 1 with *out set, 0 when dir is missing or holds no .cl file, -1 on a read error.
static int read_kernel_dir(const char *dir, char **out, ht_error *e) {
    DIR *dh = opendir(dir);
    if (!dh) return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    char *src = NULL;
    struct dirent *de;
    while ((de = readdir(dh))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".cl")) continue;
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            char **grown = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!grown) {
                ht_fail(e, "out of memory reading %s", dir);
                goto done;
            }
            names = grown;
        }
        if (!(names[n] = strdup(de->d_name))) {
            ht_fail(e, "out of memory reading %s", dir);
            goto done;
        }
        n++;
    }
    if (n == 0) {
        rc = 0;
        goto done;
    }
    qsort(names, n, sizeof *names, cmp_names);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
            ht_fail(e, "%s/%s: path too long", dir, names[i]);
            goto done;
        }
        size_t len;
        char *text = read_all(path, &len);
        if (!text) {
            ht_fail(e, "%s: cannot read: %s", path, strerror(errno));
            goto done;
        }
        char *grown = realloc(src, total + len + 2);
        if (!grown) {
            free(text);
            ht_fail(e, "out of memory reading %s", path);
            goto done;
        }
        src = grown;
        memcpy(src + total, text, len);
        total += len;
        src[total++] = '\n';
        src[total] = 0;
        free(text);
    }
    *out = src;
    src = NULL;
    rc = 1;
done:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(src);
    closedir(dh);
    return rc;
}

char *ocl_kernel_source(char *origin, size_t origin_len, ht_error *e) {
    char cand[5][PATH_MAX];
    int nc = 0;
    const char *env = getenv("HETRAIN_KERNELS");
    if (env && *env) snprintf(cand[nc++], PATH_MAX, "%s", env);
    char exe[PATH_MAX];
    if (ht_exe_dir(exe, sizeof exe) == 0) {
        snprintf(cand[nc++], PATH_MAX, "%.4000s/../share/hetrain/kernels", exe);
        snprintf(cand[nc++], PATH_MAX, "%.4000s/kernels", exe);
        snprintf(cand[nc++], PATH_MAX, "%.4000s/../kernels", exe);
    }
#ifdef HT_SOURCE_DIR
    snprintf(cand[nc++], PATH_MAX, "%s/kernels", HT_SOURCE_DIR);
#endif
    for (int i = 0; i < nc; i++) {
        char *src = NULL;
        int rc = read_kernel_dir(cand[i], &src, e);
        if (rc < 0) return NULL;
        if (rc == 0) continue;
        if (origin && origin_len) {
            char real[PATH_MAX];
            snprintf(origin, origin_len, "%s", realpath(cand[i], real) ? real : cand[i]);
        }
        return src;
    }
    if (!ht_cl_embedded_source[0]) {
        // One line naming every folder looked in.
        char where[1024] = "";
        size_t k = 0;
        for (int i = 0; i < nc && k < sizeof where; i++)
            k += (size_t)snprintf(where + k, sizeof where - k, "%s%.300s", i ? ", " : "", cand[i]);
        ht_fail(e, "no OpenCL kernels: no *.cl in %s, and none embedded in this build", where);
        return NULL;
    }
    char *src = strdup(ht_cl_embedded_source);
    if (!src) {
        ht_fail(e, "out of memory copying the embedded kernels");
        return NULL;
    }
    if (origin && origin_len) snprintf(origin, origin_len, "embedded");
    return src;
}

// What the kernels share with the host, generated from its own definitions: the act family's
// functions (layer_kinds.h), so that the numbers the host passes mean the same on both sides.
// Put before the kernels' source when a program is built (and so in the cache's key).
static const char kernel_prelude[] = LAYER_ACT_FN_OPENCL;

// src (the kernels' files) after the prelude, in a new string; src is freed.
static char *with_prelude(char *src, ht_error *e) {
    size_t n = strlen(src);
    char *all = malloc(sizeof kernel_prelude + n);
    if (!all) {
        free(src);
        ht_fail(e, "out of memory reading the kernels");
        return NULL;
    }
    memcpy(all, kernel_prelude, sizeof kernel_prelude - 1);
    memcpy(all + sizeof kernel_prelude - 1, src, n + 1);
    free(src);
    return all;
}

// ---------------------------------------------------------------------------------------------
// Program cache and per-device runtimes

// One per device that has been asked for: its context and program, released only by
// ocl_runtime_release_all. A node with ready == 0 is being built by some thread; others wait.
typedef struct rt_node {
    cl_device_id device;
    cl_context ctx;
    cl_program prog;
    int from_cache;
    int ready;
    struct rt_node *next;
} rt_node;

static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rt_built = PTHREAD_COND_INITIALIZER;
static rt_node *rt_head;
static int n_from_source, n_from_cache;
static int cache_mode; // 0: default folder, 1: off, 2: cache_dir
static char cache_dir[PATH_MAX];

void ocl_set_cache_dir(const char *dir) {
    pthread_mutex_lock(&rt_lock);
    if (!dir) {
        cache_mode = 0;
    } else if (!*dir) {
        cache_mode = 1;
    } else {
        cache_mode = 2;
        snprintf(cache_dir, sizeof cache_dir, "%s", dir);
    }
    pthread_mutex_unlock(&rt_lock);
}

// The cache folder now in force into out ("" when off). Called with rt_lock held.
static void resolve_cache_dir(char *out, size_t cap) {
    out[0] = 0;
    if (cache_mode == 1) return;
    if (cache_mode == 2) {
        snprintf(out, cap, "%s", cache_dir);
        return;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') snprintf(out, cap, "%s/hetrain", xdg);
    else if (home && *home) snprintf(out, cap, "%s/.cache/hetrain", home);
}

void ocl_cache_dir(char *out, size_t cap) {
    pthread_mutex_lock(&rt_lock);
    resolve_cache_dir(out, cap);
    pthread_mutex_unlock(&rt_lock);
}

int ocl_builds_from_source(void) {
    pthread_mutex_lock(&rt_lock);
    int n = n_from_source;
    pthread_mutex_unlock(&rt_lock);
    return n;
}

int ocl_builds_from_cache(void) {
    pthread_mutex_lock(&rt_lock);
    int n = n_from_cache;
    pthread_mutex_unlock(&rt_lock);
    return n;
}

uint64_t ocl_hash(uint64_t h, const char *s) {
    // Each field ends with its NUL, so ("ab","c") and ("a","bc") hash differently.
    for (;; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
        if (!*s) return h;
    }
}

void ocl_cache_file(char *out, size_t cap, const char *dir, const ocl_dev_info *dev, uint64_t h,
                    const char *ext) {
    char name[65];
    size_t n = 0;
    for (const char *s = dev->name; *s && n < sizeof name - 1; s++) {
        char c = *s;
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '_';
        if (keep) name[n++] = c;
        else if (n && name[n - 1] != '_') name[n++] = '_';
    }
    while (n && name[n - 1] == '_') n--;
    name[n] = 0;
    snprintf(out, cap, "%s/%s-%016llx%s", dir, n ? name : "device", (unsigned long long)h, ext);
}

// <dir>/<device name with [A-Za-z0-9._-] kept, other runs as one '_'>-<16 hex digits>.bin
static void cache_path(char *out, size_t cap, const char *dir, const ocl_dev_info *dev,
                       const char *src) {
    uint64_t h = OCL_HASH_INIT;
    h = ocl_hash(h, dev->platform_name);
    h = ocl_hash(h, dev->name);
    h = ocl_hash(h, dev->driver);
    h = ocl_hash(h, dev->version);
    h = ocl_hash(h, OCL_BUILD_OPTIONS);
    h = ocl_hash(h, src);
    ocl_cache_file(out, cap, dir, dev, h, ".bin");
}

// Stores the built program's binary at path, atomically (temp file + rename). Failures only
// mean no caching, so they are ignored.
static void cache_store(cl_program prog, const char *dir, const char *path) {
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0)
        return;
    unsigned char *bin = malloc(size);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        ht_mkdirs(dir, NULL); // best effort: a failure shows when the file cannot be written
        char tmp[PATH_MAX + 16];
        snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
        int fd = mkstemp(tmp);
        if (fd >= 0) {
            fchmod(fd, 0644); // mkstemp makes it 0600; the binary is no secret
            FILE *f = fdopen(fd, "wb");
            int ok = f && fwrite(bin, 1, size, f) == size;
            if (f) ok &= fclose(f) == 0;
            else close(fd);
            if (!ok || rename(tmp, path) < 0) unlink(tmp);
        }
    }
    free(bin);
}

// The build log's first lines, blank lines dropped, joined by " | ", at most cap-1 chars.
static void build_log(cl_program prog, cl_device_id dev, char *out, size_t cap) {
    size_t n = 0;
    snprintf(out, cap, "(empty)");
    if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS || !n)
        return;
    char *log = malloc(n + 1);
    if (!log) return;
    if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) == CL_SUCCESS) {
        log[n] = 0;
        size_t o = 0;
        char *save = NULL;
        for (char *line = strtok_r(log, "\r\n", &save); line;
             line = strtok_r(NULL, "\r\n", &save)) {
            while (*line == ' ' || *line == '\t') line++;
            if (!*line) continue;
            int w = snprintf(out + o, cap - o, "%s%s", o ? " | " : "", line);
            if (w < 0 || (size_t)w >= cap - o) {
                if (cap > 4) memcpy(out + cap - 4, "...", 4);
                break;
            }
            o += (size_t)w;
        }
    }
    free(log);
}

static int build_from_source(const ocl_dev_info *dev, cl_context ctx, const char *src,
                             cl_program *prog, ht_error *e) {
    cl_int err;
    char label[160];
    snprintf(label, sizeof label, "%s (%.100s)", dev->spec, dev->name);
    *prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (err != CL_SUCCESS) return ocl_fail(e, "clCreateProgramWithSource", err, label);
    err = clBuildProgram(*prog, 1, &dev->device, OCL_BUILD_OPTIONS, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[300];
        build_log(*prog, dev->device, log, sizeof log);
        clReleaseProgram(*prog);
        *prog = NULL;
        return ht_fail(e, "building the OpenCL kernels for %s: clBuildProgram: %s; build log: %s",
                       label, ocl_error_name(err), log);
    }
    return 0;
}

// Loads a cached binary and builds it; 0 on success, -1 when there is none or it does not load.
static int build_from_cache(const ocl_dev_info *dev, cl_context ctx, const char *path,
                            cl_program *prog) {
    size_t len;
    char *bin = read_all(path, &len);
    if (!bin) return -1;
    const unsigned char *bins[1] = {(const unsigned char *)bin};
    cl_int status = CL_SUCCESS, err;
    *prog = clCreateProgramWithBinary(ctx, 1, &dev->device, &len, bins, &status, &err);
    free(bin);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (*prog) clReleaseProgram(*prog);
        *prog = NULL;
        return -1;
    }
    if (clBuildProgram(*prog, 1, &dev->device, OCL_BUILD_OPTIONS, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(*prog);
        *prog = NULL;
        return -1;
    }
    return 0;
}

// Creates the device's context and program (cache first, then source). dir "" means no cache.
static int build_runtime(const ocl_dev_info *dev, const char *dir, cl_context *ctx,
                         cl_program *prog, int *from_cache, ht_error *e) {
    cl_int err;
    char label[160];
    snprintf(label, sizeof label, "%s (%.100s)", dev->spec, dev->name);
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
    *ctx = clCreateContext(props, 1, &dev->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) return ocl_fail(e, "clCreateContext", err, label);
    char *src = ocl_kernel_source(NULL, 0, e);
    if (src) src = with_prelude(src, e);
    if (!src) {
        clReleaseContext(*ctx);
        return -1;
    }
    char path[PATH_MAX + 128] = "";
    if (*dir) cache_path(path, sizeof path, dir, dev, src);
    *from_cache = *path && build_from_cache(dev, *ctx, path, prog) == 0;
    if (!*from_cache) {
        if (build_from_source(dev, *ctx, src, prog, e) < 0) {
            free(src);
            clReleaseContext(*ctx);
            return -1;
        }
        if (*path) cache_store(*prog, dir, path);
    }
    free(src);
    return 0;
}

int ocl_device_runtime(const ocl_dev_info *dev, cl_context *ctx, cl_program *prog, int *from_cache,
                      ht_error *e) {
    pthread_mutex_lock(&rt_lock);
    rt_node *nd;
    for (;;) {
        for (nd = rt_head; nd && nd->device != dev->device; nd = nd->next) {}
        if (!nd || nd->ready) break;
        pthread_cond_wait(&rt_built, &rt_lock); // another thread is building this device's
    }
    if (nd) {
        *ctx = nd->ctx;
        *prog = nd->prog;
        if (from_cache) *from_cache = nd->from_cache;
        pthread_mutex_unlock(&rt_lock);
        return 0;
    }
    if (!(nd = calloc(1, sizeof *nd))) {
        pthread_mutex_unlock(&rt_lock);
        return ht_fail(e, "out of memory opening %s", dev->spec);
    }
    nd->device = dev->device;
    nd->next = rt_head;
    rt_head = nd;
    char dir[PATH_MAX];
    resolve_cache_dir(dir, sizeof dir);
    pthread_mutex_unlock(&rt_lock);

    // Built without the lock, so that several devices compile at the same time.
    cl_context c = NULL;
    cl_program p = NULL;
    int fc = 0;
    int rc = build_runtime(dev, dir, &c, &p, &fc, e);

    pthread_mutex_lock(&rt_lock);
    if (rc < 0) {
        rt_node **pp = &rt_head;
        while (*pp != nd) pp = &(*pp)->next;
        *pp = nd->next;
        free(nd);
    } else {
        nd->ctx = c;
        nd->prog = p;
        nd->from_cache = fc;
        nd->ready = 1;
        if (fc) n_from_cache++;
        else n_from_source++;
        *ctx = c;
        *prog = p;
        if (from_cache) *from_cache = fc;
    }
    pthread_cond_broadcast(&rt_built);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

void ocl_runtime_release_all(void) {
    pthread_mutex_lock(&rt_lock);
    rt_node **pp = &rt_head;
    while (*pp) {
        rt_node *nd = *pp;
        if (!nd->ready) { // still being built by another thread: leave it to that thread
            pp = &nd->next;
            continue;
        }
        *pp = nd->next;
        clReleaseProgram(nd->prog);
        clReleaseContext(nd->ctx);
        free(nd);
    }
    pthread_mutex_unlock(&rt_lock);
}
