/*
 * kernels.h - the engine's compute kernels: INT8 block matrix products and the small
 * float helpers attention needs, each with a scalar reference twin and SIMD variants
 * (AVX2, AVX-512 VNNI, NEON sdot) chosen once at start-up.
 *
 *   kern_init();                                    // once, before any thread runs
 *   size_t rb = kern_q8_row_bytes(cols);            // bytes of one q8 row
 *   kern_q8_quantize_w(w_f32, cols, w_q8);          // one weight row (load time)
 *   kern_q8_quantize_x(x, n_tok, cols, x_q8);       // activations, every forward
 *   kern_q8_matmul(w_q8, cols, x_q8, n_tok, y, ldy, r0, r1);   // y[t*ldy + r]
 *
 * Weight and activation format "q8": exactly ggml's block_q8_0 (an f16 scale d and 32
 * int8 values q, value = d * q), 34 bytes per 32 values. A row of `cols` values is
 * ceil(cols/32) blocks stored back to back; the columns past `cols` in the last block
 * are zero (so they add nothing to a dot product). Rows of a matrix are contiguous:
 * row r starts at r * kern_q8_row_bytes(cols). This is byte-identical to a Q8_0 GGUF
 * tensor whose row length is a multiple of 32, so those convert by copy.
 *
 * Matrix products compute, for rows r in [r0, r1) of the weight W (w_rows x cols) and
 * every token t of X (n_tok x cols), Y[t * ldy + r] = dot(W row r, X row t). The
 * caller splits [0, w_rows) across threads (see pool.h); each call touches only its
 * rows of Y. Up to 32 tokens (decode, or several sessions decoded together) the
 * product is memory-bound and reads W exactly once, as four long sequential streams;
 * beyond that it is a tiled GEMM (4 rows x 3 tokens on AVX2, 4 x 4 on AVX-512) over
 * row chunks that stay in L2 while every token tile passes over them. Each (row,
 * token) pair keeps llama.cpp's order: 8 float lanes of fma(d_w*d_x, int lanes), one
 * horizontal sum at the end.
 *
 * Precision: the int32 block dots are exact, so SIMD results differ from the scalar
 * twin only by float summation order (tests use a relative tolerance of 1e-5 on each
 * output, against the sum of the absolute element products). kern_q8_quantize_x is bit-exact
 * across variants. The activation rounding follows llama.cpp's AVX2 Q8_0 quantizer
 * (scale 127/amax, round half to even); weight rounding follows ggml's reference
 * quantize_row_q8_0 (d = amax/127, round half away from zero).
 *
 * Threading: every kernel is reentrant; kern_init/kern_select change a global
 * table and must not run concurrently with kernels.
 * Ownership: kernels never allocate; all buffers belong to the caller. (The
 * avx512vnni-fast prefill keeps ~350 KB of tables on the calling thread's stack.)
 */
#ifndef LLM_KERNELS_H
#define LLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define KERN_QK 32 /* values per q8 block */

/* One q8 block: ggml's block_q8_0. */
typedef struct {
    uint16_t d;            /* scale, IEEE half */
    int8_t   qs[KERN_QK];  /* values, value = d * qs[i] */
} kern_q8_block;
_Static_assert(sizeof(kern_q8_block) == 34, "kern_q8_block must match ggml block_q8_0");

