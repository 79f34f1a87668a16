/*
 * worker_kv.c - a worker's scheduling on the shared KV block pools (kvsetup.h), which every
 * worker of the segment draws from. Every count is per kind of block (ENG_KV_WHOLE, and
 * ENG_KV_RING for a model with sliding-window layers): room is there when each kind has it.
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

/* Blocks of each kind kvp_alloc can hand out now (free and cached). */
static void avail_of(worker *w, int avail[ENG_KV_KINDS])
{
    for (int k = 0; k < ENG_KV_KINDS; k++) avail[k] = w->pools[k] ? (int)kvp_available(w->pools[k]) : 0;
}

static int n_blocks_of(const worker *w, int k) { return w->pools[k] ? (int)kvp_geometry_of(w->pools[k])->n_blocks : 0; }

/* The first kind whose need is more than avail, or -1 when every kind fits. */
static int short_kind(const int need[ENG_KV_KINDS], const int avail[ENG_KV_KINDS])
{
    for (int k = 0; k < ENG_KV_KINDS; k++)
        if (need[k] > avail[k]) return k;
    return -1;
}

static const char *kind_name(int k) { return k == ENG_KV_RING ? "ring " : ""; }

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

/* Adds the blocks session x still takes for its prompt and first token, at least one of
 * each kind it uses (its next): what an admitted session keeps for itself before it has
 * them. */
static void promised(const worker *w, const wsess *x, int sum[ENG_KV_KINDS])
{
    int k[ENG_KV_KINDS];
    eng_session_kv_need(x->es, x->n_toks + 1 - eng_session_pos(x->es), w->kv_step, k);
    for (int i = 0; i < ENG_KV_KINDS; i++) sum[i] += w->pools[i] ? (k[i] > 1 ? k[i] : 1) : 0;
}

/* 1 when the pools hold the rest of s's prompt and first token beside what this worker's
 * other running sessions were promised (our held chats give their blocks back first if
 * that makes the room); 1 as well when nobody else holds or was promised a block (the
 * whole pool is s's, and wkv_start checked that it fits). Else s is dropped and sent back
 * to the queue: 0. */
static int admit(worker *w, wsess *s, uint64_t sess, uint64_t epoch)
{
    int own[ENG_KV_KINDS], others[ENG_KV_KINDS] = {0}, need[ENG_KV_KINDS], avail[ENG_KV_KINDS], held[ENG_KV_KINDS];
    eng_session_kv_need(s->es, s->n_toks + 1 - eng_session_pos(s->es), w->kv_step, own);
    eng_session_kv_held(s->es, held);
    int alone = 1;
    for (int i = 0; i < w->n_s; i++) {
        const wsess *x = &w->s[i];
        if (x != s && (x->state == WS_READY || x->state == WS_WAIT) && !x->kv_wait) {
            promised(w, x, others);
            alone = 0;
        }
    }
    for (int k = 0; k < ENG_KV_KINDS; k++) need[k] = own[k] + others[k];
    avail_of(w, avail);
    if (short_kind(need, avail) >= 0 && release_held(w, s)) avail_of(w, avail);
    int k = short_kind(need, avail);
    if (k >= 0 && alone) { /* nobody else of ours runs: it fits when every block in use is s's */
        int own_all = 1;
        for (int j = 0; j < ENG_KV_KINDS; j++) own_all &= n_blocks_of(w, j) - avail[j] <= held[j];
        if (own_all) k = -1;
    }
    if (k < 0) return 1;
    for (int j = 0; j < ENG_KV_KINDS; j++) w->kv_blocked[j] = need[j] < n_blocks_of(w, j) ? need[j] : n_blocks_of(w, j);
    w->kv_deferred++;
    char msg[200];
    snprintf(msg, sizeof msg, "KV pool full: the prompt needs %d more %sblocks and this worker's running sessions %d, "
             "%d are free or cached; it waits in the queue", own[k], kind_name(k), others[k], avail[k]);
    log_debug("session %llu: %s", (unsigned long long)sess, msg);
    wrk_sess_drop(s);
    wrk_sess_error_code(w, sess, epoch, msg, ERR_WORKER_FULL, 0);
    wio_set_cap(&w->io, wkv_cap(w));
    return 0;
}

