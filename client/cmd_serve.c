/*
 * cmd_serve.c - `llmc serve`: an OpenAI-compatible HTTP gateway in front of the
 * pipeline (owner: gateway). It is one more client of the front door: every request
 * becomes a GENERATE on one ZeroMQ connection (client/gw_bridge.c), so queueing,
 * worker death and restarts behind it work as for llmc.
 *
 *   llmc serve [--host 127.0.0.1] [--port 8080] [--api-key-file FILE] [--threads N]
 *   curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
 *        -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":32,"stream":true}'
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions (also without /v1),
 * POST /v1/embeddings (and llama-server's /embedding, client/oai_embed.h), POST
 * /tokenize and /detokenize (llama-server's, client/gw_tok.h), GET /v1/models,
 * GET /health, GET /metrics, OPTIONS (CORS preflight). With API keys,
 * every endpoint but /health needs "Authorization: Bearer KEY".
 *
 * HTTP is libmicrohttpd with an internal thread pool (--threads) on epoll; a request
 * waiting for the front door, or a stream between pieces, is a suspended connection
 * (client/gw_job.h), so no thread is held by a waiting or slow client.
 */
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "errcode.h"
#include "cmds.h"
#include "gguf.h"
#include "gw_bridge.h"
#include "gw_conns.h"
#include "gw_job.h"
#include "gw_keys.h"
#include "gw_metrics.h"
#include "gw_tok.h"
#include "stream.h"
#include "log.h"
#include "net.h"
#include "oai.h"
#include "tok.h"
#include "tok_source.h"

typedef struct {
    const char *host, *endpoint, *run_dir, *model_file, *alias;
    int         port, threads;
    size_t      max_body;
    gwk_set     keys;
    int         n_argv_keys;     /* of them given with --api-key, visible in ps */
    int         pooling;         /* --pooling: embeddings' default (PROTO_POOL_*) */
    unsigned    max_conns;       /* open HTTP connections, all clients together */
    unsigned    max_conns_per_ip;
    int         request_timeout; /* seconds for a client to send a whole request */
    int         front_timeout;   /* seconds a stream waits on a silent front door (lc_stream.lost_ms) */
} serve_opts;

/* The gateway: options, the bridge, metrics, and the vocabulary for log-prob texts. */
static struct {
    serve_opts      o;
    gwb            *bridge;
    gwc            *conns;
    gwm             metrics;
    char            run_dir[256];
    long long       started;
    pthread_mutex_t vocab_mu;
    tok_vocab      *vocab;
    int             vocab_tried;
} G;

/* One HTTP request's state (libmicrohttpd's con_cls). */
typedef struct {
    gwm_ep ep;
    int    err_status;     /* 401, 404, 405, 413 from the headers; 413 for a chunked body over --max-body */
    char   err_msg[160];
    char  *body;
    size_t len, cap;
    gwj   *job;
    int64_t t0_us;
    bool   llama_emb;      /* /embedding (llama-server's shape), not /v1/embeddings */
} http_req;

static volatile sig_atomic_t stop_flag = 0;
static void on_signal(int s) { (void)s; stop_flag = 1; }

/* ---- responses ---- */

static enum MHD_Result queue(struct MHD_Connection *c, http_req *x, int status, const char *type, char *body,
                             size_t len, unsigned retry_after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *)"",
                                                             body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (retry_after) {
        char s[24];
        snprintf(s, sizeof s, "%u", retry_after);
        MHD_add_response_header(r, "Retry-After", s);
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    gwm_request(&G.metrics, x->ep, status);
    return ok;
}

static enum MHD_Result json_reply(struct MHD_Connection *c, http_req *x, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return queue(c, x, status, "application/json", s, s ? strlen(s) : 0, 0);
}

static enum MHD_Result error_reply(struct MHD_Connection *c, http_req *x, int status, const char *msg,
                                   const char *param, const char *code)
{
    char *s = oai_error_body(status, msg, param, code);
    return queue(c, x, status, "application/json", s, s ? strlen(s) : 0, 0);
}

/* ---- the served model ---- */

/* The model id clients see: --alias, else the file name the front door serves. */
static void model_id(char *out, size_t cap, const gwb_status *s)
{
    if (G.o.alias) { snprintf(out, cap, "%s", G.o.alias); return; }
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s->model[0] ? s->model : "unknown");
    snprintf(out, cap, "%s", basename(tmp));
}

