// The OpenCL device's op table (ocl_layers.h): each family's forward and backward over the ops
// of ocl_ops.h, NCHW throughout.
#include "devices/ocl_layers.h"

#include "nn/layer_desc.h"

conv_geom ocl_conv_geom(const layer *L, const conv_choice *algo) {
    conv_geom g = {.C = L->c, .Cs = L->c, .H = L->h, .W = L->w, .OC = L->oc, .K = L->k,
                   .stride = L->stride, .pad = L->pad, .OH = L->oh, .OW = L->ow};
    if (algo) g.fwd = algo->fwd, g.din = algo->din, g.dw = algo->dw;
    // The CPU path's GEMMs over the batch are this path's direct im2col + CLBlast.
    if (conv_impl_gemm(g.fwd)) g.fwd = CONV_DIRECT;
    if (conv_impl_gemm(g.din)) g.din = CONV_DIRECT;
    if (conv_impl_gemm(g.dw)) g.dw = CONV_DIRECT;
    return g;
}
static pool_geom pool_of(const layer *L) {
    return (pool_geom){.Cs = L->c, .H = L->h, .W = L->w, .K = L->k, .stride = L->stride,
                       .pad = L->pad, .OH = L->oh, .OW = L->ow};
}
static size_t out_floats(const ocl_call *c) { return layer_out_size(c->L) * (size_t)c->B; }

// ---- conv: im2col + CLBlast; the im2col matrix is the layer's own buffer ----

static int conv_fwd(const ocl_call *c, ht_error *e) {
    conv_geom g = ocl_conv_geom(c->L, c->algo);
    if (g.fwd != CONV_DIRECT)
        return ocl_wino_forward(c->o, &g, c->B, c->out, c->in, c->params, c->L->b_off, c->wino_u,
                                c->wino, c->wino_exact, e);
    ocl_conv_scratch s = {c->aux, c->tmp, 0, 0};
    return ocl_conv2d_forward(c->o, &g, c->B, c->out, c->in, c->params, c->L->w_off,
                              c->L->b_off, &s, e);
}
// A direct forward of this micro-batch left the layer's im2col matrix in its buffer. The bias
// gradient, and each direction computed directly, first; then the Winograd ones.
static int conv_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    conv_geom g = ocl_conv_geom(c->L, c->algo);
    ocl_conv_scratch s = {c->aux, c->tmp, 0, g.fwd == CONV_DIRECT};
    *din = c->din;
    if (ocl_conv2d_backward(c->o, &g, c->B, c->din, c->grads, c->dout, c->in, c->params,
                            c->L->w_off, c->L->b_off, &s, e))
        return -1;
    if (g.dw != CONV_DIRECT && ocl_wino_weight_grad(c->o, &g, c->B, c->grads, c->L->w_off,
                                                    c->dout, c->in, c->wino, e))
        return -1;
    if (c->din && g.din != CONV_DIRECT)
        return ocl_wino_input_grad(c->o, &g, c->B, c->din, c->dout, c->wino_u, c->wino, e);
    return 0;
}
// A convolution whose every direction runs Winograd needs no im2col matrix.
static size_t conv_aux(const layer *L, const conv_choice *algo, int B) {
    conv_geom a = ocl_conv_geom(L, algo); // the CPU's gemm is direct here
    if (algo && a.fwd != CONV_DIRECT && a.din != CONV_DIRECT && a.dw != CONV_DIRECT) return 0;
    conv_geom g = ocl_conv_geom(L, NULL);
    return ocl_conv2d_col_floats(&g, B) * sizeof(float);
}
static size_t conv_tmp(const layer *L, int B) {
    conv_geom g = ocl_conv_geom(L, NULL);
    return ocl_conv2d_tmp_floats(&g, B);
}

// ---- pool: max pooling keeps its winners in its own buffer ----

static int pool_fwd(const ocl_call *c, ht_error *e) {
    pool_geom g = pool_of(c->L);
    if (c->L->kind == LAYER_MAXPOOL)
        return ocl_maxpool_forward(c->o, &g, c->B, c->out, c->aux, c->in, e);
    return ocl_avgpool_forward(c->o, &g, c->B, c->out, c->in, e);
}
static int pool_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    pool_geom g = pool_of(c->L);
    *din = c->din;
    if (!c->din) return 0;
    if (c->L->kind == LAYER_MAXPOOL)
        return ocl_maxpool_backward(c->o, &g, c->B, c->din, c->dout, c->aux, e);
    return ocl_avgpool_backward(c->o, &g, c->B, c->din, c->dout, e);
}
static size_t pool_aux(const layer *L, const conv_choice *algo, int B) {
    (void)algo;
    return L->kind == LAYER_MAXPOOL ? layer_out_size(L) * (size_t)B * sizeof(int32_t) : 0;
}

