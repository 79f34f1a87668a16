/*
 * kernels_neon.c - the aarch64 NEON variant: q8 products with sdot (ARMv8.2 dotprod).
 *
 * Whole file under __aarch64__: on x86 it compiles to nothing. kernels.c selects it
 * only when the kernel reports HWCAP_ASIMDDP. Tiles are 4 rows x 4 tokens; each q8
 * block is two 16-byte vectors, vdotq_s32 sums them by fours into int32 lanes (exact),
 * and every (row, token) pair keeps 4 float lanes scaled by d_w * d_x per block.
 * The float helpers are plain C loops here (the compiler vectorises them at -O2 with
 * NEON being baseline on aarch64); the quantizer is the scalar one's twin.
 *
 * Not run on the development machine (x86-64); compile-checked with
 * clang --target=aarch64-linux-gnu -fsyntax-only.
 */
#include "kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "f16.h"

#if defined(__clang__)
#define TGT __attribute__((target("dotprod")))
#else
#define TGT __attribute__((target("+dotprod")))
#endif
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

/* acc + the dot of a and b by groups of four bytes. GCC's arm_neon.h declares vdotq_s32
 * for any function with +dotprod; clang 14 only when the whole file is built with it. */
TGT_INLINE int32x4_t sdot(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__)
    return vdotq_s32(acc, a, b);
#else
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
#endif
}

static int8_t sat_i8(float v)
{
    if (!(v >= -2147483648.0f && v < 2147483648.0f)) return -128;
    float r = nearbyintf(v);
    return r > 127.0f ? 127 : r < -128.0f ? -128 : (int8_t)r;
}

/* Bit-exact twin of the scalar quantizer (vrndnq = round half to even). */
static void neon_q8_quantize_x(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        kern_q8_block *b = (kern_q8_block *)((char *)dst + (size_t)r * kern_q8_row_bytes(cols));
        for (int64_t i = 0; i < nb; i++) {
            float v[KERN_QK] = {0};
            int64_t n = cols - i * KERN_QK < KERN_QK ? cols - i * KERN_QK : KERN_QK;
            memcpy(v, src + i * KERN_QK, (size_t)n * sizeof(float));
            float32x4_t m = vdupq_n_f32(0.0f);
            for (int j = 0; j < KERN_QK; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(v + j)));
            float amax = vmaxvq_f32(m);
            float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            b[i].d = f32_to_f16(amax / 127.0f);
            for (int j = 0; j < KERN_QK; j++) b[i].qs[j] = sat_i8(v[j] * id);
        }
    }
}

