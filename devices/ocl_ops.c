// The OpenCL op layer: the layer ops as kernels from kernels/*.cl plus CLBlast GEMMs (in the
// tuned configuration of their shape, if the device has one), enqueued on one in-order queue.
// Kernel arguments are set on every call and the kernels belong to the ocl_ops, so a ocl_ops
// must not be used by two threads at once (one per device thread). Kernels index with 32-bit
// ints, so every tensor must hold fewer than 2^31 floats; the ops check that and fail with a
// message rather than wrap around. B == 0 does nothing.
#include "devices/ocl_ops.h"

#include <clblast_c.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Global sizes are rounded up to a multiple of this (kernels bounds-check), so any power-of-two
// work-group size up to it divides them: the driver's choice, or a tuned one.
#define CLOP_ROUND 256
// The 3-D kernels' first dimension (a row of a plane) is rounded up to this when the driver
// chooses their work-group.
#define CLOP_ROUND_3D 8
// Upper bound on row_sum's work-group (a power of two); lowered to what the kernel allows.
#define CLOP_ROW_SUM_GROUP 256
// The same for the kernels launched by ocl_launch_groups.
#define CLOP_REDUCE_GROUP 256

// The kernels the ops of this file launch, which every program must have (ocl_ops_init checks,
// naming the first one missing). The program's other kernels, and these, are found by name.
static const char *const core_kernels[] = {
    "fill", "im2col", "col2im", "bias_to_nchw", "nchw_to_rows", "row_sum", "maxpool_fwd",
    "maxpool_bwd", "dense_bias", "col_sum", "relu_fwd", "relu_bwd", "dropout", "softmax_xent_fwd",
    "softmax_xent_bwd", "maxpool_bwd_tiled", "avgpool_fwd", "avgpool_bwd", "gavgpool_fwd",
    "gavgpool_bwd", "act_fwd", "act_bwd", NULL};

// The kernels whose work-group is their reduction tree (the order of their sums): never tuned.
static const char *const reduce_kernels[] = {"row_sum", "bn_stats", "bn_bwd_sums", NULL};

int ocl_kernel_tunable(const char *name) {
    for (int i = 0; reduce_kernels[i]; i++)
        if (!strcmp(name, reduce_kernels[i])) return 0;
    return 1;
}

int ocl_kernel_index(const ocl_ops *o, const char *name) {
    for (int i = 0; i < o->n_k; i++)
        if (!strcmp(o->kname[i], name)) return i;
    return -1;
}

// ---- profiling ----

static ocl_prof_entry *prof_entry(ocl_ops *o, const char *name) {
    int i = 0;
    while (i < o->prof_n && strcmp(o->prof[i].name, name)) i++;
    if (i == o->prof_n) {
        if (o->prof_n == OCL_PROF_MAX) return &o->prof[OCL_PROF_MAX - 1]; // "other"
        memset(&o->prof[i], 0, sizeof o->prof[i]);
        snprintf(o->prof[i].name, sizeof o->prof[i].name, "%s", name);
        o->prof_n++;
    }
    return &o->prof[i];
}

double ocl_prof_start(ocl_ops *o) {
    if (!o->prof_on) return 0.0;
    clFinish(o->q);
    return ht_now();
}

void ocl_prof_stop(ocl_ops *o, const char *name, double t0) {
    if (!o->prof_on) return;
    clFinish(o->q);
    ocl_prof_entry *p = prof_entry(o, name);
    p->s += ht_now() - t0;
    p->calls++;
}

void ocl_prof_reset(ocl_ops *o) { o->prof_n = 0; }

static int by_time(const void *a, const void *b) {
    double x = ((const ocl_prof_entry *)a)->s, y = ((const ocl_prof_entry *)b)->s;
    return x < y ? 1 : x > y ? -1 : 0;
}

void ocl_prof_print(const ocl_ops *o, FILE *f) {
    ocl_prof_entry sorted[OCL_PROF_MAX];
    double total = 0;
    int n = o->prof_n;
    memcpy(sorted, o->prof, (size_t)n * sizeof sorted[0]);
    qsort(sorted, (size_t)n, sizeof sorted[0], by_time);
    for (int i = 0; i < n; i++) total += sorted[i].s;
    if (total <= 0) return;
    fprintf(f, "OpenCL profile of %s (ops serialised):\n", o->label);
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-22s %8.3f s %5.1f%% %6ld calls %9.3f ms/call  %s\n", sorted[i].name,
                sorted[i].s, 100 * sorted[i].s / total, sorted[i].calls,
                1e3 * sorted[i].s / (double)sorted[i].calls, sorted[i].op);
    fprintf(f, "  %-22s %8.3f s\n", "total", total);
}

