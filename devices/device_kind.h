// A kind of device (the native CPU, OpenCL) as the registry sees it: its part of the --devices
// grammar, its devices, how it opens them, what it shows in `hetrain devices` and how it tunes.
// Each kind fills one struct in its own file; kinds.c lists them in device_kinds[].
#ifndef HETRAIN_DEVICE_KIND_H
#define HETRAIN_DEVICE_KIND_H

#include <stdint.h>
#include <stdio.h>

#include "core/common.h"
#include "devices/device.h"
#include "nn/model.h"

struct json_object;

// The columns of `hetrain devices`, the same for every kind ("-" where a kind has no value).
enum {
    DEVICE_COL_SPEC, DEVICE_COL_TYPE, DEVICE_COL_VENDOR, DEVICE_COL_NAME, DEVICE_COL_UNITS,
    DEVICE_COL_CLOCK, DEVICE_COL_MEM, DEVICE_COL_ALLOC, DEVICE_COL_C, DEVICE_COL_TUNED, DEVICE_NCOL
};

// One row of the listing: its cells, and the device as a JSON object for --json.
typedef struct device_row {
    char cell[DEVICE_NCOL][160];
    struct json_object *json;
} device_row;

// What `hetrain devices` shows, filled kind after kind in the table's order.
typedef struct device_listing {
    device_row *rows;
    int n, cap;
    FILE *notes;               // text printed after the table (memory stream)
    struct json_object *extra; // members of the JSON root after "devices"
} device_listing;

// A new, blank row at the end of l (cells ""); NULL when out of memory.
device_row *device_listing_add(device_listing *l);
// "23.5 GiB", "512 MiB", "-" for 0: the listing's memory cells.
void device_fmt_bytes(char *out, size_t cap, uint64_t b);

// A device that `auto` opens, in the order its kind lists it.
typedef struct device_entry {
    char spec[64];
} device_entry;

// What opening an item needs besides the item.
typedef struct device_open_req {
    const char *item;     // the item as the user wrote it, for messages
    const model *m;
    int max_batch;
    uint64_t mem;         // the item's limit, else --mem-limit's (0: none)
    int plain_threads;    // threads of a plain 'cpu' item (registry.c works them out)
} device_open_req;

// `hetrain tune`'s settings, for kinds that tune.
typedef struct device_tune_opts {
    const model *m;
    int batch;          // the shard to tune for
    uint64_t mem_limit; // as for training; 0: none
    double budget_s;    // seconds per device
    FILE *progress;     // progress lines; NULL for none
} device_tune_opts;

typedef struct device_kind {
    const char *name;     // "cpu", "OpenCL": in messages
    const char *grammar;  // its items for the "unknown device" message: "cpu, cpu:THREADS"
    // Takes an item's name (capacity and memory already split off into it) when it is this
    // kind's: 1 with it filled, 0 when the name is another kind's, -1 with e when it is this
    // kind's but malformed. `item` is the whole item, for messages.
    int (*parse)(const char *item, device_item *it, ht_error *e);
    // The devices `auto` opens of this kind, into out[*n...] (at most cap); -1 with e.
    int (*enumerate)(device_entry *out, int *n, int cap, ht_error *e);
    // auto lists this kind after the others (a plain cpu worker takes the cores left over).
    int auto_last;
    // Host cores an item claims: a worker's threads, a core to drive each GPU; -1: it takes
    // a share of the cores nobody claims (a plain 'cpu').
    int (*cores)(const device_item *it);
    // Opens the devices an item names at list[*count...] (HT_MAX_DEVICES in all), each with
    // the item's capacity; -1 with e.
    int (*open)(device *list, int *count, const device_item *it, const device_open_req *r,
                ht_error *e);
    // Adds this kind's rows, notes and JSON members to `hetrain devices`; -1 with e.
    int (*describe)(device_listing *l, ht_error *e);
    // `hetrain tune` for this kind's items of a --devices list (n may be 0: the kind says it
    // has nothing to tune). 0 done, 1 a device failed (said), -1 with e for a wrong item.
    // NULL: the kind has nothing to tune, and tune_none says why ("a native CPU worker").
    int (*tune)(const device_item *items, int n, const device_tune_opts *o, ht_error *e);
    const char *tune_none;
    // Whether the kind can run layer L (NULL: every layer). The registry refuses to open a
    // device for a model with a layer its kind cannot run.
    int (*supports)(const layer *L);
    // Optional: where the kind keeps its cache (NULL: the default), and that folder as it
    // resolves it; what it holds for the process, released before exit; its lines of
    // `hetrain version`.
    void (*set_cache_dir)(const char *dir);
    void (*cache_dir)(char *out, size_t cap);
    void (*release)(void);
    void (*about)(FILE *f);
} device_kind;

// The kinds, NULL-terminated, in the listing's order (kinds.c).
extern const device_kind *const *device_kinds;
// Makes the registry use another table (tests: a kind that cannot run a layer); NULL: the
// built-in one.
void device_kinds_use(const device_kind *const *table);

extern const device_kind device_kind_cpu;    // cpu_kind.c
extern const device_kind device_kind_opencl; // ocl_kind.c

#endif
