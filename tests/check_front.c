/* Tests for the front door's state machine (suite "front"), driven without sockets:
 * the tests call its handlers as the loop in frontd.c would (front_generate,
 * front_token, front_adopt, front_tick...) and read what it sent from its outbox
 * (front_out_pop). Admission: ACCEPTED, the RUN, the text and the end; a bad request
 * refused. The queue: --max-requests and --max-per-client refused with queue_full,
 * positions in ACCEPTED that move up as the head runs. A worker's death: its session is
 * replayed onto another worker at the same step, the text with no gap and no repeat. At
 * the edges of restarts: a request that arrives while no engine worker is registered
 * waits for one (and fails, saying so, after --worker-wait); a session whose generation
 * filled the context before its worker died ends with reason "context"; a session a
 * worker REPORTs after a restart is adopted (running: its tokens are kept, its client's
 * resume gets the text it lacks; stopped: queued, the resume gets the text and the end);
 * a resume that arrives before the report is parked and admitted again. Against hostile
 * peers: a resume or a chat turn under a wrong key is refused; chats held between turns
 * are capped, freed when their client goes silent and leave their worker slot to a
 * queued request; a worker's REPORT is adopted only within the window after a start,
 * within the worker's capacity and context, and never replaces a session the front door
 * holds; an ended session's id cannot be resumed under another key. A chat's next turn
 * goes back to the worker that holds it. Vocabulary: stories260K from $LLM_SHARED. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "gguf.h"
#include "log.h"
#include "net.h"
#include "proto.h"
#include "sampler.h"
#include "tok.h"

#define CTX 48 /* the workers' context in these tests */

static front F;
/* Routing ids are a letter and a digit: clients c1, c2; workers w0, w1 (worker_up). */
static const uint8_t CRID[] = "c1", C2RID[] = "c2";

/* What the front door sent to one peer, oldest first: the outbox sorted by routing id. */
#define BOX_CAP 2048
typedef struct {
    char  *data[BOX_CAP];
    size_t len[BOX_CAP];
    int    head, n;
} mailbox;
static mailbox clients[4], workers[4]; /* by the routing id's digit */
#define CLIENT  (&clients[1])
#define CLIENT2 (&clients[2])
#define W0      (&workers[0])
#define W1      (&workers[1])

/* Moves every message of the outbox into its peer's mailbox. */
static void collect(void)
{
    front_out o;
    while (front_out_pop(&F, &o)) {
        ck_assert_int_eq((int)o.rid_len, 2);
        int d = o.rid[1] - '0';
        ck_assert(d >= 0 && d < 4);
        mailbox *b = o.to == FRONT_TO_CLIENT ? &clients[d] : &workers[d];
        ck_assert_int_lt(b->n, BOX_CAP);
        b->data[b->n] = o.data;
        b->len[b->n++] = o.len;
    }
}

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

static void setup(void)
{
    log_init("check_front", LOG_ERROR);
    memset(&F, 0, sizeof F);
    memset(clients, 0, sizeof clients);
    memset(workers, 0, sizeof workers);
    load_vocab();
    F.lim = (front_limits){ .max_requests = 64, .max_per_client = 64, .stall_ms = 30000, .max_per_host = 16,
                            .worker_wait_ms = 2000, .max_held = 256, .max_held_per_client = 8 };
    F.tmpl = CHAT_TMPL_CHATML;
    F.epoch = 77;
    F.start_ms = net_now_ms() - 60000; /* long started: no adoption grace */
    F.parked = calloc(FRONT_MAX_PARKED, sizeof *F.parked);
}

static void drain(mailbox *b);

static void teardown(void)
{
    front_req_free_all(&F);
    for (int i = 0; i < 4; i++) {
        drain(&clients[i]);
        drain(&workers[i]);
    }
    front_out_free_all(&F);
    for (int i = 0; i < F.n_parked; i++) proto_msg_free(&F.parked[i].m);
    free(F.parked);
    tok_vocab_free(F.vocab);
}

/* Worker slot wi registered and live (routing id "w<wi>"), context CTX. */
static void worker_up(int wi)
{
    front_worker *w = &F.w[wi];
    memset(w, 0, sizeof *w);
    w->live = 1;
    w->rid[0] = 'w';
    w->rid[1] = (uint8_t)('0' + wi);
    w->rid_len = 2;
    w->wid = 100 + (uint64_t)wi;
    w->pid = 1000 + wi;
    w->cap = 16;
    w->ctx = CTX;
    w->last_ms = w->since_ms = w->prog_ms = net_now_ms();
    F.no_worker_ms = 0;
}

/* The next message the front door sent to b, decoded; type -1 when none is waiting. */
static int next_msg(mailbox *b, proto_msg *m)
{
    char err[200];
    collect();
    if (b->head == b->n) return -1;
    int i = b->head++;
    ck_assert_msg(proto_decode(m, b->data[i], b->len[i], err, sizeof err) == 0, "%s", err);
    free(b->data[i]);
    b->data[i] = NULL;
    return m->type;
}

