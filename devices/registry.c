// Device registry: parses --devices specs and opens each device through its implementation.
//   spec  := item (',' item)*
//   item  := 'cpu' [':' THREADS] ['@' WEIGHT]
#include <ctype.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

#define DEVICE_MAX 64

// Parses "@W" at *s (if present) into *weight; returns -1 on a malformed weight.
static int parse_weight(const char *s, double *weight) {
    if (*s == 0) return 0;
    if (*s != '@') return -1;
    char *end;
    errno = 0;
    double w = strtod(s + 1, &end);
    if (errno || end == s + 1 || *end || !(w > 0) || w > 1e6) return -1;
    *weight = w;
    return 0;
}

static int open_one(device *d, const char *item, const model *m, int max_batch, ht_error *e) {
    char name[64];
    size_t len = strcspn(item, "@");
    if (len >= sizeof name) return ht_fail(e, "--devices: \"%s\" is too long", item);
    memcpy(name, item, len);
    name[len] = 0;
    double weight = 1.0;
    if (parse_weight(item + len, &weight) < 0)
        return ht_fail(e, "--devices: \"%s\": expected a weight after '@' (a number > 0), found \"%s\"",
                       item, item + len + (item[len] == '@'));
    if (strcmp(name, "cpu") == 0 || strncmp(name, "cpu:", 4) == 0) {
        int threads = omp_get_num_procs();
        if (name[3] == ':') {
            char *end;
            errno = 0;
            long t = strtol(name + 4, &end, 10);
            if (errno || end == name + 4 || *end || t < 1 || t > 1024)
                return ht_fail(e, "--devices: \"%s\": expected cpu:THREADS with THREADS 1..1024",
                               item);
            threads = (int)t;
        }
        if (cpu_device_open(d, m, threads, max_batch, e) < 0) return ht_wrap(e, "device %s", name);
        snprintf(d->spec, sizeof d->spec, "%s", name);
        d->weight = weight;
        return 0;
    }
    return ht_fail(e, "--devices: unknown device \"%s\" (known: cpu, cpu:THREADS; add @WEIGHT "
                      "for a capacity weight)", name);
}

int device_open_list(device **devs, int *n, const char *specs, const model *m, int max_batch,
                     ht_error *e) {
    *devs = NULL;
    *n = 0;
    if (!specs || !*specs) return ht_fail(e, "--devices: empty device list");
    device *list = ht_calloc(DEVICE_MAX, sizeof *list, e);
    if (!list) return -1;
    char *copy = strdup(specs);
    int count = 0, rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item)) item++;
        if (count == DEVICE_MAX) {
            rc = ht_fail(e, "--devices: more than %d devices", DEVICE_MAX);
            break;
        }
        if ((rc = open_one(&list[count], item, m, max_batch, e)) < 0) break;
        count++;
    }
    free(copy);
    if (rc == 0 && count == 0) rc = ht_fail(e, "--devices: empty device list \"%s\"", specs);
    if (rc < 0) {
        device_close_list(list, count);
        return -1;
    }
    *devs = list;
    *n = count;
    return 0;
}

void device_close_list(device *devs, int n) {
    for (int i = 0; i < n; i++)
        if (devs[i].ops && devs[i].ops->close) devs[i].ops->close(devs[i].ctx);
    free(devs);
}
