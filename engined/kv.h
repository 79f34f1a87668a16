/*
 * kv.h - a session's KV cache: keys and values of every layer and position, f16, f32
 * or q8_0, and the session struct that owns it.
 *
 *   kv_cache kv;
 *   if (kv_init(&kv, n_layer, n_ctx, kv_dim, head_dim, ENG_KV_F16, NULL, 0, err, sizeof err) != 0) ...
 *   kv_store(&kv, layer, pos, k_row, v_row);        // kv_dim floats each
 *   const void *kt = kv_ktile(&kv, layer, pos / 16); // keys of 16 positions, transposed
 *   const void *v = kv_vh(&kv, layer, h, pos);      // kv head h's value row, head_dim
 *   kv_free(&kv);
 *
 * Layout: a layer's keys are [n_tiles][kv_dim][16]: each tile holds 16 consecutive
 * positions transposed (element (i, j) = key i of position 16 * tile + j), which is
 * what the attention kernels multiply a query with (kernels.h); its values are
 * head-major, [n_head_kv][cap][head_dim]: a kv head's rows follow one another, so the
 * attention of one head reads whole lines of its own rows (a q8_0 head's 68 bytes of
 * each 272-byte row cost more than their share: bench_attn). The layers' planes follow
 * one another in one key and one value buffer. Positions past n_ctx in the last tile
 * are zero.
 * q8_0 (head_dim a multiple of 32): a key tile is kv_dim / 32 groups of 16 f16 scales
 * and [32][16] int8, a head's value row head_dim / 32 block_q8_0 (kernels.h); a tile or
 * row of n elements takes kern_kv_bytes(kvt, n) bytes whatever the type.
 * Ownership: a kv_cache owns its buffers (kv_free); an eng_session owns its cache.
 *
 * Sliding-window rings (kv_init with windows and a step): a layer of window w keeps the
 * last cap = kv_layer_cap(n_ctx, w, step) positions instead of n_ctx, position p at
 * p % cap (tile p / 16 at (p / 16) % (cap / 16); cap is whole tiles), as llama.cpp keeps
 * only the window's KV. step is the most positions one pass may add: then every row of
 * the pass still finds the w - 1 positions before it (the ring holds w - 1 + step). The
 * ring holds positions [top - cap, top) (top: one past the highest position stored), so
 * a session can only go back to a position whose window is still there: kv_keeps.
 * A pass must store at most step positions of a ring session (eng_step splits larger).
 *
 * Block table (kv_init_pool): the cache holds no buffers but blocks of shared pools
 * (kvpool.h, KV_BLOCK_TOKENS = 16 positions), one per key tile and kind of layer:
 * ENG_KV_WHOLE blocks hold the layers that keep every position, ENG_KV_RING blocks the
 * sliding-window layers (engine.h). A block's K plane of a layer is that tile,
 * transposed as above, its V plane the 16 positions' value rows, head-major:
 * [n_head_kv][16][head_dim]. Blocks are taken as positions are reached (kv_reserve), a
 * tile is published under the hash of its token chain once all its positions are written
 * (kv_publish: one chain, the same key in both pools), and a new session starts from the
 * longest published prefix whose whole blocks and the ring blocks of its last window are
 * all there (kv_reuse). After each pass a session gives
 * back the ring blocks that every window from its next position on is past (kv_slide:
 * published, they stay cached for other sessions), so a ring layer holds about its
 * window, as a private ring does. A published block is never written again: truncating
 * into one copies it first.
 */
#ifndef LLM_KV_H
#define LLM_KV_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kernels.h"
#include "kvpool.h"

#define KV_BLOCK_TOKENS 16 /* a pool block: one key tile */

