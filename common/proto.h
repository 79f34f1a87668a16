/*
 * proto.h - the one wire protocol of the pipeline: version, message types, fields.
 *
 *   proto_writer w;
 *   proto_begin(&w, PT_PING, req_id);
 *   proto_put_u64(&w, MF_SESS, 7);
 *   zmq_send(sock, proto_data(&w), proto_size(&w), 0);
 *   proto_writer_free(&w);
 *
 *   proto_msg m;
 *   char err[128];
 *   if (proto_decode(&m, bytes, len, err, sizeof err) != 0) log_warn("bad message: %s", err);
 *   else { uint64_t s = proto_u64(&m, MF_SESS, 0); ...; proto_msg_free(&m); }
 *
 * Every message is one msgpack map with string keys. Three keys are always present:
 * "v" (PROTO_VERSION), "t" (the proto_type as an integer) and "id" (the request id, an
 * unsigned integer chosen by whoever starts the exchange; replies echo it). Field names
 * and kinds are spelled once, in proto_fields.h; callers name a field by its MF_* id.
 * Which type requires and which allows each field is proto_msgs.h, which also gives
 * each message a typed struct (pm_token, read with pm_token_get, written with
 * pm_token_put; see "typed messages" below) and proto.c's schema: required
 * fields must be present with their kind, optional ones have their kind when present,
 * other keys are ignored (so a newer peer may add optional keys without a version
 * bump). proto_decode checks the whole table, so after it succeeds the getters of
 * required fields cannot fail; a writer that puts a field its type does not list stops
 * the program (LLM_ASSERT): the table is the protocol.
 *
 * Before msgpack-c sees the bytes, proto_decode walks them once without allocating and
 * rejects truncated data, nesting deeper than 8 and container counts larger than the
 * bytes left: a hostile header cannot make the unpacker allocate gigabytes.
 *
 * Ownership: proto_msg owns a copy of the bytes and its unpacked zone until
 * proto_msg_free (msgpack-c's strings point into the bytes it unpacked, so the copy lets
 * the caller free its receive buffer at once); strings and arrays returned by getters
 * point into the message. proto_writer owns its buffer until
 * proto_writer_free (proto_data stays valid until then).
 */
#ifndef LLM_PROTO_H
#define LLM_PROTO_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "proto_fields.h"
#include "proto_msgs.h"

#define PROTO_VERSION 6
#define PROTO_VERSION_STR "6"
#define PROTO_MAX_MSG (4u << 20) /* bytes; ZMQ_MAXMSGSIZE on every socket (net.c) */
#define PROTO_MAX_GRAMMAR (256u << 10) /* bytes of a GENERATE's grammar: it rides in RUN,
                                        * REPORT and every SAMPLE row of its session */

/* Message types. Direction in the comment: C=llmc, F=tokenizerd (front door),
 * W=engine worker, S=samplerd. Fields per type: see proto_schema in proto.c. */
typedef enum {
    PT_GENERATE,     /* C->F  start a completion or a chat turn */
    PT_CANCEL,       /* C->F  stop a request, free its session */
    PT_PING,         /* C->F  client keep-alive while streaming (front replies PT_PONG) */
    PT_STATUS,       /* C->F  ask for PT_STATUS_REPLY */
    PT_ACCEPTED,     /* F->C  request admitted: prompt token count */
    PT_PIECE,        /* F->C  a piece of generated text */
    PT_DONE,         /* F->C  request finished: why and counts */
    PT_ERROR,        /* any   the request failed: message */
    PT_STATUS_REPLY, /* F->C  workers, segment, uptime */
    PT_WORKER_HB,    /* W->F  register + heartbeat: pid, host, segment, active sessions */
    PT_FRONT_HB,     /* F->W  heartbeat: front door instance (epoch) */
    PT_RUN,          /* F->W  (re)start a session: tokens so far, step, budget, params */
    PT_STOP,         /* F->W  drop a session */
    PT_TOKEN,        /* W->F  one sampled token of a session at a step */
    PT_SAMPLE,       /* W->S  sample from logits in the worker's shm slot */
    PT_SAMPLED,      /* S->W  the token (and carried sampler state) */
    PT_PONG,         /* F->C  reply to PT_PING */
    PT_REPORT,       /* W->F  a session the worker holds, for a new front door to adopt */
    PT_EMBEDDING,    /* W->F, F->C  the pooled, normalized vector of an embedding request */
    PT_TYPE_COUNT
} proto_type;

