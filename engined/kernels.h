/*
 * kernels.h - the engine's compute kernels: INT8 matrix products over weights stored
 * in row tiles ("q8t"), and the small float helpers, each with a scalar reference twin
 * and SIMD variants (AVX2, AVX-VNNI, AVX-512 VNNI, NEON sdot and smmla) chosen once at
 * start-up.
 *
 *   kern_init();                                       // once, before any thread runs
 *   size_t mb = kern_q8t_bytes(rows, cols);            // a weight matrix in tiles
 *   kern_q8t_pack(q8_rows, n, cols, tile);             // 16 block_q8_0 rows -> one tile
 *   size_t xs = kern_xq_row_bytes(cols);               // one quantized activation row
 *   kern_xq_quantize(x, n_tok, cols, xq);              // activations, every forward
 *   kern_q8t_matmul(w, cols, xq, n_tok, y, ldy, r0, r1);   // y[t*ldy + r]
 *
 * Weight layout "q8t" (built once by convert.c into the segment): the rows of a matrix
 * go in tiles of KERN_TILE (16) rows; a tile is a run of superblocks, each holding two
 * 32-value blocks of its 16 rows: first the 32 f16 scales (block-major), then for each
 * block 8 groups of 64 bytes, group g holding values 4g..4g+3 of the 16 rows, row by
 * row, each value stored as w + 128 (an unsigned byte). So one 64-byte vector is what
 * a vpdpbusd (or a 4-lane sdot by element) multiplies against four values of one
 * token for 16 rows at once, and the float work of a block is done once per 16 rows.
 * Superblocks are 1088 = 17 x 64 bytes: every tile, superblock and vector is 64-byte
 * aligned when the matrix is. Rows past the matrix (the last tile) and values past a
 * row's length are zero (byte 0x80, scale 0). A later 4-bit layout can use the same
 * tile/superblock shape with 16-byte groups.
 *
 * Activation layout "xq" (per forward pass, caller's scratch): per token a row of
 * kern_xq_row_bytes(cols) bytes: the int8 values of every block (blocks padded to the
 * tiles' even count), then each block's scale D as a float, then -128 * (sum of its
 * values) as an int32 (what lets vpdpbusd take the unsigned weights), then (for the
 * native layouts) the sum of its first 16 values as an int32, then sum * D as a float
 * (exact: 12 by 11 bits), then per pair of blocks their two sums as int16 in one int32
 * (the even block's low; |sum| <= 4064), then per block its two halves' sums as int16
 * in one int32 (the first half's low): what the K kinds' mins and offsets take as they
 * are.
 *
 * The product, and its order (the contract every table keeps bit for bit): for each
 * output y[t][r] = one chain over the blocks k = 0, 1, ... of the row,
 *     acc = fmaf((float)isum_k, d_w[r][k] * d_x[t][k], acc),   acc starting at +0,
 * where isum_k is the exact int32 dot of block k and d_w * d_x is exact (two halves).
 * Nothing else enters, so y[t][r] is a pure function of (weight row r, activation row
 * t): the same bits whatever the number of tokens, the row range, the thread split or
 * the kernel table (batch invariance; tests/check_kernels.c asserts it).
 *
 * The native layouts keep one chain per output the same way. With p = the exact int32
 * dot of a block's unsigned values and its int8 activations (p_0, p_1 over its two
 * halves), S = the sum of the block's activations (S_0, S_1), D its scale, the B kinds
 * go block by block:
 *   B0: acc = fmaf((float)(p - off * S), d * D, acc)
 *   B1: acc = fmaf((float)p, d * D, acc); acc = fmaf(m, S * D, acc)
 * and the K kinds (whose activations have Q8_K rounding: one D per 256 values, so per
 * super-block) sum each super-block exactly in int32 over its blocks b, then take one
 * float step per super-block with D of its first block, as llama.cpp's K-quant dot
 * products do (the scaled mins in a chain of their own, subtracted at the end):
 *   K:  I = sum sc_b p_b,  M = sum mn_b S_b
 *   K6: I = sum over the halves h of sc_bh (p_bh - 32 S_bh)
 *   K2: I = sum sc_bh p_bh, M = sum mn_bh S_bh
 *   acc = fmaf((float)I, d * D, acc); accm = fmaf((float)M, dmin * D, accm);
 *   y = acc - accm (K6: accm = 0).
 * (every integer term fits int32: |I| < 2^28). Same properties: batch invariance, and
 * the same bits from every table.
 * A native super-block holds 8 blocks of 16 rows: a header (f16 d per row, then the
 * kind's per-block or per-half scales, B1's mins, K's dmin), then the unsigned values
 * in 64-byte groups as q8t's: 4-, 5- and 6-bit kinds as nibbles (256 bytes a block,
 * groups 0-3 low, 4-7 high), each block's 5th bits (64 bytes: bit g of group g) or
 * 5th-6th bits (128: bits 2(g % 4) of half g / 4) right after its nibbles, so that a
 * super-block is read front to back (kern_qn_block_bytes); K2 (Q2_K) at 2 bits,
 * 128 bytes a block, group g in bits 2(g % 4) of the block's 64-byte half g / 4, its
 * header d, dmin and Q2_K's own byte (scale | min << 4) per 16-value half.
 * A row that ends in part of a super-block (B kinds, e.g. gemma's 1152 = 4.5 x 256)
 * keeps that last super-block's whole header and only its blocks, padded to 64 bytes
 * (kern_qn_tile_bytes), so that the next tile follows at once: a gap of unused blocks
 * at every tile's end halved decode from memory (bench_qn).
 *
 * Activation rounding follows llama.cpp's AVX2 Q8_0 quantizer (scale 127/amax, round
 * half to even); weight rounding is ggml's reference quantize_row_q8_0 (common/quant.c).
 *
 * Threading: every kernel is reentrant; kern_init/kern_select change a global table and
 * must not run concurrently with kernels. Ownership: kernels never allocate; all
 * buffers belong to the caller.
 */
