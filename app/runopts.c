// The options a checkpoint keeps, and what a resume does with each (runopts.h).
#include "app/runopts.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "nn/model.h"
#include "nn/optim.h"

const run_opt run_opts[RUN_OPT_COUNT] = {
    [RUN_OPT_MODEL] = {"--model", "model", RUN_OPT_DEFINES},
    [RUN_OPT_DATA] = {"--data", "data", RUN_OPT_DEFINES},
    [RUN_OPT_TRAIN] = {"--train", "train", RUN_OPT_DEFINES},
    [RUN_OPT_TEST] = {"--test", "test", RUN_OPT_DEFINES},
    [RUN_OPT_TRAIN_LABELS] = {"--train-labels", "train_labels", RUN_OPT_DEFINES},
    [RUN_OPT_TEST_LABELS] = {"--test-labels", "test_labels", RUN_OPT_DEFINES},
    [RUN_OPT_LAYOUT] = {"--layout", "layout", RUN_OPT_DEFINES},
    [RUN_OPT_CIFAR_LABELS] = {"--cifar-labels", "cifar_labels", RUN_OPT_DEFINES},
    [RUN_OPT_AUGMENT] = {"--augment", "augment", RUN_OPT_DEFINES},
    [RUN_OPT_LIMIT] = {"--limit", "limit", RUN_OPT_DEFINES},
    [RUN_OPT_EPOCHS] = {"--epochs", "epochs", RUN_OPT_DEFINES},
    [RUN_OPT_BATCH] = {"--batch", "batch", RUN_OPT_DEFINES},
    [RUN_OPT_LR] = {"--lr", "lr", RUN_OPT_DEFINES},
    [RUN_OPT_OPTIMIZER] = {"--optimizer", "optimizer", RUN_OPT_DEFINES},
    [RUN_OPT_LR_SCHEDULE] = {"--lr-schedule", "lr_schedule", RUN_OPT_DEFINES},
    [RUN_OPT_WEIGHT_DECAY] = {"--weight-decay", "weight_decay", RUN_OPT_DEFINES},
    [RUN_OPT_WD_MODE] = {"--weight-decay-mode", "weight_decay_mode", RUN_OPT_DEFINES},
    [RUN_OPT_VAL_SPLIT] = {"--val-split", "val_split", RUN_OPT_DEFINES},
    [RUN_OPT_SEED] = {"--seed", "seed", RUN_OPT_DEFINES},
    [RUN_OPT_BN_GROUP] = {"--bn-group", "bn_group", RUN_OPT_DEFINES},
    [RUN_OPT_COMM_DTYPE] = {"--comm-dtype", "comm_dtype", RUN_OPT_DEFINES},
    [RUN_OPT_VALIDATION] = {"--validation", "validation", RUN_OPT_DEFINES},
    [RUN_OPT_IMAGE_SIZE] = {"--image-size", "image_size", RUN_OPT_DEFINES},
    [RUN_OPT_CROP_ASPECT] = {"--crop-to-aspect-ratio", "crop_to_aspect_ratio", RUN_OPT_DEFINES},
    [RUN_OPT_STRICT_IMAGES] = {"--strict-images", "strict_images", RUN_OPT_DEFINES},
    [RUN_OPT_FREEZE] = {"--freeze", "freeze", RUN_OPT_DEFINES},
    [RUN_OPT_TRAINABLE_FROM] = {"--trainable-from", "trainable_from", RUN_OPT_DEFINES},
    [RUN_OPT_BY_NAME] = {"--by-name", NULL, RUN_OPT_FILES},
    [RUN_OPT_SKIP_MISMATCH] = {"--skip-mismatch", NULL, RUN_OPT_FILES},
    [RUN_OPT_EARLY_STOPPING] = {"--early-stopping", "early_stopping", RUN_OPT_DEFINES},
    [RUN_OPT_MONITOR] = {"--monitor", "monitor", RUN_OPT_DEFINES},
    [RUN_OPT_MIN_DELTA] = {"--min-delta", "min_delta", RUN_OPT_DEFINES},
    [RUN_OPT_RESTORE_BEST] = {"--restore-best-weights", "restore_best", RUN_OPT_DEFINES},
    [RUN_OPT_REDUCE_LR] = {"--reduce-lr-on-plateau", "reduce_lr", RUN_OPT_DEFINES},
    [RUN_OPT_SAVE_BEST] = {"--save-best", "save_best", RUN_OPT_KEPT},
    [RUN_OPT_PRECISION] = {"--precision", "precision", RUN_OPT_DEFINES},
    [RUN_OPT_DEVICES] = {"--devices", "devices_given", RUN_OPT_KEPT},
    [RUN_OPT_MEM_LIMIT] = {"--mem-limit", "mem_limit", RUN_OPT_KEPT},
    [RUN_OPT_BALANCE] = {"--balance", "balance", RUN_OPT_KEPT},
    [RUN_OPT_REBALANCE] = {"--rebalance", "rebalance", RUN_OPT_KEPT},
    [RUN_OPT_DEVICE_TIMEOUT] = {"--device-timeout", "device_timeout", RUN_OPT_KEPT},
    [RUN_OPT_ON_NAN] = {"--on-nan", "on_nan", RUN_OPT_KEPT},
    [RUN_OPT_SELF_CHECK] = {"--no-self-check", "no_self_check", RUN_OPT_KEPT},
    [RUN_OPT_CONV_ALGO] = {"--conv-algo", "conv_algo", RUN_OPT_KEPT},
    [RUN_OPT_SAVE] = {"--save", "save", RUN_OPT_KEPT},
    [RUN_OPT_EXPORT_ONNX] = {"--export-onnx", "export_onnx", RUN_OPT_KEPT},
    [RUN_OPT_TENSORBOARD] = {"--tensorboard", "tensorboard", RUN_OPT_KEPT},
    [RUN_OPT_CHECKPOINT_EVERY] = {"--checkpoint-every", "checkpoint_every", RUN_OPT_KEPT},
    [RUN_OPT_PROFILE] = {"--profile", "profile", RUN_OPT_KEPT},
    [RUN_OPT_LOAD] = {"--load", NULL, RUN_OPT_FILES},
    [RUN_OPT_OUT] = {"--out", NULL, RUN_OPT_FILES},
    [RUN_OPT_NAME] = {"--name", NULL, RUN_OPT_FILES},
};

