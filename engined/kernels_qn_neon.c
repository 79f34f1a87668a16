/*
 * kernels_qn_neon.c - the native 2/4/5/6-bit products (kernels.h "qn") on aarch64: a
 * tile as four quarters of 4 rows (16 bytes of each 64-byte group), the integer dots
 * with sdot by element (dotprod) or, for token pairs, smmla (i8mm). Bit-identical with
 * the scalar twin kern_qn_block_ref (tests/check_qn.c, under qemu-aarch64: make test-arm).
 *
 * A tile goes super-block by super-block, each quarter in turn (the first brings the
 * super-block's lines into L1), so it is read from memory once. Per quarter and
 * 32-value block, the eight groups are unpacked once into bytes (the
 * values fit int8: at most 63) and the block's row factors made once (as the x86 tiles:
 * B kinds d, B1's min; K kinds the int32 scales and mins); then every token of the call
 * passes over them: its int32 dots (exact in any order) start from the integer offset
 * term (B0, K6) and go into the chain as kernels.h states (the K kinds: int32 sums over
 * a super-block, then its float step), the same fma and multiplications as the scalar
 * twin, four rows a vector.
 *
 * smmla multiplies a 2x8 by an 8x2 block of int8: two groups zipped (values 4g..4g+7 of
 * rows 0-1, then of rows 2-3) against eight values of two tokens, so a token pair costs
 * half the instructions of two tokens by element; the 2x2 results are unzipped back into
 * one vector of 4 rows per token before the float steps.
 */
#include "kernels.h"

#if defined(__aarch64__)

#include <string.h>

#include "kernels_neon.h"

#define QN_IN static inline __attribute__((always_inline)) NEON_DOT
#define QN_TMAX 4 /* tokens per pass over a tile */

/* Group g of block b, rows 4q..4q+3: the unsigned values (< 64) as int8. */
QN_IN int8x16_t n_group(const uint8_t *sb, size_t hdr, int bits, int b, int g, int q)
{
    if (bits == 2) {
        uint8x16_t v2 = vld1q_u8(sb + hdr + 128 * b + 64 * (g / 4) + 16 * q);
        return vreinterpretq_s8_u8(vandq_u8(vshlq_u8(v2, vdupq_n_s8((int8_t)(-2 * (g % 4)))), vdupq_n_u8(3)));
    }
    uint8x16_t nv = vld1q_u8(sb + hdr + kern_qn_block_bytes(bits) * b + 64 * (g % 4) + 16 * q);
    uint8x16_t v = g < 4 ? vandq_u8(nv, vdupq_n_u8(15)) : vshrq_n_u8(nv, 4);
    if (bits == 5) { /* bit g of the block's byte -> bit 4 */
        uint8x16_t h = vld1q_u8(sb + hdr + kern_qn_block_bytes(bits) * b + 256 + 16 * q);
        v = vorrq_u8(v, vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(4 - g))), vdupq_n_u8(0x10)));
    } else if (bits == 6) { /* bits 2(g % 4), +1 -> bits 4, 5 */
        uint8x16_t h = vld1q_u8(sb + hdr + kern_qn_block_bytes(bits) * b + 256 + 64 * (g / 4) + 16 * q);
        v = vorrq_u8(v, vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(4 - 2 * (g % 4)))), vdupq_n_u8(0x30)));
    }
    return vreinterpretq_s8_u8(v);
}

QN_IN float32x4_t n_h16(const uint8_t *p)
{
    uint16_t h[4];
    memcpy(h, p, sizeof h);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* Four bytes as int32 lanes, unsigned or signed. */
QN_IN int32x4_t n_u8i(const uint8_t *p)
{
    uint8_t b[8] = { p[0], p[1], p[2], p[3], 0, 0, 0, 0 };
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(b)))));
}

QN_IN int32x4_t n_i8i(const uint8_t *p)
{
    int8_t b[8] = { (int8_t)p[0], (int8_t)p[1], (int8_t)p[2], (int8_t)p[3], 0, 0, 0, 0 };
    return vmovl_s16(vget_low_s16(vmovl_s8(vld1_s8(b))));
}

/* Block b's row factors for rows r4..r4+3 (as kernels_qn_x86_tile.h's): B kinds f0, f1;
 * K kinds the int32 scales sc[0..1] and mins sc[2..3] (K: of the block; K6, K2: of its
 * two halves). */