typedef struct {
    int         n_layer;
    int         n_ctx;    /* positions */
    int         n_tiles;  /* key tiles: ceil(n_ctx / 16) */
    int64_t     kv_dim;   /* n_head_kv * head_dim */
    int         head_dim; /* elements of a kv head's value row */
    eng_kv_type type;
    int         kvt;      /* the type as the attention kernels name it (KERN_KV_*) */
    void       *k;        /* each layer's (ceil(cap / 16), kv_dim, 16), from element k0[layer] */
    void       *v;        /* each layer's (kv_dim / head_dim, cap, head_dim), from element v0[layer] */
    int        *cap;      /* (n_layer) positions a layer keeps: n_ctx, or its ring's; NULL: pool */
    int        *win;      /* (n_layer) a ring layer's window, else 0 */
    int64_t    *k0, *v0;  /* (n_layer) element offsets of the layers' planes */
    int         step;     /* rings: the most positions one pass may add; 0: no ring */
    int         top;      /* one past the highest position stored */
    int         pooled;   /* block table mode (then k, v, cap and win are NULL) */
    kvp        *kp[ENG_KV_KINDS];  /* the pool of each kind of layer, NULL when it has none */
    kvp_ident   chain;    /* the identity the token chain is hashed with (either pool's) */
    uint8_t    *kind;     /* (n_layer) a layer's kind (ENG_KV_WHOLE or ENG_KV_RING) */
    int        *plane;    /* (n_layer) its plane in its kind's blocks */
    int32_t    *blk[ENG_KV_KINDS]; /* (n_tiles) the block of each tile in a kind's pool, -1 none */
    uint8_t    *pub[ENG_KV_KINDS]; /* (n_tiles) 1: that block is published (read-only) */
    uint64_t   *hash;     /* (n_tiles) kvp_hash of the token chain up to each full tile */
    int32_t    *toks;     /* (n_ctx) the token at each position */
    int         n_blk;    /* tiles [0, n_blk) have a whole block, [lo, n_blk) a ring block */
    int         lo;       /* the first tile with a ring block (0 without ring layers) */
    int         wmax;     /* the widest window of the ring layers */
    uint64_t    reused;   /* positions taken from published blocks (kv_reuse) */
} kv_cache;

/* The kernels' name of a KV type (KERN_KV_*). */
static inline int kv_kern_type(eng_kv_type t)
{
    return t == ENG_KV_Q8_0 ? KERN_KV_Q8_0 : t == ENG_KV_F16 ? KERN_KV_F16 : KERN_KV_F32;
}

/* The engine's name of a pool's element type. */
static inline eng_kv_type kv_pool_type(const kvp *pool)
{
    uint32_t t = kvp_geometry_of(pool)->id.type;
    return t == KVP_F16 ? ENG_KV_F16 : t == KVP_F32 ? ENG_KV_F32 : ENG_KV_Q8_0;
}

/* The session behind eng_session: its cache and how many positions it holds. */
struct eng_session {
    eng_model *model;
    kv_cache   kv;
    int        pos;       /* positions filled, the next token goes here */
};

/* Positions a layer of window w (0: none) keeps in a cache of n_ctx positions whose
 * passes add at most step (0: no ring): n_ctx, or a ring of w - 1 + step rounded up to
 * whole tiles when that is smaller. */
int kv_layer_cap(int n_ctx, int w, int step);
/* Allocates a zeroed cache of kv heads of head_dim values; window (n_layer values, or
 * NULL: none) and step make the sliding-window layers rings (step 0: every layer keeps
 * n_ctx positions). 0, or -1 with err (bad sizes, no memory). */
int kv_init(kv_cache *kv, int n_layer, int n_ctx, int64_t kv_dim, int head_dim, eng_kv_type type, const int *window,
            int step, char *err, size_t errlen);
/* Bytes kv_init allocates for those sizes: keys (whole tiles) and values. */
size_t kv_cache_bytes(int n_layer, int n_ctx, int64_t kv_dim, eng_kv_type type, const int *window, int step);
/* 1 when the cache can go back to position pos (the next one written): every ring
 * (private, or the ring blocks of a block table) still holds the positions of its
 * window before pos; 0 when one has overwritten or given them back (the session must
 * start again from 0, or from what kv_reuse finds). Always 1 without rings. */
int kv_keeps(const kv_cache *kv, int pos);
/* Frees the buffers; accepts a zeroed struct. */
void kv_free(kv_cache *kv);
/* Stores one position's key and value rows (kv_dim floats each), converted to the
 * cache's type (q8_0: ggml's reference rounding). */
void kv_store(kv_cache *kv, int layer, int pos, const float *k, const float *v);
/* kv_store in two halves, for a pass that stores its positions on several threads:
 * kv_put writes only the position's own bytes (distinct positions of one cache may be
 * put at once), kv_mark records the position as stored (one thread, before the
 * attention reads the cache). */
