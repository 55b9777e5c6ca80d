// Tests for devices/ocl_util.c: error names, device discovery on the installed ICD (PoCL in CI),
// `hetrain devices` with and without platforms, kernel-source lookup, and the program cache
// across processes (this binary re-runs itself as a child to build in a fresh process).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json.h>
#include <limits.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/ocl_blas.h"
#include "devices/ocl_util.h"
#include "tests/lib/testutil.h"

extern const char ht_cl_embedded_source[];

#define NO_PLATFORM_MSG "no OpenCL platform found"

// The hetrain CLI with the ICD loader pointed at an empty vendors folder: no platform at all.
static int run_cli_no_icd(const char *args, int merge_stderr, char **out) {
    char *empty = test_tmpdir("no-icd");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env -u OCL_ICD_FILENAMES OCL_ICD_VENDORS='%s' '%s' %s %s", empty,
             HT_BINARY, args, merge_stderr ? "2>&1" : "2>/dev/null");
    free(empty);
    return test_run_shell(cmd, out);
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// A line of the text listing that starts with `spec` followed by blanks.
static int has_row(const char *text, const char *spec) {
    size_t n = strlen(spec);
    for (const char *line = text; *line;) {
        if (!strncmp(line, spec, n) && line[n] == ' ') return 1;
        const char *nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    return 0;
}

// The first OpenCL device, or NULL (and a visible skip) when the machine has none.
static ocl_dev_info *first_device_or_skip(int *n) {
    ocl_dev_info *devs;
    ht_error e;
    if (ocl_enumerate(&devs, n, &e) < 0) fail_msg("ocl_enumerate: %s", e.msg);
    if (*n == 0) {
        fprintf(stderr, "test_ocl_util: no OpenCL platform/device on this machine; skipping\n");
        free(devs);
        skip();
    }
    return devs;
}

// ---------------------------------------------------------------------------------------------

static void test_error_names(void **state) {
    (void)state;
    assert_string_equal(ocl_error_name(CL_SUCCESS), "CL_SUCCESS");
    assert_string_equal(ocl_error_name(-5), "CL_OUT_OF_RESOURCES");
    assert_string_equal(ocl_error_name(-11), "CL_BUILD_PROGRAM_FAILURE");
    assert_string_equal(ocl_error_name(-19), "CL_KERNEL_ARG_INFO_NOT_AVAILABLE");
    assert_string_equal(ocl_error_name(-30), "CL_INVALID_VALUE");
    assert_string_equal(ocl_error_name(-68), "CL_INVALID_DEVICE_PARTITION_COUNT");
    assert_string_equal(ocl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
    assert_string_equal(ocl_error_name(-1234), "CL_UNKNOWN_ERROR(-1234)");
    assert_string_equal(ocl_error_name(-20), "CL_UNKNOWN_ERROR(-20)");
    assert_string_equal(ocl_error_name(-69), "CL_UNKNOWN_ERROR(-69)");
    // Every OpenCL 1.2 code has its own name.
    const char *seen[70] = {0};
    for (int c = 0; c >= -68; c--) {
        if (c <= -20 && c >= -29) continue;
        const char *name = ocl_error_name(c);
        assert_true(!strncmp(name, "CL_", 3));
        assert_null(strstr(name, "UNKNOWN"));
        for (int k = 0; k < -c; k++)
            if (seen[k]) assert_string_not_equal(seen[k], name);
        seen[-c] = name;
    }
    ht_error e;
    assert_int_equal(ocl_fail(&e, "clFinish", -5, "cl:0.1"), -1);
    assert_string_equal(e.msg, "clFinish: CL_OUT_OF_RESOURCES on cl:0.1");
    assert_int_equal(ocl_fail(&e, "clGetPlatformIDs", -1001, NULL), -1);
    assert_string_equal(e.msg, "clGetPlatformIDs: CL_PLATFORM_NOT_FOUND_KHR");
}

static void test_enumerate(void **state) {
    (void)state;
    int n;
    ocl_dev_info *devs = first_device_or_skip(&n);
    assert_true(n >= 1);
    assert_string_equal(devs[0].spec, "cl:0.0");
    for (int i = 0; i < n; i++) {
        const ocl_dev_info *d = &devs[i];
        char spec[16];
        snprintf(spec, sizeof spec, "cl:%d.%d", d->p, d->d);
        assert_string_equal(d->spec, spec);
        assert_non_null(d->platform);
        assert_non_null(d->device);
        assert_true(d->name[0] && d->vendor[0] && d->platform_name[0] && d->driver[0]);
        assert_true(!strncmp(d->version, "OpenCL ", 7));
        assert_true(!strncmp(d->c_version, "OpenCL C ", 9));
        assert_true(!strcmp(d->type, "gpu") || !strcmp(d->type, "cpu") ||
                    !strcmp(d->type, "accelerator") || !strcmp(d->type, "custom"));
        assert_true(d->compute_units >= 1);
        assert_true(d->global_mem >= (1u << 20));
        assert_true(d->max_alloc >= (1u << 20) && d->max_alloc <= d->global_mem);
        if (i) { // loader order: platforms ascending, devices 0, 1, ... within each
            const ocl_dev_info *prev = &devs[i - 1];
            assert_true(d->p > prev->p || (d->p == prev->p && d->d == prev->d + 1));
        }
    }
    free(devs);
}

static void test_cli_no_platform(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_cli_no_icd("devices", 1, &out), 0);
    assert_int_equal(count_of(out, NO_PLATFORM_MSG), 1);
    assert_true(has_row(out, "cpu"));
    assert_null(strstr(out, "cl:0.0"));
    free(out);

    assert_int_equal(run_cli_no_icd("devices --json", 0, &out), 0);
    json_object *root = json_tokener_parse(out);
    if (!root) fail_msg("not JSON: %s", out);
    json_object *np, *list;
    assert_true(json_object_object_get_ex(root, "opencl_platforms", &np));
    assert_int_equal(json_object_get_int(np), 0);
    assert_true(json_object_object_get_ex(root, "devices", &list));
    assert_int_equal(json_object_array_length(list), 1);
    json_object *spec;
    assert_true(json_object_object_get_ex(json_object_array_get_idx(list, 0), "spec", &spec));
    assert_string_equal(json_object_get_string(spec), "cpu");
    json_object_put(root);
    free(out);
}

static void test_cli_listing(void **state) {
    (void)state;
    int n;
    ocl_dev_info *devs = first_device_or_skip(&n);
    char *out;
    assert_int_equal(test_run_cli("devices", &out), 0);
    assert_true(has_row(out, "cpu"));
    assert_true(has_row(out, "cl:0.0"));
    assert_non_null(strstr(out, devs[0].name));
    assert_int_equal(count_of(out, NO_PLATFORM_MSG), 0);
    free(out);

    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' devices --json 2>/dev/null", HT_BINARY);
    assert_int_equal(test_run_shell(cmd, &out), 0);
    json_object *root = json_tokener_parse(out);
    if (!root) fail_msg("not JSON: %s", out);
    json_object *np, *list, *v;
    assert_true(json_object_object_get_ex(root, "opencl_platforms", &np));
    assert_true(json_object_get_int(np) >= 1);
    assert_true(json_object_object_get_ex(root, "devices", &list));
    assert_true(json_object_array_length(list) >= 2);
    assert_int_equal(json_object_array_length(list), (size_t)n + 1);
    json_object *d1 = json_object_array_get_idx(list, 1);
    assert_true(json_object_object_get_ex(d1, "spec", &v));
    assert_string_equal(json_object_get_string(v), "cl:0.0");
    assert_true(json_object_object_get_ex(d1, "name", &v));
    assert_string_equal(json_object_get_string(v), devs[0].name);
    assert_true(json_object_object_get_ex(d1, "global_mem_bytes", &v));
    assert_true((uint64_t)json_object_get_int64(v) == devs[0].global_mem);
    json_object_put(root);
    free(out);

    assert_int_equal(test_run_cli("devices --help", &out), 0);
    assert_non_null(strstr(out, "usage: hetrain devices"));
    free(out);
    assert_int_equal(test_run_cli("devices --bogus", &out), 2);
    assert_non_null(strstr(out, "--bogus"));
    free(out);
    free(devs);
}

// `hetrain train --cache-dir DIR` is documented and parsed (the run itself is train's tests').
static void test_cli_train_cache_dir(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_cli("train --help", &out), 0);
    assert_non_null(strstr(out, "--cache-dir DIR"));
    free(out);
    assert_int_equal(test_run_cli("train --cache-dir", &out), 2);
    assert_non_null(strstr(out, "--cache-dir needs a value"));
    free(out);
    assert_int_equal(test_run_cli("train --cache-dir /tmp/x --help", &out), 0);
    free(out);
}