#ifndef LLM_KERNELS_H
#define LLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "quant.h"

#define KERN_QK 32          /* values per block */
#define KERN_TILE 16        /* rows per tile */
#define KERN_SB_BLOCKS 2    /* blocks per superblock */
#define KERN_MICRO_T 16     /* most tokens one micro-kernel call takes */

/* One superblock of a q8t tile. */
typedef struct {
    uint16_t d[KERN_SB_BLOCKS][KERN_TILE];                 /* scale of (block, row), f16 */
    uint8_t  q[KERN_SB_BLOCKS][KERN_QK / 4][KERN_TILE][4]; /* w + 128: block, group, row, value */
} kern_q8t_sb;
_Static_assert(sizeof(kern_q8t_sb) == 1088 && sizeof(kern_q8t_sb) % 64 == 0,
               "kern_q8t_sb is part of the segment layout (64-byte multiple)");

/* A block of the product: rows [lo, hi) of nr consecutive tiles (tile_bytes apart)
 * times nt tokens (nt <= the table's q8t_tmax, xq rows xs bytes apart), over nsb
 * superblocks: y[t * ldy + i] for i in [lo, hi) (i counts rows from the first tile's
 * row 0). stream: the whole product is this one token chunk (decode, small batches),
 * so the tiles come from memory once: read each once, prefetching; else the panel is
 * reused from L2 by several chunks. */
typedef void (*kern_q8t_block_fn)(const uint8_t *w, size_t tile_bytes, int nr, int64_t nsb,
                                  const uint8_t *xq, size_t xs, int nt, float *y, int64_t ldy,
                                  int lo, int hi, int stream);

/* Tiled weight types: q8t, and the native layouts (kernels_qn.c). */
typedef enum {
    KERN_W_Q8T = 0, KERN_W_Q4_0, KERN_W_Q4_1, KERN_W_Q5_0, KERN_W_Q5_1, KERN_W_Q4_K,
    KERN_W_Q5_K, KERN_W_Q6_K, KERN_W_Q2_K, KERN_W_COUNT
} kern_wtype;

