/* Tests for client/gw_keys (the gateway's API keys: key files, LLM_API_KEY lists, the
 * Authorization check). Suite "gw_keys". */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw_keys.h"

/* A temporary file holding text with the given mode; its path is written to path. */
static void key_file(char path[32], const char *text, mode_t mode)
{
    strcpy(path, "/tmp/llm-keys-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(test_key_file_lines)
{
    char path[32], err[300];
    key_file(path, "# gateway keys\n\n  k-one  \r\nk-two\n\t# k-commented\nk#three\n   \nlast", 0600);
    gwk_set k;
    gwk_init(&k);
    ck_assert_int_eq(gwk_load_file(&k, path, err, sizeof err), 0);
    unlink(path);
    ck_assert_int_eq(k.n, 4);
    ck_assert_str_eq(k.keys[0], "k-one");
    ck_assert_str_eq(k.keys[1], "k-two");
    ck_assert_str_eq(k.keys[2], "k#three"); /* only a line that starts with # is a comment */
    ck_assert_str_eq(k.keys[3], "last");    /* no newline at the end */
    gwk_free(&k);
    ck_assert_int_eq(k.n, 0);
}
END_TEST

/* gwk_load_file fails on text with mode, with an error holding the path and want. */
static void refused(const char *text, mode_t mode, const char *want)
{
    char path[32], err[300] = "";
    key_file(path, text, mode);
    gwk_set k;
    gwk_init(&k);
    ck_assert_int_eq(gwk_load_file(&k, path, err, sizeof err), -1);
    unlink(path);
    ck_assert_msg(strstr(err, path) && strstr(err, want), "error '%s' lacks the path or '%s'", err, want);
    gwk_free(&k);
}

START_TEST(test_key_file_refusals)
{
    refused("k\n", 0644, "mode 0644 is too open");
    refused("k\n", 0640, "mode 0640");
    refused("k\n", 0602, "mode 0602");
    refused("k\n", 0600 | S_IXGRP, "mode 0610");
    refused("# nothing\n\n", 0600, "no API key in it");
    refused("", 0600, "no API key in it");
    char many[400] = "";
    for (int i = 0; i <= GWK_MAX_KEYS; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "key-%d\n", i);
    refused(many, 0600, "more than 16 API keys");
    char *big = malloc(GWK_MAX_FILE_SIZE + 2);
    memset(big, 'k', GWK_MAX_FILE_SIZE + 1);
    big[GWK_MAX_FILE_SIZE + 1] = 0;
    refused(big, 0600, "bytes, more than");
    free(big);
    char err[300];
    gwk_set k;
    gwk_init(&k);
    ck_assert_int_eq(gwk_load_file(&k, "/nonexistent/keys", err, sizeof err), -1);
    ck_assert_str_eq(err, "/nonexistent/keys: No such file or directory");
    ck_assert_int_eq(gwk_load_file(&k, "/tmp", err, sizeof err), -1);
    ck_assert_str_eq(err, "/tmp: not a regular file");
    ck_assert_int_eq(k.n, 0);
}
END_TEST

START_TEST(test_lists_and_limits)
{
    char err[200];
    gwk_set k;
    gwk_init(&k);
    ck_assert_int_eq(gwk_add_list(&k, NULL, err, sizeof err), 0);
    ck_assert_int_eq(gwk_add_list(&k, ",a,,bc,", err, sizeof err), 0);
    ck_assert_int_eq(gwk_add(&k, "", err, sizeof err), 0);
    ck_assert_int_eq(k.n, 2);
    ck_assert_str_eq(k.keys[1], "bc");
    for (int i = 2; i < GWK_MAX_KEYS; i++) ck_assert_int_eq(gwk_add(&k, "x", err, sizeof err), 0);
    ck_assert_int_eq(gwk_add(&k, "one too many", err, sizeof err), -1);
    ck_assert_str_eq(err, "more than 16 API keys");
    gwk_free(&k);
}
END_TEST

START_TEST(test_authorized)
{
    char err[200];
    gwk_set k;
    gwk_init(&k);
    ck_assert(gwk_authorized(&k, NULL)); /* no keys: open */
    ck_assert_int_eq(gwk_add_list(&k, "sk-one,sk-two", err, sizeof err), 0);
    ck_assert(gwk_authorized(&k, "Bearer sk-one"));
    ck_assert(gwk_authorized(&k, "bearer   sk-two"));
    ck_assert(!gwk_authorized(&k, NULL));
    ck_assert(!gwk_authorized(&k, ""));
    ck_assert(!gwk_authorized(&k, "Bearer "));
    ck_assert(!gwk_authorized(&k, "Bearer sk-on"));
    ck_assert(!gwk_authorized(&k, "Bearer sk-one2"));
    ck_assert(!gwk_authorized(&k, "Basic sk-one"));
    ck_assert(!gwk_authorized(&k, "sk-one"));
    gwk_free(&k);
}
END_TEST

Suite *gw_keys_suite(void)
{
    Suite *s = suite_create("gw_keys");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_key_file_lines);
    tcase_add_test(tc, test_key_file_refusals);
    tcase_add_test(tc, test_lists_and_limits);
    tcase_add_test(tc, test_authorized);
    suite_add_tcase(s, tc);
    return s;
}