// ---------------------------------------------------------------------------------------------
// Kernel sources

// The bytes tools/cmake/embed_kernels.cmake embeds for kernel folder dir (without the final
// NUL), or NULL when cmake is not available to run it.
static char *embed_with_cmake(const char *dir, size_t *len) {
    char *outdir = test_tmpdir("embed");
    char cmd[4096], path[1100];
    snprintf(path, sizeof path, "%s/emb.c", outdir);
    snprintf(cmd, sizeof cmd,
             "cmake -DKERNEL_DIR='%s' -DOUT='%s' -P '%s/tools/cmake/embed_kernels.cmake' "
             ">/dev/null 2>&1",
             dir, path, HT_SOURCE_DIR);
    free(outdir);
    if (system(cmd) != 0) return NULL;
    char *c = test_read_file(path, NULL);
    assert_non_null(c);
    char *bytes = malloc(strlen(c) / 4 + 1);
    size_t n = 0;
    for (char *p = c; (p = strstr(p, "0x")); p += 4) bytes[n++] = (char)strtol(p + 2, NULL, 16);
    free(c);
    assert_true(n >= 1 && bytes[n - 1] == 0);
    *len = n - 1;
    return bytes;
}

static void test_kernel_source_env(void **state) {
    (void)state;
    char *dir = test_tmpdir("kernels");
    const char *a = "kernel void ka(global float *x) { x[0] = 1.0f; }\n";
    const char *b = "// b, no trailing newline\nkernel void kb(global float *x) { x[0] = 2.0f; }";
    free(test_write_file(dir, "b.cl", b, strlen(b))); // written first: order is by name
    free(test_write_file(dir, "a.cl", a, strlen(a)));
    free(test_write_file(dir, "notes.txt", "not a kernel", 12));
    setenv("HETRAIN_KERNELS", dir, 1);
    char origin[PATH_MAX], real[PATH_MAX];
    ht_error e;
    char *src = ocl_kernel_source(origin, sizeof origin, &e);
    if (!src) fail_msg("ocl_kernel_source: %s", e.msg);
    char want[512];
    snprintf(want, sizeof want, "%s\n%s\n", a, b);
    assert_string_equal(src, want);
    assert_non_null(realpath(dir, real));
    assert_string_equal(origin, real);

    // Byte for byte what the build embeds from the same folder.
    size_t len;
    char *emb = embed_with_cmake(dir, &len);
    if (emb) {
        assert_int_equal(len, strlen(src));
        assert_memory_equal(emb, src, len);
        free(emb);
    } else {
        fprintf(stderr, "test_ocl_util: cmake not runnable, embedding not compared\n");
    }
    free(src);
    unsetenv("HETRAIN_KERNELS");
    free(dir);
}

