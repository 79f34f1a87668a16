/*
 * moe.h - the mixture-of-experts feed-forward block (Mixtral's llama MoE, qwen2moe,
 * qwen3moe) of a forward pass, on both paths. Private to engined/ (forward.c calls it).
 *
 *   moe_scratch *s = NULL;
 *   if (moe_reserve(&s, cfg, n_tokens) != 0) { ... out of memory ... }
 *   moe_ffn(s, pool, cfg, &layer, xn, n_tokens, out);   // out may be xn
 *   moe_free(&s);
 *
 * Per token: router logits (f32 weights, ffn_gate_inp), softmax over the experts, the
 * top k (ties to the lower index) in rank order, their weights (divided by their sum
 * when cfg->moe_norm_w); each chosen expert's SwiGLU FFN; out = the sum over ranks
 * 0..k-1 of weight * expert output, in rank order, plus the shared expert's output
 * (times sigmoid(ffn_gate_inp_shexp . x) when that gate exists), as ik_llama.cpp
 * computes it.
 *
 * Batching: the batch's (token, rank) pairs are grouped by expert, so each chosen
 * expert's matrices are read once per call, whatever the number of tokens routed to
 * it. Every number of a token is a function of its own row only (the kernels'
 * per-row contract, kernels.h, and a fixed per-token order of the sum), so its
 * results are bit-identical however the batch is composed.
 *
 * Ownership: the scratch belongs to the caller's handle (moe_free); moe_ffn allocates
 * nothing.
 */
#ifndef LLM_MOE_H
#define LLM_MOE_H

#include <stdint.h>

#include "model.h"
#include "pool.h"

typedef struct moe_scratch moe_scratch;

/* Makes *s (created on first use) hold a batch of n tokens of model c. 0 or -1. */
int moe_reserve(moe_scratch **s, const mdl_config *c, int n);
/* Frees *s and sets it to NULL; NULL accepted. */
void moe_free(moe_scratch **s);
/* out (n x n_embd) = the MoE block of layer L on the normed rows x (n x n_embd); out
 * may alias x. s must have been reserved for n. */
void moe_ffn(moe_scratch *s, pool_t *pool, const mdl_config *c, const mdl_layer *L, const float *x, int n,
             float *out);
/* The blocks run since s was made, and the routed experts they read (the shared one
 * not counted): a block reads each expert its tokens chose once, so experts / blocks
 * is how many of a layer's experts a step reads on average. */
void moe_counts(const moe_scratch *s, uint64_t *blocks, uint64_t *experts);
/* Weight bytes a decoded token reads in the MoE block of L: the router, k of the
 * experts, the shared expert. */
uint64_t moe_bytes_per_token(const mdl_config *c, const mdl_layer *L);

#endif
