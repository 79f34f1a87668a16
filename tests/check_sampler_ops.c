/*
 * Tests of samplerd's individual samplers (suite "sampler_ops"; smp_sample end to end is
 * in check_sampler.c, parameters and the RNG in check_sampler_params.c): each sampler
 * against hand-computed rows, DRY, expf, and the partial selection against full sorts.
 * Owner: sampler (issue 5).
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_sampler.h"

#define TOL 1e-5

static char err[256];

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

Suite *sampler_ops_suite(void)
{
    Suite *s = suite_create("sampler_ops");
    TCase *tc = tcase_create("samplers");
    tcase_add_test(tc, test_expf);
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
    return s;
}
