/*
 * quant.c - the traits table of every ggml weight type (qtype.h), the plain types
 * (F32, F16, BF16) and the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
 *
 *   const qt_traits *t = qt_get(tensor->type);
 *   if (!t || !t->dequant) return error("cannot dequantize %s", qt_name(tensor->type));
 *   t->dequant(tensor->data, row_f32, ne0);
 *
 * Dequantizers reproduce ggml's dequantize_row_* bit for bit (same float operations
 * in the same order, no fused multiply-add). Quantizers follow ggml's reference
 * quantize_row_*_ref semantics so our files are comparable with llama-quantize's.
 * The plain C kernels are the reference; F16C/AVX2 twins of the hot ones give the
 * same bits. They sit in tables (quant_ops.h), one picked once from cpu_features()
 * with common/cpu.h's dispatch convention (LLM_QUANT=avx2|f16c|scalar overrides).
 * Ownership: no allocation; the table is static and read-only. Owner: quant helper.
 */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "cpu.h"
#include "f16.h"
#include "log.h"
#include "quant_ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- plain types ---------------------------------------------------------------- */

static void dequant_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void quant_f32(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dequant_f16_scalar(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(h[i]);
}

#if defined(__x86_64__)
/* F16C twin of dequant_f16_scalar. The hardware quiets signalling NaNs while the
 * scalar code keeps payloads, so any group of 8 holding an inf or NaN goes
 * through the scalar code: the result is bit-identical for every input. */
__attribute__((target("avx,f16c")))
static void dequant_f16_f16c(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    const __m128i exp_mask = _mm_set1_epi16(0x7c00);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(h + i));
        const __m128i special = _mm_cmpeq_epi16(_mm_and_si128(v, exp_mask), exp_mask);
        if (_mm_movemask_epi8(special)) dequant_f16_scalar(h + i, dst + i, 8);
        else _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
    }
    dequant_f16_scalar(h + i, dst + i, n - i);
}
#endif

