// Layer parity of the OpenCL ops (devices/ocl_ops.h) on every OpenCL device found, against the
// reference over parity.c's table of cases. With HT_TEST_PLATFORM=NAME only the devices of the
// platforms whose name holds NAME (ctest's test_parity_rusticl: Mesa's rusticl); none there
// fails where the loader's folder (test_icd_dir) has NAME.icd, and skips where it has not.
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

#include "nn/layers.h"
#include "devices/ocl_blas.h"
#include "devices/ocl_ops.h"
#include "tests/lib/parity.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

static const tolset cl_tols = {.conv = TOL_CONV, .conv_floor_k = FLOOR_SUM, .dense = TOL_DENSE,
                               .dense_floor_k = FLOOR_SUM, .pool = TOL_POOL, .avg = TOL_AVG,
                               .exact = TOL_EXACT, .xent = TOL_XENT, .act = TOL_ACT};

// ---- the OpenCL backends: devices/ocl_ops.h on each device ----

typedef struct cl_env {
    ocl_ops o;
    cl_context ctx;
    cl_command_queue q;
    const char *spec;
    ht_error err;
    cl_mem bufs[16]; // the current op's buffers, released by cl_end
    int nbufs;
} cl_env;

// An op's return code: a failure to enqueue is fatal for the test.
#define OK(t, call)                                                                           \
    do {                                                                                      \
        if ((call) != 0) fail_msg("%s: %s", (t)->spec, (t)->err.msg);                          \
    } while (0)

