/*
 * tok_vocab.c - builds a tok_vocab from GGUF metadata the way llama.cpp's
 * llama_vocab::load does (defaults per tokenizer model and pre-tokenizer, special ids,
 * end-of-generation detection by token text), plus the accessors of tok.h.
 * Owner: tok.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tok_impl.h"
#include "unicode.h"
#include "errcode.h"

/* ---- string interning ---- */

/* 8 bytes at a time: token strings are short and looked up millions of times. */
static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ len, x;
    for (; len >= 8; s += 8, len -= 8) {
        memcpy(&x, s, 8);
        h = (h ^ x) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    x = 0;
    for (size_t i = 0; i < len; i++)
        x |= (uint64_t)(unsigned char)s[i] << (8 * i);
    h = (h ^ x) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

void strtab_init(tok_strtab *t)
{
    memset(t, 0, sizeof *t);
}

void strtab_free(tok_strtab *t)
{
    free(t->pool);
    free(t->off_len);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

int32_t strtab_find(const tok_strtab *t, const char *s, size_t len)
{
    if (!t->cap)
        return -1;
    uint64_t h = hash_bytes(s, len);
    uint32_t mask = t->cap - 1, i = (uint32_t)h & mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        uint64_t slot = t->slots[i];
        if (!slot)
            return -1;
        if ((uint32_t)(slot >> 32) == tag) {
            int32_t id = (int32_t)((uint32_t)slot - 1);
            size_t l;
            const char *p = strtab_str(t, id, &l);
            if (l == len && memcmp(p, s, len) == 0)
                return id;
        }
        i = (i + 1) & mask;
    }
}

static bool strtab_grow(tok_strtab *t)
{
    uint32_t cap = t->cap ? t->cap * 2 : 1024;
    uint64_t *slots = calloc(cap, sizeof *slots);
    uint64_t *ol = realloc(t->off_len, (size_t)(cap / 2) * sizeof *ol);
    if (!slots || !ol) {
        free(slots);
        if (ol)
            t->off_len = ol;
        return false;
    }
    t->off_len = ol;
    for (uint32_t id = 0; id < t->n; id++) {
        size_t l;
        const char *p = strtab_str(t, (int32_t)id, &l);
        uint64_t h = hash_bytes(p, l);
        uint32_t i = (uint32_t)h & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = (h >> 32 << 32) | (id + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return true;
}

int32_t strtab_intern(tok_strtab *t, const char *s, size_t len)
{
    int32_t id = strtab_find(t, s, len);
    if (id >= 0)
        return id;
    if (len >= (1u << 24) || t->n >= 0x7FFFFFF0u)
        return -1;
    if ((t->n + 1) * 2 > t->cap && !strtab_grow(t))
        return -1;
    if (t->pool_len + len > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap * 2 : 65536;
        while (cap < t->pool_len + len)
            cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p)
            return -1;
        t->pool = p;
        t->pool_cap = cap;
    }
    if (len)
        memcpy(t->pool + t->pool_len, s, len);
    t->off_len[t->n] = ((uint64_t)t->pool_len << 24) | len;
    t->pool_len += len;
    uint64_t h = hash_bytes(s, len);
    uint32_t i = (uint32_t)h & (t->cap - 1);
    while (t->slots[i])
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = (h >> 32 << 32) | (t->n + 1);
    return (int32_t)t->n++;
}

bool ids_push(tok_ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *p = realloc(o->v, cap * sizeof *p);
        if (!p)
            return false;
        o->v = p;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return true;
}

/* ---- pre-tokenizer names ---- */

typedef struct {
    const char *name;
    tok_pre     pre;
    bool        clean_spaces;
} pre_entry;

/* llama.cpp's tokenizer.ggml.pre values, by the regex family they use. */
static const pre_entry pre_table[] = {
    { "default", TOK_PRE_DEFAULT, true },
    { "llama3", TOK_PRE_LLAMA3, true }, { "llama-v3", TOK_PRE_LLAMA3, true },
    { "llama-bpe", TOK_PRE_LLAMA3, true }, { "falcon3", TOK_PRE_LLAMA3, true },
    { "dbrx", TOK_PRE_LLAMA3, true }, { "smaug-bpe", TOK_PRE_LLAMA3, true },
    { "deepseek-llm", TOK_PRE_DEEPSEEK_LLM, false },
    { "deepseek-coder", TOK_PRE_DEEPSEEK_CODER, false },
    { "falcon", TOK_PRE_FALCON, true },
    { "mpt", TOK_PRE_GPT2, true }, { "gpt-2", TOK_PRE_GPT2, true }, { "phi-2", TOK_PRE_GPT2, true },
    { "olmo", TOK_PRE_GPT2, true }, { "jais", TOK_PRE_GPT2, true },
    { "roberta-bpe", TOK_PRE_GPT2, true }, { "gigachat", TOK_PRE_GPT2, true },
    { "jina-es", TOK_PRE_GPT2, true }, { "jina-de", TOK_PRE_GPT2, true },
    { "jina-v1-en", TOK_PRE_GPT2, true }, { "jina-v2-es", TOK_PRE_GPT2, true },
    { "jina-v2-de", TOK_PRE_GPT2, true }, { "jina-v2-code", TOK_PRE_GPT2, true },
    { "chatglm-bpe", TOK_PRE_LLAMA3, true },
    { "starcoder", TOK_PRE_STARCODER, true }, { "refact", TOK_PRE_STARCODER, true },
    { "command-r", TOK_PRE_STARCODER, false }, { "smollm", TOK_PRE_STARCODER, false },
    { "codeshell", TOK_PRE_STARCODER, true }, { "exaone", TOK_PRE_STARCODER, true },
    { "minerva-7b", TOK_PRE_STARCODER, true },
    { "qwen2", TOK_PRE_QWEN2, false }, { "stablelm2", TOK_PRE_QWEN2, true },
    { "megrez", TOK_PRE_QWEN2, true }, { "deepseek-r1-qwen", TOK_PRE_QWEN2, false },
};

/* ---- loading ---- */

static int load_tokens(tok_vocab *v, const gguf_ctx *g, char *err, size_t errlen)
{
    int64_t kt = gguf_find_key(g, "tokenizer.ggml.tokens");
    if (kt < 0 || gguf_arr_type(g, kt) != GGUF_T_STRING || gguf_arr_n(g, kt) == 0 ||
        gguf_arr_n(g, kt) > 0x7FFFFFF) {
        errf(err, errlen, "tokenizer.ggml.tokens: missing, empty or not an array of strings");
        return -1;
    }
    uint64_t n = gguf_arr_n(g, kt);
    v->n_vocab = (int32_t)n;
    int64_t ks = gguf_find_key(g, "tokenizer.ggml.scores");
    int64_t ky = gguf_find_key(g, "tokenizer.ggml.token_type");
    if (ks >= 0 && (gguf_arr_type(g, ks) != GGUF_T_FLOAT32 || gguf_arr_n(g, ks) != n)) {
        errf(err, errlen, "tokenizer.ggml.scores: expected %llu float32 values",
               (unsigned long long)n);
        return -1;
    }
    if (ky >= 0 && (gguf_arr_type(g, ky) != GGUF_T_INT32 || gguf_arr_n(g, ky) != n)) {
        errf(err, errlen, "tokenizer.ggml.token_type: expected %llu int32 values",
               (unsigned long long)n);
        return -1;
    }
    v->tok_sym = malloc(n * sizeof *v->tok_sym);
    v->scores = calloc(n, sizeof *v->scores);
    v->ttype = malloc(n);
    if (!v->tok_sym || !v->scores || !v->ttype)
        goto oom;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(g, kt, i);
        char empty[32];
        if (s.len == 0) { /* llama.cpp renames empty tokens */
            snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
            s.ptr = empty;
            s.len = strlen(empty);
        }
        v->tok_sym[i] = strtab_intern(&v->syms, s.ptr, s.len);
        if (v->tok_sym[i] < 0)
            goto oom;
        v->scores[i] = ks >= 0 ? (float)gguf_arr_float(g, ks, i) : 0.0f;
        int64_t t = ky >= 0 ? gguf_arr_int(g, ky, i) : TOK_TYPE_NORMAL;
        v->ttype[i] = (uint8_t)(t >= 0 && t < TOK_TYPE_COUNT ? t : TOK_TYPE_UNDEFINED);
    }
    return 0;
oom:
    errf(err, errlen, "out of memory loading %llu tokens", (unsigned long long)n);
    return -1;
}

static uint32_t merge_slot(const tok_merge *m, uint32_t cap, uint64_t key)
{
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
    while (m[i].rank >= 0 && m[i].key != key)
        i = (i + 1) & (cap - 1);
    return i;
}

static int load_merges(tok_vocab *v, const gguf_ctx *g, char *err, size_t errlen)
{
    int64_t km = gguf_find_key(g, "tokenizer.ggml.merges");
    if (km < 0 || gguf_arr_type(g, km) != GGUF_T_STRING) {
        errf(err, errlen, "tokenizer.ggml.merges: missing or not an array of strings "
               "(required for tokenizer.ggml.model gpt2)");
        return -1;
    }
    uint64_t n = gguf_arr_n(g, km);
    if (n > 0x3FFFFFFF) {
        errf(err, errlen, "tokenizer.ggml.merges: %llu entries is too many", (unsigned long long)n);
        return -1;
    }
    uint32_t cap = 1024;
    while (cap < n * 2 + 2)
        cap *= 2;
    v->merges = malloc((size_t)cap * sizeof *v->merges);
    if (!v->merges)
        goto oom;
    v->merge_cap = cap;
    for (uint32_t i = 0; i < cap; i++)
        v->merges[i] = (tok_merge){ 0, -1, -1 };
    char *buf = NULL;
    size_t bufcap = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(g, km, i);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp)
            continue; /* llama.cpp records ("", ""), which never matches */
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        if (s.len > bufcap) {
            char *nb = realloc(buf, s.len * 2);
            if (!nb) {
                free(buf);
                goto oom;
            }
            buf = nb;
            bufcap = s.len * 2;
        }
        memcpy(buf, s.ptr, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t a = strtab_intern(&v->syms, s.ptr, ll);
        int32_t b = strtab_intern(&v->syms, sp + 1, rl);
        int32_t ab = strtab_intern(&v->syms, buf, ll + rl);
        if (a < 0 || b < 0 || ab < 0) {
            free(buf);
            goto oom;
        }
        uint64_t key = (uint64_t)a << 32 | (uint32_t)b;
        uint32_t slot = merge_slot(v->merges, cap, key);
        if (v->merges[slot].rank < 0) /* the first rank wins, as in llama.cpp */
            v->merges[slot] = (tok_merge){ key, (int32_t)i, ab };
    }
    free(buf);
    return 0;
oom:
    errf(err, errlen, "out of memory loading tokenizer.ggml.merges");
    return -1;
}