// How each value lives in train_opts and reads as text.
typedef enum value_type {
    V_STR,   // const char *, NULL as "" (the model: its default's name)
    V_INT,   // int, "%d"
    V_U64,   // uint64_t
    V_FLOAT, // float, "%.9g": the float read back exactly
    V_DOUBLE,
    V_NAMES, // int index into names[] (below 0: names[0])
    V_AUGMENT, V_SCHEDULE, V_DEVICES, // their own grammars
} value_type;

static const char *const layouts[] = {"auto", "nhwc", "nchw", NULL};
static const char *const cifar_labels[] = {"fine", "coarse", NULL};
const char *const run_wd_modes[] = {"l2", "decoupled", NULL}; // WD_L2, WD_DECOUPLED
static const char *const balances[] = {"auto", "static", NULL};  // BALANCE_AUTO, BALANCE_STATIC
static const char *const on_nan[] = {"skip", "stop", NULL};
static const char *const no_yes[] = {"0", "1", NULL};
const char *const run_comm_dtypes[] = {"f32", "bf16", NULL}; // comm_bf16 0, 1

static const struct {
    value_type type;
    size_t off;
    const char *const *names;
    const char *missing; // a checkpoint without the key (written before the option existed)
} values[RUN_OPT_COUNT] = {
#define AT(field) offsetof(train_opts, field)
    [RUN_OPT_MODEL] = {V_STR, AT(model), NULL, NULL},
    [RUN_OPT_DATA] = {V_STR, AT(data_dir), NULL, NULL},
    [RUN_OPT_TRAIN] = {V_STR, AT(train_csv), NULL, NULL},
    [RUN_OPT_TEST] = {V_STR, AT(test_csv), NULL, NULL},
    [RUN_OPT_TRAIN_LABELS] = {V_STR, AT(train_labels), NULL, ""},
    [RUN_OPT_TEST_LABELS] = {V_STR, AT(test_labels), NULL, ""},
    [RUN_OPT_LAYOUT] = {V_NAMES, AT(layout), layouts, "auto"},
    [RUN_OPT_CIFAR_LABELS] = {V_NAMES, AT(coarse), cifar_labels, "fine"},
    [RUN_OPT_AUGMENT] = {V_AUGMENT, AT(augment), NULL, "none"},
    [RUN_OPT_LIMIT] = {V_INT, AT(limit), NULL, NULL},
    [RUN_OPT_EPOCHS] = {V_INT, AT(epochs), NULL, NULL},
    [RUN_OPT_BATCH] = {V_INT, AT(batch), NULL, NULL},
    [RUN_OPT_LR] = {V_FLOAT, AT(lr), NULL, NULL},
    [RUN_OPT_OPTIMIZER] = {V_STR, AT(optimizer), NULL, ""},
    [RUN_OPT_LR_SCHEDULE] = {V_SCHEDULE, AT(lr_schedule), NULL, "none"},
    [RUN_OPT_WEIGHT_DECAY] = {V_FLOAT, AT(weight_decay), NULL, "0"},
    [RUN_OPT_WD_MODE] = {V_NAMES, AT(wd_mode), run_wd_modes, "l2"},
    [RUN_OPT_VAL_SPLIT] = {V_FLOAT, AT(val_split), NULL, NULL},
    [RUN_OPT_SEED] = {V_U64, AT(seed), NULL, NULL},
    [RUN_OPT_BN_GROUP] = {V_INT, AT(bn_group), NULL, "0"},
    [RUN_OPT_COMM_DTYPE] = {V_NAMES, AT(comm_bf16), run_comm_dtypes, "f32"},
    [RUN_OPT_VALIDATION] = {V_STR, AT(validation), NULL, ""},
    [RUN_OPT_IMAGE_SIZE] = {V_STR, AT(image_size), NULL, ""},
    [RUN_OPT_CROP_ASPECT] = {V_NAMES, AT(crop_aspect), no_yes, "0"},
    [RUN_OPT_STRICT_IMAGES] = {V_NAMES, AT(strict_images), no_yes, "0"},
    [RUN_OPT_FREEZE] = {V_STR, AT(freeze), NULL, ""},
    [RUN_OPT_TRAINABLE_FROM] = {V_STR, AT(trainable_from), NULL, ""},
    [RUN_OPT_BY_NAME] = {V_NAMES, AT(by_name), no_yes, NULL},
    [RUN_OPT_SKIP_MISMATCH] = {V_NAMES, AT(skip_mismatch), no_yes, NULL},
    [RUN_OPT_EARLY_STOPPING] = {V_INT, AT(early_stopping), NULL, "0"},
    [RUN_OPT_MONITOR] = {V_STR, AT(monitor), NULL, ""},
    [RUN_OPT_MIN_DELTA] = {V_FLOAT, AT(min_delta), NULL, "0"},
    [RUN_OPT_RESTORE_BEST] = {V_NAMES, AT(restore_best), no_yes, "0"},
    [RUN_OPT_REDUCE_LR] = {V_STR, AT(reduce_lr), NULL, ""},
    [RUN_OPT_SAVE_BEST] = {V_STR, AT(save_best), NULL, ""},
    [RUN_OPT_PRECISION] = {V_NAMES, AT(precision), precision_names, "f32"},
    [RUN_OPT_DEVICES] = {V_DEVICES, AT(devices_by), NULL, NULL},
    [RUN_OPT_MEM_LIMIT] = {V_U64, AT(mem_limit), NULL, NULL},
    [RUN_OPT_BALANCE] = {V_NAMES, AT(balance), balances, NULL},
    [RUN_OPT_REBALANCE] = {V_INT, AT(rebalance), NULL, NULL},
    [RUN_OPT_DEVICE_TIMEOUT] = {V_DOUBLE, AT(device_timeout), NULL, NULL},
    [RUN_OPT_ON_NAN] = {V_NAMES, AT(nan_stop), on_nan, NULL},
    [RUN_OPT_SELF_CHECK] = {V_NAMES, AT(no_self_check), no_yes, NULL},
    [RUN_OPT_CONV_ALGO] = {V_NAMES, AT(conv_algo), conv_algo_names, NULL},
    [RUN_OPT_SAVE] = {V_STR, AT(save), NULL, NULL},
    [RUN_OPT_EXPORT_ONNX] = {V_STR, AT(export_onnx), NULL, NULL},
    [RUN_OPT_TENSORBOARD] = {V_STR, AT(tensorboard), NULL, NULL},
    [RUN_OPT_CHECKPOINT_EVERY] = {V_INT, AT(checkpoint_every), NULL, NULL},
    [RUN_OPT_PROFILE] = {V_NAMES, AT(profile), no_yes, NULL},
    [RUN_OPT_LOAD] = {V_STR, AT(load), NULL, NULL},
    [RUN_OPT_OUT] = {V_STR, AT(out_dir), NULL, NULL},
    [RUN_OPT_NAME] = {V_STR, AT(run_name), NULL, NULL},
#undef AT
};

