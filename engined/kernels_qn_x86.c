/*
 * kernels_qn_x86.c - the native 2/4/5/6-bit products (kernels.h "qn") on x86: AVX-512
 * VNNI (one zmm per 64-byte group: 16 rows), AVX-VNNI and AVX2 (a tile as two halves
 * of 8 rows, one ymm each). Bit-identical with the scalar twin kern_qn_block_ref
 * (tests/check_qn.c).
 *
 * Per tile and 32-value block, the eight groups are unpacked once into unsigned bytes
 * (low nibbles, plus the 5th or 5th-6th bits shifted into place; or 2-bit fields) and
 * the block's row factors (B kinds: d, B1's min; K kinds: the int32 scales) made once;
 * then every token of the call passes over them: its int32 dots start from the integer
 * offset term (B0, K6), take 8 vpdpbusd, and go into the chain as kernels.h states: the
 * B kinds' float step per block, the K kinds' int32 sums (vpmulld by the scales; K2's
 * values scaled once per block instead, its mins as int16 pairs per block; K's mins per
 * super-block as int16 pairs, vpdpwssd) and one float step per super-block. Plain AVX2
 * has no vpdpbusd: its maddubs pairs are summed in int16 over runs of groups and widened
 * by one madd with the scale (QN(i16block)). Decode is memory-bound: each byte is read
 * once, front to back (AVX2 takes a tile's two halves super-block by super-block, the
 * second from L1), and prefetched 4 KB ahead (KERN_X86_PF_DIST). From 3 tokens a call whose
 * tiles are in cache (a prompt pass's later token chunks) AVX-512 takes the tiles in pairs, 4 tokens a pass
 * (z_pair_tables): each token's broadcast then feeds both tiles. A call whose tiles come
 * from memory (stream: a batched decode step's first token chunk) takes them one at a
 * time and prefetches on its first pass at every width.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels_x86.h"

#define Z_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define Z_IN static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

static inline int32_t ld32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- AVX-512 ---------------------------------------------------------------------------- */

/* Group g of block b, unsigned values of 16 rows. */
Z_IN __m512i z_group(const uint8_t *sb, size_t hdr, int bits, int b, int g)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    if (bits == 2) {
        __m512i v2 = _mm512_load_si512((const void *)(sb + hdr + 128 * b + 64 * (g / 4)));
        return _mm512_and_si512(_mm512_srli_epi16(v2, 2 * (g % 4)), _mm512_set1_epi8(3));
    }
    __m512i nv = _mm512_load_si512((const void *)(sb + hdr + kern_qn_block_bytes(bits) * b + 64 * (g % 4)));
    __m512i v = g < 4 ? _mm512_and_si512(nv, m4) : _mm512_and_si512(_mm512_srli_epi16(nv, 4), m4);
    if (bits == 5) {
        __m512i h = _mm512_load_si512((const void *)(sb + hdr + kern_qn_block_bytes(bits) * b + 256));
        h = g <= 4 ? _mm512_slli_epi16(h, 4 - g) : _mm512_srli_epi16(h, g - 4);
        v = _mm512_or_si512(v, _mm512_and_si512(h, _mm512_set1_epi8(0x10)));
    } else if (bits == 6) {
        __m512i h = _mm512_load_si512((const void *)(sb + hdr + kern_qn_block_bytes(bits) * b + 256 + 64 * (g / 4)));
        int j = g % 4;
        h = j < 2 ? _mm512_slli_epi16(h, 4 - 2 * j) : j == 2 ? h : _mm512_srli_epi16(h, 2);
        v = _mm512_or_si512(v, _mm512_and_si512(h, _mm512_set1_epi8(0x30)));
    }
    return v;
}