static void test_kernel_source_fallback(void **state) {
    (void)state;
    char origin_default[PATH_MAX] = "", origin_empty[PATH_MAX] = "", origin_missing[PATH_MAX] = "";
    ht_error e;
    unsetenv("HETRAIN_KERNELS");
    char *def = ocl_kernel_source(origin_default, sizeof origin_default, &e);

    char *empty = test_tmpdir("kernels-empty");
    free(test_write_file(empty, "readme.txt", "x", 1));
    setenv("HETRAIN_KERNELS", empty, 1);
    char *src = ocl_kernel_source(origin_empty, sizeof origin_empty, &e);
    setenv("HETRAIN_KERNELS", "/nonexistent/hetrain-kernels", 1);
    char *src2 = ocl_kernel_source(origin_missing, sizeof origin_missing, &e);
    unsetenv("HETRAIN_KERNELS");

    // The empty (or missing) folder is passed over for the next candidate: the same answer as
    // with no $HETRAIN_KERNELS at all.
    assert_true((def == NULL) == (src == NULL));
    assert_true((def == NULL) == (src2 == NULL));
    if (def) {
        assert_string_equal(src, def);
        assert_string_equal(src2, def);
        assert_string_equal(origin_empty, origin_default);
        assert_string_equal(origin_missing, origin_default);
        assert_null(strstr(origin_empty, "kernels-empty"));
    } else {
        assert_non_null(strstr(e.msg, "no OpenCL kernels"));
    }
    // With kernels in the source tree they are what is found (this binary lives in the build
    // folder, so <exe dir>/../kernels may find the same folder first).
    char tree[PATH_MAX];
    snprintf(tree, sizeof tree, "%s/kernels", HT_SOURCE_DIR);
    DIR *dh = opendir(tree);
    int tree_has_cl = 0;
    if (dh) {
        struct dirent *de;
        while ((de = readdir(dh))) {
            size_t n = strlen(de->d_name);
            if (n > 3 && !strcmp(de->d_name + n - 3, ".cl")) tree_has_cl = 1;
        }
        closedir(dh);
    }
    if (tree_has_cl) {
        char real[PATH_MAX];
        assert_non_null(def);
        assert_non_null(realpath(tree, real));
        assert_string_equal(origin_default, real);
    } else if (ht_cl_embedded_source[0]) {
        assert_non_null(def);
        assert_string_equal(origin_default, "embedded");
        assert_string_equal(def, ht_cl_embedded_source);
    }
    free(def);
    free(src);
    free(src2);
    free(empty);
}