/* The vocabulary of --model, else of the file or segment the front door reports: for
 * top_logprobs texts (the front door sends only ids for those), /tokenize and
 * /detokenize. Called with vocab_mu held; NULL when there is none. */
static tok_vocab *vocab_locked(void)
{
    gwb_status s;
    gwb_status_get(G.bridge, &s);
    const char *file = G.o.model_file ? G.o.model_file : s.model[0] == '/' ? s.model : NULL;
    if (!G.vocab && !G.vocab_tried && (file || s.segment[0])) { /* else: the front door has not answered yet */
        G.vocab_tried = 1;
        char err[256] = "";
        tok_source src;
        tok_source_open(&src, file, s.segment[0] ? s.segment : NULL, err, sizeof err);
        G.vocab = src.g ? tok_vocab_load(src.g, err, sizeof err) : NULL;
        if (!G.vocab) log_warn("no vocabulary for top_logprobs token texts (%s); they show as <id N>", err);
        tok_source_close(&src);
    }
    return G.vocab;
}

/* Token texts for top_logprobs alternatives. */
static int vocab_text(void *cls, int32_t id, char *buf, size_t cap)
{
    (void)cls;
    pthread_mutex_lock(&G.vocab_mu);
    vocab_locked();
    int n = G.vocab ? tok_piece(G.vocab, id, true, buf, cap) : -1;
    pthread_mutex_unlock(&G.vocab_mu);
    return n;
}

/* ---- endpoints ---- */

static enum MHD_Result get_health(struct MHD_Connection *c, http_req *x)
{
    gwb_status s;
    gwb_status_get(G.bridge, &s);
    char msg[400];
    if (!s.at_ms || net_now_ms() - s.at_ms > GWB_FRESH_MS) {
        snprintf(msg, sizeof msg, "the front door at %s does not answer", gwb_endpoint(G.bridge));
        return error_reply(c, x, 503, msg, NULL, errcode_name(ERR_UNAVAILABLE));
    }
    if (s.workers == 0) return error_reply(c, x, 503, "no engine worker is up", NULL, errcode_name(ERR_UNAVAILABLE));
    return json_reply(c, x, 200, json_pack("{s:s,s:i,s:I,s:I}", "status", "ok", "workers", s.workers, "active",
                                           (json_int_t)s.active, "queued", (json_int_t)s.queued));
}

static enum MHD_Result get_models(struct MHD_Connection *c, http_req *x)
{
    gwb_status s;
    gwb_status_get(G.bridge, &s);
    if (!s.at_ms && !G.o.alias) return error_reply(c, x, 503, "the front door has not answered yet", NULL, errcode_name(ERR_UNAVAILABLE));
    char id[256];
    model_id(id, sizeof id, &s);
    return json_reply(c, x, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", id,
                                           "object", "model", "created", (json_int_t)G.started, "owned_by",
                                           "llm-pipeline"));
}

/* 1 if something accepts connections on the unix socket at path. */
static int ipc_listening(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!path || strlen(path) >= sizeof a.sun_path) return 0;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static enum MHD_Result get_metrics(struct MHD_Connection *c, http_req *x)
{
    gwb_status s;
    gwb_status_get(G.bridge, &s);
    gwm_front f = {.fresh = s.at_ms && net_now_ms() - s.at_ms <= GWB_FRESH_MS, .workers = s.workers,
                   .active = s.active, .queued = s.queued, .held = s.held, .served = s.served,
                   .failed = s.failed, .max_requests = s.max_requests,
                   .max_per_client = s.max_per_client, .samplerd_up = -1, .has_kv = s.has_kv};
    memcpy(f.kv, s.kv, sizeof f.kv);
    char ep[300];
    if (G.run_dir[0]) { /* samplerd is local when its endpoint is ipc:// */
        net_endpoint(G.run_dir, NET_EP_SAMPLER, ep, sizeof ep);
        if (net_ipc_path(ep)) f.samplerd_up = ipc_listening(net_ipc_path(ep));
    }
    size_t len = 0;
    char *text = gwm_render(&G.metrics, &f, &len);
    if (!text) return error_reply(c, x, 500, "cannot render the metrics", NULL, errcode_name(ERR_INTERNAL));
    return queue(c, x, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, 0);
}

