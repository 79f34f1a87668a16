/*
 * Tests for common/gguf (suite "gguf"): every shared model parses with the facts of
 * models/README.md; corrupted variants of real files are refused with an error that
 * names the field; the writer round-trips every value type, nested arrays and
 * tensors, and rewrites every model byte for byte.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"

static const char *shared_dir(void)
{
    const char *s = getenv("LLM_SHARED");
    return s && *s ? s : "../shared";
}

static void model_path(char *out, size_t n, const char *file)
{
    snprintf(out, n, "%s/models/%s", shared_dir(), file);
}

/* Reads a whole file into an exactly-sized heap buffer (so ASan sees over-reads). */
static uint8_t *load(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* ---- facts of every model (models/README.md) ---- */

typedef struct {
    const char *file, *arch;
    int layers, heads, heads_kv, embd, ff, vocab;
    double rope_base, rms_eps;
    int counts[QT_COUNT]; /* tensors per type */
} model_facts;

#define L2(file, ...) {file, "llama", 4, 4, 2, 256, 768, 32000, 10000, 1e-5, {__VA_ARGS__}}
static const model_facts facts[] = {
    L2("tiny-llama2-Q8_0.gguf", [QT_Q8_0] = 29, [QT_F32] = 9),
    L2("tiny-llama2-Q6_K.gguf", [QT_Q6_K] = 29, [QT_F32] = 9),
    L2("tiny-llama2-Q5_K_M.gguf", [QT_Q5_K] = 24, [QT_Q6_K] = 5, [QT_F32] = 9),
    L2("tiny-llama2-Q5_1.gguf", [QT_Q5_1] = 28, [QT_Q6_K] = 1, [QT_F32] = 9),
    L2("tiny-llama2-Q5_0.gguf", [QT_Q5_0] = 28, [QT_Q6_K] = 1, [QT_F32] = 9),
    L2("tiny-llama2-Q4_K_M.gguf", [QT_Q4_K] = 24, [QT_Q6_K] = 5, [QT_F32] = 9),
    L2("tiny-llama2-Q4_1.gguf", [QT_Q4_1] = 28, [QT_Q6_K] = 1, [QT_F32] = 9),
    L2("tiny-llama2-Q4_0.gguf", [QT_Q4_0] = 28, [QT_Q6_K] = 1, [QT_F32] = 9),
    L2("tiny-llama2-Q3_K_M.gguf", [QT_Q3_K] = 16, [QT_Q4_K] = 10, [QT_Q5_K] = 2, [QT_Q6_K] = 1,
       [QT_F32] = 9),
    L2("tiny-llama2-Q2_K.gguf", [QT_Q2_K] = 16, [QT_Q3_K] = 12, [QT_Q6_K] = 1, [QT_F32] = 9),
    {"tiny-llama3-Q8_0.gguf", "llama", 2, 2, 1, 64, 256, 128256, 500000, 1e-5, {[QT_Q8_0] = 15, [QT_F32] = 5}},
    {"tiny-qwen2-Q8_0.gguf", "qwen2", 2, 2, 1, 64, 256, 151669, 1000000, 1e-6, {[QT_Q8_0] = 15, [QT_F32] = 11}},
    {"stories260K-f32.gguf", "llama", 5, 8, 4, 64, 172, 512, 10000, 1e-5, {[QT_F32] = 48}},
    {"stories260K-f16.gguf", "llama", 5, 8, 4, 64, 172, 512, 10000, 1e-5, {[QT_F16] = 37, [QT_F32] = 11}},
};

START_TEST(test_model_facts)
{
    const model_facts *m = &facts[_i];
    char path[1024], err[512], key[128];
    model_path(path, sizeof path, m->file);
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", m->file, err);
    ck_assert_uint_eq(gguf_version(g), 3);
    ck_assert_uint_eq(gguf_alignment(g), 32);
    ck_assert_str_eq(gguf_get_str(g, "general.architecture", "?"), m->arch);
#define ARCH_INT(suffix) (snprintf(key, sizeof key, "%s." suffix, m->arch), gguf_get_int(g, key, -1))
    ck_assert_int_eq(ARCH_INT("block_count"), m->layers);
    ck_assert_int_eq(ARCH_INT("attention.head_count"), m->heads);
    ck_assert_int_eq(ARCH_INT("attention.head_count_kv"), m->heads_kv);
    ck_assert_int_eq(ARCH_INT("embedding_length"), m->embd);
    ck_assert_int_eq(ARCH_INT("feed_forward_length"), m->ff);
    snprintf(key, sizeof key, "%s.rope.freq_base", m->arch);
    ck_assert_double_eq(gguf_get_float(g, key, 10000.0), m->rope_base); /* absent = default */
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch);
    ck_assert_float_eq((float)gguf_get_float(g, key, -1), (float)m->rms_eps);
    int64_t tok = gguf_find_key(g, "tokenizer.ggml.tokens");
    ck_assert_int_ge(tok, 0);
    ck_assert_int_eq(gguf_arr_type(g, tok), GGUF_T_STRING);
    ck_assert_int_eq(gguf_arr_n(g, tok), m->vocab);
    int counts[QT_COUNT] = {0};
    size_t len;
    gguf_buffer(g, &len);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_uint_lt(t->type, QT_COUNT);
        counts[t->type]++;
        ck_assert_ptr_eq(gguf_find_tensor(g, t->name), t);
        ck_assert_uint_le(gguf_data_offset(g) + t->offset + t->nbytes, len);
    }
    for (int t = 0; t < QT_COUNT; t++)
        ck_assert_msg(counts[t] == m->counts[t], "%s: %d tensors of type %s, expected %d",
                      m->file, counts[t], qt_name((uint32_t)t), m->counts[t]);
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(emb);
    ck_assert_int_eq(emb->ne[0], m->embd);
    ck_assert_int_eq(emb->ne[1], m->vocab);
    ck_assert_ptr_null(gguf_find_tensor(g, "no.such.tensor"));
    gguf_close(g);
}
END_TEST

