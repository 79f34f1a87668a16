/*
 * kernels_avx2.c - the 256-bit x86 tables: "avx2" (AVX2 + FMA + F16C) and "avxvnni"
 * (the same plus AVX-VNNI's VEX vpdpbusd, e.g. Alder Lake), and the activation quantizer
 * and float helpers every x86 table shares (kernels_x86.h).
 *
 * Compiled with per-function target attributes (the Makefile has no -march), and only
 * ever called after kernels.c checked the CPU. A q8t tile is walked as two halves of 8
 * rows (one ymm of a 64-byte group each). Per block, the int32 dot of every (row, token)
 * is exact: "avx2" takes w's sign onto x (maddubs of |w| and sign(x, w), madd with ones,
 * both exact for |w|, |x| <= 127), "avxvnni" feeds the stored w + 128 to vpdpbusd
 * starting from the token's -128 * sum(x). Then, as kernels.h's contract says, one
 * cvt + mul + fma per block for 8 rows, bit-identical with the scalar twin.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "f16.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define TGT_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

#include "kernels_x86.h"

TGT_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

static inline int32_t load_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- activation quantization (bit-exact with scalar_xq_quantize) ----
 * Per 8 blocks: each block's amax, then the 8 scales and reciprocals in one vector,
 * then each block scaled, rounded (MXCSR: to nearest even), saturated to int8 (packs)
 * and summed (vpsadbw on the biased bytes). */
TGT void kern_x86_xq_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    const int64_t nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        int8_t *q = (int8_t *)dst + (size_t)r * kern_xq_row_bytes(cols);
        float *d = (float *)(q + nbp * KERN_QK);
        int32_t *c = (int32_t *)(d + nbp);
        for (int64_t i0 = 0; i0 < nbp; i0 += 8) {
            int m = nbp - i0 < 8 ? (int)(nbp - i0) : 8;
            float blk[8][KERN_QK], am[8] = {0}, dv[8], id[8];
            for (int j = 0; j < m; j++) {
                int64_t o = (i0 + j) * KERN_QK, left = cols - o;
                __m256 v[4];
                if (left >= KERN_QK) {
                    for (int h = 0; h < 4; h++) v[h] = _mm256_loadu_ps(src + o + 8 * h);
                } else {
                    float tmp[KERN_QK] = {0};
                    if (left > 0) memcpy(tmp, src + o, (size_t)left * sizeof(float));
                    for (int h = 0; h < 4; h++) v[h] = _mm256_loadu_ps(tmp + 8 * h);
                }
                for (int h = 0; h < 4; h++) _mm256_storeu_ps(blk[j] + 8 * h, v[h]);
                __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                          _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
                __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
                m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
                am[j] = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
            }
            __m256 A = _mm256_loadu_ps(am);
            _mm256_storeu_ps(dv, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_div_ps(A, _mm256_set1_ps(127.0f)),
                                                                _MM_FROUND_TO_NEAREST_INT)));
            __m256 nz = _mm256_cmp_ps(A, _mm256_setzero_ps(), _CMP_NEQ_UQ);
            _mm256_storeu_ps(id, _mm256_and_ps(nz, _mm256_div_ps(_mm256_set1_ps(127.0f), A)));
            memcpy(d + i0, dv, (size_t)m * sizeof(float));
            for (int j = 0; j < m; j++) {
                const __m256 s = _mm256_set1_ps(id[j]);
                __m256i qi[4];
                for (int h = 0; h < 4; h++) qi[h] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(blk[j] + 8 * h), s));
                /* packs work per 128-bit lane: undo the interleave with a permute */
                __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
                p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256((__m256i *)(q + (i0 + j) * KERN_QK), p);
                __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
                __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
                c[i0 + j] = -128 * ((int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - KERN_QK * 128);
            }
        }
    }
}

/* ---- q8t products ---- */

/* AVX2: the halves of a tile (8 rows each, one ymm of a 64-byte group) in bit h of halves
 * times T tokens. NH is how many the function holds sums for: 1 (one half, the pass over
 * the tile repeated per half: prompt chunks, whose tile stays in cache) or 2 (both, super-
 * block by super-block, so that decode reads each line from memory once, the second half
 * finding the super-block in L1). Per block and group the 8 rows' four values are one ymm;
 * DOT adds its dot with one token's four values (broadcast) to that token's int32 lanes,
 * which INIT started for the block. pf (a streamed call's first pass: the tile comes from
 * memory) prefetches each super-block's lines KERN_X86_PF_DIST bytes ahead: the AVX2 products do
 * enough per byte that the hardware prefetcher alone fell behind (bench_qn 5632 x 2048,
 * one thread, one token: 21-22 -> 27-29 GB/s; TinyLlama Q8_0 tg128 on the avx2 table,
 * 14.3 -> 23.2-24.8 tok/s with one thread, 28.7-29.4 -> 37.7-41.0 with two). The AVX-VNNI
 * products of 1-2 tokens stream best unaided; from 3 tokens they prefetch too (4 tokens:
 * 18-24 -> 26-27 GB/s on one thread). */
