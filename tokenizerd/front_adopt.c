/*
 * front_adopt.c - nothing is lost when the front door dies. The front door keeps no
 * journal: the truth of every request it had is spread over processes that survive it.
 *
 *   - A request running on a worker: the worker holds its tokens (prompt + generated),
 *     step, budget and sampler state (parameters in wire form, mirostat mu), and the
 *     front door's own record ("fb", front_req.c, sent with each PT_RUN: the session
 *     key, prompt length, token limit, stop strings, flags). On a new epoch the worker
 *     reports each session (PT_REPORT) and keeps running it; the new instance adopts it,
 *     unattached until its client comes back.
 *   - The client holds what it asked (prompt or messages, parameters, stop strings),
 *     the resolved seed (ACCEPTED "seed"), the session id and key, and how many bytes of
 *     text it received. It resumes (GENERATE with "resume", "key", "rbytes"): an adopted
 *     session is re-attached; an unknown one (it was queued, or its worker died too) is
 *     admitted again under the same id and key and regenerated: the same seed gives the
 *     same tokens.
 *   - Text needs no saving: it is a pure function of the generated tokens (detokenizer
 *     state, partial UTF-8, text held back for a stop string), so it is replayed from
 *     the first generated token and the client's rbytes are skipped.
 *
 * Resumes that arrive before the workers had time to report (FRONT_ADOPT_GRACE_MS after
 * a start) are parked until their session is adopted or the grace period ends; then
 * front_admit.c admits them again (front_readmit). This layer is below admission: it
 * calls the queue (front_sched.c), the request records and the outbox only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "log.h"

/* Why worker wi may not hand this front door a session it does not hold (a REPORT of n
 * tokens), or NULL. A worker's report is a claim: whoever can reach workers.sock can
 * make one, so adoption is bounded in time (the window after a start, when the real
 * workers report), in count (the worker's capacity, --max-requests, --max-held) and in
 * size (the worker's context). */
static const char *adopt_refusal(front *f, int wi, uint32_t n, int held_chat, int64_t now)
{
    const front_worker *w = &f->w[wi];
    int all, held;
    front_load(f, NULL, 0, &all, NULL, &held, NULL);
    if (now - f->start_ms > FRONT_ADOPT_WINDOW_MS) return "it came after the adoption window";
    if (!w->ctx || n > (uint32_t)w->ctx) return "it holds more tokens than the worker's context";
    if (w->assigned >= w->cap) return "the worker reported more sessions than its capacity";
    if (held_chat ? held >= f->lim.max_held : all >= f->lim.max_requests) return "the front door is full";
    return NULL;
}

/* A refused REPORT: its worker is told to drop the session, and a warning is logged
 * (rate-limited: a fake worker may send thousands). */
static void refuse_report(front *f, int wi, uint64_t sess, const char *why)
{
    static log_limit lim = LOG_LIMIT("a worker's report refused");
    log_warn_limited(&lim, "worker pid %d reported session %016llx, not adopted: %s", f->w[wi].pid,
                     (unsigned long long)sess, why);
    front_send_stop(f, wi, sess);
}

