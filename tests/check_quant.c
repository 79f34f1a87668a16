/*
 * Tests for common/quant (suite "quant"): the traits table; bit-exact dequantization
 * against llama.cpp's reference tensors (through the SIMD twins and the scalar
 * reference); closeness of every tiny-llama2 file to its Q8_0 sibling and of the
 * F16 stories260K to its F32 original; requantizing llama-quantize's output gives
 * back its blocks; quantize -> dequantize round trips; SIMD twins against the
 * reference on random blocks and on 8 kinds of data; packed data at odd addresses;
 * hostile values; golden hashes of every quantizer's output.
 *
 * Error measure throughout: relative RMS, ||got - want||_2 / ||want||_2.
 * Bounds are derived from the bits per weight b: a uniform quantizer with step
 * D = 2 * absmax / 2^b has RMS error D / sqrt(12); for Gaussian blocks absmax is
 * about 2.5 sigma, so the relative error is about 1.44 / 2^b. We allow 2 / 2^b
 * (measured values are 0.75 to 0.85 of that), which still catches any decoding
 * mistake (a wrong nibble order or scale gives errors near 1.4).
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "f16.h"
#include "gguf.h"
#include "qtype.h"
#include "quant.h"

static const char *shared_dir(void)
{
    const char *s = getenv("LLM_SHARED");
    return s && *s ? s : "../shared";
}

static double rel_rms(const float *got, const float *want, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        e += d * d;
        s += (double)want[i] * (double)want[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static int64_t tensor_nelems(const gguf_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
    return n;
}

/* Effective bits per weight used by the bounds (the grid resolution, not the
 * storage cost): 0 for types that are not quantized. */
static int type_bits(uint32_t type)
{
    switch (type) {
    case QT_Q2_K: return 2;
    case QT_Q3_K: return 3;
    case QT_Q4_0: case QT_Q4_1: case QT_Q4_K: return 4;
    case QT_Q5_0: case QT_Q5_1: case QT_Q5_K: return 5;
    case QT_Q6_K: return 6;
    case QT_Q8_0: case QT_Q8_1: return 8;
    case QT_Q8_K: return 7; /* one absmax per 256 values: coarser than Q8_0 */
    case QT_F16: return 11;
    case QT_BF16: return 8;
    default: return 0;
    }
}

static double type_bound(uint32_t type)
{
    const int b = type_bits(type);
    return b ? 2.0 / (double)(1 << b) : 0.0;
}

/* Deterministic N(0, sigma) values (xorshift + Box-Muller). */
static void fill_gauss(float *x, int64_t n, float sigma, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            u[k] = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
        }
        x[i] = (float)(sigma * sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
    }
}

/* ---- traits table ------------------------------------------------------------------ */

START_TEST(test_traits_table)
{
    int valid = 0;
    for (uint32_t id = 0; id < QT_COUNT; id++) {
        const qt_traits *t = qt_get(id);
        if (!t) {
            ck_assert_str_eq(qt_name(id), "unknown");
            continue;
        }
        valid++;
        ck_assert_int_gt(t->block_size, 0);
        ck_assert_uint_gt(t->type_size, 0);
        ck_assert_int_eq(qt_from_name(t->name), (int)id);
        ck_assert_uint_eq(qt_row_size(id, 4 * t->block_size), 4 * t->type_size);
        if (t->quant) ck_assert_ptr_nonnull(t->dequant);
    }
    ck_assert_int_eq(valid, 32); /* 40 ids minus 4, 5, 31..33 and 36..38 */
    /* removed and out-of-range ids */
    const uint32_t bad[] = {4, 5, 31, 32, 33, 36, 37, 38, QT_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_ptr_null(qt_get(bad[i]));
        ck_assert_str_eq(qt_name(bad[i]), "unknown");
        ck_assert_uint_eq(qt_row_size(bad[i], 256), 0);
    }
}
END_TEST

