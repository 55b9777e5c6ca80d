// The tuning of OpenCL devices (devices/ocl_tune.h, ocl_tuner.h, `hetrain tune`): CLBlast's
// rules for configurations and the lookup by shape; the cache file written, read back and put
// in force on the device it names; corrupt and foreign files ignored with one warning; a short
// `hetrain tune` writes a file that `hetrain devices` shows; and a device tuned to
// configurations other than CLBlast's own computes the untuned device's gradient.
// Every test keeps its tuning in a folder of its own: a file in the shared cache would be
// picked up by the other tests' devices.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/clblast_params.h"
#include "data/data.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/model.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_ops.h"
#include "devices/ocl_tune.h"
#include "devices/ocl_util.h"
#include "devices/opencl.h"
#include "tests/lib/testutil.h"

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// The first OpenCL device (PoCL's in CI), or a visible skip.
static ocl_dev_info *device_or_skip(void) {
    if (!test_have_opencl("SKIPPED: OpenCL tuning is not tested here")) skip();
    ocl_dev_info *devs;
    int n;
    ht_error e;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    return devs;
}

// CLBlast's own parameters with some changed: a configuration CLBlast takes that is not its own.
static ocl_gemm_cfg changed_cfg(const ocl_dev_info *dev, int direct) {
    ocl_gemm_cfg own_d, own_i, c;
    int st = ocl_blas_defaults(dev->device, &own_d, &own_i, NULL);
    if (st != 0) fail_msg("ocl_blas_defaults: %s", ocl_blas_status_name(st));
    c = direct ? own_d : own_i;
    if (direct) {
        ocl_kparam_set(&c.kp, "WGD", 16);
        ocl_kparam_set(&c.kp, "MDIMCD", 4);
        ocl_kparam_set(&c.kp, "MDIMAD", 4);
        ocl_kparam_set(&c.kp, "NDIMCD", 4);
        ocl_kparam_set(&c.kp, "NDIMBD", 4);
        ocl_kparam_set(&c.kp, "KWID", 8);
        ocl_kparam_set(&c.kp, "VWMD", 2);
        ocl_kparam_set(&c.kp, "VWND", 2);
        ocl_kparam_set(&c.kp, "PADA", 0);
    } else {
        ocl_kparam_set(&c.kp, "GEMMK", 0);
        ocl_kparam_set(&c.kp, "KREG", 1);
        ocl_kparam_set(&c.kp, "MWG", 32);
        ocl_kparam_set(&c.kp, "NWG", 32);
        ocl_kparam_set(&c.kp, "KWG", 16);
        ocl_kparam_set(&c.kp, "MDIMC", 8);
        ocl_kparam_set(&c.kp, "MDIMA", 8);
        ocl_kparam_set(&c.kp, "NDIMC", 8);
        ocl_kparam_set(&c.kp, "NDIMB", 8);
        ocl_kparam_set(&c.kp, "KWI", 2);
        ocl_kparam_set(&c.kp, "VWM", 2);
        ocl_kparam_set(&c.kp, "VWN", 2);
        ocl_kparam_set(&c.kp, "SA", 1);
        ocl_kparam_set(&c.kp, "SB", 0);
    }
    char why[200];
    if (!ocl_gemm_cfg_valid(&c, direct ? &own_d.kp : &own_i.kp, dev->local_mem, dev->max_wg, why,
                            sizeof why))
        fail_msg("the test's configuration breaks a rule: %s", why);
    return c;
}

// ---- without a device ----

static ocl_kparams direct_names(void) {
    ocl_kparams p = {0};
    const char *names[] = {"WGD", "MDIMCD", "NDIMCD", "MDIMAD", "NDIMBD", "KWID", "VWMD", "VWND",
                           "PADA", "PADB"};
    size_t values[] = {32, 8, 8, 8, 8, 2, 4, 4, 1, 1};
    for (int i = 0; i < 10; i++) ocl_kparam_set(&p, names[i], values[i]);
    return p;
}