// ---------------------------------------------------------------------------------------------
// Program cache, across processes

static const char *tiny_kernel =
    "kernel void scale(global float *x, float a) { x[get_global_id(0)] *= a; }\n";

// Child mode: `test_ocl_util --child-build KERNEL_DIR CACHE_DIR` (CACHE_DIR "-": the default)
// opens cl:0.0's runtime with those kernels and that cache, runs `scale` when the program has
// it, and prints "source=S cache=C from_cache=F same=1 run=R" (run: 1 ok, 0 no such kernel,
// -1 wrong result),
// or "error: MESSAGE" with exit status 3.
static int child_build(const char *kdir, const char *cdir) {
    setenv("HETRAIN_KERNELS", kdir, 1);
    ocl_set_cache_dir(strcmp(cdir, "-") ? cdir : NULL);
    ocl_dev_info *devs;
    int n;
    ht_error e;
    if (ocl_enumerate(&devs, &n, &e) < 0 || n == 0) {
        printf("error: %s\n", n ? e.msg : "no device");
        return 3;
    }
    cl_context ctx, ctx2;
    cl_program prog, prog2;
    int fc, fc2;
    if (ocl_device_runtime(&devs[0], &ctx, &prog, &fc, &e) < 0) {
        printf("error: %s\n", e.msg);
        free(devs);
        return 3;
    }
    // A second caller in the same process gets the same objects, built once.
    if (ocl_device_runtime(&devs[0], &ctx2, &prog2, &fc2, &e) < 0) {
        printf("error: second call: %s\n", e.msg);
        free(devs);
        return 3;
    }
    int same = ctx == ctx2 && prog == prog2 && fc == fc2;
    int run = 0;
    cl_int err;
    cl_kernel k = clCreateKernel(prog, "scale", &err);
    if (err == CL_SUCCESS) {
        float x[4] = {1, 2, 3, 4}, a = 2;
        cl_command_queue q = clCreateCommandQueue(ctx, devs[0].device, 0, &err);
        cl_mem buf =
            clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof x, x, &err);
        size_t global = 4;
        clSetKernelArg(k, 0, sizeof buf, &buf);
        clSetKernelArg(k, 1, sizeof a, &a);
        err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL);
        run = err == CL_SUCCESS && x[0] == 2 && x[1] == 4 && x[2] == 6 && x[3] == 8 ? 1 : -1;
        clReleaseMemObject(buf);
        clReleaseCommandQueue(q);
        clReleaseKernel(k);
    }
    printf("source=%d cache=%d from_cache=%d same=%d run=%d\n", ocl_builds_from_source(),
           ocl_builds_from_cache(), fc, same, run);
    ocl_blas_release_all();
    ocl_blas_release_all(); // a second call finds nothing and does nothing
    free(devs);
    return 0;
}

