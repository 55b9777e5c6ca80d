// The OpenCL op layer: the layer ops as kernels from kernels/*.cl plus CLBlast GEMMs,
// enqueued on one in-order queue. Kernel arguments are set on every call and the kernels
// belong to the ocl_ops, so a ocl_ops must not be used by two threads at once (one per device
// thread). Kernels index with 32-bit ints, so every tensor must hold fewer than 2^31 floats;
// the ops check that and fail with a message rather than wrap around. B == 0 does nothing.
#include "ocl_ops.h"

#include <clblast_c.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Global sizes are rounded up to a multiple of this and the local size is left to the driver
// (NULL), which then picks a divisor of it that the kernel supports; kernels bounds-check.
#define CLOP_ROUND 256
// Upper bound on row_sum's work-group (a power of two); lowered to what the kernel allows.
#define CLOP_ROW_SUM_GROUP 256

// ---- errors ----

static const char *clblast_status_name(CLBlastStatusCode st) {
    switch (st) {
    case CLBlastNotImplemented: return "CLBlastNotImplemented";
    case CLBlastInvalidMatrixA: return "CLBlastInvalidMatrixA";
    case CLBlastInvalidMatrixB: return "CLBlastInvalidMatrixB";
    case CLBlastInvalidMatrixC: return "CLBlastInvalidMatrixC";
    case CLBlastInvalidDimension: return "CLBlastInvalidDimension";
    case CLBlastInvalidLeadDimA: return "CLBlastInvalidLeadDimA";
    case CLBlastInvalidLeadDimB: return "CLBlastInvalidLeadDimB";
    case CLBlastInvalidLeadDimC: return "CLBlastInvalidLeadDimC";
    case CLBlastInsufficientMemoryA: return "CLBlastInsufficientMemoryA";
    case CLBlastInsufficientMemoryB: return "CLBlastInsufficientMemoryB";
    case CLBlastInsufficientMemoryC: return "CLBlastInsufficientMemoryC";
    case CLBlastInsufficientMemoryTemp: return "CLBlastInsufficientMemoryTemp";
    case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
    case CLBlastDatabaseError: return "CLBlastDatabaseError";
    case CLBlastUnknownError: return "CLBlastUnknownError";
    case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
    default:
        // Codes above -1000 are OpenCL error codes.
        return (int)st > -1000 ? ocl_error_name((cl_int)st) : "CLBlast error";
    }
}

// CLBlast 1.5's kernel cache and parameter database are process-wide and not safe for
// concurrent use (CNugteren/CLBlast#486; ASan saw a heap-use-after-free in the database when
// two devices' threads asked for the temp-buffer size at once), so every CLBlast call is made
// under this lock, queries included. A call only enqueues (it compiles on its first use per
// device and shape class), so the lock is held for microseconds.
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

// One CLBlast row-major SGEMM, C = op(A) op(B) + beta C (alpha 1), offsets in floats.
static int gemm(ocl_ops *o, const char *what, CLBlastTranspose ta, CLBlastTranspose tb,
                size_t m, size_t n, size_t k, cl_mem a, size_t a_off, size_t lda, cl_mem b,
                size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                ht_error *e) {
    size_t need = 0;
    pthread_mutex_lock(&clblast_lock);
    CLBlastStatusCode st = CLBlastSGemmTempBufferSize(CLBlastLayoutRowMajor, ta, tb, m, n, k, a_off,
                                                      lda, b_off, ldb, c_off, ldc, &o->q, &need);
    pthread_mutex_unlock(&clblast_lock);
    if (st == CLBlastSuccess && need > o->gemm_temp_bytes) {
        ocl_ops_release_temp(o);
        cl_int err;
        o->gemm_temp = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, need, NULL, &err);
        if (err != CL_SUCCESS) {
            o->gemm_temp = NULL;
            char call[128];
            snprintf(call, sizeof call, "clCreateBuffer(GEMM scratch, %zu MiB, %s)", need >> 20, what);
            return ocl_fail(e, call, err, o->label);
        }
        o->gemm_temp_bytes = need;
    }
    if (st == CLBlastSuccess) {
        cl_event *mark = ocl_ops_event(o, OCL_EV_MARK);
        if (mark && clEnqueueMarkerWithWaitList(o->q, 0, NULL, mark) != CL_SUCCESS) *mark = NULL;
        pthread_mutex_lock(&clblast_lock);
        st = CLBlastSgemmWithTempBuffer(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f, a, a_off,
                                        lda, b, b_off, ldb, beta, c, c_off, ldc, &o->q,
                                        ocl_ops_event(o, OCL_EV_GEMM), o->gemm_temp);
        pthread_mutex_unlock(&clblast_lock);
    }
    if (st != CLBlastSuccess) {
        // CLBlast reports OpenCL errors with their OpenCL codes (above -1000).
        ocl_note_error((int)st > -1000 ? (cl_int)st : CL_INVALID_OPERATION);
        return ht_fail(e, "CLBlastSgemm (%s, %zux%zux%zu): status %d %s on %s", what, m, n, k,
                       (int)st, clblast_status_name(st), o->label);
    }
    return 0;
}