/* Skips messages of other types; the first of type t (which must come). */
static void expect(mailbox *b, int t, proto_msg *m)
{
    for (;;) {
        int got = next_msg(b, m);
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

static void drain(mailbox *b)
{
    proto_msg m;
    while (next_msg(b, &m) >= 0) proto_msg_free(&m);
}

/* The next message to b is an ERROR with this code; its text goes to msg (may be NULL). */
static void expect_error(mailbox *b, errcode code, char *msg, size_t cap)
{
    proto_msg m;
    ck_assert_int_eq(next_msg(b, &m), PT_ERROR);
    char name[40] = "";
    proto_strcpy(&m, MF_CODE, name, sizeof name);
    ck_assert_str_eq(name, errcode_name(code));
    if (msg) proto_strcpy(&m, MF_MSG, msg, cap);
    proto_msg_free(&m);
}

/* Decodes what w wrote into m (the caller frees m); frees w. */
static void decode(proto_writer *w, proto_msg *m)
{
    char err[200];
    ck_assert_msg(proto_decode(m, proto_data(w), proto_size(w), err, sizeof err) == 0, "%s", err);
    proto_writer_free(w);
}

/* A GENERATE as a client sends it. */
typedef struct {
    const uint8_t *rid;  /* its connection (NULL: CRID) */
    const char *prompt;  /* the prompt, or the user's message of a chat; NULL: none (refused) */
    int         n;       /* tokens to generate */
    int         chat;
    uint64_t    cont;    /* the held chat session it continues, or 0 */
    uint64_t    resume;  /* the session it resumes after a restart, or 0 */
    const char *key;     /* the session's key, with cont or resume */
    uint64_t    rbytes;  /* with resume: text bytes the client has */
} gen;

static void send_gen(uint64_t id, gen g)
{
    proto_writer w;
    proto_begin(&w, PT_GENERATE, id);
    proto_put_i64(&w, MF_N, g.n);
    if (g.chat) {
        proto_put_bool(&w, MF_CHAT, 1);
        proto_put_array_begin(&w, MF_MSGS, 2);
        proto_pack_str(&w.pk, "user");
        proto_pack_str(&w.pk, g.prompt);
    } else if (g.prompt) {
        proto_put_str(&w, MF_PROMPT, g.prompt);
    }
    if (g.cont) proto_put_u64(&w, MF_SESS, g.cont);
    if (g.resume) {
        proto_put_u64(&w, MF_RESUME, g.resume);
        proto_put_u64(&w, MF_RBYTES, g.rbytes);
    }
    if (g.key) proto_put_str(&w, MF_KEY, g.key);
    proto_put_map_begin(&w, MF_PARAMS, 1);
    proto_pack_str(&w.pk, "temperature");
    proto_pack_str(&w.pk, "0");
    proto_msg m;
    decode(&w, &m);
    front_generate(&F, g.rid ? g.rid : CRID, 2, &m);
    proto_msg_free(&m);
}

static void generate(uint64_t id, const char *prompt, int n)
{
    send_gen(id, (gen){ .prompt = prompt, .n = n });
}

/* Worker wi sends token tok at step for session sess. */
static void token_from(int wi, uint64_t sess, int step, int32_t tok)
{
    proto_writer w;
    proto_begin(&w, PT_TOKEN, 0);
    proto_put_u64(&w, MF_SESS, sess);
    proto_put_u64(&w, MF_STEP, (uint64_t)step);
    proto_put_i64(&w, MF_TOK, tok);
    proto_put_u64(&w, MF_EPOCH, F.epoch);
    proto_msg m;
    decode(&w, &m);
    front_token(&F, wi, &m);
    proto_msg_free(&m);
}

static void token(uint64_t sess, int step, int32_t tok)
{
    token_from(0, sess, step, tok);
}

/* A token that is neither an end of generation nor a control token. */
static int32_t plain_token(void)
{
    return tok_n_vocab(F.vocab) - 1;
}

/* The request of client request id, or NULL. */
static front_req *req_of(uint64_t id)
{
    front_req *r = F.reqs;
    while (r && r->client_id != id) r = r->next;
    return r;
}

/* The ACCEPTED that must come next to b (other messages skipped): its session, and its
 * queue position in *pos (may be NULL). */
static uint64_t accepted(mailbox *b, int *pos)
{
    proto_msg m;
    expect(b, PT_ACCEPTED, &m);
    uint64_t sess = proto_u64(&m, MF_SESS, 0);
    if (pos) *pos = (int)proto_u64(&m, MF_POS, 99);
    proto_msg_free(&m);
    return sess;
}

/* Story tokens to generate (no end of generation among them), and their text as the
 * front door's detokenizer writes it. */
static int story_tokens(int32_t *ids, int cap, char *text, size_t text_cap)
{
    const char *s = " and the little dog ran to the park with Lily";
    int32_t *enc = NULL;
    size_t n = 0;
    char err[200];
    ck_assert_msg(tok_encode(F.vocab, s, strlen(s), false, false, &enc, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_int_ge((int)n, 6);
    if ((int)n > cap) n = (size_t)cap;
    memcpy(ids, enc, n * sizeof *ids);
    free(enc);
    tok_stream *ts = tok_stream_new(F.vocab, TOK_STREAM_KEEP_SPACE);
    size_t len = 0, k;
    for (size_t i = 0; i < n; i++) {
        const char *p = tok_stream_push(ts, ids[i], &k);
        ck_assert_uint_lt(len + k, text_cap);
        memcpy(text + len, p, k);
        len += k;
    }
    const char *p = tok_stream_flush(ts, &k);
    ck_assert_uint_lt(len + k, text_cap);
    memcpy(text + len, p, k);
    text[len + k] = 0;
    tok_stream_free(ts);
    return (int)n;
}

/* Appends the text of every PIECE waiting for b to text (NUL-terminated, *len bytes);
 * stops after a DONE (its reason to reason, when given) and returns 1, else 0. */
static int read_text(mailbox *b, char *text, size_t cap, size_t *len, char *reason)
{
    proto_msg m;
    int t;
    while ((t = next_msg(b, &m)) >= 0) {
        size_t n = 0;
        const char *p = t == PT_PIECE ? proto_str(&m, MF_TEXT, &n) : NULL;
        ck_assert_uint_lt(*len + n, cap);
        if (n) memcpy(text + *len, p, n);
        *len += n;
        text[*len] = 0;
        if (t == PT_DONE && reason) proto_strcpy(&m, MF_REASON, reason, 32);
        proto_msg_free(&m);
        if (t == PT_DONE) return 1;
    }
    return 0;
}

/* The RUN that must come next to worker b (other messages skipped): its record, its
 * tokens into toks (cap), the count returned. */
static int expect_run(mailbox *b, proto_sessrec *rec, int32_t *toks, int cap)
{
    proto_msg m;
    expect(b, PT_RUN, &m);
    proto_get_sessrec(&m, rec);
    long n = proto_ints(&m, MF_TOKS, toks, (size_t)cap);
    rec->toks = NULL;
    rec->sp = NULL;
    rec->fb = NULL;
    proto_msg_free(&m);
    return (int)n;
}

/* A REPORT of r's session as its worker sends it to the front door of epoch (decoded
 * into m; the caller frees it): r's tokens, step, parameters and record. */
static void report_of(const front_req *r, int idle, uint64_t epoch, proto_msg *m)
{
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
    proto_put_u64(&w, MF_EPOCH, epoch);
    proto_put_bin(&w, MF_FB, fb.data, fb.size);
    if (idle) proto_put_bool(&w, MF_IDLE, 1);
    decode(&w, m);
    msgpack_sbuffer_destroy(&fb);
}

/* The front door is killed and starts again: nothing held, nothing remembered, no
 * worker registered yet, a new epoch. */
static void restart(void)
{
    front_req_free_all(&F);
    for (int i = 0; i < 4; i++) {
        drain(&clients[i]);
        drain(&workers[i]); /* the old instance's STOPs */
    }
    memset(F.w, 0, sizeof F.w);
    memset(F.tombs, 0, sizeof F.tombs);
    F.epoch++;
    F.start_ms = net_now_ms();
    F.no_worker_ms = F.start_ms;
}

START_TEST(test_no_worker_waits)
{
    /* the last worker said goodbye in this very turn: no check has run since, so
     * nothing says "no worker" yet; the request must wait, not be refused */
    worker_up(0);
    F.w[0].live = 0;
    generate(1, "Once upon a time", 8);
    proto_msg m;
    expect(CLIENT, PT_ACCEPTED, &m);
    proto_msg_free(&m);
    ck_assert_ptr_nonnull(F.reqs);
    ck_assert_int_eq(F.reqs->state, RQ_QUEUED);
    ck_assert_int_eq((int)F.failed, 0);
    int64_t t0 = net_now_ms();
    front_tick(&F, t0 + 1000);
    ck_assert_ptr_nonnull(F.reqs); /* waits */
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    /* a worker comes back: the request runs on it */
    worker_up(0);
    front_tick(&F, t0 + 2000);
    ck_assert_int_eq(F.reqs->state, RQ_RUNNING);
    expect(W0, PT_RUN, &m);
    proto_msg_free(&m);
}
END_TEST

START_TEST(test_no_worker_in_time_fails)
{
    F.no_worker_ms = net_now_ms();
    generate(2, "Once upon a time", 8);
    proto_msg m;
    expect(CLIENT, PT_ACCEPTED, &m);
    proto_msg_free(&m);
    front_tick(&F, net_now_ms() + F.lim.worker_wait_ms / 2);
    ck_assert_ptr_nonnull(F.reqs);
    front_tick(&F, net_now_ms() + F.lim.worker_wait_ms + 1000); /* within the client timeout */
    ck_assert_ptr_null(F.reqs);
    expect(CLIENT, PT_ERROR, &m);
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
    expect(CLIENT, PT_ACCEPTED, &m);
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
    expect(CLIENT, PT_DONE, &m);
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
    report_of(r, 1, F.epoch + 1, &m);
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, r->key, sizeof key);
    uint64_t sess = r->sess;
    int n_gen = r->n_gen;
    restart();
    worker_up(0);
    front_adopt(&F, 0, &m);
    proto_msg_free(&m);
    r = front_find_sess(&F, sess);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->state, RQ_QUEUED); /* not "running" on a worker that stopped */
    ck_assert_int_eq(r->worker, -1);
    expect(W0, PT_STOP, &m);
    proto_msg_free(&m);
    front_tick(&F, net_now_ms()); /* unattached: it waits for its client */
    ck_assert_ptr_nonnull(front_find_sess(&F, sess));
    /* the client resumes with 0 bytes of text: all of it comes, then the end */
    send_gen(9, (gen){ .prompt = "Once upon a time", .n = 200, .resume = sess, .key = key });
    front_tick(&F, net_now_ms());
    expect(CLIENT, PT_DONE, &m);
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
    expect(CLIENT, PT_ERROR, &m);
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
    send_gen(id, (gen){ .rid = rid, .prompt = "Hello", .n = 1, .chat = 1 });
    front_req *r = F.reqs;
    while (r && r->client_id != id) r = r->next;
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->state, RQ_RUNNING);
    token(r->sess, 0, plain_token());
    ck_assert_int_eq(r->state, RQ_HELD);
    ck_assert_int_eq(r->worker, 0);
    return r;
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
    drain(W0);
    generate(11, "Once upon a time", 4);
    proto_msg m;
    expect(W0, PT_STOP, &m); /* the chat leaves the worker... */
    ck_assert_int_eq((int)(proto_u64(&m, MF_SESS, 0) == sess), 1);
    proto_msg_free(&m);
    expect(W0, PT_RUN, &m); /* ...and the request runs there */
    proto_msg_free(&m);
    chat = front_find_sess(&F, sess);
    ck_assert_int_eq(chat->state, RQ_HELD);
    ck_assert_int_eq(chat->worker, -1);
    ck_assert_int_eq(F.w[0].assigned, 1);
    /* the chat's next turn waits for the slot, then runs */
    send_gen(12, (gen){ .prompt = "Again", .n = 2, .chat = 1, .cont = sess, .key = key });
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
    decode(&w, &m);
    front_client_msg(&F, CRID, 2, &m);
    proto_msg_free(&m);
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

/* A held chat's client silent for FRONT_HELD_PROBE_MS is sent a PONG of id 0 once a
 * second (its connection closed: the send fails, frontd marks it gone, and the next tick
 * frees it); a client that pings is not probed. */
START_TEST(test_held_chat_probed)
{
    worker_up(0);
    front_req *a = held_chat(CRID, 32);
    drain(CLIENT);
    int64_t t0 = a->client_ms;
    proto_msg m;
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS - 100);
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS + 1);
    ck_assert_int_eq(next_msg(CLIENT, &m), PT_PONG);
    ck_assert_uint_eq(m.id, 0);
    proto_msg_free(&m);
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS + 500); /* once a second */
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS + 1001);
    ck_assert_int_eq(next_msg(CLIENT, &m), PT_PONG);
    proto_msg_free(&m);
    a->client_ms = t0 + FRONT_HELD_PROBE_MS + 1500; /* it pinged: no probe */
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS + 2500);
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    ck_assert_ptr_nonnull(front_find_sess(&F, a->sess));
    /* a chat adopted after a restart has no connection until its client resumes (its
     * pings come by session): no probe to an empty routing id (collect asserts 2 bytes),
     * and no "closed" empty id frees it */
    a->rid_len = 0;
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS + 5000);
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    front_client_gone(&F, a->rid, 0);
    front_tick(&F, t0 + FRONT_HELD_PROBE_MS + 5100);
    ck_assert_ptr_nonnull(front_find_sess(&F, a->sess));
}
END_TEST

