/*
 * frontd.c - tokenizerd's daemon mode (tokd_serve): the front door's sockets, the
 * worker registry with heartbeats, status, the message switch and the main loop, which
 * sends the outbox (front_out.c) after each handler: the top layer of the front door
 * (front.h). Requests are in front_req.c; the design is in front.h and
 * docs/ARCHITECTURE.md.
 *
 *   tokenizerd --model stories.gguf [--run-dir DIR]
 *   tokenizerd --segment /llm-1000-0123456789abcdef       # vocabulary from the engine segment
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "front.h"
#include "log.h"
#include "tok_source.h"
#include "tokd.h"
#include "zap.h"
#include "errcode.h"

/* Test hook: if RUN_DIR/fault-front-exit exists ("N [any|held|partial]"), it is read
 * and removed, and this front door will _exit(137), as kill -9 would, once a session has
 * generated N tokens (and, with held/partial, holds text back for a stop string or a
 * partial character at that moment), logging what it held (front_token sets
 * f->fault_exit; flush exits once that token's output is sent). */
static void fault_arm(front *f, const char *run_dir)
{
    char path[512], kind[16] = "any";
    snprintf(path, sizeof path, "%s/fault-front-exit", run_dir);
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    int n = 0;
    if (fscanf(fp, "%d %15s", &n, kind) >= 1 && n > 0) {
        f->fault_at = n;
        f->fault_kind = !strcmp(kind, "held") ? 1 : !strcmp(kind, "partial") ? 2 : 0;
        log_warn("test hook armed: exiting at token %d (%s)", n, kind);
    }
    fclose(fp);
    unlink(path);
}

/* The test hook's death: what was sent to clients is put on the wire first (zmq_send
 * only queues it; a loaded machine's I/O thread may not have written it yet), so that
 * the client sees the text up to the hook's token, as after a kill -9 at that moment. */
static void fault_exit_now(front *f)
{
    int linger = 2000;
    zmq_setsockopt(f->clients, ZMQ_LINGER, &linger, sizeof linger);
    net_close(&f->clients);
    net_close(&f->workers);
    zap_destroy(&f->zap);
    zmq_ctx_term(f->ctx);
    _exit(137);
}

/* Sends what the handlers appended to the outbox, in order. ZMQ_ROUTER_MANDATORY: a
 * client whose connection closed is unreachable at once; its requests are expired on
 * the next tick. */
static void flush(front *f)
{
    front_out o;
    while (front_out_pop(f, &o)) {
        if (o.to == FRONT_TO_WORKER) net_send(f->workers, o.rid, o.rid_len, o.data, o.len);
        else if (net_send(f->clients, o.rid, o.rid_len, o.data, o.len) != 0 && zmq_errno() == EHOSTUNREACH)
            front_client_gone(f, o.rid, o.rid_len);
        free(o.data);
    }
    if (f->fault_exit) fault_exit_now(f);
}

#define POLL_MS       50  /* the loop's poll timeout */
#define AWAY_SLACK_MS 500 /* a turn's lateness not counted as an absence (a slow VM wakes
                           * 250-300 ms late; a stall worth counting is longer) */

static void usage(FILE *o)
{
    fprintf(o, "usage: tokenizerd (--model FILE | --segment NAME) [options]   the front door daemon\n"
               "       tokenizerd --tokenize/--detokenize ...                   one-shot (see main)\n"
               "  --run-dir DIR          endpoints [LLM_RUN_DIR]\n"
               "  --bind EP              client endpoint (default ipc://RUN_DIR/front.sock) [LLM_FRONT]\n"
               "  --workers-bind EP      worker endpoint (default ipc://RUN_DIR/workers.sock) [LLM_WORKERS]\n"
               "  --chat-template NAME   override the model's template (chatml, llama2, llama3, ...)\n"
               "  --max-requests N       requests running or queued in all, beyond which new ones are\n"
               "                         refused with queue_full (default 1024)\n"
               "  --max-per-client N     the same per client connection (default 64)\n"
               "  --stall-timeout MS     a worker with busy sessions whose progress stands still this long\n"
               "                         is declared dead and its sessions move (default 30000)\n"
               "  --max-held N           chats held between turns (their KV cache kept on a worker) in\n"
               "                         all; beyond it the one idle the longest is freed (default 256)\n"
               "  --max-held-per-client N  the same per client connection (default 8)\n"
               "  --worker-wait MS       while no engine worker is registered, queued requests wait this\n"
               "                         long for one, then fail with unavailable (default 30000)\n"
               "  --max-workers-per-host N  workers registered from one origin (CURVE key, tcp address,\n"
               "                         or reported host on ipc); more are refused (default 16)\n"
               "  --model FILE [LLM_MODEL], --segment NAME: where the vocabulary comes from\n");
}