// Shapes must be positive and every tensor an op touches must fit 32-bit kernel indexing.
static int check_dims(ocl_ops *o, const char *op, ht_error *e, int n, ...) {
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        int v = va_arg(ap, int);
        if (v <= 0) {
            va_end(ap);
            return ht_fail(e, "%s on %s: shape argument %d is %d, expected > 0", op, o->label,
                           i + 1, v);
        }
    }
    va_end(ap);
    return 0;
}

static int check_fits(ocl_ops *o, const char *op, const char *what, double floats, ht_error *e) {
    if (floats > (double)INT_MAX)
        return ht_fail(e, "%s on %s: %s has %.0f elements, more than the kernels index (%d); "
                       "use a smaller micro-batch", op, o->label, what, floats, INT_MAX);
    return 0;
}

// A float offset passed to a kernel as uint: offset + len must stay below 2^32.
static int check_offset(ocl_ops *o, const char *op, size_t off, size_t len, ht_error *e) {
    if (off > (size_t)UINT_MAX - len)
        return ht_fail(e, "%s on %s: parameter offset %zu + %zu exceeds 32 bits", op, o->label,
                       off, len);
    return 0;
}

// ---- launching ----

typedef struct karg {
    size_t size;
    const void *ptr;  // NULL for a __local argument of `size` bytes
} karg;