int wkv_start(worker *w, wsess *s, uint64_t sess, uint64_t epoch, int keep)
{
    int peak[ENG_KV_KINDS];
    kvs_peak(eng_config_of(w->m), s->n_toks + 1, w->kv_step, peak);
    s->kv_wait = 0;
    s->kv_wait_ms = 0;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (!w->pools[k] || peak[k] <= n_blocks_of(w, k)) continue;
        char msg[200]; /* its prompt and first token never fit */
        snprintf(msg, sizeof msg, "the prompt (%d tokens) needs more KV blocks than the whole %spool has "
                 "(%d blocks of 16 tokens; it needs %d)", s->n_toks, kind_name(k), n_blocks_of(w, k), peak[k]);
        wrk_sess_error_code(w, sess, epoch, msg, ERR_CONTEXT, 0);
        wrk_sess_drop(s);
        return -1;
    }
    if (eng_session_pos(s->es) == keep) keep = eng_session_reuse(s->es, s->toks, s->n_toks - 1);
    if (!admit(w, s, sess, epoch)) return -1;
    w->kv_prompt += (uint64_t)s->n_toks;
    w->kv_reused += (uint64_t)keep;
    return keep;
}

int wkv_cap(worker *w)
{
    int active = 0, avail[ENG_KV_KINDS];
    for (int i = 0; i < w->n_s; i++) active += w->s[i].state != WS_FREE;
    avail_of(w, avail);
    int blocked = w->kv_blocked[0] || w->kv_blocked[1];
    if (blocked && short_kind(w->kv_blocked, avail) < 0) w->kv_blocked[0] = w->kv_blocked[1] = blocked = 0;
    return blocked ? active : w->n_s;
}

int wkv_avail(worker *w, int avail[ENG_KV_KINDS])
{
    if (!w->kv_on) return -1;
    avail_of(w, avail);
    for (int i = 0; i < w->n_s; i++) { /* a decoding session's next position may start a block */
        const wsess *s = &w->s[i];
        if (s->state != WS_READY || s->kv_wait || s->n_toks - eng_session_pos(s->es) != 1 || s->embed) continue;
        int need[ENG_KV_KINDS];
        eng_session_kv_need(s->es, 1, 1, need);
        for (int k = 0; k < ENG_KV_KINDS; k++) avail[k] -= need[k];
    }
    for (int k = 0; k < ENG_KV_KINDS; k++) avail[k] = avail[k] > 0 ? avail[k] : 0;
    return 0;
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
    int64_t oldest = now;
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state != WS_READY) continue;
        eng_session_reset(s->es);
        int peak[ENG_KV_KINDS];
        kvs_peak(eng_config_of(w->m), s->n_toks, w->kv_step, peak);
        if (peak[0] > n_blocks_of(w, 0) || peak[1] > n_blocks_of(w, 1)) { /* it never fits again */
            wrk_sess_error_code(w, s->sess, s->epoch, "the session outgrew the KV pool", ERR_NONE, 1);
            s->state = WS_IDLE;
            continue;
        }
        s->kv_wait = 1;
        if (!s->kv_wait_ms) s->kv_wait_ms = now;
        if (s->kv_wait_ms < oldest) oldest = s->kv_wait_ms;
    }
    if (now - oldest > KV_WAIT_MAX_MS) return 0;
    int avail[ENG_KV_KINDS];
    avail_of(w, avail);
    if (avail[0] == n_blocks_of(w, 0) && avail[1] == n_blocks_of(w, 1)) { /* nobody holds a block */
        w->kv_retry_ms = now;
        return 1;
    }
    if (now - oldest < KV_RETRY_MS) log_info("KV pool full with other workers' blocks: sessions wait for room");
    w->kv_retry_ms = now + KV_RETRY_MS;
    return 1;
}

int wkv_full(worker *w, int64_t now) { return preempt(w) || wait_others(w, now); }