/* The merge of symbols a and b, or NULL. */
const tok_merge *tok_merge_find(const tok_vocab *v, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)a << 32 | (uint32_t)b;
    const tok_merge *m = &v->merges[merge_slot(v->merges, v->merge_cap, key)];
    return m->rank >= 0 ? m : NULL;
}

static void set_special(const gguf_ctx *g, const char *key, int32_t n, int32_t *id)
{
    int64_t x = gguf_get_int(g, key, -1);
    if (gguf_find_key(g, key) < 0)
        return;
    if (x < 0 || x >= n) { /* 0xFFFFFFFF is the converters' "none" */
        if (x != 0xFFFFFFFFll)
            log_warn("tokenizer: %s = %lld is out of range (n_vocab %d), keeping %d", key,
                 (long long)x, n, *id);
        return;
    }
    *id = (int32_t)x;
}

static bool add_eog(tok_vocab *v, int32_t id)
{
    if (id == TOK_NULL)
        return true;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return true;
    int32_t *p = realloc(v->eog, (size_t)(v->n_eog + 1) * sizeof *p);
    if (!p)
        return false;
    v->eog = p;
    v->eog[v->n_eog++] = id;
    return true;
}

/* End-of-turn / end-of-generation tokens found by their text, as llama.cpp does;
 * such tokens become control tokens even if the file says otherwise. */
static bool detect_eog(tok_vocab *v)
{
    static const char *const eot_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>",
        "<end_of_turn>", "<|endoftext|>", "<EOT>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>" };
    static const char *const eog_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>",
        "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|fim_pad|>",
        "<|repo_name|>", "<|file_sep|>" };
    for (size_t k = 0; k < sizeof eot_names / sizeof *eot_names && v->eot == TOK_NULL; k++) {
        int32_t id = tok_find(v, eot_names[k], strlen(eot_names[k]));
        if (id != TOK_NULL) {
            v->eot = id;
            v->ttype[id] = TOK_TYPE_CONTROL;
        }
    }
    if (v->eom == TOK_NULL)
        v->eom = tok_find(v, "<|eom_id|>", 10);
    for (size_t k = 0; k < sizeof eog_names / sizeof *eog_names; k++) {
        int32_t id = tok_find(v, eog_names[k], strlen(eog_names[k]));
        if (id != TOK_NULL) {
            if (!add_eog(v, id))
                return false;
            v->ttype[id] = TOK_TYPE_CONTROL;
        }
    }
    return add_eog(v, v->eos) && add_eog(v, v->eot) && add_eog(v, v->eom);
}

static int cmp_special(const void *a, const void *b, void *arg)
{
    const tok_vocab *v = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx, ly;
    strtab_str(&v->syms, v->tok_sym[x], &lx);
    strtab_str(&v->syms, v->tok_sym[y], &ly);
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static bool build_specials(tok_vocab *v)
{
    v->specials = malloc((size_t)v->n_vocab * sizeof *v->specials);
    if (!v->specials)
        return false;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        uint8_t t = v->ttype[id];
        if (t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN)
            v->specials[v->n_specials++] = id;
    }
    qsort_r(v->specials, (size_t)v->n_specials, sizeof *v->specials, cmp_special, v);
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The piece of one token with control tokens rendered (llama.cpp's piece cache),
 * written to out, which has room for cap bytes. A piece is never longer than the
 * token's text: '▁' (3 bytes) becomes 1, an alphabet codepoint 1 byte, <0xXX> 1. */
static size_t make_piece(const tok_vocab *v, int32_t id, char *out, size_t cap)
{
    size_t l;
    const char *t = strtab_str(&v->syms, v->tok_sym[id], &l);
    LLM_ASSERT(l <= cap);
    uint8_t ty = v->ttype[id];
    if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED) {
        memcpy(out, t, l);
        return l;
    }
    if (ty == TOK_TYPE_BYTE && v->type == TOK_VOCAB_SPM) {
        int hi = l == 6 && !memcmp(t, "<0x", 3) && t[5] == '>' ? hexval(t[3]) : -1;
        int lo = hi >= 0 ? hexval(t[4]) : -1;
        if (lo < 0)
            return 0;
        out[0] = (char)(hi << 4 | lo);
        return 1;
    }
    if (ty != TOK_TYPE_NORMAL)
        return 0;
    size_t o = 0;
    if (v->type == TOK_VOCAB_SPM) {
        for (size_t i = 0; i < l; i++) {
            if (i + 2 < l && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                out[o++] = ' ';
                i += 2;
            } else {
                out[o++] = t[i];
            }
        }
        return o;
    }
    for (size_t i = 0; i < l;) { /* BPE: alphabet codepoints back to bytes */
        size_t s = i;
        uint32_t cp = uni_decode(t, l, &i);
        int b = uni_cp_to_byte(cp);
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            memcpy(out + o, t + s, i - s);
            o += i - s;
        }
    }
    return o;
}

