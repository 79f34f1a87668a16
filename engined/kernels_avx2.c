/*
 * kernels_avx2.c - AVX2 + FMA + F16C variants of the kernels in kernels.c.
 *
 * Compiled with per-function target attributes (the Makefile has no -march), and only
 * ever called after kernels.c checked the CPU. The q8 product uses the usual AVX2
 * int8 trick: maddubs multiplies unsigned by signed bytes, so it is fed |w| and x
 * with w's sign moved onto it; madd with ones then sums pairs of int16 into 8 int32
 * lanes, which are exact. Each (row, token) pair keeps 8 float lanes that gather
 * d_w * d_x * lanes block after block; they are summed once at the end.
 *
 * The GEMM reuses each weight block (loaded once, |w| computed once) across the RN
 * tokens of a tile and each activation block across the RM rows; rows are walked in
 * chunks that stay in L2 while every token tile passes over them.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "f16.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

#include "kernels_x86.h"

TGT_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

/* The half at p, as a float in all 8 lanes. */
TGT_INLINE __m256 bcast_half(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_set1_epi16((short)*p));
}

/* ---- activation quantization (bit-exact with scalar_q8_quantize_x) ---- */

TGT void kern_avx2_q8_quantize_x(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        kern_q8_block *b = (kern_q8_block *)((char *)dst + (size_t)r * kern_q8_row_bytes(cols));
        for (int64_t i = 0; i < nb; i++) {
            __m256 v[4];
            if ((i + 1) * KERN_QK <= cols) {
                for (int j = 0; j < 4; j++) v[j] = _mm256_loadu_ps(src + i * KERN_QK + 8 * j);
            } else {
                float tmp[KERN_QK] = {0};
                memcpy(tmp, src + i * KERN_QK, (size_t)(cols - i * KERN_QK) * sizeof(float));
                for (int j = 0; j < 4; j++) v[j] = _mm256_loadu_ps(tmp + 8 * j);
            }
            __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                     _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            float amax = _mm_cvtss_f32(m4);
            b[i].d = f32_to_f16(amax / 127.0f);
            const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
            __m256i q[4];
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], id),
                                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            /* packs work per 128-bit lane: undo the interleave with a permute */
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)b[i].qs, p);
        }
    }
}

/* ---- q8 x q8 products ---- */

/* 8 int32 lanes whose sum is the int dot of the 32 bytes of w and x; aw = |w|. */
TGT_INLINE __m256i dot32(__m256i aw, __m256i w, __m256i x, __m256i ones)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), ones);
}

/* An RM x RN tile: rows w[0..RM) (stride ws blocks), tokens x[0..RN) (stride xs).
 * Every loop is fully unrolled so that acc[][] lives in registers. A block's scale
 * is broadcast from memory and widened with vcvtph2ps (2 uops, no scalar detour). */
#define Q8_TILE(RM, RN)                                                                    \
TGT_INLINE void q8_tile_##RM##x##RN(const kern_q8_block *w, int64_t ws,                     \
                                    const kern_q8_block *x, int64_t xs, int64_t nb,         \
                                    float *y, int64_t ys, int64_t ldy)                      \
{                                                                                           \
    const __m256i ones = _mm256_set1_epi16(1);                                              \
    __m256 acc[RM][RN];                                                                     \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++)                                    \
        _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps(); \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        __m256i xv[RN];                                                                     \
        __m256 dx[RN];                                                                      \
        _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) {                              \
            xv[t] = _mm256_loadu_si256((const __m256i *)x[t * xs + k].qs);                  \
            dx[t] = bcast_half(&x[t * xs + k].d);                                           \
        }                                                                                   \
        _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) {                              \
            __m256i wv = _mm256_loadu_si256((const __m256i *)w[r * ws + k].qs);             \
            __m256i aw = _mm256_sign_epi8(wv, wv);                                          \
            __m256 dw = bcast_half(&w[r * ws + k].d);                                       \
            _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) {                          \
                __m256 p = _mm256_cvtepi32_ps(dot32(aw, wv, xv[t], ones));                  \
                acc[r][t] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, dx[t]), acc[r][t]);        \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++)                                    \
        _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) y[t * ldy + r * ys] = hsum8(acc[r][t]); \
}

#ifndef Q8_RN_AVX2
#define Q8_RN_AVX2 3
#endif
#define Q8_TILE_FN_(a, b) q8_tile_##a##x##b
#define Q8_TILE_FN(a, b) Q8_TILE_FN_(a, b)
#define Q8_TILE_X(a, b) Q8_TILE(a, b)
Q8_TILE_X(4, Q8_RN_AVX2)
Q8_TILE(4, 1)
Q8_TILE_X(1, Q8_RN_AVX2)
Q8_TILE(1, 1)

#define Q8_RN Q8_RN_AVX2
/* Rows per chunk: the chunk's weights stay in L2 while all tokens pass over it. */
#define Q8_CHUNK_BYTES (128 * 1024)
/* Up to this many tokens the product streams W once (q8_stream). */
#define Q8_STREAM_TOKENS 32

/* Decode: four rows against one token. |x| is taken once per block and shared by the
 * four rows, which only move x's sign onto their w (9 uops per row and block). */
