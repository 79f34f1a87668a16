/*
 * proto_fields.h - every field name of the wire protocol, with its kind: the one place
 * a key of a message (or of a row inside one) is spelled. Programs name fields by their
 * MF_* id (proto_u64(m, MF_SESS, 0)), so a misspelt field does not compile; proto.c
 * holds which message type requires or allows which field (proto_schema).
 *
 * X(ID, "wire name", KIND): PK_KIND (proto.h) is what proto_decode checks wherever the
 * field appears (a message type may check more: proto_msgs.h's K), and the C type of the
 * field in the typed message structs (PM_CTYPE_KIND, proto.h).
 */
#ifndef LLM_PROTO_FIELDS_H
#define LLM_PROTO_FIELDS_H

#define PROTO_FIELDS(X)                                                                  \
    /* every message: version, type, request id (written by proto_begin) */             \
    X(V, "v", U64)                                                                      \
    X(T, "t", U64)                                                                      \
    X(ID, "id", U64)                                                                    \
    /* a request and its session */                                                     \
    X(N, "n", I64)                   /* tokens to generate (-1: until the end) */       \
    X(PROMPT, "prompt", STR)                                                            \
    X(MSGS, "msgs", STRS)            /* chat: role, text, role, text... */              \
    X(CHAT, "chat", BOOL)                                                               \
    X(SESS, "sess", U64)             /* session id */                                   \
    X(KEY, "key", STR)               /* the session's secret handle */                  \
    X(PARAMS, "params", PARAMS)      /* sampler parameters as llama.cpp names them */   \
    X(STOP, "stop", STRS)            /* stop strings */                                 \
    X(IGNORE_EOS, "ignore_eos", BOOL)                                                   \
    X(RESUME, "resume", U64)         /* GENERATE: resume this session's stream... */    \
    X(RBYTES, "rbytes", U64)         /* ...after this many bytes of text */             \
    X(SEED, "seed", U64)             /* the seed the request runs with */               \
    X(POS, "pos", U64)               /* place in the queue, 0 = dispatched */           \
    X(NTOK, "ntok", U64)                                                                \
    X(NTOK_PROMPT, "ntok_prompt", U64)                                                  \
    X(TEXT, "text", STR)                                                                \
    X(PROBS, "probs", PROBS)                                                            \
    X(REASON, "reason", STR)         /* DONE: length, stop, context, ... */             \
    X(MOVES, "moves", U64)           /* DONE: times the session changed worker */       \
    X(MSG, "msg", STR)               /* ERROR: what was wrong */                        \
    X(CODE, "code", STR)             /* ERROR: errcode.h's name */                      \
    X(RETRY_MS, "retry_ms", U64)                                                        \
    X(FULL, "full", BOOL)            /* worker ERROR: it holds no more sessions */      \
    /* status */                                                                        \
    X(WORKERS, "workers", ANY)                                                          \
    X(QUEUE, "queue", ANY)                                                              \
    X(UPTIME, "uptime", F64)                                                            \
    X(ACTIVE, "active", U64)                                                            \
    X(QUEUED, "queued", U64)                                                            \
    X(HELD, "held", U64)                                                                \
    X(SERVED, "served", U64)                                                            \
    X(FAILED, "failed", U64)                                                            \
    X(MAX_REQUESTS, "max_requests", U64)                                                \
    X(MAX_PER_CLIENT, "max_per_client", U64)                                            \
    X(SEGMENT, "segment", STR)                                                          \
    X(MODEL, "model", STR)                                                              \
    X(TEMPLATE, "template", STR)                                                        \
    X(SESSIONS, "sessions", U64)     /* a worker row: sessions it reported */           \
    X(STALLED, "stalled", BOOL)                                                         \
    X(UP, "up", F64)                 /* a worker row: seconds since it registered */    \
    X(WAIT, "wait", F64)             /* a queue row: seconds waited */                  \
    /* workers */                                                                       \
    X(PID, "pid", U64)                                                                  \
    X(HOST, "host", STR)                                                                \
    X(SEG, "seg", STR)               /* a weight segment's shm name */                  \
    X(WID, "wid", U64)               /* worker instance id */                           \
    X(BUSY, "busy", U64)                                                                \
    X(PROG, "prog", U64)                                                                \
    X(CAP, "cap", U64)                                                                  \
    X(CTX, "ctx", U64)                                                                  \
    X(NV, "nv", U64)                 /* vocabulary size */                              \
    X(VID, "vid", U64)               /* gguf_vocab_id of the vocabulary */              \
    X(SWAIT, "swait", U64)           /* ms the oldest sample request has waited */      \
    X(BPW, "bpw", F64)               /* bits per weight of the segment */               \
    X(BYE, "bye", BOOL)                                                                 \
    X(EPOCH, "epoch", U64)           /* the front door instance */                      \
    /* the session record (RUN, REPORT) and sampling */                                 \
    X(TOKS, "toks", INTS)                                                               \
    X(STEP, "step", U64)                                                                \
    X(BUDGET, "budget", U64)                                                            \
    X(SP, "sp", BIN)                 /* sampler parameters, wire form (sparams.h) */    \
    X(FB, "fb", BIN)                 /* the front door's record, opaque to workers */   \
    X(EOG, "eog", INTS)              /* end-of-generation tokens */                     \
    X(MU, "mu", F64)                 /* mirostat's carried mu */                        \
    X(IDLE, "idle", BOOL)                                                               \
    X(TOK, "tok", I64)                                                                  \
    X(LOGPROB, "logprob", F64)                                                          \
    X(TOP, "top", TOPS)                                                                 \
    X(SHM, "shm", STR)               /* the logits ring's shm name */                   \
    X(ROWS, "rows", ANY)             /* checked per type: SAMPLE / SAMPLED rows */      \
    X(EOS, "eos", I64)                                                                  \
    X(SLOT, "slot", U64)                                                                \
    X(HIST, "hist", INTS)            /* recent tokens for the penalties */              \
    X(ERR, "err", STR)                                                                  \
    /* structured output (grammar/gram.h) */                                            \
    X(GRAMMAR, "grammar", STR)       /* GBNF text constraining the generated text */    \
    X(GST, "gst", BIN)               /* the grammar matcher's state (gram.h wire form) */ \
    X(GTOKS, "gtoks", INTS)          /* tokens generated so far: rebuild the state */   \
    X(GHASH, "ghash", U64)           /* gram_text_hash of the grammar (text sent once) */ \
    X(END, "end", STR)               /* the generation ends here: DONE's reason */      \
    /* the front door's record inside fb (front_req.c)   */                             \
    X(NP, "np", I64)                 /* prompt tokens */                                \
    X(IE, "ie", BOOL)                /* ignore_eos */                                   \
    /* embeddings */                                                                    \
    X(EMBED, "embed", U64)           /* GENERATE, RUN: an embedding, pooled so (proto.h) */ \
    X(VEC, "vec", BIN)               /* EMBEDDING: the vector, little-endian f32 */     \
    /* tools (function calling, tokenizerd/chat.h) */                                   \
    X(TOOLS, "tools", STRS)          /* OpenAI tool objects, one JSON text each */      \
    X(TCALLS, "tcalls", STRS)        /* message index, id, name, arguments: 4 each */ \
    /* the shared KV block pool (engined --kv-pool): pool-wide counts, per-worker tallies */ \
    X(KVB, "kvb", U64)               /* blocks in the main pool (16 positions each) */  \
    X(KVU, "kvu", U64)               /* blocks in use: referenced or being written */   \
    X(KVC, "kvc", U64)               /* published blocks no one references (evictable) */ \
    X(KVEV, "kvev", U64)             /* cached blocks evicted for new ones (both pools) */ \
    X(KVRB, "kvrb", U64)             /* the ring pool's (sliding-window layers) blocks, */ \
    X(KVRU, "kvru", U64)             /* ...in use */                                     \
    X(KVRC, "kvrc", U64)             /* ...cached */                                     \
    X(KVPT, "kvpt", U64)             /* prompt tokens of runs started */                \
    X(KVRT, "kvrt", U64)             /* of them, reused (held or from the pool) */      \
    X(KVPRE, "kvpre", U64)           /* sessions preempted for blocks */                \
    X(KVDEF, "kvdef", U64)           /* runs sent back to the queue for KV room */

typedef enum {
#define PROTO_FIELD_ENUM(id, name, kind) MF_##id,
    PROTO_FIELDS(PROTO_FIELD_ENUM)
#undef PROTO_FIELD_ENUM
    MF_COUNT
} proto_field_id;

#endif
