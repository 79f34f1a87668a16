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

/* 1 when kv heads of head_dim values fill kv_dim and suit type (q8_0: whole blocks). */
static int kv_heads_ok(int64_t kv_dim, int head_dim, eng_kv_type type)
{
    return head_dim > 0 && kv_dim % head_dim == 0 && (type != ENG_KV_Q8_0 || head_dim % 32 == 0);
}

int kv_init(kv_cache *kv, int n_layer, int n_ctx, int64_t kv_dim, int head_dim, eng_kv_type type, const int *window,
            int step, char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0 || !eng_kv_name(type) || !kv_heads_ok(kv_dim, head_dim, type) ||
        step < 0) {
        return errf(err, errlen,
                    "KV cache: invalid sizes (layers %d, n_ctx %d, kv_dim %lld, head_dim %d, step %d) or type %d",
                    n_layer, n_ctx, (long long)kv_dim, head_dim, step, (int)type);
    }
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->head_dim = head_dim;
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
    if (kv->pooled) { /* the ring blocks from the tile of pos's window start */
        int need = pos - kv->wmax + 1;
        return !kv->kp[ENG_KV_RING] || pos == 0 || (need > 0 ? need : 0) / 16 >= kv->lo;
    }
    for (int l = 0; kv->step && pos > 0 && l < kv->n_layer; l++) { /* at 0 nothing is needed */
        int need = pos - kv->win[l] + 1; /* the first position the row at pos sees */
        if (kv->win[l] && (need > 0 ? need : 0) < kv->top - kv->cap[l]) return 0;
    }
    return 1;
}

void kv_free(kv_cache *kv)
{
    if (kv->pooled) kv_truncate(kv, 0);
    free(kv->k);
    free(kv->v);
    free(kv->cap);
    free(kv->win);
    free(kv->k0);
    free(kv->v0);
    free(kv->kind);
    free(kv->plane);
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        free(kv->blk[k]);
        free(kv->pub[k]);
    }
    free(kv->hash);
    free(kv->toks);
    memset(kv, 0, sizeof *kv);
}

int kv_ring_peak(int wmax, int step) { return (wmax - 1 + step + 15) / 16 + 1; }

/* The first tile of the window of position pos (the ring blocks a session at pos needs). */
static int ring_lo(const kv_cache *kv, int pos)
{
    int need = pos - kv->wmax + 1;
    return need > 0 ? need / 16 : 0;
}

int kv_init_pool(kv_cache *kv, kvp *const pools[ENG_KV_KINDS], int n_layer, int head_dim, const int *window,
                 int n_ctx, char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    kvp *whole = pools[ENG_KV_WHOLE], *ring = pools[ENG_KV_RING];
    const kvp_geometry *g = kvp_geometry_of(whole ? whole : ring);
    if (!whole && !ring) return errf(err, errlen, "KV pool: none given");
    int n_ring = 0;
    for (int l = 0; ring && l < n_layer; l++) n_ring += window[l] > 0;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        const kvp_geometry *gk = pools[k] ? kvp_geometry_of(pools[k]) : NULL;
        uint32_t want = (uint32_t)(k == ENG_KV_RING ? n_ring : n_layer - n_ring);
        if (gk ? gk->id.n_layer != want || gk->id.kind != (uint32_t)k : want != 0)
            return errf(err, errlen, "KV pool: its %s blocks hold %u layers, the model has %u such layers",
                        k == ENG_KV_RING ? "ring" : "whole", gk ? gk->id.n_layer : 0, want);
        if (gk && (gk->id.block_tokens != KV_BLOCK_TOKENS || gk->id.type >= KVP_TYPE_COUNT ||
                   gk->id.type != g->id.type || gk->id.kv_dim != g->id.kv_dim || gk->id.model_id != g->id.model_id))
            return errf(err, errlen, "KV pool: blocks of %u tokens of type %u (need %d tokens of f16, f32 or q8_0, "
                        "the same in both pools)", gk->id.block_tokens, gk->id.type, KV_BLOCK_TOKENS);
    }
    if (!kv_heads_ok(g->id.kv_dim, head_dim, kv_pool_type(whole ? whole : ring)))
        return errf(err, errlen, "KV pool: kv heads of %d values do not divide its rows of %u", head_dim, g->id.kv_dim);
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = g->id.kv_dim;
    kv->head_dim = head_dim;
    kv->type = kv_pool_type(whole ? whole : ring);
    kv->kvt = kv_kern_type(kv->type);
    kv->n_tiles = (n_ctx + 15) / 16;
    kv->chain = g->id;
    kv->kind = malloc((size_t)n_layer);
    kv->plane = malloc((size_t)n_layer * sizeof *kv->plane);
    kv->hash = calloc((size_t)kv->n_tiles, sizeof *kv->hash);
    kv->toks = calloc((size_t)n_ctx, sizeof *kv->toks);
    bool ok = n_ctx > 0 && kv->kind && kv->plane && kv->hash && kv->toks;
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (!pools[k]) continue;
        kv->blk[k] = malloc((size_t)kv->n_tiles * sizeof *kv->blk[k]);
        kv->pub[k] = calloc((size_t)kv->n_tiles, 1);
        ok = ok && kv->blk[k] && kv->pub[k];
        for (int t = 0; ok && t < kv->n_tiles; t++) kv->blk[k][t] = -1;
    }
    if (!ok) {
        kv_free(kv);
        return errf(err, errlen, "KV cache: out of memory for a block table of %d positions", n_ctx);
    }
    int count[ENG_KV_KINDS] = {0};
    for (int l = 0; l < n_layer; l++) {
        int k = ring && window[l] > 0 ? ENG_KV_RING : ENG_KV_WHOLE;
        kv->kind[l] = (uint8_t)k;
        kv->plane[l] = count[k]++;
        if (k == ENG_KV_RING && window[l] > kv->wmax) kv->wmax = window[l];
    }
    kv->kp[ENG_KV_WHOLE] = whole;
    kv->kp[ENG_KV_RING] = ring;
    kv->pooled = 1;
    return 0;
}

