/*
 * samplerd - the sampling daemon. Stateless: every PT_SAMPLE carries the session id,
 * the step, the parameters, the token history and the carried mirostat mu, and the
 * logits are read from the asking worker's shared-memory ring (logits_shm.h). The
 * randomness is a pure function of (seed, session, step), so a retried request, or the
 * same request sent to a restarted samplerd, gets the same token.
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

#include "daemon.h"
#include "gguf.h"
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
    char      pieces_seg[64]; /* segment whose token texts smp_work holds (for DRY) */
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

/* DRY needs token texts: load them once from the tokenizer tables in the worker's
 * weight segment (named in the request), mapping only the segment's header and blob
 * pages. Failure only means DRY is skipped. */
static void load_pieces(sampler_daemon *d, const pm_sample *m)
{
    char seg[64], err[256] = "";
    if (!m->has_seg) return;
    snprintf(seg, sizeof seg, "%.*s", (int)(m->seg.n < sizeof seg ? m->seg.n : sizeof seg - 1), m->seg.p);
    if (strcmp(seg, d->pieces_seg) == 0) return;
    snprintf(d->pieces_seg, sizeof d->pieces_seg, "%s", seg); /* tried once per segment */
    tok_source src;
    tok_source_open(&src, NULL, seg, err, sizeof err);
    tok_vocab *v = src.g ? tok_vocab_load(src.g, err, sizeof err) : NULL;
    if (v && smp_work_load_pieces(d->work, tok_n_vocab(v), write_piece, v) == 0)
        log_info("token texts of %s loaded for DRY", seg);
    else
        log_warn("no token texts from segment %s (%s): DRY is skipped", seg, err[0] ? err : "load failed");
    tok_vocab_free(v);
    tok_source_close(&src);
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
    if (lg && step > UINT32_MAX) errf(err, sizeof err, "step %llu out of range", (unsigned long long)step);
    else if (lg && smp_params_from_wire(row->sp.p, row->sp.n, (int)nv, &p, err, sizeof err) == 0) {
        if (p.dry_multiplier > 0.0f) load_pieces(d, m);
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
    }
    int k = tok < 0 ? 0 : res.n_probs < 0 ? 0 : res.n_probs > SMP_MAX_PROBS ? SMP_MAX_PROBS : res.n_probs;
    int probs = tok >= 0 && p.n_probs > 0, miro = tok >= 0 && p.mirostat;
    pm_sampled_row out = {.sess = sess, .step = step};
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
    snprintf(shm, sizeof shm, "%.*s", (int)(sm.shm.n < sizeof shm ? sm.shm.n : sizeof shm - 1), sm.shm.p);
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
    return 0;
}
