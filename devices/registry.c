// Device registry: parses --devices specs and opens each device through its kind (the table of
// device_kind.h, kinds.c), and runs `hetrain devices` and `hetrain tune` over the kinds.
//   spec  := item (',' item)*
//   item  := ('cpu' [':' THREADS] | 'cl:' P '.' D | 'cl:all' | 'gpu') ['@' WEIGHT] [':mem=' SIZE]
//   'auto' (the default) := every OpenCL GPU, plus 'cpu'
// cl:all opens every OpenCL device, gpu every OpenCL GPU; each gets the item's capacity. A plain
// 'cpu' worker takes the cores nobody else claims: all cores, less the threads of cpu:N
// workers and one core to drive each OpenCL GPU, shared among the plain 'cpu' items. The
// registry knows no kind by name: each kind parses its own items (cpu_kind.c, ocl_kind.c).
#include <ctype.h>
#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ht_omp.h"
#include "devices/device.h"
#include "devices/device_kind.h"


// Parses "@W" at *s (if present) into *capacity; returns -1 on a malformed one.
static int parse_capacity(const char *s, double *capacity) {
    if (*s == 0) return 0;
    if (*s != '@') return -1;
    char *end;
    errno = 0;
    double w = strtod(s + 1, &end);
    if (errno || end == s + 1 || *end || !(w > 0) || w > 1e6) return -1;
    *capacity = w;
    return 0;
}

int64_t device_parse_bytes(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return -1;
    double unit = 1;
    switch (*end) {
    case 'K': case 'k': unit = 1024.0; end++; break;
    case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
    case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') end += *end == 'i' && end[1] == 'B' ? 2 : 1;
    if (*end || v * unit > 9e18 || v * unit < 1) return -1;
    return (int64_t)(v * unit);
}

// Threads for each plain 'cpu' item of specs (see the grammar above): each item claims the
// cores its kind says (device_kind.cores), the plain 'cpu' items share the rest.
static int plain_cpu_threads(const char *specs) {
    int cores = omp_get_num_procs(), claimed = 0, plain = 0;
    char *copy = strdup(specs), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item)) item++;
        // A malformed item fails the whole list when it is opened; it claims nothing here.
        device_item it;
        if (device_parse_item(item, &it, NULL) < 0 || !it.kind->cores) continue;
        int c = it.kind->cores(&it);
        if (c < 0) plain++;
        else if (claimed < cores) claimed += c; // no int overflow on long lists
    }
    free(copy);
    int free_cores = cores - claimed;
    int t = plain ? free_cores / plain : 0;
    return t < 1 ? 1 : t;
}

// "auto": what each kind opens by itself, the kinds that take what is left (a plain cpu
// worker) last; NULL with e (malloc'd spec string).
static char *expand_auto(ht_error *e) {
    device_entry *ent = ht_calloc(HT_MAX_DEVICES, sizeof *ent, e);
    if (!ent) return NULL;
    int n = 0;
    for (int last = 0; last < 2; last++)
        for (const device_kind *const *k = device_kinds; *k; k++)
            if ((*k)->enumerate && (*k)->auto_last == last &&
                (*k)->enumerate(ent, &n, HT_MAX_DEVICES, e) < 0) {
                free(ent);
                return NULL;
            }
    size_t cap = 1 + (size_t)n * sizeof ent->spec, len = 0;
    char *s = malloc(cap);
    if (s) {
        s[0] = 0;
        for (int i = 0; i < n; i++)
            len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? "," : "", ent[i].spec);
    } else {
        ht_fail(e, "out of memory");
    }
    free(ent);
    return s;
}

