/*
 * front.h - tokenizerd's daemon mode, the front door (owner: pipeline). Private to the
 * front door's files, in layers: a file calls only functions of the files below it (or
 * its own), so the front door has no call cycle (`make check-layers` checks it on the
 * objects). Bottom to top:
 *
 *   front_out.c    the outbox: handlers append messages (to a client by routing id, to
 *                  a worker by index); they never touch a socket
 *   front_req.c    request records: tokens -> text, stop strings, the end, holding chats
 *                  between turns, the record a worker keeps (fb); PT_TOKEN, a worker's
 *                  PT_ERROR, a client's PING/CANCEL
 *   front_sched.c  the FIFO queue, dispatch to workers, dead and stalled workers
 *   front_adopt.c  surviving a restart: REPORTs adopted, resumes, parked resumes
 *   front_admit.c  GENERATE: validation, caps, template, tokenize, queue; re-admission
 *                  of parked resumes
 *   frontd.c       sockets, the worker registry, status, the message switch and the
 *                  event loop, which sends the outbox after each handler
 *
 * So the state machine runs without sockets: tests/check_front.c drives it and reads
 * the outbox (front_out_pop).
 *
 * The front door is the one place that holds each request's truth: prompt tokens,
 * sampler parameters (seed resolved once), every token generated so far, the carried
 * mirostat mu. Workers and samplerd can therefore die at any time: a request whose
 * worker stopped beating is sent again (PT_RUN with all its tokens and its step) to
 * another worker and continues at the same step.
 *
 * LLM_TRACE_TOKENS=1 logs every finished session's token ids (prompt + generated), to
 * compare runs token by token.
 */
#ifndef LLM_FRONT_H
#define LLM_FRONT_H

#include <stdbool.h>
#include <stdint.h>

#include "chat.h"
#include "errcode.h"
#include "net.h"
#include "proto.h"
#include "sparams.h"
#include "tok.h"

#define FRONT_MAX_WORKERS 64
#define FRONT_MAX_STOPS   8
#define FRONT_MAX_MSGS    256  /* chat messages of a GENERATE */
#define FRONT_MAX_TOOLS   128  /* tool definitions of a GENERATE */
#define FRONT_CLIENT_TIMEOUT_MS 6000  /* a streaming client that stops pinging is gone */
#define FRONT_HELD_SILENT_MS    20000 /* a chat held between turns whose client stopped
                                       * pinging this long is freed (llmc chat pings) */
#define FRONT_HELD_PROBE_MS     2500  /* a held chat's client silent this long is sent a
                                       * PONG of id 0 every FRONT_HELD_PROBE_EVERY_MS: a
                                       * closed connection fails the send and frees the
                                       * chat at once */
#define FRONT_HELD_PROBE_EVERY_MS 1000
#define FRONT_ADOPT_WINDOW_MS   10000 /* workers' REPORTs are adopted only this long after a
                                       * start: later ones are stopped */
#define FRONT_MAX_TOMBS         4096  /* ended sessions whose key is remembered ... */
#define FRONT_TOMB_MS           600000 /* ... this long, so their ids cannot be resumed by
                                        * someone else */
#define FRONT_KEY_HEX           32    /* a session's secret handle: 128 random bits in hex */
#define FRONT_ADOPT_GRACE_MS    1500  /* after a start, resumes of unknown sessions wait this
                                       * long for the workers' reports */
#define FRONT_ADOPT_WAIT_MS     20000 /* an adopted request waits this long for its client */
#define FRONT_MAX_PARKED        1024  /* resumes waiting for the grace period */

