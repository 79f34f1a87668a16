/*
 * Tests for client/qmix (suite "qmix"): the per-tensor types of the Q4_K_M and
 * Q5_K_M mixes against files llama.cpp's llama-quantize wrote.
 *
 * - tiny-llama2-Q4_K_M.gguf / -Q5_K_M.gguf in ../shared/models were made by
 *   llama-quantize (c392e50) from the F32 original; the plan for the Q8_0 sibling
 *   (same names and shapes) must give every tensor the type that file holds.
 * - stories260K (row lengths 64 and 172: every fallback), a TinyLlama-1.1B shape
 *   (22 layers) and the 32-layer counts: expected types written out below were
 *   read from llama-quantize's output for those shapes (run by hand; llama-quantize
 *   is not part of this project). The 70B and 8-expert rules follow llama.cpp's
 *   source; no file of those sizes was quantized to confirm them.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "qmix.h"
#include "qtype.h"

static const char *shared_dir(void)
{
    const char *s = getenv("LLM_SHARED");
    return s && *s ? s : "../shared";
}

static gguf_ctx *open_model(const char *file)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/%s", shared_dir(), file);
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", path, err);
    return g;
}

START_TEST(test_names_and_ftypes)
{
    ck_assert_int_eq(qmix_from_name("Q4_K_M"), QMIX_Q4_K_M);
    ck_assert_int_eq(qmix_from_name("q5_k_m"), QMIX_Q5_K_M);
    ck_assert_int_eq(qmix_from_name("Q4_K"), -1);
    ck_assert_int_eq(qmix_from_name("Q4_K_S"), -1);
    ck_assert_str_eq(qmix_name(QMIX_Q5_K_M), "Q5_K_M");
    ck_assert_uint_eq(qmix_ftype(QMIX_Q4_K_M), 15);
    ck_assert_uint_eq(qmix_ftype(QMIX_Q5_K_M), 17);
}
END_TEST

/* Layers that get Q6_K attn_v / ffn_down, as a string "0 1 4 ...". */
static void more_bits_list(int n, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        if (qmix_more_bits(i, n)) off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? " " : "", i);
}

START_TEST(test_more_bits_layers)
{
    char got[512];
    more_bits_list(4, got, sizeof got);
    ck_assert_str_eq(got, "2 3");
    more_bits_list(5, got, sizeof got);
    ck_assert_str_eq(got, "2 4");
    more_bits_list(22, got, sizeof got);
    ck_assert_str_eq(got, "0 1 4 7 10 13 16 19 20 21");
    more_bits_list(32, got, sizeof got);
    ck_assert_str_eq(got, "0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31");
}
END_TEST

