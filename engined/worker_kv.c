/*
 * worker_kv.c - a worker's scheduling on the shared KV block pool (kvpool.h), which every
 * worker of the segment draws from.
 *
 * Admission counts blocks, not sessions: a run is taken when the free and cached blocks
 * hold the rest of its prompt (past the longest published prefix it found) and its first
 * token, beside what the sessions this worker runs still take for theirs (at least their
 * next block each). Else
 * it goes back to the front door's queue, in its place (worker_full), and the worker
 * offers no session until the pool has that room (wkv_cap: the heartbeat's cap). A step's
 * prefill chunks take only the positions the available blocks hold (wkv_avail). When a
 * step still finds the pool full (other workers took blocks meanwhile, or decoding
 * sessions grew into new blocks), held chats give their blocks back, then the newest
 * session is preempted (recomputed later from what is still published), and when the
 * blocks are other workers', our sessions wait for them (wkv_full).
 */
#include <stdio.h>

#include "log.h"
#include "net.h"
#include "worker_kv.h"

#define KV_RETRY_MS 50       /* a session waiting for other workers' blocks tries again this often */
#define KV_WAIT_MAX_MS 60000 /* and gives up (the step's error) after this long */

/* Held chats (IDLE with positions) other than keep give their blocks back: published ones
 * stay cached, so their next turn finds them unless evicted. Returns how many. */
static int release_held(worker *w, const wsess *keep)
{
    int n = 0;
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s == keep || s->state != WS_IDLE || eng_session_pos(s->es) == 0) continue;
        log_debug("session %llu: held, gives its KV blocks back (published ones stay cached)",
                  (unsigned long long)s->sess);
        eng_session_reset(s->es);
        n++;
    }
    w->kv_preempt += (uint64_t)n;
    return n;
}

/* Blocks session x still takes for its prompt and first token, at least one (its next):
 * what an admitted session keeps for itself before it has them. */
static uint32_t promised(const wsess *x)
{
    int k = eng_session_kv_need(x->es, x->n_toks + 1 - eng_session_pos(x->es));
    return k > 1 ? (uint32_t)k : 1;
}

/* 1 when the pool holds the rest of s's prompt and first token beside what this worker's
 * other running sessions were promised (our held chats give their blocks back first if
 * that makes the room); 1 as well when nobody else holds or was promised a block (the
 * whole pool is s's, and wkv_start checked that it fits). Else s is dropped and sent back
 * to the queue: 0. */
static int admit(worker *w, wsess *s, uint64_t sess, uint64_t epoch)
{
    int pos = eng_session_pos(s->es);
    uint32_t n_blocks = kvp_geometry_of(w->pool)->n_blocks, held = (uint32_t)(pos + 15) / 16;
    uint32_t own = (uint32_t)eng_session_kv_need(s->es, s->n_toks + 1 - pos), others = 0;
    for (int i = 0; i < w->n_s; i++) {
        const wsess *x = &w->s[i];
        if (x != s && (x->state == WS_READY || x->state == WS_WAIT) && !x->kv_wait) others += promised(x);
    }
    uint32_t need = own + others, avail = kvp_available(w->pool);
    if (avail < need && release_held(w, s)) avail = kvp_available(w->pool);
    if (avail >= need || (others == 0 && n_blocks - avail <= held)) return 1;
    w->kv_blocked = need < n_blocks ? need : n_blocks;
    w->kv_deferred++;
    char msg[200];
    snprintf(msg, sizeof msg, "KV pool full: the prompt needs %u more blocks and this worker's running sessions %u, "
             "%u are free or cached; it waits in the queue", own, others, avail);
    log_debug("session %llu: %s", (unsigned long long)sess, msg);
    wrk_sess_drop(s);
    wrk_sess_error_code(w, sess, epoch, msg, ERR_WORKER_FULL, 0);
    wio_set_cap(&w->io, wkv_cap(w));
    return 0;
}

