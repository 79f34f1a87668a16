/*
 * model.c - model configuration from GGUF metadata, and the architecture table.
 * Owned by the engine.
 */
#include "model.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gguf.h"
#include "kernels.h"
#include "log.h"
#include "segment.h"
#include "errcode.h"

static const mdl_arch arch_table[MDL_ARCH_COUNT] = {
    [MDL_ARCH_LLAMA]   = { "llama",   0, 0, 0, 0, 0, 1e-5f },
    [MDL_ARCH_MISTRAL] = { "mistral", 0, 0, 1, 0, 0, 1e-5f },
    [MDL_ARCH_QWEN2]   = { "qwen2",   1, 1, 0, 0, 0, 1e-6f },
    [MDL_ARCH_QWEN3]   = { "qwen3",   1, 0, 0, 1, 0, 1e-6f },
    [MDL_ARCH_GEMMA3]  = { "gemma3",  1, 0, 1, 1, 1, 1e-6f },
    [MDL_ARCH_GEMMA2]  = { "gemma2",  1, 0, 1, 0, 1, 1e-6f },
    [MDL_ARCH_PHI3]    = { "phi3",    1, 0, 1, 0, 0, 1e-5f },
    [MDL_ARCH_QWEN2MOE] = { "qwen2moe", 1, 1, 0, 0, 0, 1e-6f },
    [MDL_ARCH_QWEN3MOE] = { "qwen3moe", 1, 0, 0, 1, 0, 1e-6f },
};

/* Mixture of experts by architecture: 0 dense unless <arch>.expert_count > 0 (llama:
 * Mixtral, top-k weights normalized); 1 experts, softmax weights as they are (qwen2moe);
 * 2 experts, top-k weights normalized (qwen3moe). */
static int arch_moe(int arch_id)
{
    return arch_id == MDL_ARCH_QWEN2MOE ? 1 : arch_id == MDL_ARCH_QWEN3MOE ? 2 : 0;
}

const mdl_arch *mdl_arch_get(int arch_id)
{
    LLM_ASSERT(arch_id >= 0 && arch_id < MDL_ARCH_COUNT);
    return &arch_table[arch_id];
}

int mdl_arch_from_name(const char *name)
{
    for (int i = 0; i < MDL_ARCH_COUNT; i++)
        if (strcmp(arch_table[i].name, name) == 0) return i;
    return -1;
}

/* Reads "<arch>.<suffix>" as an integer, def when absent. */
static int64_t arch_int(const gguf_ctx *g, const char *arch, const char *suffix, int64_t def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_int(g, key, def);
}

static double arch_float(const gguf_ctx *g, const char *arch, const char *suffix, double def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_float(g, key, def);
}

/* Checks that tensor name exists with ne[0] == d0 and (d1 > 0) ne[1] == d1. */
static int check_tensor(const gguf_ctx *g, const char *name, int64_t d0, int64_t d1,
                        char *err, size_t errlen)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) {
        return errf(err, errlen, "tensor %s is missing", name);
    }
    if (t->ne[0] != d0 || (d1 > 0 && t->ne[1] != d1) || t->ne[2] != 1 || t->ne[3] != 1) {
        return errf(err, errlen, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                    name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                    (long long)t->ne[3], (long long)d0, (long long)(d1 > 0 ? d1 : 1));
    }
    return 0;
}

static int check_layer(const gguf_ctx *g, const mdl_config *c, int il, char *err, size_t errlen)
{
    int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    struct { const char *n; int64_t d0, d1; } want[] = {
        { "attn_norm.weight", E, 1 },   { "attn_q.weight", E, Q },
        { "attn_k.weight", E, KV },     { "attn_v.weight", E, KV },
        { "attn_output.weight", Q, E }, { "ffn_norm.weight", E, 1 },
        { "ffn_gate.weight", E, c->n_ff }, { "ffn_up.weight", E, c->n_ff },
        { "ffn_down.weight", c->n_ff, E },
    };
    char name[96];
    for (size_t i = 0; i < (c->n_expert ? 6 : sizeof want / sizeof want[0]); i++) { /* MoE: check_moe_layer */
        snprintf(name, sizeof name, "blk.%d.%s", il, want[i].n);
        if (check_tensor(g, name, want[i].d0, want[i].d1, err, errlen) != 0) return -1;
    }
    return 0;
}

