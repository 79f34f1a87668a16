/*
 * gw_job.h - one generation request inside the gateway (owner: gateway): the parsed
 * OpenAI request, the front door's replies turned into the HTTP answer, and the
 * hand-over between the ZeroMQ bridge thread (which feeds it) and the libmicrohttpd
 * thread that serves its connection (which drains it).
 *
 *   gwj *j = gwj_new(&req, GWM_EP_CHAT, id, "tinyllama", text_fn, cls, &metrics);   // takes req
 *   gwj_attach(j, connection);
 *   lc_gen g; gwj_gen(j, &g);
 *   gwj_submit(j, bridge);              // a session per choice; the bridge gets gwj_ops
 *   if (gwj_wait(j)) return MHD_YES;   // suspended until the answer is decided
 *   ... gwj_phase(j) == GWJ_STREAM: MHD_create_response_from_callback(.., gwj_read, j, gwj_read_free)
 *   gwj_unref(j);
 *
 * Event model: the connection is suspended while it has nothing to send (before the
 * answer's status is known, and between pieces of a stream); the bridge thread
 * appends to the job under its mutex and resumes the connection. A stream's headers
 * (200) go out with its first piece, so an error before any token still gets its own
 * status (400, 429, 503, ...). A slow HTTP client only grows its own job's buffer.
 *
 * Ownership: reference counted (gwj_ref / gwj_unref, any thread): the HTTP request,
 * the bridge and a streaming response each hold one.
 */
#ifndef LLM_GW_JOB_H
#define LLM_GW_JOB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gw_bridge.h"
#include "gw_metrics.h"
#include "oai.h"
#include "oai_embed.h"

struct MHD_Connection;

typedef enum { GWJ_WAIT, GWJ_STREAM, GWJ_DONE } gwj_phase; /* nothing decided / 200 stream / whole answer */

struct gwj;

/* One choice of a request (n > 1 gives several): a session of its own on the front
 * door, under its own wire id; the bridge's handle for it. */
typedef struct {
    struct gwj *j;
    int         idx;
    uint64_t    id;        /* its request id on the wire (choice 0: the job's) */
    oai_out     out;
    uint64_t    n_seen;    /* tokens seen in PIECEs */
    uint64_t    n_prompt, n_gen;
    bool        done;
    char        reason[32];
    const char *pv[OAI_MAX_PARAMS]; /* the job's parameter values, with this choice's seed */
    char        seed[24];
    float      *vec;       /* an embedding request's vector (dim floats), once it came */
    int         dim;
} gwj_choice;

typedef struct gwj {
    pthread_mutex_t mu;        /* guards everything below but refs */
    int            refs;       /* atomic */
    uint64_t       id;         /* request id on the wire */
    gwm_ep         ep;
    oai_req        req;
    gwm           *metrics;
    struct MHD_Connection *conn; /* NULL once the HTTP request completed */
    int            fd;         /* the connection's socket, to notice a client leaving while suspended */
    bool           suspended;
    gwj_phase      phase;
    bool           accepted, finished, cancelled;
    int            status;     /* GWJ_DONE: HTTP status and body */
    char          *body;
    size_t         body_len;
    unsigned       retry_after; /* seconds, 429 only */
    char          *sse;        /* GWJ_STREAM: bytes not yet sent, from sse_pos */
    size_t         sse_len, sse_cap, sse_pos;
    int64_t        t0_us, t_last_us;
    bool           got_first;
    int            n_ch, n_done; /* choices, and those that ended */
    gwj_choice    *ch;         /* (n_ch) */
    oai_emb_req   *emb;        /* an embeddings request (one choice per input), or NULL */
    char           model[128]; /* embeddings: the model id answered */
} gwj;

/* A job for req (taken: the caller's copy is zeroed), one reference held by the caller. */
gwj *gwj_new(oai_req *req, gwm_ep ep, uint64_t id, const char *model, oai_text_fn text_fn, void *text_cls,
             gwm *metrics, int64_t t0_us);
/* A job for an embeddings request (er taken): one front door request per input. */
gwj *gwj_new_embed(oai_emb_req *er, uint64_t id, const char *model, gwm *metrics, int64_t t0_us);
void gwj_ref(gwj *j);
/* Drops a reference; the last one frees the job. Accepts NULL. */
void gwj_unref(gwj *j);
/* The connection that serves the job (and its socket). */
void gwj_attach(gwj *j, struct MHD_Connection *c);
/* The request of choice 0 as lc_gen (its strings are the job's). */
void gwj_gen(const gwj *j, lc_gen *g);
/* Choice i's: the same but its seed (seed + i when the request gave one). */
void gwj_gen_choice(const gwj *j, int i, lc_gen *g);
/* The GENERATE for the front door under wire id id; with rs, a resume of that session
 * (resume, key, rbytes, and the resolved seed pinned last among the parameters). */
void gwj_generate(const gwj *j, uint64_t id, const lc_resume *rs, proto_writer *w);
/* Hands every choice to the bridge (choice i > 0 gets a fresh wire id from b); takes a
 * reference per choice. */
void gwj_submit(gwj *j, gwb *b);
/* Cancels the choices still open on the bridge (the HTTP client left). */
void gwj_cancel(gwj *j, gwb *b);
/* From the access handler: suspends the connection and returns 1 while the answer is
 * undecided; 0 when it can be queued now (phase GWJ_STREAM or GWJ_DONE). */
int gwj_wait(gwj *j);
/* The HTTP request is over (MHD's completion callback): 1 if the job was still open
 * (the caller cancels it on the front door). Forgets the connection. */
int gwj_detach(gwj *j);

/* libmicrohttpd content reader and its free callback for a streaming answer (the
 * response holds one reference, taken by the caller). */
ssize_t gwj_read(void *cls, uint64_t pos, char *buf, size_t max);
void gwj_read_free(void *cls);

/* The bridge callbacks for jobs. */
extern const gwb_ops gwj_ops;

int64_t gwj_now_us(void);

#endif
