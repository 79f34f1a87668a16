/*
 * kernels_avx512.c - the AVX-512 VNNI variants of the q8 products.
 *
 * Two tables. "avx512vnni" (chosen by kern_init when the CPU has AVX512F/BW/VL and
 * AVX512_VNNI) tiles like kernels_avx2.c, with vpdpbusd doing maddubs + madd in one
 * instruction and 32 registers allowing 4 x 4 tiles. Its int32 lanes hold the same
 * partial dots as AVX2's (bytes 4l..4l+3 in lane l) and the float steps are the same,
 * so its results are bit-identical to the AVX2 table, i.e. to llama.cpp's AVX2 order.
 * "avx512vnni-fast" (by name only: LLM_KERNELS=avx512vnni-fast) runs prefill (more
 * than 32 tokens) through q8_gemm8 below, which does the float work once per 8 tokens;
 * faster, but a different rounding order from llama.cpp's.
 * Vectors stay 256 bits wide: one q8 block is 32 bytes. The float helpers and the
 * quantizer are the AVX2 ones (memory-bound, nothing to gain).
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define TGT_STR "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define TGT __attribute__((target(TGT_STR)))
#define TGT_INLINE static inline __attribute__((always_inline, target(TGT_STR)))

#include "kernels_x86.h"

TGT_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The half at p, as a float in all 8 lanes. */
TGT_INLINE __m256 bcast_half(const uint16_t *p) { return _mm256_cvtph_ps(_mm_set1_epi16((short)*p)); }

/* GEMM tile, RM rows x RN tokens. vpdpbusd wants unsigned x signed bytes: x + 128 is
 * unsigned (x ^ 0x80), and dot(x + 128, w) = dot(x, w) + 128 * sum(w), so each row's
 * accumulator starts from -128 * sum(w) (one more vpdpbusd per row and block, shared by
 * the RN tokens). Per (row, token, block): vpdpbusd, convert, scale, fma. */
#define Q8_TILE(RM, RN)                                                                    \
TGT_INLINE void q8_tile_##RM##x##RN(const kern_q8_block *w, int64_t ws,                     \
                                    const kern_q8_block *x, int64_t xs, int64_t nb,         \
                                    float *y, int64_t ys, int64_t ldy)                      \
{                                                                                           \
    const __m256i bias = _mm256_set1_epi8((char)0x80);                                      \
    __m256 acc[RM][RN];                                                                     \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++)                                    \
        _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps(); \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        __m256i xu[RN];                                                                     \
        __m256 dx[RN];                                                                      \
        _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) {                              \
            xu[t] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[t * xs + k].qs), bias); \
            dx[t] = bcast_half(&x[t * xs + k].d);                                           \
        }                                                                                   \
        _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) {                              \
            __m256i wv = _mm256_loadu_si256((const __m256i *)w[r * ws + k].qs);             \
            __m256i nc = _mm256_sub_epi32(_mm256_setzero_si256(),                           \
                                          _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, wv)); \
            __m256 dw = bcast_half(&w[r * ws + k].d);                                       \
            _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) {                          \
                __m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(nc, xu[t], wv));          \
                acc[r][t] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, dx[t]), acc[r][t]);        \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++)                                    \
        _Pragma("GCC unroll 8") for (int t = 0; t < RN; t++) y[t * ldy + r * ys] = hsum8(acc[r][t]); \
}

#ifndef Q8_RN_512
#define Q8_RN_512 4
#endif
#define Q8_TILE_X(a, b) Q8_TILE(a, b)
#define Q8_TILE_FN_(a, b) q8_tile_##a##x##b
#define Q8_TILE_FN(a, b) Q8_TILE_FN_(a, b)
Q8_TILE_X(4, Q8_RN_512)
Q8_TILE(4, 1)
Q8_TILE_X(1, Q8_RN_512)
Q8_TILE(1, 1)

