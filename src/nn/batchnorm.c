// Batch normalisation (Keras's BatchNormalization, PyTorch's BatchNorm2d/1d) over the channels
// of a channels-last tensor (after a conv or pool: per channel over every position; after a
// dense layer: per unit). Training normalises each group of G consecutive samples of a batch
// (a ghost batch, model_bn_group) with that group's own mean and biased variance; inference
// with the moving averages. Statistics are accumulated in double.
//
// The moving averages are model state (model.h): the devices hand each group's mean and
// variance back in the state's place of their gradient sum (added over groups, with the count
// of groups in num_batches_tracked's place), the engine adds those up over devices and ranks as
// it does gradients, and model_bn_update turns them into one Keras update per step:
// moving = momentum * moving + (1 - momentum) * (mean over the batch's groups).
#include "batchnorm.h"

#include "layer_desc.h"
#include "layers.h"
#include "net_layers.h"

#include "ht_omp.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int model_bn_group(const model *m) {
    int any = 0;
    for (int l = 0; l < m->n_layers && !any; l++) any = m->layers[l].kind == LAYER_BATCHNORM;
    if (!any) return 0;
    return m->setup.bn_group > 0 ? m->setup.bn_group : MODEL_DEFAULT_BN_GROUP;
}

void model_bn_update(const model *m, float *params, const float *sums) {
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (!L->n_s) continue;
        const int C = L->oc;
        const float *s = sums + L->s_off;
        float *st = params + L->s_off;
        const double groups = s[2 * C];
        if (!(groups > 0)) continue;
        const double mom = L->momentum;
        for (int c = 0; c < 2 * C; c++)
            st[c] = (float)(mom * st[c] + (1.0 - mom) * (s[c] / groups));
        st[2 * C] += 1.0f;
    }
}

// ---- the math, channels-last with channel stride cs (pad channels stay zero) ----------------

// Per (group, channel): mean, biased variance, 1/sqrt(var + eps) into stats (3 * C per group).
void bn_train_forward(float *out, const float *in, const float *gamma, const float *beta,
                      float *stats, int B, int P, int C, int cs, int G, float eps, int nthreads) {
    const int ng = (B + G - 1) / G;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads)
    {
        double *acc = malloc(sizeof(double) * 2 * (size_t)C);
#pragma omp for schedule(static)
        for (int g = 0; g < ng; g++) {
            if (!acc) continue;
            const int s0 = g * G, s1 = s0 + G < B ? s0 + G : B;
            const size_t r0 = (size_t)s0 * P, r1 = (size_t)s1 * P;
            const double R = (double)(r1 - r0);
            double *mean = acc, *var = acc + C;
            for (int c = 0; c < C; c++) mean[c] = var[c] = 0;
            for (size_t r = r0; r < r1; r++)
                for (int c = 0; c < C; c++) mean[c] += in[r * cs + c];
            for (int c = 0; c < C; c++) mean[c] /= R;
            for (size_t r = r0; r < r1; r++)
                for (int c = 0; c < C; c++) {
                    double d = in[r * cs + c] - mean[c];
                    var[c] += d * d;
                }
            float *st = stats + (size_t)g * 3 * C;
            for (int c = 0; c < C; c++) {
                var[c] /= R;
                st[c] = (float)mean[c];
                st[C + c] = (float)var[c];
                st[2 * C + c] = (float)(1.0 / sqrt(var[c] + (double)eps));
            }
            for (size_t r = r0; r < r1; r++) {
                const float *x = in + r * cs;
                float *y = out + r * cs;
                for (int c = 0; c < C; c++) {
                    float xh = (x[c] - st[c]) * st[2 * C + c];
                    y[c] = (gamma ? gamma[c] : 1.0f) * xh + (beta ? beta[c] : 0.0f);
                }
                for (int c = C; c < cs; c++) y[c] = 0.0f;
            }
        }
        free(acc);
    }
}

void bn_infer_forward(float *out, const float *in, const float *gamma, const float *beta,
                      const float *mean, const float *var, size_t rows, int C, int cs, float eps,
                      int nthreads) {
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (rows * (size_t)cs >= 32768)
    for (size_t r = 0; r < rows; r++) {
        const float *x = in + r * cs;
        float *y = out + r * cs;
        for (int c = 0; c < C; c++) {
            float inv = 1.0f / sqrtf(var[c] + eps);
            y[c] = (gamma ? gamma[c] : 1.0f) * ((x[c] - mean[c]) * inv) + (beta ? beta[c] : 0.0f);
        }
        for (int c = C; c < cs; c++) y[c] = 0.0f;
    }
}

