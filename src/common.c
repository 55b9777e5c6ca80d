// Error formatting, checked allocation and the clock.
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

double ht_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