/* Kinds of field values checked by proto_decode. */
typedef enum {
    PK_U64,   /* non-negative integer */
    PK_I64,   /* integer */
    PK_F64,   /* float or integer */
    PK_STR,   /* UTF-8 string (not checked for validity) */
    PK_BIN,   /* binary */
    PK_INTS,  /* array of integers that fit int32 */
    PK_STRS,  /* array of strings */
    PK_PARAMS,/* map string -> string (sampler parameters as llama.cpp names) */
    PK_BOOL,  /* boolean */
    PK_ANY,   /* anything (e.g. the worker list of a status reply) */
    PK_TOPS,  /* array of [id, logprob] pairs: int32, number (top log-probabilities) */
    PK_PROBS, /* array of maps {id int32, logprob number, top PK_TOPS, text string};
               * id and logprob required, top and text optional (PIECE "probs") */
    PK_SAMPLE_ROWS,  /* array of maps, one row of a SAMPLE batch: sess, step, slot U64,
                      * sp BIN, hist INTS required; mu F64, grammar STR, gst BIN,
                      * gtoks INTS optional */
    PK_SAMPLED_ROWS, /* array of maps, one answer of a SAMPLED batch: sess, step U64
                      * required; tok I64 or err STR; mu, logprob F64, top TOPS, gst BIN
                      * optional */
    PK_KIND_COUNT
} proto_kind;

/* A decoded message: the type, the request id and the root map. */
typedef struct {
    proto_type       type;
    uint64_t         id;
    msgpack_unpacked up;   /* owns every object below */
    char            *bytes; /* the copy the objects point into */
    size_t           len;   /* its size */
    const msgpack_object_map *map;
} proto_msg;

/* Decodes and validates bytes; 0 on success (free with proto_msg_free), -1 with a
 * message naming what was wrong in err (version, type, missing or mistyped field). */
int proto_decode(proto_msg *m, const void *data, size_t len, char *err, size_t errcap);
/* Frees a decoded message; accepts a zeroed or freed one. */
void proto_msg_free(proto_msg *m);
/* Moves a decoded message to dst (src is left empty). A proto_msg must never be copied
 * by assignment: its map points into the struct itself. */
void proto_msg_move(proto_msg *dst, proto_msg *src);
/* Whether messages of type t require or allow field f (proto_schema). */
int proto_type_has(proto_type t, proto_field_id f);
/* The name of a type for logs ("GENERATE"), "?" when out of range. */
const char *proto_type_name(int type);

/* A view of a nested map of m (a row of a batch, already validated by proto_decode) that
 * the getters below accept; it borrows m's memory: never proto_msg_free it. */
proto_msg proto_view(const proto_msg *m, const msgpack_object *map);

/* Field getters: the value of field f, or dflt when absent or of another kind. */
const msgpack_object *proto_field(const proto_msg *m, proto_field_id f);
uint64_t proto_u64(const proto_msg *m, proto_field_id f, uint64_t dflt);
int64_t proto_i64(const proto_msg *m, proto_field_id f, int64_t dflt);
double proto_f64(const proto_msg *m, proto_field_id f, double dflt);
int proto_bool(const proto_msg *m, proto_field_id f, int dflt);
/* A string field: pointer into the message (not NUL-terminated) and its length; NULL if absent. */
const char *proto_str(const proto_msg *m, proto_field_id f, size_t *len);
/* Copies a string field into out (NUL-terminated, truncated to cap-1); 0 if present, -1 if not. */
int proto_strcpy(const proto_msg *m, proto_field_id f, char *out, size_t cap);
/* Copies up to cap integers of an PK_INTS field into out; returns the array's full
 * length (which may exceed cap), or -1 when absent. */
long proto_ints(const proto_msg *m, proto_field_id f, int32_t *out, size_t cap);

