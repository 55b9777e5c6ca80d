// Parsing and matching of HETRAIN_FAULT (see fault.h).
#include "fault.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    fault_kind kind;
} kinds[] = {{"fail", FAULT_FAIL}, {"oom", FAULT_OOM}, {"hang", FAULT_HANG},
             {"nan", FAULT_NAN},   {"corrupt", FAULT_CORRUPT}};

int fault_plan_parse(fault_plan *p, const char *text, ht_error *e) {
    memset(p, 0, sizeof *p);
    if (!text || !*text) return 0;
    char *copy = strdup(text), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (!colon || colon == item || !colon[1]) {
            rc = ht_fail(e, "HETRAIN_FAULT: \"%s\": expected KIND:DEVICE[@STEP]", item);
            break;
        }
        *colon = 0;
        if (p->n == FAULT_MAX) {
            rc = ht_fail(e, "HETRAIN_FAULT: more than %d faults", FAULT_MAX);
            break;
        }
        int k = -1;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (!strcmp(item, kinds[i].name)) k = (int)i;
        if (k < 0) {
            rc = ht_fail(e, "HETRAIN_FAULT: unknown fault \"%s\" (fail, oom, hang, nan, corrupt)", item);
            break;
        }
        char *spec = colon + 1, *at = strrchr(spec, '@');
        long step = kinds[k].kind == FAULT_CORRUPT ? 0 : 1;
        if (at) {
            *at = 0;
            char *end;
            errno = 0;
            step = strtol(at + 1, &end, 10);
            if (errno || end == at + 1 || *end || step < 1) {
                rc = ht_fail(e, "HETRAIN_FAULT: \"%s\": expected a step number >= 1 after '@'", at + 1);
                break;
            }
        }
        if (!*spec) {
            rc = ht_fail(e, "HETRAIN_FAULT: \"%s\" names no device: expected KIND:DEVICE[@STEP]",
                         item);
            break;
        }
        if (strlen(spec) >= sizeof p->f[0].spec) {
            rc = ht_fail(e, "HETRAIN_FAULT: device \"%s\" is too long", spec);
            break;
        }
        p->f[p->n].kind = kinds[k].kind;
        strcpy(p->f[p->n].spec, spec);
        p->f[p->n].step = step;
        p->n++;
    }
    free(copy);
    return rc;
}

int fault_planned(const fault_plan *p, fault_kind kind, const char *spec, long step) {
    for (int i = 0; i < p->n; i++)
        if (p->f[i].kind == kind && !strcmp(p->f[i].spec, spec) &&
            (p->f[i].step == 0 || p->f[i].step == step))
            return 1;
    return 0;
}
