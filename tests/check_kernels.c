/*
 * Tests for engined/kernels: the q8t layout (packing, row dequantization), the
 * activation quantizer against its definition, the product against kernels.h's
 * contract (an independent rendition of the per-output fma chain, bit for bit, and a
 * double-precision sum within 1e-5 of the sum of |element products|), every SIMD table
 * bit-identical to the scalar twin, batch invariance (n tokens at once == n one-token
 * products, any row range), and the float helpers (tolerance 1e-5 relative to the sum
 * of |products|: their summation order differs between tables).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"
#include "f16.h"
#include "kernels.h"

#define TOL 1e-5

static const char *const all_names[] = { "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neoni8mm" };
#define N_TABLES (int)(sizeof all_names / sizeof all_names[0])

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
/* Uniform in [-s, s), with some blocks scaled far apart to vary the block scales. */
static float frand(float s) { return s * ((float)rnd() / 2147483648.0f - 1.0f); }
static void fill(float *x, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) x[i] = frand(s) * (((i / 32) % 5 == 3) ? 20.0f : 1.0f);
}

/* A test matrix: its f32 values, block_q8_0 rows, and q8t tiles. */
typedef struct {
    int64_t rows, cols;
    block_q8_0 *q8;   /* rows x kern_q8_row_bytes(cols) */
    uint8_t *tiles;   /* kern_q8t_bytes(rows, cols), 64-byte aligned */
} mat;

static mat make_mat(int64_t rows, int64_t cols, float scale)
{
    mat m = { rows, cols, NULL, NULL };
    float *wf = malloc((size_t)(rows * cols) * sizeof *wf);
    fill(wf, rows * cols, scale);
    size_t rb = kern_q8_row_bytes(cols);
    m.q8 = malloc((size_t)rows * rb);
    for (int64_t r = 0; r < rows; r++) kern_q8_quantize_w(wf + r * cols, cols, (char *)m.q8 + r * rb);
    m.tiles = aligned_alloc(64, kern_q8t_bytes(rows, cols));
    memset(m.tiles, 0x33, kern_q8t_bytes(rows, cols));
    size_t tb = kern_q8t_tile_bytes(cols);
    for (int64_t t = 0; t * KERN_TILE < rows; t++) {
        int n = rows - t * KERN_TILE < KERN_TILE ? (int)(rows - t * KERN_TILE) : KERN_TILE;
        kern_q8t_pack((char *)m.q8 + t * KERN_TILE * rb, n, cols, m.tiles + t * tb);
    }
    free(wf);
    return m;
}

static void free_mat(mat *m)
{
    free(m->q8);
    free(m->tiles);
}

static const block_q8_0 *q8_row(const mat *m, int64_t r)
{
    return (const block_q8_0 *)((const char *)m->q8 + (size_t)r * kern_q8_row_bytes(m->cols));
}

/* n_tok activation rows quantized by the scalar table. */
static uint8_t *make_xq(int64_t n_tok, int64_t cols, float scale)
{
    float *xf = malloc((size_t)(n_tok * cols) * sizeof *xf);
    fill(xf, n_tok * cols, scale);
    uint8_t *x = aligned_alloc(64, (size_t)n_tok * kern_xq_row_bytes(cols));
    kern_ops_scalar.xq_quantize(xf, n_tok, cols, x);
    free(xf);
    return x;
}

static const int8_t *xq_q(const uint8_t *xq, int64_t cols, int64_t t)
{
    return (const int8_t *)(xq + (size_t)t * kern_xq_row_bytes(cols));
}
static const float *xq_d(const uint8_t *xq, int64_t cols, int64_t t)
{
    return (const float *)(xq_q(xq, cols, t) + kern_nsb(cols) * KERN_SB_BLOCKS * KERN_QK);
}

/* The contract, written out independently of the kernels: one fmaf chain over the
 * blocks of the row, from the block_q8_0 weights. */
static float contract(const mat *m, int64_t r, const uint8_t *xq, int64_t t, double *ref, double *mag)
{
    const block_q8_0 *w = q8_row(m, r);
    const int8_t *x = xq_q(xq, m->cols, t);
    const float *dx = xq_d(xq, m->cols, t);
    float acc = 0.0f;
    double s = 0, a = 0;
    for (int64_t k = 0; k < (m->cols + 31) / 32; k++) {
        int32_t isum = 0;
        long abs_sum = 0;
        for (int j = 0; j < 32; j++) {
            isum += w[k].qs[j] * x[k * 32 + j];
            abs_sum += labs((long)w[k].qs[j] * x[k * 32 + j]);
        }
        float sc = f16_to_f32(w[k].d) * dx[k];
        acc = fmaf((float)isum, sc, acc);
        s += (double)isum * sc;
        a += (double)abs_sum * fabs(sc);
    }
    *ref = s;
    *mag = a;
    return acc;
}

START_TEST(test_quantize_w_definition)
{
    static const int64_t cols_list[] = { 32, 64, 96, 172, 2048 };
    for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++) {
        int64_t cols = cols_list[c], nb = (cols + 31) / 32;
        float *x = malloc(cols * sizeof *x);
        fill(x, cols, 3.0f);
        if (cols >= 64) for (int j = 32; j < 64; j++) x[j] = 0.0f; /* an all-zero block */
        block_q8_0 *q = malloc(kern_q8_row_bytes(cols));
        memset(q, 0x55, kern_q8_row_bytes(cols));
        kern_q8_quantize_w(x, cols, q);
        for (int64_t b = 0; b < nb; b++) {
            float amax = 0;
            for (int j = 0; j < 32 && b * 32 + j < cols; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            ck_assert_uint_eq(q[b].d, f32_to_f16(amax / 127.0f));
            for (int j = 0; j < 32; j++) {
                int64_t i = b * 32 + j;
                int want = 0;
                if (i < cols && amax > 0) want = (int)roundf(x[i] * (1.0f / (amax / 127.0f)));
                ck_assert_msg(q[b].qs[j] == want, "cols %ld block %ld [%d]: %d, expected %d",
                              (long)cols, (long)b, j, q[b].qs[j], want);
            }
        }
        free(x); free(q);
    }
}
END_TEST

/* Packing keeps every value and scale (row dequantization gives them back), rows past
 * the matrix and values past a row are zero, and the layout is what kernels.h says. */