#define KERN_QN_BLOCKS 8 /* 32-value blocks per native super-block */
typedef enum { KERN_QN_B0, KERN_QN_B1, KERN_QN_K, KERN_QN_K6, KERN_QN_K2 } kern_qn_kind;
/* What a native layout is: see the layout comment above. */
typedef struct {
    const char *name;
    uint32_t    qtype;     /* the GGUF type it keeps */
    int         kind;      /* kern_qn_kind */
    int         bits;      /* 2, 4, 5 or 6 */
    int         offset;    /* B0: the value offset (8, 16); K6: 32 */
    size_t      hdr;       /* header bytes of a super-block */
    size_t      sb_bytes;  /* bytes of a super-block of 16 rows (a multiple of 64) */
} kern_qn_desc;

/* Rows [lo, hi) of nr consecutive native tiles (tb bytes each) times nt tokens (nt <=
 * the table's qn_tmax) over a row of cols values: y[t * ldy + i], i counting rows from
 * the first tile's row 0. stream: the call's tiles come from memory (the first token
 * chunk over them: a whole decode step of up to qn_tmax sessions, or the first chunk of
 * a larger one), so its first pass over each tile prefetches; later chunks find the
 * panel in L2. */
typedef void (*kern_qn_block_fn)(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols,
                                 const uint8_t *xq, size_t xs, int nt, float *y, int64_t ldy,
                                 int lo, int hi, int stream);
/* Tile i's lanes [*a, *z) of a call's rows [lo, hi) (rows counted from tile 0's first):
 * whether it has any. */
static inline int kern_tile_lanes(int lo, int hi, int i, int *a, int *z)
{
    *a = lo - KERN_TILE * i, *z = hi - KERN_TILE * i;
    *a = *a < 0 ? 0 : *a > KERN_TILE ? KERN_TILE : *a;
    *z = *z < 0 ? 0 : *z > KERN_TILE ? KERN_TILE : *z;
    return *a < *z;
}
/* The same lanes as a bit mask (bit j: row j of tile i), an AVX-512 store mask. */
static inline uint16_t kern_tile_bits(int lo, int hi, int i)
{
    int a, z;
    kern_tile_lanes(lo, hi, i, &a, &z);
    return (uint16_t)(((1u << z) - 1) & ~((1u << a) - 1));
}
/* The scalar definition (kernels_qn.c); the tables without their own use it. */
void kern_qn_block_ref(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                       size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream);

/* The dispatch table: one per instruction set. */
typedef struct kern_qq kern_qq; /* a quantized query block (below) */

