/*
 * gw_conns.h - the deadline for a client to send its request (owner: gateway).
 *
 * libmicrohttpd's connection timeout counts idle time only: a client that trickles a
 * byte of its headers or body now and then holds its connection (and a slot of the
 * connection limits) forever. This registry knows every open connection's socket and
 * since when it has been receiving a request; a sweep from the gateway's main loop
 * shuts down the socket of each connection whose request has not fully arrived within
 * the deadline, and libmicrohttpd then closes it as it closes any client that left.
 * A connection being answered (a long SSE stream included) has no deadline; after its
 * answer the clock starts again for the next request on that connection (keep-alive).
 * A cut-off is logged as a warning, but quietly (debug) for a keep-alive connection
 * that had not begun a next request: an idle client pool is no attack.
 *
 *   gwc *w = gwc_new(60000);
 *   on MHD_CONNECTION_NOTIFY_STARTED:  *socket_context = gwc_open(w, fd, "10.0.0.7");
 *   when a request line is in:          gwc_request_line(w, slot);   // MHD's URI log callback
 *   when the whole request is in:       gwc_answering(w, slot);
 *   when its answer is done:            gwc_idle(w, slot);
 *   on MHD_CONNECTION_NOTIFY_CLOSED:    gwc_close(w, slot);   // before MHD closes fd
 *   every 100 ms:                       gwc_sweep(w, net_now_ms());
 *   gwc_destroy(&w);
 *
 * Thread-safe: one mutex. The sweep shuts sockets down while holding it and gwc_close
 * takes it, so a socket is never touched once libmicrohttpd may have closed it (and its
 * number been reused).
 *
 * Ownership: the registry owns its slots; gwc_open's slot lives until gwc_close.
 */
#ifndef LLM_GW_CONNS_H
#define LLM_GW_CONNS_H

#include <stdint.h>

typedef struct gwc gwc;
typedef struct gwc_slot gwc_slot;

/* A registry whose connections have request_ms to send each request; NULL without memory. */
gwc *gwc_new(int64_t request_ms);
/* Frees the registry and any slot still open; accepts NULL; nulls the caller's pointer. */
void gwc_destroy(gwc **w);
/* A new connection on socket fd from addr (for the log), receiving its first request
 * from now on. NULL without memory (the connection then has no deadline). */
gwc_slot *gwc_open(gwc *w, int fd, const char *addr);
/* The request line of a request has arrived (the clock keeps running). */
void gwc_request_line(gwc *w, gwc_slot *s);
/* Its request has fully arrived (or been refused from its headers): no deadline. */
void gwc_answering(gwc *w, gwc_slot *s);
/* Its answer is done: a next request must arrive whole within the deadline from now. */
void gwc_idle(gwc *w, gwc_slot *s);
/* Forgets the connection. Each of these functions accepts a NULL slot. */
void gwc_close(gwc *w, gwc_slot *s);
/* Shuts down the socket of every connection that has not sent a whole request within
 * the deadline at now_ms (monotonic), logging each; returns how many. */
int gwc_sweep(gwc *w, int64_t now_ms);

#endif