/* The reference vocab files hold metadata only: zero tensors, no data padding. */
START_TEST(test_vocab_files)
{
    static const struct { const char *file; int64_t n; } v[] = {
        {"ggml-vocab-llama-spm.gguf", 32000}, {"ggml-vocab-llama-bpe.gguf", 128256},
        {"ggml-vocab-qwen2.gguf", 151669}, {"ggml-vocab-gpt-2.gguf", 50257},
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        char path[1024], err[512];
        snprintf(path, sizeof path, "%s/reference/tokenizer/%s", shared_dir(), v[k].file);
        gguf_ctx *g = gguf_open(path, err, sizeof err);
        ck_assert_msg(g != NULL, "%s", err);
        ck_assert_int_eq(gguf_n_tensors(g), 0);
        int64_t i = gguf_find_key(g, "tokenizer.ggml.tokens");
        ck_assert_int_ge(i, 0);
        ck_assert_int_eq(gguf_arr_n(g, i), v[k].n);
        gguf_str s = gguf_arr_str(g, i, 0);
        ck_assert_ptr_nonnull(s.ptr);
        gguf_close(g);
    }
}
END_TEST

/* ---- corrupted variants of a real file ---- */

/* Where each field of a real file sits, found by an independent walk. */
typedef struct {
    size_t kv_key[64], kv_type[64], kv_val[64];
    int    n_kv;
    size_t t_name[128], t_ndims[128], t_ne[128], t_type[128], t_off[128];
    int    n_t;
    size_t info_end;
} layout;

static uint64_t get64(const uint8_t *p, size_t at) { uint64_t v; memcpy(&v, p + at, 8); return v; }
static uint32_t get32(const uint8_t *p, size_t at) { uint32_t v; memcpy(&v, p + at, 4); return v; }
static void put64(uint8_t *p, size_t at, uint64_t v) { memcpy(p + at, &v, 8); }
static void put32(uint8_t *p, size_t at, uint32_t v) { memcpy(p + at, &v, 4); }

static size_t skip_value(const uint8_t *p, size_t at, uint32_t type)
{
    static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == GGUF_T_STRING) return at + 8 + get64(p, at);
    if (type != GGUF_T_ARRAY) return at + sz[type];
    uint32_t et = get32(p, at);
    uint64_t n = get64(p, at + 4);
    at += 12;
    for (uint64_t i = 0; i < n; i++) at = skip_value(p, at, et);
    return at;
}

static void walk(const uint8_t *p, layout *L)
{
    memset(L, 0, sizeof *L);
    L->n_t = (int)get64(p, 8);
    L->n_kv = (int)get64(p, 16);
    ck_assert_int_le(L->n_kv, 64);
    ck_assert_int_le(L->n_t, 128);
    size_t at = 24;
    for (int i = 0; i < L->n_kv; i++) {
        L->kv_key[i] = at;
        at += 8 + get64(p, at);
        L->kv_type[i] = at;
        L->kv_val[i] = at + 4;
        at = skip_value(p, at + 4, get32(p, at));
    }
    for (int i = 0; i < L->n_t; i++) {
        L->t_name[i] = at;
        at += 8 + get64(p, at);
        L->t_ndims[i] = at;
        L->t_ne[i] = at + 4;
        at += 4 + 8 * get32(p, at);
        L->t_type[i] = at;
        L->t_off[i] = at + 4;
        at += 12;
    }
    L->info_end = at;
}

static int find_kv(const uint8_t *p, const layout *L, const char *key)
{
    for (int i = 0; i < L->n_kv; i++)
        if (get64(p, L->kv_key[i]) == strlen(key) &&
            memcmp(p + L->kv_key[i] + 8, key, strlen(key)) == 0)
            return i;
    ck_abort_msg("key %s not in the test file", key);
    return -1;
}

static int find_t(const uint8_t *p, const layout *L, const char *name)
{
    for (int i = 0; i < L->n_t; i++)
        if (get64(p, L->t_name[i]) == strlen(name) &&
            memcmp(p + L->t_name[i] + 8, name, strlen(name)) == 0)
            return i;
    ck_abort_msg("tensor %s not in the test file", name);
    return -1;
}