// A device buffer holding a copy of host[0..bytes).
static cl_mem dbuf(cl_env *t, const void *host, size_t bytes) {
    assert_true(t->nbufs < (int)(sizeof t->bufs / sizeof t->bufs[0]));
    cl_int err;
    cl_mem m = clCreateBuffer(t->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    if (err != CL_SUCCESS)
        fail_msg("%s: clCreateBuffer(%zu): %s", t->spec, bytes, ocl_error_name(err));
    t->bufs[t->nbufs++] = m;
    return m;
}

static void dwrite(cl_env *t, cl_mem m, const void *host, size_t bytes) {
    cl_int err = clEnqueueWriteBuffer(t->q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueWriteBuffer: %s", t->spec, ocl_error_name(err));
}

// Blocking read into host; also surfaces errors of the kernels before it.
static void dread(cl_env *t, cl_mem m, void *host, size_t bytes) {
    cl_int err = clEnqueueReadBuffer(t->q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fail_msg("%s: clEnqueueReadBuffer: %s", t->spec, ocl_error_name(err));
}

static void cl_end(cl_env *t) {
    for (int i = 0; i < t->nbufs; i++) clReleaseMemObject(t->bufs[i]);
    t->nbufs = 0;
}

// Scratch starts as NaN before forward and again before backward: backward must not rely on
// what forward left there.
static void cl_conv(backend *b, conv_io *io) {
    cl_env *t = b->ctx;
    const conv_shape *s = io->s;
    const conv_geom g = {.C = s->C, .Cs = s->C, .H = s->H, .W = s->W, .OC = s->OC, .K = s->K,
                         .stride = s->stride, .pad = io->pad, .OH = io->OH, .OW = io->OW};
    const int B = s->B;
    const size_t nin = (size_t)B * s->C * s->H * s->W, nout = (size_t)B * s->OC * io->OH * io->OW;
    const size_t ncol = ocl_conv2d_col_floats(&g, B), nscr = ncol + ocl_conv2d_tmp_floats(&g, B);
    const size_t fl = sizeof(float);
    float *scr_nan = nan_buf(nscr);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_par = dbuf(t, io->params, io->np * fl);
    cl_mem d_out = dbuf(t, io->out, nout * fl), d_dout = dbuf(t, io->dout, nout * fl);
    cl_mem d_din = dbuf(t, io->din, nin * fl), d_grads = dbuf(t, io->grads0, io->np * fl);
    cl_mem d_scr = dbuf(t, scr_nan, nscr * fl);
    // One buffer: the im2col matrix from 0, the staging matrix after it.
    ocl_conv_scratch scr = {d_scr, d_scr, ncol, 0};
    OK(t, ocl_conv2d_forward(&t->o, &g, B, d_out, d_in, d_par, io->w_off, io->b_off, &scr,
                             &t->err));
    dread(t, d_out, io->out, nout * fl);
    dwrite(t, d_scr, scr_nan, nscr * fl);
    OK(t, ocl_conv2d_backward(&t->o, &g, B, d_din, d_grads, d_dout, d_in, d_par, io->w_off,
                              io->b_off, &scr, &t->err));
    dread(t, d_din, io->din, nin * fl);
    dread(t, d_grads, io->g1, io->np * fl);
    OK(t, ocl_conv2d_backward(&t->o, &g, B, NULL, d_grads, d_dout, d_in, d_par, io->w_off,
                              io->b_off, &scr, &t->err));
    dread(t, d_grads, io->g2, io->np * fl);
    cl_end(t);
    free(scr_nan);
}

static void cl_maxpool(backend *b, pool_io *io) {
    cl_env *t = b->ctx;
    const pool_shape *s = io->s;
    const size_t nin = (size_t)s->B * s->C * s->H * s->W;
    const size_t nout = (size_t)s->B * s->C * io->OH * io->OW, fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_out = dbuf(t, io->out, nout * fl);
    cl_mem d_am = dbuf(t, io->argmax, nout * sizeof(int32_t));
    cl_mem d_dout = dbuf(t, io->dout, nout * fl), d_din = dbuf(t, io->din, nin * fl);
    const pool_geom g = {.Cs = s->C, .H = s->H, .W = s->W, .K = s->K, .stride = s->stride,
                         .pad = io->pad, .OH = io->OH, .OW = io->OW};
    OK(t, ocl_maxpool_forward(&t->o, &g, s->B, d_out, d_am, d_in, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dread(t, d_am, io->argmax, nout * sizeof(int32_t));
    OK(t, ocl_maxpool_backward(&t->o, &g, s->B, d_din, d_dout, d_am, &t->err));
    dread(t, d_din, io->din, nin * fl);
    cl_end(t);
}

static void cl_avgpool(backend *b, pool_io *io) {
    cl_env *t = b->ctx;
    const pool_shape *s = io->s;
    const size_t nin = (size_t)s->B * s->C * s->H * s->W;
    const size_t nout = (size_t)s->B * s->C * io->OH * io->OW, fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_out = dbuf(t, io->out, nout * fl);
    cl_mem d_dout = dbuf(t, io->dout, nout * fl), d_din = dbuf(t, io->din, nin * fl);
    const pool_geom g = {.Cs = s->C, .H = s->H, .W = s->W, .K = s->K, .stride = s->stride,
                         .pad = io->pad, .OH = io->OH, .OW = io->OW};
    OK(t, ocl_avgpool_forward(&t->o, &g, s->B, d_out, d_in, &t->err));
    OK(t, ocl_avgpool_backward(&t->o, &g, s->B, d_din, d_dout, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dread(t, d_din, io->din, nin * fl);
    cl_end(t);
}

static void cl_gavgpool(backend *b, pool_io *io) {
    cl_env *t = b->ctx;
    const pool_shape *s = io->s;
    const size_t nin = (size_t)s->B * s->C * s->H * s->W, nout = (size_t)s->B * s->C;
    const size_t fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_out = dbuf(t, io->out, nout * fl);
    cl_mem d_dout = dbuf(t, io->dout, nout * fl), d_din = dbuf(t, io->din, nin * fl);
    OK(t, ocl_gavgpool_forward(&t->o, d_out, d_in, s->B, s->C, s->H, s->W, &t->err));
    OK(t, ocl_gavgpool_backward(&t->o, d_din, d_dout, s->B, s->C, s->H, s->W, &t->err));
    dread(t, d_out, io->out, nout * fl);
    dread(t, d_din, io->din, nin * fl);
    cl_end(t);
}

static void cl_dense(backend *b, dense_io *io) {
    cl_env *t = b->ctx;
    const int B = io->s->B, IN = io->s->IN, OUT = io->s->OUT;
    const size_t nin = (size_t)B * IN, nout = (size_t)B * OUT, fl = sizeof(float);
    cl_mem d_in = dbuf(t, io->in, nin * fl), d_par = dbuf(t, io->params, io->np * fl);
    cl_mem d_out = dbuf(t, io->out, nout * fl), d_dout = dbuf(t, io->dout, nout * fl);
    cl_mem d_din = dbuf(t, io->din, nin * fl), d_grads = dbuf(t, io->grads0, io->np * fl);
    OK(t, ocl_dense_forward(&t->o, d_out, d_in, d_par, io->w_off, io->b_off, B, IN, OUT,
                            &t->err));
    dread(t, d_out, io->out, nout * fl);
    OK(t, ocl_dense_backward(&t->o, d_din, d_grads, io->w_off, io->b_off, d_dout, d_in, d_par, B,
                             IN, OUT, &t->err));
    dread(t, d_din, io->din, nin * fl);
    dread(t, d_grads, io->g1, io->np * fl);
    OK(t, ocl_dense_backward(&t->o, NULL, d_grads, io->w_off, io->b_off, d_dout, d_in, d_par, B,
                             IN, OUT, &t->err));
    dread(t, d_grads, io->g2, io->np * fl);
    cl_end(t);
}

static void cl_relu(backend *b, relu_io *io) {
    cl_env *t = b->ctx;
    const size_t n = io->n, bytes = n * sizeof(float);
    cl_mem d_in = dbuf(t, io->in, bytes), d_out = dbuf(t, io->out, bytes);
    cl_mem d_dout = dbuf(t, io->dout, bytes), d_din = dbuf(t, io->din, bytes);
    OK(t, ocl_relu_forward(&t->o, d_out, d_in, n, &t->err));
    OK(t, ocl_relu_backward(&t->o, d_din, d_dout, d_out, n, &t->err));
    dread(t, d_out, io->out, bytes);
    dread(t, d_din, io->din, bytes);
    OK(t, ocl_relu_forward(&t->o, d_in, d_in, n, &t->err));
    OK(t, ocl_relu_backward(&t->o, d_dout, d_dout, d_in, n, &t->err));
    dread(t, d_in, io->out_ip, bytes);
    dread(t, d_dout, io->din_ip, bytes);
    cl_end(t);
}

static void cl_dropout(backend *b, dropout_io *io) {
    cl_env *t = b->ctx;
    const dropout_shape *s = io->s;
    const size_t N = (size_t)s->C * s->HW, bytes = (size_t)s->B * N * sizeof(float);
    cl_mem d_in = dbuf(t, io->in, bytes), d_out = dbuf(t, io->out, bytes);
    cl_mem d_ids = dbuf(t, s->ids, (size_t)s->B * sizeof s->ids[0]);
    cl_mem d_dout = dbuf(t, io->dout, bytes);
    OK(t, ocl_dropout(&t->o, d_out, d_in, s->B, N, s->rate, io->key, d_ids, &t->err));
    OK(t, ocl_dropout(&t->o, d_dout, d_dout, s->B, N, s->rate, io->key, d_ids, &t->err));
    dread(t, d_out, io->out, bytes);
    dread(t, d_dout, io->din, bytes);
    cl_end(t);
}

static void cl_softmax(backend *b, softmax_io *io) {
    cl_env *t = b->ctx;
    const int B = io->B, NC = io->NC;
    const size_t n = (size_t)B * NC, fl = sizeof(float);
    cl_mem d_logits = dbuf(t, io->logits, n * fl), d_lab = dbuf(t, io->labels, (size_t)B);
    cl_mem d_probs = dbuf(t, io->probs, n * fl), d_loss = dbuf(t, io->loss, B * fl);
    OK(t, ocl_softmax_xent_forward(&t->o, d_probs, d_loss, d_logits, d_lab, B, NC, &t->err));
    dread(t, d_probs, io->probs, n * fl);
    dread(t, d_loss, io->loss, B * fl);
    dwrite(t, d_probs, io->probs_nl, n * fl); // NaN again
    dwrite(t, d_loss, io->loss_nl, B * fl);   // the sentinels
    OK(t, ocl_softmax_xent_forward(&t->o, d_probs, d_loss, d_logits, NULL, B, NC, &t->err));
    dread(t, d_probs, io->probs_nl, n * fl);
    dread(t, d_loss, io->loss_nl, B * fl);
    dwrite(t, d_probs, io->probs_ref, n * fl);
    cl_mem d_dl = dbuf(t, io->dlogits, n * fl);
    OK(t, ocl_softmax_xent_backward(&t->o, d_dl, d_probs, d_lab, B, NC, &t->err));
    dread(t, d_dl, io->dlogits, n * fl);
    cl_end(t);
}

static void cl_bce(backend *b, bce_io *io) {
    cl_env *t = b->ctx;
    const int B = io->B, K = io->K;
    const size_t fl = sizeof(float), n = (size_t)B * K, np = K == 1 ? 2 * (size_t)B : n;
    cl_mem d_logits = dbuf(t, io->logits, n * fl), d_lab = dbuf(t, io->labels, n);
    cl_mem d_probs = dbuf(t, io->probs, np * fl), d_loss = dbuf(t, io->loss, B * fl);
    OK(t, ocl_bce_forward(&t->o, d_probs, d_loss, d_logits, d_lab, B, K, &t->err));
    dread(t, d_probs, io->probs, np * fl);
    dread(t, d_loss, io->loss, B * fl);
    dwrite(t, d_probs, io->probs_ref, np * fl);
    cl_mem d_dl = dbuf(t, io->dlogits, n * fl);
    OK(t, ocl_bce_backward(&t->o, d_dl, d_probs, d_lab, B, K, &t->err));
    dread(t, d_dl, io->dlogits, n * fl);
    cl_end(t);
}

static void cl_act(backend *b, act_io *io) {
    cl_env *t = b->ctx;
    const size_t n = (size_t)io->s->B * io->s->C * io->s->HW, bytes = n * sizeof(float);
    cl_mem d_in = dbuf(t, io->in, bytes), d_out = dbuf(t, io->out, bytes);
    cl_mem d_dout = dbuf(t, io->dout, bytes), d_din = dbuf(t, io->din, bytes);
    OK(t, ocl_act_forward(&t->o, io->f, io->alpha, d_out, d_in, n, &t->err));
    OK(t, ocl_act_backward(&t->o, io->f, io->alpha, d_din, d_dout, d_in, n, &t->err));
    dread(t, d_out, io->out, bytes);
    dread(t, d_din, io->din, bytes);
    cl_end(t);
}

// ocl_fill, which no layer is: n not a multiple of any work-group size, and the tail past n
// stays untouched.
static void cl_check_fill(backend *b) {
    cl_env *t = b->ctx;
    arena a = {0};
    const size_t n = 1001;
    float *got = nans(&a, n + 3), *ref = nans(&a, n + 3);
    cl_mem m = dbuf(t, got, (n + 3) * sizeof(float));
    for (size_t i = 0; i < n; i++) ref[i] = -2.5f;
    OK(t, ocl_fill(&t->o, m, -2.5f, n, &t->err));
    dread(t, m, got, (n + 3) * sizeof(float));
    expect(b, got, ref, n, TOL_EXACT, 1.0f, "fill");
    if (!(isnan(got[n]) && isnan(got[n + 1]) && isnan(got[n + 2]))) failed(b, "fill: wrote past n");
    cl_end(t);
    arena_free(&a);
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
        printf("SKIPPED: no OpenCL platform %s found; the OpenCL ops are not tested here\n",
               only ? only : "");
        skip();
    }
    int fails = 0;
    for (int i = 0; i < n; i++) {
        cl_env *t = calloc(1, sizeof *t);
        assert_non_null(t);
        char label[300];
        snprintf(label, sizeof label, "%s (%s)", devs[i].spec, devs[i].name);
        t->spec = label;
        cl_program prog;
        int from_cache = 0;
        double t0 = ht_now();
        if (ocl_device_runtime(&devs[i], &t->ctx, &prog, &from_cache, &e) < 0)
            fail_msg("%s", e.msg);
        cl_int err;
        t->q = clCreateCommandQueue(t->ctx, devs[i].device, 0, &err);
        if (err != CL_SUCCESS) fail_msg("%s: clCreateCommandQueue: %s", label, ocl_error_name(err));
        if (ocl_ops_init(&t->o, t->ctx, t->q, prog, label, &e) < 0) fail_msg("%s", e.msg);
        backend b = {.name = label, .tol = &cl_tols, .ctx = t, .has_argmax = 1,
                     .conv = cl_conv, .maxpool = cl_maxpool, .avgpool = cl_avgpool,
                     .gavgpool = cl_gavgpool, .dense = cl_dense, .relu = cl_relu,
                     .dropout = cl_dropout, .softmax = cl_softmax, .act = cl_act,
                     .bce = cl_bce};
        cl_check_fill(&b);
        parity_run_cases(&b);
        printf("%s: %d op checks failed (program %s, %.1f s)\n", label, b.fails,
               from_cache ? "from cache" : "built", ht_now() - t0);
        fails += b.fails;
        ocl_ops_free(&t->o);
        clReleaseCommandQueue(t->q);
        free(t);
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