Z_IN __m512 z_h16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
Z_IN __m512i z_u8i(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
Z_IN __m512i z_i8i(const uint8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }

/* The per-kind tile products at this width (kernels_qn_x86_tile.h): z_tables[kind][T]. */
typedef void (*zqn_fn)(const uint8_t *, size_t, size_t, int64_t, const uint8_t *, size_t, kern_xq_offs, float *,
                       int64_t, int, const __mmask16 *, int);
#define QN(name) z_##name
#define QN_I16 0
#define QN_CHAIN(v) ((void)0)
#define QN_ATTR Z_TGT
#define QN_TMAX 8
#define QN_FN zqn_fn
#define QN_H 1
#define QN_MASK __mmask16
#define VF __m512
#define VI __m512i
#define V(op) _mm512_##op
#define VI_ZERO _mm512_setzero_si512
#define VI_AND _mm512_and_si512
#define VI_OR _mm512_or_si512
#define QN_DOT(acc, w, x) _mm512_dpbusd_epi32(acc, w, x)
#define QN_DOTW(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define QN_GROUP(sb, hdr, bits, b, g, half) z_group(sb, hdr, bits, b, g)
#define QN_H16 z_h16
#define QN_U8I z_u8i
#define QN_I8I z_i8i
#define QN_STORE(p, mask, v) _mm512_mask_storeu_ps(p, mask, v)
typedef void (*zqn_pair_fn)(const uint8_t *, size_t, size_t, size_t, int64_t, const uint8_t *, size_t, kern_xq_offs,
                            float *, int64_t, const __mmask16 *, int);
#define QN_PAIR
#define QN_R 2
#define QN_PAIR_FN zqn_pair_fn
#include "kernels_qn_x86_tile.h"
#undef QN_PAIR
#undef QN_R
#undef QN_PAIR_FN
#undef QN
#undef QN_I16
#undef QN_CHAIN
#undef QN_ATTR
#undef QN_TMAX
#undef QN_FN
#undef QN_H
#undef QN_MASK
#undef VF
#undef VI
#undef V
#undef VI_ZERO
#undef VI_AND
#undef VI_OR
#undef QN_DOT
#undef QN_DOTW
#undef QN_GROUP
#undef QN_H16
#undef QN_U8I
#undef QN_I8I
#undef QN_STORE

/* From this many tokens a call whose tiles are in cache (not stream: a prompt pass's
 * later token chunks over a panel), tiles go in pairs: below it one tile is best (two
 * tokens in pairs: 0.6-0.8x). A stream call (the tiles come from memory: a batched
 * decode step, a mixture's expert with a few tokens) takes one tile at a time, up to 8
 * tokens. bench_qn, one thread, 4 and 8 tokens: the qwen3moe expert shapes (768 x 1024,
 * 1024 x 768) 1.5-2.7x, Q4_K TinyLlama shapes 1.0-1.5x, a few rows 0.8-0.95x (Q4_0 and
 * Q6_K, 4 tokens). Why the pairs fall behind from memory is not settled: having them
 * prefetch the next pair's bytes instead of their own 4 KB ahead did not close the gap. */
#define Z_PAIR_MIN 3

void kern_qn_avx512_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                          size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    const kern_qn_desc *D = kern_qn_get(wt);
    kern_xq_offs o = kern_xq_offsets(cols);
    const int64_t nb = cols / KERN_QK;
    int i = 0;
    if (nt >= Z_PAIR_MIN && !stream && z_pair_tables[wt]) {
        const int passes = (nt + 3) / 4, ps = (nt + passes - 1) / passes; /* even passes of at most 4 */
        for (; i + 1 < nr; i += 2) {
            const __mmask16 mask[2] = { kern_tile_bits(lo, hi, i), kern_tile_bits(lo, hi, i + 1) };
            for (int t = 0; t < nt; t += ps) {
                int n = nt - t < ps ? nt - t : ps;
                z_pair_tables[wt][n](w + (size_t)i * tb, tb, D->hdr, D->sb_bytes, nb, xq + (size_t)t * xs, xs, o,
                                     y + (int64_t)t * ldy + i * KERN_TILE, ldy, mask, stream && t == 0);
            }
        }
    }
    for (; i < nr; i++) { /* one tile at a time */
        const __mmask16 mask = kern_tile_bits(lo, hi, i);
        for (int t = 0; mask && t < nt; t += 8) {
            int n = nt - t < 8 ? nt - t : 8;
            z_tables[wt][n](w + (size_t)i * tb, D->hdr, D->sb_bytes, nb, xq + (size_t)t * xs, xs, o,
                            y + (int64_t)t * ldy + i * KERN_TILE, ldy, 1, &mask, stream && t == 0);
        }
    }
}

