/* gw_metrics.c - the gateway's metrics and their Prometheus text (see gw_metrics.h). */
#include "gw_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double TTFT_LE[GWM_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const double ITL_LE[GWM_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28,
                                           2.5, 5, 10};

static const char *const EP_NAMES[GWM_EP_COUNT] = {
    [GWM_EP_CHAT] = "/v1/chat/completions", [GWM_EP_COMPLETIONS] = "/v1/completions",
    [GWM_EP_MODELS] = "/v1/models", [GWM_EP_HEALTH] = "/health", [GWM_EP_METRICS] = "/metrics",
    [GWM_EP_OTHER] = "other", [GWM_EP_TOKENIZE] = "/tokenize", [GWM_EP_DETOKENIZE] = "/detokenize",
    [GWM_EP_EMBEDDINGS] = "/v1/embeddings"};

const char *gwm_ep_name(gwm_ep ep)
{
    return ep >= 0 && ep < GWM_EP_COUNT ? EP_NAMES[ep] : "other";
}

void gwm_init(gwm *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.le = TTFT_LE;
    m->itl.le = ITL_LE;
}

void gwm_free(gwm *m)
{
    pthread_mutex_destroy(&m->mu);
}

void gwm_request(gwm *m, gwm_ep ep, int status)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_rows && !(m->rows[i].ep == ep && m->rows[i].status == status)) i++;
    if (i == m->n_rows && i < GWM_MAX_ROWS) {
        m->rows[i].ep = ep;
        m->rows[i].status = status;
        m->rows[i].n = 0;
        m->n_rows++;
    }
    if (i < m->n_rows) m->rows[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void gwm_tokens(gwm *m, uint64_t prompt, uint64_t generated)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt;
    m->gen_tokens += generated;
    pthread_mutex_unlock(&m->mu);
}

static void observe(gwm_hist *h, double s, int n)
{
    int b = 0;
    while (b < GWM_BUCKETS && s > h->le[b]) b++;
    if (b < GWM_BUCKETS) h->count[b] += (uint64_t)n;
    h->n += (uint64_t)n;
    h->sum += s * n;
}

void gwm_ttft(gwm *m, double s)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, s, 1);
    pthread_mutex_unlock(&m->mu);
}

void gwm_itl(gwm *m, double s, int n)
{
    if (n <= 0) return;
    pthread_mutex_lock(&m->mu);
    observe(&m->itl, s, n);
    pthread_mutex_unlock(&m->mu);
}

void gwm_streams(gwm *m, int delta)
{
    pthread_mutex_lock(&m->mu);
    m->streams += delta;
    pthread_mutex_unlock(&m->mu);
}

static void hist(FILE *f, const char *name, const char *help, const gwm_hist *h)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < GWM_BUCKETS; b++) {
        cum += h->count[b];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[b], (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->n, name,
            h->sum, name, (unsigned long long)h->n);
}

static void one(FILE *f, const char *name, const char *type, const char *help, unsigned long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

char *gwm_render(gwm *m, const gwm_front *fr, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    pthread_mutex_lock(&m->mu);
    fputs("# HELP llm_http_requests_total HTTP requests answered by the gateway, by endpoint and status.\n"
          "# TYPE llm_http_requests_total counter\n", f);
    for (int i = 0; i < m->n_rows; i++)
        fprintf(f, "llm_http_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", gwm_ep_name(m->rows[i].ep),
                m->rows[i].status, (unsigned long long)m->rows[i].n);
    one(f, "llm_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", m->prompt_tokens);
    one(f, "llm_generated_tokens_total", "counter", "Generated tokens of finished generations.", m->gen_tokens);
    hist(f, "llm_time_to_first_token_seconds", "From the request's arrival at the gateway to its first token.",
         &m->ttft);
    hist(f, "llm_inter_token_seconds", "Gaps between generated tokens as the gateway receives them.", &m->itl);
    one(f, "llm_gateway_streams", "gauge", "Generation requests in flight through the gateway.",
        (unsigned long long)(m->streams > 0 ? m->streams : 0));
    pthread_mutex_unlock(&m->mu);
    if (fr->fresh) {
        one(f, "llm_queue_depth", "gauge", "Requests waiting in the front door's queue.", fr->queued);
        one(f, "llm_requests_active", "gauge", "Requests generating on engine workers.", fr->active);
        one(f, "llm_sessions_held", "gauge", "Chat sessions held on workers between turns.", fr->held);
        one(f, "llm_workers_live", "gauge", "Engine workers registered with the front door.",
            (unsigned long long)fr->workers);
        one(f, "llm_frontdoor_served_total", "counter", "Requests the front door finished.", fr->served);
        one(f, "llm_frontdoor_failed_total", "counter", "Requests the front door failed or dropped.", fr->failed);
        if (fr->has_kv) {
            const uint64_t *kv = fr->kv;
            one(f, "llm_kv_pool_blocks", "gauge", "Blocks of 16 positions in the shared KV pool.", kv[PKV_KVB]);
            one(f, "llm_kv_blocks_used", "gauge", "KV blocks referenced or being written.", kv[PKV_KVU]);
            one(f, "llm_kv_blocks_cached", "gauge", "Published KV blocks no session references (evictable).",
                kv[PKV_KVC]);
            if (kv[PKV_KVRB]) { /* a model with sliding-window layers: their ring pool */
                one(f, "llm_kv_ring_pool_blocks", "gauge",
                    "Blocks of 16 positions in the ring pool (the sliding-window layers).", kv[PKV_KVRB]);
                one(f, "llm_kv_ring_blocks_used", "gauge", "Ring pool blocks referenced or being written.",
                    kv[PKV_KVRU]);
                one(f, "llm_kv_ring_blocks_cached", "gauge",
                    "Published ring pool blocks no session references (evictable).", kv[PKV_KVRC]);
            }
            one(f, "llm_kv_evictions_total", "counter", "Cached KV blocks evicted for new ones (both pools).",
                kv[PKV_KVEV]);
            one(f, "llm_kv_prompt_tokens_total", "counter", "Prompt tokens of runs the live workers started.",
                kv[PKV_KVPT]);
            one(f, "llm_kv_prompt_tokens_reused_total", "counter",
                "Of them, positions not computed again (held or from the KV pool).", kv[PKV_KVRT]);
            one(f, "llm_kv_preemptions_total", "counter", "Sessions preempted for KV blocks.", kv[PKV_KVPRE]);
            one(f, "llm_kv_deferred_total", "counter", "Runs sent back to the queue until the KV pool had room.",
                kv[PKV_KVDEF]);
        }
        if (fr->max_requests || fr->max_per_client)
            fprintf(f, "# HELP llm_queue_capacity Requests (running + queued) the front door admits.\n"
                       "# TYPE llm_queue_capacity gauge\nllm_queue_capacity{scope=\"all\"} %llu\n"
                       "llm_queue_capacity{scope=\"per_client\"} %llu\n",
                    (unsigned long long)fr->max_requests, (unsigned long long)fr->max_per_client);
    }
    fputs("# HELP llm_up 1 when the daemon answers (engined: at least one live worker).\n# TYPE llm_up gauge\n", f);
    fprintf(f, "llm_up{daemon=\"gateway\"} 1\nllm_up{daemon=\"tokenizerd\"} %d\nllm_up{daemon=\"engined\"} %d\n",
            fr->fresh ? 1 : 0, fr->fresh && fr->workers > 0 ? 1 : 0);
    if (fr->samplerd_up >= 0) fprintf(f, "llm_up{daemon=\"samplerd\"} %d\n", fr->samplerd_up);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