QN_IN void n_factors(int kind, const uint8_t *sb, int b, int r4, float32x4_t *f0, float32x4_t *f1, int32x4_t sc[4])
{
    if (kind == KERN_QN_B0 || kind == KERN_QN_B1) {
        *f0 = n_h16(sb + 32 * b + 2 * r4);
        *f1 = kind == KERN_QN_B1 ? n_h16(sb + 256 + 32 * b + 2 * r4) : *f0;
    } else if (kind == KERN_QN_K2) {
        const int32x4_t s0 = n_u8i(sb + 64 + 32 * b + r4), s1 = n_u8i(sb + 80 + 32 * b + r4);
        sc[0] = vandq_s32(s0, vdupq_n_s32(15)), sc[2] = vshrq_n_s32(s0, 4);
        sc[1] = vandq_s32(s1, vdupq_n_s32(15)), sc[3] = vshrq_n_s32(s1, 4);
    } else if (kind == KERN_QN_K) {
        sc[0] = n_u8i(sb + 64 + 16 * b + r4), sc[2] = n_u8i(sb + 192 + 16 * b + r4);
    } else {
        sc[0] = n_i8i(sb + 64 + 32 * b + r4), sc[1] = n_i8i(sb + 64 + 32 * b + 16 + r4);
    }
}

/* One token's exact dots of block k with the quarter's groups wv: of the two halves
 * apart (d[0], d[1]). */
QN_IN void n_dots(const int8x16_t wv[8], const int8_t *a, int32x4_t d[2])
{
    const int8x16_t x0 = vld1q_s8(a), x1 = vld1q_s8(a + 16);
    int32x4_t i0 = vdupq_n_s32(0), i1 = vdupq_n_s32(0);
    i0 = SDOT_LANE(i0, wv[0], x0, 0), i0 = SDOT_LANE(i0, wv[1], x0, 1);
    i0 = SDOT_LANE(i0, wv[2], x0, 2), i0 = SDOT_LANE(i0, wv[3], x0, 3);
    i1 = SDOT_LANE(i1, wv[4], x1, 0), i1 = SDOT_LANE(i1, wv[5], x1, 1);
    i1 = SDOT_LANE(i1, wv[6], x1, 2), i1 = SDOT_LANE(i1, wv[7], x1, 3);
    d[0] = i0, d[1] = i1;
}

/* The same for tokens a and b at once with smmla: wz holds the groups zipped in pairs
 * (rows 0-1 then 2-3 of values 8p..8p+7, p = 0..3); da, db get each token's halves. */
#define QN_IN_MM static inline __attribute__((always_inline)) NEON_I8MM
QN_IN_MM void n_dots_mm(const int8x16_t wz[8], const int8_t *a, const int8_t *b, int32x4_t da[2], int32x4_t db[2])
{
    for (int h = 0; h < 2; h++) {
        int32x4_t c01 = vdupq_n_s32(0), c23 = vdupq_n_s32(0); /* [r0a r0b r1a r1b], [r2a r2b r3a r3b] */
        for (int p = 2 * h; p < 2 * h + 2; p++) {
            const int8x16_t x = vcombine_s8(vld1_s8(a + 8 * p), vld1_s8(b + 8 * p));
            c01 = SMMLA(c01, wz[2 * p], x);
            c23 = SMMLA(c23, wz[2 * p + 1], x);
        }
        da[h] = vuzp1q_s32(c01, c23), db[h] = vuzp2q_s32(c01, c23);
    }
}

/* acc plus one token's product with block k of a B kind, from its dots d (the chain of
 * kernels.h). */
QN_IN float32x4_t n_token(int kind, int off, const int32x4_t d[2], float32x4_t f0, float32x4_t f1,
                          const uint8_t *xr, kern_xq_offs o, int64_t k, float32x4_t acc)
{
    const float D = ((const float *)(xr + o.d))[k];
    const int32_t S = -((const int32_t *)(xr + o.c))[k] / 128;
    int32x4_t is = vaddq_s32(d[0], d[1]);
    if (kind == KERN_QN_B0) is = vaddq_s32(is, vdupq_n_s32(-off * S));
    acc = vfmaq_f32(acc, vcvtq_f32_s32(is), vmulq_n_f32(f0, D));
    if (kind == KERN_QN_B1) acc = vfmaq_f32(acc, f1, vdupq_n_f32(((const float *)(xr + o.sd))[k]));
    return acc;
}

