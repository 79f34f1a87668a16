/*
 * proto_msgs.h - the messages of the protocol, one line each: the fields a type requires
 * and the ones it allows. From this one table come a typed struct per message, its
 * reader and its writer (proto.h: pm_<type>, pm_<type>_get, pm_<type>_put) and what
 * proto_decode checks (proto.c). What each field means: proto_fields.h.
 *
 *   pm_token t = {.sess = s, .step = k, .tok = id, .epoch = e, .mu = mu, .has_mu = 1};
 *   proto_begin(&w, PT_TOKEN, id);
 *   pm_token_put(&w, &t);
 *
 *   pm_token t;
 *   pm_token_get(&m, &t);   // m decoded as a PT_TOKEN: its required fields are there
 *
 * R(ID, member): a required field; O(ID, member): an optional one (the struct gets
 * has_<member>); K(ID, member, KIND): a required field this type checks as PK_KIND, more
 * than the field's own kind (the rows of a batch).
 */
#ifndef LLM_PROTO_MSGS_H
#define LLM_PROTO_MSGS_H

/* C -> front door */
#define PM_GENERATE(R, O, K)                                                             \
    R(N, n) O(PROMPT, prompt) O(MSGS, msgs) O(CHAT, chat) O(SESS, sess) O(KEY, key)      \
    O(PARAMS, params) O(STOP, stop) O(IGNORE_EOS, ignore_eos) O(RESUME, resume)          \
    O(RBYTES, rbytes) O(GRAMMAR, grammar) O(EMBED, embed) O(TOKS, toks) /* toks: the prompt as token ids */ \
    O(TOOLS, tools) O(TCALLS, tcalls)
#define PM_CANCEL(R, O, K) O(SESS, sess) O(KEY, key) /* sess + key: a chat between turns */
#define PM_PING(R, O, K) O(SESS, sess) O(KEY, key)
#define PM_STATUS(R, O, K)
/* front door -> C */
#define PM_ACCEPTED(R, O, K) R(NTOK, ntok) R(SESS, sess) O(KEY, key) O(SEED, seed) O(POS, pos)
#define PM_PIECE(R, O, K) R(TEXT, text) R(NTOK, ntok) O(PROBS, probs)
#define PM_DONE(R, O, K) R(REASON, reason) R(NTOK_PROMPT, ntok_prompt) R(NTOK, ntok) O(SESS, sess) O(MOVES, moves)
/* The KV pools' counts (engined --kv-pool), in a worker's heartbeat, the STATUS_REPLY
 * (the pools' counts, the workers' tallies summed) and its worker rows. First the pools'
 * own, which every worker reads off the same pools: blocks, used, cached of the main
 * pool, evictions (both pools), then blocks, used, cached of the ring pool (a model's
 * sliding-window layers; 0 without one); then a worker's tallies: prompt tokens,
 * reused, preempted, deferred. */
#define PM_KV(O) O(KVB, kvb) O(KVU, kvu) O(KVC, kvc) O(KVEV, kvev) O(KVRB, kvrb) O(KVRU, kvru) O(KVRC, kvrc) \
    O(KVPT, kvpt) O(KVRT, kvrt) O(KVPRE, kvpre) O(KVDEF, kvdef)
/* PKV_KVB, ...: each count's index in an array of them; PROTO_KV_COUNTS of them, the
 * pools' own before PKV_KVPT */
#define PKV_IDX_(ID, m) PKV_##ID,
enum { PM_KV(PKV_IDX_) PROTO_KV_COUNTS };
/* kv[] <- the counts of message struct s; s's counts <- kv[], present where on */
#define PKV_GET_(ID, m) kv_[PKV_##ID] = s_->m;
#define PKV_PUT_(ID, m) s_->m = kv_[PKV_##ID], s_->has_##m = on_;
#define PROTO_KV_GET(s, kv)                                                              \
    do {                                                                                 \
        const __typeof__(s) *s_ = &(s);                                                  \
        uint64_t *kv_ = (kv);                                                            \
        PM_KV(PKV_GET_)                                                                  \
    } while (0)
#define PROTO_KV_PUT(s, kv, on)                                                          \
    do {                                                                                 \
        __typeof__(s) *s_ = &(s);                                                        \
        const uint64_t *kv_ = (kv);                                                      \
        int on_ = (on);                                                                  \
        PM_KV(PKV_PUT_)                                                                  \
    } while (0)
#define PM_STATUS_REPLY(R, O, K)                                                         \
    R(WORKERS, workers) R(UPTIME, uptime) R(ACTIVE, active) O(QUEUE, queue)              \
    O(MAX_REQUESTS, max_requests) O(MAX_PER_CLIENT, max_per_client) O(SEGMENT, segment)  \
    O(BPW, bpw) O(MODEL, model) O(QUEUED, queued) O(HELD, held) O(SERVED, served)        \
    O(FAILED, failed) O(PID, pid) O(TEMPLATE, template_name) O(NV, nv) O(VID, vid)       \
    O(SWAIT, swait)                                                                      \
    PM_KV(O)
#define PM_PONG(R, O, K)
/* any -> whoever asked; a worker's about one session carries sess, epoch, and full (its
 * context is full) or end (the generation ends: DONE's reason, e.g. "grammar") */