#define YMICRO(NAME, T, NH, ATTR, INIT, PREP, DOT)                                          \
static ATTR void NAME##_##T(const uint8_t *w, int64_t nsb, int halves, const uint8_t *xq, size_t xs, \
                     float *y, int64_t ldy, const __m256i *mask, int pf)                     \
{                                                                                            \
    const int64_t nbp = nsb * KERN_SB_BLOCKS;                                                \
    const __m256i ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi8((char)0x80);          \
    (void)ones; (void)bias;                                                                  \
    __m256 acc[NH][T];                                                                       \
    _Pragma("GCC unroll 2") for (int j = 0; j < NH; j++)                                    \
        _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) acc[j][t] = _mm256_setzero_ps(); \
    for (int64_t s = 0; s < nsb; s++) {                                                      \
        const kern_q8t_sb *sb = (const kern_q8t_sb *)w + s;                                  \
        if (pf) kern_x86_prefetch_ahead(sb, sizeof *sb); /* the tile's first pass from memory */ \
        _Pragma("GCC unroll 2") for (int j = 0; j < NH; j++) {                              \
            const int half = NH == 1 ? halves >> 1 : j; /* NH 1: halves is 1 << half */      \
            if (NH == 2 && !(halves >> j & 1)) continue;                                     \
            _Pragma("GCC unroll 2") for (int b = 0; b < KERN_SB_BLOCKS; b++) {              \
                int64_t k = s * KERN_SB_BLOCKS + b;                                          \
                __m256i is[T];                                                               \
                _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) is[t] = INIT;          \
                _Pragma("GCC unroll 8") for (int g = 0; g < KERN_QK / 4; g++) {             \
                    __m256i wv = _mm256_load_si256((const __m256i *)sb->q[b][g] + half);     \
                    PREP                                                                     \
                    _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) {                  \
                        __m256i xb = _mm256_set1_epi32(load_i32(xq + t * xs + k * KERN_QK + 4 * g)); \
                        is[t] = DOT;                                                         \
                        KERN_X86_CHAIN(is[t]);                                               \
                    }                                                                        \
                }                                                                            \
                __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)sb->d[b] + half)); \
                _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) {                      \
                    const float *dx = (const float *)(xq + t * xs + nbp * KERN_QK);          \
                    __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx + k));              \
                    acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), sc, acc[j][t]);   \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    _Pragma("GCC unroll 2") for (int j = 0; j < NH; j++) {                                  \
        const int half = NH == 1 ? halves >> 1 : j;                                          \
        if (NH == 2 && !(halves >> j & 1)) continue;                                         \
        _Pragma("GCC unroll 16") for (int t = 0; t < T; t++)                                \
            _mm256_maskstore_ps(y + t * ldy + 8 * half, mask[half], acc[j][t]);              \
    }                                                                                        \
}

/* AVX2: signed w = stored ^ 0x80, |w| once per group, sign(x, w) per token. */
#define A2_INIT _mm256_setzero_si256()
#define A2_PREP __m256i ws = _mm256_xor_si256(wv, bias), aw = _mm256_sign_epi8(ws, ws);
#define A2_DOT _mm256_add_epi32(is[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, ws)), ones))

#define A2(T) YMICRO(a2_micro, T, 1, TGT, A2_INIT, A2_PREP, A2_DOT)
#define A2B(T) YMICRO(a2_both, T, 2, TGT, A2_INIT, A2_PREP, A2_DOT)
A2(1) A2(2) A2(3) A2(4) A2(5) A2B(1) A2B(2) A2B(3) A2B(4)

/* AVX-VNNI: both halves of a tile times T tokens, so each token's broadcast feeds two
 * vpdpbusd (2 x 3 x 2 accumulators + 2 weight vectors + the broadcast: 15 registers). */