START_TEST(test_traits_sizes_and_names)
{
    struct { uint32_t id; const char *name; int bs; size_t bytes; } want[] = {
        {QT_F32, "F32", 1, 4}, {QT_F16, "F16", 1, 2}, {QT_BF16, "BF16", 1, 2},
        {QT_Q4_0, "Q4_0", 32, 18}, {QT_Q4_1, "Q4_1", 32, 20}, {QT_Q5_0, "Q5_0", 32, 22},
        {QT_Q5_1, "Q5_1", 32, 24}, {QT_Q8_0, "Q8_0", 32, 34}, {QT_Q8_1, "Q8_1", 32, 36},
        {QT_Q2_K, "Q2_K", 256, 84}, {QT_Q3_K, "Q3_K", 256, 110}, {QT_Q4_K, "Q4_K", 256, 144},
        {QT_Q5_K, "Q5_K", 256, 176}, {QT_Q6_K, "Q6_K", 256, 210}, {QT_Q8_K, "Q8_K", 256, 292},
        {QT_IQ2_XXS, "IQ2_XXS", 256, 66}, {QT_IQ4_NL, "IQ4_NL", 32, 18},
        {QT_IQ4_XS, "IQ4_XS", 256, 136}, {QT_TQ1_0, "TQ1_0", 256, 54},
        {QT_TQ2_0, "TQ2_0", 256, 66}, {QT_MXFP4, "MXFP4", 32, 17}, {QT_I8, "I8", 1, 1},
        {QT_F64, "F64", 1, 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const qt_traits *t = qt_get(want[i].id);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(t->name, want[i].name);
        ck_assert_int_eq(t->block_size, want[i].bs);
        ck_assert_uint_eq(t->type_size, want[i].bytes);
    }
    /* every type the issue requires converts both ways (Q8_K and the rest too) */
    const uint32_t both[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1,
                             QT_Q8_0, QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_K};
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++) {
        ck_assert_ptr_nonnull(qt_get(both[i])->dequant);
        ck_assert_ptr_nonnull(qt_get(both[i])->quant);
    }
    /* types we cannot decode are known by name but have no converter */
    const uint32_t none[] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ3_XXS, QT_IQ1_S, QT_IQ4_NL, QT_IQ3_S,
                             QT_IQ2_S, QT_IQ4_XS, QT_IQ1_M, QT_TQ1_0, QT_TQ2_0, QT_MXFP4,
                             QT_I8, QT_I16, QT_I32, QT_I64, QT_F64};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        ck_assert_ptr_null(qt_get(none[i])->dequant);
        ck_assert_ptr_null(qt_get(none[i])->quant);
    }
    ck_assert_int_eq(qt_from_name("q4_k"), QT_Q4_K);
    ck_assert_int_eq(qt_from_name("bf16"), QT_BF16);
    ck_assert_int_eq(qt_from_name("Q4_K_M"), -1);
    ck_assert_int_eq(qt_from_name(""), -1);
    ck_assert_int_eq(qt_from_name(NULL), -1);
}
END_TEST

START_TEST(test_row_size)
{
    ck_assert_uint_eq(qt_row_size(QT_Q4_K, 4096), 16 * 144);
    ck_assert_uint_eq(qt_row_size(QT_Q8_0, 64), 68);
    ck_assert_uint_eq(qt_row_size(QT_F32, 172), 688);
    ck_assert_uint_eq(qt_row_size(QT_F16, 0), 0);
    ck_assert_uint_eq(qt_row_size(QT_Q4_K, 100), 0);   /* not a multiple of 256 */
    ck_assert_uint_eq(qt_row_size(QT_Q4_0, 172), 0);   /* stories260K's FFN width */
    ck_assert_uint_eq(qt_row_size(QT_F32, -32), 0);
    ck_assert_uint_eq(qt_row_size(QT_F64, INT64_MAX), 0); /* overflows size_t */
    ck_assert_uint_eq(qt_row_size(QT_F32, (INT64_MAX / 4) * 4), 0);
    ck_assert_uint_eq(qt_row_size(QT_Q8_K, (INT64_MAX / 256) * 256), (uint64_t)(INT64_MAX / 256) * 292);
}
END_TEST

/* ---- hand-made blocks ----------------------------------------------------------- */

START_TEST(test_known_blocks)
{
    float y[QK_K];
    const uint16_t bf[3] = {0x3f80, 0xc040, 0x0000}; /* 1, -3, 0 */
    qt_get(QT_BF16)->dequant(bf, y, 3);
    ck_assert(y[0] == 1.0f && y[1] == -3.0f && y[2] == 0.0f);

    block_q8_K k8;
    memset(&k8, 0, sizeof k8);
    k8.d = 0.5f;
    for (int j = 0; j < QK_K; j++) k8.qs[j] = (int8_t)(j - 128);
    qt_get(QT_Q8_K)->dequant(&k8, y, QK_K);
    for (int j = 0; j < QK_K; j++) ck_assert(y[j] == 0.5f * (float)(j - 128));

    /* Q4_0: low nibbles are values 0..15, high nibbles 16..31, offset 8 */
    block_q4_0 b4;
    b4.d = f32_to_f16(0.25f);
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)(j | (15 - j) << 4);
    qt_get(QT_Q4_0)->dequant(&b4, y, 32);
    for (int j = 0; j < 16; j++) {
        ck_assert(y[j] == 0.25f * (float)(j - 8));
        ck_assert(y[j + 16] == 0.25f * (float)(7 - j));
    }

    /* Q5_0: bit j of qh is the 5th bit of value j */
    block_q5_0 b5;
    b5.d = f32_to_f16(1.0f);
    memset(b5.qs, 0, sizeof b5.qs);
    const uint32_t qh = 0x80000001u; /* values 0 and 31 get 16 */
    memcpy(b5.qh, &qh, 4);
    qt_get(QT_Q5_0)->dequant(&b5, y, 32);
    ck_assert(y[0] == 0.0f && y[31] == 0.0f && y[1] == -16.0f && y[30] == -16.0f);
}
END_TEST

