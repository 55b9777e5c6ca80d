// Fuzzes the tuning file's parser (devices/ocl_tune.h: ocl_tuning_parse) without a device: the
// input is the file's text, read for a device named "fuzz device" on "fuzz platform", driver
// "fuzz 1", this build's CLBlast, with CLBlast 1.5's parameter names and a device's limits. What
// it accepts must keep CLBlast's rules and write back to text that reads the same.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/ocl_tune.h"

static void identity(ocl_tuning *t) {
    ocl_tuning_init(t, NULL);
    snprintf(t->device, sizeof t->device, "fuzz device");
    snprintf(t->platform, sizeof t->platform, "fuzz platform");
    snprintf(t->driver, sizeof t->driver, "fuzz 1");
    snprintf(t->version, sizeof t->version, "OpenCL 1.2 fuzz");
    snprintf(t->clblast, sizeof t->clblast, "%s", HT_CLBLAST_VERSION);
}

static void names(ocl_kparams *p, const char *const *n, const size_t *v, int k) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < k; i++) ocl_kparam_set(p, n[i], v[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *dn[] = {"KWID", "MDIMAD", "MDIMCD", "NDIMBD", "NDIMCD",
                               "PADA", "PADB",   "VWMD",   "VWND",   "WGD"};
    static const size_t dv[] = {2, 8, 8, 8, 8, 1, 1, 4, 4, 32};
    static const char *in[] = {"GEMMK", "KREG", "KWG", "KWI",  "MDIMA", "MDIMC", "MWG", "NDIMB",
                               "NDIMC", "NWG",  "SA",  "SB",   "STRM",  "STRN",  "VWM", "VWN"};
    static const size_t iv[] = {0, 1, 32, 2, 16, 16, 64, 8, 8, 64, 0, 0, 0, 0, 4, 4};
    ocl_kparams own_d, own_i;
    names(&own_d, dn, dv, 10);
    names(&own_i, in, iv, 16);
    ocl_tuning t;
    identity(&t);
    char why[400];
    if (ocl_tuning_parse(&t, (const char *)data, size, &own_d, &own_i, 65536, 1024, why,
                         sizeof why) == 0) {
        for (int i = 0; i < t.n_gemm; i++) {
            const ocl_kparams *own = t.gemm[i].cfg.direct ? &own_d : &own_i;
            if (!ocl_gemm_cfg_valid(&t.gemm[i].cfg, own, 65536, 1024, why, sizeof why)) abort();
        }
        // Written and read again, it is the same.
        char path[64];
        snprintf(path, sizeof path, "/tmp/hetrain-fuzz-tuning-%d.json", (int)getpid());
        ht_error e;
        if (ocl_tuning_save(&t, path, &e) < 0) abort();
        FILE *f = fopen(path, "rb");
        static char text[1 << 22];
        size_t n = f ? fread(text, 1, sizeof text, f) : 0;
        if (f) fclose(f);
        unlink(path);
        ocl_tuning back;
        identity(&back);
        if (ocl_tuning_parse(&back, text, n, &own_d, &own_i, 65536, 1024, why, sizeof why) < 0 ||
            back.n_gemm != t.n_gemm || back.n_wg != t.n_wg || back.n_runs != t.n_runs)
            abort();
        for (int i = 0; i < t.n_gemm; i++)
            if (!ocl_gemm_cfg_equal(&back.gemm[i].cfg, &t.gemm[i].cfg)) abort();
        ocl_tuning_free(&back);
    } else if (t.n_gemm || t.n_wg || t.n_runs || !why[0]) {
        abort(); // refused: nothing kept, and a reason
    }
    ocl_tuning_free(&t);
    return 0;
}
