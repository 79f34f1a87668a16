/*
 * audit_client.c - built and run by tests/e2e/36_audit.sh (owner: pipeline). A fake
 * engine worker (it registers on the workers' endpoint with the vocabulary identity
 * `llmc status --json` gives any client) that tries what the second audit found:
 *
 *   audit_client FRONT WORKERS NV VID reports N
 *       reports N sessions it never ran (chats between turns, 1,000 tokens each) to a
 *       front door that just started; prints how many the front door kept (its STATUS
 *       "active" + "held") and how many it stopped.
 *   audit_client FRONT WORKERS NV VID takeover
 *       a victim connection's request waits in the queue (the real worker is busy, and
 *       the fake worker's context is too small for it); the fake worker reports the victim's session with a key of its own, and an
 *       attacker connection resumes it with that key. Exit 0 when the attacker is
 *       refused and the victim's request is still its own (its PING answered).
 *   audit_client FRONT WORKERS NV VID squat
 *       a victim's request ends; an attacker resumes its session id with a key of its
 *       own. Exit 0 when the attacker is refused.
 *
 * Exit 2 on bad usage, 1 when the front door could not be reached or the expectation
 * failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net.h"
#include "proto.h"
#include "e2e_wire.h"

static const char ATTACKER_KEY[] = "0badc0de0badc0de0badc0de0badc0de";

static int fake_ctx = 2048; /* the context the fake worker claims */

/* One worker heartbeat: registration on the first. */
static void beat(void *w, uint64_t nv, uint64_t vid)
{
    proto_writer pw;
    proto_begin(&pw, PT_WORKER_HB, 0);
    proto_put_u64(&pw, MF_PID, 990001);
    proto_put_str(&pw, MF_HOST, "fakehost");
    proto_put_str(&pw, MF_SEG, "/llm-fake");
    proto_put_u64(&pw, MF_ACTIVE, 0);
    proto_put_u64(&pw, MF_CAP, 16);
    proto_put_u64(&pw, MF_CTX, (uint64_t)fake_ctx);
    proto_put_u64(&pw, MF_WID, 0xfa4e0a0d17ULL);
    proto_put_u64(&pw, MF_NV, nv);
    proto_put_u64(&pw, MF_VID, vid);
    e2e_send(w, &pw);
}

/* Registers and waits for the front door's heartbeat: its epoch, 0 if none came. */
static uint64_t register_fake(void *w, uint64_t nv, uint64_t vid)
{
    for (int i = 0; i < 50; i++) {
        beat(w, nv, vid);
        proto_msg m;
        while (e2e_recv(w, 100, &m)) {
            uint64_t e = m.type == PT_FRONT_HB ? proto_u64(&m, MF_EPOCH, 0) : 0;
            proto_msg_free(&m);
            if (e) return e;
        }
    }
    return 0;
}

/* A REPORT of session sess (n_toks tokens, a 4-token prompt) under key, as a worker
 * sends it after a front-door restart: the front door's own record (fb) included. */