int device_parse_item(const char *item, device_item *it, ht_error *e) {
    memset(it, 0, sizeof *it);
    char rest[64];
    size_t len = strcspn(item, "@");
    const char *memopt = strstr(item, ":mem=");
    if (memopt && (size_t)(memopt - item) < len) len = (size_t)(memopt - item);
    if (len >= sizeof it->name) return ht_fail(e, "--devices: \"%s\" is too long", item);
    memcpy(it->name, item, len);
    it->name[len] = 0;
    // What follows the name: "@W", ":mem=SIZE", or "@W:mem=SIZE".
    size_t wlen = memopt ? (size_t)(memopt - item) - len : strlen(item + len);
    if (wlen >= sizeof rest) return ht_fail(e, "--devices: \"%s\" is too long", item);
    memcpy(rest, item + len, wlen);
    rest[wlen] = 0;
    it->capacity = 1.0;
    if (parse_capacity(rest, &it->capacity) < 0)
        return ht_fail(e, "--devices: \"%s\": expected a capacity after '@' (a number > 0), found \"%s\"",
                       item, rest + (rest[0] == '@'));
    it->mem = -1;
    if (memopt) {
        it->mem = device_parse_bytes(memopt + 5);
        if (it->mem < 0)
            return ht_fail(e, "--devices: \"%s\": expected mem=SIZE like 256M or 2G, found \"%s\"",
                           item, memopt + 5);
    }
    for (const device_kind *const *k = device_kinds; *k; k++) {
        int r = (*k)->parse(item, it, e);
        if (r < 0) return -1;
        if (r > 0) {
            it->kind = *k;
            return 0;
        }
    }
    char known[256] = "";
    size_t kl = 0;
    for (const device_kind *const *k = device_kinds; *k && kl < sizeof known; k++)
        kl += (size_t)snprintf(known + kl, sizeof known - kl, "%s%s", kl ? ", " : "",
                                (*k)->grammar);
    return ht_fail(e, "--devices: unknown device \"%s\" (known: %s; add @W for a capacity)",
                   it->name, known);
}

static int open_one(device *list, int *count, const char *item, int plain_threads,
                    const model *m, int max_batch, uint64_t mem_default, ht_error *e) {
    device_item it;
    if (device_parse_item(item, &it, e) < 0) return -1;
    const device_kind *k = it.kind;
    for (int l = 0; k->supports && l < m->n_layers; l++)
        if (!k->supports(&m->layers[l]))
            return ht_fail(e, "--devices: %s: a %s device cannot run layer %d (%s, %s) of %s",
                           it.name, k->name, l + 1, m->layers[l].name,
                           model_kind_name(m->layers[l].kind), m->name);
    device_open_req r = {.item = item, .m = m, .max_batch = max_batch,
                         .mem = it.mem >= 0 ? (uint64_t)it.mem : mem_default,
                         .plain_threads = plain_threads};
    return k->open(list, count, &it, &r, e);
}

int device_open_list(device **devs, int *n, const char *specs, const model *m, int max_batch,
                     uint64_t mem_limit, ht_error *e) {
    *devs = NULL;
    *n = 0;
    if (specs && !*specs) return ht_fail(e, "--devices: empty device list");
    char *copy = !specs || !strcmp(specs, "auto") ? expand_auto(e) : strdup(specs);
    if (!copy) return -1;
    int plain_threads = plain_cpu_threads(copy);
    device *list = ht_calloc(HT_MAX_DEVICES, sizeof *list, e);
    if (!list) {
        free(copy);
        return -1;
    }
    int count = 0, rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item)) item++;
        if ((rc = open_one(list, &count, item, plain_threads, m, max_batch, mem_limit, e)) < 0)
            break;
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

void device_disown(device *d) {
    d->ops = NULL;
    d->ctx = NULL;
}

// The listing as an aligned table, then the kinds' notes.
static void print_table(FILE *f, const device_listing *l, const char *notes) {
    static const char *head[DEVICE_NCOL] = {"SPEC",   "TYPE",   "VENDOR",    "NAME",     "UNITS",
                                            "CLOCK",  "MEMORY", "MAX ALLOC", "OPENCL C", "TUNED"};
    int width[DEVICE_NCOL];
    for (int c = 0; c < DEVICE_NCOL; c++) width[c] = (int)strlen(head[c]);
    for (int r = 0; r < l->n; r++)
        for (int c = 0; c < DEVICE_NCOL; c++) {
            int w = (int)strlen(l->rows[r].cell[c]);
            if (w > width[c]) width[c] = w;
        }
    for (int r = -1; r < l->n; r++) {
        for (int c = 0; c < DEVICE_NCOL; c++) {
            const char *cell = r < 0 ? head[c] : l->rows[r].cell[c];
            int right = c == DEVICE_COL_UNITS || c == DEVICE_COL_CLOCK || c == DEVICE_COL_MEM ||
                        c == DEVICE_COL_ALLOC;
            if (c == DEVICE_NCOL - 1) fprintf(f, "%s\n", cell);
            else fprintf(f, right ? "%*s  " : "%-*s  ", width[c], cell);
        }
    }
    fputs(notes, f);
}

