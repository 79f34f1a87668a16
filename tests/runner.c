/*
 * The one Check runner: every tests/check_NAME.c provides Suite *NAME_suite(void),
 * and the Makefile generates suites.inc listing them. CK_FORK stays on, so a test
 * that crashes is reported as a failure without taking the others down.
 * CK_RUN_SUITE=NAME / CK_RUN_CASE=NAME select a subset (Check's own variables).
 */
#include <check.h>
#include <stdlib.h>

#define SUITE(n) Suite *n##_suite(void);
#include "suites.inc"
#undef SUITE

int main(void)
{
    SRunner *sr = srunner_create(NULL);
#define SUITE(n) srunner_add_suite(sr, n##_suite());
#include "suites.inc"
#undef SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
