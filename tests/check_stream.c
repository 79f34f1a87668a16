/* Tests for client/stream (the client's stream and resume state machine), driven with
 * hand-built front door replies and a hand-held clock: no sockets. Suite "stream". */
#include <check.h>
#include <string.h>

#include "stream.h"

#define KEY "00112233445566778899aabbccddeeff"
#define T0  1000000 /* the clock at the start, in ms */

static uint64_t ids; /* the last request id handed out */

static uint64_t next_id(void *cls)
{
    ck_assert_ptr_eq(cls, &ids);
    return ++ids;
}

static const char *const PK[] = {"temperature"}, *const PV[] = {"0.5"};
static const lc_gen GEN = {.n_predict = 16, .prompt = "Once", .pk = PK, .pv = PV, .n_params = 1};

static void start(lc_stream *s, const lc_gen *g)
{
    ids = 100;
    lc_stream_start(s, g, ids, T0, next_id, &ids);
}

/* Decodes w (freed) into m. */
static void decode(proto_writer *w, proto_msg *m)
{
    char err[200];
    ck_assert_msg(proto_decode(m, proto_data(w), proto_size(w), err, sizeof err) == 0, "%s", err);
    proto_writer_free(w);
}

/* Pops the next queued message into m; its type must be type. */
static void pop(lc_stream *s, proto_msg *m, proto_type type)
{
    proto_writer w;
    ck_assert_int_eq(lc_stream_pop(s, &w), 1);
    decode(&w, m);
    ck_assert_int_eq(m->type, type);
}

static void expect_empty(lc_stream *s)
{
    proto_writer w;
    ck_assert_int_eq(lc_stream_pop(s, &w), 0);
}

/* The reply of type to request id, with the fields a test needs. */
static lc_event feed(lc_stream *s, proto_type type, uint64_t id, const char *text, const char *code, int64_t now)
{
    proto_writer w;
    proto_begin(&w, type, id);
    if (type == PT_ACCEPTED) {
        proto_put_u64(&w, MF_NTOK, 3);
        proto_put_u64(&w, MF_SESS, 77);
        proto_put_str(&w, MF_KEY, KEY);
        proto_put_u64(&w, MF_SEED, 4242);
    } else if (type == PT_PIECE) {
        proto_put_str(&w, MF_TEXT, text);
        proto_put_u64(&w, MF_NTOK, 1);
    } else if (type == PT_DONE) {
        proto_put_str(&w, MF_REASON, "length");
        proto_put_u64(&w, MF_NTOK_PROMPT, 3);
        proto_put_u64(&w, MF_NTOK, 2);
    } else if (type == PT_ERROR) {
        proto_put_str(&w, MF_MSG, text ? text : "refused");
        if (code) proto_put_str(&w, MF_CODE, code);
    }
    proto_msg m;
    decode(&w, &m);
    lc_event ev = lc_stream_on_msg(s, &m, now);
    proto_msg_free(&m);
    return ev;
}

/* The value of parameter name in a GENERATE's params, the last one given ("" if none). */
static void param(const proto_msg *m, const char *name, char *out, size_t cap)
{
    const msgpack_object *p = proto_field(m, MF_PARAMS);
    out[0] = 0;
    for (uint32_t i = 0; p && i < p->via.map.size; i++) {
        const msgpack_object_kv *kv = &p->via.map.ptr[i];
        if (kv->key.via.str.size == strlen(name) && memcmp(kv->key.via.str.ptr, name, strlen(name)) == 0)
            snprintf(out, cap, "%.*s", (int)kv->val.via.str.size, kv->val.via.str.ptr);
    }
}

/* A stream accepted with "Hello world" (11 bytes) received, outbox drained. */
static void accepted_with_text(lc_stream *s, int64_t now)
{
    start(s, &GEN);
    proto_msg m;
    pop(s, &m, PT_GENERATE);
    proto_msg_free(&m);
    ck_assert_int_eq(feed(s, PT_ACCEPTED, 100, NULL, NULL, now), LC_EV_ACCEPTED);
    ck_assert_int_eq(feed(s, PT_PIECE, 100, "Hello", NULL, now), LC_EV_PIECE);
    ck_assert_int_eq(feed(s, PT_PIECE, 100, " world", NULL, now), LC_EV_PIECE);
    ck_assert_uint_eq(s->rs.rbytes, 11);
    expect_empty(s);
}