START_TEST(test_q8t_pack_layout)
{
    static const int64_t shapes[][2] = { { 1, 32 }, { 5, 172 }, { 16, 64 }, { 37, 96 }, { 40, 2048 } };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        mat m = make_mat(shapes[s][0], shapes[s][1], 1.0f);
        float *row = malloc((size_t)m.cols * sizeof *row);
        for (int64_t r = 0; r < m.rows; r++) {
            kern_q8t_dequant_row(m.tiles, m.cols, r, row);
            const block_q8_0 *b = q8_row(&m, r);
            for (int64_t i = 0; i < m.cols; i++)
                ck_assert_float_eq(row[i], f16_to_f32(b[i / 32].d) * (float)b[i / 32].qs[i % 32]);
        }
        size_t tb = kern_q8t_tile_bytes(m.cols);
        ck_assert_uint_eq(tb % 64, 0);
        ck_assert_uint_eq(tb, (size_t)kern_nsb(m.cols) * 1088);
        const kern_q8t_sb *last = (const kern_q8t_sb *)(m.tiles + (size_t)(m.rows - 1) / KERN_TILE * tb);
        for (int64_t sb = 0; sb < kern_nsb(m.cols); sb++)
            for (int b = 0; b < KERN_SB_BLOCKS; b++)
                for (int lane = 0; lane < KERN_TILE; lane++) {
                    int64_t r = (m.rows - 1) / KERN_TILE * KERN_TILE + lane, k = sb * 2 + b;
                    for (int j = 0; j < 32; j++) {
                        uint8_t v = last[sb].q[b][j / 4][lane][j % 4];
                        if (r >= m.rows || k * 32 + j >= m.cols) ck_assert_uint_eq(v, 0x80);
                        else ck_assert_int_eq((int)v - 128, q8_row(&m, r)[k].qs[j]);
                    }
                    if (r >= m.rows || k * 32 >= m.cols) ck_assert_uint_eq(last[sb].d[b][lane], 0);
                }
        free(row);
        free_mat(&m);
    }
}
END_TEST

START_TEST(test_xq_quantize_exact)
{
    static const int64_t cols_list[] = { 1, 31, 32, 64, 96, 172, 2048, 5632 };
    for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++) {
        int64_t cols = cols_list[c], rows = 3, nbp = kern_nsb(cols) * 2;
        float *x = malloc(rows * cols * sizeof *x);
        fill(x, rows * cols, 0.7f);
        if (cols >= 64) for (int j = 32; j < 64; j++) x[j] = 0.0f;
        size_t xs = kern_xq_row_bytes(cols), bytes = rows * xs;
        unsigned char *ref = malloc(bytes), *got = malloc(bytes);
        memset(ref, 0x55, bytes);
        kern_ops_scalar.xq_quantize(x, rows, cols, ref);
        /* the scalar twin against its definition (llama.cpp's AVX2 rounding) */
        for (int64_t r = 0; r < rows; r++) {
            const int8_t *q = xq_q(ref, cols, r);
            const float *d = xq_d(ref, cols, r);
            const int32_t *cs = (const int32_t *)(d + nbp);
            for (int64_t b = 0; b < nbp; b++) {
                float amax = 0;
                for (int j = 0; j < 32 && b * 32 + j < cols; j++) amax = fmaxf(amax, fabsf(x[r * cols + b * 32 + j]));
                ck_assert_float_eq(d[b], f16_to_f32(f32_to_f16(amax / 127.0f)));
                int sum = 0;
                for (int j = 0; j < 32; j++) {
                    int want = b * 32 + j < cols && amax > 0 ? (int)nearbyintf(x[r * cols + b * 32 + j] * (127.0f / amax)) : 0;
                    ck_assert_int_eq(q[b * 32 + j], want);
                    sum += want;
                }
                ck_assert_int_eq(cs[b], -128 * sum);
            }
        }
        for (int v = 1; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(all_names[v]);
            if (!ops) continue;
            memcpy(got, ref, bytes); /* the row tails past the data are not written */
            for (int64_t r = 0; r < rows; r++) memset(got + r * xs, 0xaa, (size_t)nbp * 40);
            ops->xq_quantize(x, rows, cols, got);
            ck_assert_msg(memcmp(ref, got, bytes) == 0, "%s xq_quantize differs at cols %ld", ops->name, (long)cols);
        }
        free(x); free(ref); free(got);
    }
}
END_TEST

/* One shape on one table: the contract bit for bit, the double sum within TOL, rows
 * outside [r0, r1) untouched. */
static void check_product(const kern_ops *ops, const mat *m, const uint8_t *xq, int64_t n_tok,
                          int64_t r0, int64_t r1)
{
    int64_t ldy = m->rows + 3;
    float *y = malloc((size_t)(n_tok * ldy) * sizeof *y);
    for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = -777.0f;
    const kern_ops *saved = kern_active;
    kern_active = ops;
    kern_q8t_matmul(m->tiles, m->cols, xq, n_tok, y, ldy, r0, r1);
    kern_active = saved;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < ldy; r++) {
            float got = y[t * ldy + r];
            if (r < r0 || r >= r1) {
                ck_assert_float_eq(got, -777.0f);
                continue;
            }
            double ref, mag;
            float want = contract(m, r, xq, t, &ref, &mag);
            ck_assert_msg(memcmp(&got, &want, 4) == 0, "%s %ldx%ld, %ld tokens, rows [%ld,%ld): t%ld r%ld: %a, contract %a",
                          ops->name, (long)m->rows, (long)m->cols, (long)n_tok, (long)r0, (long)r1, (long)t, (long)r,
                          got, want);
            ck_assert_msg(fabs(got - ref) <= TOL * mag + 1e-30, "t%ld r%ld: %g vs %g", (long)t, (long)r, got, ref);
        }
    free(y);
}

START_TEST(test_q8t_matmul_shapes)
{
    static const int64_t cols_list[] = { 32, 64, 96, 172, 2048, 5632 };
    static const int64_t rows_list[] = { 1, 3, 16, 37, 64 };
    static const int64_t tok_list[] = { 1, 2, 3, 5, 17 };
    for (size_t c = 0; c < 6; c++)
        for (size_t r = 0; r < 5; r++) {
            mat m = make_mat(rows_list[r], cols_list[c], 1.0f);
            for (size_t t = 0; t < 5; t++) {
                uint8_t *xq = make_xq(tok_list[t], m.cols, 2.0f);
                for (int v = 0; v < N_TABLES; v++) {
                    const kern_ops *ops = kern_get(all_names[v]);
                    if (!ops) continue;
                    int64_t r0 = m.rows > 2 ? 1 : 0, r1 = m.rows > 4 ? m.rows - 1 : m.rows;
                    check_product(ops, &m, xq, tok_list[t], r0, r1);
                }
                free(xq);
            }
            free_mat(&m);
        }
}
END_TEST

