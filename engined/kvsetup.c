/*
 * kvsetup.c - the daemon's KV block pool: --kv-pool parsing, the master's create-or-reuse
 * and the worker's attach (kvsetup.h).
 */
#include "kvsetup.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "errcode.h"
#include "handle.h"
#include "kv.h"
#include "log.h"

int kvs_parse(const char *size, kvs_spec *s, char *err, size_t errlen)
{
    s->bytes = s->tokens = 0;
    if (!size || !*size) return errf(err, errlen, "--kv-pool needs a SIZE (e.g. 2G, 512M or 65536 tokens; 0: off)");
    if (!strcmp(size, "off") || !strcmp(size, "0")) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(size, &end, 10);
    if (errno || end == size || !isdigit((unsigned char)size[0]) || v == 0)
        return errf(err, errlen, "--kv-pool '%s': not a size (2G, 512M, 65536 tokens, or 0 for off)", size);
    int shift = 0;
    if (*end && !end[1] && strchr("kKmMgG", *end)) shift = strchr("kK", *end) ? 10 : strchr("mM", *end) ? 20 : 30;
    else if (*end) return errf(err, errlen, "--kv-pool '%s': the suffix must be K, M or G (bytes), or none (tokens)", size);
    if (shift && v > (1ull << (63 - shift))) return errf(err, errlen, "--kv-pool '%s': too large", size);
    if (shift) s->bytes = v << shift;
    else s->tokens = v;
    return 0;
}

int kvs_enabled(const kvs_spec *s) { return s->bytes || s->tokens; }

int kvs_layers(const mdl_config *c, int kind)
{
    int ring = 0;
    for (int l = 0; l < c->n_layer; l++) ring += mdl_layer_window(c, l) > 0;
    return kind == ENG_KV_RING ? ring : c->n_layer - ring;
}

void kvs_peak(const mdl_config *c, int n, int step, int peak[ENG_KV_KINDS])
{
    int wmax = 0, tiles = (n + 15) / 16;
    for (int l = 0; l < c->n_layer; l++)
        if (mdl_layer_window(c, l) > wmax) wmax = mdl_layer_window(c, l);
    int ring = kvs_layers(c, ENG_KV_RING) ? kv_ring_peak(wmax, step > 0 ? step : 1) : 0;
    peak[ENG_KV_WHOLE] = kvs_layers(c, ENG_KV_WHOLE) ? tiles : 0;
    peak[ENG_KV_RING] = tiles < ring ? tiles : ring;
}

static void ident_of(const mdl_config *c, uint64_t model_id, eng_kv_type kv, int kind, kvp_ident *id)
{
    uint32_t type = kv == ENG_KV_F16 ? KVP_F16 : kv == ENG_KV_F32 ? KVP_F32 : KVP_Q8_0;
    *id = (kvp_ident){ .model_id = model_id, .n_layer = (uint32_t)kvs_layers(c, kind),
                       .kv_dim = (uint32_t)(c->n_head_kv * c->head_dim), .type = type,
                       .block_tokens = KVS_BLOCK_TOKENS, .kind = (uint32_t)kind };
}

void kvs_ident(const eng_model *m, eng_kv_type kv, int kind, kvp_ident *id)
{
    ident_of(eng_config_of(m), kvp_model_id(seg_hdr(eng_handle_map(m))), kv, kind, id);
}

int kvs_name(const char *wname, int kind, char name[SEG_NAME_MAX])
{
    if (kvp_name_for(wname, name) != 0) return -1;
    size_t n = strlen(name);
    if (kind != ENG_KV_RING) return 0;
    if (n + 5 >= SEG_NAME_MAX) return -1;
    memcpy(name + n, "-ring", 6);
    return 0;
}

