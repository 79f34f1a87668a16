/*
 * front_req.c - a request at the front door once admitted: tokens -> UTF-8 pieces with
 * stop strings held back, log-probs, completion, failure, chats held between turns, the
 * record its worker keeps (fb), and its client's PING/CANCEL. The layer above the
 * outbox (front_out.c): it calls nothing of the queue (front_sched.c), adoption or
 * admission. See front.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "log.h"
#include "sparams.h"
#include "unicode.h"

front_req *front_find_sess(front *f, uint64_t sess)
{
    for (front_req *r = f->reqs; r; r = r->next)
        if (r->sess == sess) return r;
    return NULL;
}

void front_req_append(front *f, front_req *r)
{
    front_req **p = &f->reqs;
    while (*p) p = &(*p)->next;
    r->next = NULL;
    *p = r;
}

static front_req *find_client(front *f, const uint8_t *rid, size_t rl, uint64_t id)
{
    for (front_req *r = f->reqs; r; r = r->next)
        if (r->client_id == id && r->rid_len == rl && memcmp(r->rid, rid, rl) == 0) return r;
    return NULL;
}

int front_count(const front *f, rq_state st)
{
    int n = 0;
    for (const front_req *r = f->reqs; r; r = r->next) n += r->state == st;
    return n;
}

void front_load(const front *f, const uint8_t *rid, size_t rl, int *all, int *mine, int *held, int *mine_held)
{
    int n[4] = {0};
    for (const front_req *r = f->reqs; r; r = r->next) {
        int h = r->state == RQ_HELD, own = rid && r->rid_len == rl && memcmp(r->rid, rid, rl) == 0;
        n[h ? 2 : 0]++;
        n[h ? 3 : 1] += own;
    }
    if (all) *all = n[0];
    if (mine) *mine = n[1];
    if (held) *held = n[2];
    if (mine_held) *mine_held = n[3];
}

/* The held chat idle the longest (of connection rid when rid is set), other than keep. */
static front_req *oldest_held(front *f, const uint8_t *rid, size_t rl, const front_req *keep)
{
    front_req *best = NULL;
    for (front_req *r = f->reqs; r; r = r->next)
        if (r->state == RQ_HELD && r != keep && (!rid || (r->rid_len == rl && !memcmp(r->rid, rid, rl))) &&
            (!best || r->client_ms < best->client_ms))
            best = r;
    return best;
}

void front_hold(front *f, front_req *r)
{
    r->state = RQ_HELD;
    r->client_ms = net_now_ms();
    int held, mine;
    for (;;) {
        front_load(f, r->rid, r->rid_len, NULL, NULL, &held, &mine);
        int per_client = mine > f->lim.max_held_per_client;
        if (!per_client && held <= f->lim.max_held) return;
        front_req *x = oldest_held(f, per_client ? r->rid : NULL, r->rid_len, r);
        if (!x) return;
        log_info("chat session %016llx freed between turns: %s", (unsigned long long)x->sess,
                 per_client ? "its connection holds more chats than --max-held-per-client"
                            : "more chats are held than --max-held");
        front_req_free(f, x);
    }
}

void front_evict(front *f, front_req *r)
{
    log_info("chat session %016llx leaves worker pid %d between turns: a queued request needs the slot",
             (unsigned long long)r->sess, f->w[r->worker].pid);
    front_detach(f, r, 1);
}

/* Remembers the key of an ended session (a ring: the oldest is forgotten first). */
static void tomb_add(front *f, const front_req *r)
{
    if (!r->key[0]) return;
    int i = f->tomb_next;
    f->tomb_next = (i + 1) % FRONT_MAX_TOMBS;
    f->tombs[i].sess = r->sess;
    memcpy(f->tombs[i].key, r->key, sizeof f->tombs[i].key);
    f->tombs[i].ms = net_now_ms();
}