/* An encoder for one message. */
typedef struct {
    msgpack_sbuffer buf;
    msgpack_packer  pk;
    proto_type      type;     /* of the message being written */
    uint32_t        n_keys;   /* keys written so far, patched into the map header */
    int             open;     /* a container put by proto_put_*_begin is being filled */
} proto_writer;

/* Starts a message of type with request id id (writes v, t, id). */
void proto_begin(proto_writer *w, proto_type type, uint64_t id);
void proto_put_u64(proto_writer *w, proto_field_id f, uint64_t v);
void proto_put_i64(proto_writer *w, proto_field_id f, int64_t v);
void proto_put_f64(proto_writer *w, proto_field_id f, double v);
void proto_put_bool(proto_writer *w, proto_field_id f, int v);
void proto_put_str(proto_writer *w, proto_field_id f, const char *s);
void proto_put_strn(proto_writer *w, proto_field_id f, const char *s, size_t n);
void proto_put_bin(proto_writer *w, proto_field_id f, const void *p, size_t n);
void proto_put_ints(proto_writer *w, proto_field_id f, const int32_t *v, size_t n);
/* Writes field f with a raw msgpack value copied from a decoded message (forwarding). */
void proto_put_obj(proto_writer *w, proto_field_id f, const msgpack_object *o);
/* Writes field f with n bytes that are already one msgpack value (e.g. a stored params map). */
void proto_put_raw(proto_writer *w, proto_field_id f, const void *packed, size_t n);
/* Starts a map or array value under field f; the caller then packs exactly n entries with
 * w->pk (msgpack_pack_*). */
void proto_put_map_begin(proto_writer *w, proto_field_id f, uint32_t n);
void proto_put_array_begin(proto_writer *w, proto_field_id f, uint32_t n);
/* The encoded bytes so far (valid until the next put or proto_writer_free). */
const void *proto_data(proto_writer *w);
size_t proto_size(const proto_writer *w);
void proto_writer_free(proto_writer *w);

/* ---- typed messages (the table: proto_msgs.h) ---- */

/* A string or binary field: a view into the message, not NUL-terminated. */
typedef struct {
    const char *p;
    size_t      n;
} proto_sv;
/* A view of a C string, for writing one. */
proto_sv proto_sv_of(const char *s);
/* Copies v into out as a C string (truncated to cap-1 bytes); returns out. */
char *proto_sv_copy(proto_sv v, char *out, size_t cap);
/* An array of int32 field: read, obj is the message's array (n its length; copy with
 * proto_ints_copy); to write, v and n (or obj). */
typedef struct {
    const int32_t        *v;
    uint32_t              n;
    const msgpack_object *obj;
} proto_iv;
/* Copies up to cap of the integers into out; returns n. */
uint32_t proto_ints_copy(const proto_iv *a, int32_t *out, size_t cap);

/* The C type of a field of each kind in the structs. */
#define PM_CTYPE_U64 uint64_t
#define PM_CTYPE_I64 int64_t
#define PM_CTYPE_F64 double
#define PM_CTYPE_BOOL int
#define PM_CTYPE_STR proto_sv
#define PM_CTYPE_BIN proto_sv
#define PM_CTYPE_INTS proto_iv
#define PM_CTYPE_STRS const msgpack_object * /* other arrays and maps: objects of the message */
#define PM_CTYPE_PARAMS const msgpack_object *
#define PM_CTYPE_ANY const msgpack_object *
#define PM_CTYPE_TOPS const msgpack_object *
#define PM_CTYPE_PROBS const msgpack_object *
#define PROTO_FIELD_CTYPE(id, nm, k) typedef PM_CTYPE_##k mf_ctype_##id;
PROTO_FIELDS(PROTO_FIELD_CTYPE)
#undef PROTO_FIELD_CTYPE

#define PM_MEMBER_R(id, m) mf_ctype_##id m;
#define PM_MEMBER_O(id, m) mf_ctype_##id m; int has_##m;
#define PM_MEMBER_K(id, m, k) mf_ctype_##id m;
/* pm_<type>: the request id and the fields. pm_<type>_get fills it from a message that
 * proto_decode accepted as that type (has_<member> says which optional fields were
 * there). pm_<type>_put writes its fields into w, begun with proto_begin as that type:
 * every required one (an array or map only when set: one left NULL is the caller's to
 * pack after), the optional ones whose has_<member> is set. */
