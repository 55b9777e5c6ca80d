// The table of device kinds: one row per kind, in the order `hetrain devices` lists them.
// Adding a kind is its own file (a struct device_kind, device_kind.h) and one row here.
#include <stddef.h>

#include "devices/device_kind.h"

static const device_kind *const builtin[] = {
    &device_kind_cpu,
    &device_kind_opencl,
    NULL,
};

const device_kind *const *device_kinds = builtin;

void device_kinds_use(const device_kind *const *table) {
    device_kinds = table ? table : builtin;
}
