// ONNX export (onnx.c): a model's inference graph with its weights as an ONNX file, written
// through protobuf-c and the ONNX schema Debian ships (libonnx-dev's onnx.proto, compiled by
// protoc-c at build time).
#ifndef HETRAIN_ONNX_H
#define HETRAIN_ONNX_H

#include "core/common.h"
#include "nn/model.h"

// The opset the graph is written for: LayerNormalization (ConvNeXt's) is 17's.
#define ONNX_OPSET 17

// What the exported graph takes: the network's input as hetrain feeds it, float32 with a
// dynamic batch dimension "N". nhwc: (N,H,W,C), as Keras feeds a model read from its JSON
// (pixels 0..255, which its Rescaling layer scales inside the graph); else (N,C,H,W), as
// PyTorch feeds a preset or config model (pixels 0..1).
typedef struct onnx_opts {
    int nhwc;
    const char *source; // where the model came from, for the file's doc string (may be NULL)
} onnx_opts;

// Writes m with params (n_params floats: the weights and batchnorm's moving statistics) to
// path as an ONNX model of opset ONNX_OPSET: batchnorm in inference form, dropout gone, the
// head's softmax or sigmoid as trained, the class names (if any) as the metadata entry
// "class_names" (a JSON array). The graph's output "output" holds the head's outputs (N,
// classes). A layer the graph cannot express is refused naming it, before anything is
// written; the file is written whole or not at all (a temporary file renamed into place), and
// an existing path is refused.
int onnx_export(const model *m, const float *params, const char *path, const onnx_opts *o,
                ht_error *e);

#endif