#define PM_ERROR(R, O, K) R(MSG, msg) O(CODE, code) O(RETRY_MS, retry_ms) O(FULL, full) O(SESS, sess) O(EPOCH, epoch) \
    O(END, end)
/* worker <-> front door */
#define PM_WORKER_HB(R, O, K)                                                            \
    R(PID, pid) R(HOST, host) R(SEG, seg) R(ACTIVE, active) R(WID, wid) O(BYE, bye)      \
    O(BUSY, busy) O(PROG, prog) O(CAP, cap) O(CTX, ctx) O(NV, nv) O(VID, vid)            \
    O(SWAIT, swait) O(BPW, bpw)                                                          \
    PM_KV(O)
#define PM_FRONT_HB(R, O, K) R(EPOCH, epoch)
#define PM_STOP(R, O, K) R(SESS, sess)
#define PM_TOKEN(R, O, K) R(SESS, sess) R(STEP, step) R(TOK, tok) R(EPOCH, epoch) O(MU, mu) O(LOGPROB, logprob) O(TOP, top)
/* RUN and REPORT: one session record (proto_sessrec in proto.h reads and writes it) */
#define PM_SESSREC(R, O, K)                                                              \
    R(SESS, sess) R(TOKS, toks) R(STEP, step) R(BUDGET, budget) R(SP, sp) R(EPOCH, epoch) \
    O(EOG, eog) O(MU, mu) O(FB, fb) O(IDLE, idle) O(GRAMMAR, grammar) O(EMBED, embed)
#define PM_RUN PM_SESSREC
#define PM_REPORT PM_SESSREC
/* worker <-> samplerd: a batch of rows */
#define PM_SAMPLE(R, O, K) R(SHM, shm) R(NV, nv) K(ROWS, rows, SAMPLE_ROWS) O(EOS, eos) O(SEG, seg)
#define PM_SAMPLED(R, O, K) K(ROWS, rows, SAMPLED_ROWS)
/* A row with a grammar carries its hash ghash, its text only on the session's first row
 * (or when samplerd answered code grammar_unknown: a restarted or evicted cache), and the
 * matcher's state gst, or (none kept: a new worker, a RUN) gtoks, the tokens generated so
 * far, which samplerd replays from the start. A SAMPLED row's end (no token: the grammar
 * allows none) ends the generation with that reason; the worker passes it on in an ERROR
 * about the session. */
#define PM_SAMPLE_ROW(R, O, K)                                                           \
    R(SESS, sess) R(STEP, step) R(SLOT, slot) R(SP, sp) R(HIST, hist) O(MU, mu)          \
    O(GRAMMAR, grammar) O(GST, gst) O(GTOKS, gtoks) O(GHASH, ghash)
#define PM_SAMPLED_ROW(R, O, K)                                                          \
    R(SESS, sess) R(STEP, step) O(TOK, tok) O(ERR, err) O(MU, mu) O(LOGPROB, logprob) O(TOP, top) \
    O(GST, gst) O(CODE, code) O(END, end)

/* An embedding: worker -> front door (sess, epoch), front door -> client (ntok: the
 * input's tokens); then the front door sends DONE. */
#define PM_EMBEDDING(R, O, K) R(VEC, vec) O(SESS, sess) O(EPOCH, epoch) O(NTOK, ntok)

/* The rows of a STATUS_REPLY's workers and queue lists (not checked by proto_decode:
 * a reader takes what is there, with has_<member>) */
#define PM_STATUS_WORKER(R, O, K)                                                        \
    O(PID, pid) O(HOST, host) O(SEG, seg) O(SESSIONS, sessions) O(BUSY, busy) O(CAP, cap) \
    O(CTX, ctx) O(STALLED, stalled) O(UP, up) O(SWAIT, swait) O(BPW, bpw)                 \
    PM_KV(O)
#define PM_STATUS_QUEUED(R, O, K) O(POS, pos) O(NTOK, ntok) O(WAIT, wait)
/* an entry of a PIECE's probs: a token, its text, its log-prob, the most probable ones */
#define PM_PROB(R, O, K) R(ID, id) R(TEXT, text) R(LOGPROB, logprob) O(TOP, top)

/* Every message type (proto_type PT_<T>) with its struct's name; RUN and REPORT have
 * proto_sessrec instead of a struct of their own. */
#define PROTO_MSGS(X)                                                                    \
    X(GENERATE, generate) X(CANCEL, cancel) X(PING, ping) X(STATUS, status)              \
    X(ACCEPTED, accepted) X(PIECE, piece) X(DONE, done) X(ERROR, error)                  \
    X(STATUS_REPLY, status_reply) X(WORKER_HB, worker_hb) X(FRONT_HB, front_hb)          \
    X(STOP, stop) X(TOKEN, token) X(SAMPLE, sample) X(SAMPLED, sampled) X(PONG, pong)    \
    X(EMBEDDING, embedding)
/* The rows of a batch: maps inside a message, with structs, readers and packers too. */
#define PROTO_ROWS(X)                                                                    \
    X(SAMPLE_ROW, sample_row) X(SAMPLED_ROW, sampled_row) X(STATUS_WORKER, status_worker)  \
    X(STATUS_QUEUED, status_queued) X(PROB, prob)

#endif
