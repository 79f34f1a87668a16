/*
 * kernels_avx512.c - the "avx512vnni" table: q8t products on zmm registers with
 * vpdpbusd (AVX512F/BW/VL + AVX512_VNNI). The quantizer and the float helpers are the
 * shared 256-bit ones (kernels_x86.h): memory-bound, nothing to gain.
 *
 * A 64-byte group of a tile is one zmm: values 4g..4g+3 of 16 rows, stored as w + 128
 * (unsigned), which vpdpbusd multiplies with one token's four signed values (a 32-bit
 * broadcast) into 16 int32 lanes, one per row. Per (16 rows, token, block) that is 8
 * vpdpbusd from the token's -128 * sum(x), then the contract's cvt + mul + fma
 * (kernels.h), bit-identical with the scalar twin.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "kernels_x86.h"

#define TGT_STR "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define TGT __attribute__((target(TGT_STR)))

static inline int32_t load_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* R tiles (16 rows each, tb bytes apart) times T tokens over nsb superblocks. Per block
 * the R x T int32 accumulators start from each token's -128 * sum(x) and take the 8
 * groups in turn: one load per tile and one broadcast per token feed R x T vpdpbusd
 * (3 x 4 keeps 28 of the 32 registers busy and measured fastest of the shapes that
 * fit). Lanes of mask[r] are stored for tile r. */
#define ZMICRO(R, T)                                                                        \
static TGT void zmicro_##R##x##T(const uint8_t *w, size_t tb, int64_t nsb, const uint8_t *xq, \
                                 size_t xs, float *y, int64_t ldy, const __mmask16 *mask)   \
{                                                                                           \
    const int64_t nbp = nsb * KERN_SB_BLOCKS;                                               \
    const size_t dxo = (size_t)nbp * KERN_QK, co = (size_t)nbp * (KERN_QK + 4);             \
    __m512 acc[R][T];                                                                       \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                    \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps(); \
    for (int64_t s = 0; s < nsb; s++) {                                                     \
        _Pragma("GCC unroll 2") for (int b = 0; b < KERN_SB_BLOCKS; b++) {                 \
            const int64_t k = s * KERN_SB_BLOCKS + b;                                       \
            __m512i is[R][T];                                                               \
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                          \
                __m512i c = _mm512_set1_epi32(((const int32_t *)(xq + t * xs + co))[k]);    \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) is[r][t] = c;          \
            }                                                                               \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {                          \
                __m512i wv[R];                                                              \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                        \
                    wv[r] = _mm512_load_si512((const void *)((const kern_q8t_sb *)(w + r * tb) + s)->q[b][g]); \
                _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                      \
                    __m512i xb = _mm512_set1_epi32(load_i32(xq + t * xs + k * KERN_QK + 4 * g)); \
                    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                    \
                        is[r][t] = _mm512_dpbusd_epi32(is[r][t], wv[r], xb);                \
                }                                                                           \
            }                                                                               \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                          \
                const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(                        \
                    (const __m256i *)((const kern_q8t_sb *)(w + r * tb) + s)->d[b]));       \
                _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                      \
                    __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(((const float *)(xq + t * xs + dxo))[k])); \
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r][t]), sc, acc[r][t]); \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                    \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                                \
            _mm512_mask_storeu_ps(y + t * ldy + r * KERN_TILE, mask[r], acc[r][t]);         \
}
#define ZMICRO_R(R) ZMICRO(R, 1) ZMICRO(R, 2) ZMICRO(R, 3) ZMICRO(R, 4)
ZMICRO_R(1) ZMICRO_R(2) ZMICRO_R(3)