// The child gets XDG_CACHE_HOME=<cache test folder>/xdg, so the default cache folder (and
// PoCL's own kernel cache) stay inside the test's folders.
static const char *child_xdg;

static int run_child(const char *kdir, const char *cdir, char **out) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char cmd[4 * PATH_MAX];
    // Under HT_SANITIZE, PoCL's compiler leaks at exit; tests/lsan.supp names it (a caller's
    // own LSAN_OPTIONS come after, so they win).
    snprintf(cmd, sizeof cmd,
             "XDG_CACHE_HOME='%s/xdg' "
             "LSAN_OPTIONS=\"suppressions=%s/tests/lsan.supp:print_suppressions=0:$LSAN_OPTIONS\" "
             "'%s' --child-build '%s' '%s' 2>/dev/null",
             child_xdg, HT_SOURCE_DIR, self, kdir, cdir);
    return test_run_shell(cmd, out);
}

// Files in dir: count, and the name of one (last seen) into name.
static int list_dir(const char *dir, char *name, size_t cap) {
    DIR *dh = opendir(dir);
    if (!dh) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        if (de->d_name[0] == '.') continue;
        snprintf(name, cap, "%s", de->d_name);
        n++;
    }
    closedir(dh);
    return n;
}

static void test_program_cache(void **state) {
    (void)state;
    int n;
    ocl_dev_info *devs = first_device_or_skip(&n);
    char *kdir = test_tmpdir("kernels-tiny");
    free(test_write_file(kdir, "tiny.cl", tiny_kernel, strlen(tiny_kernel)));
    char *base = test_tmpdir("cache");
    child_xdg = base;
    char cdir[1100];
    snprintf(cdir, sizeof cdir, "%s/nested/hetrain", base); // created on demand

    char *out;
    assert_int_equal(run_child(kdir, cdir, &out), 0);
    assert_string_equal(out, "source=1 cache=0 from_cache=0 same=1 run=1\n");
    free(out);
    char name[256] = "";
    assert_int_equal(list_dir(cdir, name, sizeof name), 1); // the binary, no temp file left
    size_t len = strlen(name);
    assert_true(len > 21 && !strcmp(name + len - 4, ".bin"));
    assert_true(name[len - 21] == '-' && strspn(name + len - 20, "0123456789abcdef") == 16);
    assert_null(strpbrk(name, " ()@/"));

    // A fresh process loads the binary instead of compiling.
    assert_int_equal(run_child(kdir, cdir, &out), 0);
    assert_string_equal(out, "source=0 cache=1 from_cache=1 same=1 run=1\n");
    free(out);

    // Other source: another key, another file.
    char *kdir2 = test_tmpdir("kernels-tiny2");
    char other[256];
    snprintf(other, sizeof other, "%s// changed\n", tiny_kernel);
    free(test_write_file(kdir2, "tiny.cl", other, strlen(other)));
    assert_int_equal(run_child(kdir2, cdir, &out), 0);
    assert_string_equal(out, "source=1 cache=0 from_cache=0 same=1 run=1\n");
    free(out);
    assert_int_equal(list_dir(cdir, name, sizeof name), 2);

    // A damaged binary is rebuilt from source and replaced.
    char bin[1400];
    DIR *dh = opendir(cdir);
    struct dirent *de;
    char garbage[64];
    memset(garbage, 'x', sizeof garbage);
    int damaged = 0;
    while ((de = readdir(dh)))
        if (de->d_name[0] != '.') {
            snprintf(bin, sizeof bin, "%s/%s", cdir, de->d_name);
            free(test_write_file(cdir, de->d_name, garbage, sizeof garbage));
            damaged++;
        }
    closedir(dh);
    assert_int_equal(damaged, 2);
    assert_int_equal(run_child(kdir, cdir, &out), 0);
    assert_string_equal(out, "source=1 cache=0 from_cache=0 same=1 run=1\n");
    free(out);
    assert_int_equal(run_child(kdir, cdir, &out), 0);
    assert_string_equal(out, "source=0 cache=1 from_cache=1 same=1 run=1\n");
    free(out);

    // A cache folder that cannot be created is not an error, just no caching.
    char bad[1500];
    snprintf(bad, sizeof bad, "%s/sub", bin); // below a regular file
    assert_int_equal(run_child(kdir, bad, &out), 0);
    assert_string_equal(out, "source=1 cache=0 from_cache=0 same=1 run=1\n");
    free(out);

    // "" turns the cache off: the default folder gets nothing.
    char xdg_cache[1200];
    snprintf(xdg_cache, sizeof xdg_cache, "%s/xdg/hetrain", base);
    assert_int_equal(run_child(kdir, "", &out), 0);
    assert_string_equal(out, "source=1 cache=0 from_cache=0 same=1 run=1\n");
    free(out);
    assert_int_equal(list_dir(xdg_cache, name, sizeof name), 0);
    // The default folder is $XDG_CACHE_HOME/hetrain.
    assert_int_equal(run_child(kdir, "-", &out), 0);
    assert_string_equal(out, "source=1 cache=0 from_cache=0 same=1 run=1\n");
    free(out);
    assert_int_equal(list_dir(xdg_cache, name, sizeof name), 1);
    assert_int_equal(run_child(kdir, "-", &out), 0);
    assert_string_equal(out, "source=0 cache=1 from_cache=1 same=1 run=1\n");
    free(out);

    free(kdir);
    free(kdir2);
    free(base);
    free(devs);
}

