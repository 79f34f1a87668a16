/*
 * Tests for engined/kernels: every SIMD table this CPU runs against the scalar twin on
 * random inputs of awkward sizes, the scalar kernels against double-precision sums of
 * the dequantized values, quantization against its definition, and the dispatcher.
 *
 * Tolerance of the products: the int32 block dots are exact, so two variants differ
 * only in float summation order. Each output must agree within 1e-5 of the sum of the
 * absolute values of its element products (sum |d_w d_x w_i x_i| or sum |w_i x_i|): a relative
 * bound on rounding error, which stays meaningful when terms cancel.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "f16.h"
#include "kernels.h"

#define TOL 1e-5

static const char *const simd_names[] = { "avx2", "avx512vnni", "avx512vnni-fast", "neon" };
#define N_SIMD (int)(sizeof simd_names / sizeof simd_names[0])

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

static const kern_q8_block *blk(const void *rows, int64_t cols, int64_t r)
{
    return (const kern_q8_block *)((const char *)rows + (size_t)r * kern_q8_row_bytes(cols));
}

/* Reference product of q8 rows in double, and for the tolerance the sum of the
 * absolute values of the element products (SIMD lanes hold partial sums of a block,
 * which may cancel, so |block dot| alone would not bound their rounding). */
static double q8_ref(const kern_q8_block *w, const kern_q8_block *x, int64_t cols, double *mag)
{
    double s = 0, m = 0;
    for (int64_t b = 0; b < (cols + 31) / 32; b++) {
        long d = 0, a = 0;
        for (int j = 0; j < 32; j++) {
            d += (long)w[b].qs[j] * x[b].qs[j];
            a += labs((long)w[b].qs[j] * x[b].qs[j]);
        }
        double scale = (double)f16_to_f32(w[b].d) * f16_to_f32(x[b].d);
        s += (double)d * scale;
        m += (double)a * fabs(scale);
    }
    *mag = m;
    return s;
}

START_TEST(test_quantize_w_definition)
{
    static const int64_t cols_list[] = { 32, 64, 96, 172, 2048 };
    for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++) {
        int64_t cols = cols_list[c], nb = (cols + 31) / 32;
        float *x = malloc(cols * sizeof *x);
        fill(x, cols, 3.0f);
        if (cols >= 64) for (int j = 32; j < 64; j++) x[j] = 0.0f; /* an all-zero block */
        kern_q8_block *q = malloc(kern_q8_row_bytes(cols));
        memset(q, 0x55, kern_q8_row_bytes(cols));
        kern_q8_quantize_w(x, cols, q);
        for (int64_t b = 0; b < nb; b++) {
            float amax = 0;
            for (int j = 0; j < 32 && b * 32 + j < cols; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            ck_assert_uint_eq(q[b].d, f32_to_f16(amax / 127.0f));
            for (int j = 0; j < 32; j++) {
                int64_t i = b * 32 + j;
                int want = 0;
                if (i < cols && amax > 0) want = (int)roundf(x[i] / (amax / 127.0f));
                ck_assert_msg(q[b].qs[j] == want, "cols %ld block %ld [%d]: %d, expected %d",
                              (long)cols, (long)b, j, q[b].qs[j], want);
            }
        }
        float *back = malloc(cols * sizeof *back);
        kern_q8_dequantize(q, cols, back);
        for (int64_t i = 0; i < cols; i++) {
            float d = f16_to_f32(q[i / 32].d);
            ck_assert_float_le(fabsf(back[i] - x[i]), 0.5f * d + 1e-3f * fabsf(x[i]) + 1e-30f);
        }
        free(x); free(q); free(back);
    }
}
END_TEST

