/*
 * hostile_client.c - built and run by tests/e2e/35_hostile_input.sh (owner: pipeline).
 * Sends malformed and unexpected messages to one endpoint and counts the error replies:
 *
 *   hostile_client ENDPOINT front|sampler|workers
 *   hostile_client ENDPOINT hijack   a second connection acts on another's session
 *   hostile_client keygen          prints a CURVE key pair "PUBLIC SECRET" (z85)
 *   hostile_client ENDPOINT fakeworkers CONNS WIDS SECONDS NV VID
 *                  CONNS connections to the workers' endpoint each beat as a worker every
 *                  200 ms for SECONDS, cycling through WIDS worker ids each, claiming a
 *                  vocabulary of NV tokens with identity VID (built by 39_foreign_workers.sh)
 *   hostile_client ENDPOINT flood N   N garbage messages; each must get an error reply
 *   hostile_client ENDPOINT badrows RING NV N
 *                  one SAMPLE of N rows with bad parameters on logits ring RING (NV
 *                  tokens a row) to samplerd: one SAMPLED whose N rows are all errors
 *                  (a flood for 35_hostile_input.sh to count the log lines of)
 *
 * front/sampler: every message must get a PT_ERROR reply; workers: no reply expected
 * (a fake worker talking nonsense). hijack: a victim connection streams 200 tokens while
 * an attacker connection, knowing the victim's session id (not its key), sends CANCEL,
 * PING and a chat continuation for it: the victim must get all 200 tokens. Exit 0 when
 * the expectations hold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "proto.h"
#include "e2e_wire.h"

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

static int hijack(const char *ep)
{
    void *ctx = zmq_ctx_new(), *victim = net_socket(ctx, ZMQ_DEALER), *att = net_socket(ctx, ZMQ_DEALER);
    if (zmq_connect(victim, ep) != 0 || zmq_connect(att, ep) != 0) return 1;
    proto_writer w;
    proto_begin(&w, PT_GENERATE, 1);
    proto_put_str(&w, MF_PROMPT, "Once upon a time");
    proto_put_i64(&w, MF_N, 200);
    proto_put_map_begin(&w, MF_PARAMS, 2);
    proto_pack_str(&w.pk, "temperature"); proto_pack_str(&w.pk, "0");
    proto_pack_key(&w.pk, MF_IGNORE_EOS); proto_pack_str(&w.pk, "true");
    zmq_send(victim, proto_data(&w), proto_size(&w), 0);
    proto_writer_free(&w);
    proto_msg m;
    uint64_t sess = 0, got = 0;
    int attacked = 0, refused = 0, done = 0;
    char key[64] = "";
    for (int64_t t0 = net_now_ms(); !done && net_now_ms() - t0 < 60000;) {
        if (e2e_recv(victim, 100, &m)) {
            if (m.type == PT_ACCEPTED) {
                sess = proto_u64(&m, MF_SESS, 0);
                proto_strcpy(&m, MF_KEY, key, sizeof key);
            } else if (m.type == PT_PIECE) {
                got = proto_u64(&m, MF_NTOK, got);
            } else if (m.type == PT_DONE) {
                got = proto_u64(&m, MF_NTOK, got);
                done = 1;
            } else if (m.type == PT_ERROR) {
                char text[200];
                proto_strcpy(&m, MF_MSG, text, sizeof text);
                printf("  victim got an error: %s\n", text);
                done = 2;
            }
            proto_msg_free(&m);
        }
        if (sess && got > 0 && !attacked) { /* the attacker knows the id, not the key */
            attacked = 1;
            const char *keys[3] = {NULL, "00000000000000000000000000000000", "wrong"};
            for (int k = 0; k < 3; k++) {
                proto_begin(&w, PT_CANCEL, 0);
                proto_put_u64(&w, MF_SESS, sess);
                if (keys[k]) proto_put_str(&w, MF_KEY, keys[k]);
                e2e_send(att, &w);
                proto_begin(&w, PT_PING, 50 + (uint64_t)k);
                proto_put_u64(&w, MF_SESS, sess);
                if (keys[k]) proto_put_str(&w, MF_KEY, keys[k]);
                e2e_send(att, &w);
                proto_begin(&w, PT_GENERATE, 60 + (uint64_t)k);
                proto_put_i64(&w, MF_N, 4);
                proto_put_bool(&w, MF_CHAT, 1);
                proto_put_u64(&w, MF_SESS, sess);
                if (keys[k]) proto_put_str(&w, MF_KEY, keys[k]);
                proto_put_array_begin(&w, MF_MSGS, 2);
                proto_pack_str(&w.pk, "user");
                proto_pack_str(&w.pk, "hi");
                e2e_send(att, &w);
            }
        }
        while (e2e_recv(att, 0, &m)) {
            refused += m.type == PT_ERROR;
            if (m.type != PT_ERROR) printf("  the attacker got a %s\n", proto_type_name(m.type));
            proto_msg_free(&m);
        }
    }
    while (e2e_recv(att, 300, &m)) {
        refused += m.type == PT_ERROR;
        proto_msg_free(&m);
    }
    printf("hijack: victim session %016llx (key %zu chars) got %llu of 200 tokens; attacker refused %d of 6 "
           "PING/GENERATE\n", (unsigned long long)sess, strlen(key), (unsigned long long)got, refused);
    net_close(&victim);
    net_close(&att);
    zmq_ctx_term(ctx);
    return done == 1 && got == 200 && attacked && refused == 6 && strlen(key) == 32 ? 0 : 1;
}