/* A REPORT of session sess from worker 0 with n_toks tokens (prompt of 4), in the
 * current epoch. */
static void report(uint64_t sess, const char *key, int n_toks, int idle)
{
    front_req fake;
    memset(&fake, 0, sizeof fake);
    fake.sess = sess;
    snprintf(fake.key, sizeof fake.key, "%s", key);
    fake.n_prompt = 4;
    fake.n_predict = 100;
    fake.n_toks = n_toks;
    fake.n_gen = n_toks - 4;
    int32_t toks[256];
    ck_assert_int_le(n_toks, 256);
    for (int i = 0; i < n_toks; i++) toks[i] = plain_token();
    fake.toks = toks;
    smp_params p = smp_params_default();
    fake.sp_len = smp_params_to_wire(&p, fake.sp);
    proto_msg m;
    report_of(&fake, idle, F.epoch, &m);
    front_adopt(&F, 0, &m);
    proto_msg_free(&m);
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
    while (next_msg(W0, &m) >= 0) { stops += m.type == PT_STOP; proto_msg_free(&m); }
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
    drain(W0);
    F.start_ms = net_now_ms() - FRONT_ADOPT_WINDOW_MS - 1;
    report(r->sess, r->key, 10, 0);
    ck_assert_int_eq(r->state, RQ_RUNNING);
    ck_assert_int_eq(r->worker, 0);
    proto_msg m;
    ck_assert_int_eq(next_msg(W0, &m), -1); /* no STOP */
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
    drain(CLIENT);
    /* someone else resumes its id with a key of their own: refused */
    send_gen(51, (gen){ .prompt = "mine now", .n = 8, .resume = sess, .key = strcmp(key, KEY_A) ? KEY_A : KEY_B });
    expect_error(CLIENT, ERR_UNKNOWN_SESSION, NULL, 0);
    ck_assert_ptr_null(F.reqs);
    /* its owner may (a resume after a restart that found it ended) */
    send_gen(52, (gen){ .prompt = "Once upon a time", .n = 1, .resume = sess, .key = key });
    ck_assert_int_eq((int)(accepted(CLIENT, NULL) == sess), 1);
}
END_TEST

