// Error formatting, checked allocation, the clock, the executable's folder and mkdir -p.
#include "core/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ht_fail(ht_error *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ht_wrap(ht_error *e, const char *fmt, ...) {
    if (e) {
        char prefix[256], old[sizeof e->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, e->msg, sizeof old);
        // Prefix, then as much of the old message as fits (cut messages stay terminated).
        size_t n = strlen(prefix);
        if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
        memcpy(e->msg, prefix, n);
        memcpy(e->msg + n, ": ", 2);
        size_t rest = sizeof e->msg - n - 3, o = strnlen(old, sizeof old - 1);
        if (o > rest) o = rest;
        memcpy(e->msg + n + 2, old, o);
        e->msg[n + 2 + o] = 0;
    }
    return -1;
}

void *ht_malloc(size_t n, size_t size, ht_error *e) {
    if (size && n > SIZE_MAX / size) {
        ht_fail(e, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    size_t bytes = n * size;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ht_fail(e, "out of memory allocating %zu bytes", n * size);
    return p;
}

void *ht_calloc(size_t n, size_t size, ht_error *e) {
    if (size && n > SIZE_MAX / size) {
        ht_fail(e, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) ht_fail(e, "out of memory allocating %zu bytes", n * size);
    return p;
}

char *ht_escape(char *out, size_t cap, const void *s, size_t n) {
    const unsigned char *b = s;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char one[5];
        int m;
        if (b[i] == '"' || b[i] == '\\') m = snprintf(one, sizeof one, "\\%c", b[i]);
        else if (b[i] == 0) m = snprintf(one, sizeof one, "\\0");
        else if (b[i] < 0x20 || b[i] >= 0x7f) m = snprintf(one, sizeof one, "\\x%02x", b[i]);
        else m = snprintf(one, sizeof one, "%c", b[i]);
        if (k + (size_t)m + (i + 1 < n ? 4 : 1) > cap) { // room for "..." unless this is the last
            snprintf(out + k, cap - k, "...");
            return out;
        }
        memcpy(out + k, one, (size_t)m);
        k += (size_t)m;
    }
    out[k] = 0;
    return out;
}

double ht_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ht_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ht_exe_dir(char *out, size_t cap) {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (cap) out[0] = 0;
    if (len <= 0 || !cap) return -1;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, cap, "%s", exe);
    return 0;
}

int ht_mkdirs(const char *dir, ht_error *e) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return ht_fail(e, "%s: path too long", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return ht_fail(e, "%s: cannot create folder: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return ht_fail(e, "%s: cannot create folder: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode)) return ht_fail(e, "%s: not a folder", buf);
    return 0;
}
