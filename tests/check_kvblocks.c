/*
 * Suite "kvblocks": sessions over block tables in a shared KV pool (kv.h, kvsetup.h).
 * A pooled session's logits are the same bits as a private cache's of the same type,
 * whether it was computed in one pass, in chunks, or its prefix taken from blocks another
 * session published; truncating into a published block copies it; a full pool fails a
 * step with a clear message and leaves the pool consistent.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "kvpool.h"
#include "kvsetup.h"
#include "segment.h"
#include "test_model.h"

static kvp *make_pool(eng_model *m, const char *tag, uint32_t n_blocks, eng_kv_type kv, char name[SEG_NAME_MAX])
{
    char err[256];
    snprintf(name, SEG_NAME_MAX, "/llm-kv-%u-test%d-%s", (unsigned)geteuid(), (int)getpid(), tag);
    kvp_params p = { .n_blocks = n_blocks };
    kvs_ident(m, kv, ENG_KV_WHOLE, &p.id); /* these models have no sliding-window layers */
    kvp *pool = NULL;
    ck_assert_msg(kvp_create(name, &p, &pool, err, sizeof err) == 0, "%s", err);
    kvp_close(&pool); /* the creator's handle has no slot: attach like a worker */
    ck_assert_msg(kvp_attach(name, &p.id, &pool, err, sizeof err) == 0, "%s", err);
    return pool;
}

static void drop_pool(kvp **pool, const char *name)
{
    char err[256];
    ck_assert_msg(kvp_check(*pool, err, sizeof err) == 0, "%s", err);
    kvp_close(pool);
    kvp_remove(name, err, sizeof err);
}

#define N 70

