/* Tests for the front door's queue (suite "front"). At the edges of restarts: a request
 * that arrives while no engine worker is registered waits for one (and fails, saying
 * so, after --worker-wait); a session whose generation filled the context before its
 * worker died ends with reason "context"; a session a worker reports as stopped is
 * queued, and its client's resume gets the text and the end. Against hostile peers:
 * chats held between turns are capped, freed when their client goes silent and leave
 * their worker slot to a queued request; a worker's REPORT is adopted only within the
 * window after a start, within the worker's capacity and context, and never replaces a
 * session the front door holds; an ended session's id cannot be resumed under another
 * key. The front door runs on
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
#include "sampler.h"
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
                            .worker_wait_ms = 2000, .max_held = 256, .max_held_per_client = 8 };
    F.tmpl = CHAT_TMPL_CHATML;
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
            proto_strcpy(m, MF_MSG, msg, sizeof msg);
            ck_abort_msg("expected a %s, got ERROR: %s", proto_type_name(t), msg);
        }
        proto_msg_free(m);
    }
}

/* A GENERATE from connection rid: a prompt, or a chat turn (chat set: prompt is the
 * user's message; cont/key: the session it continues). */
static void generate_from(const uint8_t *rid, uint64_t id, const char *prompt, int n, int chat, uint64_t cont,
                          const char *key)
{
    proto_writer w;
    proto_begin(&w, PT_GENERATE, id);
    proto_put_i64(&w, MF_N, n);
    if (chat) {
        proto_put_bool(&w, MF_CHAT, 1);
        proto_put_array_begin(&w, MF_MSGS, 2);
        proto_pack_str(&w.pk, "user");
        proto_pack_str(&w.pk, prompt);
    } else {
        proto_put_str(&w, MF_PROMPT, prompt);
    }
    if (cont) {
        proto_put_u64(&w, MF_SESS, cont);
        proto_put_str(&w, MF_KEY, key);
    }
    proto_put_map_begin(&w, MF_PARAMS, 1);
    proto_pack_str(&w.pk, "temperature");
    proto_pack_str(&w.pk, "0");
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_generate(&F, rid, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
}

static void generate(uint64_t id, const char *prompt, int n)
{
    generate_from(CRID, id, prompt, n, 0, 0, NULL);
}

/* The worker sends token tok at step for session sess. */
static void token(uint64_t sess, int step, int32_t tok)
{
    proto_writer w;
    proto_begin(&w, PT_TOKEN, 0);
    proto_put_u64(&w, MF_SESS, sess);
    proto_put_u64(&w, MF_STEP, (uint64_t)step);
    proto_put_i64(&w, MF_TOK, tok);
    proto_put_u64(&w, MF_EPOCH, F.epoch);
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
    proto_strcpy(&m, MF_MSG, msg, sizeof msg);
    proto_strcpy(&m, MF_CODE, code, sizeof code);
    ck_assert_msg(strstr(msg, "no engine worker available for") != NULL, "%s", msg);
    ck_assert_str_eq(code, errcode_name(ERR_UNAVAILABLE));
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
    proto_strcpy(&m, MF_REASON, reason, sizeof reason);
    ck_assert_str_eq(reason, "context");
    ck_assert_int_eq((int)proto_u64(&m, MF_NTOK, 0), n_gen);
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
    proto_put_u64(&w, MF_SESS, r->sess);
    proto_put_ints(&w, MF_TOKS, r->toks, (size_t)r->n_toks);
    proto_put_u64(&w, MF_STEP, (uint64_t)r->n_gen);
    proto_put_u64(&w, MF_BUDGET, (uint64_t)(r->n_predict - r->n_gen));
    proto_put_bin(&w, MF_SP, r->sp, r->sp_len);
    proto_put_u64(&w, MF_EPOCH, F.epoch + 1);
    proto_put_bin(&w, MF_FB, fb.data, fb.size);
    proto_put_bool(&w, MF_IDLE, 1);
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, r->key, sizeof key);
    uint64_t sess = r->sess;
    int n_gen = r->n_gen;
    /* the new front door: nothing held, a new epoch */
    front_req_free_all(&F);
    while (next_msg(wsock, &m) >= 0) proto_msg_free(&m); /* the old instance's STOP */
    F.epoch++;
    F.start_ms = net_now_ms();
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
    proto_put_i64(&w, MF_N, 200);
    proto_put_str(&w, MF_PROMPT, "Once upon a time");
    proto_put_u64(&w, MF_RESUME, sess);
    proto_put_str(&w, MF_KEY, key);
    proto_put_u64(&w, MF_RBYTES, 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    front_tick(&F, net_now_ms());
    expect(client, PT_DONE, &m);
    char reason[32] = "";
    proto_strcpy(&m, MF_REASON, reason, sizeof reason);
    ck_assert_str_eq(reason, "context");
    ck_assert_int_eq((int)proto_u64(&m, MF_NTOK, 0), n_gen);
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
    proto_strcpy(&m, MF_CODE, code, sizeof code);
    ck_assert_str_eq(code, errcode_name(ERR_CONTEXT));
    proto_msg_free(&m);
    ck_assert_ptr_null(F.reqs);
}
END_TEST

/* A chat turn of one token from connection rid that finishes on worker 0: held there. */
static front_req *held_chat(const uint8_t *rid, uint64_t id)
{
    generate_from(rid, id, "Hello", 1, 1, 0, NULL);
    front_req *r = F.reqs;
    while (r && r->client_id != id) r = r->next;
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->state, RQ_RUNNING);
    token(r->sess, 0, plain_token());
    ck_assert_int_eq(r->state, RQ_HELD);
    ck_assert_int_eq(r->worker, 0);
    return r;
}

