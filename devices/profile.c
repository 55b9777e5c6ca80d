// The record a device keeps of its own work while profiling (device.h, --profile).
#include <stdlib.h>
#include <string.h>

#include "devices/device.h"

int device_profile_init(device_profile *p, int n_layers, ht_error *e) {
    memset(p, 0, sizeof *p);
    p->layer = ht_calloc(2 * (size_t)(n_layers > 0 ? n_layers : 1), sizeof *p->layer, e);
    if (!p->layer) return -1;
    p->n_layers = n_layers;
    return 0;
}

void device_profile_free(device_profile *p) {
    free(p->layer);
    memset(p, 0, sizeof *p);
}

void device_profile_clear(device_profile *p) {
    memset(p->layer, 0, 2 * (size_t)p->n_layers * sizeof *p->layer);
    memset(&p->rest, 0, sizeof p->rest);
    memset(&p->params, 0, sizeof p->params);
    p->shards = p->samples = 0;
}

void device_profile_copy(device_profile *dst, const device_profile *src) {
    int n = dst->n_layers < src->n_layers ? dst->n_layers : src->n_layers;
    memcpy(dst->layer, src->layer, 2 * (size_t)n * sizeof *dst->layer);
    dst->events = src->events;
    dst->rest = src->rest;
    dst->params = src->params;
    dst->shards = src->shards;
    dst->samples = src->samples;
}

int device_profile_start(device *d, ht_error *e) {
    if (!d->ops || !d->ops->profile_start || !d->ops->profile) return 0;
    return d->ops->profile_start(d->ctx, e);
}

int device_profile_get(const device *d, device_profile *out) {
    device_profile_clear(out);
    out->events = 0;
    if (!d->ops || !d->ops->profile) return 0;
    d->ops->profile(d->ctx, out);
    return 1;
}