#define FIELD(o, id, T) ((T *)((char *)(o) + values[id].off))
#define CFIELD(o, id, T) ((const T *)((const char *)(o) + values[id].off))

void run_opt_text(const train_opts *o, run_opt_id id, char *buf, size_t len) {
    switch (values[id].type) {
    case V_STR: {
        const char *s = *CFIELD(o, id, char *);
        snprintf(buf, len, "%s", s ? s : id == RUN_OPT_MODEL ? TRAIN_DEFAULT_MODEL : "");
        break;
    }
    case V_INT: snprintf(buf, len, "%d", *CFIELD(o, id, int)); break;
    case V_U64: snprintf(buf, len, "%llu", (unsigned long long)*CFIELD(o, id, uint64_t)); break;
    case V_FLOAT: snprintf(buf, len, "%.9g", (double)*CFIELD(o, id, float)); break;
    case V_DOUBLE: snprintf(buf, len, "%.17g", *CFIELD(o, id, double)); break;
    case V_NAMES: {
        int v = *CFIELD(o, id, int);
        snprintf(buf, len, "%s", values[id].names[v > 0 ? v : 0]);
        break;
    }
    case V_AUGMENT: {
        data_augment a = {0};
        ht_error ignore; // main checked the spec
        if (o->augment) data_augment_parse(&a, o->augment, &ignore);
        data_augment_text(&a, buf, len);
        break;
    }
    case V_SCHEDULE: {
        lr_schedule s = {0};
        ht_error ignore;
        if (o->lr_schedule) lr_schedule_parse(&s, o->lr_schedule, &ignore);
        lr_schedule_text(&s, buf, len);
        break;
    }
    case V_DEVICES: { // the --devices as given, space-separated ("" for the default)
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0; i < o->n_devices_by && k < len; i++)
            k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? " " : "", o->devices_by[i]);
        break;
    }
    }
}

