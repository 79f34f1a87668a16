/*
 * Suite "swa": sliding-window layers kept as rings in a private KV cache (kv.h,
 * eng_set_swa_step). A gemma2/gemma3/phi3-shaped session longer than its rings gives
 * the same bits as one whose every layer keeps the whole context: prefilled at once, in
 * chunks larger and smaller than the ring's step, decoded one token at a time, in steps
 * mixed with another session, and after a rewind (eng_session_truncate) into what the
 * rings still hold; a rewind past it reports that the session starts again from 0.
 * Pooled sessions (kvsetup.h) keep those layers in ring blocks of their own pool, given
 * back as the window passes: the same bits again, a prefix taken from another session's
 * blocks, and a prefix whose last window's ring blocks were evicted computed again.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "engine.h"
#include "kvpool.h"
#include "kvsetup.h"
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

/* The test's tokens (alt diverges from toks at 90) and the full cache's logits of both:
 * ref for toks, ralt from 90 on for alt. Returns that full session. */
static eng_session *full_refs(const tmodel *t, eng_kv_type kv, int32_t *toks, int32_t *alt, float *ref, float *ralt)
{
    for (int i = 0; i < N; i++) {
        toks[i] = i == 0 ? 1 : (int32_t)(3 + (i * 37) % (t->V - 3));
        alt[i] = i < 90 ? toks[i] : (int32_t)(3 + (i * 11) % (t->V - 3));
    }
    eng_session *f = new_session(t->m, 0, CTX, kv);
    prefill(t->m, f, toks, N, ref);
    ck_assert_int_eq(eng_session_truncate(f, 90), 0);
    prefill(t->m, f, alt + 90, N - 90, ralt + (size_t)90 * t->V);
    return f;
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
    size_t bytes = (size_t)N * V * sizeof(float);
    float *ref = malloc(bytes), *ralt = malloc(bytes), *out = malloc(bytes);
    eng_session *f = full_refs(&t, kv, toks, alt, ref, ralt);

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

/* The pools of model m for type kv, as a worker holds them: one per kind with layers,
 * n_blocks each (ring: ring_blocks), under test names. */
static void make_pools(eng_model *m, eng_kv_type kv, uint32_t n_blocks, uint32_t ring_blocks, kvp *pools[ENG_KV_KINDS],
                       char names[ENG_KV_KINDS][SEG_NAME_MAX])
{
    char err[256];
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        pools[k] = NULL;
        kvp_params p = { .n_blocks = k == ENG_KV_RING ? ring_blocks : n_blocks };
        kvs_ident(m, kv, k, &p.id);
        if (!p.id.n_layer) continue;
        snprintf(names[k], SEG_NAME_MAX, "/llm-kv-%u-test%d-swa%d", (unsigned)geteuid(), (int)getpid(), k);
        kvp_remove(names[k], err, sizeof err);
        ck_assert_msg(kvp_create(names[k], &p, &pools[k], err, sizeof err) == 0, "%s", err);
        kvp_close(&pools[k]); /* the creator's handle has no slot: attach like a worker */
        ck_assert_msg(kvp_attach(names[k], &p.id, &pools[k], err, sizeof err) == 0, "%s", err);
    }
    eng_set_kv_pools(m, pools[ENG_KV_WHOLE], pools[ENG_KV_RING]);
}

/* Nothing referenced or being written, every invariant holding; then removed. */
static void drop_pools(eng_model *m, kvp *pools[ENG_KV_KINDS], char names[ENG_KV_KINDS][SEG_NAME_MAX])
{
    char err[256];
    eng_set_kv_pools(m, NULL, NULL);
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (!pools[k]) continue;
        kvp_stats_t st;
        kvp_stats(pools[k], &st);
        ck_assert_uint_eq(st.referenced, 0);
        ck_assert_uint_eq(st.writing, 0);
        ck_assert_msg(kvp_check(pools[k], err, sizeof err) == 0, "%s", err);
        kvp_close(&pools[k]);
        kvp_remove(names[k], err, sizeof err);
    }
}

