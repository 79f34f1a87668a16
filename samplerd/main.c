/*
 * samplerd - the sampling daemon. Stateless: every PT_SAMPLE carries the session id,
 * the step, the parameters, the token history and the carried mirostat mu, and the
 * logits are read from the asking worker's shared-memory ring (logits_shm.h). The
 * randomness is a pure function of (seed, session, step), so a retried request, or the
 * same request sent to a restarted samplerd, gets the same token.
 *
 * Structured output (grammar/gram.h): a row with a grammar carries the matcher's state
 * (gst) or, when its worker has none, the tokens generated so far (gtoks), replayed from
 * the start. The logits of tokens the grammar does not allow next become -inf, the
 * chosen token advances the state and the new state goes back with the token, so the
 * state lives with the session (like mirostat's mu) and a restarted samplerd gives the
 * same tokens. Kept here only as caches: compiled grammars with their maskers, keyed by
 * the text's hash (and the text), over the token texts of the worker's segment. Rows
 * carry the hash (ghash) and the text only the first time: a hash not in the cache (a
 * restart, an eviction) is answered with code grammar_unknown and the worker sends the
 * text again. A grammar that does not compile or a corrupt state is an error row; a state
 * that allows no token ends the generation (the row's end: "grammar" when the grammar is
 * complete, "grammar_dead_end" when not): never unconstrained output.
 *
 *   samplerd [--run-dir DIR] [--bind EP]
 *
 * Bad requests (malformed msgpack, another protocol version, an unknown ring, a bad
 * parameter) get a PT_ERROR reply naming the problem and a log line (rate-limited per
 * kind: a flood costs a few lines and a count); the daemon keeps serving.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>

#include "daemon.h"
#include "gguf.h"
#include "gram.h"
#include "log.h"
#include "logits_shm.h"
#include "net.h"
#include "proto.h"
#include "sampler.h"
#include "tok.h"
#include "tok_source.h"
#include "zap.h"
#include "errcode.h"

#define RING_CACHE 32
#define HIST_MAX 8192
#define GRAM_CACHE 16 /* compiled grammars (with their maskers) kept */
#define PREFETCH_MAX 64 /* next masks computed after a batch's reply */

/* A compiled grammar and its masker over the vocabulary of pieces_seg. */
typedef struct {
    uint64_t     hash;     /* gram_text_hash(text) */
    char        *text;     /* (len) the GBNF text, compared on a hash match */
    size_t       len;
    gram        *g;
    gram_masker *mk;
    int64_t      used_ms;
} gram_ent;

/* A state a row advanced to, with its grammar: its next mask is computed after the reply. */
typedef struct {
    gram_ent   *ge;
    gram_state *gs;
} gram_pre;

typedef struct {
    lshm   *ring;
    ino_t   ino;      /* /dev/shm inode when mapped: a recreated ring has another */
    int64_t used_ms;
} ring_ent;

typedef struct {
    void     *sock;
    ring_ent  rings[RING_CACHE];
    smp_work *work;
    int32_t  *hist;   /* (HIST_MAX) */
    char      pieces_seg[64]; /* segment whose token texts smp_work (DRY) and gvocab hold */
    gram_vocab *gvocab;   /* the segment's token texts for grammar masks; NULL: none */
    gram_ent  gcache[GRAM_CACHE]; /* grammars over gvocab */
    uint64_t *gmask;      /* (gram_mask_words(gvocab)) */
    float    *glogits;    /* (n_glogits) a row's logits with the grammar's mask applied */
    size_t    n_glogits;
    uint8_t  *gst;        /* (gst_cap) the advanced state's wire form */
    size_t    gst_cap;
    /* The states this batch's rows advanced to: once the reply is sent, their next masks
     * are computed into the maskers' caches while the workers run their next forward
     * pass, so the next rows find them ready (the mask leaves the critical path). */
    gram_pre  pre[PREFETCH_MAX];
    int       n_pre;
    uint64_t  served, errors;
} sampler_daemon;

