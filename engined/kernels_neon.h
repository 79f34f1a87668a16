/*
 * kernels_neon.h - what the aarch64 kernel files share (private to engined/kernels_*neon.c:
 * callers go through kernels.h's dispatch table): the target attributes that enable
 * dotprod and i8mm on single functions (the rest of the build stays plain armv8-a, so
 * the scalar table runs on any aarch64), sdot by element, and the native products.
 */
#ifndef LLM_KERNELS_NEON_H
#define LLM_KERNELS_NEON_H

#if defined(__aarch64__)

#include <arm_neon.h>
#include <stdint.h>

#include "kernels.h"

/* gcc's arm_neon.h guards the dotprod and i8mm intrinsics with arch=armv8.2-a+...: a
 * function that inlines them needs the same arch, not just the feature. */
#if defined(__clang__)
#define NEON_DOT __attribute__((target("dotprod")))
#define NEON_I8MM __attribute__((target("dotprod,i8mm")))
#else
#define NEON_DOT __attribute__((target("arch=armv8.2-a+dotprod")))
#define NEON_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif

/* acc + in each lane i the dot of bytes 4i..4i+3 of a with bytes 4L..4L+3 of b. GCC's
 * arm_neon.h declares vdotq_laneq_s32 for any function with +dotprod; clang 14 only
 * when the whole file is built with it. */
#if defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__)
#define SDOT_LANE(acc, a, b, L) vdotq_laneq_s32(acc, a, b, L)
#else
#define SDOT_LANE(acc, a, b, L) sdot_lane_##L(acc, a, b)
#define SDOT_LANE_FN(L)                                                                    \
static inline __attribute__((always_inline)) NEON_DOT int32x4_t sdot_lane_##L(int32x4_t acc, int8x16_t a, int8x16_t b) \
{                                                                                          \
    __asm__("sdot %0.4s, %1.16b, %2.4b[" #L "]" : "+w"(acc) : "w"(a), "w"(b));             \
    return acc;                                                                            \
}
SDOT_LANE_FN(0) SDOT_LANE_FN(1) SDOT_LANE_FN(2) SDOT_LANE_FN(3)
#endif

/* acc + the 2x2 int32 products of the 2x8 int8 matrices a and b (rows: a's 8-byte halves
 * times b's), as [a0.b0, a0.b1, a1.b0, a1.b1]: smmla. The same header caveat as above. */
#if defined(__ARM_FEATURE_MATMUL_INT8) || !defined(__clang__)
#define SMMLA(acc, a, b) vmmlaq_s32(acc, a, b)
#else
#define SMMLA(acc, a, b) smmla_asm(acc, a, b)
static inline __attribute__((always_inline)) NEON_I8MM int32x4_t smmla_asm(int32x4_t acc, int8x16_t a, int8x16_t b)
{
    __asm__("smmla %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
}
#endif

/* The native layouts' products (kernels_qn_neon.c), as kern_qn_block_ref: with sdot by
 * element, and with smmla (i8mm) for token pairs. */
void kern_qn_neon_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                        size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream);
void kern_qn_i8mm_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                        size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream);

#endif
#endif