static void quant_f16(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_f16(src[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
}

static void quant_bf16(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(src[i]);
}

/* ---- 32-value blocks: dequantize ---------------------------------------------------- */

static void dequant_q4_0_scalar(const void *src, float *dst, int64_t n)
{
    const block_q4_0 *b = src;
    LLM_ASSERT(n % QK4_0 == 0);
    for (int64_t i = 0; i < n / QK4_0; i++, b++, dst += QK4_0) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)((b->qs[j] & 0x0f) - 8) * d;
            dst[j + QK4_0 / 2] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1_scalar(const void *src, float *dst, int64_t n)
{
    const block_q4_1 *b = src;
    LLM_ASSERT(n % QK4_1 == 0);
    for (int64_t i = 0; i < n / QK4_1; i++, b++, dst += QK4_1) {
        const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (float)(b->qs[j] & 0x0f) * d + m;
            dst[j + QK4_1 / 2] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dequant_q5_0_scalar(const void *src, float *dst, int64_t n)
{
    const block_q5_0 *b = src;
    LLM_ASSERT(n % QK5_0 == 0);
    for (int64_t i = 0; i < n / QK5_0; i++, b++, dst += QK5_0) {
        const float d = f16_to_f32(b->d);
        const uint32_t qh = load_u32le(b->qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            /* bit j of qh is the 5th bit of value j, bit j+16 that of value j+16 */
            const int h0 = (int)((qh >> j) << 4 & 0x10);
            const int h1 = (int)(qh >> (j + 12) & 0x10);
            dst[j] = (float)(((b->qs[j] & 0x0f) | h0) - 16) * d;
            dst[j + QK5_0 / 2] = (float)(((b->qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void dequant_q5_1_scalar(const void *src, float *dst, int64_t n)
{
    const block_q5_1 *b = src;
    LLM_ASSERT(n % QK5_1 == 0);
    for (int64_t i = 0; i < n / QK5_1; i++, b++, dst += QK5_1) {
        const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
        const uint32_t qh = load_u32le(b->qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10);
            const int h1 = (int)(qh >> (j + 12) & 0x10);
            dst[j] = (float)((b->qs[j] & 0x0f) | h0) * d + m;
            dst[j + QK5_1 / 2] = (float)((b->qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void dequant_q8_0_scalar(const void *src, float *dst, int64_t n)
{
    const block_q8_0 *b = src;
    LLM_ASSERT(n % QK8_0 == 0);
    for (int64_t i = 0; i < n / QK8_0; i++, b++, dst += QK8_0) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)b->qs[j] * d;
    }
}

/* ggml has no Q8_1 to-float; this is the obvious inverse of its quantizer. */
static void dequant_q8_1(const void *src, float *dst, int64_t n)
{
    const block_q8_1 *b = src;
    LLM_ASSERT(n % QK8_1 == 0);
    for (int64_t i = 0; i < n / QK8_1; i++, b++, dst += QK8_1) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QK8_1; j++) dst[j] = (float)b->qs[j] * d;
    }
}

#if defined(__x86_64__)
/* AVX2 twins of the most common 32-value types: the same multiplies and adds per
 * value, in the same order, so the output is bit-identical to the scalar code. */
#define AVX2_FN __attribute__((target("avx2")))

/* The low 8 signed bytes of v, as floats, times d, stored at dst. */
AVX2_FN static inline void store8_i8(float *dst, __m128i v, __m256 d)
{
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d));
}

/* 16 signed bytes as floats times d. */
AVX2_FN static inline void store16_i8(float *dst, __m128i v, __m256 d)
{
    store8_i8(dst, v, d);
    store8_i8(dst + 8, _mm_srli_si128(v, 8), d);
}

AVX2_FN static void dequant_q8_0_avx2(const void *src, float *dst, int64_t n)
{
    LLM_ASSERT(n % QK8_0 == 0);
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, b++, dst += QK8_0) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b->d));
        store16_i8(dst, _mm_loadu_si128((const __m128i *)b->qs), d);
        store16_i8(dst + 16, _mm_loadu_si128((const __m128i *)(b->qs + 16)), d);
    }
}

AVX2_FN static void dequant_q4_0_avx2(const void *src, float *dst, int64_t n)
{
    LLM_ASSERT(n % QK4_0 == 0);
    const block_q4_0 *b = src;
    const __m128i m4 = _mm_set1_epi8(0x0f), off = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / QK4_0; i++, b++, dst += QK4_0) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b->d));
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
        store16_i8(dst, _mm_sub_epi8(_mm_and_si128(raw, m4), off), d);
        store16_i8(dst + 16, _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), off), d);
    }
}

/* The low 8 unsigned bytes of v as floats, times d, plus m. */
AVX2_FN static inline void store8_u8_dm(float *dst, __m128i v, __m256 d, __m256 m)
{
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_mul_ps(q, d), m));
}

AVX2_FN static void dequant_q4_1_avx2(const void *src, float *dst, int64_t n)
{
    LLM_ASSERT(n % QK4_1 == 0);
    const block_q4_1 *b = src;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK4_1; i++, b++, dst += QK4_1) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b->d)), m = _mm256_set1_ps(f16_to_f32(b->m));
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
        const __m128i lo = _mm_and_si128(raw, m4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
        store8_u8_dm(dst, lo, d, m);
        store8_u8_dm(dst + 8, _mm_srli_si128(lo, 8), d, m);
        store8_u8_dm(dst + 16, hi, d, m);
        store8_u8_dm(dst + 24, _mm_srli_si128(hi, 8), d, m);
    }
}
/* 32 bytes, byte j = 0x10 where bit j of the little-endian u32 at p is set. */
AVX2_FN static inline __m256i fifth_bits(const uint8_t *p)
{
    const __m256i pick = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)load_u32le(p)), pick);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)); /* all but bit j%8 */
    v = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(-1));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* The 32 5-bit quants of a Q5 block in value order: nibbles | 5th bit. */
AVX2_FN static inline __m256i q5_values(const uint8_t *qs, const uint8_t *qh)
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0f);
    const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
    return _mm256_or_si256(nib, fifth_bits(qh));
}

AVX2_FN static void dequant_q5_0_avx2(const void *src, float *dst, int64_t n)
{
    LLM_ASSERT(n % QK5_0 == 0);
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, b++, dst += QK5_0) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b->d));
        const __m256i q = _mm256_sub_epi8(q5_values(b->qs, b->qh), _mm256_set1_epi8(16));
        store16_i8(dst, _mm256_castsi256_si128(q), d);
        store16_i8(dst + 16, _mm256_extracti128_si256(q, 1), d);
    }
}