START_TEST(test_admission)
{
    /* a request is tokenized, answered ACCEPTED, sent to the worker, and streams */
    worker_up(0);
    generate(60, "Once upon a time", 3);
    proto_msg m;
    expect(CLIENT, PT_ACCEPTED, &m);
    uint64_t sess = proto_u64(&m, MF_SESS, 0);
    size_t kl = 0;
    ck_assert_ptr_nonnull(proto_str(&m, MF_KEY, &kl));
    ck_assert_int_eq((int)kl, FRONT_KEY_HEX);
    ck_assert_int_eq((int)proto_u64(&m, MF_POS, 99), 0); /* running, not queued */
    int n_prompt = (int)proto_u64(&m, MF_NTOK, 0);
    proto_msg_free(&m);
    front_req *r = front_find_sess(&F, sess);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->n_prompt, n_prompt);
    proto_sessrec rec;
    int32_t toks[CTX];
    ck_assert_int_eq(expect_run(W0, &rec, toks, CTX), n_prompt);
    ck_assert_int_eq((int)(rec.sess == sess), 1);
    ck_assert_int_eq((int)rec.step, 0);
    ck_assert_int_eq((int)rec.budget, 3);
    ck_assert_int_eq(memcmp(toks, r->toks, (size_t)n_prompt * sizeof *toks), 0);
    int32_t ids[16];
    char want[256], got[256] = "", reason[32] = "";
    int n = story_tokens(ids, 3, want, sizeof want);
    for (int i = 0; i < n; i++) token(sess, i, ids[i]);
    size_t len = 0;
    ck_assert_int_eq(read_text(CLIENT, got, sizeof got, &len, reason), 1);
    ck_assert_str_eq(reason, "length");
    ck_assert_str_eq(got, want);
    ck_assert_ptr_null(F.reqs);
    ck_assert_int_eq((int)F.served, 1);
    ck_assert_int_eq(F.w[0].assigned, 0);
    expect(W0, PT_STOP, &m); /* the worker may drop the session */
    proto_msg_free(&m);
    /* a GENERATE with neither prompt nor messages: refused, nothing queued or sent */
    send_gen(61, (gen){ .n = 3 });
    char msg[300] = "";
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "prompt") != NULL, "%s", msg);
    ck_assert_ptr_null(F.reqs);
    ck_assert_int_eq(next_msg(W0, &m), -1);
}
END_TEST

