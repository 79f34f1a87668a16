/*
 * kernels_avx512.c - the "avx512vnni" table: q8t products on zmm registers with
 * vpdpbusd (AVX512F/BW/VL + AVX512_VNNI). The quantizer and the float helpers are the
 * shared 256-bit ones (kernels_x86.h): memory-bound, nothing to gain.
 *
 * A 64-byte group of a tile is one zmm: values 4g..4g+3 of 16 rows, stored as w + 128
 * (unsigned), which vpdpbusd multiplies with one token's four signed values (an embedded
 * 32-bit broadcast from memory) into 16 int32 lanes, one per row. A block's eight groups
 * stay in registers while every token of the call passes: per (16 rows, token, block)
 * that is one broadcast of -128 * sum(x) to start from, 8 vpdpbusd, and the contract's
 * cvt + mul + fma (kernels.h), bit-identical with the scalar twin.
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

/* One tile (16 rows) times T tokens over nsb superblocks; lanes of mask stored. */
#define ZMICRO(T)                                                                          \
static TGT void zmicro_##T(const uint8_t *w, int64_t nsb, const uint8_t *xq, size_t xs,     \
                           float *y, int64_t ldy, __mmask16 mask)                           \
{                                                                                           \
    const int64_t nbp = nsb * KERN_SB_BLOCKS;                                               \
    const size_t dxo = (size_t)nbp * KERN_QK, co = (size_t)nbp * (KERN_QK + 4);             \
    __m512 acc[T];                                                                          \
    _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();     \
    for (int64_t s = 0; s < nsb; s++) {                                                     \
        const kern_q8t_sb *sb = (const kern_q8t_sb *)w + s;                                 \
        _Pragma("GCC unroll 2") for (int b = 0; b < KERN_SB_BLOCKS; b++) {                 \
            const int64_t k = s * KERN_SB_BLOCKS + b;                                       \
            __m512i wv[8];                                                                  \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)                            \
                wv[g] = _mm512_load_si512((const void *)sb->q[b][g]);                       \
            const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sb->d[b])); \
            _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) {                         \
                const uint8_t *xr = xq + (size_t)t * xs;                                    \
                __m512i is = _mm512_set1_epi32(((const int32_t *)(xr + co))[k]);            \
                _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)                        \
                    is = _mm512_dpbusd_epi32(is, wv[g],                                     \
                                             _mm512_set1_epi32(load_i32(xr + k * KERN_QK + 4 * g))); \
                __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(((const float *)(xr + dxo))[k])); \
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc[t]);               \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    _Pragma("GCC unroll 16") for (int t = 0; t < T; t++)                                   \
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);                                   \
}
ZMICRO(1) ZMICRO(2) ZMICRO(3) ZMICRO(4) ZMICRO(5) ZMICRO(6) ZMICRO(7) ZMICRO(8)
ZMICRO(9) ZMICRO(10) ZMICRO(11) ZMICRO(12) ZMICRO(13) ZMICRO(14) ZMICRO(15) ZMICRO(16)

typedef void (*zmicro_fn)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t, __mmask16);
static const zmicro_fn zmicros[KERN_MICRO_T + 1] = {
    NULL, zmicro_1, zmicro_2, zmicro_3, zmicro_4, zmicro_5, zmicro_6, zmicro_7, zmicro_8,
    zmicro_9, zmicro_10, zmicro_11, zmicro_12, zmicro_13, zmicro_14, zmicro_15, zmicro_16,
};

static TGT void avx512_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq,
                                 size_t xs, int nt, float *y, int64_t ldy, int lo, int hi)
{
    for (int i = 0; i < nr; i++) {
        int a = lo - KERN_TILE * i, z = hi - KERN_TILE * i;
        if (z <= 0 || a >= KERN_TILE) continue;
        a = a < 0 ? 0 : a;
        z = z > KERN_TILE ? KERN_TILE : z;
        __mmask16 mask = (__mmask16)(((1u << z) - 1) & ~((1u << a) - 1));
        zmicros[nt](w + (size_t)i * tb, nsb, xq, xs, y + i * KERN_TILE, ldy, mask);
    }
}

const kern_ops kern_ops_avx512vnni = {
    .name = "avx512vnni",
    .xq_quantize = kern_x86_xq_quantize,
    .q8t_block = avx512_q8t_block,
    .q8t_tmax = KERN_MICRO_T,
    .q8t_rows = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 },
    .f32_matmul = kern_avx2_f32_matmul,
    .f32_dot = kern_avx2_f32_dot,
    .f32_axpy = kern_avx2_f32_axpy,
    .f16_dot = kern_avx2_f16_dot,
    .f16_axpy = kern_avx2_f16_axpy,
    .f32_to_f16 = kern_avx2_f32_to_f16,
    .f16_to_f32 = kern_avx2_f16_to_f32,
};

#endif /* __x86_64__ */