#define GEMV_ROWS(RM)                                                                      \
TGT_INLINE void q8_gemv_##RM(const kern_q8_block *w, int64_t ws, const kern_q8_block *x,    \
                             int64_t nb, float *y, int64_t ys)                              \
{                                                                                           \
    const __m256i ones = _mm256_set1_epi16(1);                                              \
    __m256 acc[RM];                                                                         \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps();      \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        __m256i xv = _mm256_loadu_si256((const __m256i *)x[k].qs);                          \
        __m256i ax = _mm256_sign_epi8(xv, xv);                                              \
        __m256 dx = bcast_half(&x[k].d);                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) {                              \
            __m256i wv = _mm256_loadu_si256((const __m256i *)w[r * ws + k].qs);             \
            __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv)), ones); \
            __m256 s = _mm256_mul_ps(bcast_half(&w[r * ws + k].d), dx);                     \
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, acc[r]);                     \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) y[r * ys] = hsum8(acc[r]);         \
}
GEMV_ROWS(4)
GEMV_ROWS(1)

/* The four rows of a GEMV tile are a quarter of the range apart, so the weights are
 * read as four long sequential streams that the hardware prefetcher follows (four
 * adjacent rows would start three fresh 2-KiB streams every tile, which it does not). */
static TGT void q8_gemv(const kern_q8_block *W, int64_t nb, const kern_q8_block *X,
                        float *y, int64_t r0, int64_t r1)
{
    int64_t q = (r1 - r0) / 4;
    for (int64_t r = r0; r < r0 + q; r++) q8_gemv_4(W + r * nb, q * nb, X, nb, y + r, q);
    for (int64_t r = r0 + 4 * q; r < r1; r++) q8_gemv_1(W + r * nb, nb, X, nb, y + r, 1);
}

/* Few tokens (decode, or a few sessions decoded together): memory-bound, so the rows
 * of each tile are a quarter of the range apart and W is read once as four long
 * sequential streams; every token tile reuses the four rows from L1. */
static TGT void q8_stream(const kern_q8_block *W, int64_t nb, const kern_q8_block *X, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    int64_t q = (r1 - r0) / 4;
    for (int64_t r = r0; r < r1; r++) {
        if (r == r0 + q) r = r0 + 4 * q; /* the rows left over after the four quarters */
        if (r >= r1) break;
        int64_t ws = r < r0 + q ? q * nb : 0, ys = r < r0 + q ? q : 0;
        int64_t t = 0;
        for (; t + Q8_RN <= n_tok; t += Q8_RN) {
            if (ws) Q8_TILE_FN(4, Q8_RN)(W + r * nb, ws, X + t * nb, nb, nb, y + t * ldy + r, ys, ldy);
            else Q8_TILE_FN(1, Q8_RN)(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
        for (; t < n_tok; t++) {
            if (ws) q8_tile_4x1(W + r * nb, ws, X + t * nb, nb, nb, y + t * ldy + r, ys, ldy);
            else q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
    }
}

/* Many tokens (prefill): compute-bound. Rows go in chunks that stay in L2 while every
 * token tile passes over them; inside a chunk, tiles of 4 adjacent rows. */
static TGT void avx2_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                               float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    const int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    const kern_q8_block *W = w, *X = xq;
    if (n_tok == 1) { q8_gemv(W, nb, X, y, r0, r1); return; }
    if (n_tok <= Q8_STREAM_TOKENS) { q8_stream(W, nb, X, n_tok, y, ldy, r0, r1); return; }
    int64_t chunk = Q8_CHUNK_BYTES / (nb * (int64_t)sizeof(kern_q8_block));
    chunk = chunk < 4 ? 4 : chunk / 4 * 4;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        int64_t t = 0;
        for (; t + Q8_RN <= n_tok; t += Q8_RN) {
            const kern_q8_block *xt = X + t * nb;
            float *yt = y + t * ldy;
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) Q8_TILE_FN(4, Q8_RN)(W + r * nb, nb, xt, nb, nb, yt + r, 1, ldy);
            for (; r < c1; r++) Q8_TILE_FN(1, Q8_RN)(W + r * nb, nb, xt, nb, nb, yt + r, 1, ldy);
        }
        for (; t < n_tok; t++) {
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) q8_tile_4x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
            for (; r < c1; r++) q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
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
#define CVT_F16(v) half_to_float(v)
F_MATMUL(kern_avx2_f32_matmul, float, LOAD_F32, CVT_F32)
F_MATMUL(kern_avx2_f16_matmul, uint16_t, load_h8, CVT_F16)

const kern_ops kern_ops_avx2 = {
    .name = "avx2",
    .q8_quantize_x = kern_avx2_q8_quantize_x,
    .q8_matmul = avx2_q8_matmul,
    .f32_matmul = kern_avx2_f32_matmul,
    .f16_matmul = kern_avx2_f16_matmul,
    .f32_dot = kern_avx2_f32_dot,
    .f32_axpy = kern_avx2_f32_axpy,
    .f16_dot = kern_avx2_f16_dot,
    .f16_axpy = kern_avx2_f16_axpy,
    .f32_to_f16 = kern_avx2_f32_to_f16,
    .f16_to_f32 = kern_avx2_f16_to_f32,
};

#endif /* __x86_64__ */
