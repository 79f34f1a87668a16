/*
 * quant_ops.h - the tables of the quant twins (private to quant.c and quant_k.c).
 *
 * Each table holds one implementation of every kernel that has a SIMD twin; quant.c
 * lists them in order of preference (avx2, f16c, scalar) and picks one once, on first
 * use, with common/cpu.h's cpu_impl_pick (LLM_QUANT overrides). The kernels of the
 * traits table reach the twins only through quant_ops_active():
 *
 *   quant_ops_active()->dequant_q4_0(src, dst, n);
 *   quant_ops_active()->k->quant_q4_K(x, blocks, n);
 *
 * Every table gives the scalar table's bits. The tables are static and read-only.
 */
#ifndef LLM_QUANT_OPS_H
#define LLM_QUANT_OPS_H

#include <stdint.h>

#include "qtype.h"

/* quant_k.c's twins: the K dequantizers and the quantizers that search scales (their
 * AVX2 versions search 8 sub-blocks at once). */
typedef struct {
    qt_dequant_fn dequant_q2_K, dequant_q3_K, dequant_q4_K, dequant_q5_K, dequant_q6_K;
    qt_quant_fn quant_q2_K, quant_q4_K, quant_q5_K, quant_q6_K;
} quant_k_ops;

extern const quant_k_ops quant_k_ops_scalar;
#if defined(__x86_64__)
extern const quant_k_ops quant_k_ops_avx2; /* needs CPU_AVX2 */
#endif

/* One implementation of every twin. */
typedef struct {
    const char *name; /* "avx2", "f16c", "scalar": what LLM_QUANT names */
    qt_dequant_fn dequant_f16, dequant_q4_0, dequant_q4_1, dequant_q5_0, dequant_q5_1, dequant_q8_0;
    qt_quant_fn quant_q4_0, quant_q8_0;
    const quant_k_ops *k;
} quant_ops;

/* The table in use: chosen on the first call (thread-safe), switched by quant_init and
 * quant_set_simd (quant.h). */
const quant_ops *quant_ops_active(void);

#endif
