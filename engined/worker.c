/*
 * worker.c - one engine worker: a continuous-batching scheduler over the sessions the
 * front door gives it, on a read-only weight segment, sampled by samplerd through the
 * shared-memory logits ring.
 *
 * Per session the worker keeps every token (prompt + generated) and the KV cache of
 * those already evaluated. A PT_RUN (re)starts a session from the tokens the front door
 * sends: the cached prefix that matches is kept, the rest waits to be evaluated, and
 * step (tokens generated so far) keys samplerd's RNG, so a session moved here from a
 * dead worker continues exactly where it stopped.
 *
 * Each step is one eng_step pass over the weights: one token of every decoding session,
 * then prefill chunks of waiting sessions in arrival order, up to batch_tokens items
 * (prefill always gets PREFILL_MIN of them, so decoders cannot starve a newcomer; with
 * no session decoding, nobody waits, and a step takes up to idle_tokens). A
 * session whose evaluated tokens reach its last one gets its logits row into its ring
 * slot; all such rows of a step go to samplerd in one PT_SAMPLE, and the PT_SAMPLED rows
 * become PT_TOKEN messages to the front door. The engine's batch invariance makes the
 * tokens independent of how sessions were grouped and chunked. A sample request
 * unanswered for SAMPLE_RETRY_MS is re-sent (samplerd may have restarted; the answer is
 * the same). Liveness is the I/O thread's business (worker_io.h).
 *
 * When the front door restarts (its heartbeat brings a new epoch), the sessions keep
 * running: each is reported to the new instance (PT_REPORT: tokens, step, budget,
 * sampler state, and the front door's own record of the request that came with the
 * RUN), which adopts it; TOKENs sent meanwhile to the old epoch are ignored there, their
 * tokens being in the report.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "engine.h"
#include "errcode.h"
#include "hash.h"
#include "kvsetup.h"
#include "log.h"
#include "logits_shm.h"
#include "net.h"
#include "proto.h"
#include "sparams.h"
#include "worker.h"
#include "worker_io.h"

#include "worker_int.h"
#include "worker_kv.h"

void engd_opts_default(engd_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_workers = 1;
    o->threads = 1;
    o->batch_tokens = ENGD_BATCH_TOKENS_DEFAULT;
    o->idle_tokens = ENGD_IDLE_TOKENS_DEFAULT;
    o->kv = ENG_KV_F16; /* half the memory of f32; the attention kernels read f16 directly */
    o->precision = ENG_NATIVE;
}

int engd_chunk_max(const engd_opts *o)
{
    int b = o->batch_tokens > 0 ? o->batch_tokens : ENGD_BATCH_TOKENS_DEFAULT;
    int i = o->idle_tokens > 0 ? o->idle_tokens : ENGD_IDLE_TOKENS_DEFAULT, m = b > i ? b : i;
    return m > PREFILL_MIN ? m : PREFILL_MIN;
}

static void publish_load(worker *w)
{
    int active = 0, busy = 0;
    int64_t now = net_now_ms(), oldest = now;
    for (int i = 0; i < w->n_s; i++) {
        active += w->s[i].state != WS_FREE;
        busy += w->s[i].state == WS_READY;
        if (w->s[i].state == WS_WAIT && w->s[i].wait_since < oldest) oldest = w->s[i].wait_since;
    }
    wio_set_load(&w->io, active, busy);
    wio_set_sampler_wait(&w->io, (int)(now - oldest));
    if (w->kv_on && (w->kv_blocked[0] || w->kv_blocked[1])) wio_set_cap(&w->io, wkv_cap(w)); /* until the room is free */
    if (w->kv_on && now - w->kv_ms >= 200) { /* the pools' locks, five times a second at most */
        uint64_t kv[PROTO_KV_COUNTS] = {[PKV_KVPT] = w->kv_prompt, [PKV_KVRT] = w->kv_reused,
                                         [PKV_KVPRE] = w->kv_preempt, [PKV_KVDEF] = w->kv_deferred};
        for (int k = 0; k < ENG_KV_KINDS; k++) { /* each pool's blocks, both pools' evictions */
            if (!w->pools[k]) continue;
            kvp_stats_t st;
            kvp_stats(w->pools[k], &st);
            int ring = k == ENG_KV_RING;
            kv[ring ? PKV_KVRB : PKV_KVB] = st.n_blocks;
            kv[ring ? PKV_KVRU : PKV_KVU] = st.writing + st.referenced;
            kv[ring ? PKV_KVRC : PKV_KVC] = st.cached;
            kv[PKV_KVEV] += st.c.evictions;
        }
        w->kv_ms = now;
        wio_set_kv(&w->io, kv);
    }
}

static void send_front(worker *w, proto_writer *pw)
{
    net_send(w->pipe, NULL, 0, proto_data(pw), proto_size(pw));
    proto_writer_free(pw);
}

/* A PT_ERROR about session sess; code (ERR_NONE: none) tells the front door what to do
 * (worker_full: queue it again; unavailable: a daemon behind the worker is down), full
 * that its context is full (the generation ends with reason "context"). */
void wrk_sess_error_code(worker *w, uint64_t sess, uint64_t epoch, const char *msg, errcode code, int full)
{
    pm_error e = {.msg = proto_sv_of(msg), .sess = sess, .has_sess = 1, .epoch = epoch, .has_epoch = 1,
                  .full = full, .has_full = full != 0, .code = proto_sv_of(errcode_name(code)),
                  .has_code = code != ERR_NONE};
    proto_writer pw;
    proto_begin(&pw, PT_ERROR, 0);
    pm_error_put(&pw, &e);
    send_front(w, &pw);
}