static void status_reply(front *f, const uint8_t *rid, size_t rl, uint64_t id)
{
    int64_t now = net_now_ms();
    int n = 0, nq = front_count(f, RQ_QUEUED), shown = nq < 100 ? nq : 100;
    const char *seg = "";
    double bpw = 0; /* of that segment */
    int swait = 0;  /* the longest any worker waits for samplerd: its health */
    int has_kv = 0; /* the KV pools: their counts (the same pools: the largest), the tallies summed */
    uint64_t kv[PROTO_KV_COUNTS] = {0};
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        const front_worker *x = &f->w[i];
        if (!x->live) continue;
        n++;
        seg = x->seg;
        bpw = x->bpw;
        if (x->swait > swait) swait = x->swait;
        has_kv |= x->has_kv;
        for (int k = 0; k < PROTO_KV_COUNTS && x->has_kv; k++)
            kv[k] = k < PKV_KVPT ? (x->kv[k] > kv[k] ? x->kv[k] : kv[k]) : kv[k] + x->kv[k];
    }
    pm_status_reply st = {
        .uptime = (double)(now - f->start_ms) / 1000.0, .active = (uint64_t)front_count(f, RQ_RUNNING),
        .max_requests = (uint64_t)f->lim.max_requests, .has_max_requests = 1,
        .max_per_client = (uint64_t)f->lim.max_per_client, .has_max_per_client = 1,
        .segment = proto_sv_of(seg), .has_segment = 1,
        .bpw = bpw, .has_bpw = bpw > 0, /* absent: no worker, or one too old to say */
        .model = proto_sv_of(f->model), .has_model = 1, .queued = (uint64_t)nq, .has_queued = 1,
        .held = (uint64_t)front_count(f, RQ_HELD), .has_held = 1, .served = f->served, .has_served = 1,
        .failed = f->failed, .has_failed = 1, .pid = (uint64_t)getpid(), .has_pid = 1,
        .template_name = proto_sv_of(chat_template_name(f->tmpl)), .has_template_name = 1,
        .nv = f->n_vocab, .has_nv = 1, .vid = f->vocab_id, .has_vid = 1,
        .swait = (uint64_t)swait, .has_swait = n > 0}; /* absent: no worker to ask */
    PROTO_KV_PUT(st, kv, has_kv);
    proto_writer w;
    proto_begin(&w, PT_STATUS_REPLY, id);
    pm_status_reply_put(&w, &st); /* and the lists: */
    proto_put_array_begin(&w, MF_WORKERS, (uint32_t)n);
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        const front_worker *x = &f->w[i];
        if (!x->live) continue;
        pm_status_worker r = {
            .pid = (uint64_t)x->pid, .has_pid = 1, .host = proto_sv_of(x->host), .has_host = 1,
            .seg = proto_sv_of(x->seg), .has_seg = 1, .sessions = (uint64_t)x->reported, .has_sessions = 1,
            .busy = (uint64_t)x->busy, .has_busy = 1, .cap = (uint64_t)x->cap, .has_cap = 1,
            .ctx = (uint64_t)x->ctx, .has_ctx = 1, .stalled = x->stalled != 0, .has_stalled = 1,
            .up = (double)(now - x->since_ms) / 1000.0, .has_up = 1, .swait = (uint64_t)x->swait, .has_swait = 1,
            .bpw = x->bpw, .has_bpw = 1};
        PROTO_KV_PUT(r, x->kv, x->has_kv);
        pm_status_worker_pack(&w.pk, &r, 0);
    }
    /* the queue, first come first served: position, prompt tokens, wait (no session ids:
     * any client may ask, and an id is half of what acting on a session takes) */
    proto_put_array_begin(&w, MF_QUEUE, (uint32_t)shown);
    int pos = 0;
    for (const front_req *r = f->reqs; r && pos < shown; r = r->next) {
        if (r->state != RQ_QUEUED) continue;
        pm_status_queued q = {.pos = (uint64_t)++pos, .has_pos = 1, .ntok = (uint64_t)r->n_toks, .has_ntok = 1,
                              .wait = (double)(now - r->queued_ms) / 1000.0, .has_wait = 1};
        pm_status_queued_pack(&w.pk, &q, 0);
    }
    front_send(f, rid, rl, &w);
}