START_TEST(test_quantize_x_exact)
{
    static const int64_t cols_list[] = { 1, 31, 32, 64, 96, 172, 2048, 5632 };
    for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++) {
        int64_t cols = cols_list[c], rows = 3, nb = (cols + 31) / 32;
        float *x = malloc(rows * cols * sizeof *x);
        fill(x, rows * cols, 0.7f);
        if (cols >= 64) for (int j = 32; j < 64; j++) x[j] = 0.0f;
        size_t bytes = rows * kern_q8_row_bytes(cols);
        unsigned char *ref = malloc(bytes), *got = malloc(bytes);
        memset(ref, 0x55, bytes);
        kern_ops_scalar.q8_quantize_x(x, rows, cols, ref);
        /* the scalar twin against its definition (llama.cpp's AVX2 rounding) */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t b = 0; b < nb; b++) {
                const kern_q8_block *q = blk(ref, cols, r) + b;
                float amax = 0;
                for (int j = 0; j < 32 && b * 32 + j < cols; j++) amax = fmaxf(amax, fabsf(x[r * cols + b * 32 + j]));
                ck_assert_uint_eq(q->d, f32_to_f16(amax / 127.0f));
                for (int j = 0; j < 32; j++) {
                    int want = b * 32 + j < cols && amax > 0 ? (int)nearbyintf(x[r * cols + b * 32 + j] * (127.0f / amax)) : 0;
                    ck_assert_int_eq(q->qs[j], want);
                }
            }
        for (int v = 0; v < N_SIMD; v++) {
            const kern_ops *ops = kern_get(simd_names[v]);
            if (!ops) continue;
            memset(got, 0xaa, bytes);
            ops->q8_quantize_x(x, rows, cols, got);
            ck_assert_msg(memcmp(ref, got, bytes) == 0, "%s quantize_x differs at cols %ld", ops->name, (long)cols);
        }
        free(x); free(ref); free(got);
    }
}
END_TEST

/* One shape: scalar against the double reference, every SIMD table against scalar,
 * on the row range [r0, r1) only, with Y's other entries left untouched. */
static void check_matmul_shape(int64_t cols, int64_t rows, int64_t n_tok)
{
    size_t rb = kern_q8_row_bytes(cols);
    float *wf = malloc(rows * cols * sizeof *wf), *xf = malloc(n_tok * cols * sizeof *xf);
    fill(wf, rows * cols, 1.0f);
    fill(xf, n_tok * cols, 2.0f);
    unsigned char *w = malloc(rows * rb), *x = malloc(n_tok * rb);
    for (int64_t r = 0; r < rows; r++) kern_q8_quantize_w(wf + r * cols, cols, w + r * rb);
    kern_ops_scalar.q8_quantize_x(xf, n_tok, cols, x);
    int64_t ldy = rows + 3, r0 = rows > 2 ? 1 : 0, r1 = rows > 4 ? rows - 1 : rows;
    float *ref = malloc(n_tok * ldy * sizeof *ref), *got = malloc(n_tok * ldy * sizeof *got);
    for (int64_t i = 0; i < n_tok * ldy; i++) ref[i] = -777.0f;
    kern_ops_scalar.q8_matmul(w, cols, x, n_tok, ref, ldy, r0, r1);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < ldy; r++) {
            float y = ref[t * ldy + r];
            if (r < r0 || r >= r1) { ck_assert_float_eq(y, -777.0f); continue; }
            double mag, want = q8_ref(blk(w, cols, r), blk(x, cols, t), cols, &mag);
            ck_assert_msg(fabs(y - want) <= TOL * mag + 1e-30, "scalar %ldx%ld t%ld r%ld: %g vs %g",
                          (long)rows, (long)cols, (long)t, (long)r, y, want);
        }
    for (int v = 0; v < N_SIMD; v++) {
        const kern_ops *ops = kern_get(simd_names[v]);
        if (!ops) continue;
        for (int64_t i = 0; i < n_tok * ldy; i++) got[i] = -777.0f;
        ops->q8_matmul(w, cols, x, n_tok, got, ldy, r0, r1);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < ldy; r++) {
                if (r < r0 || r >= r1) { ck_assert_float_eq(got[t * ldy + r], -777.0f); continue; }
                double mag;
                q8_ref(blk(w, cols, r), blk(x, cols, t), cols, &mag);
                ck_assert_msg(fabs(got[t * ldy + r] - ref[t * ldy + r]) <= TOL * mag + 1e-30,
                              "%s %ld rows x %ld cols, %ld tokens: t%ld r%ld %g vs scalar %g", ops->name,
                              (long)rows, (long)cols, (long)n_tok, (long)t, (long)r, got[t * ldy + r], ref[t * ldy + r]);
            }
    }
    free(wf); free(xf); free(w); free(x); free(ref); free(got);
}