/* Plans every tensor of src and compares with the types of ref, tensor by name. */
static void check_plan_against(const char *src_file, const char *ref_file, qmix_kind k)
{
    gguf_ctx *src = open_model(src_file), *ref = open_model(ref_file);
    qmix_model m;
    char err[256], why[256];
    ck_assert_msg(qmix_model_init(&m, k, src, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(gguf_get_int(ref, "general.file_type", -1), (int64_t)qmix_ftype(k));
    ck_assert_int_eq(gguf_n_tensors(src), gguf_n_tensors(ref));
    int n_q6 = 0;
    for (int64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        const gguf_tensor *r = gguf_find_tensor(ref, t->name);
        ck_assert_msg(r != NULL, "%s: no %s", ref_file, t->name);
        uint32_t got = qmix_tensor_type(&m, t->name, t->n_dims, t->ne, why, sizeof why);
        ck_assert_msg(got == r->type, "%s %s: planned %s, llama-quantize wrote %s", qmix_name(k), t->name,
                      qt_name(got), qt_name(r->type));
        n_q6 += got == QT_Q6_K;
    }
    ck_assert_int_eq(n_q6, 5); /* the tied embedding, attn_v and ffn_down of layers 2 and 3 */
    gguf_close(src);
    gguf_close(ref);
}

START_TEST(test_tiny_llama2_q4_k_m)
{
    check_plan_against("tiny-llama2-Q8_0.gguf", "tiny-llama2-Q4_K_M.gguf", QMIX_Q4_K_M);
}
END_TEST

START_TEST(test_tiny_llama2_q5_k_m)
{
    check_plan_against("tiny-llama2-Q8_0.gguf", "tiny-llama2-Q5_K_M.gguf", QMIX_Q5_K_M);
}
END_TEST

/* stories260K (dim 64, n_ff 172, 5 layers, its own output.weight): no row fills a
 * 256-value block, so every K type falls back; 172-value rows reach F16. */
START_TEST(test_stories260k_fallbacks)
{
    gguf_ctx *g = open_model("stories260K-f32.gguf");
    for (int k = 0; k < QMIX_COUNT; k++) {
        qmix_model m;
        char err[256], why[256];
        ck_assert(qmix_model_init(&m, (qmix_kind)k, g, err, sizeof err) == 0);
        ck_assert(m.has_output);
        const uint32_t base = k == QMIX_Q4_K_M ? QT_Q5_0 : QT_Q5_1;
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            uint32_t want = base;
            if (t->n_dims == 1) want = QT_F32;
            else if (strcmp(t->name, "output.weight") == 0) want = QT_Q8_0;
            else if (strstr(t->name, "ffn_down")) want = QT_F16;
            else if (strcmp(t->name, "blk.2.attn_v.weight") == 0 || strcmp(t->name, "blk.4.attn_v.weight") == 0)
                want = QT_Q8_0; /* Q6_K, which falls back */
            uint32_t got = qmix_tensor_type(&m, t->name, t->n_dims, t->ne, why, sizeof why);
            ck_assert_msg(got == want, "%s %s: %s, want %s", qmix_name((qmix_kind)k), t->name, qt_name(got),
                          qt_name(want));
            ck_assert_msg((why[0] != 0) == (want != QT_F32 && strcmp(t->name, "output.weight") != 0),
                          "%s: fallback reason '%s'", t->name, why);
        }
    }
    gguf_close(g);
}
END_TEST

static qmix_model shape_model(qmix_kind k, const char *arch, int n_layer, int n_head, int n_head_kv,
                              int n_expert, bool has_output)
{
    qmix_model m = {.kind = k, .n_layer = n_layer, .n_head = n_head, .n_head_kv = n_head_kv,
                    .n_expert = n_expert, .has_output = has_output};
    snprintf(m.arch, sizeof m.arch, "%s", arch);
    return m;
}

static uint32_t type_of(const qmix_model *m, const char *name, int64_t ne0, int64_t ne1)
{
    const int64_t ne[4] = {ne0, ne1, 1, 1};
    char why[256];
    return qmix_tensor_type(m, name, 2, ne, why, sizeof why);
}

/* TinyLlama-1.1B: 22 layers, 2048 wide, n_ff 5632, 32 / 4 heads, untied output. */
START_TEST(test_tinyllama_shape)
{
    for (int k = 0; k < QMIX_COUNT; k++) {
        qmix_model m = shape_model((qmix_kind)k, "llama", 22, 32, 4, 0, true);
        const uint32_t base = k == QMIX_Q4_K_M ? QT_Q4_K : QT_Q5_K;
        ck_assert_uint_eq(type_of(&m, "output.weight", 2048, 32000), QT_Q6_K);
        ck_assert_uint_eq(type_of(&m, "token_embd.weight", 2048, 32000), base);
        int n_q6 = 0;
        for (int l = 0; l < 22; l++) {
            static const char *const names[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
            const bool more = l < 2 || l >= 19 || l % 3 == 1; /* 0 1 4 7 ... 19 20 21 */
            for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, names[j]);
                const bool down = strcmp(names[j], "ffn_down") == 0;
                const bool bumped = more && (down || strcmp(names[j], "attn_v") == 0);
                uint32_t got = type_of(&m, name, down ? 5632 : 2048, 2048);
                ck_assert_msg(got == (bumped ? QT_Q6_K : base), "%s: %s", name, qt_name(got));
                n_q6 += got == QT_Q6_K;
            }
        }
        ck_assert_int_eq(n_q6, 20);
    }
}
END_TEST

/* Tied embedding (no output.weight): token_embd takes the output matrix's type. */
START_TEST(test_tied_embedding)
{
    qmix_model m = shape_model(QMIX_Q4_K_M, "llama", 16, 32, 8, 0, false);
    ck_assert_uint_eq(type_of(&m, "token_embd.weight", 2048, 128256), QT_Q6_K);
    ck_assert_uint_eq(type_of(&m, "token_embd.weight", 896, 151936), QT_Q8_0); /* 896 % 256 != 0 */
    ck_assert_uint_eq(type_of(&m, "token_embd.weight", 100, 10), QT_F16);      /* no Q8_0 block fits */
    m.has_output = true;
    ck_assert_uint_eq(type_of(&m, "token_embd.weight", 2048, 128256), QT_Q4_K);
    ck_assert_uint_eq(type_of(&m, "token_embd.weight", 896, 151936), QT_Q5_0);
}
END_TEST