static void send_sess_error(worker *w, uint64_t sess, uint64_t epoch, const char *msg)
{
    wrk_sess_error_code(w, sess, epoch, msg, ERR_NONE, 0);
}

void wrk_sess_drop(wsess *s)
{
    s->state = WS_FREE;
    s->sess = 0;
    s->n_toks = 0;
    s->sp_len = 0;
    free(s->fb);
    s->fb = NULL;
    s->fb_len = 0;
    free(s->grammar);
    s->grammar = NULL;
    s->grammar_len = 0;
    free(s->gst);
    s->gst = NULL;
    s->gst_len = 0;
    s->embed = 0;
    if (s->es) eng_session_reset(s->es);
}

static wsess *sess_find(worker *w, uint64_t sess)
{
    for (int i = 0; i < w->n_s; i++)
        if (w->s[i].state != WS_FREE && w->s[i].sess == sess) return &w->s[i];
    return NULL;
}

/* ---- sampling ---------------------------------------------------------------------- */

/* A sample batch being built: rows go in one PT_SAMPLE until it grows past
 * SAMPLE_BATCH_BYTES (then it is sent and another begins). */
typedef struct {
    msgpack_sbuffer rows;
    msgpack_packer  pk;
    uint32_t        n;
    uint64_t        id;
} sbatch;

static void sbatch_begin(worker *w, sbatch *b)
{
    msgpack_sbuffer_init(&b->rows);
    msgpack_packer_init(&b->pk, &b->rows, msgpack_sbuffer_write);
    b->n = 0;
    b->id = ++w->next_req;
}

static void sbatch_flush(worker *w, sbatch *b)
{
    if (b->n) {
        pm_sample m = {.shm = proto_sv_of(lshm_name(w->ring)), .nv = (uint64_t)w->n_vocab, .eos = w->eos,
                       .has_eos = 1, .seg = proto_sv_of(eng_segment_name(w->m)), .has_seg = 1};
        proto_writer pw; /* samplerd reads token texts in the segment for DRY */
        proto_begin(&pw, PT_SAMPLE, b->id);
        pm_sample_put(&pw, &m);
        proto_put_array_begin(&pw, MF_ROWS, b->n); /* the rows built by sbatch_add */
        msgpack_sbuffer_write(&pw.buf, b->rows.data, b->rows.size);
        net_send(w->samp, NULL, 0, proto_data(&pw), proto_size(&pw));
        proto_writer_free(&pw);
    }
    msgpack_sbuffer_destroy(&b->rows);
}

/* Adds session s's row (its logits are in its slot) to the batch. */
static void sbatch_add(worker *w, sbatch *b, wsess *s)
{
    if (b->rows.size > SAMPLE_BATCH_BYTES) {
        sbatch_flush(w, b);
        sbatch_begin(w, b);
    }
    int nh = s->n_toks < s->n_hist ? s->n_toks : s->n_hist;
    pm_sample_row r = {.sess = s->sess, .step = s->step, .slot = (uint64_t)(s - w->s),
                       .sp = {(const char *)s->sp, s->sp_len}, .hist = {s->toks + s->n_toks - nh, (uint32_t)nh, NULL},
                       .mu = s->mu, .has_mu = s->mu_set};
    if (s->grammar) { /* its state, or the tokens generated so far for samplerd to replay */
        r.ghash = s->ghash;
        r.has_ghash = 1;
        r.grammar = (proto_sv){s->grammar, s->grammar_len};
        r.has_grammar = s->gtext_step < 0 || s->gtext_step == (int64_t)s->step; /* first, or asked */
        if (r.has_grammar) s->gtext_step = s->step;
        r.gst = (proto_sv){(const char *)s->gst, s->gst_len};
        r.has_gst = s->gst_len > 0;
        r.gtoks = (proto_iv){s->toks + s->n_toks - s->step, s->step, NULL};
        r.has_gtoks = !r.has_gst;
    }
    pm_sample_row_pack(&b->pk, &r, 0);
    b->n++;
    s->req = b->id;
    s->sent_ms = net_now_ms();
    if (s->state != WS_WAIT) s->wait_since = s->sent_ms; /* not a retry */
    s->state = WS_WAIT;
}

static int is_eog(const wsess *s, int32_t t)
{
    for (int i = 0; i < s->n_eog; i++)
        if (s->eog[i] == t) return 1;
    return 0;
}

