/* Tests for the front door's queue at the edges of restarts (suite "front"): a request
 * that arrives while no engine worker is registered waits for one (and fails, saying
 * so, after --worker-wait); a session whose generation filled the context before its
 * worker died ends with reason "context"; a session a worker reports as stopped is
 * queued, and its client's resume gets the text and the end. The front door runs on
 * real ZeroMQ sockets (inproc): a client and a worker are DEALERs whose replies the
 * tests read. Vocabulary: stories260K from $LLM_SHARED. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "front.h"
#include "gguf.h"
#include "log.h"
#include "net.h"
#include "proto.h"
#include "tok.h"

#define CTX 48 /* the workers' context in these tests */

static front F;
static void *zctx, *client, *wsock;
static const uint8_t CRID[] = "c1", WRID[] = "w1";

static void load_vocab(void)
{
    const char *s = getenv("LLM_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K-f32.gguf", s ? s : "../shared");
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", path, err);
    F.vocab = tok_vocab_load(g, err, sizeof err);
    ck_assert_msg(F.vocab != NULL, "%s", err);
    gguf_close(g);
    F.n_vocab = (uint32_t)tok_n_vocab(F.vocab);
    for (int32_t i = 0; i < tok_n_vocab(F.vocab) && F.n_eog < 16; i++)
        if (tok_is_eog(F.vocab, i)) F.eog[F.n_eog++] = i;
}

/* A DEALER with routing id rid connected to ep; it says hello so the ROUTER knows it. */
static void *peer(const char *ep, const uint8_t *rid, void *router)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(s);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, rid, 2);
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    ck_assert_int_eq(zmq_send(s, "hi", 2, 0), 2);
    char buf[16];
    ck_assert_int_eq(zmq_recv(router, buf, sizeof buf, 0), 2); /* its id */
    ck_assert_int_eq(zmq_recv(router, buf, sizeof buf, 0), 2); /* "hi" */
    return s;
}

static void setup(void)
{
    log_init("check_front", LOG_ERROR);
    memset(&F, 0, sizeof F);
    load_vocab();
    F.lim = (front_limits){ .max_requests = 64, .max_per_client = 64, .stall_ms = 30000, .max_per_host = 16,
                            .worker_wait_ms = 2000 };
    F.epoch = 77;
    F.start_ms = net_now_ms() - 60000; /* long started: no adoption grace */
    F.parked = calloc(FRONT_MAX_PARKED, sizeof *F.parked);
    zctx = zmq_ctx_new();
    F.clients = zmq_socket(zctx, ZMQ_ROUTER);
    F.workers = zmq_socket(zctx, ZMQ_ROUTER);
    ck_assert_int_eq(zmq_bind(F.clients, "inproc://front-clients"), 0);
    ck_assert_int_eq(zmq_bind(F.workers, "inproc://front-workers"), 0);
    client = peer("inproc://front-clients", CRID, F.clients);
    wsock = peer("inproc://front-workers", WRID, F.workers);
}

static void teardown(void)
{
    front_req_free_all(&F);
    free(F.parked);
    tok_vocab_free(F.vocab);
    zmq_close(client);
    zmq_close(wsock);
    zmq_close(F.clients);
    zmq_close(F.workers);
    zmq_ctx_term(zctx);
}

/* Worker slot wi registered and live (the "w1" connection), context CTX. */
static void worker_up(int wi)
{
    front_worker *w = &F.w[wi];
    memset(w, 0, sizeof *w);
    w->live = 1;
    memcpy(w->rid, WRID, 2);
    w->rid_len = 2;
    w->wid = 100 + (uint64_t)wi;
    w->pid = 1000 + wi;
    w->cap = 16;
    w->ctx = CTX;
    w->last_ms = w->since_ms = w->prog_ms = net_now_ms();
    F.no_worker_ms = 0;
}

/* The next message on socket s (a DEALER), decoded; type -1 when none is waiting. */
static int next_msg(void *s, proto_msg *m)
{
    char buf[1 << 16], err[200];
    int n = zmq_recv(s, buf, sizeof buf, ZMQ_DONTWAIT);
    if (n < 0) return -1;
    ck_assert_msg(proto_decode(m, buf, (size_t)n, err, sizeof err) == 0, "%s", err);
    return m->type;
}