void front_adopt(front *f, int wi, const proto_msg *m)
{
    proto_sessrec rec;
    proto_get_sessrec(m, &rec);
    uint64_t sess = rec.sess;
    uint32_t n = rec.n_toks;
    if (rec.epoch != f->epoch) return; /* a report meant for another instance */
    front_req *r = front_find_sess(f, sess);
    if (r && r->state == RQ_RUNNING && r->worker == wi) return; /* ours, on that very worker */
    /* a session held here is never replaced: its client may be streaming it, and a
     * report is only a claim (the copy we run, or queue, wins) */
    const char *why = r ? "this front door holds that session" : adopt_refusal(f, wi, n, rec.idle, net_now_ms());
    if (why) {
        refuse_report(f, wi, sess, why);
        return;
    }
    r = calloc(1, sizeof *r);
    if (r) r->toks = malloc(((size_t)n + 1024) * sizeof *r->toks);
    if (!r || !r->toks || n == 0 || rec.sp_len > sizeof r->sp || front_fb_unpack(r, proto_field(m, MF_FB), (int)n) != 0 ||
        rec.step != (uint64_t)(n - (uint32_t)r->n_prompt) || rec.grammar_len > PROTO_MAX_GRAMMAR ||
        (rec.grammar && !(r->grammar = strndup(rec.grammar, rec.grammar_len))) ||
        !(r->det = tok_stream_new(f->vocab, TOK_STREAM_KEEP_SPACE))) {
        refuse_report(f, wi, sess, "its record is not one of ours");
        if (r) {
            for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
            tok_stream_free(r->det);
            free(r->toks);
            free(r->grammar);
            free(r);
        }
        return;
    }
    proto_ints(m, MF_TOKS, r->toks, n);
    r->sess = sess;
    r->n_toks = (int)n;
    r->cap = (int)n + 1024;
    r->n_gen = (int)rec.step;
    r->grammar_len = r->grammar ? strlen(r->grammar) : 0; /* admission refuses NUL in a grammar */
    memcpy(r->sp, rec.sp, rec.sp_len);
    r->sp_len = rec.sp_len;
    r->mu_set = rec.mu_set;
    r->mu = rec.mu;
    r->client_ms = r->queued_ms = net_now_ms();
    if (rec.idle && !r->chat) {
        /* it stopped while no front door listened (end of generation, token limit, a full
         * context, or an error): queued, so that its client's resume replays the text and
         * the queue ends it (a full context) or runs it on (an error) */
        r->state = RQ_QUEUED;
        r->worker = -1;
        front_send_stop(f, wi, sess);
    } else { /* a chat whose turn ended waits for its next turn; anything else runs on */
        r->worker = wi;
        r->worker_wid = f->w[wi].wid;
        f->w[wi].assigned++;
        r->state = rec.idle ? RQ_HELD : RQ_RUNNING;
    }
    front_req_append(f, r);
    log_info("session %016llx adopted from worker pid %d: %d tokens, step %d%s", (unsigned long long)sess,
             f->w[wi].pid, r->n_toks, r->n_gen,
             r->state == RQ_HELD ? " (chat between turns)" : r->state == RQ_QUEUED ? " (stopped: queued)" : "");
}

int front_park(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    if (net_now_ms() - f->start_ms >= FRONT_ADOPT_GRACE_MS) return 0;
    if (f->n_parked >= FRONT_MAX_PARKED) {
        front_send_error(f, rid, rl, m->id, ERR_FULL, "the front door is starting; try again in a moment");
        return -1;
    }
    front_parked *pk = &f->parked[f->n_parked];
    char err[100];
    if (proto_decode(&pk->m, m->bytes, m->len, err, sizeof err) != 0) return 0; /* a copy to keep */
    memcpy(pk->rid, rid, rl);
    pk->rid_len = rl;
    f->n_parked++;
    return -1;
}

int front_resume(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    uint64_t sess = proto_u64(m, MF_RESUME, 0);
    front_req *r = front_find_sess(f, sess);
    if (r && !front_key_ok(r, m)) {
        front_send_error(f, rid, rl, m->id, ERR_UNKNOWN_SESSION, "resume: unknown session (or not yours)");
        return -1;
    }
    if (!r) return front_park(f, rid, rl, m);
    /* the session is here: this connection takes it over and gets the text it lacks */
    memcpy(r->rid, rid, rl);
    r->rid_len = rl;
    r->client_id = m->id;
    r->client_ms = net_now_ms();
    r->gone = false;
    r->attached = true;
    r->skip = proto_u64(m, MF_RBYTES, 0);
    log_info("session %016llx resumed by its client (%llu bytes of text received, %d tokens generated)",
             (unsigned long long)r->sess, (unsigned long long)r->skip, r->n_gen);
    front_send_accepted(f, rid, rl, m->id, r);
    front_replay(f, r); /* queued too: what it generated before its worker died */
    return 1;
}

int front_unpark(front *f, int64_t now, int *i, front_parked *out)
{
    int grace_over = now - f->start_ms >= FRONT_ADOPT_GRACE_MS;
    for (; *i < f->n_parked; ++*i) {
        front_parked *p = &f->parked[*i];
        uint64_t sess = proto_u64(&p->m, MF_RESUME, 0); /* a resume, or a chat's next turn */
        if (!sess) sess = proto_u64(&p->m, MF_SESS, 0);
        if (!grace_over && !front_find_sess(f, sess)) continue;
        proto_msg_move(&out->m, &p->m);
        memcpy(out->rid, p->rid, p->rid_len);
        out->rid_len = p->rid_len;
        front_parked *last = &f->parked[--f->n_parked]; /* its place: *i is looked at again */
        if (last != p) {
            proto_msg_move(&p->m, &last->m);
            memcpy(p->rid, last->rid, last->rid_len);
            p->rid_len = last->rid_len;
        }
        return 1;
    }
    return 0;
}
