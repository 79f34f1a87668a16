/*
 * proto_fields.h - every field name of the wire protocol, with its kind: the one place
 * a key of a message (or of a row inside one) is spelled. Programs name fields by their
 * MF_* id (proto_u64(m, MF_SESS, 0)), so a misspelt field does not compile; proto.c
 * holds which message type requires or allows which field (proto_schema).
 *
 * X(ID, "wire name", kind): kind is the proto_kind (proto.h) that proto_decode checks
 * wherever the field appears, at the top level of a message or in a row of a batch.
 */
#ifndef LLM_PROTO_FIELDS_H
#define LLM_PROTO_FIELDS_H

#define PROTO_FIELDS(X)                                                                  \
    /* every message: version, type, request id (written by proto_begin) */             \
    X(V, "v", PK_U64)                                                                    \
    X(T, "t", PK_U64)                                                                    \
    X(ID, "id", PK_U64)                                                                  \
    /* a request and its session */                                                     \
    X(N, "n", PK_I64)                   /* tokens to generate (-1: until the end) */     \
    X(PROMPT, "prompt", PK_STR)                                                          \
    X(MSGS, "msgs", PK_STRS)            /* chat: role, text, role, text... */            \
    X(CHAT, "chat", PK_BOOL)                                                             \
    X(SESS, "sess", PK_U64)             /* session id */                                 \
    X(KEY, "key", PK_STR)               /* the session's secret handle */               \
    X(PARAMS, "params", PK_PARAMS)      /* sampler parameters as llama.cpp names them */ \
    X(STOP, "stop", PK_STRS)            /* stop strings */                               \
    X(IGNORE_EOS, "ignore_eos", PK_BOOL)                                                 \
    X(RESUME, "resume", PK_U64)         /* GENERATE: resume this session's stream... */  \
    X(RBYTES, "rbytes", PK_U64)         /* ...after this many bytes of text */           \
    X(SEED, "seed", PK_U64)             /* the seed the request runs with */             \
    X(POS, "pos", PK_U64)               /* place in the queue, 0 = dispatched */         \
    X(NTOK, "ntok", PK_U64)                                                              \
    X(NTOK_PROMPT, "ntok_prompt", PK_U64)                                                \
    X(TEXT, "text", PK_STR)                                                              \
    X(PROBS, "probs", PK_PROBS)                                                          \
    X(REASON, "reason", PK_STR)         /* DONE: length, stop, context, ... */           \
    X(MOVES, "moves", PK_U64)           /* DONE: times the session changed worker */     \
    X(MSG, "msg", PK_STR)               /* ERROR: what was wrong */                      \
    X(CODE, "code", PK_STR)             /* ERROR: errcode.h's name */                    \
    X(RETRY_MS, "retry_ms", PK_U64)                                                      \
    X(FULL, "full", PK_BOOL)            /* worker ERROR: it holds no more sessions */    \
    /* status */                                                                         \
    X(WORKERS, "workers", PK_ANY)                                                        \
    X(QUEUE, "queue", PK_ANY)                                                            \
    X(UPTIME, "uptime", PK_F64)                                                          \
    X(ACTIVE, "active", PK_U64)                                                          \
    X(QUEUED, "queued", PK_U64)                                                          \
    X(HELD, "held", PK_U64)                                                              \
    X(SERVED, "served", PK_U64)                                                          \
    X(FAILED, "failed", PK_U64)                                                          \
    X(MAX_REQUESTS, "max_requests", PK_U64)                                              \
    X(MAX_PER_CLIENT, "max_per_client", PK_U64)                                          \
    X(SEGMENT, "segment", PK_STR)                                                        \
    X(MODEL, "model", PK_STR)                                                            \
    X(TEMPLATE, "template", PK_STR)                                                      \
    X(SESSIONS, "sessions", PK_U64)     /* a worker row: sessions it reported */         \
    X(STALLED, "stalled", PK_BOOL)                                                       \
    X(UP, "up", PK_F64)                 /* a worker row: seconds since it registered */  \
    X(WAIT, "wait", PK_F64)             /* a queue row: seconds waited */                \
    /* workers */                                                                        \
    X(PID, "pid", PK_U64)                                                                \
    X(HOST, "host", PK_STR)                                                              \
    X(SEG, "seg", PK_STR)               /* a weight segment's shm name */                \
    X(WID, "wid", PK_U64)               /* worker instance id */                         \
    X(BUSY, "busy", PK_U64)                                                              \
    X(PROG, "prog", PK_U64)                                                              \
    X(CAP, "cap", PK_U64)                                                                \
    X(CTX, "ctx", PK_U64)                                                                \
    X(NV, "nv", PK_U64)                 /* vocabulary size */                            \
    X(VID, "vid", PK_U64)               /* gguf_vocab_id of the vocabulary */            \
    X(SWAIT, "swait", PK_U64)           /* ms the oldest sample request has waited */    \
    X(BPW, "bpw", PK_F64)               /* bits per weight of the segment */             \
    X(BYE, "bye", PK_BOOL)                                                               \
    X(EPOCH, "epoch", PK_U64)           /* the front door instance */                    \
    /* the session record (RUN, REPORT) and sampling */                                  \
    X(TOKS, "toks", PK_INTS)                                                             \
    X(STEP, "step", PK_U64)                                                              \
    X(BUDGET, "budget", PK_U64)                                                          \
    X(SP, "sp", PK_BIN)                 /* sampler parameters, wire form (sparams.h) */  \
    X(FB, "fb", PK_BIN)                 /* the front door's record, opaque to workers */ \
    X(EOG, "eog", PK_INTS)              /* end-of-generation tokens */                   \
    X(MU, "mu", PK_F64)                 /* mirostat's carried mu */                      \
    X(IDLE, "idle", PK_BOOL)                                                             \
    X(TOK, "tok", PK_I64)                                                                \
    X(LOGPROB, "logprob", PK_F64)                                                        \
    X(TOP, "top", PK_TOPS)                                                               \
    X(SHM, "shm", PK_STR)               /* the logits ring's shm name */                 \
    X(ROWS, "rows", PK_ANY)             /* checked per type: SAMPLE / SAMPLED rows */    \
    X(EOS, "eos", PK_I64)                                                                \
    X(SLOT, "slot", PK_U64)                                                              \
    X(HIST, "hist", PK_INTS)            /* recent tokens for the penalties */            \
    X(ERR, "err", PK_STR)                                                                \
    /* the front door's record inside fb (front_req.c)   */                              \
    X(NP, "np", PK_I64)                 /* prompt tokens */                              \
    X(IE, "ie", PK_BOOL)                /* ignore_eos */

typedef enum {
#define PROTO_FIELD_ENUM(id, name, kind) MF_##id,
    PROTO_FIELDS(PROTO_FIELD_ENUM)
#undef PROTO_FIELD_ENUM
    MF_COUNT
} proto_field_id;

#endif
