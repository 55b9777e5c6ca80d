// Keras's BatchNormalization as the bn family (keras_int.h).
#include "nn/keras_int.h"

#include "nn/layer_desc.h"

// Keras's BatchNormalization over the channels of an image or the features of a vector, as
// hetrain's batchnorm. Keras counts the moving mean and variance as (non-trainable) parameters;
// hetrain keeps them, with its count of updates, as the model's state after every parameter.
static int bn_keras_read(kctx *k, model *m, json_object *cfg, layer_kind kind,
                         const char *kname, int last) {
    (void)kind, (void)last;
    static const char *const extras[] = {"beta_regularizer", "gamma_regularizer",
                                         "beta_constraint", "gamma_constraint",
                                         "activity_regularizer", NULL};
    int center = 1, scale = 1, renorm = 0, c, h, w;
    double mom = 0.99, eps = 1e-3; // Keras's defaults (batchnorm.h)
    init_desc gi = {0}, bi = {0}, mi = {0}, vi = {0};
    char buf[32];
    if (kcheck_nulls(k, cfg, extras, "hetrain regularizes Conv2D and Dense weights alone, and "
                     "adds no constraints") ||
        (kget(cfg, "momentum") && kget_num(k, cfg, "momentum", &mom)) ||
        (kget(cfg, "epsilon") && kget_num(k, cfg, "epsilon", &eps)) ||
        kget_bool(k, cfg, "center", 1, &center) || kget_bool(k, cfg, "scale", 1, &scale) ||
        kget_bool(k, cfg, "renorm", 0, &renorm) ||
        kget_init(k, cfg, "gamma_initializer", "ones", &gi) ||
        kget_init(k, cfg, "beta_initializer", "zeros", &bi) ||
        kget_init(k, cfg, "moving_mean_initializer", "zeros", &mi) ||
        kget_init(k, cfg, "moving_variance_initializer", "ones", &vi))
        return -1;
    // Keras 3's synchronized (statistics across replicas) needs nothing: hetrain's statistics
    // are per group of bn_group samples, the same whichever devices compute them.
    if (renorm) return kfail(k, "renorm true: hetrain's batchnorm is Keras's plain one");
    static const char *const ghost[] = {"virtual_batch_size", NULL};
    if (kcheck_nulls(k, cfg, ghost, "hetrain's statistics are over groups of --bn-group or [net] "
                    "bn_group samples"))
        return -1;
    if (!(mi.kind == INIT_ZEROS || (mi.kind == INIT_CONSTANT && mi.arg == 0)))
        return kfail(k, "moving_mean_initializer %s: hetrain starts the moving mean at zeros "
                     "(Keras's default)", init_kind_names[mi.kind]);
    if (!(vi.kind == INIT_ONES || (vi.kind == INIT_CONSTANT && vi.arg == 1)))
        return kfail(k, "moving_variance_initializer %s: hetrain starts the moving variance at "
                     "ones (Keras's default)", init_kind_names[vi.kind]);

    if (keras_channel_axis(k, m, cfg)) return -1;
    keras_cur_shape(k, m, &c, &h, &w);

    layer_spec s = {.kind = LAYER_BATCHNORM, .name = klayer_name(kname, "", buf, sizeof buf),
                    .momentum = (float)mom, .momentum_set = 1, .eps = (float)eps,
                    .eps_set = 1, .no_center = !center, .no_scale = !scale,
                    .frozen = k->frozen};
    s.w_init = gi.kind, s.w_arg = gi.arg, s.w_arg2 = gi.arg2, s.w_vs = gi.vs;
    s.b_init = bi.kind, s.b_arg = bi.arg, s.b_arg2 = bi.arg2, s.b_vs = bi.vs;
    // Keras's trainable count: gamma and beta; the moving statistics are the state.
    if (keras_add(k, m, &s) || keras_check_layer(k, m, c, h, w, (size_t)(center + scale) * c)) return -1;
    return 0;
}

// A frozen one (trainable false) is read: it normalises with its moving statistics in training
// too and keeps them, as Keras runs it (batchnorm.c).
const keras_family keras_bn = {bn_keras_read, NULL};