/* ---- (1) reference tensors, bit for bit ------------------------------------------ */

/* Dequantizes the first n values of tensor `name` of model `stem` and compares them
 * bitwise with the reference file; returns the tensor's type. */
static uint32_t check_reference_file(const char *dir, const char *fname)
{
    char stem[256], tname[256], path[2048], err[256];
    const char *dot = strchr(fname, '.');
    ck_assert_ptr_nonnull(dot);
    snprintf(stem, sizeof stem, "%.*s", (int)(dot - fname), fname);
    snprintf(tname, sizeof tname, "%.*s", (int)(strlen(dot + 1) - 4), dot + 1);

    snprintf(path, sizeof path, "%s/%s", dir, fname);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const int64_t n = ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    ck_assert(fread(want, 4, (size_t)n, f) == (size_t)n);
    fclose(f);

    snprintf(path, sizeof path, "%s/models/%s.gguf", shared_dir(), stem);
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", path, err);
    const gguf_tensor *t = gguf_find_tensor(g, tname);
    ck_assert_msg(t != NULL, "%s has no tensor %s", path, tname);
    ck_assert_int_le(n, tensor_nelems(t));
    ck_assert_int_eq(n % t->ne[0], 0);
    const qt_traits *tr = qt_get(t->type);
    ck_assert_msg(tr && tr->dequant, "%s: cannot dequantize %s", fname, qt_name(t->type));
    tr->dequant(t->data, got, n);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0 && bad++ == 0) first = i;
    ck_assert_msg(bad == 0, "%s (%s): %lld of %lld values differ, first at %lld: %.9g vs %.9g",
                  fname, qt_name(t->type), (long long)bad, (long long)n, (long long)first,
                  first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0);
    const uint32_t type = t->type;
    gguf_close(g);
    free(want);
    free(got);
    return type;
}

START_TEST(test_reference_dequant_exact)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/reference/dequant", shared_dir());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int seen[QT_COUNT] = {0}, files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".f32") != 0) continue;
        /* the SIMD twins (where this CPU has them), then the scalar reference */
        quant_set_simd(true);
        seen[check_reference_file(dir, e->d_name)]++;
        quant_set_simd(false);
        check_reference_file(dir, e->d_name);
        files++;
    }
    quant_set_simd(true);
    closedir(d);
    ck_assert_int_ge(files, 44);
    /* every type FORMAT.md says the files cover */
    const uint32_t need[] = {QT_Q2_K, QT_Q3_K, QT_Q4_0, QT_Q4_1, QT_Q4_K, QT_Q5_0,
                             QT_Q5_1, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_F16};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        ck_assert_msg(seen[need[i]] > 0, "no reference tensor of type %s", qt_name(need[i]));
}
END_TEST

/* ---- (2) every tiny-llama2 file against the Q8_0 one ------------------------------ */

/* Compares every tensor of one file with the same tensor of the Q8_0 file: F32
 * tensors must be identical, quantized ones within the type's bound (the Q8_0
 * file's own error, ~0.005, is inside that margin). */
static void check_against_q8(gguf_ctx *ref, const char *path)
{
    char err[256];
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", path, err);
    ck_assert_int_eq(gguf_n_tensors(g), gguf_n_tensors(ref));
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const gguf_tensor *r = gguf_find_tensor(ref, t->name);
        ck_assert_msg(r != NULL, "%s: %s missing from the Q8_0 file", path, t->name);
        const int64_t n = tensor_nelems(t);
        ck_assert_int_eq(n, tensor_nelems(r));
        const qt_traits *tt = qt_get(t->type), *rt = qt_get(r->type);
        ck_assert_msg(tt && tt->dequant, "%s: %s has type %s", path, t->name, qt_name(t->type));
        /* a few rows at a time: small buffers, no page-fault storm */
        const int64_t ne0 = t->ne[0], rows = n / ne0, chunk = 16384 / ne0 + 1;
        const size_t trow = qt_row_size(t->type, ne0), rrow = qt_row_size(r->type, ne0);
        float *a = malloc((size_t)(chunk * ne0) * 4), *b = malloc((size_t)(chunk * ne0) * 4);
        double err2 = 0, ref2 = 0;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t m = (rows - r0 < chunk ? rows - r0 : chunk) * ne0;
            tt->dequant((const uint8_t *)t->data + r0 * trow, a, m);
            rt->dequant((const uint8_t *)r->data + r0 * rrow, b, m);
            for (int64_t k = 0; k < m; k++) {
                err2 += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
                ref2 += (double)b[k] * b[k];
            }
        }
        const double e = sqrt(err2 / ref2);
        if (t->type == QT_F32 && r->type == QT_F32)
            ck_assert_msg(err2 == 0, "%s: F32 tensor %s differs", path, t->name);
        else
            ck_assert_msg(e <= type_bound(t->type), "%s: %s (%s) rel RMS %.4f > %.4f", path,
                          t->name, qt_name(t->type), e, type_bound(t->type));
        free(a);
        free(b);
    }
    gguf_close(g);
}