void kv_need(const kv_cache *kv, int pos, int n, int step, int need[ENG_KV_KINDS])
{
    int tiles = n > 0 ? (pos + n + 15) / 16 - kv->n_blk : 0;
    if (tiles < 0) tiles = 0;
    need[ENG_KV_WHOLE] = kv->kp[ENG_KV_WHOLE] ? tiles : 0;
    int room = kv_ring_peak(kv->wmax, step > 0 ? step : 1) - (kv->n_blk - kv->lo);
    need[ENG_KV_RING] = !kv->kp[ENG_KV_RING] ? 0 : tiles < room ? tiles : room > 0 ? room : 0;
}

int kv_reserve(kv_cache *kv, int pos)
{
    while (kv->n_blk <= pos / 16) {
        int t = kv->n_blk, b[ENG_KV_KINDS] = { -1, -1 };
        for (int k = 0; k < ENG_KV_KINDS; k++) {
            if (!kv->kp[k] || (b[k] = kvp_alloc(kv->kp[k])) >= 0) continue;
            if (k && b[0] >= 0) kvp_release(kv->kp[0], b[0]); /* a tile has both kinds or none */
            return -1;
        }
        for (int k = 0; k < ENG_KV_KINDS; k++) {
            if (!kv->kp[k]) continue;
            kv->blk[k][t] = b[k];
            kv->pub[k][t] = 0;
        }
        kv->n_blk++;
    }
    return 0;
}

void kv_publish(kv_cache *kv, int pos)
{
    if (!kv->pooled || pos % 16 != 15) return;
    int t = pos / 16;
    uint64_t parent = t ? kv->hash[t - 1] : 0;
    kv->hash[t] = kvp_hash(parent, kv->toks + (size_t)t * 16, 16, &kv->chain);
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (!kv->kp[k] || kv->pub[k][t] || (k == ENG_KV_RING && t < kv->lo)) continue;
        int b = kvp_publish(kv->kp[k], kv->blk[k][t], kv->hash[t], parent, kv->toks + (size_t)t * 16);
        if (b == KVP_COLLISION) continue; /* stays ours, unpublished */
        kv->blk[k][t] = b;
        kv->pub[k][t] = 1;
    }
}

/* Gives back tile t's block of kind k, if it has one. */
static void drop(kv_cache *kv, int k, int t)
{
    if (!kv->kp[k] || kv->blk[k][t] < 0) return;
    kvp_release(kv->kp[k], kv->blk[k][t]);
    kv->blk[k][t] = -1;
    kv->pub[k][t] = 0;
}

/* Gives back the ring blocks of tiles [lo, to). */
static void ring_release(kv_cache *kv, int to)
{
    for (; kv->lo < to && kv->lo < kv->n_blk; kv->lo++) drop(kv, ENG_KV_RING, kv->lo);
}

void kv_slide(kv_cache *kv)
{
    if (kv->kp[ENG_KV_RING]) ring_release(kv, ring_lo(kv, kv->top));
}

