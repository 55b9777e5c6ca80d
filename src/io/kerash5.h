// A model's weights as Keras's HDF5 weight files (libhdf5), so weights go both ways between
// hetrain and Keras. Written: Keras 3's `.weights.h5` (model.save_weights), which Keras 3 and
// tf_keras 2.21 load. Read: that layout (also as tf_keras writes it), and Keras 2's
// (save_weights("x.h5") and the `model_weights` group of a full model.h5).
//
// Layouts, as real Keras writes them (checked with Keras 3.15 and tf_keras 2.21):
// * Keras 3: `layers/<path>/vars/<i>` datasets, i = 0.. in the layer's variable order (Conv2D
//   and Dense: kernel, bias; BatchNormalization: gamma, beta, moving_mean, moving_variance,
//   those present). <path> is NOT the layer's name but its class in snake case, numbered by
//   position among the model's layers of that class ("conv2d", "conv2d_1", "dense",
//   "batch_normalization_2", ...); the `vars` group's attribute `name` holds the layer's name.
//   A top-level `vars` group (the model's own, empty) and perhaps `optimizer`, `metrics`.
//   Keras 3's loader also takes `_layer_checkpoint_dependencies` for `layers` (its "2.13
//   compatibility"; not seen here in a real file), and so does hetrain.
// * Keras 2: attribute `layer_names` (every layer, in order) on the root or on `model_weights`;
//   on each layer's group attribute `weight_names` ("conv2d/kernel:0", ...) naming datasets
//   below that group. Keras loads it by order: the i-th layer with weights gets the i-th
//   entry of layer_names that has weight_names; so does hetrain.
// Keras's layouts against hetrain's (PyTorch's): a Conv2D kernel is (K,K,C,OC) in Keras,
// (OC,C,K,K) here; a Dense kernel (IN,OUT) against (OUT,IN), and after a Flatten of a spatial
// map Keras's inputs run in (H,W,C) order where hetrain's run in (C,H,W) (Keras's Flatten
// gives (H,W,C) for channels_first maps too when its data_format says so, as a channels_first
// model's does). BatchNormalization's moving mean and variance are hetrain's running mean and
// variance; its count of updates has no Keras counterpart: not written, read as 0.
#ifndef HETRAIN_KERASH5_H
#define HETRAIN_KERASH5_H

#include "core/common.h"
#include "io/partial.h"
#include "nn/model.h"

// Whether --save/--load path means a Keras HDF5 file: its name ends in .h5, .hdf5 or .keras,
// or (reading != 0) the file begins with HDF5's signature.
int kerash5_is_path(const char *path, int reading);

// What kerash5_save would refuse before anything is trained: a name other than *.weights.h5
// (Keras 3 reads only that name as its layout), a layer with weights that Keras has no layer
// for. Errors name path and the layer.
int kerash5_check_save(const char *path, const model *m, ht_error *e);

// Writes m's weights from params as Keras 3's .weights.h5: to a temporary file beside path,
// renamed onto it, so a failure never leaves a partial file. The model's class names, if it has
// them, go in the root's attribute "class_names" (a JSON array of strings; Keras ignores it).
int kerash5_save(const char *path, const model *m, const float *params, ht_error *e);

// Reads m's weights into params from either layout. Every layer with weights must be there
// with Keras's shapes and float values, and the file may hold no other layer's weights. On
// failure params is untouched and e holds one line naming path, the layer and the variable.
int kerash5_load(const char *path, const model *m, float *params, ht_error *e);

// Sets m's class names from the root's "class_names" attribute: 1 when the file has one, 0 when
// not (m untouched), -1 with e naming the file.
int kerash5_read_classes(const char *path, model *m, ht_error *e);

// By name (pl not NULL; partial.h): params holds the initial values; each layer with weights
// takes its file's layer of the same name (Keras 3's files: the same group, class and number),
// one the file lacks, or (pl->skip_mismatch) of other shapes, keeps its values and is listed in
// pl; the file's other layers are ignored. Anything else is an error as for kerash5_load.
int kerash5_load_partial(const char *path, const model *m, float *params, load_partial *pl,
                         ht_error *e);

#endif
