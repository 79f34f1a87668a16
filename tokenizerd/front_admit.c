/*
 * front_admit.c - the front door's admission of a PT_GENERATE: caps (total and per
 * connection), sampler parameters validated and resolved once (seed included) into
 * their wire form, stop strings, the chat template, tokenization, the context check,
 * then the FIFO queue. Every refusal is one ERROR naming what was wrong, with a code
 * (front.h) the HTTP gateway maps to a status. Parked resumes are admitted again here
 * (front_readmit). The layer above adoption (front_adopt.c: resumes and parking) and
 * the queue; below the message switch (frontd.c). See front.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "front.h"
#include "gram.h"
#include "log.h"
#include "errcode.h"

/* A fresh random session id and key (128 bits, hex). */
static void new_identity(front_req *r)
{
    uint8_t b[8 + FRONT_KEY_HEX / 2];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n > 0) got += (size_t)n;
        else if (errno != EINTR) LLM_ASSERT(!"getrandom failed"); /* no safe key without it */
    }
    memcpy(&r->sess, b, 8);
    r->sess |= 1; /* never 0, which means "none" on the wire */
    for (int i = 0; i < FRONT_KEY_HEX / 2; i++) snprintf(r->key + 2 * i, 3, "%02x", b[8 + i]);
}

/* Validates the parameters (llama.cpp names -> strings), resolves the seed once, and
 * keeps their wire form: workers and samplerd never parse them again. */
static int pack_params(front *f, front_req *r, const proto_msg *m, char *err, size_t errcap)
{
    smp_params p = smp_params_default();
    const msgpack_object *o = proto_field(m, MF_PARAMS);
    uint32_t n = o ? o->via.map.size : 0;
    char k[64], v[1024];
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object_str *ks = &o->via.map.ptr[i].key.via.str, *vs = &o->via.map.ptr[i].val.via.str;
        if (ks->size >= sizeof k || vs->size >= sizeof v) {
            return errf(err, errcap, "parameter name or value too long (%u bytes)", ks->size >= sizeof k ? ks->size : vs->size);
        }
        memcpy(k, ks->ptr, ks->size); k[ks->size] = 0;
        memcpy(v, vs->ptr, vs->size); v[vs->size] = 0;
        if (smp_param_set(&p, k, v, err, errcap) != 0) return -1;
    }
    p.seed = smp_seed_resolve(p.seed);
    r->seed = p.seed;
    if (smp_params_validate(&p, tok_n_vocab(f->vocab), err, errcap) != 0) return -1;
    r->ignore_eos = p.ignore_eos;
    r->sp_len = smp_params_to_wire(&p, r->sp);
    return 0;
}

/* The strings of a STRS field as NUL-terminated copies (*n of them; NULL and *n 0 when
 * absent); free with free_strs. */
static char **dup_strs(const proto_msg *m, proto_field_id id, size_t *n)
{
    const msgpack_object *o = proto_field(m, id);
    *n = o ? o->via.array.size : 0;
    char **v = calloc(*n + 1, sizeof *v);
    for (size_t i = 0; v && i < *n; i++)
        if (!(v[i] = strndup(o->via.array.ptr[i].via.str.ptr, o->via.array.ptr[i].via.str.size))) *n = i;
    return v;
}

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* The tool calls and results of "tcalls" (message index, id, name, arguments; a result
 * has an empty name) as chat_calls pointing into tc; -1 with err when malformed. */
static int tool_calls(char **tc, size_t n, size_t n_msgs, chat_call *out, char *err, size_t errcap)
{
    if (n % 4 || n / 4 > 2 * FRONT_MAX_MSGS)
        return errf(err, errcap, "tcalls: 4 strings per tool call (index, id, name, arguments), at most %d calls",
                    2 * FRONT_MAX_MSGS);
    for (size_t k = 0; k < n / 4; k++) {
        char *end;
        unsigned long i = strtoul(tc[4 * k], &end, 10);
        if (!tc[4 * k][0] || *end || i >= n_msgs) return errf(err, errcap, "tcalls: call %zu names no message", k);
        out[k] = (chat_call){.msg = i, .id = tc[4 * k + 1], .name = tc[4 * k + 2][0] ? tc[4 * k + 2] : NULL,
                             .args = tc[4 * k + 3]};
    }
    return 0;
}

