// Fuzzes the option values that have grammars of their own: --augment (data_augment_parse),
// --optimizer (optimizer_parse), --lr-schedule (lr_schedule_parse) and --name
// (run_name_check). Input: a selector byte (mod 4, in that order), then the text. What parses
// must read back to itself from its canonical text; a refused --optimizer leaves the setup as
// it was.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "tests/fuzz/fuzz_util.h"
#include "nn/optim.h"
#include "app/report/results.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 4;
    char *s = fuzz_cstr(data + 1, size - 1);
    ht_error e;
    switch (which) {
    case 0: {
        data_augment a, b;
        char text[DATA_AUGMENT_TEXT];
        if (data_augment_parse(&a, s, &e) == 0) {
            if (a.crop < 0 || a.crop > DATA_AUGMENT_MAX_CROP || (a.flip != 0 && a.flip != 1)) abort();
            data_augment_text(&a, text, sizeof text);
            if (data_augment_parse(&b, text, &e) < 0 || memcmp(&a, &b, sizeof a)) abort();
        }
        break;
    }
    case 1: {
        train_setup t = {.optim = OPTIM_SGD, .lr = 0.5f, .momentum = 0.25f, .beta1 = 0.125f}, before = t;
        if (optimizer_parse(&t, s, &e) == 0) {
            if (!(t.lr > 0) || !isfinite(t.lr) || !(t.decay >= 0)) abort();
        } else if (memcmp(&t, &before, sizeof t)) {
            abort(); // a refused spec leaves the setup untouched
        }
        break;
    }
    case 2: {
        lr_schedule a, b;
        char text[64];
        if (lr_schedule_parse(&a, s, &e) == 0) {
            lr_schedule_text(&a, text, sizeof text);
            if (lr_schedule_parse(&b, text, &e) < 0 || memcmp(&a, &b, sizeof a)) abort();
            for (int ep = 0; ep < 3; ep++) {
                double f = lr_schedule_factor(&a, ep, ep * 10, 30);
                if (!(f >= 0 && f <= 1)) abort();
            }
        }
        break;
    }
    default:
        if (run_name_check(s, &e) == 0 && (!*s || strchr(s, '/'))) abort();
        break;
    }
    free(s);
    return 0;
}