/* The master's pool: create, else reuse one of our identity, else replace ours. */
static kvp *master_open(const char *name, const kvp_params *p, char *err, size_t errlen)
{
    kvp *pool = NULL;
    for (int tries = 0; tries < 2; tries++) {
        int rc = kvp_create(name, p, &pool, err, errlen);
        if (rc == 0) {
            const kvp_geometry *g = kvp_geometry_of(pool);
            log_info("KV pool %s created: %u blocks of %u tokens (%llu bytes)", name, g->n_blocks,
                     g->id.block_tokens, (unsigned long long)g->total_bytes);
            return pool;
        }
        if (rc < 0) return NULL;
        char why[256];
        rc = kvp_attach(name, &p->id, &pool, why, sizeof why);
        if (rc == 0) {
            const kvp_geometry *g = kvp_geometry_of(pool);
            log_info("KV pool %s reused: %u blocks of %u tokens (its size, not --kv-pool's)", name, g->n_blocks,
                     g->id.block_tokens);
            return pool;
        }
        if (rc == SEG_FOREIGN || rc == 1) {
            errf(err, errlen, "%s", why);
            return NULL;
        }
        /* ours, but of another identity (model, --kv type) or damaged: replace it */
        log_warn("replacing KV pool %s: %s", name, why);
        if (kvp_remove(name, err, errlen) < 0) return NULL;
    }
    errf(err, errlen, "KV pool %s: could not be created or reused", name);
    return NULL;
}

void kvs_plan(const mdl_config *c, uint64_t model_id, const kvs_spec *s, kvp_params p[ENG_KV_KINDS])
{
    int peak[ENG_KV_KINDS];
    kvs_peak(c, s->n_ctx > 0 ? s->n_ctx : 1, s->step, peak);
    double bytes[ENG_KV_KINDS], all = 0; /* of one session of n_ctx positions */
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        p[k] = (kvp_params){ .n_blocks = 0 };
        ident_of(c, model_id, s->kv, k, &p[k].id);
        bytes[k] = (double)peak[k] * p[k].id.n_layer * kvp_row_bytes((kvp_type)p[k].id.type, p[k].id.kv_dim);
        all += bytes[k];
    }
    const int first = p[ENG_KV_WHOLE].id.n_layer ? ENG_KV_WHOLE : ENG_KV_RING;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (!p[k].id.n_layer) continue;
        if (s->bytes) {
            p[k].bytes = (uint64_t)((double)s->bytes * bytes[k] / all);
            continue;
        }
        /* tokens: whole blocks for them, and ring blocks in the ratio of one session's */
        uint64_t blocks = (s->tokens + KVS_BLOCK_TOKENS - 1) / KVS_BLOCK_TOKENS;
        if (k != first) blocks = (blocks * (uint64_t)peak[k] + (uint64_t)peak[first] - 1) / (uint64_t)peak[first];
        p[k].n_blocks = blocks < (1u << 28) ? (uint32_t)blocks : 1u << 28;
    }
}

/* The pools s asks for of model m (kvs_plan at the model's context when s has none):
 * 0, or -1 with err when m cannot hold s->kv (eng_kv_check). */
static int plan_of(const eng_model *m, const kvs_spec *s, kvp_params p[ENG_KV_KINDS], char *err, size_t errlen)
{
    if (eng_kv_check(m, s->kv, err, errlen) != 0) return -1;
    kvs_spec r = *s;
    r.n_ctx = eng_ctx(m, s->n_ctx);
    kvs_plan(eng_config_of(m), kvp_model_id(seg_hdr(eng_handle_map(m))), &r, p);
    return 0;
}

/* What kvs_open_own adds to a pool's name, before its pid. */
#define KVS_OWN_TAG "-eval"

/* The process a name <base>-eval<pid> was made by, or 0 when it is not such a name. */
static long own_pid(const char *entry, const char *base)
{
    size_t n = strlen(base), t = strlen(KVS_OWN_TAG);
    if (strncmp(entry, base, n) != 0 || strncmp(entry + n, KVS_OWN_TAG, t) != 0 ||
        !isdigit((unsigned char)entry[n + t]))
        return 0;
    char *end;
    long pid = strtol(entry + n + t, &end, 10);
    return *end || pid <= 0 ? 0 : pid;
}

