// The safetensors format on named tensors: one writer (F32 tensors and a string-to-string
// metadata map, replacing the file atomically) and one strict reader, shared by model weights
// (safetensors.c) and checkpoints (checkpoint.c), which each check what they expect to find.
#ifndef HETRAIN_STFILE_H
#define HETRAIN_STFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/common.h"

#define STFILE_MAX_DIMS 8

// The dtypes read (all of them) and written (F32, I64). An I64 tensor holds whole numbers kept
// as floats in memory: PyTorch's num_batches_tracked.
typedef enum stfile_dtype {
    STFILE_F32,
    STFILE_F16,
    STFILE_BF16,
    STFILE_F64,
    STFILE_I64,
    STFILE_DTYPE_COUNT
} stfile_dtype;
extern const char *const stfile_dtype_names[]; // "F32", "F16", "BF16", "F64", "I64"

// ---- writing ----

// One tensor to write from floats: the product of its shape is its number of values.
typedef struct stfile_tensor {
    const char *name;
    int ndim; // 0..STFILE_MAX_DIMS; 0: a scalar, one value
    const uint64_t *shape;
    const float *data;
} stfile_tensor;

// Writes the tensors in this order as F32, their data contiguous and 8-byte aligned, and, when
// n_meta > 0, "__metadata__" first with the n_meta pairs meta_kv[2i] -> meta_kv[2i+1]: the
// header is compact JSON padded with spaces, as Python's writer lays it out (which sorts the
// tensors by name). The caller keeps names and keys distinct. Writes "<path>.tmp.<pid>" beside
// path, fsyncs it, renames it over path and fsyncs the folder (best effort: some filesystems
// refuse that); any failure removes the temporary file and leaves path as it was.
// die_after >= 0 is a test hook: the process _exit(137)s, as if killed, as soon as that many
// bytes of the temporary file are written (never, when the file is shorter); -1 for none.
int stfile_write(const char *path, const stfile_tensor *ts, int nt, const char *const *meta_kv,
                 int n_meta, int64_t die_after, ht_error *e);
// The same with tensor i written as dtypes[i]: STFILE_F32, or STFILE_I64, whose values must be
// whole numbers below 2^63 in magnitude (else an error naming the tensor, before anything is
// written). The I64 tensors' data comes first in the data buffer (the header keeps the given
// order), so every value is aligned to its size, as Python's writer aligns them.
int stfile_write_dtypes(const char *path, const stfile_tensor *ts, const stfile_dtype *dtypes,
                        int nt, const char *const *meta_kv, int n_meta, int64_t die_after,
                        ht_error *e);

// ---- reading ----

// An open file whose header passed every check that needs nothing but the file: the length
// field, strict JSON with nothing but whitespace after it, a top-level object, no key twice in
// any object nor a key cut by an escaped NUL, "__metadata__" (if present) an object of strings.
// The reference reader's other checks need the tensors' entries: stfile_entry_get and
// stfile_check_tiling.
struct json_object;
typedef struct stfile {
    const char *path; // the caller's, for messages
    FILE *f;
    char *hdr;
    struct json_object *root;
    uint64_t data_start, data_len; // the data buffer: its place in the file and its length
    const char **names; // the tensors' keys, in header order (all but "__metadata__")
    int n_names;
    const char **meta_kv; // the metadata, key and value alternately, in header order
    int n_meta;           // pairs
    const char *meta_cut; // the first key whose value holds a NUL (cut there above), or NULL
    unsigned char *chunk; // I/O buffer
} stfile;

// One tensor as the header describes it.
typedef struct stfile_entry {
    const char *name; // the header's key, valid until stfile_close
    stfile_dtype dtype;
    int ndim;
    uint64_t shape[STFILE_MAX_DIMS];
    uint64_t n;          // values: the product of shape
    uint64_t begin, end; // byte range in the data buffer
} stfile_entry;

// Opens path and checks its header (above). Returns 0, or -1 with e naming the file and what is
// wrong; *sf is then closed already.
int stfile_open(stfile *sf, const char *path, ht_error *e);
void stfile_close(stfile *sf);

// The metadata value of key, or NULL when there is none.
const char *stfile_meta(const stfile *sf, const char *key);

// Checks the header's entry for tensor `name` and describes it in *out: a supported dtype, a
// shape of at most STFILE_MAX_DIMS dimensions (equal to want_shape when that is not NULL),
// data_offsets within the data buffer holding exactly the shape's values. Returns 0, 1 when the
// header has no tensor `name` (e untouched), -1 on an error naming file and tensor.
int stfile_entry_get(const stfile *sf, const char *name, int want_ndim, const uint64_t *want_shape,
                     stfile_entry *out, ht_error *e);

// As the reference reader requires, the byte ranges of en[0..n) (every tensor of the file) tile
// the data buffer: no overlap, no gap, nothing before or after. Errors name the tensors.
int stfile_check_tiling(const stfile *sf, const stfile_entry *en, int n, ht_error *e);

// Reads the en->n values of a tensor into dst as floats, converting F16/BF16/F64/I64 (an I64
// beyond 2^24 in magnitude to the nearest float). A NaN or an infinity (also one that a
// conversion makes) is an error naming the tensor and the element, by flat index and by
// dimension. dst may be partly written on failure.
int stfile_read(const stfile *sf, const stfile_entry *en, float *dst, ht_error *e);

// "[2,3]" into buf.
void stfile_fmt_shape(char *buf, size_t cap, const uint64_t *d, int nd);

// Moves a finished temporary file tmp (already written and fsynced) to path and makes the
// rename durable (the directory's fsync, best effort): the last step of every atomic write
// here. Fails naming path and tmp.
int stfile_publish(const char *tmp, const char *path, ht_error *e);

#endif