/* One row of a PT_SAMPLED: the token of session sess at step, or samplerd's error. */
static void on_sampled_row(worker *w, uint64_t id, const pm_sampled_row *row)
{
    wsess *s = sess_find(w, row->sess);
    if (!s || s->state != WS_WAIT || s->req != id || row->step != s->step)
        return; /* a stale or duplicate answer */
    char code[32];
    if (!row->has_tok && row->has_code && s->grammar &&
        errcode_from_name(proto_sv_copy(row->code, code, sizeof code)) == ERR_GRAMMAR_UNKNOWN) {
        if (s->gtext_step == (int64_t)s->step) { /* the text went with this very row */
            send_sess_error(w, s->sess, s->epoch, "samplerd asked for a grammar it was sent");
            s->state = WS_IDLE;
            return;
        }
        s->gtext_step = -1; /* a restarted samplerd, or its cache evicted it: the row again, with the text */
        sbatch b;
        sbatch_begin(w, &b);
        sbatch_add(w, &b, s);
        sbatch_flush(w, &b);
        return;
    }
    if (!row->has_tok && row->has_end) { /* the grammar allows no token: the generation ends */
        char end[32];
        proto_sv_copy(row->end, end, sizeof end);
        pm_error e = {.msg = proto_sv_of("the grammar allows no further token"), .sess = s->sess, .has_sess = 1,
                      .epoch = s->epoch, .has_epoch = 1, .end = proto_sv_of(end), .has_end = 1};
        proto_writer pw;
        proto_begin(&pw, PT_ERROR, 0);
        pm_error_put(&pw, &e);
        send_front(w, &pw);
        s->state = WS_IDLE;
        return;
    }
    if (row->has_err || !row->has_tok) {
        char msg[200];
        proto_sv_copy(row->err, msg, sizeof msg);
        send_sess_error(w, s->sess, s->epoch, row->err.n ? msg : "samplerd sent no token");
        s->state = WS_IDLE;
        return;
    }
    if (row->tok < 0 || row->tok >= w->n_vocab) {
        send_sess_error(w, s->sess, s->epoch, "samplerd returned a token out of range");
        s->state = WS_IDLE;
        return;
    }
    int32_t t = (int32_t)row->tok;
    s->mu_set = row->has_mu;
    s->mu = row->mu;
    s->gst_len = 0; /* without a state from samplerd, the next row asks for a replay */
    if (s->grammar && row->has_gst && row->gst.n) {
        uint8_t *g = realloc(s->gst, row->gst.n);
        if (g) {
            memcpy(g, row->gst.p, row->gst.n);
            s->gst = g;
            s->gst_len = row->gst.n;
        }
    }
    pm_token tk = {.sess = s->sess, .step = s->step, .tok = t, .epoch = s->epoch, .mu = s->mu,
                   .has_mu = s->mu_set, .logprob = row->logprob, .has_logprob = row->has_logprob};
    proto_writer pw;
    proto_begin(&pw, PT_TOKEN, id);
    pm_token_put(&pw, &tk);
    const msgpack_object *top = row->has_top ? row->top : NULL;
    if (top) { /* at most the sampler's maximum */
        uint32_t k = top->via.array.size < SMP_MAX_PROBS ? top->via.array.size : SMP_MAX_PROBS;
        proto_put_array_begin(&pw, MF_TOP, k);
        for (uint32_t i = 0; i < k; i++) msgpack_pack_object(&pw.pk, top->via.array.ptr[i]);
    }
    send_front(w, &pw);
    s->toks[s->n_toks++] = t;
    s->step++;
    s->budget--;
    int full = s->n_toks >= w->n_ctx || s->n_toks >= s->cap_toks;
    s->state = s->budget == 0 || is_eog(s, t) || full ? WS_IDLE : WS_READY;
    if (full && s->budget && !is_eog(s, t))
        wrk_sess_error_code(w, s->sess, s->epoch, "the session's context is full", ERR_NONE, 1);
}

static void on_sampler(worker *w, const proto_msg *pm)
{
    if (pm->type == PT_SAMPLED) {
        pm_sampled m;
        pm_sampled_get(pm, &m);
        for (uint32_t i = 0; i < m.rows->via.array.size; i++) {
            pm_sampled_row row;
            pm_sampled_row_get(pm, &m.rows->via.array.ptr[i], &row);
            on_sampled_row(w, pm->id, &row);
        }
    } else if (pm->type == PT_ERROR) { /* the whole batch failed (e.g. the ring) */
        pm_error e;
        pm_error_get(pm, &e);
        char msg[200];
        proto_sv_copy(e.msg, msg, sizeof msg);
        for (int i = 0; i < w->n_s; i++) {
            wsess *s = &w->s[i];
            if (s->state != WS_WAIT || s->req != pm->id) continue;
            send_sess_error(w, s->sess, s->epoch, msg);
            s->state = WS_IDLE;
        }
    }
}

/* Re-sends the rows samplerd left unanswered for SAMPLE_RETRY_MS (it may have
 * restarted: the answer is the same). A row waiting longer than w->sampler_timeout_ms in
 * all fails its session with an "unavailable" error naming samplerd, so a samplerd that
 * stays down is a clear error for the client, not a hang. One log line per round at
 * most every 2 s. */
static void retry_samples(worker *w, int64_t now)
{
    sbatch b;
    int any = 0, gave_up = 0;
    int64_t oldest = 0;
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state != WS_WAIT || now - s->sent_ms < SAMPLE_RETRY_MS) continue;
        if (now - s->wait_since >= w->sampler_timeout_ms) {
            char msg[200];
            snprintf(msg, sizeof msg, "samplerd has not answered for %lld s (is it running? 'llmc status')",
                     (long long)(now - s->wait_since) / 1000);
            wrk_sess_error_code(w, s->sess, s->epoch, msg, ERR_UNAVAILABLE, 0);
            s->state = WS_IDLE;
            gave_up++;
            continue;
        }
        if (!any++) sbatch_begin(w, &b);
        if (now - s->wait_since > oldest) oldest = now - s->wait_since;
        sbatch_add(w, &b, s);
    }
    if (any) sbatch_flush(w, &b);
    if ((any || gave_up) && now - w->retry_log_ms >= 2000) {
        w->retry_log_ms = now;
        log_warn("samplerd did not answer: asked again for %d sessions (oldest waiting %lld ms)%s", any,
                 (long long)oldest, gave_up ? "; gave up on sessions waiting past the sampler timeout" : "");
    }
}

/* ---- the front door's requests -------------------------------------------------------- */

/* PT_REPORT: everything a new front door needs to adopt session s: its tokens, step,
 * budget, sampler state and the front door's own record (fb). */
