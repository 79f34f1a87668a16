/*
 * kernels_neon.c - the aarch64 NEON tables: q8t products with sdot by element (ARMv8.2
 * dotprod: "neon") and, for token pairs, smmla (i8mm: "neoni8mm"), and the attention and
 * element-wise twins.
 *
 * Whole file under __aarch64__: on x86 it compiles to nothing. kernels.c selects it
 * only when the CPU reports dotprod (common/cpu.c). A 64-byte group of a q8t tile is
 * four 16-byte vectors (rows 0-3, 4-7, 8-11, 12-15, four values each); the stored
 * w + 128 is turned back into signed bytes (eor 0x80), and sdot by element multiplies
 * it with four values of one token into four int32 lanes, exactly. Per block, the
 * contract's cvt + mul + fma (kernels.h) on four float32x4 per token, bit-identical
 * with the scalar twin. The attention pieces and kern_expf follow kernels.h's order
 * lane for lane (as the AVX2 ones); the quantizer is the scalar one's twin; the float
 * dots sum in four lanes (within the tolerance check_kernels allows them). The native
 * layouts' products are in kernels_qn_neon.c.
 *
 * Tested without ARM hardware: make test-arm cross-builds the kernel and qn suites
 * (gcc-aarch64-linux-gnu) and runs them under qemu-aarch64 on CPUs with dotprod and
 * i8mm, with dotprod only and with neither; make test-arm-forward runs the forward
 * suite so.
 */
#include "kernels.h"

#if defined(__aarch64__)

#include <math.h>
#include <string.h>

#include "f16.h"
#include "kernels_neon.h"

#define TGT NEON_DOT

static int8_t sat_i8(float v)
{
    if (!(v >= -2147483648.0f && v < 2147483648.0f)) return -128;
    float r = nearbyintf(v);
    return r > 127.0f ? 127 : r < -128.0f ? -128 : (int8_t)r;
}

/* Bit-exact twin of the scalar quantizer (vrndnq = round half to even). */
static void neon_xq_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK, nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        int8_t *q = (int8_t *)dst + (size_t)r * kern_xq_row_bytes(cols);
        float *d = (float *)(q + nbp * KERN_QK);
        int32_t *c = (int32_t *)(d + nbp);
        for (int64_t i = 0; i < nbp; i++) {
            float v[KERN_QK] = {0};
            int64_t n = i >= nb ? 0 : cols - i * KERN_QK < KERN_QK ? cols - i * KERN_QK : KERN_QK;
            memcpy(v, src + i * KERN_QK, (size_t)n * sizeof(float));
            float32x4_t m = vdupq_n_f32(0.0f);
            for (int j = 0; j < KERN_QK; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(v + j)));
            float amax = vmaxvq_f32(m);
            float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            d[i] = f16_to_f32(f32_to_f16(amax / 127.0f));
            int32_t sum = 0;
            for (int j = 0; j < KERN_QK; j++) sum += q[i * KERN_QK + j] = sat_i8(v[j] * id);
            c[i] = -128 * sum;
        }
    }
}