#define KA(v) ((karg){sizeof(v), &(v)})

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Sets every argument of kernel `name`, then enqueues it over gsize (rounded up by the
// caller) with local size lsize (NULL: the driver's choice).
static int launch(ocl_ops *o, cl_kernel k, const char *name, const karg *args, int nargs,
                  cl_uint dims, const size_t *gsize, const size_t *lsize, ht_error *e) {
    char call[96];
    for (int i = 0; i < nargs; i++) {
        cl_int err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
        if (err != CL_SUCCESS) {
            snprintf(call, sizeof call, "clSetKernelArg(%s, arg %d)", name, i);
            return ocl_fail(e, call, err, o->label);
        }
    }
    cl_int err = clEnqueueNDRangeKernel(o->q, k, dims, NULL, gsize, lsize, 0, NULL,
                                        ocl_ops_event(o, OCL_EV_KERNEL));
    if (err != CL_SUCCESS) {
        snprintf(call, sizeof call, "clEnqueueNDRangeKernel(%s)", name);
        return ocl_fail(e, call, err, o->label);
    }
    return 0;
}

// One work-item per element of an n-element range.
static int launch_1d(ocl_ops *o, cl_kernel k, const char *name, const karg *args, int nargs,
                     size_t n, ht_error *e) {
    size_t g = round_up(n, CLOP_ROUND);
    return launch(o, k, name, args, nargs, 1, &g, NULL, e);
}

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

// ---- setup ----

int ocl_ops_init(ocl_ops *o, cl_context ctx, cl_command_queue q, cl_program prog,
                const char *label, ht_error *e) {
    memset(o, 0, sizeof *o);
    o->ctx = ctx;
    o->q = q;
    o->prog = prog;
    snprintf(o->label, sizeof o->label, "%s", label ? label : "OpenCL device");
    struct {
        cl_kernel *k;
        const char *name;
    } ks[] = {
        {&o->k_fill, "fill"},
        {&o->k_im2col, "im2col"},
        {&o->k_col2im, "col2im"},
        {&o->k_bias_to_nchw, "bias_to_nchw"},
        {&o->k_nchw_to_rows, "nchw_to_rows"},
        {&o->k_row_sum, "row_sum"},
        {&o->k_maxpool_fwd, "maxpool_fwd"},
        {&o->k_maxpool_bwd, "maxpool_bwd"},
        {&o->k_dense_bias, "dense_bias"},
        {&o->k_col_sum, "col_sum"},
        {&o->k_relu_fwd, "relu_fwd"},
        {&o->k_relu_bwd, "relu_bwd"},
        {&o->k_dropout, "dropout"},
        {&o->k_softmax_xent_fwd, "softmax_xent_fwd"},
        {&o->k_softmax_xent_bwd, "softmax_xent_bwd"},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        cl_int err;
        *ks[i].k = clCreateKernel(prog, ks[i].name, &err);
        if (err != CL_SUCCESS) {
            *ks[i].k = NULL;
            char call[96];
            snprintf(call, sizeof call, "clCreateKernel(\"%s\")", ks[i].name);
            ocl_fail(e, call, err, o->label);
            if (err == CL_INVALID_KERNEL_NAME)
                ht_wrap(e, "kernel \"%s\" is missing from kernels/*.cl", ks[i].name);
            ocl_ops_free(o);
            return -1;
        }
    }
    return 0;
}

// ---- event profiling ----

void ocl_ops_profile(ocl_ops *o, int on) {
    if (!on) ocl_ops_drain(o, NULL);
    o->profiling = on;
}

cl_event *ocl_ops_event(ocl_ops *o, ocl_ev_kind kind) {
    if (!o->profiling) return NULL;
    if (o->n_ev == o->cap_ev) {
        int cap = o->cap_ev ? 2 * o->cap_ev : 64;
        cl_event *ev = realloc(o->ev, (size_t)cap * sizeof *ev);
        if (ev) o->ev = ev;
        unsigned char *kinds = ev ? realloc(o->ev_kind, (size_t)cap) : NULL;
        if (kinds) o->ev_kind = kinds;
        if (!ev || !kinds) return NULL;
        o->cap_ev = cap;
    }
    o->ev[o->n_ev] = NULL; // stays NULL when the enqueue fails
    o->ev_kind[o->n_ev] = (unsigned char)kind;
    return &o->ev[o->n_ev++];
}

void ocl_ops_drain(ocl_ops *o, double *sums) {
    cl_ulong mark_end = 0;
    for (int i = 0; i < o->n_ev; i++) {
        cl_event ev = o->ev[i];
        if (!ev) continue;
        cl_ulong start = 0, end = 0;
        if (sums && (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start,
                                             NULL) != CL_SUCCESS ||
                     clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end,
                                             NULL) != CL_SUCCESS ||
                     end < start))
            start = end = 0; // a driver without timestamps for it: not counted
        switch ((ocl_ev_kind)o->ev_kind[i]) {
        case OCL_EV_MARK:
            mark_end = end;
            break;
        case OCL_EV_GEMM: {
            // CLBlast's event is its last kernel's; the marker before the call ends where
            // the first began. A marker without a usable timestamp leaves the event's own span.
            cl_ulong from = mark_end > 0 && mark_end <= start ? mark_end : start;
            if (sums) sums[2] += 1e-9 * (double)(end - from);
            mark_end = 0;
            break;
        }
        case OCL_EV_KERNEL:
        case OCL_EV_TRANSFER:
            if (sums) sums[o->ev_kind[i] == OCL_EV_KERNEL ? 0 : 1] += 1e-9 * (double)(end - start);
            break;
        }
        clReleaseEvent(ev);
    }
    o->n_ev = 0;
}

void ocl_ops_release_temp(ocl_ops *o) {
    if (o->gemm_temp) clReleaseMemObject(o->gemm_temp);
    o->gemm_temp = NULL;
    o->gemm_temp_bytes = 0;
}