static void send_report(worker *w, const wsess *s)
{
    proto_sessrec rec = {
        .sess = s->sess, .toks = s->toks, .n_toks = (uint32_t)s->n_toks, .step = s->step, .budget = s->budget,
        .sp = s->sp, .sp_len = s->sp_len, .epoch = s->epoch, .fb = s->fb, .fb_len = s->fb_len, .mu = s->mu,
        .mu_set = s->mu_set, .n_eog = s->n_eog, .idle = s->state == WS_IDLE, .grammar = s->grammar,
        .grammar_len = s->grammar_len,
    };
    memcpy(rec.eog, s->eog, (size_t)s->n_eog * sizeof *rec.eog);
    proto_writer pw;
    proto_begin(&pw, PT_REPORT, s->sess);
    proto_put_sessrec(&pw, &rec);
    send_front(w, &pw);
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "EMBEDDING vec is little-endian f32 as in memory");

/* ---- embeddings: prefill-only sessions pooled step by step ----------------------- */

/* Checks an embedding session's pooling and makes the step's hidden-row buffers (once). */
static int embed_ready(worker *w, int pool, char *err, size_t cap)
{
    if (pool != ENG_POOL_MEAN && pool != ENG_POOL_LAST) return errf(err, cap, "embed: unknown pooling %d", pool);
    if (w->hidden) return 0;
    w->hidden = malloc((size_t)w->n_items_cap * (size_t)eng_config_of(w->m)->n_embd * sizeof *w->hidden);
    w->hrow = malloc((size_t)w->n_items_cap * sizeof *w->hrow);
    if (w->hidden && w->hrow) return 0;
    free(w->hidden);
    free(w->hrow);
    w->hidden = NULL;
    w->hrow = NULL;
    return errf(err, cap, "worker out of memory for hidden states");
}

/* Pools a step's nh hidden rows (w->hrow: whose, in item order) into their sessions; a
 * session whose input is all in sends its vector (little-endian f32, as in memory) and is
 * dropped: no KV is kept. */
static void embed_rows(worker *w, int nh)
{
    int E = eng_config_of(w->m)->n_embd;
    for (int k0 = 0, k = 0; k0 < nh; k0 = k) {
        wsess *s = w->hrow[k0];
        while (k < nh && w->hrow[k] == s) k++; /* a session's rows are contiguous in a step */
        eng_pool_add(s->eacc, w->hidden + (size_t)k0 * E, k - k0, E, s->embed);
        if (eng_session_pos(s->es) < s->n_toks) continue;
        float *v = w->hidden + (size_t)k0 * E; /* pooled already: the row is free */
        eng_pool_finish(s->eacc, s->n_toks, E, s->embed, v);
        pm_embedding e = {.vec = {(const char *)v, (size_t)E * sizeof *v}, .sess = s->sess, .has_sess = 1,
                          .epoch = s->epoch, .has_epoch = 1};
        proto_writer pw;
        proto_begin(&pw, PT_EMBEDDING, 0);
        pm_embedding_put(&pw, &e);
        send_front(w, &pw);
        log_debug("session %llu: embedding of %d tokens", (unsigned long long)s->sess, s->n_toks);
        wrk_sess_drop(s);
    }
}

/* Checks a PT_RUN's record before any slot is touched: its sampler parameters, its length
 * against the context, its tokens against the vocabulary, an embedding's pooling. 0, or
 * -1 with err. */
static int run_check(worker *w, const proto_sessrec *rec, const msgpack_object *toks, smp_params *p, char *err,
                     size_t cap)
{
    uint32_t n = rec->n_toks;
    if (smp_params_from_wire(rec->sp, rec->sp_len, w->n_vocab, p, err, cap) != 0) return -1;
    if (n == 0 || n >= (uint32_t)w->n_ctx)
        return errf(err, cap, "session needs %u tokens; the context holds %d", n, w->n_ctx);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *e = &toks->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER || e->via.u64 >= (uint64_t)w->n_vocab)
            return errf(err, cap, "token %u of the session is outside the vocabulary (0..%d)", i, w->n_vocab - 1);
    }
    return rec->embed ? embed_ready(w, rec->embed, err, cap) : 0;
}

/* The slot of session sess: its own (a held chat's next turn, an adopted session), else a
 * free one with an engine session and room for n_ctx + 1 tokens. NULL when there is none
 * (the error is sent: worker_full when every slot is taken). */
static wsess *run_slot(worker *w, uint64_t sess, uint64_t epoch)
{
    char err[256];
    wsess *s = sess_find(w, sess);
    for (int i = 0; i < w->n_s && !s; i++)
        if (w->s[i].state == WS_FREE) s = &w->s[i];
    if (!s) {
        wrk_sess_error_code(w, sess, epoch, "worker is full (all sessions busy)", ERR_WORKER_FULL, 0);
        return NULL;
    }
    if (!s->es && !(s->es = eng_session_new(w->m, w->n_ctx, w->o->kv, err, sizeof err))) {
        send_sess_error(w, sess, epoch, err);
        return NULL;
    }
    if (s->cap_toks < w->n_ctx + 1) { /* the session can never hold more tokens */
        int32_t *t = realloc(s->toks, (size_t)(w->n_ctx + 1) * sizeof *t);
        if (!t) {
            send_sess_error(w, sess, epoch, "worker out of memory");
            return NULL;
        }
        s->toks = t;
        s->cap_toks = w->n_ctx + 1;
    }
    return s;
}

/* Copies into s what its record carries besides the tokens: the front door's record, the
 * grammar (its state is rebuilt from the generated tokens), the sampler's needs and
 * state, the end-of-generation tokens, an embedding's accumulator. 0, or -1 when out of
 * memory. */
