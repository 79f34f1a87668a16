/*
 * check.h - the part of the Check library's API the kernel, qn and forward suites use,
 * and the runner (tests/runner.c) use, for builds where libcheck is not there (the aarch64
 * cross build run under qemu-user: make test-arm). Same names and meaning: the suites and
 * the runner compile unchanged against it. minicheck.c forks each test, as CK_FORK does,
 * with Check's timeout and its environment variables CK_RUN_SUITE, CK_RUN_CASE,
 * CK_DEFAULT_TIMEOUT and CK_TIMEOUT_MULTIPLIER.
 */
#ifndef LLM_MINICHECK_H
#define LLM_MINICHECK_H

#include <stdint.h>
#include <string.h>

typedef struct {
    const char *name;
    void (*fn)(int);
} TTest;
typedef struct TCase TCase;
typedef struct Suite Suite;
typedef struct SRunner SRunner;
enum print_output { CK_SILENT, CK_MINIMAL, CK_NORMAL, CK_VERBOSE };

#define START_TEST(n)                                                \
    static void n##_fn(int _i __attribute__((unused)));              \
    static const TTest n##_ttest = { #n, n##_fn };                   \
    static const TTest *n = &n##_ttest;                              \
    static void n##_fn(int _i __attribute__((unused)))
#define END_TEST

Suite *suite_create(const char *name);
TCase *tcase_create(const char *name);
void suite_add_tcase(Suite *s, TCase *tc);
void tcase_add_test(TCase *tc, const TTest *t);
void tcase_set_timeout(TCase *tc, double seconds);
SRunner *srunner_create(Suite *s);
void srunner_add_suite(SRunner *sr, Suite *s);
void srunner_run_all(SRunner *sr, enum print_output mode);
int srunner_ntests_failed(SRunner *sr);
void srunner_free(SRunner *sr);

/* Ends the running test as failed: "expr" and the printf-style message (fmt may be NULL). */
void mc_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#define ck_assert_msg(expr, ...) ((expr) ? (void)0 : mc_fail(__FILE__, __LINE__, #expr, __VA_ARGS__))
#define ck_assert(expr) ((expr) ? (void)0 : mc_fail(__FILE__, __LINE__, #expr, NULL))
#define ck_abort_msg(...) mc_fail(__FILE__, __LINE__, "aborted", __VA_ARGS__)

#define MC_CMP(T, F, X, OP, Y)                                                                              \
    do {                                                                                                    \
        T mc_x = (X);                                                                                       \
        T mc_y = (Y);                                                                                       \
        if (!(mc_x OP mc_y))                                                                                \
            mc_fail(__FILE__, __LINE__, #X " " #OP " " #Y, "%s == " F ", %s == " F, #X, mc_x, #Y, mc_y);     \
    } while (0)
#define ck_assert_int_eq(X, Y) MC_CMP(intmax_t, "%jd", X, ==, Y)
#define ck_assert_int_ge(X, Y) MC_CMP(intmax_t, "%jd", X, >=, Y)
#define ck_assert_uint_eq(X, Y) MC_CMP(uintmax_t, "%ju", X, ==, Y)
#define ck_assert_float_eq(X, Y) MC_CMP(long double, "%.9Lg", X, ==, Y)
#define ck_assert_ptr_eq(X, Y) MC_CMP(const void *, "%p", X, ==, Y)
#define ck_assert_ptr_null(X) MC_CMP(const void *, "%p", X, ==, NULL)
#define ck_assert_ptr_nonnull(X) MC_CMP(const void *, "%p", X, !=, NULL)
#define ck_assert_str_eq(X, Y)                                                                              \
    do {                                                                                                    \
        const char *mc_x = (X), *mc_y = (Y);                                                                \
        if (strcmp(mc_x, mc_y))                                                                             \
            mc_fail(__FILE__, __LINE__, #X " == " #Y, "%s == \"%s\", %s == \"%s\"", #X, mc_x, #Y, mc_y);       \
    } while (0)

#endif
