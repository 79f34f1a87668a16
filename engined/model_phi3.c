/*
 * model_phi3.c - phi3 (Phi-3, Phi-3.5, Phi-4): its tensors, fused Q/K/V and gate/up, bound
 * as views so that the forward pass sees the usual separate matrices; its sliding window;
 * its long and short rope factors. Owned by the engine.
 */
#include "model.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "errcode.h"
#include "gguf.h"
#include "segment.h"

/* The window ik_llama.cpp gives files that name none (Phi-3 mini/medium 4k and 128k). */
static int64_t default_window(const mdl_config *c)
{
    if ((c->n_layer == 32 || c->n_layer == 40) && c->n_ctx_train == 4096) return 2047;
    if (c->n_layer == 32 && c->n_head_kv == 32 && c->n_ctx_train == 131072) return 262144;
    if (c->n_layer == 40 && c->n_ctx_train == 131072) return 131072;
    return 0;
}

int mdl_phi3_config(const gguf_ctx *g, mdl_config *c, const char *a, char *err, size_t errlen)
{
    int64_t E = c->n_embd, KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    if ((int64_t)c->n_head * c->head_dim != E) {
        return errf(err, errlen, "phi3: heads %d x head dimension %d must equal n_embd %d", c->n_head,
                    c->head_dim, c->n_embd);
    }
    if (E % 16 || KV % 16 || F % 16) {
        return errf(err, errlen, "phi3: n_embd %d, kv width %lld and n_ff %d must be multiples of 16 (the fused "
                    "matrices are split at tile boundaries)", c->n_embd, (long long)KV, c->n_ff);
    }
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window", a);
    c->sliding_window = (int32_t)gguf_get_int(g, key, default_window(c));
    if (c->sliding_window < 0) {
        return errf(err, errlen, "%s is negative", key);
    }
    for (int il = 0; il < c->n_layer; il++) {
        struct { const char *n; int64_t d0, d1; } want[] = {
            { "attn_norm.weight", E, 1 },  { "attn_qkv.weight", E, E + 2 * KV }, { "attn_output.weight", E, E },
            { "ffn_norm.weight", E, 1 },   { "ffn_up.weight", E, 2 * F },        { "ffn_down.weight", F, E },
        };
        char name[96];
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", il, want[i].n);
            if (mdl_check_tensor(g, name, want[i].d0, want[i].d1, err, errlen) != 0) return -1;
        }
    }
    bool lg = gguf_find_tensor(g, "rope_factors_long.weight") != NULL;
    bool sh = gguf_find_tensor(g, "rope_factors_short.weight") != NULL;
    if (lg != sh) {
        return errf(err, errlen, "phi3: rope_factors_%s.weight is missing (long and short come together)",
                    lg ? "short" : "long");
    }
    c->has_rope_long_short = lg;
    if (lg && (mdl_check_tensor(g, "rope_factors_long.weight", c->n_rot / 2, 1, err, errlen) != 0 ||
               mdl_check_tensor(g, "rope_factors_short.weight", c->n_rot / 2, 1, err, errlen) != 0))
        return -1;
    return 0;
}

/* Rows [r0, r0 + rows) of a bound matrix as a matrix of their own; r0 a multiple of 16. */
static void mat_rows(const mdl_mat *full, int64_t r0, int64_t rows, mdl_mat *out)
{
    *out = *full;
    uint64_t units = full->q8 ? (uint64_t)(rows + 15) / 16 : (uint64_t)rows;
    size_t skip = full->q8 ? (size_t)(r0 / 16) : (size_t)r0;
    out->data = (const char *)full->data + skip * full->row_bytes;
    out->rows = rows;
    out->nbytes = units * full->row_bytes;
}

int mdl_phi3_bind_layer(const struct seg_map *m, const mdl_config *c, int il, mdl_layer *L, char *err,
                        size_t errlen)
{
    int64_t E = c->n_embd, KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    char n[6][96];
    const char *names[6] = { "attn_norm.weight", "attn_qkv.weight", "attn_output.weight",
                             "ffn_norm.weight", "ffn_up.weight", "ffn_down.weight" };
    for (int i = 0; i < 6; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s", il, names[i]);
    mdl_mat qkv, gu;
    memset(L, 0, sizeof *L);
    if (mdl_bind_vec(m, n[0], E, &L->attn_norm, err, errlen) || mdl_bind_mat(m, n[1], E, E + 2 * KV, &qkv, err, errlen) ||
        mdl_bind_mat(m, n[2], E, E, &L->wo, err, errlen) || mdl_bind_vec(m, n[3], E, &L->ffn_norm, err, errlen) ||
        mdl_bind_mat(m, n[4], E, 2 * F, &gu, err, errlen) || mdl_bind_mat(m, n[5], F, E, &L->down, err, errlen))
        return -1;
    mat_rows(&qkv, 0, E, &L->wq);
    mat_rows(&qkv, E, KV, &L->wk);
    mat_rows(&qkv, E + KV, KV, &L->wv);
    mat_rows(&gu, 0, F, &L->gate); /* SwiGLU: the first half is the gate */
    mat_rows(&gu, F, F, &L->up);
    return 0;
}

const float *mdl_rope_factors(const mdl_weights *w, const mdl_config *c, int n_ctx)
{
    if (!c->has_rope_long_short) return w->rope_freqs;
    return n_ctx > c->n_ctx_orig ? w->rope_long : w->rope_short;
}