START_TEST(test_q8_matmul_shapes)
{
    static const int64_t cols_list[] = { 32, 64, 96, 172, 2048, 5632 };
    static const int64_t rows_list[] = { 1, 3, 7, 64 };
    static const int64_t tok_list[] = { 1, 2, 3, 5, 17 };
    for (size_t c = 0; c < 6; c++)
        for (size_t r = 0; r < 4; r++)
            for (size_t t = 0; t < 5; t++) check_matmul_shape(cols_list[c], rows_list[r], tok_list[t]);
}
END_TEST

/* Past the streaming path (more than 32 tokens): the L2 row chunks and token tiles
 * of the prefill GEMM, with ragged ends; and a long range through the streaming path. */
START_TEST(test_q8_matmul_blocking)
{
    check_matmul_shape(2048, 130, 45);
    check_matmul_shape(5632, 37, 33);
    check_matmul_shape(96, 203, 64);
    check_matmul_shape(2048, 130, 29);
}
END_TEST

/* A 172-wide row gives the same products as the same values zero-padded to 192, and
 * every padding value is stored as 0. */
START_TEST(test_q8_padding_is_zero)
{
    enum { COLS = 172, PAD = 192, ROWS = 5, TOK = 4 };
    float w[ROWS * PAD] = {0}, x[TOK * PAD] = {0};
    for (int r = 0; r < ROWS; r++) fill(w + r * PAD, COLS, 1.0f);
    for (int t = 0; t < TOK; t++) fill(x + t * PAD, COLS, 1.0f);
    float w172[ROWS * COLS], x172[TOK * COLS];
    for (int r = 0; r < ROWS; r++) memcpy(w172 + r * COLS, w + r * PAD, COLS * sizeof(float));
    for (int t = 0; t < TOK; t++) memcpy(x172 + t * COLS, x + t * PAD, COLS * sizeof(float));
    ck_assert_uint_eq(kern_q8_row_bytes(COLS), kern_q8_row_bytes(PAD));
    size_t rb = kern_q8_row_bytes(COLS);
    unsigned char qw[ROWS * 6 * 34], qw2[ROWS * 6 * 34], qx[TOK * 6 * 34], qx2[TOK * 6 * 34];
    memset(qw, 0x7f, sizeof qw);
    memset(qx, 0x7f, sizeof qx);
    for (int r = 0; r < ROWS; r++) {
        kern_q8_quantize_w(w172 + r * COLS, COLS, qw + r * rb);
        kern_q8_quantize_w(w + r * PAD, PAD, qw2 + r * rb);
    }
    ck_assert(memcmp(qw, qw2, sizeof qw) == 0);
    for (int r = 0; r < ROWS; r++)
        for (int j = COLS % 32; j < 32; j++) ck_assert_int_eq(blk(qw, COLS, r)[5].qs[j], 0);
    const char *names[] = { "scalar", "avx2", "avx512vnni", "avx512vnni-fast", "neon" };
    for (int v = 0; v < 5; v++) {
        const kern_ops *ops = kern_get(names[v]);
        if (!ops) continue;
        ops->q8_quantize_x(x172, TOK, COLS, qx);
        ops->q8_quantize_x(x, TOK, PAD, qx2);
        ck_assert(memcmp(qx, qx2, sizeof qx) == 0);
        float y[TOK * ROWS], y2[TOK * ROWS];
        ops->q8_matmul(qw, COLS, qx, TOK, y, ROWS, 0, ROWS);
        ops->q8_matmul(qw2, PAD, qx2, TOK, y2, ROWS, 0, ROWS);
        ck_assert(memcmp(y, y2, sizeof y) == 0);
        /* junk in X's padding cannot leak through W's zeros */
        for (int t = 0; t < TOK; t++)
            for (int j = COLS % 32; j < 32; j++)
                ((kern_q8_block *)(qx + t * rb))[5].qs[j] = (int8_t)(rnd() | 1);
        ops->q8_matmul(qw, COLS, qx, TOK, y2, ROWS, 0, ROWS);
        ck_assert(memcmp(y, y2, sizeof y) == 0);
    }
}
END_TEST

/* Hostile activations and weights (NaN, infinities, huge values) must not crash or
 * hit undefined float->int conversions (UBSan runs this in make asan); finite blocks
 * next to them still quantize exactly, and the tables agree when amax is finite. */