/* One tile streamed from memory times T tokens (a decode step of one or two sessions):
 * the block's eight groups stay in registers while every token passes, so each weight
 * byte is read once, front to back. From 3 tokens on the 8 activation broadcasts per
 * block and token bind it (8 tokens read 9.5 GB/s of weights on one thread), so larger
 * calls go through the 3 x 4 register tiles below, three tiles at a time: those read
 * once from memory and again from L1/L2 for each further 4 tokens (8 tokens: 1.29 ->
 * 0.74 ms a 5632 x 2048 matrix on one thread, bench_kernels). A token's block sum is two
 * chains of vpdpbusd (even and odd groups, added at the end: integer sums, the same
 * bits). One chain of eight dependent vpdpbusd a block held decode back: TinyLlama Q8_0
 * tg128 23.5-25.0 -> 25.9-30.0 tok/s on one Zen 5 thread, 39.7-42.3 -> 44.1-47.1 on two
 * (interleaved runs). */
#define ZSTREAM(T)                                                                          \
static TGT void zstream_##T(const uint8_t *w, int64_t nsb, const uint8_t *xq, size_t xs,     \
                            float *y, int64_t ldy, __mmask16 mask)                          \
{                                                                                           \
    const int64_t nbp = nsb * KERN_SB_BLOCKS;                                               \
    const size_t dxo = (size_t)nbp * KERN_QK, co = (size_t)nbp * (KERN_QK + 4);             \
    __m512 acc[T];                                                                          \
    _Pragma("GCC unroll 2") for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();      \
    for (int64_t s = 0; s < nsb; s++) {                                                     \
        const kern_q8t_sb *sb = (const kern_q8t_sb *)w + s;                                 \
        _Pragma("GCC unroll 2") for (int b = 0; b < KERN_SB_BLOCKS; b++) {                 \
            const int64_t k = s * KERN_SB_BLOCKS + b;                                       \
            __m512i wv[8];                                                                  \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)                            \
                wv[g] = _mm512_load_si512((const void *)sb->q[b][g]);                       \
            const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb->d[b])); \
            _Pragma("GCC unroll 2") for (int t = 0; t < T; t++) {                          \
                const uint8_t *xr = xq + (size_t)t * xs;                                    \
                __m512i is = _mm512_set1_epi32(((const int32_t *)(xr + co))[k]), is1 = _mm512_setzero_si512(); \
                _Pragma("GCC unroll 8") for (int g = 0; g < 8; g += 2) {                    \
                    is = _mm512_dpbusd_epi32(is, wv[g], _mm512_set1_epi32(load_i32(xr + k * KERN_QK + 4 * g))); \
                    is1 = _mm512_dpbusd_epi32(is1, wv[g + 1], _mm512_set1_epi32(load_i32(xr + k * KERN_QK + 4 * g + 4))); \
                }                                                                           \
                is = _mm512_add_epi32(is, is1);                                             \
                __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(((const float *)(xr + dxo))[k])); \
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc[t]);               \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 2") for (int t = 0; t < T; t++)                                    \
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);                                   \
}
ZSTREAM(1) ZSTREAM(2)

typedef void (*zstream_fn)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t, __mmask16);
#define ZS 2 /* most tokens of a streaming tile */
static const zstream_fn zstreams[ZS + 1] = { NULL, zstream_1, zstream_2 };
#define Z_TMAX 16 /* most tokens of a call that reads each weight byte from memory once */

typedef void (*zmicro_fn)(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, float *, int64_t,
                          const __mmask16 *);
#define ZT 4 /* most tokens of a micro-kernel */
static const zmicro_fn zmicros[3][ZT + 1] = {
    { NULL, zmicro_1x1, zmicro_1x2, zmicro_1x3, zmicro_1x4 },
    { NULL, zmicro_2x1, zmicro_2x2, zmicro_2x3, zmicro_2x4 },
    { NULL, zmicro_3x1, zmicro_3x2, zmicro_3x3, zmicro_3x4 },
};

/* Streaming calls of one or two tokens: tile by tile; every other call (more tokens, or
 * panels from L2): 3 x 4 register tiles, three tiles at a time. */