/* Parses a mutated copy (len bytes) and asserts failure with each expected word. */
static void expect_reject(const uint8_t *buf, size_t len, const char *what, const char *w1,
                          const char *w2)
{
    char err[512] = "";
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, buf, len);
    gguf_ctx *g = gguf_parse(copy, len, err, sizeof err);
    if (getenv("GGUF_TEST_VERBOSE")) fprintf(stderr, "%-28s %s\n", what, err);
    ck_assert_msg(g == NULL, "%s: accepted", what);
    ck_assert_msg(strstr(err, w1) != NULL, "%s: error \"%s\" lacks \"%s\"", what, err, w1);
    if (w2) ck_assert_msg(strstr(err, w2) != NULL, "%s: error \"%s\" lacks \"%s\"", what, err, w2);
    free(copy);
}

/* Applies one mutation to a fresh copy of the original and expects rejection. */
#define MUTATE(what, w1, w2, stmt)                         \
    do {                                                   \
        memcpy(b, orig, len);                              \
        stmt;                                              \
        expect_reject(b, len, what, w1, w2);               \
        n_variants++;                                      \
    } while (0)

START_TEST(test_corrupt_variants)
{
    char path[1024];
    size_t len;
    model_path(path, sizeof path, "stories260K-f16.gguf");
    uint8_t *orig = load(path, &len), *b = malloc(len);
    layout L;
    walk(orig, &L);
    int n_variants = 0;
    char err[512];
    gguf_ctx *ok = gguf_parse(orig, len, err, sizeof err);
    ck_assert_msg(ok != NULL, "%s", err);
    gguf_close(ok);

    int k_tokens = find_kv(orig, &L, "tokenizer.ggml.tokens");
    int k_model = find_kv(orig, &L, "tokenizer.ggml.model");
    int k_block = find_kv(orig, &L, "llama.block_count");
    int k_scores = find_kv(orig, &L, "tokenizer.ggml.scores");
    int t_q = find_t(orig, &L, "blk.0.attn_q.weight");
    int t_k = find_t(orig, &L, "blk.0.attn_k.weight");
    int t_out = find_t(orig, &L, "output.weight");

    MUTATE("wrong magic", "magic", "offset 0", b[0] = 'X');
    MUTATE("version 1", "version", "offset 4", put32(b, 4, 1));
    MUTATE("version 4", "version", "offset 4", put32(b, 4, 4));
    MUTATE("huge tensor count", "tensor count", "offset 8", put64(b, 8, UINT64_MAX / 3));
    MUTATE("huge kv count", "kv count", "offset 16", put64(b, 16, 1ull << 40));
    MUTATE("kv count past the kvs", "kv", "offset", put64(b, 16, get64(orig, 16) + 3));
    MUTATE("huge key length", "key length", "offset", put64(b, L.kv_key[1], 1ull << 62));
    MUTATE("key with NUL", "key", "NUL", b[L.kv_key[k_block] + 8 + 2] = 0);
    MUTATE("unknown value type", "value type", "unknown type id 77", put32(b, L.kv_type[k_block], 77));
    MUTATE("huge string length", "string value length", "tokenizer.ggml.model",
           put64(b, L.kv_val[k_model], UINT64_MAX - 5));
    MUTATE("bad array element type", "array element type", "unknown type id 13",
           put32(b, L.kv_val[k_tokens], 13));
    MUTATE("huge array count", "array count", "tokenizer.ggml.tokens",
           put64(b, L.kv_val[k_tokens] + 4, 1ull << 50));
    MUTATE("float array count past end", "array count", "tokenizer.ggml.scores",
           put64(b, L.kv_val[k_scores] + 4, len));
    MUTATE("huge string element", "array element 0 string length", "past the end",
           put64(b, L.kv_val[k_tokens] + 12, 1ull << 40));
    MUTATE("duplicate key", "duplicates kv", "offset",
           memcpy(b + L.kv_key[find_kv(orig, &L, "tokenizer.ggml.eos_token_id")] + 8,
                  "tokenizer.ggml.bos_token_id", 27));
    MUTATE("n_dims 5", "n_dims", "offset", put32(b, L.t_ndims[t_q], 5));
    MUTATE("n_dims 0", "n_dims", "offset", put32(b, L.t_ndims[t_q], 0));
    MUTATE("n_dims huge", "n_dims", "offset", put32(b, L.t_ndims[t_q], 0xffffffffu));
    MUTATE("zero dim", "ne[0]", "positive", put64(b, L.t_ne[t_q], 0));
    MUTATE("negative dim", "ne[1]", "positive", put64(b, L.t_ne[t_q] + 8, (uint64_t)-64));
    MUTATE("dims overflow", "ne[1]", "overflows", put64(b, L.t_ne[t_q], 1ull << 40);
           put64(b, L.t_ne[t_q] + 8, 1ull << 40));
    MUTATE("unknown type id", "type at offset", "unknown type id 99", put32(b, L.t_type[t_q], 99));
    MUTATE("removed type id", "type", "unknown type id 4", put32(b, L.t_type[t_q], 4));
    MUTATE("type id past the table", "type", "unknown type id", put32(b, L.t_type[t_q], 0x80000000u));
    MUTATE("row not a block multiple", "ne[0]", "block size", put32(b, L.t_type[t_q], QT_Q4_0);
           put64(b, L.t_ne[t_q], 48));
    MUTATE("size grows past data", "blk.0.attn_q.weight", "past the end",
           put64(b, L.t_ne[t_q] + 8, 1ull << 30));
    MUTATE("offset past end", "data at offset", "past the end", put64(b, L.t_off[t_q], 1ull << 40));
    MUTATE("offset near UINT64_MAX", "data at offset", "past the end",
           put64(b, L.t_off[t_q], UINT64_MAX - 31));
    MUTATE("misaligned offset", "data offset", "alignment", put64(b, L.t_off[t_q], get64(orig, L.t_off[t_q]) + 4));
    MUTATE("overlapping tensors", "overlaps", "offset",
           put64(b, L.t_off[t_k], get64(orig, L.t_off[t_q]) + 32));
    MUTATE("same offset twice", "overlaps", NULL, put64(b, L.t_off[t_out], get64(orig, L.t_off[t_q])));
    MUTATE("duplicate tensor name", "duplicates tensor", "offset",
           memcpy(b + L.t_name[t_k] + 8, "blk.0.attn_q.weight", 19));
    MUTATE("tensor name with NUL", "name", "NUL", b[L.t_name[t_q] + 9] = 0);
    MUTATE("huge tensor name", "name length", "past the end", put64(b, L.t_name[t_q], 1ull << 33));

    /* Truncations all over: header, kvs, tensor infos, data. */
    size_t cuts[] = {0, 1, 3, 4, 7, 8, 15, 16, 23, 24, 30, L.kv_val[k_tokens] + 3,
                     L.kv_val[k_tokens] + 20, 400, 3001, L.kv_key[k_scores] + 5,
                     L.kv_val[k_scores] + 100, L.kv_key[k_model] + 12, L.kv_val[k_block] + 2, L.t_name[0] + 4,
                     L.t_ne[t_q] + 5, L.t_type[t_q] + 2, L.t_off[t_out] + 7, L.info_end,
                     L.info_end + 5, len / 2, len - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "truncated at %zu", cuts[c]);
        expect_reject(orig, cuts[c], what, "offset", NULL);
        n_variants++;
    }
    ck_assert_int_ge(n_variants, 30);
    free(b);
    free(orig);
}
END_TEST

