// Internal to the Keras model JSON reader (keras.h): the reading context, one-line errors under
// a layer's heading and the typed getters (keras_json.c), the layers (keras_layers.c) and the
// graph of a Functional model (keras_graph.c). keras.c reads the model with them.
#ifndef HETRAIN_KERAS_INT_H
#define HETRAIN_KERAS_INT_H

#include <stddef.h>
#include <stdint.h>

#include <json.h>

#include "nn/model.h"

#define NO_DEFAULT INT32_MIN

// Element i of an array, or NULL when a is not an array or has no element i (json-c's own
// accessor asserts on anything but an array).
static inline json_object *kidx(json_object *a, size_t i) {
    return a && json_object_is_type(a, json_type_array) && i < json_object_array_length(a)
               ? json_object_array_get_idx(a, i)
               : NULL;
}

typedef struct kctx {
    const char *path;
    ht_error *err;
    int idx;            // index of the layer being read in the JSON's list; -1: none
    const char *lname;  // its name and class, for messages
    const char *lclass;
    int channels_first; // the model's data_format (its first Conv2D's, else its first image
                        // layer's)
    // the running shape in Keras's terms: rank 1 (features), 2 (H, W) or 3 (an image)
    int rank;
    int keras2; // written by Keras 2 (keras_version 1.x or 2.x): its hard_sigmoid is 0.2 x + 0.5
    int frozen; // the layer being read has trainable false
    // The inputs of the Keras layer being read, as hetrain layers (MODEL_INPUT: the model's),
    // when they are not just the last layer added: keras_add gives them to the first layer it
    // adds for it (n_from 0 after), and the shapes the readers see are from[0]'s.
    int n_from;
    int from[MODEL_MAX_IN];
    int seq; // the layer being read came from a Sequential inside the model (KERAS_SEQ_KEY)
    // A shared layer's later call (node >= 1, Keras's node index) is read as its first call
    // was, into layers named "<name>-<node>" that compute with the first call's parameters:
    // keras_add gives the layer it adds at call_first + i the share of layer share_first + i
    // (i < share_n, of its kind, with parameters).
    int node, call_first, share_first, share_n;
} kctx;

// ---- keras_json.c ----------------------------------------------------------------------------