static TGT void avx512_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq,
                                 size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    if (stream && nt <= ZS) {
        for (int i = 0; i < nr; i++)
            zstreams[nt](w + (size_t)i * tb, nsb, xq, xs, y + i * KERN_TILE, ldy, kern_tile_bits(lo, hi, i));
        return;
    }
    for (int i = 0; i < nr; i += 3) {
        int n = nr - i < 3 ? nr - i : 3;
        __mmask16 mask[3];
        for (int r = 0; r < n; r++) mask[r] = kern_tile_bits(lo, hi, i + r);
        for (int t = 0; t < nt; t += ZT) {
            int m = nt - t < ZT ? nt - t : ZT;
            zmicros[n - 1][m](w + (size_t)i * tb, tb, nsb, xq + (size_t)t * xs, xs,
                              y + (int64_t)t * ldy + i * KERN_TILE, ldy, mask);
        }
    }
}

/* ---- activation quantization (bit-exact with scalar_xq_quantize) ----
 * Per 16 blocks: each block's amax, then the 16 scales and reciprocals in one vector
 * (one division for 16 blocks), then each block scaled, rounded (MXCSR: to nearest
 * even), saturated to int8 (vpmovsdb) and summed (vpsadbw on the biased bytes). */
static TGT void avx512_xq_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    const int64_t nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        int8_t *q = (int8_t *)dst + (size_t)r * kern_xq_row_bytes(cols);
        float *d = (float *)(q + nbp * KERN_QK);
        int32_t *c = (int32_t *)(d + nbp);
        for (int64_t i0 = 0; i0 < nbp; i0 += 16) {
            int m = nbp - i0 < 16 ? (int)(nbp - i0) : 16;
            __m512 v[16][2];
            float am[16] = {0};
            for (int j = 0; j < m; j++) {
                int64_t o = (i0 + j) * KERN_QK, left = cols - o;
                for (int h = 0; h < 2; h++) {
                    int64_t l = left - 16 * h;
                    __mmask16 k = (__mmask16)(l >= 16 ? 0xffff : l <= 0 ? 0 : (1u << l) - 1);
                    v[j][h] = _mm512_maskz_loadu_ps(k, k ? src + o + 16 * h : src);
                }
                am[j] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(v[j][0], absm), _mm512_and_ps(v[j][1], absm)));
            }
            __m512 A = _mm512_loadu_ps(am);
            __m512 D = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_div_ps(A, _mm512_set1_ps(127.0f)), _MM_FROUND_TO_NEAREST_INT));
            __mmask16 nz = _mm512_cmp_ps_mask(A, _mm512_setzero_ps(), _CMP_NEQ_UQ);
            __m512 ID = _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), A);
            __mmask16 km = (__mmask16)(m == 16 ? 0xffff : (1u << m) - 1);
            _mm512_mask_storeu_ps(d + i0, km, D);
            float id[16];
            _mm512_storeu_ps(id, ID);
            __m512i sums = _mm512_setzero_si512();
            for (int j = 0; j < m; j++) {
                __m512 s = _mm512_set1_ps(id[j]);
                __m128i b0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v[j][0], s)));
                __m128i b1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v[j][1], s)));
                __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1);
                _mm256_storeu_si256((__m256i *)(q + (i0 + j) * KERN_QK), b);
                /* sum of the 32 bytes: sad of the biased bytes (4 partial sums) */
                __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(b, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
                __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
                int32_t sum = (int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - KERN_QK * 128;
                sums = _mm512_mask_set1_epi32(sums, (__mmask16)(1u << j), -128 * sum);
            }
            _mm512_mask_storeu_epi32(c + i0, km, sums);
        }
    }
}

/* ---- attention and element-wise pieces (kernels.h states the order) ---- */

#define TGT_INLINE static inline __attribute__((always_inline, target(TGT_STR)))

/* kern_expf's polynomial times 2^n for xc in [-87, 88], step for step. */
TGT_INLINE __m512 z_expf_core(__m512 xc)
{
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return y;
}

/* kern_expf on 16 lanes, step for step. */
TGT_INLINE __m512 z_expf(__m512 x)
{
    __m512 y = z_expf_core(_mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f)));
    __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.0f), _CMP_GT_OQ);
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    y = _mm512_mask_blend_ps(big, y, _mm512_set1_ps(__builtin_inff()));
    y = _mm512_mask_blend_ps((__mmask16)~(ok | big), y, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(nan, y, x);
}