/* A resume GENERATE of session 77 from byte 11, the seed pinned last. */
static void check_resume(const proto_msg *m, uint64_t id)
{
    char v[64];
    ck_assert_uint_eq(m->id, id);
    ck_assert_uint_eq(proto_u64(m, MF_RESUME, 0), 77);
    ck_assert_uint_eq(proto_u64(m, MF_RBYTES, 0), 11);
    ck_assert_int_eq(proto_strcpy(m, MF_KEY, v, sizeof v), 0);
    ck_assert_str_eq(v, KEY);
    ck_assert_int_eq(proto_strcpy(m, MF_PROMPT, v, sizeof v), 0);
    ck_assert_str_eq(v, "Once");
    param(m, "seed", v, sizeof v);
    ck_assert_str_eq(v, "4242");
    param(m, "temperature", v, sizeof v);
    ck_assert_str_eq(v, "0.5");
}

START_TEST(test_accepted_pieces_done)
{
    lc_stream s;
    start(&s, &GEN);
    proto_msg m;
    pop(&s, &m, PT_GENERATE);
    ck_assert_uint_eq(m.id, 100);
    ck_assert_int_eq(proto_i64(&m, MF_N, 0), 16);
    ck_assert_ptr_null(proto_field(&m, MF_RESUME));
    proto_msg_free(&m);
    expect_empty(&s);
    ck_assert_int_eq(feed(&s, PT_PONG, 100, NULL, NULL, T0 + 5), LC_EV_NONE);
    ck_assert_int_eq(feed(&s, PT_ACCEPTED, 100, NULL, NULL, T0 + 10), LC_EV_ACCEPTED);
    ck_assert(s.accepted && s.rs.sess == 77 && s.rs.have_seed && s.rs.seed == 4242);
    ck_assert_str_eq(s.rs.key, KEY);
    ck_assert_int_eq(feed(&s, PT_PIECE, 100, "Hello", NULL, T0 + 20), LC_EV_PIECE);
    ck_assert_int_eq(feed(&s, PT_PIECE, 99, "stray", NULL, T0 + 20), LC_EV_NONE); /* another request's */
    ck_assert_int_eq(feed(&s, PT_PIECE, 100, " world", NULL, T0 + 30), LC_EV_PIECE);
    ck_assert_uint_eq(s.rs.rbytes, 11);
    ck_assert(!lc_stream_over(&s));
    ck_assert_int_eq(feed(&s, PT_DONE, 100, NULL, NULL, T0 + 40), LC_EV_DONE);
    ck_assert(lc_stream_over(&s));
    ck_assert_int_eq(feed(&s, PT_PIECE, 100, "late", NULL, T0 + 50), LC_EV_NONE);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + 100000), LC_EV_NONE); /* over: no ping, no timeout */
    expect_empty(&s);
    ck_assert_int_eq(s.resumes + s.resends, 0);
}
END_TEST

