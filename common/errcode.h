/*
 * errcode.h - the error codes of the pipeline, in one table: the "code" of a PT_ERROR
 * on the wire (front door -> clients, worker -> front door) and of the HTTP gateway's
 * OpenAI-shaped errors, with the HTTP status the gateway answers with. Decisions are
 * taken on codes, never on the text of a message.
 *
 *   front_send_error(f, rid, rl, id, ERR_FULL, "the front door is full ...");
 *   if (errcode_from_name(code) == ERR_UNKNOWN_REQUEST) ...   // a client reading one
 */
#ifndef LLM_ERRCODE_H
#define LLM_ERRCODE_H

#include <stddef.h>

/* X(id, name on the wire, HTTP status; 0: none of its own, the gateway decides) */
#define ERRCODES(X)                                                                         \
    X(ERR_INVALID, "invalid_request", 400)          /* the request itself is wrong */       \
    X(ERR_CONTEXT, "context_length_exceeded", 400)  /* longer than any worker's context */  \
    X(ERR_FULL, "queue_full", 429)                  /* --max-requests / --max-per-client */ \
    X(ERR_UNAVAILABLE, "unavailable", 503)          /* no worker, or samplerd down */      \
    X(ERR_INTERNAL, "internal", 500)                /* out of memory, a peer's fault */     \
    X(ERR_UNKNOWN_REQUEST, "unknown_request", 0)    /* PING/CANCEL of a request not held */ \
    X(ERR_UNKNOWN_SESSION, "unknown_session", 0)    /* a session not held, or not yours */  \
    X(ERR_WORKER_FULL, "worker_full", 0)            /* worker -> front door: no free slot */ \
    X(ERR_INVALID_API_KEY, "invalid_api_key", 401)  /* the gateway's API keys */        \
    X(ERR_GRAMMAR_UNKNOWN, "grammar_unknown", 0)    /* samplerd -> worker: send the text */

typedef enum {
    ERR_NONE = 0, /* no code (a message without one, or one this build does not know) */
#define ERRCODE_ENUM(id, name, status) id,
    ERRCODES(ERRCODE_ENUM)
#undef ERRCODE_ENUM
    ERR_COUNT
} errcode;

/* The wire name of c ("queue_full"); NULL for ERR_NONE or out of range. */
const char *errcode_name(errcode c);
/* The code of a wire name; ERR_NONE when name is NULL or unknown. */
errcode errcode_from_name(const char *name);
/* The HTTP status the gateway answers c with; 0 when c has none of its own. */
int errcode_http_status(errcode c);

/* The one way a function reports what went wrong to its caller's (err, errlen) buffer:
 * formats into err (when err is not NULL and errlen > 0, truncating) and returns -1, so
 *   if (fd < 0) return errf(err, errlen, "%s: open: %s", path, strerror(errno));  */
int errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