void ocl_ops_free(ocl_ops *o) {
    ocl_ops_release_temp(o);
    ocl_ops_drain(o, NULL);
    free(o->ev);
    free(o->ev_kind);
    o->ev = NULL;
    o->ev_kind = NULL;
    o->cap_ev = 0;
    o->profiling = 0;
    cl_kernel *ks[] = {&o->k_fill, &o->k_im2col, &o->k_col2im, &o->k_bias_to_nchw,
                       &o->k_nchw_to_rows, &o->k_row_sum, &o->k_maxpool_fwd, &o->k_maxpool_bwd,
                       &o->k_dense_bias, &o->k_col_sum, &o->k_relu_fwd, &o->k_relu_bwd,
                       &o->k_dropout, &o->k_softmax_xent_fwd, &o->k_softmax_xent_bwd};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        if (*ks[i]) clReleaseKernel(*ks[i]);
        *ks[i] = NULL;
    }
}

// ---- ops ----

int ocl_fill(ocl_ops *o, cl_mem buf, float value, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "fill", "buffer", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(buf), KA(value), KA(n32)};
    return launch_1d(o, o->k_fill, "fill", a, NARGS(a), n, e);
}

size_t ocl_conv2d_scratch_floats(int B, int C, int K, int OC, int OH, int OW) {
    const size_t n = (size_t)B * OH * OW;
    return (size_t)C * K * K * n + (size_t)OC * n;
}

static int conv_check(ocl_ops *o, const char *op, int B, int C, int H, int W, int OC, int K,
                      int stride, int pad, int OH, int OW, size_t b_off, ht_error *e) {
    if (check_dims(o, op, e, 9, B, C, H, W, OC, K, stride, OH, OW)) return -1;
    if (pad < 0) return ht_fail(e, "%s on %s: pad is %d, expected >= 0", op, o->label, pad);
    const double n = (double)B * OH * OW;
    if (check_fits(o, op, "im2col matrix", (double)C * K * K * n, e) ||
        check_fits(o, op, "output", (double)OC * n, e) ||
        check_fits(o, op, "input", (double)B * C * H * W, e))
        return -1;
    return check_offset(o, op, b_off, (size_t)OC, e);
}

// col (CKK, N) = im2col of in, N = B*OH*OW, at scratch[0..).
static int im2col(ocl_ops *o, cl_mem col, cl_mem in, int B, int C, int H, int W, int K,
                  int stride, int pad, int OH, int OW, ht_error *e) {
    karg a[] = {KA(col), KA(in), KA(B),      KA(C),   KA(H),  KA(W),
                KA(K),   KA(stride), KA(pad), KA(OH), KA(OW)};
    size_t g[2] = {round_up((size_t)B * OH * OW, 64), (size_t)C};
    return launch(o, o->k_im2col, "im2col", a, NARGS(a), 2, g, NULL, e);
}

int ocl_conv2d_forward(ocl_ops *o, cl_mem out, cl_mem in, cl_mem params, size_t w_off,
                        size_t b_off, int B, int C, int H, int W, int OC, int K, int stride,
                        int pad, int OH, int OW, cl_mem scratch, ht_error *e) {
    if (B == 0) return 0;
    if (conv_check(o, "conv2d forward", B, C, H, W, OC, K, stride, pad, OH, OW, b_off, e))
        return -1;
    // scratch: col (CKK, N) at 0, tmp (OC, N) after it.
    const size_t ckk = (size_t)C * K * K, n = (size_t)B * OH * OW;
    cl_uint tmp_off = (cl_uint)(ckk * n), boff = (cl_uint)b_off;
    int P = OH * OW;
    if (im2col(o, scratch, in, B, C, H, W, K, stride, pad, OH, OW, e)) return -1;
    // tmp (OC, N) = W (OC, CKK) x col (CKK, N)
    if (gemm(o, "conv2d forward: W x col", CLBlastTransposeNo, CLBlastTransposeNo, (size_t)OC,
             n, ckk, params, w_off, ckk, scratch, 0, n, 0.0f, scratch, tmp_off, n, e))
        return -1;
    karg a[] = {KA(out), KA(scratch), KA(tmp_off), KA(params), KA(boff), KA(B), KA(OC), KA(P)};
    return launch_1d(o, o->k_bias_to_nchw, "bias_to_nchw", a, NARGS(a), (size_t)OC * n, e);
}

