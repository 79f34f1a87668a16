/*
 * gw_bridge.h - the gateway's one connection to the front door (owner: gateway): a
 * thread that owns a ZeroMQ DEALER socket, sends the GENERATEs the HTTP threads hand
 * it, routes every reply to its job by request id, pings each open request every
 * second (the front door drops a silent client after 6 s), cancels the requests whose
 * HTTP client went away, and polls STATUS every second for /health and /metrics.
 * Each request's stream is an lc_stream (stream.h), the state machine llmc drives too:
 * when the front door restarts mid-stream (a ping answered with unknown_request, or 2 s
 * of silence) the request is resumed (GENERATE with resume, key, rbytes and the pinned
 * seed, under a fresh wire id): the new front door replays the text from the bytes
 * already received, so the HTTP client sees only a pause.
 * ZeroMQ sockets are not thread-safe: only this thread touches the socket; the HTTP
 * threads talk to it through a locked queue and an eventfd.
 *
 *   static const gwb_ops ops = {on_msg, on_fail, gone, release};
 *   gwb *b = gwb_new("ipc:///run/llm/front.sock", &ops, LC_STREAM_LOST_MS, err, sizeof err);
 *   uint64_t id = gwb_new_id(b);
 *   lc_gen g = {...};                     // its strings belong to job
 *   gwb_submit(b, job, id, chat, &g);     // replies reach ops.on_msg(job, m) on the bridge thread
 *   gwb_cancel(b, id);                    // the HTTP client left
 *   gwb_destroy(&b);                      // open jobs get on_fail(503, ...) and release
 *
 * Ownership: a job is an opaque pointer the bridge borrows from gwb_submit until it
 * calls ops.release(job) exactly once (after DONE, ERROR, a cancel or a failure).
 * Callbacks run on the bridge thread with no bridge lock held; they must not block.
 */
#ifndef LLM_GW_BRIDGE_H
#define LLM_GW_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "proto.h"

/* The streams' timeouts are lc_stream's (stream.h); STATUS is polled every LC_STREAM_PING_MS. */
#define GWB_FRESH_MS 3000 /* a STATUS_REPLY younger than this means the front door is up */

typedef struct gwb gwb;

typedef struct {
    /* ACCEPTED, PIECE, EMBEDDING, DONE or ERROR about job (PONGs are absorbed). After DONE or
     * ERROR the bridge forgets the job and calls release. */
    void (*on_msg)(void *job, const proto_msg *m);
    /* The bridge gave up on job: HTTP status, error code ("unavailable", ...), message. */
    void (*on_fail)(void *job, int status, const char *code, const char *msg);
    /* 1 when job's HTTP client is gone (polled every LC_STREAM_PING_MS). */
    int (*gone)(void *job);
    /* The bridge holds job no longer. */
    void (*release)(void *job);
} gwb_ops;

/* The front door's last STATUS_REPLY. */
typedef struct {
    int64_t  at_ms;          /* net_now_ms() of its arrival; 0: never */
    int      workers;        /* live engine workers */
    uint64_t active, queued, held, served, failed;
    uint64_t max_requests, max_per_client; /* the front door's queue caps (0: not reported) */
    char     model[256];     /* the model file (or segment) the front door serves */
    char     segment[64];
    char     tmpl[32];       /* chat template name */
    int      has_kv;         /* the workers share a KV pool (engined --kv-pool): */
    uint64_t kv[PROTO_KV_COUNTS]; /* PM_KV's counts: blocks, used, cached, evictions, prompt tokens, ... */
} gwb_status;

/* Connects a DEALER to endpoint (nothing needs to listen yet) and starts the thread;
 * NULL with err on failure. A stream whose front door is silent for lost_ms after its
 * ACCEPTED, resumes included, fails with 503 (lc_stream.lost_ms). */
gwb *gwb_new(const char *endpoint, const gwb_ops *ops, int64_t lost_ms, char *err, size_t errcap);
/* A fresh request id. */
uint64_t gwb_new_id(gwb *b);
/* Hands job and its request g (copied; its strings must live until release(job)) to the
 * bridge, which sends its GENERATEs under request id id and then fresh ones; any thread.
 * When the front door cannot be reached the job gets on_fail(503) and release, as for
 * any other failure. */
void gwb_submit(gwb *b, void *job, uint64_t id, int chat, const lc_gen *g);
/* Cancels request id (the id given to gwb_submit) if still open (its HTTP client left); any thread. */
void gwb_cancel(gwb *b, uint64_t id);
/* Copies the last status (at_ms 0 when none came yet). */
void gwb_status_get(gwb *b, gwb_status *s);
/* The front door endpoint. */
const char *gwb_endpoint(const gwb *b);
/* Stops the thread; open jobs, and jobs submitted from now on, get
 * on_fail(503, "unavailable", ...) then release. gwb_cancel stays harmless. */
void gwb_stop(gwb *b);
/* Stops (if not yet) and frees; accepts NULL and nulls the pointer. */
void gwb_destroy(gwb **b);

#endif
