/* gw_job.c - a generation request between the bridge and its HTTP connection (see gw_job.h). */
#include "gw_job.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "conn.h"
#include "errcode.h"
#include "log.h"

int64_t gwj_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A job with n choices (zeroed), or NULL. */
static gwj *job_alloc(int n)
{
    gwj *j = calloc(1, sizeof *j);
    gwj_choice *ch = j ? calloc((size_t)n, sizeof *ch) : NULL;
    if (!ch) {
        free(j);
        return NULL;
    }
    j->ch = ch;
    j->n_ch = n;
    return j;
}

gwj *gwj_new(oai_req *req, gwm_ep ep, uint64_t id, const char *model, oai_text_fn text_fn, void *text_cls,
             gwm *metrics, int64_t t0_us)
{
    gwj *j = job_alloc(req->n_choices > 1 ? req->n_choices : 1);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->id = id;
    j->ep = ep;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->metrics = metrics;
    j->fd = -1;
    j->t0_us = t0_us;
    long long now = (long long)time(NULL);
    for (int i = 0; i < j->n_ch; i++) {
        gwj_choice *c = &j->ch[i];
        c->j = j;
        c->idx = i;
        c->id = id;
        oai_out_init(&c->out, &j->req, model, now, id);
        c->out.text_fn = text_fn;
        c->out.text_cls = text_cls;
        c->out.index = i;
        if (i) memcpy(c->out.id, j->ch[0].out.id, sizeof c->out.id); /* one response id */
        if (j->req.echo && !j->req.stream && j->req.prompt) oai_add(&c->out, j->req.prompt, strlen(j->req.prompt), NULL, 0);
        for (int k = 0; k < j->req.n_params; k++) { /* seed + i: each choice samples its own text */
            c->pv[k] = j->req.pv[k];
            if (i && strcmp(j->req.pk[k], "seed") == 0 && strtoll(j->req.pv[k], NULL, 10) >= 0) {
                snprintf(c->seed, sizeof c->seed, "%u", (uint32_t)(strtoull(j->req.pv[k], NULL, 10) + (unsigned)i));
                c->pv[k] = c->seed;
            }
        }
    }
    gwm_streams(metrics, 1);
    return j;
}

gwj *gwj_new_embed(oai_emb_req *er, uint64_t id, const char *model, gwm *metrics, int64_t t0_us)
{
    gwj *j = job_alloc(er->n_inputs);
    oai_emb_req *e = j ? malloc(sizeof *e) : NULL;
    if (!e) {
        if (j) free(j->ch);
        free(j);
        return NULL;
    }
    *e = *er;
    memset(er, 0, sizeof *er);
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->id = id;
    j->ep = GWM_EP_EMBEDDINGS;
    j->emb = e;
    j->metrics = metrics;
    j->fd = -1;
    j->t0_us = t0_us;
    snprintf(j->model, sizeof j->model, "%s", model ? model : "");
    oai_req none = {.kind = OAI_COMPLETION};
    for (int i = 0; i < j->n_ch; i++) {
        j->ch[i] = (gwj_choice){.j = j, .idx = i, .id = id};
        oai_out_init(&j->ch[i].out, &none, model, 0, id);
    }
    gwm_streams(metrics, 1);
    return j;
}

void gwj_ref(gwj *j)
{
    __atomic_add_fetch(&j->refs, 1, __ATOMIC_RELAXED);
}