/* One tile times T tokens; each token's four int32x4 (16 rows) per block. */
#define NMICRO(T)                                                                          \
static TGT void nmicro_##T(const uint8_t *w, int64_t nsb, const uint8_t *xq, size_t xs,     \
                           float *y, int64_t ldy, int lo, int hi)                           \
{                                                                                           \
    const int64_t nbp = nsb * KERN_SB_BLOCKS;                                               \
    const uint8x16_t bias = vdupq_n_u8(0x80);                                               \
    float32x4_t acc[T][4];                                                                  \
    for (int t = 0; t < T; t++)                                                             \
        for (int j = 0; j < 4; j++) acc[t][j] = vdupq_n_f32(0.0f);                          \
    for (int64_t s = 0; s < nsb; s++) {                                                     \
        const kern_q8t_sb *sb = (const kern_q8t_sb *)w + s;                                 \
        for (int b = 0; b < KERN_SB_BLOCKS; b++) {                                          \
            int64_t k = s * KERN_SB_BLOCKS + b;                                             \
            int32x4_t is[T][4];                                                             \
            for (int t = 0; t < T; t++)                                                     \
                for (int j = 0; j < 4; j++) is[t][j] = vdupq_n_s32(0);                      \
            for (int gq = 0; gq < 2; gq++) {                                                \
                int8x16_t xv[T];                                                            \
                for (int t = 0; t < T; t++)                                                 \
                    xv[t] = vld1q_s8((const int8_t *)xq + t * xs + k * KERN_QK + 16 * gq);  \
                _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {                       \
                    int8x16_t wv[4];                                                        \
                    for (int j = 0; j < 4; j++)                                             \
                        wv[j] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(sb->q[b][4 * gq + g][4 * j]), bias)); \
                    for (int t = 0; t < T; t++)                                             \
                        for (int j = 0; j < 4; j++) {                                       \
                            if (g == 0) is[t][j] = SDOT_LANE(is[t][j], wv[j], xv[t], 0);     \
                            else if (g == 1) is[t][j] = SDOT_LANE(is[t][j], wv[j], xv[t], 1);\
                            else if (g == 2) is[t][j] = SDOT_LANE(is[t][j], wv[j], xv[t], 2);\
                            else is[t][j] = SDOT_LANE(is[t][j], wv[j], xv[t], 3);           \
                        }                                                                   \
                }                                                                           \
            }                                                                               \
            float32x4_t dw[4];                                                              \
            for (int j = 0; j < 4; j++) dw[j] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(sb->d[b] + 4 * j))); \
            for (int t = 0; t < T; t++) {                                                   \
                float dx = ((const float *)(xq + t * xs + nbp * KERN_QK))[k];               \
                for (int j = 0; j < 4; j++)                                                 \
                    acc[t][j] = vfmaq_f32(acc[t][j], vcvtq_f32_s32(is[t][j]), vmulq_n_f32(dw[j], dx)); \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    for (int t = 0; t < T; t++) {                                                           \
        float out[KERN_TILE];                                                               \
        for (int j = 0; j < 4; j++) vst1q_f32(out + 4 * j, acc[t][j]);                      \
        for (int i = lo; i < hi; i++) y[t * ldy + i] = out[i];                              \
    }                                                                                       \
}
NMICRO(1) NMICRO(2) NMICRO(3)

static TGT void neon_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq,
                               size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    (void)stream;
    for (int i = 0, a, z; i < nr; i++) {
        if (!kern_tile_lanes(lo, hi, i, &a, &z)) continue;
        for (int t = 0; t < nt; t += 3) {
            int n = nt - t < 3 ? nt - t : 3;
            const uint8_t *xt = xq + (size_t)t * xs;
            float *yt = y + (int64_t)t * ldy + i * KERN_TILE;
            if (n == 3) nmicro_3(w + (size_t)i * tb, nsb, xt, xs, yt, ldy, a, z);
            else if (n == 2) nmicro_2(w + (size_t)i * tb, nsb, xt, xs, yt, ldy, a, z);
            else nmicro_1(w + (size_t)i * tb, nsb, xt, xs, yt, ldy, a, z);
        }
    }
}

/* i8mm: rows 4j..4j+3 of one tile times P token pairs, with smmla (2x8 by 8x2 int8
 * blocks): groups 2p and 2p + 1 zipped hold values 8p..8p+7 of rows 4j, 4j+1 (then of
 * 4j+2, 4j+3), eight values of both tokens in one vector; the 2x2 results unzipped give
 * each token's four rows, then the contract's cvt + mul + fma as above. */