#define VN2(T)                                                                               \
static TGT_VNNI void vn2_micro_##T(const uint8_t *w, int64_t nsb, const uint8_t *xq, size_t xs,   \
                                   float *y, int64_t ldy, __m256i m0, __m256i m1, int pf)    \
{                                                                                            \
    const int64_t nbp = nsb * KERN_SB_BLOCKS;                                                \
    __m256 acc[2][T];                                                                        \
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                                     \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[h][t] = _mm256_setzero_ps(); \
    for (int64_t s = 0; s < nsb; s++) {                                                      \
        const kern_q8t_sb *sb = (const kern_q8t_sb *)w + s;                                  \
        if (T > 2 && pf) /* a first pass from memory of 3 tokens (1-2 stream best unaided) */ \
            kern_x86_prefetch_ahead(sb, sizeof *sb);                                         \
        _Pragma("GCC unroll 2") for (int b = 0; b < KERN_SB_BLOCKS; b++) {                  \
            int64_t k = s * KERN_SB_BLOCKS + b;                                              \
            __m256i is[2][T];                                                                \
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                             \
                is[0][t] = is[1][t] = _mm256_set1_epi32(((const int32_t *)(xq + t * xs + nbp * (KERN_QK + 4)))[k]); \
            _Pragma("GCC unroll 8") for (int g = 0; g < KERN_QK / 4; g++) {                 \
                __m256i w0 = _mm256_load_si256((const __m256i *)sb->q[b][g]);                \
                __m256i w1 = _mm256_load_si256((const __m256i *)sb->q[b][g] + 1);            \
                _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                       \
                    __m256i xb = _mm256_set1_epi32(load_i32(xq + t * xs + k * KERN_QK + 4 * g)); \
                    is[0][t] = _mm256_dpbusd_avx_epi32(is[0][t], w0, xb);                    \
                    is[1][t] = _mm256_dpbusd_avx_epi32(is[1][t], w1, xb);                    \
                }                                                                            \
            }                                                                                \
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                           \
                __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)sb->d[b] + h));  \
                _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                       \
                    const float *dx = (const float *)(xq + t * xs + nbp * KERN_QK);          \
                    __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx + k));              \
                    acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[h][t]), sc, acc[h][t]); \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                                   \
        _mm256_maskstore_ps(y + t * ldy, m0, acc[0][t]);                                     \
        _mm256_maskstore_ps(y + t * ldy + 8, m1, acc[1][t]);                                 \
    }                                                                                        \
}
VN2(1) VN2(2) VN2(3)
typedef void (*vn2_fn)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t, __m256i, __m256i, int);
static const vn2_fn vn2_micros[] = { NULL, vn2_micro_1, vn2_micro_2, vn2_micro_3 };

typedef void (*ymicro_fn)(const uint8_t *, int64_t, int, const uint8_t *, size_t, float *, int64_t, const __m256i *,
                          int);
static const ymicro_fn a2_micros[] = { NULL, a2_micro_1, a2_micro_2, a2_micro_3, a2_micro_4, a2_micro_5 };
/* Most tokens of a pass over both halves of a tile (a2_both). */
#define A2_BOTH_MAX 4
static const ymicro_fn a2_both[] = { NULL, a2_both_1, a2_both_2, a2_both_3, a2_both_4 };

/* kern_q8t_block_fn. A streamed product (decode, small batches: the tiles come from
 * memory) takes a tile's halves together, tokens in even chunks of at most A2_BOTH_MAX, so
 * that each line is read from memory once; a pass per half read every line for half its
 * bytes (4 sessions: 0.8x). Prompt chunks, whose panel stays in L2, take each half,
 * tokens in chunks of the largest micro. */
static TGT void avx2_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq,
                               size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    const int passes = (nt + A2_BOTH_MAX - 1) / A2_BOTH_MAX, ps = (nt + passes - 1) / passes;
    for (int i = 0, a, z; i < nr; i++) {
        if (!kern_tile_lanes(lo, hi, i, &a, &z)) continue;
        __m256i mask[2];
        const int halves = kern_x86_halves(a, z, mask);
        const uint8_t *tile = w + (size_t)i * tb;
        float *yt = y + i * KERN_TILE;
        if (stream || nt <= 2) {
            for (int t = 0; t < nt; t += ps) {
                int n = nt - t < ps ? nt - t : ps;
                a2_both[n](tile, nsb, halves, xq + (size_t)t * xs, xs, yt + (int64_t)t * ldy, ldy, mask,
                           stream && t == 0);
            }
            continue;
        }
        for (int h = 0; h < 2; h++) {
            if (!(halves >> h & 1)) continue;
            for (int t = 0; t < nt; t += 5) {
                int n = nt - t < 5 ? nt - t : 5;
                a2_micros[n](tile, nsb, 1 << h, xq + (size_t)t * xs, xs, yt + (int64_t)t * ldy, ldy, mask, 0);
            }
        }
    }
}

static TGT void avxvnni_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq,
                                  size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    for (int i = 0; i < nr; i++) {
        __m256i m[2];
        kern_x86_halves(lo - KERN_TILE * i, hi - KERN_TILE * i, m);
        for (int t = 0; t < nt; t += 3) {
            int n = nt - t < 3 ? nt - t : 3;
            vn2_micros[n](w + (size_t)i * tb, nsb, xq + (size_t)t * xs, xs, y + (int64_t)t * ldy + i * KERN_TILE,
                          ldy, m[0], m[1], stream && t == 0);
        }
    }
}

/* ---- float helpers ---- */