static void report(void *w, uint64_t epoch, uint64_t sess, const char *key, int n_toks, int idle_chat)
{
    msgpack_sbuffer fb;
    msgpack_sbuffer_init(&fb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 7);
    proto_pack_key(&pk, MF_KEY); proto_pack_str(&pk, key);
    proto_pack_key(&pk, MF_NP); msgpack_pack_int32(&pk, 4);
    proto_pack_key(&pk, MF_N); msgpack_pack_int32(&pk, 100000);
    proto_pack_key(&pk, MF_CHAT); if (idle_chat) msgpack_pack_true(&pk); else msgpack_pack_false(&pk);
    proto_pack_key(&pk, MF_IE); msgpack_pack_false(&pk);
    proto_pack_key(&pk, MF_SEED); msgpack_pack_uint32(&pk, 1);
    proto_pack_key(&pk, MF_STOP); msgpack_pack_array(&pk, 0);
    int32_t *toks = calloc((size_t)n_toks, sizeof *toks);
    for (int i = 0; i < n_toks; i++) toks[i] = 100 + i % 50;
    static const uint8_t sp[8];
    proto_writer pw;
    proto_begin(&pw, PT_REPORT, sess);
    proto_put_u64(&pw, MF_SESS, sess);
    proto_put_ints(&pw, MF_TOKS, toks, (size_t)n_toks);
    proto_put_u64(&pw, MF_STEP, (uint64_t)(n_toks - 4));
    proto_put_u64(&pw, MF_BUDGET, 1000);
    proto_put_bin(&pw, MF_SP, sp, sizeof sp);
    proto_put_u64(&pw, MF_EPOCH, epoch);
    proto_put_bin(&pw, MF_FB, fb.data, fb.size);
    if (idle_chat) proto_put_bool(&pw, MF_IDLE, 1);
    e2e_send(w, &pw);
    msgpack_sbuffer_destroy(&fb);
    free(toks);
}

/* The front door's STATUS: *active + *held; -1 when it did not answer. */
static int held_and_active(void *front)
{
    proto_writer pw;
    proto_begin(&pw, PT_STATUS, 777);
    e2e_send(front, &pw);
    proto_msg m;
    for (int i = 0; i < 50; i++) {
        if (!e2e_recv(front, 100, &m)) continue;
        int n = m.type == PT_STATUS_REPLY ? (int)(proto_u64(&m, MF_ACTIVE, 0) + proto_u64(&m, MF_HELD, 0)) : -2;
        proto_msg_free(&m);
        if (n >= 0) return n;
    }
    return -1;
}

static int reports(void *front, void *w, uint64_t nv, uint64_t vid, int n)
{
    uint64_t epoch = register_fake(w, nv, vid);
    if (!epoch) return 1;
    for (int i = 0; i < n; i++) {
        report(w, epoch, 0x5e55000000000001ULL + ((uint64_t)getpid() << 24) + 2 * (uint64_t)i, ATTACKER_KEY, 1000, 1);
        if (i % 64 == 0) beat(w, nv, vid);
    }
    int stops = 0;
    proto_msg m;
    for (int quiet = 0; quiet < 10;) {
        if (!e2e_recv(w, 100, &m)) { quiet++; continue; }
        int stop = m.type == PT_STOP;
        proto_msg_free(&m);
        stops += stop;
        if (stop) quiet = 0;
    }
    printf("reports: %d sessions reported, %d stopped by the front door, %d kept\n", n, stops, held_and_active(front));
    return 0;
}

