// Fuzzes the checkpoint reader (checkpoint_read) against fuzz_model.h's model: conv1.weight
// [2,1,3,3], conv1.bias [2], fc1.weight [3,8], fc1.bias [3]. The input is the file. A failed
// read must leave the parameters and the checkpoint untouched; whatever reads must write back
// (checkpoint_write, the caller's metadata and blobs as read) and read again bit for bit.
// Every metadata value also goes through the reader of the convolution decisions a
// checkpoint keeps (conv_choices_restore): refused, or taken and written back as text that is
// taken again.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "nn/conv_algo.h"
#include "tests/fuzz/fuzz_model.h"
#include "tests/fuzz/fuzz_util.h"

static model net;
static float *params, *before, *again;

static void build_model(void) {
    fuzz_small_model(&net);
    params = malloc(net.n_params * sizeof *params);
    before = malloc(net.n_params * sizeof *before);
    again = malloc(net.n_params * sizeof *again);
    if (!params || !before || !again) abort();
}

// Writes c (its blobs, and its metadata but the format's own keys) with params, reads it back
// and requires the same.
static void round_trip(const checkpoint *c) {
    ckpt_blob *blobs = calloc((size_t)c->n_blobs + 1, sizeof *blobs);
    const char **kv = calloc(2 * (size_t)c->n_meta + 1, sizeof *kv);
    if (!blobs || !kv) abort();
    for (int j = 0; j < c->n_blobs; j++)
        blobs[j] = (ckpt_blob){c->blob_name[j], c->blob[j], c->blob_n[j]};
    int nm = 0;
    for (int i = 0; i < c->n_meta; i++) {
        const char *k = c->meta_kv[2 * i];
        if (!strcmp(k, "format") || !strncmp(k, "hetrain_", 8)) continue;
        kv[2 * nm] = k;
        kv[2 * nm + 1] = c->meta_kv[2 * i + 1];
        nm++;
    }
    const char *path = fuzz_tmp_path(1, "again.ckpt");
    ht_error e;
    checkpoint d;
    if (checkpoint_write(path, &net, params, blobs, c->n_blobs, kv, nm, &e) ||
        checkpoint_read(path, &net, again, &d, &e) ||
        memcmp(again, params, net.n_params * sizeof *params) || d.n_blobs != c->n_blobs)
        abort();
    for (int j = 0; j < c->n_blobs; j++) {
        size_t n;
        const float *b = checkpoint_blob(&d, c->blob_name[j], &n);
        if (!b || n != c->blob_n[j] || memcmp(b, c->blob[j], n * sizeof *b)) abort();
    }
    for (int i = 0; i < nm; i++) {
        const char *v = checkpoint_meta(&d, kv[2 * i]);
        if (!v || strcmp(v, kv[2 * i + 1])) abort();
    }
    checkpoint_free(&d);
    free(blobs);
    free(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!params) build_model();
    const char *path = fuzz_write_tmp(0, "c.ckpt", data, size);
    for (size_t i = 0; i < net.n_params; i++) params[i] = before[i] = (float)i;
    ht_error e;
    checkpoint c;
    if (checkpoint_read(path, &net, params, &c, &e) != 0) {
        if (memcmp(params, before, net.n_params * sizeof *params) || c.n_blobs || c.n_meta ||
            c.blob || c.meta_kv)
            abort();
        return 0;
    }
    round_trip(&c);
    for (int i = 0; i < c.n_meta; i++)
        if (conv_choices_restore(c.meta_kv[2 * i + 1]) == 0) {
            char text[CONV_CHOICES_TEXT];
            conv_choices_text(text, sizeof text);
            if (conv_choices_restore(text) != 0) abort();
        }
    checkpoint_free(&c);
    return 0;
}