/* Batch invariance, kernels.h's contract: the product over n tokens equals, bit for
 * bit, n separate one-token products, for n in 1..40 and 512, and whatever row range
 * (thread split) a row falls in; on every table, all equal to the scalar twin. */
START_TEST(test_q8t_batch_invariance)
{
    static const int64_t shapes[][2] = { { 70, 2048 }, { 45, 172 } };
    for (size_t s = 0; s < 2; s++) {
        mat m = make_mat(shapes[s][0], shapes[s][1], 1.0f);
        uint8_t *xq = make_xq(512, m.cols, 1.5f);
        size_t xs = kern_xq_row_bytes(m.cols);
        float *one = malloc((size_t)(512 * m.rows) * sizeof *one), *y = malloc((size_t)(512 * m.rows) * sizeof *y);
        const kern_ops *saved = kern_active;
        kern_active = &kern_ops_scalar;
        for (int64_t t = 0; t < 512; t++) kern_q8t_matmul(m.tiles, m.cols, xq + t * xs, 1, one + t * m.rows, m.rows, 0, m.rows);
        for (int v = 0; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(all_names[v]);
            if (!ops) continue;
            kern_active = ops;
            for (int64_t n = 1; n <= 41; n++) {
                int64_t nt = n == 41 ? 512 : n;
                int64_t cuts[4] = { 0, (n * 7) % m.rows, (n * 7) % m.rows + (n % 3) * 16, m.rows };
                if (cuts[2] > m.rows) cuts[2] = m.rows;
                int64_t t0 = nt == 512 ? 0 : (n * 13) % (512 - nt); /* tokens from anywhere */
                for (int64_t i = 0; i < 512 * m.rows; i++) y[i] = -1.0f;
                for (int c = 0; c < 3; c++)
                    kern_q8t_matmul(m.tiles, m.cols, xq + t0 * xs, nt, y, m.rows, cuts[c], cuts[c + 1]);
                ck_assert_msg(memcmp(y, one + t0 * m.rows, (size_t)(nt * m.rows) * sizeof *y) == 0,
                              "%s %ldx%ld: %ld tokens at once differ from one at a time", ops->name,
                              (long)m.rows, (long)m.cols, (long)nt);
            }
        }
        kern_active = saved;
        free(one); free(y); free(xq);
        free_mat(&m);
    }
}
END_TEST

/* Past one register tile: several panels and token chunks with ragged ends. */
START_TEST(test_q8t_matmul_blocking)
{
    static const int64_t shapes[][3] = { { 2048, 400, 45 }, { 5632, 37, 33 }, { 96, 203, 64 }, { 2048, 130, 29 } };
    for (size_t s = 0; s < 4; s++) {
        mat m = make_mat(shapes[s][1], shapes[s][0], 1.0f);
        uint8_t *xq = make_xq(shapes[s][2], m.cols, 2.0f);
        for (int v = 0; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(all_names[v]);
            if (ops) check_product(ops, &m, xq, shapes[s][2], 5, m.rows - 2);
        }
        free(xq);
        free_mat(&m);
    }
}
END_TEST

/* A 172-wide row gives the same products as the same values zero-padded to 192. The
 * quantizer writes an activation's padding values as 0 (its -128 * sum term counts
 * them, so xq rows must come from the quantizer). */
START_TEST(test_q8t_padding_is_zero)
{
    enum { COLS = 172, PAD = 192, ROWS = 5, TOK = 4 };
    float w[ROWS * PAD] = {0}, x[TOK * PAD] = {0}, w172[ROWS * COLS], x172[TOK * COLS];
    for (int r = 0; r < ROWS; r++) fill(w + r * PAD, COLS, 1.0f);
    for (int t = 0; t < TOK; t++) fill(x + t * PAD, COLS, 1.0f);
    for (int r = 0; r < ROWS; r++) memcpy(w172 + r * COLS, w + r * PAD, COLS * sizeof(float));
    for (int t = 0; t < TOK; t++) memcpy(x172 + t * COLS, x + t * PAD, COLS * sizeof(float));
    ck_assert_uint_eq(kern_q8t_tile_bytes(COLS), kern_q8t_tile_bytes(PAD));
    ck_assert_uint_eq(kern_xq_row_bytes(COLS), kern_xq_row_bytes(PAD));
    size_t rb = kern_q8_row_bytes(COLS), tb = kern_q8t_tile_bytes(COLS), xs = kern_xq_row_bytes(COLS);
    unsigned char qw[ROWS * 6 * 34], qw2[ROWS * 6 * 34];
    for (int r = 0; r < ROWS; r++) {
        kern_q8_quantize_w(w172 + r * COLS, COLS, qw + r * rb);
        kern_q8_quantize_w(w + r * PAD, PAD, qw2 + r * rb);
    }
    ck_assert(memcmp(qw, qw2, sizeof qw) == 0);
    uint8_t *t1 = aligned_alloc(64, tb), *t2 = aligned_alloc(64, tb);
    kern_q8t_pack(qw, ROWS, COLS, t1);
    kern_q8t_pack(qw2, ROWS, PAD, t2);
    ck_assert(memcmp(t1, t2, tb) == 0);
    uint8_t *qx = aligned_alloc(64, TOK * xs), *qx2 = aligned_alloc(64, TOK * xs);
    for (int v = 0; v < N_TABLES; v++) {
        const kern_ops *ops = kern_get(all_names[v]);
        if (!ops) continue;
        memset(qx, 0, TOK * xs); /* the row tails past the data are not written */
        memset(qx2, 0, TOK * xs);
        ops->xq_quantize(x172, TOK, COLS, qx);
        ops->xq_quantize(x, TOK, PAD, qx2);
        ck_assert(memcmp(qx, qx2, TOK * xs) == 0);
        float y[TOK * ROWS], y2[TOK * ROWS];
        const kern_ops *saved = kern_active;
        kern_active = ops;
        kern_q8t_matmul(t1, COLS, qx, TOK, y, ROWS, 0, ROWS);
        kern_q8t_matmul(t2, PAD, qx2, TOK, y2, ROWS, 0, ROWS);
        kern_active = saved;
        ck_assert(memcmp(y, y2, sizeof y) == 0);
        for (int t = 0; t < TOK; t++)
            for (int j = COLS; j < PAD; j++) ck_assert_int_eq(((int8_t *)(qx + t * xs))[j], 0);
    }
    free(t1); free(t2); free(qx); free(qx2);
}
END_TEST