/* Decode: RM rows against one token; |x| once per block, x's sign moved onto w. */
#define GEMV_ROWS(RM)                                                                      \
TGT_INLINE void q8_gemv_##RM(const kern_q8_block *w, int64_t ws, const kern_q8_block *x,    \
                             int64_t nb, float *y, int64_t ys)                              \
{                                                                                           \
    __m256 acc[RM];                                                                         \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) acc[r] = _mm256_setzero_ps();      \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        __m256i xv = _mm256_loadu_si256((const __m256i *)x[k].qs);                          \
        __m256i ax = _mm256_abs_epi8(xv);                                                   \
        __m256 dx = bcast_half(&x[k].d);                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) {                              \
            __m256i wv = _mm256_loadu_si256((const __m256i *)w[r * ws + k].qs);             \
            __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, _mm256_sign_epi8(wv, xv)); \
            __m256 s = _mm256_mul_ps(bcast_half(&w[r * ws + k].d), dx);                     \
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, acc[r]);                     \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 8") for (int r = 0; r < RM; r++) y[r * ys] = hsum8(acc[r]);         \
}
GEMV_ROWS(4)
GEMV_ROWS(1)

#define Q8_CHUNK_BYTES (128 * 1024)
/* Up to this many tokens the product streams W once (q8_stream). */
#define Q8_STREAM_TOKENS 32

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
        for (; t + Q8_RN_512 <= n_tok; t += Q8_RN_512) {
            if (ws) Q8_TILE_FN(4, Q8_RN_512)(W + r * nb, ws, X + t * nb, nb, nb, y + t * ldy + r, ys, ldy);
            else Q8_TILE_FN(1, Q8_RN_512)(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
        for (; t < n_tok; t++) {
            if (ws) q8_tile_4x1(W + r * nb, ws, X + t * nb, nb, nb, y + t * ldy + r, ys, ldy);
            else q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
    }
}

/* ---- prefill GEMM over tokens interleaved by eights ----
 *
 * vpdpbusd sums four adjacent byte products into each int32 lane. With X repacked so
 * that lane j holds four bytes of token j, and four bytes of a weight row broadcast to
 * every lane, each lane accumulates its own token's dot: 8 vpdpbusd give the int dots
 * of one weight block with 8 tokens, already one per lane, so the float work (convert,
 * scale, fma) is done once per 8 tokens instead of once per token. X is biased to
 * unsigned (x ^ 0x80 = x + 128); the bias adds 128 * sum(w) to every lane, which is
 * subtracted exactly in int32 from a per-row-block table computed once per row chunk.
 */
#define GEMM8_MAX_NB 1024   /* stack tables: nb * 288 + chunk * nb * 8 bytes */
#define GEMM8_CHUNK 64      /* rows per chunk (weights ~140 KB for 2048 columns: L2) */
#define GEMM8_ROWS 4        /* rows sharing each load of the repacked X */

/* Repacks tokens x[0..n) (n <= 8) into xi[k][i] (8 lanes = 8 tokens, 4 bytes each,
 * biased) and dx[k][lane]; lanes past n are zero tokens with scale 0. */
static TGT void gemm8_pack(const kern_q8_block *x, int64_t nb, int n, __m256i *xi, float *dx)
{
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t k = 0; k < nb; k++) {
        __m256i a[8];
        for (int j = 0; j < 8; j++) {
            a[j] = j < n ? _mm256_loadu_si256((const __m256i *)x[j * nb + k].qs) : _mm256_setzero_si256();
            dx[k * 8 + j] = j < n ? _cvtsh_ss(x[j * nb + k].d) : 0.0f;
        }
        /* 8x8 transpose of dwords: row j = token j, column i = bytes 4i..4i+3 */
        __m256i t[8], u[8];
        for (int j = 0; j < 8; j += 2) {
            t[j] = _mm256_unpacklo_epi32(a[j], a[j + 1]);
            t[j + 1] = _mm256_unpackhi_epi32(a[j], a[j + 1]);
        }
        for (int j = 0; j < 8; j += 4) {
            u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);
            u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
            u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);
            u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
        }
        for (int i = 0; i < 4; i++) {
            xi[k * 8 + i] = _mm256_xor_si256(_mm256_permute2x128_si256(u[i], u[i + 4], 0x20), bias);
            xi[k * 8 + i + 4] = _mm256_xor_si256(_mm256_permute2x128_si256(u[i], u[i + 4], 0x31), bias);
        }
    }
}