// ---- gap ----

static int gap_fwd(const ocl_call *c, ht_error *e) {
    return ocl_gavgpool_forward(c->o, c->out, c->in, c->B, c->L->c, c->L->h, c->L->w, e);
}
static int gap_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    return c->din ? ocl_gavgpool_backward(c->o, c->din, c->dout, c->B, c->L->c, c->L->h, c->L->w, e)
                  : 0;
}

// ---- dense ----

static int dense_fwd(const ocl_call *c, ht_error *e) {
    return ocl_dense_forward(c->o, c->out, c->in, c->params, c->L->w_off, c->L->b_off, c->B,
                             (int)layer_in_size(c->L), c->L->oc, e);
}
static int dense_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    return ocl_dense_backward(c->o, c->din, c->grads, c->L->w_off, c->L->b_off, c->dout, c->in,
                              c->params, c->B, (int)layer_in_size(c->L), c->L->oc, e);
}

// ---- relu and dropout: in place ----

static int relu_fwd(const ocl_call *c, ht_error *e) {
    return ocl_relu_forward(c->o, c->out, c->in, out_floats(c), e);
}
static int relu_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->dout;
    return c->din ? ocl_relu_backward(c->o, c->dout, c->dout, c->out, out_floats(c), e) : 0;
}

static int dropout_fwd(const ocl_call *c, ht_error *e) {
    if (c->keys)
        return ocl_dropout(c->o, c->out, c->in, c->B, layer_out_size(c->L), c->L->rate,
                           c->keys[c->l], layer_dropout_emask(c->L), c->ids, e);
    return c->out != c->in ? ocl_copy(c->o, c->in, 0, c->out, 0, out_floats(c) * sizeof(float), e)
                           : 0;
}
static int dropout_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->dout;
    return ocl_dropout(c->o, c->dout, c->dout, c->B, layer_out_size(c->L), c->L->rate,
                       c->keys[c->l], layer_dropout_emask(c->L), c->ids, e);
}

// ---- softmax + cross-entropy: its gradient goes to the spare buffer, even as a first layer ----

static int softmax_fwd(const ocl_call *c, ht_error *e) {
    return ocl_softmax_xent_forward(c->o, c->out, c->loss, c->in, c->y, c->B, c->L->oc, e);
}
static int softmax_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->spare;
    return ocl_softmax_xent_backward(c->o, c->spare, c->out, c->y, c->B, c->L->oc, e);
}

// ---- the binary and multi-label heads (sigmoid + binary cross-entropy): like softmax's, into
// the spare buffer ----

static int bce_fwd(const ocl_call *c, ht_error *e) {
    return ocl_bce_forward(c->o, c->out, c->loss, c->in, c->y, c->B, (int)layer_in_size(c->L), e);
}
static int bce_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->spare;
    return ocl_bce_backward(c->o, c->spare, c->out, c->y, c->B, (int)layer_in_size(c->L), e);
}

// ---- permute ----

static int permute_fwd(const ocl_call *c, ht_error *e) {
    const int dims[3] = {c->L->c, c->L->h, c->L->w};
    return ocl_permute(c->o, c->out, c->in, c->B, dims, c->L->perm, 0, e);
}
static int permute_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    const int dims[3] = {c->L->c, c->L->h, c->L->w};
    *din = c->din;
    return c->din ? ocl_permute(c->o, c->din, c->dout, c->B, dims, c->L->perm, 1, e) : 0;
}

// ---- act ----

static int act_fwd(const ocl_call *c, ht_error *e) {
    return ocl_act_forward(c->o, c->act, c->L->alpha, c->out, c->in,
                           out_floats(c), e);
}
static int act_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    *din = c->din;
    return c->din ? ocl_act_backward(c->o, c->act, c->L->alpha, c->din, c->dout,
                                     c->in, out_floats(c), e)
                  : 0;
}

// ---- bn: the groups' statistics are the layer's own buffer, the backward's sums scratch ----

