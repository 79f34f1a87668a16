/*
 * Tests for the sampling parameters of common/sparams.c (suite "sampler_params"): defaults,
 * parsing and formatting by llama.cpp name, rejection of out-of-range values naming the
 * parameter, validation against the vocabulary, and the counter RNG. The samplers
 * themselves are tested in check_sampler.c.
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

START_TEST(test_params_defaults)
{
    smp_params p = smp_params_default();
    ck_assert_float_eq(p.temperature, 0.8f);
    ck_assert_int_eq(p.top_k, 40);
    ck_assert_float_eq(p.top_p, 0.95f);
    ck_assert_float_eq(p.min_p, 0.05f);
    ck_assert_float_eq(p.typical_p, 1.0f);
    ck_assert_float_eq(p.xtc_probability, 0.0f);
    ck_assert_float_eq(p.xtc_threshold, 0.1f);
    ck_assert_float_eq(p.repeat_penalty, 1.0f);
    ck_assert_int_eq(p.repeat_last_n, 64);
    ck_assert_float_eq(p.dry_multiplier, 0.0f);
    ck_assert_float_eq(p.dry_base, 1.75f);
    ck_assert_int_eq(p.dry_allowed_length, 2);
    ck_assert_int_eq(p.dry_penalty_last_n, -1);
    ck_assert_int_eq(p.n_breakers, 4);
    ck_assert_str_eq(p.breakers[0].s, "\n");
    ck_assert_str_eq(p.breakers[2].s, "\"");
    ck_assert_int_eq(p.mirostat, 0);
    ck_assert_float_eq(p.mirostat_tau, 5.0f);
    ck_assert_float_eq(p.mirostat_eta, 0.1f);
    ck_assert_uint_eq(p.seed, SMP_SEED_RANDOM);
    ck_assert_str_eq(p.order, "edskypmxt");
    ck_assert_int_eq(smp_params_validate(&p, 32000, err, sizeof err), 0);
}
END_TEST

START_TEST(test_params_set_and_format_roundtrip)
{
    smp_params p = smp_params_default();
    ck_assert_int_eq(smp_param_set(&p, "top_p", "0.9", err, sizeof err), 0);
    ck_assert_float_eq(p.top_p, 0.9f);
    ck_assert_int_eq(smp_param_set(&p, "temp", "0", err, sizeof err), 0);
    ck_assert_float_eq(p.temperature, 0.0f);
    ck_assert_int_eq(smp_param_set(&p, "typ_p", "0.5", err, sizeof err), 0);
    ck_assert_float_eq(p.typical_p, 0.5f);
    ck_assert_int_eq(smp_param_set(&p, "seed", "-1", err, sizeof err), 0);
    ck_assert_uint_eq(p.seed, SMP_SEED_RANDOM);
    ck_assert_int_eq(smp_param_set(&p, "seed", "4294967294", err, sizeof err), 0);
    ck_assert_uint_eq(p.seed, 4294967294u);
    ck_assert_int_eq(smp_param_set(&p, "ignore_eos", "true", err, sizeof err), 0);
    ck_assert(p.ignore_eos);
    ck_assert_int_eq(smp_param_set(&p, "logit_bias", "15:+1.5, 7-2,3:-inf", err, sizeof err), 0);
    ck_assert_int_eq(p.n_logit_bias, 3);
    ck_assert_int_eq(p.logit_bias[1].id, 7);
    ck_assert_float_eq(p.logit_bias[1].bias, -2.0f);
    ck_assert(isinf(p.logit_bias[2].bias) && p.logit_bias[2].bias < 0);
    ck_assert_int_eq(smp_param_set(&p, "dry_sequence_breakers", "[\"\\n\", \"ab\", \"\\u00e9\", \"\\\"\"]", err, sizeof err), 0);
    ck_assert_int_eq(p.n_breakers, 4);
    ck_assert_str_eq(p.breakers[1].s, "ab");
    ck_assert_str_eq(p.breakers[2].s, "\xc3\xa9");
    ck_assert_str_eq(p.breakers[3].s, "\"");
    ck_assert_int_eq(smp_param_set(&p, "samplers", "top_k;temperature;penalties", err, sizeof err), 0);
    ck_assert_str_eq(p.order, "kte");
    ck_assert_int_eq(smp_param_set(&p, "sampling_seq", "kypmxt", err, sizeof err), 0);
    ck_assert_str_eq(p.order, "kypmxt");
    /* every listed parameter formats to text that parses back to the same value */
    ck_assert_int_gt(smp_param_count(), 25);
    for (int i = 0; i < smp_param_count(); i++) {
        const char *name = smp_param_name(i);
        char buf[2048], buf2[2048];
        ck_assert_int_ge(smp_param_format(&p, name, buf, sizeof buf), 0);
        smp_params q = smp_params_default();
        if (!strcmp(name, "logit_bias"))
            q.n_logit_bias = 0;
        ck_assert_msg(smp_param_set(&q, name, buf, err, sizeof err) == 0, "%s=%s: %s", name, buf, err);
        smp_param_format(&q, name, buf2, sizeof buf2);
        ck_assert_msg(!strcmp(buf, buf2), "%s: '%s' != '%s'", name, buf, buf2);
    }
    ck_assert_int_eq(smp_param_format(&p, "nonsense", err, sizeof err), -1);
    /* "samplers" formats as names, which it parses back */
    char names[256];
    smp_params d = smp_params_default();
    ck_assert_int_gt(smp_param_format(&d, "samplers", names, sizeof names), 0);
    ck_assert_str_eq(names, "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature");
    ck_assert_int_eq(smp_param_set(&p, "samplers", names, err, sizeof err), 0);
    ck_assert_str_eq(p.order, SMP_ORDER_DEFAULT);
    /* truncation keeps the NUL and reports the length written */
    char small[8];
    ck_assert_int_eq(smp_param_format(&d, "samplers", small, sizeof small), 7);
    ck_assert_str_eq(small, "penalti");
}
END_TEST