static void test_rules_and_lookup(void **state) {
    (void)state;
    char why[200];
    ocl_gemm_cfg c = {1, direct_names()};
    ocl_kparams own = c.kp;
    // Sorted by name, so equal sets compare equal.
    assert_string_equal(c.kp.name[0], "KWID");
    assert_int_equal(ocl_kparam(&c.kp, "WGD", 0), 32);
    assert_true(ocl_gemm_cfg_valid(&c, &own, 65536, 1024, why, sizeof why));
    ocl_kparam_set(&c.kp, "KWID", 3); // WGD 32 not a multiple of KWID 3
    assert_false(ocl_gemm_cfg_valid(&c, &own, 65536, 1024, why, sizeof why));
    assert_non_null(strstr(why, "KWID"));
    c.kp = own;
    ocl_kparam_set(&c.kp, "VWMD", 8); // WGD 32 not a multiple of MDIMCD 8 x VWMD 8
    assert_false(ocl_gemm_cfg_valid(&c, &own, 65536, 1024, why, sizeof why));
    c.kp = own;
    assert_false(ocl_gemm_cfg_valid(&c, &own, 1024, 1024, why, sizeof why)); // local memory
    assert_non_null(strstr(why, "local memory"));
    assert_false(ocl_gemm_cfg_valid(&c, &own, 65536, 32, why, sizeof why)); // 64 work-items
    ocl_kparams fewer = own;
    fewer.n--;
    assert_false(ocl_gemm_cfg_valid(&c, &fewer, 65536, 1024, why, sizeof why)); // names differ

    // Lookup: the shape itself, else the nearest of the same layer at another micro-batch.
    ocl_tuning t;
    ocl_tuning_init(&t, NULL);
    ht_error e;
    ocl_tuned_gemm g = {{'N', 'T', 48, 288, 156800}, c, 10, 5, "conv"};
    assert_int_equal(ocl_tuning_put_gemm(&t, &g, &e), 0);
    g.shape.k = 3136;
    g.cfg.direct = 0;
    assert_int_equal(ocl_tuning_put_gemm(&t, &g, &e), 0);
    g.shape = (ocl_gemm_shape){'N', 'N', 48, 156800, 288};
    assert_int_equal(ocl_tuning_put_gemm(&t, &g, &e), 0);
    assert_int_equal(t.n_gemm, 3);
    ocl_gemm_shape s = {'N', 'T', 48, 288, 156800};
    assert_int_equal(ocl_tuning_find(&t, &s)->direct, 1);
    s.k = 150000; // nearer 156800 than 3136
    assert_int_equal(ocl_tuning_find(&t, &s)->direct, 1);
    s.k = 4000;
    assert_int_equal(ocl_tuning_find(&t, &s)->direct, 0);
    s = (ocl_gemm_shape){'T', 'T', 48, 288, 156800}; // other transposes: none
    assert_null(ocl_tuning_find(&t, &s));
    s = (ocl_gemm_shape){'N', 'T', 32, 100, 3136}; // two dimensions differ: none
    assert_null(ocl_tuning_find(&t, &s));
    // Putting a shape again replaces its entry.
    g.shape = (ocl_gemm_shape){'N', 'T', 48, 288, 156800};
    g.cfg.direct = 0;
    assert_int_equal(ocl_tuning_put_gemm(&t, &g, &e), 0);
    assert_int_equal(t.n_gemm, 3);
    s = g.shape;
    assert_int_equal(ocl_tuning_find(&t, &s)->direct, 0);
    ocl_tuning_put_wg(&t, "col2im", 64);
    assert_int_equal(ocl_tuning_wg(&t, "col2im"), 64);
    ocl_tuning_put_wg(&t, "col2im", 0);
    assert_int_equal(ocl_tuning_wg(&t, "col2im"), 0);
    assert_int_equal(t.n_wg, 0);
    ocl_tuning_free(&t);
}