START_TEST(test_queue_limits_and_positions)
{
    /* one slot: the first request runs, the others wait in order; the caps refuse */
    worker_up(0);
    F.w[0].cap = 1;
    F.lim.max_per_client = 3;
    F.lim.max_requests = 4;
    int pos;
    for (int i = 0; i < 3; i++) {
        generate(70 + (uint64_t)i, "Once upon a time", 1);
        accepted(CLIENT, &pos);
        ck_assert_int_eq(pos, i); /* 0: running */
    }
    generate(73, "Once upon a time", 1); /* a fourth of this connection */
    proto_msg m;
    ck_assert_int_eq(next_msg(CLIENT, &m), PT_ERROR);
    char code[40] = "";
    proto_strcpy(&m, MF_CODE, code, sizeof code);
    ck_assert_str_eq(code, errcode_name(ERR_FULL));
    ck_assert_int_eq((int)proto_u64(&m, MF_RETRY_MS, 0), 1000);
    proto_msg_free(&m);
    send_gen(74, (gen){ .rid = C2RID, .prompt = "Once upon a time", .n = 1 }); /* another connection */
    accepted(CLIENT2, &pos);
    ck_assert_int_eq(pos, 3);
    send_gen(75, (gen){ .rid = C2RID, .prompt = "Once upon a time", .n = 1 }); /* the fifth in all */
    char msg[300] = "";
    expect_error(CLIENT2, ERR_FULL, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "--max-requests") != NULL, "%s", msg);
    ck_assert_int_eq(front_count(&F, RQ_QUEUED), 3);
    /* the head ends: the next one runs, the others move up */
    proto_sessrec rec;
    int32_t toks[CTX];
    expect_run(W0, &rec, toks, CTX);
    ck_assert_int_eq((int)(rec.sess == req_of(70)->sess), 1);
    token(req_of(70)->sess, 0, plain_token());
    ck_assert_ptr_null(req_of(70));
    front_tick(&F, net_now_ms());
    ck_assert_int_eq(req_of(71)->state, RQ_RUNNING);
    expect_run(W0, &rec, toks, CTX);
    ck_assert_int_eq((int)(rec.sess == req_of(71)->sess), 1);
    ck_assert_int_eq(front_queue_pos(&F, req_of(72)), 1);
    ck_assert_int_eq(front_queue_pos(&F, req_of(74)), 2);
    /* room again for this connection */
    generate(76, "Once upon a time", 1);
    accepted(CLIENT, &pos);
    ck_assert_int_eq(pos, 3);
}
END_TEST