static inline __attribute__((always_inline)) NEON_I8MM void mm_quad(const uint8_t *w, int64_t nsb, const uint8_t *xq,
                                                                   size_t xs, float *y, int64_t ldy, int j, int a,
                                                                   int z, const int P)
{
    const int64_t nbp = nsb * KERN_SB_BLOCKS;
    const uint8x16_t bias = vdupq_n_u8(0x80);
    float32x4_t acc[8];
    for (int t = 0; t < 2 * P; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int64_t s = 0; s < nsb; s++) {
        const kern_q8t_sb *sb = (const kern_q8t_sb *)w + s;
        for (int b = 0; b < KERN_SB_BLOCKS; b++) {
            const int64_t k = s * KERN_SB_BLOCKS + b;
            int8x16_t wz[8];
            for (int p = 0; p < 4; p++) {
                const int32x4_t g0 = vreinterpretq_s32_u8(veorq_u8(vld1q_u8(sb->q[b][2 * p][4 * j]), bias));
                const int32x4_t g1 = vreinterpretq_s32_u8(veorq_u8(vld1q_u8(sb->q[b][2 * p + 1][4 * j]), bias));
                wz[2 * p] = vreinterpretq_s8_s32(vzip1q_s32(g0, g1));
                wz[2 * p + 1] = vreinterpretq_s8_s32(vzip2q_s32(g0, g1));
            }
            const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(sb->d[b] + 4 * j)));
            for (int pr = 0; pr < P; pr++) {
                const uint8_t *ra = xq + (size_t)(2 * pr) * xs, *rb = ra + xs;
                const int8_t *xa = (const int8_t *)ra + k * KERN_QK, *xb = (const int8_t *)rb + k * KERN_QK;
                int32x4_t c01 = vdupq_n_s32(0), c23 = vdupq_n_s32(0);
                for (int p = 0; p < 4; p++) {
                    const int8x16_t x = vcombine_s8(vld1_s8(xa + 8 * p), vld1_s8(xb + 8 * p));
                    c01 = SMMLA(c01, wz[2 * p], x);
                    c23 = SMMLA(c23, wz[2 * p + 1], x);
                }
                const float da = ((const float *)(ra + nbp * KERN_QK))[k];
                const float db = ((const float *)(rb + nbp * KERN_QK))[k];
                acc[2 * pr] = vfmaq_f32(acc[2 * pr], vcvtq_f32_s32(vuzp1q_s32(c01, c23)), vmulq_n_f32(dw, da));
                acc[2 * pr + 1] = vfmaq_f32(acc[2 * pr + 1], vcvtq_f32_s32(vuzp2q_s32(c01, c23)), vmulq_n_f32(dw, db));
            }
        }
    }
    const int lo = a > 4 * j ? a : 4 * j, hi = z < 4 * j + 4 ? z : 4 * j + 4;
    for (int t = 0; t < 2 * P; t++) {
        float out[4];
        vst1q_f32(out, acc[t]);
        for (int i = lo; i < hi; i++) y[t * ldy + i] = out[i - 4 * j];
    }
}

#define MM_QUAD(P)                                                                                          \
static NEON_I8MM void mm_quad_##P(const uint8_t *w, int64_t nsb, const uint8_t *xq, size_t xs, float *y,    \
                                  int64_t ldy, int j, int a, int z)                                        \
{                                                                                                           \
    mm_quad(w, nsb, xq, xs, y, ldy, j, a, z, P);                                                            \
}
MM_QUAD(1) MM_QUAD(2) MM_QUAD(3) MM_QUAD(4)

static void i8mm_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq, size_t xs, int nt,
                           float *y, int64_t ldy, int lo, int hi, int stream)
{
    (void)stream;
    typedef void (*quad_fn)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t, int, int, int);
    static const quad_fn quads[5] = { NULL, mm_quad_1, mm_quad_2, mm_quad_3, mm_quad_4 };
    for (int i = 0, a, z; i < nr; i++) {
        if (!kern_tile_lanes(lo, hi, i, &a, &z)) continue;
        const uint8_t *wt = w + (size_t)i * tb;
        float *yt = y + i * KERN_TILE;
        int t = 0;
        while (nt - t >= 2) { /* pairs, up to 4 a pass */
            int P = (nt - t) / 2 < 4 ? (nt - t) / 2 : 4;
            for (int j = a / 4; j * 4 < z; j++)
                quads[P](wt, nsb, xq + (size_t)t * xs, xs, yt + (int64_t)t * ldy, ldy, j, a, z);
            t += 2 * P;
        }
        if (t < nt) nmicro_1(wt, nsb, xq + (size_t)t * xs, xs, yt + (int64_t)t * ldy, ldy, a, z);
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

/* fcvtn / fcvtl: round to nearest even, as f32_to_f16; exact the other way (as F16C,
 * a signalling NaN comes back quiet). */
static void neon_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = f32_to_f16(x[i]);
}

static void neon_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
    for (; i < n; i++) y[i] = f16_to_f32(x[i]);
}

static void neon_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) y[t * ldy + r] = neon_f32_dot(w + r * cols, x + t * cols, cols);
}

/* ---- attention and element-wise pieces (kernels.h states the order) ---- */

#define N_IN static inline __attribute__((always_inline))