/* Hostile activations and weights (NaN, infinities, huge values) must not crash or
 * hit undefined float->int conversions (UBSan runs this in make asan); finite blocks
 * next to them still quantize exactly, bit-identical across tables. */
START_TEST(test_quantize_hostile_values)
{
    enum { COLS = 96 };
    float x[COLS];
    for (int i = 0; i < COLS; i++) x[i] = frand(1.0f);
    x[3] = NAN; x[40] = INFINITY; x[41] = -INFINITY; x[70] = 3e38f; x[71] = -3e38f;
    size_t xs = kern_xq_row_bytes(COLS);
    uint8_t *ref = aligned_alloc(64, xs), *got = aligned_alloc(64, xs);
    unsigned char w[3 * 34];
    kern_ops_scalar.xq_quantize(x, 1, COLS, ref);
    kern_q8_quantize_w(x, COLS, w);
    const block_q8_0 *rb = (const block_q8_0 *)w;
    ck_assert(isinf(f16_to_f32(rb[2].d))); /* 3e38/127 overflows half */
    uint8_t *tile = aligned_alloc(64, kern_q8t_tile_bytes(COLS));
    kern_q8t_pack(w, 1, COLS, tile);
    for (int v = 0; v < N_TABLES; v++) {
        const kern_ops *ops = kern_get(all_names[v]);
        if (!ops) continue;
        ops->xq_quantize(x, 1, COLS, got);
        /* block 2 holds only finite values (huge ones): bit-exact there */
        ck_assert(memcmp(ref + 2 * 32, got + 2 * 32, 32) == 0);
        float y[1];
        const kern_ops *saved = kern_active;
        kern_active = ops;
        kern_q8t_matmul(tile, COLS, got, 1, y, 1, 0, 1); /* garbage in, but no crash */
        kern_active = saved;
    }
    free(ref); free(got); free(tile);
}
END_TEST

/* Empty work (no tokens, an empty or reversed row range) writes nothing. */
START_TEST(test_q8t_empty_work)
{
    enum { COLS = 64, ROWS = 8 };
    mat m = make_mat(ROWS, COLS, 1.0f);
    uint8_t *xq = make_xq(40, COLS, 1.0f);
    static const int64_t toks[] = { 0, 1, 4, 40 };
    for (int v = 0; v < N_TABLES; v++) {
        const kern_ops *ops = kern_get(all_names[v]);
        if (!ops) continue;
        const kern_ops *saved = kern_active;
        kern_active = ops;
        for (int t = 0; t < 4; t++) {
            float y[40 * ROWS];
            for (int i = 0; i < 40 * ROWS; i++) y[i] = -777.0f;
            kern_q8t_matmul(m.tiles, COLS, xq, 0, y, ROWS, 0, ROWS);
            kern_q8t_matmul(m.tiles, COLS, xq, toks[t], y, ROWS, 3, 3);
            kern_q8t_matmul(m.tiles, COLS, xq, toks[t], y, ROWS, 6, 2);
            for (int i = 0; i < 40 * ROWS; i++) ck_assert_float_eq(y[i], -777.0f);
        }
        kern_active = saved;
    }
    free(xq);
    free_mat(&m);
}
END_TEST

static int close_enough(double got, double want, double mag) { return fabs(got - want) <= TOL * mag + 1e-30; }

START_TEST(test_float_helpers)
{
    static const int64_t n_list[] = { 1, 7, 8, 15, 16, 33, 172, 2048 };
    for (size_t c = 0; c < sizeof n_list / sizeof *n_list; c++) {
        int64_t n = n_list[c];
        float *a = malloc(n * 4), *b = malloc(n * 4), *y0 = malloc(n * 4), *y1 = malloc(n * 4), *fb = malloc(n * 4);
        uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2);
        fill(a, n, 1.0f);
        fill(b, n, 1.0f);
        for (int64_t i = 0; i < n; i++) h[i] = f32_to_f16(a[i]);
        double mag = 0, magh = 0;
        for (int64_t i = 0; i < n; i++) { mag += fabs(a[i] * b[i]); magh += fabs(f16_to_f32(h[i]) * b[i]); }
        for (int v = 1; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(all_names[v]);
            if (!ops) continue;
            ck_assert(close_enough(ops->f32_dot(a, b, n), kern_ops_scalar.f32_dot(a, b, n), mag));
            ck_assert(close_enough(ops->f16_dot(h, b, n), kern_ops_scalar.f16_dot(h, b, n), magh));
            memcpy(y0, b, n * 4); memcpy(y1, b, n * 4);
            kern_ops_scalar.f32_axpy(y0, 0.37f, a, n);
            ops->f32_axpy(y1, 0.37f, a, n);
            for (int64_t i = 0; i < n; i++) ck_assert(close_enough(y1[i], y0[i], fabs(b[i]) + fabs(a[i])));
            memcpy(y0, b, n * 4); memcpy(y1, b, n * 4);
            kern_ops_scalar.f16_axpy(y0, -1.5f, h, n);
            ops->f16_axpy(y1, -1.5f, h, n);
            for (int64_t i = 0; i < n; i++) ck_assert(close_enough(y1[i], y0[i], fabs(b[i]) + 2 * fabs(a[i])));
            ops->f32_to_f16(a, h2, n);
            ck_assert(memcmp(h, h2, n * 2) == 0);
            ops->f16_to_f32(h, fb, n);
            for (int64_t i = 0; i < n; i++) ck_assert_float_eq(fb[i], f16_to_f32(h[i]));
        }
        free(a); free(b); free(y0); free(y1); free(fb); free(h); free(h2);
    }
}
END_TEST

/* f32_to_f16 of special values: subnormals, overflow, ties, infinities. */
START_TEST(test_f16_conversion_edges)
{
    float v[16] = { 0.0f, -0.0f, 1e-8f, -6e-8f, 3e-5f, 65504.0f, 65520.0f, 1e6f, -1e6f,
                    INFINITY, -INFINITY, 1.0009765625f + 0.00048828125f, 2049.0f, 0.1f, -3.75f, 5.96e-8f };
    uint16_t want[16], got[16];
    kern_ops_scalar.f32_to_f16(v, want, 16);
    for (int i = 0; i < 16; i++) ck_assert_uint_eq(want[i], f32_to_f16(v[i]));
    for (int s = 1; s < N_TABLES; s++) {
        const kern_ops *ops = kern_get(all_names[s]);
        if (!ops) continue;
        ops->f32_to_f16(v, got, 16);
        ck_assert(memcmp(want, got, sizeof got) == 0);
    }
}
END_TEST

