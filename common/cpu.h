/*
 * cpu.h - what the CPU runs, detected once: the one place that reads CPUID (x86-64) or
 * the hardware capabilities (aarch64). Kernel tables (engined/kernels.c) and the quant
 * twins (common/quant.c) both choose from these bits.
 *
 *   if (cpu_features() & CPU_AVX512VNNI) ...
 *
 * A feature is reported only when the OS also saves the registers it needs (XGETBV), so
 * a bit set here is safe to use. Thread-safe: the first call detects (pthread_once).
 */
#ifndef LLM_CPU_H
#define LLM_CPU_H

enum {
    CPU_F16C       = 1 << 0, /* x86: F16C half conversions (with AVX) */
    CPU_AVX2       = 1 << 1, /* x86: AVX2 (with AVX and OS YMM state) */
    CPU_FMA        = 1 << 2, /* x86: FMA3 */
    CPU_AVX512     = 1 << 3, /* x86: AVX512 F, BW, VL, DQ and OS ZMM state */
    CPU_AVX512VNNI = 1 << 4, /* x86: CPU_AVX512 plus AVX512_VNNI (vpdpbusd on zmm/ymm) */
    CPU_AVXVNNI    = 1 << 5, /* x86: AVX-VNNI (VEX vpdpbusd on ymm, e.g. Alder Lake) */
    CPU_NEON_DOT   = 1 << 6, /* aarch64: dotprod (sdot) */
};

/* The CPU_* bits of this machine (detected on the first call). */
unsigned cpu_features(void);

/* "avx2 fma f16c avx512 ..." for logs: the names of the bits set in f, into buf. */
const char *cpu_describe(unsigned f, char *buf, int len);

#endif