// grads[off + r] += sum of row r of m (rows, cols) from float m_off on: one work-group per
// row, as large as the kernel allows on this device (a power of two, at most
// CLOP_ROW_SUM_GROUP).
static int row_sum(ocl_ops *o, cl_mem grads, size_t off, cl_mem m, cl_uint m_off, int rows,
                   int cols, ht_error *e) {
    cl_device_id dev;
    cl_int err = clGetCommandQueueInfo(o->q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
    if (err != CL_SUCCESS)
        return ocl_fail(e, "clGetCommandQueueInfo(CL_QUEUE_DEVICE)", err, o->label);
    size_t kmax = 0, dmax[16] = {0};  // CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS is at least 3
    err = clGetKernelWorkGroupInfo(o->k_row_sum, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax,
                                   &kmax, NULL);
    if (err != CL_SUCCESS)
        return ocl_fail(e, "clGetKernelWorkGroupInfo(row_sum, CL_KERNEL_WORK_GROUP_SIZE)", err,
                       o->label);
    err = clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof dmax, dmax, NULL);
    if (err != CL_SUCCESS)
        return ocl_fail(e, "clGetDeviceInfo(CL_DEVICE_MAX_WORK_ITEM_SIZES)", err, o->label);
    size_t ls = CLOP_ROW_SUM_GROUP;
    while (ls > 1 && (ls > kmax || ls > dmax[0])) ls /= 2;
    cl_uint off32 = (cl_uint)off;
    karg a[] = {KA(grads), KA(off32), KA(m), KA(m_off), KA(rows), KA(cols),
                {ls * sizeof(float), NULL}};
    size_t g = (size_t)rows * ls;
    return launch(o, o->k_row_sum, "row_sum", a, NARGS(a), 1, &g, &ls, e);
}

int ocl_conv2d_backward(ocl_ops *o, cl_mem din, cl_mem grads, size_t w_off, size_t b_off,
                         cl_mem dout, cl_mem in, cl_mem params, int B, int C, int H, int W,
                         int OC, int K, int stride, int pad, int OH, int OW, cl_mem scratch,
                         ht_error *e) {
    if (B == 0) return 0;
    if (conv_check(o, "conv2d backward", B, C, H, W, OC, K, stride, pad, OH, OW, b_off, e))
        return -1;
    const size_t ckk = (size_t)C * K * K, n = (size_t)B * OH * OW;
    cl_uint tmp_off = (cl_uint)(ckk * n);
    int P = OH * OW;
    // dtmp (OC, N) = dout reshaped; col recomputed (scratch does not survive from forward).
    karg a[] = {KA(scratch), KA(tmp_off), KA(dout), KA(B), KA(OC), KA(P)};
    if (launch_1d(o, o->k_nchw_to_rows, "nchw_to_rows", a, NARGS(a), (size_t)OC * n, e))
        return -1;
    if (im2col(o, scratch, in, B, C, H, W, K, stride, pad, OH, OW, e)) return -1;
    // dW (OC, CKK) += dtmp (OC, N) x col^T (N, CKK)
    if (gemm(o, "conv2d backward: dW += dtmp x col^T", CLBlastTransposeNo, CLBlastTransposeYes,
             (size_t)OC, ckk, n, scratch, tmp_off, n, scratch, 0, n, 1.0f, grads, w_off, ckk, e))
        return -1;
    if (row_sum(o, grads, b_off, scratch, tmp_off, OC, (int)n, e)) return -1;
    if (!din) return 0;
    // dcol (CKK, N) = W^T (CKK, OC) x dtmp (OC, N), over col, then gathered back into din.
    if (gemm(o, "conv2d backward: dcol = W^T x dtmp", CLBlastTransposeYes, CLBlastTransposeNo,
             ckk, n, (size_t)OC, params, w_off, ckk, scratch, tmp_off, n, 0.0f, scratch, 0, n,
             e))
        return -1;
    karg c[] = {KA(din), KA(scratch), KA(B),   KA(C),  KA(H), KA(W),
                KA(K),   KA(stride),  KA(pad), KA(OH), KA(OW)};
    return launch_1d(o, o->k_col2im, "col2im", c, NARGS(c), (size_t)B * C * H * W, e);
}