int front_tomb_refuses(const front *f, uint64_t sess, const proto_msg *m, int64_t now)
{
    for (int i = 0; i < FRONT_MAX_TOMBS; i++) {
        if (f->tombs[i].sess != sess || now - f->tombs[i].ms > FRONT_TOMB_MS) continue;
        front_req probe;
        memcpy(probe.key, f->tombs[i].key, sizeof probe.key);
        return !front_key_ok(&probe, m);
    }
    return 0;
}

void front_detach(front *f, front_req *r, int tell)
{
    if (r->worker < 0) return;
    if (tell) front_send_stop(f, r->worker, r->sess);
    if (f->w[r->worker].assigned > 0) f->w[r->worker].assigned--;
    r->worker = -1;
}

void front_req_free(front *f, front_req *r)
{
    front_detach(f, r, 1);
    tomb_add(f, r);
    for (front_req **p = &f->reqs; *p; p = &(*p)->next)
        if (*p == r) { *p = r->next; break; }
    free(r->toks);
    free(r->grammar);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    tok_stream_free(r->det);
    free(r->held);
    msgpack_sbuffer_destroy(&r->probs);
    free(r->pend);
    free(r);
}

void front_req_free_all(front *f)
{
    while (f->reqs) front_req_free(f, f->reqs);
}

static void drop_probs(front_req *r)
{
    r->n_pend = 0;
    r->probs.size = 0;
}

/* Sends n bytes of text with the log-prob entries whose text they complete (all the
 * pending entries when all is set); nothing when there is neither. */
static void send_piece_ex(front *f, front_req *r, const char *p, size_t n, int all)
{
    if (r->out_bytes < r->skip) { /* a resumed client has these bytes already */
        size_t drop = r->skip - r->out_bytes < n ? (size_t)(r->skip - r->out_bytes) : n;
        r->out_bytes += drop;
        p += drop;
        n -= drop;
    }
    r->out_bytes += n;
    int k = 0;
    while (k < r->n_pend && (all || r->pend[k].end <= r->out_bytes)) k++;
    if (!n && !k) return;
    pm_piece pc = {.text = {n ? p : "", n}, .ntok = (uint64_t)r->n_gen};
    proto_writer w;
    proto_begin(&w, PT_PIECE, r->client_id);
    pm_piece_put(&w, &pc); /* and the probs, packed below */
    if (k) {
        size_t bytes = r->pend[k - 1].off;
        proto_put_array_begin(&w, MF_PROBS, (uint32_t)k);
        msgpack_sbuffer_write(&w.buf, r->probs.data, bytes);
        memmove(r->probs.data, r->probs.data + bytes, r->probs.size - bytes);
        r->probs.size -= bytes;
        for (int i = k; i < r->n_pend; i++)
            r->pend[i - k] = (front_prob_ref){r->pend[i].end, r->pend[i].off - bytes};
        r->n_pend -= k;
    }
    front_send(f, r->rid, r->rid_len, &w);
}

static void send_piece(front *f, front_req *r, const char *p, size_t n)
{
    send_piece_ex(f, r, p, n, 0);
}

/* Queues the log-prob entry of token t from a PT_TOKEN (its "logprob" and "top", kinds
 * checked by proto_decode) until the text up to byte end has been sent. The token's
 * text is made valid UTF-8 (a partial character becomes U+FFFD). */
