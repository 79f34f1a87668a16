/*
 * bench/bench_kvmem - KV cache memory per session for each KV type (f32, f16, q8_0) of a
 * model, at a given context: the bytes of a private session cache (what kv_init
 * allocates, the sliding-window layers' rings of window - 1 + ENG_SWA_STEP_DEFAULT
 * positions included, as eng_session_new makes them) and of shared pools (real pools
 * of POOL_MIB MiB in all, planned as engined --kv-pool plans them (kvs_plan, steps of
 * ENG_SWA_STEP_DEFAULT positions) and made with kvp_create under names of this process,
 * their geometry read, removed), as one JSON line per type. Reads only the model's
 * header (no weights are converted).
 *
 *   build/bench/bench_kvmem MODEL.gguf [CTX] [POOL_MIB]     (defaults: 2048, 1024)
 *
 * Per type: bytes_per_token (private), session_bytes (private, CTX positions),
 * session_bytes_full (the same if every layer kept CTX positions), swa_layers (layers
 * kept as rings), sessions_per_gib (private: 2^30 / session_bytes), pool_blocks and
 * pool_ring_blocks (whole and ring blocks), pool_bytes (both pools), pool_sessions
 * (whole sessions of CTX tokens the pools hold: each session holding CTX / 16 whole
 * blocks and its most ring blocks at once) and pool_sessions_per_gib (sessions of CTX
 * tokens per GiB of pool, metadata included).
 * bench/bench_kvmem.py puts them beside llama-server's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine.h"
#include "errcode.h"
#include "gguf.h"
#include "kv.h"
#include "kvpool.h"
#include "kvsetup.h"
#include "log.h"
#include "model.h"

/* One type's line; 0, or -1 with err. */
static int report(const mdl_config *c, eng_kv_type t, int ctx, uint64_t pool_mib, char *err, size_t errlen)
{
    int64_t kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    int *win = malloc((size_t)c->n_layer * sizeof *win), rings = 0;
    if (!win) return errf(err, errlen, "out of memory");
    for (int l = 0; l < c->n_layer; l++) {
        win[l] = mdl_layer_window(c, l);
        rings += kv_layer_cap(ctx, win[l], ENG_SWA_STEP_DEFAULT) < ctx;
    }
    size_t sess = kv_cache_bytes(c->n_layer, ctx, kv_dim, t, win, ENG_SWA_STEP_DEFAULT);
    size_t full = kv_cache_bytes(c->n_layer, ctx, kv_dim, t, NULL, 0);
    free(win);
    kvs_spec spec = { .bytes = pool_mib << 20, .kv = t, .n_ctx = ctx, .step = ENG_SWA_STEP_DEFAULT };
    kvp_params p[ENG_KV_KINDS];
    int peak[ENG_KV_KINDS];
    kvs_plan(c, 1, &spec, p);
    kvs_peak(c, ctx, ENG_SWA_STEP_DEFAULT, peak);
    uint32_t blocks[ENG_KV_KINDS] = {0};
    double sessions = 1e30;
    uint64_t total = 0;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (!p[k].id.n_layer) continue;
        char name[SEG_NAME_MAX];
        snprintf(name, sizeof name, "/llm-kv-%u-bench%d-%s-%d", (unsigned)geteuid(), (int)getpid(), eng_kv_name(t), k);
        kvp *pool = NULL;
        if (kvp_create(name, &p[k], &pool, err, errlen) != 0) return -1;
        blocks[k] = kvp_geometry_of(pool)->n_blocks;
        total += kvp_geometry_of(pool)->total_bytes;
        if ((double)blocks[k] / peak[k] < sessions) sessions = (double)blocks[k] / peak[k];
        kvp_close(&pool);
        kvp_remove(name, err, errlen);
    }
    double gib = (double)(1ull << 30);
    printf("{\"type\":\"%s\",\"ctx\":%d,\"n_layer\":%d,\"kv_dim\":%lld,\"bytes_per_token\":%.1f,"
           "\"session_bytes\":%zu,\"session_bytes_full\":%zu,\"swa_layers\":%d,\"sessions_per_gib\":%.2f,"
           "\"pool_blocks\":%u,\"pool_ring_blocks\":%u,\"pool_bytes\":%llu,\"pool_sessions\":%u,"
           "\"pool_sessions_per_gib\":%.2f}\n",
           eng_kv_name(t), ctx, c->n_layer, (long long)kv_dim, (double)sess / ctx, sess, full, rings,
           gib / (double)sess, blocks[ENG_KV_WHOLE], blocks[ENG_KV_RING], (unsigned long long)total, (unsigned)sessions,
           sessions * gib / (double)total);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_kvmem MODEL.gguf [CTX] [POOL_MIB]\n");
        return 2;
    }
    log_init("bench-kvmem", LOG_WARN);
    int ctx = argc > 2 ? atoi(argv[2]) : 2048;
    long mib = argc > 3 ? atol(argv[3]) : 1024;
    char err[512];
    gguf_ctx *g = gguf_open(argv[1], err, sizeof err);
    mdl_config c;
    if (!g || mdl_config_from_gguf(g, &c, err, sizeof err) != 0 || ctx < 1 || mib < 1) {
        fprintf(stderr, "error: %s\n", g ? (ctx < 1 || mib < 1 ? "bad CTX or POOL_MIB" : err) : err);
        gguf_close(g);
        return 1;
    }
    int rc = 0;
    for (int t = 0; t < ENG_KV_COUNT && rc == 0; t++) {
        static const eng_kv_type order[ENG_KV_COUNT] = { ENG_KV_F32, ENG_KV_F16, ENG_KV_Q8_0 };
        if (order[t] == ENG_KV_Q8_0 && c.head_dim % 32) {
            printf("{\"type\":\"q8_0\",\"error\":\"head_dim %d is not a multiple of 32\"}\n", (int)c.head_dim);
            continue;
        }
        rc = report(&c, order[t], ctx, (uint64_t)mib, err, sizeof err);
    }
    if (rc) fprintf(stderr, "error: %s\n", err);
    gguf_close(g);
    return rc ? 1 : 0;
}