static int takeover(void *front, void *w, void *att, uint64_t nv, uint64_t vid)
{
    /* the victim's prompt is longer than the fake worker's context, so the queue never
     * hands it to the fake worker, whose report stays within every bound but one: the
     * front door already holds that session */
    char prompt[2000] = "";
    for (int i = 0; i < 40; i++) strcat(prompt, "Once upon a time ");
    fake_ctx = 64;
    proto_writer pw;
    proto_begin(&pw, PT_GENERATE, 1);
    proto_put_str(&pw, MF_PROMPT, prompt);
    proto_put_i64(&pw, MF_N, 50);
    e2e_send(front, &pw);
    proto_msg m;
    uint64_t sess = 0, pos = 0;
    while (!sess && e2e_recv(front, 5000, &m)) {
        if (m.type == PT_ACCEPTED) { sess = proto_u64(&m, MF_SESS, 0); pos = proto_u64(&m, MF_POS, 0); }
        proto_msg_free(&m);
    }
    if (!sess || !pos) {
        printf("takeover: the victim's request was not queued (sess %016llx, position %llu)\n",
               (unsigned long long)sess, (unsigned long long)pos);
        return 1;
    }
    uint64_t epoch = register_fake(w, nv, vid);
    if (!epoch) return 1;
    report(w, epoch, sess, ATTACKER_KEY, 10, 0);
    usleep(300000);
    proto_begin(&pw, PT_GENERATE, 2);
    proto_put_str(&pw, MF_PROMPT, prompt);
    proto_put_i64(&pw, MF_N, 50);
    proto_put_u64(&pw, MF_RESUME, sess);
    proto_put_str(&pw, MF_KEY, ATTACKER_KEY);
    proto_put_u64(&pw, MF_RBYTES, 0);
    e2e_send(att, &pw);
    int refused = -1;
    while (refused < 0 && e2e_recv(att, 5000, &m)) {
        if (m.type == PT_ERROR) refused = 1;
        else if (m.type == PT_ACCEPTED) refused = 0;
        proto_msg_free(&m);
    }
    proto_begin(&pw, PT_PING, 1);
    e2e_send(front, &pw);
    int victim_ok = 0;
    while (!victim_ok && e2e_recv(front, 3000, &m)) {
        victim_ok = m.id == 1 && m.type != PT_ERROR;
        proto_msg_free(&m);
    }
    printf("takeover: the attacker's resume of the victim's queued session was %s; the victim %s its request\n",
           refused == 1 ? "refused" : refused == 0 ? "ACCEPTED" : "not answered",
           victim_ok ? "still holds" : "lost");
    return refused == 1 && victim_ok ? 0 : 1;
}

static int squat(void *front, void *att)
{
    proto_writer pw;
    proto_begin(&pw, PT_GENERATE, 1);
    proto_put_str(&pw, MF_PROMPT, "Once upon a time");
    proto_put_i64(&pw, MF_N, 4);
    e2e_send(front, &pw);
    proto_msg m;
    uint64_t sess = 0;
    int done = 0;
    while (!done && e2e_recv(front, 5000, &m)) {
        if (m.type == PT_ACCEPTED) sess = proto_u64(&m, MF_SESS, 0);
        done = m.type == PT_DONE;
        proto_msg_free(&m);
    }
    if (!sess || !done) return 1;
    proto_begin(&pw, PT_GENERATE, 2);
    proto_put_str(&pw, MF_PROMPT, "Something else");
    proto_put_i64(&pw, MF_N, 4);
    proto_put_u64(&pw, MF_RESUME, sess);
    proto_put_str(&pw, MF_KEY, ATTACKER_KEY);
    proto_put_u64(&pw, MF_RBYTES, 0);
    e2e_send(att, &pw);
    int refused = -1;
    while (refused < 0 && e2e_recv(att, 5000, &m)) {
        if (m.type == PT_ERROR) refused = 1;
        else if (m.type == PT_ACCEPTED) refused = 0;
        proto_msg_free(&m);
    }
    printf("squat: a resume of an ended session under another key was %s\n",
           refused == 1 ? "refused" : refused == 0 ? "ACCEPTED" : "not answered");
    return refused == 1 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 6) return 2;
    uint64_t nv = strtoull(argv[3], NULL, 0), vid = strtoull(argv[4], NULL, 0);
    void *ctx = zmq_ctx_new(), *front = net_socket(ctx, ZMQ_DEALER), *w = net_socket(ctx, ZMQ_DEALER),
         *att = net_socket(ctx, ZMQ_DEALER);
    if (zmq_connect(front, argv[1]) != 0 || zmq_connect(w, argv[2]) != 0 || zmq_connect(att, argv[1]) != 0) return 1;
    int rc = 2;
    if (argc == 7 && !strcmp(argv[5], "reports")) rc = reports(front, w, nv, vid, atoi(argv[6]));
    else if (argc == 6 && !strcmp(argv[5], "takeover")) rc = takeover(front, w, att, nv, vid);
    else if (argc == 6 && !strcmp(argv[5], "squat")) rc = squat(front, att);
    net_close(&front);
    net_close(&w);
    net_close(&att);
    zmq_ctx_term(ctx);
    return rc;
}
