/* net.c - run directory, endpoints and ZeroMQ socket helpers (see net.h). */
#include "net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "proto.h"

int net_run_dir(const char *flag, char *out, size_t cap, char *err, size_t errcap)
{
    const char *env = getenv("LLM_RUN_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (flag && *flag) n = snprintf(out, cap, "%s", flag);
    else if (env && *env) n = snprintf(out, cap, "%s", env);
    else if (xdg && *xdg) n = snprintf(out, cap, "%s/llm", xdg);
    else n = snprintf(out, cap, "/tmp/llm-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= cap || (size_t)n > 80) {
        /* ipc:// paths are limited by sun_path (108 bytes) */
        snprintf(err, errcap, "run directory path '%s' is too long (at most 80 bytes)", out);
        return -1;
    }
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errcap, "cannot create run directory %s: %s", out, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errcap, "run directory %s is not a directory", out);
        return -1;
    }
    if (st.st_uid != getuid()) {
        snprintf(err, errcap, "run directory %s belongs to uid %u, not to us", out, (unsigned)st.st_uid);
        return -1;
    }
    if (st.st_mode & 077) {
        snprintf(err, errcap, "run directory %s has mode %o; it must be 0700", out, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    return 0;
}

void net_endpoint(const char *dir, net_ep ep, char *out, size_t cap)
{
    static const char *const envs[NET_EP_COUNT] = {"LLM_FRONT", "LLM_WORKERS", "LLM_SAMPLER"};
    static const char *const files[NET_EP_COUNT] = {"front.sock", "workers.sock", "sampler.sock"};
    LLM_ASSERT(ep < NET_EP_COUNT);
    const char *e = getenv(envs[ep]);
    if (e && *e) snprintf(out, cap, "%s", e);
    else snprintf(out, cap, "ipc://%s/%s", dir, files[ep]);
}

const char *net_ipc_path(const char *endpoint)
{
    return strncmp(endpoint, "ipc://", 6) == 0 ? endpoint + 6 : NULL;
}

void *net_socket(void *ctx, int type)
{
    void *s = zmq_socket(ctx, type);
    if (!s) {
        log_error("zmq_socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int64_t maxmsg = PROTO_MAX_MSG;
    int zero = 0, rc = NET_RECONNECT_MS, rcmax = NET_RECONNECT_MAX_MS, hwm = 10000;
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &rc, sizeof rc);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &rcmax, sizeof rcmax);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    return s;
}

static int key_ok(const char *k) { return k && strlen(k) == 40; }

int net_curve(void *sock, const char *endpoint, int is_server, char *err, size_t errcap)
{
    if (strncmp(endpoint, "tcp://", 6) != 0) return 0;
    if (is_server) {
        const char *sec = getenv("LLM_CURVE_SECRET");
        if (!sec) {
            log_warn("serving %s in plaintext: anyone who can reach it can read and send messages; "
                     "set LLM_CURVE_SECRET (and the allow-lists) to use CURVE", endpoint);
            return 0;
        }
        int one = 1;
        if (!key_ok(sec) || zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40) != 0) {
            snprintf(err, errcap, "LLM_CURVE_SECRET must be a 40-character z85 CURVE secret key");
            return -1;
        }
        return 0;
    }
    const char *srv = getenv("LLM_CURVE_SERVER");
    if (!srv) {
        log_warn("connecting to %s in plaintext (set LLM_CURVE_SERVER to the server's public key for CURVE)",
                 endpoint);
        return 0;
    }
    char pub[41], sec[41];
    const char *cp = getenv("LLM_CURVE_CLIENT_PUBLIC"), *cs = getenv("LLM_CURVE_CLIENT_SECRET");
    if (key_ok(cp) && key_ok(cs)) {
        snprintf(pub, sizeof pub, "%s", cp);
        snprintf(sec, sizeof sec, "%s", cs);
    } else if (zmq_curve_keypair(pub, sec) != 0) {
        snprintf(err, errcap, "zmq_curve_keypair: %s (libzmq built without CURVE?)", zmq_strerror(zmq_errno()));
        return -1;
    }
    if (!key_ok(srv) || zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, srv, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40) != 0) {
        snprintf(err, errcap, "LLM_CURVE_SERVER must be the server's 40-character z85 public key");
        return -1;
    }
    return 0;
}

void net_close(void **sock)
{
    if (sock && *sock) {
        zmq_close(*sock);
        *sock = NULL;
    }
}

int net_send(void *sock, const void *rid, size_t rid_len, const void *data, size_t len)
{
    if (len > PROTO_MAX_MSG) {
        /* the receiver would drop the connection (ZMQ_MAXMSGSIZE): a bug of the sender */
        log_error("refusing to send a message of %zu bytes (the limit is %u)", len, PROTO_MAX_MSG);
        errno = EMSGSIZE;
        return -1;
    }
    if (rid && zmq_send(sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return -1;
    return zmq_send(sock, data, len, ZMQ_DONTWAIT) < 0 ? -1 : 0;
}

static void drain_more(void *sock)
{
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        zmq_msg_recv(&x, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&x);
        sz = sizeof more;
    }
}

int net_recv(void *sock, int is_router, uint8_t *rid, size_t *rid_len, zmq_msg_t *msg)
{
    zmq_msg_init(msg);
    if (is_router) {
        zmq_msg_t r;
        zmq_msg_init(&r);
        if (zmq_msg_recv(&r, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&r);
            return errno == EAGAIN ? 0 : -1;
        }
        size_t n = zmq_msg_size(&r);
        int ok = n <= NET_RID_MAX && zmq_msg_more(&r);
        if (ok) memcpy(rid, zmq_msg_data(&r), n);
        *rid_len = ok ? n : 0;
        zmq_msg_close(&r);
        if (!ok) {
            drain_more(sock);
            return -1;
        }
    }
    if (zmq_msg_recv(msg, sock, ZMQ_DONTWAIT) < 0) return errno == EAGAIN && !is_router ? 0 : -1;
    if (zmq_msg_more(msg)) {
        drain_more(sock);
    }
    return 1;
}

int net_recv_msg(void *sock, int is_router, uint8_t *rid, size_t *rid_len, proto_msg *m,
                 size_t *nbytes, char *err, size_t errcap)
{
    return net_recv_msg_from(sock, is_router, rid, rid_len, m, nbytes, NULL, 0, err, errcap);
}

int net_recv_msg_from(void *sock, int is_router, uint8_t *rid, size_t *rid_len, proto_msg *m,
                      size_t *nbytes, char *origin, size_t origincap, char *err, size_t errcap)
{
    zmq_msg_t zm;
    memset(m, 0, sizeof *m);
    *nbytes = 0;
    if (origin && origincap) origin[0] = 0;
    if (net_recv(sock, is_router, rid, rid_len, &zm) <= 0) {
        zmq_msg_close(&zm);
        return 0;
    }
    if (origin && origincap) { /* the ZAP handler's user id (the CURVE key), else the address */
        const char *uid = zmq_msg_gets(&zm, "User-Id");
        const char *addr = zmq_msg_gets(&zm, "Peer-Address");
        if (uid && *uid) snprintf(origin, origincap, "key %s", uid);
        else if (addr && *addr) snprintf(origin, origincap, "%s", addr);
    }
    *nbytes = zmq_msg_size(&zm);
    int r = proto_decode(m, zmq_msg_data(&zm), *nbytes, err, errcap) == 0 ? 1 : -1;
    zmq_msg_close(&zm);
    return r;
}

int64_t net_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
