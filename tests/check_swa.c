/*
 * Suite "swa": sliding-window layers kept as rings in a private KV cache (kv.h,
 * eng_set_swa_step). A gemma2/gemma3/phi3-shaped session longer than its rings gives
 * the same bits as one whose every layer keeps the whole context: prefilled at once, in
 * chunks larger and smaller than the ring's step, decoded one token at a time, in steps
 * mixed with another session, and after a rewind (eng_session_truncate) into what the
 * rings still hold; a rewind past it reports that the session starts again from 0.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "segment.h"
#include "test_model.h"

#define N    100 /* tokens: many times a ring of window 6 + step 16 (32 positions) */
#define CTX  120 /* not whole tiles: the global layers' last tile is partial */
#define STEP 16

typedef struct {
    eng_model *m;
    bool       built;
    int        V;
} tmodel;

static tmodel open_data(const char *stem, eng_precision prec)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "tests/data/%s/%s.gguf", stem, stem);
    eng_open_info info;
    tmodel t = { eng_open(path, prec, &info, err, sizeof err), false, 0 };
    ck_assert_msg(t.m != NULL, "eng_open %s (run from the repository root): %s", path, err);
    ck_assert_int_eq(eng_set_threads(t.m, 2), 0);
    t.built = info.converted;
    t.V = eng_config_of(t.m)->n_vocab;
    return t;
}

