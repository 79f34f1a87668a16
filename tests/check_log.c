/* Tests for common/log: the line format carries component, pid and level; the rate
 * limiter lets a burst through per interval and reports what it suppressed. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Sends stderr to a temporary file until capture_end, which returns what was written
 * (at most cap - 1 bytes, NUL-terminated). */
static int capture_fd = -1, capture_saved = -1;

static void capture_begin(void)
{
    char path[] = "/tmp/llm-logtest-XXXXXX";
    capture_fd = mkstemp(path);
    ck_assert_int_ge(capture_fd, 0);
    unlink(path);
    fflush(stderr);
    capture_saved = dup(2);
    dup2(capture_fd, 2);
}

static ssize_t capture_end(char *buf, size_t cap)
{
    fflush(stderr);
    dup2(capture_saved, 2);
    close(capture_saved);
    memset(buf, 0, cap);
    ssize_t n = pread(capture_fd, buf, cap - 1, 0);
    close(capture_fd);
    return n;
}

static int count_lines(const char *buf, const char *needle)
{
    int n = 0;
    for (const char *p = buf; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

START_TEST(test_log_line_format)
{
    capture_begin();
    log_init("unit", LOG_INFO);
    log_debug("hidden %d", 1);
    log_info("shown %d", 2);
    char buf[512];
    ssize_t n = capture_end(buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    char want[64];
    snprintf(want, sizeof want, "unit[%d] INFO shown 2\n", (int)getpid());
    ck_assert_ptr_nonnull(strstr(buf, want));
    ck_assert_ptr_null(strstr(buf, "hidden"));
}
END_TEST

/* 2,000 warnings in one interval: the burst, then nothing until the interval is over,
 * then one line with the count; a new interval lets a new burst through. */
START_TEST(test_limit_burst_then_count)
{
    log_limit l = LOG_LIMIT_AT("bad row", 3, 1000);
    int passed = 0;
    for (int i = 0; i < 2000; i++) passed += log_limit_pass_at(&l, 5000 + i / 10);
    ck_assert_int_eq(passed, 3);
    capture_begin();
    log_init("unit", LOG_INFO);
    log_limit_tick_at(5999); /* not over yet: no report */
    ck_assert_int_eq(log_limit_pass_at(&l, 5999), 0);
    log_limit_tick_at(6500);
    log_limit_tick_at(6600); /* reported once */
    char buf[1024];
    capture_end(buf, sizeof buf);
    ck_assert_int_eq(count_lines(buf, "\n"), 1);
    ck_assert_ptr_nonnull(strstr(buf, " WARN bad row: 1998 similar warnings suppressed in the last 1.5 s\n"));
    for (int i = 0; i < 3; i++) ck_assert_int_eq(log_limit_pass_at(&l, 7000), 1);
    ck_assert_int_eq(log_limit_pass_at(&l, 7001), 0);
}
END_TEST

/* Without a tick, the next pass after the interval writes the report before its line. */
START_TEST(test_limit_report_on_next_pass)
{
    log_limit l = LOG_LIMIT_AT("bad message", 1, 100);
    capture_begin();
    log_init("unit", LOG_INFO);
    for (int i = 0; i < 5; i++) log_warn_limited(&l, "bad message %d", i);
    usleep(150 * 1000);
    log_warn_limited(&l, "bad message %d", 5);
    log_warn_limited(&l, "bad message %d", 6);
    char buf[2048];
    capture_end(buf, sizeof buf);
    ck_assert_int_eq(count_lines(buf, "\n"), 3);
    const char *first = strstr(buf, "bad message 0\n"), *report = strstr(buf, "bad message: 4 similar warnings"),
               *next = strstr(buf, "bad message 5\n");
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_nonnull(report);
    ck_assert_ptr_nonnull(next);
    ck_assert(first < report && report < next);
}
END_TEST

/* Quiet limiters write nothing, and two call sites count apart. */
START_TEST(test_limit_sites_apart)
{
    log_limit a = LOG_LIMIT_AT("site a", 2, 1000), b = LOG_LIMIT_AT("site b", 2, 1000);
    log_limit quiet = LOG_LIMIT_AT("quiet", 2, 1000);
    ck_assert_int_eq(log_limit_pass_at(&quiet, 100), 1);
    for (int i = 0; i < 10; i++) log_limit_pass_at(&a, 100);
    for (int i = 0; i < 4; i++) log_limit_pass_at(&b, 200);
    capture_begin();
    log_init("unit", LOG_INFO);
    log_limit_tick_at(1150); /* a's interval is over, b's is not */
    char buf[1024];
    capture_end(buf, sizeof buf);
    ck_assert_int_eq(count_lines(buf, "\n"), 1);
    ck_assert_ptr_nonnull(strstr(buf, "site a: 8 similar warnings suppressed"));
    capture_begin();
    log_limit_tick_at(1250);
    capture_end(buf, sizeof buf);
    ck_assert_int_eq(count_lines(buf, "\n"), 1);
    ck_assert_ptr_nonnull(strstr(buf, "site b: 2 similar warnings suppressed"));
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, test_log_line_format);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("limit");
    tcase_add_test(tl, test_limit_burst_then_count);
    tcase_add_test(tl, test_limit_report_on_next_pass);
    tcase_add_test(tl, test_limit_sites_apart);
    suite_add_tcase(s, tl);
    return s;
}