static void add_probs(front *f, front_req *r, int32_t t, const pm_token *tk, uint64_t end)
{
    const msgpack_object *top = tk->has_top ? tk->top : NULL;
    if (r->n_pend >= r->cap_pend) {
        int cap = r->cap_pend ? r->cap_pend * 2 : 16;
        front_prob_ref *x = realloc(r->pend, (size_t)cap * sizeof *x);
        if (!x) return;
        r->pend = x;
        r->cap_pend = cap;
    }
    char raw[256], text[sizeof raw * 3];
    int len = tok_piece(f->vocab, t, false, raw, sizeof raw);
    size_t rl = len < 0 ? 0 : (size_t)len > sizeof raw ? sizeof raw : (size_t)len, off = 0, tl = 0;
    while (off < rl) tl += (size_t)uni_encode(uni_decode(raw, rl, &off), text + tl);
    size_t before = r->probs.size;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r->probs, msgpack_sbuffer_write);
    pm_prob e = {.id = (uint64_t)t, .text = {text, tl}, .logprob = tk->logprob};
    int bad = pm_prob_pack(&pk, &e, top ? 1 : 0); /* and the top list, at most the sampler's maximum */
    if (top) {
        uint32_t k = top->via.array.size < SMP_MAX_PROBS ? top->via.array.size : SMP_MAX_PROBS;
        bad |= proto_pack_key(&pk, MF_TOP) | msgpack_pack_array(&pk, k);
        for (uint32_t i = 0; i < k; i++) bad |= msgpack_pack_object(&pk, top->via.array.ptr[i]);
    }
    if (bad) { /* out of memory: this entry is lost, the others stay whole */
        r->probs.size = before;
        return;
    }
    r->pend[r->n_pend++] = (front_prob_ref){end, r->probs.size};
}

void front_finish(front *f, front_req *r, const char *reason)
{
    if (strcmp(reason, "stop") != 0) {
        size_t n;
        const char *p = tok_stream_flush(r->det, &n);
        send_piece(f, r, r->held, r->held_len);
        send_piece_ex(f, r, p, n, 1); /* with every entry left */
    } else {
        size_t n;
        tok_stream_flush(r->det, &n);
    }
    r->held_len = 0;
    drop_probs(r); /* a stop string swallowed the tokens of the rest */
    if (getenv("LLM_TRACE_TOKENS")) {
        char *buf = malloc((size_t)r->n_toks * 8 + 1), *q = buf;
        for (int i = 0; buf && i < r->n_toks; i++) q += sprintf(q, " %d", r->toks[i]);
        if (buf) log_info("session %llu tokens:%s", (unsigned long long)r->sess, buf);
        free(buf);
    }
    pm_done d = {.reason = proto_sv_of(reason), .ntok_prompt = (uint64_t)r->n_prompt, .ntok = (uint64_t)r->n_gen,
                 .sess = r->sess, .has_sess = 1, .moves = (uint64_t)r->moves, .has_moves = 1};
    proto_writer w;
    proto_begin(&w, PT_DONE, r->client_id);
    pm_done_put(&w, &d);
    front_send(f, r->rid, r->rid_len, &w);
    f->served++;
    if (r->chat && r->worker >= 0) {
        front_hold(f, r);
    } else {
        front_req_free(f, r);
    }
}

void front_fail(front *f, front_req *r, errcode code, const char *msg)
{
    front_send_error(f, r->rid, r->rid_len, r->client_id, code, msg);
    f->failed++;
    front_req_free(f, r);
}

/* Appends text to r->held and sends what cannot be the start of a stop string;
 * returns 1 when a stop string was found (the request is then finished). */
static int emit_text(front *f, front_req *r, const char *p, size_t n)
{
    if (r->held_len + n + 1 > r->held_cap) {
        size_t cap = (r->held_len + n + 1) * 2;
        char *h = realloc(r->held, cap);
        if (!h) return 0;
        r->held = h;
        r->held_cap = cap;
    }
    memcpy(r->held + r->held_len, p, n);
    r->held_len += n;
    size_t cut = r->held_len, keep = 0;
    for (int i = 0; i < r->n_stops; i++) {
        const char *s = r->stops[i];
        size_t sl = strlen(s);
        for (size_t k = 0; k + sl <= r->held_len; k++)
            if (memcmp(r->held + k, s, sl) == 0) { if (k < cut) cut = k; break; }
        for (size_t l = sl - 1; l > keep; l--)
            if (l <= r->held_len && memcmp(r->held + r->held_len - l, s, l) == 0) { keep = l; break; }
    }
    if (cut < r->held_len) {
        send_piece(f, r, r->held, cut);
        r->held_len = 0;
        front_finish(f, r, "stop");
        return 1;
    }
    send_piece(f, r, r->held, r->held_len - keep);
    memmove(r->held, r->held + r->held_len - keep, keep);
    r->held_len = keep;
    return 0;
}

