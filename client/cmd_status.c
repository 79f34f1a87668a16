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
    char model[256], seg[80], tmpl[32];
    proto_strcpy(m, MF_MODEL, model, sizeof model);
    proto_strcpy(m, MF_SEGMENT, seg, sizeof seg);
    proto_strcpy(m, MF_TEMPLATE, tmpl, sizeof tmpl);
    printf("front door: pid %llu, up %.1f s, model %s, chat template %s\n",
           (unsigned long long)proto_u64(m, MF_PID, 0), proto_f64(m, MF_UPTIME, 0), model, tmpl);
    if (!seg[0]) printf("segment: (no worker connected)\n");
    else if (proto_field(m, MF_BPW)) printf("segment: %s (%.2f bits/weight)\n", seg, proto_f64(m, MF_BPW, 0));
    else printf("segment: %s\n", seg); /* its workers are too old to say */
    printf("requests: %llu active, %llu queued, %llu chat sessions held; %llu served, %llu failed\n",
           (unsigned long long)proto_u64(m, MF_ACTIVE, 0), (unsigned long long)proto_u64(m, MF_QUEUED, 0),
           (unsigned long long)proto_u64(m, MF_HELD, 0), (unsigned long long)proto_u64(m, MF_SERVED, 0),
           (unsigned long long)proto_u64(m, MF_FAILED, 0));
    const msgpack_object *w = proto_field(m, MF_WORKERS);
    uint32_t n = w && w->type == MSGPACK_OBJECT_ARRAY ? w->via.array.size : 0;
    printf("workers: %u\n", n);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *x = &w->via.array.ptr[i];
        if (x->type != MSGPACK_OBJECT_MAP) continue;
        long long pid = -1, sess = -1, busy = -1, ctx = -1;
        double up = 0;
        int stalled = 0;
        char host[80] = "?";
        for (uint32_t k = 0; k < x->via.map.size; k++) {
            const msgpack_object_str *key = &x->via.map.ptr[k].key.via.str;
            const msgpack_object *v = &x->via.map.ptr[k].val;
            if (x->via.map.ptr[k].key.type != MSGPACK_OBJECT_STR) continue;
            int is_int = v->type == MSGPACK_OBJECT_POSITIVE_INTEGER || v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
            if (key->size == 3 && !memcmp(key->ptr, "pid", 3) && is_int) pid = v->via.i64;
            if (key->size == 8 && !memcmp(key->ptr, "sessions", 8) && is_int) sess = v->via.i64;
            if (key->size == 4 && !memcmp(key->ptr, "busy", 4) && is_int) busy = v->via.i64;
            if (key->size == 3 && !memcmp(key->ptr, "ctx", 3) && is_int) ctx = v->via.i64;
            if (key->size == 7 && !memcmp(key->ptr, "stalled", 7) && v->type == MSGPACK_OBJECT_BOOLEAN)
                stalled = v->via.boolean;
            if (key->size == 2 && !memcmp(key->ptr, "up", 2) && v->type == MSGPACK_OBJECT_FLOAT64) up = v->via.f64;
            if (key->size == 4 && !memcmp(key->ptr, "host", 4) && v->type == MSGPACK_OBJECT_STR)
                snprintf(host, sizeof host, "%.*s", (int)v->via.str.size, v->via.str.ptr);
        }
        printf("  worker pid %lld  host %s  sessions %lld  busy %lld  ctx %lld  up %.1f s%s\n", pid, host, sess,
               busy, ctx, up, stalled ? "  STALLED (no progress: its sessions were moved)" : "");
    }
    /* samplerd's health, as the workers see it: how long their oldest sample request has
     * waited (they ask again every 0.4 s; a restarted samplerd answers at once) */
    if (!proto_field(m, MF_SWAIT)) {
        printf("samplerd: unknown (no worker to ask)\n");
    } else {
        double sw = (double)proto_u64(m, MF_SWAIT, 0) / 1000.0;
        if (sw < 1.5) printf("samplerd: ok\n");
        else printf("samplerd: NOT ANSWERING: a sample request has waited %.1f s (is samplerd running? "
                    "'bash deploy/pipeline.sh status')\n", sw);
    }
    const msgpack_object *q = proto_field(m, MF_QUEUE);
    uint32_t nq = q && q->type == MSGPACK_OBJECT_ARRAY ? q->via.array.size : 0;
    printf("queue: %llu waiting (first come, first served; limits: %llu requests, %llu per client)\n",
           (unsigned long long)proto_u64(m, MF_QUEUED, 0), (unsigned long long)proto_u64(m, MF_MAX_REQUESTS, 0),
           (unsigned long long)proto_u64(m, MF_MAX_PER_CLIENT, 0));
    for (uint32_t i = 0; i < nq; i++) {
        proto_msg e = proto_view(m, &q->via.array.ptr[i]);
        printf("  %llu. %llu prompt tokens  waiting %.1f s\n", (unsigned long long)proto_u64(&e, MF_POS, 0),
               (unsigned long long)proto_u64(&e, MF_NTOK, 0),
               proto_f64(&e, MF_WAIT, 0));
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