static void on_client(front *f)
{
    uint8_t rid[NET_RID_MAX];
    size_t rl = 0, nbytes;
    proto_msg m;
    char err[200];
    int r = net_recv_msg(f->clients, 1, rid, &rl, &m, &nbytes, err, sizeof err);
    if (r == 0) return;
    if (r < 0) {
        static log_limit lim = LOG_LIMIT("bad client message");
        log_warn_limited(&lim, "bad client message (%zu bytes): %s", nbytes, err);
        front_send_error(f, rid, rl, 0, ERR_INVALID, err);
    } else {
        switch (m.type) {
        case PT_GENERATE: front_generate(f, rid, rl, &m); break;
        case PT_STATUS: status_reply(f, rid, rl, m.id); break;
        case PT_PING: case PT_CANCEL: front_client_msg(f, rid, rl, &m); break;
        default:
            errf(err, sizeof err, "the front door does not take %s from clients", proto_type_name(m.type));
            static log_limit wrong = LOG_LIMIT("message of the wrong kind from a client");
            log_warn_limited(&wrong, "%s", err);
            front_send_error(f, rid, rl, m.id, ERR_INVALID, err);
        }
    }
    proto_msg_free(&m);
}

static int worker_by_rid(front *f, const uint8_t *rid, size_t rl)
{
    for (int i = 0; i < FRONT_MAX_WORKERS; i++)
        if (f->w[i].live && f->w[i].rid_len == rl && memcmp(f->w[i].rid, rid, rl) == 0) return i;
    return -1;
}

/* Logs a refusal of worker wid once a minute at most (a refused worker keeps beating). */
static int refused_quiet(front *f, uint64_t wid, int64_t now)
{
    int slot = 0;
    for (int i = 0; i < FRONT_REFUSED_LOG; i++) {
        if (f->refused[i].wid == wid) {
            if (now - f->refused[i].ms < 60000) return 1;
            slot = i;
            break;
        }
        if (f->refused[i].ms < f->refused[slot].ms) slot = i;
    }
    f->refused[slot].wid = wid;
    f->refused[slot].ms = now;
    return 0;
}

/* Whether worker m may register: the same vocabulary as ours (a worker on another
 * model's segment would get token ids that mean other texts), one worker per connection,
 * and at most max_per_host from one origin. 0, or -1 with the reason logged. */
static int worker_admissible(front *f, const uint8_t *rid, size_t rl, const pm_worker_hb *hb, const char *origin)
{
    uint64_t wid = hb->wid, vid = hb->vid;
    uint32_t nv = (uint32_t)hb->nv;
    int64_t now = net_now_ms();
    char seg[64], host[64];
    proto_sv_copy(hb->seg, seg, sizeof seg);
    proto_sv_copy(hb->host, host, sizeof host);
    unsigned long long pid = (unsigned long long)hb->pid;
    if (vid != f->vocab_id || nv != f->n_vocab) {
        if (!refused_quiet(f, wid, now))
            log_warn("refusing worker pid %llu on %s: its model (segment %s, vocabulary of %u tokens, id %016llx) "
                     "is not this front door's (%s, vocabulary of %u tokens, id %016llx)", pid, host, seg, nv,
                     (unsigned long long)vid, f->model, f->n_vocab, (unsigned long long)f->vocab_id);
        return -1;
    }
    int same_origin = 0;
    for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
        const front_worker *w = &f->w[i];
        if (!w->live || w->wid == wid) continue;
        if (w->rid_len == rl && memcmp(w->rid, rid, rl) == 0) {
            if (!refused_quiet(f, wid, now))
                log_warn("refusing worker id %016llx (pid %llu): its connection already carries worker pid %d",
                         (unsigned long long)wid, pid, w->pid);
            return -1;
        }
        same_origin += strcmp(w->origin, origin) == 0;
    }
    if (same_origin >= f->lim.max_per_host) {
        if (!refused_quiet(f, wid, now))
            log_warn("refusing worker pid %llu: %d workers from %s already (--max-workers-per-host)", pid,
                     same_origin, origin);
        return -1;
    }
    return 0;
}