// A CPU device nobody tuned starts from its class's configurations: the general one, or the
// long-k one for a weight gradient's shape; small shapes and shapes the file has stay as they
// are; a GPU has no class configuration (CLBlast's database has its own).
static void test_class_defaults(void **state) {
    (void)state;
    ocl_dev_info *devs = device_or_skip(), info = devs[0];
    ocl_gemm_cfg own_d, own_i;
    assert_int_equal(ocl_blas_defaults(info.device, &own_d, &own_i, NULL), 0);
    ocl_tuning t;
    ocl_tuning_init(&t, &info);
    info.type = "gpu";
    assert_int_equal(ocl_tuning_class_defaults(&t, &info, &own_i.kp), 0);
    assert_false(t.has_class);
    ocl_gemm_shape fwd = {'N', 'N', 48, 156800, 288}, dw = {'N', 'T', 48, 288, 156800},
                   small = {'N', 'N', 32, 156800, 9};
    assert_null(ocl_tuning_find(&t, &fwd));
    info.type = "cpu";
    assert_int_equal(ocl_tuning_class_defaults(&t, &info, &own_i.kp), 1);
    char why[200];
    assert_true(ocl_gemm_cfg_valid(&t.class_cfg, &own_i.kp, info.local_mem, info.max_wg, why,
                                   sizeof why));
    assert_true(ocl_gemm_cfg_valid(&t.class_long_k, &own_i.kp, info.local_mem, info.max_wg, why,
                                   sizeof why));
    assert_false(ocl_gemm_cfg_equal(&t.class_cfg, &own_i)); // not CLBlast's own again
    assert_ptr_equal(ocl_tuning_find(&t, &fwd), &t.class_cfg);
    assert_ptr_equal(ocl_tuning_find(&t, &dw), &t.class_long_k);
    assert_null(ocl_tuning_find(&t, &small));
    ht_error e;
    ocl_tuned_gemm g = {fwd, own_d, 10, 5, "conv"};
    assert_int_equal(ocl_tuning_put_gemm(&t, &g, &e), 0);
    assert_int_equal(ocl_tuning_find(&t, &fwd)->direct, 1); // the file's entry wins
    ocl_tuning_free(&t);
    free(devs);
}

// ---- the file ----

// A tuning of dev with one direct and one indirect configuration, a work-group size and a run.
static void sample_tuning(ocl_tuning *t, const ocl_dev_info *dev) {
    ocl_tuning_init(t, dev);
    ht_error e;
    ocl_tuned_gemm g = {{'N', 'N', 48, 3136, 288}, changed_cfg(dev, 1), 12.5, 3.25,
                        "conv2d forward: W x col"};
    assert_int_equal(ocl_tuning_put_gemm(t, &g, &e), 0);
    g = (ocl_tuned_gemm){{'N', 'T', 48, 288, 3136}, changed_cfg(dev, 0), 40, 20.125,
                         "conv2d backward: dW += dtmp x col^T"};
    assert_int_equal(ocl_tuning_put_gemm(t, &g, &e), 0);
    ocl_tuning_put_wg(t, "col2im", 64);
    ocl_tuning_put_wg(t, "relu_fwd", 128);
    ocl_tuning_put_run(t, "cnn2d_3layer_fullconnected_3layer", 4, 4, "2026-01-02 03:04");
}