/* Admission and liveness limits (tokenizerd flags). */
typedef struct {
    int     max_requests;   /* --max-requests: running + queued in all (default 1024) */
    int     max_per_client; /* --max-per-client: running + queued per connection (default 64) */
    int64_t stall_ms;       /* --stall-timeout: a worker with busy sessions whose progress
                             * counter stands still this long is declared dead (default 30 s) */
    int     max_per_host;   /* --max-workers-per-host: registered workers of one origin (16) */
    int64_t worker_wait_ms; /* --worker-wait: while no engine worker is registered, queued
                             * requests wait this long for one, then fail (default 30 s) */
    int     max_held;       /* --max-held: chats held between turns in all (default 256) */
    int     max_held_per_client; /* --max-held-per-client: per connection (default 8); beyond
                             * either, the chat idle the longest is freed */
} front_limits;

typedef struct {
    int      live;
    uint8_t  rid[NET_RID_MAX];
    size_t   rid_len;
    uint64_t wid;
    int      pid;
    char     host[64];
    char     seg[64];
    int      reported;   /* sessions the worker says it holds */
    int      busy;       /* of those, with compute pending (its last beat) */
    int      cap;        /* its session capacity */
    int      ctx;        /* positions per session (0: not reported) */
    int      assigned;   /* sessions we routed to it */
    uint64_t prog;       /* its engine's progress counter (last beat) */
    int64_t  prog_ms;    /* when prog last moved, or work began */
    int      stalled;    /* declared dead for want of progress; back when prog moves */
    int64_t  last_ms;    /* last message from it */
    int64_t  since_ms;   /* registration time */
    int      swait;      /* ms its oldest sample request has waited for samplerd (last beat) */
    double   bpw;        /* bits per weight of its segment (0: an older worker did not say) */
    int      has_kv;     /* it reports a KV pool (engined --kv-pool): the kv counts below */
    uint64_t kv[PROTO_KV_COUNTS]; /* PM_KV's counts: blocks, used, cached, evictions, prompt tokens, ... */
    char     origin[64]; /* who it is for the per-host cap: its CURVE key, else its peer
                          * address (tcp), else the host it reports (ipc: same uid) */
    int      watch_pid;  /* connected over ipc: the connecting process (the kernel's word,
                          * not the worker's), looked at every 20 ms so that a kill -9 moves
                          * its sessions at once; 0 (tcp): its heartbeats alone tell */
    uint64_t watch_start;/* that process's start time (a reused pid is another process) */
} front_worker;

#define FRONT_REFUSED_LOG 32 /* refused worker ids remembered, so each is logged once a minute */

#define FRONT_MAX_PENDING_PROBS 1024 /* per-token log-prob entries held before they are sent anyway */

/* A packed log-prob entry waiting for its text to be sent: it goes with the piece after
 * which out_bytes >= end; off is where the entry ends in front_req.probs. */
typedef struct {
    uint64_t end;
    size_t   off;
} front_prob_ref;

typedef enum { RQ_QUEUED, RQ_RUNNING, RQ_HELD } rq_state; /* HELD: chat session between turns
                                                          * (on a worker, or evicted: worker -1) */

/* One request (or a held chat session). Invariant: state == RQ_RUNNING => worker
 * indexes a live worker and n_gen tokens at toks[n_prompt..] were accepted in order. */
