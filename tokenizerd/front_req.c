/*
 * front_req.c - the front door's requests: admission (parameters, chat template,
 * tokenize), dispatch to the least loaded worker, tokens -> UTF-8 pieces with stop
 * strings held back, completion, and re-dispatch when a worker dies. See front.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "log.h"
#include "sampler.h"
#include "unicode.h"

static front_req *find_sess(front *f, uint64_t sess)
{
    for (front_req *r = f->reqs; r; r = r->next)
        if (r->sess == sess) return r;
    return NULL;
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

static void send_stop(front *f, int wi, uint64_t sess)
{
    if (wi < 0 || !f->w[wi].live) return;
    proto_writer w;
    proto_begin(&w, PT_STOP, sess);
    proto_put_u64(&w, "sess", sess);
    front_send_worker(f, wi, &w);
}

/* Detaches r from its worker (telling the worker to drop the session). */
static void detach(front *f, front_req *r, int tell)
{
    if (r->worker < 0) return;
    if (tell) send_stop(f, r->worker, r->sess);
    if (f->w[r->worker].assigned > 0) f->w[r->worker].assigned--;
    r->worker = -1;
}

static void req_free(front *f, front_req *r)
{
    detach(f, r, 1);
    for (front_req **p = &f->reqs; *p; p = &(*p)->next)
        if (*p == r) { *p = r->next; break; }
    free(r->toks);
    free(r->params);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    tok_stream_free(r->det);
    free(r->held);
    msgpack_sbuffer_destroy(&r->probs);
    free(r->pend);
    free(r);
}

void front_req_free_all(front *f)
{
    while (f->reqs) req_free(f, f->reqs);
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
    r->out_bytes += n;
    int k = 0;
    while (k < r->n_pend && (all || r->pend[k].end <= r->out_bytes)) k++;
    if (!n && !k) return;
    proto_writer w;
    proto_begin(&w, PT_PIECE, r->client_id);
    proto_put_strn(&w, "text", n ? p : "", n);
    proto_put_u64(&w, "ntok", (uint64_t)r->n_gen);
    if (k) {
        size_t bytes = r->pend[k - 1].off;
        proto_put_array_begin(&w, "probs", (uint32_t)k);
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
static void add_probs(front *f, front_req *r, int32_t t, const proto_msg *m, uint64_t end)
{
    const msgpack_object *top = proto_field(m, "top");
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
    int bad = msgpack_pack_map(&pk, top ? 4 : 3);
    bad |= msgpack_pack_str(&pk, 2) | msgpack_pack_str_body(&pk, "id", 2) | msgpack_pack_int32(&pk, t);
    bad |= msgpack_pack_str(&pk, 4) | msgpack_pack_str_body(&pk, "text", 4) | msgpack_pack_str(&pk, tl) |
           msgpack_pack_str_body(&pk, text, tl);
    bad |= msgpack_pack_str(&pk, 7) | msgpack_pack_str_body(&pk, "logprob", 7) |
           msgpack_pack_double(&pk, proto_f64(m, "logprob", 0));
    if (top) {
        uint32_t k = top->via.array.size < SMP_MAX_PROBS ? top->via.array.size : SMP_MAX_PROBS;
        bad |= msgpack_pack_str(&pk, 3) | msgpack_pack_str_body(&pk, "top", 3) | msgpack_pack_array(&pk, k);
        for (uint32_t i = 0; i < k; i++) bad |= msgpack_pack_object(&pk, top->via.array.ptr[i]);
    }
    if (bad) { /* out of memory: this entry is lost, the others stay whole */
        r->probs.size = before;
        return;
    }
    r->pend[r->n_pend++] = (front_prob_ref){end, r->probs.size};
}

/* Ends the current generation: flushes text (unless a stop string cut it), sends DONE,
 * and frees the request, or keeps a chat session on its worker for the next turn. */
static void finish(front *f, front_req *r, const char *reason)
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
    proto_writer w;
    proto_begin(&w, PT_DONE, r->client_id);
    proto_put_str(&w, "reason", reason);
    proto_put_u64(&w, "ntok_prompt", (uint64_t)r->n_prompt);
    proto_put_u64(&w, "ntok", (uint64_t)r->n_gen);
    proto_put_u64(&w, "sess", r->sess);
    proto_put_u64(&w, "moves", (uint64_t)r->moves);
    front_send(f, r->rid, r->rid_len, &w);
    f->served++;
    if (r->chat && r->worker >= 0) {
        r->state = RQ_HELD;
        r->client_ms = net_now_ms();
    } else {
        req_free(f, r);
    }
}

static void fail(front *f, front_req *r, const char *msg)
{
    front_send_error(f, r->rid, r->rid_len, r->client_id, msg);
    f->failed++;
    req_free(f, r);
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
        finish(f, r, "stop");
        return 1;
    }
    send_piece(f, r, r->held, r->held_len - keep);
    memmove(r->held, r->held + r->held_len - keep, keep);
    r->held_len = keep;
    return 0;
}

