// The rows of `hetrain devices` as the kinds fill them (device_kind.h); registry.c prints them.
#include <stdlib.h>
#include <string.h>

#include "devices/device_kind.h"

device_row *device_listing_add(device_listing *l) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        device_row *rows = realloc(l->rows, (size_t)cap * sizeof *rows);
        if (!rows) return NULL;
        l->rows = rows;
        l->cap = cap;
    }
    device_row *r = &l->rows[l->n++];
    memset(r, 0, sizeof *r);
    return r;
}

void device_fmt_bytes(char *out, size_t cap, uint64_t b) {
    if (b == 0) snprintf(out, cap, "-");
    else if (b >= (1ULL << 30)) snprintf(out, cap, "%.1f GiB", (double)b / (1ULL << 30));
    else snprintf(out, cap, "%.0f MiB", (double)b / (1ULL << 20));
}
