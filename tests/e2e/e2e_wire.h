/*
 * e2e_wire.h - what the e2e test clients (hostile_client.c, audit_client.c) share: send
 * a message on a ZeroMQ socket, wait for one decoded message.
 */
#ifndef LLM_E2E_WIRE_H
#define LLM_E2E_WIRE_H

#include <zmq.h>

#include "proto.h"

/* Sends w's message on s and frees w. */
static inline void e2e_send(void *s, proto_writer *w)
{
    zmq_send(s, proto_data(w), proto_size(w), 0);
    proto_writer_free(w);
}

/* Waits up to ms for one decoded message on s; 1 with *m filled, else 0. */
static inline int e2e_recv(void *s, int ms, proto_msg *m)
{
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return 0;
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    zmq_msg_recv(&zm, s, 0);
    char err[200];
    int ok = proto_decode(m, zmq_msg_data(&zm), zmq_msg_size(&zm), err, sizeof err) == 0;
    zmq_msg_close(&zm);
    return ok;
}

#endif
