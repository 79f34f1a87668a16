/*
 * model.h - a model's configuration, read once from GGUF metadata, and the one table
 * of per-architecture differences (llama, mistral, qwen2, qwen3, gemma3, gemma2,
 * phi3: model_phi3.c).
 *
 *   mdl_config c;
 *   if (mdl_config_from_gguf(g, &c, err, sizeof err) != 0) { ... }
 *   const mdl_arch *a = mdl_arch_get(c.arch_id);   // a->rope_neox, ...
 *
 * mdl_config is stored verbatim in the shared-memory segment header, so it is a
 * fixed binary layout declared with the segment's, in common/mdl_config.h; bump
 * SEG_LAYOUT_VERSION in segment.h when it changes.
 */
#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "mdl_config.h"

typedef struct gguf_ctx gguf_ctx;

typedef enum { MDL_ARCH_LLAMA = 0, MDL_ARCH_MISTRAL = 1, MDL_ARCH_QWEN2 = 2, MDL_ARCH_QWEN3 = 3, MDL_ARCH_GEMMA3 = 4,
               MDL_ARCH_GEMMA2 = 5, MDL_ARCH_PHI3 = 6, MDL_ARCH_QWEN2MOE = 7, MDL_ARCH_QWEN3MOE = 8,
               MDL_ARCH_COUNT } mdl_arch_id;

/* What differs between architectures; everything else is one forward pass. */
typedef struct {
    const char *name;          /* general.architecture value, also the metadata key prefix */
    int         rope_neox;     /* 1: rotate (i, i + n_rot/2); 0: adjacent pairs (2i, 2i+1) */
    int         qkv_bias;      /* 1: q/k/v biases expected (loaded when present either way) */
    int         sliding_window;/* 1: reads <arch>.attention.sliding_window */
    int         qk_norm;       /* 1: per-head RMS norms of Q and K before rope (qwen3) */
    int         gemma;         /* 1: embeddings * sqrt(n_embd), GELU-tanh gated FFN, norms after
                                * attention and FFN too, sliding-window layers interleaved with
                                * global ones (gemma3: 5 to 1, gemma2: 1 to 1) */
    float       rms_eps_default;
} mdl_arch;

/* The table row of an architecture id (LLM_ASSERT on an invalid id). */
const mdl_arch *mdl_arch_get(int arch_id);
/* Id of an architecture name, or -1 when unsupported. */
int mdl_arch_from_name(const char *name);

/* Fills c from a GGUF's metadata and tensor shapes; checks that every required key and
 * tensor is there with a consistent shape. 0, or -1 with a message naming the key. */
int mdl_config_from_gguf(const gguf_ctx *g, mdl_config *c, char *err, size_t errlen);

/* A weight matrix bound inside a segment: rows x cols, stored as tiles of 16 rows (q8t
 * or a native layout, INT8 activations, kernels.h) or f32 rows (float path, row r at data + r * row_bytes). */
typedef struct {
    const void *data;
    int64_t     rows;      /* output features */
    int64_t     cols;      /* input features (row length) */
    size_t      row_bytes; /* f32: bytes per row; q8t: bytes per tile */
    uint64_t    nbytes;    /* bytes of the whole matrix */
    int         q8;        /* 1: tiles (INT8 activations), 0: f32 rows */
    int         wt;        /* the tiles' kern_wtype (q8t or a native layout); -1: f32 */
    int         xk;        /* activation rounding, KERN_X_*: in a native segment llama.cpp's
                            * for the source type (Q8_K for K-quants, Q8_1 for Q4_1/Q5_1);
                            * Q8_2 (ik_llama.cpp's, Q8_0 sources) with LLM_ACT_ROUNDING=ik_llama.cpp */
} mdl_mat;