TGT float kern_avx2_f32_dot(const float *a, const float *b, int64_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

TGT void kern_avx2_f32_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

TGT_INLINE __m256 load_h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

TGT float kern_avx2_f16_dot(const uint16_t *a, const float *b, int64_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(load_h8(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(load_h8(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_h8(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += half_to_float(a[i]) * b[i];
    return s;
}

TGT void kern_avx2_f16_axpy(float *y, float a, const uint16_t *x, int64_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_h8(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * half_to_float(x[i]);
}

TGT void kern_avx2_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = f32_to_f16(x[i]);
}

TGT void kern_avx2_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_h8(x + i));
    for (; i < n; i++) y[i] = half_to_float(x[i]);
}

/* Four weight rows against each token in turn: x is loaded once per 8 columns, and
 * the four rows stay in L1 while all the tokens pass (W is read once per call). */
#define F_MATMUL(NAME, WT, LOADW, CVTW)                                                     \
TGT void NAME(const WT *w, int64_t cols, const float *x, int64_t n_tok,                     \
              float *y, int64_t ldy, int64_t r0, int64_t r1)                                \
{                                                                                           \
    int64_t r = r0;                                                                         \
    for (; r + 4 <= r1; r += 4) {                                                           \
        const WT *w0 = w + r * cols, *w1 = w0 + cols, *w2 = w1 + cols, *w3 = w2 + cols;     \
        for (int64_t t = 0; t < n_tok; t++) {                                               \
            const float *xt = x + t * cols;                                                 \
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                     \
            int64_t i = 0;                                                                  \
            for (; i + 8 <= cols; i += 8) {                                                 \
                __m256 xv = _mm256_loadu_ps(xt + i);                                        \
                a0 = _mm256_fmadd_ps(LOADW(w0 + i), xv, a0);                                \
                a1 = _mm256_fmadd_ps(LOADW(w1 + i), xv, a1);                                \
                a2 = _mm256_fmadd_ps(LOADW(w2 + i), xv, a2);                                \
                a3 = _mm256_fmadd_ps(LOADW(w3 + i), xv, a3);                                \
            }                                                                               \
            float s0 = hsum8(a0), s1 = hsum8(a1), s2 = hsum8(a2), s3 = hsum8(a3);          \
            for (; i < cols; i++) {                                                         \
                s0 += CVTW(w0[i]) * xt[i]; s1 += CVTW(w1[i]) * xt[i];                       \
                s2 += CVTW(w2[i]) * xt[i]; s3 += CVTW(w3[i]) * xt[i];                       \
            }                                                                               \
            float *yt = y + t * ldy + r;                                                    \
            yt[0] = s0; yt[1] = s1; yt[2] = s2; yt[3] = s3;                                 \
        }                                                                                   \
    }                                                                                       \
    for (; r < r1; r++) {                                                                   \
        const WT *wr = w + r * cols;                                                        \
        for (int64_t t = 0; t < n_tok; t++) {                                               \
            const float *xt = x + t * cols;                                                 \
            __m256 a0 = _mm256_setzero_ps();                                                \
            int64_t i = 0;                                                                  \
            for (; i + 8 <= cols; i += 8) a0 = _mm256_fmadd_ps(LOADW(wr + i), _mm256_loadu_ps(xt + i), a0); \
            float s = hsum8(a0);                                                            \
            for (; i < cols; i++) s += CVTW(wr[i]) * xt[i];                                 \
            y[t * ldy + r] = s;                                                             \
        }                                                                                   \
    }                                                                                       \
}

#define LOAD_F32(p) _mm256_loadu_ps(p)
#define CVT_F32(v) (v)
F_MATMUL(kern_avx2_f32_matmul, float, LOAD_F32, CVT_F32)


/* ---- attention and element-wise pieces (kernels.h states the order) ---- */

/* kern_expf on 8 lanes, step for step. */
TGT_INLINE __m256 y_expf(__m256 x)
{
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_GT_OQ);
    __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    y = _mm256_and_ps(y, ok);                                  /* below -87 (or NaN): 0 */
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), big);
    return _mm256_blendv_ps(y, x, nan);
}

/* 8 values (floats or halves) from base[i]. */
TGT_INLINE __m256 y_load(const void *base, int64_t i, int f16)
{
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
    return _mm256_loadu_ps((const float *)base + i);
}

/* R query rows x one key tile (two ymm of 8 keys), two chains over d (even, odd). */
TGT_INLINE void y_qk_body(const float *q, int64_t qs, const void *kt, int f16, int d, float scale,
                          float *sc, int64_t lds, const int R)
{
    __m256 acc[3][2][2];
    _Pragma("GCC unroll 3") for (int r = 0; r < R; r++)
        acc[r][0][0] = acc[r][0][1] = acc[r][1][0] = acc[r][1][1] = _mm256_setzero_ps();
    for (int k = 0; k < d; k += 2) {
        _Pragma("GCC unroll 2") for (int c = 0; c < 2; c++) {
            if (k + c >= d) break; /* odd d: the last term joins the even chain */
            __m256 k0 = y_load(kt, (int64_t)(k + c) * KERN_TILE, f16);
            __m256 k1 = y_load(kt, (int64_t)(k + c) * KERN_TILE + 8, f16);
            _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
                __m256 qb = _mm256_broadcast_ss(q + r * qs + k + c);
                acc[r][0][c] = _mm256_fmadd_ps(qb, k0, acc[r][0][c]);
                acc[r][1][c] = _mm256_fmadd_ps(qb, k1, acc[r][1][c]);
            }
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(sc + r * lds, _mm256_mul_ps(_mm256_add_ps(acc[r][0][0], acc[r][0][1]), vs));
        _mm256_storeu_ps(sc + r * lds + 8, _mm256_mul_ps(_mm256_add_ps(acc[r][1][0], acc[r][1][1]), vs));
    }
}

#define YQK_CASE(R) case R: y_qk_body(q, qs, kt, f16, d, scale, sc, lds, R); break;
#define YQK_FN(NAME, F16)                                                                  \
static TGT void NAME(const float *q, int64_t qs, int R, const void *kt, int d, float scale,  \
                     float *sc, int64_t lds)                                                \
{                                                                                           \
    const int f16 = F16;                                                                    \
    switch (R) { YQK_CASE(1) YQK_CASE(2) YQK_CASE(3) }                                      \
}
YQK_FN(y_qk_h, 1)
YQK_FN(y_qk_f, 0)

/* R query rows (kern_qq, nb blocks each) x one q8_0 key tile: per 32-dim group the
 * exact integer dots, vpmaddwd of the keys and a quad of 254 h + l (it fits int16) of the
 * query, a lane holding half of a position's quad, pairs added at the group's end; then
 * the block's fma of the chain. The quads come made (y_qk8_quads): qw holds row r's
 * quad kq of block b at qw[(r * nb + b) * 8 + kq]. */
TGT_INLINE void y_qk8_body(const kern_qq *qq, const int64_t *qw, int nb, const uint8_t *t, float scale, float *sc,
                           int64_t lds, const int R)
{
    __m256 acc[2][2];
    _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *g = t + (size_t)b * KERN_KVQ_GROUP;
        __m256i is[2][4];
        _Pragma("GCC unroll 2") for (int r = 0; r < R; r++)
            is[r][0] = is[r][1] = is[r][2] = is[r][3] = _mm256_setzero_si256();
        for (int kq = 0; kq < KERN_QK / 4; kq++) {
            __m256i k16[4]; /* positions 4c .. 4c + 3 */
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                k16[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + KERN_KVQ_AT(4 * kq, 4 * c))));
            _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {
                const __m256i qv = _mm256_set1_epi64x(qw[((size_t)r * nb + b) * 8 + kq]);
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                    is[r][c] = _mm256_add_epi32(is[r][c], _mm256_madd_epi16(k16[c], qv));
            }
        }
        const __m256 dk0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        const __m256 dk1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
        _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {
            /* hadd: [p0 p1 p4 p5 | p2 p3 p6 p7]; the permute puts them in order */
            __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(is[r][0], is[r][1]), 0xD8);
            __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(is[r][2], is[r][3]), 0xD8);
            const __m256 u = _mm256_set1_ps(qq[r * nb + b].u);
            acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(dk0, u), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(dk1, u), acc[r][1]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(sc + r * lds, _mm256_mul_ps(acc[r][0], vs));
        _mm256_storeu_ps(sc + r * lds + 8, _mm256_mul_ps(acc[r][1], vs));
    }
}

