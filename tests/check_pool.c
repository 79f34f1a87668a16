/*
 * Tests for engined/pool: every thread runs each job exactly once with the right
 * (ith, nth), the caller is thread 0, pool_run is a barrier, the pool survives many
 * back-to-back and idle-separated calls (the futex sleep path), bad counts fail.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "pool.h"

typedef struct {
    _Atomic int calls[POOL_MAX_THREADS]; /* calls seen by each ith */
    _Atomic int bad_nth;
    int         nth_expected;
    pthread_t   caller;
    _Atomic int caller_was_0;
    long        slot[POOL_MAX_THREADS];  /* plain writes, read after pool_run returns */
    long        round;
} job_t;

static void job_fn(void *arg, int ith, int nth)
{
    job_t *j = arg;
    if (nth != j->nth_expected || ith < 0 || ith >= nth) atomic_fetch_add(&j->bad_nth, 1);
    else atomic_fetch_add(&j->calls[ith], 1);
    if (ith == 0 && pthread_equal(pthread_self(), j->caller)) atomic_store(&j->caller_was_0, 1);
    j->slot[ith] = j->round * 1000 + ith;
}

static void run_rounds(int n, int rounds, useconds_t pause_us)
{
    pool_t *pool = pool_new(n);
    ck_assert_ptr_nonnull(pool);
    ck_assert_int_eq(pool_threads(pool), n);
    static job_t j;
    memset(&j, 0, sizeof j);
    j.nth_expected = n;
    j.caller = pthread_self();
    for (int r = 0; r < rounds; r++) {
        j.round = r;
        pool_run(pool, job_fn, &j);
        /* barrier: every thread's plain write of this round is visible now */
        for (int i = 0; i < n; i++) ck_assert_int_eq(j.slot[i], (long)r * 1000 + i);
        if (pause_us) usleep(pause_us);
    }
    ck_assert_int_eq(atomic_load(&j.bad_nth), 0);
    ck_assert_int_eq(atomic_load(&j.caller_was_0), 1);
    for (int i = 0; i < n; i++) ck_assert_int_eq(atomic_load(&j.calls[i]), rounds);
    pool_destroy(&pool);
    ck_assert_ptr_null(pool);
}

START_TEST(test_all_threads_run) { run_rounds(2, 1, 0); run_rounds(4, 3, 0); }
END_TEST

START_TEST(test_many_calls) { run_rounds(2, 20000, 0); run_rounds(3, 2000, 0); }
END_TEST

/* Pauses longer than the spin make the workers and the caller sleep on the futex. */
START_TEST(test_sleep_wake) { run_rounds(2, 20, 20000); run_rounds(5, 10, 5000); }
END_TEST

START_TEST(test_single_thread) { run_rounds(1, 100, 0); }
END_TEST

/* More threads than cores, created and destroyed repeatedly; destroy right after new. */
START_TEST(test_oversubscribed)
{
    run_rounds(16, 200, 0);
    for (int i = 0; i < 20; i++) {
        pool_t *p = pool_new(1 + i % 4);
        ck_assert_ptr_nonnull(p);
        pool_destroy(&p);
    }
}
END_TEST

START_TEST(test_bad_counts)
{
    ck_assert_ptr_null(pool_new(0));
    ck_assert_ptr_null(pool_new(-3));
    ck_assert_ptr_null(pool_new(POOL_MAX_THREADS + 1));
    pool_destroy(NULL);
    pool_t *p = NULL;
    pool_destroy(&p);
    ck_assert_int_eq(pool_threads(NULL), 0);
}
END_TEST

START_TEST(test_range)
{
    static const int64_t ns[] = { 0, 1, 3, 4, 17, 64, 1001, 5632 };
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int64_t align = 1; align <= 8; align *= 2)
            for (int nth = 1; nth <= 7; nth++) {
                int64_t next = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t r0, r1;
                    pool_range(ns[k], align, ith, nth, &r0, &r1);
                    ck_assert_int_eq(r0, next);            /* contiguous, in order */
                    ck_assert_int_le(r0, r1);
                    if (r0 < ns[k]) ck_assert_int_eq(r0 % align, 0);
                    if (r1 < ns[k]) ck_assert_int_eq(r1 % align, 0);
                    next = r1;
                }
                ck_assert_int_eq(next, ns[k]);                /* covers [0, n) */
            }
    int64_t r0, r1; /* balanced: 64 rows over 2 threads, aligned by 4 -> 32 each */
    pool_range(64, 4, 1, 2, &r0, &r1);
    ck_assert_int_eq(r0, 32);
    ck_assert_int_eq(r1, 64);
}
END_TEST

Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_all_threads_run);
    tcase_add_test(tc, test_many_calls);
    tcase_add_test(tc, test_sleep_wake);
    tcase_add_test(tc, test_single_thread);
    tcase_add_test(tc, test_oversubscribed);
    tcase_add_test(tc, test_bad_counts);
    tcase_add_test(tc, test_range);
    suite_add_tcase(s, tc);
    return s;
}
