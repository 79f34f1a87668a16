/*
 * worker.c - one engine worker: sessions on a read-only weight segment, driven by the
 * front door, sampled by samplerd through the shared-memory logits ring.
 *
 * Per session the worker keeps every token (prompt + generated) and the KV cache of
 * all but the newest. A PT_RUN (re)starts a session from the tokens the front door
 * sends: the cached prefix that matches is kept, the rest is prefilled, and step
 * (tokens generated so far) keys samplerd's RNG, so a session moved here from a dead
 * worker continues exactly where it stopped. Each loop turn prefills new sessions,
 * decodes every session waiting for its next token in one eng_decode pass, and sends
 * one PT_SAMPLE per session; PT_SAMPLED replies become PT_TOKEN messages to the front.
 * A sample request unanswered for SAMPLE_RETRY_MS is re-sent unchanged (samplerd may
 * have restarted; the answer is the same).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "engine.h"
#include "log.h"
#include "logits_shm.h"
#include "net.h"
#include "proto.h"
#include "sampler.h"
#include "worker.h"

#define SAMPLE_RETRY_MS 400
#define HIST_MAX 4096 /* history tokens sent to samplerd at most (penalties, DRY) */

typedef enum { WS_FREE, WS_PREFILL, WS_DECODE, WS_WAIT, WS_IDLE } ws_state;

/* Invariants: state != WS_FREE => es != NULL, n_toks >= 1, eng_session_pos(es) < n_toks
 * except in WS_IDLE after budget/EOG; WS_WAIT => the slot holds the logits of step. */
typedef struct {
    ws_state     state;
    uint64_t     sess, epoch;
    eng_session *es;
    int32_t     *toks;     /* (n_toks) every token of the session */
    int          n_toks, cap_toks;
    uint32_t     step;     /* index of the next token to sample */
    uint64_t     budget;   /* tokens still to generate */
    uint8_t     *params;   /* packed msgpack map forwarded to samplerd */
    size_t       params_len;
    double       mu;
    int          mu_set;
    int32_t      eog[16];
    int          n_eog;
    int          n_hist;   /* history tokens samplerd needs (penalties, DRY) */
    uint64_t     req;      /* id of the pending sample request */
    int64_t      sent_ms;
} wsess;

typedef struct {
    const engd_opts *o;
    eng_model  *m;
    int         n_vocab, eos;
    lshm       *ring;
    wsess      *s;         /* (max_sessions) one per ring slot */
    int         n_s;
    void       *ctx, *front, *samp;
    uint64_t    wid, next_req, epoch;
    int64_t     last_front_ms, last_hb_ms;
    char        host[64];
    float      *batch_logits; /* (max_sessions, n_vocab) */
    int         registered;
} worker;

void engd_opts_default(engd_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_workers = 1;
    o->threads = 1;
    o->max_sessions = 16;
    o->precision = ENG_INT8;
}

static int n_active(const worker *w)
{
    int n = 0;
    for (int i = 0; i < w->n_s; i++) n += w->s[i].state != WS_FREE;
    return n;
}

static void send_front(worker *w, proto_writer *pw)
{
    net_send(w->front, NULL, 0, proto_data(pw), proto_size(pw));
    proto_writer_free(pw);
}

static void send_hb(worker *w, int bye)
{
    proto_writer pw;
    proto_begin(&pw, PT_WORKER_HB, 0);
    if (bye) proto_put_bool(&pw, "bye", 1); /* shutting down: purge me now */
    proto_put_u64(&pw, "pid", (uint64_t)getpid());
    proto_put_str(&pw, "host", w->host);
    proto_put_str(&pw, "seg", eng_segment_name(w->m));
    proto_put_u64(&pw, "active", (uint64_t)n_active(w));
    proto_put_u64(&pw, "cap", (uint64_t)w->n_s);
    proto_put_u64(&pw, "wid", w->wid);
    send_front(w, &pw);
    w->last_hb_ms = net_now_ms();
}

static void send_sess_error_full(worker *w, uint64_t sess, uint64_t epoch, const char *msg, int full)
{
    proto_writer pw;
    proto_begin(&pw, PT_ERROR, 0);
    proto_put_u64(&pw, "sess", sess);
    if (full) proto_put_bool(&pw, "full", 1);
    proto_put_u64(&pw, "epoch", epoch);
    proto_put_str(&pw, "msg", msg);
    send_front(w, &pw);
}