void gwj_unref(gwj *j)
{
    if (!j || __atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (!j->finished) gwm_streams(j->metrics, -1);
    oai_req_free(&j->req);
    for (int i = 0; i < j->n_ch; i++) {
        oai_out_free(&j->ch[i].out);
        free(j->ch[i].vec);
    }
    free(j->ch);
    if (j->emb) oai_emb_free(j->emb);
    free(j->emb);
    free(j->body);
    free(j->sse);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void gwj_attach(gwj *j, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    pthread_mutex_lock(&j->mu);
    j->conn = c;
    j->fd = ci ? ci->connect_fd : -1;
    pthread_mutex_unlock(&j->mu);
}

void gwj_gen(const gwj *j, lc_gen *g)
{
    gwj_gen_choice(j, 0, g);
}

void gwj_gen_choice(const gwj *j, int i, lc_gen *g)
{
    const oai_req *r = &j->req;
    *g = (lc_gen){
        .n_predict = r->n_predict,
        .prompt = r->prompt,
        .msgs = r->kind == OAI_CHAT ? (const char *const *)r->msgs : NULL,
        .n_msgs = r->n_msgs,
        .pk = (const char *const *)r->pk,
        .pv = i > 0 ? j->ch[i].pv : (const char *const *)r->pv,
        .n_params = r->n_params,
        .stops = (const char *const *)r->stops,
        .n_stops = r->n_stops,
        .grammar = r->grammar,
        .tools = oait_active(&r->tl) ? (const char *const *)r->tl.tools : NULL, /* "none": not shown */
        .n_tools = oait_active(&r->tl) ? r->tl.n_tools : 0,
        .tcalls = (const char *const *)r->tl.tcalls,
        .n_tcalls = r->tl.n_tcalls,
    };
    if (j->emb) { /* input i, embedded */
        g->n_predict = 1;
        g->prompt = j->emb->inputs[i];
        g->toks = j->emb->ids[i];
        g->n_toks = j->emb->n_ids[i];
        g->embed = j->emb->pooling;
    }
}

void gwj_generate(const gwj *j, uint64_t id, const lc_resume *rs, proto_writer *w)
{
    lc_gen g;
    gwj_gen(j, &g);
    lc_generate_msg(w, id, &g, rs);
}

void gwj_submit(gwj *j, gwb *b)
{
    for (int i = 0; i < j->n_ch; i++) {
        if (i) j->ch[i].id = gwb_new_id(b);
        lc_gen g;
        gwj_gen_choice(j, i, &g);
        gwj_ref(j); /* the bridge's, released with this choice */
        gwb_submit(b, &j->ch[i], j->ch[i].id, j->req.kind == OAI_CHAT, &g);
    }
}

void gwj_cancel(gwj *j, gwb *b)
{
    for (int i = 0; i < j->n_ch; i++) gwb_cancel(b, j->ch[i].id);
}

/* ---- the bridge side (bridge thread, job locked) ---- */

/* Resumes the connection when it waits for what just happened. */
static void wake_http(gwj *j)
{
    if (j->suspended && j->conn && (j->phase != GWJ_WAIT || j->finished)) {
        j->suspended = false;
        MHD_resume_connection(j->conn);
    }
}

static void set_finished(gwj *j)
{
    if (!j->finished) gwm_streams(j->metrics, -1);
    j->finished = true;
}

static void sse_put(gwj *j, char *s, size_t n)
{
    if (!s) return;
    if (j->sse_pos == j->sse_len) j->sse_pos = j->sse_len = 0;
    if (j->sse_len + n > j->sse_cap) {
        size_t cap = (j->sse_len + n) * 2;
        char *x = realloc(j->sse, cap);
        if (!x) { free(s); return; }
        j->sse = x;
        j->sse_cap = cap;
    }
    memcpy(j->sse + j->sse_len, s, n);
    j->sse_len += n;
    free(s);
}

/* The 200 stream begins: the chat role chunk, and the prompt when echo is asked. */
static void start_stream(gwj *j)
{
    if (j->phase != GWJ_WAIT) return;
    j->phase = GWJ_STREAM;
    for (int i = 0; i < j->n_ch; i++) {
        size_t n;
        char *s = oai_chunk_role(&j->ch[i].out, &n);
        sse_put(j, s, n);
        if (j->req.echo && j->req.prompt) {
            s = oai_chunk(&j->ch[i].out, j->req.prompt, strlen(j->req.prompt), NULL, 0, &n);
            sse_put(j, s, n);
        }
    }
}

static void fail_job(gwj *j, int status, const char *code, const char *msg, uint64_t retry_ms)
{
    if (j->finished) return;
    if (j->phase == GWJ_STREAM) { /* headers are out: an error event ends the stream */
        size_t n;
        char *s = oai_chunk_error(status, msg, code, &n);
        sse_put(j, s, n);
    } else {
        j->phase = GWJ_DONE;
        j->status = status;
        j->retry_after = status != 429 ? 0 : retry_ms ? (unsigned)((retry_ms + 999) / 1000) : 1;
        free(j->body);
        j->body = oai_error_body(status, msg, NULL, code);
        j->body_len = j->body ? strlen(j->body) : 0;
    }
    log_info("request %llu: %d %s", (unsigned long long)j->id, status, msg);
    set_finished(j);
}

/* A PIECE's "probs" (checked by proto_decode) as oai_tokens; *alts to free. */
static int piece_tokens(const msgpack_object *probs, int max_top, oai_token **toks, oai_alt **alts)
{
    uint32_t n = probs ? probs->via.array.size : 0;
    *toks = n ? calloc(n, sizeof **toks) : NULL;
    *alts = n && max_top ? calloc((size_t)n * (size_t)max_top, sizeof **alts) : NULL;
    if (n && (!*toks || (max_top && !*alts))) return 0;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object_map *e = &probs->via.array.ptr[i].via.map;
        oai_token *t = &(*toks)[i];
        for (uint32_t k = 0; k < e->size; k++) {
            const msgpack_object *key = &e->ptr[k].key, *v = &e->ptr[k].val;
            if (key->type != MSGPACK_OBJECT_STR) continue;
            const char *ks = key->via.str.ptr;
            size_t kl = key->via.str.size;
            double num = v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64 ? v->via.f64
                         : v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)v->via.i64
                         : v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)v->via.u64 : 0; /* not the union's other bytes */
            if (kl == 4 && !memcmp(ks, "text", 4)) { t->text = v->via.str.ptr; t->len = v->via.str.size; }
            else if (kl == 7 && !memcmp(ks, "logprob", 7)) t->logprob = num;
            else if (kl == 3 && !memcmp(ks, "top", 3) && max_top) {
                oai_alt *a = *alts + (size_t)i * (size_t)max_top;
                for (uint32_t m = 0; m < v->via.array.size && (int)m < max_top; m++) {
                    const msgpack_object *pair = v->via.array.ptr[m].via.array.ptr;
                    a[m].id = (int32_t)(pair[0].type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? pair[0].via.i64 : (int64_t)pair[0].via.u64);
                    a[m].logprob = pair[1].type == MSGPACK_OBJECT_FLOAT32 || pair[1].type == MSGPACK_OBJECT_FLOAT64
                                       ? pair[1].via.f64 : (double)pair[1].via.i64;
                    t->n_top = (int)m + 1;
                }
                t->top = a;
            }
        }
    }
    return (int)n;
}

