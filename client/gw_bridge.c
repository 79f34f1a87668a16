/* gw_bridge.c - the gateway's ZeroMQ thread (see gw_bridge.h). */
#include "gw_bridge.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "errcode.h"
#include "log.h"
#include "net.h"
#include "stream.h"

typedef enum { CMD_SUBMIT, CMD_CANCEL } cmd_type;

typedef struct cmd {
    struct cmd *next;
    cmd_type    type;
    void       *job;
    uint64_t    id;
    int         chat;
    lc_gen      gen;  /* the request (its strings are the job's) */
} cmd;

/* An open request. id is the job's (gwb_submit, gwb_cancel); st.id is the request id of
 * its latest GENERATE (a resume gets a fresh one; replies to older ones are ignored). */
typedef struct {
    uint64_t  id;
    void     *job;
    int       chat;
    lc_stream st;
} entry;

struct gwb {
    gwb_ops     ops;
    char        endpoint[300];
    void       *ctx, *sock;
    int         efd;
    pthread_t   thread;
    int         started;
    int         stop;    /* atomic: the thread should end */
    int         stopped; /* under mu: the thread ended, submits fail at once */
    pthread_mutex_t mu; /* guards cmds, next_id, status */
    cmd        *cmds, **cmds_tail;
    uint64_t    next_id;
    gwb_status  status;
    entry      *open;   /* (n_open) bridge thread only */
    int         n_open, cap_open;
    int64_t     last_tick_ms;
    int64_t     lost_ms; /* every stream's lc_stream.lost_ms */
};

#define STATUS_ID 1 /* request ids of jobs start above it */

static void wake(gwb *b)
{
    uint64_t one = 1;
    ssize_t r = write(b->efd, &one, sizeof one);
    (void)r; /* the counter only saturates when the thread is already awake */
}

/* Queues c for the thread; 0, or -1 when the thread has ended (c not taken). */
static int push(gwb *b, cmd *c)
{
    pthread_mutex_lock(&b->mu);
    if (b->stopped) {
        pthread_mutex_unlock(&b->mu);
        return -1;
    }
    c->next = NULL;
    *b->cmds_tail = c;
    b->cmds_tail = &c->next;
    pthread_mutex_unlock(&b->mu);
    wake(b);
    return 0;
}

uint64_t gwb_new_id(gwb *b)
{
    pthread_mutex_lock(&b->mu);
    uint64_t id = ++b->next_id;
    pthread_mutex_unlock(&b->mu);
    return id;
}

static uint64_t new_id(void *cls)
{
    return gwb_new_id(cls);
}

void gwb_submit(gwb *b, void *job, uint64_t id, int chat, const lc_gen *g)
{
    cmd *c = calloc(1, sizeof *c);
    if (!c) {
        b->ops.on_fail(job, 500, errcode_name(ERR_INTERNAL), "gateway out of memory");
        b->ops.release(job);
        return;
    }
    *c = (cmd){.type = CMD_SUBMIT, .job = job, .id = id, .chat = chat, .gen = *g};
    if (push(b, c) != 0) {
        free(c);
        b->ops.on_fail(job, 503, errcode_name(ERR_UNAVAILABLE), "the gateway is shutting down");
        b->ops.release(job);
    }
}

void gwb_cancel(gwb *b, uint64_t id)
{
    cmd *c = calloc(1, sizeof *c);
    if (!c) return; /* the front door drops the request when its pings stop */
    *c = (cmd){.type = CMD_CANCEL, .id = id};
    if (push(b, c) != 0) free(c);
}

void gwb_status_get(gwb *b, gwb_status *s)
{
    pthread_mutex_lock(&b->mu);
    *s = b->status;
    pthread_mutex_unlock(&b->mu);
}

const char *gwb_endpoint(const gwb *b)
{
    return b->endpoint;
}

/* ---- the thread ---- */

static int send_msg(gwb *b, proto_writer *w)
{
    int r = zmq_send(b->sock, proto_data(w), proto_size(w), ZMQ_DONTWAIT) < 0 ? -1 : 0;
    proto_writer_free(w);
    return r;
}

/* Sends what e's stream has queued; 0, or -1 when a message could not be sent. */
static int send_queued(gwb *b, entry *e)
{
    int r = 0;
    proto_writer w;
    while (lc_stream_pop(&e->st, &w))
        if (send_msg(b, &w) != 0) r = -1;
    return r;
}

static int find(const gwb *b, uint64_t id)
{
    for (int i = 0; i < b->n_open; i++)
        if (b->open[i].id == id) return i;
    return -1;
}

static int find_wire(const gwb *b, uint64_t wire)
{
    for (int i = 0; i < b->n_open; i++)
        if (b->open[i].st.id == wire) return i;
    return -1;
}