/* A 16-key slice (row k of a key tile, or 16 values of a V row) as floats. */
TGT_INLINE __m512 z_load(const void *base, int64_t i, int f16, __mmask16 m)
{
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + i));
    return _mm512_maskz_loadu_ps(m, (const float *)base + i);
}

/* R query rows x NT key tiles: two chains over d (even, odd) per (row, key). */
TGT_INLINE void z_qk_body(const float *q, int64_t qs, const void *kt, int64_t kts, int f16, int d,
                          float scale, float *sc, int64_t lds, const int R, const int NT)
{
    __m512 acc[6][2][2];
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) acc[r][j][0] = acc[r][j][1] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 2 <= d; k += 2) {
        _Pragma("GCC unroll 2") for (int c = 0; c < 2; c++) {
            __m512 kv[2];
            _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++)
                kv[j] = z_load(kt, j * kts + (int64_t)(k + c) * KERN_TILE, f16, 0xffff);
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                __m512 qb = _mm512_set1_ps(q[r * qs + k + c]);
                _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++)
                    acc[r][j][c] = _mm512_fmadd_ps(qb, kv[j], acc[r][j][c]);
            }
        }
    }
    if (k < d) { /* odd d: the last term joins the even chain */
        __m512 kv[2];
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) kv[j] = z_load(kt, j * kts + (int64_t)k * KERN_TILE, f16, 0xffff);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            __m512 qb = _mm512_set1_ps(q[r * qs + k]);
            _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) acc[r][j][0] = _mm512_fmadd_ps(qb, kv[j], acc[r][j][0]);
        }
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++)
            _mm512_storeu_ps(sc + r * lds + j * KERN_TILE,
                             _mm512_mul_ps(_mm512_add_ps(acc[r][j][0], acc[r][j][1]), _mm512_set1_ps(scale)));
}

#define QK_CASE(R)                                                                          \
    case R: {                                                                               \
        if (nt == 2) z_qk_body(q, qs, kt, kts, f16, d, scale, sc, lds, R, 2);               \
        else z_qk_body(q, qs, kt, kts, f16, d, scale, sc, lds, R, 1);                       \
        break;                                                                              \
    }
#define QK_FN(NAME, F16)                                                                   \
static TGT void NAME(const float *q, int64_t qs, int R, const void *kt, int64_t kts, int d,  \
                     float scale, float *sc, int64_t lds, int nt)                           \
{                                                                                           \
    const int f16 = F16;                                                                    \
    switch (R) {                                                                            \
    QK_CASE(1) QK_CASE(2) QK_CASE(3) QK_CASE(4) QK_CASE(5) QK_CASE(6)                       \
    }                                                                                       \
}
QK_FN(z_qk_h, 1)
QK_FN(z_qk_f, 0)

/* How far ahead the attention kernels fetch a head's slice of the cache (its slices of
 * the key tiles are kv_dim x 16 apart, too sparse for the hardware prefetchers; its value
 * rows follow one another, kv.h, but a pool's blocks do not): key tiles, and value rows
 * of f16 and q8_0 caches (f32 rows, four times larger, one line in eight ahead). Measured
 * with bench_attn 4096 on Zen 5: from 2 q8_0 tiles (f16 and f32: none) and 8 rows, f16
 * 11.1-11.6 -> 9.4-10.0 ms a token and q8_0 7.7-8.0 -> 6.9-7.3; the f16 key tiles
 * fetched too, f16 9.8-11.9 -> 8.9-9.3. */
#define PF_TILES 8
#define PF_ROWS  64
/* The rows of the next pass over n rows left: 8, 4, 2 or 1. */
static inline int z_rows(int n) { return n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1; }

/* R query rows (kern_qq, nb blocks each) x one q8_0 key tile: per 32-dim group the
 * integer dots of the 8 quads with both digits by vpdpbusd over the keys offset to
 * unsigned (the rows' biases, -128 times their sums, start the sums), then the block's
 * fma of the chain. */