/* The chat messages (with tools and tool calls) through the model's template. */
static char *render_chat(front *f, const proto_msg *m, tok_span **spans, size_t *n_spans, char *err, size_t errcap)
{
    size_t n, nt, nc;
    char **own = dup_strs(m, MF_MSGS, &n), **tools = dup_strs(m, MF_TOOLS, &nt), **tc = dup_strs(m, MF_TCALLS, &nc);
    chat_msg *cm = calloc(n / 2 + 1, sizeof *cm);
    chat_call *calls = calloc(nc / 4 + 1, sizeof *calls);
    char *out = NULL;
    if (!own || !tools || !tc || !cm || !calls) {
        errf(err, errcap, "out of memory");
    } else if (n == 0 || n % 2 || n > 2 * FRONT_MAX_MSGS) {
        errf(err, errcap, "chat needs 'msgs' as role, content pairs (1 to %d messages)", FRONT_MAX_MSGS);
    } else if (nt > FRONT_MAX_TOOLS) {
        errf(err, errcap, "tools: at most %d", FRONT_MAX_TOOLS);
    } else if (tool_calls(tc, nc, n / 2, calls, err, errcap) == 0) {
        for (size_t i = 0; i < n / 2; i++) cm[i] = (chat_msg){own[2 * i], own[2 * i + 1]};
        chat_tools tl = {.tools = (const char *const *)tools, .n_tools = nt, .calls = calls, .n_calls = nc / 4,
                         .default_system = f->tmpl_system};
        if (chat_render_tools(f->tmpl, cm, n / 2, &tl, true, &out, spans, n_spans, err, errcap) != 0) out = NULL;
    }
    free_strs(own, n);
    free_strs(tools, nt);
    free_strs(tc, nc);
    free(cm);
    free(calls);
    return out;
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
        const char *p = proto_str(m, MF_PROMPT, &n);
        if (!p) {
            errf(err, errcap, "GENERATE needs a 'prompt' string (or chat 'msgs')");
            return NULL;
        }
        return strndup(p, n);
    }
    if (f->tmpl == CHAT_TMPL_UNKNOWN) {
        errf(err, errcap, "model %.120s has no chat template this front door knows (start tokenizerd with "
                              "--chat-template NAME)", f->model);
        return NULL;
    }
    return render_chat(f, m, spans, n_spans, err, errcap);
}

static int set_stops(front_req *r, const proto_msg *m, char *err, size_t errcap)
{
    const msgpack_object *o = proto_field(m, MF_STOP);
    if (!o) return 0;
    if (o->via.array.size > FRONT_MAX_STOPS) {
        return errf(err, errcap, "at most %d stop strings", FRONT_MAX_STOPS);
    }
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object_str *s = &o->via.array.ptr[i].via.str;
        if (s->size == 0 || s->size > 256 || memchr(s->ptr, 0, s->size)) {
            return errf(err, errcap, "stop strings must be 1 to 256 bytes without NUL");
        }
        r->stops[r->n_stops++] = strndup(s->ptr, s->size);
    }
    return 0;
}

/* The request's grammar (structured output), compiled once here so that one that does
 * not compile is refused with the problem named, never run unconstrained. */