/* Skips messages of other types; the first of type t (which must come). */
static void expect(void *s, int t, proto_msg *m)
{
    for (;;) {
        int got = next_msg(s, m);
        ck_assert_msg(got >= 0, "expected a %s, none came", proto_type_name(t));
        if (got == t) return;
        if (got == PT_ERROR) {
            char msg[300] = "";
            proto_strcpy(m, "msg", msg, sizeof msg);
            ck_abort_msg("expected a %s, got ERROR: %s", proto_type_name(t), msg);
        }
        proto_msg_free(m);
    }
}

static void generate(uint64_t id, const char *prompt, int n)
{
    proto_writer w;
    proto_begin(&w, PT_GENERATE, id);
    proto_put_i64(&w, "n", n);
    proto_put_str(&w, "prompt", prompt);
    proto_put_map_begin(&w, "params", 1);
    proto_pack_str(&w.pk, "temperature");
    proto_pack_str(&w.pk, "0");
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
}

/* The worker sends token tok at step for session sess. */
static void token(uint64_t sess, int step, int32_t tok)
{
    proto_writer w;
    proto_begin(&w, PT_TOKEN, 0);
    proto_put_u64(&w, "sess", sess);
    proto_put_u64(&w, "step", (uint64_t)step);
    proto_put_i64(&w, "tok", tok);
    proto_put_u64(&w, "epoch", F.epoch);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_token(&F, 0, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
}

/* A token that is neither an end of generation nor a control token. */
static int32_t plain_token(void)
{
    return tok_n_vocab(F.vocab) - 1;
}

START_TEST(test_no_worker_waits)
{
    /* the last worker said goodbye in this very turn: no check has run since, so
     * nothing says "no worker" yet; the request must wait, not be refused */
    worker_up(0);
    F.w[0].live = 0;
    generate(1, "Once upon a time", 8);
    proto_msg m;
    expect(client, PT_ACCEPTED, &m);
    proto_msg_free(&m);
    ck_assert_ptr_nonnull(F.reqs);
    ck_assert_int_eq(F.reqs->state, RQ_QUEUED);
    ck_assert_int_eq((int)F.failed, 0);
    int64_t t0 = net_now_ms();
    front_tick(&F, t0 + 1000);
    ck_assert_ptr_nonnull(F.reqs); /* waits */
    ck_assert_int_eq(next_msg(client, &m), -1);
    /* a worker comes back: the request runs on it */
    worker_up(0);
    front_tick(&F, t0 + 2000);
    ck_assert_int_eq(F.reqs->state, RQ_RUNNING);
    expect(wsock, PT_RUN, &m);
    proto_msg_free(&m);
}
END_TEST

START_TEST(test_no_worker_in_time_fails)
{
    F.no_worker_ms = net_now_ms();
    generate(2, "Once upon a time", 8);
    proto_msg m;
    expect(client, PT_ACCEPTED, &m);
    proto_msg_free(&m);
    front_tick(&F, net_now_ms() + F.lim.worker_wait_ms / 2);
    ck_assert_ptr_nonnull(F.reqs);
    front_tick(&F, net_now_ms() + F.lim.worker_wait_ms + 1000); /* within the client timeout */
    ck_assert_ptr_null(F.reqs);
    expect(client, PT_ERROR, &m);
    char msg[300] = "", code[40] = "";
    proto_strcpy(&m, "msg", msg, sizeof msg);
    proto_strcpy(&m, "code", code, sizeof code);
    ck_assert_msg(strstr(msg, "no engine worker available for") != NULL, "%s", msg);
    ck_assert_str_eq(code, FRONT_E_NO_WORKER);
    proto_msg_free(&m);
}
END_TEST

/* A request runs on worker 0 until its context is full; returns it. */
static front_req *fill_context(void)
{
    worker_up(0);
    generate(3, "Once upon a time", 200);
    proto_msg m;
    expect(client, PT_ACCEPTED, &m);
    proto_msg_free(&m);
    front_req *r = F.reqs;
    ck_assert_int_eq(r->state, RQ_RUNNING);
    for (int step = 0; r->n_toks < CTX; step++) token(r->sess, step, plain_token());
    ck_assert_int_eq(r->n_toks, CTX);
    return r;
}

START_TEST(test_full_context_after_worker_death)
{
    /* the worker died after the token that filled the context, before it could say so */
    front_req *r = fill_context();
    int n_gen = r->n_gen;
    front_requeue_worker(&F, 0, 0);
    F.w[0].live = 0;
    worker_up(1);
    front_tick(&F, net_now_ms());
    ck_assert_ptr_null(F.reqs);
    ck_assert_int_eq((int)F.failed, 0);
    proto_msg m;
    expect(client, PT_DONE, &m);
    char reason[32] = "";
    proto_strcpy(&m, "reason", reason, sizeof reason);
    ck_assert_str_eq(reason, "context");
    ck_assert_int_eq((int)proto_u64(&m, "ntok", 0), n_gen);
    proto_msg_free(&m);
}
END_TEST

START_TEST(test_adopt_stopped_session)
{
    /* a front door restarts; the worker reports a session that filled its context while
     * no front door listened (idle); the client resumes and gets its end */
    front_req *r = fill_context();
    proto_msg m;
    while (next_msg(client, &m) >= 0) proto_msg_free(&m);
    while (next_msg(wsock, &m) >= 0) proto_msg_free(&m);
    msgpack_sbuffer fb;
    msgpack_sbuffer_init(&fb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, msgpack_sbuffer_write);
    front_fb_pack(r, &pk);
    proto_writer w;
    proto_begin(&w, PT_REPORT, r->sess);
    proto_put_u64(&w, "sess", r->sess);
    proto_put_ints(&w, "toks", r->toks, (size_t)r->n_toks);
    proto_put_u64(&w, "step", (uint64_t)r->n_gen);
    proto_put_u64(&w, "budget", (uint64_t)(r->n_predict - r->n_gen));
    proto_put_bin(&w, "sp", r->sp, r->sp_len);
    proto_put_u64(&w, "epoch", F.epoch + 1);
    proto_put_bin(&w, "fb", fb.data, fb.size);
    proto_put_bool(&w, "idle", 1);
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, r->key, sizeof key);
    uint64_t sess = r->sess;
    int n_gen = r->n_gen;
    /* the new front door: nothing held, a new epoch */
    front_req_free_all(&F);
    while (next_msg(wsock, &m) >= 0) proto_msg_free(&m); /* the old instance's STOP */
    F.epoch++;
    worker_up(0);
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_adopt(&F, 0, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    msgpack_sbuffer_destroy(&fb);
    r = front_find_sess(&F, sess);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->state, RQ_QUEUED); /* not "running" on a worker that stopped */
    ck_assert_int_eq(r->worker, -1);
    expect(wsock, PT_STOP, &m);
    proto_msg_free(&m);
    front_tick(&F, net_now_ms()); /* unattached: it waits for its client */
    ck_assert_ptr_nonnull(front_find_sess(&F, sess));
    /* the client resumes with 0 bytes of text: all of it comes, then the end */
    proto_begin(&w, PT_GENERATE, 9);
    proto_put_i64(&w, "n", 200);
    proto_put_str(&w, "prompt", "Once upon a time");
    proto_put_u64(&w, "resume", sess);
    proto_put_str(&w, "key", key);
    proto_put_u64(&w, "rbytes", 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    front_tick(&F, net_now_ms());
    expect(client, PT_DONE, &m);
    char reason[32] = "";
    proto_strcpy(&m, "reason", reason, sizeof reason);
    ck_assert_str_eq(reason, "context");
    ck_assert_int_eq((int)proto_u64(&m, "ntok", 0), n_gen);
    proto_msg_free(&m);
    ck_assert_ptr_null(F.reqs);
    ck_assert_int_eq((int)F.failed, 0);
}
END_TEST

START_TEST(test_prompt_too_long_still_refused)
{
    /* nothing generated yet: a prompt no worker's context holds is an error, as before */
    worker_up(0);
    F.w[0].ctx = 4;
    generate(4, "Once upon a time there was a little girl named Lily", 8);
    proto_msg m;
    expect(client, PT_ERROR, &m);
    char code[40] = "";
    proto_strcpy(&m, "code", code, sizeof code);
    ck_assert_str_eq(code, FRONT_E_CONTEXT);
    proto_msg_free(&m);
    ck_assert_ptr_null(F.reqs);
}
END_TEST

Suite *front_suite(void)
{
    Suite *s = suite_create("front");
    TCase *tc = tcase_create("queue");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_no_worker_waits);
    tcase_add_test(tc, test_no_worker_in_time_fails);
    tcase_add_test(tc, test_full_context_after_worker_death);
    tcase_add_test(tc, test_adopt_stopped_session);
    tcase_add_test(tc, test_prompt_too_long_still_refused);
    suite_add_tcase(s, tc);
    return s;
}