/* Sets name=value, expects failure with an error that starts with "want:". */
static void expect_reject(const char *name, const char *value, const char *want)
{
    smp_params p = smp_params_default(), before = p;
    err[0] = 0;
    ck_assert_msg(smp_param_set(&p, name, value, err, sizeof err) == -1, "%s=%s accepted", name, value);
    ck_assert_msg(!strncmp(err, want, strlen(want)) && err[strlen(want)] == ':',
                  "%s=%s: error '%s' does not name %s", name, value, err, want);
    ck_assert_msg(!memcmp(&p, &before, sizeof p), "%s=%s: params changed on error", name, value);
}

START_TEST(test_params_reject_out_of_range)
{
    expect_reject("top_p", "1.5", "top_p");
    expect_reject("top_p", "-0.1", "top_p");
    expect_reject("top_k", "-2", "top_k");
    expect_reject("top_k", "12x", "top_k");
    expect_reject("temperature", "nan", "temperature");
    expect_reject("temperature", "-0.5", "temperature");
    expect_reject("temp", "inf", "temperature");
    expect_reject("typical_p", "0", "typical_p");
    expect_reject("typical_p", "1.01", "typical_p");
    expect_reject("min_p", "2", "min_p");
    expect_reject("mirostat", "3", "mirostat");
    expect_reject("mirostat_eta", "-1", "mirostat_eta");
    expect_reject("repeat_penalty", "0", "repeat_penalty");
    expect_reject("repeat_last_n", "-5", "repeat_last_n");
    expect_reject("dry_base", "0.5", "dry_base");
    expect_reject("dry_penalty_last_n", "-2", "dry_penalty_last_n");
    expect_reject("xtc_probability", "1.5", "xtc_probability");
    expect_reject("n_probs", "1000", "n_probs");
    expect_reject("seed", "-2", "seed");
    expect_reject("seed", "4294967296", "seed");
    expect_reject("ignore_eos", "maybe", "ignore_eos");
    expect_reject("logit_bias", "abc", "logit_bias");
    expect_reject("logit_bias", "5:nan", "logit_bias");
    expect_reject("logit_bias", "-5:1", "logit_bias");
    expect_reject("dry_sequence_breakers", "[\"a\"", "dry_sequence_breakers");
    expect_reject("dry_sequence_breakers", "\"a\"", "dry_sequence_breakers");
    expect_reject("dry_sequence_breakers", "[\"\\q\"]", "dry_sequence_breakers");
    expect_reject("dry_sequence_breakers", "[\"\"]", "dry_sequence_breakers");
    expect_reject("samplers", "top_k;bogus", "samplers");
    expect_reject("samplers", "top_k;top_k", "samplers");
    expect_reject("sampling_seq", "kz", "sampling_seq");
    expect_reject("no_such_thing", "1", "no_such_thing");
}
END_TEST