static int set_grammar(front_req *r, const proto_msg *m, char *err, size_t errcap)
{
    size_t n;
    const char *g = proto_str(m, MF_GRAMMAR, &n);
    free(r->grammar);
    r->grammar = NULL;
    r->grammar_len = 0;
    if (!g) return 0;
    if (n > PROTO_MAX_GRAMMAR) return errf(err, errcap, "grammar: %zu bytes, the limit is %u", n, PROTO_MAX_GRAMMAR);
    char gerr[200];
    gram *c = gram_compile(g, n, gerr, sizeof gerr);
    if (!c) return errf(err, errcap, "grammar: %s", gerr);
    gram_free(c);
    if (!(r->grammar = malloc(n + 1))) return errf(err, errcap, "out of memory");
    memcpy(r->grammar, g, n);
    r->grammar[n] = 0;
    r->grammar_len = n;
    return 0;
}

static void unlink_req(front *f, front_req *r)
{
    for (front_req **p = &f->reqs; *p; p = &(*p)->next)
        if (*p == r) { *p = r->next; return; }
}

/* A client-given session key: FRONT_KEY_HEX lowercase hex digits. */
static int key_valid(const proto_msg *m)
{
    size_t n;
    const char *k = proto_str(m, MF_KEY, &n);
    if (!k || n != FRONT_KEY_HEX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f'))) return 0;
    return 1;
}

/* Which request a GENERATE is: the held chat session it continues (returned), or a new
 * one (NULL with *admit set). *admit is 0 when the GENERATE was answered here: a resume
 * of a session this front door holds, parked, or refused. */
static front_req *route(front *f, const uint8_t *rid, size_t rl, const proto_msg *m, int *admit)
{
    uint64_t cont = proto_u64(m, MF_SESS, 0), resume = proto_u64(m, MF_RESUME, 0);
    *admit = 0;
    if (resume) { /* a client back after a restart of the front door */
        if (!key_valid(m)) {
            front_send_error(f, rid, rl, m->id, ERR_INVALID, "resume needs the session's key");
            return NULL;
        }
        if (front_resume(f, rid, rl, m) != 0) return NULL;
        if (front_tomb_refuses(f, resume, m, net_now_ms())) { /* it ended here, under another key */
            front_send_error(f, rid, rl, m->id, ERR_UNKNOWN_SESSION, "resume: unknown session (or not yours)");
            return NULL;
        }
        *admit = 1; /* unknown here: admitted anew under its id and key, its text skipped */
        return NULL;
    }
    front_req *r = cont ? front_find_sess(f, cont) : NULL;
    if (cont && !r && key_valid(m) && front_park(f, rid, rl, m) != 0)
        return NULL; /* the front door just started: its worker may not have reported it yet */
    if (cont && (!r || !front_key_ok(r, m))) {
        front_send_error(f, rid, rl, m->id, ERR_UNKNOWN_SESSION, "unknown chat session (ended, expired, or not yours)");
        return NULL;
    }
    if (r && (r->state != RQ_HELD || !r->chat)) {
        front_send_error(f, rid, rl, m->id, ERR_INVALID, "that chat session is busy");
        return NULL;
    }
    *admit = 1;
    return r;
}

/* 1 (answered with queue_full) when the front door or this connection is at its cap. */
static int over_limits(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    int all, mine;
    front_load(f, rid, rl, &all, &mine, NULL, NULL);
    if (all < f->lim.max_requests && mine < f->lim.max_per_client) return 0;
    char err[200];
    errf(err, sizeof err, all >= f->lim.max_requests
         ? "the front door is full: %d requests running or queued (tokenizerd --max-requests); try again later"
         : "this connection has %d requests running or queued (tokenizerd --max-per-client); try again later",
         all >= f->lim.max_requests ? all : mine);
    pm_error e = {.msg = proto_sv_of(err), .code = proto_sv_of(errcode_name(ERR_FULL)), .has_code = 1,
                  .retry_ms = 1000, .has_retry_ms = 1};
    proto_writer w;
    proto_begin(&w, PT_ERROR, m->id);
    pm_error_put(&w, &e);
    front_send(f, rid, rl, &w);
    return 1;
}

/* The record of this generation: a new request (a resume from scratch keeps its id, key
 * and the bytes its client has), or chat session r's next turn, queued behind what came
 * before it; its per-generation state reset. NULL when out of memory (answered). */
static front_req *take_request(front *f, front_req *r, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    uint64_t resume = proto_u64(m, MF_RESUME, 0);
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) { front_send_error(f, rid, rl, m->id, ERR_INTERNAL, "front door out of memory"); return NULL; }
        new_identity(r);
        if (resume) {
            r->sess = resume;
            memcpy(r->key, proto_str(m, MF_KEY, NULL), FRONT_KEY_HEX);
            r->key[FRONT_KEY_HEX] = 0;
            r->skip = proto_u64(m, MF_RBYTES, 0);
        }
        r->worker = -1;
        front_req_append(f, r);
        r->det = tok_stream_new(f->vocab, TOK_STREAM_KEEP_SPACE);
    } else {
        for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
        r->n_stops = 0;
        unlink_req(f, r);
        front_req_append(f, r);
    }
    r->chat = proto_bool(m, MF_CHAT, 0);
    r->attached = true;
    if (!resume) r->skip = 0;
    r->client_id = m->id;
    memcpy(r->rid, rid, rl);
    r->rid_len = rl;
    r->client_ms = r->queued_ms = net_now_ms();
    r->n_gen = 0;
    r->gone = false;
    r->mu_set = false;
    r->held_len = 0;
    r->n_pend = 0;
    r->probs.size = 0;
    r->in_bytes = r->out_bytes = 0;
    return r;
}