typedef struct front_req {
    struct front_req *next;    /* the list is in admission order: the queue is FIFO */
    rq_state  state;
    uint64_t  sess;            /* front-assigned random session id (worker key) */
    char      key[FRONT_KEY_HEX + 1]; /* secret handle: continuing or cancelling by sess needs it */
    uint64_t  client_id;       /* the client's request id (echoed in replies) */
    uint8_t   rid[NET_RID_MAX];
    size_t    rid_len;
    int       worker;          /* index into front.workers, -1 when none */
    uint64_t  worker_wid;
    int32_t  *toks;            /* (cap) prompt then generated tokens */
    int       n_toks, cap, n_prompt, n_gen;
    int       n_predict;       /* tokens to generate at most */
    uint8_t   sp[SMP_WIRE_MAX]; /* sampler parameters, validated, seed resolved (wire form) */
    size_t    sp_len;
    bool      ignore_eos, chat, render_special;
    double    mu;
    bool      mu_set;
    char     *stops[FRONT_MAX_STOPS];
    int       n_stops;
    char     *grammar;         /* (grammar_len) GBNF text constraining the output, compiled
                                * at admission; NULL: none. Sent in every RUN */
    size_t    grammar_len;
    tok_stream *det;
    char     *held;            /* text withheld because it may begin a stop string */
    size_t    held_len, held_cap;
    msgpack_sbuffer probs;     /* packed PIECE "probs" entries not sent yet (params n_probs > 0) */
    front_prob_ref *pend;      /* (n_pend) one per entry in probs, oldest first */
    int       n_pend, cap_pend;
    uint64_t  in_bytes, out_bytes; /* text bytes of this generation detokenized / sent */
    int64_t   client_ms;       /* last message from the client */
    int64_t   probe_ms;        /* last probe of a held chat's silent client */
    int64_t   queued_ms;
    int       moves;           /* times re-dispatched after a worker died */
    bool      gone;            /* the client's connection closed */
    bool      attached;        /* a client streams it (false: adopted from a worker's report
                                * after a restart, until its client resumes) */
    uint64_t  skip;            /* text bytes the client already has (a resume): not sent again */
    uint32_t  seed;            /* the resolved seed (in ACCEPTED, for a resume from scratch) */
    int       embed;           /* an embedding request (PROTO_POOL_*): its worker answers
                                * PT_EMBEDDING instead of tokens; 0: a generation */
} front_req;

/* A resume that arrived before the workers' reports: handled when its session is
 * adopted or the grace period ends. */
typedef struct {
    proto_msg m;               /* owns its bytes */
    uint8_t   rid[NET_RID_MAX];
    size_t    rid_len;
} front_parked;

/* A message waiting in the outbox. */
typedef enum { FRONT_TO_CLIENT, FRONT_TO_WORKER } front_dest;
typedef struct {
    front_dest to;
    uint8_t    rid[NET_RID_MAX]; /* the client's, or the worker's when it was appended */
    size_t     rid_len;
    char      *data;             /* one encoded message (owned: whoever pops it frees it) */
    size_t     len;
} front_out;

typedef struct zap zap;

typedef struct {
    void        *ctx, *clients, *workers;
    zap         *zap;          /* CURVE allow-lists on tcp:// (zap.h); NULL when not used */
    front_limits lim;
    tok_vocab   *vocab;
    chat_tmpl    tmpl;
    const char  *tmpl_system;  /* the template's default system message (chat_tools.h), or NULL */
    char         model[256];
    front_worker w[FRONT_MAX_WORKERS];
    front_req   *reqs;
    uint64_t     epoch;
    int64_t      start_ms, last_hb_ms;
    int64_t      no_worker_ms; /* since when no worker is up (0: some is) */
    int64_t      pid_check_ms; /* when the local workers' processes were last looked at */
    front_parked *parked;      /* (FRONT_MAX_PARKED) */
    int          n_parked;
    int          fault_at;     /* test hook (frontd.c, fault_arm): die at this many tokens... */
    int          fault_kind;   /* ...0 at once, 1 with text held for a stop string, 2 with
                                * part of a character held back */
    bool         fault_exit;   /* the hook fired: the loop exits once the outbox is sent */
    front_out   *out;          /* (cap_out) the outbox: out[out_head..n_out) wait, oldest first */
    int          n_out, cap_out, out_head;
    int32_t      eog[PROTO_MAX_EOG];
    int          n_eog;
    uint64_t     served, failed;
    uint32_t     n_vocab;      /* the vocabulary's identity (gguf_vocab_id): a worker must */
    uint64_t     vocab_id;     /* report the same to be registered */
    struct { uint64_t wid; int64_t ms; } refused[FRONT_REFUSED_LOG];
    struct { uint64_t sess; char key[FRONT_KEY_HEX + 1]; int64_t ms; } tombs[FRONT_MAX_TOMBS];
    int          tomb_next;    /* the ring's oldest entry, overwritten next */
} front;