static int pool_check(ocl_ops *o, const char *op, int B, int C, int H, int W, int K, int stride,
                      int OH, int OW, ht_error *e) {
    if (check_dims(o, op, e, 8, B, C, H, W, K, stride, OH, OW)) return -1;
    // No padding: every window must lie inside the plane (the kernels do not check).
    if ((OH - 1) * stride + K > H || (OW - 1) * stride + K > W)
        return ht_fail(e, "%s on %s: %dx%d output with K %d stride %d reads past a %dx%d input",
                       op, o->label, OH, OW, K, stride, H, W);
    return check_fits(o, op, "input", (double)B * C * H * W, e);
}

int ocl_maxpool_forward(ocl_ops *o, cl_mem out, cl_mem argmax, cl_mem in, int B, int C, int H,
                         int W, int K, int stride, int OH, int OW, ht_error *e) {
    if (B == 0) return 0;
    if (pool_check(o, "maxpool forward", B, C, H, W, K, stride, OH, OW, e)) return -1;
    karg a[] = {KA(out), KA(argmax), KA(in),     KA(B),  KA(C), KA(H),
                KA(W),   KA(K),      KA(stride), KA(OH), KA(OW)};
    return launch_1d(o, o->k_maxpool_fwd, "maxpool_fwd", a, NARGS(a), (size_t)B * C * OH * OW,
                     e);
}

int ocl_maxpool_backward(ocl_ops *o, cl_mem din, cl_mem dout, cl_mem argmax, int B, int C,
                          int H, int W, int K, int stride, int OH, int OW, ht_error *e) {
    if (B == 0) return 0;
    if (pool_check(o, "maxpool backward", B, C, H, W, K, stride, OH, OW, e)) return -1;
    karg a[] = {KA(din), KA(dout), KA(argmax), KA(B),  KA(C), KA(H),
                KA(W),   KA(K),    KA(stride), KA(OH), KA(OW)};
    return launch_1d(o, o->k_maxpool_bwd, "maxpool_bwd", a, NARGS(a), (size_t)B * C * H * W, e);
}

static int dense_check(ocl_ops *o, const char *op, int B, int IN, int OUT, size_t b_off,
                       ht_error *e) {
    if (check_dims(o, op, e, 3, B, IN, OUT)) return -1;
    if (check_fits(o, op, "input", (double)B * IN, e) ||
        check_fits(o, op, "output", (double)B * OUT, e))
        return -1;
    return check_offset(o, op, b_off, (size_t)OUT, e);
}

int ocl_dense_forward(ocl_ops *o, cl_mem out, cl_mem in, cl_mem params, size_t w_off,
                       size_t b_off, int B, int IN, int OUT, ht_error *e) {
    if (B == 0) return 0;
    if (dense_check(o, "dense forward", B, IN, OUT, b_off, e)) return -1;
    // out (B, OUT) = in (B, IN) x W^T (IN, OUT)
    if (gemm(o, "dense forward: in x W^T", CLBlastTransposeNo, CLBlastTransposeYes, (size_t)B,
             (size_t)OUT, (size_t)IN, in, 0, (size_t)IN, params, w_off, (size_t)IN, 0.0f, out,
             0, (size_t)OUT, e))
        return -1;
    cl_uint boff = (cl_uint)b_off;
    karg a[] = {KA(out), KA(params), KA(boff), KA(B), KA(OUT)};
    return launch_1d(o, o->k_dense_bias, "dense_bias", a, NARGS(a), (size_t)B * OUT, e);
}