static void usage(FILE *f)
{
    fprintf(f, "usage: samplerd [--run-dir DIR] [--bind ENDPOINT]\n"
               "  --run-dir DIR   run directory [LLM_RUN_DIR, default $XDG_RUNTIME_DIR/llm or /tmp/llm-$UID]\n"
               "  --bind EP       endpoint to serve (default ipc://RUN_DIR/sampler.sock) [LLM_SAMPLER]\n"
               "CURVE on tcp:// when LLM_CURVE_SECRET is set. LLM_LOG_LEVEL=debug|info|warn|error.\n");
}

/* The cached read-only mapping of ring name, (re)opened when needed; NULL with err. */
static const lshm *ring_get(sampler_daemon *d, const char *name, char *err, size_t errcap)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    if (strncmp(name, "/llm-logits-", 12) != 0 || strchr(name + 1, '/') || stat(path, &st) != 0) {
        errf(err, errcap, "logits ring '%.64s' does not exist", name);
        return NULL;
    }
    int64_t now = net_now_ms();
    ring_ent *lru = &d->rings[0];
    for (int i = 0; i < RING_CACHE; i++) {
        ring_ent *e = &d->rings[i];
        if (e->ring && strcmp(lshm_name(e->ring), name) == 0) {
            if (e->ino == st.st_ino) {
                e->used_ms = now;
                return e->ring;
            }
            lshm_destroy(&e->ring); /* the worker was replaced: map the new ring */
        }
        if (!e->ring || e->used_ms < lru->used_ms) lru = e;
        if (!e->ring) break;
    }
    lshm_destroy(&lru->ring);
    lru->ring = lshm_open_ro(name, err, errcap);
    lru->ino = st.st_ino;
    lru->used_ms = now;
    return lru->ring;
}

/* Unmaps every cached ring whose name is gone from /dev/shm or now names another
 * object: a dead worker's ring is unlinked by its master, and a mapping kept past that
 * pins its memory (up to RING_CACHE rows of n_vocab floats each) for nothing. */
static void ring_sweep(sampler_daemon *d)
{
    for (int i = 0; i < RING_CACHE; i++) {
        ring_ent *e = &d->rings[i];
        if (!e->ring) continue;
        char path[128];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm%s", lshm_name(e->ring));
        if (stat(path, &st) != 0 || st.st_ino != e->ino) {
            log_debug("unmapping the logits ring %s (its worker is gone)", lshm_name(e->ring));
            lshm_destroy(&e->ring);
        }
    }
}

static int write_piece(void *ctx, int32_t id, char *buf, size_t cap)
{
    return tok_piece((const tok_vocab *)ctx, id, false, buf, cap);
}

/* Forgets the stashed states of ge's grammar (all when ge is NULL): before ge goes. */
static void prefetch_drop(sampler_daemon *d, const gram_ent *ge)
{
    int k = 0;
    for (int i = 0; i < d->n_pre; i++) {
        if (!ge || d->pre[i].ge == ge) gram_state_free(d->pre[i].gs);
        else d->pre[k++] = d->pre[i];
    }
    d->n_pre = k;
}

/* Computes the stashed states' masks into their maskers' caches (after the reply). */
static void prefetch_run(sampler_daemon *d)
{
    for (int i = 0; i < d->n_pre; i++) {
        gram_mask(d->pre[i].ge->mk, d->pre[i].gs, d->gmask);
        gram_state_free(d->pre[i].gs);
    }
    d->n_pre = 0;
}

static void gram_cache_clear(sampler_daemon *d)
{
    prefetch_drop(d, NULL);
    for (int i = 0; i < GRAM_CACHE; i++) {
        gram_ent *e = &d->gcache[i];
        gram_masker_free(e->mk);
        gram_free(e->g);
        free(e->text);
        memset(e, 0, sizeof *e);
    }
    gram_vocab_free(d->gvocab);
    d->gvocab = NULL;
    free(d->gmask);
    d->gmask = NULL;
}

/* The vocabulary as a grammar sees it: each token's bytes (tok_piece, no special
 * rendering) and whether it ends generation. NULL with err. */
