/*
 * Tests for samplerd's sampling library (suite "sampler"; parameters and the RNG are in
 * check_sampler_params.c): each sampler against hand-computed rows, the partial
 * selection against full sorts, and smp_sample end to end (greedy = argmax with ties to
 * the lowest id, a chi-square test of temperature-1 sampling, the same token from
 * another process, NaN/Inf rows, carried mirostat state).
 * Owner: sampler (issue 5).
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sampler.h"

#define TOL 1e-5

static char err[256];

/* A deterministic pseudo-random float row, normal(0, sd) via Box-Muller. */
static void fill_normal(float *x, int n, uint32_t seed, float sd)
{
    for (int i = 0; i < n; i++) {
        double u1 = smp_rng_uniform(seed, 99, (uint32_t)i, 0) + 1e-12;
        double u2 = smp_rng_uniform(seed, 99, (uint32_t)i, 1);
        x[i] = (float)(sd * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static smp_cands cands_of(smp_tok *buf, const float *logits, int n)
{
    for (int i = 0; i < n; i++)
        buf[i] = (smp_tok){ i, logits[i], 0 };
    return (smp_cands){ buf, n, 0 };
}

static int has_id(const smp_cands *c, int id)
{
    for (int i = 0; i < c->n; i++)
        if (c->data[i].id == id)
            return 1;
    return 0;
}

/* ---- parameters ---- */


/* ---- the samplers on small rows ---- */

/* logits ln(0.4), ln(0.3), ln(0.2), ln(0.1): probabilities 0.4 0.3 0.2 0.1 */
static const float ROW4[4] = { -0.91629073f, -1.2039728f, -1.6094379f, -2.3025851f };

START_TEST(test_softmax_and_dist)
{
    smp_tok buf[8];
    smp_cands c = cands_of(buf, ROW4, 4);
    smp_softmax(&c);
    ck_assert_float_eq_tol(c.data[0].p, 0.4, TOL);
    ck_assert_float_eq_tol(c.data[3].p, 0.1, TOL);
    ck_assert_int_eq(smp_dist(&c, 0.05), 0);
    ck_assert_int_eq(smp_dist(&c, 0.45), 1);   /* cum 0.4, 0.7 */
    ck_assert_int_eq(smp_dist(&c, 0.75), 2);   /* cum 0.9 */
    ck_assert_int_eq(smp_dist(&c, 0.95), 3);
    ck_assert_int_eq(smp_dist(&c, 0.0), 0);
    /* a -inf logit is never drawn */
    float row[3] = { 0.0f, -INFINITY, 0.0f };
    c = cands_of(buf, row, 3);
    ck_assert_int_eq(smp_dist(&c, 0.4999), 0);
    ck_assert_int_eq(smp_dist(&c, 0.5001), 2);
    ck_assert_int_eq(smp_dist(&c, 0.9999999), 2);
}
END_TEST

START_TEST(test_top_k)
{
    const float row[6] = { 1, 5, 3, 5, -2, 4 };
    smp_tok buf[8];
    smp_cands c = cands_of(buf, row, 6);
    smp_top_k(&c, 3, 0);
    ck_assert_int_eq(c.n, 3);
    /* sorted, ties to the lowest id */
    ck_assert_int_eq(c.data[0].id, 1);
    ck_assert_int_eq(c.data[1].id, 3);
    ck_assert_int_eq(c.data[2].id, 5);
    c = cands_of(buf, row, 6);
    smp_top_k(&c, 1, 4);   /* min_keep raises k */
    ck_assert_int_eq(c.n, 4);
    c = cands_of(buf, row, 6);
    smp_top_k(&c, 0, 0);   /* disabled */
    ck_assert_int_eq(c.n, 6);
    c = cands_of(buf, row, 6);
    smp_top_k(&c, 100, 0);
    ck_assert_int_eq(c.n, 6);
}
END_TEST

START_TEST(test_top_p)
{
    smp_tok buf[8];
    smp_cands c = cands_of(buf, ROW4, 4);
    smp_top_p(&c, 0.6f, 0);    /* 0.4 + 0.3 >= 0.6 */
    ck_assert_int_eq(c.n, 2);
    ck_assert(has_id(&c, 0) && has_id(&c, 1));
    c = cands_of(buf, ROW4, 4);
    smp_top_p(&c, 0.75f, 0);
    ck_assert_int_eq(c.n, 3);
    c = cands_of(buf, ROW4, 4);
    smp_top_p(&c, 0.1f, 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.data[0].id, 0);
    c = cands_of(buf, ROW4, 4);
    smp_top_p(&c, 0.1f, 3);    /* min_keep */
    ck_assert_int_eq(c.n, 3);
    c = cands_of(buf, ROW4, 4);
    smp_top_p(&c, 1.0f, 0);
    ck_assert_int_eq(c.n, 4);
}
END_TEST

START_TEST(test_min_p)
{
    smp_tok buf[8];
    smp_cands c = cands_of(buf, ROW4, 4);
    smp_min_p(&c, 0.6f, 0);    /* keep p >= 0.24 */
    ck_assert_int_eq(c.n, 2);
    ck_assert(has_id(&c, 0) && has_id(&c, 1));
    c = cands_of(buf, ROW4, 4);
    smp_min_p(&c, 0.4f, 0);    /* keep p >= 0.16 */
    ck_assert_int_eq(c.n, 3);
    c = cands_of(buf, ROW4, 4);
    smp_min_p(&c, 0.9f, 3);    /* too few pass: keep the best min_keep */
    ck_assert_int_eq(c.n, 3);
    ck_assert(has_id(&c, 0) && has_id(&c, 1) && has_id(&c, 2));
    c = cands_of(buf, ROW4, 4);
    smp_min_p(&c, 0.0f, 0);
    ck_assert_int_eq(c.n, 4);
}
END_TEST

START_TEST(test_typical)
{
    /* H = 1.27985; |-ln p - H| = 0.3636 0.0759 0.3296 1.0227 -> order ids 1, 2, 0, 3 */
    smp_tok buf[8];
    smp_cands c = cands_of(buf, ROW4, 4);
    smp_typical(&c, 0.45f, 0); /* cum 0.3, 0.5 > 0.45 */
    ck_assert_int_eq(c.n, 2);
    ck_assert(has_id(&c, 1) && has_id(&c, 2));
    ck_assert(!has_id(&c, 0));   /* the most probable token is not typical */
    c = cands_of(buf, ROW4, 4);
    smp_typical(&c, 0.75f, 0); /* 0.3 + 0.2 + 0.4 */
    ck_assert_int_eq(c.n, 3);
    ck_assert(!has_id(&c, 3));
    c = cands_of(buf, ROW4, 4);
    smp_typical(&c, 0.2f, 2);  /* min_keep */
    ck_assert_int_eq(c.n, 2);
}
END_TEST

START_TEST(test_top_n_sigma)
{
    /* mean 3.8, std 4.665: 1 sigma keeps logits >= 5.335 */
    const float row[5] = { 10, 9, 0, 0, 0 };
    smp_tok buf[8];
    smp_cands c = cands_of(buf, row, 5);
    smp_top_n_sigma(&c, 1.0f);
    ck_assert_int_eq(c.n, 2);
    c = cands_of(buf, row, 5);
    smp_top_n_sigma(&c, 2.5f); /* 10 - 11.66 < 0: all stay */
    ck_assert_int_eq(c.n, 5);
    c = cands_of(buf, row, 5);
    smp_top_n_sigma(&c, -1.0f);
    ck_assert_int_eq(c.n, 5);
}
END_TEST

START_TEST(test_xtc)
{
    smp_tok buf[8];
    smp_cands c = cands_of(buf, ROW4, 4);
    smp_xtc(&c, 1.0f, 0.25f, 0, 0.5);  /* 0.4 and 0.3 pass: drop 0.4 */
    ck_assert_int_eq(c.n, 3);
    ck_assert(!has_id(&c, 0) && has_id(&c, 1) && has_id(&c, 2) && has_id(&c, 3));
    c = cands_of(buf, ROW4, 4);
    smp_xtc(&c, 0.5f, 0.25f, 0, 0.9);  /* coin says no */
    ck_assert_int_eq(c.n, 4);
    c = cands_of(buf, ROW4, 4);
    smp_xtc(&c, 1.0f, 0.35f, 0, 0.1);  /* only one above: nothing */
    ck_assert_int_eq(c.n, 4);
    c = cands_of(buf, ROW4, 4);
    smp_xtc(&c, 1.0f, 0.15f, 0, 0.1);  /* 0.4 0.3 0.2 pass: keep 0.2 and 0.1 */
    ck_assert_int_eq(c.n, 2);
    ck_assert(has_id(&c, 2) && has_id(&c, 3));
    c = cands_of(buf, ROW4, 4);
    smp_xtc(&c, 1.0f, 0.15f, 3, 0.1);  /* min_keep forbids */
    ck_assert_int_eq(c.n, 4);
    c = cands_of(buf, ROW4, 4);
    smp_xtc(&c, 1.0f, 0.6f, 0, 0.1);   /* threshold > 0.5 disables */
    ck_assert_int_eq(c.n, 4);
}
END_TEST

START_TEST(test_temperature)
{
    const float row[3] = { 1, 2, 2 };
    smp_tok buf[8];
    smp_cands c = cands_of(buf, row, 3);
    smp_temperature(&c, 0.5f, 0, 1);
    ck_assert_float_eq_tol(c.data[0].logit, 2.0, TOL);
    ck_assert_float_eq_tol(c.data[1].logit, 4.0, TOL);
    c = cands_of(buf, row, 3);
    smp_temperature(&c, 0.0f, 0, 1);   /* greedy, tie to the lowest id */
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.data[0].id, 1);
    /* dynatemp: a uniform row has normalised entropy 1, so t = temp + range */
    const float flat[2] = { 1, 1 };
    c = cands_of(buf, flat, 2);
    smp_temperature(&c, 1.0f, 0.5f, 1.0f);
    ck_assert_float_eq_tol(c.data[0].logit, 1 / 1.5, TOL);
    /* a peaked row (entropy ~0) gets temp - range */
    const float peak[2] = { 0, -100 };
    c = cands_of(buf, peak, 2);
    smp_temperature(&c, 1.0f, 0.5f, 1.0f);
    ck_assert_float_eq_tol(c.data[1].logit, -100 / 0.5, 1e-2);
}
END_TEST

START_TEST(test_mirostat)
{
    /* v2: p 0.5 0.25 0.125 0.125, mu 2.5 keeps surprise <= 2.5: ids 0, 1 -> 2/3 1/3;
     * u 0.9 draws id 1: surprise log2 3, mu = 2.5 - 0.1 (1.585 - 5) */
    const float row[4] = { 0, -0.69314718f, -1.3862944f, -1.3862944f };
    smp_tok buf[8];
    smp_cands c = cands_of(buf, row, 4);
    float mu = 2.5f;
    int idx = smp_mirostat_v2(&c, 5.0f, 0.1f, &mu, 0.9);
    ck_assert_int_eq(c.n, 2);
    ck_assert_int_eq(c.data[idx].id, 1);
    ck_assert_float_eq_tol(mu, 2.5 - 0.1 * (log2(3.0) - 5.0), 1e-4);
    /* v1: logits 3 2 1.5 1 0 -1: s_hat 1.78275, mu 2 gives k = 2.22 -> top 2
     * (0.731, 0.269); u 0.7 draws id 0; mu = 2 - 0.1 (-log2 0.731 - 5) */
    const float row6[6] = { 3, 2, 1.5f, 1, 0, -1 };
    c = cands_of(buf, row6, 6);
    mu = 2.0f;
    idx = smp_mirostat(&c, 6, 5.0f, 0.1f, 100, &mu, 0.7);
    ck_assert_int_eq(c.n, 2);
    ck_assert_int_eq(c.data[idx].id, 0);
    ck_assert_float_eq_tol(mu, 2.454805891691695, 1e-4);
    /* a large mu keeps many */
    c = cands_of(buf, row6, 6);
    mu = 10.0f;
    smp_mirostat(&c, 6, 5.0f, 0.1f, 100, &mu, 0.7);
    ck_assert_int_eq(c.n, 6);
}
END_TEST

/* ---- penalties and DRY ---- */

START_TEST(test_penalties)
{
    const float row[4] = { 1, -1, 2, 0.5f };
    const int32_t hist[5] = { 9999, -3, 0, 1, 0 };   /* out-of-range ids are ignored */
    smp_params p = smp_params_default();
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.5f;
    smp_work *w = smp_work_new(4);
    smp_tok buf[4];
    smp_cands c = cands_of(buf, row, 4);
    smp_penalties(&c, &p, hist, 5, w);
    ck_assert_float_eq_tol(c.data[0].logit, 1 / 2.0 - 2 * 0.1 - 0.5, TOL);  /* count 2 */
    ck_assert_float_eq_tol(c.data[1].logit, -1 * 2.0 - 0.1 - 0.5, TOL);     /* count 1 */
    ck_assert_float_eq_tol(c.data[2].logit, 2, TOL);
    ck_assert_float_eq_tol(c.data[3].logit, 0.5, TOL);
    /* the window: only the last token */
    p.repeat_last_n = 1;
    c = cands_of(buf, row, 4);
    smp_penalties(&c, &p, hist, 5, w);
    ck_assert_float_eq_tol(c.data[0].logit, 0.5 - 0.1 - 0.5, TOL);
    ck_assert_float_eq_tol(c.data[1].logit, -1, TOL);
    /* counts were cleared between calls: the same call gives the same answer */
    c = cands_of(buf, row, 4);
    smp_penalties(&c, &p, hist, 5, w);
    ck_assert_float_eq_tol(c.data[0].logit, 0.5 - 0.1 - 0.5, TOL);
    p.repeat_last_n = 0;     /* disabled */
    c = cands_of(buf, row, 4);
    smp_penalties(&c, &p, hist, 5, w);
    ck_assert_float_eq_tol(c.data[0].logit, 1, TOL);
    smp_work_destroy(&w);
    ck_assert_ptr_null(w);
}
END_TEST

/* vocabulary for DRY: ids 0..6 */
static const char *const DRY_TEXT[7] = { "a", "b", "c", "d", "\n", "x", "y" };
static smp_piece_table DRY_VOCAB = { DRY_TEXT, 7 };

/* DRY's penalty per id for history h; returns smp_dry's result. */
static int dry_run(const smp_params *p, const int32_t *h, int n, float out[7], int with_text)
{
    smp_work *w = smp_work_new(7);
    if (with_text)
        smp_work_set_pieces(w, smp_piece_array, &DRY_VOCAB);
    const float zero[7] = { 0 };
    smp_tok buf[7];
    smp_cands c = cands_of(buf, zero, 7);
    int rc = smp_dry(&c, p, h, n, w);
    for (int i = 0; i < 7; i++)
        out[c.data[i].id] = c.data[i].logit;
    smp_work_destroy(&w);
    return rc;
}

START_TEST(test_dry)
{
    smp_params p = smp_params_default();
    p.dry_multiplier = 0.8f;
    float pen[7];
    /* a b c a b: "a b" repeats, so c (which followed it) costs 0.8 * 1.75^0 */
    const int32_t h1[5] = { 0, 1, 2, 0, 1 };
    ck_assert_int_eq(dry_run(&p, h1, 5, pen, 1), 0);
    ck_assert_float_eq_tol(pen[2], -0.8, TOL);
    ck_assert_float_eq_tol(pen[0], 0, TOL);
    ck_assert_float_eq_tol(pen[1], 0, TOL);
    ck_assert_float_eq_tol(pen[3], 0, TOL);
    /* a b c d a b c: a 3-token repeat: d costs 0.8 * 1.75 */
    const int32_t h2[7] = { 0, 1, 2, 3, 0, 1, 2 };
    dry_run(&p, h2, 7, pen, 1);
    ck_assert_float_eq_tol(pen[3], -0.8 * 1.75, TOL);
    ck_assert_float_eq_tol(pen[0], 0, TOL);
    /* a 1-token repeat is below allowed_length 2 */
    const int32_t h3[4] = { 0, 1, 2, 0 };
    dry_run(&p, h3, 4, pen, 1);
    for (int i = 0; i < 7; i++)
        ck_assert_float_eq_tol(pen[i], 0, TOL);
    /* a \n b a \n b: the newline breaks the repeat, so nothing is penalised... */
    const int32_t h4[6] = { 0, 4, 1, 0, 4, 1 };
    dry_run(&p, h4, 6, pen, 1);
    for (int i = 0; i < 7; i++)
        ck_assert_float_eq_tol(pen[i], 0, TOL);
    /* ...while without breakers "a \n b" is a 3-token repeat and a would extend it */
    smp_params nb = p;
    nb.n_breakers = 0;
    dry_run(&nb, h4, 6, pen, 1);
    ck_assert_float_eq_tol(pen[0], -0.8 * 1.75, TOL);
    /* a breaker spread over two tokens ("xy" from x then y) also breaks */
    smp_params xy = p;
    ck_assert_int_eq(smp_param_set(&xy, "dry_sequence_breakers", "[\"xy\"]", err, sizeof err), 0);
    const int32_t h5[8] = { 0, 5, 6, 1, 0, 5, 6, 1 };
    dry_run(&xy, h5, 8, pen, 1);
    for (int i = 0; i < 7; i++)
        ck_assert_float_eq_tol(pen[i], 0, TOL);
    dry_run(&nb, h5, 8, pen, 1);
    ck_assert_float_eq_tol(pen[0], -0.8 * pow(1.75, 2), TOL);
    /* the window: dry_penalty_last_n 3 sees only "c a b": no repeat */
    smp_params win = p;
    win.dry_penalty_last_n = 3;
    dry_run(&win, h1, 5, pen, 1);
    ck_assert_float_eq_tol(pen[2], 0, TOL);
    /* no token text: skipped with a warning, nothing changes */
    ck_assert_int_eq(dry_run(&p, h1, 5, pen, 0), 1);
    ck_assert_float_eq_tol(pen[2], 0, TOL);
    /* disabled */
    p.dry_multiplier = 0;
    ck_assert_int_eq(dry_run(&p, h1, 5, pen, 0), 0);
}
END_TEST

/* A tok_piece-shaped writer over DRY_TEXT, plus id 7: 300 bytes ending in a newline. */
static int write_piece(void *ctx, int32_t id, char *buf, size_t cap)
{
    static char longtext[301];
    memset(longtext, 'z', 299);
    longtext[299] = '\n';
    const char *t = id == 7 ? longtext : id >= 0 && id < 7 ? DRY_TEXT[id] : NULL;
    if (!t)
        return -1;
    size_t n = strlen(t);
    memcpy(buf, t, n < cap ? n : cap);
    return (int)n;
}

START_TEST(test_dry_loaded_pieces)
{
    smp_params p = smp_params_default();
    p.dry_multiplier = 0.8f;
    smp_work *w = smp_work_new(8);
    ck_assert_int_eq(smp_work_load_pieces(w, 8, write_piece, NULL), 0);
    const float zero[8] = { 0 };
    smp_tok buf[8];
    /* "xy" spread over two tokens still breaks the repeat */
    ck_assert_int_eq(smp_param_set(&p, "dry_sequence_breakers", "[\"xy\"]", err, sizeof err), 0);
    const int32_t h5[8] = { 0, 5, 6, 1, 0, 5, 6, 1 };
    smp_cands c = cands_of(buf, zero, 8);
    ck_assert_int_eq(smp_dry(&c, &p, h5, 8, w), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq_tol(c.data[i].logit, 0, TOL);
    /* the 300-byte token's trailing newline (past the 256-byte first read) breaks too */
    p = smp_params_default();
    p.dry_multiplier = 0.8f;
    const int32_t h6[6] = { 0, 7, 1, 0, 7, 1 };
    c = cands_of(buf, zero, 8);
    smp_dry(&c, &p, h6, 6, w);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq_tol(c.data[i].logit, 0, TOL);
    p.n_breakers = 0;   /* control: without breakers "a <long> b" repeats */
    c = cands_of(buf, zero, 8);
    smp_dry(&c, &p, h6, 6, w);
    ck_assert_float_eq_tol(c.data[0].logit, -0.8 * 1.75, TOL);
    /* a new table replaces the old; set_pieces(NULL) drops it */
    ck_assert_int_eq(smp_work_load_pieces(w, 8, write_piece, NULL), 0);
    smp_work_set_pieces(w, NULL, NULL);
    p = smp_params_default();
    p.dry_multiplier = 0.8f;
    c = cands_of(buf, zero, 8);
    ck_assert_int_eq(smp_dry(&c, &p, h6, 6, w), 1);
    smp_work_destroy(&w);
}
END_TEST

/* ---- selection against full sorts ---- */

static int cmp_desc(const void *a, const void *b)
{
    const smp_tok *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

START_TEST(test_partial_selection_matches_sort)
{
    const int n = 5003;
    float *row = malloc(n * sizeof(float));
    smp_tok *ref = malloc(n * sizeof(smp_tok)), *got = malloc(n * sizeof(smp_tok));
    for (int trial = 0; trial < 6; trial++) {
        fill_normal(row, n, (uint32_t)trial, 3.0f);
        if (trial % 2)  /* many ties */
            for (int i = 0; i < n; i++)
                row[i] = floorf(row[i]);
        row[trial * 7] = -INFINITY;
        for (int i = 0; i < n; i++)
            ref[i] = (smp_tok){ i, row[i], 0 };
        qsort(ref, n, sizeof(smp_tok), cmp_desc);
        const int ks[] = { 1, 40, 1000, n };
        for (int j = 0; j < 4; j++) {
            int k = smp_top_k_dense(row, n, ks[j], got);
            ck_assert_int_eq(k, ks[j] < n - 1 ? ks[j] : n - 1);   /* -inf left out */
            for (int i = 0; i < k; i++)
                ck_assert_int_eq(got[i].id, ref[i].id);
            smp_cands c = cands_of(got, row, n);
            smp_sort_prefix(&c, ks[j]);
            ck_assert_int_ge(c.n_sorted, ks[j]);
            for (int i = 0; i < ks[j]; i++)
                ck_assert_int_eq(c.data[i].id, ref[i].id);
        }
        ck_assert_int_eq(smp_argmax(row, n), ref[0].id);
        /* top-p on the whole row equals the prefix of the full sort, both by bins
         * (min_keep 0) and by a growing sorted prefix (min_keep 2) */
        smp_cands c = cands_of(got, row, n);
        smp_top_p(&c, 0.9f, trial % 3 ? 0 : 2);
        double mx = ref[0].logit, s = 0, cum = 0;
        for (int i = 0; i < n; i++)
            s += exp(ref[i].logit - mx);
        int want = 0;
        while (cum < 0.9 * s)
            cum += exp(ref[want++].logit - mx);
        ck_assert_int_le(abs(c.n - want), 1);   /* float vs double sums at the edge */
        qsort(c.data, c.n, sizeof(smp_tok), cmp_desc);   /* the kept set, any order */
        for (int i = 0; i < c.n; i++)
            ck_assert_int_eq(c.data[i].id, ref[i].id);
        /* min_keep wins over a tiny p: exactly the best 50 (bins at 5003 entries, the
         * growing sorted prefix at 1000) */
        for (int len = n; len >= 1000; len -= n - 1000) {
            smp_cands m = cands_of(got, row, len);
            smp_top_p(&m, 0.0001f, 50);
            ck_assert_int_eq(m.n, 50);
            qsort(m.data, m.n, sizeof(smp_tok), cmp_desc);
            smp_tok *sub = malloc(len * sizeof(smp_tok));
            for (int i = 0; i < len; i++)
                sub[i] = (smp_tok){ i, row[i], 0 };
            qsort(sub, len, sizeof(smp_tok), cmp_desc);
            for (int i = 0; i < 50; i++)
                ck_assert_int_eq(m.data[i].id, sub[i].id);
            /* p 0.99 keeps the prefix of the sorted row (grown 64, 256, ... at 1000) */
            m = cands_of(got, row, len);
            smp_top_p(&m, 0.99f, 0);
            double tot = 0, acc = 0;
            for (int i = 0; i < len; i++)
                tot += exp(sub[i].logit - sub[0].logit);
            int need = 0;
            while (acc < 0.99 * tot)
                acc += exp(sub[need++].logit - sub[0].logit);
            ck_assert_int_le(abs(m.n - need), 1);
            ck_assert_int_gt(need, 64);
            qsort(m.data, m.n, sizeof(smp_tok), cmp_desc);
            for (int i = 0; i < m.n; i++)
                ck_assert_int_eq(m.data[i].id, sub[i].id);
            free(sub);
        }
        /* typical-p by bins equals the reference: sort by |surprise - entropy| */
        {
            double z = 0, ent = 0;
            for (int i = 0; i < n; i++)
                z += exp(row[i] - mx);
            for (int i = 0; i < n; i++) {
                double q = exp(row[i] - mx) / z;
                if (q > 0)
                    ent -= q * log(q);
            }
            smp_tok *key = malloc(n * sizeof(smp_tok));
            int nk = 0;
            for (int i = 0; i < n; i++)
                if (row[i] > -INFINITY) {
                    double q = exp(row[i] - mx) / z;
                    key[nk++] = (smp_tok){ i, (float)-fabs(-log(q) - ent), (float)q };
                }
            qsort(key, nk, sizeof(smp_tok), cmp_desc);   /* smallest distance first */
            double tc = 0;
            int tw = 0;
            while (tw < nk && tc <= 0.6)
                tc += key[tw++].p;
            smp_cands t = cands_of(got, row, n);
            smp_typical(&t, 0.6f, 0);
            ck_assert_int_le(abs(t.n - tw), 1);
            int common = 0;
            for (int i = 0; i < tw; i++)
                common += has_id(&t, key[i].id);
            ck_assert_int_ge(common, tw - 1);
            ck_assert_int_gt(tw, 20);
            free(key);
        }
        /* the same straight from the row */
        int kd = smp_top_p_dense(row, n, 0.9f, got);
        ck_assert_int_le(abs(kd - want), 1);
        qsort(got, kd, sizeof(smp_tok), cmp_desc);
        for (int i = 0; i < kd; i++)
            ck_assert_int_eq(got[i].id, ref[i].id);
    }
    free(row);
    free(ref);
    free(got);
}
END_TEST

/* ---- smp_sample ---- */

static smp_params plain_params(uint32_t seed)
{
    smp_params p = smp_params_default();
    p.seed = seed;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    return p;
}

START_TEST(test_greedy_is_argmax)
{
    smp_work *w = smp_work_new(16);
    smp_result r;
    smp_state st;
    smp_params p = smp_params_default();
    p.temperature = 0;
    p.seed = 1;
    smp_state_init(&st, &p, 1);
    const float ties[6] = { 1, 7, 3, 7, 7, -2 };
    ck_assert_int_eq(smp_sample(&p, &st, ties, 6, NULL, 0, -1, &r, w), 1);
    ck_assert_int_eq(r.token, 1);
    /* and for big random rows with plenty of ties, every vocabulary size */
    const int sizes[] = { 512, 32000, 151936 };
    for (int s = 0; s < 3; s++) {
        int n = sizes[s];
        float *row = malloc(n * sizeof(float));
        fill_normal(row, n, (uint32_t)s + 10, 3.0f);
        for (int i = 0; i < n; i++)
            row[i] = roundf(row[i] * 4);   /* plenty of equal maxima */
        int want = 0;
        for (int i = 1; i < n; i++)
            if (row[i] > row[want])
                want = i;
        ck_assert_int_eq(smp_sample(&p, &st, row, n, NULL, 0, -1, &r, w), want);
        /* the same with every sampler on: truncation never removes the argmax */
        smp_params q = p;
        q.top_k = 5;
        q.top_p = 0.5f;
        q.min_p = 0.3f;
        q.top_n_sigma = 1.0f;
        ck_assert_int_eq(smp_sample(&q, &st, row, n, NULL, 0, -1, &r, w), want);
        /* a logit bias can move it */
        ck_assert_int_eq(smp_params_add_bias(&q, want, -INFINITY, err, sizeof err), 0);
        ck_assert_int_ne(smp_sample(&q, &st, row, n, NULL, 0, -1, &r, w), want);
        free(row);
    }
    smp_work_destroy(&w);
}
END_TEST

/* Temperature-1 sampling of a fixed 8-token distribution over 16000 seeds. */
START_TEST(test_chi_square)
{
    const double prob[8] = { 0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01 };
    float row[8];
    for (int i = 0; i < 8; i++)
        row[i] = (float)log(prob[i]) + 1.5f;   /* a shift must not matter */
    smp_work *w = smp_work_new(8);
    smp_result r;
    smp_state st;
    int hits[8] = {0};
    const int n = 16000;
    for (int s = 0; s < n; s++) {
        smp_params p = plain_params((uint32_t)s * 2654435761u);
        smp_state_init(&st, &p, 42);
        int t = smp_sample(&p, &st, row, 8, NULL, 0, -1, &r, w);
        ck_assert(t >= 0 && t < 8);
        hits[t]++;
    }
    double chi = 0;
    for (int i = 0; i < 8; i++) {
        double e = n * prob[i];
        chi += (hits[i] - e) * (hits[i] - e) / e;
    }
    /* 7 degrees of freedom: 0.1% critical value 24.32 */
    ck_assert_msg(chi < 24.32, "chi-square %f", chi);
    /* and it is not degenerate: a wrong distribution (uniform) must fail the test */
    double chi_u = 0;
    for (int i = 0; i < 8; i++) {
        double e = n / 8.0;
        chi_u += (hits[i] - e) * (hits[i] - e) / e;
    }
    ck_assert(chi_u > 100);
    smp_work_destroy(&w);
}
END_TEST

/* Tokens for (seed, session, step) triples, with the default chain on a 32000 row. */
static void sample_triples(int32_t *out, int n)
{
    const int nv = 32000;
    float *row = malloc(nv * sizeof(float));
    fill_normal(row, nv, 3, 2.0f);
    smp_work *w = smp_work_new(nv);
    smp_params p = smp_params_default();
    p.temperature = 1.5f;
    p.top_k = 200;
    p.min_p = 0.001f;
    smp_result r;
    for (int i = 0; i < n; i++) {
        p.seed = (uint32_t)(i * 7919);
        smp_state st;
        smp_state_init(&st, &p, (uint64_t)i * 31);
        st.step = (uint32_t)i;
        out[i] = smp_sample(&p, &st, row, nv, NULL, 0, -1, &r, w);
    }
    smp_work_destroy(&w);
    free(row);
}

START_TEST(test_same_token_across_processes)
{
    enum { N = 64 };
    int32_t mine[N], theirs[N];
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        sample_triples(theirs, N);
        ssize_t k = write(fds[1], theirs, sizeof theirs);
        _exit(k == (ssize_t)sizeof theirs ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof theirs) {
        ssize_t k = read(fds[0], (char *)theirs + got, sizeof theirs - got);
        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sample_triples(mine, N);
    int distinct = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(mine[i], theirs[i]);
        ck_assert_int_ge(mine[i], 0);
        distinct += i > 0 && mine[i] != mine[0];
    }
    ck_assert_int_gt(distinct, 0);   /* the draws really vary with the key */
}
END_TEST

START_TEST(test_nan_inf_rows)
{
    smp_work *w = smp_work_new(4);
    smp_result r;
    smp_state st;
    smp_params p = smp_params_default();
    p.seed = 3;
    smp_state_init(&st, &p, 0);
    const float allnan[4] = { NAN, NAN, NAN, NAN };
    ck_assert_int_eq(smp_sample(&p, &st, allnan, 4, NULL, 0, -1, &r, w), -1);
    ck_assert_int_eq(r.token, -1);
    ck_assert_ptr_nonnull(strstr(r.err, "logits"));
    ck_assert_uint_eq(st.step, 0);   /* state untouched on error */
    const float allninf[3] = { -INFINITY, -INFINITY, -INFINITY };
    ck_assert_int_eq(smp_sample(&p, &st, allninf, 3, NULL, 0, -1, &r, w), -1);
    /* NaN is never chosen, +inf dominates */
    const float mixed[4] = { NAN, 1.0f, INFINITY, NAN };
    for (uint32_t s = 0; s < 20; s++) {
        st.step = s;
        ck_assert_int_eq(smp_sample(&p, &st, mixed, 4, NULL, 0, -1, &r, w), 2);
    }
    const float one[4] = { NAN, -INFINITY, 0.5f, NAN };
    for (uint32_t s = 0; s < 20; s++) {
        smp_params q = plain_params(s);
        st.step = s;
        ck_assert_int_eq(smp_sample(&q, &st, one, 4, NULL, 0, -1, &r, w), 2);
    }
    /* +inf counts as FLT_MAX: it ties with a real FLT_MAX (greedy takes the lower id,
     * sampling either), on every path (top-k, min-p, the whole row) */
    const float maxes[5] = { 0, FLT_MAX, NAN, INFINITY, 1 };
    smp_params g = plain_params(1);
    g.temperature = 0;
    ck_assert_int_eq(smp_sample(&g, &st, maxes, 5, NULL, 0, -1, &r, w), 1);
    for (int path = 0; path < 3; path++) {
        int seen13[5] = {0};
        for (uint32_t s = 0; s < 64; s++) {
            smp_params q = plain_params(s);
            q.top_k = path == 0 ? 3 : 0;
            q.min_p = path == 1 ? 0.5f : 0.0f;
            int t = smp_sample(&q, &st, maxes, 5, NULL, 0, -1, &r, w);
            ck_assert(t == 1 || t == 3);
            seen13[t]++;
        }
        ck_assert_msg(seen13[1] > 10 && seen13[3] > 10, "path %d: %d %d", path, seen13[1], seen13[3]);
    }
    /* two +inf: a fair choice between them, no NaN probabilities */
    const float twoinf[4] = { INFINITY, 0, INFINITY, 0 };
    int seen[4] = {0};
    for (uint32_t s = 0; s < 64; s++) {
        smp_params q = plain_params(s);
        int t = smp_sample(&q, &st, twoinf, 4, NULL, 0, -1, &r, w);
        ck_assert(t == 0 || t == 2);
        seen[t]++;
    }
    ck_assert(seen[0] > 0 && seen[2] > 0);
    /* everything banned by logit_bias */
    const float row[2] = { 1, 2 };
    smp_params q = plain_params(1);
    smp_params_add_bias(&q, 0, -INFINITY, err, sizeof err);
    smp_params_add_bias(&q, 1, -INFINITY, err, sizeof err);
    ck_assert_int_eq(smp_sample(&q, &st, row, 2, NULL, 0, -1, &r, w), -1);
    /* bad arguments */
    ck_assert_int_eq(smp_sample(&p, &st, row, 0, NULL, 0, -1, &r, w), -1);
    ck_assert_int_eq(smp_sample(&p, &st, row, 2, NULL, 3, -1, &r, w), -1);
    ck_assert_int_eq(smp_sample(&p, &st, NULL, 2, NULL, 0, -1, &r, w), -1);
    smp_work_destroy(&w);
}
END_TEST

START_TEST(test_bias_eos_and_probs)
{
    smp_work *w = smp_work_new(2);   /* grows to the row's size by itself */
    smp_result r;
    smp_state st;
    float row[8];
    const double prob[8] = { 0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01 };
    for (int i = 0; i < 8; i++)
        row[i] = (float)log(prob[i]);
    smp_params p = plain_params(5);
    p.temperature = 0;
    smp_state_init(&st, &p, 0);
    ck_assert_int_eq(smp_sample(&p, &st, row, 8, NULL, 0, 0, &r, w), 0);
    p.ignore_eos = true;
    ck_assert_int_eq(smp_sample(&p, &st, row, 8, NULL, 0, 0, &r, w), 1);
    ck_assert_int_eq(smp_param_set(&p, "logit_bias", "7:+10", err, sizeof err), 0);
    ck_assert_int_eq(smp_sample(&p, &st, row, 8, NULL, 0, 0, &r, w), 7);
    /* n_probs from the raw row: log(prob), best first, whatever was sampled */
    p.n_probs = 3;
    ck_assert_int_eq(smp_sample(&p, &st, row, 8, NULL, 0, 0, &r, w), 7);
    ck_assert_int_eq(r.n_probs, 3);
    ck_assert_int_eq(r.probs[0].id, 0);
    ck_assert_float_eq_tol(r.probs[0].logprob, log(0.3), 1e-4);
    ck_assert_int_eq(r.probs[2].id, 2);
    ck_assert_float_eq_tol(r.probs[2].logprob, log(0.15), 1e-4);
    ck_assert_float_eq_tol(r.logprob, log(0.01), 1e-4);
    /* post-sampling: the final distribution (top_k 2 at temperature 1) */
    p = plain_params(5);
    p.top_k = 2;
    p.n_probs = 5;
    p.post_sampling_probs = true;
    int t = smp_sample(&p, &st, row, 8, NULL, 0, -1, &r, w);
    ck_assert(t == 0 || t == 1);
    ck_assert_int_eq(r.n_probs, 2);
    ck_assert_int_eq(r.n_candidates, 2);
    ck_assert_float_eq_tol(r.probs[0].logprob, log(0.6), 1e-4);
    ck_assert_float_eq_tol(r.probs[1].logprob, log(0.4), 1e-4);
    ck_assert_float_eq_tol(r.logprob, t == 0 ? log(0.6) : log(0.4), 1e-4);
    smp_work_destroy(&w);
}
END_TEST

/* The default chain equals the samplers applied one by one. */
START_TEST(test_chain_composition)
{
    const int n = 4096;
    float *row = malloc(n * sizeof(float));
    smp_tok *buf = malloc(n * sizeof(smp_tok));
    int32_t hist[100];
    for (int i = 0; i < 100; i++)
        hist[i] = (int32_t)(smp_rng_u64(1, 2, (uint32_t)i, 0) % 60);
    smp_work *w = smp_work_new(n);
    smp_params p = smp_params_default();
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.2f;
    p.top_k = 30;
    p.top_p = 0.8f;
    p.min_p = 0.02f;
    p.temperature = 0.7f;
    for (uint32_t s = 0; s < 40; s++) {
        fill_normal(row, n, s, 2.0f);
        for (int i = 0; i < 60; i++)
            row[i] += 4.0f;   /* make the penalised ids matter */
        p.seed = s;
        smp_state st;
        smp_state_init(&st, &p, 9);
        st.step = s;
        smp_result r;
        int got = smp_sample(&p, &st, row, n, hist, 100, -1, &r, w);
        smp_cands c = cands_of(buf, row, n);
        smp_penalties(&c, &p, hist, 100, w);
        smp_top_k(&c, p.top_k, 0);
        smp_top_p(&c, p.top_p, 0);
        smp_min_p(&c, p.min_p, 0);
        smp_temperature(&c, p.temperature, 0, 1);
        int idx = smp_dist(&c, smp_rng_uniform(s, 9, s, 0));
        ck_assert_int_eq(got, c.data[idx].id);
        ck_assert_int_eq(r.n_candidates, c.n);
        ck_assert_uint_eq(st.step, s + 1);
    }
    smp_work_destroy(&w);
    free(row);
    free(buf);
}
END_TEST

/* Mirostat's mu travels in the state: a run restarted from the carried state (a new
 * work, as in a new process) continues exactly like the uninterrupted one. */
START_TEST(test_mirostat_state_carried)
{
    const int n = 2000;
    float *row = malloc(n * sizeof(float));
    for (int m = 1; m <= 2; m++) {
        smp_params p = smp_params_default();
        p.mirostat = m;
        p.seed = 77;
        p.mirostat_tau = 3.0f;
        smp_work *w = smp_work_new(n);
        smp_state a, b;
        smp_state_init(&a, &p, 5);
        ck_assert_float_eq(a.mu, 6.0f);
        int32_t ta[20], tb[20];
        smp_result r;
        for (int i = 0; i < 20; i++) {
            fill_normal(row, n, (uint32_t)i, 2.5f);
            ta[i] = smp_sample(&p, &a, row, n, NULL, 0, -1, &r, w);
            ck_assert_int_ge(ta[i], 0);
            ck_assert_float_eq(r.mu, a.mu);
            if (i == 9)
                b = a;   /* what the request carries */
        }
        ck_assert_float_ne(a.mu, 6.0f);
        smp_work_destroy(&w);
        w = smp_work_new(10);
        for (int i = 10; i < 20; i++) {
            fill_normal(row, n, (uint32_t)i, 2.5f);
            tb[i] = smp_sample(&p, &b, row, n, NULL, 0, -1, &r, w);
            ck_assert_int_eq(tb[i], ta[i]);
        }
        ck_assert_float_eq(a.mu, b.mu);
        smp_work_destroy(&w);
    }
    free(row);
}
END_TEST

/* smp_sample's mirostat works on the row directly; it must agree with the samplers
 * applied to the whole candidate list: v1 the same token and mu, v2 the same kept set
 * (the draw walks it in another order) and mu from the drawn token's probability. */
START_TEST(test_mirostat_dense_matches)
{
    const int n = 3000;
    float *row = malloc(n * sizeof(float));
    smp_tok *buf = malloc(n * sizeof(smp_tok));
    smp_work *w = smp_work_new(n);
    for (int m = 1; m <= 2; m++) {
        for (uint32_t s = 0; s < 12; s++) {
            fill_normal(row, n, s + 100, 2.0f + 0.2f * (float)s);
            smp_params p = smp_params_default();
            p.mirostat = m;
            p.seed = s;
            p.temperature = s % 3 ? 0.9f : 1.0f;
            smp_state st;
            smp_state_init(&st, &p, 4);
            st.mu = 3.0f + 0.5f * (float)s;
            float mu0 = st.mu, mu_ref = mu0;
            smp_result r;
            int tok = smp_sample(&p, &st, row, n, NULL, 0, -1, &r, w);
            ck_assert_int_ge(tok, 0);
            smp_cands c = cands_of(buf, row, n);
            smp_temperature(&c, p.temperature, 0, 1);
            double u = smp_rng_uniform(s, 4, 0, 0);
            if (m == 1) {
                int idx = smp_mirostat(&c, n, p.mirostat_tau, p.mirostat_eta, 100, &mu_ref, u);
                ck_assert_int_eq(tok, c.data[idx].id);
                ck_assert_float_eq_tol(st.mu, mu_ref, 1e-3);
            } else {
                smp_mirostat_v2(&c, p.mirostat_tau, p.mirostat_eta, &mu_ref, u);
                ck_assert_int_le(abs(r.n_candidates - c.n), 1);   /* float edge */
                ck_assert(has_id(&c, tok));
                smp_softmax(&c);
                float pt = 0;
                for (int i = 0; i < c.n; i++)
                    if (c.data[i].id == tok)
                        pt = c.data[i].p;
                if (r.n_candidates == c.n)
                    ck_assert_float_eq_tol(st.mu, mu0 - p.mirostat_eta * (-log2f(pt) - p.mirostat_tau), 1e-3);
            }
            ck_assert_int_eq(r.n_candidates > 0, 1);
        }
    }
    smp_work_destroy(&w);
    free(row);
    free(buf);
}
END_TEST

/* A samplerd on a CPU without AVX2 (or SSE) must give the same bits as one with it. */
START_TEST(test_simd_levels_same_tokens)
{
    const int n = 20011;
    float *row = malloc(n * sizeof(float));
    smp_work *w = smp_work_new(n);
    const char *cfg[][2] = { { "top_k", "40" }, { "top_k", "0" }, { "typical_p", "0.7" },
                             { "mirostat", "1" }, { "mirostat", "2" }, { "n_probs", "5" } };
    for (int k = 0; k < 6; k++) {
        for (uint32_t s = 0; s < 6; s++) {
            fill_normal(row, n, 300 + s, 3.0f);
            smp_params p = smp_params_default();
            p.seed = s;
            p.top_k = 0;
            ck_assert_int_eq(smp_param_set(&p, cfg[k][0], cfg[k][1], err, sizeof err), 0);
            smp_result r[3];
            smp_state st[3];
            for (int level = 0; level <= 2; level++) {
                int old = smp_simd_limit(level);
                smp_state_init(&st[level], &p, 77);
                st[level].step = s;
                ck_assert_int_ge(smp_sample(&p, &st[level], row, n, NULL, 0, -1, &r[level], w), 0);
                smp_simd_limit(old);
            }
            for (int level = 0; level < 2; level++) {
                ck_assert_int_eq(r[level].token, r[2].token);
                ck_assert_int_eq(r[level].n_candidates, r[2].n_candidates);
                ck_assert(r[level].logprob == r[2].logprob);
                ck_assert(st[level].mu == st[2].mu);
                for (int i = 0; i < r[2].n_probs; i++)
                    ck_assert(r[level].probs[i].logprob == r[2].probs[i].logprob);
            }
        }
    }
    smp_work_destroy(&w);
    free(row);
}
END_TEST

/* Threads with a work each share nothing: the same tokens as one thread alone. */
typedef struct {
    uint32_t cfg;
    int32_t  tok[40];
} thread_job;

static void *sample_job(void *arg)
{
    thread_job *j = arg;
    const int n = 8000;
    float *row = malloc(n * sizeof(float));
    smp_work *w = smp_work_new(n);
    smp_params p = smp_params_default();
    p.top_k = j->cfg % 2 ? 0 : 40;   /* the top-p bins (thread-local) or the heap */
    p.typical_p = j->cfg % 3 ? 1.0f : 0.8f;
    for (uint32_t i = 0; i < 40; i++) {
        fill_normal(row, n, i, 3.0f);
        p.seed = i;
        smp_state st;
        smp_state_init(&st, &p, j->cfg);
        smp_result r;
        j->tok[i] = smp_sample(&p, &st, row, n, NULL, 0, -1, &r, w);
    }
    smp_work_destroy(&w);
    free(row);
    return NULL;
}

START_TEST(test_threads_share_nothing)
{
    enum { T = 4 };
    thread_job solo[T], par[T];
    pthread_t th[T];
    for (uint32_t t = 0; t < T; t++) {
        solo[t].cfg = par[t].cfg = t;
        sample_job(&solo[t]);
    }
    for (int t = 0; t < T; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, sample_job, &par[t]), 0);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < 40; i++) {
            ck_assert_int_ge(par[t].tok[i], 0);
            ck_assert_int_eq(par[t].tok[i], solo[t].tok[i]);
        }
}
END_TEST

/* DRY through smp_sample: the token that would continue a repeat loses to its rival. */
START_TEST(test_sample_dry_and_warning)
{
    float row[7] = { 0, 0, 1.0f, 0.9f, 0, 0, 0 };
    const int32_t hist[5] = { 0, 1, 2, 0, 1 };   /* a b c a b: c would repeat */
    smp_params p = smp_params_default();
    p.temperature = 0;
    p.dry_multiplier = 0.8f;
    smp_work *w = smp_work_new(7);
    smp_state st;
    smp_state_init(&st, &p, 0);
    smp_result r;
    ck_assert_int_eq(smp_sample(&p, &st, row, 7, hist, 5, -1, &r, w), 2);  /* no text */
    ck_assert_ptr_nonnull(r.warn);
    ck_assert_ptr_nonnull(strstr(r.warn, "dry"));
    smp_work_set_pieces(w, smp_piece_array, &DRY_VOCAB);
    ck_assert_int_eq(smp_sample(&p, &st, row, 7, hist, 5, -1, &r, w), 3);
    ck_assert_ptr_null(r.warn);
    smp_work_destroy(&w);
}
END_TEST

START_TEST(test_expf)
{
    enum { N = 4099 };
    static float x[N], o[N];
    for (int i = 0; i < N; i++)
        x[i] = -87.0f + 175.0f * (float)smp_rng_uniform(4, 5, (uint32_t)i, 0);
    smp_expf_n(x, o, N);
    double sum = 0;
    for (int i = 0; i < N; i++) {
        float s = smp_expf(x[i]);
        ck_assert_msg(!memcmp(&s, &o[i], sizeof s), "SIMD and scalar differ at %g", x[i]);
        double ref = exp((double)x[i]);
        ck_assert_msg(fabs(s - ref) <= 2.5e-7 * ref, "exp(%g) = %g, want %g", x[i], s, ref);
        sum += smp_expf(x[i] - 3.0f);
    }
    ck_assert_double_eq_tol(smp_sum_exp(x, N, 3.0f), sum, 1e-9 * sum);
    /* every SIMD level against the scalar twin: the same bits for exp, the same kept
     * set for top-p, probabilities to float rounding */
    static float o2[N];
    static smp_tok a[N], b[N];
    smp_expf_n(x, o, N);
    int ka = smp_top_p_dense(x, N, 0.8f, a);
    smp_cands ca = cands_of(a + ka, x, 64);
    smp_softmax(&ca);
    for (int level = 0; level <= 2; level++) {
        int old = smp_simd_limit(level);
        smp_expf_n(x, o2, N);
        ck_assert_msg(!memcmp(o, o2, sizeof o), "SIMD level %d: exp bits differ", level);
        ck_assert_double_eq_tol(smp_sum_exp(x, N, 3.0f), sum, 1e-9 * sum);
        double s0 = smp_sum_exp(x, N, 3.0f);
        smp_simd_limit(0);
        ck_assert_msg(smp_sum_exp(x, N, 3.0f) == s0, "SIMD level %d: sum order differs", level);
        smp_simd_limit(level);
        int kb = smp_top_p_dense(x, N, 0.8f, b);
        ck_assert_int_eq(kb, ka);
        for (int i = 0; i < kb; i++)
            ck_assert_int_eq(b[i].id, a[i].id);
        smp_cands cb = cands_of(b + kb, x, 64);
        smp_softmax(&cb);
        for (int i = 0; i < 64; i++)
            ck_assert_msg(cb.data[i].p == ca.data[i].p, "SIMD level %d: softmax differs", level);
        smp_simd_limit(old);
    }
    ck_assert_float_eq(smp_expf(0), 1.0f);
    ck_assert_float_eq(smp_expf(-INFINITY), 0.0f);
    ck_assert_float_eq(smp_expf(-200.0f), 0.0f);
    ck_assert(isfinite(smp_expf(1000.0f)));
}
END_TEST

/* XTC through smp_sample: its coin is draw 1 of the step, so it fires on the same steps
 * in every process, and when it fires the top token cannot come out. */
START_TEST(test_sample_xtc)
{
    const float row[4] = { -0.91629073f, -1.2039728f, -1.6094379f, -2.3025851f };
    smp_params p = plain_params(8);
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.25f;
    smp_work *w = smp_work_new(4);
    smp_result r;
    int fired = 0, quiet = 0;
    for (uint32_t step = 0; step < 400; step++) {
        smp_state st;
        smp_state_init(&st, &p, 3);
        st.step = step;
        int t = smp_sample(&p, &st, row, 4, NULL, 0, -1, &r, w);
        int coin = smp_rng_uniform(8, 3, step, 1) <= 0.5;
        if (coin) {
            ck_assert_int_ne(t, 0);
            ck_assert_int_eq(r.n_candidates, 3);
            fired++;
        } else {
            ck_assert_int_eq(r.n_candidates, 4);
            quiet += t == 0;
        }
    }
    ck_assert_int_gt(fired, 150);
    ck_assert_int_gt(quiet, 40);   /* without the coin, token 0 is common (p 0.4) */
    smp_work_destroy(&w);
}
END_TEST

/* Hostile inputs: random parameter text, corrupted structs, NaN/Inf rows and bad
 * history ids never crash and always give a token in range or an error. */
START_TEST(test_hostile_inputs)
{
    static const char *const values[] = {
        "nan", "-nan", "inf", "-inf", "-1", "0", "1", "2", "0.5", "1e40", "-1e40", "",
        " ", "abc", "99999999999999999999", "-2147483649", "40", "none", "3:-inf",
        "0:5,1:-inf", "[\"\\n\"]", "[]", "[\"a\",\"b\"]", "kypmxt", "edskypmxt", "e",
        "top_k;dry", "true", "0x10", "1.0000001", "0.9999999", "5:1e39", "[\"\\ud800\"]",
    };
    const int nv = 300;
    float *row = malloc(nv * sizeof(float));
    int32_t hist[80];
    smp_work *w = smp_work_new(1);
    const char *const text[3] = { "\n", "ab", "" };
    smp_piece_table tab = { text, 3 };
    smp_work_set_pieces(w, smp_piece_array, &tab);
    smp_result r;
    int sampled = 0;
    for (uint32_t it = 0; it < 3000; it++) {
        smp_params p = smp_params_default();
        for (int k = 0; k < 4; k++) {
            uint64_t h = smp_rng_u64(11, it, (uint32_t)k, 0);
            const char *name = smp_param_name((int)(h % (uint64_t)smp_param_count()));
            const char *val = values[(h >> 20) % (sizeof values / sizeof values[0])];
            if (smp_param_set(&p, name, val, err, sizeof err) != 0)
                ck_assert_msg(!strncmp(err, name, strlen(name)), "'%s' does not name %s", err, name);
        }
        if (it % 7 == 0) {   /* a corrupted struct, as from a broken peer */
            unsigned char *b = (unsigned char *)&p;
            for (int k = 0; k < 8; k++)
                b[smp_rng_u64(12, it, (uint32_t)k, 0) % sizeof p] = (unsigned char)smp_rng_u64(13, it, (uint32_t)k, 0);
            /* a bool holding 37 is undefined behaviour before any check could run */
            unsigned char v;
            memcpy(&v, &p.ignore_eos, 1);
            p.ignore_eos = v & 1;
            memcpy(&v, &p.post_sampling_probs, 1);
            p.post_sampling_probs = v & 1;
        }
        for (int i = 0; i < nv; i++) {
            uint64_t h = smp_rng_u64(14, it, (uint32_t)i, 0);
            row[i] = h % 50 == 0 ? NAN : h % 50 == 1 ? INFINITY : h % 50 == 2 ? -INFINITY
                   : (float)((int)(h >> 32) % 2000) / 100.0f;
        }
        for (int i = 0; i < 80; i++)
            hist[i] = (int32_t)(smp_rng_u64(15, it, (uint32_t)i, 0) % 8) - 1 + (i % 5 == 0 ? 1000 : 0);
        smp_state st;
        smp_state_init(&st, &p, it);
        int t = smp_sample(&p, &st, row, nv, hist, 80, 1, &r, w);
        if (t >= 0) {
            ck_assert_int_lt(t, nv);
            ck_assert(!isnan(row[t]));
            sampled++;
        } else {
            ck_assert(r.err[0] != 0);
        }
    }
    ck_assert_int_gt(sampled, 1000);
    smp_work_destroy(&w);
    free(row);
}
END_TEST

Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, test_expf);
    suite_add_tcase(s, tc);
    tc = tcase_create("samplers");
    tcase_add_test(tc, test_softmax_and_dist);
    tcase_add_test(tc, test_top_k);
    tcase_add_test(tc, test_top_p);
    tcase_add_test(tc, test_min_p);
    tcase_add_test(tc, test_typical);
    tcase_add_test(tc, test_top_n_sigma);
    tcase_add_test(tc, test_xtc);
    tcase_add_test(tc, test_temperature);
    tcase_add_test(tc, test_mirostat);
    tcase_add_test(tc, test_penalties);
    tcase_add_test(tc, test_dry);
    tcase_add_test(tc, test_dry_loaded_pieces);
    tcase_add_test(tc, test_partial_selection_matches_sort);
    suite_add_tcase(s, tc);
    tc = tcase_create("sample");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_greedy_is_argmax);
    tcase_add_test(tc, test_chi_square);
    tcase_add_test(tc, test_same_token_across_processes);
    tcase_add_test(tc, test_nan_inf_rows);
    tcase_add_test(tc, test_bias_eos_and_probs);
    tcase_add_test(tc, test_chain_composition);
    tcase_add_test(tc, test_mirostat_state_carried);
    tcase_add_test(tc, test_mirostat_dense_matches);
    tcase_add_test(tc, test_simd_levels_same_tokens);
    tcase_add_test(tc, test_threads_share_nothing);
    tcase_add_test(tc, test_sample_dry_and_warning);
    tcase_add_test(tc, test_sample_xtc);
    tcase_add_test(tc, test_hostile_inputs);
    suite_add_tcase(s, tc);
    return s;
}
