/*
 * kvsetup.c - the daemon's KV block pool: --kv-pool parsing, the master's create-or-reuse
 * and the worker's attach (kvsetup.h).
 */
#include "kvsetup.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errcode.h"
#include "handle.h"
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

void kvs_ident(const eng_model *m, eng_kv_type kv, kvp_ident *id)
{
    const mdl_config *c = eng_config_of(m);
    uint32_t type = kv == ENG_KV_F16 ? KVP_F16 : kv == ENG_KV_F32 ? KVP_F32 : KVP_Q8_0;
    *id = (kvp_ident){ .model_id = kvp_model_id(seg_hdr(eng_handle_map(m))), .n_layer = (uint32_t)c->n_layer,
                       .kv_dim = (uint32_t)(c->n_head_kv * c->head_dim), .type = type,
                       .block_tokens = KVS_BLOCK_TOKENS };
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

kvp *kvs_open(const eng_model *m, const kvs_spec *s, int master, char *err, size_t errlen)
{
    char name[SEG_NAME_MAX];
    if (kvp_name_for(eng_segment_name(m), name) != 0) {
        errf(err, errlen, "segment %s: no KV pool name for it", eng_segment_name(m));
        return NULL;
    }
    if (eng_kv_check(m, s->kv, err, errlen) != 0) return NULL;
    kvp_params p = { .bytes = s->bytes, .tokens = s->tokens };
    kvs_ident(m, s->kv, &p.id);
    if (master) return master_open(name, &p, err, errlen);
    kvp *pool = NULL;
    for (int t = 0; t < 50; t++) { /* the master may still be creating it */
        int rc = kvp_attach(name, &p.id, &pool, err, errlen);
        if (rc == 0) return pool;
        if (rc != 1 && rc != -2) return NULL;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!err[0] || !strstr(err, name)) errf(err, errlen, "KV pool %s: not there (is the master running with --kv-pool?)", name);
    return NULL;
}