/* Every token's piece, back to back. The buffer is sized from the texts of all
 * n_vocab tokens, not from the interned pool: many tokens may share one text. */
static int build_pieces(tok_vocab *v, char *err, size_t errlen)
{
    size_t total = 0, l;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        strtab_str(&v->syms, v->tok_sym[id], &l);
        total += l;
    }
    if (total > UINT32_MAX - 1) {
        errf(err, errlen, "tokenizer.ggml.tokens: %zu bytes of token text in all, more than "
               "the 4 GiB a vocabulary may hold", total);
        return -1;
    }
    v->piece_off = malloc(((size_t)v->n_vocab + 1) * sizeof *v->piece_off);
    v->pieces = malloc(total + 1);
    if (!v->piece_off || !v->pieces) {
        errf(err, errlen, "out of memory for %zu bytes of token pieces", total);
        return -1;
    }
    size_t o = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        v->piece_off[id] = (uint32_t)o;
        o += make_piece(v, id, v->pieces + o, total - o);
    }
    v->piece_off[v->n_vocab] = (uint32_t)o;
    return 0;
}

/* True if U+2581 occurs in no token except in a leading run of them. */
static bool spm_space_only_leading(const tok_vocab *v)
{
    for (int32_t id = 0; id < v->n_vocab; id++) {
        size_t l, k = 0;
        const char *t = strtab_str(&v->syms, v->tok_sym[id], &l);
        while (k + 3 <= l && memcmp(t + k, "\xe2\x96\x81", 3) == 0)
            k += 3;
        for (; k + 3 <= l; k++)
            if (memcmp(t + k, "\xe2\x96\x81", 3) == 0)
                return false;
    }
    return true;
}