void front_token(front *f, int wi, const proto_msg *m)
{
    uint64_t sess = proto_u64(m, "sess", 0), step = proto_u64(m, "step", 0);
    front_req *r = find_sess(f, sess);
    if (!r || r->state == RQ_QUEUED || (r->state == RQ_RUNNING && r->worker != wi)) {
        if (!r || r->worker != wi) {
            proto_writer w;
            proto_begin(&w, PT_STOP, sess);
            proto_put_u64(&w, "sess", sess);
            front_send_worker(f, wi, &w); /* a session this worker should not run */
        }
        return;
    }
    if (r->state != RQ_RUNNING || step != (uint64_t)r->n_gen) return; /* stale or repeated */
    int32_t t = (int32_t)proto_i64(m, "tok", -1);
    if (t < 0 || t >= tok_n_vocab(f->vocab)) {
        fail(f, r, "engine worker sent a token out of range");
        return;
    }
    if (r->n_toks >= r->cap) {
        int32_t *x = realloc(r->toks, (size_t)r->cap * 2 * sizeof *x);
        if (!x) {
            fail(f, r, "front door out of memory");
            return;
        }
        r->toks = x;
        r->cap *= 2;
    }
    r->toks[r->n_toks++] = t;
    r->n_gen++;
    r->mu_set = proto_field(m, "mu") != NULL;
    r->mu = proto_f64(m, "mu", 0);
    /* samplerd's log-probs (params n_probs > 0): sent with the piece that carries the
     * token's text; a token without text (end of generation, a partial character)
     * goes with the next byte sent or the last piece */
    int probs = proto_field(m, "logprob") != NULL;
    if (!r->ignore_eos && tok_is_eog(f->vocab, t)) {
        if (probs) add_probs(f, r, t, m, r->in_bytes + 1);
        finish(f, r, "eog");
        return;
    }
    size_t n;
    const char *p = tok_stream_push(r->det, t, &n);
    r->in_bytes += n;
    if (probs) add_probs(f, r, t, m, n ? r->in_bytes : r->in_bytes + 1);
    if (emit_text(f, r, p, n)) return;
    if (r->n_pend >= FRONT_MAX_PENDING_PROBS) send_piece_ex(f, r, NULL, 0, 1);
    if (r->n_gen >= r->n_predict) finish(f, r, "length");
}

void front_worker_error(front *f, int wi, const proto_msg *m)
{
    front_req *r = find_sess(f, proto_u64(m, "sess", 0));
    if (!r || r->worker != wi) return;
    char msg[256];
    proto_strcpy(m, "msg", msg, sizeof msg);
    if (strstr(msg, "worker is full")) {
        f->w[wi].cap = f->w[wi].assigned; /* no more until its heartbeat says otherwise */
        detach(f, r, 0);
        r->state = RQ_QUEUED;
        return;
    }
    if (proto_bool(m, "full", 0) && r->state == RQ_RUNNING) {
        finish(f, r, "context");
        return;
    }
    char out[300];
    snprintf(out, sizeof out, "engine: %s", msg);
    fail(f, r, out);
}