static void drain(void *s)
{
    proto_msg m;
    while (next_msg(s, &m) >= 0) proto_msg_free(&m);
}

START_TEST(test_held_chat_leaves_slot_to_queued)
{
    /* a worker of one slot holds an idle chat: a new request takes the slot, the chat's
     * next turn runs after it, prefilled again */
    worker_up(0);
    F.w[0].cap = 1;
    front_req *chat = held_chat(CRID, 10);
    uint64_t sess = chat->sess;
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, chat->key, sizeof key);
    drain(wsock);
    generate(11, "Once upon a time", 4);
    proto_msg m;
    expect(wsock, PT_STOP, &m); /* the chat leaves the worker... */
    ck_assert_int_eq((int)(proto_u64(&m, MF_SESS, 0) == sess), 1);
    proto_msg_free(&m);
    expect(wsock, PT_RUN, &m); /* ...and the request runs there */
    proto_msg_free(&m);
    chat = front_find_sess(&F, sess);
    ck_assert_int_eq(chat->state, RQ_HELD);
    ck_assert_int_eq(chat->worker, -1);
    ck_assert_int_eq(F.w[0].assigned, 1);
    /* the chat's next turn waits for the slot, then runs */
    generate_from(CRID, 12, "Again", 2, 1, sess, key);
    ck_assert_int_eq(chat->state, RQ_QUEUED);
    front_req *q = F.reqs;
    while (q->client_id != 11) q = q->next;
    token(q->sess, 0, plain_token());
    for (int i = 1; i < 4 && front_find_sess(&F, q->sess); i++) token(q->sess, i, plain_token());
    front_tick(&F, net_now_ms());
    ck_assert_int_eq(chat->state, RQ_RUNNING);
}
END_TEST

START_TEST(test_held_chat_caps)
{
    worker_up(0);
    F.lim.max_held_per_client = 2;
    uint64_t first = held_chat(CRID, 20)->sess;
    held_chat(CRID, 21);
    held_chat(CRID, 22); /* the third of one connection: the one idle the longest goes */
    int held = 0, mine = 0;
    front_load(&F, CRID, 2, NULL, NULL, &held, &mine);
    ck_assert_int_eq(mine, 2);
    ck_assert_ptr_null(front_find_sess(&F, first));
    F.lim.max_held = 2; /* in all: the same */
    F.lim.max_held_per_client = 8;
    held_chat(CRID, 23);
    front_load(&F, NULL, 0, NULL, NULL, &held, NULL);
    ck_assert_int_eq(held, 2);
}
END_TEST

