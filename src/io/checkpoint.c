// Checkpoints as safetensors files (stfile.c): the model's parameters, the caller's blobs and
// metadata (the layout is in checkpoint.h), replaced atomically, read back with every check.
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/stfile.h"

#define BLOB_NAME_MAX 63
#define OWN_KEYS 4 // format, hetrain_checkpoint, hetrain_model, hetrain_blobs


static int model_has(const model_tensor *ts, int nt, const char *name) {
    for (int i = 0; i < nt; i++)
        if (!strcmp(ts[i].name, name)) return 1;
    return 0;
}

// Blob names go into "hetrain_blobs" comma-separated, so they are kept plain.
static int blob_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > BLOB_NAME_MAX) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '.' || *p == '-'))
            return 0;
    return 1;
}

static int key_reserved(const char *k) {
    return !strcmp(k, "format") || !strncmp(k, "hetrain_", 8);
}

// ---- write ----

static int check_finite(const char *path, const char *name, const float *v, size_t n,
                        ht_error *e) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return ht_fail(e, "%s: not writing the checkpoint: tensor \"%s\" element %zu is %s (the "
                              "file could not be read back)", path, name, i,
                           isnan(v[i]) ? "NaN" : v[i] > 0 ? "+Inf" : "-Inf");
    return 0;
}

// The test hook (checkpoint.h): HETRAIN_CKPT_DIE_AFTER as a byte count, -1 when unset or empty.
static int die_after_of(const char *path, int64_t *out, ht_error *e) {
    const char *s = getenv("HETRAIN_CKPT_DIE_AFTER");
    *out = -1;
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno) {
        char q[48];
        return ht_fail(e, "%s: HETRAIN_CKPT_DIE_AFTER=\"%s\": expected a number of bytes", path,
                       ht_escape(q, sizeof q, s, strlen(s)));
    }
    *out = v;
    return 0;
}

