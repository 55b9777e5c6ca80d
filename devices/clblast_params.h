// Reading CLBlast's tuning parameters for one kernel on one device. CLBlast 1.5 can override
// them from C (CLBlastOverrideParameters) but reads them back only from C++
// (clblast::RetrieveParameters), and the tuner starts from them and the OpenCL device restores
// them: clblast_params.cpp, the one C++ file, wraps that call.
#ifndef HETRAIN_CLBLAST_PARAMS_H
#define HETRAIN_CLBLAST_PARAMS_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OCL_KP_MAX 24 // parameters of one kernel; Xgemm has 16

// One kernel's parameters, sorted by name (ocl_kparams_equal compares two).
typedef struct ocl_kparams {
    int n;
    char name[OCL_KP_MAX][24];
    size_t value[OCL_KP_MAX];
} ocl_kparams;

// The parameters CLBlast uses now for `kernel` ("Xgemm", "XgemmDirect", "GemmRoutine", ...)
// in single precision on dev: its database's, or the last override. Returns CLBlast's status
// code (0 on success); out is zeroed first.
int clblast_params_get(cl_device_id dev, const char *kernel, ocl_kparams *out);

#ifdef __cplusplus
}
#endif

#endif