static void send_sess_error(worker *w, uint64_t sess, uint64_t epoch, const char *msg)
{
    send_sess_error_full(w, sess, epoch, msg, 0);
}

static void sess_drop(wsess *s)
{
    s->state = WS_FREE;
    s->sess = 0;
    s->n_toks = 0;
    free(s->params);
    s->params = NULL;
    s->params_len = 0;
    if (s->es) eng_session_reset(s->es);
}

static wsess *sess_find(worker *w, uint64_t sess)
{
    for (int i = 0; i < w->n_s; i++)
        if (w->s[i].state != WS_FREE && w->s[i].sess == sess) return &w->s[i];
    return NULL;
}

static void send_sample(worker *w, wsess *s)
{
    int i = (int)(s - w->s);
    proto_writer pw;
    proto_begin(&pw, PT_SAMPLE, s->req);
    proto_put_u64(&pw, "sess", s->sess);
    proto_put_u64(&pw, "step", s->step);
    proto_put_str(&pw, "shm", lshm_name(w->ring));
    proto_put_u64(&pw, "slot", (uint64_t)i);
    proto_put_u64(&pw, "nv", (uint64_t)w->n_vocab);
    proto_put_i64(&pw, "eos", w->eos);
    proto_put_str(&pw, "seg", eng_segment_name(w->m)); /* samplerd reads token texts there for DRY */
    proto_put_raw(&pw, "params", s->params, s->params_len);
    int nh = s->n_toks < s->n_hist ? s->n_toks : s->n_hist;
    proto_put_ints(&pw, "hist", s->toks + s->n_toks - nh, (size_t)nh);
    if (s->mu_set) proto_put_f64(&pw, "mu", s->mu);
    net_send(w->samp, NULL, 0, proto_data(&pw), proto_size(&pw));
    proto_writer_free(&pw);
    s->sent_ms = net_now_ms();
    s->state = WS_WAIT;
}

/* How many trailing tokens samplerd's penalties and DRY read for these parameters
 * (the front door validated them); all of them, capped, when unsure. */
static int params_history(const msgpack_object *o)
{
    smp_params p = smp_params_default();
    char k[64], v[1024], err[160];
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_str *ks = &o->via.map.ptr[i].key.via.str, *vs = &o->via.map.ptr[i].val.via.str;
        if (ks->size >= sizeof k || vs->size >= sizeof v) return HIST_MAX;
        memcpy(k, ks->ptr, ks->size); k[ks->size] = 0;
        memcpy(v, vs->ptr, vs->size); v[vs->size] = 0;
        if (smp_param_set(&p, k, v, err, sizeof err) != 0) return HIST_MAX;
    }
    int n = smp_history_needed(&p);
    return n < 0 || n > HIST_MAX ? HIST_MAX : n;
}