START_TEST(test_f_matmul)
{
    static const int64_t cols_list[] = { 3, 8, 172, 300 };
    for (size_t c = 0; c < 4; c++) {
        int64_t cols = cols_list[c], rows = 9, n_tok = 3, ldy = rows + 1;
        float *w = malloc(rows * cols * 4), *x = malloc(n_tok * cols * 4);
        fill(w, rows * cols, 1.0f);
        fill(x, n_tok * cols, 1.0f);
        float ref[3 * 10], got[3 * 10];
        kern_ops_scalar.f32_matmul(w, cols, x, n_tok, ref, ldy, 1, rows);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 1; r < rows; r++) {
                double s = 0, m = 0;
                for (int64_t i = 0; i < cols; i++) { s += (double)w[r * cols + i] * x[t * cols + i]; m += fabs(w[r * cols + i] * x[t * cols + i]); }
                ck_assert(close_enough(ref[t * ldy + r], s, m));
            }
        for (int v = 1; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(all_names[v]);
            if (!ops) continue;
            for (int i = 0; i < 30; i++) got[i] = -777.0f;
            ops->f32_matmul(w, cols, x, n_tok, got, ldy, 1, rows);
            for (int64_t t = 0; t < n_tok; t++) {
                ck_assert_float_eq(got[t * ldy], -777.0f);
                ck_assert_float_eq(got[t * ldy + rows], -777.0f);
                for (int64_t r = 1; r < rows; r++) {
                    double m = 0;
                    for (int64_t i = 0; i < cols; i++) m += fabs(w[r * cols + i] * x[t * cols + i]) * 1.01;
                    ck_assert(close_enough(got[t * ldy + r], ref[t * ldy + r], m));
                }
            }
        }
        free(w); free(x);
    }
}
END_TEST


/* kern_expf within 2 ulp of libm's expf on [-87, 88], and its edges. */
START_TEST(test_expf)
{
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + 175.0f * (float)i / 200000.0f;
        float got = kern_expf(x), want = expf(x);
        float ulp = nextafterf(want, INFINITY) - want;
        ck_assert_msg(fabsf(got - want) <= 2 * ulp, "kern_expf(%a) = %a, expf %a", x, got, want);
    }
    ck_assert_float_eq(kern_expf(0.0f), 1.0f);
    ck_assert_float_eq(kern_expf(-88.0f), 0.0f);
    ck_assert_float_eq(kern_expf(-INFINITY), 0.0f);
    ck_assert(isinf(kern_expf(88.5f)) && isinf(kern_expf(INFINITY)));
    ck_assert(isnan(kern_expf(NAN)));
}
END_TEST

/* softmax and SwiGLU: every table bit-identical to the scalar twin (which uses
 * kern_expf), the softmax within 1e-6 of a double-precision one. */
START_TEST(test_softmax_silu)
{
    static const int64_t n_list[] = { 1, 2, 7, 15, 16, 17, 100, 2049 };
    for (size_t c = 0; c < sizeof n_list / sizeof *n_list; c++) {
        int64_t n = n_list[c];
        float *s = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4), *up = malloc(n * 4);
        fill(s, n, 8.0f);
        if (n > 3) { s[1] = -200.0f; s[2] = 95.0f; } /* one far below the max, one large */
        fill(up, n, 1.0f);
        memcpy(ref, s, n * 4);
        kern_ops_scalar.softmax(ref, n);
        double mx = -INFINITY, sum = 0, total = 0;
        for (int64_t i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
        for (int64_t i = 0; i < n; i++) sum += exp((double)s[i] - mx);
        for (int64_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(ref[i] - exp((double)s[i] - mx) / sum) <= 1e-6, "softmax n %ld [%ld]", (long)n, (long)i);
            total += ref[i];
        }
        ck_assert(fabs(total - 1.0) < 1e-5);
        float *silu = malloc(n * 4);
        memcpy(silu, s, n * 4);
        if (n > 3) { silu[0] = 100.0f; silu[3] = -100.0f; } /* exp underflow, overflow */
        float *silu_ref = malloc(n * 4), *gelu_ref = malloc(n * 4);
        memcpy(silu_ref, silu, n * 4);
        kern_ops_scalar.silu_mul(silu_ref, up, n);
        memcpy(gelu_ref, silu, n * 4);
        kern_ops_scalar.gelu_mul(gelu_ref, up, n);
        for (int64_t i = 0; i < n; i++) { /* GELU's tanh form against libm's tanh, in double */
            double x = silu[i], u = 0.7978845608028654 * x * (1 + 0.044715 * x * x);
            double want = 0.5 * x * (1 + tanh(u)) * up[i];
            ck_assert_msg(fabs(gelu_ref[i] - want) <= 1e-6 * (1 + fabs(want)), "gelu n %ld [%ld]: %g vs %g", (long)n,
                          (long)i, gelu_ref[i], want);
        }
        for (int v = 1; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(all_names[v]);
            if (!ops) continue;
            memcpy(got, s, n * 4);
            ops->softmax(got, n);
            ck_assert_msg(memcmp(got, ref, n * 4) == 0, "%s softmax n %ld", ops->name, (long)n);
            memcpy(got, silu, n * 4);
            ops->silu_mul(got, up, n);
            ck_assert_msg(memcmp(got, silu_ref, n * 4) == 0, "%s silu_mul n %ld", ops->name, (long)n);
            memcpy(got, silu, n * 4);
            ops->gelu_mul(got, up, n);
            ck_assert_msg(memcmp(got, gelu_ref, n * 4) == 0, "%s gelu_mul n %ld", ops->name, (long)n);
        }
        free(silu); free(silu_ref); free(gelu_ref);
        free(s); free(ref); free(got); free(up);
    }
}
END_TEST

/* Scores and value sums on f16 and f32 caches: every table bit-identical to the scalar
 * twin, which is within TOL of double sums; value chains continue from what out holds. */