TGT_INLINE void z_qk8_body(const kern_qq *qq, int nb, const uint8_t *t, float scale, float *sc, int64_t lds,
                           const int R)
{
    __m512 acc[8];
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *g = t + (size_t)b * KERN_KVQ_GROUP;
        __m512i ih[8], il[8];
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            ih[r] = _mm512_set1_epi32(qq[r * nb + b].bias_h);
            il[r] = _mm512_set1_epi32(qq[r * nb + b].bias_l);
        }
        _Pragma("GCC unroll 8") for (int kq = 0; kq < KERN_QK / 4; kq++) {
            const __m512i kv = _mm512_xor_si512(_mm512_loadu_si512(g + KERN_KVQ_AT(4 * kq, 0)), x80);
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
                int32_t wh, wl;
                memcpy(&wh, qq[r * nb + b].h + 4 * kq, 4);
                memcpy(&wl, qq[r * nb + b].l + 4 * kq, 4);
                ih[r] = _mm512_dpbusd_epi32(ih[r], kv, _mm512_set1_epi32(wh));
                il[r] = _mm512_dpbusd_epi32(il[r], kv, _mm512_set1_epi32(wl));
            }
        }
        const __m512 dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            __m512i in = _mm512_add_epi32(_mm512_mullo_epi32(ih[r], _mm512_set1_epi32(254)), il[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(in), _mm512_mul_ps(dk, _mm512_set1_ps(qq[r * nb + b].u)), acc[r]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) _mm512_storeu_ps(sc + r * lds, _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
}

#define QK8_CASE(R) case R: z_qk8_body(qq, nb, t, scale, sc, lds, R); break;
static TGT void z_qk8(const kern_qq *qq, int nb, int R, const uint8_t *t, float scale, float *sc, int64_t lds)
{
    switch (R) { QK8_CASE(1) QK8_CASE(2) QK8_CASE(4) QK8_CASE(8) }
}

static TGT void avx512_att_qk8(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles,
                               float scale, float *sc, int64_t lds)
{
    const int nb = d / KERN_QK;
    const size_t tb = kern_kv_bytes(KERN_KV_Q8_0, kts), hb = (size_t)nb * KERN_KVQ_GROUP;
    for (int r0 = 0, R; r0 < nq; r0 += R) {
        R = z_rows(nq - r0); /* 8, 4, 2 or 1 rows a pass: fewer bodies to compile */
        for (int64_t i = 0; i < ntiles; i++) {
            const uint8_t *t = (const uint8_t *)kt + (size_t)i * tb;
            if (i + PF_TILES < ntiles) /* tiles are kv_dim apart and a head reads its groups of each: fetch ahead */
                kern_x86_prefetch(t + PF_TILES * tb, hb);
            z_qk8(qq + (size_t)r0 * nb, nb, R, t, scale, sc + r0 * lds + i * KERN_TILE, lds);
        }
    }
}

static TGT void avx512_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int kvt, int d,
                              int64_t ntiles, float scale, float *sc, int64_t lds)
{
    const int f16 = kvt == KERN_KV_F16;
    for (int r0 = 0; r0 < nq; r0 += 6) {
        int R = nq - r0 < 6 ? nq - r0 : 6;
        for (int64_t i = 0; i < ntiles; i += 2) {
            int nt = ntiles - i < 2 ? 1 : 2;
            const void *t = (const char *)kt + kern_kv_bytes(kvt, i * kts);
            if (r0 == 0 && i + PF_TILES + 2 <= ntiles) /* the head's slice of the tiles ahead (a first pass) */
                for (int j = 0; j < 2; j++)
                    for (size_t o = 0; o < kern_kv_bytes(kvt, (int64_t)d * KERN_TILE); o += 64)
                        _mm_prefetch((const char *)t + kern_kv_bytes(kvt, (PF_TILES + j) * kts) + o, _MM_HINT_T0);
            float *o = sc + r0 * lds + i * KERN_TILE;
            if (f16) z_qk_h(q + r0 * qs, qs, R, t, kts, d, scale, o, lds, nt);
            else z_qk_f(q + r0 * qs, qs, R, t, kts, d, scale, o, lds, nt);
        }
    }
}