/* The process of a worker connected over ipc: libzmq gives its peer address as
 * "localhost:UID:GID:PID" from the kernel's credentials of the connection (SO_PEERCRED,
 * in our pid namespace), so the pid is not the worker's word. 0 over tcp. */
static int ipc_peer_pid(const char *peer)
{
    const char *p = strrchr(peer, ':');
    if (strncmp(peer, "localhost:", 10) != 0 || !p) return 0;
    long pid = strtol(p + 1, NULL, 10);
    return pid > 0 && pid < (1L << 30) ? (int)pid : 0;
}

static int worker_register(front *f, const uint8_t *rid, size_t rl, const pm_worker_hb *hb, const char *peer)
{
    int wi = -1;
    uint64_t wid = hb->wid;
    char origin[64];
    if (peer[0]) snprintf(origin, sizeof origin, "%s", peer);
    else proto_sv_copy(hb->host, origin, sizeof origin);
    for (int i = 0; i < FRONT_MAX_WORKERS && wi < 0; i++)
        if (f->w[i].live && f->w[i].wid == wid) wi = i; /* reconnected: new routing id */
    if (wi < 0 && worker_admissible(f, rid, rl, hb, origin) != 0) return -1;
    for (int i = 0; i < FRONT_MAX_WORKERS && wi < 0; i++)
        if (!f->w[i].live) wi = i;
    if (wi < 0) {
        if (!refused_quiet(f, wid, net_now_ms()))
            log_warn("worker pid %llu refused: %d workers already", (unsigned long long)hb->pid,
                     FRONT_MAX_WORKERS);
        return -1;
    }
    front_worker *w = &f->w[wi];
    int was = w->live && w->wid == wid;
    memcpy(w->rid, rid, rl);
    w->rid_len = rl;
    if (!was) {
        w->live = 1;
        w->wid = wid;
        w->assigned = 0;
        w->stalled = 0;
        w->busy = 0;
        w->prog = 0;
        w->since_ms = w->prog_ms = net_now_ms();
        w->pid = (int)hb->pid;
        proto_sv_copy(hb->host, w->host, sizeof w->host);
        proto_sv_copy(hb->seg, w->seg, sizeof w->seg);
        w->bpw = hb->bpw;
        if (!(w->bpw > 0 && w->bpw < 1000)) w->bpw = 0; /* NaN or nonsense: unknown */
        snprintf(w->origin, sizeof w->origin, "%s", origin);
        char st;
        w->watch_pid = ipc_peer_pid(peer);
        w->watch_start = w->watch_pid ? dmn_proc_start(w->watch_pid, &st) : 0;
        if (!w->watch_start) w->watch_pid = 0;
        log_info("worker pid %d on %s registered (segment %s, %.2f bits/weight%s)", w->pid, w->host, w->seg, w->bpw,
                 w->watch_pid ? ", its process watched" : "");
    }
    return wi;
}