/* llama.cpp's 70B class and its 8-expert rules (from its source). */
START_TEST(test_70b_and_experts)
{
    qmix_model m = shape_model(QMIX_Q4_K_M, "llama", 80, 64, 8, 0, true);
    ck_assert(!qmix_more_bits(11, 80));
    ck_assert_uint_eq(type_of(&m, "blk.11.attn_v.weight", 8192, 1024), QT_Q5_K);
    ck_assert_uint_eq(type_of(&m, "blk.12.attn_v.weight", 8192, 1024), QT_Q6_K);
    ck_assert_uint_eq(type_of(&m, "blk.11.attn_k.weight", 8192, 1024), QT_Q4_K);
    m.n_head_kv = 64; /* 80 layers without GQA is llama.cpp's "65B": no bump */
    ck_assert_uint_eq(type_of(&m, "blk.11.attn_v.weight", 8192, 8192), QT_Q4_K);
    m = shape_model(QMIX_Q4_K_M, "qwen2", 80, 64, 8, 0, true);
    ck_assert_uint_eq(type_of(&m, "blk.11.attn_v.weight", 8192, 1024), QT_Q5_K);
    m.kind = QMIX_Q5_K_M;
    ck_assert_uint_eq(type_of(&m, "blk.11.attn_v.weight", 8192, 1024), QT_Q5_K);

    m = shape_model(QMIX_Q4_K_M, "llama", 32, 32, 8, 8, true); /* Mixtral 8x7B */
    ck_assert_uint_eq(type_of(&m, "blk.5.attn_v.weight", 4096, 1024), QT_Q8_0);
    ck_assert_uint_eq(type_of(&m, "blk.0.attn_v.weight", 4096, 1024), QT_Q8_0);
    ck_assert_uint_eq(type_of(&m, "blk.5.attn_k.weight", 4096, 1024), QT_Q8_0);
    ck_assert_uint_eq(type_of(&m, "blk.5.attn_output.weight", 4096, 4096), QT_Q5_K);
    ck_assert_uint_eq(type_of(&m, "blk.5.ffn_gate_inp.weight", 4096, 8), QT_F32);
    const int64_t exps[4] = {14336, 4096, 8, 1};
    char why[256];
    ck_assert_uint_eq(qmix_tensor_type(&m, "blk.0.ffn_down_exps.weight", 3, exps, why, sizeof why), QT_Q6_K);
    ck_assert_uint_eq(qmix_tensor_type(&m, "blk.5.ffn_down_exps.weight", 3, exps, why, sizeof why), QT_Q4_K);
    m.kind = QMIX_Q5_K_M;
    ck_assert_uint_eq(type_of(&m, "blk.5.attn_output.weight", 4096, 4096), QT_Q5_K);
    ck_assert_uint_eq(type_of(&m, "blk.5.attn_q.weight", 4096, 4096), QT_Q5_K);
}
END_TEST

START_TEST(test_model_init)
{
    gguf_ctx *g = open_model("tiny-llama2-Q8_0.gguf");
    qmix_model m;
    char err[256], path[] = "/tmp/llm-qmix-XXXXXX";
    ck_assert(qmix_model_init(&m, QMIX_Q4_K_M, g, err, sizeof err) == 0);
    ck_assert_str_eq(m.arch, "llama");
    ck_assert_int_eq(m.n_layer, 4);
    ck_assert_int_eq(m.n_head, 4);
    ck_assert_int_eq(m.n_head_kv, 2);
    ck_assert(!m.has_output);
    gguf_close(g);

    /* a file without block_count: a message naming the key, not a guess */
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen2");
    ck_assert_msg(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "%s", err);
    gguf_writer_free(w);
    g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert(qmix_model_init(&m, QMIX_Q5_K_M, g, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "qwen2.block_count") != NULL, "%s", err);
    gguf_close(g);
    unlink(path);
}
END_TEST

Suite *qmix_suite(void)
{
    Suite *s = suite_create("qmix");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, test_names_and_ftypes);
    tcase_add_test(tc, test_more_bits_layers);
    tcase_add_test(tc, test_tinyllama_shape);
    tcase_add_test(tc, test_tied_embedding);
    tcase_add_test(tc, test_70b_and_experts);
    suite_add_tcase(s, tc);

    tc = tcase_create("models");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tiny_llama2_q4_k_m);
    tcase_add_test(tc, test_tiny_llama2_q5_k_m);
    tcase_add_test(tc, test_stories260k_fallbacks);
    tcase_add_test(tc, test_model_init);
    suite_add_tcase(s, tc);
    return s;
}