/* Forgets open[i] (telling the front door to drop it when cancel) and releases its job. */
static void close_entry(gwb *b, int i, int cancel)
{
    entry e = b->open[i];
    b->open[i] = b->open[--b->n_open];
    if (cancel || (e.chat && e.st.rs.sess)) { /* a finished chat turn is held by the front door: free it */
        proto_writer w;
        lc_stream_cancel(&e.st, &w);
        send_msg(b, &w);
    }
    b->ops.release(e.job);
}

static void fail_entry(gwb *b, int i, int status, const char *code, const char *msg)
{
    b->ops.on_fail(b->open[i].job, status, code, msg);
    close_entry(b, i, 1);
}

static void do_submit(gwb *b, cmd *c)
{
    if (b->n_open == b->cap_open) {
        int cap = b->cap_open ? b->cap_open * 2 : 64;
        entry *x = realloc(b->open, (size_t)cap * sizeof *x);
        if (!x) {
            b->ops.on_fail(c->job, 500, errcode_name(ERR_INTERNAL), "gateway out of memory");
            b->ops.release(c->job);
            return;
        }
        b->open = x;
        b->cap_open = cap;
    }
    entry *e = &b->open[b->n_open];
    *e = (entry){.id = c->id, .job = c->job, .chat = c->chat};
    lc_stream_start(&e->st, &c->gen, c->id, net_now_ms(), new_id, b);
    e->st.lost_ms = b->lost_ms;
    if (send_queued(b, e) != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "the front door at %s is not running (or not reachable)", b->endpoint);
        b->ops.on_fail(c->job, 503, errcode_name(ERR_UNAVAILABLE), msg);
        b->ops.release(c->job);
        return;
    }
    b->n_open++;
}

/* Runs the queued commands; with last set, marks the bridge stopped in the same step
 * (so that no command can slip in after the final one). */
static void take_commands(gwb *b, int last)
{
    pthread_mutex_lock(&b->mu);
    b->stopped |= last;
    cmd *c = b->cmds;
    b->cmds = NULL;
    b->cmds_tail = &b->cmds;
    pthread_mutex_unlock(&b->mu);
    while (c) {
        cmd *next = c->next;
        if (c->type == CMD_SUBMIT) {
            do_submit(b, c);
        } else {
            int i = find(b, c->id);
            if (i >= 0) {
                log_info("request %llu: HTTP client gone, cancelled", (unsigned long long)c->id);
                close_entry(b, i, 1);
            }
        }
        free(c);
        c = next;
    }
}

static void on_status(gwb *b, const proto_msg *m)
{
    gwb_status s;
    memset(&s, 0, sizeof s);
    s.at_ms = net_now_ms();
    pm_status_reply r;
    pm_status_reply_get(m, &r);
    s.workers = r.workers->type == MSGPACK_OBJECT_ARRAY ? (int)r.workers->via.array.size : 0;
    s.active = r.active;
    s.queued = r.queued;
    s.held = r.held;
    s.has_kv = r.has_kvb;
    PROTO_KV_GET(r, s.kv);
    s.served = r.served;
    s.failed = r.failed;
    s.max_requests = r.max_requests;
    s.max_per_client = r.max_per_client;
    proto_sv_copy(r.model, s.model, sizeof s.model);
    proto_sv_copy(r.segment, s.segment, sizeof s.segment);
    proto_sv_copy(r.template_name, s.tmpl, sizeof s.tmpl);
    pthread_mutex_lock(&b->mu);
    b->status = s;
    pthread_mutex_unlock(&b->mu);
}

/* Sends what open[i]'s stream queued; a GENERATE beyond the first is logged. */
static void flush(gwb *b, int i, int sent_before)
{
    entry *e = &b->open[i];
    if (e->st.resumes + e->st.resends != sent_before)
        log_info("request %llu: %s (wire id %llu, %llu bytes received)", (unsigned long long)e->id,
                 e->st.accepted ? "resuming on the front door" : "sending again", (unsigned long long)e->st.id,
                 (unsigned long long)e->st.rs.rbytes);
    send_queued(b, e);
}

/* A reply about open[i]: the stream's bookkeeping, then the job's. */
static void on_reply(gwb *b, int i, const proto_msg *m)
{
    entry *e = &b->open[i];
    int sent = e->st.resumes + e->st.resends;
    lc_event ev = lc_stream_on_msg(&e->st, m, net_now_ms());
    flush(b, i, sent);
    if (ev == LC_EV_ACCEPTED || ev == LC_EV_PIECE || ev == LC_EV_DONE || ev == LC_EV_ERROR || ev == LC_EV_EMBEDDING)
        b->ops.on_msg(e->job, m);
    if (ev == LC_EV_DONE && sent)
        log_info("request %llu: done after %d resumes", (unsigned long long)e->id, sent);
    if (lc_stream_over(&e->st)) close_entry(b, i, 0);
}