/* qwen3, gemma3 (qk_norm): the per-head norms of Q and K, head_dim values each; gemma:
 * the norms after attention and FFN. */
static int check_norms(const gguf_ctx *g, const mdl_config *c, int il, const mdl_arch *ar, char *err, size_t errlen)
{
    char name[96];
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "blk.%d.attn_%c_norm.weight", il, "qk"[k]);
        if (ar->qk_norm && check_tensor(g, name, c->head_dim, 1, err, errlen) != 0) return -1;
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, k ? "post_ffw_norm" : "post_attention_norm");
        if (ar->gemma && check_tensor(g, name, c->n_embd, 1, err, errlen) != 0) return -1;
    }
    return 0;
}

/* gemma3: 5 sliding-window layers to 1 global, the local ones with rope base 10000;
 * gemma2: every other layer (window 4096 unless the file says), scores and logits
 * soft-capped. Queries scaled as llama.cpp does: by 1/sqrt(n_embd / n_head) for the
 * 27B (query_pre_attn_scalar; 62 layers in gemma3, 46 in gemma2), else 1/sqrt(head_dim). */
static void gemma_config(const gguf_ctx *g, mdl_config *c, const char *a)
{
    bool g3 = c->arch_id == MDL_ARCH_GEMMA3;
    c->swa_pattern = g3 ? 6 : 2;
    c->rope_base_local = g3 ? 10000.0f : 0.0f;
    int big = g3 ? 62 : 46;
    c->attn_scale = 1.0f / sqrtf((float)(c->n_layer == big ? c->n_embd / c->n_head : c->head_dim));
    if (g3) return;
    c->sliding_window = (int32_t)arch_int(g, a, "attention.sliding_window", 4096);
    c->attn_softcap = (float)arch_float(g, a, "attn_logit_softcapping", 50.0);
    c->final_softcap = (float)arch_float(g, a, "final_logit_softcapping", 30.0);
}

static int read_dims(const gguf_ctx *g, mdl_config *c, const char *a, char *err, size_t errlen)
{
    c->n_embd = (int32_t)arch_int(g, a, "embedding_length", 0);
    c->n_layer = (int32_t)arch_int(g, a, "block_count", 0);
    c->n_ff = (int32_t)arch_int(g, a, "feed_forward_length", 0);
    c->n_head = (int32_t)arch_int(g, a, "attention.head_count", 0);
    c->n_head_kv = (int32_t)arch_int(g, a, "attention.head_count_kv", c->n_head);
    c->n_ctx_train = (int32_t)arch_int(g, a, "context_length", 2048);
    struct { const char *key; int32_t v; int64_t max; } req[] = {
        { "embedding_length", c->n_embd, 1 << 16 }, { "block_count", c->n_layer, 1024 },
        { "feed_forward_length", c->n_ff, 1 << 20 }, { "attention.head_count", c->n_head, 1024 },
        { "attention.head_count_kv", c->n_head_kv, 1024 }, { "context_length", c->n_ctx_train, 1 << 24 },
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (req[i].v <= 0 || req[i].v > req[i].max) {
            return errf(err, errlen, "metadata %s.%s is missing or out of range (%d)", a, req[i].key, req[i].v);
        }
    }
    if (c->n_head % c->n_head_kv != 0) {
        return errf(err, errlen, "%s.attention.head_count %d is not a multiple of head_count_kv %d",
                    a, c->n_head, c->n_head_kv);
    }
    c->head_dim = (int32_t)arch_int(g, a, "attention.key_length", c->n_embd / c->n_head);
    if (c->head_dim <= 0 || c->head_dim % 2 != 0 || c->head_dim > KERN_ATT_MAX_DIM ||
        arch_int(g, a, "attention.value_length", c->head_dim) != c->head_dim) {
        return errf(err, errlen, "head dimension %d (n_embd %d / heads %d or key_length) is unsupported",
                    c->head_dim, c->n_embd, c->n_head);
    }
    c->n_rot = (int32_t)arch_int(g, a, "rope.dimension_count", c->head_dim);
    if (c->n_rot <= 0 || c->n_rot > c->head_dim || c->n_rot % 2 != 0) {
        return errf(err, errlen, "%s.rope.dimension_count %d is invalid for head dimension %d", a, c->n_rot, c->head_dim);
    }
    return 0;
}