/* /tokenize and /detokenize, on the gateway's copy of the vocabulary. */
static enum MHD_Result tokenize(struct MHD_Connection *c, http_req *x)
{
    pthread_mutex_lock(&G.vocab_mu);
    tok_vocab *v = vocab_locked();
    int status = 503;
    char *body = !v ? NULL : x->ep == GWM_EP_TOKENIZE ? gwt_tokenize(v, x->body, x->len, &status)
                                                     : gwt_detokenize(v, x->body, x->len, &status);
    pthread_mutex_unlock(&G.vocab_mu);
    if (!v) return error_reply(c, x, 503, "the gateway has no vocabulary (give llmc serve --model FILE)", NULL,
                               errcode_name(ERR_UNAVAILABLE));
    if (!body) return error_reply(c, x, 500, "gateway out of memory", NULL, errcode_name(ERR_INTERNAL));
    return queue(c, x, status, "application/json", body, strlen(body), 0);
}

/* /v1/embeddings (and llama-server's /embedding): one front door request per input. */
static enum MHD_Result start_embeddings(struct MHD_Connection *c, http_req *x)
{
    oai_emb_req er;
    oai_err e;
    if (oai_emb_parse(&er, x->llama_emb ? OAI_EMB_LLAMA : OAI_EMB_OPENAI, x->body, x->len, G.o.pooling, &e) != 0)
        return error_reply(c, x, 400, e.msg, e.param, errcode_name(ERR_INVALID));
    gwb_status s;
    gwb_status_get(G.bridge, &s);
    char id[256];
    model_id(id, sizeof id, &s);
    x->job = gwj_new_embed(&er, gwb_new_id(G.bridge), id, &G.metrics, x->t0_us);
    if (!x->job) {
        oai_emb_free(&er);
        return error_reply(c, x, 500, "gateway out of memory", NULL, errcode_name(ERR_INTERNAL));
    }
    gwj_attach(x->job, c);
    gwj_submit(x->job, G.bridge);
    return MHD_YES;
}

/* Parses the body and hands the request to the bridge; the answer comes later. */
static enum MHD_Result start_generation(struct MHD_Connection *c, http_req *x)
{
    oai_req req;
    oai_err e;
    if (oai_parse(&req, x->ep == GWM_EP_CHAT ? OAI_CHAT : OAI_COMPLETION, x->body ? x->body : "", x->len, &e) != 0)
        return error_reply(c, x, 400, e.msg, e.param, errcode_name(ERR_INVALID));
    gwb_status s;
    gwb_status_get(G.bridge, &s);
    if (oai_tools_prepare(&req, s.tmpl, &e) != 0) {
        oai_req_free(&req);
        return error_reply(c, x, 400, e.msg, e.param, errcode_name(ERR_INVALID));
    }
    char id[256];
    model_id(id, sizeof id, &s);
    x->job = gwj_new(&req, x->ep, gwb_new_id(G.bridge), id, vocab_text, NULL, &G.metrics, x->t0_us);
    if (!x->job) {
        oai_req_free(&req);
        return error_reply(c, x, 500, "gateway out of memory", NULL, errcode_name(ERR_INTERNAL));
    }
    gwj_attach(x->job, c);
    proto_writer w;
    gwj_generate(x->job, x->job->id, NULL, &w);
    if (proto_size(&w) > PROTO_MAX_MSG - 1024) {
        proto_writer_free(&w);
        return error_reply(c, x, 413, "the request is too large for the front door", NULL, errcode_name(ERR_INVALID));
    }
    proto_writer_free(&w);
    gwj_submit(x->job, G.bridge);
    return MHD_YES;
}

/* The answer of a job whose phase is decided. */
static enum MHD_Result answer_job(struct MHD_Connection *c, http_req *x)
{
    gwj *j = x->job;
    pthread_mutex_lock(&j->mu);
    gwj_phase phase = j->phase;
    int cancelled = j->cancelled, status = j->status;
    char *body = j->body;
    size_t len = j->body_len;
    unsigned retry = j->retry_after;
    j->body = NULL;
    pthread_mutex_unlock(&j->mu);
    if (cancelled && phase != GWJ_STREAM) { free(body); return MHD_NO; }
    if (phase != GWJ_STREAM) return queue(c, x, status, "application/json", body, len, retry);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, gwj_read, j, gwj_read_free);
    if (!r) return MHD_NO;
    gwj_ref(j);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    gwm_request(&G.metrics, x->ep, 200);
    return ok;
}