static void test_build_error(void **state) {
    (void)state;
    int n;
    ocl_dev_info *devs = first_device_or_skip(&n);
    char *kdir = test_tmpdir("kernels-broken");
    child_xdg = kdir;
    const char *broken = "kernel void broken(global float *x) {\n  x[0] = undeclared_thing;\n}\n";
    free(test_write_file(kdir, "broken.cl", broken, strlen(broken)));
    char *out;
    assert_int_equal(run_child(kdir, "", &out), 3);
    assert_true(!strncmp(out, "error: ", 7));
    assert_int_equal(count_of(out, "\n"), 1); // one line
    char name[81];
    snprintf(name, sizeof name, "%.80s", devs[0].name);
    assert_non_null(strstr(out, name));
    assert_non_null(strstr(out, "cl:0.0"));
    assert_non_null(strstr(out, "CL_BUILD_PROGRAM_FAILURE"));
    assert_non_null(strstr(out, "build log: "));
    assert_non_null(strstr(out, "undeclared_thing"));
    assert_true(strlen(out) < sizeof(((ht_error *)0)->msg) + 8);
    free(out);
    free(kdir);
    free(devs);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--child-build")) return child_build(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_enumerate),
        cmocka_unit_test(test_cli_no_platform),
        cmocka_unit_test(test_cli_listing),
        cmocka_unit_test(test_cli_train_cache_dir),
        cmocka_unit_test(test_kernel_source_env),
        cmocka_unit_test(test_kernel_source_fallback),
        cmocka_unit_test(test_program_cache),
        cmocka_unit_test(test_build_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