static int name_index(const char *const *names, const char *text) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], text)) return i;
    return -1;
}

// Sets option id of r from the checkpoint's text (pointing into it or into st).
static int set_from_text(train_opts *r, run_opt_id id, const char *text, run_opts_store *st,
                         const char *path, ht_error *e) {
    char *end;
    switch (values[id].type) {
    case V_STR: *FIELD(r, id, const char *) = *text || id == RUN_OPT_MODEL ? text : NULL; return 0;
    case V_INT: *FIELD(r, id, int) = (int)strtol(text, &end, 10); break;
    case V_U64: *FIELD(r, id, uint64_t) = strtoull(text, &end, 10); break;
    case V_FLOAT: *FIELD(r, id, float) = strtof(text, &end); break;
    case V_DOUBLE: *FIELD(r, id, double) = strtod(text, &end); break;
    case V_NAMES: {
        int v = name_index(values[id].names, text);
        if (v < 0) break;
        *FIELD(r, id, int) = v;
        return 0;
    }
    case V_AUGMENT: r->augment = strcmp(text, "none") ? text : NULL; return 0;
    case V_SCHEDULE:
        snprintf(st->lr_schedule, sizeof st->lr_schedule, "%s", text);
        r->lr_schedule = st->lr_schedule;
        return 0;
    case V_DEVICES: {
        if (strlen(text) >= sizeof st->devices) break;
        strcpy(st->devices, text);
        r->n_devices_by = 0;
        for (char *p = st->devices; *p && r->n_devices_by < TRAIN_DEVICES_BY_MAX;) {
            r->devices_by[r->n_devices_by++] = p;
            p += strcspn(p, " ");
            if (*p) *p++ = 0;
        }
        return 0;
    }
    }
    if (values[id].type != V_NAMES && values[id].type != V_DEVICES && !*end && end != text) return 0;
    return ht_fail(e, "%s: malformed %s \"%.60s\" in the checkpoint", path, run_opts[id].key, text);
}