/* ---- routing and the access handler ---- */

static gwm_ep route(const char *url)
{
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) return GWM_EP_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) return GWM_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return GWM_EP_MODELS;
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) return GWM_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return GWM_EP_METRICS;
    if (!strcmp(url, "/tokenize")) return GWM_EP_TOKENIZE;
    if (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings") || !strcmp(url, "/embedding"))
        return GWM_EP_EMBEDDINGS;
    if (!strcmp(url, "/detokenize")) return GWM_EP_DETOKENIZE;
    return GWM_EP_OTHER;
}

static void too_big(http_req *x)
{
    x->err_status = 413;
    snprintf(x->err_msg, sizeof x->err_msg, "the request body is larger than %zu bytes (--max-body)", G.o.max_body);
}

/* Decides from the request line and headers alone: route, method, key, declared size. */
static void check_headers(struct MHD_Connection *c, http_req *x, const char *url, const char *method)
{
    int post = x->ep == GWM_EP_CHAT || x->ep == GWM_EP_COMPLETIONS || x->ep == GWM_EP_TOKENIZE ||
               x->ep == GWM_EP_DETOKENIZE || x->ep == GWM_EP_EMBEDDINGS;
    const char *want = post ? "POST" : "GET";
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (x->ep == GWM_EP_OTHER) {
        x->err_status = 404;
        snprintf(x->err_msg, sizeof x->err_msg, "no such endpoint: %.100s", url);
    } else if (strcmp(method, want) != 0 && !(strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)) {
        x->err_status = 405;
        snprintf(x->err_msg, sizeof x->err_msg, "%.100s takes %s, not %.20s", url, want, method);
    } else if (x->ep != GWM_EP_HEALTH && !gwk_authorized(&G.o.keys, auth)) {
        x->err_status = 401;
        snprintf(x->err_msg, sizeof x->err_msg, "invalid or missing API key (Authorization: Bearer KEY)");
    } else if (cl && strtoull(cl, NULL, 10) > G.o.max_body) {
        too_big(x);
    }
}

static enum MHD_Result refuse(struct MHD_Connection *c, http_req *x)
{
    const char *code = x->err_status == 401 ? errcode_name(ERR_INVALID_API_KEY) : x->err_status == 413 ? errcode_name(ERR_INVALID) : NULL;
    return error_reply(c, x, x->err_status, x->err_msg, NULL, code);
}