static gram_vocab *gram_vocab_of(const tok_vocab *v, char *err, size_t errcap)
{
    int32_t n = tok_n_vocab(v);
    gram_token *t = calloc((size_t)n, sizeof *t);
    char *text = NULL;
    size_t cap = 0, used = 0;
    gram_vocab *gv = NULL;
    for (int32_t i = 0; t && i < n; i++) { /* the pieces into one buffer, then the views */
        int len = tok_piece(v, i, false, NULL, 0);
        if (len < 0) len = 0;
        if (used + (size_t)len + 1 > cap) {
            size_t nc = (cap ? cap * 2 : 1 << 16) + (size_t)len;
            char *nt = realloc(text, nc);
            if (!nt) goto out;
            text = nt;
            cap = nc;
        }
        if (len) tok_piece(v, i, false, text + used, (size_t)len + 1);
        t[i].text = (const char *)(uintptr_t)used; /* an offset until text stops moving */
        t[i].len = (uint32_t)len;
        t[i].eog = tok_is_eog(v, i);
        used += (size_t)len;
    }
    if (t) {
        for (int32_t i = 0; i < n; i++) t[i].text = text ? text + (uintptr_t)t[i].text : "";
        gv = gram_vocab_new(t, n, err, errcap);
    }
out:
    if (!gv && !err[0]) errf(err, errcap, "out of memory");
    free(t);
    free(text);
    return gv;
}

/* DRY and grammars need token texts: load them once from the tokenizer tables in the
 * worker's weight segment (named in the request), mapping only the segment's header and
 * blob pages. Failure means DRY is skipped and grammar rows fail. */
static void load_pieces(sampler_daemon *d, const pm_sample *m)
{
    char seg[64], err[256] = "";
    if (!m->has_seg) return;
    proto_sv_copy(m->seg, seg, sizeof seg);
    if (strcmp(seg, d->pieces_seg) == 0) return;
    snprintf(d->pieces_seg, sizeof d->pieces_seg, "%s", seg); /* tried once per segment */
    gram_cache_clear(d);
    tok_source src;
    tok_source_open(&src, NULL, seg, err, sizeof err);
    tok_vocab *v = src.g ? tok_vocab_load(src.g, err, sizeof err) : NULL;
    if (v && smp_work_load_pieces(d->work, tok_n_vocab(v), write_piece, v) == 0 &&
        (d->gvocab = gram_vocab_of(v, err, sizeof err)) &&
        (d->gmask = malloc(gram_mask_words(d->gvocab) * sizeof *d->gmask)))
        log_info("token texts of %s loaded for DRY and grammars", seg);
    else {
        log_warn("no token texts from segment %s (%s): DRY is skipped, grammars fail", seg,
                 err[0] ? err : "load failed");
        gram_cache_clear(d);
    }
    tok_vocab_free(v);
    tok_source_close(&src);
}

/* The compiled grammar of a row (cached) with its masker: by its text, or by its hash
 * alone when the text is not sent. NULL with err; *unknown set when only the hash came
 * and no cached grammar has it (the worker then sends the text). */