static void on_worker(front *f)
{
    uint8_t rid[NET_RID_MAX];
    size_t rl = 0, nbytes;
    proto_msg m;
    char err[200];
    char peer[64];
    int r = net_recv_msg_from(f->workers, 1, rid, &rl, &m, &nbytes, peer, sizeof peer, err, sizeof err);
    if (r == 0) return;
    if (r < 0) {
        static log_limit lim = LOG_LIMIT("bad worker message");
        log_warn_limited(&lim, "bad worker message (%zu bytes): %s", nbytes, err);
        return;
    }
    int wi = worker_by_rid(f, rid, rl);
    pm_worker_hb hb;
    if (m.type == PT_WORKER_HB) pm_worker_hb_get(&m, &hb);
    if (m.type == PT_WORKER_HB && hb.bye) {
        if (wi >= 0) {
            log_info("worker pid %d is shutting down: purged, its sessions go to other workers", f->w[wi].pid);
            front_requeue_worker(f, wi, 0);
            f->w[wi].live = 0;
        }
        wi = -1;
    } else if (m.type == PT_WORKER_HB) {
        wi = worker_register(f, rid, rl, &hb, peer);
        if (wi >= 0) front_worker_beat(f, wi, &hb, net_now_ms());
    }
    if (wi >= 0) {
        f->w[wi].last_ms = net_now_ms();
        if (m.type == PT_TOKEN) front_token(f, wi, &m);
        else if (m.type == PT_ERROR) front_worker_error(f, wi, &m);
        else if (m.type == PT_REPORT) front_adopt(f, wi, &m);
        else if (m.type == PT_EMBEDDING) front_embedding(f, wi, &m);
    }
    proto_msg_free(&m);
}

static void heartbeat(front *f, int64_t now)
{
    if (now - f->last_hb_ms >= NET_HB_MS) {
        f->last_hb_ms = now;
        for (int i = 0; i < FRONT_MAX_WORKERS; i++) {
            if (!f->w[i].live) continue;
            pm_front_hb hb = {.epoch = f->epoch};
            proto_writer w;
            proto_begin(&w, PT_FRONT_HB, 0);
            pm_front_hb_put(&w, &hb);
            front_send_worker(f, i, &w);
        }
    }
    front_check_workers(f, now);
}

static tok_vocab *load_vocab(front *f, const char *model, const char *segment, const char *tmpl_name)
{
    char err[256] = "";
    tok_source source;
    snprintf(f->model, sizeof f->model, "%s", segment ? segment : model);
    tok_source_open(&source, segment ? NULL : model, segment, err, sizeof err);
    gguf_ctx *g = source.g;
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    if (!v) log_error("cannot load the vocabulary of %s: %s", f->model, err);
    if (v) f->vocab_id = gguf_vocab_id(g, &f->n_vocab); /* workers must have the same */
    f->tmpl = CHAT_TMPL_UNKNOWN;
    if (v) {
        const char *src = tmpl_name ? tmpl_name : gguf_get_str(g, "tokenizer.chat_template", NULL);
        f->tmpl = tmpl_name ? chat_template_detect(src)
                  : src ? chat_template_detect_arch(src, gguf_get_str(g, "general.architecture", NULL))
                        : CHAT_TMPL_UNKNOWN;
        f->tmpl_system = f->tmpl == CHAT_TMPL_CHATML ? chat_tools_default_system(src) : NULL;
        if (tmpl_name && f->tmpl == CHAT_TMPL_UNKNOWN) log_warn("unknown --chat-template %s", tmpl_name);
    }
    tok_source_close(&source);
    return v;
}