static void test_file_round_trip_and_apply(void **state) {
    (void)state;
    ocl_dev_info *devs = device_or_skip();
    const ocl_dev_info *dev = &devs[0];
    char *dir = test_tmpdir("tune-roundtrip");
    ocl_set_cache_dir(dir);
    char path[PATH_MAX + 128], why[400];
    ocl_tuning_path(path, sizeof path, dev);
    assert_non_null(strstr(path, dir));
    assert_non_null(strstr(path, ".tune.json"));
    ocl_tuning t, back;
    assert_int_equal(ocl_tuning_load(&back, dev, why, sizeof why), 0); // none yet
    ocl_tuning_free(&back);
    sample_tuning(&t, dev);
    ht_error e;
    if (ocl_tuning_save(&t, path, &e) < 0) fail_msg("%s", e.msg);
    assert_int_equal(ocl_tuning_load(&back, dev, why, sizeof why), 1);
    assert_string_equal(back.device, dev->name);
    assert_string_equal(back.driver, dev->driver);
    assert_int_equal(back.n_gemm, 2);
    for (int i = 0; i < 2; i++) {
        const ocl_gemm_shape *a = &back.gemm[i].shape, *b = &t.gemm[i].shape;
        assert_true(a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n &&
                    a->k == b->k);
        assert_true(ocl_gemm_cfg_equal(&back.gemm[i].cfg, &t.gemm[i].cfg));
        assert_true(back.gemm[i].ms_default == t.gemm[i].ms_default);
        assert_true(back.gemm[i].ms_tuned == t.gemm[i].ms_tuned);
        assert_string_equal(back.gemm[i].op, t.gemm[i].op);
    }
    assert_int_equal(ocl_tuning_wg(&back, "col2im"), 64);
    assert_int_equal(ocl_tuning_wg(&back, "relu_fwd"), 128);
    assert_int_equal(back.n_runs, 1);
    assert_string_equal(back.runs[0].model, "cnn2d_3layer_fullconnected_3layer");
    assert_int_equal(back.runs[0].batch, 4);
    assert_string_equal(back.runs[0].date, "2026-01-02 03:04");
    ocl_tuning_free(&back);

    // Applied: the device opened from this cache holds the tuning; a GEMM of a tuned shape puts
    // the shape's parameters in force in CLBlast, an untuned shape CLBlast's own again.
    model m;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    device *d;
    int nd;
    if (device_open_list(&d, &nd, "cl:0.0", &m, 4, 0, &e) < 0) fail_msg("%s", e.msg);
    assert_string_equal(d[0].warning, "");
    assert_non_null(strstr(d[0].name, "tuned (2 GEMM shapes, 2 work-group sizes)"));
    const ocl_tuning *on = opencl_device_tuning(&d[0]);
    assert_non_null(on);
    assert_int_equal(on->n_gemm, 2);
    ocl_ops *o = opencl_device_ops(&d[0]);
    assert_int_equal(o->local[ocl_kernel_index(o, "col2im")], 64);
    assert_int_equal(o->local[ocl_kernel_index(o, "relu_fwd")], 128);
    assert_int_equal(o->local[ocl_kernel_index(o, "im2col")], 0);
    cl_int err;
    cl_mem a = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, 48 * 3136 * sizeof(float), NULL, &err);
    cl_mem b = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, 288 * 3136 * sizeof(float), NULL, &err);
    cl_mem c = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, 48 * 3136 * sizeof(float), NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    ocl_kparams now;
    if (ocl_gemm(o, "test", NULL, 'N', 'N', 48, 3136, 288, a, 0, 288, b, 0, 3136, 0.0f, c, 0,
                 3136, &e) < 0)
        fail_msg("%s", e.msg);
    clFinish(o->q);
    ocl_blas_lock();
    assert_int_equal(clblast_params_get(dev->device, "XgemmDirect", &now), 0);
    ocl_blas_unlock();
    assert_true(ocl_kparams_equal(&now, &t.gemm[0].cfg.kp));
    if (ocl_gemm(o, "test", NULL, 'N', 'T', 48, 288, 3136, c, 0, 3136, b, 0, 3136, 0.0f, a, 0,
                 288, &e) < 0)
        fail_msg("%s", e.msg);
    clFinish(o->q);
    ocl_blas_lock();
    assert_int_equal(clblast_params_get(dev->device, "Xgemm", &now), 0);
    ocl_blas_unlock();
    assert_true(ocl_kparams_equal(&now, &t.gemm[1].cfg.kp));
    // A shape of other transposes has no entry: CLBlast's own parameters come back.
    if (ocl_gemm(o, "test", NULL, 'T', 'T', 8, 8, 8, a, 0, 8, b, 0, 8, 0.0f, c, 0, 8, &e) < 0)
        fail_msg("%s", e.msg);
    clFinish(o->q);
    ocl_gemm_cfg own_d, own_i;
    assert_int_equal(ocl_blas_defaults(dev->device, &own_d, &own_i, NULL), 0);
    ocl_blas_lock();
    assert_int_equal(clblast_params_get(dev->device, "Xgemm", &now), 0);
    ocl_blas_unlock();
    assert_true(ocl_kparams_equal(&now, &own_i.kp));
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseMemObject(c);
    device_close_list(d, nd);
    model_free(&m);
    ocl_tuning_free(&t);
    ocl_set_cache_dir(NULL);
    free(dir);
    free(devs);
}

