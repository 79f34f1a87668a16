/*
 * Suite "embed_step": embeddings computed inside the engine's mixed steps, as a worker
 * runs them (suite "embed" has the pooling and eng_embed): eng_step_hidden's hidden
 * rows, pooled the way a worker pools them (an embedding session's tokens in random
 * chunks, sharing steps with another session that wants logits), equal eng_embed's
 * one-pass vector bit for bit; the other session's logits are unchanged by it;
 * identical inputs give identical vectors, different inputs different ones; a hidden
 * row wanted without a buffer, or logits rows closer than n_vocab, are refused and no
 * session moves; logits rows further apart (a worker's ring slots) are the same bits.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "segment.h"
#include "test_model.h"

/* The one-pass vector of toks[0..n) with pooling p. */
static void embed_ref(eng_model *m, const int32_t *toks, int n, int p, float *out)
{
    char err[256];
    eng_session *s = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    ck_assert_msg(s && eng_embed(m, s, toks, n, p, out, err, sizeof err) == 0, "%s", err);
    eng_session_free(s);
}

/* Session e (embedding, n tokens) in random chunks of 1..9 per step, beside session g
 * (its tokens want logits, compared with lg_ref; with an odd rnd their rows are 48 floats
 * further apart than n_vocab, as a worker's logits ring slots are, and the gaps stay
 * untouched); e's hidden rows pooled as a worker pools them. */
static void embed_steps(eng_model *m, const int32_t *toks, int n, int p, const int32_t *gt, const float *lg_ref,
                        unsigned rnd, float *out)
{
    int E = eng_config_of(m)->n_embd, V = eng_config_of(m)->n_vocab;
    char err[256];
    eng_session *e = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    eng_session *g = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    size_t ld = (size_t)V + (rnd % 2 ? 48 : 0);
    float *hid = malloc((size_t)20 * E * sizeof *hid), *lg = malloc((size_t)20 * ld * sizeof *lg);
    for (size_t i = 0; i < 20 * ld; i++) lg[i] = -7.0f;
    double *acc = calloc((size_t)E, sizeof *acc);
    int done = 0, gdone = 0;
    while (done < n) {
        eng_item it[20];
        int k = 1 + (int)((rnd = rnd * 1103515245u + 12345u) >> 16) % 9, ni = 0, ng = 0;
        for (int j = 0; j < 2 && gdone + ng < 40; j++, ng++) it[ni++] = (eng_item){ g, gt[gdone + ng], true, false };
        int nh = 0;
        for (; nh < k && done + nh < n; nh++) it[ni++] = (eng_item){ e, toks[done + nh], false, true };
        ck_assert_msg(eng_step_hidden(m, it, ni, lg, ld == (size_t)V ? 0 : ld, hid, err, sizeof err) == 0, "%s", err);
        for (int j = 0; j < ng; j++) {
            ck_assert_msg(memcmp(lg + (size_t)j * ld, lg_ref + (size_t)(gdone + j) * V, (size_t)V * sizeof(float)) == 0,
                          "the other session's logits at %d changed beside an embedding (rows %zu apart)", gdone + j, ld);
            for (size_t i = (size_t)V; i < ld; i++)
                ck_assert_msg(lg[(size_t)j * ld + i] == -7.0f, "a logits row spilled into the gap after it");
        }
        eng_pool_add(acc, hid, nh, E, p);
        done += nh;
        gdone += ng;
    }
    eng_pool_finish(acc, n, E, p, out);
    free(acc);
    free(hid);
    free(lg);
    eng_session_free(e);
    eng_session_free(g);
}

static void check_hidden(eng_precision prec)
{
    bool built;
    char err[256];
    eng_model *m = test_model_open("tiny-llama2-Q8_0.gguf", prec, &built);
    int E = eng_config_of(m)->n_embd, V = eng_config_of(m)->n_vocab;
    int32_t a[50], b[50], gt[40];
    unsigned rnd = 99;
    for (int i = 0; i < 50; i++) a[i] = (int32_t)(2 + (rnd = rnd * 1103515245u + 12345u) % (unsigned)(V - 2));
    memcpy(b, a, sizeof b);
    b[20] = a[20] == 5 ? 6 : 5;
    for (int i = 0; i < 40; i++) gt[i] = (int32_t)(2 + (rnd = rnd * 1103515245u + 12345u) % (unsigned)(V - 2));
    float *lg_ref = malloc((size_t)40 * V * sizeof *lg_ref);
    eng_session *g = eng_session_new(m, 128, ENG_KV_F16, err, sizeof err);
    ck_assert_msg(g && eng_prefill(m, g, gt, 40, lg_ref, true, err, sizeof err) == 0, "%s", err);
    eng_session_free(g);
    size_t vb = (size_t)E * sizeof(float);
    float *ref = malloc(vb), *v = malloc(vb), *w = malloc(vb);
    for (int p = ENG_POOL_MEAN; p <= ENG_POOL_LAST; p++) {
        embed_ref(m, a, 50, p, ref);
        double nn = 0;
        for (int i = 0; i < E; i++) nn += (double)ref[i] * ref[i];
        ck_assert_float_eq_tol(nn, 1.0, 1e-5);
        for (unsigned seed = 1; seed <= 3; seed++) {
            embed_steps(m, a, 50, p, gt, lg_ref, seed, v);
            ck_assert_msg(memcmp(v, ref, vb) == 0, "pooling %d, split %u: the stepped vector differs from eng_embed's",
                          p, seed);
        }
        embed_ref(m, a, 50, p, w); /* identical input: identical vector */
        ck_assert_mem_eq(w, ref, vb);
        embed_ref(m, b, 50, p, w); /* one token differs: so does the vector */
        double d = 0;
        for (int i = 0; i < E; i++) d += fabs((double)w[i] - ref[i]);
        ck_assert_msg(d > 1e-4, "pooling %d: different inputs gave the same vector", p);
    }
    /* a hidden row wanted without a buffer: refused, no session moves */
    eng_session *s = eng_session_new(m, 16, ENG_KV_F16, err, sizeof err);
    eng_item it[2] = { { s, 1, false, false }, { s, 2, false, true } };
    ck_assert_int_eq(eng_step_hidden(m, it, 2, NULL, 0, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "hidden"));
    ck_assert_int_eq(eng_session_pos(s), 0);
    /* logits rows closer than n_vocab would overlap: refused, no session moves */
    it[1].hidden = false, it[1].logits = true;
    ck_assert_int_eq(eng_step_hidden(m, it, 2, lg_ref, (size_t)V - 1, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "overlap"), "%s", err);
    ck_assert_int_eq(eng_session_pos(s), 0);
    eng_session_free(s);
    free(ref);
    free(v);
    free(w);
    free(lg_ref);
    test_model_close(m, built);
}

START_TEST(test_hidden_int8) { check_hidden(ENG_INT8); }
END_TEST
START_TEST(test_hidden_float) { check_hidden(ENG_FLOAT); }
END_TEST

Suite *embed_step_suite(void)
{
    Suite *s = suite_create("embed_step");
    TCase *tc = tcase_create("embed_step");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hidden_int8);
    tcase_add_test(tc, test_hidden_float);
    suite_add_tcase(s, tc);
    return s;
}