int wkv_start(worker *w, wsess *s, uint64_t sess, uint64_t epoch, int keep)
{
    uint64_t cap = kvp_geometry_of(w->pool)->n_blocks, n = (uint64_t)s->n_toks;
    s->kv_wait = 0;
    s->kv_wait_ms = 0;
    if ((n + 16) / 16 > cap) { /* its prompt and first token never fit */
        char msg[160];
        snprintf(msg, sizeof msg, "the prompt (%llu tokens) needs more KV blocks than the whole pool has "
                 "(%llu blocks of 16 tokens)", (unsigned long long)n, (unsigned long long)cap);
        wrk_sess_error_code(w, sess, epoch, msg, ERR_CONTEXT, 0);
        wrk_sess_drop(s);
        return -1;
    }
    if (eng_session_pos(s->es) == keep) keep = eng_session_reuse(s->es, s->toks, s->n_toks - 1);
    if (!admit(w, s, sess, epoch)) return -1;
    w->kv_prompt += n;
    w->kv_reused += (uint64_t)keep;
    return keep;
}

int wkv_cap(worker *w)
{
    int active = 0;
    for (int i = 0; i < w->n_s; i++) active += w->s[i].state != WS_FREE;
    if (w->kv_blocked && kvp_available(w->pool) >= w->kv_blocked) w->kv_blocked = 0;
    return w->kv_blocked ? active : w->n_s;
}

int wkv_avail(worker *w)
{
    if (!w->pool) return -1;
    int avail = (int)kvp_available(w->pool);
    for (int i = 0; i < w->n_s; i++) { /* a decoding session's next position may start a block */
        const wsess *s = &w->s[i];
        if (s->state == WS_READY && !s->kv_wait && s->n_toks - eng_session_pos(s->es) == 1 && !s->embed)
            avail -= eng_session_kv_need(s->es, 1);
    }
    return avail > 0 ? avail : 0;
}

int wkv_resume_ok(const worker *w, int64_t now)
{
    if (now < w->kv_retry_ms) return 0;
    for (int i = 0; i < w->n_s; i++)
        if (w->s[i].state == WS_READY && !w->s[i].kv_wait) return 0;
    return 1;
}

/* A step found the KV pool full: held chats give their blocks back first, else the
 * newest running session is preempted (its blocks go back and it waits, recomputing
 * later from what is still published). 0 when nothing could be freed (one session alone
 * needs more). */
static int preempt(worker *w)
{
    int freed = release_held(w, NULL), ready = 0;
    wsess *newest = NULL;
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state == WS_READY && !s->kv_wait) {
            ready++;
            if (!newest || s->seq > newest->seq) newest = s;
        }
    }
    if (!freed && ready > 1) {
        eng_session_reset(newest->es);
        newest->kv_wait = 1;
        freed = 1;
        w->kv_preempt++;
    }
    if (freed) log_info("KV pool full: %d session%s gave their blocks back", freed, freed > 1 ? "s" : "");
    return freed;
}

/* The pool is full and nothing of ours could be freed: a session that alone needs more
 * blocks than the whole pool ends as if its context were full; the others give their
 * blocks back and wait, retrying one at a time every KV_RETRY_MS (they recompute from
 * what is still published, so their tokens do not change), while other workers hold
 * blocks; waiting sessions hold nothing, so two workers never wait on each other. When
 * nobody else holds a block (another worker just gave its back) they retry at once.
 * 0 (the step fails with its error) after KV_WAIT_MAX_MS. */
static int wait_others(worker *w, int64_t now)
{
    uint32_t n_blocks = kvp_geometry_of(w->pool)->n_blocks;
    int64_t oldest = now;
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state != WS_READY) continue;
        eng_session_reset(s->es);
        if ((uint32_t)(s->n_toks + 15) / 16 > n_blocks) { /* it never fits again */
            wrk_sess_error_code(w, s->sess, s->epoch, "the session outgrew the KV pool", ERR_NONE, 1);
            s->state = WS_IDLE;
            continue;
        }
        s->kv_wait = 1;
        if (!s->kv_wait_ms) s->kv_wait_ms = now;
        if (s->kv_wait_ms < oldest) oldest = s->kv_wait_ms;
    }
    if (now - oldest > KV_WAIT_MAX_MS) return 0;
    if (kvp_available(w->pool) == n_blocks) { /* nobody holds a block */
        w->kv_retry_ms = now;
        return 1;
    }
    if (now - oldest < KV_RETRY_MS) log_info("KV pool full with other workers' blocks: sessions wait for room");
    w->kv_retry_ms = now + KV_RETRY_MS;
    return 1;
}

int wkv_full(worker *w, int64_t now) { return preempt(w) || wait_others(w, now); }