/* R rows x NV vectors of 16 output dims (the last one masked): chains over t. f16: up to
 * 8 rows of 32 dims (a 64-byte line) take each value row's line once for all of a
 * decoding token's query heads; f32: up to 6 rows of 64 dims. Rows may be apart (vs), so
 * they are fetched ahead. */
TGT_INLINE void z_pv_body(const float *p, int64_t lds, int64_t a, int64_t b, const void *v, int64_t vs,
                          int f16, float *out, int64_t os, __mmask16 last, const int R, const int NV)
{
    __m512 acc[8][4];
    const size_t elt = f16 ? 2 : 4;
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int c = 0; c < NV; c++)
            acc[r][c] = _mm512_maskz_loadu_ps(c == NV - 1 ? last : 0xffff, out + r * os + 16 * c);
    for (int64_t t = a; t <= b; t++) {
        __m512 vv[4];
        const int64_t ahead = f16 ? PF_ROWS : PF_ROWS / 8;
        if (t + ahead <= b) { /* within the run (a pool block's rows are followed by other planes) */
            _mm_prefetch((const char *)v + (size_t)(t + ahead) * vs * elt, _MM_HINT_T0);
            _mm_prefetch((const char *)v + ((size_t)(t + ahead) * vs + (size_t)NV * 16) * elt - 1, _MM_HINT_T0);
        }
        _Pragma("GCC unroll 4") for (int c = 0; c < NV; c++)
            vv[c] = z_load(v, t * vs + 16 * c, f16, c == NV - 1 ? last : 0xffff);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            __m512 pb = _mm512_set1_ps(p[r * lds + t]);
            _Pragma("GCC unroll 4") for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int c = 0; c < NV; c++)
            _mm512_mask_storeu_ps(out + r * os + 16 * c, c == NV - 1 ? last : 0xffff, acc[r][c]);
}

#define PV_NV(R, NV) z_pv_body(p, lds, a, b, v, vs, f16, out, os, last, R, NV)
#define PVF_CASE(R)                                                                         \
    case R: {                                                                               \
        if (nv == 4) PV_NV(R, 4);                                                           \
        else if (nv == 3) PV_NV(R, 3);                                                      \
        else if (nv == 2) PV_NV(R, 2);                                                      \
        else PV_NV(R, 1);                                                                   \
        break;                                                                              \
    }
#define PVH_CASE(R)                                                                         \
    case R: {                                                                               \
        if (nv == 2) PV_NV(R, 2);                                                           \
        else PV_NV(R, 1);                                                                   \
        break;                                                                              \
    }
/* f32: up to 6 rows of 64 dims; f16: 8, 4, 2 or 1 rows of 32 (z_rows) */
static TGT void z_pv_f(const float *p, int64_t lds, int R, int64_t a, int64_t b, const void *v, int64_t vs,
                       float *out, int64_t os, int nv, __mmask16 last)
{
    const int f16 = 0;
    switch (R) { PVF_CASE(1) PVF_CASE(2) PVF_CASE(3) PVF_CASE(4) PVF_CASE(5) PVF_CASE(6) }
}
static TGT void z_pv_h(const float *p, int64_t lds, int R, int64_t a, int64_t b, const void *v, int64_t vs,
                       float *out, int64_t os, int nv, __mmask16 last)
{
    const int f16 = 1;
    switch (R) { PVH_CASE(1) PVH_CASE(2) PVH_CASE(4) PVH_CASE(8) }
}

/* R rows x NB q8_0 blocks of 32 output dims (rows rb bytes apart, blocks 34): chains
 * over t of p * (exact scale * int8); up to 6 rows of two blocks take a head's slice of a
 * row at once (8 rows of one block would read its cache lines twice). */