static void send_run(front *f, front_req *r, int wi)
{
    proto_writer w;
    proto_begin(&w, PT_RUN, r->sess);
    proto_put_u64(&w, "sess", r->sess);
    proto_put_ints(&w, "toks", r->toks, (size_t)r->n_toks);
    proto_put_u64(&w, "step", (uint64_t)r->n_gen);
    proto_put_u64(&w, "budget", (uint64_t)(r->n_predict - r->n_gen));
    proto_put_raw(&w, "params", r->params, r->params_len);
    proto_put_u64(&w, "epoch", f->epoch);
    if (!r->ignore_eos) proto_put_ints(&w, "eog", f->eog, (size_t)f->n_eog);
    if (r->mu_set) proto_put_f64(&w, "mu", r->mu);
    front_send_worker(f, wi, &w);
    r->worker = wi;
    r->worker_wid = f->w[wi].wid;
    r->state = RQ_RUNNING;
    f->w[wi].assigned++;
}

/* The live worker with the fewest sessions and room for one more, or -1. */
static int pick_worker(const front *f)
{
    int best = -1;
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        const front_worker *w = &f->w[i];
        if (!w->live || w->assigned >= w->cap) continue;
        if (best < 0 || w->assigned < f->w[best].assigned) best = i;
    }
    return best;
}

void front_requeue_worker(front *f, int wi)
{
    for (front_req *r = f->reqs; r; r = r->next) {
        if (r->worker != wi) continue;
        detach(f, r, 0);
        if (r->state == RQ_RUNNING) {
            r->state = RQ_QUEUED;
            r->queued_ms = net_now_ms();
            r->moves++;
            log_info("session %llu: re-dispatching at step %d (%d tokens to re-prefill)",
                     (unsigned long long)r->sess, r->n_gen, r->n_toks);
        }
    }
}

void front_tick(front *f, int64_t now)
{
    front_req *next;
    for (front_req *r = f->reqs; r; r = next) {
        next = r->next;
        if (r->state == RQ_HELD) {
            if (now - r->client_ms > FRONT_CHAT_IDLE_MS) req_free(f, r);
            continue;
        }
        if (r->gone || now - r->client_ms > FRONT_CLIENT_TIMEOUT_MS) {
            if (r->gone) log_info("session %llu: client disconnected at step %d; freeing the session",
                                  (unsigned long long)r->sess, r->n_gen);
            else log_info("session %llu: client silent for %lld ms; freeing the session", (unsigned long long)r->sess,
                          (long long)(now - r->client_ms));
            f->failed++;
            req_free(f, r);
            continue;
        }
        if (r->state != RQ_QUEUED) continue;
        int wi = pick_worker(f);
        if (wi >= 0) send_run(f, r, wi);
        else if (now - r->queued_ms > FRONT_QUEUE_TIMEOUT_MS)
            fail(f, r, "no engine worker available (is engined running? see 'llmc status')");
    }
}

/* Validates the parameters, resolves the seed once, and packs them for the wire. */
static int pack_params(front *f, front_req *r, const proto_msg *m, char *err, size_t errcap)
{
    smp_params p = smp_params_default();
    const msgpack_object *o = proto_field(m, "params");
    uint32_t n = o ? o->via.map.size : 0;
    char k[64], v[1024];
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object_str *ks = &o->via.map.ptr[i].key.via.str, *vs = &o->via.map.ptr[i].val.via.str;
        if (ks->size >= sizeof k || vs->size >= sizeof v) {
            snprintf(err, errcap, "parameter name or value too long");
            return -1;
        }
        memcpy(k, ks->ptr, ks->size); k[ks->size] = 0;
        memcpy(v, vs->ptr, vs->size); v[vs->size] = 0;
        if (smp_param_set(&p, k, v, err, errcap) != 0) return -1;
    }
    if (smp_params_validate(&p, tok_n_vocab(f->vocab), err, errcap) != 0) return -1;
    r->ignore_eos = p.ignore_eos;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n + 1);
    for (uint32_t i = 0; i < n; i++) {
        msgpack_pack_object(&pk, o->via.map.ptr[i].key);
        const msgpack_object_str *ks = &o->via.map.ptr[i].key.via.str;
        if (ks->size == 4 && memcmp(ks->ptr, "seed", 4) == 0) proto_pack_str(&pk, "-1"); /* superseded below */
        else msgpack_pack_object(&pk, o->via.map.ptr[i].val);
    }
    /* the last "seed" wins in smp_param_set order: the resolved one is written last */
    snprintf(v, sizeof v, "%u", smp_seed_resolve(p.seed));
    proto_pack_str(&pk, "seed");
    proto_pack_str(&pk, v);
    r->params = (uint8_t *)sb.data;
    r->params_len = sb.size;
    return 0;
}