/* The text and end conditions of generated token t, already appended (r->n_gen counts
 * it); m: its TOKEN with log-probs, or NULL in a replay. 1 when the request finished. */
static int emit_token(front *f, front_req *r, int32_t t, const pm_token *m)
{
    /* samplerd's log-probs (params n_probs > 0): sent with the piece that carries the
     * token's text; a token without text (end of generation, a partial character)
     * goes with the next byte sent or the last piece */
    int probs = m && m->has_logprob;
    if (!r->ignore_eos && tok_is_eog(f->vocab, t)) {
        if (probs) add_probs(f, r, t, m, r->in_bytes + 1);
        front_finish(f, r, "eog");
        return 1;
    }
    size_t n;
    const char *p = tok_stream_push(r->det, t, &n);
    r->in_bytes += n;
    if (probs) add_probs(f, r, t, m, n ? r->in_bytes : r->in_bytes + 1);
    if (emit_text(f, r, p, n)) return 1;
    if (r->n_pend >= FRONT_MAX_PENDING_PROBS) send_piece_ex(f, r, NULL, 0, 1);
    if (r->n_gen >= r->n_predict) {
        front_finish(f, r, "length");
        return 1;
    }
    return 0;
}

int front_replay(front *f, front_req *r)
{
    tok_stream_free(r->det);
    r->det = tok_stream_new(f->vocab, TOK_STREAM_KEEP_SPACE);
    r->held_len = 0;
    drop_probs(r);
    r->in_bytes = r->out_bytes = 0;
    int n = r->n_gen;
    r->n_gen = 0;
    if (!r->det) {
        front_fail(f, r, ERR_INTERNAL, "front door out of memory");
        return 1;
    }
    while (r->n_gen < n) {
        r->n_gen++;
        if (emit_token(f, r, r->toks[r->n_prompt + r->n_gen - 1], NULL)) return 1;
    }
    return 0;
}

void front_embedding(front *f, int wi, const proto_msg *m)
{
    pm_embedding e;
    pm_embedding_get(m, &e);
    if (!e.has_sess || e.epoch != f->epoch) return; /* for an instance before a restart: the client resumes */
    front_req *r = front_find_sess(f, e.sess);
    if (!r || r->state != RQ_RUNNING || r->worker != wi || !r->embed) return; /* stale or not ours */
    if (e.vec.n == 0 || e.vec.n % sizeof(float) != 0) {
        front_fail(f, r, ERR_INTERNAL, "engine worker sent a malformed embedding");
        return;
    }
    pm_embedding out = {.vec = e.vec, .ntok = (uint64_t)r->n_prompt, .has_ntok = 1};
    proto_writer w;
    proto_begin(&w, PT_EMBEDDING, r->client_id);
    pm_embedding_put(&w, &out);
    front_send(f, r->rid, r->rid_len, &w);
    front_finish(f, r, "embed");
}

