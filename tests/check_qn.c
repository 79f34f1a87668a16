/*
 * Tests for the native weight layouts (engined/kernels_qn.c): packing GGUF blocks keeps
 * ggml's dequantized values exactly, the bytes stay within 1.1x of the source, and
 * the product of every type on every kernel table equals the scalar twin bit for bit,
 * is within a stated tolerance of the double-precision product of the dequantized
 * values, and is batch invariant (tokens at once == one at a time, any row split).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "qtype.h"

static const char *const tables[] = { "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neoni8mm" };
#define N_TABLES (int)(sizeof tables / sizeof tables[0])

static uint64_t rs = 0x2545f4914f6cdd1dull;
static float frand(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)(rs >> 40) / 8388608.0f - 1.0f;
}
/* Values with block scales far apart and a few outliers. */
static void fill(float *x, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) x[i] = s * frand() * ((i / 32) % 7 == 3 ? 25.0f : 1.0f) * (i % 97 == 5 ? 6.0f : 1.0f);
}

/* A native test matrix: GGUF rows of the source type and their tiles. */
typedef struct {
    int wt;
    uint32_t stype;   /* the GGUF type of src */
    int64_t rows, cols;
    size_t src_row;
    uint8_t *src, *tiles;
} qmat;

static qmat make_from(int wt, uint32_t src, int64_t rows, int64_t cols)
{
    qmat m = { wt, src, rows, cols, qt_row_size(src, cols), NULL, NULL };
    float *f = malloc((size_t)(rows * cols) * sizeof *f);
    fill(f, rows * cols, 0.05f);
    m.src = malloc(m.src_row * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) qt_get(src)->quant(f + r * cols, m.src + r * m.src_row, cols);
    size_t tb = kern_qn_tile_bytes(wt, cols), nt = (size_t)((rows + KERN_TILE - 1) / KERN_TILE);
    m.tiles = aligned_alloc(64, tb * nt);
    for (size_t t = 0; t < nt; t++) {
        int n = rows - (int64_t)t * KERN_TILE < KERN_TILE ? (int)(rows - (int64_t)t * KERN_TILE) : KERN_TILE;
        kern_qn_pack(wt, src, m.src + t * KERN_TILE * m.src_row, m.src_row, n, cols, m.tiles + t * tb);
    }
    free(f);
    return m;
}

static qmat make(int wt, int64_t rows, int64_t cols) { return make_from(wt, kern_qn_get(wt)->qtype, rows, cols); }

static void drop(qmat *m) { free(m->src); free(m->tiles); }

/* Activations as the engine gives them to wt: Q8_K rounding (one scale per 256 values,
 * which the K kinds' super-block sums take) for the K kinds, Q8_0 for the others. */
static uint8_t *make_xq(int wt, int64_t n, int64_t cols, float **xf_out)
{
    float *xf = malloc((size_t)(n * cols) * sizeof *xf);
    fill(xf, n * cols, 1.0f);
    uint8_t *xq = aligned_alloc(64, (size_t)n * kern_xq_row_bytes(cols));
    if (kern_qn_get(wt)->kind >= KERN_QN_K) {
        kern_xk_quantize_ref(xf, n, cols, xq);
    } else {
        kern_xq_quantize(xf, n, cols, xq);
        kern_xq_finish(xq, n, cols);
    }
    if (xf_out) *xf_out = xf;
    else free(xf);
    return xq;
}

static const int wts[] = { KERN_W_Q4_0, KERN_W_Q4_1, KERN_W_Q5_0, KERN_W_Q5_1, KERN_W_Q4_K, KERN_W_Q5_K, KERN_W_Q6_K, KERN_W_Q2_K };
#define N_WT 8
static int64_t min_cols(int wt) { return kern_qn_get(wt)->kind >= KERN_QN_K ? 256 : 32; }

START_TEST(test_qn_pack_keeps_values)
{
    for (int i = 0; i < N_WT; i++) {
        int wt = wts[i];
        const int64_t cols_list[] = { min_cols(wt), 512, 2048, 96 };
        for (int c = 0; c < 4; c++) {
            int64_t cols = cols_list[c];
            if (cols % min_cols(wt)) continue;
            qmat m = make(wt, 37, cols);
            float *want = malloc((size_t)cols * sizeof *want), *got = malloc((size_t)cols * sizeof *got);
            for (int64_t r = 0; r < m.rows; r++) {
                qt_get(m.stype)->dequant(m.src + r * m.src_row, want, cols);
                kern_qn_dequant_row(wt, m.tiles, cols, r, got);
                for (int64_t j = 0; j < cols; j++) /* equal values (a zero's sign may differ) */
                    ck_assert_msg(want[j] == got[j], "%s cols %ld row %ld value %ld: %a, ggml %a",
                                  kern_qn_get(wt)->name, (long)cols, (long)r, (long)j, got[j], want[j]);
            }
            free(want); free(got);
            drop(&m);
        }
    }
    /* Q3_K is kept in the Q6_K layout with its exact values */
    ck_assert_int_eq(kern_qn_from_qtype(QT_Q3_K), KERN_W_Q6_K);
    qmat m = make_from(KERN_W_Q6_K, QT_Q3_K, 21, 512);
    float want[512], got[512];
    for (int64_t r = 0; r < m.rows; r++) {
        qt_get(QT_Q3_K)->dequant(m.src + r * m.src_row, want, 512);
        kern_qn_dequant_row(KERN_W_Q6_K, m.tiles, 512, r, got);
        for (int j = 0; j < 512; j++) ck_assert_msg(want[j] == got[j], "q3_K row %ld value %d: %a, ggml %a", (long)r, j, got[j], want[j]);
    }
    drop(&m);
    ck_assert_int_eq(kern_qn_from_qtype(QT_Q2_K), KERN_W_Q2_K);
    ck_assert_int_eq(kern_qn_from_qtype(QT_Q8_0), -1);
    ck_assert_int_eq(kern_qn_from_qtype(QT_Q4_K), KERN_W_Q4_K);
    ck_assert_ptr_null(kern_qn_get(KERN_W_Q8T));
}
END_TEST