static int sess_take(worker *w, wsess *s, const proto_sessrec *rec, const smp_params *p)
{
    s->step = (uint32_t)rec->step;
    s->budget = rec->budget;
    memcpy(s->sp, rec->sp, rec->sp_len);
    s->sp_len = rec->sp_len;
    free(s->fb);
    s->fb = NULL;
    s->fb_len = 0;
    if (rec->fb_len && (s->fb = malloc(rec->fb_len))) {
        memcpy(s->fb, rec->fb, rec->fb_len);
        s->fb_len = rec->fb_len;
    }
    free(s->grammar);
    s->grammar = NULL;
    s->grammar_len = 0;
    s->gst_len = 0;
    s->gtext_step = -1;
    if (rec->grammar && !(s->grammar = malloc(rec->grammar_len + 1))) return -1;
    if (rec->grammar) {
        memcpy(s->grammar, rec->grammar, rec->grammar_len);
        s->grammar_len = rec->grammar_len;
        s->ghash = hash_fnv1a(HASH_FNV_SEED, rec->grammar, rec->grammar_len); /* = gram_text_hash */
    }
    int nh = smp_history_needed(p);
    s->n_hist = nh < 0 || nh > HIST_MAX ? HIST_MAX : nh;
    s->mu_set = rec->mu_set;
    s->mu = rec->mu;
    memcpy(s->eog, rec->eog, sizeof s->eog);
    s->n_eog = rec->n_eog;
    s->embed = rec->embed;
    size_t E = (size_t)eng_config_of(w->m)->n_embd;
    if (s->embed && !s->eacc && !(s->eacc = malloc(E * sizeof *s->eacc))) return -1;
    if (s->embed) memset(s->eacc, 0, E * sizeof *s->eacc);
    return 0;
}

/* PT_RUN: (re)start a session from the front door's tokens. */
static void on_run(worker *w, const proto_msg *pm)
{
    proto_sessrec rec;
    proto_get_sessrec(pm, &rec);
    uint64_t sess = rec.sess, epoch = rec.epoch;
    const msgpack_object *toks = proto_field(pm, MF_TOKS);
    uint32_t n = rec.n_toks;
    char err[256];
    smp_params p;
    if (run_check(w, &rec, toks, &p, err, sizeof err) != 0) {
        send_sess_error(w, sess, epoch, err);
        return;
    }
    wsess *s = run_slot(w, sess, epoch);
    if (!s) return;
    /* keep the cached prefix that matches; at least one token must be evaluated */
    int pos = s->state == WS_FREE || rec.embed ? 0 : eng_session_pos(s->es), keep = 0; /* embed: every row */
    while (keep < pos && keep < (int)n && s->toks[keep] == (int32_t)toks->via.array.ptr[keep].via.u64) keep++;
    if (keep >= (int)n) keep = rec.embed ? 0 : (int)n - 1;
    eng_session_truncate(s->es, keep);
    keep = eng_session_pos(s->es); /* less when a ring no longer holds keep's window (it restarts) */
    for (uint32_t i = 0; i < n; i++) s->toks[i] = (int32_t)toks->via.array.ptr[i].via.u64;
    s->n_toks = (int)n;
    if (w->kv_on && !rec.embed && (keep = wkv_start(w, s, sess, epoch, keep)) < 0) return;
    s->sess = sess;
    s->epoch = epoch;
    s->seq = ++w->next_seq;
    if (sess_take(w, s, &rec, &p) != 0) {
        send_sess_error(w, sess, epoch, "worker out of memory");
        wrk_sess_drop(s);
        return;
    }
    s->state = s->budget || s->embed ? WS_READY : WS_IDLE;
    log_debug("session %llu: run %u tokens (cached %d), step %u, budget %llu", (unsigned long long)sess, n, keep,
              s->step, (unsigned long long)s->budget);
}

static void on_front(worker *w, const proto_msg *pm)
{
    w->last_front_ms = net_now_ms();
    switch (pm->type) {
    case PT_FRONT_HB: {
        pm_front_hb hb;
        pm_front_hb_get(pm, &hb);
        uint64_t e = hb.epoch;
        if (e != w->epoch) {
            /* a new front door: it adopts the sessions we hold (they keep running) */
            int n = 0;
            for (int i = 0; i < w->n_s; i++) {
                wsess *s = &w->s[i];
                /* a session this front door sent (its RUN came before its first
                 * heartbeat) is known to it: reported, a chat it holds between turns
                 * would be refused and stopped, its KV cache lost */
                if (s->state == WS_FREE || s->epoch == e) continue;
                if (s->embed) { /* nothing to adopt: its client asks the new front door again */
                    wrk_sess_drop(s);
                    continue;
                }
                s->epoch = e;
                send_report(w, s);
                n++;
            }
            if (w->epoch) log_info("front door restarted (epoch %llx); reported %d sessions to it", (unsigned long long)e, n);
            w->epoch = e;
        }
        if (!w->registered) log_info("registered with the front door");
        w->registered = 1;
        break;
    }
    case PT_RUN: on_run(w, pm); break;
    case PT_STOP: {
        pm_stop st;
        pm_stop_get(pm, &st);
        wsess *s = sess_find(w, st.sess);
        if (s) wrk_sess_drop(s);
        break;
    }
    default: log_warn("front door sent an unexpected %s", proto_type_name(pm->type));
    }
}

/* ---- one step ------------------------------------------------------------------------ */

/* The step-delay test hook keeps a schedule: step k starts no earlier than k × delay
 * after the first, and a step that starts late (a sleep that overshot on a loaded
 * machine) is paid back by the next ones starting at once, so n steps last about
 * n × delay however late each sleep wakes. A pause of a second resets the schedule. */