/* The quads of 254 h + l of rows [0, R) of qq (nb blocks each), 4 int16 to a word, as
 * y_qk8_body takes them: made once for all the tiles of a call. */
static TGT void y_qk8_quads(const kern_qq *qq, int R, int nb, int64_t *qw)
{
    for (int rb = 0; rb < R * nb; rb++)
        for (int kq = 0; kq < KERN_QK / 4; kq++) {
            int32_t wh, wl;
            memcpy(&wh, qq[rb].h + 4 * kq, 4);
            memcpy(&wl, qq[rb].l + 4 * kq, 4);
            const __m128i q16 = _mm_add_epi16(_mm_mullo_epi16(_mm_cvtepi8_epi16(_mm_cvtsi32_si128(wh)), _mm_set1_epi16(254)),
                                              _mm_cvtepi8_epi16(_mm_cvtsi32_si128(wl)));
            qw[(size_t)rb * 8 + kq] = _mm_cvtsi128_si64(q16);
        }
}

/* How far ahead the scores fetch a head's slice of the key tiles (its slices are kv_dim x
 * 16 apart, across pages, where the hardware prefetchers stop): about Y_PF_BYTES, in
 * whole tiles of slices of sb bytes. bench_attn 4096 avx2 on Zen 5, q8_0 (1,088-byte
 * slices): none 14.4-14.5 ms, 1 tile 12.7-13.0, 4 12.4-12.7, 8 12.2-12.6. */
#define Y_PF_BYTES 8192
static inline int64_t y_pf_tiles(size_t sb) { return sb >= Y_PF_BYTES ? 1 : (int64_t)(Y_PF_BYTES / sb); }

