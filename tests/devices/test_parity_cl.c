// Parity of the OpenCL device on every OpenCL device found: parity.c's models through the
// device's interface (opencl_device_open, set_params, train_shard, infer: its walker and op
// table, as training runs them) against the reference, each shard whole and in two
// micro-batches. With HT_TEST_PLATFORM=NAME only the devices of the platforms whose name holds
// NAME (ctest's test_parity_rusticl: Mesa's rusticl), whole shards only; none there fails where
// the loader's folder (test_icd_dir) has NAME.icd, and skips where it has not.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "devices/device.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_ops.h"
#include "devices/opencl.h"
#include "nn/batchnorm.h"
#include "tests/lib/parity.h"
#include "tests/lib/testutil.h"

static const parity_tols cl_tols = {.direct = TOL_CL, .wino = TOL_WINO};

// A device, and whether its micro-batch is halved.
typedef struct cl_backend {
    const ocl_dev_info *info;
    int halve;
} cl_backend;

// One batch on a device opened for the model: a training shard (losses and the gradient sum;
// the device does not hand back its training outputs), then inference. Halved, where that
// leaves whole batchnorm groups, the shard runs in two micro-batches, the second adding to the
// first's gradient sum.
static int cl_run(parity_backend *b, const model *m, const float *params, const parity_batch *in,
                  parity_out *out, ht_error *e) {
    const cl_backend *cb = b->ctx;
    device d;
    if (opencl_device_open(&d, cb->info, m, in->B, 0, e) < 0) return -1;
    free(out->probs);
    out->probs = NULL;
    const int group = model_bn_group(m);
    char note[256];
    if (cb->halve && in->B >= 2 && (group == 0 || in->B / 2 >= group) &&
        d.ops->shrink(d.ctx, "a test", note, sizeof note, e) < 0) {
        d.ops->close(d.ctx);
        return -1;
    }
    int32_t *pred = malloc((size_t)in->B * sizeof *pred);
    assert_non_null(pred);
    const shard_job job = {.x = in->x, .y = in->y, .ids = in->ids, .n = in->B, .seed = in->seed,
                           .epoch = in->epoch, .step = 1};
    shard_result res = {.grad_sum = out->grads, .loss = out->loss, .pred = pred};
    const int rc = d.ops->set_params(d.ctx, params, e) < 0 ||
                           d.ops->train_shard(d.ctx, &job, &res, e) < 0 ||
                           d.ops->infer(d.ctx, in->x, in->B, out->probs_infer, e) < 0
                       ? -1
                       : 0;
    d.ops->close(d.ctx);
    free(pred);
    return rc;
}

// ocl_fill, which no layer is on its own: n not a multiple of any work-group size, and the tail
// past n stays untouched.
static void cl_check_fill(const ocl_dev_info *info, const char *label) {
    ht_error e;
    cl_context ctx;
    cl_program prog;
    int from_cache;
    if (ocl_device_runtime(info, &ctx, &prog, &from_cache, &e) < 0) fail_msg("%s", e.msg);
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, info->device, 0, &err);
    if (err != CL_SUCCESS) fail_msg("%s: clCreateCommandQueue: %s", label, ocl_error_name(err));
    ocl_ops o;
    if (ocl_ops_init(&o, ctx, q, prog, label, &e) < 0) fail_msg("%s", e.msg);
    enum { N = 1001 };
    float got[N + 3];
    for (int i = 0; i < N + 3; i++) got[i] = NAN;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof got, got, &err);
    if (err != CL_SUCCESS) fail_msg("%s: clCreateBuffer: %s", label, ocl_error_name(err));
    if (ocl_fill(&o, m, -2.5f, N, &e) < 0) fail_msg("%s", e.msg);
    err = clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueReadBuffer: %s", label, ocl_error_name(err));
    for (int i = 0; i < N; i++)
        if (got[i] != -2.5f) fail_msg("%s: fill: [%d] is %g, not -2.5", label, i, (double)got[i]);
    if (!(isnan(got[N]) && isnan(got[N + 1]) && isnan(got[N + 2])))
        fail_msg("%s: fill: wrote past n", label);
    clReleaseMemObject(m);
    ocl_ops_free(&o);
    clReleaseCommandQueue(q); // the context and program are the process's (ocl_device_runtime)
}

static void test_parity_opencl(void **state) {
    (void)state;
    ht_error e;
    ocl_dev_info *devs = NULL;
    int n = 0;
    ocl_set_cache_dir(HT_TEST_TMP "/cl-cache");
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    const char *only = getenv("HT_TEST_PLATFORM");
    if (only && *only) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (strstr(devs[i].platform_name, only)) devs[k++] = devs[i];
        n = k;
        char icd[300];
        snprintf(icd, sizeof icd, "%s/%s.icd", test_icd_dir(), only);
        if (n == 0 && access(icd, R_OK) == 0)
            fail_msg("%s is installed but lists no device (HT_TEST_PLATFORM=%s)", icd, only);
    }
    if (n == 0) {
        free(devs);
        printf("SKIPPED: no OpenCL platform %s found; the OpenCL device is not tested here\n",
               only ? only : "");
        skip();
    }
    int fails = 0;
    for (int i = 0; i < n; i++) {
        char label[300];
        snprintf(label, sizeof label, "%s (%s)", devs[i].spec, devs[i].name);
        double t0 = ht_now();
        cl_check_fill(&devs[i], label);
        // One platform's own run (test_parity_rusticl) checks its driver on whole shards; the
        // micro-batches' accumulation is the same host code on every driver.
        for (int halve = 0; halve < (only && *only ? 1 : 2); halve++) {
            char name[340];
            snprintf(name, sizeof name, "%s%s", label, halve ? ", micro-batches" : "");
            cl_backend cb = {&devs[i], halve};
            parity_backend b = {.name = name, .tol = &cl_tols, .ctx = &cb, .run = cl_run};
            fails += parity_run_cases(&b);
        }
        printf("%s: %.1f s\n", label, ht_now() - t0);
    }
    free(devs);
    ocl_blas_release_all();
    assert_int_equal(fails, 0);
}

// ocl_ops_init on a program that lacks kernels fails and names the first missing one.
static void test_cl_ops_init_missing_kernel(void **state) {
    (void)state;
    ht_error e;
    ocl_dev_info *devs = NULL;
    int n = 0;
    if (ocl_enumerate(&devs, &n, &e) < 0) fail_msg("%s", e.msg);
    if (n == 0) {
        free(devs);
        printf("SKIPPED: no OpenCL platform found\n");
        skip();
    }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &devs[0].device, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    const char *src = "__kernel void fill(__global float *b, const float v, const uint n) {\n"
                      "    if (get_global_id(0) < n) b[get_global_id(0)] = v;\n}\n";
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(clBuildProgram(prog, 1, &devs[0].device, "-cl-std=CL1.2", NULL, NULL),
                     CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(ctx, devs[0].device, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    ocl_ops o;
    assert_int_equal(ocl_ops_init(&o, ctx, q, prog, "cl:test", &e), -1);
    printf("expected failure: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "im2col"));
    assert_non_null(strstr(e.msg, "cl:test"));
    assert_int_equal(o.n_k, 0); // released again on failure
    clReleaseCommandQueue(q);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    free(devs);
}


int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_opencl),
        cmocka_unit_test(test_cl_ops_init_missing_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