/* RR rows (stride ws blocks) x the 8 packed tokens; lane j goes to y[j*ldy + r], j < n. */
#define GEMM8_TILE(RR)                                                                     \
TGT_INLINE void gemm8_tile_##RR(const kern_q8_block *w, int64_t ws, int64_t nb,              \
                                const __m256i *xi, const float *dx, const int32_t *sw,      \
                                const float *dw, int64_t ts, float *y, int64_t ldy, int n)  \
{                                                                                           \
    __m256 acc[RR];                                                                         \
    _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) acc[r] = _mm256_setzero_ps();      \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        __m256i xv[8];                                                                      \
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) xv[i] = _mm256_load_si256(xi + k * 8 + i); \
        __m256 vdx = _mm256_loadu_ps(dx + k * 8);                                           \
        _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) {                              \
            const int8_t *q = w[r * ws + k].qs;                                             \
            /* two chains of four: vpdpbusd's latency, not its throughput, would bind */   \
            __m256i d0 = _mm256_setzero_si256(), d1 = _mm256_setzero_si256();               \
            _Pragma("GCC unroll 8") for (int i = 0; i < 8; i += 2) {                        \
                int32_t f0, f1;                                                             \
                memcpy(&f0, q + 4 * i, 4);                                                  \
                memcpy(&f1, q + 4 * i + 4, 4);                                              \
                d0 = _mm256_dpbusd_epi32(d0, xv[i], _mm256_set1_epi32(f0));                 \
                d1 = _mm256_dpbusd_epi32(d1, xv[i + 1], _mm256_set1_epi32(f1));             \
            }                                                                               \
            __m256i d = _mm256_sub_epi32(_mm256_add_epi32(d0, d1), _mm256_set1_epi32(sw[r * ts + k])); \
            __m256 s = _mm256_mul_ps(_mm256_set1_ps(dw[r * ts + k]), vdx);                  \
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, acc[r]);                     \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) {                                  \
        float out[8];                                                                       \
        _mm256_storeu_ps(out, acc[r]);                                                      \
        for (int j = 0; j < n; j++) y[j * ldy + r] = out[j];                                \
    }                                                                                       \
}
GEMM8_TILE(4)
GEMM8_TILE(8)
GEMM8_TILE(1)

static TGT void q8_gemm8(const kern_q8_block *W, int64_t nb, const kern_q8_block *X, int64_t n_tok,
                         float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    __m256i xi[GEMM8_MAX_NB * 8];          /* one token group, repacked */
    float dx[GEMM8_MAX_NB * 8];
    int64_t chunk = GEMM8_CHUNK * 128 / nb; /* keep the tables near 64 rows x 128 blocks */
    chunk = chunk < GEMM8_ROWS ? GEMM8_ROWS : chunk > GEMM8_CHUNK ? GEMM8_CHUNK : chunk / GEMM8_ROWS * GEMM8_ROWS;
    int32_t sw[GEMM8_CHUNK * 128];         /* 128 * sum(w) per row and block of the chunk */
    float dw[GEMM8_CHUNK * 128];           /* the weights' block scales as floats */
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        /* one sequential pass over the chunk (from memory), the rest hits L2 */
        const __m256i bias = _mm256_set1_epi8((char)0x80);
        for (int64_t r = c0; r < c1; r++)
            for (int64_t k = 0; k < nb; k++) {
                const kern_q8_block *b = &W[r * nb + k];
                /* sum(w) = sum(w + 128) - 32 * 128, the biased sum by vpsadbw */
                __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), bias),
                                              _mm256_setzero_si256());
                __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
                int32_t sum = (int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
                sw[(r - c0) * nb + k] = 128 * sum;
                dw[(r - c0) * nb + k] = _cvtsh_ss(b->d);
            }
        for (int64_t t = 0; t < n_tok; t += 8) {
            int n = n_tok - t < 8 ? (int)(n_tok - t) : 8;
            gemm8_pack(X + t * nb, nb, n, xi, dx);
            int64_t r = c0;
            for (; r + 8 <= c1; r += 8)
                gemm8_tile_8(W + r * nb, nb, nb, xi, dx, sw + (r - c0) * nb, dw + (r - c0) * nb, nb,
                             y + t * ldy + r, ldy, n);
            for (; r + 4 <= c1; r += 4)
                gemm8_tile_4(W + r * nb, nb, nb, xi, dx, sw + (r - c0) * nb, dw + (r - c0) * nb, nb,
                             y + t * ldy + r, ldy, n);
            for (; r < c1; r++)
                gemm8_tile_1(W + r * nb, nb, nb, xi, dx, sw + (r - c0) * nb, dw + (r - c0) * nb, nb,
                             y + t * ldy + r, ldy, n);
        }
    }
}