/* PT_RUN: (re)start a session from the front door's tokens. */
static void on_run(worker *w, const proto_msg *pm)
{
    uint64_t sess = proto_u64(pm, "sess", 0), epoch = proto_u64(pm, "epoch", 0);
    const msgpack_object *toks = proto_field(pm, "toks");
    uint32_t n = toks->via.array.size;
    wsess *s = sess_find(w, sess);
    if (!s)
        for (int i = 0; i < w->n_s && !s; i++)
            if (w->s[i].state == WS_FREE) s = &w->s[i];
    if (!s) {
        send_sess_error(w, sess, epoch, "worker is full (all sessions busy)");
        return;
    }
    char err[256];
    if (!s->es && !(s->es = eng_session_new(w->m, w->o->n_ctx, w->o->kv_f16 ? ENG_KV_F16 : ENG_KV_F32, err, sizeof err))) {
        send_sess_error(w, sess, epoch, err);
        return;
    }
    if (n == 0 || n >= (uint32_t)eng_session_n_ctx(s->es)) {
        snprintf(err, sizeof err, "session needs %u tokens; the context holds %d", n, eng_session_n_ctx(s->es));
        send_sess_error(w, sess, epoch, err);
        if (s->state == WS_FREE) sess_drop(s);
        return;
    }
    int cap = eng_session_n_ctx(s->es) + 1; /* the session can never hold more tokens */
    if (s->cap_toks < cap) {
        int32_t *t = realloc(s->toks, (size_t)cap * sizeof *t);
        if (!t) { send_sess_error(w, sess, epoch, "worker out of memory"); return; }
        s->toks = t;
        s->cap_toks = cap;
    }
    int32_t *nt = malloc((size_t)n * sizeof *nt);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *proto_field(pm, "params"));
    if (!nt) { msgpack_sbuffer_destroy(&sb); return; }
    proto_ints(pm, "toks", nt, n);
    /* keep the cached prefix that matches; at least one token must be evaluated */
    int pos = s->state == WS_FREE ? 0 : eng_session_pos(s->es), p = 0;
    while (p < pos && p < (int)n && s->toks[p] == nt[p]) p++;
    if (p >= (int)n) p = (int)n - 1;
    if (p == 0) eng_session_reset(s->es);
    else eng_session_truncate(s->es, p);
    memcpy(s->toks, nt, (size_t)n * sizeof *nt);
    free(nt);
    s->n_toks = (int)n;
    s->sess = sess;
    s->epoch = epoch;
    s->step = (uint32_t)proto_u64(pm, "step", 0);
    s->budget = proto_u64(pm, "budget", 0);
    free(s->params);
    s->params = (uint8_t *)sb.data; /* ownership moves from the sbuffer */
    s->params_len = sb.size;
    s->mu_set = proto_field(pm, "mu") != NULL;
    s->mu = proto_f64(pm, "mu", 0);
    s->n_hist = params_history(proto_field(pm, "params"));
    long ne = proto_ints(pm, "eog", s->eog, 16);
    s->n_eog = ne < 0 ? 0 : ne > 16 ? 16 : (int)ne;
    s->req = ++w->next_req;
    s->state = s->budget ? WS_PREFILL : WS_IDLE;
    log_debug("session %llu: run %u tokens (cached %d), step %u, budget %llu", (unsigned long long)sess, n, p,
              s->step, (unsigned long long)s->budget);
}

static int is_eog(const wsess *s, int32_t t)
{
    for (int i = 0; i < s->n_eog; i++)
        if (s->eog[i] == t) return 1;
    return 0;
}

/* PT_SAMPLED or PT_ERROR from samplerd. */
static void on_sampled(worker *w, const proto_msg *pm)
{
    wsess *s = sess_find(w, proto_u64(pm, "sess", 0));
    if (!s || s->state != WS_WAIT || pm->id != s->req || proto_u64(pm, "step", UINT64_MAX) != s->step)
        return; /* a stale or duplicate answer */
    if (pm->type == PT_ERROR) {
        char msg[200];
        proto_strcpy(pm, "msg", msg, sizeof msg);
        send_sess_error(w, s->sess, s->epoch, msg);
        s->state = WS_IDLE;
        return;
    }
    int32_t t = (int32_t)proto_i64(pm, "tok", -1);
    if (t < 0 || t >= w->n_vocab) {
        send_sess_error(w, s->sess, s->epoch, "samplerd returned a token out of range");
        s->state = WS_IDLE;
        return;
    }
    proto_writer pw;
    proto_begin(&pw, PT_TOKEN, pm->id);
    proto_put_u64(&pw, "sess", s->sess);
    proto_put_u64(&pw, "step", s->step);
    proto_put_i64(&pw, "tok", t);
    proto_put_u64(&pw, "epoch", s->epoch);
    s->mu_set = proto_field(pm, "mu") != NULL;
    s->mu = proto_f64(pm, "mu", 0);
    if (s->mu_set) proto_put_f64(&pw, "mu", s->mu);
    const msgpack_object *lp = proto_field(pm, "logprob"), *top = proto_field(pm, "top");
    if (lp) proto_put_obj(&pw, "logprob", lp); /* kinds checked by proto_decode */
    if (top) { /* at most the sampler's maximum */
        uint32_t k = top->via.array.size < SMP_MAX_PROBS ? top->via.array.size : SMP_MAX_PROBS;
        proto_put_array_begin(&pw, "top", k);
        for (uint32_t i = 0; i < k; i++) msgpack_pack_object(&pw.pk, top->via.array.ptr[i]);
    }
    send_front(w, &pw);
    log_debug("session %llu step %u: token %d (slot %d, %d tokens)", (unsigned long long)s->sess, s->step, t,
              (int)(s - w->s), s->n_toks);
    s->toks[s->n_toks++] = t;
    s->step++;
    s->budget--;
    s->req = ++w->next_req;
    int full = s->n_toks >= eng_session_n_ctx(s->es) || s->n_toks >= s->cap_toks;
    s->state = s->budget == 0 || is_eog(s, t) || full ? WS_IDLE : WS_DECODE;
    if (full && s->budget && !is_eog(s, t))
        send_sess_error_full(w, s->sess, s->epoch, "the session's context is full", 1);
}