// {"devices": [the rows], then the kinds' members ("opencl_platforms")}.
static int print_json(FILE *f, device_listing *l) {
    json_object *root = json_object_new_object(), *list = json_object_new_array();
    if (!root || !list) {
        json_object_put(root);
        json_object_put(list);
        return -1;
    }
    for (int r = 0; r < l->n; r++) {
        json_object_array_add(list, l->rows[r].json);
        l->rows[r].json = NULL;
    }
    json_object_object_add(root, "devices", list);
    json_object_object_foreach(l->extra, key, val) json_object_object_add(root, key, json_object_get(val));
    fprintf(f, "%s\n",
            json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return 0;
}

int device_print_list(FILE *f, int json, ht_error *e) {
    char *notes = NULL;
    size_t notes_len = 0;
    device_listing l = {.notes = open_memstream(&notes, &notes_len),
                        .extra = json_object_new_object()};
    int rc = l.notes && l.extra ? 0 : ht_fail(e, "out of memory listing devices");
    for (const device_kind *const *k = device_kinds; rc == 0 && *k; k++)
        if ((*k)->describe) rc = (*k)->describe(&l, e);
    if (l.notes) fclose(l.notes);
    if (rc == 0 && !notes) rc = ht_fail(e, "out of memory listing devices");
    if (rc == 0 && json && print_json(f, &l) < 0) rc = ht_fail(e, "out of memory listing devices");
    if (rc == 0 && !json) print_table(f, &l, notes);
    for (int r = 0; r < l.n; r++) json_object_put(l.rows[r].json);
    free(l.rows);
    json_object_put(l.extra);
    free(notes);
    return rc;
}

int device_tune(const char *spec, const model *m, int batch, uint64_t mem_limit, double budget_s,
                int quiet) {
    char *copy = strdup(spec);
    device_item *items = calloc(strlen(spec) / 2 + 1, sizeof *items); // an item and its comma
    int n = 0, rc = 0;
    if (!copy || !items) {
        fprintf(stderr, "hetrain: out of memory\n");
        rc = 1;
    }
    char *save = NULL;
    for (char *item = rc ? NULL : strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        ht_error e;
        if (device_parse_item(item, &items[n], &e) < 0) {
            fprintf(stderr, "hetrain tune: --devices: %s (see 'hetrain tune --help')\n", e.msg);
            rc = 2;
            break;
        }
        const device_kind *k = items[n].kind;
        if (!k->tune) printf("%s: %s: nothing to tune\n", items[n].name, k->tune_none);
        else n++;
    }
    // Each kind that tunes gets its items, in the list's order.
    device_item *mine = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *mine);
    if (!rc && !mine) {
        fprintf(stderr, "hetrain: out of memory\n");
        rc = 1;
    }
    device_tune_opts o = {m, batch, mem_limit, budget_s, quiet ? NULL : stdout};
    for (const device_kind *const *k = device_kinds; mine && rc != 2 && *k; k++) {
        if (!(*k)->tune) continue;
        int nk = 0;
        for (int i = 0; i < n; i++)
            if (items[i].kind == *k) mine[nk++] = items[i];
        ht_error e;
        int r = (*k)->tune(mine, nk, &o, &e);
        if (r < 0) {
            fprintf(stderr, "hetrain tune: %s\n", e.msg);
            rc = 2;
        } else if (r > 0) {
            rc = 1;
        }
    }
    free(mine);
    free(items);
    free(copy);
    return rc;
}

void device_set_cache_dir(const char *dir) {
    for (const device_kind *const *k = device_kinds; *k; k++)
        if ((*k)->set_cache_dir) (*k)->set_cache_dir(dir);
}

void device_cache_dir(char *out, size_t cap) {
    if (cap) out[0] = 0;
    for (const device_kind *const *k = device_kinds; *k && !(cap && out[0]); k++)
        if ((*k)->cache_dir) (*k)->cache_dir(out, cap);
}

void device_release_all(void) {
    for (const device_kind *const *k = device_kinds; *k; k++)
        if ((*k)->release) (*k)->release();
}

void device_print_about(FILE *f) {
    for (const device_kind *const *k = device_kinds; *k; k++)
        if ((*k)->about) (*k)->about(f);
}