/* kern_expf on 4 lanes, step for step (vrndnq: round half to even, as nearbyintf). */
N_IN float32x4_t n_expf(float32x4_t x)
{
    float32x4_t xc = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmaq_f32(xc, n, vdupq_n_f32(-0.693359375f));
    r = vfmaq_f32(r, n, vdupq_n_f32(2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(r, p, vmulq_f32(r, r));
    p = vaddq_f32(p, vdupq_n_f32(1.0f));
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    uint32x4_t big = vcgtq_f32(x, vdupq_n_f32(88.0f)), ok = vcgeq_f32(x, vdupq_n_f32(-87.0f));
    uint32x4_t num = vceqq_f32(x, x);
    y = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), ok)); /* below -87 (or NaN): 0 */
    y = vbslq_f32(big, vdupq_n_f32(__builtin_inff()), y);
    return vbslq_f32(num, y, x);
}

/* 4 values (floats or halves) from base[i]. */
N_IN float32x4_t n_load(const void *base, int64_t i, int f16)
{
    if (f16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)base + i)));
    return vld1q_f32((const float *)base + i);
}

/* R query rows x one key tile (four vectors of 4 keys), two chains over d (even, odd). */
N_IN void n_qk_body(const float *q, int64_t qs, const void *kt, int f16, int d, float scale, float *sc, int64_t lds,
                    const int R)
{
    float32x4_t acc[2][2][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 2; c++)
            for (int j = 0; j < 4; j++) acc[r][c][j] = vdupq_n_f32(0.0f);
    for (int k = 0; k < d; k += 2) {
        for (int c = 0; c < 2; c++) {
            if (k + c >= d) break; /* odd d: the last term joins the even chain */
            float32x4_t kv[4];
            for (int j = 0; j < 4; j++) kv[j] = n_load(kt, (int64_t)(k + c) * KERN_TILE + 4 * j, f16);
            for (int r = 0; r < R; r++) {
                const float qb = q[r * qs + k + c];
                for (int j = 0; j < 4; j++) acc[r][c][j] = vfmaq_n_f32(acc[r][c][j], kv[j], qb);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++)
            vst1q_f32(sc + r * lds + 4 * j, vmulq_n_f32(vaddq_f32(acc[r][0][j], acc[r][1][j]), scale));
}

static void n_qk_h1(const float *q, int64_t qs, const void *kt, int d, float scale, float *sc, int64_t lds)
{ n_qk_body(q, qs, kt, 1, d, scale, sc, lds, 1); }
static void n_qk_h2(const float *q, int64_t qs, const void *kt, int d, float scale, float *sc, int64_t lds)
{ n_qk_body(q, qs, kt, 1, d, scale, sc, lds, 2); }
static void n_qk_f1(const float *q, int64_t qs, const void *kt, int d, float scale, float *sc, int64_t lds)
{ n_qk_body(q, qs, kt, 0, d, scale, sc, lds, 1); }
static void n_qk_f2(const float *q, int64_t qs, const void *kt, int d, float scale, float *sc, int64_t lds)
{ n_qk_body(q, qs, kt, 0, d, scale, sc, lds, 2); }

/* 16 int8 as four vectors of floats, each times its scale (exact: 11 by 8 bits). */
N_IN void n_q8x16(const int8_t *x, const float32x4_t s[4], float32x4_t out[4])
{
    int8x16_t b = vld1q_s8(x);
    int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
    out[0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s[0]);
    out[1] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), s[1]);
    out[2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s[2]);
    out[3] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), s[3]);
}

/* R query rows (kern_qq, nb blocks each) x one q8_0 key tile: per 32-dim group the
 * exact integer dots of both digits by sdot (a lane is one position's quad), then the
 * block's fma of the chain. */