static bool build_lookup(tok_vocab *v)
{
    v->sym_tok = malloc((size_t)v->syms.n * sizeof *v->sym_tok);
    if (!v->sym_tok)
        return false;
    for (uint32_t s = 0; s < v->syms.n; s++)
        v->sym_tok[s] = -1;
    for (int32_t id = 0; id < v->n_vocab; id++)
        v->sym_tok[v->tok_sym[id]] = id; /* the last token with a given text wins */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        if (v->type == TOK_VOCAB_BPE) {
            int n = uni_encode(uni_byte_to_cp((uint8_t)b), buf);
            v->byte_sym[b] = strtab_find(&v->syms, buf, (size_t)n);
            v->byte_tok[b] = -1;
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            int32_t id = vocab_find(v, buf, 6);
            if (id == TOK_NULL) {
                buf[0] = (char)b;
                id = vocab_find(v, buf, 1);
            }
            v->byte_tok[b] = id;
            v->byte_sym[b] = -1;
        }
    }
    v->spm_walls = v->type == TOK_VOCAB_SPM && spm_space_only_leading(v);
    return true;
}

static int load_settings(tok_vocab *v, const gguf_ctx *g, char *err, size_t errlen)
{
    const char *model = gguf_get_str(g, "tokenizer.ggml.model", NULL);
    if (!model) {
        errf(err, errlen, "tokenizer.ggml.model: missing");
        return -1;
    }
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre", NULL);
    if (strcmp(model, "llama") == 0) {
        v->type = TOK_VOCAB_SPM;
        v->pre = TOK_PRE_DEFAULT;
        snprintf(v->pre_name, sizeof v->pre_name, "default");
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_space_prefix = true, v->add_bos = true;
        return 0;
    }
    if (strcmp(model, "gpt2") != 0) {
        errf(err, errlen, "tokenizer.ggml.model: '%s' is not supported (expected 'llama' "
               "or 'gpt2')", model);
        return -1;
    }
    v->type = TOK_VOCAB_BPE;
    v->bos = 11, v->eos = 11, v->unk = TOK_NULL;
    v->clean_spaces = true;
    if (!pre) {
        log_warn("tokenizer: tokenizer.ggml.pre is missing, using 'default' (as llama.cpp "
                 "does; generation quality may suffer)");
        pre = "default";
    }
    size_t k, n = sizeof pre_table / sizeof *pre_table;
    for (k = 0; k < n && strcmp(pre_table[k].name, pre) != 0; k++)
        ;
    if (k == n) {
        errf(err, errlen, "tokenizer.ggml.pre: unknown pre-tokenizer '%s'", pre);
        return -1;
    }
    v->pre = pre_table[k].pre;
    v->clean_spaces = pre_table[k].clean_spaces;
    snprintf(v->pre_name, sizeof v->pre_name, "%s", pre);
    if (!strcmp(pre, "chatglm-bpe"))
        v->bos = TOK_NULL; /* llama.cpp: the Llama-3 split, no BOS */
    else if (v->pre == TOK_PRE_LLAMA3 && strcmp(pre, "dbrx") && strcmp(pre, "smaug-bpe"))
        v->ignore_merges = true, v->add_bos = true;
    return 0;
}