static void on_front(worker *w, const proto_msg *pm)
{
    w->last_front_ms = net_now_ms();
    switch (pm->type) {
    case PT_FRONT_HB: {
        uint64_t e = proto_u64(pm, "epoch", 0);
        if (e != w->epoch) {
            /* a new front door: sessions of the old one are orphans */
            for (int i = 0; i < w->n_s; i++)
                if (w->s[i].state != WS_FREE && w->s[i].epoch != e) sess_drop(&w->s[i]);
            if (w->epoch) log_info("front door restarted (epoch %llx); dropped its sessions", (unsigned long long)e);
            w->epoch = e;
        }
        if (!w->registered) log_info("registered with the front door");
        w->registered = 1;
        break;
    }
    case PT_RUN: on_run(w, pm); break;
    case PT_STOP: {
        wsess *s = sess_find(w, proto_u64(pm, "sess", 0));
        if (s) sess_drop(s);
        break;
    }
    default: log_warn("front door sent an unexpected %s", proto_type_name(pm->type));
    }
}

/* Prefill new sessions one by one, then decode all waiting ones in one pass. */
static int compute(worker *w)
{
    char err[256];
    int did = 0;
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state != WS_PREFILL) continue;
        int pos = eng_session_pos(s->es);
        if (eng_prefill(w->m, s->es, s->toks + pos, s->n_toks - pos, lshm_slot(w->ring, (uint32_t)i), false, err,
                        sizeof err) != 0) {
            send_sess_error(w, s->sess, s->epoch, err);
            s->state = WS_IDLE;
            continue;
        }
        send_sample(w, s);
        did = 1;
    }
    eng_session *ss[w->n_s];
    int32_t tk[w->n_s];
    int idx[w->n_s], n = 0;
    for (int i = 0; i < w->n_s; i++)
        if (w->s[i].state == WS_DECODE) {
            idx[n] = i;
            ss[n] = w->s[i].es;
            tk[n++] = w->s[i].toks[w->s[i].n_toks - 1];
        }
    if (!n) return did;
    if (eng_decode(w->m, ss, tk, n, w->batch_logits, err, sizeof err) != 0) {
        for (int k = 0; k < n; k++) {
            send_sess_error(w, w->s[idx[k]].sess, w->s[idx[k]].epoch, err);
            w->s[idx[k]].state = WS_IDLE;
        }
        return 1;
    }
    for (int k = 0; k < n; k++) {
        memcpy(lshm_slot(w->ring, (uint32_t)idx[k]), w->batch_logits + (size_t)k * w->n_vocab,
               (size_t)w->n_vocab * sizeof(float));
        send_sample(w, &w->s[idx[k]]);
    }
    return 1;
}

static void retry_samples(worker *w, int64_t now)
{
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state != WS_WAIT || now - s->sent_ms < SAMPLE_RETRY_MS) continue;
        log_warn("session %llu step %u: samplerd did not answer in %d ms; asking again",
                 (unsigned long long)s->sess, s->step, SAMPLE_RETRY_MS);
        send_sample(w, s);
    }
}

static void drain(worker *w, void *sock, int from_front)
{
    for (int k = 0; k < 256; k++) {
        proto_msg pm;
        size_t nbytes;
        char err[200];
        int r = net_recv_msg(sock, 0, NULL, NULL, &pm, &nbytes, err, sizeof err);
        if (r == 0) return;
        if (r < 0) {
            log_warn("dropped a bad message from %s: %s", from_front ? "the front door" : "samplerd", err);
        } else if (from_front) {
            on_front(w, &pm);
        } else if (pm.type == PT_SAMPLED || pm.type == PT_ERROR) {
            on_sampled(w, &pm);
        }
        proto_msg_free(&pm);
    }
}