N_IN TGT void n_qk8_body(const kern_qq *qq, int nb, const uint8_t *t, float scale, float *sc, int64_t lds, const int R)
{
    float32x4_t acc[2][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        const uint8_t *g = t + (size_t)b * KERN_KVQ_GROUP;
        int32x4_t ih[2][4], il[2][4];
        for (int r = 0; r < R; r++)
            for (int c = 0; c < 4; c++) ih[r][c] = il[r][c] = vdupq_n_s32(0);
        for (int kq = 0; kq < KERN_QK / 4; kq++) {
            int8x16_t k[4];
            for (int c = 0; c < 4; c++) k[c] = vld1q_s8((const int8_t *)g + KERN_KVQ_AT(4 * kq, 4 * c));
            for (int r = 0; r < R; r++) {
                int32_t wh, wl;
                memcpy(&wh, qq[r * nb + b].h + 4 * kq, 4);
                memcpy(&wl, qq[r * nb + b].l + 4 * kq, 4);
                const int8x16_t qh = vreinterpretq_s8_s32(vdupq_n_s32(wh)), ql = vreinterpretq_s8_s32(vdupq_n_s32(wl));
                for (int c = 0; c < 4; c++) {
                    ih[r][c] = SDOT_LANE(ih[r][c], k[c], qh, 0);
                    il[r][c] = SDOT_LANE(il[r][c], k[c], ql, 0);
                }
            }
        }
        for (int c = 0; c < 4; c++) {
            const float32x4_t dk = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)g + 4 * c)));
            for (int r = 0; r < R; r++) {
                int32x4_t in = vmlaq_n_s32(il[r][c], ih[r][c], 254);
                acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(in), vmulq_n_f32(dk, qq[r * nb + b].u));
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++) vst1q_f32(sc + r * lds + 4 * c, vmulq_n_f32(acc[r][c], scale));
}

static TGT void neon_att_qk8(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles, float scale,
                         float *sc, int64_t lds)
{
    const int nb = d / KERN_QK;
    for (int r0 = 0; r0 < nq; r0 += 2)
        for (int64_t i = 0; i < ntiles; i++) {
            const uint8_t *t = (const uint8_t *)kt + kern_kv_bytes(KERN_KV_Q8_0, i * kts);
            float *o = sc + r0 * lds + i * KERN_TILE;
            if (nq - r0 >= 2) n_qk8_body(qq + (size_t)r0 * nb, nb, t, scale, o, lds, 2);
            else n_qk8_body(qq + (size_t)r0 * nb, nb, t, scale, o, lds, 1);
        }
}

static void neon_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int kvt, int d,
                        int64_t ntiles, float scale, float *sc, int64_t lds)
{
    const int f16 = kvt == KERN_KV_F16;
    for (int r0 = 0; r0 < nq; r0 += 2) {
        int two = nq - r0 >= 2;
        for (int64_t i = 0; i < ntiles; i++) {
            const void *t = (const char *)kt + kern_kv_bytes(kvt, i * kts);
            const float *qr = q + r0 * qs;
            float *o = sc + r0 * lds + i * KERN_TILE;
            if (f16) (two ? n_qk_h2 : n_qk_h1)(qr, qs, t, d, scale, o, lds);
            else (two ? n_qk_f2 : n_qk_f1)(qr, qs, t, d, scale, o, lds);
        }
    }
}

/* R rows x 16 output dims at value offset h of q8_0 blocks (rows rb bytes apart): chains
 * over t of p * (exact scale * int8). */