// Writes text as dev's tuning file under dir; returns the path (malloc'd).
static char *plant(const ocl_dev_info *dev, const char *dir, const char *text) {
    ocl_set_cache_dir(dir);
    char path[PATH_MAX + 128];
    ocl_tuning_path(path, sizeof path, dev);
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return strdup(path);
}

// Each file is refused by ocl_tuning_read with a reason naming it, and the device opens untuned
// with that reason as its warning.
static void expect_refused(const ocl_dev_info *dev, const char *dir, const char *text,
                           const char *reason) {
    char *path = plant(dev, dir, text);
    ocl_tuning t;
    char why[400];
    assert_int_equal(ocl_tuning_read(&t, path, dev, why, sizeof why), -1);
    printf("refused as expected: %s\n", why);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, reason));
    assert_null(strchr(why, '\n'));
    assert_int_equal(t.n_gemm, 0);
    ocl_tuning_free(&t);
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    device *d;
    int nd;
    if (device_open_list(&d, &nd, "cl:0.0", &m, 4, 0, &e) < 0) fail_msg("%s", e.msg);
    assert_non_null(strstr(d[0].warning, "tuning cache ignored"));
    assert_non_null(strstr(d[0].warning, reason));
    assert_null(opencl_device_tuning(&d[0]));
    assert_null(strstr(d[0].name, "tuned"));
    const ocl_ops *ops0 = opencl_device_ops(&d[0]);
    assert_int_equal(ops0->local[ocl_kernel_index(ops0, "col2im")], 0);
    device_close_list(d, nd);
    model_free(&m);
    free(path);
}

// The sample tuning's JSON text with `from` replaced by `to` (once).
static char *edited(const ocl_dev_info *dev, const char *dir, const char *from, const char *to) {
    ocl_tuning t;
    sample_tuning(&t, dev);
    char *path = test_tmpdir("tune-edit"), file[PATH_MAX];
    snprintf(file, sizeof file, "%s/t.json", path);
    ht_error e;
    if (ocl_tuning_save(&t, file, &e) < 0) fail_msg("%s", e.msg);
    ocl_tuning_free(&t);
    size_t len;
    char *text = test_read_file(file, &len);
    char *at = strstr(text, from);
    if (!at) fail_msg("\"%s\" not in the sample file", from);
    char *out = malloc(len + strlen(to) + 1);
    size_t k = (size_t)(at - text);
    memcpy(out, text, k);
    strcpy(out + k, to);
    strcat(out, at + strlen(from));
    free(text);
    free(path);
    (void)dir;
    return out;
}

