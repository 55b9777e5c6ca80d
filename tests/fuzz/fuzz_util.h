// Helpers for the libFuzzer harnesses: loaders that only take a path get the input through a
// per-process temporary file under $TMPDIR (default /tmp), removed at exit.
#ifndef HETRAIN_FUZZ_UTIL_H
#define HETRAIN_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define FUZZ_MAX_TMP 4

static char fuzz_tmp_paths[FUZZ_MAX_TMP][512];

static void fuzz_remove_tmp(void) {
    for (int i = 0; i < FUZZ_MAX_TMP; i++)
        if (fuzz_tmp_paths[i][0]) unlink(fuzz_tmp_paths[i]);
}

// The path of temporary file `slot` (0..FUZZ_MAX_TMP-1), named <pid>-<name>.
static inline const char *fuzz_tmp_path(int slot, const char *name) {
    char *p = fuzz_tmp_paths[slot];
    if (!p[0]) {
        static int registered;
        if (!registered) atexit(fuzz_remove_tmp);
        registered = 1;
        const char *dir = getenv("TMPDIR");
        snprintf(p, sizeof fuzz_tmp_paths[slot], "%s/hetrain-fuzz-%ld-%s",
                 dir && *dir ? dir : "/tmp", (long)getpid(), name);
    }
    return p;
}

// Writes data to temporary file `slot`, replacing it; returns its path.
static inline const char *fuzz_write_tmp(int slot, const char *name, const uint8_t *data,
                                         size_t size) {
    const char *path = fuzz_tmp_path(slot, name);
    // A new file each time: truncating one makes ext4 write the old contents out first.
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    while (size > 0) {
        ssize_t w = write(fd, data, size);
        if (w <= 0) {
            perror(path);
            abort();
        }
        data += w;
        size -= (size_t)w;
    }
    close(fd);
    return path;
}

// Like fuzz_write_tmp, but gzip-compressed, less the last `cut` bytes of the gzip stream.
static inline const char *fuzz_write_tmp_gz(int slot, const char *name, const uint8_t *data,
                                            size_t size, size_t cut) {
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    size_t cap = deflateBound(&z, (uLong)size) + 32;
    uint8_t *out = malloc(cap);
    if (!out) abort();
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    size_t n = z.total_out;
    deflateEnd(&z);
    const char *path = fuzz_write_tmp(slot, name, out, cut < n ? n - cut : 0);
    free(out);
    return path;
}

// A NUL-terminated copy of the input (the caller frees it).
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif
