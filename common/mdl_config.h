/*
 * mdl_config.h - a model's configuration as the weight segment's header stores it
 * (segment.h): a fixed binary layout (plain integers and floats, size pinned below) that
 * the engine fills from a GGUF file (engined/model.h, mdl_config_from_gguf) and every
 * reader of a segment maps. Bump SEG_LAYOUT_VERSION in segment.h when it changes.
 *
 *   const mdl_config *c = &seg_hdr(&m)->config;
 *   printf("%s: %d layers, vocabulary %d\n", c->arch_name, c->n_layer, c->n_vocab);
 */
#ifndef LLM_MDL_CONFIG_H
#define LLM_MDL_CONFIG_H

#include <stdint.h>

typedef struct {
    char    arch_name[32];   /* NUL-terminated */
    int32_t arch_id;         /* mdl_arch_id */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;        /* n_embd / n_head unless attention.key_length says otherwise */
    int32_t n_ff;
    int32_t n_rot;           /* rotated dimensions per head (rope.dimension_count) */
    int32_t rope_neox;       /* copied from the arch table */
    int32_t sliding_window;  /* 0: none; else attend to the last sliding_window positions */
    int32_t tied_output;     /* 1: no output.weight, logits use token_embd */
    int32_t has_rope_freqs;  /* 1: rope_freqs.weight divides each frequency (llama3) */
    int32_t has_qkv_bias;    /* 1: blk.N.attn_{q,k,v}.bias present */
    float   rope_base;       /* rope.freq_base */
    float   rope_freq_scale; /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float   rms_eps;         /* attention.layer_norm_rms_epsilon */
    int32_t bos_id;          /* -1 when absent */
    int32_t eos_id;          /* -1 when absent */
    int32_t has_qk_norm;     /* 1: blk.N.attn_{q,k}_norm.weight RMS-normalize each head (qwen3) */
    int32_t swa_pattern;     /* gemma3: layer il uses the sliding window unless (il + 1) % swa_pattern == 0; 0: every layer */
    float   rope_base_local; /* gemma3: rope base of the sliding-window layers; 0: rope_base */
    float   attn_scale;      /* scale of q.k; 0: 1 / sqrt(head_dim) */
    float   attn_softcap;    /* gemma2: scores become c * tanh(s / c) before the softmax; 0: none */
    float   final_softcap;   /* gemma2: the same on the logits; 0: none */
    float   rope_attn_factor;/* rope.scaling.attn_factor: cos and sin scaled by it (phi3 long rope); 1: none */
    int32_t n_ctx_orig;      /* rope.scaling.original_context_length (else context_length) */
    int32_t has_rope_long_short; /* phi3: rope_factors_long/short.weight, long above n_ctx_orig */
    int32_t pad0;            /* 0: the size stays a multiple of 8 */
    int32_t n_expert;        /* mixture of experts (engined/moe.h): experts per layer; 0: dense FFN */
    int32_t n_expert_used;   /* experts each token is routed to (top-k) */
    int32_t n_ff_exp;        /* an expert's feed-forward length */
    int32_t n_ff_shexp;      /* the shared expert's; 0: none */
    int32_t moe_norm_w;      /* 1: the top-k weights are divided by their sum */
    int32_t moe_reserved[3];
    float   yarn_ext_factor; /* YaRN (rope.scaling.type yarn): mix of extrapolated frequencies; 0: no YaRN */
    float   yarn_beta_fast;  /* rope.scaling.yarn_beta_fast (32): rotations that bound the ramp's start */
    float   yarn_beta_slow;  /* rope.scaling.yarn_beta_slow (1): and its end */
    int32_t pad1;            /* 0: the size stays a multiple of 8 */
} mdl_config;
_Static_assert(sizeof(mdl_config) == 200, "mdl_config is part of the segment layout");

#endif