/* general.alignment: not a power of two, zero, wrong type; and a real 64 works. */
START_TEST(test_alignment_rules)
{
    char err[512];
    size_t len;
    const uint32_t bad[] = {0, 3, 33, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gguf_writer *w = gguf_writer_new();
        gguf_writer_set_u32(w, "general.alignment", 64);
        gguf_writer_add_tensor(w, "t", QT_F32, 1, (int64_t[]){8}, (float[8]){0});
        uint8_t *img = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
        ck_assert_ptr_nonnull(img);
        gguf_ctx *g = gguf_parse(img, len, err, sizeof err);
        ck_assert_ptr_nonnull(g);
        ck_assert_uint_eq(gguf_alignment(g), 64);
        ck_assert_uint_eq(gguf_data_offset(g) % 64, 0);
        gguf_close(g);
        layout L;
        walk(img, &L);
        put32(img, L.kv_val[0], bad[i]);
        expect_reject(img, len, "bad alignment", "general.alignment", "power of two");
        free(img);
        gguf_writer_free(w);
    }
    /* Our writer refuses a uint64 alignment, so patch one in by hand. */
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u64(w, "general.alignment", 32);
    ck_assert_ptr_null(gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "general.alignment"));
    gguf_writer_set_u64(w, "general.alignmenT", 32);
    gguf_writer_set_u32(w, "general.alignment", 32);
    uint8_t *img = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_msg(img != NULL, "%s", err);
    layout L;
    walk(img, &L);
    memcpy(img + L.kv_key[0] + 8, "general.alignmenT", 17); /* swap the names */
    memcpy(img + L.kv_key[1] + 8, "general.alignment", 17);
    expect_reject(img, len, "alignment as uint64", "general.alignment", "expected uint32");
    free(img);
    gguf_writer_free(w);
}
END_TEST

/* Arrays nested beyond the limit, and a nested count larger than the file. */
START_TEST(test_nesting_limits)
{
    uint8_t raw[64 * 12];
    size_t n = 0;
    for (int d = 0; d < 40; d++) {
        uint32_t et = d < 39 ? GGUF_T_ARRAY : GGUF_T_UINT8;
        uint64_t cnt = d < 39 ? 1 : 0;
        memcpy(raw + n, &et, 4);
        memcpy(raw + n + 4, &cnt, 8);
        n += 12;
    }
    char err[512];
    size_t len;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_raw(w, "deep", GGUF_T_ARRAY, raw, n);
    uint8_t *img = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_ptr_nonnull(img);
    expect_reject(img, len, "deep nesting", "kv 0 (deep)", "nests deeper");
    free(img);
    gguf_writer_free(w);

    uint32_t et = GGUF_T_ARRAY;
    uint64_t cnt = 1ull << 40;
    memcpy(raw, &et, 4);
    memcpy(raw + 4, &cnt, 8);
    w = gguf_writer_new();
    gguf_writer_set_raw(w, "wide", GGUF_T_ARRAY, raw, 12);
    img = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_ptr_nonnull(img);
    expect_reject(img, len, "nested count", "array count", "wide");
    free(img);
    gguf_writer_free(w);
}
END_TEST