/* A ping answered with unknown_request after ACCEPTED: the front door restarted. */
START_TEST(test_unknown_request_resumes)
{
    lc_stream s;
    accepted_with_text(&s, T0);
    ck_assert_int_eq(feed(&s, PT_ERROR, 100, "no such request", "unknown_request", T0 + 1000), LC_EV_NONE);
    ck_assert(!lc_stream_over(&s));
    proto_msg m;
    pop(&s, &m, PT_GENERATE);
    check_resume(&m, 101);
    proto_msg_free(&m);
    expect_empty(&s);
    ck_assert_uint_eq(s.id, 101);
    ck_assert_int_eq(s.resumes, 1);
    /* the old id's replies are ignored; the resume's ACCEPTED changes nothing */
    ck_assert_int_eq(feed(&s, PT_ERROR, 100, "no such request", "unknown_request", T0 + 1100), LC_EV_NONE);
    ck_assert_int_eq(feed(&s, PT_PIECE, 100, "old", NULL, T0 + 1100), LC_EV_NONE);
    ck_assert_int_eq(feed(&s, PT_ACCEPTED, 101, NULL, NULL, T0 + 1200), LC_EV_NONE);
    ck_assert_int_eq(feed(&s, PT_PIECE, 101, "!", NULL, T0 + 1300), LC_EV_PIECE);
    ck_assert_uint_eq(s.rs.rbytes, 12);
    expect_empty(&s);
    /* a second restart at once: one resume per half ping at most */
    ck_assert_int_eq(feed(&s, PT_ERROR, 101, "no such request", "unknown_request", T0 + 1400), LC_EV_NONE);
    expect_empty(&s);
    ck_assert_int_eq(feed(&s, PT_ERROR, 101, "no such request", "unknown_request", T0 + 1600), LC_EV_NONE);
    pop(&s, &m, PT_GENERATE);
    ck_assert_uint_eq(m.id, 102);
    ck_assert_uint_eq(proto_u64(&m, MF_RBYTES, 0), 12);
    proto_msg_free(&m);
    ck_assert_int_eq(feed(&s, PT_DONE, 102, NULL, NULL, T0 + 2000), LC_EV_DONE);
    ck_assert_int_eq(s.resumes, 2);
}
END_TEST

/* Silence: a ping every LC_STREAM_PING_MS, a resume after LC_STREAM_RESUME_MS (and
 * then every LC_STREAM_RESUME_MS), and the end after LC_STREAM_LOST_MS without a word. */
START_TEST(test_silence_ping_resume_give_up)
{
    lc_stream s;
    accepted_with_text(&s, T0);
    proto_msg m;
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_PING_MS - 1), LC_EV_NONE);
    expect_empty(&s);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_PING_MS), LC_EV_NONE);
    pop(&s, &m, PT_PING);
    ck_assert_uint_eq(m.id, 100);
    proto_msg_free(&m);
    expect_empty(&s);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_RESUME_MS + 1), LC_EV_NONE);
    pop(&s, &m, PT_GENERATE); /* the resume, then the ping under its id */
    check_resume(&m, 101);
    proto_msg_free(&m);
    pop(&s, &m, PT_PING);
    ck_assert_uint_eq(m.id, 101);
    proto_msg_free(&m);
    expect_empty(&s);
    int resumes = 1, pings = 2;
    int64_t t;
    for (t = T0 + LC_STREAM_RESUME_MS + 1 + LC_STREAM_PING_MS; t <= T0 + LC_STREAM_LOST_MS; t += LC_STREAM_PING_MS) {
        ck_assert_int_eq(lc_stream_tick(&s, t), LC_EV_NONE);
        while (s.n_out) {
            pop(&s, &m, s.out[0].type);
            if (m.type == PT_GENERATE) {
                check_resume(&m, s.id);
                resumes++;
            } else {
                ck_assert_uint_eq(m.id, s.id);
                pings++;
            }
            proto_msg_free(&m);
        }
    }
    ck_assert_int_eq(s.resumes, resumes);
    ck_assert_int_ge(resumes, LC_STREAM_LOST_MS / LC_STREAM_RESUME_MS / 2 - 1); /* ~ one per 2 s... */
    ck_assert_int_le(resumes, LC_STREAM_LOST_MS / LC_STREAM_RESUME_MS);       /* ...never more */
    ck_assert_int_ge(pings, LC_STREAM_LOST_MS / LC_STREAM_PING_MS - 1);
    ck_assert(!lc_stream_over(&s));
    ck_assert_int_eq(lc_stream_silence_ms(&s, T0 + LC_STREAM_LOST_MS), LC_STREAM_LOST_MS);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_LOST_MS + 1), LC_EV_TIMEOUT);
    ck_assert(lc_stream_over(&s));
    expect_empty(&s);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_LOST_MS + 2000), LC_EV_NONE);
    expect_empty(&s);
}
END_TEST

/* A caller's lost_ms (llmc serve --front-timeout) replaces LC_STREAM_LOST_MS; the
 * resumes still come every LC_STREAM_RESUME_MS meanwhile. */
