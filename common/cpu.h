/*
 * cpu.h - what the CPU runs, detected once: the one place that reads CPUID (x86-64) or
 * the hardware capabilities (aarch64), and the one way SIMD code is chosen.
 *
 *   if (cpu_features() & CPU_AVX512VNNI) ...
 *
 * A feature is reported only when the OS also saves the registers it needs (XGETBV), so
 * a bit set here is safe to use. Thread-safe: the first call detects (pthread_once).
 *
 * Dispatch. Every family of SIMD twins is a list of tables of function pointers, in
 * order of preference, each with a name and the CPU_* bits it needs; the scalar table,
 * the reference, needs none and comes last. A family picks its table once (at init or
 * on first use, never per call) with cpu_impl_pick:
 *
 *   static const cpu_impl impls[] = {
 *       { "avx2", CPU_AVX2, &ops_avx2 },
 *       { "scalar", 0, &ops_scalar },
 *   };
 *   const ops *active = cpu_impl_pick(impls, 2, "LLM_CSUM")->table;
 *
 * The override convention, the same for every family: the environment variable
 * LLM_<FAMILY> names the table to use instead of the best one (any name of the family
 * this CPU runs; "scalar" always works). An unknown name, or one this CPU cannot run,
 * logs a warning listing the choices and keeps the automatic one. The families:
 *   LLM_KERNELS  engined's matrix kernels (engined/kernels.h): avx512vnni avxvnni avx2
 *                neoni8mm neon scalar
 *   LLM_QUANT    the dequantize/quantize twins (common/quant.h): avx2 f16c scalar
 *   LLM_CSUM     the segment checksum (common/csum.h): avx2 scalar
 * Every table of a family gives the same bits, so the choice changes only speed.
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
    CPU_NEON_I8MM  = 1 << 7, /* aarch64: i8mm (smmla, usdot) */
};

/* The CPU_* bits of this machine (detected on the first call). */
unsigned cpu_features(void);

/* How many CPUs this process may run on (its affinity mask, as taskset sets it; the
 * online count where that cannot be read), at least 1. */
int cpu_count_usable(void);

/* "avx2 fma f16c avx512 ..." for logs: the names of the bits set in f, into buf. */
const char *cpu_describe(unsigned f, char *buf, int len);

/* One table of a family of SIMD twins (see above). */
typedef struct {
    const char *name;  /* what LLM_<FAMILY> names it: "scalar", "avx2", ... */
    unsigned    needs; /* the CPU_* bits it uses (0: runs anywhere) */
    const void *table; /* the family's table of function pointers */
} cpu_impl;

/* The entry of list[0..n) called name if this CPU has every bit it needs, else NULL
 * (also for name NULL). */
const cpu_impl *cpu_impl_get(const cpu_impl *list, int n, const char *name);

/* The family's choice: the entry that environment variable env names when this CPU runs
 * it, else the first entry (in list order) this CPU runs; an unknown or unsupported name
 * logs a warning and is ignored. list must end with an entry that needs nothing. Reads
 * the environment on every call: callers call it once and keep the answer. */
const cpu_impl *cpu_impl_pick(const cpu_impl *list, int n, const char *env);

#endif