START_TEST(test_held_chat_freed_when_client_silent)
{
    worker_up(0);
    front_req *a = held_chat(CRID, 30), *b = held_chat(CRID, 31);
    uint64_t sa = a->sess, sb = b->sess;
    /* b's client pings it (by session and key, as llmc chat does between turns) */
    int64_t later = net_now_ms() + FRONT_HELD_SILENT_MS / 2;
    front_tick(&F, later);
    proto_writer w;
    proto_begin(&w, PT_PING, 0);
    proto_put_u64(&w, MF_SESS, sb);
    proto_put_str(&w, MF_KEY, b->key);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_client_msg(&F, CRID, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    b->client_ms = later; /* the ping's time on the test's clock */
    front_tick(&F, net_now_ms() + FRONT_HELD_SILENT_MS + 1000);
    ck_assert_ptr_null(front_find_sess(&F, sa)); /* silent: freed, its worker told */
    ck_assert_ptr_nonnull(front_find_sess(&F, sb));
    ck_assert_int_eq(F.w[0].assigned, 1);
    /* its connection closes: freed at once */
    front_client_gone(&F, CRID, 2);
    front_tick(&F, net_now_ms());
    ck_assert_ptr_null(front_find_sess(&F, sb));
    ck_assert_int_eq(F.w[0].assigned, 0);
}
END_TEST

/* A REPORT of session sess from worker 0 with n_toks tokens (prompt of 4), in the
 * current epoch. */
static void report(uint64_t sess, const char *key, int n_toks, int idle)
{
    front_req fake;
    memset(&fake, 0, sizeof fake);
    snprintf(fake.key, sizeof fake.key, "%s", key);
    fake.n_prompt = 4;
    fake.n_predict = 100;
    msgpack_sbuffer fb;
    msgpack_sbuffer_init(&fb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, msgpack_sbuffer_write);
    front_fb_pack(&fake, &pk);
    int32_t *toks = calloc((size_t)n_toks, sizeof *toks);
    for (int i = 0; i < n_toks; i++) toks[i] = plain_token();
    smp_params p = smp_params_default();
    uint8_t sp[SMP_WIRE_MAX];
    size_t sp_len = smp_params_to_wire(&p, sp);
    proto_writer w;
    proto_begin(&w, PT_REPORT, sess);
    proto_put_u64(&w, MF_SESS, sess);
    proto_put_ints(&w, MF_TOKS, toks, (size_t)n_toks);
    proto_put_u64(&w, MF_STEP, (uint64_t)(n_toks - 4));
    proto_put_u64(&w, MF_BUDGET, 10);
    proto_put_bin(&w, MF_SP, sp, sp_len);
    proto_put_u64(&w, MF_EPOCH, F.epoch);
    proto_put_bin(&w, MF_FB, fb.data, fb.size);
    if (idle) proto_put_bool(&w, MF_IDLE, 1);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_adopt(&F, 0, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    msgpack_sbuffer_destroy(&fb);
    free(toks);
}

static const char KEY_A[] = "0123456789abcdef0123456789abcdef", KEY_B[] = "fedcba9876543210fedcba9876543210";

START_TEST(test_report_bounds)
{
    worker_up(0);
    F.start_ms = net_now_ms(); /* just started: in the adoption window */
    report(0x1001, KEY_A, 10, 0);
    ck_assert_ptr_nonnull(front_find_sess(&F, 0x1001));
    report(0x1003, KEY_A, CTX + 1, 0); /* more than the worker's context */
    ck_assert_ptr_null(front_find_sess(&F, 0x1003));
    F.w[0].cap = 2;
    report(0x1005, KEY_A, 10, 0);
    report(0x1007, KEY_A, 10, 0); /* beyond the worker's capacity */
    ck_assert_ptr_nonnull(front_find_sess(&F, 0x1005));
    ck_assert_ptr_null(front_find_sess(&F, 0x1007));
    F.w[0].cap = 16;
    F.lim.max_requests = 2; /* the front door is full */
    report(0x1009, KEY_A, 10, 0);
    ck_assert_ptr_null(front_find_sess(&F, 0x1009));
    F.lim.max_requests = 64;
    F.start_ms = net_now_ms() - FRONT_ADOPT_WINDOW_MS - 1; /* the window is over */
    report(0x100b, KEY_A, 10, 0);
    ck_assert_ptr_null(front_find_sess(&F, 0x100b));
    proto_msg m;
    int stops = 0;
    while (next_msg(wsock, &m) >= 0) { stops += m.type == PT_STOP; proto_msg_free(&m); }
    ck_assert_int_eq(stops, 4); /* each refused session is stopped on the worker */
}
END_TEST

START_TEST(test_report_never_replaces)
{
    /* a fake worker reports the id of a queued request: the request keeps its key */
    F.start_ms = net_now_ms();
    worker_up(0);
    F.w[0].cap = 0; /* no room: it stays queued */
    generate(40, "Once upon a time", 8);
    front_req *r = F.reqs;
    ck_assert_int_eq(r->state, RQ_QUEUED);
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, r->key, sizeof key);
    F.w[0].cap = 16;
    F.w[0].assigned = 0;
    report(r->sess, KEY_B, 10, 0);
    ck_assert_ptr_eq(front_find_sess(&F, r->sess), r);
    ck_assert_str_eq(r->key, key);
    ck_assert_int_eq(r->attached, 1);
    /* a report of its own session by the worker that runs it changes nothing */
    front_tick(&F, net_now_ms());
    ck_assert_int_eq(r->state, RQ_RUNNING);
    drain(wsock);
    F.start_ms = net_now_ms() - FRONT_ADOPT_WINDOW_MS - 1;
    report(r->sess, r->key, 10, 0);
    ck_assert_int_eq(r->state, RQ_RUNNING);
    ck_assert_int_eq(r->worker, 0);
    proto_msg m;
    ck_assert_int_eq(next_msg(wsock, &m), -1); /* no STOP */
}
END_TEST

START_TEST(test_ended_session_keeps_its_key)
{
    worker_up(0);
    generate(50, "Once upon a time", 1);
    front_req *r = F.reqs;
    uint64_t sess = r->sess;
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, r->key, sizeof key);
    token(sess, 0, plain_token());
    ck_assert_ptr_null(F.reqs); /* ended */
    drain(client);
    /* someone else resumes its id with a key of their own: refused */
    proto_writer w;
    proto_begin(&w, PT_GENERATE, 51);
    proto_put_i64(&w, MF_N, 8);
    proto_put_str(&w, MF_PROMPT, "mine now");
    proto_put_u64(&w, MF_RESUME, sess);
    proto_put_str(&w, MF_KEY, strcmp(key, KEY_A) ? KEY_A : KEY_B);
    proto_put_u64(&w, MF_RBYTES, 0);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    ck_assert_int_eq(next_msg(client, &m), PT_ERROR);
    char code[40] = "";
    proto_strcpy(&m, MF_CODE, code, sizeof code);
    ck_assert_str_eq(code, errcode_name(ERR_UNKNOWN_SESSION));
    proto_msg_free(&m);
    ck_assert_ptr_null(F.reqs);
    /* its owner may (a resume after a restart that found it ended) */
    proto_begin(&w, PT_GENERATE, 52);
    proto_put_i64(&w, MF_N, 1);
    proto_put_str(&w, MF_PROMPT, "Once upon a time");
    proto_put_u64(&w, MF_RESUME, sess);
    proto_put_str(&w, MF_KEY, key);
    proto_put_u64(&w, MF_RBYTES, 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
    proto_writer_free(&w);
    expect(client, PT_ACCEPTED, &m);
    ck_assert_int_eq((int)(proto_u64(&m, MF_SESS, 0) == sess), 1);
    proto_msg_free(&m);
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
    tcase_add_test(tc, test_held_chat_leaves_slot_to_queued);
    tcase_add_test(tc, test_held_chat_caps);
    tcase_add_test(tc, test_held_chat_freed_when_client_silent);
    tcase_add_test(tc, test_report_bounds);
    tcase_add_test(tc, test_report_never_replaces);
    tcase_add_test(tc, test_ended_session_keeps_its_key);
    suite_add_tcase(s, tc);
    return s;
}