static void on_piece(gwj_choice *c, const proto_msg *m)
{
    gwj *j = c->j;
    pm_piece pc;
    pm_piece_get(m, &pc);
    const char *text = pc.text.p;
    size_t n = pc.text.n;
    uint64_t ntok = pc.ntok;
    int64_t now = gwj_now_us();
    if (ntok > c->n_seen) {
        if (!j->got_first) gwm_ttft(j->metrics, (double)(now - j->t0_us) / 1e6);
        else gwm_itl(j->metrics, (double)(now - j->t_last_us) / 1e6 / (double)(ntok - c->n_seen),
                     (int)(ntok - c->n_seen));
        j->got_first = true;
        j->t_last_us = now;
        c->n_seen = ntok;
    }
    oai_token *toks = NULL;
    oai_alt *alts = NULL;
    int nt = j->req.logprobs ? piece_tokens(pc.has_probs ? pc.probs : NULL, j->req.top_logprobs, &toks, &alts) : 0;
    if (j->req.stream) {
        start_stream(j);
        size_t len;
        char *s = oai_chunk(&c->out, text, n, toks, nt, &len);
        sse_put(j, s, len);
    } else if (oai_add(&c->out, text, n, toks, nt) != 0) {
        fail_job(j, 500, errcode_name(ERR_INTERNAL), "gateway out of memory", 0);
    }
    free(toks);
    free(alts);
}

