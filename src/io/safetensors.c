// A model's weights as a safetensors file (stfile.c): its parameter tensors under PyTorch's
// names and layouts, {"format":"pt"} as metadata and the class names (a JSON array) if the model
// has them. Everything is F32 but a
// count of updates in a layer's state (model_tensor.integer), which PyTorch keeps as an int64
// scalar.
#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "io/stfile.h"

int safetensors_tensors(const char *path, const model *m, const model_tensor **ts, int *nt,
                      ht_error *e) {
    *nt = model_tensors(m, ts);
    size_t total = 0;
    for (int i = 0; i < *nt; i++) total += (*ts)[i].n;
    if (total != m->n_params)
        return ht_fail(e, "%s: model %s: its tensor table holds %zu of its %zu parameters (not "
                          "built by model_finish?)", path, m->name, total, m->n_params);
    return 0;
}

int safetensors_save(const char *path, const model *m, const float *params, ht_error *e) {
    const model_tensor *ts;
    int nt;
    if (safetensors_tensors(path, m, &ts, &nt, e)) return -1;
    stfile_tensor *st = ht_malloc((size_t)nt + 1, sizeof *st, e);
    stfile_dtype *dt = st ? ht_malloc((size_t)nt + 1, sizeof *dt, e) : NULL;
    if (!dt) {
        free(st);
        return -1;
    }
    for (int i = 0; i < nt; i++) {
        st[i] = (stfile_tensor){ts[i].name, ts[i].ndim, ts[i].shape, params + ts[i].off};
        dt[i] = ts[i].integer ? STFILE_I64 : STFILE_F32;
    }
    ht_error ce = {0};
    char *classes = model_classes_json(m, &ce);
    const char *meta[] = {"format", "pt", "class_names", classes};
    int rc = m->n_class_names && !classes
                 ? ht_fail(e, "%s: %s", path, ce.msg)
                 : stfile_write_dtypes(path, st, dt, nt, meta, classes ? 2 : 1, -1, e);
    free(classes);
    free(st);
    free(dt);
    return rc;
}

int safetensors_read_classes(const char *path, model *m, ht_error *e) {
    stfile sf;
    if (stfile_open(&sf, path, e)) return -1;
    const char *v = stfile_meta(&sf, "class_names");
    int rc = v ? model_classes_from_json(m, v, path, e) : 0;
    stfile_close(&sf);
    return rc < 0 ? -1 : v != NULL;
}

int safetensors_load(const char *path, const model *m, float *params, ht_error *e) {
    return safetensors_load_partial(path, m, params, NULL, e);
}

// By name: the layers whose tensors (weights and state) are all there with the model's shapes
// are read; the others are listed (another shape only with skip_mismatch, else an error).
static int load_by_name(stfile *sf, const char *path, const model *m, const model_tensor *ts,
                        int nt, stfile_entry *ents, float *params, load_partial *pl,
                        ht_error *e) {
    for (int l = 0; l < m->n_layers; l++) {
        int fits = 1, any = 0;
        char why[600] = "";
        for (int j = 0; j < nt && fits; j++) {
            if (ts[j].layer != l) continue;
            any = 1;
            ht_error te;
            const int got = stfile_entry_get(sf, ts[j].name, ts[j].ndim, ts[j].shape, &ents[j], &te);
            if (got == 1) fits = 0, snprintf(why, sizeof why, "no tensor %s in %s", ts[j].name, path);
            else if (got < 0 && !pl->skip_mismatch)
                return ht_fail(e, "%s (--skip-mismatch leaves such a layer at its initial values)",
                               te.msg);
            else if (got < 0) fits = 0, snprintf(why, sizeof why, "%s", te.msg);
        }
        if (!any) continue;
        if (!fits && load_partial_note(pl, "layer \"%s\": %.300s: left at its initial values",
                                       m->layers[l].name, why))
            return ht_fail(e, "out of memory");
        for (int j = 0; fits && j < nt; j++)
            if (ts[j].layer == l && stfile_read(sf, &ents[j], params + ts[j].off, e)) return -1;
    }
    return 0;
}

int safetensors_load_partial(const char *path, const model *m, float *params, load_partial *pl,
                             ht_error *e) {
    const model_tensor *ts;
    int nt;
    if (safetensors_tensors(path, m, &ts, &nt, e)) return -1;
    stfile sf;
    if (stfile_open(&sf, path, e)) return -1;
    int rc = -1;
    float *tmp = NULL;
    stfile_entry *ents = ht_malloc((size_t)nt + 1, sizeof *ents, e);
    if (!ents) goto done;
    if (pl) { // into a copy of the initial values, so a failure leaves params untouched
        if (!(tmp = ht_malloc(m->n_params + 1, sizeof *tmp, e))) goto done;
        memcpy(tmp, params, m->n_params * sizeof *tmp);
        if (load_by_name(&sf, path, m, ts, nt, ents, tmp, pl, e)) goto done;
        memcpy(params, tmp, m->n_params * sizeof *tmp);
        rc = 0;
        goto done;
    }

    // Check the whole header before reading any data: every model tensor present and
    // consistent, then nothing else in the file.
    for (int i = 0; i < nt; i++) {
        int got = stfile_entry_get(&sf, ts[i].name, ts[i].ndim, ts[i].shape, &ents[i], e);
        if (got == 1) ht_fail(e, "%s: missing tensor \"%s\" (model %s)", path, ts[i].name, m->name);
        if (got) goto done;
        if (ents[i].dtype == STFILE_I64 && !ts[i].integer) {
            ht_fail(e, "%s: tensor \"%s\" is I64: hetrain's weights are floats (integers only "
                       "in a batchnorm's num_batches_tracked)", path, ts[i].name);
            goto done;
        }
    }
    for (int k = 0; k < sf.n_names; k++) {
        int known = 0;
        for (int i = 0; i < nt && !known; i++) known = !strcmp(sf.names[k], ts[i].name);
        if (!known) {
            ht_fail(e, "%s: extra tensor \"%.64s\" is not in model %s", path, sf.names[k], m->name);
            goto done;
        }
    }
    if (stfile_check_tiling(&sf, ents, nt, e)) goto done;

    // Read into a scratch buffer so a failure leaves params untouched.
    if (!(tmp = ht_malloc(m->n_params + 1, sizeof *tmp, e))) goto done;
    for (int i = 0; i < nt; i++)
        if (stfile_read(&sf, &ents[i], tmp + ts[i].off, e)) goto done;
    memcpy(params, tmp, m->n_params * sizeof *tmp);
    rc = 0;
done:
    stfile_close(&sf);
    free(tmp);
    free(ents);
    return rc;
}
