// Fuzzes the HETRAIN_FAULT grammar (fault_plan_parse) and matching against the parsed plan.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/fault.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    fault_plan p;
    ht_error e;
    if (fault_plan_parse(&p, s, &e) == 0) {
        if (p.n < 0 || p.n > FAULT_MAX) abort();
        for (int i = 0; i < p.n; i++) {
            size_t n = strnlen(p.f[i].spec, sizeof p.f[i].spec);
            if (n == 0 || n == sizeof p.f[i].spec || p.f[i].step < 0) abort();
            if (p.f[i].step == 0 && p.f[i].kind != FAULT_CORRUPT) abort();
            if (!fault_planned(&p, p.f[i].kind, p.f[i].spec, p.f[i].step ? p.f[i].step : 1)) abort();
        }
    }
    free(s);
    return 0;
}
