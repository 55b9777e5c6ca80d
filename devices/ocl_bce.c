// The OpenCL binary and multi-label heads' ops (ocl_ops.h) over kernels/activations.cl's bce_fwd and bce_bwd.
#include "devices/ocl_ops.h"

#include <limits.h>

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int ocl_bce_forward(ocl_ops *o, cl_mem probs, cl_mem loss, cl_mem logits, cl_mem labels, int B,
                    int K, ht_error *e) {
    if (B == 0) return 0;
    if (B < 0 || K < 1 || B > INT_MAX / (K > 2 ? K : 2))
        return ht_fail(e, "binary head forward on %s: %d samples of %d labels", o->label, B, K);
    // Without labels the kernel reads neither labels nor loss; it still needs valid buffers.
    cl_int has = labels && loss;
    cl_mem lab = has ? labels : probs, ls = has ? loss : probs;
    ocl_karg a[] = {OCL_KA(probs), OCL_KA(ls), OCL_KA(logits), OCL_KA(lab), OCL_KA(has),
                    OCL_KA(B),     OCL_KA(K)};
    return ocl_launch_1d(o, "bce_fwd", a, NARGS(a), (size_t)B, e);
}

int ocl_bce_backward(ocl_ops *o, cl_mem dlogits, cl_mem probs, cl_mem labels, int B, int K,
                     ht_error *e) {
    if (B == 0) return 0;
    if (B < 0 || K < 1 || B > INT_MAX / (K > 2 ? K : 2))
        return ht_fail(e, "binary head backward on %s: %d samples of %d labels", o->label, B, K);
    ocl_karg a[] = {OCL_KA(dlogits), OCL_KA(probs), OCL_KA(labels), OCL_KA(B), OCL_KA(K)};
    return ocl_launch_1d(o, "bce_bwd", a, NARGS(a), (size_t)B * (size_t)K, e);
}