typedef struct {
    const char *name; /* "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neoni8mm" */
    /* x (n_rows x cols f32, row stride cols) -> n_rows xq rows */
    void  (*xq_quantize)(const float *x, int64_t n_rows, int64_t cols, void *dst);
    /* the same with Q8_K rounding, finished (kern_xk_quantize) */
    void  (*xk_quantize)(const float *x, int64_t n_rows, int64_t cols, void *dst);
    kern_q8t_block_fn q8t_block;
    int   q8t_tmax;                        /* tokens per micro call in a long product */
    uint8_t q8t_rows[KERN_MICRO_T + 1];    /* tiles per micro call for nt tokens */
    kern_qn_block_fn qn_block;             /* native layouts */
    int   qn_tmax;                         /* tokens per qn_block call in a long product */
    void  (*f32_matmul)(const float *w, int64_t cols, const float *x, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1);
    /* attention and element-wise pieces (see the wrappers below) */
    void  (*att_qk)(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int kvt, int d,
                    int64_t ntiles, float scale, float *sc, int64_t lds);
    void  (*att_qk8)(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles, float scale,
                     float *sc, int64_t lds);
    void  (*att_pv)(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                    int64_t vs, int kvt, int d, float *out, int64_t os);
    void  (*softmax)(float *s, int64_t n);
    void  (*silu_mul)(float *g, const float *up, int64_t n);
    void  (*gelu_mul)(float *g, const float *up, int64_t n);
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

/* Picks the best table this CPU supports (x86: AVX-512 VNNI > AVX-VNNI > AVX2+FMA+F16C
 * > scalar; aarch64: NEON dotprod + i8mm > NEON dotprod > scalar), unless env
 * LLM_KERNELS names one (common/cpu.h's dispatch convention: an unknown or unsupported
 * name logs a warning and keeps the automatic choice). Idempotent. Every table gives the same bits, so the choice changes
 * only speed. */
void kern_init(void);
/* Switches to the named table; returns 0, or -1 (table unchanged) when the name is
 * unknown, not compiled in, or not supported by this CPU. */
int kern_select(const char *name);
/* The named table if it is compiled in and this CPU runs it, else NULL. */
const kern_ops *kern_get(const char *name);
/* Name of the table in use ("scalar", "avx2", ...). */
const char *kern_name(void);

/* ---- layouts ---- */

/* Blocks of a row, padded to whole superblocks. */
static inline int64_t kern_nsb(int64_t cols) { return (cols + KERN_QK * KERN_SB_BLOCKS - 1) / (KERN_QK * KERN_SB_BLOCKS); }
/* Bytes of one tile of rows of `cols` values (cols >= 1). */
static inline size_t kern_q8t_tile_bytes(int64_t cols) { return (size_t)kern_nsb(cols) * sizeof(kern_q8t_sb); }
/* Bytes of a rows x cols matrix in tiles. */
static inline size_t kern_q8t_bytes(int64_t rows, int64_t cols)
{
    return (size_t)((rows + KERN_TILE - 1) / KERN_TILE) * kern_q8t_tile_bytes(cols);
}
/* Bytes of one xq activation row (a multiple of 64). */
static inline size_t kern_xq_row_bytes(int64_t cols)
{
    size_t nbp = (size_t)kern_nsb(cols) * KERN_SB_BLOCKS;
    return (nbp * (KERN_QK + 22) + 63) / 64 * 64;
}
/* Byte offsets, from the row's start, of the parts of an xq row of `cols` values after
 * the int8 values: scales D, -128 * sums, first-half sums, sum * D, pairs of sums,
 * pairs of half sums (the layout above). */
typedef struct {
    size_t d, c, hs, sd, s2, hp;
} kern_xq_offs;
static inline kern_xq_offs kern_xq_offsets(int64_t cols)
{
    size_t nbp = (size_t)kern_nsb(cols) * KERN_SB_BLOCKS;
    kern_xq_offs o = { nbp * KERN_QK, nbp * (KERN_QK + 4), nbp * (KERN_QK + 8), nbp * (KERN_QK + 12),
                       nbp * (KERN_QK + 16), nbp * (KERN_QK + 18) };
    return o;
}
/* Bytes of one block_q8_0 row of `cols` values (the last block zero-padded). */
static inline size_t kern_q8_row_bytes(int64_t cols)
{
    return (size_t)((cols + KERN_QK - 1) / KERN_QK) * sizeof(block_q8_0);
}

/* Quantizes one weight row of `cols` floats into kern_q8_row_bytes(cols) bytes of
 * block_q8_0 at dst with ggml's reference rounding; padding values are 0. Load time. */
void kern_q8_quantize_w(const float *src, int64_t cols, void *dst);
/* Packs n <= KERN_TILE block_q8_0 rows of `cols` values (kern_q8_row_bytes apart) into
 * one tile of kern_q8t_tile_bytes(cols) bytes; rows n..15 of the tile are zero. */
void kern_q8t_pack(const void *q8_rows, int n, int64_t cols, void *tile);
/* Dequantizes row r of a q8t matrix into `cols` floats (embedding lookup, tests). */
void kern_q8t_dequant_row(const void *w, int64_t cols, int64_t r, float *dst);

/* ---- products ---- */

/* Quantizes n_rows activation rows (row stride cols floats) into n_rows xq rows: the
 * values, scales and -128 * sums (all q8t products read). */
static inline void kern_xq_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst)
{ kern_active->xq_quantize(x, n_rows, cols, dst); }

/* Then the native layouts' sums (first-half sums, S * D) of those rows, which their
 * products also read. Plain C: the same bits everywhere. */
void kern_xq_finish(void *xq, int64_t n_rows, int64_t cols);
/* The pairs of sums and of half sums of one xq row whose -128 * sums and first-half
 * sums are written (kern_xq_finish's last part, for a table's own quantizer that writes
 * those itself). */
void kern_xq_pairs(void *row, int64_t cols);

/* The same xq layout, finished, with llama.cpp's K-quant activation rounding (Q8_K: one
 * float scale per 256 values, given to each of its blocks), for matrices from K-quant
 * files, so that their logits follow llama.cpp's. The table's own (AVX2, AVX-512) or
 * the plain C definition, kern_xk_quantize_ref: the same bytes. */