/* The text to tokenize: the prompt, or the chat messages through the template. */
/* The text to tokenize: the raw prompt, or the rendered chat. For a chat, *spans gets
 * the byte ranges of the message contents (caller frees), so that control-token text a
 * user typed is tokenized as text, not as <|im_start|> and friends. */
static char *request_text(front *f, const proto_msg *m, bool chat, tok_span **spans, size_t *n_spans,
                          char *err, size_t errcap)
{
    *spans = NULL;
    *n_spans = 0;
    if (!chat) {
        size_t n;
        const char *p = proto_str(m, "prompt", &n);
        if (!p) {
            snprintf(err, errcap, "GENERATE needs a 'prompt' string (or chat 'msgs')");
            return NULL;
        }
        return strndup(p, n);
    }
    if (f->tmpl == CHAT_TMPL_UNKNOWN) {
        snprintf(err, errcap, "model %.120s has no chat template this front door knows (start tokenizerd with "
                              "--chat-template NAME)", f->model);
        return NULL;
    }
    const msgpack_object *o = proto_field(m, "msgs");
    if (!o || o->via.array.size == 0 || o->via.array.size % 2 || o->via.array.size > 512) {
        snprintf(err, errcap, "chat needs 'msgs' as role, content pairs (1 to 256 messages)");
        return NULL;
    }
    size_t nm = o->via.array.size / 2;
    chat_msg *cm = calloc(nm, sizeof *cm);
    char **own = calloc(nm * 2, sizeof *own);
    char *out = NULL;
    if (cm && own) {
        for (size_t i = 0; i < nm * 2; i++)
            own[i] = strndup(o->via.array.ptr[i].via.str.ptr, o->via.array.ptr[i].via.str.size);
        for (size_t i = 0; i < nm; i++) cm[i] = (chat_msg){own[2 * i], own[2 * i + 1]};
        if (chat_render_spans(f->tmpl, cm, nm, true, &out, spans, n_spans, err, errcap) != 0) out = NULL;
        for (size_t i = 0; i < nm * 2; i++) free(own[i]);
    }
    free(cm);
    free(own);
    return out;
}

static int set_stops(front_req *r, const proto_msg *m, char *err, size_t errcap)
{
    const msgpack_object *o = proto_field(m, "stop");
    if (!o) return 0;
    if (o->via.array.size > FRONT_MAX_STOPS) {
        snprintf(err, errcap, "at most %d stop strings", FRONT_MAX_STOPS);
        return -1;
    }
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object_str *s = &o->via.array.ptr[i].via.str;
        if (s->size == 0 || s->size > 256 || memchr(s->ptr, 0, s->size)) {
            snprintf(err, errcap, "stop strings must be 1 to 256 bytes without NUL");
            return -1;
        }
        r->stops[r->n_stops++] = strndup(s->ptr, s->size);
    }
    return 0;
}