static int connect_sockets(worker *w, const char *dir)
{
    char ep[300], err[200];
    w->front = net_socket(w->ctx, ZMQ_DEALER);
    w->samp = net_socket(w->ctx, ZMQ_DEALER);
    if (!w->front || !w->samp) return -1;
    if (w->o->front) snprintf(ep, sizeof ep, "%s", w->o->front);
    else net_endpoint(dir, NET_EP_WORKERS, ep, sizeof ep);
    if (net_curve(w->front, ep, 0, err, sizeof err) != 0 || zmq_connect(w->front, ep) != 0) {
        log_error("front door endpoint %s: %s", ep, err[0] ? err : zmq_strerror(zmq_errno()));
        return -1;
    }
    char sp[300];
    if (w->o->sampler) snprintf(sp, sizeof sp, "%s", w->o->sampler);
    else net_endpoint(dir, NET_EP_SAMPLER, sp, sizeof sp);
    err[0] = 0;
    if (net_curve(w->samp, sp, 0, err, sizeof err) != 0 || zmq_connect(w->samp, sp) != 0) {
        log_error("samplerd endpoint %s: %s", sp, err[0] ? err : zmq_strerror(zmq_errno()));
        return -1;
    }
    log_info("connecting to the front door at %s and samplerd at %s", ep, sp);
    return 0;
}

static void worker_free(worker *w)
{
    for (int i = 0; w->s && i < w->n_s; i++) {
        sess_drop(&w->s[i]);
        eng_session_free(w->s[i].es);
        free(w->s[i].toks);
    }
    free(w->s);
    free(w->batch_logits);
    lshm_destroy(&w->ring);
    net_close(&w->front);
    net_close(&w->samp);
    if (w->ctx) zmq_ctx_term(w->ctx);
    eng_close(w->m);
}

int engd_worker_run(const engd_opts *o)
{
    worker w = {.o = o};
    char dir[256], err[256];
    int64_t t0 = net_now_ms();
    if (net_run_dir(o->run_dir, dir, sizeof dir, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    if (!o->segment) {
        log_error("a worker needs --segment NAME (or --model FILE with --attach)");
        return 2;
    }
    w.m = eng_attach(o->segment, err, sizeof err);
    if (!w.m) {
        log_error("cannot attach segment %s: %s", o->segment, err);
        return 1;
    }
    eng_set_threads(w.m, o->threads);
    log_info("attached segment %s read-only in %lld ms (no reload)", o->segment, (long long)(net_now_ms() - t0));
    w.n_vocab = eng_config_of(w.m)->n_vocab;
    w.eos = eng_config_of(w.m)->eos_id;
    w.n_s = o->max_sessions;
    w.s = calloc((size_t)w.n_s, sizeof *w.s);
    w.batch_logits = malloc((size_t)w.n_s * (size_t)w.n_vocab * sizeof(float));
    w.ring = lshm_create(getpid(), (uint32_t)w.n_s, (uint32_t)w.n_vocab, err, sizeof err);
    w.ctx = zmq_ctx_new();
    gethostname(w.host, sizeof w.host - 1);
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(&w.wid, sizeof w.wid, 1, ur) != 1) w.wid = (uint64_t)getpid() << 20 ^ (uint64_t)t0;
    if (ur) fclose(ur);
    if (!w.s || !w.batch_logits || !w.ring || !w.ctx || connect_sockets(&w, dir) != 0) {
        if (!w.ring) log_error("%s", err);
        worker_free(&w);
        return 1;
    }
    send_hb(&w, 0);
    while (!dmn_stop) {
        int busy = 0;
        for (int i = 0; i < w.n_s; i++) busy |= w.s[i].state == WS_PREFILL || w.s[i].state == WS_DECODE;
        zmq_pollitem_t it[2] = {{w.front, 0, ZMQ_POLLIN, 0}, {w.samp, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, busy ? 0 : 50) < 0 && zmq_errno() != EINTR) break;
        drain(&w, w.samp, 0);
        drain(&w, w.front, 1);
        compute(&w);
        int64_t now = net_now_ms();
        retry_samples(&w, now);
        if (now - w.last_hb_ms >= NET_HB_MS) send_hb(&w, 0);
        if (w.registered && now - w.last_front_ms > NET_HB_MS * NET_HB_LIVENESS) {
            log_warn("front door silent for %lld ms; waiting for it to come back", (long long)(now - w.last_front_ms));
            w.registered = 0;
        }
    }
    log_info("shutting down (%d active sessions handed back to the front door)", n_active(&w));
    send_hb(&w, 1);
    int linger = 200; /* let the goodbye leave */
    zmq_setsockopt(w.front, ZMQ_LINGER, &linger, sizeof linger);
    worker_free(&w);
    return 0;
}