START_TEST(test_lost_ms_set_by_caller)
{
    lc_stream s;
    accepted_with_text(&s, T0);
    s.lost_ms = 6000;
    int resumes = 0;
    for (int64_t t = T0 + LC_STREAM_PING_MS; t <= T0 + 6000; t += LC_STREAM_PING_MS) {
        ck_assert_int_eq(lc_stream_tick(&s, t), LC_EV_NONE);
        proto_msg m;
        while (s.n_out) {
            pop(&s, &m, s.out[0].type);
            resumes += m.type == PT_GENERATE;
            proto_msg_free(&m);
        }
    }
    ck_assert_int_ge(resumes, 2);
    ck_assert(!lc_stream_over(&s));
    ck_assert_int_eq(lc_stream_tick(&s, T0 + 6001), LC_EV_TIMEOUT);
    ck_assert(lc_stream_over(&s));
}
END_TEST

/* A word from the front door (a PONG) puts the resume and the give-up off. */
START_TEST(test_pong_keeps_alive)
{
    lc_stream s;
    accepted_with_text(&s, T0);
    proto_msg m;
    for (int64_t t = T0 + LC_STREAM_PING_MS; t < T0 + 3 * LC_STREAM_LOST_MS; t += LC_STREAM_PING_MS) {
        ck_assert_int_eq(lc_stream_tick(&s, t), LC_EV_NONE);
        pop(&s, &m, PT_PING);
        ck_assert_int_eq(feed(&s, PT_PONG, m.id, NULL, NULL, t + 10), LC_EV_NONE);
        proto_msg_free(&m);
        expect_empty(&s);
    }
    ck_assert_int_eq(s.resumes, 0);
}
END_TEST

/* Before ACCEPTED: silence ends the stream after LC_STREAM_ACCEPT_MS; unknown_request
 * sends the GENERATE again as it was (not a resume), LC_STREAM_RESENDS times at most. */
START_TEST(test_before_accepted)
{
    lc_stream s;
    start(&s, &GEN);
    proto_msg m;
    pop(&s, &m, PT_GENERATE);
    proto_msg_free(&m);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_RESUME_MS + 1), LC_EV_NONE); /* no resume before ACCEPTED */
    pop(&s, &m, PT_PING);
    proto_msg_free(&m);
    expect_empty(&s);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_ACCEPT_MS), LC_EV_NONE);
    pop(&s, &m, PT_PING);
    proto_msg_free(&m);
    ck_assert_int_eq(lc_stream_tick(&s, T0 + LC_STREAM_ACCEPT_MS + 1), LC_EV_TIMEOUT);
    ck_assert(lc_stream_over(&s));
    expect_empty(&s);

    start(&s, &GEN);
    pop(&s, &m, PT_GENERATE);
    proto_msg_free(&m);
    int64_t t = T0;
    for (int i = 0; i < LC_STREAM_RESENDS; i++) {
        t += LC_STREAM_PING_MS;
        ck_assert_int_eq(feed(&s, PT_ERROR, s.id, "no such request", "unknown_request", t), LC_EV_NONE);
        pop(&s, &m, PT_GENERATE);
        ck_assert_uint_eq(m.id, 101 + (uint64_t)i);
        ck_assert_ptr_null(proto_field(&m, MF_RESUME));
        char v[16];
        param(&m, "seed", v, sizeof v);
        ck_assert_str_eq(v, ""); /* nothing to pin yet */
        proto_msg_free(&m);
    }
    ck_assert_int_eq(s.resends, LC_STREAM_RESENDS);
    ck_assert_int_eq(feed(&s, PT_ERROR, s.id, "no such request", "unknown_request", t + LC_STREAM_PING_MS), LC_EV_ERROR);
    ck_assert_int_eq(s.code, ERR_UNKNOWN_REQUEST);
    ck_assert(lc_stream_over(&s));
    expect_empty(&s);
}
END_TEST

