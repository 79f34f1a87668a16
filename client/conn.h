/*
 * conn.h - llmc's connection to the front door (owner: pipeline): endpoint resolution
 * with a clear "not running" error, request/response over a DEALER socket, and JSON
 * output helpers shared by the generate, chat and status commands.
 *
 *   lc_conn c;
 *   char err[300];
 *   if (lc_open(&c, endpoint_flag, run_dir_flag, err, sizeof err) != 0) { fprintf(stderr, "error: %s\n", err); return 1; }
 *   proto_writer w; proto_begin(&w, PT_STATUS, 1); lc_send(&c, &w);
 *   proto_msg m; if (lc_recv(&c, 3000, &m) == 1) { ...; proto_msg_free(&m); }
 *   lc_close(&c);
 */
#ifndef LLM_CLIENT_CONN_H
#define LLM_CLIENT_CONN_H

#include <stdio.h>

#include "errcode.h"
#include "proto.h"
#include "sparams.h"

typedef struct {
    void *ctx, *sock;
    char  endpoint[300];
} lc_conn;

/* Resolves the endpoint (-e, else $LLM_FRONT, else ipc in the run dir) and connects.
 * -1 with err when the ipc socket does not exist (the pipeline is not running: the
 * message says how to start it) or the endpoint is bad. */
int lc_open(lc_conn *c, const char *endpoint, const char *run_dir, char *err, size_t errcap);
/* Sends and frees w; 0 or -1. */
int lc_send(lc_conn *c, proto_writer *w);
/* Waits up to timeout_ms for one valid message: 1 (m filled, caller frees), 0 on
 * timeout or interruption, -1 on a malformed message (err in m is not set). */
int lc_recv(lc_conn *c, int timeout_ms, proto_msg *m);
void lc_close(lc_conn *c);

/* Writes s[0..n) as a JSON string literal (quotes included). */
void lc_json_str(FILE *f, const char *s, size_t n);
/* Writes a msgpack object as JSON. */
void lc_json_obj(FILE *f, const msgpack_object *o);

#define LC_KEY_MAX 64 /* a session's key (the front door's is 32 hex digits) */

/* What resuming a request needs: its ACCEPTED (session, key, resolved seed) and the
 * bytes of text received so far. */
typedef struct {
    uint64_t sess;
    char     key[LC_KEY_MAX];
    uint32_t seed;      /* pinned, so that a stream regenerated from scratch is the same */
    int      have_seed;
    uint64_t rbytes;
} lc_resume;

/* What a GENERATE asks, as llmc and the gateway hold it. */
typedef struct {
    long               n_predict;
    const char        *prompt;          /* a raw completion; NULL for a chat */
    const char *const *msgs;            /* a chat: role, content pairs */
    int                n_msgs;
    uint64_t           cont;            /* a chat turn continuing session cont (0: none)... */
    const char        *key;             /* ...with its key */
    const char *const *pk, *const *pv;  /* sampler parameters, names and values as text */
    int                n_params;
    const char *const *stops;
    int                n_stops;
    const char        *grammar;         /* GBNF text constraining the output, or NULL */
    int                embed;           /* an embedding of prompt (PROTO_POOL_*), 0: none */
    const int32_t     *toks;            /* a prompt of token ids instead of text (n_toks) */
    int                n_toks;
    const char *const *tools;           /* a chat's tool objects, JSON text each (n_tools) */
    int                n_tools;
    const char *const *tcalls;          /* message index, id, name, arguments: 4 strings per
                                         * call or tool result (proto_fields.h) (n_tcalls) */
    int                n_tcalls;
} lc_gen;

/* Begins w as the GENERATE of g under request id id: a fresh one (rs NULL) or a resume
 * of session rs->sess that skips the rs->rbytes bytes received, its seed pinned. */
void lc_generate_msg(proto_writer *w, uint64_t id, const lc_gen *g, const lc_resume *rs);

/* Checks sampler parameter name = value (samplerd's name or its alias) before it goes
 * into a GENERATE, against and into chk (the parameters so far, from
 * smp_params_default(), so that checks across parameters see them all): ERR_NONE, or
 * ERR_INVALID with err saying why (an unknown name, a value samplerd would refuse). The
 * one check llmc's flags and the gateway's JSON keys go through; the gateway skips the
 * names smp_param_known does not know before asking (llama-server ignores them). */
errcode lc_param_check(smp_params *chk, const char *name, const char *value, char *err, size_t errlen);

/* The "pipeline not answering" hint. */
#define LC_START_HINT "start it with: bash deploy/pipeline.sh start --model FILE (or: make run)"

#endif