/* front_out.c: the outbox (the bottom layer). */
/* Appends w's message to the client at rid. Frees w. */
void front_send(front *f, const uint8_t *rid, size_t rl, proto_writer *w);
/* An ERROR with msg and code (ERR_NONE: none) to a client. */
void front_send_error(front *f, const uint8_t *rid, size_t rl, uint64_t id, errcode code, const char *msg);
/* Appends w's message to worker wi; -1 (nothing appended) when it is over PROTO_MAX_MSG.
 * Frees w. */
int front_send_worker(front *f, int wi, proto_writer *w);
/* A PT_STOP of session sess to worker wi, when wi is a live worker. */
void front_send_stop(front *f, int wi, uint64_t sess);
/* Takes the oldest message out of the outbox into *o (the caller frees o->data); 0 when
 * the outbox is empty. */
int front_out_pop(front *f, front_out *o);
/* Frees every message still in the outbox, and the outbox. */
void front_out_free_all(front *f);

/* front_req.c: request records. */
/* A PT_TOKEN from worker wi. */
void front_token(front *f, int wi, const proto_msg *m);
/* A PT_EMBEDDING from worker wi: the vector goes to the client, then DONE "embed". */
void front_embedding(front *f, int wi, const proto_msg *m);
/* A PT_ERROR about a session from worker wi. */
void front_worker_error(front *f, int wi, const proto_msg *m);
/* The client at rid cannot be reached any more: its requests expire on the next tick. */
void front_client_gone(front *f, const uint8_t *rid, size_t rl);
/* Re-sends r's text from its first generated token (tokens -> text, stop strings,
 * end conditions), skipping r->skip bytes the client already has; the request may
 * finish on the way (then it is freed or held). 1 when it finished. */
int front_replay(front *f, front_req *r);
/* 1 when m carries the session key of r (compared in constant time). */
int front_key_ok(const front_req *r, const proto_msg *m);
/* PT_CANCEL / PT_PING from a client: by its own request id, or by session id + key. */
void front_client_msg(front *f, const uint8_t *rid, size_t rl, const proto_msg *m);
/* Ends the current generation with reason (length, eog, stop, context): text, DONE,
 * then frees the request or holds a chat session. */
void front_finish(front *f, front_req *r, const char *reason);
/* Fails a request: ERROR with code and msg to its client, then frees it. */
void front_fail(front *f, front_req *r, errcode code, const char *msg);
/* Detaches r from its worker, telling the worker to drop the session when tell is set. */
void front_detach(front *f, front_req *r, int tell);
/* The request of a session id, or NULL. */
front_req *front_find_sess(front *f, uint64_t sess);
/* Appends r at the end of the list (admission order: the queue is FIFO). */
void front_req_append(front *f, front_req *r);
/* Unlinks and frees a request (detaching it first). */
void front_req_free(front *f, front_req *r);
/* Requests in state st. */
int front_count(const front *f, rq_state st);
/* Requests running or queued (*all) and chats held (*held), in all and of connection rid
 * (*mine, *mine_held); any pointer may be NULL. */
void front_load(const front *f, const uint8_t *rid, size_t rl, int *all, int *mine, int *held, int *mine_held);
/* Holds chat r between turns on its worker; frees the chats idle the longest beyond
 * --max-held-per-client (its connection's) and --max-held. */
void front_hold(front *f, front_req *r);
/* Frees r's worker slot for a queued request: the chat stays held, its next turn is
 * prefilled again wherever it runs. */
void front_evict(front *f, front_req *r);
/* 1 when an ended session sess is remembered with another key than m's "key": a resume
 * of it by someone else must be refused. */
