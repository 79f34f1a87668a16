/*
 * front_out.c - the front door's outbox, its bottom layer. Handlers append messages
 * (to a client by routing id, to a worker by index) and never touch a socket; the loop
 * in frontd.c sends them in order after each handler, and tests/check_front.c reads
 * them without sockets. See front.h.
 */
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "log.h"

/* Appends w's bytes (taken over, not copied) for rid; frees w. */
static void append(front *f, front_dest to, const uint8_t *rid, size_t rl, proto_writer *w)
{
    if (f->out_head == f->n_out) f->out_head = f->n_out = 0; /* drained: start over */
    if (f->n_out == f->cap_out) {
        int cap = f->cap_out ? f->cap_out * 2 : 64;
        front_out *x = realloc(f->out, (size_t)cap * sizeof *x);
        if (!x) {
            static log_limit lim = LOG_LIMIT("a message lost: out of memory");
            log_warn_limited(&lim, "out of memory: a %s message is lost", proto_type_name(w->type));
            proto_writer_free(w);
            return;
        }
        f->out = x;
        f->cap_out = cap;
    }
    front_out *o = &f->out[f->n_out++];
    o->to = to;
    memcpy(o->rid, rid, rl);
    o->rid_len = rl;
    proto_data(w); /* patches the map's header */
    o->len = proto_size(w);
    o->data = msgpack_sbuffer_release(&w->buf);
    proto_writer_free(w);
}

void front_send(front *f, const uint8_t *rid, size_t rl, proto_writer *w)
{
    append(f, FRONT_TO_CLIENT, rid, rl, w);
}

void front_send_error(front *f, const uint8_t *rid, size_t rl, uint64_t id, errcode code, const char *msg)
{
    pm_error e = {.msg = proto_sv_of(msg), .code = proto_sv_of(errcode_name(code)), .has_code = code != ERR_NONE};
    proto_writer w;
    proto_begin(&w, PT_ERROR, id);
    pm_error_put(&w, &e);
    front_send(f, rid, rl, &w);
}

int front_send_worker(front *f, int wi, proto_writer *w)
{
    /* a message over the limit would make the worker drop the connection for good */
    if (proto_size(w) > PROTO_MAX_MSG) {
        proto_writer_free(w);
        return -1;
    }
    append(f, FRONT_TO_WORKER, f->w[wi].rid, f->w[wi].rid_len, w);
    return 0;
}

void front_send_stop(front *f, int wi, uint64_t sess)
{
    if (wi < 0 || !f->w[wi].live) return;
    pm_stop st = {.sess = sess};
    proto_writer w;
    proto_begin(&w, PT_STOP, sess);
    pm_stop_put(&w, &st);
    front_send_worker(f, wi, &w);
}

int front_out_pop(front *f, front_out *o)
{
    if (f->out_head == f->n_out) return 0;
    *o = f->out[f->out_head++];
    return 1;
}

void front_out_free_all(front *f)
{
    front_out o;
    while (front_out_pop(f, &o)) free(o.data);
    free(f->out);
    f->out = NULL;
    f->n_out = f->cap_out = f->out_head = 0;
}
