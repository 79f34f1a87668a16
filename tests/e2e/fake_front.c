/*
 * fake_front.c - built and run by tests/e2e/73_http_error_codes.sh (owner: gateway).
 * A stand-in front door that answers each GENERATE by the error its prompt names, so
 * that the gateway's mapping of the front door's ERROR codes to HTTP statuses is
 * tested through real sockets:
 *
 *   fake_front ENDPOINT       (runs until killed)
 *
 * prompt "queue_full" -> ERROR{code queue_full, retry_ms 2500}; "unavailable",
 * "internal", "context_length_exceeded" -> ERROR with that code; "nocode" -> ERROR
 * without a code; "late" -> ACCEPTED, PIECE "Hello", then ERROR without a code;
 * "silent" -> ACCEPTED, then nothing (no PONG, and no answer to the gateway's resumes).
 * STATUS gets a reply with no workers; PING gets PONG.
 */
#include <stdio.h>
#include <string.h>

#include "net.h"
#include "proto.h"

static void *sock;
static uint64_t silent_id;
static int resumes;

static void reply(const uint8_t *rid, size_t rl, proto_writer *w)
{
    net_send(sock, rid, rl, proto_data(w), proto_size(w));
    proto_writer_free(w);
}

static void error(const uint8_t *rid, size_t rl, uint64_t id, const char *code)
{
    proto_writer w;
    proto_begin(&w, PT_ERROR, id);
    proto_put_str(&w, MF_MSG, code ? code : "refused without a code");
    if (code) proto_put_str(&w, MF_CODE, code);
    if (code && strcmp(code, "queue_full") == 0) proto_put_u64(&w, MF_RETRY_MS, 2500);
    reply(rid, rl, &w);
}

static void generate(const uint8_t *rid, size_t rl, const proto_msg *m)
{
    char prompt[64] = "";
    proto_strcpy(m, MF_PROMPT, prompt, sizeof prompt);
    proto_writer w;
    if (proto_field(m, MF_RESUME)) { /* only "silent" requests are resumed: stay silent */
        resumes++;
        return;
    }
    if (strcmp(prompt, "late") == 0 || strcmp(prompt, "silent") == 0) {
        proto_begin(&w, PT_ACCEPTED, m->id);
        proto_put_u64(&w, MF_NTOK, 1);
        proto_put_u64(&w, MF_SESS, 7);
        reply(rid, rl, &w);
        if (strcmp(prompt, "silent") == 0) { silent_id = m->id; return; }
        proto_begin(&w, PT_PIECE, m->id);
        proto_put_str(&w, MF_TEXT, "Hello");
        proto_put_u64(&w, MF_NTOK, 1);
        reply(rid, rl, &w);
        error(rid, rl, m->id, NULL);
    } else {
        error(rid, rl, m->id, strcmp(prompt, "nocode") == 0 ? NULL : prompt);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: fake_front ENDPOINT\n"); return 2; }
    void *ctx = zmq_ctx_new();
    sock = net_socket(ctx, ZMQ_ROUTER);
    if (!sock || zmq_bind(sock, argv[1]) != 0) { fprintf(stderr, "cannot bind %s\n", argv[1]); return 1; }
    for (;;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 1000) < 0) break;
        uint8_t rid[NET_RID_MAX];
        size_t rl, nbytes;
        proto_msg m;
        char err[200];
        while (net_recv_msg(sock, 1, rid, &rl, &m, &nbytes, err, sizeof err) == 1) {
            proto_writer w;
            if (m.type == PT_GENERATE) generate(rid, rl, &m);
            else if (m.type == PT_STATUS) {
                proto_begin(&w, PT_STATUS_REPLY, m.id);
                proto_put_array_begin(&w, MF_WORKERS, 0);
                proto_put_f64(&w, MF_UPTIME, 1);
                proto_put_u64(&w, MF_ACTIVE, 0);
                proto_put_str(&w, MF_MODEL, "/models/fake.gguf");
                reply(rid, rl, &w);
            } else if (m.type == PT_PING && m.id != silent_id && !resumes) {
                proto_begin(&w, PT_PONG, m.id);
                reply(rid, rl, &w);
            }
            proto_msg_free(&m);
        }
    }
    return 0;
}