int bn_train_backward(float *din, float *dgamma, float *dbeta, float *state_sums,
                      const float *dout, const float *in, const float *gamma, const float *stats,
                      int B, int P, int C, int cs, int G, int nthreads) {
    const int ng = (B + G - 1) / G;
    double *sums = malloc(sizeof(double) * 2 * (size_t)C * (size_t)ng);
    if (!sums) return -1;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int g = 0; g < ng; g++) {
        const int s0 = g * G, s1 = s0 + G < B ? s0 + G : B;
        const size_t r0 = (size_t)s0 * P, r1 = (size_t)s1 * P;
        const double R = (double)(r1 - r0);
        const float *st = stats + (size_t)g * 3 * C;
        double *sdy = sums + (size_t)g * 2 * C, *sdx = sdy + C;
        for (int c = 0; c < C; c++) sdy[c] = sdx[c] = 0;
        for (size_t r = r0; r < r1; r++)
            for (int c = 0; c < C; c++) {
                double dy = dout[r * cs + c];
                sdy[c] += dy;
                sdx[c] += dy * ((in[r * cs + c] - st[c]) * st[2 * C + c]);
            }
        if (!din) continue;
        for (size_t r = r0; r < r1; r++) {
            const float *x = in + r * cs, *dy = dout + r * cs;
            float *dx = din + r * cs;
            for (int c = 0; c < C; c++) {
                const double inv = st[2 * C + c], xh = (x[c] - st[c]) * inv;
                const double k = (gamma ? gamma[c] : 1.0) * inv;
                dx[c] = (float)(k * (dy[c] - sdy[c] / R - xh * sdx[c] / R));
            }
            for (int c = C; c < cs; c++) dx[c] = 0.0f;
        }
    }
    // The groups' sums in group order: the same bits for any thread count.
    for (int g = 0; g < ng; g++) {
        const double *sdy = sums + (size_t)g * 2 * C, *sdx = sdy + C;
        const float *st = stats + (size_t)g * 3 * C;
        for (int c = 0; c < C; c++) {
            if (dgamma) dgamma[c] += (float)sdx[c];
            if (dbeta) dbeta[c] += (float)sdy[c];
            state_sums[c] += st[c];
            state_sums[C + c] += st[C + c];
        }
        state_sums[2 * C] += 1.0f;
    }
    free(sums);
    return 0;
}

// ---- the bn family: its description (layer_desc.h) and CPU ops (net_layers.h) ---------------

static int bn_shape(layer *L, const layer_spec *s, const layer_desc *d, int n_classes, int idx,
                    ht_error *err) {
    (void)n_classes;
    double mom = s->momentum_set ? s->momentum : BN_DEFAULT_MOMENTUM;
    double eps = s->eps_set ? s->eps : BN_DEFAULT_EPS;
    if (!(mom >= 0 && mom <= 1))
        return ht_fail(err, "layer %d (%s): momentum %g: expected 0..1 (Keras's: the moving "
                       "averages keep this much of their value at each step)", idx, d->name, mom);
    if (!(eps > 0 && eps <= 1))
        return ht_fail(err, "layer %d (%s): epsilon %g: expected a number in (0, 1]", idx,
                       d->name, eps);
    L->momentum = (float)mom;
    L->eps = (float)eps;
    L->oc = L->c, L->oh = L->h, L->ow = L->w;
    L->n_w = s->no_scale ? 0 : (size_t)L->c;  // gamma: "<layer>.weight"
    L->n_b = s->no_center ? 0 : (size_t)L->c; // beta: "<layer>.bias"
    L->n_s = 2 * (size_t)L->c + 1;            // running mean, running variance, count
    return 0;
}

static double bn_macs(const layer *L) {
    (void)L;
    return 0;
}

static const char *const bn_keys[] = {"momentum", "epsilon", "eps", "center", "scale", "affine",
                                      NULL};
static const char *const bn_required[] = {NULL};

const layer_family family_bn = {"bn", LF_PARAMS | LF_SPATIAL, bn_keys, bn_required, bn_shape,
                                NULL, bn_macs};

static const float *bn_gamma(const float *buf, const layer *L) {
    return L->n_w ? buf + L->w_off : NULL;
}

static void bn_fwd(const net_call *c) {
    const layer *L = c->L;
    const int P = L->h * L->w, cs = c->p->in_cs;
    const float *gamma = bn_gamma(c->params, L), *beta = net_bias(c->params, L);
    if (c->drop)
        bn_train_forward(c->out, c->in, gamma, beta, c->bn_stats, c->B, P, L->c, cs, c->group,
                         L->eps, c->nt);
    else
        bn_infer_forward(c->out, c->in, gamma, beta, c->params + L->s_off,
                         c->params + L->s_off + L->c, (size_t)c->B * P, L->c, cs, L->eps, c->nt);
}

static float *bn_bwd(const net_call *c) {
    const layer *L = c->L;
    float *dgamma = L->n_w ? c->grads + L->w_off : NULL, *dbeta = net_bias(c->grads, L);
    float *state = c->grads + L->s_off;
    if (c->beta == 0.0f) { // the first micro-batch of a shard writes the sums
        if (dgamma) memset(dgamma, 0, sizeof(float) * L->n_w);
        if (dbeta) memset(dbeta, 0, sizeof(float) * L->n_b);
        memset(state, 0, sizeof(float) * L->n_s);
    }
    // Out of memory for the groups' sums: the gradient comes back non-finite, which the
    // engine reports as that device's failure.
    if (bn_train_backward(c->din, dgamma, dbeta, state, c->dout, c->in,
                          bn_gamma(c->params, L), c->bn_stats, c->B, L->h * L->w, L->c,
                          c->p->in_cs, c->group, c->nt) < 0)
        state[2 * L->c] = NAN;
    return c->din;
}

// Never in the per-sample trunk: its statistics are over groups of samples.
const net_layer_ops cpu_bn = {bn_fwd, bn_bwd, NULL, NULL};