/* ---- Q8_K activations (kern_xk_quantize_ref's bytes) -------------------------------------
 * Per 256 values: amax = the largest |x| (NaN ignored, as the reference's ">" does), its
 * first occurrence's sign gives the scale -127 / v; q = round-half-even(x * scale), which
 * cvtps gives as the reference's magic-number addition does for |q| <= 127 (a NaN
 * product, which the addition makes 0, is zeroed first); then each block's sums. One
 * driver; each vector width gives the two pieces. Rows whose length is not whole
 * super-blocks take the reference. */

/* The largest |x| of 256 values, NaN ignored. */
typedef float (*xk_amax_fn)(const float *src);
/* 32 values at scale iscale: their int8 bytes at q, the sums of the two halves. */
typedef void (*xk_block_fn)(const float *src, float iscale, uint8_t *q, int32_t half[2]);

static void xk_quantize_with(xk_amax_fn amax_of, xk_block_fn block, const float *x, int64_t n_rows, int64_t cols,
                             void *xq)
{
    if (cols % 256) {
        kern_xk_quantize_ref(x, n_rows, cols, xq);
        return;
    }
    kern_xq_offs o = kern_xq_offsets(cols);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = (uint8_t *)xq + (size_t)r * kern_xq_row_bytes(cols);
        for (int64_t s0 = 0; s0 < cols; s0 += 256) {
            const float *src = x + r * cols + s0;
            float amax = amax_of(src), iscale = 0.0f, dk = 0.0f;
            if (amax != 0.0f) {
                int j = 0;
                while (fabsf(src[j]) != amax) j++; /* the first value of that magnitude */
                iscale = -127.0f / src[j];
                dk = 1.0f / iscale;
            }
            for (int b = 0; b < 8; b++) {
                int32_t h[2];
                int64_t k = s0 / KERN_QK + b;
                block(src + 32 * b, iscale, row + s0 + 32 * b, h);
                ((float *)(row + o.d))[k] = dk;
                ((int32_t *)(row + o.c))[k] = -128 * (h[0] + h[1]);
                ((int32_t *)(row + o.hs))[k] = h[0];
                ((float *)(row + o.sd))[k] = (float)(h[0] + h[1]) * dk;
            }
        }
        kern_xq_pairs(row, cols);
    }
}

static Z_TGT float z_xk_amax(const float *src)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 am = _mm512_setzero_ps();
    for (int j = 0; j < 256; j += 16) am = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(src + j)), am);
    return _mm512_reduce_max_ps(am);
}

static Z_TGT void z_xk_block(const float *src, float iscale, uint8_t *q, int32_t half[2])
{
    for (int h = 0; h < 2; h++) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(src + 16 * h), _mm512_set1_ps(iscale));
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
        __m512i qi = _mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127));
        _mm_storeu_si128((__m128i *)(q + 16 * h), _mm512_cvtepi32_epi8(qi));
        half[h] = _mm512_reduce_add_epi32(qi);
    }
}

void kern_xk_quantize_avx512(const float *x, int64_t n_rows, int64_t cols, void *xq)
{
    xk_quantize_with(z_xk_amax, z_xk_block, x, n_rows, cols, xq);
}

/* ---- AVX2 and AVX-VNNI: a tile as two halves of 8 rows ----------------------------------- */