static eng_session *new_session(eng_model *m, int step, int ctx, eng_kv_type kv)
{
    char err[512];
    eng_set_swa_step(m, step);
    eng_session *s = eng_session_new(m, ctx, kv, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    eng_set_swa_step(m, ENG_SWA_STEP_DEFAULT);
    return s;
}

static void prefill(eng_model *m, eng_session *s, const int32_t *t, int n, float *out)
{
    char err[512];
    ck_assert_msg(eng_prefill(m, s, t, n, out, out != NULL, err, sizeof err) == 0, "%s", err);
}

static void same_rows(const float *a, const float *b, int rows, int V, const char *what, const char *stem)
{
    for (int r = 0; r < rows; r++)
        ck_assert_msg(memcmp(a + (size_t)r * V, b + (size_t)r * V, (size_t)V * sizeof(float)) == 0,
                      "%s: %s: row %d differs from the full cache's", stem, what, r);
}

/* Ring session against full caches: one pass, chunks, decode, truncate. */
static void check_ring(const char *stem, eng_precision prec, eng_kv_type kv)
{
    tmodel t = open_data(stem, prec);
    char why[256];
    if (eng_kv_check(t.m, kv, why, sizeof why) != 0) { /* q8_0 and a head_dim that is not whole blocks */
        fprintf(stderr, "swa: %s: %s\n", stem, why);
        test_model_close(t.m, t.built);
        return;
    }
    int V = t.V;
    int32_t toks[N], alt[N];
    for (int i = 0; i < N; i++) {
        toks[i] = i == 0 ? 1 : (int32_t)(3 + (i * 37) % (V - 3));
        alt[i] = i < 90 ? toks[i] : (int32_t)(3 + (i * 11) % (V - 3));
    }
    size_t bytes = (size_t)N * V * sizeof(float);
    float *ref = malloc(bytes), *ralt = malloc(bytes), *out = malloc(bytes);
    eng_session *f = new_session(t.m, 0, CTX, kv);
    prefill(t.m, f, toks, N, ref);
    ck_assert_int_eq(eng_session_truncate(f, 90), 0);
    prefill(t.m, f, alt + 90, N - 90, ralt + (size_t)90 * V);

    eng_session *r = new_session(t.m, STEP, CTX, kv);
    ck_assert_msg(eng_session_kv_bytes(r) < eng_session_kv_bytes(f), "%s: the ring session is not smaller", stem);
    prefill(t.m, r, toks, N, out); /* passes of STEP tokens */
    same_rows(out, ref, N, V, "one prefill call", stem);
    eng_session_reset(r);
    int cuts[] = { 7, 30, 1, 17, 16, 29 }; /* sums to N */
    for (int c = 0, done = 0; c < 6; done += cuts[c++])
        prefill(t.m, r, toks + done, cuts[c], out + (size_t)done * V);
    same_rows(out, ref, N, V, "prefill in chunks", stem);
    /* back into the ring: 95's window (90..94) is still there */
    ck_assert_int_eq(eng_session_truncate(r, 95), 0);
    ck_assert_int_eq(eng_session_pos(r), 95);
    prefill(t.m, r, toks + 95, N - 95, out);
    same_rows(out, ref + (size_t)95 * V, N - 95, V, "re-prefill after a rewind to 95", stem);
    /* a turn that diverges at 90 */
    ck_assert_int_eq(eng_session_truncate(r, 90), 0);
    prefill(t.m, r, alt + 90, N - 90, out);
    same_rows(out, ralt + (size_t)90 * V, N - 90, V, "a divergent turn at 90", stem);
    /* past the ring: the session keeps nothing and says so; from 0 it is the same again */
    ck_assert_int_eq(eng_session_truncate(r, 40), -1);
    ck_assert_int_eq(eng_session_pos(r), 0);
    for (int i = 0; i < N; i++) {
        char err[512];
        eng_session *one = r;
        ck_assert_msg(eng_decode(t.m, &one, toks + i, 1, out + (size_t)i * V, err, sizeof err) == 0, "%s", err);
    }
    same_rows(out, ref, N, V, "decode one token at a time", stem);
    ck_assert_int_eq(eng_session_truncate(r, 0), 0); /* always whole */
    prefill(t.m, r, toks, 40, out);
    same_rows(out, ref, 40, V, "prefill after a rewind to 0", stem);
    eng_session_free(r);
    eng_session_free(f);
    free(ref); free(ralt); free(out);
    test_model_close(t.m, t.built);
}

/* One eng_step with more than the ring's step of a session's tokens, mixed with another
 * session's decode token: split into passes, the same rows as the full caches'. */
static void check_step(const char *stem, eng_precision prec)
{
    tmodel t = open_data(stem, prec);
    int V = t.V, n = 40;
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = i == 0 ? 1 : (int32_t)(3 + (i * 53) % (V - 3));
    float *ref = malloc((size_t)(n + 1) * V * sizeof(float)), *out = malloc((size_t)(n + 1) * V * sizeof(float));
    for (int ring = 0; ring < 2; ring++) {
        eng_session *a = new_session(t.m, ring ? STEP : 0, CTX, ENG_KV_F16);
        eng_session *b = new_session(t.m, ring ? STEP : 0, CTX, ENG_KV_F16);
        prefill(t.m, a, toks, 50, NULL);
        prefill(t.m, b, toks + 1, 60, NULL);
        eng_item it[64];
        for (int i = 0; i < n; i++) it[i] = (eng_item){ a, toks[50 + i], true, false };
        it[n] = (eng_item){ b, toks[61], true, false };
        char err[512];
        ck_assert_msg(eng_step(t.m, it, n + 1, ring ? out : ref, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(eng_session_pos(a), 50 + n);
        ck_assert_int_eq(eng_session_pos(b), 61);
        eng_session_free(a);
        eng_session_free(b);
    }
    same_rows(out, ref, n + 1, V, "a step split into passes", stem);
    free(ref);
    free(out);
    test_model_close(t.m, t.built);
}

START_TEST(test_gemma3_ring)
{
    check_ring("gemma3-tiny-f32", ENG_FLOAT, ENG_KV_F32);
    check_ring("gemma3-tiny-Q8_0", ENG_NATIVE, ENG_KV_F16);
    check_ring("gemma3-tiny-Q8_0", ENG_NATIVE, ENG_KV_Q8_0);
    check_step("gemma3-tiny-Q8_0", ENG_NATIVE);
}
END_TEST

START_TEST(test_gemma2_ring)
{
    check_ring("gemma2-tiny-Q8_0", ENG_NATIVE, ENG_KV_F16);
    check_ring("gemma2-tiny-Q8_0", ENG_NATIVE, ENG_KV_Q8_0);
    check_step("gemma2-tiny-Q8_0", ENG_NATIVE);
}
END_TEST

START_TEST(test_phi3_ring) /* every layer slides (window 8) */
{
    check_ring("phi3-tiny-Q8_0", ENG_NATIVE, ENG_KV_F16);
}
END_TEST

/* The default step (512): a gemma3 session of 1024 positions keeps rings of 528; 600
 * tokens (two prefill passes; one step of 600, two passes) give the full cache's bits. */
START_TEST(test_default_step)
{
    tmodel t = open_data("gemma3-tiny-Q8_0", ENG_NATIVE);
    int V = t.V, n = 600;
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    for (int i = 0; i < n; i++) toks[i] = i == 0 ? 1 : (int32_t)(3 + (i * 7919) % (V - 3));
    float *ref = malloc((size_t)V * sizeof(float)), *out = malloc((size_t)V * sizeof(float));
    eng_session *f = new_session(t.m, 0, 1024, ENG_KV_F16), *r = new_session(t.m, ENG_SWA_STEP_DEFAULT, 1024, ENG_KV_F16);
    const mdl_config *c = eng_config_of(t.m);
    uint64_t row = (uint64_t)c->n_head_kv * c->head_dim * 2 * 2; /* f16 K and V of one position */
    int slide = 0;
    for (int l = 0; l < c->n_layer; l++) slide += mdl_layer_window(c, l) > 0;
    ck_assert_uint_eq(eng_session_kv_bytes(f), row * 1024 * c->n_layer);
    ck_assert_uint_eq(eng_session_kv_bytes(r), row * (1024 * (c->n_layer - slide) + 528 * slide));
    prefill(t.m, f, toks, n, NULL);
    ck_assert_int_eq(eng_session_truncate(f, n - 1), 0);
    prefill(t.m, f, toks + n - 1, 1, ref);
    char err[512];
    ck_assert_msg(eng_prefill(t.m, r, toks, n, out, false, err, sizeof err) == 0, "%s", err); /* the last row */
    same_rows(out, ref, 1, V, "600 tokens with the default step", "gemma3-tiny-Q8_0");
    eng_session_reset(r);
    eng_item *it = malloc((size_t)n * sizeof *it);
    for (int i = 0; i < n; i++) it[i] = (eng_item){ r, toks[i], i == n - 1, false };
    ck_assert_msg(eng_step(t.m, it, n, out, err, sizeof err) == 0, "%s", err);
    same_rows(out, ref, 1, V, "a step of 600 tokens of one session", "gemma3-tiny-Q8_0");
    eng_session_free(f);
    eng_session_free(r);
    free(it); free(toks); free(ref); free(out);
    test_model_close(t.m, t.built);
}
END_TEST

Suite *swa_suite(void)
{
    Suite *s = suite_create("swa");
    TCase *tc = tcase_create("swa");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gemma3_ring);
    tcase_add_test(tc, test_gemma2_ring);
    tcase_add_test(tc, test_phi3_ring);
    tcase_add_test(tc, test_default_step);
    suite_add_tcase(s, tc);
    return s;
}
