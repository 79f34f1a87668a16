/*
 * quant.h - the block layouts of ggml's weight types, declared once, and the
 * per-type dequantize/quantize kernels behind the traits table of qtype.h.
 *
 *   const qt_traits *t = qt_get(QT_Q4_K);             // from qtype.h
 *   t->quant(x, blocks, n);                           // n a multiple of QK_K
 *   t->dequant(blocks, y, n);                         // y == x up to the type's error
 *
 * Layouts and formulas follow ggml (ggml-common.h, ggml-quants.c) so that GGUF files
 * written by llama.cpp decode to the same floats, bit for bit: every dequantizer does
 * its float operations in ggml's order and never fuses a multiply-add. Quantizers
 * follow ggml's reference (non-imatrix) algorithms.
 *
 * Ownership: nothing here allocates; callers own every buffer. Through the traits
 * table, packed data may sit at any address (a hostile GGUF can set its alignment
 * to 1): misaligned blocks go through a small aligned buffer. The quant_* kernels
 * declared below need their block's natural alignment (2 bytes, 4 for Q8_K). f32
 * buffers are float-aligned.
 *
 * SIMD: every kernel's plain C code is the reference. On x86-64 with F16C/AVX2 the
 * dequantizers (F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K), the Q4_0
 * and Q8_0 quantizers and the K-quant scale searches use vector twins that produce
 * the same bytes and floats bit for bit (tests compare them on every type). The twins
 * sit in tables (quant_ops.h) chosen once; LLM_QUANT=scalar forces the reference.
 *
 * Owner: quant helper. Files: quant.h, quant.c (plain types, 32-value blocks, the
 * traits table), quant_k.c (the 256-value "K" super-blocks).
 */
#ifndef LLM_QUANT_H
#define LLM_QUANT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "qtype.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256        /* values per K-quant super-block */
#define K_SCALE_SIZE 12 /* bytes of packed 6-bit scales/mins in Q4_K/Q5_K */

/* All halves are IEEE binary16 bit patterns (see f16.h). */

typedef struct {
    uint16_t d;              /* scale: x = d * (q - 8) */
    uint8_t  qs[QK4_0 / 2];  /* nibbles: low = values 0..15, high = values 16..31 */
} block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

typedef struct {
    uint16_t d;              /* scale: x = d * q + m */
    uint16_t m;              /* minimum */
    uint8_t  qs[QK4_1 / 2];  /* nibbles as in q4_0 */
} block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

typedef struct {
    uint16_t d;              /* scale: x = d * (q - 16) */
    uint8_t  qh[4];          /* bit j of this little-endian u32 = 5th bit of value j */
    uint8_t  qs[QK5_0 / 2];  /* low 4 bits, packed as in q4_0 */
} block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

typedef struct {
    uint16_t d;              /* scale: x = d * q + m */
    uint16_t m;              /* minimum */
    uint8_t  qh[4];          /* 5th bits as in q5_0 */
    uint8_t  qs[QK5_1 / 2];  /* low 4 bits */
} block_q5_1;
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

typedef struct {
    uint16_t d;              /* scale: x = d * q */
    int8_t   qs[QK8_0];      /* quants */
} block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

typedef struct {
    uint16_t d;              /* scale: x = d * q */
    uint16_t s;              /* d * sum(qs), for dot products */
    int8_t   qs[QK8_1];      /* quants */
} block_q8_1;
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

/* 2.625 bits per weight: 16 sub-blocks of 16, 4-bit scale and 4-bit min each. */
typedef struct {
    uint8_t  scales[QK_K / 16]; /* low nibble: scale, high nibble: min, per sub-block */
    uint8_t  qs[QK_K / 4];      /* 2-bit quants, 4 per byte (see dequant for order) */
    uint16_t d;                 /* super-block scale of the scales */
    uint16_t dmin;              /* super-block scale of the mins */
} block_q2_K;
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