/* The deadline slot of c's connection (gw_conns.h), NULL if it has none. */
static gwc_slot *conn_slot(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* The first call of a request, when its headers are in and none of its body is read. A
 * refusal is answered now: a client that announces a huge body, or has no key, is told
 * at once and its connection closed (libmicrohttpd closes after an early answer),
 * instead of being read to the end of a body it may never send. */
static enum MHD_Result first_call(struct MHD_Connection *c, const char *url, const char *method, void **con_cls)
{
    http_req *x = calloc(1, sizeof *x);
    if (!x) return MHD_NO;
    *con_cls = x;
    x->t0_us = gwj_now_us();
    x->ep = route(url);
    x->llama_emb = strcmp(url, "/embedding") == 0;
    if (strcmp(method, "OPTIONS") == 0) return MHD_YES;
    check_headers(c, x, url, method);
    if (!x->err_status) return MHD_YES;
    gwc_answering(G.conns, conn_slot(c));
    return refuse(c, x);
}

/* Keeps a piece of the body, or drops it once the body is over --max-body (chunked). */
static enum MHD_Result take_body(http_req *x, const char *upload, size_t *upload_size)
{
    size_t n = *upload_size;
    *upload_size = 0;
    if (x->err_status) return MHD_YES; /* read and dropped */
    if (x->len + n > G.o.max_body) {
        too_big(x);
        return MHD_YES;
    }
    if (x->len + n + 1 > x->cap) {
        size_t cap = (x->len + n + 1) * 2 < G.o.max_body + 1 ? (x->len + n + 1) * 2 : G.o.max_body + 1;
        char *b = realloc(x->body, cap);
        if (!b) return MHD_NO;
        x->body = b;
        x->cap = cap;
    }
    memcpy(x->body + x->len, upload, n);
    x->len += n;
    return MHD_YES;
}

static enum MHD_Result preflight(struct MHD_Connection *c, http_req *x)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    enum MHD_Result ok = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    gwm_request(&G.metrics, x->ep, 204);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    http_req *x = *con_cls;
    if (!x) return first_call(c, url, method, con_cls);
    if (*upload_size) return take_body(x, upload, upload_size);
    gwc_answering(G.conns, conn_slot(c)); /* the whole request is in */
    if (x->job) return answer_job(c, x);  /* resumed: the answer is decided */
    if (strcmp(method, "OPTIONS") == 0) return preflight(c, x);
    if (x->err_status) return refuse(c, x);
    switch (x->ep) {
    case GWM_EP_HEALTH: return get_health(c, x);
    case GWM_EP_MODELS: return get_models(c, x);
    case GWM_EP_METRICS: return get_metrics(c, x);
    case GWM_EP_TOKENIZE:
    case GWM_EP_DETOKENIZE: return tokenize(c, x);
    default: break;
    }
    enum MHD_Result r = x->ep == GWM_EP_EMBEDDINGS ? start_embeddings(c, x) : start_generation(c, x);
    if (r != MHD_YES || !x->job) return r;
    return gwj_wait(x->job) ? MHD_YES : answer_job(c, x);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    gwc_idle(G.conns, conn_slot(c)); /* the next request on this connection, if any */
    http_req *x = *con_cls;
    if (!x) return;
    if (x->job && gwj_detach(x->job)) gwj_cancel(x->job, G.bridge); /* the client left mid-request */
    gwj_unref(x->job);
    free(x->body);
    free(x);
    *con_cls = NULL;
}

/* The request line of a request has arrived (libmicrohttpd's URI log callback; its
 * result would be the request's con_cls, which on_request sets itself). */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)uri;
    gwc_request_line(G.conns, conn_slot(c));
    return NULL;
}

/* A connection opens or closes (libmicrohttpd's socket context is its deadline slot). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        gwc_close(G.conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *sa = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char addr[64] = "?";
    if (sa && sa->client_addr)
        getnameinfo(sa->client_addr, sa->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                            : sizeof(struct sockaddr_in),
                    addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    if (fd) *socket_context = gwc_open(G.conns, fd->connect_fd, addr);
}

/* ---- options and main ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llmc serve [options]        OpenAI-compatible HTTP gateway to the pipeline\n"
            "  --host HOST           address to listen on (default 127.0.0.1)\n"
            "  --port N              port (default 8080)\n"
            "  API keys: with any, every endpoint but /health needs 'Authorization: Bearer KEY'. Give them in\n"
            "  LLM_API_KEY (comma-separated; used when neither option below is given) or a key file:\n"
            "  --api-key-file FILE   the keys in FILE, one a line (blank and # lines skipped); FILE must be\n"
            "                        yours and private to you (chmod 600), or the gateway does not start\n"
            "  --api-key KEY         KEY (repeatable); not recommended: every local user sees it in ps\n"
            "  --threads N           HTTP threads (default 4)\n"
            "  --max-body BYTES      largest request body (default 2097152)\n"
            "  --max-connections N   open HTTP connections, all clients together (default 512)\n"
            "  --max-connections-per-ip N\n"
            "                        open HTTP connections from one client address (default 64; 0: no limit)\n"
            "  --request-timeout S   seconds a client has to send a whole request, headers and body (default 60)\n"
            "  --front-timeout S     seconds an accepted request waits on a silent front door (asking it to resume\n"
            "                        every 2 s) before it fails with 503 (default 30)\n"
            "  --pooling mean|last   embeddings: how the final hidden states of an input are pooled, unless a\n"
            "                        request says (\"pooling\"); L2-normalized either way (default mean)\n"
            "  --alias NAME          model id in responses and /v1/models (default: the model file's name)\n"
            "  --model FILE          vocabulary for top_logprobs texts and /tokenize (default: what the front door serves) [LLM_MODEL]\n"
            "  -e, --endpoint EP     front door endpoint (default ipc://RUN_DIR/front.sock) [LLM_FRONT]\n"
            "  --run-dir DIR         the pipeline's run directory [LLM_RUN_DIR]\n");
}

static int parse_num(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "error: bad parameter %s %s: expected an integer in [%ld, %ld]\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* r from a gwk_ function that was given flag's value: the message, if it failed. */
static int key_result(const char *flag, int r, const char *err)
{
    if (r != 0) fprintf(stderr, "error: %s: %s\n", flag, err);
    return r;
}