typedef struct {
    const float *attn_norm;      /* (n_embd) */
    const float *bq, *bk, *bv;   /* (n_head*head_dim), (n_head_kv*head_dim) x2, or NULL */
    const float *q_norm, *k_norm;/* (head_dim) each, or NULL (has_qk_norm) */
    mdl_mat      wq;             /* (n_head*head_dim, n_embd) */
    mdl_mat      wk, wv;         /* (n_head_kv*head_dim, n_embd) */
    mdl_mat      wo;             /* (n_embd, n_head*head_dim) */
    const float *ffn_norm;       /* (n_embd) */
    const float *attn_post_norm; /* (n_embd) or NULL: gemma, on the attention output */
    const float *ffn_post_norm;  /* (n_embd) or NULL: gemma, on the FFN output */
    mdl_mat      gate, up;       /* (n_ff, n_embd) */
    mdl_mat      down;           /* (n_embd, n_ff) */
    /* mixture of experts (n_expert > 0; then gate, up, down are unset): engined/moe.h */
    mdl_mat      router;         /* ffn_gate_inp: (n_expert, n_embd), f32 rows always */
    mdl_mat      gate_exps, up_exps; /* (n_expert * n_ff_exp, n_embd): expert e's rows from e * n_ff_exp */
    mdl_mat      down_exps;      /* (n_expert * n_embd, n_ff_exp) */
    mdl_mat      gate_shexp, up_shexp, down_shexp; /* the shared expert (n_ff_shexp > 0) */
    const float *shexp_gate;     /* ffn_gate_inp_shexp (n_embd) or NULL: sigmoid gate of the shared expert */
} mdl_layer;

typedef struct {
    mdl_mat      tok_embd;       /* (n_vocab, n_embd) */
    mdl_mat      output;         /* (n_vocab, n_embd): tok_embd when tied */
    const float *output_norm;    /* (n_embd) */
    const float *rope_freqs;     /* (n_rot/2) or NULL */
    const float *rope_long, *rope_short; /* (n_rot/2) each or NULL: phi3 (mdl_rope_factors) */
    mdl_layer   *layers;         /* (n_layer), malloc'd */
} mdl_weights;

struct seg_map;
/* Resolves every tensor of the config in a mapped segment, checking types and shapes.
 * 0, or -1 with a message naming the tensor. Free with mdl_weights_free. */
int mdl_weights_bind(const struct seg_map *m, const mdl_config *c, mdl_weights *w,
                     char *err, size_t errlen);
/* Frees the layer array; accepts a zeroed struct. */
void mdl_weights_free(mdl_weights *w);

/* phi3 (model_phi3.c): the layer tensors (fused attn_qkv [n_embd, q + 2 kv] and ffn_up
 * [n_embd, 2 n_ff], gate first) checked in a GGUF, the sliding window ik_llama.cpp assumes
 * when the file names none; and bound in a segment as views of the fused matrices'
 * rows (each part a whole number of 16-row tiles). 0, or -1 with a message. */
int mdl_phi3_config(const gguf_ctx *g, mdl_config *c, const char *arch, char *err, size_t errlen);
int mdl_phi3_bind_layer(const struct seg_map *m, const mdl_config *c, int il, mdl_layer *L, char *err,
                        size_t errlen);
/* The rope frequency factors of a session of n_ctx positions: rope_freqs, or phi3's long
 * factors when n_ctx > n_ctx_orig (as ik_llama.cpp picks by its context), else short. */
const float *mdl_rope_factors(const mdl_weights *w, const mdl_config *c, int n_ctx);

/* model.c's checks and bindings, for the architecture files. */
int mdl_check_tensor(const gguf_ctx *g, const char *name, int64_t d0, int64_t d1, char *err, size_t errlen);
int mdl_bind_mat(const struct seg_map *m, const char *name, int64_t cols, int64_t rows, mdl_mat *out,
                 char *err, size_t errlen);
int mdl_bind_vec(const struct seg_map *m, const char *name, int64_t n, const float **out, char *err,
                 size_t errlen);

/* The sliding window of layer il: the positions a row attends to (itself included), or
 * 0 for a layer that sees every earlier position (gemma3: every swa_pattern-th layer is
 * global; swa_pattern 0: every layer slides when sliding_window > 0). */
static inline int mdl_layer_window(const mdl_config *c, int il)
{
    return c->swa_pattern > 0 && (il + 1) % c->swa_pattern == 0 ? 0 : c->sliding_window;
}

/* One-line human summary ("llama: 5 layers, n_embd 64, ...") into buf. */
void mdl_config_describe(const mdl_config *c, char *buf, size_t len);

#endif
