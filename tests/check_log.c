/* Tests for common/log: the line format carries component, pid and level. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

START_TEST(test_log_line_format)
{
    char path[] = "/tmp/llm-logtest-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    log_init("unit", LOG_INFO);
    log_debug("hidden %d", 1);
    log_info("shown %d", 2);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[512] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    ck_assert_int_gt(n, 0);
    char want[64];
    snprintf(want, sizeof want, "unit[%d] INFO shown 2\n", (int)getpid());
    ck_assert_ptr_nonnull(strstr(buf, want));
    ck_assert_ptr_null(strstr(buf, "hidden"));
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, test_log_line_format);
    suite_add_tcase(s, tc);
    return s;
}