/* 3.4375 bits per weight: 16 sub-blocks of 16, signed 6-bit scales. */
typedef struct {
    uint8_t  hmask[QK_K / 8];   /* high (3rd) bit of each quant; clear means -4 */
    uint8_t  qs[QK_K / 4];      /* low 2 bits */
    uint8_t  scales[12];        /* 16 6-bit scales, biased by 32 */
    uint16_t d;                 /* super-block scale */
} block_q3_K;
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* 4.5 bits per weight: 8 sub-blocks of 32, 6-bit scale and 6-bit min each. */
typedef struct {
    uint16_t d;                     /* super-block scale of the scales */
    uint16_t dmin;                  /* super-block scale of the mins */
    uint8_t  scales[K_SCALE_SIZE];  /* 8 scales + 8 mins, 6 bits each */
    uint8_t  qs[QK_K / 2];          /* 4-bit quants */
} block_q4_K;
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

/* 5.5 bits per weight: as q4_K plus one high bit per quant. */
typedef struct {
    uint16_t d;                     /* super-block scale of the scales */
    uint16_t dmin;                  /* super-block scale of the mins */
    uint8_t  scales[K_SCALE_SIZE];  /* 8 scales + 8 mins, 6 bits each */
    uint8_t  qh[QK_K / 8];          /* 5th bit of each quant */
    uint8_t  qs[QK_K / 2];          /* low 4 bits */
} block_q5_K;
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

/* 6.5625 bits per weight: 16 sub-blocks of 16, signed 8-bit scales. */
typedef struct {
    uint8_t  ql[QK_K / 2];      /* low 4 bits */
    uint8_t  qh[QK_K / 4];      /* high 2 bits */
    int8_t   scales[QK_K / 16]; /* per sub-block scale */
    uint16_t d;                 /* super-block scale */
} block_q6_K;
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* Intermediate type for activations in K-quant dot products. */
typedef struct {
    float    d;                 /* scale: x = d * q */
    int8_t   qs[QK_K];          /* quants */
    int16_t  bsums[QK_K / 16];  /* sum of each group of 16 quants */
} block_q8_K;
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* Kernels of quant_k.c, referenced by the traits table in quant.c. Each converts n
 * values, n a multiple of QK_K. */
/* Q3_K's 16 sub-block scales (12 packed bytes) as ints in -32..31. */
void quant_q3_K_scales(const uint8_t *packed, int *out);
void quant_dequant_q2_K(const void *src, float *dst, int64_t n);
void quant_dequant_q3_K(const void *src, float *dst, int64_t n);
void quant_dequant_q4_K(const void *src, float *dst, int64_t n);
void quant_dequant_q5_K(const void *src, float *dst, int64_t n);
void quant_dequant_q6_K(const void *src, float *dst, int64_t n);
void quant_dequant_q8_K(const void *src, float *dst, int64_t n);
void quant_quant_q2_K(const float *src, void *dst, int64_t n);
void quant_quant_q3_K(const float *src, void *dst, int64_t n);
void quant_quant_q4_K(const float *src, void *dst, int64_t n);
void quant_quant_q5_K(const float *src, void *dst, int64_t n);
void quant_quant_q6_K(const float *src, void *dst, int64_t n);
void quant_quant_q8_K(const float *src, void *dst, int64_t n);

/* Which twins run: one table ("avx2", "f16c" or "scalar") chosen once, on the first
 * conversion, from cpu_features(), unless LLM_QUANT names one (common/cpu.h's dispatch
 * convention). */
/* Name of the table in use. */
const char *quant_name(void);
/* Chooses again, reading LLM_QUANT anew. Not thread-safe: for tests, before
 * concurrent use. */
void quant_init(void);
/* Switches the twins off (the scalar table: the reference) or back on (the chosen
 * table). Not thread-safe: for tests and benchmarks, before concurrent use. */
void quant_set_simd(bool on);

/* ggml's round-to-nearest for |x| < 2^22 (ties to even, via the 1.5*2^23 trick);
 * quantizers use it so that their choices match ggml's. */
static inline int quant_nearest_int(float x)
{
    float v = x + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

#endif