START_TEST(test_worker_death_replays)
{
    /* a session runs on worker 0, which stops beating after 3 tokens: it is sent again
     * to worker 1 with all its tokens, at the same step, and the text goes on with no
     * gap and no repeat */
    worker_up(0);
    worker_up(1);
    int32_t ids[16];
    char want[256], got[256] = "", reason[32] = "";
    int n = story_tokens(ids, 6, want, sizeof want);
    ck_assert_int_eq(n, 6);
    generate(80, "Once upon a time", n);
    uint64_t sess = accepted(CLIENT, NULL);
    front_req *r = front_find_sess(&F, sess);
    ck_assert_int_eq(r->worker, 0);
    for (int i = 0; i < 3; i++) token_from(0, sess, i, ids[i]);
    size_t len = 0;
    ck_assert_int_eq(read_text(CLIENT, got, sizeof got, &len, NULL), 0);
    drain(W0);
    int64_t now = net_now_ms();
    F.w[0].last_ms = now - NET_HB_MS * NET_HB_LIVENESS - 1;
    front_check_workers(&F, now);
    ck_assert_int_eq(F.w[0].live, 0);
    ck_assert_int_eq(r->state, RQ_QUEUED);
    front_tick(&F, now);
    ck_assert_int_eq(r->state, RQ_RUNNING);
    ck_assert_int_eq(r->worker, 1);
    proto_sessrec rec;
    int32_t toks[CTX];
    int nt = expect_run(W1, &rec, toks, CTX);
    ck_assert_int_eq(nt, r->n_prompt + 3);
    ck_assert_int_eq((int)rec.step, 3);
    ck_assert_int_eq((int)rec.budget, n - 3);
    ck_assert_int_eq(memcmp(toks + r->n_prompt, ids, 3 * sizeof *ids), 0);
    token_from(0, sess, 3, ids[0]); /* a late token of the dead worker: ignored */
    ck_assert_int_eq(r->n_gen, 3);
    token_from(1, sess, 2, ids[0]); /* a repeated step: ignored */
    ck_assert_int_eq(r->n_gen, 3);
    for (int i = 3; i < n; i++) token_from(1, sess, i, ids[i]);
    proto_msg m;
    ck_assert_int_eq(next_msg(W0, &m), -1); /* nothing more to the dead one */
    ck_assert_int_eq(read_text(CLIENT, got, sizeof got, &len, reason), 1);
    ck_assert_str_eq(reason, "length");
    ck_assert_str_eq(got, want);
    ck_assert_int_eq(F.w[1].assigned, 0);
}
END_TEST

START_TEST(test_adopt_running_then_resume)
{
    /* the front door dies while a session streams; its worker reports it to the new
     * one, which keeps the tokens that arrive meanwhile; the client resumes with the
     * bytes it has and gets the rest of the text exactly */
    worker_up(0);
    int32_t ids[16];
    char want[256], got[256] = "", reason[32] = "";
    int n = story_tokens(ids, 8, want, sizeof want);
    ck_assert_int_eq(n, 8);
    generate(90, "Once upon a time", n);
    uint64_t sess = accepted(CLIENT, NULL);
    for (int i = 0; i < 3; i++) token(sess, i, ids[i]);
    size_t len = 0;
    read_text(CLIENT, got, sizeof got, &len, NULL);
    ck_assert_uint_gt(len, 0);
    front_req *r = front_find_sess(&F, sess);
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, r->key, sizeof key);
    for (int i = 3; i < 5; i++) token(sess, i, ids[i]); /* their text is lost with the front door */
    proto_msg m;
    report_of(r, 0, F.epoch + 1, &m);
    restart();
    worker_up(0);
    front_adopt(&F, 0, &m);
    proto_msg_free(&m);
    r = front_find_sess(&F, sess);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->state, RQ_RUNNING);
    ck_assert_int_eq((int)r->attached, 0);
    ck_assert_int_eq(r->n_gen, 5);
    ck_assert_int_eq(F.w[0].assigned, 1);
    token(sess, 5, ids[5]); /* kept; no text without its client */
    ck_assert_int_eq(r->n_gen, 6);
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    send_gen(91, (gen){ .prompt = "Once upon a time", .n = n, .resume = sess, .key = key, .rbytes = len });
    ck_assert_int_eq((int)(accepted(CLIENT, NULL) == sess), 1);
    ck_assert_int_eq((int)r->attached, 1);
    for (int i = 6; i < n; i++) token(sess, i, ids[i]);
    ck_assert_int_eq(read_text(CLIENT, got, sizeof got, &len, reason), 1);
    ck_assert_str_eq(reason, "length");
    ck_assert_str_eq(got, want);
    ck_assert_int_eq((int)F.failed, 0);
}
END_TEST

START_TEST(test_resume_parked_until_report)
{
    /* just started: a resume of a session no worker reported yet waits for the report
     * (or the end of the grace period), then is admitted again */
    worker_up(0);
    F.start_ms = net_now_ms();
    send_gen(100, (gen){ .prompt = "Once upon a time", .n = 20, .resume = 0x2001, .key = KEY_A });
    send_gen(101, (gen){ .prompt = "Once upon a time", .n = 4, .resume = 0x2003, .key = KEY_B });
    proto_msg m;
    ck_assert_int_eq(next_msg(CLIENT, &m), -1); /* parked: no answer yet */
    ck_assert_int_eq(F.n_parked, 2);
    front_readmit(&F, net_now_ms());
    ck_assert_int_eq(F.n_parked, 2); /* nothing known yet */
    report(0x2001, KEY_A, 10, 0);
    front_readmit(&F, net_now_ms());
    ck_assert_int_eq(F.n_parked, 1);
    ck_assert_int_eq((int)(accepted(CLIENT, NULL) == 0x2001), 1);
    ck_assert_int_eq((int)front_find_sess(&F, 0x2001)->attached, 1);
    /* the grace period ends: the other one is admitted anew under its id and key */
    front_readmit(&F, net_now_ms() + FRONT_ADOPT_GRACE_MS);
    ck_assert_int_eq(F.n_parked, 0);
    ck_assert_int_eq((int)(accepted(CLIENT, NULL) == 0x2003), 1);
    front_req *r = front_find_sess(&F, 0x2003);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->key, KEY_B);
    ck_assert_int_eq(r->state, RQ_RUNNING);
}
END_TEST