AVX2_FN static void dequant_q5_1_avx2(const void *src, float *dst, int64_t n)
{
    LLM_ASSERT(n % QK5_1 == 0);
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, b++, dst += QK5_1) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(b->d)), m = _mm256_set1_ps(f16_to_f32(b->m));
        const __m256i q = q5_values(b->qs, b->qh);
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        store8_u8_dm(dst, lo, d, m);
        store8_u8_dm(dst + 8, _mm_srli_si128(lo, 8), d, m);
        store8_u8_dm(dst + 16, hi, d, m);
        store8_u8_dm(dst + 24, _mm_srli_si128(hi, 8), d, m);
    }
}
#endif

/* ---- 32-value blocks: quantize ---------------------------------------------------- */

/* The value of largest magnitude (its sign kept), first one on ties. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Truncation towards zero of x + bias, clamped to [0, top]: ggml's (int8_t)(x + 8.5f)
 * idiom, written so that out-of-range or NaN inputs stay defined. */
static int trunc_clamp(float v, int top)
{
    if (!(v > 0.0f)) return 0;
    if (v >= (float)top) return top;
    return (int)v;
}

static void quant_q4_0_scalar(const float *src, void *dst, int64_t n)
{
    block_q4_0 *b = dst;
    LLM_ASSERT(n % QK4_0 == 0);
    for (int64_t i = 0; i < n / QK4_0; i++, b++, src += QK4_0) {
        /* the extreme value maps to -8 exactly, so the full range [-8, 7] is used */
        const float d = signed_absmax(src, QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int q0 = trunc_clamp(src[j] * id + 8.5f, 15);
            const int q1 = trunc_clamp(src[j + QK4_0 / 2] * id + 8.5f, 15);
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void quant_q4_1(const float *src, void *dst, int64_t n)
{
    block_q4_1 *b = dst;
    LLM_ASSERT(n % QK4_1 == 0);
    for (int64_t i = 0; i < n / QK4_1; i++, b++, src += QK4_1) {
        float mn, mx;
        min_max(src, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        b->m = f32_to_f16(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int q0 = trunc_clamp((src[j] - mn) * id + 0.5f, 15);
            const int q1 = trunc_clamp((src[j + QK4_1 / 2] - mn) * id + 0.5f, 15);
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void quant_q5_0(const float *src, void *dst, int64_t n)
{
    block_q5_0 *b = dst;
    LLM_ASSERT(n % QK5_0 == 0);
    for (int64_t i = 0; i < n / QK5_0; i++, b++, src += QK5_0) {
        const float d = signed_absmax(src, QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b->d = f32_to_f16(d);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = trunc_clamp(src[j] * id + 16.5f, 31);
            const int q1 = trunc_clamp(src[j + QK5_0 / 2] * id + 16.5f, 31);
            b->qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        store_u32le(b->qh, qh);
    }
}

static void quant_q5_1(const float *src, void *dst, int64_t n)
{
    block_q5_1 *b = dst;
    LLM_ASSERT(n % QK5_1 == 0);
    for (int64_t i = 0; i < n / QK5_1; i++, b++, src += QK5_1) {
        float mn, mx;
        min_max(src, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b->d = f32_to_f16(d);
        b->m = f32_to_f16(mn);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = trunc_clamp((src[j] - mn) * id + 0.5f, 31);
            const int q1 = trunc_clamp((src[j + QK5_1 / 2] - mn) * id + 0.5f, 31);
            b->qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_1 / 2);
        }
        store_u32le(b->qh, qh);
    }
}

/* roundf (half away from zero) clamped to int8's symmetric range; NaN -> 0. */
static int8_t round_i8(float v)
{
    if (!(v == v)) return 0;
    v = roundf(v);
    return (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
}

static float block_absmax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

static void quant_q8_0_scalar(const float *src, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    LLM_ASSERT(n % QK8_0 == 0);
    for (int64_t i = 0; i < n / QK8_0; i++, b++, src += QK8_0) {
        const float d = block_absmax(src, QK8_0) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) b->qs[j] = round_i8(src[j] * id);
    }
}

static void quant_q8_1(const float *src, void *dst, int64_t n)
{
    block_q8_1 *b = dst;
    LLM_ASSERT(n % QK8_1 == 0);
    for (int64_t i = 0; i < n / QK8_1; i++, b++, src += QK8_1) {
        const float d = block_absmax(src, QK8_1) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        b->d = f32_to_f16(d);
        for (int j = 0; j < QK8_1; j++) {
            b->qs[j] = round_i8(src[j] * id);
            sum += b->qs[j];
        }
        b->s = f32_to_f16((float)sum * d);
    }
}

#if defined(__x86_64__)
/* AVX2 twins of the Q8_0 and Q4_0 quantizers (what synthetic models are made of).
 * Maxima are exact in any order; NaNs are skipped as fmaxf and the strict compare
 * of the scalar code skip them; rounding reproduces roundf and the truncations. */

/* max |x| over 32 values, NaNs ignored. */
AVX2_FN static inline float absmax32(const float *x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 32; j += 8)
        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* roundf(v) clamped to [-127, 127], NaN -> 0, for 8 lanes (as round_i8). */
AVX2_FN static inline __m256i round_i8x8(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    /* |v| + (0.5 - 2^-25), truncated: half away from zero without double rounding */
    const __m256 a = _mm256_add_ps(_mm256_andnot_ps(sign, v), _mm256_set1_ps(0.49999997f));
    __m256 r = _mm256_min_ps(_mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), _mm256_set1_ps(127.0f));
    r = _mm256_or_ps(r, _mm256_and_ps(v, sign));
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_cvttps_epi32(r);
}

AVX2_FN static void quant_q8_0_avx2(const float *src, void *dst, int64_t n)
{
    LLM_ASSERT(n % QK8_0 == 0);
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, b++, src += QK8_0) {
        const float d = absmax32(src) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        b->d = f32_to_f16(d);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = round_i8x8(_mm256_mul_ps(_mm256_loadu_ps(src + 8 * k), vid));
        /* int32 -> int8 keeping order: packs interleave 128-bit lanes, permute back */
        const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        const __m256i o = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)b->qs, o);
    }
}

AVX2_FN static void quant_q4_0_avx2(const float *src, void *dst, int64_t n)
{
    LLM_ASSERT(n % QK4_0 == 0);
    block_q4_0 *b = dst;
    const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(15.0f), half = _mm256_set1_ps(8.5f);
    for (int64_t i = 0; i < n / QK4_0; i++, b++, src += QK4_0) {
        /* the first value of largest magnitude, sign kept (0 if all are zero) */
        const float amax = absmax32(src);
        float max = 0.0f;
        for (int j = 0; amax > 0 && j < 32; j++)
            if (fabsf(src[j]) == amax) {
                max = src[j];
                break;
            }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        b->d = f32_to_f16(d);
        int32_t q[32];
        for (int k = 0; k < 4; k++) {
            /* trunc_clamp: NaN and negatives -> 0, at most 15 */
            __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(src + 8 * k), vid), half);
            v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
            _mm256_storeu_si256((__m256i *)(q + 8 * k), _mm256_cvttps_epi32(v));
        }
        for (int j = 0; j < 16; j++) b->qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}
#endif

/* ---- the twins' tables, chosen once -------------------------------------------- */

static const quant_ops ops_scalar = {
    .name = "scalar",
    .dequant_f16 = dequant_f16_scalar,
    .dequant_q4_0 = dequant_q4_0_scalar,
    .dequant_q4_1 = dequant_q4_1_scalar,
    .dequant_q5_0 = dequant_q5_0_scalar,
    .dequant_q5_1 = dequant_q5_1_scalar,
    .dequant_q8_0 = dequant_q8_0_scalar,
    .quant_q4_0 = quant_q4_0_scalar,
    .quant_q8_0 = quant_q8_0_scalar,
    .k = &quant_k_ops_scalar,
};

#if defined(__x86_64__)
/* F16C without AVX2 (Ivy Bridge): only the F16 conversion has a twin. */
static const quant_ops ops_f16c = {
    .name = "f16c",
    .dequant_f16 = dequant_f16_f16c,
    .dequant_q4_0 = dequant_q4_0_scalar,
    .dequant_q4_1 = dequant_q4_1_scalar,
    .dequant_q5_0 = dequant_q5_0_scalar,
    .dequant_q5_1 = dequant_q5_1_scalar,
    .dequant_q8_0 = dequant_q8_0_scalar,
    .quant_q4_0 = quant_q4_0_scalar,
    .quant_q8_0 = quant_q8_0_scalar,
    .k = &quant_k_ops_scalar,
};

static const quant_ops ops_avx2 = {
    .name = "avx2",
    .dequant_f16 = dequant_f16_f16c,
    .dequant_q4_0 = dequant_q4_0_avx2,
    .dequant_q4_1 = dequant_q4_1_avx2,
    .dequant_q5_0 = dequant_q5_0_avx2,
    .dequant_q5_1 = dequant_q5_1_avx2,
    .dequant_q8_0 = dequant_q8_0_avx2,
    .quant_q4_0 = quant_q4_0_avx2,
    .quant_q8_0 = quant_q8_0_avx2,
    .k = &quant_k_ops_avx2,
};
#endif

/* In order of preference (common/cpu.h's dispatch convention, LLM_QUANT). */
static const cpu_impl impls[] = {
#if defined(__x86_64__)
    { "avx2", CPU_AVX2 | CPU_F16C, &ops_avx2 },
    { "f16c", CPU_F16C, &ops_f16c },
#endif
    { "scalar", 0, &ops_scalar },
};

static const quant_ops *chosen, *active; /* the pick; what runs (the pick or scalar) */
static bool simd_on = true;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void pick(void)
{
    chosen = cpu_impl_pick(impls, sizeof impls / sizeof impls[0], "LLM_QUANT")->table;
    active = simd_on ? chosen : &ops_scalar;
}

const quant_ops *quant_ops_active(void)
{
    pthread_once(&once, pick);
    return active;
}

void quant_init(void)
{
    pthread_once(&once, pick);
    pick();
}

void quant_set_simd(bool on)
{
    pthread_once(&once, pick);
    simd_on = on;
    active = on ? chosen : &ops_scalar;
}

const char *quant_name(void)
{
    return quant_ops_active()->name;
}

/* The traits table's entries for the types with twins: through the table in use. */
#define VIA_OPS_DEQUANT(name)                                                            \
    static void name(const void *src, float *dst, int64_t n) { quant_ops_active()->name(src, dst, n); }
#define VIA_OPS_QUANT(name)                                                              \
    static void name(const float *src, void *dst, int64_t n) { quant_ops_active()->name(src, dst, n); }
VIA_OPS_DEQUANT(dequant_f16)
VIA_OPS_DEQUANT(dequant_q4_0)
VIA_OPS_DEQUANT(dequant_q4_1)
VIA_OPS_DEQUANT(dequant_q5_0)
VIA_OPS_DEQUANT(dequant_q5_1)
VIA_OPS_DEQUANT(dequant_q8_0)
VIA_OPS_QUANT(quant_q4_0)
VIA_OPS_QUANT(quant_q8_0)

/* ---- packed data at any address ---------------------------------------------- */

/* GGUF aligns tensor data to general.alignment, which a hostile file may set to 1,
 * so packed data can sit at any address, while the kernels read blocks as structs.
 * The table's entries therefore check the alignment of the packed side and pass a
 * misaligned one through a small aligned buffer, a chunk of whole blocks at a time. */
#define BOUNCE_BYTES 4096

static void dequant_bounced(qt_dequant_fn fn, const uint8_t *src, float *dst, int64_t n,
                            int bs, size_t ts)
{
    _Alignas(32) uint8_t buf[BOUNCE_BYTES];
    const int64_t per = (int64_t)(BOUNCE_BYTES / ts), blocks = n / bs;
    LLM_ASSERT(n % bs == 0);
    for (int64_t done = 0; done < blocks;) {
        const int64_t k = blocks - done < per ? blocks - done : per;
        memcpy(buf, src + done * (int64_t)ts, (size_t)k * ts);
        fn(buf, dst + done * bs, k * bs);
        done += k;
    }
}

static void quant_bounced(qt_quant_fn fn, const float *src, uint8_t *dst, int64_t n, int bs,
                          size_t ts)
{
    _Alignas(32) uint8_t buf[BOUNCE_BYTES];
    const int64_t per = (int64_t)(BOUNCE_BYTES / ts), blocks = n / bs;
    LLM_ASSERT(n % bs == 0);
    for (int64_t done = 0; done < blocks;) {
        const int64_t k = blocks - done < per ? blocks - done : per;
        fn(src + done * bs, buf, k * bs);
        memcpy(dst + done * (int64_t)ts, buf, (size_t)k * ts);
        done += k;
    }
}

/* kern_g: kern for aligned packed data, the bounce buffer otherwise. */
#define GUARD_DEQUANT(kern, T, bs)                                                       \
    static void kern##_g(const void *src, float *dst, int64_t n)                         \
    {                                                                                    \
        if ((uintptr_t)src % _Alignof(T) == 0) kern(src, dst, n);                        \
        else dequant_bounced(kern, src, dst, n, bs, sizeof(T));                          \
    }
#define GUARD_QUANT(kern, T, bs)                                                         \
    static void kern##_g(const float *src, void *dst, int64_t n)                         \
    {                                                                                    \
        if ((uintptr_t)dst % _Alignof(T) == 0) kern(src, dst, n);                        \
        else quant_bounced(kern, src, dst, n, bs, sizeof(T));                            \
    }
#define GUARD_BOTH(dq, q, T, bs) GUARD_DEQUANT(dq, T, bs) GUARD_QUANT(q, T, bs)

GUARD_BOTH(dequant_f16, quant_f16, uint16_t, 1)
GUARD_BOTH(dequant_bf16, quant_bf16, uint16_t, 1)
GUARD_BOTH(dequant_q4_0, quant_q4_0, block_q4_0, QK4_0)
GUARD_BOTH(dequant_q4_1, quant_q4_1, block_q4_1, QK4_1)
GUARD_BOTH(dequant_q5_0, quant_q5_0, block_q5_0, QK5_0)
GUARD_BOTH(dequant_q5_1, quant_q5_1, block_q5_1, QK5_1)
GUARD_BOTH(dequant_q8_0, quant_q8_0, block_q8_0, QK8_0)
GUARD_BOTH(dequant_q8_1, quant_q8_1, block_q8_1, QK8_1)
GUARD_BOTH(quant_dequant_q2_K, quant_quant_q2_K, block_q2_K, QK_K)
GUARD_BOTH(quant_dequant_q3_K, quant_quant_q3_K, block_q3_K, QK_K)
GUARD_BOTH(quant_dequant_q4_K, quant_quant_q4_K, block_q4_K, QK_K)
GUARD_BOTH(quant_dequant_q5_K, quant_quant_q5_K, block_q5_K, QK_K)
GUARD_BOTH(quant_dequant_q6_K, quant_quant_q6_K, block_q6_K, QK_K)
GUARD_BOTH(quant_dequant_q8_K, quant_quant_q8_K, block_q8_K, QK_K)

/* ---- the traits table ------------------------------------------------------------ */

#define PLAIN(id, nm, bytes, dq, q) [id] = { nm, 1, bytes, dq, q }
#define BLOCK(id, nm, bs, bytes, dq, q) [id] = { nm, bs, bytes, dq, q }

/* Indexed by type id; removed ids stay zero (name NULL). Sizes of the types we cannot
 * convert are ggml's, so files holding them can still be parsed and sized. */
static const qt_traits qt_table[QT_COUNT] = {
    PLAIN(QT_F32, "F32", 4, dequant_f32, quant_f32),
    PLAIN(QT_F16, "F16", 2, dequant_f16_g, quant_f16_g),
    BLOCK(QT_Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), dequant_q4_0_g, quant_q4_0_g),
    BLOCK(QT_Q4_1, "Q4_1", QK4_1, sizeof(block_q4_1), dequant_q4_1_g, quant_q4_1_g),
    BLOCK(QT_Q5_0, "Q5_0", QK5_0, sizeof(block_q5_0), dequant_q5_0_g, quant_q5_0_g),
    BLOCK(QT_Q5_1, "Q5_1", QK5_1, sizeof(block_q5_1), dequant_q5_1_g, quant_q5_1_g),
    BLOCK(QT_Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), dequant_q8_0_g, quant_q8_0_g),
    BLOCK(QT_Q8_1, "Q8_1", QK8_1, sizeof(block_q8_1), dequant_q8_1_g, quant_q8_1_g),
    BLOCK(QT_Q2_K, "Q2_K", QK_K, sizeof(block_q2_K), quant_dequant_q2_K_g, quant_quant_q2_K_g),
    BLOCK(QT_Q3_K, "Q3_K", QK_K, sizeof(block_q3_K), quant_dequant_q3_K_g, quant_quant_q3_K_g),
    BLOCK(QT_Q4_K, "Q4_K", QK_K, sizeof(block_q4_K), quant_dequant_q4_K_g, quant_quant_q4_K_g),
    BLOCK(QT_Q5_K, "Q5_K", QK_K, sizeof(block_q5_K), quant_dequant_q5_K_g, quant_quant_q5_K_g),
    BLOCK(QT_Q6_K, "Q6_K", QK_K, sizeof(block_q6_K), quant_dequant_q6_K_g, quant_quant_q6_K_g),
    BLOCK(QT_Q8_K, "Q8_K", QK_K, sizeof(block_q8_K), quant_dequant_q8_K_g, quant_quant_q8_K_g),
    BLOCK(QT_IQ2_XXS, "IQ2_XXS", QK_K, 66, NULL, NULL),
    BLOCK(QT_IQ2_XS, "IQ2_XS", QK_K, 74, NULL, NULL),
    BLOCK(QT_IQ3_XXS, "IQ3_XXS", QK_K, 98, NULL, NULL),
    BLOCK(QT_IQ1_S, "IQ1_S", QK_K, 50, NULL, NULL),
    BLOCK(QT_IQ4_NL, "IQ4_NL", 32, 18, NULL, NULL),
    BLOCK(QT_IQ3_S, "IQ3_S", QK_K, 110, NULL, NULL),
    BLOCK(QT_IQ2_S, "IQ2_S", QK_K, 82, NULL, NULL),
    BLOCK(QT_IQ4_XS, "IQ4_XS", QK_K, 136, NULL, NULL),
    PLAIN(QT_I8, "I8", 1, NULL, NULL),
    PLAIN(QT_I16, "I16", 2, NULL, NULL),
    PLAIN(QT_I32, "I32", 4, NULL, NULL),
    PLAIN(QT_I64, "I64", 8, NULL, NULL),
    PLAIN(QT_F64, "F64", 8, NULL, NULL),
    BLOCK(QT_IQ1_M, "IQ1_M", QK_K, 56, NULL, NULL),
    PLAIN(QT_BF16, "BF16", 2, dequant_bf16_g, quant_bf16_g),
    BLOCK(QT_TQ1_0, "TQ1_0", QK_K, 54, NULL, NULL),
    BLOCK(QT_TQ2_0, "TQ2_0", QK_K, 66, NULL, NULL),
    BLOCK(QT_MXFP4, "MXFP4", 32, 17, NULL, NULL),
};

/* Traits of a type id, or NULL for an invalid or removed id. */
const qt_traits *qt_get(uint32_t type)
{
    if (type >= QT_COUNT || qt_table[type].name == NULL) return NULL;
    return &qt_table[type];
}

/* ggml's name of a type, or "unknown". */
const char *qt_name(uint32_t type)
{
    const qt_traits *t = qt_get(type);
    return t ? t->name : "unknown";
}

/* Type id of a name (case-insensitive), or -1. */
int qt_from_name(const char *name)
{
    if (name == NULL) return -1;
    for (int i = 0; i < QT_COUNT; i++)
        if (qt_table[i].name && strcasecmp(qt_table[i].name, name) == 0) return i;
    return -1;
}

/* Bytes of a row of n values; 0 for an invalid type, a bad n, or an overflow. */
size_t qt_row_size(uint32_t type, int64_t n)
{
    const qt_traits *t = qt_get(type);
    if (t == NULL || n < 0 || n % t->block_size != 0) return 0;
    uint64_t blocks = (uint64_t)(n / t->block_size);
    if (blocks > SIZE_MAX / t->type_size) return 0;
    return (size_t)blocks * t->type_size;
}
