// --profile: the devices' own records of the training steps, and the steps' phases, as a
// table per device (printed and logged) and <out>/<name>.profile.csv.
#include "app/job.h"

#include "core/blas_core.h"
#include "nn/isa_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharding/span.h"

// --profile: every device that can empties its record and starts filling it, after the
// self-check and calibration, so the records hold the training steps alone.
int job_profile_start(job *j, ht_error *e) {
    for (int d = 0; d < j->n_devs; d++) {
        int rc = device_profile_start(&j->devs[d], e);
        if (rc < 0) return ht_wrap(e, "--profile: device %s", j->devs[d].spec);
        if (rc == 0) run_log(&j->rf, 0, "profile: device %s keeps no record of its own\n", j->devs[d].spec);
    }
    j->profiling = 1;
    memset(&j->prof_steps, 0, sizeof j->prof_steps);
    return 0;
}

// --profile, at the end of training: every device's table, printed (unless --quiet) and
// logged, and all of them as <out>/<name>.profile.csv. Over several ranks rank 0 writes its own
// devices' tables.
int job_profile_report(job *j, const train_opts *o, ht_error *e) {
    if (!j->profiling || j->prof_steps.steps == 0 || span_job().rank > 0) return 0;
    int L = j->m.n_layers, n = 0, rc = 0;
    device_profile *profs = ht_calloc((size_t)j->n_devs, sizeof *profs, e);
    const char **specs = ht_calloc((size_t)j->n_devs, sizeof *specs, e);
    char *text = NULL;
    size_t len = 0;
    FILE *f = profs && specs ? open_memstream(&text, &len) : NULL;
    if (!f) {
        free(profs);
        free(specs);
        return profs && specs ? ht_fail(e, "--profile: out of memory") : -1;
    }
    if (span_job().size > 1) fprintf(f, "profile: rank 0's devices only\n");
    char blas[256];
    blas_core_describe(blas, sizeof blas);
    fprintf(f, "CPU devices' GEMMs (dense layers, convolutions run as GEMMs): %s\n", blas);
    char isa[160];
    isa_kernels_describe(isa, sizeof isa);
    fprintf(f, "CPU devices' own convolution kernels: %s\n", isa);
    for (int d = 0; d < j->n_devs && rc == 0; d++) {
        device_profile *p = &profs[n];
        if (device_profile_init(p, L, e) < 0) {
            rc = -1;
            break;
        }
        if (engine_gave_up(j->g, d) || !device_profile_get(&j->devs[d], p)) {
            fprintf(f, "profile of %s: no record (the device keeps none, or stopped answering)\n",
                    j->devs[d].spec);
            device_profile_free(p);
            continue;
        }
        profile_table_write(f, &j->m, j->devs[d].spec, j->devs[d].name, p, &j->prof_steps);
        specs[n++] = j->devs[d].spec;
    }
    fclose(f);
    if (rc == 0) {
        run_log(&j->rf, !o->quiet, "%s", text);
        char path[1200];
        snprintf(path, sizeof path, "%s.profile.csv", j->rf.prefix);
        rc = profile_csv_write(path, &j->m, n, specs, profs, &j->prof_steps, e);
        if (rc == 0) run_log(&j->rf, !o->quiet, "profile: %s\n", path);
    }
    for (int d = 0; d < n; d++) device_profile_free(&profs[d]);
    free(profs);
    free(specs);
    free(text);
    return rc;
}