static gram_ent *grammar_get(sampler_daemon *d, const pm_sample_row *row, int *unknown, char *err, size_t errcap)
{
    if (!d->gvocab) {
        errf(err, errcap, "grammar: no token texts for the worker's segment '%s'", d->pieces_seg);
        return NULL;
    }
    const char *text = row->grammar.p;
    size_t len = row->grammar.n;
    uint64_t h = row->has_grammar ? gram_text_hash(text, len) : row->ghash;
    int64_t now = net_now_ms();
    gram_ent *lru = &d->gcache[0];
    for (int i = 0; i < GRAM_CACHE; i++) {
        gram_ent *e = &d->gcache[i];
        if (e->g && e->hash == h && (!row->has_grammar || (e->len == len && memcmp(e->text, text, len) == 0))) {
            e->used_ms = now;
            return e;
        }
        if (!e->g || e->used_ms < lru->used_ms) lru = e;
        if (!e->g) break;
    }
    if (!row->has_grammar) {
        *unknown = 1;
        errf(err, errcap, "grammar %016llx: not in samplerd's cache; send its text", (unsigned long long)h);
        return NULL;
    }
    char cerr[200];
    gram *g = gram_compile(text, len, cerr, sizeof cerr);
    if (!g) {
        errf(err, errcap, "grammar: %s", cerr);
        return NULL;
    }
    gram_masker *mk = gram_masker_new(g, d->gvocab);
    char *copy = malloc(len + 1);
    if (!mk || !copy) {
        gram_masker_free(mk);
        gram_free(g);
        free(copy);
        errf(err, errcap, "grammar: out of memory");
        return NULL;
    }
    memcpy(copy, text, len);
    prefetch_drop(d, lru);
    gram_masker_free(lru->mk);
    gram_free(lru->g);
    free(lru->text);
    *lru = (gram_ent){.hash = h, .text = copy, .len = len, .g = g, .mk = mk, .used_ms = now};
    return lru;
}

/* The grammar's state for row: from its gst, else the start advanced by its gtoks.
 * NULL with err (a corrupt state, a replayed token the grammar refuses). */
static gram_state *grammar_state(sampler_daemon *d, const gram_ent *ge, const pm_sample_row *row, char *err,
                                 size_t errcap)
{
    char serr[200];
    if (row->has_gst) {
        gram_state *s = gram_state_from_bytes(ge->g, row->gst.p, row->gst.n, serr, sizeof serr);
        if (!s) errf(err, errcap, "grammar state: %s", serr);
        return s;
    }
    gram_state *s = gram_state_new(ge->g);
    for (uint32_t i = 0; s && row->has_gtoks && i < row->gtoks.n; i++) {
        const msgpack_object *o = &row->gtoks.obj->via.array.ptr[i];
        int32_t id = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int32_t)o->via.u64 : -1; /* <= INT32_MAX */
        if (gram_accept_token(d->gvocab, s, id) != 0) {
            errf(err, errcap, "grammar: generated token %u (id %d) is not allowed (replay)", i, (int)id);
            gram_state_free(s);
            return NULL;
        }
    }
    if (!s) errf(err, errcap, "grammar: out of memory");
    return s;
}

/* The row's logits with every token the grammar does not allow after st at -inf. NULL
 * when it allows none: *end then names how the generation ends (fail closed: never a
 * token the grammar refuses): "grammar" where the grammar is complete and only
 * end-of-generation, banned (ignore_eos), could follow; "grammar_dead_end" where it is
 * not complete and no token of the vocabulary can continue it. */
static const float *grammar_mask(sampler_daemon *d, const gram_ent *ge, const gram_state *st, const float *lg,
                                 size_t nv, const smp_params *p, int eos, const char **end, char *err,
                                 size_t errcap)
{
    if (d->n_glogits < nv) {
        float *n = realloc(d->glogits, nv * sizeof *n);
        if (!n) { errf(err, errcap, "grammar: out of memory"); return NULL; }
        d->glogits = n;
        d->n_glogits = nv;
    }
    gram_mask(ge->mk, st, d->gmask);
    size_t nm = (size_t)gram_vocab_size(d->gvocab), allowed = 0;
    for (size_t i = 0; i < nv; i++) {
        int ok = i < nm && (d->gmask[i / 64] >> (i % 64) & 1);
        d->glogits[i] = ok ? lg[i] : -INFINITY;
        allowed += ok && lg[i] > -INFINITY;
    }
    /* the sampler's own bans leave fewer: the candidates are eos and the biased tokens */
    for (int i = -1; allowed && i < p->n_logit_bias && i < SMP_MAX_LOGIT_BIAS; i++) {
        int32_t id = i < 0 ? eos : p->logit_bias[i].id;
        if (id >= 0 && (size_t)id < nv && d->glogits[id] > -INFINITY && smp_banned(p, id, eos)) {
            d->glogits[id] = -INFINITY; /* counted once even if listed twice */
            allowed--;
        }
    }
    if (!allowed) {
        *end = gram_can_end(st) ? "grammar" : "grammar_dead_end";
        errf(err, errcap, "grammar: no token can continue the output here (the grammar allows none%s)",
             gram_can_end(st) ? " and end-of-generation is banned" : ", not even end-of-generation");
        return NULL;
    }
    return d->glogits;
}