/* Fake workers: they register (if the front door lets them) and never do any work. */
static int fake_workers(const char *ep, int conns, int wids, int seconds, uint64_t nv, uint64_t vid)
{
    void *ctx = zmq_ctx_new(), *s[256];
    if (conns < 1 || conns > 256 || wids < 1) return 2;
    for (int c = 0; c < conns; c++)
        if (!(s[c] = net_socket(ctx, ZMQ_DEALER)) || zmq_connect(s[c], ep) != 0) return 1;
    for (int k = 0; k * 200 < seconds * 1000; k++) {
        for (int c = 0; c < conns; c++) {
            proto_writer w;
            proto_begin(&w, PT_WORKER_HB, 0);
            proto_put_u64(&w, MF_PID, 900000 + (uint64_t)c);
            proto_put_str(&w, MF_HOST, "fakehost");
            proto_put_str(&w, MF_SEG, "/llm-fake");
            proto_put_u64(&w, MF_ACTIVE, 0);
            proto_put_u64(&w, MF_CAP, 16);
            proto_put_u64(&w, MF_CTX, 2048);
            proto_put_u64(&w, MF_WID, 0xfa4e000000ULL + (uint64_t)c * (uint64_t)wids + (uint64_t)(k % wids));
            proto_put_u64(&w, MF_NV, nv);
            proto_put_u64(&w, MF_VID, vid);
            e2e_send(s[c], &w);
        }
        zmq_pollitem_t none[1];
        zmq_poll(none, 0, 200);
    }
    for (int c = 0; c < conns; c++) net_close(&s[c]);
    zmq_ctx_term(ctx);
    return 0;
}

/* The rows of a SAMPLED that carry an error. */
static int sampled_errors(const proto_msg *m)
{
    const msgpack_object *rows = proto_field(m, MF_ROWS);
    int bad = 0;
    for (uint32_t i = 0; rows && rows->type == MSGPACK_OBJECT_ARRAY && i < rows->via.array.size; i++) {
        proto_msg row = proto_view(m, &rows->via.array.ptr[i]);
        bad += proto_field(&row, MF_ERR) != NULL;
    }
    return bad;
}

/* Waits for replies until none came for 1.5 s; counts PT_ERROR replies, the others, and
 * the error rows of SAMPLED replies. */
static void drain_replies(void *s, int *errors, int *others, int *bad_rows)
{
    proto_msg m;
    while (e2e_recv(s, 1500, &m)) {
        if (m.type == PT_ERROR) ++*errors;
        else ++*others;
        if (m.type == PT_SAMPLED) *bad_rows += sampled_errors(&m);
        proto_msg_free(&m);
    }
}

static int flood(const char *ep, int n)
{
    void *ctx = zmq_ctx_new(), *s = net_socket(ctx, ZMQ_DEALER);
    if (n < 1 || zmq_connect(s, ep) != 0) return 2;
    for (int i = 0; i < n; i++) zmq_send(s, "hello, world", 12, 0);
    int errors = 0, others = 0, rows = 0;
    drain_replies(s, &errors, &others, &rows);
    printf("flood: %d garbage messages sent, %d error replies, %d other replies\n", n, errors, others);
    net_close(&s);
    zmq_ctx_term(ctx);
    return errors == n && others == 0 ? 0 : 1;
}

