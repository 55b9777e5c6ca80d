// Which of the per-sample kernel sets (conv_nhwc.c, compiled once per instruction set in
// CMake's HT_ISAS) runs: the widest the CPU has, or HETRAIN_ISA's when this CPU runs it.
#include "nn/isa_kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HT_HAVE_ISA_avx512
extern const isa_kernels isa_kernels_avx512;
#endif
#ifdef HT_HAVE_ISA_avx2
extern const isa_kernels isa_kernels_avx2;
#endif
#ifdef HT_HAVE_ISA_sse2
extern const isa_kernels isa_kernels_sse2;
#endif
#ifdef HT_HAVE_ISA_generic
extern const isa_kernels isa_kernels_generic;
#endif

// Every set built, widest first, and whether this CPU runs it.
typedef struct isa_entry {
    const isa_kernels *k;
    int (*runs)(void);
} isa_entry;

static int always(void) { return 1; }
#if defined(__x86_64__) || defined(__i386__)
static int has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
static int has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

static const isa_entry built[] = {
#ifdef HT_HAVE_ISA_avx512
    {&isa_kernels_avx512, has_avx512},
#endif
#ifdef HT_HAVE_ISA_avx2
    {&isa_kernels_avx2, has_avx2},
#endif
#ifdef HT_HAVE_ISA_sse2
    {&isa_kernels_sse2, always},
#endif
#ifdef HT_HAVE_ISA_generic
    {&isa_kernels_generic, always},
#endif
};
#define N_BUILT ((int)(sizeof built / sizeof built[0]))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const isa_kernels *active;
static char env_error[160];

int isa_kernels_supported(const isa_kernels **out, int max) {
    int n = 0;
    for (int i = 0; i < N_BUILT; i++)
        if (built[i].runs()) {
            if (n < max) out[n] = built[i].k;
            n++;
        }
    return n;
}

static void choose(void) {
    const isa_kernels *sup[8];
    const int n = isa_kernels_supported(sup, 8);
    active = sup[0];
    const char *want = getenv("HETRAIN_ISA");
    if (!want || !*want) return;
    for (int i = 0; i < N_BUILT; i++) {
        if (strcmp(built[i].k->isa, want) != 0) continue;
        for (int j = 0; j < n; j++)
            if (sup[j] == built[i].k) {
                active = sup[j];
                return;
            }
        snprintf(env_error, sizeof env_error,
                 "HETRAIN_ISA=%s: this CPU cannot run it; running %s", want, active->isa);
        return;
    }
    int len = snprintf(env_error, sizeof env_error, "HETRAIN_ISA=%s: not one this binary has (",
                       want);
    for (int i = 0; i < N_BUILT && len > 0 && (size_t)len < sizeof env_error; i++)
        len += snprintf(env_error + len, sizeof env_error - (size_t)len, "%s%s", i ? ", " : "",
                        built[i].k->isa);
    if (len > 0 && (size_t)len < sizeof env_error)
        snprintf(env_error + len, sizeof env_error - (size_t)len, "); running %s", active->isa);
}

const isa_kernels *isa_kernels_active(void) {
    pthread_once(&once, choose);
    return active;
}

void isa_kernels_set(const isa_kernels *k) {
    pthread_once(&once, choose);
    active = k;
}

const char *isa_kernels_env_error(void) {
    pthread_once(&once, choose);
    return env_error[0] ? env_error : NULL;
}

void isa_kernels_describe(char *buf, size_t n) {
    const isa_kernels *k = isa_kernels_active();
    const char *want = getenv("HETRAIN_ISA");
    int len = snprintf(buf, n, "%s, %d floats a vector (%s; built:", k->isa, k->vl,
                       want && *want && !env_error[0] ? "HETRAIN_ISA" : "the widest this CPU runs");
    for (int i = 0; i < N_BUILT && len > 0 && (size_t)len < n; i++)
        len += snprintf(buf + len, n - (size_t)len, " %s", built[i].k->isa);
    if (len > 0 && (size_t)len < n) snprintf(buf + len, n - (size_t)len, ")");
}