#define Q8_TILE(RM, RN)                                                                    \
TGT_INLINE void q8_tile_##RM##x##RN(const kern_q8_block *w, int64_t ws,                     \
                                    const kern_q8_block *x, int64_t xs, int64_t nb,         \
                                    float *y, int64_t ys, int64_t ldy)                      \
{                                                                                           \
    float32x4_t acc[RM][RN];                                                                \
    for (int r = 0; r < RM; r++)                                                            \
        for (int t = 0; t < RN; t++) acc[r][t] = vdupq_n_f32(0.0f);                         \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        int8x16_t xl[RN], xh[RN];                                                           \
        float dx[RN];                                                                       \
        for (int t = 0; t < RN; t++) {                                                      \
            xl[t] = vld1q_s8(x[t * xs + k].qs);                                             \
            xh[t] = vld1q_s8(x[t * xs + k].qs + 16);                                        \
            dx[t] = f16_to_f32(x[t * xs + k].d);                                            \
        }                                                                                   \
        for (int r = 0; r < RM; r++) {                                                      \
            int8x16_t wl = vld1q_s8(w[r * ws + k].qs), wh = vld1q_s8(w[r * ws + k].qs + 16);\
            float dw = f16_to_f32(w[r * ws + k].d);                                         \
            for (int t = 0; t < RN; t++) {                                                  \
                int32x4_t d = sdot(sdot(vdupq_n_s32(0), wl, xl[t]), wh, xh[t]);             \
                acc[r][t] = vfmaq_n_f32(acc[r][t], vcvtq_f32_s32(d), dw * dx[t]);           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    for (int r = 0; r < RM; r++)                                                            \
        for (int t = 0; t < RN; t++) y[t * ldy + r * ys] = vaddvq_f32(acc[r][t]);           \
}

Q8_TILE(4, 4)
Q8_TILE(4, 1)
Q8_TILE(1, 4)
Q8_TILE(1, 1)

/* Same structure as kernels_avx2.c: up to 32 tokens, the rows of a tile are a quarter
 * of the range apart (four long sequential streams through W); beyond, row chunks that
 * stay in L2 while every token tile passes over them. */
static TGT void neon_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                               float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    const int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    const kern_q8_block *W = w, *X = xq;
    if (n_tok <= 32) {
        int64_t q = (r1 - r0) / 4;
        for (int64_t r = r0; r < r1; r++) {
            if (r == r0 + q) r = r0 + 4 * q;
            if (r >= r1) break;
            int quad = r < r0 + q;
            int64_t t = 0;
            for (; t + 4 <= n_tok; t += 4) {
                if (quad) q8_tile_4x4(W + r * nb, q * nb, X + t * nb, nb, nb, y + t * ldy + r, q, ldy);
                else q8_tile_1x4(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
            }
            for (; t < n_tok; t++) {
                if (quad) q8_tile_4x1(W + r * nb, q * nb, X + t * nb, nb, nb, y + t * ldy + r, q, ldy);
                else q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
            }
        }
        return;
    }
    int64_t chunk = (128 * 1024) / (nb * (int64_t)sizeof(kern_q8_block));
    chunk = chunk < 4 ? 4 : chunk / 4 * 4;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1, t = 0;
        for (; t + 4 <= n_tok; t += 4) {
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) q8_tile_4x4(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
            for (; r < c1; r++) q8_tile_1x4(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
        for (; t < n_tok; t++) {
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) q8_tile_4x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
            for (; r < c1; r++) q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
    }
}

static float neon_f32_dot(const float *a, const float *b, int64_t n)
{
    float32x4_t s = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) s = vfmaq_f32(s, vld1q_f32(a + i), vld1q_f32(b + i));
    float r = vaddvq_f32(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static void neon_f32_axpy(float *y, float a, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

static float neon_f16_dot(const uint16_t *a, const float *b, int64_t n)
{
    float32x4_t s = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        s = vfmaq_f32(s, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(a + i))), vld1q_f32(b + i));
    float r = vaddvq_f32(s);
    for (; i < n; i++) r += f16_to_f32(a[i]) * b[i];
    return r;
}

static void neon_f16_axpy(float *y, float a, const uint16_t *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))), a));
    for (; i < n; i++) y[i] += a * f16_to_f32(x[i]);
}

static void neon_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(x[i]);
}

static void neon_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(x[i]);
}

static void neon_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) y[t * ldy + r] = neon_f32_dot(w + r * cols, x + t * cols, cols);
}

static void neon_f16_matmul(const uint16_t *w, int64_t cols, const float *x, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) y[t * ldy + r] = neon_f16_dot(w + r * cols, x + t * cols, cols);
}

const kern_ops kern_ops_neon = {
    .name = "neon",
    .q8_quantize_x = neon_q8_quantize_x,
    .q8_matmul = neon_q8_matmul,
    .f32_matmul = neon_f32_matmul,
    .f16_matmul = neon_f16_matmul,
    .f32_dot = neon_f32_dot,
    .f32_axpy = neon_f32_axpy,
    .f16_dot = neon_f16_dot,
    .f16_axpy = neon_f16_axpy,
    .f32_to_f16 = neon_f32_to_f16,
    .f16_to_f32 = neon_f16_to_f32,
};

#endif /* __aarch64__ */
