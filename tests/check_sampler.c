/*
 * Tests of samplerd's sampling library end to end (suite "sampler"; each sampler alone is
 * in check_sampler_ops.c, parameters and the RNG in check_sampler_params.c): greedy =
 * argmax with ties to the lowest id, a chi-square test of temperature-1 sampling, the
 * same token from another process, NaN/Inf rows, carried mirostat state.
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

#include "test_sampler.h"

static char err[256];

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

/* ignore_eos reads the caller's row without copying it when only the greedy argmax
 * needs it: every chain (greedy or not, penalties, mirostat, top-k/p, min-p, XTC, DRY)
 * gives the same token, candidates and log-prob as on a row whose eos is already -inf,
 * with NaN and +-inf entries about, and the eos the best (with a tie of the next best
 * on its two sides), the first entry or the last. */
START_TEST(test_ignore_eos_same_as_banned_row)
{
    static const char *const chains[][4] = {
        { "temperature", "0", NULL, NULL }, { "temperature", "0", "top_k", "5" },
        { "temperature", "0", "repeat_penalty", "1.3" }, { "temperature", "0", "dry_multiplier", "0.8" },
        { "temperature", "0.8", NULL, NULL }, { "top_k", "0", "min_p", "0.2" }, { "top_p", "0.5", NULL, NULL },
        { "mirostat", "2", NULL, NULL }, { "mirostat", "1", "temperature", "1" }, { "xtc_probability", "1", NULL, NULL },
        { "sampling_seq", "mt", "temperature", "0" }, { "temperature", "0", "top_n_sigma", "1" },
    };
    const int nv = 97;
    float row[97], banned[97];
    int32_t hist[16];
    for (int i = 0; i < 16; i++) hist[i] = (int32_t)(i * 7 % nv);
    smp_work *w = smp_work_new(1);
    smp_result r, rb;
    int checked = 0;
    for (uint32_t it = 0; it < 600; it++) {
        const int eos = it % 3 == 0 ? 0 : it % 3 == 1 ? nv - 1 : (int)(it % (uint32_t)nv);
        for (int i = 0; i < nv; i++) {
            uint64_t h = smp_rng_u64(21, it, (uint32_t)i, 0);
            row[i] = it % 5 == 0 && h % 40 == 0 ? NAN : it % 5 == 1 && h % 40 == 1 ? INFINITY
                   : h % 40 == 2 ? -INFINITY : (float)((int)(h >> 32) % 800) / 100.0f;
        }
        if (it % 4 == 0) row[eos] = 20.0f;                         /* eos the best */
        if (it % 4 == 1) /* the best, then a tie of the next best on either side of it */
            row[eos] = 22.0f, row[(eos + nv - 3) % nv] = row[(eos + 3) % nv] = 21.0f;
        memcpy(banned, row, sizeof row);
        banned[eos] = -INFINITY;
        const char *const *c = chains[it / 12 % (sizeof chains / sizeof chains[0])]; /* each with every eos case */
        smp_params p = smp_params_default(), pb;
        for (int k = 0; k < 4 && c[k]; k += 2)
            ck_assert_msg(smp_param_set(&p, c[k], c[k + 1], err, sizeof err) == 0, "%s", err);
        p.seed = it;
        pb = p;
        p.ignore_eos = true;
        smp_state st, sb;
        smp_state_init(&st, &p, it);
        smp_state_init(&sb, &pb, it);
        int t = smp_sample(&p, &st, row, nv, hist, 16, eos, &r, w);
        int tb = smp_sample(&pb, &sb, banned, nv, hist, 16, eos, &rb, w);
        ck_assert_msg(t == tb, "round %u (%s %s): ignore_eos gave %d, the banned row %d", it, c[0], c[1], t, tb);
        ck_assert_int_ne(t, eos);
        if (t < 0) continue;
        ck_assert_int_eq(r.n_candidates, rb.n_candidates);
        ck_assert_msg(r.logprob == rb.logprob || (isnan(r.logprob) && isnan(rb.logprob)), "round %u", it);
        checked++;
    }
    ck_assert_int_gt(checked, 500);
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
    TCase *tc = tcase_create("sample");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_greedy_is_argmax);
    tcase_add_test(tc, test_chi_square);
    tcase_add_test(tc, test_same_token_across_processes);
    tcase_add_test(tc, test_nan_inf_rows);
    tcase_add_test(tc, test_bias_eos_and_probs);
    tcase_add_test(tc, test_ignore_eos_same_as_banned_row);
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