/* ---- writer round trip ---- */

static int fill_pattern(void *user, int64_t i, const char *name, void *dst, uint64_t nbytes)
{
    uint8_t *d = dst;
    for (uint64_t k = 0; k < nbytes; k++) d[k] = (uint8_t)(k * 7 + (uint64_t)i);
    (*(int *)user)++;
    return 0;
}

static gguf_writer *build_everything(float *f32data)
{
    gguf_writer *w = gguf_writer_new();
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    int64_t i64 = -(1ll << 40); uint64_t u64 = 1ull << 63; double f64 = 3.25e100;
    gguf_writer_set_scalar(w, "v.u8", GGUF_T_UINT8, &u8);
    gguf_writer_set_scalar(w, "v.i8", GGUF_T_INT8, &i8);
    gguf_writer_set_scalar(w, "v.u16", GGUF_T_UINT16, &u16);
    gguf_writer_set_scalar(w, "v.i16", GGUF_T_INT16, &i16);
    gguf_writer_set_u32(w, "v.u32", 4000000000u);
    gguf_writer_set_i32(w, "v.i32", -2000000000);
    gguf_writer_set_f32(w, "v.f32", 1.5f);
    gguf_writer_set_bool(w, "v.bool", true);
    gguf_writer_set_str(w, "v.str", "héllo \"world\"\n");
    gguf_writer_set_u64(w, "v.u64", u64);
    gguf_writer_set_scalar(w, "v.i64", GGUF_T_INT64, &i64);
    gguf_writer_set_scalar(w, "v.f64", GGUF_T_FLOAT64, &f64);
    gguf_writer_set_str(w, "v.replaced", "old");
    gguf_writer_set_str(w, "v.replaced", "new");
    int32_t ai[5] = {1, -2, 3, -4, 5};
    gguf_writer_set_arr(w, "a.i32", GGUF_T_INT32, ai, 5);
    double af[3] = {0.5, -1.25, 1e300};
    gguf_writer_set_arr(w, "a.f64", GGUF_T_FLOAT64, af, 3);
    uint8_t ab[4] = {1, 0, 1, 1};
    gguf_writer_set_arr(w, "a.bool", GGUF_T_BOOL, ab, 4);
    gguf_writer_set_arr(w, "a.empty", GGUF_T_UINT16, NULL, 0);
    const char *strs[] = {"a", "", "ccc"};
    gguf_writer_set_arr_str(w, "a.str", strs, 3);
    /* [[7, 8], [], [9]] of uint32, then [["x"], ["y", "zz"]] */
    uint8_t raw[256];
    size_t n = 0;
#define PUT32(v) do { uint32_t v_ = (v); memcpy(raw + n, &v_, 4); n += 4; } while (0)
#define PUT64(v) do { uint64_t v_ = (v); memcpy(raw + n, &v_, 8); n += 8; } while (0)
    PUT32(GGUF_T_ARRAY); PUT64(3);
    PUT32(GGUF_T_UINT32); PUT64(2); PUT32(7); PUT32(8);
    PUT32(GGUF_T_UINT32); PUT64(0);
    PUT32(GGUF_T_UINT32); PUT64(1); PUT32(9);
    gguf_writer_set_raw(w, "a.nested", GGUF_T_ARRAY, raw, n);
    n = 0;
    PUT32(GGUF_T_ARRAY); PUT64(2);
    PUT32(GGUF_T_STRING); PUT64(1); PUT64(1); raw[n++] = 'x';
    PUT32(GGUF_T_STRING); PUT64(2); PUT64(1); raw[n++] = 'y'; PUT64(2); raw[n++] = 'z'; raw[n++] = 'z';
    gguf_writer_set_raw(w, "a.nested_str", GGUF_T_ARRAY, raw, n);
    for (int i = 0; i < 24; i++) f32data[i] = (float)i * 0.25f - 3.0f;
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t.f32", QT_F32, 2, (int64_t[]){8, 3}, f32data), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t.q8", QT_Q8_0, 2, (int64_t[]){64, 5}, NULL), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t.iq2", QT_IQ2_XXS, 1, (int64_t[]){256}, NULL), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t.4d", QT_F16, 4, (int64_t[]){2, 3, 4, 5}, NULL), 0);
    return w;
}