int ocl_dense_backward(ocl_ops *o, cl_mem din, cl_mem grads, size_t w_off, size_t b_off,
                        cl_mem dout, cl_mem in, cl_mem params, int B, int IN, int OUT,
                        ht_error *e) {
    if (B == 0) return 0;
    if (dense_check(o, "dense backward", B, IN, OUT, b_off, e)) return -1;
    // dW (OUT, IN) += dout^T (OUT, B) x in (B, IN)
    if (gemm(o, "dense backward: dW += dout^T x in", CLBlastTransposeYes, CLBlastTransposeNo,
             (size_t)OUT, (size_t)IN, (size_t)B, dout, 0, (size_t)OUT, in, 0, (size_t)IN, 1.0f,
             grads, w_off, (size_t)IN, e))
        return -1;
    cl_uint boff = (cl_uint)b_off;
    karg a[] = {KA(grads), KA(boff), KA(dout), KA(B), KA(OUT)};
    if (launch_1d(o, o->k_col_sum, "col_sum", a, NARGS(a), (size_t)OUT, e)) return -1;
    if (!din) return 0;
    // din (B, IN) = dout (B, OUT) x W (OUT, IN)
    return gemm(o, "dense backward: din = dout x W", CLBlastTransposeNo, CLBlastTransposeNo,
                (size_t)B, (size_t)IN, (size_t)OUT, dout, 0, (size_t)OUT, params, w_off,
                (size_t)IN, 0.0f, din, 0, (size_t)IN, e);
}

int ocl_relu_forward(ocl_ops *o, cl_mem out, cl_mem in, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "relu forward", "tensor", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(out), KA(in), KA(n32)};
    return launch_1d(o, o->k_relu_fwd, "relu_fwd", a, NARGS(a), n, e);
}

int ocl_relu_backward(ocl_ops *o, cl_mem din, cl_mem dout, cl_mem out, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "relu backward", "tensor", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(din), KA(dout), KA(out), KA(n32)};
    return launch_1d(o, o->k_relu_bwd, "relu_bwd", a, NARGS(a), n, e);
}

int ocl_dropout(ocl_ops *o, cl_mem out, cl_mem in, int B, size_t N, float rate, uint64_t key,
                 cl_mem ids, ht_error *e) {
    if (B == 0 || N == 0) return 0;
    if (check_dims(o, "dropout", e, 1, B) ||
        check_fits(o, "dropout", "tensor", (double)B * (double)N, e))
        return -1;
    // The same expression as the CPU's, so kept values are scaled bit for bit alike.
    float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
    cl_uint n32 = (cl_uint)N;
    cl_ulong k64 = key;
    karg a[] = {KA(out), KA(in), KA(B), KA(n32), KA(rate), KA(scale), KA(k64), KA(ids)};
    return launch_1d(o, o->k_dropout, "dropout", a, NARGS(a), (size_t)B * N, e);
}

int ocl_softmax_xent_forward(ocl_ops *o, cl_mem probs, cl_mem loss, cl_mem logits,
                              cl_mem labels, int B, int NC, ht_error *e) {
    if (B == 0) return 0;
    if (check_dims(o, "softmax_xent forward", e, 2, B, NC) ||
        check_fits(o, "softmax_xent forward", "logits", (double)B * NC, e))
        return -1;
    // Without labels the kernel reads neither labels nor loss; it still needs valid buffers.
    cl_int has_labels = labels && loss;
    cl_mem lab = has_labels ? labels : probs, ls = has_labels ? loss : probs;
    karg a[] = {KA(probs), KA(ls), KA(logits), KA(lab), KA(has_labels), KA(B), KA(NC)};
    return launch_1d(o, o->k_softmax_xent_fwd, "softmax_xent_fwd", a, NARGS(a), (size_t)B, e);
}

int ocl_softmax_xent_backward(ocl_ops *o, cl_mem dlogits, cl_mem probs, cl_mem labels, int B,
                               int NC, ht_error *e) {
    if (B == 0) return 0;
    if (check_dims(o, "softmax_xent backward", e, 2, B, NC) ||
        check_fits(o, "softmax_xent backward", "logits", (double)B * NC, e))
        return -1;
    karg a[] = {KA(dlogits), KA(probs), KA(labels), KA(B), KA(NC)};
    return launch_1d(o, o->k_softmax_xent_bwd, "softmax_xent_bwd", a, NARGS(a), (size_t)B * NC,
                     e);
}
