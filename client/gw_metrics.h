/*
 * gw_metrics.h - the gateway's counters and histograms, and their Prometheus text
 * exposition for GET /metrics (owner: gateway). Thread-safe: the HTTP threads and the
 * ZeroMQ bridge thread record into one gwm under its mutex.
 *
 *   gwm m; gwm_init(&m);
 *   gwm_request(&m, GWM_EP_CHAT, 200);
 *   gwm_tokens(&m, 12, 64); gwm_ttft(&m, 0.031); gwm_itl(&m, 0.020, 1);
 *   gwm_front f = {.fresh = 1, .workers = 2, .queued = 0};
 *   size_t n; char *text = gwm_render(&m, &f, &n);   // caller frees
 *   gwm_free(&m);
 *
 * Families (all prefixed llm_): http_requests_total{endpoint,code}, prompt_tokens_total,
 * generated_tokens_total, time_to_first_token_seconds and inter_token_seconds
 * (histograms, measured at the gateway from the request's arrival), gateway_streams
 * (requests in flight here), and from the front door's last STATUS_REPLY: queue_depth,
 * requests_active, sessions_held, workers_live, frontdoor_served_total,
 * frontdoor_failed_total, queue_capacity{scope=all|per_client}; up{daemon=gateway|tokenizerd|engined|samplerd};
 * with a KV pool: kv_pool_blocks, kv_blocks_used, kv_blocks_cached (the main pool),
 * kv_ring_pool_blocks, kv_ring_blocks_used, kv_ring_blocks_cached (the ring pool of a
 * model with sliding-window layers), kv_evictions_total, kv_prompt_tokens_total,
 * kv_prompt_tokens_reused_total (their ratio: the prefix hit rate; the live workers'
 * tallies), kv_preemptions_total, kv_deferred_total.
 */
#ifndef LLM_GW_METRICS_H
#define LLM_GW_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h" /* PROTO_KV_COUNTS */

typedef enum { GWM_EP_CHAT, GWM_EP_COMPLETIONS, GWM_EP_MODELS, GWM_EP_HEALTH, GWM_EP_METRICS, GWM_EP_OTHER,
               GWM_EP_TOKENIZE, GWM_EP_DETOKENIZE, GWM_EP_EMBEDDINGS, GWM_EP_COUNT } gwm_ep;

#define GWM_BUCKETS  14  /* finite bucket bounds per histogram (+Inf is implied) */
#define GWM_MAX_ROWS 64  /* distinct (endpoint, status) pairs counted */

typedef struct {
    const double *le;                 /* (GWM_BUCKETS) upper bounds, seconds */
    uint64_t      count[GWM_BUCKETS]; /* observations <= le[i] (not cumulative here) */
    uint64_t      n;                  /* all observations */
    double        sum;
} gwm_hist;

typedef struct {
    pthread_mutex_t mu;
    struct { gwm_ep ep; int status; uint64_t n; } rows[GWM_MAX_ROWS];
    int      n_rows;
    uint64_t prompt_tokens, gen_tokens;
    gwm_hist ttft, itl;
    int      streams;                 /* requests in flight through the gateway */
} gwm;

/* What the front door said last (filled by the bridge); fresh = it answered recently. */
typedef struct {
    int      fresh;
    int      workers;
    uint64_t active, queued, held, served, failed;
    uint64_t max_requests, max_per_client; /* queue caps, 0 when the front door does not say */
    int      samplerd_up;             /* 1, 0, or -1 when the gateway cannot tell */
    int      has_kv;                  /* the KV pool (engined --kv-pool): gwb_status's kv */
    uint64_t kv[PROTO_KV_COUNTS];
} gwm_front;

void gwm_init(gwm *m);
void gwm_free(gwm *m);
/* Counts one answered HTTP request. */
void gwm_request(gwm *m, gwm_ep ep, int status);
/* Adds the token counts of one finished generation. */
void gwm_tokens(gwm *m, uint64_t prompt, uint64_t generated);
/* Records a time to first token, seconds. */
void gwm_ttft(gwm *m, double s);
/* Records n inter-token gaps of s seconds each (a piece that carries n tokens). */
void gwm_itl(gwm *m, double s, int n);
/* +1 / -1 requests in flight. */
void gwm_streams(gwm *m, int delta);
/* The Prometheus text exposition (version 0.0.4); malloc'd, *len bytes. */
char *gwm_render(gwm *m, const gwm_front *f, size_t *len);
/* The label of an endpoint ("/v1/chat/completions", ...). */
const char *gwm_ep_name(gwm_ep ep);

#endif