static void check_everything(const gguf_ctx *g, const float *f32data)
{
    ck_assert_int_eq(gguf_get_int(g, "v.u8", 0), 200);
    ck_assert_int_eq(gguf_get_int(g, "v.i8", 0), -100);
    ck_assert_int_eq(gguf_get_int(g, "v.u16", 0), 60000);
    ck_assert_int_eq(gguf_get_int(g, "v.i16", 0), -30000);
    ck_assert_int_eq(gguf_get_int(g, "v.u32", 0), 4000000000ll);
    ck_assert_int_eq(gguf_get_int(g, "v.i32", 0), -2000000000);
    ck_assert(gguf_get_float(g, "v.f32", 0) == 1.5);
    ck_assert(gguf_get_bool(g, "v.bool", false));
    ck_assert_int_eq(gguf_get_int(g, "v.bool", 5), 1);
    ck_assert_str_eq(gguf_get_str(g, "v.str", ""), "héllo \"world\"\n");
    ck_assert_int_eq(gguf_get_int(g, "v.u64", -7), -7); /* 2^63 does not fit an int64 */
    ck_assert(gguf_get_float(g, "v.u64", 0) == 9223372036854775808.0);
    ck_assert_int_eq(gguf_get_int(g, "v.i64", 0), -(1ll << 40));
    ck_assert(gguf_get_float(g, "v.f64", 0) == 3.25e100);
    ck_assert(gguf_get_float(g, "v.u32", 0) == 4000000000.0);
    ck_assert_str_eq(gguf_get_str(g, "v.replaced", ""), "new");
    /* defaults: absent keys and incompatible types */
    ck_assert_int_eq(gguf_get_int(g, "absent", 42), 42);
    ck_assert_int_eq(gguf_get_int(g, "v.str", 42), 42);
    ck_assert_int_eq(gguf_get_int(g, "v.f32", 42), 42);
    ck_assert(gguf_get_float(g, "v.bool", 2.5) == 2.5);
    ck_assert_str_eq(gguf_get_str(g, "v.u32", "dflt"), "dflt");
    ck_assert(gguf_get_bool(g, "v.u8", false) == false);
    ck_assert_int_eq(gguf_find_key(g, "absent"), -1);
    int64_t k = gguf_find_key(g, "v.u8");
    ck_assert_int_ge(k, 0);
    ck_assert_str_eq(gguf_key(g, k), "v.u8");
    ck_assert_int_eq(gguf_kv_type(g, k), GGUF_T_UINT8);
    ck_assert_int_eq(gguf_arr_type(g, k), GGUF_T_COUNT);

    k = gguf_find_key(g, "a.i32");
    ck_assert_int_eq(gguf_arr_type(g, k), GGUF_T_INT32);
    ck_assert_int_eq(gguf_arr_n(g, k), 5);
    ck_assert_int_eq(gguf_arr_int(g, k, 3), -4);
    ck_assert(gguf_arr_float(g, k, 4) == 5.0);
    int32_t raw4;
    memcpy(&raw4, (const uint8_t *)gguf_arr_data(g, k) + 4, 4);
    ck_assert_int_eq(raw4, -2);
    k = gguf_find_key(g, "a.f64");
    ck_assert(gguf_arr_float(g, k, 2) == 1e300);
    k = gguf_find_key(g, "a.bool");
    ck_assert_int_eq(gguf_arr_int(g, k, 1), 0);
    ck_assert_int_eq(gguf_arr_int(g, k, 3), 1);
    ck_assert_int_eq(gguf_arr_n(g, gguf_find_key(g, "a.empty")), 0);
    k = gguf_find_key(g, "a.str");
    ck_assert_int_eq(gguf_arr_n(g, k), 3);
    ck_assert_int_eq(gguf_arr_str(g, k, 1).len, 0);
    ck_assert_int_eq(gguf_arr_str(g, k, 2).len, 3);
    ck_assert(memcmp(gguf_arr_str(g, k, 2).ptr, "ccc", 3) == 0);

    const gguf_value *v = gguf_kv_value(g, gguf_find_key(g, "a.nested"));
    ck_assert_int_eq(gguf_value_arr_type(v), GGUF_T_ARRAY);
    ck_assert_int_eq(gguf_value_arr_n(v), 3);
    ck_assert_int_eq(gguf_value_arr_n(gguf_value_arr_sub(v, 0)), 2);
    ck_assert_int_eq(gguf_value_arr_int(gguf_value_arr_sub(v, 0), 1), 8);
    ck_assert_int_eq(gguf_value_arr_n(gguf_value_arr_sub(v, 1)), 0);
    ck_assert_int_eq(gguf_value_arr_int(gguf_value_arr_sub(v, 2), 0), 9);
    v = gguf_kv_value(g, gguf_find_key(g, "a.nested_str"));
    gguf_str s = gguf_value_arr_str(gguf_value_arr_sub(v, 1), 1);
    ck_assert_int_eq(s.len, 2);
    ck_assert(memcmp(s.ptr, "zz", 2) == 0);

    ck_assert_int_eq(gguf_n_tensors(g), 4);
    const gguf_tensor *t = gguf_find_tensor(g, "t.f32");
    ck_assert_int_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 8);
    ck_assert_int_eq(t->ne[1], 3);
    ck_assert_int_eq(t->ne[2], 1);
    ck_assert(memcmp(t->data, f32data, 24 * sizeof(float)) == 0);
    t = gguf_find_tensor(g, "t.q8");
    ck_assert_int_eq(t->type, QT_Q8_0);
    ck_assert_uint_eq(t->nbytes, 5 * 2 * 34);
    ck_assert_uint_eq(((const uint8_t *)t->data)[100], (uint8_t)(100 * 7 + 1));
    t = gguf_find_tensor(g, "t.iq2");
    ck_assert_int_eq(t->type, QT_IQ2_XXS); /* known but unsupported: still valid */
    ck_assert_uint_eq(t->nbytes, qt_get(QT_IQ2_XXS)->type_size);
    t = gguf_find_tensor(g, "t.4d");
    ck_assert_int_eq(t->n_dims, 4);
    ck_assert_int_eq(t->ne[3], 5);
    ck_assert_uint_eq(t->nbytes, 2 * 3 * 4 * 5 * 2);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++)
        ck_assert_uint_eq(gguf_tensor_at(g, i)->offset % gguf_alignment(g), 0);
}

