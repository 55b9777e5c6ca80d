// Micro-batch sizing shared by the devices (see micro.h).
#include "devices/micro.h"

#include <stdio.h>

static int fits(micro_bytes_fn bytes, const void *arg, int B, uint64_t budget) {
    size_t b = bytes(arg, B);
    return b != MICRO_NEVER && b <= budget;
}

int micro_fit(int most, uint64_t budget, micro_bytes_fn bytes, const void *arg) {
    int best = 0;
    for (int B = 1; B <= most; B = B < 8 ? B + 1 : B + B / 8) {
        if (!fits(bytes, arg, B, budget)) break;
        best = B;
    }
    // Refine between the last size that fitted and the next step.
    while (best > 0 && best < most && fits(bytes, arg, best + 1, budget)) best++;
    return best;
}

int micro_halve(int micro, const char *why, micro_realloc_fn realloc_for, void *arg, char *note,
                size_t note_len, ht_error *e) {
    int old = micro, tried = 0;
    for (;;) {
        if (micro <= 1) {
            // After a failed reallocation e says what did not fit; keep it.
            if (tried) ht_wrap(e, "%s even with a micro-batch of 1", why);
            else ht_fail(e, "%s even with a micro-batch of 1", why);
            return MICRO_OOM;
        }
        micro /= 2;
        tried = 1;
        int rc = realloc_for(arg, micro, e);
        if (rc == 0) break;
        if (rc != MICRO_OOM) return -1;
    }
    snprintf(note, note_len, "%s at micro-batch %d; now %d", why, old, micro);
    return micro;
}
