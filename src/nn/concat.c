// The concat family: several inputs of one height and width, their channels one after another
// (Keras's Concatenate on the channel axis, DenseNet's blocks). On the CPU path channels-last:
// each input with its own channel stride, the output with a whole number of vectors
// (conv_cpad), its pad channels zero.
#include "nn/layers.h"

#include <string.h>

#include "nn/layer_desc.h"
#include "nn/net_layers.h"

void concat_forward(float *out, int out_cs, const float *const *ins, const int *in_c,
                    const int *in_cs, int n_in, size_t rows, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (rows * out_cs >= 65536)
    for (size_t r = 0; r < rows; r++) {
        float *y = out + r * out_cs;
        int at = 0;
        for (int k = 0; k < n_in; k++) {
            memcpy(y + at, ins[k] + r * in_cs[k], sizeof(float) * in_c[k]);
            at += in_c[k];
        }
        if (at < out_cs) memset(y + at, 0, sizeof(float) * (out_cs - at));
    }
}

void concat_backward(float *const *dins, const int *in_c, const int *in_cs, int n_in,
                     const float *dout, int out_cs, size_t rows, int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (rows * out_cs >= 65536)
    for (size_t r = 0; r < rows; r++) {
        int at = 0;
        for (int k = 0; k < n_in; k++) {
            if (dins[k]) {
                float *d = dins[k] + r * in_cs[k];
                memcpy(d, dout + r * out_cs + at, sizeof(float) * in_c[k]);
                if (in_cs[k] > in_c[k]) memset(d + in_c[k], 0, sizeof(float) * (in_cs[k] - in_c[k]));
            }
            at += in_c[k];
        }
    }
}

static int concat_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                        int idx, ht_error *err) {
    (void)s, (void)n_classes;
    int64_t c = 0;
    for (int k = 0; k < L->n_in; k++) c += L->in_ch[k];
    if (c > MODEL_MAX_DIM)
        return ht_fail(err, "layer %d (%s): %lld channels, more than %d", idx, d->name,
                       (long long)c, MODEL_MAX_DIM);
    L->oc = (int)c, L->oh = L->h, L->ow = L->w; // model_add checked the inputs' H and W
    return 0;
}

static double concat_macs(const layer *L) {
    (void)L;
    return 0;
}

static const layer_key concat_keys[] = {LK_END}; // its inputs: `from`, as every layer's

const layer_family family_concat = {.name = "concat",
                                    .flags = LF_MERGE | LF_CONCAT | LF_SPATIAL,
                                    .keys = concat_keys, .shape = concat_shape,
                                    .macs = concat_macs};

static void concat_fwd(const net_call *c) {
    concat_forward(c->out, c->p->out_cs, c->ins, c->L->in_ch, c->p->ins_cs, c->n_in,
                   (size_t)c->B * c->L->h * c->L->w, c->nt);
}
static float *concat_bwd(const net_call *c) {
    concat_backward((float *const *)c->dins, c->L->in_ch, c->p->ins_cs, c->n_in, c->dout,
                    c->p->out_cs, (size_t)c->B * c->L->h * c->L->w, c->nt);
    return c->dins[0];
}
// Its output's channel stride: whole vectors, as a convolution's.
static int concat_out_cs(const layer *L, int in_cs) {
    (void)in_cs;
    return conv_cpad(L->oc);
}

// Batch-wise only: the per-sample trunk ends before a merge.
const net_layer_ops cpu_concat = {.forward = concat_fwd, .backward = concat_bwd,
                                  .out_cs = concat_out_cs};