static int bad_rows(const char *ep, const char *ring, uint64_t nv, int n)
{
    void *ctx = zmq_ctx_new(), *s = net_socket(ctx, ZMQ_DEALER);
    if (n < 1 || zmq_connect(s, ep) != 0) return 2;
    proto_writer w;
    proto_begin(&w, PT_SAMPLE, 77);
    proto_put_str(&w, MF_SHM, ring);
    proto_put_u64(&w, MF_NV, nv);
    proto_put_array_begin(&w, MF_ROWS, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        msgpack_pack_map(&w.pk, 5);
        proto_pack_key(&w.pk, MF_SESS); msgpack_pack_uint64(&w.pk, 1);
        proto_pack_key(&w.pk, MF_STEP); msgpack_pack_uint64(&w.pk, (uint64_t)i);
        proto_pack_key(&w.pk, MF_SLOT); msgpack_pack_uint64(&w.pk, 0);
        proto_pack_key(&w.pk, MF_SP); msgpack_pack_bin(&w.pk, 3); msgpack_pack_bin_body(&w.pk, "bad", 3);
        proto_pack_key(&w.pk, MF_HIST); msgpack_pack_array(&w.pk, 0);
    }
    e2e_send(s, &w);
    int errors = 0, others = 0, bad = 0;
    drain_replies(s, &errors, &others, &bad);
    printf("badrows: one SAMPLE of %d bad rows, %d error replies, %d SAMPLED rows with an error\n", n, errors, bad);
    net_close(&s);
    zmq_ctx_term(ctx);
    return errors == 0 && others == 1 && bad == n ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "keygen")) {
        char pub[41], sec[41];
        if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) != 0) return 1;
        printf("%s %s\n", pub, sec);
        return 0;
    }
    if (argc == 8 && !strcmp(argv[2], "fakeworkers"))
        return fake_workers(argv[1], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), strtoull(argv[6], NULL, 0),
                            strtoull(argv[7], NULL, 0));
    if (argc == 4 && !strcmp(argv[2], "flood")) return flood(argv[1], atoi(argv[3]));
    if (argc == 6 && !strcmp(argv[2], "badrows"))
        return bad_rows(argv[1], argv[3], strtoull(argv[4], NULL, 0), atoi(argv[5]));
    if (argc != 3) return 2;
    if (!strcmp(argv[2], "hijack")) return hijack(argv[1]);
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
    proto_put_str(&w, MF_PROMPT, "x");
    proto_put_i64(&w, MF_N, 4);
    size_t n = proto_size(&w);
    raw(proto_data(&w), n - 3); /* truncated */
    proto_writer_free(&w);
    /* a multi-frame message */
    zmq_send(sock, "a", 1, ZMQ_SNDMORE);
    zmq_send(sock, "b", 1, 0);
    sent++;
    /* well-formed but wrong: missing field, wrong kind, wrong direction */
    proto_begin(&w, PT_GENERATE, 10); /* no "n" */
    proto_put_str(&w, MF_PROMPT, "x");
    msg(&w);
    proto_begin(&w, PT_SAMPLE, 11);
    proto_put_str(&w, MF_SHM, front ? "x" : "/llm-logits-0-1"); /* a ring that does not exist */
    proto_put_u64(&w, MF_NV, 512);
    proto_put_array_begin(&w, MF_ROWS, 1);
    msgpack_pack_map(&w.pk, 5);
    proto_pack_key(&w.pk, MF_SESS); msgpack_pack_uint64(&w.pk, 1);
    proto_pack_key(&w.pk, MF_STEP); msgpack_pack_uint64(&w.pk, 0);
    proto_pack_key(&w.pk, MF_SLOT); msgpack_pack_uint64(&w.pk, 0);
    proto_pack_key(&w.pk, MF_SP); msgpack_pack_bin(&w.pk, 3); msgpack_pack_bin_body(&w.pk, "bad", 3);
    proto_pack_key(&w.pk, MF_HIST); msgpack_pack_array(&w.pk, 0);
    msg(&w);
    proto_begin(&w, PT_TOKEN, 12);
    proto_put_u64(&w, MF_SESS, 424242);
    proto_put_u64(&w, MF_STEP, 0);
    proto_put_i64(&w, MF_TOK, 5);
    proto_put_u64(&w, MF_EPOCH, 1);
    msg(&w);
    if (front) { /* requests the front door must refuse */
        proto_begin(&w, PT_GENERATE, 13);
        proto_put_i64(&w, MF_N, 4);
        proto_put_str(&w, MF_PROMPT, "x");
        proto_put_map_begin(&w, MF_PARAMS, 1);
        proto_pack_str(&w.pk, "top_k");
        proto_pack_str(&w.pk, "-7");
        msg(&w);
        proto_begin(&w, PT_GENERATE, 14);
        proto_put_i64(&w, MF_N, 4);
        proto_put_str(&w, MF_PROMPT, "x");
        proto_put_map_begin(&w, MF_PARAMS, 1);
        proto_pack_str(&w.pk, "no_such_parameter");
        proto_pack_str(&w.pk, "1");
        msg(&w);
        proto_begin(&w, PT_GENERATE, 15); /* neither prompt nor msgs */
        proto_put_i64(&w, MF_N, 4);
        msg(&w);
        proto_begin(&w, PT_GENERATE, 16); /* chat with an odd message list */
        proto_put_i64(&w, MF_N, 4);
        proto_put_bool(&w, MF_CHAT, 1);
        proto_put_array_begin(&w, MF_MSGS, 1);
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
                proto_strcpy(&m, MF_MSG, text, sizeof text);
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