static inline void kern_xk_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst)
{ kern_active->xk_quantize(x, n_rows, cols, dst); }
void kern_xk_quantize_ref(const float *x, int64_t n_rows, int64_t cols, void *dst);
/* kern_xq_quantize and kern_xq_finish, then the S * D entries as llama.cpp's Q8_1 sums (half(amax / 127 *
 * S)), for matrices from Q4_1/Q5_1 files. */
void kern_x1_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst);
/* The same xq layout (not finished) with ik_llama.cpp's rounding for Q8_0 weights: scale
 * bf16(amax / 127), values rint(x / scale). Plain C; only the comparison mode
 * LLM_ACT_ROUNDING=ik_llama.cpp takes it (model.h). */
void kern_x2_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst);
/* Activation rounding styles: which of the four quantizers a matrix takes. */
enum { KERN_X_Q8_0 = 0, KERN_X_Q8_K = 1, KERN_X_Q8_1 = 2, KERN_X_Q8_2 = 3 };

/* ---- native layouts (kernels_qn.c) ---- */

/* Bytes of one 32-value block of 16 rows in a native super-block: its nibbles (256) and
 * then its 5th / 6th bits (64 / 128), or its 2-bit fields (128). */
static inline size_t kern_qn_block_bytes(int bits) { return bits == 2 ? 128 : (size_t)(64 * bits); }
/* Super-blocks of a native row (the last one may be partial). */
static inline int64_t kern_qn_nsb(int64_t cols) { return (cols + 255) / 256; }
/* The layout of type wt (KERN_W_Q4_0..), or NULL for q8t and invalid values. */
const kern_qn_desc *kern_qn_get(int wt);
/* The native layout that keeps GGUF type src_type, or -1 when there is none (then
 * q8t): each type its own; Q3_K goes to Q6_K (its values exactly). */
int kern_qn_from_qtype(uint32_t src_type);
/* Bytes of one native tile of rows of cols values (cols a multiple of the source's
 * block size). */
size_t kern_qn_tile_bytes(int wt, int64_t cols);
/* Packs n <= 16 GGUF rows of type src (wt's own, or Q3_K into Q6_K; src_row_bytes
 * apart, cols values each) into one tile of kern_qn_tile_bytes(wt, cols) bytes; rows
 * n..15 are zero. */
void kern_qn_pack(int wt, uint32_t src, const void *src_rows, size_t src_row_bytes, int n, int64_t cols, void *tile);
/* Row r of a native matrix as floats: ggml's dequantized values (equal, up to a zero's sign). */
void kern_qn_dequant_row(int wt, const void *w, int64_t cols, int64_t r, float *dst);
/* As kern_q8t_matmul over a native matrix; kern_qn_panel_rows as kern_q8t_panel_rows. */
void kern_qn_matmul(int wt, const void *w, int64_t cols, const void *xq, int64_t n_tok,
                    float *y, int64_t ldy, int64_t r0, int64_t r1);
int64_t kern_qn_panel_rows(int wt, int64_t cols, int64_t n_tok);

/* Any tiled type (q8t or native): tile bytes, product, panel rows, row dequantization. */
size_t kern_w_tile_bytes(int wt, int64_t cols);
void kern_wmatmul(int wt, const void *w, int64_t cols, const void *xq, int64_t n_tok,
                  float *y, int64_t ldy, int64_t r0, int64_t r1);
int64_t kern_w_panel_rows(int wt, int64_t cols, int64_t n_tok);
void kern_w_dequant_row(int wt, const void *w, int64_t cols, int64_t r, float *dst);

/* y[t * ldy + r] = the product of weight row r (q8t matrix w) and xq row t, for r in
 * [r0, r1) and t in [0, n_tok), in the order stated above. Tiles in L2-sized panels,
 * tokens in register tiles; up to the table's q8t_tmax tokens each weight byte is read
 * from memory once (decode and small batches stay memory-bound). */
void kern_q8t_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                     float *y, int64_t ldy, int64_t r0, int64_t r1);

