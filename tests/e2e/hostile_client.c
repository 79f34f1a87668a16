/*
 * hostile_client.c - built and run by tests/e2e/35_hostile_input.sh (owner: pipeline).
 * Sends malformed and unexpected messages to one endpoint and counts the error replies:
 *
 *   hostile_client ENDPOINT front|sampler|workers
 *   hostile_client keygen          prints a CURVE key pair "PUBLIC SECRET" (z85)
 *
 * front/sampler: every message must get a PT_ERROR reply; workers: no reply expected
 * (a fake worker talking nonsense). Exit 0 when the expectations hold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "proto.h"

static void *sock;
static int sent;

static void raw(const void *p, size_t n)
{
    zmq_send(sock, p, n, 0);
    sent++;
}

static void msg(proto_writer *w)
{
    raw(proto_data(w), proto_size(w));
    proto_writer_free(w);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "keygen")) {
        char pub[41], sec[41];
        if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) != 0) return 1;
        printf("%s %s\n", pub, sec);
        return 0;
    }
    if (argc != 3) return 2;
    int front = !strcmp(argv[2], "front"), samp = !strcmp(argv[2], "sampler");
    void *ctx = zmq_ctx_new();
    sock = net_socket(ctx, ZMQ_DEALER);
    if (zmq_connect(sock, argv[1]) != 0) return 1;
    /* garbage bytes, empty, truncated, hostile headers, wrong version */
    raw("hello, world", 12);
    raw("", 0);
    static const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
    raw(huge, sizeof huge);
    static const uint8_t bad_ver[] = {0x83, 0xa1, 'v', 0x07, 0xa1, 't', 0x02, 0xa2, 'i', 'd', 0x01};
    raw(bad_ver, sizeof bad_ver);
    proto_writer w;
    proto_begin(&w, PT_GENERATE, 9);
    proto_put_str(&w, "prompt", "x");
    proto_put_i64(&w, "n", 4);
    size_t n = proto_size(&w);
    raw(proto_data(&w), n - 3); /* truncated */
    proto_writer_free(&w);
    /* a multi-frame message */
    zmq_send(sock, "a", 1, ZMQ_SNDMORE);
    zmq_send(sock, "b", 1, 0);
    sent++;
    /* well-formed but wrong: missing field, wrong kind, wrong direction */
    proto_begin(&w, PT_GENERATE, 10); /* no "n" */
    proto_put_str(&w, "prompt", "x");
    msg(&w);
    proto_begin(&w, PT_SAMPLE, 11);
    proto_put_u64(&w, "sess", 1);
    proto_put_u64(&w, "step", 0);
    proto_put_str(&w, "shm", front ? "x" : "/llm-logits-0-1"); /* a ring that does not exist */
    proto_put_u64(&w, "slot", 0);
    proto_put_u64(&w, "nv", 512);
    proto_put_map_begin(&w, "params", 0);
    proto_put_ints(&w, "hist", NULL, 0);
    msg(&w);
    proto_begin(&w, PT_TOKEN, 12);
    proto_put_u64(&w, "sess", 424242);
    proto_put_u64(&w, "step", 0);
    proto_put_i64(&w, "tok", 5);
    proto_put_u64(&w, "epoch", 1);
    msg(&w);
    if (front) { /* requests the front door must refuse */
        proto_begin(&w, PT_GENERATE, 13);
        proto_put_i64(&w, "n", 4);
        proto_put_str(&w, "prompt", "x");
        proto_put_map_begin(&w, "params", 1);
        proto_pack_str(&w.pk, "top_k");
        proto_pack_str(&w.pk, "-7");
        msg(&w);
        proto_begin(&w, PT_GENERATE, 14);
        proto_put_i64(&w, "n", 4);
        proto_put_str(&w, "prompt", "x");
        proto_put_map_begin(&w, "params", 1);
        proto_pack_str(&w.pk, "no_such_parameter");
        proto_pack_str(&w.pk, "1");
        msg(&w);
        proto_begin(&w, PT_GENERATE, 15); /* neither prompt nor msgs */
        proto_put_i64(&w, "n", 4);
        msg(&w);
        proto_begin(&w, PT_GENERATE, 16); /* chat with an odd message list */
        proto_put_i64(&w, "n", 4);
        proto_put_bool(&w, "chat", 1);
        proto_put_array_begin(&w, "msgs", 1);
        proto_pack_str(&w.pk, "user");
        msg(&w);
        proto_begin(&w, PT_PING, 17); /* a request nobody made */
        msg(&w);
    }
    int errors = 0, others = 0;
    for (;;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 1500) <= 0) break;
        zmq_msg_t zm;
        zmq_msg_init(&zm);
        zmq_msg_recv(&zm, sock, 0);
        proto_msg m;
        char err[200];
        if (proto_decode(&m, zmq_msg_data(&zm), zmq_msg_size(&zm), err, sizeof err) == 0) {
            if (m.type == PT_ERROR) {
                char text[200];
                proto_strcpy(&m, "msg", text, sizeof text);
                printf("  error reply to %llu: %s\n", (unsigned long long)m.id, text);
                errors++;
            } else others++;
            proto_msg_free(&m);
        } else others++;
        zmq_msg_close(&zm);
    }
    net_close(&sock);
    zmq_ctx_term(ctx);
    printf("%s: %d hostile messages sent, %d error replies, %d other replies\n", argv[2], sent, errors, others);
    if (front || samp) return errors == sent && others == 0 ? 0 : 1;
    return errors == 0 && others == 0 ? 0 : 1;
}
