// The OpenCL permute op (ocl_ops.h) over kernels/util.cl's permute3.
#include "devices/ocl_ops.h"

#include <limits.h>

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int ocl_permute(ocl_ops *o, cl_mem out, cl_mem in, int B, const int dims[3], const int perm[3],
                int inverse, ht_error *e) {
    if (B == 0) return 0;
    const long long n = (long long)dims[0] * dims[1] * dims[2];
    if (B < 0 || n < 1 || n * B > INT_MAX)
        return ht_fail(e, "permute on %s: %d samples of %lld floats", o->label, B, n);
    // Forward: over dims by perm. Backward: over the permuted dims by the inverse.
    int p[3], d[3];
    for (int i = 0; i < 3; i++) {
        if (inverse) p[perm[i] - 1] = i + 1, d[i] = dims[perm[i] - 1];
        else p[i] = perm[i], d[i] = dims[i];
    }
    const cl_int in_st[3] = {d[1] * d[2], d[2], 1};
    cl_int o0 = d[p[0] - 1], o1 = d[p[1] - 1], o2 = d[p[2] - 1];
    cl_int s0 = in_st[p[0] - 1], s1 = in_st[p[1] - 1], s2 = in_st[p[2] - 1];
    ocl_karg a[] = {OCL_KA(out), OCL_KA(in), OCL_KA(B),  OCL_KA(o0), OCL_KA(o1),
                    OCL_KA(o2),  OCL_KA(s0), OCL_KA(s1), OCL_KA(s2)};
    return ocl_launch_1d(o, "permute3", a, NARGS(a), (size_t)(n * B), e);
}