void kvs_sweep_own(const char *wname)
{
    char base[ENG_KV_KINDS][SEG_NAME_MAX], err[256];
    for (int k = 0; k < ENG_KV_KINDS; k++)
        if (kvs_name(wname, k, base[k]) != 0) return;
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        for (int k = 0; k < ENG_KV_KINDS; k++) {
            long pid = own_pid(e->d_name, base[k] + (base[k][0] == '/'));
            if (!pid || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* not one, or its maker lives */
            char name[NAME_MAX + 2];
            snprintf(name, sizeof name, "/%s", e->d_name);
            if (kvp_remove(name, err, sizeof err) == 0) log_info("removed KV pool %s: process %ld is gone", name, pid);
        }
    closedir(d);
}

int kvs_open_own(const eng_model *m, const kvs_spec *s, kvp *made[ENG_KV_KINDS], kvp *use[ENG_KV_KINDS],
                 char names[ENG_KV_KINDS][SEG_NAME_MAX], char *err, size_t errlen)
{
    for (int k = 0; k < ENG_KV_KINDS; k++) made[k] = use[k] = NULL, names[k][0] = 0;
    kvs_sweep_own(eng_segment_name(m));
    kvp_params p[ENG_KV_KINDS];
    if (plan_of(m, s, p, err, errlen) != 0) return -1;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        char base[SEG_NAME_MAX];
        if (!p[k].id.n_layer) continue;
        if (kvs_name(eng_segment_name(m), k, base) != 0 ||
            snprintf(names[k], SEG_NAME_MAX, "%s" KVS_OWN_TAG "%ld", base, (long)getpid()) >= SEG_NAME_MAX) {
            names[k][0] = 0;
            kvs_remove_own(made, use, names);
            return errf(err, errlen, "segment %s: no KV pool name for it", eng_segment_name(m));
        }
        int rc = kvp_create(names[k], &p[k], &made[k], err, errlen);
        if (rc != 0) {
            if (rc == 1) errf(err, errlen, "KV pool %s exists already", names[k]);
            names[k][0] = 0;
            kvs_remove_own(made, use, names);
            return -1;
        }
        if (kvp_attach(names[k], &p[k].id, &use[k], err, errlen) != 0) {
            kvs_remove_own(made, use, names);
            return -1;
        }
    }
    return 0;
}

void kvs_remove_own(kvp *made[ENG_KV_KINDS], kvp *use[ENG_KV_KINDS], char names[ENG_KV_KINDS][SEG_NAME_MAX])
{
    char err[256];
    kvs_close(use);
    kvs_close(made);
    for (int k = 0; k < ENG_KV_KINDS; k++)
        if (names[k][0] && kvp_remove(names[k], err, sizeof err) < 0) log_warn("%s", err);
}

void kvs_close(kvp *pools[ENG_KV_KINDS])
{
    for (int k = 0; k < ENG_KV_KINDS; k++) kvp_close(&pools[k]);
}

void kvs_reap(kvp *const pools[ENG_KV_KINDS])
{
    for (int k = 0; k < ENG_KV_KINDS; k++)
        if (pools[k]) kvp_reap(pools[k]);
}

/* A worker's attach of the master's pool name. */
static kvp *worker_open(const char *name, const kvp_ident *id, char *err, size_t errlen)
{
    kvp *pool = NULL;
    for (int t = 0; t < 50; t++) { /* the master may still be creating it */
        int rc = kvp_attach(name, id, &pool, err, errlen);
        if (rc == 0) return pool;
        if (rc != 1 && rc != -2) return NULL;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!err[0] || !strstr(err, name)) errf(err, errlen, "KV pool %s: not there (is the master running with --kv-pool?)", name);
    return NULL;
}

int kvs_open(const eng_model *m, const kvs_spec *s, int master, kvp *pools[ENG_KV_KINDS], char *err, size_t errlen)
{
    for (int k = 0; k < ENG_KV_KINDS; k++) pools[k] = NULL;
    kvp_params p[ENG_KV_KINDS];
    if (plan_of(m, s, p, err, errlen) != 0) return -1;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        char name[SEG_NAME_MAX];
        if (!p[k].id.n_layer) continue;
        if (kvs_name(eng_segment_name(m), k, name) != 0) {
            errf(err, errlen, "segment %s: no KV pool name for it", eng_segment_name(m));
            kvs_close(pools);
            return -1;
        }
        pools[k] = master ? master_open(name, &p[k], err, errlen) : worker_open(name, &p[k].id, err, errlen);
        if (!pools[k]) {
            kvs_close(pools);
            return -1;
        }
    }
    return 0;
}