TGT void kern_avx2_att_qk8(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles,
                           float scale, float *sc, int64_t lds)
{
    const int nb = d / KERN_QK;
    const size_t sb = (size_t)nb * KERN_KVQ_GROUP, tb = kern_kv_bytes(KERN_KV_Q8_0, kts);
    const int64_t pf = y_pf_tiles(sb);
    int64_t qw[2 * (KERN_ATT_MAX_DIM / KERN_QK) * 8];
    LLM_ASSERT(d <= KERN_ATT_MAX_DIM);
    for (int r0 = 0; r0 < nq; r0 += 2) {
        const int R = nq - r0 >= 2 ? 2 : 1;
        y_qk8_quads(qq + (size_t)r0 * nb, R, nb, qw);
        for (int64_t i = 0; i < ntiles; i++) {
            const uint8_t *t = (const uint8_t *)kt + (size_t)i * tb;
            if (r0 == 0 && i + pf < ntiles) /* a first pass: the head's slice of the tile ahead */
                kern_x86_prefetch(t + pf * tb, sb);
            float *o = sc + r0 * lds + i * KERN_TILE;
            if (R == 2) y_qk8_body(qq + (size_t)r0 * nb, qw, nb, t, scale, o, lds, 2);
            else y_qk8_body(qq + (size_t)r0 * nb, qw, nb, t, scale, o, lds, 1);
        }
    }
}

/* f16 key tiles are widened to f32 once, into an L1 buffer, for all the row groups (the
 * same values: a half is exact in float); each row group would otherwise widen the tile
 * again, and vcvtph2ps, not the fma, bounds the product. */
static TGT void y_qk_widened(const float *q, int64_t qs, int nq, const uint16_t *kt, int64_t kts, int d,
                             int64_t ntiles, float scale, float *sc, int64_t lds)
{
    float kf[KERN_ATT_MAX_DIM * KERN_TILE] __attribute__((aligned(32)));
    const int64_t n = (int64_t)d * KERN_TILE;
    const size_t tile_bytes = kern_kv_bytes(KERN_KV_F16, n);
    const int64_t pf = y_pf_tiles(tile_bytes);
    LLM_ASSERT(d <= KERN_ATT_MAX_DIM);
    for (int64_t i = 0; i < ntiles; i++) {
        const uint16_t *t = kt + i * kts;
        if (i + pf < ntiles) kern_x86_prefetch(t + pf * kts, tile_bytes);
        for (int64_t j = 0; j < n; j += 8) _mm256_store_ps(kf + j, y_load(t, j, 1));
        for (int r0 = 0; r0 < nq; r0 += 3) {
            int R = nq - r0 < 3 ? nq - r0 : 3;
            y_qk_f(q + r0 * qs, qs, R, kf, d, scale, sc + r0 * lds + i * KERN_TILE, lds);
        }
    }
}

TGT void kern_avx2_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int kvt, int d,
                          int64_t ntiles, float scale, float *sc, int64_t lds)
{
    if (kvt == KERN_KV_F16 && nq > 3) {
        y_qk_widened(q, qs, nq, kt, kts, d, ntiles, scale, sc, lds);
        return;
    }
    for (int r0 = 0; r0 < nq; r0 += 3) {
        int R = nq - r0 < 3 ? nq - r0 : 3;
        for (int64_t i = 0; i < ntiles; i++) {
            const void *t = (const char *)kt + kern_kv_bytes(kvt, i * kts);
            float *o = sc + r0 * lds + i * KERN_TILE;
            if (kvt == KERN_KV_F16) y_qk_h(q + r0 * qs, qs, R, t, d, scale, o, lds);
            else y_qk_f(q + r0 * qs, qs, R, t, d, scale, o, lds);
        }
    }
}