/* Mixture of experts: the expert counts and lengths, and whether a shared expert is there. */
static int read_moe(const gguf_ctx *g, mdl_config *c, const char *a, char *err, size_t errlen)
{
    int moe = arch_moe(c->arch_id);
    c->n_expert = (int32_t)arch_int(g, a, "expert_count", 0);
    if (!moe && c->n_expert == 0) return 0;
    c->n_expert_used = (int32_t)arch_int(g, a, "expert_used_count", 0);
    if (c->n_expert < 1 || c->n_expert > 1024 || c->n_expert_used < 1 || c->n_expert_used > c->n_expert) {
        return errf(err, errlen, "%s.expert_count %d / expert_used_count %d are missing or out of range",
                    a, c->n_expert, c->n_expert_used);
    }
    c->n_ff_exp = (int32_t)arch_int(g, a, "expert_feed_forward_length", c->n_ff);
    c->moe_norm_w = moe != 1;
    const gguf_tensor *sh = gguf_find_tensor(g, "blk.0.ffn_up_shexp.weight");
    c->n_ff_shexp = sh ? (int32_t)sh->ne[1] : 0;
    if (c->n_ff_exp <= 0 || c->n_ff_exp > (1 << 20) || c->n_ff_shexp < 0 || c->n_ff_shexp > (1 << 20)) {
        return errf(err, errlen, "%s.expert_feed_forward_length %d (or the shared expert's %d) is out of range",
                    a, c->n_ff_exp, c->n_ff_shexp);
    }
    return 0;
}

/* Checks a stack of n matrices: ne = [d0, d1, n]. */
static int check_stack(const gguf_ctx *g, const char *name, int64_t d0, int64_t d1, int64_t n, char *err, size_t errlen)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return errf(err, errlen, "tensor %s is missing", name);
    if (t->ne[0] != d0 || t->ne[1] != d1 || t->ne[2] != n || t->ne[3] != 1) {
        return errf(err, errlen, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
                    name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                    (long long)d0, (long long)d1, (long long)n);
    }
    return 0;
}

