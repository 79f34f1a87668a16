/*
 * quant_k_dequant.c - the dequantizers of the "K" quantization types (Q2_K..Q6_K, Q8_K):
 * the scalar reference and its AVX2 twin, which gives the same bits.
 *
 *   quant_dequant_q4_K(blocks, y, n);  // n a multiple of QK_K (through quant_ops.h's table)
 *
 * They reproduce ggml's dequantize_row_q*_K bit for bit: the sub-block scale is formed
 * first as a float product (d * sc), then multiplied by the quant, then the min product
 * is subtracted, never fused. The quantizers are in quant_k.c; both sets sit in the
 * tables of quant_ops.h, which quant.c chooses from once.
 * Owner: quant helper. No allocation.
 */
#include "quant.h"

#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "f16.h"
#include "log.h"
#include "quant_ops.h"



/* ---- dequantize ------------------------------------------------------------------- */

void quant_k_dequant_q2_K_scalar(const void *src, float *y, int64_t n)
{
    const block_q2_K *b = src;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        int is = 0;
        /* two halves of 128; each byte holds 4 quants 32 values apart */
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) {
                    const uint8_t sc = b->scales[is++];
                    const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[16 * k + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Unpacks Q3_K's 16 6-bit scales: low 4 bits in bytes 0..7 (low nibble = scales
 * 0..7, high nibble = 8..15), top 2 bits in bytes 8..11. Result biased by -32. */
void quant_q3_K_scales(const uint8_t *p, int *out)
{
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? p[j] & 0x0f : p[j - 8] >> 4;
        const int hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (lo | hi << 4) - 32;
    }
}

void quant_k_dequant_q3_K_scalar(const void *src, float *y, int64_t n)
{
    const block_q3_K *b = src;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d);
        const uint8_t *q = b->qs;
        int sc[16], is = 0;
        uint8_t m = 1;
        quant_q3_K_scales(b->scales, sc);
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d * (float)sc[is++];
                    for (int l = 0; l < 16; l++) {
                        const int lo = (q[16 * k + l] >> shift) & 3;
                        const int hi = (b->hmask[16 * k + l] & m) ? 0 : 4;
                        *y++ = dl * (float)(lo - hi);
                    }
                }
            }
        }
    }
}

void quant_k_dequant_q4_K_scalar(const void *src, float *y, int64_t n)
{
    const block_q4_K *b = src;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            quant_k_get_scale_min(j, b->scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            quant_k_get_scale_min(j + 1, b->scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
            y += 64;
        }
    }
}

void quant_k_dequant_q5_K_scalar(const void *src, float *y, int64_t n)
{
    const block_q5_K *b = src;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *ql = b->qs;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            quant_k_get_scale_min(j, b->scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            quant_k_get_scale_min(j + 1, b->scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                y[l] = d1 * (float)((ql[l] & 0x0f) + (b->qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                y[l + 32] = d2 * (float)((ql[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - m2;
            y += 64;
        }
    }
}

void quant_k_dequant_q6_K_scalar(const void *src, float *y, int64_t n)
{
    const block_q6_K *b = src;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d);
        const uint8_t *ql = b->ql, *qh = b->qh;
        const int8_t *sc = b->scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void quant_dequant_q8_K(const void *src, float *y, int64_t n)
{
    const block_q8_K *b = src;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, b++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = b->d * (float)b->qs[j];
}

#if defined(__x86_64__)
/* AVX2 twins of the K dequantizers: the per-sub-block float scale
 * and min are formed exactly as in the scalar code, then each value gets the
 * same multiply (and subtract) in vector lanes: bit-identical output. */
#define AVX2_FN __attribute__((target("avx2")))

/* 8 unsigned bytes (low half of v) as floats: d * q - m. */
AVX2_FN static inline void k_store8_dm(float *dst, __m128i v, __m256 d, __m256 m)
{
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    _mm256_storeu_ps(dst, _mm256_sub_ps(_mm256_mul_ps(d, q), m));
}

/* 32 unsigned bytes as floats: d * q - m. */
AVX2_FN static inline void k_store32_dm(float *dst, __m256i v, float d, float m)
{
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    k_store8_dm(dst, lo, vd, vm);
    k_store8_dm(dst + 8, _mm_srli_si128(lo, 8), vd, vm);
    k_store8_dm(dst + 16, hi, vd, vm);
    k_store8_dm(dst + 24, _mm_srli_si128(hi, 8), vd, vm);
}

AVX2_FN void quant_k_dequant_q4_K_avx2(const void *src, float *y, int64_t n)
{
    LLM_ASSERT(n % QK_K == 0);
    const block_q4_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            uint8_t sc, m;
            quant_k_get_scale_min(j, b->scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            quant_k_get_scale_min(j + 1, b->scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const __m256i raw = _mm256_loadu_si256((const __m256i *)q);
            k_store32_dm(y, _mm256_and_si256(raw, m4), d1, m1);
            k_store32_dm(y + 32, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), d2, m2);
        }
    }
}

AVX2_FN void quant_k_dequant_q5_K_avx2(const void *src, float *y, int64_t n)
{
    LLM_ASSERT(n % QK_K == 0);
    const block_q5_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(16);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
        for (int j = 0; j < 8; j += 2, y += 64) {
            uint8_t sc, m;
            quant_k_get_scale_min(j, b->scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            quant_k_get_scale_min(j + 1, b->scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 16 * j));
            const __m256i u1 = _mm256_set1_epi8((char)(1 << j)), u2 = _mm256_set1_epi8((char)(2 << j));
            /* + 16 where the high bit is set: an OR, since the nibble is below 16 */
            const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u1), u1), b16);
            const __m256i h2 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u2), u2), b16);
            k_store32_dm(y, _mm256_or_si256(_mm256_and_si256(raw, m4), h1), d1, m1);
            k_store32_dm(y + 32, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), h2), d2, m2);
        }
    }
}

