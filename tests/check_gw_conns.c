/* Tests for client/gw_conns (the deadline for a client to send its request), on
 * socketpairs standing in for HTTP connections. Suite "gw_conns". */
#include <check.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_conns.h"
#include "log.h"
#include "net.h"

#define DEADLINE_MS 1000

static int sv[2]; /* sv[0] the gateway's socket, sv[1] the client's */

static void setup(void)
{
    log_init("unit", LOG_ERROR);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static void teardown(void)
{
    close(sv[0]);
    close(sv[1]);
}

/* 1 if the client sees its connection shut down (end of file), 0 if it is still open. */
static int client_sees_close(void)
{
    char c;
    ssize_t n = recv(sv[1], &c, 1, MSG_DONTWAIT);
    ck_assert(n == 0 || (n < 0 && errno == EAGAIN));
    return n == 0;
}

START_TEST(test_receiving_past_the_deadline)
{
    gwc *w = gwc_new(DEADLINE_MS);
    int64_t t0 = net_now_ms();
    gwc_slot *s = gwc_open(w, sv[0], "10.0.0.7");
    ck_assert_int_eq(gwc_sweep(w, t0 + DEADLINE_MS / 2), 0);
    ck_assert(!client_sees_close());
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + DEADLINE_MS + 1), 1);
    ck_assert(client_sees_close());
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + 10 * DEADLINE_MS), 0); /* shut once */
    gwc_answering(w, s);                                                  /* too late */
    gwc_idle(w, s);
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + 10 * DEADLINE_MS), 0);
    gwc_close(w, s);
    gwc_destroy(&w);
    ck_assert_ptr_null(w);
}
END_TEST

START_TEST(test_answering_has_no_deadline)
{
    gwc *w = gwc_new(DEADLINE_MS);
    gwc_slot *s = gwc_open(w, sv[0], "10.0.0.7");
    gwc_answering(w, s);
    gwc_request_line(w, s); /* not a new request: an answer has no deadline */
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + 100 * DEADLINE_MS), 0);
    ck_assert(!client_sees_close());
    /* the answer is done: the next request's clock starts now, not at the connection's
     * start, and runs on when its request line arrives */
    int64_t t1 = net_now_ms();
    gwc_idle(w, s);
    ck_assert_int_eq(gwc_sweep(w, t1 + DEADLINE_MS / 2), 0);
    gwc_request_line(w, s);
    ck_assert_int_eq(gwc_sweep(w, t1 + DEADLINE_MS / 2), 0);
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + DEADLINE_MS + 1), 1);
    ck_assert(client_sees_close());
    gwc_close(w, s);
    gwc_destroy(&w);
}
END_TEST

START_TEST(test_closed_is_forgotten)
{
    gwc *w = gwc_new(DEADLINE_MS);
    gwc_slot *a = gwc_open(w, sv[0], NULL), *b = gwc_open(w, -1, "x"), *c = gwc_open(w, -1, "y");
    gwc_close(w, b); /* from the middle, the head, the tail */
    gwc_close(w, c);
    gwc_answering(w, a);
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + 10 * DEADLINE_MS), 0);
    gwc_close(w, a);
    gwc_close(w, NULL);
    gwc_answering(w, NULL);
    gwc_idle(w, NULL);
    gwc_request_line(w, NULL);
    ck_assert_int_eq(gwc_sweep(w, net_now_ms() + 10 * DEADLINE_MS), 0);
    gwc_open(w, -1, "left open"); /* freed by gwc_destroy */
    gwc_destroy(&w);
    gwc_destroy(&w);
}
END_TEST

Suite *gw_conns_suite(void)
{
    Suite *s = suite_create("gw_conns");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_receiving_past_the_deadline);
    tcase_add_test(tc, test_answering_has_no_deadline);
    tcase_add_test(tc, test_closed_is_forgotten);
    suite_add_tcase(s, tc);
    return s;
}