START_TEST(test_att_products)
{
    static const int dims[] = { 8, 31, 32, 64, 80, 128 };
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (int f16 = 0; f16 < 2; f16++) {
            int d = dims[di], nq = 13, ntiles = 5, n = ntiles * 16, kvd = d + 16; /* head inside a wider row */
            size_t elt = f16 ? 2 : 4;
            float *q = malloc((size_t)nq * d * 4), *kf = malloc((size_t)n * d * 4), *vf = malloc((size_t)n * kvd * 4);
            fill(q, (int64_t)nq * d, 1.0f);
            fill(kf, (int64_t)n * d, 1.0f);
            fill(vf, (int64_t)n * kvd, 1.0f);
            /* key tiles: kv_dim rows of 16; this head's rows start at row 3 */
            char *kt = calloc((size_t)ntiles * kvd * 16, elt), *v = malloc((size_t)n * kvd * elt);
            for (int t = 0; t < n; t++)
                for (int i = 0; i < d; i++) {
                    size_t at = ((size_t)(t / 16) * kvd + 3 + i) * 16 + t % 16;
                    if (f16) ((uint16_t *)kt)[at] = f32_to_f16(kf[t * d + i]);
                    else ((float *)kt)[at] = kf[t * d + i];
                }
            for (int i = 0; i < n * kvd; i++) {
                if (f16) ((uint16_t *)v)[i] = f32_to_f16(vf[i]);
                else ((float *)v)[i] = vf[i];
            }
            float *sr = malloc((size_t)nq * n * 4), *sg = malloc((size_t)nq * n * 4);
            float *orf = malloc((size_t)nq * d * 4), *og = malloc((size_t)nq * d * 4);
            const void *kh = kt + (size_t)3 * 16 * elt;
            kern_ops_scalar.att_qk(q, d, nq, kh, (int64_t)kvd * 16, f16, d, ntiles, 0.125f, sr, n);
            for (int r = 0; r < nq; r++)
                for (int t = 0; t < n; t++) {
                    double s = 0, m = 0;
                    for (int i = 0; i < d; i++) {
                        size_t at = ((size_t)(t / 16) * kvd + 3 + i) * 16 + t % 16;
                        double kk = f16 ? f16_to_f32(((uint16_t *)kt)[at]) : ((float *)kt)[at];
                        s += q[r * d + i] * kk;
                        m += fabs(q[r * d + i] * kk);
                    }
                    ck_assert(close_enough(sr[r * n + t], 0.125 * s, 0.125 * m));
                }
            /* probabilities from the scores; chains over t in [5, 70] after a first part */
            for (int r = 0; r < nq; r++) kern_ops_scalar.softmax(sr + r * n, n);
            fill(orf, (int64_t)nq * d, 0.5f);
            memcpy(og, orf, (size_t)nq * d * 4);
            const void *vh = v + (size_t)2 * elt;
            kern_ops_scalar.att_pv(sr, n, nq, 5, 40, vh, kvd, f16, d, orf, d);
            kern_ops_scalar.att_pv(sr, n, nq, 41, 70, vh, kvd, f16, d, orf, d);
            for (int r = 0; r < nq; r++)
                for (int i = 0; i < d; i++) {
                    double s = og[r * d + i], m = fabs(og[r * d + i]);
                    for (int t = 5; t <= 70; t++) {
                        double vv = f16 ? f16_to_f32(((uint16_t *)v)[t * kvd + 2 + i]) : ((float *)v)[t * kvd + 2 + i];
                        s += sr[r * n + t] * vv;
                        m += fabs(sr[r * n + t] * vv);
                    }
                    ck_assert(close_enough(orf[r * d + i], s, m));
                }
            for (int vi = 1; vi < N_TABLES; vi++) {
                const kern_ops *ops = kern_get(all_names[vi]);
                if (!ops) continue;
                for (int rows = 1; rows <= nq; rows += 4) {
                    ops->att_qk(q, d, rows, kh, (int64_t)kvd * 16, f16, d, ntiles, 0.125f, sg, n);
                    float *chk = malloc((size_t)rows * n * 4);
                    kern_ops_scalar.att_qk(q, d, rows, kh, (int64_t)kvd * 16, f16, d, ntiles, 0.125f, chk, n);
                    ck_assert_msg(memcmp(sg, chk, (size_t)rows * n * 4) == 0, "%s att_qk d %d f16 %d rows %d",
                                  ops->name, d, f16, rows);
                    free(chk);
                }
                memset(og, 0, (size_t)nq * d * 4);
                float *o2 = calloc((size_t)nq * d, 4);
                ops->att_pv(sr, n, nq, 5, 70, vh, kvd, f16, d, og, d);
                kern_ops_scalar.att_pv(sr, n, nq, 5, 70, vh, kvd, f16, d, o2, d);
                ck_assert_msg(memcmp(og, o2, (size_t)nq * d * 4) == 0, "%s att_pv d %d f16 %d", ops->name, d, f16);
                ops->att_pv(sr, n, nq, 9, 8, vh, kvd, f16, d, og, d); /* empty range: nothing */
                ck_assert(memcmp(og, o2, (size_t)nq * d * 4) == 0);
                free(o2);
            }
            free(q); free(kf); free(vf); free(kt); free(v); free(sr); free(sg); free(orf); free(og);
        }
}
END_TEST

/* q8_0 caches (kernels.h): the key and value writers round as ggml's quantize_row_q8_0
 * (|x - d * q| <= d / 2, plus 127 d 2^-11 for d's f16 rounding), the query quantizer
 * rounds as ggml's then keeps the remainder, the scalar twin's scores are those of the quantized query and the
 * dequantized keys within TOL, its value sums those of the dequantized values, and every table
 * gives its bits, for one head inside a wider row (its blocks after another head's), any
 * row count and tile count, and chains continued. */