void kv_put(kv_cache *kv, int layer, int pos, const float *k, const float *v);
void kv_mark(kv_cache *kv, int pos);

/* A cache of n_ctx positions over blocks of pools[kind] (kvs_ident: of the model's type
 * and shape, each holding its kind's layers; kv heads of head_dim values; window:
 * n_layer values, a layer of window > 0 being a ring layer). A model with ring layers and
 * no ring pool keeps them in the whole blocks too. 0, or -1 with err. */
int kv_init_pool(kv_cache *kv, kvp *const pools[ENG_KV_KINDS], int n_layer, int head_dim, const int *window,
                 int n_ctx, char *err, size_t errlen);
/* The most ring blocks a session with windows up to wmax holds at once when it adds at
 * most step positions a step: its last window and the step's (a step takes its blocks
 * first, kv_slide gives them back after). */
int kv_ring_peak(int wmax, int step);
/* Blocks of each kind a pooled cache at position pos takes to add n positions in steps of
 * at most step positions: one per tile reached, and for the ring kind no more than it
 * holds at once (kv_ring_peak) beyond what it holds now. */
void kv_need(const kv_cache *kv, int pos, int n, int step, int need[ENG_KV_KINDS]);
/* Block table: makes tiles up to the one of position pos hold a block of each kind. 0,
 * or -1 when a pool has no block to give (every one referenced or being written). */
int kv_reserve(kv_cache *kv, int pos);
/* Block table: records tok at position pos (before kv_publish). */
static inline void kv_note(kv_cache *kv, int pos, int32_t tok) { if (kv->pooled) kv->toks[pos] = tok; }
/* Block table: publishes the tile of pos when pos is its last position. */
void kv_publish(kv_cache *kv, int pos);
/* Block table, after a pass (every kv_publish of it): gives back the ring blocks whose
 * positions every window from position top on is past. */
void kv_slide(kv_cache *kv);
/* Drops the positions from pos on: a block table releases the blocks past it (a
 * published tile written into again copied first); at 0 the rings start empty. The
 * caller checks kv_keeps first. 0, or -1 when no block is left for the copy. */
int kv_truncate(kv_cache *kv, int pos);
/* Block table: from position pos (a tile start), takes the published blocks of the
 * tokens that follow while whole tiles fit in n tokens, up to the furthest tile start
 * whose last window's ring blocks are published too; returns the new position. */
int kv_reuse(kv_cache *kv, int pos, const int32_t *tokens, int n);

/* Key tile of (layer, tile): kv_dim x 16 elements of the cache's type. */
static inline const void *kv_ktile(const kv_cache *kv, int layer, int tile)
{
    if (kv->pooled) {
        int k = kv->kind[layer];
        return kvp_plane(kv->kp[k], kv->blk[k][tile], kv->plane[layer], KVP_K);
    }
    int slot = tile % ((kv->cap[layer] + 15) / 16);
    return (const char *)kv->k + kern_kv_bytes(kv->kvt, kv->k0[layer] + (int64_t)slot * kv->kv_dim * 16);
}
/* Value row of kv head h at (layer, pos): head_dim elements. */
static inline const void *kv_vh(const kv_cache *kv, int layer, int h, int pos)
{
    if (kv->pooled) {
        int k = kv->kind[layer];
        return (const char *)kvp_plane(kv->kp[k], kv->blk[k][pos / 16], kv->plane[layer], KVP_V) +
               kern_kv_bytes(kv->kvt, ((int64_t)h * 16 + pos % 16) * kv->head_dim);
    }
    int64_t cap = kv->cap[layer];
    return (const char *)kv->v + kern_kv_bytes(kv->kvt, kv->v0[layer] + (h * cap + pos % cap) * kv->head_dim);
}
/* Positions from pos (a tile start for keys) that follow one another in memory, key
 * tiles and a head's value rows alike (head_dim apart): to the end of a pool block, of a
 * ring, or of the last whole tile of a layer that keeps every position (a multiple of 16
 * from a tile start). */
static inline int kv_run(const kv_cache *kv, int layer, int pos)
{
    if (kv->pooled) return 16 - pos % 16;
    int cap = kv->cap[layer];
    return cap == kv->n_ctx ? kv->n_tiles * 16 - pos : cap - pos % cap;
}

#endif
