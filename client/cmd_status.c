/*
 * cmd_status.c - `llmc status [--json] [-e EP] [--run-dir DIR]`: the front door's view of
 * the pipeline: workers (pid, host, sessions, uptime), samplerd's health (from the
 * workers' heartbeats), the segment and its bits per weight, requests, uptime.
 * Exit 0 when the front door answered, 1 otherwise (with how to start the pipeline).
 * Owner: pipeline.
 */
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "conn.h"

static void print_text(const proto_msg *m)
{
    pm_status_reply st;
    pm_status_reply_get(m, &st);
    char model[256], seg[80], tmpl[32];
    proto_sv_copy(st.model, model, sizeof model);
    proto_sv_copy(st.segment, seg, sizeof seg);
    proto_sv_copy(st.template_name, tmpl, sizeof tmpl);
    printf("front door: pid %llu, up %.1f s, model %s, chat template %s\n", (unsigned long long)st.pid, st.uptime,
           model, tmpl);
    if (!seg[0]) printf("segment: (no worker connected)\n");
    else if (st.has_bpw) printf("segment: %s (%.2f bits/weight)\n", seg, st.bpw);
    else printf("segment: %s\n", seg); /* its workers are too old to say */
    printf("requests: %llu active, %llu queued, %llu chat sessions held; %llu served, %llu failed\n",
           (unsigned long long)st.active, (unsigned long long)st.queued, (unsigned long long)st.held,
           (unsigned long long)st.served, (unsigned long long)st.failed);
    const msgpack_object *w = st.workers;
    uint32_t n = w && w->type == MSGPACK_OBJECT_ARRAY ? w->via.array.size : 0;
    printf("workers: %u\n", n);
    for (uint32_t i = 0; i < n; i++) {
        if (w->via.array.ptr[i].type != MSGPACK_OBJECT_MAP) continue;
        pm_status_worker x;
        pm_status_worker_get(m, &w->via.array.ptr[i], &x);
        char host[80] = "?";
        if (x.has_host) proto_sv_copy(x.host, host, sizeof host);
        printf("  worker pid %lld  host %s  sessions %lld  busy %lld  ctx %lld  up %.1f s%s\n",
               x.has_pid ? (long long)x.pid : -1, host, x.has_sessions ? (long long)x.sessions : -1,
               x.has_busy ? (long long)x.busy : -1, x.has_ctx ? (long long)x.ctx : -1, x.up,
               x.stalled ? "  STALLED (no progress: its sessions were moved)" : "");
    }
    /* samplerd's health, as the workers see it: how long their oldest sample request has
     * waited (they ask again every 0.4 s; a restarted samplerd answers at once) */
    if (!st.has_swait) {
        printf("samplerd: unknown (no worker to ask)\n");
    } else {
        double sw = (double)st.swait / 1000.0;
        if (sw < 1.5) printf("samplerd: ok\n");
        else printf("samplerd: NOT ANSWERING: a sample request has waited %.1f s (is samplerd running? "
                    "'bash deploy/pipeline.sh status')\n", sw);
    }
    if (st.has_kvb) { /* engined --kv-pool */
        printf("kv pool: %llu blocks of 16 tokens, %llu in use, %llu cached", (unsigned long long)st.kvb,
               (unsigned long long)st.kvu, (unsigned long long)st.kvc);
        if (st.kvrb) /* a model with sliding-window layers: their pool */
            printf("; ring pool (sliding-window layers): %llu blocks, %llu in use, %llu cached",
                   (unsigned long long)st.kvrb, (unsigned long long)st.kvru, (unsigned long long)st.kvrc);
        printf("; prefix hits %llu of %llu prompt tokens (%.1f%%); %llu evictions, %llu preemptions, %llu runs "
               "deferred for room\n",
               (unsigned long long)st.kvrt, (unsigned long long)st.kvpt, st.kvpt ? 100.0 * st.kvrt / st.kvpt : 0.0,
               (unsigned long long)st.kvev, (unsigned long long)st.kvpre, (unsigned long long)st.kvdef);
    }
    const msgpack_object *q = st.has_queue ? st.queue : NULL;
    uint32_t nq = q && q->type == MSGPACK_OBJECT_ARRAY ? q->via.array.size : 0;
    printf("queue: %llu waiting (first come, first served; limits: %llu requests, %llu per client)\n",
           (unsigned long long)st.queued, (unsigned long long)st.max_requests, (unsigned long long)st.max_per_client);
    for (uint32_t i = 0; i < nq; i++) {
        pm_status_queued e;
        pm_status_queued_get(m, &q->via.array.ptr[i], &e);
        printf("  %llu. %llu prompt tokens  waiting %.1f s\n", (unsigned long long)e.pos, (unsigned long long)e.ntok,
               e.wait);
    }
}

int cmd_status(int argc, char **argv)
{
    const char *ep = NULL, *run_dir = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if ((strcmp(argv[i], "-e") == 0 || strcmp(argv[i], "--endpoint") == 0) && i + 1 < argc) ep = argv[++i];
        else if (strcmp(argv[i], "--run-dir") == 0 && i + 1 < argc) run_dir = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: llmc status [--json] [-e ENDPOINT] [--run-dir DIR]\n");
            return 0;
        } else {
            fprintf(stderr, "error: unknown option '%s' (llmc status --help)\n", argv[i]);
            return 2;
        }
    }
    lc_conn c;
    char err[400];
    if (lc_open(&c, ep, run_dir, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    proto_writer w;
    proto_begin(&w, PT_STATUS, 1);
    lc_send(&c, &w);
    proto_msg m;
    int r = lc_recv(&c, 3000, &m);
    int rc = 1;
    if (r == 1 && m.type == PT_STATUS_REPLY) {
        if (json) {
            lc_json_obj(stdout, &m.up.data);
            putchar('\n');
        } else {
            print_text(&m);
        }
        rc = 0;
    } else {
        fprintf(stderr, "error: the front door at %s does not answer (the pipeline is not running?); " LC_START_HINT "\n",
                c.endpoint);
    }
    if (r == 1) proto_msg_free(&m);
    lc_close(&c);
    return rc;
}