/* Advances st by tok and writes its wire form into d->gst; its size, 0 with err. */
static size_t grammar_advance(sampler_daemon *d, gram_state *st, int tok, char *err, size_t errcap)
{
    if (tok >= gram_vocab_size(d->gvocab) || !(d->gmask[tok / 64] >> (tok % 64) & 1) ||
        gram_accept_token(d->gvocab, st, tok) != 0) {
        errf(err, errcap, "grammar: the sampler chose token %d, which the grammar does not allow", tok);
        return 0;
    }
    size_t n = gram_state_to_bytes(st, NULL, 0);
    if (n > d->gst_cap) {
        uint8_t *b = realloc(d->gst, n);
        if (!b) { errf(err, errcap, "grammar: out of memory"); return 0; }
        d->gst = b;
        d->gst_cap = n;
    }
    return gram_state_to_bytes(st, d->gst, n);
}

static void reply_error(sampler_daemon *d, const uint8_t *rid, size_t rl, const proto_msg *m, const char *msg)
{
    pm_error e = {.msg = proto_sv_of(msg)};
    proto_writer w;
    proto_begin(&w, PT_ERROR, m ? m->id : 0);
    pm_error_put(&w, &e);
    net_send(d->sock, rid, rl, proto_data(&w), proto_size(&w));
    proto_writer_free(&w);
    d->errors++;
}

/* One row of a batch: its token (or an error naming the problem) as one SAMPLED row. */
static void sample_row(sampler_daemon *d, const lshm *r, const pm_sample *m, const pm_sample_row *row, int eos,
                       msgpack_packer *pk)
{
    char err[256];
    uint64_t step = row->step, sess = row->sess, nv = m->nv;
    const float *lg = lshm_row(r, row->slot, nv, err, sizeof err);
    smp_params p;
    int tok = -1;
    smp_result res;
    gram_ent *ge = NULL;
    gram_state *gs = NULL;
    size_t gst_n = 0;
    int has_grammar = row->has_grammar || row->has_ghash, unknown = 0;
    const char *end = NULL; /* the grammar ends the generation here */
    if (lg && step > UINT32_MAX) errf(err, sizeof err, "step %llu out of range", (unsigned long long)step);
    else if (lg && smp_params_from_wire(row->sp.p, row->sp.n, (int)nv, &p, err, sizeof err) == 0) {
        if (p.dry_multiplier > 0.0f || has_grammar) load_pieces(d, m);
        if (has_grammar && (!(ge = grammar_get(d, row, &unknown, err, sizeof err)) ||
                            !(gs = grammar_state(d, ge, row, err, sizeof err)) ||
                            !(lg = grammar_mask(d, ge, gs, lg, nv, &p, eos, &end, err, sizeof err))))
            goto out;
        long nh = proto_ints_copy(&row->hist, d->hist, HIST_MAX);
        if (nh > HIST_MAX) nh = HIST_MAX; /* the oldest tokens were sent first: keep what fits */
        smp_state st;
        /* The RNG is keyed by (seed, rng, step) with rng 0: the same seed gives the same
         * text in every request, as llama.cpp's --seed does; requests without a seed got a
         * fresh one from the front door. */
        smp_state_init(&st, &p, 0);
        st.step = (uint32_t)step;
        if (row->has_mu) {
            st.mu = (float)row->mu;
            st.mu_set = 1;
        }
        tok = smp_sample(&p, &st, lg, (int)nv, d->hist, (int)nh, eos, &res, d->work);
        if (tok < 0) errf(err, sizeof err, "%s", res.err);
        else if (gs && !(gst_n = grammar_advance(d, gs, tok, err, sizeof err))) tok = -1;
    }
out:
    if (tok >= 0 && gs && d->n_pre < PREFETCH_MAX)
        d->pre[d->n_pre++] = (gram_pre){ge, gs};
    else
        gram_state_free(gs);
    int k = tok < 0 ? 0 : res.n_probs < 0 ? 0 : res.n_probs > SMP_MAX_PROBS ? SMP_MAX_PROBS : res.n_probs;
    int probs = tok >= 0 && p.n_probs > 0, miro = tok >= 0 && p.mirostat;
    pm_sampled_row out = {.sess = sess, .step = step};
    if (tok < 0 && (end || unknown)) { /* not errors: an end, or "send the grammar's text" */
        out.end = proto_sv_of(end ? end : "");
        out.has_end = end != NULL;
        out.code = proto_sv_of(errcode_name(ERR_GRAMMAR_UNKNOWN));
        out.has_code = unknown;
        pm_sampled_row_pack(pk, &out, 0);
        return;
    }
    if (tok < 0) {
        static log_limit lim = LOG_LIMIT("bad sample row");
        log_warn_limited(&lim, "request %llu (session %llu step %llu): %s", (unsigned long long)m->id,
                         (unsigned long long)sess, (unsigned long long)step, err);
        out.err = proto_sv_of(err);
        out.has_err = 1;
        pm_sampled_row_pack(pk, &out, 0);
        d->errors++;
        return;
    }
    out.tok = tok;
    out.has_tok = 1;
    out.mu = res.mu;
    out.has_mu = miro;
    out.logprob = res.logprob;
    out.has_logprob = probs;
    out.gst = (proto_sv){(const char *)d->gst, gst_n};
    out.has_gst = gst_n > 0;
    pm_sampled_row_pack(pk, &out, (uint32_t)probs); /* and the top list, packed here */
    if (probs) { /* the chosen token's log-prob and the n_probs best, most probable first */
        proto_pack_key(pk, MF_TOP); msgpack_pack_array(pk, (uint32_t)k);
        for (int i = 0; i < k; i++) {
            msgpack_pack_array(pk, 2);
            msgpack_pack_int32(pk, res.probs[i].id);
            msgpack_pack_double(pk, res.probs[i].logprob);
        }
    }
    d->served++;
}

