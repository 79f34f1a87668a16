/*
 * kv.h - a session's KV cache: keys and values of every layer and position, f16 or
 * f32, and the session struct that owns it.
 *
 *   kv_cache kv;
 *   if (kv_init(&kv, n_layer, n_ctx, kv_dim, ENG_KV_F16, err, sizeof err) != 0) ...
 *   kv_store(&kv, layer, pos, k_row, v_row);        // kv_dim floats each
 *   const void *kt = kv_ktile(&kv, layer, pos / 16); // keys of 16 positions, transposed
 *   const void *v = kv_v(&kv, layer, pos);          // f16 or f32 row of kv_dim
 *   kv_free(&kv);
 *
 * Layout: keys are [n_layer][n_tiles][kv_dim][16]: each tile holds 16 consecutive
 * positions transposed (element (i, j) = key i of position 16 * tile + j), which is
 * what the attention kernels multiply a query with (kernels.h). Values are
 * [n_layer][n_ctx][kv_dim] rows. Positions past n_ctx in the last tile are zero.
 * Ownership: a kv_cache owns its two buffers (kv_free); an eng_session owns its cache.
 */
#ifndef LLM_KV_H
#define LLM_KV_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct {
    int         n_layer;
    int         n_ctx;    /* positions */
    int         n_tiles;  /* key tiles: ceil(n_ctx / 16) */
    int64_t     kv_dim;   /* n_head_kv * head_dim */
    eng_kv_type type;
    size_t      elt;      /* bytes per element: 2 (f16) or 4 (f32) */
    void       *k;        /* (n_layer, n_tiles, kv_dim, 16) */
    void       *v;        /* (n_layer, n_ctx, kv_dim) */
} kv_cache;

/* The session behind eng_session: its cache and how many positions it holds. */
struct eng_session {
    eng_model *model;
    kv_cache   kv;
    int        pos;       /* positions filled, the next token goes here */
};

/* Allocates a zeroed cache. 0, or -1 with err (bad sizes, no memory). */
int kv_init(kv_cache *kv, int n_layer, int n_ctx, int64_t kv_dim, eng_kv_type type,
            char *err, size_t errlen);
/* Frees the buffers; accepts a zeroed struct. */
void kv_free(kv_cache *kv);
/* Stores one position's key and value rows (kv_dim floats each), converting to f16
 * when the cache is f16. */
void kv_store(kv_cache *kv, int layer, int pos, const float *k, const float *v);

/* Key tile of (layer, tile): kv_dim x 16 elements of the cache's type. */
static inline const void *kv_ktile(const kv_cache *kv, int layer, int tile)
{
    return (const char *)kv->k + (((size_t)layer * kv->n_tiles + tile) * kv->kv_dim * 16) * kv->elt;
}
/* Value row of (layer, pos). */
static inline const void *kv_v(const kv_cache *kv, int layer, int pos)
{
    return (const char *)kv->v + (((size_t)layer * kv->n_ctx + pos) * kv->kv_dim) * kv->elt;
}

#endif