/* The same for a K kind: the super-block's exact int32 sums is (scaled dots) and ms
 * (scaled mins) plus block k's terms. */
QN_IN void n_ktoken(int kind, const int32x4_t d[2], const int32x4_t sc[4], const uint8_t *xr, kern_xq_offs o,
                    int64_t k, int32x4_t *is, int32x4_t *ms)
{
    const int32_t S = -((const int32_t *)(xr + o.c))[k] / 128, h0 = ((const int32_t *)(xr + o.hs))[k];
    if (kind == KERN_QN_K) {
        *is = vmlaq_s32(*is, vaddq_s32(d[0], d[1]), sc[0]);
        *ms = vmlaq_n_s32(*ms, sc[2], S);
        return;
    }
    int32x4_t i0 = d[0], i1 = d[1];
    if (kind == KERN_QN_K6) i0 = vaddq_s32(i0, vdupq_n_s32(-32 * h0)), i1 = vaddq_s32(i1, vdupq_n_s32(-32 * (S - h0)));
    *is = vmlaq_s32(vmlaq_s32(*is, i0, sc[0]), i1, sc[1]);
    if (kind == KERN_QN_K2) *ms = vmlaq_n_s32(vmlaq_n_s32(*ms, sc[2], h0), sc[3], S - h0);
}

/* A K kind's super-block (from block k0 on) of one token: its float step, into acc
 * (the scaled dots) and accm (the scaled mins). */
QN_IN void n_kend(int kind, const uint8_t *sb, int r4, int32x4_t is, int32x4_t ms, const uint8_t *xr,
                  kern_xq_offs o, int64_t k0, float32x4_t *acc, float32x4_t *accm)
{
    const float D = ((const float *)(xr + o.d))[k0];
    *acc = vfmaq_f32(*acc, vcvtq_f32_s32(is), vmulq_n_f32(n_h16(sb + 2 * r4), D));
    if (kind != KERN_QN_K6) *accm = vfmaq_f32(*accm, vcvtq_f32_s32(ms), vmulq_n_f32(n_h16(sb + 32 + 2 * r4), D));
}

typedef void (*nqn_fn)(const uint8_t *, size_t, size_t, int64_t, const uint8_t *, size_t, kern_xq_offs, float *,
                       int64_t, int, int);

/* The per-kind tile products (kernels_qn_neon_tile.h): nd_tables with sdot by
 * element, nm_tables with smmla for token pairs. */
#define QN(name) nd_##name
#define QN_ATTR NEON_DOT
#define QN_MM 0
#include "kernels_qn_neon_tile.h"
#undef QN
#undef QN_ATTR
#undef QN_MM
#define QN(name) nm_##name
#define QN_ATTR NEON_I8MM
#define QN_MM 1
#include "kernels_qn_neon_tile.h"
#undef QN
#undef QN_ATTR
#undef QN_MM

static void n_block(const nqn_fn *const *tables, int wt, const uint8_t *w, int64_t cols, const uint8_t *xq, size_t xs,
                    int nt, float *y, int64_t ldy, int lo, int hi)
{
    const kern_qn_desc *D = kern_qn_get(wt);
    kern_xq_offs o = kern_xq_offsets(cols);
    for (int t = 0; t < nt; t += QN_TMAX) {
        int n = nt - t < QN_TMAX ? nt - t : QN_TMAX;
        tables[wt][n](w, D->hdr, D->sb_bytes, cols / KERN_QK, xq + (size_t)t * xs, xs, o, y + (int64_t)t * ldy, ldy, lo,
                      hi);
    }
}

void kern_qn_neon_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                        size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    (void)stream;
    for (int i = 0, a, z; i < nr; i++)
        if (kern_tile_lanes(lo, hi, i, &a, &z))
            n_block(nd_tables, wt, w + (size_t)i * tb, cols, xq, xs, nt, y + i * KERN_TILE, ldy, a, z);
}

void kern_qn_i8mm_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                        size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    (void)stream;
    for (int i = 0, a, z; i < nr; i++)
        if (kern_tile_lanes(lo, hi, i, &a, &z))
            n_block(nm_tables, wt, w + (size_t)i * tb, cols, xq, xs, nt, y + i * KERN_TILE, ldy, a, z);
}

#endif