N_IN void n_pv_q_body(const float *p, int64_t lds, int64_t a, int64_t b, const uint8_t *v, size_t rb, int h,
                      float *out, int64_t os, const int R)
{
    float32x4_t acc[4][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) acc[r][j] = vld1q_f32(out + r * os + 4 * j);
    for (int64_t t = a; t <= b; t++) {
        const uint8_t *blk = v + (size_t)t * rb;
        uint16_t hs;
        memcpy(&hs, blk, 2);
        const float32x4_t sv = vdupq_n_f32(f16_to_f32(hs)), s[4] = { sv, sv, sv, sv };
        float32x4_t vv[4];
        n_q8x16((const int8_t *)blk + 2 + h, s, vv);
        for (int r = 0; r < R; r++) {
            const float pb = p[r * lds + t];
            for (int j = 0; j < 4; j++) acc[r][j] = vfmaq_n_f32(acc[r][j], vv[j], pb);
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) vst1q_f32(out + r * os + 4 * j, acc[r][j]);
}

static void n_pv_q(const float *p, int64_t lds, int R, int64_t a, int64_t b, const uint8_t *v, size_t rb, int h,
                   float *out, int64_t os)
{
    switch (R) {
    case 1: n_pv_q_body(p, lds, a, b, v, rb, h, out, os, 1); break;
    case 2: n_pv_q_body(p, lds, a, b, v, rb, h, out, os, 2); break;
    case 3: n_pv_q_body(p, lds, a, b, v, rb, h, out, os, 3); break;
    default: n_pv_q_body(p, lds, a, b, v, rb, h, out, os, 4); break;
    }
}

/* R rows x 16 output dims (four vectors): chains over t. */
N_IN void n_pv_body(const float *p, int64_t lds, int64_t a, int64_t b, const void *v, int64_t vs, int f16, float *out,
                    int64_t os, const int R)
{
    float32x4_t acc[4][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) acc[r][j] = vld1q_f32(out + r * os + 4 * j);
    for (int64_t t = a; t <= b; t++) {
        float32x4_t vv[4];
        for (int j = 0; j < 4; j++) vv[j] = n_load(v, t * vs + 4 * j, f16);
        for (int r = 0; r < R; r++) {
            const float pb = p[r * lds + t];
            for (int j = 0; j < 4; j++) acc[r][j] = vfmaq_n_f32(acc[r][j], vv[j], pb);
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) vst1q_f32(out + r * os + 4 * j, acc[r][j]);
}

#define NPV_FN(NAME, F16)                                                                          \
static void NAME(const float *p, int64_t lds, int R, int64_t a, int64_t b, const void *v, int64_t vs, \
                 float *out, int64_t os)                                                            \
{                                                                                                   \
    switch (R) {                                                                                    \
    case 1: n_pv_body(p, lds, a, b, v, vs, F16, out, os, 1); break;                                \
    case 2: n_pv_body(p, lds, a, b, v, vs, F16, out, os, 2); break;                                \
    case 3: n_pv_body(p, lds, a, b, v, vs, F16, out, os, 3); break;                                \
    default: n_pv_body(p, lds, a, b, v, vs, F16, out, os, 4); break;                               \
    }                                                                                               \
}
NPV_FN(n_pv_h, 1)
NPV_FN(n_pv_f, 0)

static void neon_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                        int64_t vs, int kvt, int d, float *out, int64_t os)
{
    if (a > b) return;
    if (kvt == KERN_KV_Q8_0) { /* d is a multiple of 32 */
        for (int d0 = 0; d0 < d; d0 += 16)
            for (int r0 = 0; r0 < nq; r0 += 4)
                n_pv_q(p + r0 * lds, lds, nq - r0 < 4 ? nq - r0 : 4, a, b, (const uint8_t *)v + (size_t)(d0 / KERN_QK) * 34,
                       kern_kv_bytes(kvt, vs), d0 % KERN_QK, out + r0 * os + d0, os);
        return;
    }
    const int f16 = kvt == KERN_KV_F16;
    size_t elt = f16 ? 2 : 4;
    int d16 = d / 16 * 16;
    for (int d0 = 0; d0 < d16; d0 += 16) {
        const void *vd = (const char *)v + (size_t)d0 * elt;
        for (int r0 = 0; r0 < nq; r0 += 4) {
            int R = nq - r0 < 4 ? nq - r0 : 4;
            (f16 ? n_pv_h : n_pv_f)(p + r0 * lds, lds, R, a, b, vd, vs, out + r0 * os + d0, os);
        }
    }
    for (int r = 0; r < nq; r++) /* the last d % 16 dims: the same chains, one at a time */
        for (int i = d16; i < d; i++) {
            float acc = out[r * os + i];
            for (int64_t t = a; t <= b; t++) {
                float vt = f16 ? f16_to_f32(((const uint16_t *)v)[t * vs + i]) : ((const float *)v)[t * vs + i];
                acc = fmaf(p[r * lds + t], vt, acc);
            }
            out[r * os + i] = acc;
        }
}

static void neon_softmax(float *s, int64_t n)
{
    float mx = -__builtin_inff();
    for (int64_t i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    const float32x4_t vmx = vdupq_n_f32(mx);
    float64x2_t l[16]; /* lanes i mod 32: l[a] holds lanes 2a, 2a + 1 */
    for (int a = 0; a < 16; a++) l[a] = vdupq_n_f64(0.0);
    for (int64_t i = 0; i < n; i += 32) {
        float buf[32] = {0}, *e = s + i;
        int64_t w = n - i < 32 ? n - i : 32;
        if (w < 32) { /* the tail through a zero-padded buffer */
            memcpy(buf, s + i, (size_t)w * sizeof(float));
            e = buf;
        }
        for (int h = 0; h < 8; h++) vst1q_f32(e + 4 * h, n_expf(vsubq_f32(vld1q_f32(e + 4 * h), vmx)));
        if (w < 32) {
            for (int64_t j = w; j < 32; j++) buf[j] = 0.0f;
            memcpy(s + i, buf, (size_t)w * sizeof(float));
        }
        for (int a = 0; a < 16; a++) l[a] = vaddq_f64(l[a], vcvt_f64_f32(vld1_f32(e + 2 * a)));
    }
    for (int w = 8; w >= 1; w /= 2) /* + 16, + 8, + 4, + 2 */
        for (int a = 0; a < w; a++) l[a] = vaddq_f64(l[a], l[a + w]);
    const float inv = (float)(1.0 / (vgetq_lane_f64(l[0], 0) + vgetq_lane_f64(l[0], 1)));
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(s + i, vmulq_n_f32(vld1q_f32(s + i), inv));
    for (; i < n; i++) s[i] *= inv;
}

static void neon_silu_mul(float *g, const float *up, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t x = vld1q_f32(g + i), e = n_expf(vnegq_f32(x));
        vst1q_f32(g + i, vmulq_f32(vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e)), vld1q_f32(up + i)));
    }
    if (i < n) {
        float gb[4] = {0}, ub[4] = {0};
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, up + i, (size_t)(n - i) * sizeof(float));
        neon_silu_mul(gb, ub, 4);
        memcpy(g + i, gb, (size_t)(n - i) * sizeof(float));
    }
}

