/*
 * front_sched.c - the front door's queue and workers: requests wait in admission order
 * (FIFO) until a live worker has room and a context large enough; dead workers (no
 * heartbeat) and stalled ones (busy, progress counter standing still) lose their
 * requests to the queue, where they keep their place. The layer above the request
 * records (front_req.c) and the outbox: it decides, and never calls admission or
 * adoption. See front.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "front.h"
#include "log.h"

void front_dispatch(front *f, front_req *r, int wi)
{
    msgpack_sbuffer fb;
    msgpack_sbuffer_init(&fb);
    msgpack_packer fpk;
    msgpack_packer_init(&fpk, &fb, msgpack_sbuffer_write);
    front_fb_pack(r, &fpk);
    proto_sessrec rec = {
        .sess = r->sess, .toks = r->toks, .n_toks = (uint32_t)r->n_toks, .step = (uint64_t)r->n_gen,
        .budget = (uint64_t)(r->n_predict - r->n_gen), .sp = r->sp, .sp_len = r->sp_len, .epoch = f->epoch,
        .fb = (const uint8_t *)fb.data, .fb_len = fb.size, .mu = r->mu, .mu_set = r->mu_set,
        .grammar = r->grammar, .grammar_len = r->grammar_len, .embed = r->embed,
    };
    if (!r->ignore_eos) {
        rec.n_eog = f->n_eog;
        memcpy(rec.eog, f->eog, (size_t)f->n_eog * sizeof *rec.eog);
    }
    proto_writer w;
    proto_begin(&w, PT_RUN, r->sess);
    proto_put_sessrec(&w, &rec);
    msgpack_sbuffer_destroy(&fb);
    if (front_send_worker(f, wi, &w) != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "a session of %d tokens is too large to hand to a worker", r->n_toks);
        front_fail(f, r, ERR_CONTEXT, msg);
        return;
    }
    front_worker *x = &f->w[wi];
    if (x->assigned == 0) x->prog_ms = net_now_ms(); /* its progress is watched from now */
    r->worker = wi;
    r->worker_wid = x->wid;
    r->state = RQ_RUNNING;
    x->assigned++;
}

/* The live, unstalled worker with the fewest sessions, room for one more and a context
 * that holds n_toks tokens plus one to generate; -1 if none. *fits_any: some live
 * worker's context is large enough (room or not); *live_any: some worker is live. */
static int pick_worker(const front *f, int n_toks, int *fits_any, int *live_any)
{
    int best = -1;
    *fits_any = *live_any = 0;
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        const front_worker *w = &f->w[i];
        *live_any |= w->live;
        if (!w->live || (w->ctx && n_toks >= w->ctx)) continue;
        *fits_any = 1;
        if (w->stalled || w->assigned >= w->cap) continue;
        if (best < 0 || w->assigned < f->w[best].assigned) best = i;
    }
    return best;
}

/* Makes room for a queued request of n_toks tokens: the chat held between turns the
 * longest on a worker that could run it leaves that worker. 0 when there is none. */
static int evict_held(front *f, int n_toks)
{
    front_req *best = NULL;
    for (front_req *r = f->reqs; r; r = r->next) {
        if (r->state != RQ_HELD || r->worker < 0) continue;
        const front_worker *w = &f->w[r->worker];
        if (!w->live || w->stalled || (w->ctx && n_toks >= w->ctx)) continue;
        if (!best || r->client_ms < best->client_ms) best = r;
    }
    if (best) front_evict(f, best);
    return best != NULL;
}

int front_ctx_max(const front *f)
{
    int m = 0;
    for (int i = 0; i < FRONT_MAX_WORKERS; i++)
        if (f->w[i].live && f->w[i].ctx > m) m = f->w[i].ctx;
    return m;
}

void front_send_accepted(front *f, const uint8_t *rid, size_t rl, uint64_t id, const front_req *r)
{
    pm_accepted a = {.ntok = (uint64_t)r->n_prompt, .sess = r->sess, .key = proto_sv_of(r->key), .has_key = 1,
                     .seed = r->seed, .has_seed = 1, .pos = (uint64_t)front_queue_pos(f, r), .has_pos = 1};
    proto_writer w;
    proto_begin(&w, PT_ACCEPTED, id);
    pm_accepted_put(&w, &a);
    front_send(f, rid, rl, &w);
}

int front_queue_pos(const front *f, const front_req *r)
{
    if (r->state != RQ_QUEUED) return 0;
    int pos = 0;
    for (const front_req *q = f->reqs; q; q = q->next) {
        pos += q->state == RQ_QUEUED;
        if (q == r) return pos;
    }
    return 0;
}

void front_requeue_worker(front *f, int wi, int tell)
{
    for (front_req *r = f->reqs; r; r = r->next) {
        if (r->worker != wi) continue;
        front_detach(f, r, tell);
        if (r->state == RQ_RUNNING) {
            r->state = RQ_QUEUED;
            r->queued_ms = net_now_ms();
            r->moves++;
            log_info("session %llu: re-dispatching at step %d (%d tokens to re-prefill)",
                     (unsigned long long)r->sess, r->n_gen, r->n_toks);
        }
    }
}

void front_worker_beat(front *f, int wi, const pm_worker_hb *hb, int64_t now)
{
    front_worker *w = &f->w[wi];
    int busy = (int)hb->busy;
    uint64_t prog = hb->prog;
    w->reported = (int)hb->active;
    w->cap = hb->has_cap ? (int)hb->cap : 16;
    w->ctx = (int)hb->ctx;
    w->swait = (int)hb->swait;
    w->has_kv = hb->has_kvb;
    PROTO_KV_GET(*hb, w->kv);
    if (prog != w->prog || (busy && !w->busy)) {
        if (w->stalled && prog != w->prog)
            log_info("worker pid %d makes progress again: it takes sessions again", w->pid);
        if (prog != w->prog) w->stalled = 0;
        w->prog = prog;
        w->prog_ms = now;
    }
    w->busy = busy;
}