START_TEST(test_tiny_llama2_close_to_q8)
{
    char dir[1024], path[2048], err[256];
    snprintf(dir, sizeof dir, "%s/models", shared_dir());
    snprintf(path, sizeof path, "%s/tiny-llama2-Q8_0.gguf", dir);
    gguf_ctx *ref = gguf_open(path, err, sizeof err);
    ck_assert_msg(ref != NULL, "%s: %s", path, err);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "tiny-llama2-", 12) != 0 || len < 6 ||
            strcmp(e->d_name + len - 5, ".gguf") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        check_against_q8(ref, path);
        files++;
    }
    closedir(d);
    gguf_close(ref);
    ck_assert_int_ge(files, 10);
}
END_TEST

/* The F16 copy of stories260K against its F32 original: every tensor within half
 * an f16 ulp (2^-11 relative), F32 norms identical. */
START_TEST(test_stories_f16_close_to_f32)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K-f32.gguf", shared_dir());
    gguf_ctx *ref = gguf_open(path, err, sizeof err);
    ck_assert_msg(ref != NULL, "%s: %s", path, err);
    snprintf(path, sizeof path, "%s/models/stories260K-f16.gguf", shared_dir());
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", path, err);
    int f16_tensors = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i), *r = gguf_find_tensor(ref, t->name);
        ck_assert_ptr_nonnull(r);
        ck_assert_int_eq(r->type, QT_F32);
        const int64_t n = tensor_nelems(t);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        qt_get(t->type)->dequant(t->data, a, n);
        qt_get(r->type)->dequant(r->data, b, n);
        int64_t bad = -1;
        for (int64_t k = 0; k < n && bad < 0; k++) {
            const float tol = t->type == QT_F32 ? 0.0f : fmaxf(fabsf(b[k]) * 0x1p-11f, 0x1p-25f);
            if (!(fabsf(a[k] - b[k]) <= tol)) bad = k;
        }
        ck_assert_msg(bad < 0, "%s[%lld]: %g vs %g", t->name, (long long)bad, a[bad < 0 ? 0 : bad],
                      b[bad < 0 ? 0 : bad]);
        f16_tensors += t->type == QT_F16;
        free(a);
        free(b);
    }
    ck_assert_int_gt(f16_tensors, 0);
    gguf_close(g);
    gguf_close(ref);
}
END_TEST

/* Every tensor of every shared model has a dequantizer and decodes to finite
 * values of a plausible magnitude (the weights are N(0, 0.02)-like or norms ~1). */
START_TEST(test_every_model_dequantizes)
{
    char dir[1024], path[2048], err[256];
    snprintf(dir, sizeof dir, "%s/models", shared_dir());
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_ctx *g = gguf_open(path, err, sizeof err);
        ck_assert_msg(g != NULL, "%s: %s", path, err);
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            const qt_traits *tr = qt_get(t->type);
            ck_assert_msg(tr && tr->dequant, "%s: %s has type %s", e->d_name, t->name, qt_name(t->type));
            const int64_t rows = tensor_nelems(t) / t->ne[0];
            const int64_t n = t->ne[0] * (rows < 64 ? rows : 64);
            float *y = malloc((size_t)n * 4);
            tr->dequant(t->data, y, n);
            int64_t bad = -1;
            for (int64_t k = 0; k < n && bad < 0; k++)
                if (!(isfinite(y[k]) && fabsf(y[k]) < 100.0f)) bad = k;
            ck_assert_msg(bad < 0, "%s: %s[%lld] = %g", e->d_name, t->name, (long long)bad,
                          y[bad < 0 ? 0 : bad]);
            free(y);
        }
        gguf_close(g);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 14);
}
END_TEST

/* Requantizing llama-quantize's own output must give back its bytes when our
 * quantizer follows ggml's reference algorithm: exactly for the 32-value types,
 * and for most blocks of the K types (their searches are not idempotent on a
 * grid, so a few blocks settle elsewhere; measured: Q2_K 98.7%, Q3_K 53%, Q4_K
 * 99.96%, Q5_K 92%, Q6_K 81%). */