START_TEST(test_resume_wrong_key_refused)
{
    /* a session streams to c1; c2 tries to take it over with another key: refused, and
     * the session goes on streaming to c1 */
    worker_up(0);
    generate(110, "Once upon a time", 4);
    uint64_t sess = accepted(CLIENT, NULL);
    front_req *r = front_find_sess(&F, sess);
    const char *wrong = strcmp(r->key, KEY_A) ? KEY_A : KEY_B;
    send_gen(111, (gen){ .rid = C2RID, .prompt = "Once upon a time", .n = 4, .resume = sess, .key = wrong });
    expect_error(CLIENT2, ERR_UNKNOWN_SESSION, NULL, 0);
    send_gen(112, (gen){ .rid = C2RID, .prompt = "Once upon a time", .n = 4, .resume = sess, .key = "short" });
    expect_error(CLIENT2, ERR_INVALID, NULL, 0);
    ck_assert_ptr_eq(front_find_sess(&F, sess), r);
    ck_assert_int_eq(memcmp(r->rid, CRID, 2), 0);
    ck_assert_int_eq((int)r->client_id, 110);
    token(sess, 0, plain_token());
    proto_msg m;
    expect(CLIENT, PT_PIECE, &m);
    proto_msg_free(&m);
    ck_assert_int_eq(next_msg(CLIENT2, &m), -1);
}
END_TEST

START_TEST(test_chat_continuation)
{
    /* a chat's next turn, with its key, goes back to the worker that holds it, as the
     * same session; with another key, or while a turn runs, it is refused */
    worker_up(0);
    worker_up(1);
    front_req *chat = held_chat(CRID, 120);
    uint64_t sess = chat->sess;
    char key[FRONT_KEY_HEX + 1];
    memcpy(key, chat->key, sizeof key);
    ck_assert_int_eq(F.w[0].assigned, 1);
    drain(CLIENT);
    drain(W0);
    const char *wrong = strcmp(key, KEY_A) ? KEY_A : KEY_B;
    send_gen(121, (gen){ .prompt = "Again", .n = 2, .chat = 1, .cont = sess, .key = wrong });
    expect_error(CLIENT, ERR_UNKNOWN_SESSION, NULL, 0);
    ck_assert_int_eq(chat->state, RQ_HELD);
    send_gen(122, (gen){ .prompt = "Again", .n = 2, .chat = 1, .cont = sess, .key = key });
    ck_assert_int_eq((int)(accepted(CLIENT, NULL) == sess), 1);
    ck_assert_ptr_eq(front_find_sess(&F, sess), chat);
    ck_assert_int_eq(chat->state, RQ_RUNNING);
    ck_assert_int_eq(chat->worker, 0); /* where its KV cache is, though worker 1 is idle */
    ck_assert_int_eq(F.w[0].assigned, 1);
    proto_sessrec rec;
    int32_t toks[CTX];
    int nt = expect_run(W0, &rec, toks, CTX);
    ck_assert_int_eq((int)(rec.sess == sess), 1);
    ck_assert_int_eq(nt, chat->n_prompt);
    ck_assert_int_eq((int)rec.step, 0);
    send_gen(123, (gen){ .prompt = "Again", .n = 2, .chat = 1, .cont = sess, .key = key });
    char msg[300] = "";
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "busy") != NULL, "%s", msg);
    token(sess, 0, plain_token());
    token(sess, 1, plain_token());
    proto_msg m;
    expect(CLIENT, PT_DONE, &m);
    ck_assert_int_eq((int)m.id, 122);
    proto_msg_free(&m);
    ck_assert_int_eq(chat->state, RQ_HELD);
    ck_assert_int_eq(chat->worker, 0);
}
END_TEST

/* An embedding request: GENERATE embed (+ toks) -> RUN embed; the worker's EMBEDDING
 * goes to the client with the input's token count, then DONE "embed" and the session is
 * gone; one from another worker is ignored; bad pooling and bad token ids are refused. */
static void embed_gen(uint64_t id, uint64_t embed, const int32_t *toks, int n)
{
    proto_writer w;
    proto_begin(&w, PT_GENERATE, id);
    proto_put_i64(&w, MF_N, 1);
    if (toks) proto_put_ints(&w, MF_TOKS, toks, (size_t)n);
    else proto_put_str(&w, MF_PROMPT, "Once upon a time");
    proto_put_u64(&w, MF_EMBED, embed);
    proto_msg m;
    decode(&w, &m);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
}

static void embedding_from(int wi, uint64_t sess, const float *v, int n)
{
    pm_embedding e = {.vec = {(const char *)v, (size_t)n * sizeof *v}, .sess = sess, .has_sess = 1,
                      .epoch = F.epoch, .has_epoch = 1};
    proto_writer w;
    proto_begin(&w, PT_EMBEDDING, 0);
    pm_embedding_put(&w, &e);
    proto_msg m;
    decode(&w, &m);
    front_embedding(&F, wi, &m);
    proto_msg_free(&m);
}