void front_pause_clocks(front *f, int64_t ms)
{
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        f->w[i].last_ms += ms;
        f->w[i].prog_ms += ms;
    }
    for (front_req *r = f->reqs; r; r = r->next) {
        r->client_ms += ms;
        r->queued_ms += ms;
    }
    f->start_ms += ms; /* the adoption grace and window */
    if (f->no_worker_ms) f->no_worker_ms += ms;
}

#define PID_CHECK_MS 20 /* how often the local workers' processes are looked at */

void front_check_workers(front *f, int64_t now)
{
    int live = 0, look = now - f->pid_check_ms >= PID_CHECK_MS;
    if (look) f->pid_check_ms = now;
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        front_worker *w = &f->w[i];
        if (!w->live) continue;
        if (now - w->last_ms > NET_HB_MS * NET_HB_LIVENESS) {
            log_warn("worker pid %d silent for %lld ms: purged, its sessions go to other workers", w->pid,
                     (long long)(now - w->last_ms));
            front_requeue_worker(f, i, 0);
            w->live = 0;
            continue;
        }
        if (look && w->watch_pid && !dmn_proc_alive(w->watch_pid, w->watch_start)) {
            log_warn("worker pid %d is gone (its process ended %lld ms after its last message): purged, its "
                     "sessions go to other workers", w->pid, (long long)(now - w->last_ms));
            front_requeue_worker(f, i, 0);
            w->live = 0;
            continue;
        }
        live++;
        if (!w->stalled && w->busy && w->assigned && now - w->prog_ms > f->lim.stall_ms) {
            log_warn("worker pid %d has %d busy sessions and made no progress for %lld ms: declared dead, its "
                     "sessions go to other workers", w->pid, w->busy, (long long)(now - w->prog_ms));
            front_requeue_worker(f, i, 1); /* and tell it to drop them, should it wake up */
            w->stalled = 1;
        }
    }
    if (live) f->no_worker_ms = 0;
    else if (!f->no_worker_ms) f->no_worker_ms = now;
}

void front_tick(front *f, int64_t now)
{
    front_req *next;
    int room = 1;
    for (front_req *r = f->reqs; r; r = next) {
        next = r->next;
        if (r->state == RQ_HELD) {
            if (r->gone || now - r->client_ms > FRONT_HELD_SILENT_MS) {
                log_info("chat session %016llx freed between turns: its client %s", (unsigned long long)r->sess,
                         r->gone ? "disconnected" : "stopped pinging");
                front_req_free(f, r);
            } else if (r->rid_len && now - r->client_ms > FRONT_HELD_PROBE_MS && now - r->probe_ms >= FRONT_HELD_PROBE_EVERY_MS) {
                /* the client ignores a PONG that answers none of its requests; a chat
                 * adopted after a restart has no connection (rid_len 0) until it resumes */
                r->probe_ms = now;
                proto_writer w;
                proto_begin(&w, PT_PONG, 0);
                front_send(f, r->rid, r->rid_len, &w);
            }
            continue;
        }
        if (!r->attached) { /* adopted after a restart: its client has a while to come back */
            if (now - r->client_ms > FRONT_ADOPT_WAIT_MS) {
                log_info("session %016llx: adopted, but its client did not come back in %d ms; freeing it",
                         (unsigned long long)r->sess, FRONT_ADOPT_WAIT_MS);
                front_req_free(f, r);
            }
            continue;
        }
        if (r->gone || now - r->client_ms > FRONT_CLIENT_TIMEOUT_MS) {
            if (r->gone) log_info("session %llu: client disconnected at step %d; freeing the session",
                                  (unsigned long long)r->sess, r->n_gen);
            else log_info("session %llu: client silent for %lld ms; freeing the session", (unsigned long long)r->sess,
                          (long long)(now - r->client_ms));
            f->failed++;
            front_req_free(f, r);
            continue;
        }
        if (r->state != RQ_QUEUED) continue;
        int fits = 0, live = 0, wi = pick_worker(f, r->n_toks, &fits, &live);
        if (wi < 0 && fits && room && evict_held(f, r->n_toks)) wi = pick_worker(f, r->n_toks, &fits, &live);
        if (wi >= 0 && room) {
            front_dispatch(f, r, wi);
            continue;
        }
        if (!live) { /* none registered (an engine restart, or between a goodbye and the
                      * next check): wait for workers to come back, as for busy ones */
            int64_t down = f->no_worker_ms ? f->no_worker_ms : now;
            int64_t since = r->queued_ms > down ? r->queued_ms : down;
            if (now - since > f->lim.worker_wait_ms) {
                char msg[160];
                snprintf(msg, sizeof msg, "no engine worker available for %lld s (is engined running? see 'llmc status')",
                         (long long)(now - since) / 1000);
                front_fail(f, r, ERR_UNAVAILABLE, msg);
            }
        } else if (!fits && r->n_gen > 0) {
            /* it generated until its context was full, and its worker died or the front
             * door restarted before it heard so: the generation ends as it would have */
            front_finish(f, r, "context");
        } else if (!fits) { /* every live worker's context is too small for it: it would wait forever */
            char msg[200];
            snprintf(msg, sizeof msg, "the request needs %d tokens of context; the workers hold %d (engined --ctx)",
                     r->n_toks + 1, front_ctx_max(f));
            front_fail(f, r, ERR_CONTEXT, msg);
        } else {
            room = 0; /* first come, first served: nobody passes the head of the queue */
        }
    }
}
