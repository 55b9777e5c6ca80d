// CLBlast's process-wide state: the lock, status names, and the GEMM parameters in force per
// device (ocl_blas.h).
#include "devices/ocl_blas.h"

#include <clblast_c.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devices/ocl_util.h"

// CLBlast picks XgemmDirect when m*n*k < XGEMM_MIN_INDIRECT_SIZE^3: a value whose cube passes
// any shape forces it, 0 forces Xgemm. Only these two values are used, because each value of a
// parameter is a program of its own in CLBlast's cache (compiled again, seconds on PoCL).
#define BLAS_FORCE_DIRECT ((size_t)1 << 20)

static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

void ocl_blas_lock(void) { pthread_mutex_lock(&blas_lock); }
void ocl_blas_unlock(void) { pthread_mutex_unlock(&blas_lock); }

void ocl_blas_release_all(void) {
    ocl_blas_lock();
    CLBlastClearCache();
    ocl_blas_unlock();
    ocl_runtime_release_all();
}

const char *ocl_blas_status_name(int st) {
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
    case CLBlastInvalidOverrideKernel: return "CLBlastInvalidOverrideKernel";
    case CLBlastMissingOverrideParameter: return "CLBlastMissingOverrideParameter";
    case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
    case CLBlastDatabaseError: return "CLBlastDatabaseError";
    case CLBlastUnknownError: return "CLBlastUnknownError";
    case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
    default:
        // Codes above -1000 are OpenCL error codes.
        return st > -1000 ? ocl_error_name((cl_int)st) : "CLBlast error";
    }
}

const char *ocl_blas_kernel(int direct) { return direct ? "XgemmDirect" : "Xgemm"; }

int ocl_kparams_equal(const ocl_kparams *a, const ocl_kparams *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->value[i] != b->value[i] || strcmp(a->name[i], b->name[i])) return 0;
    return 1;
}

int ocl_gemm_cfg_equal(const ocl_gemm_cfg *a, const ocl_gemm_cfg *b) {
    return a->direct == b->direct && ocl_kparams_equal(&a->kp, &b->kp);
}

enum { K_ROUTINE, K_INDIRECT, K_DIRECT, K_N };
static const char *const kernel_names[K_N] = {"GemmRoutine", "Xgemm", "XgemmDirect"};

// One per device that has been asked for; lives as long as the process (CLBlast's state does).
typedef struct blas_dev {
    cl_device_id dev;
    ocl_kparams own[K_N]; // CLBlast's, read before the first override
    ocl_kparams cur[K_N]; // in force now
    struct blas_dev *next;
} blas_dev;

static blas_dev *devs;

// The device's record, made on first use (lock held). NULL with *st set when CLBlast cannot
// tell its parameters.
static blas_dev *find_dev(cl_device_id dev, int *st) {
    for (blas_dev *b = devs; b; b = b->next)
        if (b->dev == dev) return b;
    blas_dev *b = calloc(1, sizeof *b);
    if (!b) {
        *st = CLBlastUnexpectedError;
        return NULL;
    }
    for (int i = 0; i < K_N; i++) {
        if ((*st = clblast_params_get(dev, kernel_names[i], &b->own[i])) != 0) {
            free(b);
            return NULL;
        }
        b->cur[i] = b->own[i];
    }
    b->dev = dev;
    b->next = devs;
    devs = b;
    return b;
}

static int set_params(blas_dev *b, int i, const ocl_kparams *want) {
    if (ocl_kparams_equal(&b->cur[i], want)) return 0;
    const char *names[OCL_KP_MAX];
    for (int p = 0; p < want->n; p++) names[p] = want->name[p];
    int st = CLBlastOverrideParameters(b->dev, kernel_names[i], CLBlastPrecisionSingle,
                                       (size_t)want->n, names, want->value);
    if (st == 0) b->cur[i] = *want;
    return st;
}

int ocl_blas_use(cl_device_id dev, const ocl_gemm_cfg *cfg) {
    int st = 0;
    blas_dev *b = find_dev(dev, &st);
    if (!b) return st;
    // Untouched until the first tuned GEMM: nothing to put back.
    int untouched = 1;
    for (int i = 0; i < K_N; i++) untouched &= ocl_kparams_equal(&b->cur[i], &b->own[i]);
    if (!cfg && untouched) return 0;
    ocl_kparams want[K_N];
    memcpy(want, b->own, sizeof want);
    if (cfg) {
        // The other routine's kernel keeps CLBlast's parameters, so that each configuration is
        // one program in CLBlast's cache whatever ran before it.
        ocl_kparams *r = &want[K_ROUTINE];
        for (int p = 0; p < r->n; p++)
            if (!strcmp(r->name[p], "XGEMM_MIN_INDIRECT_SIZE"))
                r->value[p] = cfg->direct ? BLAS_FORCE_DIRECT : 0;
        want[cfg->direct ? K_DIRECT : K_INDIRECT] = cfg->kp;
    }
    for (int i = 0; i < K_N; i++)
        if ((st = set_params(b, i, &want[i])) != 0) return st;
    return 0;
}

int ocl_blas_defaults(cl_device_id dev, ocl_gemm_cfg *direct, ocl_gemm_cfg *indirect,
                      size_t *min_indirect) {
    int st = 0;
    ocl_blas_lock();
    blas_dev *b = find_dev(dev, &st);
    if (b) {
        memset(direct, 0, sizeof *direct);
        memset(indirect, 0, sizeof *indirect);
        direct->direct = 1;
        direct->kp = b->own[K_DIRECT];
        indirect->kp = b->own[K_INDIRECT];
        const ocl_kparams *r = &b->own[K_ROUTINE];
        for (int p = 0; min_indirect && p < r->n; p++)
            if (!strcmp(r->name[p], "XGEMM_MIN_INDIRECT_SIZE")) *min_indirect = r->value[p];
    }
    ocl_blas_unlock();
    return st;
}
