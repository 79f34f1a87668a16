/*
 * gw_conns.c - the deadline for a client to send its request (gw_conns.h).
 */
#include "gw_conns.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "log.h"
#include "net.h"

/* A connection's life: RECEIVING -> ANSWERING -> IDLE -> RECEIVING ..., SHUT when cut off. */
typedef enum {
    GWC_RECEIVING, /* a request has begun (or the connection is new): the clock runs */
    GWC_ANSWERING, /* no deadline */
    GWC_IDLE,      /* keep-alive, no next request line yet: the clock runs */
    GWC_SHUT,      /* cut off by the sweep; libmicrohttpd closes it next */
} gwc_state;

struct gwc_slot {
    gwc_slot *prev, *next;
    int       fd;
    gwc_state state;
    int64_t   since_ms; /* RECEIVING, IDLE: when the clock started (monotonic) */
    char      addr[64];
};

struct gwc {
    pthread_mutex_t mu;   /* guards the list and every slot */
    gwc_slot       *head; /* open connections, newest first */
    int64_t         request_ms;
};

gwc *gwc_new(int64_t request_ms)
{
    gwc *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    w->request_ms = request_ms;
    return w;
}

void gwc_destroy(gwc **wp)
{
    gwc *w = *wp;
    if (!w) return;
    for (gwc_slot *s = w->head, *next; s; s = next) { /* none once libmicrohttpd has stopped */
        next = s->next;
        free(s);
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
    *wp = NULL;
}

gwc_slot *gwc_open(gwc *w, int fd, const char *addr)
{
    gwc_slot *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fd = fd;
    snprintf(s->addr, sizeof s->addr, "%s", addr ? addr : "?");
    pthread_mutex_lock(&w->mu);
    s->state = GWC_RECEIVING;
    s->since_ms = net_now_ms();
    s->next = w->head;
    if (w->head) w->head->prev = s;
    w->head = s;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Moves s to state (the clock restarted if restart) unless the sweep has shut it down. */
static void set_state(gwc *w, gwc_slot *s, gwc_state state, bool restart)
{
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    if (s->state != GWC_SHUT) {
        s->state = state;
        if (restart) s->since_ms = net_now_ms();
    }
    pthread_mutex_unlock(&w->mu);
}

void gwc_answering(gwc *w, gwc_slot *s) { set_state(w, s, GWC_ANSWERING, false); }
void gwc_idle(gwc *w, gwc_slot *s) { set_state(w, s, GWC_IDLE, true); }

void gwc_request_line(gwc *w, gwc_slot *s)
{
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    if (s->state == GWC_IDLE) s->state = GWC_RECEIVING; /* the clock runs on from the last answer */
    pthread_mutex_unlock(&w->mu);
}

void gwc_close(gwc *w, gwc_slot *s)
{
    if (!s) return;
    pthread_mutex_lock(&w->mu);
    if (s->prev) s->prev->next = s->next;
    else w->head = s->next;
    if (s->next) s->next->prev = s->prev;
    pthread_mutex_unlock(&w->mu);
    free(s);
}

int gwc_sweep(gwc *w, int64_t now_ms)
{
    int n = 0;
    pthread_mutex_lock(&w->mu);
    for (gwc_slot *s = w->head; s; s = s->next) {
        int idle = s->state == GWC_IDLE;
        if ((s->state != GWC_RECEIVING && !idle) || now_ms - s->since_ms <= w->request_ms) continue;
        /* recv() then returns 0 in libmicrohttpd's thread, which closes the connection */
        shutdown(s->fd, SHUT_RDWR);
        s->state = GWC_SHUT;
        n++;
        log_at(idle ? LOG_DEBUG : LOG_WARN, "closed the connection of %s: %s within %lld s (--request-timeout)",
               s->addr, idle ? "idle, no next request" : "no whole request", (long long)(w->request_ms / 1000));
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}