/* The router, the experts and the shared expert of a MoE layer. */
static int check_moe_layer(const gguf_ctx *g, const mdl_config *c, int il, char *err, size_t errlen)
{
    int64_t E = c->n_embd, F = c->n_ff_exp, X = c->n_expert, S = c->n_ff_shexp;
    char n[4][96];
    const char *names[4] = { "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };
    for (int i = 0; i < 4; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", il, names[i]);
    if (check_tensor(g, n[0], E, X, err, errlen) || check_stack(g, n[1], E, F, X, err, errlen) ||
        check_stack(g, n[2], E, F, X, err, errlen) || check_stack(g, n[3], F, E, X, err, errlen))
        return -1;
    if (!S) return 0;
    const char *sh[3] = { "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp" };
    for (int i = 0; i < 3; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", il, sh[i]);
    snprintf(n[3], sizeof n[3], "blk.%d.ffn_gate_inp_shexp.weight", il);
    if (check_tensor(g, n[0], E, S, err, errlen) || check_tensor(g, n[1], E, S, err, errlen) ||
        check_tensor(g, n[2], S, E, err, errlen))
        return -1;
    return gguf_find_tensor(g, n[3]) ? check_tensor(g, n[3], E, 1, err, errlen) : 0;
}

static int read_rope(const gguf_ctx *g, mdl_config *c, const char *a, const mdl_arch *ar,
                     char *err, size_t errlen)
{
    c->rope_base = (float)arch_float(g, a, "rope.freq_base", 10000.0);
    c->rms_eps = (float)arch_float(g, a, "attention.layer_norm_rms_epsilon", ar->rms_eps_default);
    c->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const char *st = gguf_get_str(g, key, "none");
    double factor = arch_float(g, a, "rope.scaling.factor", 0.0);
    if (strcmp(st, "linear") == 0 && factor > 0) c->rope_freq_scale = (float)(1.0 / factor);
    else if (strcmp(st, "yarn") == 0 && factor > 0) {
        c->rope_freq_scale = (float)(1.0 / factor);
        c->yarn_ext_factor = (float)arch_float(g, a, "rope.scaling.yarn_ext_factor", 1.0);
        c->yarn_beta_fast = (float)arch_float(g, a, "rope.scaling.yarn_beta_fast", 32.0);
        c->yarn_beta_slow = (float)arch_float(g, a, "rope.scaling.yarn_beta_slow", 1.0);
    }
    if (!(c->rope_base > 0) || !(c->rms_eps > 0)) {
        return errf(err, errlen, "%s.rope.freq_base or layer_norm_rms_epsilon is not positive", a);
    }
    c->sliding_window = ar->sliding_window ? (int32_t)arch_int(g, a, "attention.sliding_window", 0) : 0;
    if (c->sliding_window < 0) c->sliding_window = 0;
    c->rope_attn_factor = (float)arch_float(g, a, "rope.scaling.attn_factor", 1.0);
    c->n_ctx_orig = (int32_t)arch_int(g, a, "rope.scaling.original_context_length", c->n_ctx_train);
    if (!(c->rope_attn_factor > 0) || c->n_ctx_orig <= 0) {
        return errf(err, errlen, "%s.rope.scaling.attn_factor or original_context_length is not positive", a);
    }
    const gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
    c->has_rope_freqs = rf != NULL;
    if (rf && check_tensor(g, "rope_freqs.weight", c->n_rot / 2, 1, err, errlen) != 0) return -1;
    return 0;
}

int mdl_config_from_gguf(const gguf_ctx *g, mdl_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    const char *a = gguf_get_str(g, "general.architecture", NULL);
    if (!a) {
        return errf(err, errlen, "metadata general.architecture is missing");
    }
    int id = mdl_arch_from_name(a);
    if (id < 0) {
        return errf(err, errlen, "general.architecture '%s' is not supported (llama, mistral, qwen2, qwen3, gemma3, gemma2, phi3, qwen2moe, qwen3moe)", a);
    }
    const mdl_arch *ar = mdl_arch_get(id);
    snprintf(c->arch_name, sizeof c->arch_name, "%s", a);
    c->arch_id = id;
    c->rope_neox = ar->rope_neox;
    if (read_dims(g, c, a, err, errlen) != 0 || read_rope(g, c, a, ar, err, errlen) != 0 ||
        read_moe(g, c, a, err, errlen) != 0) return -1;

    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        return errf(err, errlen, "tensor token_embd.weight is missing");
    }
    if (te->ne[1] <= 0 || te->ne[1] > (1 << 24)) {
        return errf(err, errlen, "token_embd.weight has an invalid vocabulary size %lld", (long long)te->ne[1]);
    }
    c->n_vocab = (int32_t)te->ne[1];
    if (check_tensor(g, "token_embd.weight", c->n_embd, c->n_vocab, err, errlen) != 0 ||
        check_tensor(g, "output_norm.weight", c->n_embd, 1, err, errlen) != 0) return -1;
    c->tied_output = gguf_find_tensor(g, "output.weight") == NULL;
    if (!c->tied_output && check_tensor(g, "output.weight", c->n_embd, c->n_vocab, err, errlen) != 0)
        return -1;
    c->has_qkv_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    if (id == MDL_ARCH_PHI3 && mdl_phi3_config(g, c, a, err, errlen) != 0) return -1;
    for (int il = 0; il < c->n_layer && id != MDL_ARCH_PHI3; il++) {
        if (check_layer(g, c, il, err, errlen) != 0) return -1;
        if (c->n_expert && check_moe_layer(g, c, il, err, errlen) != 0) return -1;
        if (c->has_qkv_bias) {
            char name[96];
            int64_t dims[3] = { (int64_t)c->n_head * c->head_dim, (int64_t)c->n_head_kv * c->head_dim,
                                (int64_t)c->n_head_kv * c->head_dim };
            const char *which[3] = { "q", "k", "v" };
            for (int k = 0; k < 3; k++) {
                snprintf(name, sizeof name, "blk.%d.attn_%s.bias", il, which[k]);
                if (check_tensor(g, name, dims[k], 1, err, errlen) != 0) return -1;
            }
        }
        if (check_norms(g, c, il, ar, err, errlen) != 0) return -1;
    }
    c->has_qk_norm = ar->qk_norm;
    if (ar->gemma) gemma_config(g, c, a);
    if (c->sliding_window < 0 || !(c->attn_softcap >= 0) || !(c->final_softcap >= 0)) {
        return errf(err, errlen, "%s: sliding_window or a logit soft-capping value is negative", a);
    }
    c->bos_id = (int32_t)gguf_get_int(g, "tokenizer.ggml.bos_token_id", -1);
    c->eos_id = (int32_t)gguf_get_int(g, "tokenizer.ggml.eos_token_id", -1);
    return 0;
}

void mdl_config_describe(const mdl_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s: %d layers, n_embd %d, heads %d/%d (head_dim %d), n_ff %d, vocab %d, "
             "ctx %d, rope base %g%s%s%s%s%s", c->arch_name, c->n_layer, c->n_embd, c->n_head,
             c->n_head_kv, c->head_dim, c->n_ff, c->n_vocab, c->n_ctx_train, c->rope_base,
             c->rope_neox ? " neox" : "", c->tied_output ? ", tied output" : "",
             c->has_rope_freqs ? ", rope_freqs" : "", c->has_qk_norm ? ", q/k norms" : "",
             c->attn_softcap > 0 ? ", soft-capped" : "");
    size_t l = strlen(buf);
    if (c->n_expert && l < len)
        snprintf(buf + l, len - l, ", %d experts, top-%d%s (n_ff_exp %d), shared expert n_ff %d", c->n_expert,
                 c->n_expert_used, c->moe_norm_w ? " normalized" : "", c->n_ff_exp, c->n_ff_shexp);
}


/* LLM_ACT_ROUNDING=ik_llama.cpp: activations of Q8_0 weights rounded as ik_llama.cpp
 * rounds them (kern_x2_quantize) instead of as llama.cpp does: a comparison mode for
 * references made with ik_llama.cpp (tests/data), read when a segment is bound. */
static bool ik_rounding(void)
{
    const char *e = getenv("LLM_ACT_ROUNDING");
    return e && strcmp(e, "ik_llama.cpp") == 0;
}

/* Binds a matrix entry: q8 or f32 rows of the expected shape. */
static int bind_mat(const seg_map *m, const char *name, int64_t cols, int64_t rows, mdl_mat *out,
                    char *err, size_t errlen)
{
    const seg_tensor *t = seg_find(m, name);
    if (!t) {
        return errf(err, errlen, "segment %s: tensor %s is missing", m->name, name);
    }
    if (t->ne[0] != cols || t->ne[1] != rows) {
        return errf(err, errlen, "segment %s: tensor %s is [%lld, %lld], expected [%lld, %lld]", m->name,
                    name, (long long)t->ne[0], (long long)t->ne[1], (long long)cols, (long long)rows);
    }
    int wt = seg_wtype(t->type);
    size_t want = wt >= 0 ? kern_w_tile_bytes(wt, cols) : (size_t)cols * sizeof(float);
    if (t->row_bytes != want || t->nbytes < t->row_bytes * seg_stored_rows(t)) {
        return errf(err, errlen, "segment %s: tensor %s has %llu-byte %s, expected %zu", m->name, name,
                    (unsigned long long)t->row_bytes, wt >= 0 ? "tiles" : "rows", want);
    }
    out->data = seg_data(m, t);
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = t->row_bytes;
    out->nbytes = t->row_bytes * seg_stored_rows(t);
    out->q8 = wt >= 0;
    out->wt = wt;
    /* K-quant sources in a native segment: llama.cpp's activation rounding for them */
    uint32_t st = t->src_type;
    out->xk = KERN_X_Q8_0;
    if (seg_hdr(m)->precision == ENG_NATIVE && wt >= 0) {
        if (st == QT_Q2_K || st == QT_Q3_K || st == QT_Q4_K || st == QT_Q5_K || st == QT_Q6_K) out->xk = KERN_X_Q8_K;
        if (st == QT_Q4_1 || st == QT_Q5_1) out->xk = KERN_X_Q8_1;
        if (st == QT_Q8_0 && ik_rounding()) out->xk = KERN_X_Q8_2;
    }
    return 0;
}

/* Binds an f32 vector of n values. */
static int bind_vec(const seg_map *m, const char *name, int64_t n, const float **out, char *err, size_t errlen)
{
    const seg_tensor *t = seg_find(m, name);
    if (!t || t->type != SEG_T_F32 || t->ne[0] * t->ne[1] != n) {
        return errf(err, errlen, "segment %s: f32 vector %s of %lld values is missing or misshapen",
                    m->name, name, (long long)n);
    }
    *out = seg_data(m, t);
    return 0;
}

/* A stack of experts: expert e's rows start a tile (tiled) or row (f32) at e * per. */
static int bind_stack(const seg_map *m, const char *name, int64_t cols, int64_t per, int64_t n, mdl_mat *out,
                      char *err, size_t errlen)
{
    if (bind_mat(m, name, cols, per * n, out, err, errlen) != 0) return -1;
    if (out->q8 && per % KERN_TILE != 0) {
        return errf(err, errlen, "segment %s: tensor %s: %lld rows per expert are not a multiple of %d "
                    "(use the float path)", m->name, name, (long long)per, KERN_TILE);
    }
    return 0;
}

/* The router (f32), the experts and the shared expert of a MoE layer. */
static int bind_moe_layer(const seg_map *m, const mdl_config *c, int il, mdl_layer *L, char *err, size_t errlen)
{
    int64_t E = c->n_embd, F = c->n_ff_exp, X = c->n_expert, S = c->n_ff_shexp;
    char n[8][96];
    const char *names[8] = { "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                             "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp_shexp" };
    for (int i = 0; i < 8; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", il, names[i]);
    if (bind_mat(m, n[0], E, X, &L->router, err, errlen) || bind_stack(m, n[1], E, F, X, &L->gate_exps, err, errlen) ||
        bind_stack(m, n[2], E, F, X, &L->up_exps, err, errlen) ||
        bind_stack(m, n[3], F, E, X, &L->down_exps, err, errlen))
        return -1;
    if (L->router.q8) return errf(err, errlen, "segment %s: router %s is not f32", m->name, n[0]);
    if (S && (bind_mat(m, n[4], E, S, &L->gate_shexp, err, errlen) || bind_mat(m, n[5], E, S, &L->up_shexp, err, errlen) ||
              bind_mat(m, n[6], S, E, &L->down_shexp, err, errlen)))
        return -1;
    L->shexp_gate = NULL;
    if (S && seg_find(m, n[7]) && bind_vec(m, n[7], E, &L->shexp_gate, err, errlen) != 0) return -1;
    /* gate and up read the same quantized rows */
    if (L->gate_exps.xk != L->up_exps.xk || L->gate_exps.q8 != L->up_exps.q8 ||
        (S && (L->gate_shexp.xk != L->up_shexp.xk || L->gate_shexp.q8 != L->up_shexp.q8))) {
        return errf(err, errlen, "segment %s: layer %d: the gate and up experts are of different kinds", m->name, il);
    }
    return 0;
}

static int bind_layer(const seg_map *m, const mdl_config *c, int il, mdl_layer *L, char *err, size_t errlen)
{
    if (c->arch_id == MDL_ARCH_PHI3) return mdl_phi3_bind_layer(m, c, il, L, err, errlen);
    int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    if (c->n_expert && bind_moe_layer(m, c, il, L, err, errlen) != 0) return -1;
    char n[9][96];
    const char *names[9] = { "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                             "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                             "ffn_up.weight", "ffn_down.weight" };
    for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s", il, names[i]);
    if (bind_vec(m, n[0], E, &L->attn_norm, err, errlen) || bind_mat(m, n[1], E, Q, &L->wq, err, errlen) ||
        bind_mat(m, n[2], E, KV, &L->wk, err, errlen) || bind_mat(m, n[3], E, KV, &L->wv, err, errlen) ||
        bind_mat(m, n[4], Q, E, &L->wo, err, errlen) || bind_vec(m, n[5], E, &L->ffn_norm, err, errlen) ||
        (!c->n_expert && (bind_mat(m, n[6], E, c->n_ff, &L->gate, err, errlen) ||
                          bind_mat(m, n[7], E, c->n_ff, &L->up, err, errlen) ||
                          bind_mat(m, n[8], c->n_ff, E, &L->down, err, errlen))))
        return -1;
    L->bq = L->bk = L->bv = NULL;
    if (c->has_qkv_bias) {
        char b[3][96];
        for (int k = 0; k < 3; k++) snprintf(b[k], sizeof b[k], "blk.%d.attn_%c.bias", il, "qkv"[k]);
        if (bind_vec(m, b[0], Q, &L->bq, err, errlen) || bind_vec(m, b[1], KV, &L->bk, err, errlen) ||
            bind_vec(m, b[2], KV, &L->bv, err, errlen))
            return -1;
    }
    L->q_norm = L->k_norm = L->attn_post_norm = L->ffn_post_norm = NULL;
    if (mdl_arch_get(c->arch_id)->gemma) {
        char b[2][96];
        snprintf(b[0], sizeof b[0], "blk.%d.post_attention_norm.weight", il);
        snprintf(b[1], sizeof b[1], "blk.%d.post_ffw_norm.weight", il);
        if (bind_vec(m, b[0], E, &L->attn_post_norm, err, errlen) ||
            bind_vec(m, b[1], E, &L->ffn_post_norm, err, errlen))
            return -1;
    }
    if (c->has_qk_norm) {
        char b[2][96];
        for (int k = 0; k < 2; k++) snprintf(b[k], sizeof b[k], "blk.%d.attn_%c_norm.weight", il, "qk"[k]);
        if (bind_vec(m, b[0], c->head_dim, &L->q_norm, err, errlen) ||
            bind_vec(m, b[1], c->head_dim, &L->k_norm, err, errlen))
            return -1;
    }
    return 0;
}

int mdl_weights_bind(const seg_map *m, const mdl_config *c, mdl_weights *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (bind_mat(m, "token_embd.weight", c->n_embd, c->n_vocab, &w->tok_embd, err, errlen) ||
        bind_vec(m, "output_norm.weight", c->n_embd, &w->output_norm, err, errlen))
        return -1;
    if (c->tied_output) w->output = w->tok_embd;
    else if (bind_mat(m, "output.weight", c->n_embd, c->n_vocab, &w->output, err, errlen)) return -1;
    if (c->has_rope_freqs && bind_vec(m, "rope_freqs.weight", c->n_rot / 2, &w->rope_freqs, err, errlen))
        return -1;
    if (c->has_rope_long_short &&
        (bind_vec(m, "rope_factors_long.weight", c->n_rot / 2, &w->rope_long, err, errlen) ||
         bind_vec(m, "rope_factors_short.weight", c->n_rot / 2, &w->rope_short, err, errlen)))
        return -1;
    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    if (!w->layers) {
        return errf(err, errlen, "out of memory for %d layers", c->n_layer);
    }
    for (int il = 0; il < c->n_layer; il++) {
        if (bind_layer(m, c, il, &w->layers[il], err, errlen) != 0) {
            mdl_weights_free(w);
            return -1;
        }
    }
    return 0;
}

void mdl_weights_free(mdl_weights *w)
{
    free(w->layers);
    w->layers = NULL;
}

int mdl_check_tensor(const gguf_ctx *g, const char *name, int64_t d0, int64_t d1, char *err, size_t errlen)
{
    return check_tensor(g, name, d0, d1, err, errlen);
}

int mdl_bind_mat(const seg_map *m, const char *name, int64_t cols, int64_t rows, mdl_mat *out, char *err,
                 size_t errlen)
{
    return bind_mat(m, name, cols, rows, out, err, errlen);
}

int mdl_bind_vec(const seg_map *m, const char *name, int64_t n, const float **out, char *err, size_t errlen)
{
    return bind_vec(m, name, n, out, err, errlen);
}