// ---- GEMMs ----

int ocl_gemm(ocl_ops *o, const char *what, const ocl_gemm_cfg *cfg, char ta, char tb, size_t m,
             size_t n, size_t k, cl_mem a, size_t a_off, size_t lda, cl_mem b, size_t b_off,
             size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc, ht_error *e) {
    ocl_gemm_shape shape = {ta, tb, m, n, k};
    if (!cfg) cfg = ocl_tuning_find(o->tuning, &shape);
    CLBlastTranspose cta = ta == 'T' ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose ctb = tb == 'T' ? CLBlastTransposeYes : CLBlastTransposeNo;
    double t0 = ocl_prof_start(o);
    // The configuration, the scratch size it needs and the call under one hold of the lock:
    // another thread may put another configuration in force for this device in between.
    ocl_blas_lock();
    size_t need = 0;
    int st = ocl_blas_use(o->dev, cfg);
    if (st == 0)
        st = CLBlastSGemmTempBufferSize(CLBlastLayoutRowMajor, cta, ctb, m, n, k, a_off, lda,
                                        b_off, ldb, c_off, ldc, &o->q, &need);
    if (st == 0 && need > o->gemm_temp_bytes) {
        ocl_ops_release_temp(o);
        cl_int err;
        o->gemm_temp = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, need, NULL, &err);
        if (err != CL_SUCCESS) {
            ocl_blas_unlock();
            o->gemm_temp = NULL;
            char call[128];
            snprintf(call, sizeof call, "clCreateBuffer(GEMM scratch, %zu MiB, %s)", need >> 20, what);
            return ocl_fail(e, call, err, o->label);
        }
        o->gemm_temp_bytes = need;
    }
    if (st == 0) {
        cl_event *mark = ocl_ops_event(o, OCL_EV_MARK);
        if (mark && clEnqueueMarkerWithWaitList(o->q, 0, NULL, mark) != CL_SUCCESS) *mark = NULL;
        st = CLBlastSgemmWithTempBuffer(CLBlastLayoutRowMajor, cta, ctb, m, n, k, 1.0f, a, a_off,
                                        lda, b, b_off, ldb, beta, c, c_off, ldc, &o->q,
                                        ocl_ops_event(o, OCL_EV_GEMM), o->gemm_temp);
    }
    ocl_blas_unlock();
    if (st != 0) {
        // CLBlast reports OpenCL errors with their OpenCL codes (above -1000).
        ocl_note_error(st > -1000 ? (cl_int)st : CL_INVALID_OPERATION);
        return ht_fail(e, "CLBlastSgemm (%s, %c%c %zux%zux%zu%s): status %d %s on %s", what, ta,
                       tb, m, n, k, cfg ? ", tuned" : "", st, ocl_blas_status_name(st), o->label);
    }
    if (o->prof_on) {
        char name[64];
        ocl_gemm_shape_str(name, sizeof name, &shape);
        ocl_prof_entry *p = prof_entry(o, name);
        if (!p->gemm) {
            p->gemm = 1;
            p->shape = shape;
            p->a_off = a_off, p->lda = lda, p->b_off = b_off, p->ldb = ldb;
            p->c_off = c_off, p->ldc = ldc, p->beta = beta;
        }
        if (!p->op[0]) snprintf(p->op, sizeof p->op, "%s", what);
        ocl_prof_stop(o, name, t0);
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

#define KA OCL_KA

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Sets every argument of kernel `name`, then enqueues it over gsize (rounded up by the caller)
// with local size lsize (NULL: the tuned one, else the driver's choice).
static int launch(ocl_ops *o, const char *name, const ocl_karg *args, int nargs, cl_uint dims,
                  const size_t *gsize, const size_t *lsize, ht_error *e) {
    char call[96];
    int id = ocl_kernel_index(o, name);
    if (id < 0) return ht_fail(e, "%s: no kernel \"%s\" in kernels/*.cl", o->label, name);
    for (int i = 0; i < nargs; i++) {
        cl_int err = clSetKernelArg(o->k[id], (cl_uint)i, args[i].size, args[i].ptr);
        if (err != CL_SUCCESS) {
            snprintf(call, sizeof call, "clSetKernelArg(%s, arg %d)", name, i);
            return ocl_fail(e, call, err, o->label);
        }
    }
    size_t tuned[1] = {o->local[id]};
    if (!lsize && dims == 1 && tuned[0]) lsize = tuned;
    double t0 = ocl_prof_start(o);
    cl_int err = clEnqueueNDRangeKernel(o->q, o->k[id], dims, NULL, gsize, lsize, 0, NULL,
                                        ocl_ops_event(o, OCL_EV_KERNEL));
    if (err != CL_SUCCESS) {
        snprintf(call, sizeof call, "clEnqueueNDRangeKernel(%s)", name);
        return ocl_fail(e, call, err, o->label);
    }
    ocl_prof_stop(o, name, t0);
    return 0;
}

int ocl_launch_1d(ocl_ops *o, const char *name, const ocl_karg *args, int nargs, size_t n,
                  ht_error *e) {
    size_t g = round_up(n, CLOP_ROUND);
    return launch(o, name, args, nargs, 1, &g, NULL, e);
}

int ocl_launch_3d(ocl_ops *o, const char *name, const ocl_karg *args, int nargs, size_t n0,
                  size_t n1, size_t n2, ht_error *e) {
    int id = ocl_kernel_index(o, name);
    size_t l = id >= 0 ? o->local[id] : 0;
    size_t g[3] = {round_up(n0, l ? l : CLOP_ROUND_3D), n1, n2}, ls[3] = {l, 1, 1};
    return launch(o, name, args, nargs, 3, g, l ? ls : NULL, e);
}

int ocl_launch_groups(ocl_ops *o, const char *name, const ocl_karg *args, int nargs,
                      size_t groups, int local_floats, ht_error *e) {
    int id = ocl_kernel_index(o, name);
    if (id < 0) return ht_fail(e, "%s: no kernel \"%s\" in kernels/*.cl", o->label, name);
    ocl_karg a[OCL_MAX_KARGS + 1];
    if (nargs > OCL_MAX_KARGS)
        return ht_fail(e, "%s: %d arguments for kernel %s, more than the %d a launch takes",
                       o->label, nargs, name, OCL_MAX_KARGS);
    memcpy(a, args, sizeof(ocl_karg) * (size_t)nargs);
    size_t ls = CLOP_REDUCE_GROUP;
    while (ls > 1 && ls > o->kmax[id]) ls /= 2;
    a[nargs] = (ocl_karg){ls * (size_t)local_floats * sizeof(float), NULL};
    size_t gs = groups * ls;
    return launch(o, name, a, nargs + 1, 1, &gs, &ls, e);
}

#define launch_1d ocl_launch_1d
#define launch_3d ocl_launch_3d
typedef ocl_karg karg;

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

// ---- setup ----

int ocl_ops_init(ocl_ops *o, cl_context ctx, cl_command_queue q, cl_program prog,
                const char *label, ht_error *e) {
    memset(o, 0, sizeof *o);
    o->ctx = ctx;
    o->q = q;
    o->prog = prog;
    snprintf(o->label, sizeof o->label, "%s", label ? label : "OpenCL device");
    const char *prof = getenv("HETRAIN_OCL_PROFILE");
    o->prof_on = prof && *prof && strcmp(prof, "0");
    cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof o->dev, &o->dev, NULL);
    if (err != CL_SUCCESS)
        return ocl_fail(e, "clGetCommandQueueInfo(CL_QUEUE_DEVICE)", err, o->label);
    size_t dmax[16] = {0}; // CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS is at least 3
    err = clGetDeviceInfo(o->dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof dmax, dmax, NULL);
    if (err != CL_SUCCESS)
        return ocl_fail(e, "clGetDeviceInfo(CL_DEVICE_MAX_WORK_ITEM_SIZES)", err, o->label);
    // Every kernel of the program, in order of name; the core ones must be there.
    cl_uint n = 0;
    err = clCreateKernelsInProgram(prog, 0, NULL, &n);
    if (err != CL_SUCCESS) return ocl_fail(e, "clCreateKernelsInProgram", err, o->label);
    if (n > OCL_MAX_KERNELS)
        return ht_fail(e, "%s: the program has %u kernels, more than the %d hetrain keeps",
                       o->label, n, OCL_MAX_KERNELS);
    cl_kernel ks[OCL_MAX_KERNELS];
    err = clCreateKernelsInProgram(prog, n, ks, NULL);
    if (err != CL_SUCCESS) return ocl_fail(e, "clCreateKernelsInProgram", err, o->label);
    for (cl_uint i = 0; i < n; i++) {
        char name[OCL_KERNEL_NAME] = "";
        clGetKernelInfo(ks[i], CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, NULL);
        int at = o->n_k++;
        while (at > 0 && strcmp(o->kname[at - 1], name) > 0) { // insertion by name
            o->k[at] = o->k[at - 1];
            memcpy(o->kname[at], o->kname[at - 1], sizeof o->kname[at]);
            at--;
        }
        o->k[at] = ks[i];
        snprintf(o->kname[at], sizeof o->kname[at], "%s", name);
    }
    for (int i = 0; core_kernels[i]; i++)
        if (ocl_kernel_index(o, core_kernels[i]) < 0) {
            ht_fail(e, "%s: kernel \"%s\" is missing from kernels/*.cl", o->label,
                    core_kernels[i]);
            ocl_ops_free(o);
            return -1;
        }
    for (int i = 0; i < o->n_k; i++) {
        char call[96];
        err = clGetKernelWorkGroupInfo(o->k[i], o->dev, CL_KERNEL_WORK_GROUP_SIZE,
                                       sizeof o->kmax[i], &o->kmax[i], NULL);
        if (err != CL_SUCCESS) {
            snprintf(call, sizeof call, "clGetKernelWorkGroupInfo(%s, CL_KERNEL_WORK_GROUP_SIZE)",
                     o->kname[i]);
            ocl_fail(e, call, err, o->label);
            ocl_ops_free(o);
            return -1;
        }
        if (dmax[0] && o->kmax[i] > dmax[0]) o->kmax[i] = dmax[0];
    }
    size_t ls = CLOP_ROW_SUM_GROUP;
    while (ls > 1 && ls > o->kmax[ocl_kernel_index(o, "row_sum")]) ls /= 2;
    o->row_sum_group = ls;
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

void ocl_ops_tune(ocl_ops *o, const ocl_tuning *t) {
    o->tuning = t;
    for (int i = 0; i < o->n_k; i++) {
        unsigned l = ocl_kernel_tunable(o->kname[i]) ? ocl_tuning_wg(t, o->kname[i]) : 0;
        o->local[i] = l && l <= o->kmax[i] && CLOP_ROUND % l == 0 ? l : 0;
    }
}

void ocl_ops_release_temp(ocl_ops *o) {
    if (o->gemm_temp) clReleaseMemObject(o->gemm_temp);
    o->gemm_temp = NULL;
    o->gemm_temp_bytes = 0;
}

void ocl_ops_free(ocl_ops *o) {
    const char *prof = getenv("HETRAIN_OCL_PROFILE");
    if (o->prof_on && prof && *prof && strcmp(prof, "0")) ocl_prof_print(o, stderr);
    o->prof_n = 0;
    ocl_ops_release_temp(o);
    ocl_ops_drain(o, NULL);
    free(o->ev);
    free(o->ev_kind);
    o->ev = NULL;
    o->ev_kind = NULL;
    o->cap_ev = 0;
    o->profiling = 0;
    for (int i = 0; i < o->n_k; i++) {
        if (o->k[i]) clReleaseKernel(o->k[i]);
        o->k[i] = NULL;
    }
    o->n_k = 0;
}

// ---- ops ----

int ocl_copy(ocl_ops *o, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off, size_t bytes,
             ht_error *e) {
    if (bytes == 0) return 0;
    double t0 = ocl_prof_start(o);
    cl_int err = clEnqueueCopyBuffer(o->q, src, dst, src_off, dst_off, bytes, 0, NULL,
                                     ocl_ops_event(o, OCL_EV_TRANSFER));
    if (err != CL_SUCCESS) return ocl_fail(e, "clEnqueueCopyBuffer", err, o->label);
    ocl_prof_stop(o, "copy", t0);
    return 0;
}

int ocl_fill(ocl_ops *o, cl_mem buf, float value, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "fill", "buffer", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(buf), KA(value), KA(n32)};
    return launch_1d(o, "fill", a, NARGS(a), n, e);
}