static void neon_gelu_mul(float *g, const float *up, int64_t n)
{
    int64_t i = 0;
    const float32x4_t one = vdupq_n_f32(1.0f);
    for (; i + 4 <= n; i += 4) {
        float32x4_t x = vld1q_f32(g + i);
        float32x4_t t = vaddq_f32(one, vmulq_f32(vdupq_n_f32(0.044715f), vmulq_f32(x, x)));
        float32x4_t u = vmulq_f32(vmulq_f32(vdupq_n_f32(0.79788456080286535587989211986876f), x), t);
        float32x4_t e = n_expf(vnegq_f32(vaddq_f32(u, u)));
        vst1q_f32(g + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)), vld1q_f32(up + i)));
    }
    if (i < n) {
        float gb[4] = {0}, ub[4] = {0};
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, up + i, (size_t)(n - i) * sizeof(float));
        neon_gelu_mul(gb, ub, 4);
        memcpy(g + i, gb, (size_t)(n - i) * sizeof(float));
    }
}

/* The two tables differ only in the products: sdot by element, or smmla for token pairs
 * where the CPU has i8mm (here and in kernels_qn_neon.c). */
#define NEON_TABLE(NAME, Q8T_BLOCK, QN_BLOCK)                                              \
    {                                                                                      \
        .name = NAME,                                                                      \
        .xq_quantize = neon_xq_quantize,                                                   \
        .q8t_block = Q8T_BLOCK,                                                            \
        .q8t_tmax = 12,                                                                    \
        .q8t_rows = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 },                 \
        .qn_block = QN_BLOCK,                                                              \
        .xk_quantize = kern_xk_quantize_ref,                                               \
        .qn_tmax = 16,                                                                     \
        .f32_matmul = neon_f32_matmul,                                                     \
        .att_qk = neon_att_qk,                                                             \
        .att_qk8 = neon_att_qk8,                                                           \
        .att_pv = neon_att_pv,                                                             \
        .softmax = neon_softmax,                                                           \
        .silu_mul = neon_silu_mul,                                                         \
        .gelu_mul = neon_gelu_mul,                                                         \
        .f32_dot = neon_f32_dot,                                                           \
        .f32_axpy = neon_f32_axpy,                                                         \
        .f16_dot = neon_f16_dot,                                                           \
        .f16_axpy = neon_f16_axpy,                                                         \
        .f32_to_f16 = neon_f32_to_f16,                                                     \
        .f16_to_f32 = neon_f16_to_f32,                                                     \
    }
const kern_ops kern_ops_neon = NEON_TABLE("neon", neon_q8t_block, kern_qn_neon_block);
const kern_ops kern_ops_neoni8mm = NEON_TABLE("neoni8mm", i8mm_q8t_block, kern_qn_i8mm_block);

#endif /* __aarch64__ */
