/*
 * engine.h - the engine's public API: a model in a POSIX shared-memory segment,
 * sessions with their KV caches, batched prefill and batched multi-session decode.
 *
 * Master (creates the segment, or attaches a READY one for the same file):
 *   char err[256];
 *   eng_open_info info;
 *   eng_model *m = eng_open("model.gguf", ENG_INT8, &info, err, sizeof err);
 *   if (!m) { fprintf(stderr, "error: %s\n", err); ... }
 *   // info.converted, info.ms, eng_segment_name(m) -> "/llm-1000-0123456789abcdef"
 *
 * Worker (maps an existing READY segment read-only):
 *   eng_model *m = eng_attach("/llm-1000-0123456789abcdef", err, sizeof err);
 *   eng_set_threads(m, 2);
 *   eng_session *s = eng_session_new(m, 512, ENG_KV_F16, err, sizeof err);
 *   float *logits = malloc(eng_config_of(m)->n_vocab * sizeof(float));
 *   eng_prefill(m, s, tokens, n, logits, false, err, sizeof err);  // last row only
 *   int tok = eng_argmax(logits, eng_config_of(m)->n_vocab);
 *   eng_session *ss[2] = { s, s2 }; int32_t toks[2] = { t1, t2 };
 *   eng_decode(m, ss, toks, 2, logits2 (2 x n_vocab floats), err, sizeof err);
 *   eng_session_free(s);
 *   eng_close(m);
 *
 * Tokenizer metadata: eng_tokenizer_blob() is a metadata-only GGUF image (every
 * key/value of the model file, no tensors) inside the segment; gguf_parse() it.
 *
 * Ownership and threads: an eng_model is one process's handle on a segment (its
 * mapping, thread pool and scratch buffers). It is not reentrant: call the forward
 * functions from one thread at a time; they use the pool internally. eng_open and
 * eng_attach are meant for a process's main thread (start-up), one call at a time. Sessions
 * belong to the model handle they were created from and must be freed before it.
 * Every pointer returned by an accessor lives until eng_close.
 */
#ifndef LLM_ENGINE_H
#define LLM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* What the segment holds: ENG_NATIVE (the default) keeps Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/
 * Q5_K/Q6_K matrices in their own width (kernels.h "qn") and every other type as q8t;
 * ENG_INT8 widens every matrix to q8t; ENG_FLOAT keeps f32 copies (the reference path).
 * The first two run the INT8-activation kernels. */
typedef enum { ENG_INT8 = 0, ENG_FLOAT = 1, ENG_NATIVE = 2, ENG_PRECISION_COUNT } eng_precision;

/* KV cache element type of a session: ENG_KV_Q8_0 is ggml's q8_0 (an f16 scale and 32
 * int8 per 32 values of a key or value row, 34 bytes), for models whose head_dim is a
 * multiple of 32. */
typedef enum { ENG_KV_F16 = 0, ENG_KV_F32 = 1, ENG_KV_Q8_0 = 2, ENG_KV_COUNT } eng_kv_type;
/* "f16", "f32", "q8_0" (NULL for others); eng_kv_parse: the type of a name, or -1. */
const char *eng_kv_name(eng_kv_type t);
int eng_kv_parse(const char *name);

typedef struct eng_model eng_model;
typedef struct eng_session eng_session;

/* How eng_open got its segment. */
typedef struct {
    bool   converted;     /* true: built it from the GGUF; false: attached a READY one */
    double ms;            /* wall time of the whole open, milliseconds */
    uint64_t seg_bytes;   /* size of the segment */
    char   name[64];      /* segment name, "/llm-<uid>-<16 hex>" */
} eng_open_info;

/* Creates the segment for a GGUF file (converting its weights) or attaches the READY
 * one built earlier for the same file; rebuilds a LOADING segment whose loader died.
 * Maps it read-only once it is READY. NULL and a message in err on any problem. */
eng_model *eng_open(const char *gguf_path, eng_precision prec, eng_open_info *info,
                    char *err, size_t errlen);
/* Maps an existing READY segment read-only by name (worker side). */
eng_model *eng_attach(const char *seg_name, char *err, size_t errlen);
/* Maps every page of the weights in now (MADV_POPULATE_READ, else one read per page),
 * so that first-touch page faults do not land in the first forward pass: for timings,
 * and for a worker that would rather pay them before its first request. */
void eng_warm(const eng_model *m);
/* Unmaps and frees the handle and its pool; accepts NULL. Sessions must be freed first. */
void eng_close(eng_model *m);

