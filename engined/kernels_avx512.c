/*
 * kernels_avx512.c - the AVX-512 VNNI variant of the q8 products.
 *
 * Same tiling as kernels_avx2.c, but vpdpbusd does maddubs + madd in one instruction
 * (u8 x s8 summed by fours into int32, without the int16 saturation), and AVX-512VL
 * gives 32 vector registers, so the GEMM tile is 4 rows x 6 tokens. Vectors stay
 * 256 bits wide: one q8 block is 32 bytes. The float helpers and the quantizer are
 * the AVX2 ones (memory-bound, nothing to gain).
 *
 * Selected by kernels.c only when the CPU reports AVX512F/BW/VL and AVX512_VNNI.
 */
#include "kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define TGT_STR "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define TGT __attribute__((target(TGT_STR)))
#define TGT_INLINE static inline __attribute__((always_inline, target(TGT_STR)))

/* From kernels_avx2.c. */
void kern_avx2_q8_quantize_x(const float *x, int64_t n_rows, int64_t cols, void *dst);
void kern_avx2_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1);
void kern_avx2_f16_matmul(const uint16_t *w, int64_t cols, const float *x, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1);
float kern_avx2_f32_dot(const float *a, const float *b, int64_t n);
void kern_avx2_f32_axpy(float *y, float a, const float *x, int64_t n);
float kern_avx2_f16_dot(const uint16_t *a, const float *b, int64_t n);
void kern_avx2_f16_axpy(float *y, float a, const uint16_t *x, int64_t n);
void kern_avx2_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void kern_avx2_f16_to_f32(const uint16_t *x, float *y, int64_t n);

TGT_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

/* RM x RN tile; see kernels_avx2.c. dpbusd(0, |w|, x with w's sign) = 8 int32 lanes. */
#define Q8_TILE(RM, RN)                                                                    \
TGT_INLINE void q8_tile_##RM##x##RN(const kern_q8_block *w, int64_t ws,                     \
                                    const kern_q8_block *x, int64_t xs, int64_t nb,         \
                                    float *y, int64_t ldy)                                  \
{                                                                                           \
    __m256 acc[RM][RN];                                                                     \
    for (int r = 0; r < RM; r++)                                                            \
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();                       \
    for (int64_t k = 0; k < nb; k++) {                                                      \
        __m256i xv[RN];                                                                     \
        float dx[RN];                                                                       \
        _Pragma("GCC unroll 8")                                                             \
        for (int t = 0; t < RN; t++) {                                                      \
            xv[t] = _mm256_loadu_si256((const __m256i *)x[t * xs + k].qs);                  \
            dx[t] = half_to_float(x[t * xs + k].d);                                         \
        }                                                                                   \
        _Pragma("GCC unroll 8")                                                             \
        for (int r = 0; r < RM; r++) {                                                      \
            __m256i wv = _mm256_loadu_si256((const __m256i *)w[r * ws + k].qs);             \
            __m256i aw = _mm256_abs_epi8(wv);                                               \
            float dw = half_to_float(w[r * ws + k].d);                                      \
            _Pragma("GCC unroll 8")                                                         \
            for (int t = 0; t < RN; t++) {                                                  \
                __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw,                 \
                                                _mm256_sign_epi8(xv[t], wv));               \
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d),                          \
                                            _mm256_set1_ps(dw * dx[t]), acc[r][t]);         \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    for (int r = 0; r < RM; r++)                                                            \
        for (int t = 0; t < RN; t++) y[t * ldy + r] = hsum8(acc[r][t]);                     \
}

Q8_TILE(4, 6)
Q8_TILE(4, 1)
Q8_TILE(1, 6)
Q8_TILE(1, 1)

#define Q8_RM 4
#define Q8_RN 6
#define Q8_CHUNK_BYTES (128 * 1024)

static TGT void avx512_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                                 float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    const int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    const kern_q8_block *W = w, *X = xq;
    int64_t chunk = Q8_CHUNK_BYTES / (nb * (int64_t)sizeof(kern_q8_block));
    chunk = chunk < Q8_RM ? Q8_RM : chunk / Q8_RM * Q8_RM;
    if (n_tok == 1) chunk = r1 - r0; /* GEMV: one pass over W, no reuse to win */
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        int64_t t = 0;
        for (; t + Q8_RN <= n_tok; t += Q8_RN) {
            const kern_q8_block *xt = X + t * nb;
            float *yt = y + t * ldy;
            int64_t r = c0;
            for (; r + Q8_RM <= c1; r += Q8_RM) q8_tile_4x6(W + r * nb, nb, xt, nb, nb, yt + r, ldy);
            for (; r < c1; r++) q8_tile_1x6(W + r * nb, nb, xt, nb, nb, yt + r, ldy);
        }
        for (; t < n_tok; t++) {
            int64_t r = c0;
            for (; r + Q8_RM <= c1; r += Q8_RM) q8_tile_4x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, ldy);
            for (; r < c1; r++) q8_tile_1x1(W + r * nb, nb, X + t * nb, nb, nb, y + t * ldy + r, ldy);
        }
    }
}

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