START_TEST(test_embedding)
{
    worker_up(0);
    worker_up(1);
    const int32_t ids[3] = {1, 403, 407};
    embed_gen(5, PROTO_POOL_LAST, ids, 3);
    uint64_t sess = accepted(CLIENT, NULL);
    proto_sessrec rec;
    int32_t toks[8];
    mailbox *wb = req_of(5)->worker == 0 ? W0 : W1;
    int wi = wb == W0 ? 0 : 1;
    ck_assert_int_eq(expect_run(wb, &rec, toks, 8), 3);
    ck_assert(rec.embed == PROTO_POOL_LAST && toks[0] == 1 && toks[2] == 407);
    const float v[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    embedding_from(1 - wi, sess, v, 4); /* not its worker: ignored */
    proto_msg m;
    ck_assert_int_eq(next_msg(CLIENT, &m), -1);
    embedding_from(wi, sess, v, 4);
    expect(CLIENT, PT_EMBEDDING, &m);
    pm_embedding e;
    pm_embedding_get(&m, &e);
    ck_assert(e.has_ntok && e.ntok == 3 && e.vec.n == 16 && !memcmp(e.vec.p, v, 16));
    proto_msg_free(&m);
    char reason[32] = "";
    expect(CLIENT, PT_DONE, &m);
    proto_strcpy(&m, MF_REASON, reason, sizeof reason);
    proto_msg_free(&m);
    ck_assert_str_eq(reason, "embed");
    ck_assert_ptr_null(front_find_sess(&F, sess));
    embed_gen(6, PROTO_POOL_MEAN, NULL, 0); /* a text prompt, tokenized with its BOS */
    accepted(CLIENT, NULL);
    ck_assert(req_of(6)->embed == PROTO_POOL_MEAN && req_of(6)->toks[0] == tok_bos(F.vocab));
    char msg[300];
    embed_gen(7, 3, ids, 3);
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert(strstr(msg, "pooling"));
    const int32_t bad[2] = {1, 99999};
    embed_gen(8, PROTO_POOL_MEAN, bad, 2);
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "99999"), "%s", msg);
}
END_TEST

/* A chat GENERATE with tools and tcalls (protocol 6): msgs user, assistant, tool. */
static void send_tools(uint64_t id, const char *const *tcalls, int n_tcalls)
{
    static const char *const msgs[] = {"user", "Weather?", "assistant", "", "tool", "{\"t\":20}"};
    proto_writer w;
    proto_begin(&w, PT_GENERATE, id);
    proto_put_i64(&w, MF_N, 2);
    proto_put_bool(&w, MF_CHAT, 1);
    proto_put_array_begin(&w, MF_MSGS, 6);
    for (int i = 0; i < 6; i++) proto_pack_str(&w.pk, msgs[i]);
    proto_put_array_begin(&w, MF_TOOLS, 1);
    proto_pack_str(&w.pk, "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}}");
    proto_put_array_begin(&w, MF_TCALLS, (uint32_t)n_tcalls);
    for (int i = 0; i < n_tcalls; i++) proto_pack_str(&w.pk, tcalls[i]);
    proto_msg m;
    decode(&w, &m);
    front_generate(&F, CRID, 2, &m);
    proto_msg_free(&m);
}

START_TEST(test_tools_admission)
{
    worker_up(0);
    static const char *const ok[] = {"1", "call_1", "get_weather", "{\"city\":\"Paris\"}", "2", "call_1", "", ""};
    char msg[300] = "";
    send_tools(70, ok, 8); /* rendered and tokenized: the tools block outgrows this test's context */
    expect_error(CLIENT, ERR_CONTEXT, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "the prompt is") != NULL, "%s", msg);
    static const char *const far[] = {"9", "call_1", "get_weather", "{}"};
    send_tools(71, far, 4);
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "tcalls") != NULL, "%s", msg);
    static const char *const odd[] = {"1", "call_1", "get_weather"};
    send_tools(72, odd, 3);
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "4 strings") != NULL, "%s", msg);
    static const char *const args[] = {"1", "call_1", "get_weather", "[1]"};
    send_tools(73, args, 4);
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "JSON object") != NULL, "%s", msg);
    F.tmpl = CHAT_TMPL_GEMMA; /* a template without tools: refused, never rendered without them */
    send_tools(74, ok, 8);
    expect_error(CLIENT, ERR_INVALID, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "does not render tools") != NULL, "%s", msg);
    F.tmpl = CHAT_TMPL_CHATML;
}
END_TEST

Suite *front_suite(void)
{
    Suite *s = suite_create("front");
    TCase *tc = tcase_create("queue");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_admission);
    tcase_add_test(tc, test_queue_limits_and_positions);
    tcase_add_test(tc, test_no_worker_waits);
    tcase_add_test(tc, test_no_worker_in_time_fails);
    tcase_add_test(tc, test_worker_death_replays);
    tcase_add_test(tc, test_full_context_after_worker_death);
    tcase_add_test(tc, test_adopt_stopped_session);
    tcase_add_test(tc, test_adopt_running_then_resume);
    tcase_add_test(tc, test_resume_parked_until_report);
    tcase_add_test(tc, test_resume_wrong_key_refused);
    tcase_add_test(tc, test_prompt_too_long_still_refused);
    tcase_add_test(tc, test_chat_continuation);
    tcase_add_test(tc, test_held_chat_leaves_slot_to_queued);
    tcase_add_test(tc, test_held_chat_caps);
    tcase_add_test(tc, test_held_chat_freed_when_client_silent);
    tcase_add_test(tc, test_held_chat_probed);
    tcase_add_test(tc, test_report_bounds);
    tcase_add_test(tc, test_report_never_replaces);
    tcase_add_test(tc, test_ended_session_keeps_its_key);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_tools_admission);
    suite_add_tcase(s, tc);
    return s;
}