static ocl_bn_geom bn_of(const layer *L) {
    return (ocl_bn_geom){.C = L->c, .P = L->h * L->w, .w_off = L->n_w ? L->w_off : OCL_NO_BIAS,
                         .b_off = L->n_b ? L->b_off : OCL_NO_BIAS, .s_off = L->s_off,
                         .eps = L->eps};
}
static int bn_fwd(const ocl_call *c, ht_error *e) {
    ocl_bn_geom g = bn_of(c->L);
    if (c->keys && !c->L->frozen) // a frozen layer normalises as at inference (Keras)
        return ocl_bn_train_forward(c->o, &g, c->B, c->group, c->out, c->in, c->params, c->aux,
                                    e);
    return ocl_bn_infer_forward(c->o, &g, c->B, c->out, c->in, c->params, e);
}
static int bn_bwd(const ocl_call *c, cl_mem *din, ht_error *e) {
    ocl_bn_geom g = bn_of(c->L);
    *din = c->din;
    if (c->L->frozen) // no gradients of its own, no statistics (the buffer's zeros stay)
        return c->din ? ocl_bn_frozen_backward(c->o, &g, c->B, c->din, c->dout, c->params, e) : 0;
    return ocl_bn_backward(c->o, &g, c->B, c->group, c->din, c->grads, c->dout, c->in,
                           c->params, c->aux, c->tmp, e);
}
// Sized for groups of one sample, the most groups B samples make.
static size_t bn_aux(const layer *L, const conv_choice *algo, int B) {
    (void)algo;
    return ocl_bn_stats_floats(L->c, B) * sizeof(float);
}
static size_t bn_tmp(const layer *L, int B) { return ocl_bn_sums_floats(L->c, B); }

static const char *const conv_kernels[] = {"im2col",     "bias_to_nchw",     "nchw_to_rows",
                                           "row_sum",    "col2im",           "wino_input",
                                           "wino_output", "wino_zero_fields", "wino_grad_tiles",
                                           "wino_dw_finish", NULL};
static const char *const pool_kernels[] = {"maxpool_fwd", "maxpool_bwd", "maxpool_bwd_tiled",
                                           "avgpool_fwd", "avgpool_bwd", NULL};
static const char *const gap_kernels[] = {"gavgpool_fwd", "gavgpool_bwd", NULL};
static const char *const dense_kernels[] = {"dense_bias", "col_sum", NULL};
static const char *const relu_kernels[] = {"relu_fwd", "relu_bwd", NULL};
static const char *const dropout_kernels[] = {"dropout", NULL};
static const char *const softmax_kernels[] = {"softmax_xent_fwd", "softmax_xent_bwd", NULL};
static const char *const act_kernels[] = {"act_fwd", "act_bwd", NULL};
static const char *const bce_kernels[] = {"bce_fwd", "bce_bwd", NULL};
static const char *const permute_kernels[] = {"permute3", NULL};
static const char *const bn_kernels[] = {"bn_stats", "bn_fwd", "bn_infer", "bn_bwd_sums",
                                         "bn_bwd_dx", "bn_bwd_reduce", "bn_frozen_bwd", NULL};

const ocl_layer_ops cl_conv = {conv_fwd, conv_bwd, conv_aux, conv_tmp, 1, conv_kernels};
const ocl_layer_ops cl_pool = {pool_fwd, pool_bwd, pool_aux, NULL, 0, pool_kernels};
const ocl_layer_ops cl_gap = {gap_fwd, gap_bwd, NULL, NULL, 0, gap_kernels};
const ocl_layer_ops cl_dense = {dense_fwd, dense_bwd, NULL, NULL, 0, dense_kernels};
const ocl_layer_ops cl_relu = {relu_fwd, relu_bwd, NULL, NULL, 0, relu_kernels};
const ocl_layer_ops cl_dropout = {dropout_fwd, dropout_bwd, NULL, NULL, 0, dropout_kernels};
const ocl_layer_ops cl_softmax = {softmax_fwd, softmax_bwd, NULL, NULL, 0, softmax_kernels};
const ocl_layer_ops cl_act = {act_fwd, act_bwd, NULL, NULL, 0, act_kernels};
const ocl_layer_ops cl_bce = {bce_fwd, bce_bwd, NULL, NULL, 0, bce_kernels};
const ocl_layer_ops cl_permute = {permute_fwd, permute_bwd, NULL, NULL, 0, permute_kernels};
const ocl_layer_ops cl_bn = {bn_fwd, bn_bwd, bn_aux, bn_tmp, 0, bn_kernels};

const ocl_layer_ops *const ocl_layer_ops_of[LAYER_KIND_COUNT] = {
#define OCL_OPS_ROW(id, fam, name, prefix, keras, key, dflt) [LAYER_##id] = &cl_##fam,
    LAYER_KINDS(OCL_OPS_ROW)
#undef OCL_OPS_ROW
};

int ocl_layers_check(const ocl_ops *o, const model *m, ht_error *e) {
    for (int l = 0; l < m->n_layers; l++) {
        const char *const *k = ocl_layer_ops_of[m->layers[l].kind]->kernels;
        for (int i = 0; k[i]; i++)
            if (ocl_kernel_index(o, k[i]) < 0)
                return ht_fail(e, "%s: kernel \"%s\" of layer %s (%s) is missing from "
                                  "kernels/*.cl", o->label, k[i], m->layers[l].name,
                               layer_desc_of(m->layers[l].kind)->name);
    }
    return 0;
}
