// The permute family: a sample's (C, H, W) axes reordered, as PyTorch's
// x.permute(0, a, b, c). It is how a Keras layer whose data_format is not its model's runs:
// Keras hands that layer the model's tensor and the layer reads its axes in its own order, so
// the Keras reader puts the layer between two permutes (keras_layers.c). It reads and writes
// NCHW tensors (LF_FLAT: the CPU path converts a channels-last input first).
#include "nn/layers.h"

#include "nn/keras_int.h"
#include "nn/layer_desc.h"
#include "nn/net_layers.h"

// Input strides of out's axes: the input element behind out (a, b, c) is at
// a * st[0] + b * st[1] + c * st[2].
static void permute_strides(const int dims[3], const int perm[3], size_t st[3]) {
    const size_t in_st[3] = {(size_t)dims[1] * dims[2], (size_t)dims[2], 1};
    for (int i = 0; i < 3; i++) st[i] = in_st[perm[i] - 1];
}

void permute_forward(float *out, const float *in, int B, const int dims[3], const int perm[3],
                     int nthreads) {
    size_t st[3];
    permute_strides(dims, perm, st);
    const int o0 = dims[perm[0] - 1], o1 = dims[perm[1] - 1], o2 = dims[perm[2] - 1];
    const size_t n = (size_t)dims[0] * dims[1] * dims[2];
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if ((size_t)B * n >= 65536)
    for (int i = 0; i < B; i++) {
        const float *x = in + (size_t)i * n;
        float *y = out + (size_t)i * n;
        for (int a = 0; a < o0; a++)
            for (int b = 0; b < o1; b++)
                for (int c = 0; c < o2; c++)
                    *y++ = x[a * st[0] + b * st[1] + c * st[2]];
    }
}

void permute_backward(float *din, const float *dout, int B, const int dims[3], const int perm[3],
                      int nthreads) {
    // The gradient goes back through the inverse permutation, over the output's dims.
    int inv[3], odims[3];
    for (int i = 0; i < 3; i++) inv[perm[i] - 1] = i + 1, odims[i] = dims[perm[i] - 1];
    permute_forward(din, dout, B, odims, inv, nthreads);
}

// ---- the permute family: its description (layer_desc.h) and CPU ops (net_layers.h) ----

static int permute_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes,
                         int idx, ht_error *err) {
    (void)n_classes;
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        if (s->perm[i] < 1 || s->perm[i] > 3 || (seen & (1 << s->perm[i])))
            return ht_fail(err, "layer %d (%s): dims %d,%d,%d: expected a permutation of 1,2,3 "
                           "(the axes C, H, W)", idx, d->name, s->perm[0], s->perm[1],
                           s->perm[2]);
        seen |= 1 << s->perm[i];
        L->perm[i] = s->perm[i];
    }
    const int dims[3] = {L->c, L->h, L->w};
    L->oc = dims[L->perm[0] - 1], L->oh = dims[L->perm[1] - 1], L->ow = dims[L->perm[2] - 1];
    return 0;
}

static double no_macs(const layer *L) {
    (void)L;
    return 0;
}

// dims = a,b,c: three axes, "2,3,1".
static int permute_dims_key(layer_spec *s, const layer_key_in *in) {
    const char *v = in->value;
    int n = 0, used = 0;
    if (sscanf(v, " %d , %d , %d %n", &s->perm[0], &s->perm[1], &s->perm[2], &used) != 3 ||
        v[used] != 0)
        n = -1;
    for (int i = 0; n == 0 && i < 3; i++)
        if (s->perm[i] < 1 || s->perm[i] > 3) n = -1;
    if (n < 0 || s->perm[0] == s->perm[1] || s->perm[1] == s->perm[2] ||
        s->perm[0] == s->perm[2]) {
        snprintf(in->msg, in->cap, "dims = %s: expected a permutation of the axes 1,2,3 "
                 "(C, H, W), such as 2,3,1", v);
        return -1;
    }
    return 0;
}

static const layer_key permute_keys[] = {
    {"dims", NULL, LK_PARSE, LK_REQUIRED, 0, 0, 0, 0, permute_dims_key},
    LK_END,
};

const layer_family family_permute = {.name = "permute", .flags = LF_FLAT, .keys = permute_keys,
                                     .shape = permute_shape, .macs = no_macs};

static void permute_fwd(const net_call *c) {
    const int dims[3] = {c->L->c, c->L->h, c->L->w};
    permute_forward(c->out, c->in, c->B, dims, c->L->perm, c->nt);
}
static float *permute_bwd(const net_call *c) {
    const int dims[3] = {c->L->c, c->L->h, c->L->w};
    if (!c->din) return NULL;
    permute_backward(c->din, c->dout, c->B, dims, c->L->perm, c->nt);
    return c->din;
}

// Never in the per-sample trunk: it reads NCHW.
const net_layer_ops cpu_permute = {.forward = permute_fwd, .backward = permute_bwd};

// Keras's Permute is not read (yet): the Keras reader adds permutes around a layer of the
// other data_format itself (keras_build.c).
const keras_family keras_permute = {NULL, NULL};