/* Parses option a with its value v: 0, 2 if a is no such option, -1 for a bad value
 * (message printed). */
static int parse_valued(serve_opts *o, const char *a, const char *v)
{
    char err[400];
    long n;
    if (!strcmp(a, "--host")) o->host = v;
    else if (!strcmp(a, "--port")) { if (parse_num(a, v, 1, 65535, &n)) return -1; o->port = (int)n; }
    else if (!strcmp(a, "--threads")) { if (parse_num(a, v, 1, 256, &n)) return -1; o->threads = (int)n; }
    else if (!strcmp(a, "--max-body")) { if (parse_num(a, v, 1024, 64L << 20, &n)) return -1; o->max_body = (size_t)n; }
    else if (!strcmp(a, "--max-connections")) { if (parse_num(a, v, 1, 65536, &n)) return -1; o->max_conns = (unsigned)n; }
    else if (!strcmp(a, "--max-connections-per-ip")) { if (parse_num(a, v, 0, 65536, &n)) return -1; o->max_conns_per_ip = (unsigned)n; }
    else if (!strcmp(a, "--request-timeout")) { if (parse_num(a, v, 1, 3600, &n)) return -1; o->request_timeout = (int)n; }
    else if (!strcmp(a, "--front-timeout")) { if (parse_num(a, v, 3, 3600, &n)) return -1; o->front_timeout = (int)n; }
    else if (!strcmp(a, "--alias")) o->alias = v;
    else if (!strcmp(a, "--pooling")) {
        if (!(o->pooling = oai_emb_pooling(v))) {
            fprintf(stderr, "error: bad parameter --pooling %s: expected mean or last\n", v);
            return -1;
        }
    }
    else if (!strcmp(a, "--model")) o->model_file = v;
    else if (!strcmp(a, "-e") || !strcmp(a, "--endpoint")) o->endpoint = v;
    else if (!strcmp(a, "--run-dir")) o->run_dir = v;
    else if (!strcmp(a, "--api-key-file")) return key_result(a, gwk_load_file(&o->keys, v, err, sizeof err), err);
    else if (!strcmp(a, "--api-key")) {
        o->n_argv_keys += *v != 0;
        return key_result(a, gwk_add(&o->keys, v, err, sizeof err), err);
    } else return 2;
    return 0;
}

/* 0, 1 for --help, 2 for a usage error, -1 for a bad value (message printed). */
static int parse(int argc, char **argv, serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->threads = 4;
    o->max_body = 2u << 20;
    o->max_conns = 512;
    o->max_conns_per_ip = 64;
    o->request_timeout = 60;
    o->front_timeout = LC_STREAM_LOST_MS / 1000;
    o->pooling = PROTO_POOL_MEAN;
    o->model_file = getenv("LLM_MODEL");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        int r = i + 1 < argc ? parse_valued(o, a, argv[i + 1]) : 2;
        i += r == 0;
        if (r == 2) fprintf(stderr, "error: unknown option or missing value '%s' (llmc serve --help)\n", a);
        if (r) return r;
    }
    char err[200];
    if (o->keys.n == 0 && gwk_add_list(&o->keys, getenv("LLM_API_KEY"), err, sizeof err) != 0) {
        fprintf(stderr, "error: LLM_API_KEY: %s\n", err);
        return -1;
    }
    if (o->max_conns < (unsigned)o->threads) { /* libmicrohttpd gives each thread its share */
        fprintf(stderr, "error: --max-connections %u is below --threads %d: each HTTP thread needs one\n",
                o->max_conns, o->threads);
        return -1;
    }
    return 0;
}

#define MHD_LOG_PER_S 20 /* libmicrohttpd messages logged per second at most */

