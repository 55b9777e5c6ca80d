// Shared small things: the error record every library call fills, and helpers for it.
#ifndef HETRAIN_COMMON_H
#define HETRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define HT_VERSION "0.1.0"
#define HT_MAX_DEVICES 64 // devices in one run: --devices, the engine's per-device arrays

// A library call returns 0 on success and -1 on failure; on failure it has written one line
// into err->msg (no trailing newline) naming the file/line/sample and what was wrong.
typedef struct ht_error {
    char msg[512];
} ht_error;

// Formats into e->msg (if e is not NULL) and returns -1, so callers can `return ht_fail(...)`.
int ht_fail(ht_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Like ht_fail but prefixes what is already in e->msg: ht_wrap(e, "loading %s", path) gives
// "loading x: <old message>".
int ht_wrap(ht_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Checked allocation helpers: return NULL and fill err when the size overflows or malloc fails.
void *ht_malloc(size_t n, size_t size, ht_error *e);
void *ht_calloc(size_t n, size_t size, ht_error *e);

// Writes n bytes of s into out (cap > 4) so a message can quote them on one line: '"' and '\'
// escaped, NUL as \0, other bytes outside printable ASCII as \xNN; cut with "..." when it does
// not fit. Returns out.
char *ht_escape(char *out, size_t cap, const void *s, size_t n);

// Monotonic wall clock in seconds.
double ht_now(void);
// CPU time of the calling thread in seconds: what a short timing on a shared machine should
// count (time the thread spent waiting for a core is not its own).
double ht_thread_cpu(void);

// The folder of the running executable (/proc/self/exe's, resolved) into out; 0, or -1 where
// it cannot be read (out is then "").
int ht_exe_dir(char *out, size_t cap);

// Makes folder dir and every missing folder above it (mkdir -p); -1 with e naming the folder
// that could not be made, or a path there that is not a folder.
int ht_mkdirs(const char *dir, ht_error *e);

#endif