/* R rows x 16 output dims (two ymm): chains over t. */
TGT_INLINE void y_pv_body(const float *p, int64_t lds, int64_t a, int64_t b, const void *v, int64_t vs,
                          int f16, float *out, int64_t os, const int R)
{
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        acc[r][0] = _mm256_loadu_ps(out + r * os);
        acc[r][1] = _mm256_loadu_ps(out + r * os + 8);
    }
    for (int64_t t = a; t <= b; t++) {
        __m256 v0 = y_load(v, t * vs, f16), v1 = y_load(v, t * vs + 8, f16);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            __m256 pb = _mm256_broadcast_ss(p + r * lds + t);
            acc[r][0] = _mm256_fmadd_ps(pb, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(pb, v1, acc[r][1]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(out + r * os, acc[r][0]);
        _mm256_storeu_ps(out + r * os + 8, acc[r][1]);
    }
}

#define YPV_CASE(R) case R: y_pv_body(p, lds, a, b, v, vs, f16, out, os, R); break;
#define YPV_FN(NAME, F16)                                                                  \
static TGT void NAME(const float *p, int64_t lds, int R, int64_t a, int64_t b, const void *v, \
                     int64_t vs, float *out, int64_t os)                                    \
{                                                                                           \
    const int f16 = F16;                                                                    \
    switch (R) { YPV_CASE(1) YPV_CASE(2) YPV_CASE(3) YPV_CASE(4) }                          \
}
YPV_FN(y_pv_h, 1)
YPV_FN(y_pv_f, 0)

/* R rows x 16 output dims at byte offset o of q8_0 value rows (rb bytes apart; the 16
 * in one block, at value offset h): chains over t of p * (exact scale * int8). */
TGT_INLINE void y_pv_q_body(const float *p, int64_t lds, int64_t a, int64_t b, const uint8_t *v, size_t rb, int h,
                            float *out, int64_t os, const int R)
{
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        acc[r][0] = _mm256_loadu_ps(out + r * os);
        acc[r][1] = _mm256_loadu_ps(out + r * os + 8);
    }
    for (int64_t t = a; t <= b; t++) {
        const uint8_t *blk = v + (size_t)t * rb;
        const __m256 sv = _mm256_set1_ps(half_to_float(*(const uint16_t *)blk));
        __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2 + h));
        __m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), sv);
        __m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), sv);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            __m256 pb = _mm256_broadcast_ss(p + r * lds + t);
            acc[r][0] = _mm256_fmadd_ps(pb, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(pb, v1, acc[r][1]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(out + r * os, acc[r][0]);
        _mm256_storeu_ps(out + r * os + 8, acc[r][1]);
    }
}

static TGT void y_pv_q(const float *p, int64_t lds, int R, int64_t a, int64_t b, const uint8_t *v, size_t rb, int h,
                       float *out, int64_t os)
{
    switch (R) {
    case 1: y_pv_q_body(p, lds, a, b, v, rb, h, out, os, 1); break;
    case 2: y_pv_q_body(p, lds, a, b, v, rb, h, out, os, 2); break;
    case 3: y_pv_q_body(p, lds, a, b, v, rb, h, out, os, 3); break;
    default: y_pv_q_body(p, lds, a, b, v, rb, h, out, os, 4); break;
    }
}

/* Positions [a, b] of kern_avx2_att_pv: every 16-dim slice and group of rows. */
static TGT void y_pv_span(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v, int64_t vs,
                          int kvt, int d, float *out, int64_t os)
{
    if (kvt == KERN_KV_Q8_0) { /* d is a multiple of 32 */
        for (int d0 = 0; d0 < d; d0 += 16)
            for (int r0 = 0; r0 < nq; r0 += 4)
                y_pv_q(p + r0 * lds, lds, nq - r0 < 4 ? nq - r0 : 4, a, b, (const uint8_t *)v + (size_t)(d0 / KERN_QK) * 34,
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
            if (f16) y_pv_h(p + r0 * lds, lds, R, a, b, vd, vs, out + r0 * os + d0, os);
            else y_pv_f(p + r0 * lds, lds, R, a, b, vd, vs, out + r0 * os + d0, os);
        }
    }
    for (int r = 0; r < nq; r++) /* the last d % 16 dims: the same chains, one at a time */
        for (int i = d16; i < d; i++) {
            float acc = out[r * os + i];
            for (int64_t t = a; t <= b; t++) {
                float vt = f16 ? half_to_float(((const uint16_t *)v)[t * vs + i]) : ((const float *)v)[t * vs + i];
                acc = __builtin_fmaf(p[r * lds + t], vt, acc);
            }
            out[r * os + i] = acc;
        }
}

/* 64 positions at a time, so that the slices and row groups after the first find those
 * value rows in L1 (rows vs apart), the next 64 fetched ahead; each chain still runs
 * over t in order. (f16 rows widened to f32 once for all the slices and row groups, as
 * y_qk_widened does with key tiles, made bench_attn slower: 14.6 -> 16.4-17.4 ms.) */
TGT void kern_avx2_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                          int64_t vs, int kvt, int d, float *out, int64_t os)
{
    const size_t rb = kern_kv_bytes(kvt, vs), sb = kern_kv_bytes(kvt, d);
    for (int64_t t0 = a; t0 <= b; t0 += 64) {
        const int64_t t1 = b < t0 + 63 ? b : t0 + 63, pe = b < t1 + 64 ? b : t1 + 64;
        for (int64_t t = t1 + 1; t <= pe; t++)
            kern_x86_prefetch((const char *)v + (size_t)t * rb, sb);
        y_pv_span(p, lds, nq, t0, t1, v, vs, kvt, d, out, os);
    }
}