START_TEST(test_requant_matches_llama_quantize)
{
    static const struct { const char *file; uint32_t type; double min_same; } cases[] = {
        {"Q4_0", QT_Q4_0, 1.0}, {"Q4_1", QT_Q4_1, 1.0}, {"Q5_0", QT_Q5_0, 1.0},
        {"Q5_1", QT_Q5_1, 1.0}, {"Q8_0", QT_Q8_0, 1.0}, {"Q2_K", QT_Q2_K, 0.95},
        {"Q3_K_M", QT_Q3_K, 0.45}, {"Q4_K_M", QT_Q4_K, 0.99}, {"Q5_K_M", QT_Q5_K, 0.85},
        {"Q6_K", QT_Q6_K, 0.75},
    };
    char path[1024], err[256];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(path, sizeof path, "%s/models/tiny-llama2-%s.gguf", shared_dir(), cases[c].file);
        gguf_ctx *g = gguf_open(path, err, sizeof err);
        ck_assert_msg(g != NULL, "%s: %s", path, err);
        const qt_traits *tr = qt_get(cases[c].type);
        int64_t same = 0, total = 0;
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            if (t->type != cases[c].type) continue;
            const int64_t n = tensor_nelems(t) < 262144 ? tensor_nelems(t) : 262144;
            const size_t bytes = qt_row_size(t->type, n);
            float *x = malloc((size_t)n * 4);
            uint8_t *q = malloc(bytes);
            tr->dequant(t->data, x, n);
            tr->quant(x, q, n);
            for (size_t k = 0; k < bytes; k += tr->type_size, total++)
                same += memcmp(q + k, (const uint8_t *)t->data + k, tr->type_size) == 0;
            free(x);
            free(q);
        }
        gguf_close(g);
        ck_assert_int_gt(total, 0);
        ck_assert_msg((double)same >= cases[c].min_same * (double)total,
                      "%s: only %lld of %lld blocks reproduced", cases[c].file,
                      (long long)same, (long long)total);
    }
}
END_TEST

/* ---- (3) round trips ------------------------------------------------------------- */

static const uint32_t convertible[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0,
                                       QT_Q5_1, QT_Q8_0, QT_Q8_1, QT_Q2_K, QT_Q3_K, QT_Q4_K,
                                       QT_Q5_K, QT_Q6_K, QT_Q8_K};
#define N_CONVERTIBLE (int)(sizeof convertible / sizeof convertible[0])

/* Quantizes x, dequantizes into y; returns the relative RMS error. */
static double round_trip(uint32_t type, const float *x, float *y, int64_t n)
{
    const qt_traits *t = qt_get(type);
    void *q = malloc(qt_row_size(type, n) + 1);
    t->quant(x, q, n);
    t->dequant(q, y, n);
    free(q);
    return rel_rms(y, x, n);
}

START_TEST(test_round_trip_gaussian)
{
    const uint32_t type = convertible[_i];
    const int64_t sizes[] = {256, 768, 4096, 11008};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        fill_gauss(x, n, s % 2 ? 1.0f : 0.02f, 7 + s);
        const double e = round_trip(type, x, y, n);
        ck_assert_msg(e <= type_bound(type), "%s n=%lld: rel RMS %.5f > %.5f", qt_name(type),
                      (long long)n, e, type_bound(type));
        /* and not suspiciously perfect: the grid really has that resolution */
        if (type_bits(type) && type_bits(type) <= 8)
            ck_assert_msg(e > type_bound(type) / 20, "%s: error %.6f too small", qt_name(type), e);
        free(x);
        free(y);
    }
}
END_TEST

/* Zeros stay zeros, a constant stays close, and exact grid values survive. */
START_TEST(test_round_trip_special)
{
    const uint32_t type = convertible[_i];
    const int64_t n = 512;
    float x[512], y[512];
    memset(x, 0, sizeof x);
    round_trip(type, x, y, n);
    int nonzero = 0;
    for (int i = 0; i < n; i++) nonzero += y[i] != 0.0f;
    ck_assert_msg(nonzero == 0, "%s: %d zeros came back non-zero", qt_name(type), nonzero);
    for (int i = 0; i < n; i++) x[i] = 0.75f;
    const double e = round_trip(type, x, y, n);
    ck_assert_msg(e <= 0.01, "%s: constant rel err %.5f", qt_name(type), e);
    /* a block with one large outlier: the others must not blow up */
    fill_gauss(x, n, 0.01f, 99);
    x[5] = 4.0f;
    round_trip(type, x, y, n);
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
        if (!(isfinite(y[i]) && fabsf(y[i] - x[i]) <= 0.5f)) bad = i;
    ck_assert_msg(bad < 0, "%s: outlier block value %d off", qt_name(type), bad);
}
END_TEST

/* NaN, infinities and huge or tiny magnitudes must not crash a quantizer or make
 * a dequantizer read or write out of bounds (values are then unspecified), and
 * every dequantizer accepts arbitrary bytes. */
START_TEST(test_hostile_values)
{
    const uint32_t type = convertible[_i];
    const qt_traits *t = qt_get(type);
    const int64_t n = 1024;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    const float specials[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-40f, 1e20f};
    for (size_t s = 0; s < sizeof specials / sizeof specials[0]; s++) {
        fill_gauss(x, n, 1.0f, s);
        for (int64_t i = (int64_t)s; i < n; i += 7) x[i] = specials[s];
        round_trip(type, x, y, n);
        for (int64_t i = 0; i < n; i++) x[i] = specials[s];
        round_trip(type, x, y, n);
    }
    const size_t bytes = qt_row_size(type, n);
    uint8_t *raw = malloc(bytes);
    uint64_t r = 12345 + type;
    for (size_t i = 0; i < bytes; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        raw[i] = (uint8_t)(r >> 56);
    }
    t->dequant(raw, y, n);
    free(raw);
    free(x);
    free(y);
}
END_TEST

