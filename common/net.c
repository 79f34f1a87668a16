/* net.c - run directory, endpoints and ZeroMQ socket helpers (see net.h). */
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "proto.h"
#include "errcode.h"

/* The run directories this process verified, each held open for the rest of its life:
 * endpoints and files in one are named through /proc/self/fd/N, the verified directory
 * itself, so a name swapped after the check (a symlink, a rename) cannot redirect a bind,
 * a connect, ZeroMQ's later reconnects or a file. A descriptor is never closed, because
 * names through it may still be in use; a directory replaced under the same name gets a
 * new entry. Filled before any thread starts (see net.h). */
#define NET_HELD_MAX 8
static struct {
    char path[NET_RUN_DIR_MAX + 1]; /* as named: for messages and lookups */
    int  fd;                        /* O_PATH descriptor of the verified directory */
} held[NET_HELD_MAX];
static int n_held;

static int held_find(const char *path)
{
    for (int i = 0; i < n_held; i++)
        if (strcmp(held[i].path, path) == 0) return i;
    return -1;
}

/* --run-dir, else $LLM_RUN_DIR, else $XDG_RUNTIME_DIR/llm, else /tmp/llm-$UID. */
static int run_dir_name(const char *flag, char *out, size_t cap, char *err, size_t errcap)
{
    const char *env = getenv("LLM_RUN_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (flag && *flag) n = snprintf(out, cap, "%s", flag);
    else if (env && *env) n = snprintf(out, cap, "%s", env);
    else if (xdg && *xdg) n = snprintf(out, cap, "%s/llm", xdg);
    else n = snprintf(out, cap, "/tmp/llm-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= cap || n > NET_RUN_DIR_MAX) {
        /* other programs name its sockets by path, and sun_path holds 107 bytes */
        return errf(err, errcap, "run directory path '%s' is too long (at most %d bytes)", out, NET_RUN_DIR_MAX);
    }
    return 0;
}

/* Opens path itself, never what a symlink there points to; the descriptor, or -1 with
 * err. O_PATH needs no read permission, so another user's directory gets to the owner
 * check and its message. */
static int run_dir_open(const char *path, char *err, size_t errcap)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        return errf(err, errcap, "cannot create run directory %s: %s", path, strerror(errno));
    }
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return fd;
    int e = errno;
    struct stat st;
    if ((e == ELOOP || e == ENOTDIR) && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        errf(err, errcap, "run directory %s is a symbolic link; refusing it (it could be pointed elsewhere "
             "after the check): give the real directory", path);
    else if (e == ENOTDIR)
        errf(err, errcap, "run directory %s is not a directory", path);
    else
        errf(err, errcap, "cannot open run directory %s: %s", path, strerror(e));
    return -1;
}

/* The checks on the open directory: ours, nobody else may enter, reachable by fd path. */
static int run_dir_verify(int fd, const char *path, struct stat *st, char *err, size_t errcap)
{
    char via[32];
    snprintf(via, sizeof via, "/proc/self/fd/%d", fd);
    if (fstat(fd, st) != 0 || !S_ISDIR(st->st_mode)) {
        return errf(err, errcap, "run directory %s is not a directory", path);
    }
    if (st->st_uid != getuid()) {
        return errf(err, errcap, "run directory %s belongs to uid %u, not to us (uid %u)", path,
                    (unsigned)st->st_uid, (unsigned)getuid());
    }
    if (st->st_mode & 077) {
        return errf(err, errcap, "run directory %s has mode %o; it must be 0700", path, (unsigned)(st->st_mode & 0777));
    }
    if (access(via, X_OK) != 0) {
        return errf(err, errcap, "cannot reach run directory %s through %s (is /proc mounted?)", path, via);
    }
    return 0;
}

/* Keeps fd as path's verified directory, or the held one if it is the same directory. */
static int run_dir_hold(const char *path, int fd, const struct stat *st, char *err, size_t errcap)
{
    int i = held_find(path);
    struct stat hs;
    if (i >= 0 && fstat(held[i].fd, &hs) == 0 && hs.st_dev == st->st_dev && hs.st_ino == st->st_ino) {
        close(fd);
        return 0;
    }
    if (i < 0 && n_held == NET_HELD_MAX) {
        errf(err, errcap, "cannot hold run directory %s: %d run directories are open already", path,
             NET_HELD_MAX);
        close(fd);
        return -1;
    }
    if (i < 0) i = n_held++;
    snprintf(held[i].path, sizeof held[i].path, "%s", path);
    held[i].fd = fd;
    return 0;
}

int net_run_dir(const char *flag, char *out, size_t cap, char *err, size_t errcap)
{
    if (run_dir_name(flag, out, cap, err, errcap) != 0) return -1;
    int fd = run_dir_open(out, err, errcap);
    if (fd < 0) return -1;
    struct stat st;
    if (run_dir_verify(fd, out, &st, err, errcap) != 0) {
        close(fd);
        return -1;
    }
    return run_dir_hold(out, fd, &st, err, errcap);
}

void net_run_path(const char *dir, const char *name, char *out, size_t cap)
{
    int i = held_find(dir);
    LLM_ASSERT(i >= 0); /* dir must come from net_run_dir */
    snprintf(out, cap, "/proc/self/fd/%d/%s", held[i].fd, name);
}

void net_endpoint(const char *dir, net_ep ep, char *out, size_t cap)
{
    static const char *const envs[NET_EP_COUNT] = {"LLM_FRONT", "LLM_WORKERS", "LLM_SAMPLER"};
    static const char *const files[NET_EP_COUNT] = {"front.sock", "workers.sock", "sampler.sock"};
    LLM_ASSERT(ep < NET_EP_COUNT);
    const char *e = getenv(envs[ep]);
    char path[64];
    if (e && *e) {
        snprintf(out, cap, "%s", e);
        return;
    }
    net_run_path(dir, files[ep], path, sizeof path);
    snprintf(out, cap, "ipc://%s", path);
}

const char *net_display(const char *endpoint, char *out, size_t cap)
{
    for (int i = 0; i < n_held; i++) {
        char via[40];
        int n = snprintf(via, sizeof via, "ipc:///proc/self/fd/%d/", held[i].fd);
        if (strncmp(endpoint, via, (size_t)n) == 0) {
            snprintf(out, cap, "ipc://%s/%s", held[i].path, endpoint + n);
            return out;
        }
    }
    snprintf(out, cap, "%s", endpoint);
    return out;
}

int net_bind(void *sock, const char *endpoint)
{
    if (!net_ipc_path(endpoint)) return zmq_bind(sock, endpoint);
    /* a socket file's mode is 0777 less the umask at bind(2), which libzmq calls in this
     * thread; the umask is the process's, and only tightened for the moment */
    mode_t old = umask(0177);
    int r = zmq_bind(sock, endpoint), e = errno;
    umask(old);
    errno = e;
    return r;
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
            return errf(err, errcap, "LLM_CURVE_SECRET must be a 40-character z85 CURVE secret key");
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
        return errf(err, errcap, "zmq_curve_keypair: %s (libzmq built without CURVE?)", zmq_strerror(zmq_errno()));
    }
    if (!key_ok(srv) || zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, srv, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40) != 0) {
        return errf(err, errcap, "LLM_CURVE_SERVER must be the server's 40-character z85 public key");
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