static int bind_sockets(front *f, const char *dir, const char *bind, const char *wbind)
{
    char ep[300], wep[300], err[200] = "";
    if (bind) snprintf(ep, sizeof ep, "%s", bind);
    else net_endpoint(dir, NET_EP_FRONT, ep, sizeof ep);
    if (wbind) snprintf(wep, sizeof wep, "%s", wbind);
    else net_endpoint(dir, NET_EP_WORKERS, wep, sizeof wep);
    f->clients = net_socket(f->ctx, ZMQ_ROUTER);
    f->workers = net_socket(f->ctx, ZMQ_ROUTER);
    if (!f->clients || !f->workers) return -1;
    int one = 1, unlimited = 0;
    zmq_setsockopt(f->clients, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    /* a slow reader (llmc | less) must not lose pieces: no send limit towards clients;
     * what is queued is bounded by the requests' lengths */
    zmq_setsockopt(f->clients, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    if (net_curve(f->clients, ep, 1, err, sizeof err) != 0 ||
        zap_guard(&f->zap, f->ctx, f->clients, ep, "clients", "LLM_CURVE_ALLOW_CLIENTS", err, sizeof err) != 0 ||
        net_bind(f->clients, ep) != 0) {
        log_error("cannot serve clients on %s: %s", ep, err[0] ? err : zmq_strerror(zmq_errno()));
        return -1;
    }
    if (net_curve(f->workers, wep, 1, err, sizeof err) != 0 ||
        zap_guard(&f->zap, f->ctx, f->workers, wep, "workers", "LLM_CURVE_ALLOW_WORKERS", err, sizeof err) != 0 ||
        net_bind(f->workers, wep) != 0) {
        log_error("cannot serve workers on %s: %s", wep, err[0] ? err : zmq_strerror(zmq_errno()));
        return -1;
    }
    log_info("front door: clients on %s, workers on %s", ep, wep);
    return 0;
}

static void collect_eog(front *f)
{
    int32_t n = tok_n_vocab(f->vocab);
    for (int32_t i = 0; i < n && f->n_eog < PROTO_MAX_EOG; i++)
        if (tok_is_eog(f->vocab, i)) f->eog[f->n_eog++] = i;
}

/* tokenizerd's flags. */
typedef struct {
    const char  *model, *segment, *run_dir, *bind, *wbind, *tmpl;
    front_limits lim;
} tokd_opts;

/* A whole-number limit flag: 1 when argv[*i] is flag (its value checked against
 * lo..hi into *out, or rc set to 2), 0 when it is another flag. */
static int limit_opt(int argc, char **argv, int *i, const char *flag, long lo, long hi, int64_t *out, int *rc)
{
    const char *v;
    long lv;
    int r = dmn_opt(argc, argv, i, flag, &v);
    if (r == 0) return 0;
    if (r < 0 || dmn_int(flag, v, lo, hi, &lv) != 0) *rc = 2;
    else *out = lv;
    return 1;
}

/* Parses the flags into o: 0, or the exit code (2 on a bad flag, -1 after --help). */
static int parse_opts(int argc, char **argv, tokd_opts *o)
{
    *o = (tokd_opts){ .model = dmn_env("LLM_MODEL", NULL) };
    int64_t max_req = 1024, per_client = 64, per_host = 16, stall = 30000, held = 256, held_client = 8, wait = 30000;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r, rc = 0;
#define OPT(name, var) if ((r = dmn_opt(argc, argv, &i, name, &v)) != 0) { if (r < 0) return 2; o->var = v; continue; }
        OPT("--model", model) OPT("--segment", segment) OPT("--run-dir", run_dir) OPT("--bind", bind)
        OPT("--workers-bind", wbind) OPT("--chat-template", tmpl)
#undef OPT
        if (limit_opt(argc, argv, &i, "--max-requests", 1, 1 << 20, &max_req, &rc) ||
            limit_opt(argc, argv, &i, "--max-per-client", 1, 1 << 20, &per_client, &rc) ||
            limit_opt(argc, argv, &i, "--max-workers-per-host", 1, FRONT_MAX_WORKERS, &per_host, &rc) ||
            limit_opt(argc, argv, &i, "--stall-timeout", 100, 86400000, &stall, &rc) ||
            limit_opt(argc, argv, &i, "--max-held", 0, 1 << 20, &held, &rc) ||
            limit_opt(argc, argv, &i, "--max-held-per-client", 0, 1 << 20, &held_client, &rc) ||
            limit_opt(argc, argv, &i, "--worker-wait", 100, 86400000, &wait, &rc)) {
            if (rc) return rc;
            continue;
        }
        if (dmn_flag(argv[i], "--help") || dmn_flag(argv[i], "-h")) { usage(stdout); return -1; }
        fprintf(stderr, "error: unknown option '%s' (tokenizerd --help)\n", argv[i]);
        return 2;
    }
    if (!o->model && !o->segment) {
        fprintf(stderr, "error: tokenizerd needs --model FILE or --segment NAME (tokenizerd --help)\n");
        return 2;
    }
    o->lim = (front_limits){ .max_requests = (int)max_req, .max_per_client = (int)per_client, .stall_ms = stall,
                             .max_per_host = (int)per_host, .worker_wait_ms = wait, .max_held = (int)held,
                             .max_held_per_client = (int)held_client };
    return 0;
}

/* Reads up to 256 messages of each socket that poll found ready: workers first. */
static void read_sockets(front *f, const zmq_pollitem_t *it)
{
    for (int k = 0; k < 256 && (it[1].revents & ZMQ_POLLIN); k++) {
        int ev = 0;
        size_t sz = sizeof ev;
        zmq_getsockopt(f->workers, ZMQ_EVENTS, &ev, &sz);
        if (!(ev & ZMQ_POLLIN)) break;
        on_worker(f);
        flush(f);
    }
    for (int k = 0; k < 256 && (it[0].revents & ZMQ_POLLIN); k++) {
        int ev = 0;
        size_t sz = sizeof ev;
        zmq_getsockopt(f->clients, ZMQ_EVENTS, &ev, &sz);
        if (!(ev & ZMQ_POLLIN)) break;
        on_client(f);
        flush(f);
    }
}

/* The front door was away for away ms past its slack (at now): its peers' clocks stop
 * for that time. Short absences of a loaded machine are logged at most every 10 s; one
 * of a second or more always (a stall an operator should see, whatever came before it). */
static void away_for(front *f, int64_t away, int64_t now, int64_t *away_log)
{
    front_pause_clocks(f, away);
    if (now - *away_log > 10000 || away + AWAY_SLACK_MS >= 1000) {
        *away_log = now;
        log_warn("the front door did not run for %lld ms (a stalled machine?): silences are measured "
                 "without that time", (long long)(away + AWAY_SLACK_MS));
    }
}

/* The event loop, until SIGTERM. A turn takes POLL_MS at most, plus the handling of its
 * messages: when one took longer, the front door itself was away (the machine stalled,
 * or the messages took that long), and its peers were not silent for that time. A stall
 * can fall in the wait or in the handling: both are measured and logged alike. */
static void serve(front *f)
{
    int64_t turn = net_now_ms(), away_log = 0;
    while (!dmn_stop) {
        zmq_pollitem_t it[2] = {{f->clients, 0, ZMQ_POLLIN, 0}, {f->workers, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, POLL_MS) < 0 && zmq_errno() != EINTR) break;
        int64_t woke = net_now_ms(), away = woke - turn - POLL_MS - AWAY_SLACK_MS;
        if (away > 0) away_for(f, away, woke, &away_log);
        read_sockets(f, it);
        int64_t now = net_now_ms();
        away = now - woke - AWAY_SLACK_MS;
        if (away > 0) away_for(f, away, now, &away_log);
        turn = now;
        heartbeat(f, now);
        log_limit_tick();
        if (f->n_parked) front_readmit(f, now);
        front_tick(f, now);
        flush(f);
    }
}

int tokd_serve(int argc, char **argv)
{
    tokd_opts o;
    int prc = parse_opts(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    log_init("tokenizerd", LOG_INFO);
    dmn_signals_install();
    char dir[256], err[256];
    if (net_run_dir(o.run_dir, dir, sizeof dir, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    static front f;
    memset(&f, 0, sizeof f);
    f.start_ms = net_now_ms();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    f.epoch = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    f.lim = o.lim;
    f.no_worker_ms = f.start_ms;
    f.parked = calloc(FRONT_MAX_PARKED, sizeof *f.parked);
    fault_arm(&f, dir);
    f.vocab = load_vocab(&f, o.model, o.segment, o.tmpl);
    f.ctx = zmq_ctx_new();
    int rc = 1;
    if (f.vocab && f.ctx && f.parked && bind_sockets(&f, dir, o.bind, o.wbind) == 0) {
        collect_eog(&f);
        log_info("serving %s (%d tokens, chat template %s)", f.model, tok_n_vocab(f.vocab),
                 chat_template_name(f.tmpl));
        serve(&f);
        log_info("shutting down: %d requests in flight are cut", front_count(&f, RQ_RUNNING));
        front_req_free_all(&f);
        flush(&f); /* the workers drop the sessions (PT_STOP) */
        rc = 0;
    }
    front_req_free_all(&f);
    front_out_free_all(&f);
    for (int i = 0; i < f.n_parked; i++) proto_msg_free(&f.parked[i].m);
    free(f.parked);
    net_close(&f.clients);
    net_close(&f.workers);
    zap_destroy(&f.zap);
    if (f.ctx) zmq_ctx_term(f.ctx);
    tok_vocab_free(f.vocab);
    return rc;
}