int ocl_add(ocl_ops *o, cl_mem out, cl_mem a, cl_mem b, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "add", "buffer", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg k[] = {KA(out), KA(a), KA(b), KA(n32)};
    return launch_1d(o, "add2", k, NARGS(k), n, e);
}

size_t ocl_conv2d_col_floats(const conv_geom *g, int B) {
    return (size_t)g->C * g->K * g->K * B * g->OH * g->OW;
}
size_t ocl_conv2d_tmp_floats(const conv_geom *g, int B) { return (size_t)g->OC * B * g->OH * g->OW; }

static int conv_check(ocl_ops *o, const char *op, const conv_geom *g, int B, size_t b_off,
                      ht_error *e) {
    if (check_dims(o, op, e, 9, B, g->C, g->H, g->W, g->OC, g->K, g->stride, g->OH, g->OW))
        return -1;
    if (g->pad < 0) return ht_fail(e, "%s on %s: pad is %d, expected >= 0", op, o->label, g->pad);
    const double n = (double)B * g->OH * g->OW;
    if (check_fits(o, op, "im2col matrix", (double)g->C * g->K * g->K * n, e) ||
        check_fits(o, op, "output", (double)g->OC * n, e) ||
        check_fits(o, op, "input", (double)B * g->C * g->H * g->W, e))
        return -1;
    return b_off == OCL_NO_BIAS ? 0 : check_offset(o, op, b_off, (size_t)g->OC, e);
}

