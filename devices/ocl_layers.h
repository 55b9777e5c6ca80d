// The OpenCL device's op table: one row per layer kind (layer_kinds.h), the ops of its family,
// which opencl.c's walker calls with everything a call needs in one ocl_call, and the buffers
// each family wants besides its output.
#ifndef HETRAIN_OCL_LAYERS_H
#define HETRAIN_OCL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "nn/conv_algo.h"
#include "nn/model.h"
#include "devices/ocl_ops.h"

typedef struct ocl_call {
    ocl_ops *o;
    const layer *L;
    int l, B;              // the layer's index; the micro-batch's samples
    int act;               // the act family's function (act_fn), -1 for another family
    cl_mem params, grads;  // flat buffers, as on the host
    cl_mem in, out;        // forward; in the backward the forward's input and output
    int n_in;              // a merge's inputs (ins[0] is in) and, backward, their gradients'
    cl_mem ins[MODEL_MAX_IN], dins[MODEL_MAX_IN]; // places (dins[0] is din; NULL: not wanted)
    cl_mem dout, din;      // backward: din NULL when the input's gradient is not wanted
    cl_mem spare;          // backward: a free buffer the size of din (the loss head's output)
    cl_mem aux;            // the layer's own buffer, kept from forward to backward (aux_bytes)
    cl_mem tmp;            // the scratch every layer shares (tmp_floats), from float 0
    cl_mem y, loss, ids;   // labels (NULL: none, as at inference), per-sample loss, sample ids
    const uint64_t *keys;  // dropout's key of each layer; NULL: inference (dropout passes,
                           // batchnorm takes its moving averages)
    int group;             // batchnorm in training: samples a group (model_bn_group)
    // A convolution: the job's algorithm of each direction (conv_algo.h; NULL: direct), and
    // for Winograd its transformed weights (ocl_wino_u_floats), the scratch every layer shares
    // (ocl_wino_scratch_floats) and the forward's marks (ocl_wino_exact_bytes).
    const conv_choice *algo;
    cl_mem wino_u, wino, wino_exact;
} ocl_call;

typedef struct ocl_layer_ops {
    int (*forward)(const ocl_call *c, ht_error *e);
    // Sets *din to where the input's gradient is (c->din, or c->dout for an in-place op, or
    // NULL when none was made).
    int (*backward)(const ocl_call *c, cl_mem *din, ht_error *e);
    // Bytes of the layer's own buffer for B samples (0: none), its directions computed as algo
    // says (NULL: direct); and floats of the shared scratch it needs (0: none).
    size_t (*aux_bytes)(const layer *L, const conv_choice *algo, int B);
    size_t (*tmp_floats)(const layer *L, int B);
    int gemm_aux; // its own buffer is a GEMM operand CLBlast may copy into scratch of its size
    const char *const *kernels; // the kernels its ops launch (kernels/*.cl), NULL-terminated
} ocl_layer_ops;

// Each family's row, cl_<family> of layer_kinds.h's list: in ocl_layers.c, or in a file of the
// family's own (ocl_zeropad.c); a family without one is an undeclared identifier in the table.
#define OCL_OPS_DECL(id, fam, name, prefix, keras, key, dflt) extern const ocl_layer_ops cl_##fam;
LAYER_KINDS(OCL_OPS_DECL)
#undef OCL_OPS_DECL

extern const ocl_layer_ops *const ocl_layer_ops_of[LAYER_KIND_COUNT];

// A convolution layer's geometry in NCHW (Cs = C), with the directions' algorithms of algo
// (NULL: direct).
conv_geom ocl_conv_geom(const layer *L, const conv_choice *algo);

// Whether the program behind o has every kernel the layers of m launch; -1 with e naming the
// first one missing and its layer.
int ocl_layers_check(const ocl_ops *o, const model *m, ht_error *e);

#endif
