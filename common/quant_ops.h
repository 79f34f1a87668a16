/*
 * quant_ops.h - the tables of the quant twins (private to quant.c, quant_k.c and
 * quant_k_dequant.c).
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

/* Scale j (0..7) and min j of the 12-byte packed 6-bit table of Q4_K/Q5_K: entries
 * 0..3 sit in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); entries 4..7
 * keep their low 4 bits in bytes 8..11 and their top 2 bits in the top of 0..7. */
static inline void quant_k_get_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4);
        *m = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
    }
}

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

/* quant_k_dequant.c's dequantizers, the entries of the tables above. */
void quant_k_dequant_q2_K_scalar(const void *src, float *y, int64_t n);
void quant_k_dequant_q3_K_scalar(const void *src, float *y, int64_t n);
void quant_k_dequant_q4_K_scalar(const void *src, float *y, int64_t n);
void quant_k_dequant_q5_K_scalar(const void *src, float *y, int64_t n);
void quant_k_dequant_q6_K_scalar(const void *src, float *y, int64_t n);
#if defined(__x86_64__)
void quant_k_dequant_q2_K_avx2(const void *src, float *y, int64_t n);
void quant_k_dequant_q3_K_avx2(const void *src, float *y, int64_t n);
void quant_k_dequant_q4_K_avx2(const void *src, float *y, int64_t n);
void quant_k_dequant_q5_K_avx2(const void *src, float *y, int64_t n);
void quant_k_dequant_q6_K_avx2(const void *src, float *y, int64_t n);
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
