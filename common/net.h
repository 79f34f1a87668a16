/*
 * net.h - ZeroMQ helpers shared by the daemons and llmc: the run directory, endpoint
 * names, socket options (maximum message size, linger, CURVE), message send/receive
 * with a routing frame, and a millisecond clock for heartbeats.
 *
 *   char dir[256], ep[300], err[200];
 *   if (net_run_dir(flag_run_dir, dir, sizeof dir, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 1; }
 *   net_endpoint(dir, NET_EP_FRONT, ep, sizeof ep);     // "ipc:///proc/self/fd/3/front.sock"
 *   void *s = net_socket(ctx, ZMQ_ROUTER);
 *   net_bind(s, ep);                                    // front.sock, mode 0600
 *
 * Run directory: --run-dir, else $LLM_RUN_DIR, else $XDG_RUNTIME_DIR/llm, else
 * /tmp/llm-$UID; created with mode 0700 and refused if it is a symbolic link, if another
 * user owns it or if others can enter it. The checks are made on an open descriptor,
 * which the process then keeps: every endpoint and file in the directory is named
 * through /proc/self/fd/N (net_run_path), so the name being swapped after the check
 * (another user's symlink in /tmp) cannot send a bind, a connect or a file elsewhere.
 * Endpoints: front.sock (llmc -> tokenizerd), workers.sock (engine workers -> tokenizerd),
 * sampler.sock (workers -> samplerd); other programs may name them by the directory's
 * path. A tcp:// endpoint may be given instead of any of them (flags, or LLM_FRONT /
 * LLM_WORKERS / LLM_SAMPLER).
 *
 * CURVE (tcp only): a server socket uses $LLM_CURVE_SECRET (z85, 40 chars); a client
 * socket uses $LLM_CURVE_SERVER (the server's public key) and its own
 * $LLM_CURVE_CLIENT_SECRET / $LLM_CURVE_CLIENT_PUBLIC (or a fresh key pair).
 * Heartbeats: NET_HB_MS between beats, a peer is dead after NET_HB_LIVENESS missed ones.
 */
#ifndef LLM_NET_H
#define LLM_NET_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "proto.h"

#define NET_HB_MS        250   /* heartbeat interval, milliseconds */
#define NET_HB_LIVENESS  4     /* beats missed before a peer is declared dead */
#define NET_RECONNECT_MS 20    /* first reconnect interval; ZeroMQ backs off to NET_RECONNECT_MAX_MS
                                * (short: a restarted daemon is found again within 100 ms) */
#define NET_RECONNECT_MAX_MS 100

typedef enum { NET_EP_FRONT, NET_EP_WORKERS, NET_EP_SAMPLER, NET_EP_COUNT } net_ep;

#define NET_RUN_DIR_MAX 80 /* bytes in a run directory's path */

/* Resolves, creates and verifies the run directory and keeps it open for the life of the
 * process; out gets its path as named (for messages, and the key of net_run_path). 0, or
 * -1 with a message in err naming the directory and what is wrong with it. Call it
 * before starting threads (it fills a table the other functions read). */
int net_run_dir(const char *flag, char *out, size_t cap, char *err, size_t errcap);
/* The path of file name in run directory dir (from net_run_dir, else an assertion
 * fails), through the verified descriptor: "/proc/self/fd/N/name". */
void net_run_path(const char *dir, const char *name, char *out, size_t cap);
/* Writes the endpoint of kind ep: the env override (LLM_FRONT...) if set, else ipc://
 * and its net_run_path in dir. */
void net_endpoint(const char *dir, net_ep ep, char *out, size_t cap);
/* endpoint as a person knows it, for messages: the run directory's path in place of
 * /proc/self/fd/N. Writes out and returns it. */
const char *net_display(const char *endpoint, char *out, size_t cap);
/* zmq_bind; an ipc:// socket file gets mode 0600 whatever the umask. 0 or -1 (errno). */
int net_bind(void *sock, const char *endpoint);
/* The filesystem path of an ipc:// endpoint (NULL for other transports). */
const char *net_ipc_path(const char *endpoint);

/* A socket with the pipeline's options: ZMQ_MAXMSGSIZE, linger 0, reconnect backoff.
 * NULL on failure (logged). */
void *net_socket(void *ctx, int type);
/* Applies CURVE server or client options when endpoint is tcp:// and keys are
 * configured; 0 on success or when not applicable, -1 with err on bad keys. */
int net_curve(void *sock, const char *endpoint, int is_server, char *err, size_t errcap);
/* Closes a socket; accepts NULL and nulls the pointer. */
void net_close(void **sock);

/* Sends [routing id][payload] (routing NULL: just the payload); 0 or -1. Non-blocking:
 * a message that cannot be queued is dropped (the protocol's retries cover it). A
 * payload over PROTO_MAX_MSG is never sent (the peer would drop the connection): -1,
 * errno EMSGSIZE and an error log line; callers bound what they build. */
int net_send(void *sock, const void *rid, size_t rid_len, const void *data, size_t len);
/* Receives one message without blocking: for a ROUTER the first frame is copied into
 * rid (cap NET_RID_MAX) and its length into *rid_len. The payload is returned in *msg
 * (caller zmq_msg_close). Extra frames are discarded. 1 if a message was received, 0 if
 * none was ready, -1 on error or a malformed frame sequence. */
#define NET_RID_MAX 256
int net_recv(void *sock, int is_router, uint8_t *rid, size_t *rid_len, zmq_msg_t *msg);

/* net_recv, then proto_decode of the payload (the message keeps its own copy, so the
 * ZeroMQ frame is released here). 1: *m holds a valid message (caller proto_msg_free);
 * 0: nothing was ready, or the frames were malformed (*m is empty); -1: a payload of
 * *nbytes bytes arrived that does not decode: err says why and *m is empty. */
int net_recv_msg(void *sock, int is_router, uint8_t *rid, size_t *rid_len, proto_msg *m,
                 size_t *nbytes, char *err, size_t errcap);

/* net_recv_msg that also tells who sent it: the user id the ZAP handler gave the
 * connection ("key <z85 public key>" over CURVE), else the peer's address (tcp), else
 * "" (origin is always NUL-terminated when origincap > 0). */
int net_recv_msg_from(void *sock, int is_router, uint8_t *rid, size_t *rid_len, proto_msg *m,
                      size_t *nbytes, char *origin, size_t origincap, char *err, size_t errcap);

/* Monotonic milliseconds. */
int64_t net_now_ms(void);

#endif