static void check_model(const char *file, eng_kv_type kv)
{
    bool built;
    char err[512], name[SEG_NAME_MAX];
    eng_model *m = test_model_open(file, ENG_INT8, &built);
    int V = eng_config_of(m)->n_vocab;
    int32_t toks[N], alt[N];
    for (int t = 0; t < N; t++) {
        toks[t] = t == 0 ? 1 : (int32_t)(3 + (t * 37) % (V - 3));
        alt[t] = t < 40 ? toks[t] : (int32_t)(3 + (t * 11) % (V - 3));
    }
    float *ref = malloc((size_t)N * V * sizeof(float)), *ralt = malloc((size_t)N * V * sizeof(float));
    float *out = malloc((size_t)N * V * sizeof(float));
    eng_session *p = eng_session_new(m, 128, kv, err, sizeof err);
    ck_assert_msg(p && eng_prefill(m, p, toks, N, ref, true, err, sizeof err) == 0, "%s", err);
    eng_session_reset(p);
    ck_assert_msg(eng_prefill(m, p, alt, N, ralt, true, err, sizeof err) == 0, "%s", err);
    eng_session_free(p);

    kvp *pool = make_pool(m, "inv", 64, kv, name);
    eng_set_kv_pools(m, pool, NULL);
    /* computed in chunks of 7 over a block table: publishes blocks 0..3 */
    eng_session *a = eng_session_new(m, 128, kv == ENG_KV_F32 ? ENG_KV_F16 : ENG_KV_F32 /* the pool's type wins */, err,
                                     sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    for (int done = 0; done < N; done += 7) {
        int k = N - done < 7 ? N - done : 7;
        ck_assert_msg(eng_prefill(m, a, toks + done, k, out + (size_t)done * V, true, err, sizeof err) == 0, "%s", err);
    }
    ck_assert_msg(memcmp(out, ref, (size_t)N * V * sizeof(float)) == 0, "%s: pooled prefill differs from private", file);
    kvp_stats_t st;
    kvp_stats(pool, &st);
    ck_assert_uint_eq(st.published, N / 16);
    /* a second session takes the 4 full blocks (64 positions) and computes 6 */
    eng_session *b = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    ck_assert_int_eq(eng_session_reuse(b, toks, N - 1), 64);
    ck_assert_uint_eq(eng_session_reused(b), 64);
    ck_assert_msg(eng_prefill(m, b, toks + 64, N - 64, out, true, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(out, ref + (size_t)64 * V, (size_t)(N - 64) * V * sizeof(float)) == 0,
                  "%s: rows after a reused prefix differ from the one-pass prefill", file);
    /* rewinding into a published block (40 = block 2 + 8) copies it; the rest follows alt */
    ck_assert_int_eq(eng_session_truncate(b, 40), 0);
    ck_assert_msg(eng_prefill(m, b, alt + 40, N - 40, out, true, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(out, ralt + (size_t)40 * V, (size_t)(N - 40) * V * sizeof(float)) == 0,
                  "%s: rows after a rewind into a published block differ", file);
    /* session a's blocks were not changed by b: decoding on a equals the private run */
    eng_session_truncate(a, 50);
    ck_assert_msg(eng_prefill(m, a, toks + 50, 1, out, true, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(out, ref + (size_t)50 * V, (size_t)V * sizeof(float)) == 0, "%s: block changed under a", file);
    /* a different prefix is a miss */
    eng_session *c = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    int32_t other[20];
    memcpy(other, toks, sizeof other);
    other[3] ^= 1;
    ck_assert_int_eq(eng_session_reuse(c, other, 20), 0);
    /* all N in one pass over a block table: attention copies a head's slices of the
     * blocks next to each other (16 query rows or more) */
    eng_session *d = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    ck_assert_msg(d && eng_prefill(m, d, toks, N, out, true, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(out, ref, (size_t)N * V * sizeof(float)) == 0, "%s: one-pass pooled prefill differs", file);
    eng_session_free(d);
    eng_session_free(a);
    eng_session_free(b);
    eng_session_free(c);
    kvp_stats(pool, &st);
    ck_assert_uint_eq(st.referenced, 0);
    ck_assert_uint_eq(st.writing, 0);
    ck_assert_uint_ge(st.cached, N / 16);
    eng_set_kv_pools(m, NULL, NULL);
    drop_pool(&pool, name);
    free(ref); free(ralt); free(out);
    test_model_close(m, built);
}

START_TEST(test_pooled_equals_private)
{
    check_model("stories260K-f32.gguf", ENG_KV_F16);
    check_model("tiny-llama2-Q8_0.gguf", ENG_KV_F16);
    check_model("tiny-llama2-Q8_0.gguf", ENG_KV_Q8_0); /* head_dim 64: q8_0 blocks */
}
END_TEST

START_TEST(test_pool_full)
{
    bool built;
    char err[512], name[SEG_NAME_MAX];
    eng_model *m = test_model_open("stories260K-f32.gguf", ENG_INT8, &built);
    kvp *pool = make_pool(m, "full", 3, ENG_KV_F16, name);
    eng_set_kv_pools(m, pool, NULL);
    int32_t toks[64];
    for (int t = 0; t < 64; t++) toks[t] = 3 + t;
    eng_session *s = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    ck_assert_int_eq(eng_prefill(m, s, toks, 48, NULL, false, err, sizeof err), 0);
    ck_assert_int_eq(eng_prefill(m, s, toks + 48, 16, NULL, false, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "KV pool full") != NULL, "%s", err);
    ck_assert_int_eq(eng_session_pos(s), 48);
    eng_session_free(s); /* its 3 blocks are cached now: a new session evicts them */
    s = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    toks[0] = 1;
    ck_assert_msg(eng_prefill(m, s, toks, 40, NULL, false, err, sizeof err) == 0, "%s", err);
    kvp_stats_t st;
    kvp_stats(pool, &st);
    ck_assert_uint_ge(st.c.evictions, 2);
    eng_session_free(s);
    eng_set_kv_pools(m, NULL, NULL);
    drop_pool(&pool, name);
    test_model_close(m, built);
}
END_TEST

/* --kv-pool SIZE: K/M/G bytes, a bare number of tokens, 0 or off for none. */
START_TEST(test_kv_pool_size)
{
    char err[256];
    kvs_spec k;
    ck_assert_int_eq(kvs_parse("2G", &k, err, sizeof err), 0);
    ck_assert(k.bytes == 2ull << 30 && k.tokens == 0 && kvs_enabled(&k));
    ck_assert_int_eq(kvs_parse("512m", &k, err, sizeof err), 0);
    ck_assert(k.bytes == 512ull << 20);
    ck_assert_int_eq(kvs_parse("65536", &k, err, sizeof err), 0);
    ck_assert(k.tokens == 65536 && k.bytes == 0);
    ck_assert_int_eq(kvs_parse("0", &k, err, sizeof err), 0);
    ck_assert(!kvs_enabled(&k));
    ck_assert_int_eq(kvs_parse("off", &k, err, sizeof err), 0);
    ck_assert(!kvs_enabled(&k));
    ck_assert_int_eq(kvs_parse("12X", &k, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "suffix"));
    ck_assert_int_eq(kvs_parse("-5", &k, err, sizeof err), -1);
    ck_assert_int_eq(kvs_parse("", &k, err, sizeof err), -1);
    ck_assert_int_eq(kvs_parse("99999999999G", &k, err, sizeof err), -1);
}
END_TEST

Suite *kvblocks_suite(void)
{
    Suite *s = suite_create("kvblocks");
    TCase *tc = tcase_create("kvblocks");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_pooled_equals_private);
    tcase_add_test(tc, test_pool_full);
    tcase_add_test(tc, test_kv_pool_size);
    suite_add_tcase(s, tc);
    return s;
}
