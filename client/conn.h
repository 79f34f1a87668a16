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

#include "proto.h"

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

/* The "pipeline not answering" hint. */
#define LC_START_HINT "start it with: bash deploy/pipeline.sh start --model FILE (or: make run)"

#endif