TGT void kern_avx2_softmax(float *s, int64_t n)
{
    __m256 m = _mm256_set1_ps(-__builtin_inff());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(s + i), m);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float mx = _mm_cvtss_f32(m4);
    for (; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    const __m256 vmx = _mm256_set1_ps(mx);
    /* lanes i mod 32 in eight double vectors: l[a] holds lanes 4a..4a+3 */
    __m256d l[8];
    for (int a = 0; a < 8; a++) l[a] = _mm256_setzero_pd();
    for (i = 0; i < n; i += 32) {
        float buf[32] = {0}, *e = s + i;
        int64_t w = n - i < 32 ? n - i : 32;
        if (w < 32) { /* the tail through a zero-padded buffer */
            memcpy(buf, s + i, (size_t)w * sizeof(float));
            e = buf;
        }
        for (int h = 0; h < 4; h++)
            _mm256_storeu_ps(e + 8 * h, y_expf(_mm256_sub_ps(_mm256_loadu_ps(e + 8 * h), vmx)));
        if (w < 32) {
            for (int64_t j = w; j < 32; j++) buf[j] = 0.0f;
            memcpy(s + i, buf, (size_t)w * sizeof(float));
        }
        for (int a = 0; a < 8; a++) l[a] = _mm256_add_pd(l[a], _mm256_cvtps_pd(_mm_loadu_ps(e + 4 * a)));
    }
    for (int a = 0; a < 4; a++) l[a] = _mm256_add_pd(l[a], l[a + 4]); /* + 16 */
    for (int a = 0; a < 2; a++) l[a] = _mm256_add_pd(l[a], l[a + 2]); /* + 8 */
    __m256d a4 = _mm256_add_pd(l[0], l[1]);                             /* + 4 */
    __m128d a2 = _mm_add_pd(_mm256_castpd256_pd128(a4), _mm256_extractf128_pd(a4, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(a2, _mm_unpackhi_pd(a2, a2)));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
    for (; i < n; i++) s[i] *= _mm256_cvtss_f32(inv);
}

TGT void kern_avx2_silu_mul(float *g, const float *up, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = y_expf(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                              _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        float gb[8] = {0}, ub[8] = {0};
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, up + i, (size_t)(n - i) * sizeof(float));
        kern_avx2_silu_mul(gb, ub, 8);
        memcpy(g + i, gb, (size_t)(n - i) * sizeof(float));
    }
}

TGT void kern_avx2_gelu_mul(float *g, const float *up, int64_t n)
{
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 t = _mm256_add_ps(one, _mm256_mul_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(x, x)));
        __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286535587989211986876f), x), t);
        __m256 e = y_expf(_mm256_xor_ps(_mm256_add_ps(u, u), _mm256_set1_ps(-0.0f)));
        __m256 y = _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i));
        _mm256_storeu_ps(g + i, y);
    }
    if (i < n) {
        float gb[8] = {0}, ub[8] = {0};
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, up + i, (size_t)(n - i) * sizeof(float));
        kern_avx2_gelu_mul(gb, ub, 8);
        memcpy(g + i, gb, (size_t)(n - i) * sizeof(float));
    }
}

const kern_ops kern_ops_avx2 = {
    .name = "avx2",
    .xq_quantize = kern_x86_xq_quantize,
    .q8t_block = avx2_q8t_block,
    .q8t_tmax = 15,
    .q8t_rows = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 },
    .qn_block = kern_qn_avx2_block,
    .xk_quantize = kern_xk_quantize_avx2,
    .qn_tmax = 8,
    .f32_matmul = kern_avx2_f32_matmul,
    .att_qk = kern_avx2_att_qk,
    .att_qk8 = kern_avx2_att_qk8,
    .att_pv = kern_avx2_att_pv,
    .softmax = kern_avx2_softmax,
    .silu_mul = kern_avx2_silu_mul,
    .gelu_mul = kern_avx2_gelu_mul,
    .f32_dot = kern_avx2_f32_dot,
    .f32_axpy = kern_avx2_f32_axpy,
    .f16_dot = kern_avx2_f16_dot,
    .f16_axpy = kern_avx2_f16_axpy,
    .f32_to_f16 = kern_avx2_f32_to_f16,
    .f16_to_f32 = kern_avx2_f16_to_f32,
};

const kern_ops kern_ops_avxvnni = {
    .name = "avxvnni",
    .xq_quantize = kern_x86_xq_quantize,
    .q8t_block = avxvnni_q8t_block,
    .q8t_tmax = 12,
    .q8t_rows = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 },
    .qn_block = kern_qn_avxvnni_block,
    .xk_quantize = kern_xk_quantize_avx2,
    .qn_tmax = 8,
    .f32_matmul = kern_avx2_f32_matmul,
    .att_qk = kern_avx2_att_qk,
    .att_qk8 = kern_avx2_att_qk8,
    .att_pv = kern_avx2_att_pv,
    .softmax = kern_avx2_softmax,
    .silu_mul = kern_avx2_silu_mul,
    .gelu_mul = kern_avx2_gelu_mul,
    .f32_dot = kern_avx2_f32_dot,
    .f32_axpy = kern_avx2_f32_axpy,
    .f16_dot = kern_avx2_f16_dot,
    .f16_axpy = kern_avx2_f16_axpy,
    .f32_to_f16 = kern_avx2_f32_to_f16,
    .f16_to_f32 = kern_avx2_f16_to_f32,
};

#endif /* __x86_64__ */
