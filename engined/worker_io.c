/*
 * worker_io.c - the worker's I/O thread: relay between the front door and the compute
 * thread, and heartbeats that do not wait for compute. See worker_io.h.
 */
#include "worker_io.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "log.h"
#include "net.h"
#include "proto.h"
#include "errcode.h"

#define WIO_ENDPOINT_FMT "inproc://worker-io-%p"

void wio_init(wio *io, void *ctx, void *front, eng_model *m, uint64_t wid, const char *host, int cap, int n_ctx)
{
    memset(io, 0, sizeof *io);
    io->ctx = ctx;
    io->front = front;
    io->m = m;
    io->wid = wid;
    snprintf(io->host, sizeof io->host, "%s", host);
    io->cap = cap;
    io->n_ctx = n_ctx;
    io->bpw = eng_bits_per_weight(m);
    pthread_mutex_init(&io->kv_mu, NULL);
    size_t bl = 0;
    const void *blob = eng_tokenizer_blob(m, &bl);
    char err[200];
    gguf_ctx *g = blob ? gguf_parse(blob, bl, err, sizeof err) : NULL;
    if (g) io->vocab_id = gguf_vocab_id(g, &io->n_vocab);
    gguf_close(g);
}

void wio_set_sampler_wait(wio *io, int ms)
{
    __atomic_store_n(&io->swait, ms, __ATOMIC_RELAXED);
}

void wio_set_kv(wio *io, const uint64_t kv[PROTO_KV_COUNTS])
{
    pthread_mutex_lock(&io->kv_mu);
    memcpy(io->kv, kv, sizeof io->kv);
    io->kv_on = 1;
    pthread_mutex_unlock(&io->kv_mu);
}

void wio_set_cap(wio *io, int cap) { __atomic_store_n(&io->cap, cap, __ATOMIC_RELAXED); }

void wio_set_load(wio *io, int active, int busy)
{
    __atomic_store_n(&io->active, active, __ATOMIC_RELAXED);
    __atomic_store_n(&io->busy, busy, __ATOMIC_RELAXED);
}

static void send_beat(wio *io, int bye)
{
    pm_worker_hb hb = {
        .bye = bye, .has_bye = bye != 0, /* shutting down: purge me now */
        .pid = (uint64_t)getpid(), .host = proto_sv_of(io->host), .seg = proto_sv_of(eng_segment_name(io->m)),
        .active = (uint64_t)__atomic_load_n(&io->active, __ATOMIC_RELAXED),
        .busy = (uint64_t)__atomic_load_n(&io->busy, __ATOMIC_RELAXED), .has_busy = 1,
        .prog = eng_progress(io->m), .has_prog = 1,
        .cap = (uint64_t)__atomic_load_n(&io->cap, __ATOMIC_RELAXED), .has_cap = 1,
        .ctx = (uint64_t)io->n_ctx, .has_ctx = 1, .wid = io->wid, .nv = io->n_vocab, .has_nv = 1,
        .vid = io->vocab_id, .has_vid = 1,
        .swait = (uint64_t)__atomic_load_n(&io->swait, __ATOMIC_RELAXED), .has_swait = 1,
        .bpw = io->bpw, .has_bpw = 1};
    pthread_mutex_lock(&io->kv_mu);
    if (io->kv_on) PROTO_KV_PUT(hb, io->kv, 1);
    pthread_mutex_unlock(&io->kv_mu);
    proto_writer pw;
    proto_begin(&pw, PT_WORKER_HB, 0);
    pm_worker_hb_put(&pw, &hb);
    net_send(io->front, NULL, 0, proto_data(&pw), proto_size(&pw));
    proto_writer_free(&pw);
}

/* Moves every message waiting on from to to, frame by frame, without copying. */
static void relay(void *from, void *to)
{
    for (int k = 0; k < 1024; k++) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, from, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        int more = zmq_msg_more(&msg);
        if (zmq_msg_send(&msg, to, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) < 0) zmq_msg_close(&msg);
    }
}

static void *io_main(void *arg)
{
    wio *io = arg;
    int64_t last_beat = 0;
    while (!__atomic_load_n(&io->stop, __ATOMIC_ACQUIRE)) {
        int64_t now = net_now_ms();
        if (now - last_beat >= NET_HB_MS) {
            send_beat(io, 0);
            last_beat = now;
        }
        long wait = NET_HB_MS - (net_now_ms() - last_beat);
        zmq_pollitem_t it[2] = {{io->front, 0, ZMQ_POLLIN, 0}, {io->io_end, 0, ZMQ_POLLIN, 0}};
        int rc = zmq_poll(it, 2, wait < 1 ? 1 : wait > 50 ? 50 : wait);
        if (rc < 0 && zmq_errno() != EINTR) {
            log_error("worker I/O thread: poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (it[0].revents & ZMQ_POLLIN) relay(io->front, io->io_end);
        if (it[1].revents & ZMQ_POLLIN) relay(io->io_end, io->front);
    }
    relay(io->io_end, io->front); /* what the compute thread sent last */
    send_beat(io, 1);
    int linger = 200; /* let the goodbye leave */
    zmq_setsockopt(io->front, ZMQ_LINGER, &linger, sizeof linger);
    return NULL;
}

void *wio_start(wio *io, char *err, size_t errlen)
{
    char ep[64];
    snprintf(ep, sizeof ep, WIO_ENDPOINT_FMT, (void *)io);
    io->io_end = zmq_socket(io->ctx, ZMQ_PAIR);
    io->cpu_end = zmq_socket(io->ctx, ZMQ_PAIR);
    int unlimited = 0, zero = 0;
    for (int i = 0; i < 2; i++) {
        void *s = i ? io->cpu_end : io->io_end;
        if (!s) break;
        zmq_setsockopt(s, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
        zmq_setsockopt(s, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    }
    if (!io->io_end || !io->cpu_end || zmq_bind(io->io_end, ep) != 0 || zmq_connect(io->cpu_end, ep) != 0) {
        errf(err, errlen, "worker I/O relay %s: %s", ep, zmq_strerror(zmq_errno()));
        return NULL;
    }
    /* signals go to the compute (main) thread, whose loop watches dmn_stop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&io->thread, NULL, io_main, io);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errf(err, errlen, "cannot start the worker I/O thread: %s", strerror(rc));
        return NULL;
    }
    io->running = 1;
    return io->cpu_end;
}

void wio_stop(wio *io)
{
    if (io->running) {
        __atomic_store_n(&io->stop, 1, __ATOMIC_RELEASE);
        pthread_join(io->thread, NULL);
        io->running = 0;
    }
    net_close(&io->cpu_end);
    net_close(&io->io_end);
    net_close(&io->front);
}
