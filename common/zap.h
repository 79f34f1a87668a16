/*
 * zap.h - who may connect to a CURVE server socket: a ZAP handler (ZeroMQ's RFC 27)
 * with one allow-list of client public keys per ZAP domain (owner: pipeline).
 *
 *   zap *z = NULL;
 *   void *s = net_socket(ctx, ZMQ_ROUTER);
 *   if (zap_guard(&z, ctx, s, "tcp://0.0.0.0:7001", "workers", "LLM_CURVE_ALLOW_WORKERS", err, sizeof err) != 0 ||
 *       zmq_bind(s, "tcp://0.0.0.0:7001") != 0) ...
 *   ...
 *   zap_destroy(&z);                // before zmq_ctx_term
 *
 * CURVE alone encrypts but lets in any key pair; with a handler bound at
 * inproc://zeromq.zap.01 in the socket's context, libzmq asks it about every CURVE
 * handshake and refuses the connection unless it answers 200. A server socket gets a
 * ZAP domain ("workers", "clients", "sampler") and its list comes from an environment
 * variable: z85 public keys (40 characters) separated by commas, spaces or newlines, or
 * the path of a file holding them (any other single word; a word starting with '#' that
 * is not a key starts a comment to the end of the line), or "*" for any key (encryption
 * only: logged as a warning). A CURVE server socket whose variable is
 * unset is refused at start (zap_guard fails): no silent open door.
 *
 * A refused handshake is logged (key and address) at most once a second; the user id of
 * an accepted connection is "key <z85>", which the receiver reads back as the message
 * property "User-Id" (net_recv_msg_from).
 *
 * Ownership: the zap owns its thread, its REP socket and the lists; zap_destroy joins
 * and closes them (call it before zmq_ctx_term, or the context waits for the socket).
 */
#ifndef LLM_ZAP_H
#define LLM_ZAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct zap zap;

/* Makes socket sock (to be bound at endpoint) accept only the CURVE keys listed in the
 * environment variable env, under ZAP domain domain, starting the handler (*z) for ctx
 * on first use. Does nothing (0) when endpoint is not tcp:// or no LLM_CURVE_SECRET is
 * set (net_curve then serves plaintext, with a warning). -1 with err when env is unset
 * or holds a bad key, or the handler cannot start. Call before zmq_bind. */
int zap_guard(zap **z, void *ctx, void *sock, const char *endpoint, const char *domain, const char *env,
              char *err, size_t errcap);

/* Parses an allow-list (the forms above) into keys (32 bytes each, at most cap); the
 * number of keys, -2 for "*", or -1 with err. For tests and zap_guard. */
int zap_parse_list(const char *list, uint8_t (*keys)[32], int cap, char *err, size_t errcap);

/* Handshakes refused and accepted so far (for tests and logs). */
uint64_t zap_refused(const zap *z);
uint64_t zap_accepted(const zap *z);

/* Stops the handler thread and frees everything; accepts NULL and nulls *z. */
void zap_destroy(zap **z);

#endif