/* At most 1.1x the source's bytes for a TinyLlama-sized row, 64-byte super-blocks. */
START_TEST(test_qn_bytes)
{
    for (int i = 0; i < N_WT; i++) {
        const kern_qn_desc *D = kern_qn_get(wts[i]);
        ck_assert_uint_eq(D->sb_bytes % 64, 0);
        double ratio = (double)kern_qn_tile_bytes(wts[i], 2048) / (16.0 * (double)qt_row_size(D->qtype, 2048));
        ck_assert_msg(ratio <= 1.1 && ratio >= 1.0, "%s: %.3f x the source", D->name, ratio);
        /* a row ending in part of a super-block (gemma's 1152 = 4.5 x 256): the last one
         * keeps its header and only its blocks, so that tiles follow each other at once */
        if (D->kind >= KERN_QN_K) continue;
        size_t bb = kern_qn_block_bytes(D->bits);
        ck_assert_uint_eq(kern_qn_tile_bytes(wts[i], 1152), 4 * D->sb_bytes + D->hdr + 4 * bb);
        ck_assert_uint_eq(kern_qn_tile_bytes(wts[i], 96), (D->hdr + 3 * bb + 63) / 64 * 64);
        ck_assert_uint_eq(kern_qn_tile_bytes(wts[i], 2304), 9 * D->sb_bytes);
    }
}
END_TEST

/* Every table: the scalar twin's bits; the double product within 1e-5 of the sum of
 * |terms| (the only differences are float roundings of the block terms). */
START_TEST(test_qn_products)
{
    static const int64_t toks[] = { 1, 2, 5, 8, 19 };
    for (int i = 0; i < N_WT; i++) {
        int wt = wts[i];
        const int64_t cols_list[] = { 512, 2304, 96, 1152 };
        for (int c = 0; c < 4; c++) {
            int64_t cols = cols_list[c];
            if (cols % min_cols(wt)) continue;
            qmat m = make(wt, 45, cols);
            for (int ti = 0; ti < 5; ti++) {
                int64_t n = toks[ti], ld = m.rows;
                uint8_t *xq = make_xq(wt, n, cols, NULL);
                float *ref = malloc((size_t)(n * ld) * sizeof *ref), *y = malloc((size_t)(n * ld) * sizeof *y);
                const kern_ops *saved = kern_active;
                kern_active = &kern_ops_scalar;
                kern_qn_matmul(wt, m.tiles, cols, xq, n, ref, ld, 0, m.rows);
                /* against doubles: dequantized weights times dequantized activations */
                float *w = malloc((size_t)cols * sizeof *w);
                int64_t nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
                for (int64_t r = 0; r < m.rows; r++) {
                    kern_qn_dequant_row(wt, m.tiles, cols, r, w);
                    for (int64_t t = 0; t < n; t++) {
                        const int8_t *q = (const int8_t *)(xq + (size_t)t * kern_xq_row_bytes(cols));
                        const float *dx = (const float *)(q + nbp * KERN_QK);
                        double s = 0, mag = 0;
                        for (int64_t j = 0; j < cols; j++) {
                            double v = (double)w[j] * q[j] * dx[j / 32];
                            s += v;
                            mag += fabs(v);
                        }
                        double got = ref[t * ld + r];
                        ck_assert_msg(fabs(got - s) <= 1e-5 * mag + 1e-30, "%s cols %ld: t%ld r%ld: %g vs %g (|terms| %g)",
                                      kern_qn_get(wt)->name, (long)cols, (long)t, (long)r, got, s, mag);
                    }
                }
                free(w);
                for (int v = 0; v < N_TABLES; v++) {
                    const kern_ops *ops = kern_get(tables[v]);
                    if (!ops) continue;
                    kern_active = ops;
                    for (int64_t k = 0; k < n * ld; k++) y[k] = -5.0f;
                    int64_t cut = (m.rows * 3) / 7;
                    kern_qn_matmul(wt, m.tiles, cols, xq, n, y, ld, 0, cut);
                    kern_qn_matmul(wt, m.tiles, cols, xq, n, y, ld, cut, m.rows);
                    ck_assert_msg(memcmp(y, ref, (size_t)(n * ld) * sizeof *y) == 0, "%s on %s, cols %ld, %ld tokens: not the scalar bits",
                                  kern_qn_get(wt)->name, ops->name, (long)cols, (long)n);
                }
                kern_active = saved;
                free(ref); free(y); free(xq);
            }
            drop(&m);
        }
    }
}
END_TEST