/* A pooled ring session against the full private cache: chunks, the ring blocks it
 * holds, a prefix from another session's blocks, rewinds, decode, and a prefix whose
 * last window's ring blocks are gone. */
static void check_pooled(const char *stem, eng_precision prec, eng_kv_type kv)
{
    tmodel t = open_data(stem, prec);
    char why[256];
    if (eng_kv_check(t.m, kv, why, sizeof why) != 0) {
        fprintf(stderr, "swa: %s: %s\n", stem, why);
        test_model_close(t.m, t.built);
        return;
    }
    int V = t.V, wmax = 0;
    const mdl_config *c = eng_config_of(t.m);
    for (int l = 0; l < c->n_layer; l++)
        if (mdl_layer_window(c, l) > wmax) wmax = mdl_layer_window(c, l);
    int32_t toks[N], alt[N];
    size_t bytes = (size_t)N * V * sizeof(float);
    float *ref = malloc(bytes), *ralt = malloc(bytes), *out = malloc(bytes);
    eng_session *f = full_refs(&t, kv, toks, alt, ref, ralt);
    uint64_t full = eng_session_kv_bytes(f);
    eng_session_free(f);

    kvp *pools[ENG_KV_KINDS];
    char names[ENG_KV_KINDS][SEG_NAME_MAX];
    make_pools(t.m, kv, 64, 12, pools, names);
    ck_assert_ptr_nonnull(pools[ENG_KV_RING]);
    char err[512];
    eng_session *a = eng_session_new(t.m, CTX, kv, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    int cuts[] = { 7, 30, 1, 17, 16, 29 }; /* sums to N */
    for (int k = 0, done = 0; k < 6; done += cuts[k++])
        prefill(t.m, a, toks + done, cuts[k], out + (size_t)done * V);
    same_rows(out, ref, N, V, "pooled, prefill in chunks", stem);
    int held[ENG_KV_KINDS], lo = (N - wmax + 1) / 16;
    eng_session_kv_held(a, held);
    ck_assert_int_eq(held[ENG_KV_WHOLE], pools[ENG_KV_WHOLE] ? (N + 15) / 16 : 0);
    ck_assert_int_eq(held[ENG_KV_RING], (N + 15) / 16 - lo); /* its last window's tiles */
    ck_assert_msg(eng_session_kv_bytes(a) < full, "%s: the pooled session is not smaller", stem);

    /* another session takes a's published prefix: whole blocks and the last window's ring blocks */
    eng_session *b = eng_session_new(t.m, CTX, kv, err, sizeof err);
    ck_assert_int_eq(eng_session_reuse(b, toks, N - 1), (N - 1) / 16 * 16);
    prefill(t.m, b, toks + (N - 1) / 16 * 16, N - (N - 1) / 16 * 16, out);
    same_rows(out, ref + (size_t)((N - 1) / 16 * 16) * V, N - (N - 1) / 16 * 16, V, "after a reused prefix", stem);
    ck_assert_int_eq(eng_session_truncate(b, 95), 0); /* 95's window is still held */
    prefill(t.m, b, toks + 95, N - 95, out);
    same_rows(out, ref + (size_t)95 * V, N - 95, V, "pooled, re-prefill after a rewind to 95", stem);
    ck_assert_int_eq(eng_session_truncate(b, 90), 0);
    prefill(t.m, b, alt + 90, N - 90, out);
    same_rows(out, ralt + (size_t)90 * V, N - 90, V, "pooled, a divergent turn at 90", stem);
    ck_assert_int_eq(eng_session_truncate(b, 40), -1); /* 40's window was given back */
    ck_assert_int_eq(eng_session_pos(b), 0);
    ck_assert_int_eq(eng_session_reuse(b, toks, 40), 32); /* published and cached */
    prefill(t.m, b, toks + 32, N - 32, out);
    same_rows(out, ref + (size_t)32 * V, N - 32, V, "pooled, from a prefix found again", stem);
    eng_session_free(b);

    /* decode one token at a time */
    eng_session *d = eng_session_new(t.m, CTX, kv, err, sizeof err);
    for (int i = 0; i < N; i++) {
        eng_session *one = d;
        ck_assert_msg(eng_decode(t.m, &one, toks + i, 1, out + (size_t)i * V, err, sizeof err) == 0, "%s", err);
    }
    same_rows(out, ref, N, V, "pooled, decode one token at a time", stem);
    eng_session_free(d);
    eng_session_free(a);

    /* every cached ring block evicted: the whole blocks are there, no window is: nothing
     * is taken (no reference kept), and the prompt is computed again */
    kvp *ring = pools[ENG_KV_RING];
    int got[64], n = 0;
    while (n < 64 && (got[n] = kvp_alloc(ring)) >= 0) n++;
    for (int i = 0; i < n; i++) kvp_release(ring, got[i]);
    eng_session *g = eng_session_new(t.m, CTX, kv, err, sizeof err);
    ck_assert_int_eq(eng_session_reuse(g, toks, N - 1), 0);
    eng_session_kv_held(g, held);
    ck_assert(held[ENG_KV_WHOLE] == 0 && held[ENG_KV_RING] == 0);
    prefill(t.m, g, toks, N, out);
    same_rows(out, ref, N, V, "pooled, after the ring blocks were evicted", stem);
    eng_session_free(g);
    drop_pools(t.m, pools, names);
    free(ref); free(ralt); free(out);
    test_model_close(t.m, t.built);
}

/* A ring pool with too few blocks for a session's window and one step: the step fails
 * with "KV pool full", the pools stay consistent. */
static void check_pooled_full(const char *stem)
{
    tmodel t = open_data(stem, ENG_NATIVE);
    kvp *pools[ENG_KV_KINDS];
    char names[ENG_KV_KINDS][SEG_NAME_MAX], err[512];
    make_pools(t.m, ENG_KV_F16, 64, 2, pools, names);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 3 + i;
    eng_session *s = eng_session_new(t.m, CTX, ENG_KV_F16, err, sizeof err);
    ck_assert_int_eq(eng_prefill(t.m, s, toks, 32, NULL, false, err, sizeof err), 0); /* 2 tiles */
    int need[ENG_KV_KINDS], peak[ENG_KV_KINDS], held[ENG_KV_KINDS];
    eng_session_kv_need(s, 32, 32, need);
    eng_session_kv_held(s, held);
    ck_assert_int_eq(need[ENG_KV_RING], 2);
    ck_assert_int_eq(held[ENG_KV_RING], 1); /* tile 0 is past every window from 32 on */
    ck_assert_int_eq(eng_prefill(t.m, s, toks + 32, 32, NULL, false, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "KV pool full") != NULL, "%s", err);
    ck_assert_int_eq(eng_session_pos(s), 32);
    kvs_peak(eng_config_of(t.m), 1000, 16, peak); /* a window and a step, whatever the length */
    ck_assert_int_eq(peak[ENG_KV_WHOLE], pools[ENG_KV_WHOLE] ? 63 : 0);
    ck_assert_int_lt(peak[ENG_KV_RING], 5);
    eng_session_free(s);
    drop_pools(t.m, pools, names);
    test_model_close(t.m, t.built);
}

/* Removes the pools named after model m's segment (kvs_name), where they exist. */
static void remove_model_pools(const eng_model *m)
{
    char name[SEG_NAME_MAX], err[256];
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        kvs_name(eng_segment_name(m), k, name);
        kvp_remove(name, err, sizeof err);
    }
}