static void receive(gwb *b)
{
    for (int k = 0; k < 1024; k++) {
        proto_msg m;
        size_t nbytes;
        char err[200];
        int r = net_recv_msg(b->sock, 0, NULL, NULL, &m, &nbytes, err, sizeof err);
        if (r == 0) return;
        if (r < 0) {
            log_warn("bad message from the front door (%zu bytes): %s", nbytes, err);
            continue;
        }
        if (m.type == PT_STATUS_REPLY) {
            on_status(b, &m);
        } else {
            int i = find_wire(b, m.id);
            if (i >= 0) on_reply(b, i, &m);
        }
        proto_msg_free(&m);
    }
}

static void tick(gwb *b, int64_t now)
{
    if (now - b->last_tick_ms < LC_STREAM_PING_MS) return;
    b->last_tick_ms = now;
    proto_writer w;
    proto_begin(&w, PT_STATUS, STATUS_ID);
    send_msg(b, &w);
    for (int i = b->n_open - 1; i >= 0; i--) {
        entry *e = &b->open[i];
        if (b->ops.gone(e->job)) {
            log_info("request %llu: HTTP client disconnected, cancelled", (unsigned long long)e->id);
            close_entry(b, i, 1);
            continue;
        }
        int sent = e->st.resumes + e->st.resends;
        if (lc_stream_tick(&e->st, now) == LC_EV_TIMEOUT) {
            char msg[400];
            snprintf(msg, sizeof msg, "lost the front door at %s (no answer for %d s); run the request again",
                     b->endpoint, (int)(lc_stream_silence_ms(&e->st, now) / 1000));
            fail_entry(b, i, 503, errcode_name(ERR_UNAVAILABLE), msg);
        } else {
            flush(b, i, sent);
        }
    }
}

static void *run(void *arg)
{
    gwb *b = arg;
    while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
        zmq_pollitem_t it[2] = {{b->sock, 0, ZMQ_POLLIN, 0}, {NULL, b->efd, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, 100) < 0 && zmq_errno() != EINTR) break;
        if (it[1].revents & ZMQ_POLLIN) {
            uint64_t x;
            ssize_t r = read(b->efd, &x, sizeof x);
            (void)r;
        }
        take_commands(b, 0);
        receive(b);
        tick(b, net_now_ms());
    }
    take_commands(b, 1);
    while (b->n_open > 0) fail_entry(b, b->n_open - 1, 503, errcode_name(ERR_UNAVAILABLE), "the gateway is shutting down");
    return NULL;
}

gwb *gwb_new(const char *endpoint, const gwb_ops *ops, int64_t lost_ms, char *err, size_t errcap)
{
    gwb *b = calloc(1, sizeof *b);
    if (!b) { errf(err, errcap, "out of memory"); return NULL; }
    b->ops = *ops;
    b->lost_ms = lost_ms;
    b->efd = -1;
    b->cmds_tail = &b->cmds;
    b->next_id = STATUS_ID;
    pthread_mutex_init(&b->mu, NULL);
    snprintf(b->endpoint, sizeof b->endpoint, "%s", endpoint);
    b->ctx = zmq_ctx_new();
    b->sock = b->ctx ? net_socket(b->ctx, ZMQ_DEALER) : NULL;
    b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    char cerr[200] = "";
    if (!b->sock || b->efd < 0) {
        errf(err, errcap, "cannot create the front door socket: %s", zmq_strerror(zmq_errno()));
        gwb_destroy(&b);
        return NULL;
    }
    /* never drop a piece because an HTTP client is slow; refuse to queue while no front
     * door is connected (a request then fails at once with 503 instead of waiting) */
    int unlimited = 0, immediate = 1;
    zmq_setsockopt(b->sock, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
    zmq_setsockopt(b->sock, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    zmq_setsockopt(b->sock, ZMQ_IMMEDIATE, &immediate, sizeof immediate);
    if (net_curve(b->sock, endpoint, 0, cerr, sizeof cerr) != 0 || zmq_connect(b->sock, endpoint) != 0) {
        errf(err, errcap, "cannot connect to %s: %s", endpoint, cerr[0] ? cerr : zmq_strerror(zmq_errno()));
        gwb_destroy(&b);
        return NULL;
    }
    if (pthread_create(&b->thread, NULL, run, b) != 0) {
        errf(err, errcap, "cannot start the bridge thread");
        gwb_destroy(&b);
        return NULL;
    }
    b->started = 1;
    return b;
}

void gwb_stop(gwb *b)
{
    if (!b || !b->started) return;
    __atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
    wake(b);
    pthread_join(b->thread, NULL);
    b->started = 0;
}

void gwb_destroy(gwb **pb)
{
    gwb *b = *pb;
    if (!b) return;
    gwb_stop(b);
    for (cmd *c = b->cmds, *next; c; c = next) { /* cancels that came after the stop */
        next = c->next;
        free(c);
    }
    net_close(&b->sock);
    if (b->ctx) zmq_ctx_term(b->ctx);
    if (b->efd >= 0) close(b->efd);
    free(b->open);
    pthread_mutex_destroy(&b->mu);
    free(b);
    *pb = NULL;
}
