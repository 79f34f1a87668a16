/*
 * kernels_x86.h - the 256-bit kernels every x86 table shares (defined in kernels_avx2.c;
 * private to engined/kernels_*.c: callers go through kernels.h's dispatch table).
 */
#ifndef LLM_KERNELS_X86_H
#define LLM_KERNELS_X86_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Lanes [lo, hi) of one 16-row tile (lo and hi relative to its row 0; the range meets the
 * tile) as the AVX2 tables see it, two halves of 8 rows: each half's maskstore mask in
 * mask[h]; returns the halves that hold any lane (bit h). */
static inline __attribute__((always_inline, target("avx2"))) int kern_x86_halves(int lo, int hi, __m256i mask[2])
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h = 0; h < 2; h++)
        mask[h] = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 8 * h - 1)),
                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(hi - 8 * h), idx));
    return (lo < 8) | (hi > 8) << 1;
}

/* Keeps v, a running integer sum, one chain of adds (an empty asm the compiler cannot see
 * through). Left free, GCC reassociated a block's integer adds into a tree, computed every
 * product first and spilled them to the stack: a store and a load per group and token
 * (a 5-token AVX2 q8t call: 185 stack references, 30 with the chain). Integer adds give
 * the same sums in any order, so the bits do not change. */
#define KERN_X86_CHAIN(v) __asm__("" : "+x"(v))

/* Decode reads each weight byte from memory once; the x86 tiles ask for the n bytes they
 * read next KERN_X86_PF_DIST bytes ahead of p, into L1 (kernels_qn_x86_tile.h says why
 * and what it gave; prefetches never fault, so past a matrix's end is harmless). */
#define KERN_X86_PF_DIST 4096
/* Asks for the n bytes at p, line by line, into L1. */
static inline __attribute__((always_inline)) void kern_x86_prefetch(const void *p, size_t n)
{
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}
static inline __attribute__((always_inline)) void kern_x86_prefetch_ahead(const void *p, size_t n)
{
    kern_x86_prefetch((const char *)p + KERN_X86_PF_DIST, n);
}

void kern_qn_avx512_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                          size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream);
void kern_qn_avx2_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                        size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream);
void kern_qn_avxvnni_block(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                           size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream);
void kern_x86_xq_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst);
/* kern_xk_quantize_ref's bytes (kernels_qn_x86.c) */
void kern_xk_quantize_avx512(const float *x, int64_t n_rows, int64_t cols, void *dst);
void kern_xk_quantize_avx2(const float *x, int64_t n_rows, int64_t cols, void *dst);
void kern_avx2_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1);
void kern_avx2_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int kvt, int d,
                      int64_t ntiles, float scale, float *sc, int64_t lds);
void kern_avx2_att_qk8(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles,
                       float scale, float *sc, int64_t lds);
void kern_avx2_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                      int64_t vs, int kvt, int d, float *out, int64_t os);
void kern_avx2_softmax(float *s, int64_t n);
void kern_avx2_silu_mul(float *g, const float *up, int64_t n);
void kern_avx2_gelu_mul(float *g, const float *up, int64_t n);
float kern_avx2_f32_dot(const float *a, const float *b, int64_t n);
void kern_avx2_f32_axpy(float *y, float a, const float *x, int64_t n);
float kern_avx2_f16_dot(const uint16_t *a, const float *b, int64_t n);
void kern_avx2_f16_axpy(float *y, float a, const uint16_t *x, int64_t n);
void kern_avx2_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void kern_avx2_f16_to_f32(const uint16_t *x, float *y, int64_t n);

#endif
