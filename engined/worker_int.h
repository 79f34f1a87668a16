/*
 * worker_int.h - the engine worker's state, shared by its two files (owner: pipeline):
 * worker.c (messages, the step, the loop) and worker_kv.c (the KV pool's scheduling:
 * admission by free blocks, chunked prefill by blocks, preemption and waits).
 * Nothing outside engined/worker*.c includes it.
 */
#ifndef LLM_ENGD_WORKER_INT_H
#define LLM_ENGD_WORKER_INT_H

#include <stdint.h>

#include "engine.h"
#include "errcode.h"
#include "kvsetup.h"
#include "logits_shm.h"
#include "proto.h"
#include "sparams.h"
#include "worker.h"
#include "worker_io.h"

#define SAMPLE_RETRY_MS 400
#define SAMPLE_WAIT_MS  20     /* a step waits this long for the last step's tokens */
#define HIST_MAX 4096          /* history tokens sent to samplerd at most (penalties, DRY) */
#define PREFILL_MIN 32         /* prefill tokens a step takes however many sessions decode */
#define SAMPLE_BATCH_BYTES (PROTO_MAX_MSG / 2) /* a PT_SAMPLE is split beyond this */

/* FREE: slot unused; READY: tokens [pos, n_toks) wait to be evaluated; WAIT: the logits
 * of the last token are in the ring slot, a sample request is out; IDLE: budget spent,
 * end of generation or an error (the front door decides what comes next). */
typedef enum { WS_FREE, WS_READY, WS_WAIT, WS_IDLE } ws_state;

/* Invariants: state != WS_FREE => es != NULL and n_toks >= 1; READY => pos < n_toks;
 * WAIT => pos == n_toks and the slot holds the logits of the token at step. */
typedef struct {
    ws_state     state;
    uint64_t     sess, epoch;
    uint64_t     seq;      /* arrival order of its last RUN: prefill is first come, first served */
    eng_session *es;
    int32_t     *toks;     /* (cap_toks) every token of the session */
    int          n_toks, cap_toks;
    uint32_t     step;     /* index of the next token to sample */
    uint64_t     budget;   /* tokens still to generate */
    uint8_t      sp[SMP_WIRE_MAX]; /* sampler parameters, wire form (parsed once at the front) */
    size_t       sp_len;
    uint8_t     *fb;       /* the front door's record of the request (opaque; echoed in REPORT) */
    size_t       fb_len;
    double       mu;
    int          mu_set;
    char        *grammar;  /* (grammar_len) GBNF text constraining the output, or NULL */
    size_t       grammar_len;
    uint8_t     *gst;      /* (gst_len) the grammar matcher's state after the tokens so far
                            * (samplerd's last answer); gst_len 0: none, samplerd replays */
    size_t       gst_len;
    uint64_t     ghash;    /* gram_text_hash of grammar: rows carry it; the text goes... */
    int64_t      gtext_step; /* ...only in the row of this step (-1: not yet sent; samplerd
                            * caches it by hash and asks again with grammar_unknown) */
    int32_t      eog[PROTO_MAX_EOG];
    int          n_eog;
    int          n_hist;   /* history tokens samplerd needs (penalties, DRY) */
    uint64_t     req;      /* id of the sample batch this session's row went in */
    int64_t      sent_ms;
    int64_t      wait_since; /* when its current step's row was first sent to samplerd */
    int          embed;    /* an embedding session (its pooling, ENG_POOL_*): prefill only,
                            * then PT_EMBEDDING and the session is dropped; 0: generation */
    double      *eacc;     /* (n_embd) its hidden states pooled so far */
    int          kv_wait;  /* preempted for KV blocks: waits while others run */
    int64_t      kv_wait_ms; /* since when it waits for blocks other workers hold (0: not) */
} wsess;

typedef struct {
    const engd_opts *o;
    eng_model  *m;
    int         n_vocab, eos, n_ctx, batch_tokens, idle_tokens;
    lshm       *ring;
    wsess      *s;         /* (max_sessions) one per ring slot */
    int         n_s;
    void       *ctx, *pipe, *samp;
    wio         io;
    uint64_t    next_req, next_seq, epoch, steps;
    int64_t     last_front_ms;
    float      *logits;    /* (max_sessions, n_vocab) rows of one step */
    int        *order;     /* (max_sessions) prefill sessions of a step, by arrival */
    wsess     **lrow;      /* (max_sessions) sessions whose logits a step computes */
    eng_item   *items;     /* (max(batch_tokens, idle_tokens) + PREFILL_MIN + max_sessions) */
    int         registered;
    long        stall_step; /* fault injection for tests: LLM_FAULT_STALL_STEP */
    long        step_delay_ms; /* test hook: LLM_FAULT_STEP_DELAY_MS slows every step */
    int64_t     step_due_ms;   /* the hook's schedule: when the next step may start */
    int64_t     sampler_timeout_ms; /* a sample row unanswered this long fails its session
                                     * (LLM_SAMPLER_TIMEOUT_MS, default 20 s) */
    int64_t     retry_log_ms;
    int         n_items_cap; /* items' capacity */
    float      *hidden;    /* (n_items_cap, n_embd) a step's hidden rows, and */
    wsess     **hrow;      /* (n_items_cap) their sessions; made by the first embedding */
    kvp        *pools[ENG_KV_KINDS]; /* the master's KV block pools (--kv-pool), or NULL */
    int         kv_on;     /* a pool is there: sessions hold block tables */
    int         kv_step;   /* the most positions a step adds to a session (engd_chunk_max) */
    uint64_t    kv_prompt; /* prompt tokens of the runs this worker started (pool on) */
    uint64_t    kv_reused; /* of them, positions not computed again (held or from the pool) */
    int64_t     kv_retry_ms; /* sessions waiting for other workers' blocks retry from then */
    uint64_t    kv_preempt;/* sessions preempted (or held chats reset) for KV blocks */
    int64_t     kv_ms;     /* when the pool's counts were last published */
    int         kv_blocked[ENG_KV_KINDS]; /* blocks the last run refused for room asked
                            * for (0: none): no more sessions are offered until the pools have them */
    uint64_t    kv_deferred; /* runs sent back to the queue for KV room */
} worker;

/* A PT_ERROR about session sess (worker.c): code (ERR_NONE: none) tells the front door
 * what to do, full that its context is full. */
void wrk_sess_error_code(worker *w, uint64_t sess, uint64_t epoch, const char *msg, errcode code, int full);
/* Frees slot s (its KV blocks go back; published ones stay cached). */
void wrk_sess_drop(wsess *s);

#endif