/* kvs_open sizes the two pools of a gemma3 model from one --kv-pool SIZE: the ring pool
 * in the ratio of one session's most ring blocks to its whole blocks. */
START_TEST(test_pool_sizes)
{
    tmodel t = open_data("gemma3-tiny-Q8_0", ENG_NATIVE);
    char err[512], name[SEG_NAME_MAX];
    kvs_spec ks = { .kv = ENG_KV_F16, .n_ctx = 1024, .step = 512 };
    ck_assert_int_eq(kvs_parse("4096", &ks, err, sizeof err), 0);
    kvp *m[ENG_KV_KINDS], *w[ENG_KV_KINDS];
    remove_model_pools(t.m); /* a pipeline's, kept by design, would be reused at their own size */
    ck_assert_msg(kvs_open(t.m, &ks, 1, m, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(kvs_open(t.m, &ks, 0, w, err, sizeof err) == 0, "%s", err);
    int peak[ENG_KV_KINDS];
    kvs_peak(eng_config_of(t.m), 1024, 512, peak);
    ck_assert_int_eq(peak[ENG_KV_WHOLE], 64);
    ck_assert_int_lt(peak[ENG_KV_RING], 64);
    ck_assert_uint_eq(kvp_geometry_of(m[ENG_KV_WHOLE])->n_blocks, 256);
    ck_assert_uint_eq(kvp_geometry_of(m[ENG_KV_RING])->n_blocks, (256u * (unsigned)peak[ENG_KV_RING] + 63) / 64);
    ck_assert_uint_eq(kvp_geometry_of(w[ENG_KV_RING])->id.kind, ENG_KV_RING);
    ck_assert_uint_eq(kvp_geometry_of(w[ENG_KV_RING])->id.n_layer, (uint32_t)kvs_layers(eng_config_of(t.m), ENG_KV_RING));
    kvs_close(w);
    kvs_close(m);
    for (int k = 0; k < ENG_KV_KINDS; k++) { /* removed with the segment: named after it */
        ck_assert_int_eq(kvs_name(eng_segment_name(t.m), k, name), 0);
        ck_assert_int_eq(kvp_remove(name, err, sizeof err), 0);
    }
    ck_assert(strstr(name, "-ring") != NULL);
    /* bytes: both pools in 8 MiB, each blocks in that ratio */
    ck_assert_int_eq(kvs_parse("8M", &ks, err, sizeof err), 0);
    ck_assert_msg(kvs_open(t.m, &ks, 1, m, err, sizeof err) == 0, "%s", err);
    uint64_t total = kvp_geometry_of(m[0])->total_bytes + kvp_geometry_of(m[1])->total_bytes;
    ck_assert(total <= 8ull << 20 && total > 7ull << 20);
    double ratio = (double)kvp_geometry_of(m[1])->n_blocks / kvp_geometry_of(m[0])->n_blocks;
    ck_assert(fabs(ratio - (double)peak[ENG_KV_RING] / 64) < 0.05);
    kvs_close(m);
    remove_model_pools(t.m);
    test_model_close(t.m, t.built);
}
END_TEST

START_TEST(test_pooled_rings)
{
    check_pooled("gemma3-tiny-Q8_0", ENG_NATIVE, ENG_KV_F16);
    check_pooled("gemma3-tiny-Q8_0", ENG_NATIVE, ENG_KV_Q8_0);
    check_pooled("gemma3-tiny-f32", ENG_FLOAT, ENG_KV_F32);
    check_pooled("gemma2-tiny-Q8_0", ENG_NATIVE, ENG_KV_F16);
    check_pooled("phi3-tiny-Q8_0", ENG_NATIVE, ENG_KV_F16); /* no whole layers: a ring pool alone */
    check_pooled_full("gemma3-tiny-Q8_0");
    check_pooled_full("phi3-tiny-Q8_0");
}
END_TEST

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
    tcase_add_test(tc, test_pooled_rings);
    tcase_add_test(tc, test_pool_sizes);
    suite_add_tcase(s, tc);
    return s;
}