/* libmicrohttpd's own messages (a client that left mid-answer, a connection refused by
 * a limit, ...) as our log lines, at most MHD_LOG_PER_S a second: a client that opens
 * connections past the limits in a loop gets each refused with a message, and must not
 * fill the disk with them. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int64_t second;
    static unsigned n_this_second, n_dropped;
    (void)cls;
    pthread_mutex_lock(&mu);
    int64_t now = net_now_ms() / 1000;
    if (now != second) {
        second = now;
        n_this_second = 0;
    }
    unsigned dropped = n_dropped;
    int show = n_this_second++ < MHD_LOG_PER_S;
    n_dropped = show ? 0 : n_dropped + 1;
    pthread_mutex_unlock(&mu);
    if (!show) return;
    char line[400];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    if (dropped) log_info("libmicrohttpd: %s (after %u messages not logged: over %d a second)", line, dropped,
                          MHD_LOG_PER_S);
    else log_info("libmicrohttpd: %s", line);
}

static struct MHD_Daemon *listen_http(const serve_opts *o, char *err, size_t errcap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int e = getaddrinfo(o->host, port, &hints, &ai);
    if (e != 0) {
        errf(err, errcap, "cannot resolve --host %s: %s", o->host, gai_strerror(e));
        return NULL;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* The idle timeout bounds a reader that stops reading an answer (a stream between
     * pieces is suspended, which does not count); receiving a request is bounded by
     * --request-timeout (gw_conns.h). A connection over the per-address limit is closed
     * at accept; over the total, new ones wait in the kernel's listen queue. */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL, MHD_OPTION_URI_LOG_CALLBACK, on_request_line, NULL,
        MHD_OPTION_CONNECTION_LIMIT, o->max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_conns_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    if (!d) errf(err, errcap, "cannot listen on %s:%d (%s)", o->host, o->port, strerror(errno));
    freeaddrinfo(ai);
    return d;
}

int cmd_serve(int argc, char **argv)
{
    int r = parse(argc, argv, &G.o);
    if (r) {
        gwk_free(&G.o.keys);
        return r == 1 ? 0 : r == 2 ? 2 : 1;
    }
    log_init("gateway", LOG_INFO);
    if (G.o.n_argv_keys)
        log_warn("%d API key(s) given with --api-key: visible to local users in ps; use --api-key-file or LLM_API_KEY",
                 G.o.n_argv_keys);
    char ep[300], err[400];
    if (G.o.endpoint) {
        snprintf(ep, sizeof ep, "%s", G.o.endpoint);
    } else {
        if (net_run_dir(G.o.run_dir, G.run_dir, sizeof G.run_dir, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        net_endpoint(G.run_dir, NET_EP_FRONT, ep, sizeof ep);
    }
    gwm_init(&G.metrics);
    pthread_mutex_init(&G.vocab_mu, NULL);
    G.started = (long long)time(NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    G.conns = gwc_new((int64_t)G.o.request_timeout * 1000);
    G.bridge = G.conns ? gwb_new(ep, &gwj_ops, (int64_t)G.o.front_timeout * 1000, err, sizeof err) : NULL;
    struct MHD_Daemon *d = G.bridge ? listen_http(&G.o, err, sizeof err) : NULL;
    if (!d) {
        fprintf(stderr, "error: %s\n", G.conns ? err : "out of memory");
        gwb_destroy(&G.bridge);
        gwc_destroy(&G.conns);
        gwk_free(&G.o.keys);
        return 1;
    }
    char per_ip[32] = "no limit";
    if (G.o.max_conns_per_ip) snprintf(per_ip, sizeof per_ip, "%u", G.o.max_conns_per_ip);
    log_info("listening on http://%s:%d (front door %s, %d HTTP threads, %s; at most %u connections, per client "
             "address %s; %d s to send a request)", G.o.host, G.o.port, ep, G.o.threads,
             G.o.keys.n ? "API keys required" : "no API key", G.o.max_conns, per_ip, G.o.request_timeout);
    while (!stop_flag) {
        usleep(100 * 1000);
        gwc_sweep(G.conns, net_now_ms());
    }
    log_info("shutting down");
    gwb_stop(G.bridge);   /* every open job fails and its connection resumes */
    usleep(200 * 1000);   /* let those answers go out */
    MHD_stop_daemon(d); /* closes every connection, so every deadline slot too */
    gwb_destroy(&G.bridge);
    gwc_destroy(&G.conns);
    gwk_free(&G.o.keys);
    tok_vocab_free(G.vocab);
    gwm_free(&G.metrics);
    return 0;
}