// col (CKK, N) = im2col of in, N = B*OH*OW, at col[0..).
static int im2col(ocl_ops *o, const conv_geom *g, int B, cl_mem col, cl_mem in, ht_error *e) {
    karg a[] = {KA(col), KA(in),        KA(B),      KA(g->C),  KA(g->H),  KA(g->W),
                KA(g->K), KA(g->stride), KA(g->pad), KA(g->OH), KA(g->OW)};
    return launch_3d(o, "im2col", a, NARGS(a), (size_t)g->OW, (size_t)g->OH,
                     (size_t)B * g->C, e);
}

int ocl_conv2d_forward(ocl_ops *o, const conv_geom *g, int B, cl_mem out, cl_mem in,
                       cl_mem params, size_t w_off, size_t b_off, const ocl_conv_scratch *s,
                       ht_error *e) {
    if (B == 0) return 0;
    if (conv_check(o, "conv2d forward", g, B, b_off, e) ||
        check_offset(o, "conv2d forward", s->tmp_off, ocl_conv2d_tmp_floats(g, B), e))
        return -1;
    const size_t ckk = (size_t)g->C * g->K * g->K, n = (size_t)B * g->OH * g->OW;
    const cl_int has_bias = b_off != OCL_NO_BIAS;
    cl_uint toff = (cl_uint)s->tmp_off, boff = has_bias ? (cl_uint)b_off : 0;
    int P = g->OH * g->OW, OC = g->OC;
    if (im2col(o, g, B, s->col, in, e)) return -1;
    // tmp (OC, N) = W (OC, CKK) x col (CKK, N)
    if (ocl_gemm(o, "conv2d forward: W x col", NULL, 'N', 'N', (size_t)OC, n, ckk, params, w_off,
                 ckk, s->col, 0, n, 0.0f, s->tmp, s->tmp_off, n, e))
        return -1;
    karg a[] = {KA(out), KA(s->tmp),   KA(toff), KA(params), KA(boff),
                KA(has_bias), KA(B), KA(OC),   KA(P)};
    return launch_3d(o, "bias_to_nchw", a, NARGS(a), (size_t)P, (size_t)OC, (size_t)B, e);
}