/* Rows of one L2 panel of a q8t product of n_tok tokens (a multiple of KERN_TILE): the
 * unit of work to hand to a thread (kern_q8t_matmul on [r0, r0 + panel rows)). */
int64_t kern_q8t_panel_rows(int64_t cols, int64_t n_tok);

/* Same over f32 weights (w_rows x cols, row stride cols) and f32 X (n_tok x cols). */
static inline void kern_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                                   float *y, int64_t ldy, int64_t r0, int64_t r1)
{ kern_active->f32_matmul(w, cols, x, n_tok, y, ldy, r0, r1); }

/* ---- attention, as matrix products (engined/attn.c) ----
 *
 * Keys are stored transposed in tiles of KERN_TILE positions (kv.h): element (dim d,
 * position j of the tile) at d * 16 + j, f16 or f32. q8_0 (kvt KERN_KV_Q8_0, ggml's
 * block: one f16 scale per 32 values of a position's row, 32 int8) keeps the blocks of
 * a key tile transposed too: per 32 dims a 544-byte group, the 16 positions' f16 scales
 * then the int8 in 8 quads of 4 dims, each quad [16 positions][4 dims] (KERN_KVQ_AT: a
 * position's 4 dims make one 32-bit lane of an integer dot product); a value row (kv.h:
 * one kv head's) is d / 32 block_q8_0 (34 bytes each). Every element count of a q8_0
 * stride or offset is a multiple of 32 and is kern_kv_bytes() = 34 / 32 of it in bytes;
 * d is a multiple of 32. A q8_0 value is its scale times its int8 in float, which is
 * exact (11 by 8 bits), so the value orders below hold for every type. Each output has
 * one order, the same whatever else is computed with it (batch invariance of the whole
 * pass):
 *   score(q, k) over f16 and f32 keys = (a_0 + a_1) * scale, a_0 and a_1 the fma chains
 *     of q[d] * k[d] over the even and the odd d, each from +0 (two chains: more
 *     accurate than one, and twice the parallelism);
 *   score over q8_0 keys, with integer products as ggml and ik_llama.cpp take them: the
 *     query quantized per 32 dims in two int8 digits (kern_att_q8_query), per block b
 *     the exact integer dots H_b and L_b of the digits with the key's int8, I_b = 254 H_b
 *     + L_b in int32, and the chain a = fma(dk_b * u_b, (float)I_b, a) over the blocks
 *     in order from +0; score = a * scale;
 *   softmax: max, e_i = kern_expf(s_i - max), their sum in double in 32 lanes (i mod
 *     32) reduced as l_j += l_j+16, then + 8, + 4, + 2, + 1, p_i = e_i * (float)(1/sum);
 *   out[d] = fma chain over the positions t in order of p_t * v_t[d], from +0.
 * Scalar twins in kernels.c; every table gives the same bits. */

/* KV element types of the attention kernels (kv.h's type as the kernels see it). */
enum { KERN_KV_F32 = 0, KERN_KV_F16 = 1, KERN_KV_Q8_0 = 2 };
#define KERN_ATT_MAX_DIM 1024 /* the widest head d the kernels take (model.c refuses wider) */
#define KERN_KVQ_GROUP (KERN_TILE * 2 + KERN_QK * KERN_TILE) /* 544: 32 dims of a q8_0 key tile */
/* Byte of dim k (< 32) of position j in a q8_0 key tile's group. */
#define KERN_KVQ_AT(k, j) (2 * KERN_TILE + (k) / 4 * (4 * KERN_TILE) + (j) * 4 + (k) % 4)

/* A query row's 32 dims quantized for q8_0 keys in two int8 digits: d = max|x| / 127
 * (ggml's q8_0 scale, in float), h = round(x / d) (ggml's q8_0 rounding), l = round((x
 * / d - h) * 254), so x ~ u * (254 h + l) with u = d / 254 (0 for an all-zero block): 16
 * bits of the query, where ggml keeps 8. bias_h and bias_l are -128 times the sums of h
 * and l (what a product with keys offset to unsigned adds). */
struct kern_qq {
    float   u;
    int32_t bias_h, bias_l;
    int8_t  h[KERN_QK], l[KERN_QK];
};