static void step_delay(worker *w)
{
    int64_t now = net_now_ms();
    if (!w->step_due_ms || now - w->step_due_ms > 1000) w->step_due_ms = now;
    w->step_due_ms += w->step_delay_ms;
    if (w->step_due_ms > now) usleep((useconds_t)(w->step_due_ms - now) * 1000);
}

/* A step being planned: n items, nl sessions whose logits it computes (w->lrow), nh
 * hidden rows of embedding sessions (w->hrow), no sessions to prefill (w->order). */
typedef struct { int n, nl, nh, no; } splan;

/* Every READY session with one token left (decoding) goes into the step; the others wait
 * in w->order, by arrival. A session preempted for KV blocks resumes alone, from what is
 * still published. */
static void plan_decode(worker *w, splan *p, int64_t now)
{
    for (int i = 0; i < w->n_s; i++) {
        wsess *s = &w->s[i];
        if (s->state != WS_READY) continue;
        if (s->kv_wait) {
            if (!wkv_resume_ok(w, now)) continue;
            s->kv_wait = 0;
            eng_session_reuse(s->es, s->toks, s->n_toks - 1);
        }
        if (s->n_toks - eng_session_pos(s->es) == 1 && !s->embed) {
            w->items[p->n++] = (eng_item){ s->es, s->toks[s->n_toks - 1], true, false };
            w->lrow[p->nl++] = s;
        } else {
            w->order[p->no++] = i;
        }
    }
    int *order = w->order;
    for (int a = 1; a < p->no; a++) /* insertion sort by arrival: few sessions */
        for (int b = a; b > 0 && w->s[order[b]].seq < w->s[order[b - 1]].seq; b--) {
            int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
        }
}

/* Prefill chunks of the sessions in w->order, first come first served, up to room tokens
 * in all and to the positions that avail more KV blocks of each kind hold (avail NULL:
 * no limit). */
static void plan_prefill(worker *w, splan *p, int room, int *avail)
{
    for (int k = 0; k < p->no && room > 0; k++) {
        wsess *s = &w->s[w->order[k]];
        int pos = eng_session_pos(s->es), take = s->n_toks - pos;
        if (take > room) take = room;
        int need[ENG_KV_KINDS];
        while (avail && take > 0 && (eng_session_kv_need(s->es, take, take, need), need[0] > avail[0] || need[1] > avail[1]))
            take = (pos + take - 1) / 16 * 16 - pos; /* one block less */
        if (take <= 0) continue;
        for (int j = 0; avail && j < ENG_KV_KINDS; j++) avail[j] -= need[j];
        room -= take;
        for (int j = 0; j < take; j++) {
            if (s->embed) w->hrow[p->nh++] = s;
            w->items[p->n++] = (eng_item){ s->es, s->toks[pos + j], false, s->embed != 0 };
        }
        if (pos + take == s->n_toks && !s->embed) {
            w->items[p->n - 1].logits = true;
            w->lrow[p->nl++] = s;
        }
    }
}

/* Builds and runs one step: every READY session with one token left (decoding), then the
 * READY sessions with more (prefill) in arrival order, up to batch_tokens items in all.
 * Returns 1 if a step ran. */
static int step(worker *w)
{
    /* the last step's tokens are due from samplerd any moment: wait for them (the loop
     * polls until then), so that decoding sessions join this step; and while sessions
     * are mid-generation the step keeps the smaller budget */
    int64_t now = net_now_ms();
    int generating = 0;
    for (int i = 0; i < w->n_s; i++) {
        const wsess *x = &w->s[i];
        if (x->state != WS_WAIT) continue;
        if (now - x->sent_ms < SAMPLE_WAIT_MS) return 0;
        generating = 1;
    }
    splan p = {0};
    plan_decode(w, &p, now);
    /* prefill gets what the decode tokens leave of the budget, but never less than
     * PREFILL_MIN (or the whole budget if smaller): many decoders cannot starve a newcomer */
    /* nobody decoding: nobody waits on this step, so it may take more (one pass over the
     * weights serves every prompt that arrived together) */
    int budget = p.n || generating ? w->batch_tokens : w->idle_tokens;
    int room = budget - p.n, floor = budget < PREFILL_MIN ? budget : PREFILL_MIN;
    if (room < floor) room = floor;
    int avail[ENG_KV_KINDS];
    plan_prefill(w, &p, room, wkv_avail(w, avail) == 0 ? avail : NULL);
    if (!p.n && p.no) plan_prefill(w, &p, room, NULL); /* no room at all: the step meets the full
                                                      * pool, and preempts or waits */
    int n = p.n, nl = p.nl, nh = p.nh, no = p.no;
    wsess **lrow = w->lrow;
    if (!n) return 0;
    if (w->stall_step && (long)++w->steps >= w->stall_step) {
        log_warn("LLM_FAULT_STALL_STEP=%ld: the compute thread stops making progress (test)", w->stall_step);
        while (!dmn_stop) usleep(50 * 1000);
        return 0;
    }
    if (w->step_delay_ms > 0) step_delay(w);
    /* logits rows of sessions in consecutive slots (a decode step, as a rule) go straight
     * into the ring; others into w->logits, copied to their slots after the step */
    int direct = nl > 0;
    for (int k = 1; k < nl && direct; k++) direct = lrow[k] - lrow[0] == k;
    float *lg = direct ? lshm_slot(w->ring, (uint32_t)(lrow[0] - w->s)) : w->logits;
    char err[256];
    int64_t t0 = net_now_ms();
    int rc = eng_step_hidden(w->m, w->items, n, lg, direct ? lshm_slot_floats(w->ring) : 0, w->hidden, err, sizeof err);
    log_debug("step: %d items (%d rows of logits, %d sessions prefilling) in %lld ms", n, nl, no,
              (long long)(net_now_ms() - t0));
    if (rc != 0 && w->kv_on && strstr(err, "KV pool full") && wkv_full(w, net_now_ms()))
        return 1; /* next step, with room (or after other workers' sessions give some back) */
    for (int i = 0; i < w->n_s && rc == 0; i++) /* a step went through: nobody waits for room */
        if (w->s[i].state == WS_READY && !w->s[i].kv_wait) w->s[i].kv_wait_ms = 0;
    if (rc != 0) {
        for (int i = 0; i < n; i++) { /* every session of the step (tokens were checked: out of memory) */
            wsess *s = NULL;
            for (int k = 0; k < w->n_s && !s; k++)
                if (w->s[k].es == w->items[i].s && w->s[k].state == WS_READY) s = &w->s[k];
            if (!s) continue;
            send_sess_error(w, s->sess, s->epoch, err);
            s->state = WS_IDLE;
        }
        return 1;
    }
    if (nh) embed_rows(w, nh);
    if (!nl) return 1;
    sbatch b;
    sbatch_begin(w, &b);
    for (int k = 0; k < nl; k++) {
        if (!direct)
            memcpy(lshm_slot(w->ring, (uint32_t)(lrow[k] - w->s)), w->logits + (size_t)k * w->n_vocab,
                   (size_t)w->n_vocab * sizeof(float));
        sbatch_add(w, &b, lrow[k]);
    }
    sbatch_flush(w, &b);
    return 1;
}