// Fails with "<path>: layer <idx> "<name>" (<class>): <message>" (without the layer part when
// k->idx < 0), the JSON's own characters escaped onto one line. Returns -1.
int kfail(kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// "null", "a boolean", "a number", ... for messages.
const char *ktype_name(json_object *v);
// The value under key; NULL when absent or null (or o is not an object).
json_object *kget(json_object *o, const char *key);

// Typed getters: 0, or -1 with kfail naming the key. def is taken when the key is absent or
// null (NO_DEFAULT, or a NULL string default: the key is required).
int kget_int(kctx *k, json_object *cfg, const char *key, int def, int lo, int hi, int *out);
// An int or a list of equal ints (one per spatial axis): hetrain's windows are square.
int kget_pair(kctx *k, json_object *cfg, const char *key, int def, int lo, int hi, int *out);
int kget_bool(kctx *k, json_object *cfg, const char *key, int def, int *out);
int kget_num(kctx *k, json_object *cfg, const char *key, double *out); // required, finite
int kget_str(kctx *k, json_object *cfg, const char *key, const char *def, const char **out);
// Keys that must be absent or null: what hetrain has no counterpart for.
int kcheck_nulls(kctx *k, json_object *cfg, const char *const *keys, const char *why);
// dtype float32 (a string, or Keras 3's DTypePolicy), or absent.
int kcheck_dtype(kctx *k, json_object *cfg);
// data_format: *first = 1 for channels_first, 0 for channels_last (the default).
int kget_format(kctx *k, json_object *cfg, int *first);
// An initializer by name or as Keras's object (model_init_keras_name), def when absent.
int kget_init(kctx *k, json_object *cfg, const char *key, const char *def, init_desc *d);
// A weight regularizer (kernel_regularizer, bias_regularizer): Keras's L1, L2 and L1L2 by class
// (Keras 3 and 2.4+ objects, L1L2 of older Keras 2) or by Keras's names "l1", "l2", "l1_l2"
// (Keras 2: 0.01 each), "l1l2" (Keras 3: 0 each), with their factors; absent or null: none
// (0, 0). The loss term is l1 * sum|w| + l2 * sum(w^2).
int kget_reg(kctx *k, json_object *cfg, const char *key, float *l1, float *l2);

// A layer's name for hetrain: Keras's, when it is a name hetrain takes (1..31 of
// [A-Za-z0-9_-]) with the suffix; else NULL (hetrain numbers it).
const char *klayer_name(const char *kname, const char *suffix, char *buf, size_t cap);
// Sets k's heading (index, name, class) to layer i of the JSON's list; -1 when it is not a
// layer object at all.
int klayer_heading(kctx *k, json_object *layers, int i, json_object **out);
// The layer's name as Keras's graph refers to it: its own "name" (Keras 3), else its config's.
const char *klayer_graph_name(json_object *layer);

// ---- keras_layers.c --------------------------------------------------------------------------

// One entry of the JSON's list of layers (k's heading set), appended to m; last: it is the
// list's last entry. A class that is a layer kind (layer_kinds.h's Keras class column) is read
// by its family's keras_<family> below; InputLayer, Flatten and Activation here.
int keras_read_layer(kctx *k, model *m, json_object *layer, int last);
// Keras's SeparableConv2D (dwconv_keras.c): a depthwise and a 1x1 convolution.
int keras_read_separable(kctx *k, model *m, json_object *cfg, const char *kname, int last);
// Whether the layer entry is one of Keras 3's operations (module keras.src.ops.*: `x + 3.0`);
// keras_read_op reads one (rescale_keras.c: a tensor and a number as the rescale family, two
// tensors as the merge of the same name).
int keras_is_op(json_object *layer);
int keras_read_op(kctx *k, model *m, json_object *layer, json_object *cfg, const char *kname,
                  int last);
// The layer kind whose Keras class (layer_kinds.h's column) cls is, or -1.
int keras_class_kind(const char *cls);

// ---- each family's Keras reading (<family>_keras.c) -------------------------------------------

typedef struct keras_family {
    // Reads a layer of kind's Keras class (k's heading set, cfg its config; kname Keras's name
    // for it, or NULL) into zero or more layers appended to m; last: the JSON's last layer.
    // NULL: the family has no Keras class.
    int (*read)(kctx *k, model *m, json_object *cfg, layer_kind kind, const char *kname,
                int last);
    // Why the class is refused with trainable false (after "trainable false: "); NULL: a
    // frozen one is read (its parameters are not updated).
    const char *frozen;
} keras_family;

#define KERAS_FAMILY_DECL(id, fam, name, prefix, keras, key, dflt) \
    extern const keras_family keras_##fam;
LAYER_KINDS(KERAS_FAMILY_DECL)
#undef KERAS_FAMILY_DECL

// ---- keras_build.c: what the families' readers build with ------------------------------------

// model_add with the message under this layer's heading (model_add's own "layer N (kind): "
// names hetrain's index, which the user never wrote).
int keras_add(kctx *k, model *m, const layer_spec *s);
// Keras's output size along one axis (same: "same" padding).
int keras_out(int in, int kk, int stride, int same);
// Checks the layer model_add just made against what Keras computes for it.
int keras_check_layer(kctx *k, const model *m, int oc, int oh, int ow, size_t params);
// The current output as Keras shapes it (without the batch axis); returns its rank.
int keras_shape(const kctx *k, const model *m, int64_t d[3]);
// Fails unless the running tensor is an image.
int keras_need_image(kctx *k);
// Fails unless the layer being read is given 2 or more inputs (kctx.from): a merge's.
int keras_need_merge(kctx *k);
// The running output size of the model (before the layer being read).
void keras_cur_shape(const kctx *k, const model *m, int *c, int *h, int *w);
// A layer's axis (its config's "axis": an integer or a list of one; absent: -1) is the
// channels of an image or the features of a vector, what batchnorm and normalize work over,
// and not the features of a flattened image (Keras normalises each, hetrain each channel); or
// the message saying what hetrain normalises over.
int keras_channel_axis(kctx *k, const model *m, json_object *cfg);
// The layer's data_format against the model's: 0 the same, 1 the other, -1 an error.
int keras_other_format(kctx *k, json_object *cfg);
// A layer whose data_format is not the model's runs between two permutes: inverse 0 adds the
// one before it, 1 the one after (keras_build.c says why and which).
int keras_add_permute(kctx *k, model *m, const char *kname, const char *suffix, int inverse);
// Keras's output of a window over the two axes a layer of the other data_format works over,
// with OC channels (0: the input's), in hetrain's (C, H, W) order.
void keras_mixed_out(const kctx *k, const model *m, int kk, int stride, int same, int oc,
                     int64_t out[3]);
// Softmax as the network's last step (its softmax cross-entropy), and a sigmoid's heads.
int keras_add_softmax(kctx *k, model *m, const char *name, int last);
int keras_add_bce(kctx *k, model *m, const char *name);
// An activation by Keras's name: the layer kind that computes it (layer_desc.h), or -1 for
// linear (none).
int keras_get_activation(kctx *k, json_object *cfg, int required, int *act);
// Keras's activation functions' parameters, where they differ from the layer classes'.
void keras_activation_defaults(const kctx *k, layer_spec *s);
// The activation (a layer kind, -1: none) that follows a Conv2D or Dense, named after it.
int keras_add_activation(kctx *k, model *m, int act, const char *kname, int last);
// A Conv2D's or Dense's weights: bias, activation, initializers, regularizers, frozen.
int keras_read_weights(kctx *k, json_object *cfg, layer_spec *s, int *act);
// The same with the kernel's arguments under another name (DepthwiseConv2D's "depthwise":
// depthwise_initializer, depthwise_regularizer, depthwise_constraint).
int keras_read_weights_of(kctx *k, json_object *cfg, const char *kernel, layer_spec *s,
                          int *act);

// ---- keras_graph.c ---------------------------------------------------------------------------

// One call of a layer of a Functional model's list: the layer (its index in the list), which
// of its calls (its inbound_nodes' entry: Keras's node index; 1 and more are a shared layer's
// later calls) and what it reads (n_in calls, as positions in keras_graph_calls's order).
typedef struct kcall {
    int layer, node, n_in;
    int in[MODEL_MAX_IN];
} kcall;
#define KERAS_MAX_CALLS 8192
// The calls of a Functional model's layers (keras_graph.c) in an order they can run in: the
// list's, a call moved after what it reads (the InputLayer's one first, reading nothing; the
// model's output, the last layer's only call, last). *out is malloc'd; returns the count, or
// -1 with kfail for a graph hetrain cannot compute.
int keras_graph_calls(kctx *k, json_object *cfg, json_object *layers, kcall **out);
// The layer list with each Sequential inside it (keras.applications' ConvNeXt's stem and
// downsampling blocks) replaced by its layers, called in a chain as the Sequential runs them
// (its inner layers' inbound_nodes are written, its readers renamed to read its last layer;
// a Sequential inside those is left for the next call), how many in *inlined. A new
// reference, or NULL after kfail.
json_object *keras_graph_inline(kctx *k, json_object *layers, int *inlined);
// The key keras_graph_inline marks each layer it moves out of a Sequential with: the number of
// that Sequential among its list's (1, 2, ...; -1: a Sequential inside a Sequential), which the
// reader keeps in the layers it adds (model.h: keras_seq).
#define KERAS_SEQ_KEY "__hetrain_sequential"

#endif