// Removes "<name>.tmp.<pid>" files beside path whose process is gone: what a writer killed
// halfway left behind. Best effort; a file whose process may still be writing it stays.
static void remove_stale_tmp(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    DIR *d = dir ? opendir(dir) : NULL;
    size_t bl = strlen(base);
    for (struct dirent *de; d && (de = readdir(d));) {
        const char *s = de->d_name, *digits = s + bl + 5;
        if (strncmp(s, base, bl) || strncmp(s + bl, ".tmp.", 5) || *digits < '1' || *digits > '9')
            continue;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (*end || errno || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t n = strlen(dir) + strlen(s) + 2;
        char *stale = malloc(n);
        if (!stale) break;
        snprintf(stale, n, "%s/%s", dir, s);
        unlink(stale);
        free(stale);
    }
    if (d) closedir(d);
    free(dir);
}

int checkpoint_write(const char *path, const model *m, const float *params, const ckpt_blob *blobs,
                     int n_blobs, const char *const *meta_kv, int n_meta, ht_error *e) {
    const model_tensor *ts;
    int nt;
    if (safetensors_tensors(path, m, &ts, &nt, e)) return -1;
    if (n_blobs < 0 || n_meta < 0)
        return ht_fail(e, "%s: n_blobs %d, n_meta %d: counts cannot be negative", path,
                       n_blobs, n_meta);
    char q[96];
    size_t names_len = 1;
    for (int j = 0; j < n_blobs; j++) {
        const char *name = blobs[j].name ? blobs[j].name : "";
        if (!blob_name_ok(name))
            return ht_fail(e, "%s: blob name \"%s\": expected 1..%d of the characters A-Z a-z 0-9 "
                              "_ . -", path, ht_escape(q, sizeof q, name, strlen(name)),
                           BLOB_NAME_MAX);
        if (model_has(ts, nt, name))
            return ht_fail(e, "%s: blob \"%s\" has the name of a tensor of model %s", path, name,
                           m->name);
        for (int k = 0; k < j; k++)
            if (!strcmp(blobs[k].name, name))
                return ht_fail(e, "%s: blob \"%s\" given twice", path, name);
        if (!blobs[j].data && blobs[j].n)
            return ht_fail(e, "%s: blob \"%s\" has %zu values but no data", path, name, blobs[j].n);
        names_len += strlen(name) + 1;
    }
    for (int i = 0; i < n_meta; i++) {
        const char *k = meta_kv[2 * i], *v = meta_kv[2 * i + 1];
        if (!k || !v) return ht_fail(e, "%s: metadata pair %d has no %s", path, i, k ? "value" : "key");
        if (key_reserved(k))
            return ht_fail(e, "%s: metadata key \"%s\" is the checkpoint format's own (\"format\", "
                              "\"hetrain_*\")", path, ht_escape(q, sizeof q, k, strlen(k)));
        for (int j = 0; j < i; j++)
            if (!strcmp(meta_kv[2 * j], k))
                return ht_fail(e, "%s: metadata key \"%s\" given twice", path,
                               ht_escape(q, sizeof q, k, strlen(k)));
    }
    for (int i = 0; i < nt; i++)
        if (check_finite(path, ts[i].name, params + ts[i].off, ts[i].n, e)) return -1;
    for (int j = 0; j < n_blobs; j++)
        if (check_finite(path, blobs[j].name, blobs[j].data, blobs[j].n, e)) return -1;
    int64_t die_after;
    if (die_after_of(path, &die_after, e)) return -1;

    int rc = -1;
    stfile_tensor *st = ht_malloc((size_t)(nt + n_blobs) + 1, sizeof *st, e);
    uint64_t *lens = ht_malloc((size_t)n_blobs + 1, sizeof *lens, e);
    const char **meta = ht_malloc(2 * (size_t)(OWN_KEYS + n_meta), sizeof *meta, e);
    char *names = ht_malloc(names_len, 1, e);
    if (!st || !lens || !meta || !names) goto done;
    for (int i = 0; i < nt; i++)
        st[i] = (stfile_tensor){ts[i].name, ts[i].ndim, ts[i].shape, params + ts[i].off};
    names[0] = 0;
    size_t pos = 0;
    for (int j = 0; j < n_blobs; j++) {
        lens[j] = blobs[j].n;
        st[nt + j] = (stfile_tensor){blobs[j].name, 1, &lens[j], blobs[j].data};
        pos += (size_t)snprintf(names + pos, names_len - pos, "%s%s", j ? "," : "", blobs[j].name);
    }
    const char *own[2 * OWN_KEYS] = {"format", "pt", "hetrain_checkpoint", CHECKPOINT_VERSION,
                                     "hetrain_model", m->name, "hetrain_blobs", names};
    memcpy(meta, own, sizeof own);
    if (n_meta) memcpy(meta + 2 * OWN_KEYS, meta_kv, 2 * (size_t)n_meta * sizeof *meta);
    remove_stale_tmp(path);
    rc = stfile_write(path, st, nt + n_blobs, meta, OWN_KEYS + n_meta, die_after, e);
done:
    free(st);
    free(lens);
    free(meta);
    free(names);
    return rc;
}

// ---- read ----

void checkpoint_free(checkpoint *c) {
    for (int j = 0; j < c->n_blobs; j++) {
        free(c->blob_name[j]);
        free(c->blob[j]);
    }
    for (int i = 0; i < 2 * c->n_meta; i++) free(c->meta_kv[i]);
    free(c->blob_name);
    free(c->blob);
    free(c->blob_n);
    free(c->meta_kv);
    memset(c, 0, sizeof *c);
}

const char *checkpoint_meta(const checkpoint *c, const char *key) {
    for (int i = 0; i < c->n_meta; i++)
        if (!strcmp(c->meta_kv[2 * i], key)) return c->meta_kv[2 * i + 1];
    return NULL;
}

const float *checkpoint_blob(const checkpoint *c, const char *name, size_t *n) {
    for (int j = 0; j < c->n_blobs; j++)
        if (!strcmp(c->blob_name[j], name)) {
            *n = c->blob_n[j];
            return c->blob[j];
        }
    *n = 0;
    return NULL;
}

// Splits "hetrain_blobs" (in buf, which it cuts up) into names; checks each name.
static int split_blobs(const char *path, char *buf, char ***names, int *nb, ht_error *e) {
    int n = *buf ? 1 : 0;
    for (const char *p = buf; *p; p++) n += *p == ',';
    if (!(*names = ht_malloc((size_t)n + 1, sizeof **names, e))) return -1;
    *nb = 0;
    for (char *p = buf; n && p;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        char q[96];
        if (!blob_name_ok(p))
            return ht_fail(e, "%s: \"hetrain_blobs\" holds \"%s\", which is not a blob name", path,
                           ht_escape(q, sizeof q, p, strlen(p)));
        for (int k = 0; k < *nb; k++)
            if (!strcmp((*names)[k], p))
                return ht_fail(e, "%s: \"hetrain_blobs\" names \"%s\" twice", path, p);
        (*names)[(*nb)++] = p;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

// The header's entries for the model's tensors, by name and shape, then its other tensors: one
// that is not a listed blob belongs to another model. `fit` says whose checkpoint this is.
static int check_params(const stfile *sf, const model_tensor *ts, int nt, char **bn, int nb,
                        const char *fit, stfile_entry *ents, ht_error *e) {
    const char *path = sf->path;
    char a[200], b[200];
    for (int i = 0; i < nt; i++) {
        for (int j = 0; j < nb; j++)
            if (!strcmp(bn[j], ts[i].name))
                return ht_fail(e, "%s: %s: %s is a blob in the checkpoint but a tensor of the "
                                  "model", path, fit, ts[i].name);
        int got = stfile_entry_get(sf, ts[i].name, 0, NULL, &ents[i], e);
        if (got == 1)
            return ht_fail(e, "%s: %s: %s is in the model but not in the checkpoint", path, fit,
                           ts[i].name);
        if (got) return -1;
        int same = ents[i].ndim == ts[i].ndim;
        for (int d = 0; same && d < ts[i].ndim; d++) same = ents[i].shape[d] == ts[i].shape[d];
        if (!same) {
            stfile_fmt_shape(a, sizeof a, ents[i].shape, ents[i].ndim);
            stfile_fmt_shape(b, sizeof b, ts[i].shape, ts[i].ndim);
            return ht_fail(e, "%s: %s: %s is %s in the checkpoint but %s in the model", path, fit,
                           ts[i].name, a, b);
        }
        if (ents[i].dtype != STFILE_F32)
            return ht_fail(e, "%s: tensor \"%s\" is %s (a checkpoint holds F32 only)", path,
                           ts[i].name, stfile_dtype_names[ents[i].dtype]);
    }
    for (int k = 0; k < sf->n_names; k++) {
        const char *name = sf->names[k];
        int listed = 0;
        for (int j = 0; j < nb && !listed; j++) listed = !strcmp(bn[j], name);
        if (listed || model_has(ts, nt, name)) continue;
        stfile_entry x;
        if (stfile_entry_get(sf, name, 0, NULL, &x, e)) return -1;
        stfile_fmt_shape(a, sizeof a, x.shape, x.ndim);
        return ht_fail(e, "%s: %s: %.64s %s is in the checkpoint but not in the model", path, fit,
                       name, a);
    }
    return 0;
}

static int check_blobs(const stfile *sf, char **bn, int nb, stfile_entry *ents, ht_error *e) {
    for (int j = 0; j < nb; j++) {
        int got = stfile_entry_get(sf, bn[j], 0, NULL, &ents[j], e);
        if (got == 1)
            return ht_fail(e, "%s: blob \"%s\", named in \"hetrain_blobs\", is missing", sf->path,
                           bn[j]);
        if (got) return -1;
        if (ents[j].ndim != 1) {
            char s[200];
            stfile_fmt_shape(s, sizeof s, ents[j].shape, ents[j].ndim);
            return ht_fail(e, "%s: blob \"%s\" has shape %s, expected one dimension", sf->path,
                           bn[j], s);
        }
        if (ents[j].dtype != STFILE_F32)
            return ht_fail(e, "%s: blob \"%s\" is %s (a checkpoint holds F32 only)", sf->path,
                           bn[j], stfile_dtype_names[ents[j].dtype]);
    }
    return 0;
}

// Whether an open file is a checkpoint this build reads: the format marker and version, the
// blob list, and metadata values that survive as C strings.
static int check_marker(const stfile *sf, const char *path, ht_error *e) {
    const char *ver = stfile_meta(sf, "hetrain_checkpoint");
    char q[64];
    if (!ver)
        return ht_fail(e, "%s: not a hetrain checkpoint (no \"hetrain_checkpoint\" in its "
                          "metadata; a weights file?)", path);
    if (strcmp(ver, CHECKPOINT_VERSION))
        return ht_fail(e, "%s: checkpoint format version \"%s\" is not supported (this build "
                          "reads version %s)", path, ht_escape(q, sizeof q, ver, strlen(ver)),
                       CHECKPOINT_VERSION);
    if (!stfile_meta(sf, "hetrain_blobs"))
        return ht_fail(e, "%s: checkpoint metadata has no \"hetrain_blobs\"", path);
    if (sf->meta_cut) // values are handed out as C strings: this one would come back cut
        return ht_fail(e, "%s: metadata value of \"%s\" holds a NUL character", path,
                       ht_escape(q, sizeof q, sf->meta_cut, strlen(sf->meta_cut)));
    return 0;
}

int checkpoint_read_meta(const char *path, checkpoint *c, ht_error *e) {
    memset(c, 0, sizeof *c);
    stfile sf;
    if (stfile_open(&sf, path, e)) return -1;
    int rc = check_marker(&sf, path, e);
    // Every tensor's entry and their tiling of the data: a truncated or damaged file is named
    // now, before a resume acts on its metadata (the values are read and checked later).
    stfile_entry *ents = rc == 0 ? ht_calloc((size_t)sf.n_names + 1, sizeof *ents, e) : NULL;
    if (rc == 0 && !ents) rc = -1;
    for (int i = 0; rc == 0 && i < sf.n_names; i++)
        if (stfile_entry_get(&sf, sf.names[i], 0, NULL, &ents[i], e) != 0) rc = -1;
    if (rc == 0 && stfile_check_tiling(&sf, ents, sf.n_names, e) < 0) rc = -1;
    free(ents);
    if (rc == 0 && !(c->meta_kv = ht_calloc(2 * (size_t)sf.n_meta + 1, sizeof *c->meta_kv, e)))
        rc = -1;
    for (int i = 0; rc == 0 && i < 2 * sf.n_meta; i++)
        if (!(c->meta_kv[i] = strdup(sf.meta_kv[i]))) rc = ht_fail(e, "%s: out of memory", path);
    if (rc == 0) c->n_meta = sf.n_meta;
    stfile_close(&sf);
    if (rc) checkpoint_free(c);
    return rc ? -1 : 0;
}

int checkpoint_read(const char *path, const model *m, float *params, checkpoint *c, ht_error *e) {
    memset(c, 0, sizeof *c);
    const model_tensor *ts;
    int nt;
    if (safetensors_tensors(path, m, &ts, &nt, e)) return -1;
    stfile sf;
    if (stfile_open(&sf, path, e)) return -1;
    int rc = -1, nb = 0;
    char *list = NULL, **bn = NULL;
    stfile_entry *ents = NULL;
    float *tmp = NULL;
    checkpoint out = {0};

    const char *blobs = stfile_meta(&sf, "hetrain_blobs");
    const char *from = stfile_meta(&sf, "hetrain_model");
    char q[64];
    if (check_marker(&sf, path, e)) goto done;
    if (!(list = strdup(blobs))) {
        ht_fail(e, "%s: out of memory", path);
        goto done;
    }
    if (split_blobs(path, list, &bn, &nb, e)) goto done;
    char fit[200];
    if (from)
        snprintf(fit, sizeof fit, "the checkpoint of model %s does not fit model %s",
                 ht_escape(q, sizeof q, from, strlen(from)), m->name);
    else
        snprintf(fit, sizeof fit, "the checkpoint does not fit model %s", m->name);
    if (!(ents = ht_malloc((size_t)(nt + nb) + 1, sizeof *ents, e))) goto done;
    if (check_params(&sf, ts, nt, bn, nb, fit, ents, e) || check_blobs(&sf, bn, nb, ents + nt, e) ||
        stfile_check_tiling(&sf, ents, nt + nb, e))
        goto done;

    // Parameters into a scratch buffer so a failure leaves params untouched.
    if (!(tmp = ht_malloc(m->n_params + 1, sizeof *tmp, e))) goto done;
    for (int i = 0; i < nt; i++)
        if (stfile_read(&sf, &ents[i], tmp + ts[i].off, e)) goto done;
    if (!(out.blob_name = ht_calloc((size_t)nb + 1, sizeof *out.blob_name, e)) ||
        !(out.blob = ht_calloc((size_t)nb + 1, sizeof *out.blob, e)) ||
        !(out.blob_n = ht_calloc((size_t)nb + 1, sizeof *out.blob_n, e)) ||
        !(out.meta_kv = ht_calloc(2 * (size_t)sf.n_meta + 1, sizeof *out.meta_kv, e)))
        goto done;
    for (int j = 0; j < nb; j++, out.n_blobs++) {
        const stfile_entry *x = &ents[nt + j];
        out.blob_n[j] = (size_t)x->n;
        if (!(out.blob_name[j] = strdup(bn[j])) || !(out.blob[j] = ht_malloc(x->n + 1, 4, e))) {
            ht_fail(e, "%s: out of memory", path);
            out.n_blobs++; // frees what was allocated
            goto done;
        }
        if (stfile_read(&sf, x, out.blob[j], e)) {
            out.n_blobs++;
            goto done;
        }
    }
    for (int i = 0; i < sf.n_meta; i++, out.n_meta++) {
        out.meta_kv[2 * i] = strdup(sf.meta_kv[2 * i]);
        out.meta_kv[2 * i + 1] = strdup(sf.meta_kv[2 * i + 1]);
        if (!out.meta_kv[2 * i] || !out.meta_kv[2 * i + 1]) {
            ht_fail(e, "%s: out of memory", path);
            out.n_meta++;
            goto done;
        }
    }
    memcpy(params, tmp, m->n_params * sizeof *tmp);
    *c = out;
    rc = 0;
done:
    if (rc) checkpoint_free(&out);
    stfile_close(&sf);
    free(list);
    free(bn);
    free(ents);
    free(tmp);
    return rc;
}