// grads[off + r] += sum of row r of m (rows, cols) from float m_off on: one work-group per
// row, as large as the kernel allows on this device (a power of two, at most
// CLOP_ROW_SUM_GROUP).
static int row_sum(ocl_ops *o, cl_mem grads, size_t off, cl_mem m, cl_uint m_off, int rows,
                   int cols, ht_error *e) {
    size_t ls = o->row_sum_group;
    cl_uint off32 = (cl_uint)off;
    karg a[] = {KA(grads), KA(off32), KA(m), KA(m_off), KA(rows), KA(cols),
                {ls * sizeof(float), NULL}};
    size_t gs = (size_t)rows * ls;
    return launch(o, "row_sum", a, NARGS(a), 1, &gs, &ls, e);
}

int ocl_conv2d_backward(ocl_ops *o, const conv_geom *g, int B, cl_mem din, cl_mem grads,
                        cl_mem dout, cl_mem in, cl_mem params, size_t w_off, size_t b_off,
                        const ocl_conv_scratch *s, ht_error *e) {
    if (B == 0) return 0;
    if (conv_check(o, "conv2d backward", g, B, b_off, e) ||
        check_offset(o, "conv2d backward", s->tmp_off, ocl_conv2d_tmp_floats(g, B), e))
        return -1;
    const size_t ckk = (size_t)g->C * g->K * g->K, n = (size_t)B * g->OH * g->OW;
    cl_uint toff = (cl_uint)s->tmp_off;
    int P = g->OH * g->OW, OC = g->OC;
    // dtmp (OC, N) = dout reshaped.
    karg a[] = {KA(s->tmp), KA(toff), KA(dout), KA(B), KA(OC), KA(P)};
    if (launch_3d(o, "nchw_to_rows", a, NARGS(a), (size_t)P, (size_t)OC, (size_t)B, e))
        return -1;
    if (g->dw == CONV_DIRECT) {
        if (!s->col_ready && im2col(o, g, B, s->col, in, e)) return -1;
        // dW (OC, CKK) += dtmp (OC, N) x col^T (N, CKK)
        if (ocl_gemm(o, "conv2d backward: dW += dtmp x col^T", NULL, 'N', 'T', (size_t)OC, ckk,
                     n, s->tmp, s->tmp_off, n, s->col, 0, n, 1.0f, grads, w_off, ckk, e))
            return -1;
    }
    if (b_off != OCL_NO_BIAS && row_sum(o, grads, b_off, s->tmp, toff, OC, (int)n, e)) return -1;
    if (!din || g->din != CONV_DIRECT) return 0;
    // dcol (CKK, N) = W^T (CKK, OC) x dtmp (OC, N), over col, then gathered back into din.
    if (ocl_gemm(o, "conv2d backward: dcol = W^T x dtmp", NULL, 'T', 'N', ckk, n, (size_t)OC,
                 params, w_off, ckk, s->tmp, s->tmp_off, n, 0.0f, s->col, 0, n, e))
        return -1;
    karg c[] = {KA(din),  KA(s->col),    KA(B),      KA(g->C),  KA(g->H),  KA(g->W),
                KA(g->K), KA(g->stride), KA(g->pad), KA(g->OH), KA(g->OW)};
    return launch_3d(o, "col2im", c, NARGS(c), (size_t)g->W, (size_t)g->H,
                     (size_t)B * g->C, e);
}