/* ---- the loop ------------------------------------------------------------------------- */

static void drain(worker *w, void *sock, int from_front)
{
    for (int k = 0; k < 256; k++) {
        proto_msg pm;
        size_t nbytes;
        char err[200];
        int r = net_recv_msg(sock, 0, NULL, NULL, &pm, &nbytes, err, sizeof err);
        if (r == 0) return;
        static log_limit lim = LOG_LIMIT("dropped bad message");
        if (r < 0)
            log_warn_limited(&lim, "dropped a bad message from %s: %s", from_front ? "the front door" : "samplerd", err);
        else if (from_front) on_front(w, &pm);
        else on_sampler(w, &pm);
        proto_msg_free(&pm);
    }
}

static int connect_sockets(worker *w, const char *dir, void **front)
{
    char ep[300], err[200] = "";
    *front = net_socket(w->ctx, ZMQ_DEALER);
    w->samp = net_socket(w->ctx, ZMQ_DEALER);
    if (!*front || !w->samp) return -1;
    if (w->o->front) snprintf(ep, sizeof ep, "%s", w->o->front);
    else net_endpoint(dir, NET_EP_WORKERS, ep, sizeof ep);
    if (net_curve(*front, ep, 0, err, sizeof err) != 0 || zmq_connect(*front, ep) != 0) {
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
    wio_stop(&w->io);
    for (int i = 0; w->s && i < w->n_s; i++) {
        wrk_sess_drop(&w->s[i]);
        eng_session_free(w->s[i].es);
        free(w->s[i].toks);
        free(w->s[i].eacc);
    }
    free(w->hidden);
    free(w->hrow);
    free(w->s);
    free(w->logits);
    free(w->items);
    free(w->order);
    free(w->lrow);
    lshm_destroy(&w->ring);
    kvs_close(w->pools);
    net_close(&w->samp);
    if (w->ctx) zmq_ctx_term(w->ctx);
    eng_close(w->m);
}

/* How long the loop may sleep: 0 with work ready, unless the last step's tokens are due
 * from samplerd any moment (decoding sessions then join the next step: wait for them up
 * to SAMPLE_WAIT_MS); otherwise until a sample retry is due, at most 50 ms. A message
 * on either socket ends the wait. */
static long poll_timeout(const worker *w, int64_t now)
{
    int ready = 0, recent = 0;
    long t = 50;
    for (int i = 0; i < w->n_s; i++) {
        const wsess *s = &w->s[i];
        ready |= s->state == WS_READY;
        if (s->state != WS_WAIT) continue;
        long age = (long)(now - s->sent_ms), due = age < SAMPLE_WAIT_MS ? SAMPLE_WAIT_MS - age : SAMPLE_RETRY_MS - age;
        recent |= age < SAMPLE_WAIT_MS;
        if (due < t) t = due;
    }
    if (ready && !recent) return 0;
    return t < 0 ? 0 : t;
}

static void *warm_main(void *m)
{
    eng_warm(m);
    return NULL;
}

/* Maps the segment read-only (no reload) and attaches the master's KV pool if --kv-pool
 * says so. 0, or 1 with the error logged. */
static int attach(worker *w, const engd_opts *o)
{
    char err[256];
    int64_t t0 = net_now_ms();
    w->m = eng_attach(o->segment, err, sizeof err);
    if (!w->m) {
        log_error("cannot attach segment %s: %s", o->segment, err);
        return 1;
    }
    eng_set_threads(w->m, o->threads);
    log_info("attached segment %s read-only in %lld ms (no reload)", o->segment, (long long)(net_now_ms() - t0));
    kvs_spec ks = { .kv = o->kv, .n_ctx = o->n_ctx, .step = engd_chunk_max(o) };
    if (o->kv_pool && kvs_parse(o->kv_pool, &ks, err, sizeof err) == 0 && kvs_enabled(&ks)) {
        if (kvs_open(w->m, &ks, 0, w->pools, err, sizeof err) != 0) {
            log_error("cannot attach the KV pool: %s", err);
            eng_close(w->m);
            w->m = NULL;
            return 1;
        }
        for (int k = 0; k < ENG_KV_KINDS; k++)
            if (w->pools[k])
                log_info("attached KV pool%s: %u blocks of %u tokens (slot %d)", k == ENG_KV_RING ? " (ring layers)" : "",
                         kvp_geometry_of(w->pools[k])->n_blocks, kvp_geometry_of(w->pools[k])->id.block_tokens,
                         kvp_slot_of(w->pools[k]));
        eng_set_kv_pools(w->m, w->pools[ENG_KV_WHOLE], w->pools[ENG_KV_RING]); /* every session holds a block table */
        w->kv_on = 1;
        w->kv_step = ks.step;
    }
    return 0;
}

/* The worker's sizes from the options and the model, and the test hooks from the
 * environment. */
static void knobs(worker *w, const engd_opts *o)
{
    w->n_vocab = eng_config_of(w->m)->n_vocab;
    w->eos = eng_config_of(w->m)->eos_id;
    w->n_s = o->max_sessions > 0 ? o->max_sessions : w->kv_on ? ENGD_POOL_SESSIONS_DEFAULT : ENGD_SESSIONS_DEFAULT;
    w->batch_tokens = o->batch_tokens > 0 ? o->batch_tokens : ENGD_BATCH_TOKENS_DEFAULT;
    w->idle_tokens = o->idle_tokens > 0 ? o->idle_tokens : ENGD_IDLE_TOKENS_DEFAULT;
    const char *fs = getenv("LLM_FAULT_STALL_STEP");
    w->stall_step = fs ? atol(fs) : 0;
    const char *fd = getenv("LLM_FAULT_STEP_DELAY_MS");
    w->step_delay_ms = fd && atol(fd) > 0 && atol(fd) < 10000 ? atol(fd) : 0;
    if (w->step_delay_ms) log_warn("LLM_FAULT_STEP_DELAY_MS=%ld: every step is slowed (test)", w->step_delay_ms);
    const char *st = getenv("LLM_SAMPLER_TIMEOUT_MS");
    w->sampler_timeout_ms = st && atol(st) > 0 ? atol(st) : 20000;
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
    if (attach(&w, o) != 0) return 1;
    knobs(&w, o);
    w.s = calloc((size_t)w.n_s, sizeof *w.s);
    w.logits = malloc((size_t)w.n_s * (size_t)w.n_vocab * sizeof(float));
    w.order = malloc((size_t)w.n_s * sizeof *w.order);
    w.lrow = malloc((size_t)w.n_s * sizeof *w.lrow);
    w.n_items_cap = (w.batch_tokens > w.idle_tokens ? w.batch_tokens : w.idle_tokens) + PREFILL_MIN + w.n_s;
    w.items = malloc((size_t)w.n_items_cap * sizeof *w.items);
    w.ring = lshm_create(getpid(), (uint32_t)w.n_s, (uint32_t)w.n_vocab, err, sizeof err);
    w.ctx = zmq_ctx_new();
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    uint64_t wid = 0;
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(&wid, sizeof wid, 1, ur) != 1) wid = (uint64_t)getpid() << 20 ^ (uint64_t)t0;
    if (ur) fclose(ur);
    void *front = NULL;
    eng_session *probe = w.ctx ? eng_session_new(w.m, o->n_ctx, o->kv, err, sizeof err) : NULL; /* --kv checked */
    w.n_ctx = probe ? eng_session_n_ctx(probe) : 0; /* what --ctx 0 resolves to */
    eng_session_free(probe);
    if (!w.s || !w.logits || !w.items || !w.order || !w.lrow || !w.ring || !w.ctx || !w.n_ctx || connect_sockets(&w, dir, &front) != 0) {
        if (!w.ring || (w.ctx && !w.n_ctx)) log_error("%s", err);
        net_close(&front);
        worker_free(&w);
        return 1;
    }
    wio_init(&w.io, w.ctx, front, w.m, wid, host, w.n_s, w.n_ctx);
    if (!(w.pipe = wio_start(&w.io, err, sizeof err))) {
        log_error("%s", err);
        worker_free(&w);
        return 1;
    }
    /* map the weights' pages in the background: the worker registers at once, and its
     * first request does not pay a page fault per 4 KiB of weights */
    pthread_t warm;
    int warming = pthread_create(&warm, NULL, warm_main, w.m) == 0;
    log_info("serving up to %d sessions of %d positions, steps of up to %d tokens (%d when none decodes)", w.n_s,
             w.n_ctx, w.batch_tokens, w.idle_tokens);
    while (!dmn_stop) {
        int64_t now = net_now_ms();
        zmq_pollitem_t it[2] = {{w.pipe, 0, ZMQ_POLLIN, 0}, {w.samp, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, poll_timeout(&w, now)) < 0 && zmq_errno() != EINTR) break;
        drain(&w, w.samp, 0);
        drain(&w, w.pipe, 1);
        now = net_now_ms();
        if (w.registered && now - w.last_front_ms > NET_HB_MS * NET_HB_LIVENESS) {
            log_warn("front door silent for %lld ms; waiting for it to come back", (long long)(now - w.last_front_ms));
            w.registered = 0;
        }
        retry_samples(&w, now);
        publish_load(&w);
        step(&w);
        publish_load(&w);
    }
    int active = 0;
    for (int i = 0; i < w.n_s; i++) active += w.s[i].state != WS_FREE;
    log_info("shutting down (%d active sessions handed back to the front door)", active);
    if (warming) pthread_join(warm, NULL);
    worker_free(&w);
    return 0;
}
