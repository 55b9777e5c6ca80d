// The config reader's checks of a value (layer_desc.h), which the families' own key parsers
// share with it so that every message about a key reads the same. Calls nothing of hetrain's.
#include "nn/layer_desc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int layer_key_number(const layer_key_in *in, double lo, int lo_open, double hi, int hi_open,
                     float *out) {
    const char *v = in->value;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x) || (lo_open ? x <= lo : x < lo) ||
        (hi_open ? x >= hi : x > hi)) {
        snprintf(in->msg, in->cap, "[%s] %s: expected a number in %c%g, %g%c, found \"%.40s\"",
                 in->section, in->shown, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']', v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

int layer_key_choice(const layer_key_in *in, const char *const *names, int *out) {
    char list[160] = "";
    size_t len = 0;
    for (int i = 0; names[i]; i++) {
        if (!strcmp(in->value, names[i])) {
            *out = i;
            return 0;
        }
        if (len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? "|" : "", names[i]);
    }
    snprintf(in->msg, in->cap, "[%s] %s: expected %s, found \"%.40s\"", in->section, in->shown,
             list, in->value);
    return -1;
}