TGT_INLINE void z_pv_q_body(const float *p, int64_t lds, int64_t a, int64_t b, const uint8_t *v, size_t rb,
                            float *out, int64_t os, const int R, const int NB)
{
    __m512 acc[6][4];
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int c = 0; c < 2 * NB; c++) acc[r][c] = _mm512_loadu_ps(out + r * os + 16 * c);
    for (int64_t t = a; t <= b; t++) {
        __m512 vv[4];
        /* rows may be apart (rb) and a head may read a slice of each: fetch ahead */
        if (t + PF_ROWS <= b) {
            _mm_prefetch((const char *)v + (size_t)(t + PF_ROWS) * rb, _MM_HINT_T0);
            _mm_prefetch((const char *)v + (size_t)(t + PF_ROWS) * rb + NB * 34 - 1, _MM_HINT_T0);
        }
        _Pragma("GCC unroll 2") for (int k = 0; k < NB; k++) {
            const uint8_t *blk = v + (size_t)t * rb + (size_t)k * 34;
            const __m512 sv = _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)blk));
            __m128i q0 = _mm_loadu_si128((const __m128i *)(blk + 2)), q1 = _mm_loadu_si128((const __m128i *)(blk + 18));
            vv[2 * k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), sv);
            vv[2 * k + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), sv);
        }
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            __m512 pb = _mm512_set1_ps(p[r * lds + t]);
            _Pragma("GCC unroll 4") for (int c = 0; c < 2 * NB; c++) acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int c = 0; c < 2 * NB; c++) _mm512_storeu_ps(out + r * os + 16 * c, acc[r][c]);
}

#define PVQ_CASE(R)                                                                         \
    case R: {                                                                               \
        if (nb == 2) z_pv_q_body(p, lds, a, b, v, rb, out, os, R, 2);                       \
        else z_pv_q_body(p, lds, a, b, v, rb, out, os, R, 1);                               \
        break;                                                                              \
    }
static TGT void z_pv_q(const float *p, int64_t lds, int R, int64_t a, int64_t b, const uint8_t *v, size_t rb,
                       float *out, int64_t os, int nb)
{
    switch (R) { PVQ_CASE(1) PVQ_CASE(2) PVQ_CASE(3) PVQ_CASE(4) PVQ_CASE(5) PVQ_CASE(6) }
}

static TGT void avx512_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                              int64_t vs, int kvt, int d, float *out, int64_t os)
{
    if (a > b) return;
    if (kvt == KERN_KV_Q8_0) { /* d is a multiple of 32: two blocks at a time */
        for (int d0 = 0; d0 < d; d0 += 64)
            for (int r0 = 0; r0 < nq; r0 += 6)
                z_pv_q(p + r0 * lds, lds, nq - r0 < 6 ? nq - r0 : 6, a, b, (const uint8_t *)v + (size_t)d0 / KERN_QK * 34,
                       kern_kv_bytes(kvt, vs), out + r0 * os + d0, os, d - d0 >= 64 ? 2 : 1);
        return;
    }
    const int f16 = kvt == KERN_KV_F16, W = f16 ? 32 : 64;
    size_t elt = f16 ? 2 : 4;
    for (int d0 = 0; d0 < d; d0 += W) {
        int w = d - d0 < W ? d - d0 : W, nv = (w + 15) / 16;
        __mmask16 last = (__mmask16)(w % 16 ? (1u << (w % 16)) - 1 : 0xffff);
        const void *vd = (const char *)v + (size_t)d0 * elt;
        for (int r0 = 0, R; r0 < nq; r0 += R) {
            R = f16 ? z_rows(nq - r0) : nq - r0 < 6 ? nq - r0 : 6;
            if (f16) z_pv_h(p + r0 * lds, lds, R, a, b, vd, vs, out + r0 * os + d0, os, nv, last);
            else z_pv_f(p + r0 * lds, lds, R, a, b, vd, vs, out + r0 * os + d0, os, nv, last);
        }
    }
}

/* kern_expf for lanes <= 0 or NaN (softmax): the overflow blend is not needed. */
TGT_INLINE __m512 z_expf_nonpos(__m512 x)
{
    __m512 y = z_expf_core(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)));
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    y = _mm512_maskz_mov_ps(ok, y);
    return _mm512_mask_blend_ps(nan, y, x);
}