START_TEST(test_att_q8_0)
{
    static const int dims[] = { 32, 64, 128 };
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        int d = dims[di], nq = 13, ntiles = 5, n = ntiles * 16, kvd = d + 32, h0 = 32; /* head at dims [32, 32 + d) */
        float *q = malloc((size_t)nq * d * 4), *kf = malloc((size_t)n * kvd * 4), *vf = malloc((size_t)n * kvd * 4);
        float *kd = malloc((size_t)n * kvd * 4), *vd = malloc((size_t)n * kvd * 4);
        fill(q, (int64_t)nq * d, 1.0f);
        fill(kf, (int64_t)n * kvd, 1.0f);
        fill(vf, (int64_t)n * kvd, 2.0f);
        size_t tb = kern_kv_bytes(KERN_KV_Q8_0, (int64_t)kvd * 16), rb = kern_kv_bytes(KERN_KV_Q8_0, kvd);
        ck_assert_uint_eq(tb, (size_t)kvd / 32 * KERN_KVQ_GROUP);
        uint8_t *kt = calloc((size_t)ntiles, tb), *v = calloc((size_t)n, rb);
        for (int t = 0; t < n; t++) {
            kern_kv_q8_key(kf + (size_t)t * kvd, kvd, kt + (size_t)(t / 16) * tb, t % 16);
            kern_kv_q8_row(vf + (size_t)t * kvd, kvd, v + (size_t)t * rb);
        }
        for (int t = 0; t < n; t++) /* dequantized: the rounding bound, and the tile's transposition */
            for (int g = 0; g < kvd / 32; g++) {
                const uint8_t *grp = kt + (size_t)(t / 16) * tb + (size_t)g * KERN_KVQ_GROUP;
                const uint8_t *vb = v + (size_t)t * rb + g * 34;
                uint16_t ks, vs;
                memcpy(&ks, grp + 2 * (t % 16), 2);
                memcpy(&vs, vb, 2);
                for (int i = 0; i < 32; i++) {
                    size_t at = (size_t)t * kvd + g * 32 + i;
                    kd[at] = f16_to_f32(ks) * (float)(int8_t)grp[KERN_KVQ_AT(i, t % 16)];
                    vd[at] = f16_to_f32(vs) * (float)(int8_t)vb[2 + i];
                    ck_assert(fabsf(kd[at] - kf[at]) <= f16_to_f32(ks) * 0.57f + 1e-6f);
                    ck_assert(fabsf(vd[at] - vf[at]) <= f16_to_f32(vs) * 0.57f + 1e-6f);
                }
            }
        float *sr = malloc((size_t)nq * n * 4), *sg = malloc((size_t)nq * n * 4);
        float *orf = calloc((size_t)nq * d, 4), *og = calloc((size_t)nq * d, 4);
        const uint8_t *kh = kt + kern_kv_bytes(KERN_KV_Q8_0, (int64_t)h0 * 16), *vh = v + kern_kv_bytes(KERN_KV_Q8_0, h0);
        /* the query quantized in two digits: ggml's q8_0 scale and rounding per 32 dims,
         * then the remainder in 254ths; the biases their sums */
        kern_qq *qq = malloc((size_t)nq * d / 32 * sizeof *qq);
        kern_att_q8_query(q, d, nq, d, qq);
        for (int r = 0; r < nq; r++)
            for (int b = 0; b < d / 32; b++) {
                const kern_qq *x = qq + r * (d / 32) + b;
                float amax = 0, dq = x->u * 254.0f;
                int sh = 0, sl = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(q[r * d + b * 32 + i]));
                for (int i = 0; i < 32; i++) {
                    float y = q[r * d + b * 32 + i];
                    sh += x->h[i];
                    sl += x->l[i];
                    ck_assert(fabsf(dq * x->h[i] - y) <= dq * 0.5f + 1e-6f);
                    ck_assert(fabsf(x->u * (254.0f * x->h[i] + x->l[i]) - y) <= x->u * 0.51f + 1e-6f);
                }
                ck_assert(fabsf(dq - amax / 127.0f) <= 1e-6f * amax && x->bias_h == -128 * sh && x->bias_l == -128 * sl);
            }
        kern_ops_scalar.att_qk8(qq, nq, kh, (int64_t)kvd * 16, d, ntiles, 0.125f, sr, n);
        for (int r = 0; r < nq; r++) /* against the quantized query's exact products */
            for (int t = 0; t < n; t++) {
                double sum = 0, m = 0;
                for (int i = 0; i < d; i++) {
                    const kern_qq *x = qq + r * (d / 32) + i / 32;
                    double qv = (double)x->u * (254.0 * x->h[i % 32] + x->l[i % 32]);
                    sum += qv * kd[(size_t)t * kvd + h0 + i];
                    m += fabs(qv * kd[(size_t)t * kvd + h0 + i]);
                }
                ck_assert(close_enough(sr[r * n + t], 0.125 * sum, 0.125 * m));
            }
        for (int r = 0; r < nq; r++) kern_ops_scalar.softmax(sr + r * n, n);
        kern_ops_scalar.att_pv(sr, n, nq, 3, 40, vh, kvd, KERN_KV_Q8_0, d, orf, d);
        kern_ops_scalar.att_pv(sr, n, nq, 41, 77, vh, kvd, KERN_KV_Q8_0, d, orf, d);
        for (int r = 0; r < nq; r++)
            for (int i = 0; i < d; i++) {
                double sum = 0, m = 0;
                for (int t = 3; t <= 77; t++) {
                    sum += sr[r * n + t] * (double)vd[(size_t)t * kvd + h0 + i];
                    m += fabs(sr[r * n + t] * (double)vd[(size_t)t * kvd + h0 + i]);
                }
                ck_assert(close_enough(orf[r * d + i], sum, m));
            }
        for (int vi = 1; vi < N_TABLES; vi++) {
            const kern_ops *ops = kern_get(all_names[vi]);
            if (!ops) continue;
            for (int rows = 1; rows <= nq; rows++) {
                float *chk = malloc((size_t)rows * n * 4);
                for (int nt = 1; nt <= ntiles; nt += 2) {
                    ops->att_qk8(qq, rows, kh, (int64_t)kvd * 16, d, nt, 0.125f, sg, n);
                    kern_ops_scalar.att_qk8(qq, rows, kh, (int64_t)kvd * 16, d, nt, 0.125f, chk, n);
                    for (int r = 0; r < rows; r++)
                        ck_assert_msg(memcmp(sg + r * n, chk + r * n, (size_t)nt * 16 * 4) == 0,
                                      "%s att_qk8 d %d rows %d tiles %d", ops->name, d, rows, nt);
                }
                free(chk);
                memset(og, 0, (size_t)nq * d * 4);
                ops->att_pv(sr, n, rows, 3, 40, vh, kvd, KERN_KV_Q8_0, d, og, d);
                ops->att_pv(sr, n, rows, 41, 77, vh, kvd, KERN_KV_Q8_0, d, og, d);
                ck_assert_msg(memcmp(og, orf, (size_t)rows * d * 4) == 0, "%s att_pv q8_0 d %d rows %d", ops->name, d,
                              rows);
            }
        }
        free(q); free(kf); free(vf); free(kd); free(vd); free(kt); free(v);
        free(sr); free(sg); free(orf); free(og); free(qq);
    }
}
END_TEST