/* A prompt given as token ids ("toks"), checked against the vocabulary (caller frees);
 * NULL with err. */
static int32_t *given_tokens(front *f, const proto_msg *m, size_t *n_ids, char *err, size_t errcap)
{
    const msgpack_object *t = proto_field(m, MF_TOKS);
    size_t n = t->via.array.size;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) { errf(err, errcap, "out of memory"); return NULL; }
    long got = proto_ints(m, MF_TOKS, ids, n);
    for (size_t i = 0; got == (long)n && i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(f->vocab)) {
            errf(err, errcap, "toks[%zu]: token id %d is not in the vocabulary (0 to %d)", i, (int)ids[i],
                 (int)tok_n_vocab(f->vocab) - 1);
            got = -1;
        }
    if (got != (long)n || n == 0) {
        if (!err[0]) errf(err, errcap, "toks: an empty or malformed list of token ids");
        free(ids);
        return NULL;
    }
    *n_ids = n;
    return ids;
}

/* The prompt's tokens (caller frees), with r's parameters and stop strings set; NULL
 * with err when something in the request is wrong. */
static int32_t *tokenize_request(front *f, front_req *r, const proto_msg *m, size_t *n_ids, char *err, size_t errcap)
{
    char *text = NULL;
    tok_span *spans = NULL;
    size_t n_spans = 0;
    int32_t *ids = NULL;
    *n_ids = 0;
    if (proto_field(m, MF_TOKS) && !r->chat) /* token ids instead of text */
        return !r->det || pack_params(f, r, m, err, errcap) != 0 || set_stops(r, m, err, errcap) != 0 ||
                       set_grammar(r, m, err, errcap) != 0 ? NULL : given_tokens(f, m, n_ids, err, errcap);
    if (!r->det || pack_params(f, r, m, err, errcap) != 0 || set_stops(r, m, err, errcap) != 0 ||
        set_grammar(r, m, err, errcap) != 0 ||
        !(text = request_text(f, m, r->chat, &spans, &n_spans, err, errcap)) ||
        (r->chat ? tok_encode_guarded(f->vocab, text, strlen(text), true, spans, n_spans, &ids, n_ids, err, errcap)
                 : tok_encode(f->vocab, text, strlen(text), true, false, &ids, n_ids, err, errcap)) != 0) {
        if (!err[0]) errf(err, errcap, "out of memory");
        ids = NULL;
    } else if (*n_ids == 0) {
        errf(err, errcap, "the prompt is empty after tokenization");
        free(ids);
        ids = NULL;
    }
    free(text);
    free(spans);
    return ids;
}