/* e = exp(s - mx) of 16 scores into s, its 16 lanes added in double to (lo, hi). */
TGT_INLINE void z_soft16(float *s, __mmask16 k, __m512 vmx, __m512d *lo, __m512d *hi)
{
    __m512 e = _mm512_maskz_mov_ps(k, z_expf_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s), vmx)));
    _mm512_mask_storeu_ps(s, k, e);
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
}

static TGT void avx512_softmax(float *s, int64_t n)
{
    __m512 m = _mm512_set1_ps(-__builtin_inff());
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(s + i), m);
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    const __m512 vmx = _mm512_set1_ps(mx);
    /* lanes i mod 32: (l0, h0) for even 16-blocks, (l1, h1) for odd ones */
    __m512d l0 = _mm512_setzero_pd(), h0 = l0, l1 = l0, h1 = l0;
    for (i = 0; i + 32 <= n; i += 32) {
        z_soft16(s + i, 0xffff, vmx, &l0, &h0);
        z_soft16(s + i + 16, 0xffff, vmx, &l1, &h1);
    }
    if (i < n) z_soft16(s + i, (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1), vmx, &l0, &h0);
    if (i + 16 < n) z_soft16(s + i + 16, (__mmask16)((1u << (n - i - 16)) - 1), vmx, &l1, &h1);
    __m512d a16 = _mm512_add_pd(l0, l1), b16 = _mm512_add_pd(h0, h1); /* l[j] + l[j + 16] */
    __m512d a8 = _mm512_add_pd(a16, b16);                                /* + 8 */
    __m256d a4 = _mm256_add_pd(_mm512_castpd512_pd256(a8), _mm512_extractf64x4_pd(a8, 1));
    __m128d a2 = _mm_add_pd(_mm256_castpd256_pd128(a4), _mm256_extractf128_pd(a4, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(a2, _mm_unpackhi_pd(a2, a2)));
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(s + i, _mm512_mul_ps(_mm512_loadu_ps(s + i), inv));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(s + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + i), inv));
    }
}

static TGT void avx512_silu_mul(float *g, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        __m512 e = z_expf(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)));
        __m512 y = _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
                                 _mm512_maskz_loadu_ps(k, up + i));
        _mm512_mask_storeu_ps(g + i, k, y);
    }
}

static TGT void avx512_gelu_mul(float *g, const float *up, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        __m512 t = _mm512_add_ps(one, _mm512_mul_ps(_mm512_set1_ps(0.044715f), _mm512_mul_ps(x, x)));
        __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.79788456080286535587989211986876f), x), t);
        __m512 e = z_expf(_mm512_xor_ps(_mm512_add_ps(u, u), _mm512_set1_ps(-0.0f)));
        __m512 y = _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(k, up + i));
        _mm512_mask_storeu_ps(g + i, k, y);
    }
}

const kern_ops kern_ops_avx512vnni = {
    .name = "avx512vnni",
    .xq_quantize = avx512_xq_quantize,
    .q8t_block = avx512_q8t_block,
    .q8t_tmax = Z_TMAX,
    .q8t_rows = { 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3 },
    .qn_block = kern_qn_avx512_block,
    .xk_quantize = kern_xk_quantize_avx512,
    .qn_tmax = 8,
    .f32_matmul = kern_avx2_f32_matmul,
    .att_qk = avx512_att_qk,
    .att_qk8 = avx512_att_qk8,
    .att_pv = avx512_att_pv,
    .softmax = avx512_softmax,
    .silu_mul = avx512_silu_mul,
    .gelu_mul = avx512_gelu_mul,
    .f32_dot = kern_avx2_f32_dot,
    .f32_axpy = kern_avx2_f32_axpy,
    .f16_dot = kern_avx2_f16_dot,
    .f16_axpy = kern_avx2_f16_axpy,
    .f32_to_f16 = kern_avx2_f32_to_f16,
    .f16_to_f32 = kern_avx2_f16_to_f32,
};

#endif /* __x86_64__ */
