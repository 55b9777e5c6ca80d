// Test helpers: tolerance checks, temporary files and running the CLI.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "data.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int check_tensor(const float *a, const float *b, size_t n, float tol, float floor,
                 const char *name) {
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double fa = fabs((double)a[i]), fb = fabs((double)b[i]);
        double den = fa > fb ? fa : fb;
        if (den < floor) den = floor;
        double r = fabs((double)a[i] - (double)b[i]) / den;
        if (!(r <= worst)) { // also catches NaN
            worst = r;
            wi = i;
            if (isnan(r)) break;
        }
    }
    if (!(worst <= tol)) {
        fprintf(stderr, "%s: worst rel error %.3g at [%zu]: %.9g vs %.9g (tol %.3g)\n", name,
                worst, wi, (double)a[wi], (double)b[wi], (double)tol);
        return 0;
    }
    return 1;
}

static int check_one(const float *a, const float *b, size_t n, float tol, const char *what,
                     const char *layer, const char *part) {
    double num = 0, den = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
        if (!(fabs(d) <= worst)) {
            worst = fabs(d);
            wi = i;
        }
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= tol)) {
        fprintf(stderr, "%s: %s.%s: relative L2 error %.3g (tol %.3g); worst [%zu]: %.9g vs %.9g\n",
                what, layer, part, rel, (double)tol, wi, (double)a[wi], (double)b[wi]);
        return 0;
    }
    return 1;
}

int check_vector(const float *a, const float *b, size_t n, float tol, const char *what) {
    return check_one(a, b, n, tol, what, "all", "parameters");
}

int check_params(const model *m, const float *a, const float *b, float tol, const char *what) {
    int ok = 1;
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->w_off != LAYER_NO_PARAM)
            ok &= check_one(a + L->w_off, b + L->w_off, L->n_w, tol, what, L->name, "weight");
        if (L->b_off != LAYER_NO_PARAM)
            ok &= check_one(a + L->b_off, b + L->b_off, L->n_b, tol, what, L->name, "bias");
    }
    return ok;
}

static void mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    mkdir(buf, 0755);
}

char *test_tmpdir(const char *tag) {
    static int counter;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s-%d-%d", HT_TEST_TMP, tag, (int)getpid(), counter++);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", buf);
    if (system(cmd) != 0) return NULL;
    mkdirs(buf);
    return strdup(buf);
}

char *test_write_file(const char *dir, const char *name, const void *data, size_t len) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(path);
        return NULL;
    }
    if (len) fwrite(data, 1, len, f);
    fclose(f);
    return path;
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    if (len) *len = got;
    return buf;
}

char *test_expect_cli(const char *args, int status, const char *want) {
    char *out = NULL;
    int rc = test_run_cli(args, &out);
    if (rc != status || (want && !strstr(out, want)))
        fail_msg("hetrain %s\n  exit %d (want %d)\n  output: %s\n  wanted text: %s", args, rc,
                 status, out, want ? want : "(none)");
    return out;
}

int test_run_cli(const char *args, char **out) {
    size_t n = strlen(args) + strlen(HT_BINARY) + 32;
    char *cmd = malloc(n);
    snprintf(cmd, n, "'%s' %s 2>&1", HT_BINARY, args);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 2) buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

char *test_write_kaggle_csv(const char *dir, const char *name, const char *images,
                            const char *labels, int n, int with_labels) {
    dataset d;
    ht_error e;
    if (dataset_load_idx(&d, images, labels, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return NULL;
    }
    size_t cap = (size_t)n * 784 * 4 + 16384, len = 0;
    char *buf = malloc(cap);
    if (with_labels) len += (size_t)sprintf(buf + len, "label,");
    for (int j = 0; j < 784; j++) len += (size_t)sprintf(buf + len, j ? ",pixel%d" : "pixel%d", j);
    buf[len++] = '\n';
    for (int i = 0; i < n; i++) {
        if (with_labels) len += (size_t)sprintf(buf + len, "%d,", d.y[i]);
        for (int j = 0; j < 784; j++)
            len += (size_t)sprintf(buf + len, j ? ",%d" : "%d", (int)(d.x[i * 784 + j] * 255.0f + 0.5f));
        buf[len++] = '\n';
    }
    char *path = test_write_file(dir, name, buf, len);
    free(buf);
    dataset_free(&d);
    return path;
}