/* Makes ids r's prompt; fails r (answered) when no worker's context holds it. */
static int set_prompt(front *f, front_req *r, int32_t *ids, size_t n_ids, int64_t n_predict)
{
    int ctx = front_ctx_max(f);
    if (ctx && n_ids >= (size_t)ctx) { /* refused before any message is built for a worker */
        char err[200];
        errf(err, sizeof err, "the prompt is %zu tokens; the context holds %d (engined --ctx), and at least one "
             "token must be generated", n_ids, ctx);
        log_info("request %llu refused: %s", (unsigned long long)r->client_id, err);
        front_fail(f, r, ERR_CONTEXT, err);
        return -1;
    }
    size_t cap = n_ids + (n_predict < 1024 ? (size_t)n_predict : 1024) + 1; /* grows in front_token */
    free(r->toks);
    r->toks = malloc(cap * sizeof *r->toks);
    if (!r->toks) { front_fail(f, r, ERR_INTERNAL, "front door out of memory"); return -1; }
    memcpy(r->toks, ids, n_ids * sizeof *ids);
    r->n_toks = r->n_prompt = (int)n_ids;
    r->cap = (int)cap;
    r->n_predict = (int)n_predict;
    return 0;
}

/* Queues r (a chat turn goes back to its worker, where its KV cache is) and answers
 * ACCEPTED with its session, key, seed and queue position. */
static void start(front *f, front_req *r, const uint8_t *rid, size_t rl)
{
    if (r->n_predict > 0) {
        int wi = r->worker >= 0 && f->w[r->worker].live && !f->w[r->worker].stalled ? r->worker : -1;
        front_detach(f, r, 0);
        r->state = RQ_QUEUED;
        if (wi >= 0) front_dispatch(f, r, wi);
        else front_tick(f, net_now_ms());
    }
    front_send_accepted(f, rid, rl, r->client_id, r);
    if (r->n_predict == 0) front_finish(f, r, "length");
}

void front_generate(front *f, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    int admit;
    front_req *r = route(f, rid, rl, m, &admit);
    if (!admit || over_limits(f, rid, rl, m) || !(r = take_request(f, r, rid, rl, m))) return;
    char err[300] = "";
    uint64_t embed = proto_u64(m, MF_EMBED, 0);
    if (embed >= PROTO_POOL_COUNT || (embed && (r->chat || r->n_toks))) {
        front_fail(f, r, ERR_INVALID, embed >= PROTO_POOL_COUNT ? "embed: unknown pooling (1: mean, 2: last)"
                                                                : "embed: not for a chat session");
        return;
    }
    r->embed = (int)embed;
    size_t n_ids;
    int32_t *ids = tokenize_request(f, r, m, &n_ids, err, sizeof err);
    if (!ids) {
        log_info("request %llu refused: %s", (unsigned long long)m->id, err);
        front_fail(f, r, ERR_INVALID, err);
        return;
    }
    int64_t n_predict = proto_i64(m, MF_N, -1);
    if (n_predict < 0 || n_predict > (1 << 20)) n_predict = 1 << 20; /* until EOG or the context is full */
    if (r->embed) n_predict = 1; /* dispatched as one; its worker answers with the vector */
    int rc = set_prompt(f, r, ids, n_ids, n_predict);
    free(ids);
    if (rc == 0) start(f, r, rid, rl);
}

void front_readmit(front *f, int64_t now)
{
    front_parked p;
    for (int i = 0; front_unpark(f, now, &i, &p);) {
        front_generate(f, p.rid, p.rid_len, &p.m);
        proto_msg_free(&p.m);
    }
}