START_TEST(test_quantize_hostile_values)
{
    enum { COLS = 96 };
    float x[COLS];
    for (int i = 0; i < COLS; i++) x[i] = frand(1.0f);
    x[3] = NAN; x[40] = INFINITY; x[41] = -INFINITY; x[70] = 3e38f; x[71] = -3e38f;
    unsigned char ref[3 * 34], got[3 * 34], w[3 * 34];
    kern_ops_scalar.q8_quantize_x(x, 1, COLS, ref);
    kern_q8_quantize_w(x, COLS, w);
    const kern_q8_block *rb = (const kern_q8_block *)ref;
    ck_assert_int_eq(f16_to_f32(rb[2].d) > 1e30f || isinf(f16_to_f32(rb[2].d)), 1); /* 3e38/127 overflows half */
    for (int v = 0; v < N_SIMD; v++) {
        const kern_ops *ops = kern_get(simd_names[v]);
        if (!ops) continue;
        ops->q8_quantize_x(x, 1, COLS, got);
        /* block 2 holds only finite values (huge ones): bit-exact there */
        ck_assert(memcmp(ref + 2 * 34, got + 2 * 34, 34) == 0);
        float y[1];
        ops->q8_matmul(w, COLS, got, 1, y, 1, 0, 1); /* garbage in, but no crash */
    }
}
END_TEST

/* "avx512vnni" promises llama.cpp's AVX2 float order: bit-identical to "avx2". */
START_TEST(test_q8_avx512_same_bits_as_avx2)
{
    const kern_ops *a = kern_get("avx2"), *b = kern_get("avx512vnni");
    if (!a || !b) return; /* nothing to compare on this CPU */
    static const int64_t cols_list[] = { 32, 172, 2048 }, rows_list[] = { 1, 7, 64 };
    static const int64_t tok_list[] = { 1, 2, 5, 17, 45 };
    for (int c = 0; c < 3; c++)
        for (int r = 0; r < 3; r++)
            for (int t = 0; t < 5; t++) {
                int64_t cols = cols_list[c], rows = rows_list[r], n_tok = tok_list[t];
                size_t rb = kern_q8_row_bytes(cols);
                float *wf = malloc(rows * cols * 4), *xf = malloc(n_tok * cols * 4);
                fill(wf, rows * cols, 1.0f);
                fill(xf, n_tok * cols, 3.0f);
                unsigned char *w = malloc(rows * rb), *x = malloc(n_tok * rb);
                for (int64_t i = 0; i < rows; i++) kern_q8_quantize_w(wf + i * cols, cols, w + i * rb);
                a->q8_quantize_x(xf, n_tok, cols, x);
                float *ya = calloc(rows * n_tok, 4), *yb = calloc(rows * n_tok, 4);
                a->q8_matmul(w, cols, x, n_tok, ya, rows, 0, rows);
                b->q8_matmul(w, cols, x, n_tok, yb, rows, 0, rows);
                ck_assert_msg(memcmp(ya, yb, rows * n_tok * 4) == 0, "%ld x %ld, %ld tokens: avx512vnni != avx2",
                              (long)rows, (long)cols, (long)n_tok);
                free(wf); free(xf); free(w); free(x); free(ya); free(yb);
            }
}
END_TEST