START_TEST(test_writer_round_trip)
{
    float f32data[24];
    char err[512];
    size_t len;
    int calls = 0;
    gguf_writer *w = build_everything(f32data);
    ck_assert_ptr_null(gguf_writer_error(w));
    uint8_t *img = gguf_writer_write_mem(w, fill_pattern, &calls, &len, err, sizeof err);
    ck_assert_msg(img != NULL, "%s", err);
    ck_assert_int_eq(calls, 3); /* the F32 tensor is copied from its data */
    gguf_ctx *g = gguf_parse(img, len, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    check_everything(g, f32data);

    /* Version 2 has the same layout (64-bit counts): it reads the same. */
    uint8_t *v2 = malloc(len);
    memcpy(v2, img, len);
    put32(v2, 4, 2);
    gguf_ctx *g2 = gguf_parse(v2, len, err, sizeof err);
    ck_assert_msg(g2 != NULL, "%s", err);
    ck_assert_uint_eq(gguf_version(g2), 2);
    check_everything(g2, f32data);
    gguf_close(g2);
    free(v2);

    /* The file path gives the same bytes; copying a ctx gives them again. */
    char path[] = "/tmp/llm-gguf-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(gguf_writer_write(w, path, fill_pattern, &calls, err, sizeof err), 0);
    gguf_ctx *f = gguf_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    size_t flen;
    const void *fbuf = gguf_buffer(f, &flen);
    ck_assert_uint_eq(flen, len);
    ck_assert(memcmp(fbuf, img, len) == 0);
    gguf_close(f);
    unlink(path);

    gguf_writer *c = gguf_writer_new();
    gguf_writer_copy_kv(c, g, NULL);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_int_eq(gguf_writer_add_tensor(c, t->name, t->type, t->n_dims, t->ne, t->data), 0);
    }
    size_t len2;
    uint8_t *img2 = gguf_writer_write_mem(c, NULL, NULL, &len2, err, sizeof err);
    ck_assert_ptr_nonnull(img2);
    ck_assert_uint_eq(len2, len);
    ck_assert(memcmp(img2, img, len) == 0);
    free(img2);
    gguf_writer_free(c);

    /* A prefix copies only matching keys. */
    c = gguf_writer_new();
    gguf_writer_copy_kv(c, g, "a.");
    img2 = gguf_writer_write_mem(c, NULL, NULL, &len2, err, sizeof err);
    gguf_ctx *p = gguf_parse(img2, len2, err, sizeof err);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(gguf_n_kv(p), 7);
    ck_assert_int_eq(gguf_find_key(p, "v.u8"), -1);
    gguf_close(p);
    free(img2);
    gguf_writer_free(c);

    gguf_close(g);
    free(img);
    gguf_writer_free(w);
}
END_TEST

/* Every shared model, read and rewritten by our writer, comes out byte-identical. */
START_TEST(test_rewrite_models_identical)
{
    const model_facts *m = &facts[_i];
    char path[1024], err[512];
    model_path(path, sizeof path, m->file);
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, g, NULL);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data), 0);
    }
    size_t len, olen;
    uint8_t *img = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_msg(img != NULL, "%s", err);
    const void *o = gguf_buffer(g, &olen);
    ck_assert_uint_eq(len, olen);
    ck_assert_msg(memcmp(img, o, len) == 0, "%s differs after a rewrite", m->file);
    free(img);
    gguf_writer_free(w);
    gguf_close(g);
}
END_TEST

static int fill_fail(void *user, int64_t i, const char *name, void *dst, uint64_t nbytes)
{
    return i == 1 ? -1 : 0;
}

