/*
 * kv.c - KV cache storage. Owned by the engine.
 */
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "log.h"
#include "errcode.h"

static const char *const kv_names[ENG_KV_COUNT] = { "f16", "f32", "q8_0" };

const char *eng_kv_name(eng_kv_type t) { return (unsigned)t < ENG_KV_COUNT ? kv_names[t] : NULL; }

int eng_kv_parse(const char *name)
{
    for (int t = 0; t < ENG_KV_COUNT && name; t++)
        if (!strcmp(name, kv_names[t])) return t;
    return -1;
}

int kv_layer_cap(int n_ctx, int w, int step)
{
    if (w <= 0 || step <= 0) return n_ctx;
    int64_t ring = ((int64_t)w - 1 + step + 15) / 16 * 16;
    return ring < n_ctx ? (int)ring : n_ctx;
}

size_t kv_cache_bytes(int n_layer, int n_ctx, int64_t kv_dim, eng_kv_type type, const int *window, int step)
{
    int kvt = kv_kern_type(type);
    int64_t keys = 0, rows = 0;
    for (int l = 0; l < n_layer; l++) {
        int cap = kv_layer_cap(n_ctx, window ? window[l] : 0, step);
        keys += (int64_t)(cap + 15) / 16 * 16 * kv_dim;
        rows += (int64_t)cap * kv_dim;
    }
    return kern_kv_bytes(kvt, keys) + kern_kv_bytes(kvt, rows);
}

/* The layers' capacities and plane offsets, and the elements of all keys and all
 * values; 0, or -1 (no memory). */
static int kv_layers(kv_cache *kv, const int *window, int step, int64_t *keys, int64_t *rows)
{
    int L = kv->n_layer;
    kv->cap = malloc((size_t)L * sizeof *kv->cap);
    kv->win = calloc((size_t)L, sizeof *kv->win);
    kv->k0 = malloc((size_t)L * sizeof *kv->k0);
    kv->v0 = malloc((size_t)L * sizeof *kv->v0);
    if (!kv->cap || !kv->win || !kv->k0 || !kv->v0) return -1;
    int64_t k0 = 0, v0 = 0;
    for (int l = 0; l < L; l++) {
        kv->cap[l] = kv_layer_cap(kv->n_ctx, window ? window[l] : 0, step);
        if (kv->cap[l] < kv->n_ctx) {
            kv->win[l] = window[l];
            kv->step = step;
        }
        kv->k0[l] = k0;
        kv->v0[l] = v0;
        k0 += (int64_t)(kv->cap[l] + 15) / 16 * 16 * kv->kv_dim;
        v0 += (int64_t)kv->cap[l] * kv->kv_dim;
    }
    *keys = k0;
    *rows = v0;
    return 0;
}

int kv_init(kv_cache *kv, int n_layer, int n_ctx, int64_t kv_dim, eng_kv_type type, const int *window, int step,
            char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0 || !eng_kv_name(type) || (type == ENG_KV_Q8_0 && kv_dim % 32) ||
        step < 0) {
        return errf(err, errlen, "KV cache: invalid sizes (layers %d, n_ctx %d, kv_dim %lld, step %d) or type %d",
                    n_layer, n_ctx, (long long)kv_dim, step, (int)type);
    }
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->kvt = kv_kern_type(type);
    kv->n_tiles = (n_ctx + 15) / 16;
    int64_t keys = 0, rows = 0;
    if (kv_layers(kv, window, step, &keys, &rows) == 0) {
        kv->k = calloc(1, kern_kv_bytes(kv->kvt, keys));
        kv->v = calloc(1, kern_kv_bytes(kv->kvt, rows));
    }
    if (!kv->k || !kv->v) {
        errf(err, errlen, "KV cache: out of memory for %.1f MB",
             (double)(kern_kv_bytes(kv->kvt, keys) + kern_kv_bytes(kv->kvt, rows)) / 1e6);
        kv_free(kv);
        return -1;
    }
    return 0;
}

int kv_keeps(const kv_cache *kv, int pos)
{
    for (int l = 0; kv->step && pos > 0 && l < kv->n_layer; l++) { /* at 0 nothing is needed */
        int need = pos - kv->win[l] + 1; /* the first position the row at pos sees */
        if (kv->win[l] && (need > 0 ? need : 0) < kv->top - kv->cap[l]) return 0;
    }
    return 1;
}

void kv_free(kv_cache *kv)
{
    if (kv->pool) kv_truncate(kv, 0);
    free(kv->k);
    free(kv->v);
    free(kv->cap);
    free(kv->win);
    free(kv->k0);
    free(kv->v0);
    free(kv->blk);
    free(kv->pub);
    free(kv->hash);
    free(kv->toks);
    memset(kv, 0, sizeof *kv);
}