START_TEST(test_params_validate)
{
    smp_params p = smp_params_default();
    ck_assert_int_eq(smp_params_add_bias(&p, 31999, 1.0f, err, sizeof err), 0);
    ck_assert_int_eq(smp_params_validate(&p, 32000, err, sizeof err), 0);
    ck_assert_int_eq(smp_params_add_bias(&p, 32000, 1.0f, err, sizeof err), 0);
    ck_assert_int_eq(smp_params_validate(&p, 32000, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "logit_bias"));
    ck_assert_ptr_nonnull(strstr(err, "32000"));
    /* a struct filled field by field (the wire path) is range-checked too */
    p = smp_params_default();
    p.top_p = NAN;
    ck_assert_int_eq(smp_params_validate(&p, 10, err, sizeof err), -1);
    ck_assert_int_eq(strncmp(err, "top_p:", 6), 0);
    p = smp_params_default();
    p.mirostat = 7;
    ck_assert_int_eq(smp_params_validate(&p, 10, err, sizeof err), -1);
    ck_assert_int_eq(strncmp(err, "mirostat:", 9), 0);
    p = smp_params_default();
    p.order[0] = 'q';
    ck_assert_int_eq(smp_params_validate(&p, 10, err, sizeof err), -1);
    ck_assert_int_eq(strncmp(err, "samplers:", 9), 0);
    p = smp_params_default();
    p.n_logit_bias = SMP_MAX_LOGIT_BIAS + 1;
    ck_assert_int_eq(smp_params_validate(&p, 10, err, sizeof err), -1);
    ck_assert_int_eq(strncmp(err, "logit_bias:", 11), 0);
    p = smp_params_default();
    ck_assert_int_eq(smp_history_needed(&p), 0);
    p.repeat_penalty = 1.1f;
    ck_assert_int_eq(smp_history_needed(&p), 64);
    p.dry_multiplier = 0.8f;
    ck_assert_int_eq(smp_history_needed(&p), -1);
}
END_TEST

/* ---- RNG ---- */

START_TEST(test_rng_pure_and_uniform)
{
    ck_assert_uint_eq(smp_rng_u64(1, 2, 3, 0), smp_rng_u64(1, 2, 3, 0));
    ck_assert_uint_ne(smp_rng_u64(1, 2, 3, 0), smp_rng_u64(2, 2, 3, 0));
    ck_assert_uint_ne(smp_rng_u64(1, 2, 3, 0), smp_rng_u64(1, 3, 3, 0));
    ck_assert_uint_ne(smp_rng_u64(1, 2, 3, 0), smp_rng_u64(1, 2, 4, 0));
    ck_assert_uint_ne(smp_rng_u64(1, 2, 3, 0), smp_rng_u64(1, 2, 3, 1));
    /* 16 bins over 32000 steps: chi-square with 15 dof, 0.1% critical value 37.7 */
    int bins[16] = {0};
    const int n = 32000;
    for (int i = 0; i < n; i++) {
        double u = smp_rng_uniform(7, 11, (uint32_t)i, 0);
        ck_assert(u >= 0.0 && u < 1.0);
        bins[(int)(u * 16)]++;
    }
    double chi = 0, e = n / 16.0;
    for (int i = 0; i < 16; i++)
        chi += (bins[i] - e) * (bins[i] - e) / e;
    ck_assert_msg(chi < 37.7, "chi-square %f", chi);
    ck_assert_uint_eq(smp_seed_resolve(5), 5);
    ck_assert_uint_ne(smp_seed_resolve(SMP_SEED_RANDOM), SMP_SEED_RANDOM);
}
END_TEST

Suite *sampler_params_suite(void)
{
    Suite *s = suite_create("sampler_params");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, test_params_defaults);
    tcase_add_test(tc, test_params_set_and_format_roundtrip);
    tcase_add_test(tc, test_params_reject_out_of_range);
    tcase_add_test(tc, test_params_validate);
    tcase_add_test(tc, test_rng_pure_and_uniform);
    suite_add_tcase(s, tc);
    return s;
}