/* PT_SAMPLE: a batch of rows, all from one worker's logits ring; one SAMPLED with a row
 * per request row, in order. A ring that cannot be read fails the whole batch. */
static void on_sample(sampler_daemon *d, const uint8_t *rid, size_t rl, const proto_msg *m)
{
    char err[256], shm[80];
    pm_sample sm;
    pm_sample_get(m, &sm);
    proto_sv_copy(sm.shm, shm, sizeof shm);
    const lshm *r = ring_get(d, shm, err, sizeof err);
    if (!r) {
        static log_limit lim = LOG_LIMIT("unreadable logits ring");
        log_warn_limited(&lim, "request %llu: %s", (unsigned long long)m->id, err);
        reply_error(d, rid, rl, m, err);
        return;
    }
    int eos = sm.has_eos ? (int)sm.eos : -1;
    proto_writer w;
    proto_begin(&w, PT_SAMPLED, m->id);
    proto_put_array_begin(&w, MF_ROWS, sm.rows->via.array.size); /* the rows, packed by sample_row */
    for (uint32_t i = 0; i < sm.rows->via.array.size; i++) {
        pm_sample_row row;
        pm_sample_row_get(m, &sm.rows->via.array.ptr[i], &row);
        sample_row(d, r, &sm, &row, eos, &w.pk);
    }
    net_send(d->sock, rid, rl, proto_data(&w), proto_size(&w));
    proto_writer_free(&w);
    prefetch_run(d);
}