/* The model's configuration (n_vocab, n_ctx_train, n_embd, ...). */
const mdl_config *eng_config_of(const eng_model *m);
/* Segment name, e.g. "/llm-1000-0123456789abcdef". */
const char *eng_segment_name(const eng_model *m);
/* Precision of the segment's weights. */
eng_precision eng_precision_of(const eng_model *m);
/* The metadata-only GGUF image of the model's key/values (tokenizer tables included). */
const void *eng_tokenizer_blob(const eng_model *m, size_t *len);
/* Bytes of weights one decode step reads (every matrix once, the embedding only
 * when it is also the output): the numerator of decode's GB/s. */
uint64_t eng_weight_bytes_per_token(const eng_model *m);
/* Mixture of experts: the MoE blocks this handle has run and the routed experts they
 * read (moe_counts); both 0 for a dense model. */
void eng_moe_counts(const eng_model *m, uint64_t *blocks, uint64_t *experts);
/* Bits of segment memory per weight (seg_bits_per_weight): about 8.5 for INT8 tiles,
 * 32 for the float path. */
double eng_bits_per_weight(const eng_model *m);
/* Sets the thread count of this handle's pool (>= 1; default 2). 0 on success. */
int eng_set_threads(eng_model *m, int n_threads);

/* Positions of a session asked for n_ctx: n_ctx, or when <= 0 the model's n_ctx_train
 * capped at 4096. */
int eng_ctx(const eng_model *m, int n_ctx);
/* A session: its KV cache of n_ctx positions (n_ctx <= 0: the model's n_ctx_train,
 * capped at 4096); a private cache keeps only a ring of each sliding-window layer's last
 * positions (eng_set_swa_step). NULL and a message in err on a bad parameter or no memory. */
eng_session *eng_session_new(eng_model *m, int n_ctx, eng_kv_type kv, char *err, size_t errlen);
/* Sliding-window layers (gemma2, gemma3, phi3, mistral; mdl_layer_window): the private
 * caches of sessions made after this call keep, for each such layer, only a ring of its
 * window - 1 + step positions (whole tiles of 16), when that is less than n_ctx, as
 * llama.cpp keeps only the window's KV. step is the most tokens of one session a pass
 * evaluates: eng_prefill and eng_embed passes take at most that many, and an eng_step
 * that brings more of one session runs as several passes (the same bits). The cost: a
 * session can only go back (eng_session_truncate) to a position whose window its rings
 * still hold. step <= 0: every layer keeps n_ctx positions. Default
 * ENG_SWA_STEP_DEFAULT. Pooled sessions (eng_set_kv_pools) hold those layers in ring
 * blocks instead, given back as the window passes them. */
#define ENG_SWA_STEP_DEFAULT 512
void eng_set_swa_step(eng_model *m, int step);
/* Bytes of KV cache the session holds: its private cache (rings included), or its
 * blocks of a pool. */
uint64_t eng_session_kv_bytes(const eng_session *s);
/* 0 when model m can hold a KV cache of type t, else -1 with err naming why (an unknown
 * type; q8_0 and a head_dim that is not a multiple of 32). */
int eng_kv_check(const eng_model *m, eng_kv_type t, char *err, size_t errlen);
/* Frees a session; accepts NULL. */
void eng_session_free(eng_session *s);
/* Forgets every position (the next token is position 0). */
void eng_session_reset(eng_session *s);
/* Number of positions already in the cache. */
int eng_session_pos(const eng_session *s);
/* Capacity of the cache in positions. */
int eng_session_n_ctx(const eng_session *s);
/* Drops positions >= pos (pos <= current position), to rewind a session. 0, or -1 when
 * it could not keep pos: a bad pos (nothing changes), a pooled session that got no
 * block to copy a published one into (it keeps pos's block start), or a sliding-window
 * ring that no longer holds the window before pos (it keeps nothing: position 0). After
 * -1, eng_session_pos says what it holds: evaluate the tokens from there. */
int eng_session_truncate(eng_session *s, int pos);

/* Shared KV: sessions made after this call hold block tables in pools (kvpool.h, struct
 * kvps of this model's identity, kvs_ident; their type replaces eng_session_new's)
 * instead of private caches: pools[ENG_KV_WHOLE] holds the layers that keep every
 * position, pools[ENG_KV_RING] the sliding-window layers (mdl_layer_window > 0), whose
 * blocks a session gives back once every window from its next position on is past them
 * (so it holds about a window of them, as a private ring does). Either is NULL when the
 * model has no such layers; without a ring pool the sliding-window layers stay in the
 * whole blocks. Full blocks are published as they are completed; a step that finds no
 * free block fails with ERR_KV_FULL's message "KV pool full". The pools must outlive
 * the sessions; NULL, NULL goes back to private caches. */