int kv_truncate(kv_cache *kv, int pos)
{
    if (pos == 0) kv->top = 0; /* nothing kept: the rings start empty again */
    if (!kv->pooled) return 0;
    if (kv->top > pos) kv->top = pos; /* (a private ring keeps its top: what it overwrote) */
    int keep = (pos + 15) / 16;
    while (kv->n_blk > keep) {
        int t = --kv->n_blk;
        for (int k = 0; k < ENG_KV_KINDS; k++) drop(kv, k, t);
    }
    if (kv->lo > kv->n_blk) kv->lo = kv->n_blk;
    if (kv->n_blk == 0) kv->lo = 0;
    int t = pos / 16;
    if (pos % 16 == 0 || t >= kv->n_blk) return 0;
    for (int k = 0; k < ENG_KV_KINDS; k++) { /* the tile will be written again: private copies */
        if (!kv->kp[k] || kv->blk[k][t] < 0 || !kv->pub[k][t]) continue;
        int b = kvp_alloc(kv->kp[k]);
        if (b < 0) return -1;
        memcpy(kvp_block_data(kv->kp[k], b), kvp_block_data(kv->kp[k], kv->blk[k][t]),
               kvp_geometry_of(kv->kp[k])->block_bytes);
        kvp_release(kv->kp[k], kv->blk[k][t]);
        kv->blk[k][t] = b;
        kv->pub[k][t] = 0;
    }
    return 0;
}

int kv_reuse(kv_cache *kv, int pos, const int32_t *tokens, int n)
{
    if (!kv->pooled || pos % 16 || pos / 16 != kv->n_blk) return pos;
    const int start = pos, t0 = pos / 16;
    kvp *whole = kv->kp[ENG_KV_WHOLE], *ring = kv->kp[ENG_KV_RING];
    /* the chain of tokens that whole blocks are published for (every tile without them) */
    while (pos + 16 <= n && pos + 16 <= kv->n_ctx) {
        int t = pos / 16;
        uint64_t parent = t ? kv->hash[t - 1] : 0, h = kvp_hash(parent, tokens + pos, 16, &kv->chain);
        if (whole) {
            int b = kvp_lookup(whole, h, parent, tokens + pos);
            if (b < 0) break;
            kv->blk[ENG_KV_WHOLE][t] = b;
            kv->pub[ENG_KV_WHOLE][t] = 1;
        }
        memcpy(kv->toks + pos, tokens + pos, 16 * sizeof *tokens);
        kv->hash[t] = h;
        pos += 16;
    }
    /* the ring blocks of the last window, from its end down: a missing one moves the
     * end to its start (that window no longer sees it) */
    for (int t = pos / 16 - 1; ring && t >= t0 && t >= ring_lo(kv, pos); t--) {
        int b = kvp_lookup(ring, kv->hash[t], t ? kv->hash[t - 1] : 0, kv->toks + (size_t)t * 16);
        if (b >= 0) {
            kv->blk[ENG_KV_RING][t] = b;
            kv->pub[ENG_KV_RING][t] = 1;
            continue;
        }
        for (int u = t; u < pos / 16; u++) { /* taken for the longer prefix (t: whole only) */
            drop(kv, ENG_KV_RING, u);
            drop(kv, ENG_KV_WHOLE, u);
        }
        pos = t * 16;
    }
    if (pos == start) return pos;
    int lo = ring ? ring_lo(kv, pos) : 0;
    if (ring && lo > t0) { /* the window starts past the tiles taken: none of ours is needed */
        ring_release(kv, t0);
        kv->lo = lo;
    }
    kv->n_blk = pos / 16;
    kv->reused += (uint64_t)(pos - start);
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
    if (kv->type == ENG_KV_Q8_0) {
        kern_kv_q8_key(k, kv->kv_dim, tile, pos % 16);
    } else if (kv->type == ENG_KV_F16) {
        uint16_t h[256], *kt = (uint16_t *)tile + pos % 16;
        for (int64_t i0 = 0; i0 < kv->kv_dim; i0 += 256) {
            int64_t n = kv->kv_dim - i0 < 256 ? kv->kv_dim - i0 : 256;
            kern_f32_to_f16(k + i0, h, n);
            for (int64_t i = 0; i < n; i++) kt[(i0 + i) * 16] = h[i];
        }
    } else {
        float *kt = (float *)tile + pos % 16;
        for (int64_t i = 0; i < kv->kv_dim; i++) kt[i * 16] = k[i];
    }
    const int D = kv->head_dim;
    for (int h = 0; h < kv->kv_dim / D; h++) { /* each head's row in its own run */
        void *vd = (void *)kv_vh(kv, layer, h, pos);
        const float *vh = v + (size_t)h * D;
        if (kv->type == ENG_KV_Q8_0) kern_kv_q8_row(vh, D, vd);
        else if (kv->type == ENG_KV_F16) kern_f32_to_f16(vh, vd, D);
        else memcpy(vd, vh, (size_t)D * sizeof(float));
    }
}