#define PM_DECLARE(T, t)                                                                 \
    typedef struct {                                                                     \
        uint64_t id;                                                                     \
        PM_##T(PM_MEMBER_R, PM_MEMBER_O, PM_MEMBER_K)                                    \
    } pm_##t;                                                                            \
    void pm_##t##_get(const proto_msg *m, pm_##t *out);                                  \
    void pm_##t##_put(proto_writer *w, const pm_##t *in);
PROTO_MSGS(PM_DECLARE)
#undef PM_DECLARE
/* pm_<row>: a row of a batch. pm_<row>_get reads the map row of the decoded message m;
 * pm_<row>_pack packs one as a map of the fields set (as above) and n_more entries the
 * caller packs after it (proto_pack_key and the value: a field built from its own
 * arrays); 0, or nonzero when the buffer could not grow. */
#define PM_DECLARE_ROW(T, t)                                                             \
    typedef struct {                                                                     \
        PM_##T(PM_MEMBER_R, PM_MEMBER_O, PM_MEMBER_K)                                    \
    } pm_##t;                                                                            \
    void pm_##t##_get(const proto_msg *m, const msgpack_object *row, pm_##t *out);        \
    int pm_##t##_pack(msgpack_packer *pk, const pm_##t *in, uint32_t n_more);
PROTO_ROWS(PM_DECLARE_ROW)
#undef PM_DECLARE_ROW

/* A session as RUN hands it to a worker and REPORT hands it back to a (new) front door:
 * one record, one writer, one reader. Read from a message, the pointers point into it. */
#define PROTO_MAX_EOG 16 /* end-of-generation tokens a record carries at most */
typedef struct {
    uint64_t       sess, step, budget, epoch;
    const int32_t *toks;    /* writing: n_toks tokens (reading: use proto_ints on MF_TOKS) */
    uint32_t       n_toks;
    const uint8_t *sp;      /* the sampler parameters in wire form */
    size_t         sp_len;
    const uint8_t *fb;      /* the front door's own record of the request (opaque to workers) */
    size_t         fb_len;
    int32_t        eog[PROTO_MAX_EOG]; /* end-of-generation tokens (none: ignore_eos) */
    int            n_eog;
    double         mu;      /* mirostat's carried mu, when mu_set */
    int            mu_set;
    int            idle;    /* REPORT: the generation stopped on the worker */
    const char    *grammar; /* GBNF text constraining the output (grammar_len bytes), or NULL */
    size_t         grammar_len;
    int            embed;   /* an embedding (PROTO_POOL_*), 0: a generation */
} proto_sessrec;

/* GENERATE and RUN "embed": how an embedding request pools the final hidden states
 * (each normalized by the model's output norm); the vector is L2-normalized. */
enum { PROTO_POOL_NONE = 0, PROTO_POOL_MEAN = 1, PROTO_POOL_LAST = 2, PROTO_POOL_COUNT };

/* Writes the record's fields into w (begun as PT_RUN or PT_REPORT); the toks of the
 * record are written from s->toks. */
void proto_put_sessrec(proto_writer *w, const proto_sessrec *s);
/* Reads the record of a decoded RUN or REPORT (its required fields are checked by
 * proto_decode); s->toks stays NULL: copy them with proto_ints(m, MF_TOKS, ...), whose
 * count is s->n_toks. */
void proto_get_sessrec(const proto_msg *m, proto_sessrec *s);

/* Packs a string value (for use inside proto_put_map_begin/array_begin). */
void proto_pack_str(msgpack_packer *pk, const char *s);
/* Packs the name of field f as the key of a nested map's entry (a row of a batch);
 * msgpack's result: 0, or nonzero when the buffer could not grow. */
int proto_pack_key(msgpack_packer *pk, proto_field_id f);
/* The wire name of a field ("sess"). */
const char *proto_field_name(proto_field_id f);

/* Checks that data is exactly one well-formed msgpack value with nesting <= max_depth
 * and plausible container counts, without allocating; 0 if so, -1 otherwise. */
int proto_wellformed(const void *data, size_t len, int max_depth);

#endif
