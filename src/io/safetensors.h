// Weights in the safetensors format, with PyTorch's names and layouts: "<layer>.weight" as
// conv [out,in,kh,kw] and dense [out,in], "<layer>.bias" as [out]; dtype F32. A batchnorm's
// state as PyTorch keeps it: "<layer>.running_mean", "<layer>.running_var" [C] (F32) and
// "<layer>.num_batches_tracked" [] (I64).
#ifndef HETRAIN_SAFETENSORS_H
#define HETRAIN_SAFETENSORS_H

#include "core/common.h"
#include "io/partial.h"
#include "nn/model.h"

// Writes all parameter tensors of m from params (and m's class names, as the metadata's
// "class_names": a JSON array of strings); writes a temporary file beside path and
// renames it, so a failure never leaves a partial file.
int safetensors_save(const char *path, const model *m, const float *params, ht_error *e);

// Reads every parameter tensor of m into params. Each tensor must be present with the model's
// shape and dtype F32 (F16/BF16/F64 are converted; num_batches_tracked also I64, and only it);
// extra tensors are an error naming them.
// As for the reference reader, the tensors' byte ranges must tile the data buffer, no key may
// appear twice in any object of the header, and __metadata__ maps strings to strings. A NaN or
// infinite value (also one that a conversion makes) is an error naming tensor and element.
int safetensors_load(const char *path, const model *m, float *params, ht_error *e);
// By name (partial.h): params holds the initial values; a layer whose tensors the file lacks,
// or (pl->skip_mismatch) has in other shapes, keeps them and is listed in pl; the file's other
// tensors are ignored.
int safetensors_load_partial(const char *path, const model *m, float *params, load_partial *pl,
                             ht_error *e);

// Sets m's class names from the file's "class_names" metadata: 1 when it has them, 0 when not
// (m untouched), -1 with e naming the file.
int safetensors_read_classes(const char *path, model *m, ht_error *e);

// The model's tensor table (model_tensors), failing (naming path) unless it covers all of the
// model's parameters, as every file of m's parameters needs. Also for checkpoint.c.
int safetensors_tensors(const char *path, const model *m, const model_tensor **ts, int *nt,
                        ht_error *e);

#endif