void front_token(front *f, int wi, const proto_msg *m)
{
    pm_token tk;
    pm_token_get(m, &tk);
    uint64_t sess = tk.sess, step = tk.step;
    if (tk.epoch != f->epoch) return; /* sent to the instance before a restart: the worker's report carries it */
    front_req *r = front_find_sess(f, sess);
    if (!r || r->state == RQ_QUEUED || (r->state == RQ_RUNNING && r->worker != wi)) {
        if (!r || r->worker != wi) front_send_stop(f, wi, sess); /* a session this worker should not run */
        return;
    }
    if (r->state != RQ_RUNNING || step != (uint64_t)r->n_gen) return; /* stale or repeated */
    if (tk.tok < 0 || tk.tok >= tok_n_vocab(f->vocab)) {
        front_fail(f, r, ERR_INTERNAL, "engine worker sent a token out of range");
        return;
    }
    if (r->n_toks >= r->cap) {
        int32_t *x = realloc(r->toks, (size_t)r->cap * 2 * sizeof *x);
        if (!x) {
            front_fail(f, r, ERR_INTERNAL, "front door out of memory");
            return;
        }
        r->toks = x;
        r->cap *= 2;
    }
    int32_t t = (int32_t)tk.tok;
    r->toks[r->n_toks++] = t;
    r->n_gen++;
    r->mu_set = tk.has_mu;
    r->mu = tk.mu;
    if (!r->attached) return; /* the text waits for its client's resume (a replay) */
    uint64_t sess_id = r->sess;
    int finished = emit_token(f, r, t, &tk);
    if (f->fault_at && !finished && r->n_gen >= f->fault_at &&
        (f->fault_kind == 0 || (f->fault_kind == 1 && r->held_len) ||
         (f->fault_kind == 2 && tok_stream_pending(r->det)))) {
        log_warn("test hook: exiting at token %d of session %016llx, %zu bytes held for a stop string, %zu bytes of "
                 "a partial character", r->n_gen, (unsigned long long)sess_id, r->held_len, tok_stream_pending(r->det));
        f->fault_exit = true; /* the loop exits, as kill -9 would, once this message's output is sent */
    }
}

void front_worker_error(front *f, int wi, const proto_msg *m)
{
    pm_error e;
    pm_error_get(m, &e);
    if (e.epoch != f->epoch) return; /* about a session of the instance before */
    front_req *r = front_find_sess(f, e.sess);
    if (!r || r->worker != wi) return;
    char end[32];
    proto_sv_copy(e.end, end, sizeof end);
    int ends = e.has_end && (!strcmp(end, "grammar") || !strcmp(end, "grammar_dead_end"));
    if (!r->attached && (e.full || ends) && r->state == RQ_RUNNING) {
        /* adopted, its client not back, and its context is full (or its grammar allows no
         * token): its resume replays the text, and the queue ends it (or runs it again,
         * which ends it again at the same token) */
        front_detach(f, r, 1);
        r->state = RQ_QUEUED;
        return;
    }
    if (!r->attached) { /* adopted, its client not back: a resume will start it again */
        front_req_free(f, r);
        return;
    }
    char msg[256], name[32];
    proto_sv_copy(e.msg, msg, sizeof msg);
    errcode code = errcode_from_name(proto_sv_copy(e.code, name, sizeof name));
    if (code == ERR_WORKER_FULL) {
        front_detach(f, r, 0);
        f->w[wi].cap = f->w[wi].assigned; /* no more, this one included, until its heartbeat says otherwise */
        r->state = RQ_QUEUED;
        return;
    }
    if (e.full && r->state == RQ_RUNNING) {
        front_finish(f, r, "context");
        return;
    }
    if (ends && r->state == RQ_RUNNING) { /* the grammar allows no further token */
        front_finish(f, r, end);
        return;
    }
    char out[300];
    if (code == ERR_UNAVAILABLE) { /* a daemon behind the worker is down (samplerd) */
        front_fail(f, r, ERR_UNAVAILABLE, msg);
        return;
    }
    snprintf(out, sizeof out, "engine: %s", msg);
    front_fail(f, r, ERR_INTERNAL, out);
}

void front_client_gone(front *f, const uint8_t *rid, size_t rl)
{
    if (!rl) return; /* no connection (an adopted request's): nothing closed */
    for (front_req *r = f->reqs; r; r = r->next)
        if (r->rid_len == rl && memcmp(r->rid, rid, rl) == 0) r->gone = true; /* held chats too */
}

int front_key_ok(const front_req *r, const proto_msg *m)
{
    size_t n;
    const char *k = proto_str(m, MF_KEY, &n);
    if (!k || n != FRONT_KEY_HEX) return 0;
    unsigned char diff = 0; /* the same time for every wrong key */
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(k[i] ^ r->key[i]);
    return diff == 0;
}