/* The plain types convert exactly where the format can hold the value. */
START_TEST(test_plain_types_exact)
{
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i - 128) * 0.125f; /* exact in f16 and bf16 */
    for (int k = 0; k < 3; k++) {
        const uint32_t type = k == 0 ? QT_F32 : k == 1 ? QT_F16 : QT_BF16;
        round_trip(type, x, y, 256);
        ck_assert_int_eq(memcmp(x, y, sizeof x), 0);
    }
    /* Q8_0 reproduces values already on its grid */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.5f;
    x[0] = -63.5f; /* absmax 127 * 0.5 */
    round_trip(QT_Q8_0, x, y, 32);
    ck_assert_int_eq(memcmp(x, y, 32 * sizeof(float)), 0);
}
END_TEST

/* The F16 converter (F16C where the CPU has it) equals the scalar reference
 * f16_to_f32 bit for bit on every one of the 65536 halves, at any length. */
START_TEST(test_f16_all_values)
{
    uint16_t *h = malloc(65536 * sizeof *h);
    float *y = malloc(65536 * sizeof *y);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    const int64_t lens[] = {65536, 65535, 13, 1};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const int64_t off = 65536 - lens[k];
        qt_get(QT_F16)->dequant(h + off, y, lens[k]);
        int64_t bad = -1;
        for (int64_t i = 0; i < lens[k] && bad < 0; i++) {
            const float want = f16_to_f32(h[off + i]);
            if (memcmp(&y[i], &want, 4) != 0) bad = i;
        }
        ck_assert_msg(bad < 0, "half 0x%04x converts differently", bad < 0 ? 0 : h[off + bad]);
    }
    free(h);
    free(y);
}
END_TEST

/* Every SIMD twin gives the scalar reference's bits on arbitrary block bytes
 * (any NaN equals any NaN: only payload choice may differ there). */
START_TEST(test_simd_twins_match_scalar)
{
    const uint32_t type = convertible[_i];
    const qt_traits *t = qt_get(type);
    const int64_t n = 8192;
    const size_t bytes = qt_row_size(type, n);
    uint8_t *raw = malloc(bytes);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    uint64_t r = 777 + type;
    for (size_t i = 0; i < bytes; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        raw[i] = (uint8_t)(r >> 56);
    }
    quant_set_simd(true);
    t->dequant(raw, a, n);
    quant_set_simd(false);
    t->dequant(raw, b, n);
    quant_set_simd(true);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) bad = i;
    ck_assert_msg(bad < 0, "%s value %lld: simd %.9g scalar %.9g", t->name, (long long)bad,
                  a[bad < 0 ? 0 : bad], b[bad < 0 ? 0 : bad]);
    free(raw);
    free(a);
    free(b);
}
END_TEST

/* Fills x (n values) with data of kind k: shapes that exercise every branch of the
 * quantizers' searches (flat sub-blocks, all-positive blocks, zeros, outliers,
 * tiny and huge scales, NaN and infinities). */
static void fill_kind(float *x, int64_t n, int k, uint64_t seed)
{
    fill_gauss(x, n, 0.02f, seed);
    for (int64_t i = 0; i < n; i++) {
        switch (k) {
        case 0: break;
        case 1: if ((i / 16) % 3 == 0) x[i] = 0.5f; break;                 /* flat sub-blocks */
        case 2: x[i] = fabsf(x[i]) + 0.01f; break;                          /* min > 0 */
        case 3: if (i % 5) x[i] = 0.0f; break;                              /* sparse */
        case 4: if (i % 97 == 0) x[i] *= 300.0f; break;                     /* outliers */
        case 5: x[i] *= (i / 256) % 2 ? 1e-30f : 1e25f; break;              /* extreme scales */
        case 6: x[i] = (float)((int)(x[i] * 400.0f)) / 64.0f; break;        /* coarse grid, ties */
        case 7: if (i % 61 == 0) x[i] = i % 2 ? NAN : INFINITY; break;      /* non-finite */
        default: break;
        }
    }
}