/* Batch invariance: n tokens at once (any n up to 40, and 300) equal one at a time. */
START_TEST(test_qn_batch_invariance)
{
    for (int i = 0; i < N_WT; i++) {
        int wt = wts[i];
        qmat m = make(wt, 40, 512);
        int64_t N = 300, xs = (int64_t)kern_xq_row_bytes(m.cols);
        uint8_t *xq = make_xq(wt, N, m.cols, NULL);
        float *one = malloc((size_t)(N * m.rows) * sizeof *one), *y = malloc((size_t)(N * m.rows) * sizeof *y);
        const kern_ops *saved = kern_active;
        for (int v = 0; v < N_TABLES; v++) {
            const kern_ops *ops = kern_get(tables[v]);
            if (!ops) continue;
            kern_active = ops;
            for (int64_t t = 0; t < N; t++) kern_qn_matmul(wt, m.tiles, m.cols, xq + t * xs, 1, one + t * m.rows, m.rows, 0, m.rows);
            for (int64_t n = 2; n <= 41; n += 3) {
                int64_t nt = n == 41 ? N : n, t0 = nt == N ? 0 : (n * 11) % (N - nt);
                int64_t cut = (n * 16) % m.rows;
                kern_qn_matmul(wt, m.tiles, m.cols, xq + t0 * xs, nt, y, m.rows, 0, cut);
                kern_qn_matmul(wt, m.tiles, m.cols, xq + t0 * xs, nt, y, m.rows, cut, m.rows);
                ck_assert_msg(memcmp(y, one + t0 * m.rows, (size_t)(nt * m.rows) * sizeof *y) == 0,
                              "%s on %s: %ld tokens at once differ from one at a time", kern_qn_get(wt)->name, ops->name, (long)nt);
            }
        }
        kern_active = saved;
        free(one); free(y); free(xq);
        drop(&m);
    }
}
END_TEST

/* Q8_K activations: every table's quantizer writes the reference's bytes (values,
 * scales, sums), with outliers, ties of |x| with opposite signs, zero super-blocks, a
 * NaN and an infinity; rows that are not whole super-blocks take the reference. */
START_TEST(test_xk_quantize_tables)
{
    static const int64_t cols_list[] = { 256, 2048, 5632, 96, 320 };
    for (int c = 0; c < 5; c++) {
        int64_t cols = cols_list[c], n = 7;
        size_t xs = kern_xq_row_bytes(cols);
        float *x = malloc((size_t)(n * cols) * sizeof *x);
        fill(x, n * cols, 3.0f);
        for (int64_t j = 0; j < cols && j < 256; j++) x[1 * cols + j] = 0.0f;   /* row 1: a zero super-block */
        x[2 * cols + 7] = 50.0f, x[2 * cols + 3] = -50.0f;                      /* row 2: a tie, the first negative */
        x[3 * cols + 5] = NAN;                                                  /* row 3: NaN ignored */
        x[4 * cols + 9] = INFINITY;                                             /* row 4: inf (garbage, but the same) */
        x[5 * cols + cols - 1] = -1e-30f;                                       /* row 5: tiny values */
        uint8_t *want = aligned_alloc(64, xs * (size_t)n), *got = aligned_alloc(64, xs * (size_t)n);
        memset(want, 0, xs * (size_t)n);
        kern_xk_quantize_ref(x, n, cols, want);
        for (int i = 0; i < N_TABLES; i++) {
            const kern_ops *ops = kern_get(tables[i]);
            if (!ops) continue;
            memset(got, 0, xs * (size_t)n);
            ops->xk_quantize(x, n, cols, got);
            for (size_t b = 0; b < xs * (size_t)n; b++)
                ck_assert_msg(want[b] == got[b], "%s cols %ld: xq row %zu byte %zu is %u, reference %u", tables[i],
                              (long)cols, b / xs, b % xs, got[b], want[b]);
        }
        free(x); free(want); free(got);
    }
}
END_TEST

Suite *qn_suite(void)
{
    Suite *s = suite_create("qn");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_qn_pack_keeps_values);
    tcase_add_test(tc, test_qn_bytes);
    tcase_add_test(tc, test_xk_quantize_tables);
    suite_add_tcase(s, tc);
    tc = tcase_create("products");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_qn_products);
    tcase_add_test(tc, test_qn_batch_invariance);
    suite_add_tcase(s, tc);
    return s;
}