/* Bytes of n elements of KV type kvt (q8_0: n a multiple of 32). */
static inline size_t kern_kv_bytes(int kvt, int64_t n)
{
    return kvt == KERN_KV_Q8_0 ? (size_t)n / KERN_QK * 34 : (size_t)n * (kvt == KERN_KV_F16 ? 2 : 4);
}
/* Quantizes one position's key (n values, a multiple of 32) into column j of a q8_0
 * key tile, and a value row into n / 32 block_q8_0: ggml's reference rounding. */
void kern_kv_q8_key(const float *x, int64_t n, void *tile, int j);
void kern_kv_q8_row(const float *x, int64_t n, void *row);

/* sc[r * lds + j] = score(q_r, key j) for rows r < nq (q_r = q + r * qs, d floats) and
 * the 16 * ntiles keys of ntiles f16 or f32 key tiles, tile i at kt + i * kts elements. */
static inline void kern_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts,
                               int kvt, int d, int64_t ntiles, float scale, float *sc, int64_t lds)
{
    LLM_ASSERT(kvt != KERN_KV_Q8_0); /* q8_0 keys: kern_att_q8_query, then kern_att_qk8 */
    kern_active->att_qk(q, qs, nq, kt, kts, kvt, d, ntiles, scale, sc, lds);
}

/* nq query rows (row r at q + r * qs, d floats) into nq * d / 32 kern_qq, row r's at
 * dst + r * d / 32. Plain C, the same for every table. */
void kern_att_q8_query(const float *q, int64_t qs, int nq, int d, kern_qq *dst);

/* The same over q8_0 key tiles, of rows quantized by kern_att_q8_query (row r at qq + r
 * * d / 32): the q8_0 score above. */
static inline void kern_att_qk8(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles,
                                float scale, float *sc, int64_t lds)
{ kern_active->att_qk8(qq, nq, kt, kts, d, ntiles, scale, sc, lds); }

/* Continues, for rows r < nq, the chain out[r * os + i] (i < d) over positions t = a..b
 * (inclusive): fma(p[r * lds + t], v[t * vs + i], out); v rows of type kvt. */
static inline void kern_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                               int64_t vs, int kvt, int d, float *out, int64_t os)
{ kern_active->att_pv(p, lds, nq, a, b, v, vs, kvt, d, out, os); }

/* s[0..n) (n >= 1) -> its softmax, in place, in the order stated above. */
static inline void kern_softmax(float *s, int64_t n) { kern_active->softmax(s, n); }
/* s[i] = cap * tanh(s[i] / cap): gemma2's soft-capping of scores and logits, as
 * ik_llama.cpp's AVX-512 code computes it for s[0, n_vec) (tanh from its polynomial exp:
 * (e - 1) / (e + 1), e = exp(2x / cap)) and tanhf for the rest. Plain C. */
void kern_softcap(float *s, int64_t n, float cap, int64_t n_vec);

/* g[i] = g[i] / (1 + kern_expf(-g[i])) * up[i] (SwiGLU), element by element. */
static inline void kern_silu_mul(float *g, const float *up, int64_t n) { kern_active->silu_mul(g, up, n); }
/* g[i] = gelu(g[i]) * up[i] (gemma's GeGLU): GELU's tanh form 0.5 x (1 + tanh(u)),
 * u = sqrt(2/pi) x (1 + 0.044715 x^2), computed as x / (1 + kern_expf(-2u)) (the same
 * value, without the cancellation of 1 + tanh near -1), in this order of float ops. */
static inline void kern_gelu_mul(float *g, const float *up, int64_t n) { kern_active->gelu_mul(g, up, n); }

/* e^x for float x, as every table computes it: Cephes' degree-6 polynomial on
 * x - n ln2 (n = rint(x log2 e), ln2 in two parts, every step an fmaf) times 2^n; 0
 * below -87, +inf above 88, NaN stays NaN. Within 2 ulp of expf. */
float kern_expf(float x);

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
extern const kern_ops kern_ops_avxvnni;
extern const kern_ops kern_ops_avx512vnni;
#endif
#if defined(__aarch64__)
extern const kern_ops kern_ops_neon;
extern const kern_ops kern_ops_neoni8mm;
#endif

#endif