int front_tomb_refuses(const front *f, uint64_t sess, const proto_msg *m, int64_t now);
void front_req_free_all(front *f);
/* Packs r's record for its worker to keep (PT_RUN "fb"): what only the front door knows. */
void front_fb_pack(const front_req *r, msgpack_packer *pk);
/* Reads a worker's copy of the record (a REPORT's "fb") into r, for a session of n_toks
 * tokens; -1 when it is not one of ours (stop strings read so far stay in r). */
int front_fb_unpack(front_req *r, const msgpack_object *fb, int n_toks);

/* front_sched.c: the queue and the workers. */
/* Dispatches queued requests in admission order, expires silent clients and idle chats.
 * While no worker is registered, queued requests wait (f->lim.worker_wait_ms at most);
 * a session that already generated until the context was full (its worker died or the
 * front door restarted just then) ends with reason "context", as it would have. */
void front_tick(front *f, int64_t now);
/* Sends r (QUEUED) to worker wi as a PT_RUN and marks it RUNNING there; fails r when the
 * message would be too large. */
void front_dispatch(front *f, front_req *r, int wi);
/* Marks every request of worker wi for re-dispatch (each keeps its place in the queue);
 * tell: also send the worker PT_STOP for each. */
void front_requeue_worker(front *f, int wi, int tell);
/* Declares workers dead whose beats stopped or whose progress stands still while they
 * have work (f->lim.stall_ms); their requests go back to the queue. */
void front_check_workers(front *f, int64_t now);
/* The front door was away for ms (its loop did not run: a stopped or overloaded
 * machine): every silence it measures (workers, clients, windows) is moved forward by
 * as much, so that its own absence never counts as its peers' silence. */
void front_pause_clocks(front *f, int64_t ms);
/* A worker's heartbeat counts (progress, busy sessions) arrived. */
void front_worker_beat(front *f, int wi, const pm_worker_hb *hb, int64_t now);
/* The largest context of a live worker, 0 when none is up. */
int front_ctx_max(const front *f);
/* Position (1-based) of a queued request in the queue, 0 when it is not queued. */
int front_queue_pos(const front *f, const front_req *r);
/* Sends the client the ACCEPTED of r (request id id): prompt tokens, session, key, seed
 * and its place in the queue. */
void front_send_accepted(front *f, const uint8_t *rid, size_t rl, uint64_t id, const front_req *r);

/* front_adopt.c: surviving a restart of the front door. */
/* A PT_REPORT from worker wi: adopts the session (unattached until its client resumes). */
void front_adopt(front *f, int wi, const proto_msg *m);
/* A GENERATE with "resume": re-attaches the client to its session (adopted or still
 * here) and replays its text past the bytes it has; returns 1 when handled, 0 when the
 * session is unknown (the caller admits the request anew under the same id and key, its
 * text skipped up to rbytes), -1 when it was parked or refused (answered). */
int front_resume(front *f, const uint8_t *rid, size_t rl, const proto_msg *m);
/* In the first FRONT_ADOPT_GRACE_MS after a start, keeps a copy of m (a resume or a
 * chat's next turn of a session not reported yet) to be admitted again later (see
 * front_unpark): -1 (parked, or refused with an error when too many are); 0 when the
 * grace is over. */
int front_park(front *f, const uint8_t *rid, size_t rl, const proto_msg *m);
/* Takes out of the parked messages, from index *i on, the next one whose session is
 * known now or whose grace period ended, into *out (the caller admits it again and
 * frees out->m); 0 when there is none left. Start with *i = 0. */
int front_unpark(front *f, int64_t now, int *i, front_parked *out);

/* front_admit.c: admission. */
/* Admits a PT_GENERATE (validate, caps, template, tokenize, queue); errors go to the
 * client. */
void front_generate(front *f, const uint8_t *rid, size_t rl, const proto_msg *m);
/* Admits again the parked resumes and chat turns whose session is known now or whose
 * grace period ended. */
void front_readmit(front *f, int64_t now);

#endif