int kv_init_pool(kv_cache *kv, kvp *pool, int n_ctx, char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    const kvp_geometry *g = kvp_geometry_of(pool);
    if (n_ctx <= 0 || g->id.block_tokens != KV_BLOCK_TOKENS || g->id.type >= KVP_TYPE_COUNT)
        return errf(err, errlen, "KV pool: blocks of %u tokens of type %u (need %d tokens of f16, f32 or q8_0)",
                    g->id.block_tokens, g->id.type, KV_BLOCK_TOKENS);
    kv->n_layer = (int)g->id.n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = g->id.kv_dim;
    kv->type = kv_pool_type(pool);
    kv->kvt = kv_kern_type(kv->type);
    kv->n_tiles = (n_ctx + 15) / 16;
    kv->blk = malloc((size_t)kv->n_tiles * sizeof *kv->blk);
    kv->pub = calloc((size_t)kv->n_tiles, 1);
    kv->hash = calloc((size_t)kv->n_tiles, sizeof *kv->hash);
    kv->toks = calloc((size_t)n_ctx, sizeof *kv->toks);
    if (!kv->blk || !kv->pub || !kv->hash || !kv->toks) {
        kv_free(kv);
        return errf(err, errlen, "KV cache: out of memory for a block table of %d positions", n_ctx);
    }
    for (int t = 0; t < kv->n_tiles; t++) kv->blk[t] = -1;
    kv->pool = pool;
    return 0;
}

int kv_reserve(kv_cache *kv, int pos)
{
    while (kv->n_blk <= pos / 16) {
        int b = kvp_alloc(kv->pool);
        if (b < 0) return -1;
        kv->blk[kv->n_blk] = b;
        kv->pub[kv->n_blk++] = 0;
    }
    return 0;
}

void kv_publish(kv_cache *kv, int pos)
{
    if (!kv->pool || pos % 16 != 15) return;
    int t = pos / 16;
    const kvp_ident *id = &kvp_geometry_of(kv->pool)->id;
    uint64_t parent = t ? kv->hash[t - 1] : 0;
    kv->hash[t] = kvp_hash(parent, kv->toks + (size_t)t * 16, 16, id);
    if (kv->pub[t]) return;
    int b = kvp_publish(kv->pool, kv->blk[t], kv->hash[t], parent, kv->toks + (size_t)t * 16);
    if (b == KVP_COLLISION) return; /* stays ours, unpublished */
    kv->blk[t] = b;
    kv->pub[t] = 1;
}

int kv_truncate(kv_cache *kv, int pos)
{
    if (pos == 0) kv->top = 0; /* nothing kept: the rings start empty again */
    if (!kv->pool) return 0;
    int keep = (pos + 15) / 16;
    while (kv->n_blk > keep) {
        kv->n_blk--;
        kvp_release(kv->pool, kv->blk[kv->n_blk]);
        kv->blk[kv->n_blk] = -1;
        kv->pub[kv->n_blk] = 0;
    }
    int t = pos / 16;
    if (pos % 16 == 0 || t >= kv->n_blk || !kv->pub[t]) return 0;
    int b = kvp_alloc(kv->pool); /* the tile will be written again: a private copy */
    if (b < 0) return -1;
    memcpy(kvp_block_data(kv->pool, b), kvp_block_data(kv->pool, kv->blk[t]), kvp_geometry_of(kv->pool)->block_bytes);
    kvp_release(kv->pool, kv->blk[t]);
    kv->blk[t] = b;
    kv->pub[t] = 0;
    return 0;
}

int kv_reuse(kv_cache *kv, int pos, const int32_t *tokens, int n)
{
    if (!kv->pool || pos % 16 || pos / 16 != kv->n_blk) return pos;
    const kvp_ident *id = &kvp_geometry_of(kv->pool)->id;
    while (pos + 16 <= n && pos + 16 <= kv->n_ctx) {
        int t = pos / 16;
        uint64_t parent = t ? kv->hash[t - 1] : 0, h = kvp_hash(parent, tokens + pos, 16, id);
        int b = kvp_lookup(kv->pool, h, parent, tokens + pos);
        if (b < 0) break;
        memcpy(kv->toks + pos, tokens + pos, 16 * sizeof *tokens);
        kv->blk[t] = b;
        kv->pub[t] = 1;
        kv->hash[t] = h;
        kv->n_blk = t + 1;
        kv->reused += 16;
        pos += 16;
    }
    return pos;
}

void kv_store(kv_cache *kv, int layer, int pos, const float *k, const float *v)
{
    kv_mark(kv, pos);
    kv_put(kv, layer, pos, k, v);
}

void kv_mark(kv_cache *kv, int pos)
{
    if (pos >= kv->top) kv->top = pos + 1;
}

void kv_put(kv_cache *kv, int layer, int pos, const float *k, const float *v)
{
    LLM_ASSERT(layer >= 0 && layer < kv->n_layer && pos >= 0 && pos < kv->n_ctx);
    char *tile = (char *)kv_ktile(kv, layer, pos / 16);
    void *vd = (void *)kv_v(kv, layer, pos);
    if (kv->type == ENG_KV_Q8_0) {
        kern_kv_q8_key(k, kv->kv_dim, tile, pos % 16);
        kern_kv_q8_row(v, kv->kv_dim, vd);
    } else if (kv->type == ENG_KV_F16) {
        uint16_t h[256], *kt = (uint16_t *)tile + pos % 16;
        for (int64_t i0 = 0; i0 < kv->kv_dim; i0 += 256) {
            int64_t n = kv->kv_dim - i0 < 256 ? kv->kv_dim - i0 : 256;
            kern_f32_to_f16(k + i0, h, n);
            for (int64_t i = 0; i < n; i++) kt[(i0 + i) * 16] = h[i];
        }
        kern_f32_to_f16(v, vd, kv->kv_dim);
    } else {
        float *kt = (float *)tile + pos % 16;
        for (int64_t i = 0; i < kv->kv_dim; i++) kt[i * 16] = k[i];
        memcpy(vd, v, (size_t)kv->kv_dim * sizeof(float));
    }
}
