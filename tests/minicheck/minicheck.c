/*
 * minicheck.c - tests/minicheck/check.h's definitions, for tests/runner.c:
 * srunner_run_all runs each test in a child process with an alarm of its case's timeout
 * (CK_DEFAULT_TIMEOUT, else 4 s, times CK_TIMEOUT_MULTIPLIER); a failed assertion, a
 * crash or a timeout fails that test only. It prints each test's time and Check's
 * summary line per suite.
 */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_TESTS = 64, MAX_CASES = 16, MAX_SUITES = 64 };

struct TCase {
    const char *name;
    double timeout;
    int n;
    const TTest *tests[MAX_TESTS];
};

struct Suite {
    const char *name;
    int n;
    TCase *cases[MAX_CASES];
};

static double default_timeout(void)
{
    const char *e = getenv("CK_DEFAULT_TIMEOUT");
    return e && *e ? atof(e) : 4.0;
}

Suite *suite_create(const char *name)
{
    Suite *s = calloc(1, sizeof *s);
    if (!s) abort();
    s->name = name;
    return s;
}

TCase *tcase_create(const char *name)
{
    TCase *tc = calloc(1, sizeof *tc);
    if (!tc) abort();
    tc->name = name;
    tc->timeout = default_timeout();
    return tc;
}

void suite_add_tcase(Suite *s, TCase *tc)
{
    if (s->n == MAX_CASES) abort();
    s->cases[s->n++] = tc;
}

void tcase_add_test(TCase *tc, const TTest *t)
{
    if (tc->n == MAX_TESTS) abort();
    tc->tests[tc->n++] = t;
}

void tcase_set_timeout(TCase *tc, double seconds) { tc->timeout = seconds; }

void mc_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: Assertion '%s' failed", file, line, expr);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    exit(1);
}

static double seconds(struct timespec a, struct timespec b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

static int selected(const char *env, const char *name)
{
    const char *want = getenv(env);
    return !want || !*want || !strcmp(want, name);
}

/* Runs one test in a child; 1 when it passed. */
static int run_test(const Suite *s, const TCase *tc, const TTest *t)
{
    const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
    double limit = tc->timeout * (m && *m ? atof(m) : 1.0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 0;
    }
    if (pid == 0) {
        alarm((unsigned)(limit + 0.999));
        t->fn(0);
        exit(0);
    }
    int st;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (waitpid(pid, &st, 0) < 0) {
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%s:%s:%s: %.1f s\n", s->name, tc->name, t->name, seconds(a, b));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        fprintf(stderr, "%s:%s:%s: test timed out after %g s\n", s->name, tc->name, t->name, limit);
    else if (WIFSIGNALED(st))
        fprintf(stderr, "%s:%s:%s: received signal %d\n", s->name, tc->name, t->name, WTERMSIG(st));
    else
        fprintf(stderr, "%s:%s:%s: failed\n", s->name, tc->name, t->name);
    return 0;
}

static int run_suite(const Suite *s)
{
    int run = 0, failed = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int c = 0; c < s->n; c++) {
        const TCase *tc = s->cases[c];
        if (!selected("CK_RUN_CASE", tc->name)) continue;
        for (int i = 0; i < tc->n; i++, run++) failed += !run_test(s, tc, tc->tests[i]);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("Running suite %s: %d%%: Checks: %d, Failures: %d, Errors: 0 (%.1f s)\n", s->name,
           run ? 100 * (run - failed) / run : 100, run, failed, seconds(a, b));
    return failed;
}

struct SRunner {
    int n, failed;
    Suite *suites[MAX_SUITES];
};

SRunner *srunner_create(Suite *s)
{
    SRunner *sr = calloc(1, sizeof *sr);
    if (!sr) abort();
    if (s) srunner_add_suite(sr, s);
    return sr;
}

void srunner_add_suite(SRunner *sr, Suite *s)
{
    if (sr->n == MAX_SUITES) abort();
    sr->suites[sr->n++] = s;
}

void srunner_run_all(SRunner *sr, enum print_output mode)
{
    (void)mode;
    for (int i = 0; i < sr->n; i++)
        if (selected("CK_RUN_SUITE", sr->suites[i]->name)) sr->failed += run_suite(sr->suites[i]);
}

int srunner_ntests_failed(SRunner *sr) { return sr->failed; }

void srunner_free(SRunner *sr) { free(sr); } /* the suites live as long as the process, as the tests */
