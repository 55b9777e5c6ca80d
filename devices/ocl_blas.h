// CLBlast's process-wide state in one place: the lock every CLBlast call is made under, its
// status names, and which GEMM parameters are in force on each device. CLBlast keeps one set
// of parameters per device and kernel for the whole process (CLBlastOverrideParameters), so a
// tuned GEMM configuration is put in force just before its call, under the lock, and CLBlast's
// own parameters (read before the first override) are put back for a GEMM that has none.
#ifndef HETRAIN_OCL_BLAS_H
#define HETRAIN_OCL_BLAS_H

#include "devices/clblast_params.h"

// How CLBlast runs one GEMM: which of its two routines, and that routine's kernel parameters.
typedef struct ocl_gemm_cfg {
    int direct;     // 1: XgemmDirect (one kernel, any shape); 0: Xgemm (operands copied into
                    // padded buffers, then a tiled kernel)
    ocl_kparams kp; // parameters of XgemmDirect or Xgemm
} ocl_gemm_cfg;

// Whether two parameter sets, or two configurations, are the same (names and values).
int ocl_kparams_equal(const ocl_kparams *a, const ocl_kparams *b);
int ocl_gemm_cfg_equal(const ocl_gemm_cfg *a, const ocl_gemm_cfg *b);

// CLBlast 1.5's kernel cache and parameter database are not safe for concurrent use
// (CNugteren/CLBlast#486), so every CLBlast call, queries included, is made under this lock.
void ocl_blas_lock(void);
void ocl_blas_unlock(void);

// Empties CLBlast's caches, then releases every shared context and program
// (ocl_runtime_release_all). CLBlast keeps the programs and kernels it built for a context until
// it is told to forget them, or until its static destructors run at exit: after the contexts are
// gone, which some drivers do not survive (oclgrind: heap corruption), and a later context at the
// same address would be handed the old programs. Every caller that is done with OpenCL calls this.
void ocl_blas_release_all(void);

// "CLBlastInvalidLocalMemUsage" for -2046; OpenCL's names for codes above -1000.
const char *ocl_blas_status_name(int status);

// With the lock held: makes the next GEMMs on dev run as cfg says, or, for NULL, as CLBlast
// chooses by itself (its database's parameters and routine threshold). Overrides only what
// differs from what is in force. Returns 0 or CLBlast's status code.
int ocl_blas_use(cl_device_id dev, const ocl_gemm_cfg *cfg);

// CLBlast's own configurations on dev (as before any override): its XgemmDirect parameters in
// *direct and its Xgemm parameters in *indirect, and in *min_indirect (may be NULL) the size
// from which it takes Xgemm (m*n*k >= min_indirect^3). Takes the lock. Returns 0 or CLBlast's
// status code.
int ocl_blas_defaults(cl_device_id dev, ocl_gemm_cfg *direct, ocl_gemm_cfg *indirect,
                      size_t *min_indirect);

// Kernel names of the two routines ("XgemmDirect", "Xgemm").
const char *ocl_blas_kernel(int direct);

#endif
