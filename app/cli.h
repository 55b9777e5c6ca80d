// What hetrain's commands share on the command line: the exit status of a usage error, the
// ids of the long options, and the parsing of values with the errors they print.
#ifndef HETRAIN_CLI_H
#define HETRAIN_CLI_H

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

enum {
    OPT_MODEL = 1000, OPT_DATA, OPT_TRAIN, OPT_TEST, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_VAL,
    OPT_SEED, OPT_LIMIT, OPT_DEVICES, OPT_OUT, OPT_NAME, OPT_SAVE, OPT_LOAD, OPT_PROGRESS,
    OPT_NO_PROGRESS, OPT_QUIET, OPT_HELP, OPT_BALANCE, OPT_REBALANCE, OPT_JSON, OPT_CACHE_DIR,
    OPT_MEM_LIMIT, OPT_NO_SELF_CHECK, OPT_ON_NAN, OPT_DEVICE_TIMEOUT, OPT_CHECKPOINT_EVERY,
    OPT_RESUME, OPT_PROFILE, OPT_CONV_ALGO, OPT_BUDGET, OPT_LR_SCHEDULE, OPT_WEIGHT_DECAY,
    OPT_WD_MODE, OPT_BN_GROUP, OPT_TRAIN_LABELS, OPT_TEST_LABELS, OPT_LAYOUT, OPT_CIFAR_LABELS, OPT_AUGMENT,
    OPT_OPTIMIZER, OPT_COMM_DTYPE, OPT_VALIDATION, OPT_IMAGE_SIZE, OPT_CROP_ASPECT,
    OPT_STRICT_IMAGES, OPT_BY_NAME, OPT_SKIP_MISMATCH, OPT_FREEZE, OPT_TRAINABLE_FROM,
    OPT_EARLY_STOPPING, OPT_MONITOR, OPT_MIN_DELTA, OPT_RESTORE_BEST, OPT_REDUCE_LR, OPT_SAVE_BEST,
    OPT_PRECISION, OPT_SCORES, OPT_ONNX, OPT_EXPORT_ONNX, OPT_TENSORBOARD
};

// Prints "hetrain CMD: <message> (see 'hetrain CMD --help')" on stderr; returns EXIT_USAGE.
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The value of flag as an integer lo..hi (or a number lo..hi, below hi when hi_open) into *out;
// -1 after printing the error.
int cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *flag, const char *s, double lo, double hi, int hi_open,
                    double *out);
// --layout's value as a data_layout (nhwc, nchw, auto), or -1 after printing the usage error.
int cli_parse_layout(const char *cmd, const char *s);
// --image-size HxW: 0 with *h and *w, or -1 after cli_usage_error.
int cli_parse_image_size(const char *cmd, const char *s, int *h, int *w);
// --cifar-labels' value: 1 coarse, 0 fine, -1 after printing the usage error.
int cli_parse_cifar_labels(const char *cmd, const char *s);
// s's index in the NULL-terminated names, or -1 after printing the usage error "FLAG: expected
// a, b or c, found "s"".
int cli_parse_choice(const char *cmd, const char *flag, const char *s, const char *const *names);
// --conv-algo's value as a conv_algo, or -1 after printing the usage error.
int cli_parse_conv_algo(const char *cmd, const char *s);

// `hetrain train ARGS` (argv[0] is "train"): parses the options and runs train_run (cli_train.c).
int cli_train(int argc, char **argv);

#endif