void front_client_msg(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    front_req *r = find_client(f, rid, rl, m->id);
    if (!r && proto_u64(m, MF_SESS, 0)) { /* a chat session between turns: its key, or nothing */
        r = front_find_sess(f, proto_u64(m, MF_SESS, 0));
        if (r && !front_key_ok(r, m)) r = NULL;
    }
    if (m->type == PT_CANCEL) {
        if (r) {
            log_info("session %llu cancelled by its client", (unsigned long long)r->sess);
            front_req_free(f, r);
        }
        return;
    }
    if (!r) {
        front_send_error(f, rid, rl, m->id, ERR_UNKNOWN_REQUEST,
                         "this front door holds no such request: it ended, was cancelled or refused, or the front door restarted");
        return;
    }
    r->client_ms = net_now_ms();
    proto_writer w;
    proto_begin(&w, PT_PONG, m->id);
    front_send(f, rid, rl, &w);
}

/* The record of a request its worker keeps (PT_RUN "fb", back in a PT_REPORT). */

void front_fb_pack(const front_req *r, msgpack_packer *pk)
{
    msgpack_pack_map(pk, 7);
    proto_pack_key(pk, MF_KEY); proto_pack_str(pk, r->key);
    proto_pack_key(pk, MF_NP); msgpack_pack_int32(pk, r->n_prompt);
    proto_pack_key(pk, MF_N); msgpack_pack_int32(pk, r->n_predict);
    proto_pack_key(pk, MF_CHAT); if (r->chat) msgpack_pack_true(pk); else msgpack_pack_false(pk);
    proto_pack_key(pk, MF_IE); if (r->ignore_eos) msgpack_pack_true(pk); else msgpack_pack_false(pk);
    proto_pack_key(pk, MF_SEED); msgpack_pack_uint32(pk, r->seed);
    proto_pack_key(pk, MF_STOP); msgpack_pack_array(pk, (size_t)r->n_stops);
    for (int i = 0; i < r->n_stops; i++) proto_pack_str(pk, r->stops[i]);
}

int front_fb_unpack(front_req *r, const msgpack_object *fb, int n_toks)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    int rc = -1;
    if (!fb || proto_wellformed(fb->via.bin.ptr, fb->via.bin.size, 4) != 0 ||
        msgpack_unpack_next(&up, fb->via.bin.ptr, fb->via.bin.size, &off) != MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        msgpack_unpacked_destroy(&up);
        return -1;
    }
    proto_msg v = { .map = &up.data.via.map };
    size_t kl;
    const char *key = proto_str(&v, MF_KEY, &kl);
    int64_t np = proto_i64(&v, MF_NP, -1), n = proto_i64(&v, MF_N, -1);
    const msgpack_object *stop = proto_field(&v, MF_STOP);
    if (key && kl == FRONT_KEY_HEX && np >= 1 && np <= n_toks && n >= 0 && stop && stop->type == MSGPACK_OBJECT_ARRAY &&
        stop->via.array.size <= FRONT_MAX_STOPS) {
        memcpy(r->key, key, kl);
        r->key[kl] = 0;
        r->n_prompt = (int)np;
        r->n_predict = (int)n;
        r->chat = proto_bool(&v, MF_CHAT, 0);
        r->ignore_eos = proto_bool(&v, MF_IE, 0);
        r->seed = (uint32_t)proto_u64(&v, MF_SEED, 0);
        rc = 0;
        for (uint32_t i = 0; i < stop->via.array.size; i++) {
            const msgpack_object *e = &stop->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_STR || !e->via.str.size || e->via.str.size > 256 ||
                !(r->stops[r->n_stops] = strndup(e->via.str.ptr, e->via.str.size))) {
                rc = -1;
                break;
            }
            r->n_stops++;
        }
    }
    msgpack_unpacked_destroy(&up);
    return rc;
}
