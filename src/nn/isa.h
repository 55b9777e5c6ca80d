// Names for code compiled once per instruction set (CMake's HT_ISAS defines HT_ISA: avx512,
// avx2, sse2 or generic): ISA_NAME(f) is f_avx2 in the AVX2 copy, so the copies link side by
// side; ISA_STRING is the set's name. Outside such a file, plain names.
#ifndef HETRAIN_ISA_H
#define HETRAIN_ISA_H

#define ISA_CAT2(a, b) a##_##b
#define ISA_CAT(a, b) ISA_CAT2(a, b)
#define ISA_STR2(a) #a
#define ISA_STR(a) ISA_STR2(a)
#ifdef HT_ISA
#define ISA_NAME(f) ISA_CAT(f, HT_ISA)
#define ISA_STRING ISA_STR(HT_ISA)
#else
#define ISA_NAME(f) f
#define ISA_STRING "native"
#endif

#endif
