/*
 * attn.h - causal self-attention of one layer for the items of a forward pass, over
 * their sessions' KV caches (grouped-query heads, sliding window), as matrix products.
 *
 *   att_pass a = { cfg, layer, sess, pos, n, q, out };
 *   size_t per = att_scratch_floats(cfg, max_pos);        // per thread
 *   att_forward(pool, &a, scratch);                      // n_threads * per floats
 *
 * A run of items of one session at consecutive positions (a prefill chunk) and one kv
 * head form a unit: its query rows (items x the heads sharing that kv head) times the
 * cached keys (kern_att_qk), a softmax per row over the positions the row sees
 * (kern_softmax), and the probabilities times the cached values (kern_att_pv). Every
 * number a row gets depends only on that row and its session's cache (kernels.h), so
 * an item's output is the same bits whether it is decoded alone, in a batch of other
 * sessions, or inside a prefill chunk of any size.
 *
 * Every item's key and value must be in its cache before the call (kv_store). Units
 * go to the pool's threads as they free up. Ownership: nothing is allocated; scratch
 * belongs to the caller.
 */
#ifndef LLM_ATTN_H
#define LLM_ATTN_H

#include <stddef.h>

#include "engine.h"
#include "model.h"
#include "pool.h"

/* Items of a run attended together (bounds the score rows of a unit). */
#define ATT_ITEMS 8

typedef struct {
    const mdl_config   *c;
    int                 layer;
    eng_session *const *sess;  /* (n) the session of each item */
    const int          *pos;   /* (n) its position */
    int                 n;
    const float        *q;     /* (n, n_head * head_dim) roped queries */
    float              *out;   /* (n, n_head * head_dim) attention output */
} att_pass;

/* Floats of scratch one thread needs for positions up to max_pos. */
size_t att_scratch_floats(const mdl_config *c, int max_pos);

/* Computes a->out; scratch holds pool_threads(pool) * att_scratch_floats() floats. */
void att_forward(pool_t *pool, const att_pass *a, float *scratch, size_t per_thread);

#endif