/* The dispatch table: one per instruction set. */
typedef struct {
    const char *name; /* "scalar", "avx2", "avx512vnni", "neon" */
    /* x (n_rows x cols f32, row stride cols) -> n_rows q8 rows */
    void  (*q8_quantize_x)(const float *x, int64_t n_rows, int64_t cols, void *dst);
    void  (*q8_matmul)(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1);
    void  (*f32_matmul)(const float *w, int64_t cols, const float *x, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1);
    void  (*f16_matmul)(const uint16_t *w, int64_t cols, const float *x, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1);
    float (*f32_dot)(const float *a, const float *b, int64_t n);
    void  (*f32_axpy)(float *y, float a, const float *x, int64_t n);
    float (*f16_dot)(const uint16_t *a, const float *b, int64_t n);
    void  (*f16_axpy)(float *y, float a, const uint16_t *x, int64_t n);
    void  (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
    void  (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
} kern_ops;

/* The table in use. Starts as the scalar table, so kernels work even before
 * kern_init(); read it through the wrappers below. */
extern const kern_ops *kern_active;

/* Picks the best table this CPU supports (AVX-512 VNNI > AVX2+FMA+F16C > scalar on
 * x86, NEON dotprod on aarch64), unless env LLM_KERNELS names one (an unknown or
 * unsupported name logs a warning and keeps the automatic choice). Idempotent.
 * "avx512vnni-fast" (faster prefill, not llama.cpp's float order) is never picked
 * automatically. "avx2" and "avx512vnni" give bit-identical q8 products, in the order
 * of llama.cpp's AVX2 kernels. */
void kern_init(void);
/* Switches to the named table; returns 0, or -1 (table unchanged) when the name is
 * unknown, not compiled in, or not supported by this CPU. */
int kern_select(const char *name);
/* The named table if it is compiled in and this CPU runs it, else NULL. For tests
 * that compare every variant with "scalar". */
const kern_ops *kern_get(const char *name);
/* Name of the table in use ("scalar", "avx2", ...). */
const char *kern_name(void);

/* Values of a row rounded up to whole blocks. */
static inline int64_t kern_q8_padded(int64_t cols) { return (cols + KERN_QK - 1) / KERN_QK * KERN_QK; }
/* Bytes of one q8 row of `cols` values (cols >= 1). */
static inline size_t kern_q8_row_bytes(int64_t cols)
{
    return (size_t)((cols + KERN_QK - 1) / KERN_QK) * sizeof(kern_q8_block);
}

/* Quantizes one weight row of `cols` floats into kern_q8_row_bytes(cols) bytes at dst,
 * with ggml's reference Q8_0 rounding; the padding values are 0. Scalar (load time). */
void kern_q8_quantize_w(const float *src, int64_t cols, void *dst);
/* Dequantizes one q8 row back to `cols` floats (tests, the float path on Q8 data). */
void kern_q8_dequantize(const void *src, int64_t cols, float *dst);

/* Quantizes n_rows activation rows (row stride cols floats) into n_rows q8 rows of
 * kern_q8_row_bytes(cols) bytes each, padding with zeros. */
static inline void kern_q8_quantize_x(const float *x, int64_t n_rows, int64_t cols, void *dst)
{ kern_active->q8_quantize_x(x, n_rows, cols, dst); }

/* Y[t*ldy + r] = sum over blocks of d_w * d_x * (int dot of the block), for r in
 * [r0, r1), t in [0, n_tok); W and X are q8 rows of `cols` values (see above). */
static inline void kern_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                                  float *y, int64_t ldy, int64_t r0, int64_t r1)
{ kern_active->q8_matmul(w, cols, xq, n_tok, y, ldy, r0, r1); }

/* Same over f32 weights (w_rows x cols, row stride cols) and f32 X (n_tok x cols). */
static inline void kern_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                                   float *y, int64_t ldy, int64_t r0, int64_t r1)
{ kern_active->f32_matmul(w, cols, x, n_tok, y, ldy, r0, r1); }

/* Same over f16 weights (row stride cols halves) and f32 X, accumulating in f32. */
static inline void kern_f16_matmul(const uint16_t *w, int64_t cols, const float *x, int64_t n_tok,
                                   float *y, int64_t ldy, int64_t r0, int64_t r1)
{ kern_active->f16_matmul(w, cols, x, n_tok, y, ldy, r0, r1); }

/* Returns sum a[i]*b[i] over n floats. */
static inline float kern_f32_dot(const float *a, const float *b, int64_t n)
{ return kern_active->f32_dot(a, b, n); }

/* y[i] += a * x[i] over n floats. */
static inline void kern_f32_axpy(float *y, float a, const float *x, int64_t n)
{ kern_active->f32_axpy(y, a, x, n); }

/* Returns sum f16(a[i]) * b[i]: a is an f16 row (a KV-cache key), b an f32 query. */
static inline float kern_f16_dot(const uint16_t *a, const float *b, int64_t n)
{ return kern_active->f16_dot(a, b, n); }

/* y[i] += a * f16(x[i]): accumulates an f16 row (a KV-cache value) into f32. */
static inline void kern_f16_axpy(float *y, float a, const uint16_t *x, int64_t n)
{ kern_active->f16_axpy(y, a, x, n); }

/* y[i] = half(x[i]), round to nearest even (bit-exact with f32_to_f16 in f16.h). */
static inline void kern_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{ kern_active->f32_to_f16(x, y, n); }

/* y[i] = float(x[i]), exact. */
static inline void kern_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{ kern_active->f16_to_f32(x, y, n); }

/* The per-ISA tables, for kernels.c's dispatcher; use kern_get() elsewhere. */
extern const kern_ops kern_ops_scalar;
#if defined(__x86_64__)
extern const kern_ops kern_ops_avx2;
extern const kern_ops kern_ops_avx512vnni;
extern const kern_ops kern_ops_avx512vnni_fast;
#endif
#if defined(__aarch64__)
extern const kern_ops kern_ops_neon;
#endif

#endif
