/* conn.c - llmc's front door connection and JSON helpers (see conn.h). */
#include "conn.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "net.h"
#include "errcode.h"

#define LC_RESTART_WAIT_MS 3000 /* how long a dead front door's socket is given to come back */

/* 1 if something listens on the unix socket at path (a stale file refuses). */
static int ipc_listening(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) return 1; /* let ZeroMQ report it */
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno != ECONNREFUSED;
    close(fd);
    return ok;
}

int lc_open(lc_conn *c, const char *endpoint, const char *run_dir, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    if (endpoint) {
        snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
    } else {
        char dir[256];
        if (net_run_dir(run_dir, dir, sizeof dir, err, errcap) != 0) return -1;
        net_endpoint(dir, NET_EP_FRONT, c->endpoint, sizeof c->endpoint);
    }
    const char *path = net_ipc_path(c->endpoint);
    /* a socket file nobody listens on is a front door that died: a supervised one is
     * back within a few hundred ms, so wait a while; no file at all is a pipeline that
     * was stopped (or one being restarted right now: a short wait) */
    for (int64_t t0 = net_now_ms();;) {
        struct stat st;
        int exists = path ? stat(path, &st) == 0 : 1;
        if (!path || (exists && ipc_listening(path))) break;
        if (net_now_ms() - t0 > (exists ? LC_RESTART_WAIT_MS : 300)) {
            char shown[400];
            return errf(err, errcap, "the pipeline is not running (no front door at %s); " LC_START_HINT,
                        net_display(c->endpoint, shown, sizeof shown));
        }
        usleep(20 * 1000);
    }
    c->ctx = zmq_ctx_new();
    c->sock = c->ctx ? net_socket(c->ctx, ZMQ_DEALER) : NULL;
    int unlimited = 0; /* never drop a piece because the terminal is slow */
    if (c->sock) zmq_setsockopt(c->sock, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
    char cerr[200] = "";
    if (!c->sock || net_curve(c->sock, c->endpoint, 0, cerr, sizeof cerr) != 0 || zmq_connect(c->sock, c->endpoint) != 0) {
        errf(err, errcap, "cannot connect to %s: %s", c->endpoint, cerr[0] ? cerr : zmq_strerror(zmq_errno()));
        lc_close(c);
        return -1;
    }
    return 0;
}

int lc_send(lc_conn *c, proto_writer *w)
{
    int r = zmq_send(c->sock, proto_data(w), proto_size(w), 0) < 0 ? -1 : 0;
    proto_writer_free(w);
    return r;
}

int lc_recv(lc_conn *c, int timeout_ms, proto_msg *m)
{
    zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
    memset(m, 0, sizeof *m);
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return 0;
    size_t nbytes;
    char err[200];
    return net_recv_msg(c->sock, 0, NULL, NULL, m, &nbytes, err, sizeof err);
}

void lc_close(lc_conn *c)
{
    int linger = 300; /* let a final CANCEL leave */
    if (c->sock) zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
    net_close(&c->sock);
    if (c->ctx) zmq_ctx_term(c->ctx);
    c->ctx = NULL;
}

void lc_json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch == '\r') fputs("\\r", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

void lc_json_obj(FILE *f, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", f); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%llu", (unsigned long long)o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%lld", (long long)o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32: case MSGPACK_OBJECT_FLOAT64: fprintf(f, "%.3f", o->via.f64); break;
    case MSGPACK_OBJECT_STR: lc_json_str(f, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_ARRAY:
        fputc('[', f);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i) fputc(',', f);
            lc_json_obj(f, &o->via.array.ptr[i]);
        }
        fputc(']', f);
        break;
    case MSGPACK_OBJECT_MAP:
        fputc('{', f);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            if (i) fputc(',', f);
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type == MSGPACK_OBJECT_STR) lc_json_str(f, k->via.str.ptr, k->via.str.size);
            else fputs("\"?\"", f);
            fputc(':', f);
            lc_json_obj(f, &o->via.map.ptr[i].val);
        }
        fputc('}', f);
        break;
    default: fputs("null", f);
    }
}

void lc_generate_msg(proto_writer *w, uint64_t id, const lc_gen *g, const lc_resume *rs)
{
    proto_begin(w, PT_GENERATE, id);
    proto_put_i64(w, MF_N, g->n_predict);
    if (g->msgs) {
        proto_put_bool(w, MF_CHAT, 1);
        proto_put_array_begin(w, MF_MSGS, (uint32_t)g->n_msgs);
        for (int i = 0; i < g->n_msgs; i++) proto_pack_str(&w->pk, g->msgs[i]);
    } else if (g->toks) {
        proto_put_ints(w, MF_TOKS, g->toks, (size_t)g->n_toks);
    } else {
        proto_put_str(w, MF_PROMPT, g->prompt);
    }
    if (rs) {
        proto_put_u64(w, MF_RESUME, rs->sess);
        proto_put_str(w, MF_KEY, rs->key);
        proto_put_u64(w, MF_RBYTES, rs->rbytes);
    } else if (g->cont) {
        proto_put_u64(w, MF_SESS, g->cont);
        proto_put_str(w, MF_KEY, g->key);
    }
    int pin = rs && rs->have_seed;
    proto_put_map_begin(w, MF_PARAMS, (uint32_t)(g->n_params + pin));
    for (int i = 0; i < g->n_params; i++) {
        proto_pack_str(&w->pk, g->pk[i]);
        proto_pack_str(&w->pk, g->pv[i]);
    }
    if (pin) { /* last: it wins over a "seed" given above (the same value) */
        char v[16];
        snprintf(v, sizeof v, "%u", rs->seed);
        proto_pack_str(&w->pk, "seed");
        proto_pack_str(&w->pk, v);
    }
    if (g->n_stops) {
        proto_put_array_begin(w, MF_STOP, (uint32_t)g->n_stops);
        for (int i = 0; i < g->n_stops; i++) proto_pack_str(&w->pk, g->stops[i]);
    }
    if (g->grammar) proto_put_str(w, MF_GRAMMAR, g->grammar);
    if (g->embed) proto_put_u64(w, MF_EMBED, (uint64_t)g->embed);
    if (g->n_tools) {
        proto_put_array_begin(w, MF_TOOLS, (uint32_t)g->n_tools);
        for (int i = 0; i < g->n_tools; i++) proto_pack_str(&w->pk, g->tools[i]);
    }
    if (g->n_tcalls) {
        proto_put_array_begin(w, MF_TCALLS, (uint32_t)g->n_tcalls);
        for (int i = 0; i < g->n_tcalls; i++) proto_pack_str(&w->pk, g->tcalls[i]);
    }
}

errcode lc_param_check(smp_params *chk, const char *name, const char *value, char *err, size_t errlen)
{
    return smp_param_set(chk, name, value, err, errlen) == 0 ? ERR_NONE : ERR_INVALID;
}