/* The vectorised quantizers give the reference's bytes on every kind of data. */
START_TEST(test_quant_twins_match_reference)
{
    static const uint32_t ktypes[] = {QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_K,
                                       QT_Q4_0, QT_Q8_0};
    const int kind = _i;
    const int64_t n = 4096;
    float *x = malloc(n * 4);
    uint8_t *a = malloc(n * 4), *b = malloc(n * 4);
    fill_kind(x, n, kind, 1000 + (uint64_t)kind);
    for (size_t t = 0; t < sizeof ktypes / sizeof ktypes[0]; t++) {
        const qt_traits *tr = qt_get(ktypes[t]);
        const size_t bytes = qt_row_size(ktypes[t], n);
        quant_set_simd(true);
        tr->quant(x, a, n);
        quant_set_simd(false);
        tr->quant(x, b, n);
        quant_set_simd(true);
        for (size_t k = 0; k < bytes; k += tr->type_size)
            ck_assert_msg(memcmp(a + k, b + k, tr->type_size) == 0, "%s data kind %d: block %zu differs",
                          tr->name, kind, k / tr->type_size);
    }
    free(x);
    free(a);
    free(b);
}
END_TEST

/* Q8_0 rounds half away from zero (roundf), exactly at the edges, in both the
 * reference and the vector quantizer. */
START_TEST(test_q8_0_rounding_edges)
{
    float x[32] = {127.0f, 0.49999997f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, -0.49999997f, 126.5f};
    const int8_t want[9] = {127, 0, 1, -1, 2, 3, -3, 0, 127};
    for (int simd = 1; simd >= 0; simd--) {
        block_q8_0 b;
        quant_set_simd(simd);
        qt_get(QT_Q8_0)->quant(x, &b, 32);
        ck_assert(f16_to_f32(b.d) == 1.0f);
        for (int j = 0; j < 9; j++)
            ck_assert_msg(b.qs[j] == want[j], "simd %d: x=%.9g -> %d, want %d", simd, x[j], b.qs[j], want[j]);
    }
    quant_set_simd(true);
}
END_TEST

/* Packed data at an odd address (a GGUF with alignment 1) converts exactly like
 * aligned data, both ways, with no misaligned access (UBSan checks that). */
START_TEST(test_misaligned_packed_data)
{
    const uint32_t type = convertible[_i];
    const qt_traits *t = qt_get(type);
    const int64_t n = 8192; /* more than one bounce-buffer chunk for every type */
    const size_t bytes = qt_row_size(type, n);
    float *x = malloc(n * 4), *ya = malloc(n * 4), *yb = malloc(n * 4);
    uint8_t *qa = malloc(bytes), *qb = malloc(bytes + 3);
    fill_gauss(x, n, 0.02f, 5);
    t->quant(x, qa, n);
    t->quant(x, qb + 1, n);
    ck_assert_msg(memcmp(qa, qb + 1, bytes) == 0, "%s: misaligned quantize differs", t->name);
    t->dequant(qa, ya, n);
    t->dequant(qb + 1, yb, n);
    ck_assert_msg(memcmp(ya, yb, (size_t)n * 4) == 0, "%s: misaligned dequantize differs", t->name);
    memmove(qb + 3, qb + 1, bytes);
    t->dequant(qb + 3, yb, n);
    ck_assert_msg(memcmp(ya, yb, (size_t)n * 4) == 0, "%s: offset-3 dequantize differs", t->name);
    free(x);
    free(ya);
    free(yb);
    free(qa);
    free(qb);
}
END_TEST

/* The twins' table is chosen once from cpu_features(); LLM_QUANT names another
 * (common/cpu.h's convention), an unknown name keeps the automatic choice, and
 * quant_set_simd switches between the chosen table and the scalar one. */
START_TEST(test_dispatch_override)
{
    const char *env = getenv("LLM_QUANT");
    fprintf(stderr, "quant: twins %s (LLM_QUANT=%s)\n", quant_name(), env ? env : "");
    unsetenv("LLM_QUANT");
    quant_init();
    const char *best = quant_name();
#if defined(__x86_64__)
    const unsigned avx2 = CPU_AVX2 | CPU_F16C;
    ck_assert_str_eq(best, (cpu_features() & avx2) == avx2 ? "avx2" : cpu_features() & CPU_F16C ? "f16c" : "scalar");
#else
    ck_assert_str_eq(best, "scalar");
#endif
    setenv("LLM_QUANT", "scalar", 1);
    quant_init();
    ck_assert_str_eq(quant_name(), "scalar");
    quant_set_simd(true); /* "on" is the chosen table: scalar here */
    ck_assert_str_eq(quant_name(), "scalar");
    setenv("LLM_QUANT", "no-such-table", 1);
    quant_init();
    ck_assert_str_eq(quant_name(), best);
    quant_set_simd(false);
    ck_assert_str_eq(quant_name(), "scalar");
    quant_set_simd(true);
    ck_assert_str_eq(quant_name(), best);
    if (cpu_features() & CPU_F16C) {
        /* the middle table, and the same bits through it */
        setenv("LLM_QUANT", "f16c", 1);
        quant_init();
        ck_assert_str_eq(quant_name(), "f16c");
        uint16_t h[64];
        float a[64], b[64];
        for (int i = 0; i < 64; i++) h[i] = (uint16_t)(i * 1031 + 7);
        qt_get(QT_F16)->dequant(h, a, 64);
        quant_set_simd(false);
        qt_get(QT_F16)->dequant(h, b, 64);
        quant_set_simd(true);
        ck_assert(memcmp(a, b, sizeof a) == 0);
    }
    unsetenv("LLM_QUANT");
    quant_init();
}
END_TEST