static void serve_one(sampler_daemon *d)
{
    uint8_t rid[NET_RID_MAX];
    size_t rl = 0, nbytes;
    proto_msg m;
    char err[200];
    static log_limit bad = LOG_LIMIT("bad message"), unhandled = LOG_LIMIT("unhandled message");
    int r = net_recv_msg(d->sock, 1, rid, &rl, &m, &nbytes, err, sizeof err);
    if (r == 0) return;
    if (r < 0) {
        log_warn_limited(&bad, "bad message (%zu bytes): %s", nbytes, err);
        reply_error(d, rid, rl, NULL, err);
    } else if (m.type == PT_SAMPLE) {
        on_sample(d, rid, rl, &m);
    } else {
        errf(err, sizeof err, "samplerd does not handle %s messages", proto_type_name(m.type));
        log_warn_limited(&unhandled, "%s", err);
        reply_error(d, rid, rl, &m, err);
    }
    proto_msg_free(&m);
}

int main(int argc, char **argv)
{
    const char *run_dir = NULL, *bind = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if ((r = dmn_opt(argc, argv, &i, "--run-dir", &v)) != 0) { if (r < 0) return 2; run_dir = v; }
        else if ((r = dmn_opt(argc, argv, &i, "--bind", &v)) != 0) { if (r < 0) return 2; bind = v; }
        else if (dmn_flag(argv[i], "--help") || dmn_flag(argv[i], "-h")) { usage(stdout); return 0; }
        else { fprintf(stderr, "error: unknown option '%s' (samplerd --help)\n", argv[i]); return 2; }
    }
    log_init("samplerd", LOG_INFO);
    dmn_signals_install();
    char dir[256], ep[300], err[256] = "";
    if (net_run_dir(run_dir, dir, sizeof dir, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    if (bind) snprintf(ep, sizeof ep, "%s", bind);
    else net_endpoint(dir, NET_EP_SAMPLER, ep, sizeof ep);
    sampler_daemon d = {0};
    void *ctx = zmq_ctx_new();
    d.sock = net_socket(ctx, ZMQ_ROUTER);
    d.work = smp_work_new(32000);
    d.hist = malloc(HIST_MAX * sizeof *d.hist);
    zap *z = NULL; /* workers' keys on tcp+CURVE: LLM_CURVE_ALLOW_WORKERS */
    if (!d.sock || !d.work || !d.hist || net_curve(d.sock, ep, 1, err, sizeof err) != 0 ||
        zap_guard(&z, ctx, d.sock, ep, "sampler", "LLM_CURVE_ALLOW_WORKERS", err, sizeof err) != 0 ||
        net_bind(d.sock, ep) != 0) {
        char shown[400];
        log_error("cannot serve %s: %s", net_display(ep, shown, sizeof shown),
                  err[0] ? err : zmq_strerror(zmq_errno()));
        net_close(&d.sock);
        zap_destroy(&z);
        zmq_ctx_term(ctx);
        smp_work_destroy(&d.work);
        free(d.hist);
        return 1;
    }
    char shown[400];
    log_info("serving on %s", net_display(ep, shown, sizeof shown));
    int64_t last_sweep = net_now_ms();
    while (!dmn_stop) {
        zmq_pollitem_t it = {d.sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 500) < 0 && zmq_errno() != EINTR) break;
        if (net_now_ms() - last_sweep >= 1000) {
            ring_sweep(&d);
            last_sweep = net_now_ms();
        }
        log_limit_tick();
        for (int k = 0; k < 64 && (it.revents & ZMQ_POLLIN); k++) {
            int ev = 0;
            size_t sz = sizeof ev;
            zmq_getsockopt(d.sock, ZMQ_EVENTS, &ev, &sz);
            if (!(ev & ZMQ_POLLIN)) break;
            serve_one(&d);
        }
    }
    log_info("shutting down after %llu samples (%llu errors)", (unsigned long long)d.served,
             (unsigned long long)d.errors);
    for (int i = 0; i < RING_CACHE; i++) lshm_destroy(&d.rings[i].ring);
    net_close(&d.sock);
    zap_destroy(&z);
    zmq_ctx_term(ctx);
    smp_work_destroy(&d.work);
    free(d.hist);
    gram_cache_clear(&d);
    free(d.glogits);
    free(d.gst);
    return 0;
}