#define Y_ATTR_0 __attribute__((target("avx2,fma,f16c")))
#define Y_ATTR_1 __attribute__((target("avx2,fma,f16c,avxvnni")))
#define Y_ATTR(V) Y_ATTR_##V
#define Y_IN static inline __attribute__((always_inline, target("avx2,fma,f16c")))

Y_IN __m256i y_group(const uint8_t *sb, size_t hdr, int bits, int b, int g, int half)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    if (bits == 2) {
        __m256i v2 = _mm256_load_si256((const __m256i *)(sb + hdr + 128 * b + 64 * (g / 4) + 32 * half));
        return _mm256_and_si256(_mm256_srli_epi16(v2, 2 * (g % 4)), _mm256_set1_epi8(3));
    }
    __m256i nv = _mm256_load_si256((const __m256i *)(sb + hdr + kern_qn_block_bytes(bits) * b + 64 * (g % 4) + 32 * half));
    __m256i v = g < 4 ? _mm256_and_si256(nv, m4) : _mm256_and_si256(_mm256_srli_epi16(nv, 4), m4);
    if (bits == 5) {
        __m256i h = _mm256_load_si256((const __m256i *)(sb + hdr + kern_qn_block_bytes(bits) * b + 256 + 32 * half));
        h = g <= 4 ? _mm256_slli_epi16(h, 4 - g) : _mm256_srli_epi16(h, g - 4);
        v = _mm256_or_si256(v, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
    } else if (bits == 6) {
        __m256i h = _mm256_load_si256((const __m256i *)(sb + hdr + kern_qn_block_bytes(bits) * b + 256 + 64 * (g / 4) + 32 * half));
        int j = g % 4;
        h = j < 2 ? _mm256_slli_epi16(h, 4 - 2 * j) : j == 2 ? h : _mm256_srli_epi16(h, 2);
        v = _mm256_or_si256(v, _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
    }
    return v;
}

Y_IN __m256 y_h16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
Y_IN __m256i y_u8i(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
Y_IN __m256i y_i8i(const uint8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* The per-kind tile products at this width (kernels_qn_x86_tile.h), once with plain AVX2
 * (y2_tables: maddubs + madd, exact since values <= 63) and once with AVX-VNNI
 * (yv_tables: vpdpbusd). */
typedef void (*yqn_fn)(const uint8_t *, size_t, size_t, int64_t, const uint8_t *, size_t, kern_xq_offs, float *,
                       int64_t, int, const __m256i *, int);
#define QN_TMAX 4
#define QN_FN yqn_fn
#define QN_H 2
#define QN_MASK __m256i
#define VF __m256
#define VI __m256i
#define V(op) _mm256_##op
#define VI_ZERO _mm256_setzero_si256
#define VI_AND _mm256_and_si256
#define VI_OR _mm256_or_si256
#define QN_GROUP y_group
#define QN_H16 y_h16
#define QN_U8I y_u8i
#define QN_I8I y_i8i
#define QN_STORE(p, mask, v) _mm256_maskstore_ps(p, mask, v)

#define QN(name) y2_##name
#define QN_ATTR Y_ATTR(0)
#define QN_I16 1
#define QN_CHAIN KERN_X86_CHAIN
#define QN_DOT(acc, w, x) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)))
#define QN_DOTW(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#include "kernels_qn_x86_tile.h"
#undef QN
#undef QN_ATTR
#undef QN_I16
#undef QN_CHAIN
#undef QN_DOT
#undef QN_DOTW

#define QN(name) yv_##name
#define QN_I16 0
#define QN_CHAIN(v) ((void)0)
#define QN_ATTR Y_ATTR(1)
#define QN_DOT(acc, w, x) _mm256_dpbusd_avx_epi32(acc, w, x)
#define QN_DOTW(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#include "kernels_qn_x86_tile.h"
#undef QN
#undef QN_I16
#undef QN_CHAIN
#undef QN_ATTR
#undef QN_DOT
#undef QN_DOTW

#undef QN_TMAX
#undef QN_FN
#undef QN_H
#undef QN_MASK
#undef VF
#undef VI
#undef V
#undef VI_ZERO
#undef VI_AND
#undef VI_OR
#undef QN_GROUP
#undef QN_H16
#undef QN_U8I
#undef QN_I8I
#undef QN_STORE

/* Tiles [0, nr) (tb bytes apart), lanes [lo, hi) of them, times nt tokens, 4 a call. The
 * offsets into the token rows and a whole tile's store masks are made once for all the
 * tiles. A function called per tile to make them took 7% of an AVX2 decode step of 8
 * sessions on the qwen3moe shape, whose expert tiles are only 4 super-blocks long (perf
 * put 2.7% in this one; bench/engine, 2 threads, alternated: 8 sessions 117-130 -> 122-134
 * tok/s, 1 session 62-64 -> 65-71; TinyLlama's long tiles the same). */
static Y_ATTR(0) void y_blocks(const yqn_fn *const *tables, int wt, const uint8_t *w, size_t tb, int nr,
                               int64_t cols, const uint8_t *xq, size_t xs, int nt, float *y, int64_t ldy, int lo,
                               int hi, int stream)
{
    const kern_qn_desc *D = kern_qn_get(wt);
    const kern_xq_offs o = kern_xq_offsets(cols);
    const int64_t nb = cols / KERN_QK;
    __m256i whole[2], part[2];
    kern_x86_halves(0, KERN_TILE, whole);
    for (int i = 0, a, z; i < nr; i++) {
        if (!kern_tile_lanes(lo, hi, i, &a, &z)) continue;
        const int cut = a > 0 || z < KERN_TILE, halves = cut ? kern_x86_halves(a, z, part) : 3;
        for (int t = 0; t < nt; t += 4) {
            int n = nt - t < 4 ? nt - t : 4;
            tables[wt][n](w + (size_t)i * tb, D->hdr, D->sb_bytes, nb, xq + (size_t)t * xs, xs, o,
                          y + i * KERN_TILE + (int64_t)t * ldy, ldy, halves, cut ? part : whole, stream && t == 0);
        }
    }
}

void kern_qn_avx2_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                        size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    y_blocks(y2_tables, wt, w, tb, nr, cols, xq, xs, nt, y, ldy, lo, hi, stream);
}

void kern_qn_avxvnni_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                           size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    y_blocks(yv_tables, wt, w, tb, nr, cols, xq, xs, nt, y, ldy, lo, hi, stream);
}

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) int32_t y_hsum(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static Y_ATTR(0) float y_xk_amax(const float *src)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 am = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) am = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + j)), am);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
}

static Y_ATTR(0) void y_xk_block(const float *src, float iscale, uint8_t *q, int32_t half[2])
{
    /* the low byte of each int32 lane, in order */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i sum = _mm256_setzero_si256();
    for (int e = 0; e < 4; e++) { /* eighths of 8 values */
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + 8 * e), _mm256_set1_ps(iscale));
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        __m256i qi = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
        __m256i b = _mm256_shuffle_epi8(qi, pick);
        uint32_t lo = (uint32_t)_mm256_extract_epi32(b, 0), hi = (uint32_t)_mm256_extract_epi32(b, 4);
        memcpy(q + 8 * e, &lo, 4);
        memcpy(q + 8 * e + 4, &hi, 4);
        sum = _mm256_add_epi32(sum, qi);
        if (e % 2) {
            half[e / 2] = y_hsum(sum);
            sum = _mm256_setzero_si256();
        }
    }
}

void kern_xk_quantize_avx2(const float *x, int64_t n_rows, int64_t cols, void *xq)
{
    xk_quantize_with(y_xk_amax, y_xk_block, x, n_rows, cols, xq);
}

#endif
