// Fuzzes the results-CSV reader (run_csv_load) and 'hetrain compare' over what it reads.
// Input: file A, optionally followed by "\n#B\n" and file B; compare gets A and B (A twice
// without a B).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/report/compare.h"
#include "tests/fuzz/fuzz_util.h"
#include "app/report/runcsv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    const uint8_t *sep = NULL;
    for (size_t i = 0; !sep && i + 4 <= size; i++)
        if (!memcmp(data + i, "\n#B\n", 4)) sep = data + i;
    size_t alen = sep ? (size_t)(sep - data) : size;
    char *paths[2];
    paths[0] = (char *)fuzz_write_tmp(0, "a.metrics.csv", data, alen);
    paths[1] = sep ? (char *)fuzz_write_tmp(1, "b.metrics.csv", sep + 4, size - alen - 4) : paths[0];
    run_csv r;
    ht_error e;
    if (run_csv_load(&r, paths[0], &e) == 0) {
        if (r.n_rows < 1) abort();
        for (int i = 1; i < r.n_rows; i++)
            if (r.kind == RUN_CSV_METRICS ? r.epoch[i - 1] >= r.epoch[i]
                                          : r.image_id[i - 1] >= r.image_id[i])
                abort();
        for (int m = 0; m < RUN_METRIC_COUNT; m++) (void)run_csv_has(&r, (run_metric)m);
        if (r.kind == RUN_CSV_METRICS && run_csv_find_epoch(&r, r.epoch[r.n_rows - 1]) != r.n_rows - 1)
            abort();
        run_csv_free(&r);
    }
    int verdict;
    (void)compare_run(devnull, 2, paths, 0.01, &verdict, &e);
    return 0;
}
