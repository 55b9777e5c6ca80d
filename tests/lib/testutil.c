// Test helpers: tolerance checks, temporary files and running the CLI.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/lib/testutil.h"

#include "data/data.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "devices/fault.h"
#include "devices/ocl_util.h"
#include "nn/model.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// HT_TEST_MARGINS=1 prints every comparison's measured error beside its tolerance, passing or
// not, to see how much room a tolerance leaves (e.g. under OPENBLAS_CORETYPE or another PoCL
// CPU target).
static int show_margins(void) {
    static int show = -1;
    if (show < 0) show = getenv("HT_TEST_MARGINS") && *getenv("HT_TEST_MARGINS") != '0';
    return show;
}

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
    if (show_margins())
        printf("margin: %s: worst rel error %.3g (tol %.3g)\n", name, worst, (double)tol);
    return 1;
}

// ||a-b|| / ||b|| over n elements (||a-b|| when b is 0); *wi gets the largest |a-b|'s index.
static double rel_l2(const float *a, const float *b, size_t n, size_t *wi);

double test_rel_l2(const float *a, const float *b, size_t n) {
    size_t wi;
    return rel_l2(a, b, n, &wi);
}

static double rel_l2(const float *a, const float *b, size_t n, size_t *wi) {
    double num = 0, den = 0, worst = 0;
    *wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
        if (!(fabs(d) <= worst)) {
            worst = fabs(d);
            *wi = i;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int check_one(const float *a, const float *b, const model_tensor *t, float tol,
                     const char *what) {
    size_t wi;
    double rel = rel_l2(a + t->off, b + t->off, t->n, &wi);
    if (!(rel <= tol)) {
        fprintf(stderr, "%s: %s: relative L2 error %.3g (tol %.3g); worst [%zu]: %.9g vs %.9g\n",
                what, t->name, rel, (double)tol, wi, (double)a[t->off + wi],
                (double)b[t->off + wi]);
        return 0;
    }
    if (show_margins())
        printf("margin: %s: %s: relative L2 error %.3g (tol %.3g)\n", what, t->name, rel,
               (double)tol);
    return 1;
}

int check_step_grad(const model *m, const float *a, const float *b, const char *what) {
    const model_tensor *ts;
    int ok = 1, nt = model_tensors(m, &ts);
    for (const model_tensor *t = ts; t < ts + nt; t++)
        ok &= check_one(a, b, t, t->output ? TOL_GRAD_ROUNDING : TOL_GRAD_BRANCH, what);
    return ok;
}

int check_updates(const model *m, const float *a, const float *b, const float *init,
                  float tol_out, float tol_other, const char *what) {
    const model_tensor *ts;
    int ok = 1, nt = model_tensors(m, &ts);
    for (const model_tensor *t = ts; t < ts + nt; t++) {
        const float tol = t->output ? tol_out : tol_other;
        const size_t off = t->off;
        double num = 0, den = 0, wb = 0, worst = 0;
        size_t wi = off;
        for (size_t i = off; i < off + t->n; i++) {
            double d = (double)a[i] - (double)b[i], u = (double)b[i] - (double)init[i];
            num += d * d;
            den += u * u;
            wb += (double)b[i] * b[i];
            if (!(fabs(d) <= worst)) {
                worst = fabs(d);
                wi = i;
            }
        }
        // Each stored float is off by up to half an ulp, 2^-24 of itself, in each run.
        double err = sqrt(num), allowed = tol * sqrt(den) + ldexp(sqrt(wb), -23);
        double rel = den > 0 ? err / sqrt(den) : err;
        if (!(err <= allowed)) {
            fprintf(stderr, "%s: %s: update differs by %.3g of itself (tol %.3g, plus %.3g for "
                            "the rounding of the weights); worst [%zu]: %.9g vs %.9g, from %.9g\n",
                    what, t->name, rel, (double)tol, den > 0 ? ldexp(sqrt(wb / den), -23) : 0,
                    wi - off, (double)a[wi], (double)b[wi], (double)init[wi]);
            ok = 0;
        } else if (show_margins()) {
            printf("margin: %s: %s: update differs by %.3g of itself (tol %.3g)\n", what,
                   t->name, rel, (double)tol);
        }
    }
    return ok;
}

float *test_load_params(const model *m, const char *path) {
    float *p = malloc(sizeof(float) * m->n_params);
    ht_error e;
    if (!p || safetensors_load(path, m, p, &e) < 0) fail_msg("%s", e.msg);
    return p;
}

char *test_save_params(const model *m, const float *params, const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    ht_error e;
    if (safetensors_save(path, m, params, &e) < 0) fail_msg("%s", e.msg);
    return path;
}

// Finds the 0-based index of `name` in a comma-separated line; -1 when absent.
static int csv_column(const char *line, const char *name) {
    size_t len = strlen(name);
    int i = 0;
    for (const char *p = line; p; p = strchr(p, ','), p = p ? p + 1 : NULL, i++)
        if (!strncmp(p, name, len) && (p[len] == ',' || p[len] == 0)) return i;
    return -1;
}

double test_metrics_value(const char *path, int row, const char *column) {
    char *csv = test_read_file(path, NULL);
    if (!csv) fail_msg("%s: missing", path);
    char *lines[1024];
    int n = 0;
    for (char *p = csv; *p && n < 1024;) {
        lines[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    int col = n > 0 ? csv_column(lines[0], column) : -1;
    if (col < 0) fail_msg("%s: no column \"%s\"", path, column);
    int rows = n - 1, r = row < 0 ? rows + row : row;
    if (r < 0 || r >= rows) fail_msg("%s: no data row %d (%d rows)", path, row, rows);
    const char *p = lines[1 + r];
    for (int i = 0; i < col && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    char *stop = NULL;
    double v = p ? strtod(p, &stop) : 0;
    if (!p || stop == p)
        fail_msg("%s: data row %d has no number in column \"%s\"", path, r, column);
    free(csv);
    return v;
}

int check_params(const model *m, const float *a, const float *b, float tol, const char *what) {
    const model_tensor *ts;
    int ok = 1, nt = model_tensors(m, &ts);
    for (const model_tensor *t = ts; t < ts + nt; t++) ok &= check_one(a, b, t, tol, what);
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

int test_count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *ent; (ent = readdir(d));)
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) n++;
    closedir(d);
    return n;
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

int test_run_shell(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
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

int test_run_cli(const char *args, char **out) {
    size_t n = strlen(args) + strlen(HT_BINARY) + 32;
    char *cmd = malloc(n);
    snprintf(cmd, n, "'%s' %s 2>&1", HT_BINARY, args);
    int rc = test_run_shell(cmd, out);
    free(cmd);
    return rc;
}

// Fashion-MNIST's training or test set; -1 (said on stderr) when it cannot be read.
static int load_fashion(dataset *d, int set) {
    const char *images = set == FASHION_TEST ? FASHION_DIR "/t10k-images-idx3-ubyte.gz"
                                             : FASHION_DIR "/train-images-idx3-ubyte.gz";
    const char *labels = set == FASHION_TEST ? FASHION_DIR "/t10k-labels-idx1-ubyte.gz"
                                             : FASHION_DIR "/train-labels-idx1-ubyte.gz";
    ht_error e;
    if (dataset_load_idx(d, images, labels, 10, &e) == 0) return 0;
    fprintf(stderr, "%s\n", e.msg);
    return -1;
}

void test_fashion_set(dataset *d, int set, int n) {
    if (load_fashion(d, set) < 0) fail_msg("Fashion-MNIST (%s) cannot be read", FASHION_DIR);
    if (n > 0) dataset_limit(d, n);
}

char *test_fashion_csv(const char *dir, int set, int n, int with_labels) {
    const char *name = set == FASHION_TEST ? "test.csv" : "train.csv";
    dataset d;
    if (load_fashion(&d, set) < 0) return NULL;
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

int fashion_label(int cls, int j) {
    switch (j) {
    case 0: return cls == 5 || cls == 7 || cls == 9;
    case 1: return cls == 0 || cls == 2 || cls == 4 || cls == 6;
    case 2: return cls % 2 == 0;
    default: return cls == 1 || cls == 8;
    }
}

int test_write_npy_u8(const char *path, const char *shape, const uint8_t *data, size_t n) {
    char dict[256];
    int dl = snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': %s, }",
                      shape);
    int hl = (10 + dl + 1 + 63) / 64 * 64 - 10; // the header's length, its '\n' included
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hl & 0xff, f);
    fputc(hl >> 8, f);
    fprintf(f, "%s%*s\n", dict, hl - dl - 1, "");
    fwrite(data, 1, n, f);
    return fclose(f) == 0 ? 0 : -1;
}

int test_fashion_multilabel(const char *dir, int set, int n, char *x_path, char *y_path,
                            size_t path_len) {
    const char *name = set == FASHION_TEST ? "test" : "train";
    dataset d;
    if (load_fashion(&d, set) < 0) return -1;
    if (n > d.n) n = d.n;
    uint8_t *x = malloc((size_t)n * 784), *y = malloc((size_t)n * FASHION_LABELS);
    for (size_t i = 0; i < (size_t)n * 784; i++) x[i] = (uint8_t)(d.x[i] * 255.0f + 0.5f);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < FASHION_LABELS; j++)
            y[i * FASHION_LABELS + j] = (uint8_t)fashion_label(d.y[i], j);
    char shape[64];
    snprintf(x_path, path_len, "%s/%s_x.npy", dir, name);
    snprintf(y_path, path_len, "%s/%s_y.npy", dir, name);
    snprintf(shape, sizeof shape, "(%d, 28, 28)", n);
    int rc = test_write_npy_u8(x_path, shape, x, (size_t)n * 784);
    snprintf(shape, sizeof shape, "(%d, %d)", n, FASHION_LABELS);
    if (rc == 0) rc = test_write_npy_u8(y_path, shape, y, (size_t)n * FASHION_LABELS);
    free(x), free(y);
    dataset_free(&d);
    return rc;
}

void test_rig_open(test_rig *r, const model *m, const char *spec, const char *faults,
                   const float *init, int batch, uint64_t seed, uint64_t mem_limit) {
    engine_config c = {.m = m, .params = init, .max_batch = batch, .seed = seed};
    test_rig_open_with(r, spec, faults, mem_limit, &c);
}

void test_rig_open_with(test_rig *r, const char *spec, const char *faults, uint64_t mem_limit,
                        const engine_config *c) {
    ht_error e;
    if (device_open_list(&r->devs, &r->n, spec, c->m, c->max_batch, mem_limit, &e) < 0)
        fail_msg("%s: %s", spec, e.msg);
    if (faults && fault_wrap_devices(r->devs, r->n, c->m, faults, &e) < 0)
        fail_msg("%s: %s", faults, e.msg);
    engine_config with = *c;
    with.devs = r->devs;
    with.n_devs = r->n;
    if (engine_open(&r->g, &with, &e) < 0) fail_msg("%s: %s", spec, e.msg);
}

void test_rig_close(test_rig *r) {
    fault_release_hangs(); // a worker inside an injected hang comes back and closes its device
    for (int d = 0; d < r->n; d++)
        if (engine_gave_up(r->g, d)) device_disown(&r->devs[d]);
    engine_close(r->g);
    device_close_list(r->devs, r->n);
    if (engine_wait_strays(30) > 0) fail_msg("a device the engine gave up on never came back");
}

int test_have_opencl(const char *without) {
    ocl_dev_info *devs = NULL;
    int n = 0;
    ht_error e;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    free(devs);
    if (n == 0) printf("no OpenCL platform: %s\n", without);
    return n > 0;
}

const char *test_icd_dir(void) {
    const char *v = getenv("OCL_ICD_VENDORS");
    struct stat st;
    return v && *v && stat(v, &st) == 0 && S_ISDIR(st.st_mode) ? v : "/etc/OpenCL/vendors";
}

int test_csv_data_init(test_csv_data *d, const char *tag, int n_train, int n_test) {
    char *dir = test_tmpdir(tag);
    char *train = test_fashion_csv(dir, FASHION_TRAIN, n_train, 1);
    char *test = test_fashion_csv(dir, FASHION_TEST, n_test, 1);
    int ok = train && test;
    if (ok) {
        snprintf(d->dir, sizeof d->dir, "%s", dir);
        snprintf(d->train, sizeof d->train, "%s", train);
        snprintf(d->test, sizeof d->test, "%s", test);
        snprintf(d->args, sizeof d->args, "--train '%s' --test '%s'", train, test);
    }
    free(dir);
    free(train);
    free(test);
    return ok ? 0 : -1;
}

void test_expect_frags(const char *msg, int one_line, ...) {
    if (one_line && strchr(msg, '\n')) fail_msg("error message spans lines: \"%s\"", msg);
    va_list ap;
    va_start(ap, one_line);
    const char *frag;
    while ((frag = va_arg(ap, const char *))) {
        if (!strstr(msg, frag)) {
            print_error("error message \"%s\"\n  lacks \"%s\"\n", msg, frag);
            va_end(ap);
            fail();
        }
    }
    va_end(ap);
}

// 1x28x28: conv 8 (no bias) bn relu pool, conv 8 bn relu pool, dense 24 bn relu dropout, dense 10.
void test_bn_model(model *m, int group) {
    ht_error e;
    if (model_begin(m, "bn_shard", 1, 28, 28, 10, &e) < 0) fail_msg("%s", e.msg);
    const layer_spec s[] = {
        {.kind = LAYER_CONV2D, .filters = 8, .k = 3, .pad = 1, .no_bias = 1,
         .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_BATCHNORM, .w_init = INIT_ONES},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_CONV2D, .filters = 8, .k = 3, .no_bias = 1, .w_init = INIT_GLOROT_UNIFORM},
        {.kind = LAYER_BATCHNORM, .w_init = INIT_ONES},
        {.kind = LAYER_RELU},
        {.kind = LAYER_MAXPOOL, .k = 2, .stride = 2},
        {.kind = LAYER_DENSE, .units = 24, .no_bias = 1, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_BATCHNORM, .w_init = INIT_ONES, .momentum = 0.9f, .momentum_set = 1},
        {.kind = LAYER_RELU},
        {.kind = LAYER_DROPOUT, .rate = 0.25f},
        {.kind = LAYER_DENSE, .units = 10, .w_init = INIT_LECUN_UNIFORM},
        {.kind = LAYER_SOFTMAX_XENT},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (model_add(m, &s[i], &e) < 0) fail_msg("model_add %zu: %s", i, e.msg);
    if (model_finish(m, &e) < 0) fail_msg("model_finish: %s", e.msg);
    m->setup.bn_group = group;
}

double test_state_err(const model *m, const float *a, const float *b) {
    double d = 0, n = 0;
    for (size_t i = m->n_trainable; i < m->n_params; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        n += (double)b[i] * b[i];
    }
    return n > 0 ? sqrt(d / n) : sqrt(d);
}

char *test_read_gz(const char *path, size_t *len) {
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    int got;
    while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) {
            char *more = realloc(buf, cap *= 2);
            if (!more) free(buf);
            buf = more;
        }
    }
    gzclose(f);
    *len = n;
    return buf;
}