/* An embeddings job whose inputs all came back: the response, or a 400 when the vectors
 * do not have the dimensions asked for (the model's n_embd is known only now). */
static void finish_embed(gwj *j)
{
    uint64_t np = 0;
    float *vecs[OAI_EMB_MAX_INPUTS];
    for (int i = 0; i < j->n_ch; i++) {
        np += j->ch[i].n_prompt;
        vecs[i] = j->ch[i].vec;
        if (!vecs[i] || j->ch[i].dim != j->ch[0].dim) {
            fail_job(j, 500, errcode_name(ERR_INTERNAL), "an input's embedding did not come back", 0);
            return;
        }
    }
    if (j->emb->dimensions && j->emb->dimensions != j->ch[0].dim) {
        char msg[200];
        snprintf(msg, sizeof msg, "dimensions: this model's embeddings have %d (shortened ones are not supported)",
                 j->ch[0].dim);
        j->phase = GWJ_DONE;
        j->status = 400;
        j->body = oai_error_body(400, msg, "dimensions", errcode_name(ERR_INVALID));
    } else {
        j->phase = GWJ_DONE;
        j->status = 200;
        j->body = oai_emb_response(j->emb, j->model, vecs, j->ch[0].dim, np, &j->body_len);
        if (!j->body) j->status = 500;
    }
    j->body_len = j->body ? strlen(j->body) : 0;
    set_finished(j);
}

static void on_embedding(gwj_choice *c, const proto_msg *m)
{
    pm_embedding e;
    pm_embedding_get(m, &e);
    free(c->vec);
    c->dim = (int)(e.vec.n / sizeof(float));
    c->vec = c->dim ? malloc((size_t)c->dim * sizeof *c->vec) : NULL;
    if (c->vec) memcpy(c->vec, e.vec.p, (size_t)c->dim * sizeof *c->vec); /* little-endian f32, as ours */
    else c->dim = 0;
    c->n_prompt = e.ntok;
}

/* Every choice ended: the usage and [DONE], or the whole response. */
static void finish_all(gwj *j)
{
    if (j->emb) {
        finish_embed(j);
        return;
    }
    uint64_t np = j->ch[0].n_prompt, ng = 0;
    const char *reasons[OAI_MAX_N];
    oai_out outs[OAI_MAX_N];
    for (int i = 0; i < j->n_ch; i++) {
        ng += j->ch[i].n_gen;
        reasons[i] = j->ch[i].reason;
        outs[i] = j->ch[i].out;
    }
    size_t len;
    if (j->req.stream) {
        char *s = oai_chunk_tail(&j->ch[0].out, np, ng, &len);
        sse_put(j, s, len);
    } else {
        j->phase = GWJ_DONE;
        j->status = 200;
        j->body = oai_response_n(outs, j->n_ch, reasons, np, ng, &len);
        j->body_len = len;
        if (!j->body) j->status = 500;
    }
    log_debug("request %llu: done (%s), %llu prompt + %llu generated tokens in %d choice(s)", (unsigned long long)j->id,
              reasons[0], (unsigned long long)np, (unsigned long long)ng, j->n_ch);
    set_finished(j);
}

static void on_done(gwj_choice *c, const proto_msg *m)
{
    gwj *j = c->j;
    pm_done d;
    pm_done_get(m, &d);
    if (c->done) return;
    c->done = true;
    proto_sv_copy(d.reason, c->reason, sizeof c->reason);
    c->n_prompt = d.ntok_prompt;
    c->n_gen = j->emb ? 0 : d.ntok; /* an embedding generates nothing */
    gwm_tokens(j->metrics, c->idx == 0 || j->emb ? d.ntok_prompt : 0, c->n_gen);
    if (j->req.stream) {
        start_stream(j);
        size_t len;
        char *s = oai_chunk_finish(&c->out, c->reason, &len);
        sse_put(j, s, len);
    }
    if (++j->n_done == j->n_ch) finish_all(j);
}