/* llama.cpp's test for Phi-3's token attributes: the lowercased general.name. */
static bool phi3_name(const char *name)
{
    char low[256];
    size_t i = 0;
    for (; name && name[i] && i + 1 < sizeof low; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = 0;
    return strstr(low, "phi-3") || strstr(low, "phi3");
}

bool tok_special_rstrip(const tok_vocab *v, int32_t id)
{
    if (!v->special_rstrip)
        return false;
    size_t n = 0;
    const char *s = tok_text(v, id, &n);
    static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
    for (size_t k = 0; k < sizeof keep / sizeof *keep; k++)
        if (n == strlen(keep[k]) && !memcmp(s, keep[k], n))
            return false;
    return true;
}

tok_vocab *tok_vocab_load(const gguf_ctx *g, char *err, size_t errlen)
{
    if (!g) {
        errf(err, errlen, "tok_vocab_load: no GGUF metadata");
        return NULL;
    }
    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        errf(err, errlen, "out of memory");
        return NULL;
    }
    strtab_init(&v->syms);
    v->eot = v->eom = v->pad = TOK_NULL;
    if (load_settings(v, g, err, errlen) || load_tokens(v, g, err, errlen))
        goto fail;
    if (v->type == TOK_VOCAB_BPE && load_merges(v, g, err, errlen))
        goto fail;
    v->add_space_prefix = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    if (v->bos >= v->n_vocab) v->bos = TOK_NULL;
    if (v->eos >= v->n_vocab) v->eos = TOK_NULL;
    if (v->unk >= v->n_vocab) v->unk = TOK_NULL;
    set_special(g, "tokenizer.ggml.bos_token_id", v->n_vocab, &v->bos);
    set_special(g, "tokenizer.ggml.eos_token_id", v->n_vocab, &v->eos);
    set_special(g, "tokenizer.ggml.eot_token_id", v->n_vocab, &v->eot);
    set_special(g, "tokenizer.ggml.eom_token_id", v->n_vocab, &v->eom);
    set_special(g, "tokenizer.ggml.unknown_token_id", v->n_vocab, &v->unk);
    set_special(g, "tokenizer.ggml.padding_token_id", v->n_vocab, &v->pad);
    v->add_bos = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", v->add_bos);
    v->add_eos = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", v->add_eos);
    if ((v->add_bos && v->bos == TOK_NULL) || (v->add_eos && v->eos == TOK_NULL)) {
        errf(err, errlen, "tokenizer.ggml.add_%s_token is set but the vocabulary has no "
               "valid %s token id", v->add_bos && v->bos == TOK_NULL ? "bos" : "eos",
               v->add_bos && v->bos == TOK_NULL ? "bos" : "eos");
        goto fail;
    }
    if (!build_lookup(v) || !detect_eog(v) || !build_specials(v)) {
        errf(err, errlen, "out of memory building the vocabulary tables");
        goto fail;
    }
    if (build_pieces(v, err, errlen) != 0)
        goto fail;
    v->special_rstrip = phi3_name(gguf_get_str(g, "general.name", NULL));
    return v;
fail:
    tok_vocab_free(v);
    return NULL;
}

void tok_vocab_free(tok_vocab *v)
{
    if (!v)
        return;
    strtab_free(&v->syms);
    free(v->tok_sym);
    free(v->sym_tok);
    free(v->scores);
    free(v->ttype);
    free(v->pieces);
    free(v->piece_off);
    free(v->merges);
    free(v->specials);
    free(v->eog);
    free(v);
}

/* ---- accessors ---- */

int32_t tok_n_vocab(const tok_vocab *v) { return v->n_vocab; }
tok_vocab_type tok_type(const tok_vocab *v) { return v->type; }
const char *tok_pre_name(const tok_vocab *v) { return v->pre_name; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int32_t tok_eot(const tok_vocab *v) { return v->eot; }
int32_t tok_unk(const tok_vocab *v) { return v->unk; }
bool tok_add_bos(const tok_vocab *v) { return v->add_bos; }
bool tok_add_eos(const tok_vocab *v) { return v->add_eos; }

bool tok_is_eog(const tok_vocab *v, int32_t id)
{
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return true;
    return false;
}

bool tok_is_control(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && v->ttype[id] == TOK_TYPE_CONTROL;
}

const char *tok_text(const tok_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_vocab)
        return NULL;
    return strtab_str(&v->syms, v->tok_sym[id], len);
}

tok_token_type tok_token_type_of(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab ? (tok_token_type)v->ttype[id] : TOK_TYPE_UNDEFINED;
}

int32_t tok_find(const tok_vocab *v, const char *text, size_t len)
{
    if (!v->sym_tok)
        return TOK_NULL;
    return vocab_find(v, text, len);
}