START_TEST(test_dispatch)
{
    unsetenv("LLM_KERNELS");
    kern_init();
    const char *best = kern_name();
    ck_assert_ptr_nonnull(kern_get(best));
    ck_assert_int_eq(kern_select("no-such-isa"), -1);
    ck_assert_str_eq(kern_name(), best);
    ck_assert_ptr_null(kern_get(NULL));
    ck_assert_int_eq(kern_select("scalar"), 0);
    ck_assert_str_eq(kern_name(), "scalar");
    ck_assert_ptr_eq(kern_active, &kern_ops_scalar);
    setenv("LLM_KERNELS", "scalar", 1);
    kern_init();
    ck_assert_str_eq(kern_name(), "scalar");
    setenv("LLM_KERNELS", "bogus", 1);
    kern_init();
    ck_assert_str_eq(kern_name(), best); /* a bad override keeps the automatic choice */
    setenv("LLM_KERNELS", "avx2", 1);
    kern_init();
    ck_assert_str_eq(kern_name(), kern_get("avx2") ? "avx2" : best);
    unsetenv("LLM_KERNELS");
    /* every table answers to the name it is listed under */
    const char *names[] = { "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neoni8mm" };
    for (int i = 0; i < 6; i++)
        if (kern_get(names[i])) ck_assert_str_eq(kern_get(names[i])->name, names[i]);
#if defined(__x86_64__)
    /* the one detection (common/cpu.c) agrees with the compiler's */
    ck_assert_int_eq(!!(cpu_features() & CPU_AVX2), !!__builtin_cpu_supports("avx2"));
    ck_assert_int_eq(!!(cpu_features() & CPU_AVX512VNNI), !!__builtin_cpu_supports("avx512vnni"));
    if (__builtin_cpu_supports("avx2")) ck_assert_ptr_nonnull(kern_get("avx2"));
    if (__builtin_cpu_supports("avx512vnni")) ck_assert_str_eq(best, "avx512vnni");
    ck_assert_ptr_null(kern_get("neon"));
#endif
    /* make test-arm names the table each emulated CPU must get (the detection: cpu.c) */
    const char *expect = getenv("LLM_TEST_EXPECT_KERNELS");
    if (expect && *expect) ck_assert_str_eq(best, expect);
    /* the wrappers go through the active table */
    float a[40], b[40];
    fill(a, 40, 1.0f);
    fill(b, 40, 1.0f);
    ck_assert(close_enough(kern_f32_dot(a, b, 40), kern_ops_scalar.f32_dot(a, b, 40), 40.0));
}
END_TEST

/* common/cpu.h's one choice of a table: the first entry this CPU runs, or the one the
 * environment variable names; a name that is unknown or needs what this CPU lacks is
 * refused with one warning naming the variable, and the automatic choice stays. */
START_TEST(test_cpu_impl_pick)
{
    static const int never_t = 1, best_t = 2, scalar_t = 3;
    const cpu_impl list[] = {
        { "never", 1u << 30, &never_t }, /* a feature no CPU reports */
        { "best", 0, &best_t },
        { "scalar", 0, &scalar_t },
    };
    ck_assert_ptr_null(cpu_impl_get(list, 3, "never"));
    ck_assert_ptr_null(cpu_impl_get(list, 3, "nope"));
    ck_assert_ptr_null(cpu_impl_get(list, 3, NULL));
    ck_assert_ptr_eq(cpu_impl_get(list, 3, "scalar")->table, &scalar_t);
    unsetenv("LLM_TEST_FAMILY");
    ck_assert_ptr_eq(cpu_impl_pick(list, 3, "LLM_TEST_FAMILY")->table, &best_t);
    setenv("LLM_TEST_FAMILY", "scalar", 1);
    ck_assert_ptr_eq(cpu_impl_pick(list, 3, "LLM_TEST_FAMILY")->table, &scalar_t);
    setenv("LLM_TEST_FAMILY", "", 1); /* empty: as if unset, no warning */
    ck_assert_ptr_eq(cpu_impl_pick(list, 3, "LLM_TEST_FAMILY")->table, &best_t);
    const char *bad[] = { "never", "bogus" };
    for (int i = 0; i < 2; i++) {
        char path[] = "/tmp/llm-cputest-XXXXXX", buf[512] = "", want[64];
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        unlink(path);
        fflush(stderr);
        int saved = dup(2);
        dup2(fd, 2);
        setenv("LLM_TEST_FAMILY", bad[i], 1);
        const cpu_impl *c = cpu_impl_pick(list, 3, "LLM_TEST_FAMILY");
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        ck_assert_int_ge(pread(fd, buf, sizeof buf - 1, 0), 1);
        close(fd);
        ck_assert_ptr_eq(c->table, &best_t);
        snprintf(want, sizeof want, "LLM_TEST_FAMILY=%s", bad[i]);
        ck_assert_msg(strstr(buf, want) && strstr(buf, "WARN") && strstr(buf, "using best"), "%s", buf);
    }
    unsetenv("LLM_TEST_FAMILY");
}
END_TEST

Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("quantize");
    tcase_add_test(tc, test_quantize_w_definition);
    tcase_add_test(tc, test_q8t_pack_layout);
    tcase_add_test(tc, test_xq_quantize_exact);
    tcase_add_test(tc, test_q8t_padding_is_zero);
    tcase_add_test(tc, test_quantize_hostile_values);
    suite_add_tcase(s, tc);
    tc = tcase_create("products");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_q8t_matmul_shapes);
    tcase_add_test(tc, test_q8t_batch_invariance);
    tcase_add_test(tc, test_q8t_matmul_blocking);
    tcase_add_test(tc, test_q8t_empty_work);
    tcase_add_test(tc, test_f_matmul);
    suite_add_tcase(s, tc);
    tc = tcase_create("float");
    tcase_add_test(tc, test_float_helpers);
    tcase_add_test(tc, test_f16_conversion_edges);
    tcase_add_test(tc, test_expf);
    tcase_add_test(tc, test_softmax_silu);
    tcase_add_test(tc, test_att_products);
    tcase_add_test(tc, test_att_q8_0);
    tcase_add_test(tc, test_dispatch);
    tcase_add_test(tc, test_cpu_impl_pick);
    suite_add_tcase(s, tc);
    return s;
}
