// One instruction set's table of hetrain's own vector code (isa_kernels.h): compiled once per
// set with the functions it gathers, exported as isa_kernels_<set> (isa.h's ISA_NAME).
#include "nn/isa_fns.h"
#include "nn/isa_kernels.h"
#include "nn/vec.h"

const isa_kernels ISA_NAME(isa_kernels) = {
    .isa = ISA_STRING,
    .vl = VL,
    .conv_forward_one = conv_nhwc_forward_one,
    .conv_backward_one = conv_nhwc_backward_one,
    .act_forward = vec_act_forward,
    .act_backward = vec_act_backward,
    .dw_forward_rows = dwconv_vec_forward_rows,
    .dw_backward_sample = dwconv_vec_backward_sample,
    .maxpool_backward_one = pool_vec_max_backward_one,
    .bn_train_forward = bn_vec_train_forward,
    .bn_infer_forward = bn_vec_infer_forward,
    .bn_frozen_backward = bn_vec_frozen_backward,
    .bn_train_backward = bn_vec_train_backward,
    .bn_sample_parts = bn_vec_sample_parts,
    .bn_dx_rows = bn_vec_dx_rows,
};
