/*
 * qmix.c - per-tensor types of the Q4_K_M and Q5_K_M mixes. See qmix.h for the rules.
 *
 * llama.cpp counts attn_v and ffn_down tensors as it meets them in layer order; for
 * the dense models here (one of each per layer, every layer with attention) that
 * count is the layer number, which we read from the name ("blk.N."), as llama.cpp
 * itself does for MoE models.
 */
#include "qmix.h"
#include "errcode.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *name;
    uint32_t    base;   /* type of an ordinary matrix */
    uint32_t    ftype;  /* llama_ftype */
} qmix_info;

static const qmix_info qmix_table[QMIX_COUNT] = {
    [QMIX_Q4_K_M] = {"Q4_K_M", QT_Q4_K, 15},
    [QMIX_Q5_K_M] = {"Q5_K_M", QT_Q5_K, 17},
};

int qmix_from_name(const char *name)
{
    for (int k = 0; k < QMIX_COUNT; k++)
        if (strcasecmp(name, qmix_table[k].name) == 0) return k;
    return -1;
}

const char *qmix_name(qmix_kind k) { return qmix_table[k].name; }

uint32_t qmix_ftype(qmix_kind k) { return qmix_table[k].ftype; }

bool qmix_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int arch_int(const gguf_ctx *g, const char *arch, const char *key, int64_t def)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return (int)gguf_get_int(g, k, def);
}

int qmix_model_init(qmix_model *m, qmix_kind k, const gguf_ctx *g, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->kind = k;
    snprintf(m->arch, sizeof m->arch, "%s", gguf_get_str(g, "general.architecture", "llama"));
    m->n_layer = arch_int(g, m->arch, "block_count", -1);
    if (m->n_layer < 1) {
        return errf(err, errlen, "no %s.block_count in the model's metadata: cannot place the %s rules",
                    m->arch, qmix_name(k));
    }
    m->n_head = arch_int(g, m->arch, "attention.head_count", 0);
    m->n_head_kv = arch_int(g, m->arch, "attention.head_count_kv", m->n_head);
    m->n_expert = arch_int(g, m->arch, "expert_count", 0);
    m->has_output = gguf_find_tensor(g, "output.weight") != NULL;
    return 0;
}

/* llama.cpp's size class "70B": the attn_v of such a model gets a bit more. */
static bool is_70b(const qmix_model *m)
{
    if (m->n_layer != 80) return false;
    if (strcmp(m->arch, "qwen2") == 0) return true;
    return strcmp(m->arch, "llama") == 0 && m->n_expert != 8 && m->n_head != m->n_head_kv;
}

static int layer_of(const char *name)
{
    int i;
    return sscanf(name, "blk.%d.", &i) == 1 ? i : -1;
}

static bool more_bits_layer(const qmix_model *m, const char *name)
{
    int i = layer_of(name);
    return i >= 0 && qmix_more_bits(i, m->n_layer);
}

/* The type the rules ask for, before the row-length check. */
static uint32_t rule_type(const qmix_model *m, const char *name, int64_t ne0)
{
    const bool q4 = m->kind == QMIX_Q4_K_M;
    const uint32_t base = qmix_table[m->kind].base;
    if (strcmp(name, "output.weight") == 0 || (!m->has_output && strcmp(name, "token_embd.weight") == 0))
        return ne0 % 256 != 0 ? QT_Q8_0 : QT_Q6_K;
    if (strcmp(name, "token_embd.weight") == 0) return base;
    if (strstr(name, "attn_v.weight")) {
        uint32_t t = more_bits_layer(m, name) ? QT_Q6_K : base;
        if (t == QT_Q4_K && is_70b(m)) t = QT_Q5_K;
        return m->n_expert == 8 ? QT_Q8_0 : t;
    }
    if (strstr(name, "attn_k.weight")) return m->n_expert == 8 ? QT_Q8_0 : base;
    if (strstr(name, "attn_q.weight")) return base;
    if (strstr(name, "ffn_down")) return more_bits_layer(m, name) ? QT_Q6_K : base;
    if (strstr(name, "attn_output.weight")) return q4 && m->n_expert == 8 ? QT_Q5_K : base;
    if (strstr(name, "attn_qkv.weight")) return q4 ? QT_Q5_K : QT_Q6_K;
    return base;
}

/* The next type to try when rows of a K type do not fill its 256-value blocks. */
static uint32_t fallback_of(uint32_t t)
{
    switch (t) {
    case QT_Q4_K: return QT_Q5_0;
    case QT_Q5_K: return QT_Q5_1;
    case QT_Q6_K: return QT_Q8_0;
    default: return QT_F16;
    }
}

uint32_t qmix_tensor_type(const qmix_model *m, const char *name, uint32_t n_dims,
                          const int64_t ne[4], char *why, size_t whylen)
{
    if (why && whylen) why[0] = 0;
    size_t len = strlen(name);
    bool is_weight = len >= 6 && strcmp(name + len - 6, "weight") == 0;
    if (n_dims < 2 || ne[1] * ne[2] * ne[3] == 1 || !is_weight || strstr(name, "ffn_gate_inp.weight"))
        return QT_F32;
    uint32_t want = rule_type(m, name, ne[0]);
    if (qt_row_size(want, ne[0]) != 0) return want;
    uint32_t t = fallback_of(want);
    if (qt_row_size(t, ne[0]) == 0) t = QT_F16;
    if (why && whylen)
        snprintf(why, whylen, "row length %lld is not a multiple of %s's block size %d; using %s",
                 (long long)ne[0], qt_name(want), qt_get(want)->block_size, qt_name(t));
    return t;
}