/* Bad writer input is reported, not written. */
START_TEST(test_writer_errors)
{
    char err[512];
    size_t len;
    gguf_writer *w = gguf_writer_new();
    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", QT_F32, 1, (int64_t[]){4}, NULL), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "b", QT_F32, 1, (int64_t[]){4}, NULL), 0);
    ck_assert_ptr_null(gguf_writer_write_mem(w, fill_fail, NULL, &len, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "tensor b"));
    ck_assert_ptr_null(gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "no fill callback"));
    char path[] = "/tmp/llm-gguf-fail-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    ck_assert_int_eq(gguf_writer_write(w, path, fill_fail, NULL, err, sizeof err), -1);
    ck_assert_int_ne(access(path, F_OK), 0); /* no partial file left */

    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", QT_F32, 1, (int64_t[]){4}, NULL), -1);
    ck_assert_ptr_nonnull(strstr(gguf_writer_error(w), "added twice"));
    ck_assert_ptr_null(gguf_writer_write_mem(w, fill_pattern, &(int){0}, &len, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "added twice"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", QT_Q4_0, 1, (int64_t[]){48}, NULL), -1);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "u", 4, 1, (int64_t[]){32}, NULL), -1);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "d", QT_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, NULL), -1);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "z", QT_F32, 2, (int64_t[]){4, 0}, NULL), -1);
    ck_assert_ptr_nonnull(strstr(gguf_writer_error(w), "q"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_arr(w, "bad", GGUF_T_STRING, NULL, 0);
    ck_assert_ptr_nonnull(gguf_writer_error(w));
    gguf_writer_free(w);
    gguf_writer_free(NULL);
    gguf_close(NULL);
}
END_TEST

/* Opening: missing file, empty file, directory. */
START_TEST(test_open_errors)
{
    char err[512];
    ck_assert_ptr_null(gguf_open("/nonexistent/x.gguf", err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.gguf"));
    ck_assert_ptr_null(gguf_open("/tmp", err, sizeof err));
    char path[] = "/tmp/llm-gguf-empty-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    ck_assert_ptr_null(gguf_open(path, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "magic"));
    unlink(path);
    ck_assert_ptr_null(gguf_parse(NULL, 0, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "magic"));
}
END_TEST

/* Reads everything a parsed ctx offers, so that ASan sees any bad pointer. */
static uint64_t touch_all(const gguf_ctx *g)
{
    uint64_t h = 0;
    double acc = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_key(g, i);
        acc += gguf_get_float(g, k, 0);
        h += (uint64_t)gguf_get_int(g, k, 0) + strlen(gguf_get_str(g, k, "")) +
             gguf_get_bool(g, k, false);
        const gguf_value *v = gguf_kv_value(g, i);
        size_t rl;
        const uint8_t *raw = gguf_value_raw(v, &rl);
        if (rl) h += raw[rl - 1];
        for (uint64_t e = 0; e < gguf_value_arr_n(v); e++) {
            gguf_vtype et = gguf_value_arr_type(v);
            if (et == GGUF_T_STRING) {
                gguf_str s = gguf_value_arr_str(v, e);
                if (s.len) h += (uint8_t)s.ptr[s.len - 1];
            } else if (et == GGUF_T_ARRAY) {
                const gguf_value *sub = gguf_value_arr_sub(v, e);
                h += gguf_value_arr_n(sub);
                if (gguf_value_arr_n(sub) && gguf_value_arr_type(sub) < GGUF_T_STRING)
                    h += (uint64_t)gguf_value_arr_int(sub, gguf_value_arr_n(sub) - 1);
            } else {
                h += (uint64_t)gguf_value_arr_int(v, e);
                acc += gguf_value_arr_float(v, e);
            }
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        h += d[0] + d[t->nbytes - 1] + strlen(t->name);
        ck_assert_ptr_eq(gguf_find_tensor(g, t->name), t);
    }
    return h + (acc != 0);
}

/* Thousands of random byte changes and cuts of a small file holding every value
 * type: each parse either fails with a message or yields a ctx that reads safely. */
START_TEST(test_random_mutations)
{
    float f32data[24];
    char err[512];
    size_t len;
    gguf_writer *w = build_everything(f32data);
    int calls = 0;
    uint8_t *img = gguf_writer_write_mem(w, fill_pattern, &calls, &len, err, sizeof err);
    ck_assert_ptr_nonnull(img);
    gguf_writer_free(w);
    uint64_t x = 12345;
    int accepted = 0, refused = 0;
    for (int it = 0; it < 4000; it++) {
        size_t n = len;
        uint8_t *b = malloc(len);
        memcpy(b, img, len);
        int flips = 1 + (int)(it % 4);
        for (int k = 0; k < flips; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(x >> 33) % len;
            uint8_t vals[] = {0, 0xff, 0x7f, 0x80, 1, 2, 9, 13, (uint8_t)(x >> 8)};
            b[at] = vals[(x >> 20) % sizeof vals];
        }
        if (it % 5 == 0) n = (size_t)(x >> 40) % len;
        err[0] = 0;
        gguf_ctx *g = gguf_parse(b, n, err, sizeof err);
        if (g) {
            touch_all(g);
            accepted++;
            gguf_close(g);
        } else {
            ck_assert_msg(err[0] != 0, "refused without a message");
            ck_assert_msg(strstr(err, "offset") || strstr(err, "memory"),
                          "error without an offset: %s", err);
            refused++;
        }
        free(b);
    }
    ck_assert_int_gt(refused, 100);
    ck_assert_int_gt(accepted, 100); /* flips inside tensor data stay valid */
    free(img);
}
END_TEST

Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("models");
    int n = (int)(sizeof facts / sizeof facts[0]);
    tcase_add_loop_test(tc, test_model_facts, 0, n);
    tcase_add_test(tc, test_vocab_files);
    tcase_add_loop_test(tc, test_rewrite_models_identical, 0, n);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_add_test(tc, test_corrupt_variants);
    tcase_add_test(tc, test_alignment_rules);
    tcase_add_test(tc, test_nesting_limits);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_random_mutations);
    suite_add_tcase(s, tc);
    tc = tcase_create("writer");
    tcase_add_test(tc, test_writer_round_trip);
    tcase_add_test(tc, test_writer_errors);
    suite_add_tcase(s, tc);
    return s;
}