static void test_corrupt_or_foreign_ignored(void **state) {
    (void)state;
    ocl_dev_info *devs = device_or_skip();
    const ocl_dev_info *dev = &devs[0];
    char *dir = test_tmpdir("tune-bad");
    expect_refused(dev, dir, "{\"format\": \"hetrain tuning 1\", \"device\": ", "not JSON");
    expect_refused(dev, dir, "\x01\x02garbage", "not JSON");
    expect_refused(dev, dir, "[1, 2, 3]", "not a JSON object");
    expect_refused(dev, dir, "{\"format\": \"hetrain tuning 99\"}", "format");
    char *text;
    char other[300];
    // Another device, another driver, another CLBlast: never applied.
    snprintf(other, sizeof other, "\"device\": \"Some Other GPU\"");
    char from[300];
    snprintf(from, sizeof from, "\"device\": \"%s\"", dev->name);
    text = edited(dev, dir, from, other);
    expect_refused(dev, dir, text, "tuned for device \"Some Other GPU\"");
    free(text);
    snprintf(from, sizeof from, "\"driver\": \"%s\"", dev->driver);
    text = edited(dev, dir, from, "\"driver\": \"0.0-other\"");
    expect_refused(dev, dir, text, "tuned for driver");
    free(text);
    text = edited(dev, dir, "\"clblast\": \"", "\"clblast\": \"0.");
    expect_refused(dev, dir, text, "tuned for CLBlast");
    free(text);
    // Parameters CLBlast's rules refuse, a parameter it does not have, a bad work-group size.
    text = edited(dev, dir, "\"KWID\": 8", "\"KWID\": 3");
    expect_refused(dev, dir, text, "KWID");
    free(text);
    text = edited(dev, dir, "\"KWID\": 8", "\"KWID\": 8, \"XYZ\": 1");
    expect_refused(dev, dir, text, "parameters");
    free(text);
    text = edited(dev, dir, "\"col2im\": 64", "\"col2im\": 48");
    expect_refused(dev, dir, text, "power of two");
    free(text);
    text = edited(dev, dir, "\"m\": 48", "\"m\": -48");
    expect_refused(dev, dir, text, "\"m\"");
    free(text);

    // The CLI: `devices` says it cannot be used, a training run warns once and trains.
    text = edited(dev, dir, "\"KWID\": 8", "\"KWID\": 3");
    char *path = plant(dev, dir, text);
    free(text);
    char args[2400];
    snprintf(args, sizeof args, "devices --cache-dir '%s'", dir);
    char *out = test_expect_cli(args, 0, "tuning cache ignored");
    assert_non_null(strstr(out, "unusable"));
    assert_non_null(strstr(out, path));
    free(out);
    test_csv_data data;
    if (test_csv_data_init(&data, "tune-bad-csv", 48, 16) < 0) fail_msg("no data");
    char train[4800];
    snprintf(train, sizeof train,
             "train %s --epochs 1 --batch 16 --val-split 0 --devices cl:0.0 --no-self-check "
             "--no-progress --quiet --out '%s' --name bad --cache-dir '%s'",
             data.args, data.dir, dir);
    out = test_expect_cli(train, 0, "warning");
    assert_int_equal(count_of(out, "tuning cache ignored"), 1);
    assert_int_equal(count_of(out, "warning"), 1);
    free(out);
    free(path);
    ocl_set_cache_dir(NULL);
    free(dir);
    free(devs);
}

// ---- the tuner ----

static void test_cli_tune(void **state) {
    (void)state;
    ocl_dev_info *devs = device_or_skip();
    char *dir = test_tmpdir("tune-cli");
    char args[2400];
    snprintf(args, sizeof args, "devices --cache-dir '%s'", dir);
    char *out = test_expect_cli(args, 0, "TUNED");
    assert_null(strstr(out, " tuned:"));
    free(out);
    // A budget of 0: one shard, CLBlast's own configuration of every shape; no search.
    snprintf(args, sizeof args,
             "tune --devices cl:0.0 --batch 8 --budget 0 --cache-dir '%s'", dir);
    out = test_expect_cli(args, 0, "tuning written to");
    assert_non_null(strstr(out, "17 GEMM shapes, 17 timed"));
    assert_non_null(strstr(out, "gradient of the shard, tuned against untuned"));
    free(out);
    ocl_set_cache_dir(dir);
    char path[PATH_MAX + 128];
    ocl_tuning_path(path, sizeof path, &devs[0]);
    ocl_set_cache_dir(NULL);
    assert_int_equal(access(path, R_OK), 0);
    snprintf(args, sizeof args, "devices --cache-dir '%s'", dir);
    out = test_expect_cli(args, 0, "cl:0.0 tuned: 17 GEMM shapes");
    assert_non_null(strstr(out, "cnn2d_3layer_fullconnected_3layer at batch 8"));
    assert_non_null(strstr(out, path));
    free(out);
    snprintf(args, sizeof args, "devices --json --cache-dir '%s'", dir);
    out = test_expect_cli(args, 0, "\"gemm_shapes\": 17");
    assert_non_null(strstr(out, "\"tuned_for\""));
    free(out);
    // Usage errors.
    free(test_expect_cli("tune --budget -1", 2, "--budget"));
    free(test_expect_cli("tune --devices cl:9.9 --budget 0", 2, "no OpenCL device cl:9.9"));
    free(test_expect_cli("tune --devices cpu:1 --budget 0", 0, "nothing to tune"));
    snprintf(args, sizeof args, "tune --devices cl:0.0 --budget 0 --cache-dir ''");
    free(test_expect_cli(args, 1, "the cache is off"));
    free(dir);
    free(devs);
}