// Every window must hold an input of the plane: it starts before the plane's end and
// ends after its start (pad < K).
static int pool_check(ocl_ops *o, const char *op, const pool_geom *g, int B, ht_error *e) {
    if (check_dims(o, op, e, 8, B, g->Cs, g->H, g->W, g->K, g->stride, g->OH, g->OW)) return -1;
    if (g->pad < 0 || g->pad >= g->K || (g->OH - 1) * g->stride - g->pad >= g->H ||
        (g->OW - 1) * g->stride - g->pad >= g->W)
        return ht_fail(e, "%s on %s: %dx%d output with K %d stride %d pad %d has windows outside "
                       "a %dx%d input", op, o->label, g->OH, g->OW, g->K, g->stride, g->pad,
                       g->H, g->W);
    return check_fits(o, op, "input", (double)B * g->Cs * g->H * g->W, e);
}

int ocl_maxpool_forward(ocl_ops *o, const pool_geom *g, int B, cl_mem out, cl_mem argmax,
                        cl_mem in, ht_error *e) {
    if (B == 0) return 0;
    if (pool_check(o, "maxpool forward", g, B, e)) return -1;
    karg a[] = {KA(out),  KA(argmax),    KA(in),     KA(B),     KA(g->Cs), KA(g->H),
                KA(g->W), KA(g->K),      KA(g->stride), KA(g->pad), KA(g->OH), KA(g->OW)};
    return launch_3d(o, "maxpool_fwd", a, NARGS(a), (size_t)g->OW, (size_t)g->OH,
                     (size_t)B * g->Cs, e);
}

int ocl_maxpool_backward(ocl_ops *o, const pool_geom *g, int B, cl_mem din, cl_mem dout,
                         cl_mem argmax, ht_error *e) {
    if (B == 0) return 0;
    if (pool_check(o, "maxpool backward", g, B, e)) return -1;
    const size_t planes = (size_t)B * g->Cs;
    if (g->stride == g->K && g->pad == 0 && g->OH * g->K == g->H && g->OW * g->K == g->W) {
        // the windows tile the input
        karg t[] = {KA(din), KA(dout), KA(argmax), KA(g->K), KA(g->OH), KA(g->OW)};
        return launch_3d(o, "maxpool_bwd_tiled", t, NARGS(t), (size_t)g->OW, (size_t)g->OH,
                         planes, e);
    }
    karg a[] = {KA(din),  KA(dout),  KA(argmax),    KA(B),      KA(g->Cs), KA(g->H),
                KA(g->W), KA(g->K),  KA(g->stride), KA(g->pad), KA(g->OH), KA(g->OW)};
    return launch_3d(o, "maxpool_bwd", a, NARGS(a), (size_t)g->W, (size_t)g->H, planes, e);
}