/* Other errors end the stream and reach the caller with their code. */
START_TEST(test_error_codes)
{
    static const struct { const char *name; errcode code; int accepted; } cases[] = {
        {"queue_full", ERR_FULL, 0}, {"unavailable", ERR_UNAVAILABLE, 1}, {"internal", ERR_INTERNAL, 1},
        {"context_length_exceeded", ERR_CONTEXT, 0}, {"invalid_request", ERR_INVALID, 0},
        {"unknown_session", ERR_UNKNOWN_SESSION, 0}, /* not a chat continuation: nothing to restart */
        {"no_such_code", ERR_NONE, 1}, {NULL, ERR_NONE, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lc_stream s;
        if (cases[i].accepted) accepted_with_text(&s, T0);
        else start(&s, &GEN);
        while (s.n_out) {
            proto_msg m;
            pop(&s, &m, PT_GENERATE);
            proto_msg_free(&m);
        }
        ck_assert_int_eq(feed(&s, PT_ERROR, 100, "why", cases[i].name, T0 + 10), LC_EV_ERROR);
        ck_assert_int_eq(s.code, cases[i].code);
        ck_assert(lc_stream_over(&s));
        ck_assert_uint_eq(s.rs.sess, 0); /* the front door freed it: nothing to cancel */
        expect_empty(&s);
    }
}
END_TEST

/* A chat turn whose session is gone starts a new session with the whole conversation. */
START_TEST(test_chat_session_gone)
{
    static const char *const msgs[] = {"user", "hi", "assistant", "hello", "user", "again"};
    lc_gen g = GEN;
    g.prompt = NULL;
    g.msgs = msgs;
    g.n_msgs = 6;
    g.cont = 55;
    g.key = KEY;
    lc_stream s;
    start(&s, &g);
    proto_msg m;
    pop(&s, &m, PT_GENERATE);
    ck_assert_uint_eq(proto_u64(&m, MF_SESS, 0), 55);
    proto_msg_free(&m);
    ck_assert_int_eq(feed(&s, PT_ERROR, 100, "no such session", "unknown_session", T0 + 10), LC_EV_NEW_SESSION);
    ck_assert(!lc_stream_over(&s));
    pop(&s, &m, PT_GENERATE);
    ck_assert_uint_eq(m.id, 101);
    ck_assert_ptr_null(proto_field(&m, MF_SESS));
    ck_assert_int_eq((int)proto_field(&m, MF_MSGS)->via.array.size, 6);
    proto_msg_free(&m);
    ck_assert_int_eq(feed(&s, PT_ERROR, 101, "no such session", "unknown_session", T0 + 20), LC_EV_ERROR);
    ck_assert_int_eq(s.code, ERR_UNKNOWN_SESSION);
}
END_TEST

/* CANCEL: by the latest request id, and by session and key once accepted. */
START_TEST(test_cancel)
{
    lc_stream s;
    start(&s, &GEN);
    proto_writer w;
    proto_msg m;
    lc_stream_cancel(&s, &w);
    decode(&w, &m);
    ck_assert(m.type == PT_CANCEL && m.id == 100 && !proto_field(&m, MF_SESS));
    proto_msg_free(&m);
    accepted_with_text(&s, T0);
    ck_assert_int_eq(feed(&s, PT_ERROR, 100, "no such request", "unknown_request", T0 + 1000), LC_EV_NONE);
    lc_stream_cancel(&s, &w);
    decode(&w, &m);
    ck_assert(m.type == PT_CANCEL && m.id == 101 && proto_u64(&m, MF_SESS, 0) == 77);
    proto_msg_free(&m);
}
END_TEST

Suite *stream_suite(void)
{
    Suite *s = suite_create("stream");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_accepted_pieces_done);
    tcase_add_test(tc, test_unknown_request_resumes);
    tcase_add_test(tc, test_silence_ping_resume_give_up);
    tcase_add_test(tc, test_lost_ms_set_by_caller);
    tcase_add_test(tc, test_pong_keeps_alive);
    tcase_add_test(tc, test_before_accepted);
    tcase_add_test(tc, test_error_codes);
    tcase_add_test(tc, test_chat_session_gone);
    tcase_add_test(tc, test_cancel);
    suite_add_tcase(s, tc);
    return s;
}