static void on_msg(void *job, const proto_msg *m)
{
    gwj_choice *c = job;
    gwj *j = c->j;
    pthread_mutex_lock(&j->mu);
    if (!j->finished) {
        if (m->type == PT_ACCEPTED) {
            j->accepted = true;
        } else if (m->type == PT_PIECE) {
            on_piece(c, m);
        } else if (m->type == PT_EMBEDDING) {
            on_embedding(c, m);
        } else if (m->type == PT_DONE) {
            on_done(c, m);
        } else if (m->type == PT_ERROR) {
            pm_error e;
            pm_error_get(m, &e);
            char msg[400], code[40];
            proto_sv_copy(e.msg, msg, sizeof msg);
            proto_sv_copy(e.code, code, sizeof code);
            fail_job(j, oai_error_status(e.has_code ? code : NULL, j->accepted), e.has_code ? code : NULL, msg,
                     e.retry_ms);
        }
    }
    wake_http(j);
    pthread_mutex_unlock(&j->mu);
}

static void on_fail(void *job, int status, const char *code, const char *msg)
{
    gwj *j = ((gwj_choice *)job)->j;
    pthread_mutex_lock(&j->mu);
    fail_job(j, status, code, msg, 0);
    wake_http(j);
    pthread_mutex_unlock(&j->mu);
}

/* A suspended connection is not watched by libmicrohttpd: peek at its socket. A choice
 * of a job that ended without it (another choice failed) is gone too. */
static int gone(void *job)
{
    gwj_choice *ch = job;
    gwj *j = ch->j;
    pthread_mutex_lock(&j->mu);
    if (j->finished && !ch->done) {
        pthread_mutex_unlock(&j->mu);
        return 1;
    }
    if (!j->cancelled && j->suspended && j->fd >= 0) {
        char c;
        ssize_t r = recv(j->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            j->cancelled = true;
            set_finished(j);
            wake_http(j); /* libmicrohttpd closes it */
        }
    }
    int r = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return r;
}

static void release(void *job)
{
    gwj_unref(((gwj_choice *)job)->j);
}

const gwb_ops gwj_ops = {on_msg, on_fail, gone, release};

/* ---- the HTTP side ---- */

int gwj_wait(gwj *j)
{
    pthread_mutex_lock(&j->mu);
    int wait = j->phase == GWJ_WAIT && !j->finished;
    if (wait) {
        j->suspended = true;
        MHD_suspend_connection(j->conn);
    }
    pthread_mutex_unlock(&j->mu);
    return wait;
}

int gwj_detach(gwj *j)
{
    pthread_mutex_lock(&j->mu);
    int open = !j->finished;
    if (open) {
        j->cancelled = true;
        set_finished(j);
    }
    j->conn = NULL;
    j->fd = -1;
    j->suspended = false;
    pthread_mutex_unlock(&j->mu);
    return open;
}

ssize_t gwj_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    gwj *j = cls;
    (void)pos;
    pthread_mutex_lock(&j->mu);
    ssize_t r;
    if (j->sse_pos < j->sse_len) {
        size_t n = j->sse_len - j->sse_pos < max ? j->sse_len - j->sse_pos : max;
        memcpy(buf, j->sse + j->sse_pos, n);
        j->sse_pos += n;
        r = (ssize_t)n;
    } else if (j->finished) {
        r = j->cancelled ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    } else if (j->conn) {
        j->suspended = true;
        MHD_suspend_connection(j->conn);
        r = 0;
    } else {
        r = MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&j->mu);
    return r;
}

void gwj_read_free(void *cls)
{
    gwj_unref(cls);
}
