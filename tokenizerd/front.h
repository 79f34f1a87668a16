/*
 * front.h - tokenizerd's daemon mode, the front door (owner: pipeline). Private to
 * frontd.c (sockets, workers, the loop) and front_req.c (requests: admission,
 * tokens -> text, stop strings, re-dispatch).
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
#include "net.h"
#include "proto.h"
#include "tok.h"

#define FRONT_MAX_WORKERS 64
#define FRONT_MAX_STOPS   8
#define FRONT_CLIENT_TIMEOUT_MS 6000  /* a streaming client that stops pinging is gone */
#define FRONT_QUEUE_TIMEOUT_MS  30000 /* a request no worker could take fails */
#define FRONT_CHAT_IDLE_MS      600000 /* chat sessions kept on their worker between turns */

typedef struct {
    int      live;
    uint8_t  rid[NET_RID_MAX];
    size_t   rid_len;
    uint64_t wid;
    int      pid;
    char     host[64];
    char     seg[64];
    int      reported;   /* sessions the worker says it holds */
    int      cap;        /* its session capacity */
    int      assigned;   /* sessions we routed to it */
    int64_t  last_ms;    /* last message from it */
    int64_t  since_ms;   /* registration time */
} front_worker;

#define FRONT_MAX_PENDING_PROBS 1024 /* per-token log-prob entries held before they are sent anyway */

/* A packed log-prob entry waiting for its text to be sent: it goes with the piece after
 * which out_bytes >= end; off is where the entry ends in front_req.probs. */
typedef struct {
    uint64_t end;
    size_t   off;
} front_prob_ref;

typedef enum { RQ_QUEUED, RQ_RUNNING, RQ_HELD } rq_state; /* HELD: chat session between turns */

/* One request (or a held chat session). Invariant: state == RQ_RUNNING => worker
 * indexes a live worker and n_gen tokens at toks[n_prompt..] were accepted in order. */
typedef struct front_req {
    struct front_req *next;
    rq_state  state;
    uint64_t  sess;            /* front-assigned session id (RNG key, worker key) */
    uint64_t  client_id;       /* the client's request id (echoed in replies) */
    uint8_t   rid[NET_RID_MAX];
    size_t    rid_len;
    int       worker;          /* index into front.workers, -1 when none */
    uint64_t  worker_wid;
    int32_t  *toks;            /* (cap) prompt then generated tokens */
    int       n_toks, cap, n_prompt, n_gen;
    int       n_predict;       /* tokens to generate at most */
    uint8_t  *params;          /* packed msgpack map str -> str, seed resolved */
    size_t    params_len;
    bool      ignore_eos, chat, render_special;
    double    mu;
    bool      mu_set;
    char     *stops[FRONT_MAX_STOPS];
    int       n_stops;
    tok_stream *det;
    char     *held;            /* text withheld because it may begin a stop string */
    size_t    held_len, held_cap;
    msgpack_sbuffer probs;     /* packed PIECE "probs" entries not sent yet (params n_probs > 0) */
    front_prob_ref *pend;      /* (n_pend) one per entry in probs, oldest first */
    int       n_pend, cap_pend;
    uint64_t  in_bytes, out_bytes; /* text bytes of this generation detokenized / sent */
    int64_t   client_ms;       /* last message from the client */
    int64_t   queued_ms;
    int       moves;           /* times re-dispatched after a worker died */
    bool      gone;            /* the client's connection closed */
} front_req;

typedef struct {
    void        *ctx, *clients, *workers;
    tok_vocab   *vocab;
    chat_tmpl    tmpl;
    char         model[256];
    front_worker w[FRONT_MAX_WORKERS];
    front_req   *reqs;
    uint64_t     epoch, next_sess;
    int64_t      start_ms, last_hb_ms;
    int32_t      eog[16];
    int          n_eog;
    uint64_t     served, failed;
} front;

/* frontd.c */
void front_send(front *f, const uint8_t *rid, size_t rl, proto_writer *w); /* frees w */
void front_send_error(front *f, const uint8_t *rid, size_t rl, uint64_t id, const char *msg);
void front_send_worker(front *f, int wi, proto_writer *w);                 /* frees w */

/* front_req.c */
/* Admits a PT_GENERATE (validate, template, tokenize, queue); errors go to the client. */
void front_generate(front *f, const uint8_t *rid, size_t rl, const proto_msg *m);
/* A PT_TOKEN from worker wi. */
void front_token(front *f, int wi, const proto_msg *m);
/* A PT_ERROR about a session from worker wi. */
void front_worker_error(front *f, int wi, const proto_msg *m);
/* The client at rid cannot be reached any more: its requests expire on the next tick. */
void front_client_gone(front *f, const uint8_t *rid, size_t rl);
/* PT_CANCEL / PT_PING from a client. */
void front_client_msg(front *f, const uint8_t *rid, size_t rl, const proto_msg *m);
/* Dispatches queued requests, expires silent clients and idle chats, requeues the
 * requests of dead workers (call after purging). */
void front_tick(front *f, int64_t now);
/* Marks every request of worker wi for re-dispatch. */
void front_requeue_worker(front *f, int wi);
/* Requests streaming now, and queued. */
int front_count(const front *f, rq_state st);
void front_req_free_all(front *f);

#endif