int ocl_avgpool_forward(ocl_ops *o, const pool_geom *g, int B, cl_mem out, cl_mem in,
                        ht_error *e) {
    if (B == 0) return 0;
    if (pool_check(o, "avgpool forward", g, B, e)) return -1;
    karg a[] = {KA(out),      KA(in),     KA(g->H),  KA(g->W), KA(g->K),
                KA(g->stride), KA(g->pad), KA(g->OH), KA(g->OW)};
    return launch_3d(o, "avgpool_fwd", a, NARGS(a), (size_t)g->OW, (size_t)g->OH,
                     (size_t)B * g->Cs, e);
}

int ocl_avgpool_backward(ocl_ops *o, const pool_geom *g, int B, cl_mem din, cl_mem dout,
                         ht_error *e) {
    if (B == 0) return 0;
    if (pool_check(o, "avgpool backward", g, B, e)) return -1;
    karg a[] = {KA(din),      KA(dout),   KA(g->H),  KA(g->W), KA(g->K),
                KA(g->stride), KA(g->pad), KA(g->OH), KA(g->OW)};
    return launch_3d(o, "avgpool_bwd", a, NARGS(a), (size_t)g->W, (size_t)g->H,
                     (size_t)B * g->Cs, e);
}

int ocl_gavgpool_forward(ocl_ops *o, cl_mem out, cl_mem in, int B, int C, int H, int W,
                         ht_error *e) {
    if (B == 0) return 0;
    if (check_dims(o, "global avgpool forward", e, 4, B, C, H, W) ||
        check_fits(o, "global avgpool forward", "input", (double)B * C * H * W, e))
        return -1;
    int planes = B * C, HW = H * W;
    karg a[] = {KA(out), KA(in), KA(planes), KA(HW)};
    return launch_1d(o, "gavgpool_fwd", a, NARGS(a), (size_t)planes, e);
}

int ocl_gavgpool_backward(ocl_ops *o, cl_mem din, cl_mem dout, int B, int C, int H, int W,
                          ht_error *e) {
    if (B == 0) return 0;
    if (check_dims(o, "global avgpool backward", e, 4, B, C, H, W) ||
        check_fits(o, "global avgpool backward", "input", (double)B * C * H * W, e))
        return -1;
    karg a[] = {KA(din), KA(dout), KA(H), KA(W)};
    return launch_3d(o, "gavgpool_bwd", a, NARGS(a), (size_t)W, (size_t)H, (size_t)B * C, e);
}

static int dense_check(ocl_ops *o, const char *op, int B, int IN, int OUT, size_t b_off,
                       ht_error *e) {
    if (check_dims(o, op, e, 3, B, IN, OUT)) return -1;
    if (check_fits(o, op, "input", (double)B * IN, e) ||
        check_fits(o, op, "output", (double)B * OUT, e))
        return -1;
    return b_off == OCL_NO_BIAS ? 0 : check_offset(o, op, b_off, (size_t)OUT, e);
}

int ocl_dense_forward(ocl_ops *o, cl_mem out, cl_mem in, cl_mem params, size_t w_off,
                       size_t b_off, int B, int IN, int OUT, ht_error *e) {
    if (B == 0) return 0;
    if (dense_check(o, "dense forward", B, IN, OUT, b_off, e)) return -1;
    // out (B, OUT) = in (B, IN) x W^T (IN, OUT)
    if (ocl_gemm(o, "dense forward: in x W^T", NULL, 'N', 'T', (size_t)B,
             (size_t)OUT, (size_t)IN, in, 0, (size_t)IN, params, w_off, (size_t)IN, 0.0f, out,
             0, (size_t)OUT, e))
        return -1;
    if (b_off == OCL_NO_BIAS) return 0;
    cl_uint boff = (cl_uint)b_off;
    karg a[] = {KA(out), KA(params), KA(boff), KA(B), KA(OUT)};
    return launch_1d(o, "dense_bias", a, NARGS(a), (size_t)B * OUT, e);
}

