// Keras model JSON: what `model.to_json()` writes for a Sequential model, or a Functional one
// whose graph is a single path, in Keras 2.x (tf.keras) and Keras 3.x spelling, read into
// hetrain's layers (model.h), with their regularizers and frozen (trainable false) layers.
#ifndef HETRAIN_KERAS_H
#define HETRAIN_KERAS_H

#include <stddef.h>

#include "nn/model.h"

// Builds m from the Keras model JSON in path: its layers, its initialisers, and the training
// setup of a config file's [net] section (the JSON has none). channels_last shapes become
// hetrain's (C,H,W); the final softmax becomes the softmax cross-entropy over n_classes (its
// input's features). On failure m is empty and err holds one line naming the file and, for a
// layer, its index in the JSON's list of layers (0-based), its name and its class.
int model_init_keras(model *m, const char *path, ht_error *err);

// The same from len bytes of JSON text in memory; path only names it in messages.
int model_init_keras_text(model *m, const char *text, size_t len, const char *path,
                          ht_error *err);

#endif