/* Many tokens (prefill): compute-bound. Rows go in chunks that stay in L2 while every
 * token tile passes over them; inside a chunk, tiles of 4 adjacent rows. */
static TGT void q8_matmul_any(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                               float *y, int64_t ldy, int64_t r0, int64_t r1, int fast)
{
    const int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    const kern_q8_block *W = w, *X = xq;
    if (n_tok == 1) {
        /* four long streams, as in kernels_avx2.c's q8_gemv */
        int64_t q = (r1 - r0) / 4;
        for (int64_t r = r0; r < r0 + q; r++) q8_gemv_4(W + r * nb, q * nb, X, nb, y + r, q);
        for (int64_t r = r0 + 4 * q; r < r1; r++) q8_gemv_1(W + r * nb, nb, X, nb, y + r, 1);
        return;
    }
    /* few tokens: the per-chunk tables and packing of q8_gemm8 would cost as much as
     * the products, so stream W through the plain tiles */
    if (n_tok <= Q8_STREAM_TOKENS) { q8_stream(W, nb, X, n_tok, y, ldy, r0, r1); return; }
    if (fast && nb <= GEMM8_MAX_NB) { q8_gemm8(W, nb, X, n_tok, y, ldy, r0, r1); return; }
    int64_t chunk = Q8_CHUNK_BYTES / (nb * (int64_t)sizeof(kern_q8_block));
    chunk = chunk < 4 ? 4 : chunk / 4 * 4;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        int64_t t = 0;
        for (; t + Q8_RN_512 <= n_tok; t += Q8_RN_512) {
            const kern_q8_block *xt = X + t * nb;
            float *yt = y + t * ldy;
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) Q8_TILE_FN(4, Q8_RN_512)(W + r * nb, nb, xt, nb, nb, yt + r, 1, ldy);
            for (; r < c1; r++) Q8_TILE_FN(1, Q8_RN_512)(W + r * nb, nb, xt, nb, nb, yt + r, 1, ldy);
        }
        for (; t < n_tok; t++) {
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) q8_tile_4x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
            for (; r < c1; r++) q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, 1, ldy);
        }
    }
}

/* llama.cpp's float order (bit-identical to the AVX2 table): the default. */
static TGT void avx512_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                                 float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    q8_matmul_any(w, cols, xq, n_tok, y, ldy, r0, r1, 0);
}

/* Prefill through q8_gemm8: exact int32 block dots, one rounding per block, so not
 * llama.cpp's order (its rows can differ by ~1e-2 on chaotic random-weight models). */
static TGT void avx512_fast_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                                      float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    q8_matmul_any(w, cols, xq, n_tok, y, ldy, r0, r1, 1);
}

const kern_ops kern_ops_avx512vnni_fast = {
    .name = "avx512vnni-fast",
    .q8_quantize_x = kern_avx2_q8_quantize_x,
    .q8_matmul = avx512_fast_q8_matmul,
    .f32_matmul = kern_avx2_f32_matmul,
    .f16_matmul = kern_avx2_f16_matmul,
    .f32_dot = kern_avx2_f32_dot,
    .f32_axpy = kern_avx2_f32_axpy,
    .f16_dot = kern_avx2_f16_dot,
    .f16_axpy = kern_avx2_f16_axpy,
    .f32_to_f16 = kern_avx2_f32_to_f16,
    .f16_to_f32 = kern_avx2_f16_to_f32,
};

const kern_ops kern_ops_avx512vnni = {
    .name = "avx512vnni",
    .q8_quantize_x = kern_avx2_q8_quantize_x,
    .q8_matmul = avx512_q8_matmul,
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