enum { ENG_KV_WHOLE = 0, ENG_KV_RING = 1, ENG_KV_KINDS = 2 };
struct kvp;
void eng_set_kv_pools(eng_model *m, struct kvp *whole, struct kvp *ring);
/* A pooled session at a position that starts a block: takes the published blocks of
 * tokens[pos..n) while whole blocks fit in n, and returns the new position (the same
 * with no pool, or no hit). The tokens before pos must be the session's own. */
int eng_session_reuse(eng_session *s, const int32_t *tokens, int n);
/* Positions this session took from published blocks since it was made. */
uint64_t eng_session_reused(const eng_session *s);
/* Blocks of each kind a pooled session must take from the pools to add n positions
 * after its own in steps of at most step positions (0 with no pool): what admission
 * (the rest of a prompt) and chunked prefill (one step's chunk: step = n) count. */
void eng_session_kv_need(const eng_session *s, int n, int step, int need[ENG_KV_KINDS]);
/* Blocks of each kind a pooled session holds now (0 with no pool). */
void eng_session_kv_held(const eng_session *s, int held[ENG_KV_KINDS]);

/* Evaluates n tokens at the session's next positions in one batched pass. logits gets
 * n_vocab floats for the last position, or n x n_vocab (row p = after token p) when
 * all_logits; logits may be NULL to only fill the cache. 0 on success, -1 with err on
 * bad tokens or a full cache (the session is then unchanged). */
int eng_prefill(eng_model *m, eng_session *s, const int32_t *tokens, int n,
                float *logits, bool all_logits, char *err, size_t errlen);
/* Decodes one token for each of n distinct sessions in one pass over the weights;
 * logits gets n x n_vocab floats (row i for sessions[i]). 0 or -1 with err. */
int eng_decode(eng_model *m, eng_session *const *sessions, const int32_t *tokens, int n,
               float *logits, char *err, size_t errlen);

/* One item of a mixed step: the next token of a session. */
typedef struct {
    eng_session *s;
    int32_t      tok;
    bool         logits;  /* true: this item's logits row is wanted */
    bool         hidden;  /* true: its final hidden state is wanted (eng_step_hidden) */
} eng_item;

/* Evaluates n items in one pass over the weights: any mix of several sessions' prefill
 * chunks and single decode tokens (continuous batching). A session's items must be
 * given in order; they go at its next positions. logits gets one n_vocab row per item
 * whose logits flag is set, in item order (NULL when none is set). Every session then
 * advances by its item count. The rows are bit-identical to those the same tokens give
 * through any other split into steps (prefill at once, in chunks, one by one, alone or
 * batched with other sessions). A session with sliding-window rings that brings more
 * items than its step (eng_set_swa_step) makes the step run as several passes. 0, or -1
 * with err (bad token, a full cache, more than ENG_MAX_STEP items); on error no session
 * moves. */
#define ENG_MAX_STEP 4096
int eng_step(eng_model *m, const eng_item *items, int n, float *logits, char *err, size_t errlen);
/* eng_step, with logits rows ldl floats apart (0: n_vocab; a worker's logits ring slots
 * are further apart than n_vocab), and hidden gets one n_embd row per item whose hidden
 * flag is set, in item order: its final state through the output norm (the vector its
 * logits come from; the rows eng_embed pools). Batch invariant like the logits. hidden
 * may be NULL when no item wants one. */
int eng_step_hidden(eng_model *m, const eng_item *items, int n, float *logits, size_t ldl, float *hidden,
                    char *err, size_t errlen);

/* Embeddings. eng_embed evaluates n tokens into session s (a fresh one: its cache is
 * scratch, the caller frees it) and writes n_embd floats to out: the final hidden
 * states, each normalized by the model's output norm, pooled (ENG_POOL_MEAN: their
 * mean; ENG_POOL_LAST: the last token's) and L2-normalized. 0, or -1 with err.
 * eng_pool_add and eng_pool_finish are its pure pooling: rows accumulate into acc (E
 * doubles, zeroed first) n at a time, then out = the pooled vector over n_total rows,
 * L2-normalized (a zero vector stays zero). */
enum { ENG_POOL_MEAN = 1, ENG_POOL_LAST = 2 }; /* the wire's PROTO_POOL_* values */
int eng_embed(eng_model *m, eng_session *s, const int32_t *tokens, int n, int pooling, float *out,
              char *err, size_t errlen);
void eng_pool_add(double *acc, const float *rows, int n, int E, int pooling);
void eng_pool_finish(const double *acc, int n_total, int E, int pooling, float *out);

/* A counter of the forward work done by this handle (one unit per layer of a pass),
 * readable from any thread while another computes: a worker's liveness reports it, so
 * a long pass is seen to make progress. */
uint64_t eng_progress(const eng_model *m);

/* Index of the largest value, ties to the lowest index (greedy sampling). */
int eng_argmax(const float *logits, int n);

#endif
