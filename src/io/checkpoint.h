// Checkpoints: one safetensors file (stfile.h) holding a model's parameters under their PyTorch
// names, so PyTorch's safetensors reads the weights straight out of it, any number of extra
// flat F32 tensors ("blobs": the optimiser's moments, ...), and string metadata.
//
// The file's "__metadata__" (safetensors allows only string values):
//   "format":             "pt", as PyTorch's writer puts it
//   "hetrain_checkpoint": "1", the format version; a file without it is not a checkpoint
//   "hetrain_model":      the model's name, for messages
//   "hetrain_blobs":      the blobs' names, comma-separated, in file order ("" for none)
// then the caller's pairs in the caller's order. Keys "format" and "hetrain_*" are this file's;
// everything else (a run's state, as one JSON document in one value) is the caller's.
// Tensors: the parameters in model_tensors order, then the blobs, each [n], all F32.
#ifndef HETRAIN_CHECKPOINT_H
#define HETRAIN_CHECKPOINT_H

#include <stddef.h>

#include "core/common.h"
#include "nn/model.h"

#define CHECKPOINT_VERSION "1"

// An extra 1-D tensor. Names: 1..63 characters of [A-Za-z0-9_.-], none a tensor of the model.
typedef struct ckpt_blob {
    const char *name;
    const float *data;
    size_t n;
} ckpt_blob;

// Writes params (m's tensors), the blobs and the metadata pairs meta_kv[2i] -> meta_kv[2i+1]
// (n_meta pairs) to path, atomically and durably: a temporary file "<path>.tmp.<pid>" in the
// same folder, fsync, rename over path, fsync of the folder. A failure at any point (no space,
// a read-only folder, ...) leaves the previous file at path as it was, removes the temporary
// file and returns -1 with e naming the file. Every value must be finite, as checkpoint_read
// would refuse the file otherwise. A temporary file left by a writer that was killed is
// harmless (nothing reads it) and the next checkpoint_write for path removes it (when the
// process named in it is gone).
//
// Test hook: with the environment variable HETRAIN_CKPT_DIE_AFTER=BYTES set, checkpoint_write
// exits the process with _exit(137), as if SIGKILLed, as soon as BYTES bytes of the temporary
// file are written (not at all when the file is shorter); a value that is not a byte count is an
// error.
int checkpoint_write(const char *path, const model *m, const float *params, const ckpt_blob *blobs,
                     int n_blobs, const char *const *meta_kv, int n_meta, ht_error *e);

// What checkpoint_read gives back besides the parameters; owned by it until checkpoint_free.
typedef struct checkpoint {
    int n_blobs;
    char **blob_name;
    float **blob;
    size_t *blob_n;
    int n_meta;     // pairs, all of the file's (this file's keys too)
    char **meta_kv; // key, value, key, value...
} checkpoint;

// Reads a checkpoint written for model m: checks it is one (the format marker and version),
// that its parameter tensors are m's by name and shape (an error names the first that differs:
// "conv1.weight is [32,1,3,3] in the checkpoint but [16,1,3,3] in the model") and every check
// of the safetensors reader (layout, duplicate keys, finite values, ...). Fills params (only
// on success) and *c. Errors are one line naming the file.
int checkpoint_read(const char *path, const model *m, float *params, checkpoint *c, ht_error *e);
void checkpoint_free(checkpoint *c);
// Reads only the metadata of the checkpoint at path (after the same format checks), for a
// caller that learns from it which model to build; *c then has no blobs.
int checkpoint_read_meta(const char *path, checkpoint *c, ht_error *e);

// The metadata value of key, or NULL.
const char *checkpoint_meta(const checkpoint *c, const char *key);
// The blob called name and its length in *n, or NULL (*n 0) when there is none.
const float *checkpoint_blob(const checkpoint *c, const char *name, size_t *n);

#endif