/* Empty work (no tokens, an empty or reversed row range) writes nothing. */
START_TEST(test_q8_empty_work)
{
    enum { COLS = 64, ROWS = 8 };
    float wf[ROWS * COLS];
    fill(wf, ROWS * COLS, 1.0f);
    unsigned char w[ROWS * 2 * 34], x[40 * 2 * 34];
    for (int r = 0; r < ROWS; r++) kern_q8_quantize_w(wf + r * COLS, COLS, w + r * 68);
    float xf[40 * COLS];
    fill(xf, 40 * COLS, 1.0f);
    kern_ops_scalar.q8_quantize_x(xf, 40, COLS, x);
    const char *names[] = { "scalar", "avx2", "avx512vnni", "avx512vnni-fast", "neon" };
    static const int64_t toks[] = { 0, 1, 4, 40 };
    for (int v = 0; v < 5; v++) {
        const kern_ops *ops = kern_get(names[v]);
        if (!ops) continue;
        for (int t = 0; t < 4; t++) {
            float y[40 * ROWS];
            for (int i = 0; i < 40 * ROWS; i++) y[i] = -777.0f;
            ops->q8_matmul(w, COLS, x, 0, y, ROWS, 0, ROWS);
            ops->q8_matmul(w, COLS, x, toks[t], y, ROWS, 3, 3);
            ops->q8_matmul(w, COLS, x, toks[t], y, ROWS, 6, 2);
            for (int i = 0; i < 40 * ROWS; i++) ck_assert_float_eq(y[i], -777.0f);
        }
    }
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
        for (int v = 0; v < N_SIMD; v++) {
            const kern_ops *ops = kern_get(simd_names[v]);
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
    for (int s = 0; s < N_SIMD; s++) {
        const kern_ops *ops = kern_get(simd_names[s]);
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
        uint16_t *wh = malloc(rows * cols * 2);
        fill(w, rows * cols, 1.0f);
        fill(x, n_tok * cols, 1.0f);
        for (int64_t i = 0; i < rows * cols; i++) wh[i] = f32_to_f16(w[i]);
        float ref[3 * 10], refh[3 * 10], got[3 * 10];
        kern_ops_scalar.f32_matmul(w, cols, x, n_tok, ref, ldy, 1, rows);
        kern_ops_scalar.f16_matmul(wh, cols, x, n_tok, refh, ldy, 1, rows);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 1; r < rows; r++) {
                double s = 0, m = 0;
                for (int64_t i = 0; i < cols; i++) { s += (double)w[r * cols + i] * x[t * cols + i]; m += fabs(w[r * cols + i] * x[t * cols + i]); }
                ck_assert(close_enough(ref[t * ldy + r], s, m));
            }
        for (int v = 0; v < N_SIMD; v++) {
            const kern_ops *ops = kern_get(simd_names[v]);
            if (!ops) continue;
            for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < 30; i++) got[i] = -777.0f;
                if (pass == 0) ops->f32_matmul(w, cols, x, n_tok, got, ldy, 1, rows);
                else ops->f16_matmul(wh, cols, x, n_tok, got, ldy, 1, rows);
                const float *want = pass == 0 ? ref : refh;
                for (int64_t t = 0; t < n_tok; t++) {
                    ck_assert_float_eq(got[t * ldy], -777.0f);
                    ck_assert_float_eq(got[t * ldy + rows], -777.0f);
                    for (int64_t r = 1; r < rows; r++) {
                        double m = 0;
                        for (int64_t i = 0; i < cols; i++) m += fabs(w[r * cols + i] * x[t * cols + i]) * 1.01;
                        ck_assert(close_enough(got[t * ldy + r], want[t * ldy + r], m));
                    }
                }
            }
        }
        free(w); free(x); free(wh);
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
    unsetenv("LLM_KERNELS");
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) ck_assert_ptr_nonnull(kern_get("avx2"));
    ck_assert_ptr_null(kern_get("neon"));
#endif
    /* the wrappers go through the active table */
    float a[40], b[40];
    fill(a, 40, 1.0f);
    fill(b, 40, 1.0f);
    ck_assert(close_enough(kern_f32_dot(a, b, 40), kern_ops_scalar.f32_dot(a, b, 40), 40.0));
}
END_TEST

Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("quantize");
    tcase_add_test(tc, test_quantize_w_definition);
    tcase_add_test(tc, test_quantize_x_exact);
    tcase_add_test(tc, test_q8_padding_is_zero);
    tcase_add_test(tc, test_quantize_hostile_values);
    suite_add_tcase(s, tc);
    tc = tcase_create("products");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_q8_matmul_shapes);
    tcase_add_test(tc, test_q8_matmul_blocking);
    tcase_add_test(tc, test_q8_empty_work);
    tcase_add_test(tc, test_q8_avx512_same_bits_as_avx2);
    tcase_add_test(tc, test_f_matmul);
    suite_add_tcase(s, tc);
    tc = tcase_create("float");
    tcase_add_test(tc, test_float_helpers);
    tcase_add_test(tc, test_f16_conversion_edges);
    tcase_add_test(tc, test_dispatch);
    suite_add_tcase(s, tc);
    return s;
}