// Whether --out or --name (value v) names the run whose checkpoint is path: <out>/<name>.ckpt.
static int same_file_part(const char *path, run_opt_id id, const char *v) {
    size_t n = strlen(path), vn = strlen(v);
    if (n > 5 && !strcmp(path + n - 5, ".ckpt")) n -= 5;
    const char *slash = NULL;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/') slash = path + i;
    if (id == RUN_OPT_NAME) {
        const char *name = slash ? slash + 1 : path;
        return (size_t)(path + n - name) == vn && !memcmp(name, v, vn);
    }
    while (vn > 1 && v[vn - 1] == '/') vn--;
    if (!slash) return vn == 1 && v[0] == '.';
    return (size_t)(slash - path) == vn && !memcmp(path, v, vn);
}

int run_opts_resume(const train_opts *given, const checkpoint *c, const char *path, train_opts *r,
                    run_opts_store *st, char *notes, size_t len, ht_error *e) {
    *r = *given;
    notes[0] = 0;
    if (!checkpoint_meta(c, "epochs_done"))
        return ht_fail(e, "%s: not a hetrain training checkpoint (no run options in it)", path);
    size_t k = 0;
    for (int id = 0; id < RUN_OPT_COUNT; id++) {
        const run_opt *opt = &run_opts[id];
        int is_given = (given->given & RUN_OPT_GIVEN(id)) != 0;
        if (opt->kind == RUN_OPT_FILES) {
            if (is_given && id == RUN_OPT_LOAD)
                return ht_fail(e, "--resume: --load cannot be given with it (%s): a resumed run "
                                  "starts from the checkpoint's weights", path);
            if (is_given && !same_file_part(path, (run_opt_id)id, *CFIELD(given, id, char *)))
                return ht_fail(e, "--resume: %s differs from the run being resumed (%s); a resumed "
                                  "run keeps the options that define it and its files",
                               opt->option, path);
            continue;
        }
        const char *kept = checkpoint_meta(c, opt->key);
        if (!kept) kept = values[id].missing;
        if (!kept) {
            if (opt->kind == RUN_OPT_DEFINES)
                return ht_fail(e, "%s: not a hetrain training checkpoint (no %s in it)", path, opt->key);
            continue; // written before the option was kept: the command line's, or the default
        }
        char now[TRAIN_DEVICES_BY_MAX * 128];
        if (is_given) {
            // Compared as the checkpoint writes it: spellings of one value agree
            // ("step:2:0.50" and "step:2:0.5", "flip,crop:4" and "crop:4,flip").
            run_opt_text(given, (run_opt_id)id, now, sizeof now);
            if (opt->kind == RUN_OPT_DEFINES && strcmp(now, kept))
                return ht_fail(e, "--resume: %s differs from the run being resumed (%s); a resumed "
                                  "run keeps the options that define it and its files",
                               opt->option, path);
            if (opt->kind == RUN_OPT_KEPT) {
                if (strcmp(now, kept) && k < len)
                    k += (size_t)snprintf(notes + k, len - k, "%s%s %s in place of the run's %s",
                                          k ? "; " : "", opt->option, *now ? now : "(none)",
                                          *kept ? kept : "(none)");
                continue;
            }
        }
        if (set_from_text(r, (run_opt_id)id, kept, st, path, e) < 0) return -1;
    }
    r->load = NULL; // the weights are the checkpoint's
    return 0;
}

void run_opts_kept_cli(const train_opts *o, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int id = 0; id < RUN_OPT_COUNT && k < len; id++) {
        if (run_opts[id].kind != RUN_OPT_KEPT) continue;
        char v[TRAIN_DEVICES_BY_MAX * 128];
        run_opt_text(o, (run_opt_id)id, v, sizeof v);
        const char *const *names = values[id].names;
        if (names == no_yes) { // a flag
            if (!strcmp(v, "1")) k += (size_t)snprintf(buf + k, len - k, " %s", run_opts[id].option);
            continue;
        }
        if (!*v || !strcmp(v, "0") || (names && names != conv_algo_names && !strcmp(v, names[0])))
            continue; // the default
        if (id == RUN_OPT_DEVICES) { // one --devices per entry, as given
            for (int i = 0; i < o->n_devices_by && k < len; i++)
                k += (size_t)snprintf(buf + k, len - k, " --devices %s", o->devices_by[i]);
            continue;
        }
        k += (size_t)snprintf(buf + k, len - k, " %s %s", run_opts[id].option, v);
    }
    if (k > 0 && k < len) memmove(buf, buf + 1, strlen(buf)); // the leading space
}
