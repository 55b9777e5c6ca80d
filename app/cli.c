// The parsing of option values that hetrain's commands share, with the usage errors they print.
#include "app/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "nn/model.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hetrain %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'hetrain %s --help')\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

int cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "hetrain: %s: expected an integer %ld..%ld, found \"%s\"\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *flag, const char *s, double lo, double hi, int hi_open,
                    double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi || (hi_open && v >= hi)) {
        fprintf(stderr, "hetrain: %s: expected a number %g..%g%s, found \"%s\"\n", flag, lo, hi,
                hi_open ? " (exclusive)" : "", s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_image_size(const char *cmd, const char *s, int *h, int *w) {
    char tail;
    if (sscanf(s, "%dx%d%c", h, w, &tail) == 2 && *h >= 1 && *w >= 1 && *h <= DATA_MAX_DIM &&
        *w <= DATA_MAX_DIM)
        return 0;
    cli_usage_error(cmd, "--image-size: expected HxW (each 1..%d), found \"%s\"", DATA_MAX_DIM, s);
    return -1;
}

int cli_parse_layout(const char *cmd, const char *s) {
    for (int i = 0; data_layout_names[i]; i++)
        if (!strcmp(s, data_layout_names[i])) return i;
    cli_usage_error(cmd, "--layout: expected nhwc, nchw or auto, found \"%s\"", s);
    return -1;
}

int cli_parse_cifar_labels(const char *cmd, const char *s) {
    if (!strcmp(s, "fine")) return 0;
    if (!strcmp(s, "coarse")) return 1;
    cli_usage_error(cmd, "--cifar-labels: expected fine or coarse, found \"%s\"", s);
    return -1;
}

int cli_parse_choice(const char *cmd, const char *flag, const char *s,
                     const char *const *names) {
    int n = 0;
    for (; names[n]; n++)
        if (!strcmp(s, names[n])) return n;
    char list[256];
    size_t k = 0;
    list[0] = 0;
    for (int i = 0; i < n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s",
                              i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    cli_usage_error(cmd, "%s: expected %s, found \"%s\"", flag, list, s);
    return -1;
}

int cli_parse_conv_algo(const char *cmd, const char *s) {
    return cli_parse_choice(cmd, "--conv-algo", s, conv_algo_names);
}