void front_generate(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    char err[300] = "";
    bool chat = proto_bool(m, "chat", 0);
    uint64_t cont = proto_u64(m, "sess", 0);
    front_req *r = cont ? find_sess(f, cont) : NULL;
    if (r && (r->state != RQ_HELD || !r->chat)) {
        front_send_error(f, rid, rl, m->id, "that chat session is busy");
        return;
    }
    int fresh = !r;
    if (fresh) {
        r = calloc(1, sizeof *r);
        if (!r) { front_send_error(f, rid, rl, m->id, "front door out of memory"); return; }
        r->sess = ++f->next_sess;
        r->worker = -1;
        r->next = f->reqs;
        f->reqs = r;
        r->det = tok_stream_new(f->vocab, TOK_STREAM_KEEP_SPACE);
    } else {
        free(r->params);
        r->params = NULL;
        for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
        r->n_stops = 0;
    }
    r->chat = chat;
    r->client_id = m->id;
    memcpy(r->rid, rid, rl);
    r->rid_len = rl;
    r->client_ms = r->queued_ms = net_now_ms();
    r->n_gen = 0;
    r->gone = false;
    r->mu_set = false;
    r->held_len = 0;
    drop_probs(r);
    r->in_bytes = r->out_bytes = 0;
    char *text = NULL;
    tok_span *spans = NULL;
    size_t n_spans = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int64_t n_predict = proto_i64(m, "n", -1);
    if (!r->det || pack_params(f, r, m, err, sizeof err) != 0 || set_stops(r, m, err, sizeof err) != 0 ||
        !(text = request_text(f, m, chat, &spans, &n_spans, err, sizeof err)) ||
        (chat ? tok_encode_guarded(f->vocab, text, strlen(text), true, spans, n_spans, &ids, &n_ids, err,
                                   sizeof err)
              : tok_encode(f->vocab, text, strlen(text), true, false, &ids, &n_ids, err, sizeof err)) != 0) {
        free(text);
        free(spans);
        log_info("request %llu refused: %s", (unsigned long long)m->id, err);
        fail(f, r, err[0] ? err : "out of memory");
        return;
    }
    free(text);
    free(spans);
    if (n_ids == 0) {
        free(ids);
        fail(f, r, "the prompt is empty after tokenization");
        return;
    }
    if (n_predict < 0 || n_predict > (1 << 20)) n_predict = 1 << 20; /* until EOG or the context is full */
    size_t cap = n_ids + (n_predict < 1024 ? (size_t)n_predict : 1024) + 1; /* grows in front_token */
    free(r->toks);
    r->toks = malloc(cap * sizeof *r->toks);
    if (!r->toks) { free(ids); fail(f, r, "front door out of memory"); return; }
    memcpy(r->toks, ids, n_ids * sizeof *ids);
    free(ids);
    r->n_toks = r->n_prompt = (int)n_ids;
    r->cap = (int)cap;
    r->n_predict = (int)n_predict;
    proto_writer w;
    proto_begin(&w, PT_ACCEPTED, m->id);
    proto_put_u64(&w, "ntok", (uint64_t)n_ids);
    proto_put_u64(&w, "sess", r->sess);
    front_send(f, rid, rl, &w);
    if (n_predict == 0) {
        finish(f, r, "length");
        return;
    }
    int wi = r->worker >= 0 && f->w[r->worker].live ? r->worker : -1;
    if (wi >= 0) { /* a chat turn stays where its KV cache is */
        f->w[wi].assigned--;
        r->worker = -1;
        send_run(f, r, wi);
    } else {
        r->state = RQ_QUEUED;
        front_tick(f, net_now_ms());
    }
}

void front_client_gone(front *f, const uint8_t *rid, size_t rl)
{
    for (front_req *r = f->reqs; r; r = r->next)
        if (r->rid_len == rl && memcmp(r->rid, rid, rl) == 0 && r->state != RQ_HELD) r->gone = true;
}

void front_client_msg(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    front_req *r = find_client(f, rid, rl, m->id);
    if (!r && proto_u64(m, "sess", 0)) r = find_sess(f, proto_u64(m, "sess", 0));
    if (m->type == PT_CANCEL) {
        if (r) {
            log_info("session %llu cancelled by its client", (unsigned long long)r->sess);
            req_free(f, r);
        }
        return;
    }
    if (!r) {
        front_send_error(f, rid, rl, m->id, "this front door does not know the request (tokenizerd was "
                                            "restarted?); run it again");
        return;
    }
    r->client_ms = net_now_ms();
    proto_writer w;
    proto_begin(&w, PT_PONG, m->id);
    front_send(f, rid, rl, &w);
}
