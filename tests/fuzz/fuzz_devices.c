// Fuzzes the --devices grammar without opening devices: every comma-separated item through
// device_parse_item (as device_open_list splits them), and the whole input through
// device_parse_bytes (the --mem-limit parser).
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/device.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    int64_t b = device_parse_bytes(s);
    if (b == 0 || b < -1) abort();
    char *save = NULL;
    for (char *item = strtok_r(s, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item)) item++;
        device_item it;
        ht_error e;
        if (device_parse_item(item, &it, &e) < 0) continue;
        if (strlen(it.name) >= sizeof it.name || !(it.capacity > 0 && it.capacity <= 1e6) ||
            it.mem == 0 || it.mem < -1 || it.threads < 0 || it.threads > 1024)
            abort();
        if (!it.kind || it.platform < 0 || it.platform > 1000 || it.dev < 0 || it.dev > 1000)
            abort();
    }
    free(s);
    return 0;
}