int ocl_dense_backward(ocl_ops *o, cl_mem din, cl_mem grads, size_t w_off, size_t b_off,
                        cl_mem dout, cl_mem in, cl_mem params, int B, int IN, int OUT,
                        ht_error *e) {
    if (B == 0) return 0;
    if (dense_check(o, "dense backward", B, IN, OUT, b_off, e)) return -1;
    // dW (OUT, IN) += dout^T (OUT, B) x in (B, IN)
    if (ocl_gemm(o, "dense backward: dW += dout^T x in", NULL, 'T', 'N',
             (size_t)OUT, (size_t)IN, (size_t)B, dout, 0, (size_t)OUT, in, 0, (size_t)IN, 1.0f,
             grads, w_off, (size_t)IN, e))
        return -1;
    cl_uint boff = (cl_uint)b_off;
    karg a[] = {KA(grads), KA(boff), KA(dout), KA(B), KA(OUT)};
    if (b_off != OCL_NO_BIAS && launch_1d(o, "col_sum", a, NARGS(a), (size_t)OUT, e))
        return -1;
    if (!din) return 0;
    // din (B, IN) = dout (B, OUT) x W (OUT, IN)
    return ocl_gemm(o, "dense backward: din = dout x W", NULL, 'N', 'N',
                (size_t)B, (size_t)IN, (size_t)OUT, dout, 0, (size_t)OUT, params, w_off,
                (size_t)IN, 0.0f, din, 0, (size_t)IN, e);
}

int ocl_relu_forward(ocl_ops *o, cl_mem out, cl_mem in, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "relu forward", "tensor", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(out), KA(in), KA(n32)};
    return launch_1d(o, "relu_fwd", a, NARGS(a), n, e);
}

int ocl_relu_backward(ocl_ops *o, cl_mem din, cl_mem dout, cl_mem out, size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "relu backward", "tensor", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(din), KA(dout), KA(out), KA(n32)};
    return launch_1d(o, "relu_bwd", a, NARGS(a), n, e);
}

int ocl_act_forward(ocl_ops *o, int f, float alpha, cl_mem out, cl_mem in, size_t n,
                    ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "activation forward", "tensor", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(out), KA(in), KA(n32), KA(f), KA(alpha)};
    return launch_1d(o, "act_fwd", a, NARGS(a), n, e);
}

int ocl_act_backward(ocl_ops *o, int f, float alpha, cl_mem din, cl_mem dout, cl_mem in,
                     size_t n, ht_error *e) {
    if (n == 0) return 0;
    if (check_fits(o, "activation backward", "tensor", (double)n, e)) return -1;
    cl_uint n32 = (cl_uint)n;
    karg a[] = {KA(din), KA(dout), KA(in), KA(n32), KA(f), KA(alpha)};
    return launch_1d(o, "act_bwd", a, NARGS(a), n, e);
}

int ocl_dropout(ocl_ops *o, cl_mem out, cl_mem in, int B, size_t N, float rate, uint64_t key,
                uint32_t emask, cl_mem ids, ht_error *e) {
    if (B == 0 || N == 0) return 0;
    if (check_dims(o, "dropout", e, 1, B) ||
        check_fits(o, "dropout", "tensor", (double)B * (double)N, e))
        return -1;
    // The same expression as the CPU's, so kept values are scaled bit for bit alike.
    float scale = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
    cl_uint n32 = (cl_uint)N;
    cl_ulong k64 = key;
    cl_uint m32 = emask;
    karg a[] = {KA(out), KA(in), KA(B), KA(n32), KA(rate), KA(scale), KA(k64), KA(m32), KA(ids)};
    return launch_1d(o, "dropout", a, NARGS(a), (size_t)B * N, e);
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
    return launch_1d(o, "softmax_xent_fwd", a, NARGS(a), (size_t)B, e);
}

int ocl_softmax_xent_backward(ocl_ops *o, cl_mem dlogits, cl_mem probs, cl_mem labels, int B,
                               int NC, ht_error *e) {
    if (B == 0) return 0;
    if (check_dims(o, "softmax_xent backward", e, 2, B, NC) ||
        check_fits(o, "softmax_xent backward", "logits", (double)B * NC, e))
        return -1;
    karg a[] = {KA(dlogits), KA(probs), KA(labels), KA(B), KA(NC)};
    return launch_1d(o, "softmax_xent_bwd", a, NARGS(a), (size_t)B * NC,
                     e);
}
