/*
 * worker_io.h - a worker's I/O thread: it owns the connection to the front door, relays
 * messages between it and the compute thread, and sends the heartbeat every NET_HB_MS
 * whatever the compute thread is doing, so a forward pass of any length never makes the
 * worker look dead (owner: pipeline).
 *
 *   wio io;
 *   wio_init(&io, ctx, front_socket, m, wid, host, cap, n_ctx);   // takes the socket
 *   void *pipe = wio_start(&io, err, sizeof err);   // the compute side of the relay
 *   net_send(pipe, NULL, 0, bytes, n);              // goes to the front door
 *   net_recv_msg(pipe, 0, ...);                     // what the front door sent
 *   wio_set_load(&io, active, busy);                // reported by the next beat
 *   wio_stop(&io);                                  // goodbye beat, join, close
 *
 * The heartbeat also names the model (segment, and the vocabulary's size and hash, so the
 * front door can refuse a worker of another model) and how long samplerd has kept the
 * oldest sample request waiting (swait). It carries the engine's progress counter (eng_progress: one unit per layer
 * of every pass) and the number of sessions with compute pending: the front door declares
 * a worker dead when its beats stop, or when it holds busy sessions and its progress does
 * not move for the front door's stall timeout.
 *
 * Ownership: the wio owns the front socket from wio_init on, and the inproc pair; the
 * compute thread uses only the pipe returned by wio_start, the I/O thread only the rest.
 */
#ifndef LLM_WORKER_IO_H
#define LLM_WORKER_IO_H

#include <pthread.h>
#include <stdint.h>

#include "engine.h"
#include "proto.h" /* PROTO_KV_COUNTS */

typedef struct {
    void       *ctx;
    void       *front;     /* DEALER to the front door (I/O thread) */
    void       *io_end;    /* PAIR, I/O thread's end of the relay */
    void       *cpu_end;   /* PAIR, the compute thread's end */
    eng_model  *m;         /* for eng_progress */
    uint64_t    wid;
    char        host[64];
    int         cap, n_ctx;   /* cap: atomic (wio_set_cap) */
    int         active, busy; /* sessions held / with compute pending (atomic) */
    int         swait;        /* ms its oldest sample request has waited for samplerd (atomic) */
    uint32_t    n_vocab;      /* the vocabulary's identity (gguf_vocab_id of the segment's */
    uint64_t    vocab_id;     /* tokenizer blob): the front door refuses a different one */
    double      bpw;          /* bits per weight of the segment, for llmc status */
    uint64_t    kv[PROTO_KV_COUNTS];        /* KV pool counts (wio_set_kv; under kv_mu), kv_on: any */
    int         kv_on;
    pthread_mutex_t kv_mu;
    int         stop;         /* atomic: the I/O thread says goodbye and ends */
    int         running;
    pthread_t   thread;
} wio;

/* Fills io; takes ownership of the connected front socket. */
void wio_init(wio *io, void *ctx, void *front, eng_model *m, uint64_t wid, const char *host, int cap, int n_ctx);
/* Starts the I/O thread (its first beat registers the worker); returns the compute
 * thread's end of the relay, or NULL with err. */
void *wio_start(wio *io, char *err, size_t errlen);
/* Publishes the KV pool's counts the next heartbeats report: blocks, used, cached,
 * evictions, and this worker's prompt tokens, reused tokens, preemptions and deferred runs. */
void wio_set_kv(wio *io, const uint64_t kv[PROTO_KV_COUNTS]);
/* Publishes the counts the next heartbeat reports. */
void wio_set_load(wio *io, int active, int busy);
/* Publishes the sessions the next heartbeat offers (the front door sends no more). */
void wio_set_cap(wio *io, int cap);
/* Publishes how long (ms) the oldest unanswered sample request has waited (0: none):
 * the front door shows samplerd's health from it. */
void wio_set_sampler_wait(wio *io, int ms);
/* Sends the goodbye beat (the front door moves this worker's sessions at once), joins
 * the thread and closes every socket; accepts a wio that never started. */
void wio_stop(wio *io);

#endif