/* A length that is not a multiple of the block size is a caller bug: abort. */
START_TEST(test_bad_length_aborts)
{
    float x[64] = {0};
    uint8_t q[64];
    if (!freopen("/dev/null", "w", stderr)) return; /* keep the expected message out of logs */
    qt_get(QT_Q4_0)->quant(x, q, 48);
}
END_TEST

/* Bell-shaped values (sum of 4 uniforms, spread ~0.02) from integer arithmetic and
 * exact float operations only, so they are the same on every machine and libm. */
static void fill_portable(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        float sum = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            sum += (float)(s >> 40) * 0x1p-24f;
        }
        x[i] = (sum - 2.0f) * 0.035f;
    }
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Regression pins: hashes of each quantizer's output on fixed bell-shaped data,
 * taken from this implementation once requantization reproduced llama-quantize's
 * blocks (test above). Any change in a quantizer's choices changes its hash;
 * update the table only for a deliberate, verified change. */
START_TEST(test_quant_golden_hashes)
{
    static const struct { uint32_t type; uint64_t hash; } pins[] = {
        {QT_F16, 0xf33d339ad82a3260ull}, {QT_BF16, 0xca16f000818a2af8ull},
        {QT_Q4_0, 0xd6f604d043580171ull}, {QT_Q4_1, 0xa4f7cf7ec382f949ull},
        {QT_Q5_0, 0x1b7d461c129da299ull}, {QT_Q5_1, 0x7477d6037de1053dull},
        {QT_Q8_0, 0x3a0737cad7304669ull}, {QT_Q8_1, 0x9b385d2f0933bd8dull},
        {QT_Q2_K, 0x1c971630df141d09ull}, {QT_Q3_K, 0x8c2353cc005c2484ull},
        {QT_Q4_K, 0xa490d87f939913acull}, {QT_Q5_K, 0xa61e4d36bfbd9c8aull},
        {QT_Q6_K, 0xc464cab5449390a3ull}, {QT_Q8_K, 0xd237a4fa8738307cull},
    };
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x);
    uint8_t *q = malloc(N * 4);
    fill_portable(x, N, 42);
    char report[2048] = "";
    size_t used = 0;
    for (int simd = 1; simd >= 0; simd--) {
        quant_set_simd(simd);
        for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
            const size_t bytes = qt_row_size(pins[i].type, N);
            qt_get(pins[i].type)->quant(x, q, N);
            const uint64_t h = fnv1a(q, bytes);
            if (h != pins[i].hash && used < sizeof report - 64)
                used += (size_t)snprintf(report + used, sizeof report - used, " %s{QT_%s, 0x%016llxull},",
                                         simd ? "" : "scalar:", qt_name(pins[i].type), (unsigned long long)h);
        }
    }
    quant_set_simd(true);
    free(x);
    free(q);
    ck_assert_msg(used == 0, "quantizer output changed:%s", report);
}
END_TEST

Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("traits");
    tcase_add_test(tc, test_traits_table);
    tcase_add_test(tc, test_traits_sizes_and_names);
    tcase_add_test(tc, test_row_size);
    tcase_add_test(tc, test_known_blocks);
    suite_add_tcase(s, tc);

    tc = tcase_create("models");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reference_dequant_exact);
    tcase_add_test(tc, test_tiny_llama2_close_to_q8);
    tcase_add_test(tc, test_requant_matches_llama_quantize);
    tcase_add_test(tc, test_stories_f16_close_to_f32);
    tcase_add_test(tc, test_every_model_dequantizes);
    suite_add_tcase(s, tc);

    tc = tcase_create("round_trip");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_round_trip_gaussian, 0, N_CONVERTIBLE);
    tcase_add_loop_test(tc, test_round_trip_special, 0, N_CONVERTIBLE);
    tcase_add_loop_test(tc, test_hostile_values, 0, N_CONVERTIBLE);
    tcase_add_test(tc, test_plain_types_exact);
    tcase_add_test(tc, test_q8_0_rounding_edges);
    tcase_add_test(tc, test_dispatch_override);
    tcase_add_test(tc, test_f16_all_values);
    tcase_add_loop_test(tc, test_simd_twins_match_scalar, 0, N_CONVERTIBLE);
    tcase_add_loop_test(tc, test_quant_twins_match_reference, 0, 8);
    tcase_add_loop_test(tc, test_misaligned_packed_data, 0, N_CONVERTIBLE);
    tcase_add_test(tc, test_quant_golden_hashes);
    tcase_add_test_raise_signal(tc, test_bad_length_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
