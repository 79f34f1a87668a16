/*
 * stream.h - one request's stream from the front door, as a pure state machine (owner:
 * pipeline): the client half of the stream and resume protocol, driven by llmc's
 * synchronous loop (cmd_generate.c) and by the gateway's bridge thread (gw_bridge.c),
 * which multiplexes many of them over one socket. No sockets, no threads, no clock: the
 * caller hands it each reply and the time, and sends what it puts in its outbox.
 *
 *   lc_stream s;
 *   lc_stream_start(&s, &gen, id, net_now_ms(), new_id, cls);   // outbox: the GENERATE
 *   for (;;) {
 *       proto_writer w;
 *       while (lc_stream_pop(&s, &w)) send_and_free(&w);          // GENERATEs and PINGs
 *       lc_event ev = got_reply ? lc_stream_on_msg(&s, &m, now) : lc_stream_tick(&s, now);
 *       if (ev == LC_EV_PIECE) ...;                                // m's text
 *       if (lc_stream_over(&s)) break;                             // DONE, ERROR, TIMEOUT
 *   }
 *
 * The protocol (docs/ARCHITECTURE.md, "When the front door dies"): ACCEPTED gives the
 * session, its key and the resolved seed; every PIECE's text bytes are counted. When the
 * front door restarts mid-stream (a reply of code unknown_request, or LC_STREAM_RESUME_MS
 * of silence) the stream asks for a resume: the same GENERATE with resume, key, rbytes and
 * the seed pinned, under a fresh request id (replies to older ids are ignored). Before
 * ACCEPTED an unknown_request means the GENERATE reached a front door that died: it is
 * sent again as it was (at most LC_STREAM_RESENDS times). A chat turn whose session the
 * front door no longer holds (unknown_session) starts a new session with the messages.
 * A PING is due every LC_STREAM_PING_MS (the front door drops a silent client).
 *
 * Ownership: the caller owns the lc_stream (no destroy: it holds no allocation); the
 * lc_gen's strings are borrowed and must outlive it. A message popped into a writer is
 * the caller's to send and free.
 */
#ifndef LLM_CLIENT_STREAM_H
#define LLM_CLIENT_STREAM_H

#include <stdint.h>

#include "conn.h"
#include "errcode.h"
#include "proto.h"

/* The timeouts of a client's stream, for llmc and the gateway alike. */
#define LC_STREAM_PING_MS   1000  /* keep-alive while a request is open */
#define LC_STREAM_RESUME_MS 2000  /* silence after ACCEPTED that asks for a resume (and between two) */
#define LC_STREAM_ACCEPT_MS 10000 /* silence before ACCEPTED: the front door is gone */
#define LC_STREAM_LOST_MS   30000 /* silence after ACCEPTED, resumes included: the front door is gone
                                   * (the default of lc_stream.lost_ms) */
#define LC_STREAM_RESENDS   5     /* GENERATEs sent again before ACCEPTED, at most */
#define LC_STREAM_OUT_MAX   4     /* messages the outbox holds (a reply queues one, a tick two) */

/* What a reply or a tick means to the caller. */
typedef enum {
    LC_EV_NONE,        /* nothing (a PONG, an older id's reply, a repeated ACCEPTED, a resume) */
    LC_EV_ACCEPTED,    /* the request's first ACCEPTED (the message: ntok, pos) */
    LC_EV_PIECE,       /* the message: text (already counted), ntok, probs */
    LC_EV_DONE,        /* the message: reason, token counts; the stream is over */
    LC_EV_ERROR,       /* the front door failed the request (the message: msg, code); over */
    LC_EV_NEW_SESSION, /* the chat's session was gone: a new one is asked for (forget the old) */
    LC_EV_TIMEOUT,     /* from a tick: the front door said nothing for too long; over */
    LC_EV_EMBEDDING,   /* the message: an embedding request's vector (DONE follows) */
    LC_EV_COUNT
} lc_event;

/* Returns a fresh request id (the caller's id space). */
typedef uint64_t (*lc_stream_ids)(void *cls);

/* A message waiting in the outbox. */
typedef struct {
    proto_type type;   /* PT_GENERATE or PT_PING */
    uint64_t   id;
    int        resume; /* a GENERATE that resumes rs */
    lc_resume  rs;     /* (resume) as it was when queued */
} lc_stream_out;

/* One request. Invariants: accepted implies the session and key in rs are the front
 * door's; id is the request id of the latest GENERATE; once over, nothing more is queued. */
typedef struct {
    lc_gen        gen;       /* the request; gen.cont cleared when its chat session was gone */
    lc_resume     rs;        /* what a resume needs: ACCEPTED's session, key, seed; text bytes */
    uint64_t      id;        /* request id of the latest GENERATE */
    lc_stream_ids new_id;
    void         *ids_cls;
    int           accepted, over;
    int           resumes;   /* resume GENERATEs sent */
    int           resends;   /* GENERATEs sent again before ACCEPTED */
    errcode       code;      /* LC_EV_ERROR's code (ERR_NONE: none, or one this build does not know) */
    int64_t       start_ms, last_rx_ms, last_ping_ms, last_resume_ms;
    int64_t       lost_ms;   /* LC_STREAM_LOST_MS, unless the caller sets it after the start */
    lc_stream_out out[LC_STREAM_OUT_MAX]; /* (n_out) to send, oldest first */
    int           n_out;
} lc_stream;

/* Starts request g (copied; its strings borrowed) under request id id at time now_ms:
 * queues its GENERATE. new_id(cls) gives the ids of later GENERATEs. */
void lc_stream_start(lc_stream *s, const lc_gen *g, uint64_t id, int64_t now_ms, lc_stream_ids new_id, void *cls);
/* Takes a reply m (any id: only the latest GENERATE's count) received at now_ms, and
 * returns what it means to the caller; may queue a GENERATE. */
lc_event lc_stream_on_msg(lc_stream *s, const proto_msg *m, int64_t now_ms);
/* The clock's part at now_ms: LC_EV_TIMEOUT when the front door has been silent too
 * long (over); else may queue a resume GENERATE and then a PING; LC_EV_NONE. */
lc_event lc_stream_tick(lc_stream *s, int64_t now_ms);
/* Moves the oldest queued message into w (begun: the caller sends and frees it); 1, or
 * 0 when the outbox is empty. */
int lc_stream_pop(lc_stream *s, proto_writer *w);
/* Begins w as a CANCEL of the request: by its latest id, and by session and key once
 * accepted. */
void lc_stream_cancel(const lc_stream *s, proto_writer *w);
/* 1 after DONE, ERROR or TIMEOUT. */
int lc_stream_over(const lc_stream *s);
/* Milliseconds since the front door last said anything about the request. */
int64_t lc_stream_silence_ms(const lc_stream *s, int64_t now_ms);

#endif