/* 32 signed bytes as floats, 8 at a time, each group of 16 with its own scale:
 * ds[0] for bytes 0..15, ds[1] for 16..31. */
AVX2_FN static inline void k_store32_s(float *dst, __m256i v, float ds0, float ds1)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    const __m256 s0 = _mm256_set1_ps(ds0), s1 = _mm256_set1_ps(ds1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

AVX2_FN void quant_k_dequant_q6_K_avx2(const void *src, float *y, int64_t n)
{
    LLM_ASSERT(n % QK_K == 0);
    const block_q6_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            float ds[8];
            for (int k = 0; k < 8; k++) ds[k] = d * (float)sc[k];
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            /* value = low nibble | 2 high bits << 4, minus 32 */
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            k_store32_s(y, _mm256_sub_epi8(q1, off), ds[0], ds[1]);
            k_store32_s(y + 32, _mm256_sub_epi8(q2, off), ds[2], ds[3]);
            k_store32_s(y + 64, _mm256_sub_epi8(q3, off), ds[4], ds[5]);
            k_store32_s(y + 96, _mm256_sub_epi8(q4, off), ds[6], ds[7]);
        }
    }
}

/* 32 unsigned bytes as floats: d0 * q - m0 for bytes 0..15, d1 * q - m1 for 16..31. */
AVX2_FN static inline void k_store32_dm2(float *dst, __m256i v, float d0, float m0, float d1, float m1)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    const __m256 vd0 = _mm256_set1_ps(d0), vm0 = _mm256_set1_ps(m0);
    const __m256 vd1 = _mm256_set1_ps(d1), vm1 = _mm256_set1_ps(m1);
    k_store8_dm(dst, lo, vd0, vm0);
    k_store8_dm(dst + 8, _mm_srli_si128(lo, 8), vd0, vm0);
    k_store8_dm(dst + 16, hi, vd1, vm1);
    k_store8_dm(dst + 24, _mm_srli_si128(hi, 8), vd1, vm1);
}

AVX2_FN void quant_k_dequant_q2_K_avx2(const void *src, float *y, int64_t n)
{
    const block_q2_K *b = src;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *sc = b->scales;
        for (int half = 0; half < 2; half++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * half));
            for (int shift = 0; shift < 8; shift += 2, sc += 2, y += 32) {
                const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, shift), m3);
                k_store32_dm2(y, v, d * (float)(sc[0] & 0x0f), dmin * (float)(sc[0] >> 4),
                              d * (float)(sc[1] & 0x0f), dmin * (float)(sc[1] >> 4));
            }
        }
    }
}

AVX2_FN void quant_k_dequant_q3_K_avx2(const void *src, float *y, int64_t n)
{
    const block_q3_K *b = src;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), zero = _mm256_setzero_si256();
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const float d = f16_to_f32(b->d);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        int sc[16], is = 0, bit = 0;
        quant_q3_K_scales(b->scales, sc);
        for (int half = 0; half < 2; half++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * half));
            for (int shift = 0; shift < 8; shift += 2, bit++, is += 2, y += 32) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, shift), m3);
                /* minus 4 where the high bit is clear */
                const __m256i m = _mm256_set1_epi8((char)(1 << bit));
                const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, m), zero);
                const __m256i v = _mm256_sub_epi8(lo, _mm256_and_si256(clear, four));
                k_store32_s(y, v, d * (float)sc[is], d * (float)sc[is + 1]);
            }
        }
    }
}

#endif