// A device tuned to configurations other than CLBlast's own (both routines, every GEMM shape
// of the step) and to other work-group sizes computes the untuned device's step gradient.
static void test_tuned_gradient_matches(void **state) {
    (void)state;
    ocl_dev_info *devs = device_or_skip();
    const ocl_dev_info *dev = &devs[0];
    enum { BATCH = 32 };
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn3", &e) < 0) fail_msg("%s", e.msg);
    dataset ds;
    test_fashion_set(&ds, FASHION_TEST, BATCH);
    float *init = malloc(sizeof(float) * m.n_params);
    model_init_params(&m, init, 3);
    uint32_t idx[BATCH];
    for (int i = 0; i < BATCH; i++) idx[i] = (uint32_t)i;

    // Untuned, from an empty cache; the GEMM shapes it calls from its profile.
    char *empty = test_tmpdir("tune-grad-none"), *dir = test_tmpdir("tune-grad");
    ocl_set_cache_dir(empty);
    test_rig plain;
    test_rig_open(&plain, &m, "cl:0.0", NULL, init, BATCH, 3, 0);
    assert_null(opencl_device_tuning(&plain.devs[0]));
    ocl_ops *o = opencl_device_ops(&plain.devs[0]);
    o->prof_on = 1;
    if (engine_train_step(plain.g, &ds, idx, BATCH, 1, NULL, NULL, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    o->prof_on = 0;
    ocl_tuning t;
    ocl_tuning_init(&t, dev);
    int n = 0;
    for (int i = 0; i < o->prof_n; i++) {
        if (!o->prof[i].gemm) continue;
        ocl_tuned_gemm g = {o->prof[i].shape, changed_cfg(dev, n % 2), 1, 1, ""};
        if (ocl_tuning_put_gemm(&t, &g, &e) < 0) fail_msg("%s", e.msg);
        n++;
    }
    assert_true(n >= 10);
    for (int k = 0; k < o->n_k; k++) ocl_tuning_put_wg(&t, o->kname[k], k % 2 ? 32 : 64);
    ocl_set_cache_dir(dir);
    char path[PATH_MAX + 128];
    ocl_tuning_path(path, sizeof path, dev);
    if (ocl_tuning_save(&t, path, &e) < 0) fail_msg("%s", e.msg);

    test_rig tuned;
    test_rig_open(&tuned, &m, "cl:0.0", NULL, init, BATCH, 3, 0);
    assert_non_null(opencl_device_tuning(&tuned.devs[0]));
    if (engine_train_step(tuned.g, &ds, idx, BATCH, 1, NULL, NULL, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    assert_true(check_step_grad(&m, engine_grad(tuned.g), engine_grad(plain.g),
                                "cnn3 step gradient, tuned cl:0.0 vs untuned"));
    float *pt = malloc(sizeof(float) * BATCH * m.n_classes);
    float *pp = malloc(sizeof(float) * BATCH * m.n_classes);
    if (engine_infer(tuned.g, &ds, 0, BATCH, pt, &e) < 0 ||
        engine_infer(plain.g, &ds, 0, BATCH, pp, &e) < 0)
        fail_msg("%s", e.msg);
    assert_true(check_tensor(pt, pp, (size_t)BATCH * m.n_classes, 1e-4f, 1e-3f,
                             "inference probabilities, tuned vs untuned"));
    free(pt);
    free(pp);
    test_rig_close(&tuned);
    test_rig_close(&plain);
    ocl_set_cache_dir(NULL);
    ocl_tuning_free(&t);
    dataset_free(&ds);
    free(init);
    model_free(&m);
    free(empty);
    free(dir);
    free(devs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_and_lookup),
        cmocka_unit_test(test_class_defaults),
        cmocka_unit_test(test_file_round_trip_and_apply),
        cmocka_unit_test(test_corrupt_or_foreign_ignored),
        cmocka_unit_test(test_cli_tune),
        cmocka_unit_test(test_tuned_gradient_matches),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ocl_blas_release_all();
    return rc;
}
