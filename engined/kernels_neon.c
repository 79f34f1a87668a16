/*
 * kernels_neon.c - the aarch64 NEON variant: q8t products with sdot by element
 * (ARMv8.2 dotprod).
 *
 * Whole file under __aarch64__: on x86 it compiles to nothing. kernels.c selects it
 * only when the CPU reports dotprod (common/cpu.c). A 64-byte group of a q8t tile is
 * four 16-byte vectors (rows 0-3, 4-7, 8-11, 12-15, four values each); the stored
 * w + 128 is turned back into signed bytes (eor 0x80), and sdot by element multiplies
 * it with four values of one token into four int32 lanes, exactly. Per block, the
 * contract's cvt + mul + fma (kernels.h) on four float32x4 per token, bit-identical
 * with the scalar twin. The float helpers are plain loops; the quantizer is the
 * scalar one's twin. The native layouts' products are in kernels_qn_neon.c.
 *
 * Tested without ARM hardware: make test-arm cross-builds the kernel, qn and forward
 * suites (gcc-aarch64-linux-gnu) and runs them under qemu-aarch64 with a CPU that has
 * dotprod and i8mm and with one that has neither.
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
    for (int i = 0; i < nr; i++) {
        int a = lo - KERN_TILE * i, z = hi - KERN_TILE * i;
        if (z <= 0 || a >= KERN_TILE) continue;
        a = a < 0 ? 0 : a;
        z = z > KERN_TILE ? KERN_TILE : z;
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

/* Attention and element-wise pieces: the scalar definitions (fmaf is one instruction
 * here); a NEON twin can come later. */
static void neon_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int f16, int d,
                        int64_t ntiles, float scale, float *sc, int64_t lds)
{
    kern_ops_scalar.att_qk(q, qs, nq, kt, kts, f16, d, ntiles, scale, sc, lds);
}

static void neon_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                        int64_t vs, int f16, int d, float *out, int64_t os)
{
    kern_ops_scalar.att_pv(p, lds, nq, a, b, v, vs, f16, d, out, os);
}

static void neon_softmax(float *s, int64_t n) { kern_ops_scalar.softmax(s, n); }
static void neon_silu_mul(float *g, const float *up, int64_t n) { kern_ops_scalar.silu_mul(g, up, n); }

/* The two tables differ only in the native products: sdot by element, or smmla for
 * token pairs where the CPU has i8mm (kernels_qn_neon.c). */
#define NEON_TABLE(NAME, QN_BLOCK)                                                         \
    {                                                                                      \
        .name = NAME,                                                                      \
        .xq_quantize = neon_xq_quantize,                                                   \
        .q8t_block = neon_q8t_block,                                                       \
        .q8t_tmax = 12,                                                                    \
        .q8t_rows = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 },                 \
        .qn_block = QN_BLOCK,                                                              \
        .xk_quantize = kern_xk_quantize_ref,                                               \
        .qn_tmax = 16,                                                                     \
        .f32_matmul = neon_f32_matmul,                                                     \
        .att_qk = neon_att_qk,                                                             \
        .att_pv = neon_att_pv,                                                             \
        .softmax = neon_softmax,                                                           \
        .silu_mul = neon_silu_mul,                                                         \
        .f32_dot = neon_f32_dot,                                                           \
        .f32_axpy = neon_f32_axpy,                                                         \
        .f16_dot = neon_f16_dot,                                                           \
        .f16_axpy = neon_f16_axpy,                                                         \
        .f32_to_f16 = neon_f32_to_f16,                                                     \
        .f16_to_f32 = neon_f16_to_f32,                                                     \
    }
const kern_ops kern_ops_neon = NEON_TABLE("neon", kern_qn_neon_block);
const kern_ops kern_ops_neoni8mm = NEON_TABLE("neoni8mm", kern_qn_i8mm_block);

#endif /* __aarch64__ */
