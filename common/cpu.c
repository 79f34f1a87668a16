/*
 * cpu.c - CPU feature detection, once per process, and the choice of a family's SIMD
 * table with its LLM_<FAMILY> override (see cpu.h).
 */
#include "cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif

static unsigned features;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static unsigned detect_x86(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX)) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 6) != 6) return 0; /* the OS saves neither XMM nor YMM state */
    int fma = (c & bit_FMA) != 0, f16c = (c & bit_F16C) != 0;
    if (f16c) f |= CPU_F16C;
    if (fma) f |= CPU_FMA;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    unsigned ebx7 = b, ecx7 = c;
    if (ebx7 & bit_AVX2) f |= CPU_AVX2;
    /* ZMM state: opmask, upper halves of ZMM0-15, ZMM16-31 (XCR0 bits 5..7) */
    int zmm_os = (lo & 0xe0) == 0xe0;
    unsigned need512 = bit_AVX512F | bit_AVX512BW | bit_AVX512VL | bit_AVX512DQ;
    if (zmm_os && (ebx7 & need512) == need512) {
        f |= CPU_AVX512;
        if (ecx7 & bit_AVX512VNNI) f |= CPU_AVX512VNNI;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4))) f |= CPU_AVXVNNI; /* EAX bit 4 */
    return f;
}
#endif

static void detect(void)
{
#if defined(__x86_64__)
    features = detect_x86();
#elif defined(__aarch64__)
    /* the kernel's hardware capabilities (the ID registers as it exposes them) */
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    features = (hw & HWCAP_ASIMDDP ? CPU_NEON_DOT : 0) | (hw2 & HWCAP2_I8MM ? CPU_NEON_I8MM : 0);
#endif
}

unsigned cpu_features(void)
{
    pthread_once(&once, detect);
    return features;
}

const char *cpu_describe(unsigned f, char *buf, int len)
{
    static const char *const names[] = { "f16c", "avx2", "fma", "avx512", "avx512vnni", "avxvnni", "dotprod", "i8mm" };
    int n = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < sizeof names / sizeof names[0] && n < len; i++)
        if (f & (1u << i)) n += snprintf(buf + n, (size_t)(len - n), "%s%s", n ? " " : "", names[i]);
    return buf;
}

int cpu_count_usable(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

const cpu_impl *cpu_impl_get(const cpu_impl *list, int n, const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i].name, name))
            return (cpu_features() & list[i].needs) == list[i].needs ? &list[i] : NULL;
    return NULL;
}

const cpu_impl *cpu_impl_pick(const cpu_impl *list, int n, const char *env)
{
    const cpu_impl *best = NULL;
    for (int i = 0; i < n && !best; i++)
        if ((cpu_features() & list[i].needs) == list[i].needs) best = &list[i];
    LLM_ASSERT(best != NULL); /* the list ends with the scalar table */
    const char *want = env ? getenv(env) : NULL;
    if (!want || !*want) return best;
    const cpu_impl *named = cpu_impl_get(list, n, want);
    if (named) return named;
    char names[128] = "";
    for (int i = 0, len = 0; i < n && len < (int)sizeof names; i++)
        if ((cpu_features() & list[i].needs) == list[i].needs)
            len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", len ? " " : "", list[i].name);
    log_warn("%s=%s: unknown or not supported on this CPU (this CPU runs: %s); using %s", env, want, names,
             best->name);
    return best;
}
