/* stream.c - one request's stream from the front door, a pure state machine (see stream.h). */
#include "stream.h"

#include <assert.h>
#include <string.h>

static void queue(lc_stream *s, proto_type type, int resume)
{
    assert(s->n_out < LC_STREAM_OUT_MAX); /* the caller pops between replies and ticks */
    s->out[s->n_out++] = (lc_stream_out){.type = type, .id = s->id, .resume = resume, .rs = s->rs};
}

void lc_stream_start(lc_stream *s, const lc_gen *g, uint64_t id, int64_t now_ms, lc_stream_ids new_id, void *cls)
{
    memset(s, 0, sizeof *s);
    s->gen = *g;
    s->id = id;
    s->new_id = new_id;
    s->ids_cls = cls;
    s->start_ms = s->last_rx_ms = s->last_ping_ms = now_ms;
    s->lost_ms = LC_STREAM_LOST_MS;
    queue(s, PT_GENERATE, 0);
}

/* The GENERATE again under a fresh request id: a resume once accepted (the front door
 * replays from the bytes received), else as it was. */
static void resend(lc_stream *s, int64_t now_ms)
{
    s->id = s->new_id(s->ids_cls);
    queue(s, PT_GENERATE, s->accepted);
    if (s->accepted) s->resumes++;
    else s->resends++;
    s->last_resume_ms = now_ms;
}

static void on_accepted(lc_stream *s, const proto_msg *m)
{
    pm_accepted a;
    pm_accepted_get(m, &a);
    s->rs.sess = a.sess;
    proto_sv_copy(a.key, s->rs.key, sizeof s->rs.key);
    s->rs.have_seed = a.has_seed;
    s->rs.seed = (uint32_t)a.seed;
}

/* An ERROR: what the stream does about it itself (a front door that restarted, a chat
 * session that is gone), else the caller's LC_EV_ERROR. */
static lc_event on_error(lc_stream *s, const proto_msg *m, int64_t now_ms)
{
    pm_error e;
    pm_error_get(m, &e);
    char name[32];
    errcode code = errcode_from_name(proto_sv_copy(e.code, name, sizeof name));
    if (code == ERR_UNKNOWN_REQUEST && (s->accepted ? s->rs.sess != 0 : s->resends < LC_STREAM_RESENDS)) {
        /* a new front door: accepted, it may have adopted the session (resume); not yet,
         * our GENERATE died with the old one (send it again). Its answers to the pings
         * sent meanwhile come as fast: one resend per half ping */
        if (now_ms - s->last_resume_ms > LC_STREAM_PING_MS / 2) resend(s, now_ms);
        return LC_EV_NONE;
    }
    if (code == ERR_UNKNOWN_SESSION && !s->accepted && s->gen.cont) {
        /* the chat's session is gone (its worker and the front door restarted): the
         * messages hold the whole conversation, so start a new session */
        s->gen.cont = 0;
        s->id = s->new_id(s->ids_cls);
        queue(s, PT_GENERATE, 0);
        return LC_EV_NEW_SESSION;
    }
    s->code = code;
    s->rs.sess = 0; /* the front door freed it */
    s->over = 1;
    return LC_EV_ERROR;
}

lc_event lc_stream_on_msg(lc_stream *s, const proto_msg *m, int64_t now_ms)
{
    if (s->over || m->id != s->id) return LC_EV_NONE;
    s->last_rx_ms = now_ms;
    switch (m->type) {
    case PT_ACCEPTED:
        on_accepted(s, m);
        if (s->accepted) return LC_EV_NONE; /* a resume's ACCEPTED changes nothing */
        s->accepted = 1;
        return LC_EV_ACCEPTED;
    case PT_PIECE: {
        pm_piece p;
        pm_piece_get(m, &p);
        s->rs.rbytes += p.text.n;
        return LC_EV_PIECE;
    }
    case PT_DONE: {
        pm_done d;
        pm_done_get(m, &d);
        if (d.has_sess) s->rs.sess = d.sess;
        s->over = 1;
        return LC_EV_DONE;
    }
    case PT_ERROR:
        return on_error(s, m, now_ms);
    case PT_EMBEDDING:
        return LC_EV_EMBEDDING;
    default:
        return LC_EV_NONE; /* PONG */
    }
}

lc_event lc_stream_tick(lc_stream *s, int64_t now_ms)
{
    if (s->over) return LC_EV_NONE;
    int64_t silence = now_ms - s->last_rx_ms;
    if (silence > (s->accepted ? s->lost_ms : LC_STREAM_ACCEPT_MS)) {
        s->over = 1;
        return LC_EV_TIMEOUT;
    }
    if (s->accepted && s->rs.sess && silence > LC_STREAM_RESUME_MS && now_ms - s->last_resume_ms > LC_STREAM_RESUME_MS)
        resend(s, now_ms);
    if (now_ms - s->last_ping_ms >= LC_STREAM_PING_MS) {
        queue(s, PT_PING, 0);
        s->last_ping_ms = now_ms;
    }
    return LC_EV_NONE;
}

int lc_stream_pop(lc_stream *s, proto_writer *w)
{
    if (s->n_out == 0) return 0;
    lc_stream_out o = s->out[0];
    memmove(s->out, s->out + 1, (size_t)--s->n_out * sizeof *s->out);
    if (o.type == PT_GENERATE) lc_generate_msg(w, o.id, &s->gen, o.resume ? &o.rs : NULL);
    else proto_begin(w, o.type, o.id);
    return 1;
}

void lc_stream_cancel(const lc_stream *s, proto_writer *w)
{
    pm_cancel c = {.sess = s->rs.sess, .has_sess = s->rs.sess != 0, .key = proto_sv_of(s->rs.key),
                   .has_key = s->rs.sess != 0};
    proto_begin(w, PT_CANCEL, s->id);
    pm_cancel_put(w, &c);
}

int lc_stream_over(const lc_stream *s)
{
    return s->over;
}

int64_t lc_stream_silence_ms(const lc_stream *s, int64_t now_ms)
{
    return now_ms - s->last_rx_ms;
}
