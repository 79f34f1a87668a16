/*
 * qmix.h - llama.cpp's quantization mixes Q4_K_M and Q5_K_M for `llmc quantize`:
 * which type each tensor of a model gets.
 *
 * A mix is a base type (Q4_K or Q5_K) plus rules that give more bits where they buy
 * the most accuracy. The rules follow llama.cpp (c392e50, llama-quant.cpp) for the
 * dense llama / mistral / qwen2 models this project runs, and its MoE tweaks:
 *   - output.weight, or token_embd.weight when the model has no output.weight (the
 *     embedding is then also the output matrix): Q6_K; Q8_0 if the row length is
 *     not a multiple of 256.
 *   - attn_v.weight and ffn_down of a "more bits" layer: Q6_K. With n layers the more
 *     bits layers are the first n/8, those from 7n/8 on, and every third one from
 *     n/8 + 2 (integer division): layers 2 3 of 4; 0 1 4 7 10 13 16 19 20 21 of 22;
 *     0-3 6 9 ... 27 28-31 of 32.
 *   - attn_v.weight of a 70B model (80 layers; llama with grouped-query attention,
 *     qwen2) that would get Q4_K: Q5_K.
 *   - 8 experts (Mixtral): attn_v and attn_k Q8_0; attn_output Q5_K in Q4_K_M.
 *   - a fused attn_qkv.weight: Q5_K in Q4_K_M, Q6_K in Q5_K_M.
 *   - every other matrix: the base type. Not quantized (F32): 1-D tensors, the MoE
 *     router ffn_gate_inp.weight, and a tensor whose name does not end in "weight".
 *   - a row length that is not a multiple of the chosen type's block falls back:
 *     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 if still no fit.
 * The grouped-query (n_gqa) rules of llama.cpp concern only the 2- and 3-bit mixes.
 *
 *   qmix_model m;
 *   if (qmix_model_init(&m, QMIX_Q4_K_M, g, err, sizeof err) != 0) ...
 *   uint32_t t = qmix_tensor_type(&m, "blk.3.ffn_down.weight", 2, ne, why, sizeof why);
 *
 * Ownership: a qmix_model is a plain struct the caller owns; nothing allocates.
 * Owner: gguf helper.
 */
#ifndef LLM_QMIX_H
#define LLM_QMIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef enum { QMIX_Q4_K_M = 0, QMIX_Q5_K_M, QMIX_COUNT } qmix_kind;

/* What the rules need to know about a model. */
typedef struct {
    qmix_kind kind;
    char      arch[32];    /* general.architecture: "llama", "qwen2" ... */
    int       n_layer;     /* <arch>.block_count */
    int       n_head;      /* <arch>.attention.head_count */
    int       n_head_kv;   /* <arch>.attention.head_count_kv (n_head when absent) */
    int       n_expert;    /* <arch>.expert_count (0 when absent) */
    bool      has_output;  /* an output.weight exists; else token_embd is also the output */
} qmix_model;

/* The mix named name ("Q4_K_M", "q5_k_m"), or -1. */
int qmix_from_name(const char *name);
/* "Q4_K_M" / "Q5_K_M". */
const char *qmix_name(qmix_kind k);
/* llama.cpp's general.file_type of the mix (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15, Q5_K_M = 17). */
uint32_t qmix_ftype(qmix_kind k);

/* Fills m from a model's metadata and tensor names. 0, or -1 with a message naming
 * the missing key when the file has no block count. */
int qmix_model_init(qmix_model *m, qmix_kind k, const gguf_ctx *g, char *err, size_t errlen);

/* The type tensor `name` of n_dims dimensions ne[4] gets in the mix. When a row
 * length forced a fallback, why gets a one-line reason ("" otherwise). */
uint32_t qmix_tensor_type(const qmix_model *m, const char *name, uint32_t n_dims,
                          const int64_t ne[4], char *why, size_t whylen);

/* Whether layer i of n gets the extra bits (attn_v, ffn_down). */
bool qmix_more_bits(int i, int n);

#endif
