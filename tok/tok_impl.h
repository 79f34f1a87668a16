/*
 * tok_impl.h - internals shared by the tok_*.c files: the vocabulary struct, the
 * string-interning table, and the per-algorithm entry points. Not a public API:
 * callers use tok.h. Owner: tok.
 */
#ifndef LLM_TOK_IMPL_H
#define LLM_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok.h"

/* Interned byte strings -> dense ids 0..n-1. Invariant: cap is a power of two and
 * at least twice n; a slot holds the upper 32 hash bits << 32 | id+1 (0 = empty). */
typedef struct {
    char     *pool;    /* all strings back to back */
    size_t    pool_len, pool_cap;
    uint64_t *off_len; /* per id: offset << 24 | length (strings < 16 MB) */
    uint64_t *slots;
    uint32_t  n, cap;
} tok_strtab;

void    strtab_init(tok_strtab *t);
void    strtab_free(tok_strtab *t);
/* The id of s, adding it if absent; -1 on OOM or if it is too long. */
int32_t strtab_intern(tok_strtab *t, const char *s, size_t len);
/* The id of s or -1. */
int32_t strtab_find(const tok_strtab *t, const char *s, size_t len);
static inline const char *strtab_str(const tok_strtab *t, int32_t id, size_t *len)
{
    uint64_t ol = t->off_len[id];
    *len = (size_t)(ol & 0xFFFFFF);
    return t->pool + (ol >> 24);
}

/* Pre-tokenizer families (llama.cpp's llama_vocab_pre_type, folded by regex). */
typedef enum {
    TOK_PRE_DEFAULT, TOK_PRE_LLAMA3, TOK_PRE_QWEN2, TOK_PRE_GPT2, TOK_PRE_STARCODER,
    TOK_PRE_FALCON, TOK_PRE_DEEPSEEK_LLM, TOK_PRE_DEEPSEEK_CODER, TOK_PRE_COUNT
} tok_pre;

/* A BPE merge: rank and the symbol it produces. */
typedef struct {
    uint64_t key;   /* left sym << 32 | right sym; 0 with rank -1 = empty slot */
    int32_t  rank;
    int32_t  result;
} tok_merge;

struct tok_vocab {
    tok_vocab_type type;
    tok_pre        pre;
    char           pre_name[40];
    int32_t        n_vocab;

    tok_strtab     syms;      /* every token text (and, for BPE, every merge string) */
    int32_t       *tok_sym;   /* [n_vocab] the interned text of each token */
    int32_t       *sym_tok;   /* [syms.n] the token with that text (last one wins), or -1 */
    float         *scores;    /* [n_vocab] SPM merge priorities (0 when absent) */
    uint8_t       *ttype;     /* [n_vocab] tok_token_type, after llama.cpp's overrides */

    char          *pieces;    /* all pieces (render_special form), back to back */
    uint32_t      *piece_off; /* [n_vocab + 1] */

    tok_merge     *merges;    /* open-addressed, merge_cap slots (BPE only) */
    uint32_t       merge_cap;
    int32_t        byte_sym[256]; /* BPE: the symbol of each byte's alphabet char, or -1 */
    int32_t        byte_tok[256]; /* SPM: <0xXX> (or the byte itself) token, or -1 */

    int32_t       *specials;  /* control / user-defined / unknown ids, longest text first */
    int32_t        n_specials;
    int32_t       *eog;       /* end-of-generation ids */
    int32_t        n_eog;

    int32_t bos, eos, eot, eom, unk, pad;
    bool    add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
    bool    spm_walls; /* no token has U+2581 after another character (tok_spm.c) */
    bool    special_rstrip; /* Phi-3 (tok_special_rstrip) */
};

/* A growable id buffer. */
typedef struct {
    int32_t *v;
    size_t   n, cap;
} tok_ids;

bool ids_push(tok_ids *o, int32_t id);

/* Tokenizes one raw-text fragment (no special tokens inside) and appends the ids.
 * false on OOM. */
bool tok_spm_encode(const tok_vocab *v, const char *text, size_t len, bool add_prefix, tok_ids *out);
bool tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);

/* Pre-tokenizer: splits cps[0..n) into words, writing word lengths (in codepoints)
 * to *lens (malloc'd, caller frees). false on OOM. */
bool tok_pre_split(tok_pre pre, const uint32_t *cps, size_t n, uint32_t **lens, size_t *n_lens);

/* The merge of BPE symbols a then b, or NULL. */
const tok_merge *tok_merge_find(const tok_vocab *v, int32_t a, int32_t b);

/* The token whose text is s, or TOK_NULL. */
static inline int32_t vocab_find(const tok_vocab *v, const char *s, size_t len)
{
    int32_t sym = strtab_find(&v->syms, s, len);
    return sym < 0 ? TOK_NULL : v->sym_tok[sym];
}

/* A binary heap of T whose top is the element that ranks highest by
 * ABOVE(const T *a, const T *b) (a ranks above b). Defines the struct HEAP
 * { T *v; size_t n, cap; } (zero-initialised = empty; free(h.v) when done) and
 *   static bool HEAP##_push(HEAP *h, T x)   false when out of memory
 *   static T    HEAP##_pop(HEAP *h)         h->n must be > 0
 * Used by the SPM and BPE merge loops, which differ only in what ranks first. */
#define TOK_HEAP_DEFINE(HEAP, T, ABOVE, FIRST_CAP)                                         \
    typedef struct {                                                                      \
        T     *v;                                                                         \
        size_t n, cap;                                                                    \
    } HEAP;                                                                               \
    static bool HEAP##_push(HEAP *h, T x)                                                 \
    {                                                                                     \
        if (h->n == h->cap) {                                                             \
            size_t cap = h->cap ? h->cap * 2 : (FIRST_CAP);                               \
            T *p = realloc(h->v, cap * sizeof *p);                                        \
            if (!p) return false;                                                         \
            h->v = p;                                                                     \
            h->cap = cap;                                                                 \
        }                                                                                 \
        size_t i = h->n++;                                                                \
        while (i > 0) {                                                                   \
            size_t parent = (i - 1) / 2;                                                  \
            if (!ABOVE(&x, &h->v[parent])) break;                                         \
            h->v[i] = h->v[parent];                                                       \
            i = parent;                                                                   \
        }                                                                                 \
        h->v[i] = x;                                                                      \
        return true;                                                                      \
    }                                                                                     \
    static T HEAP##_pop(HEAP *h)                                                          \
    {                                                                                     \
        T top = h->v[0], last = h->v[--h->n];                                             \
        size_t i = 0;                                                                     \
        for (;;) {                                                                        \
            size_t c = 2 * i + 1;                                                         \
            if (c >= h->n) break;                                                         \
            if (c + 1 < h->n && ABOVE(&h->v[c + 1], &h->v[c])) c++;                       \
            if (!ABOVE(&h->v[c], &last)) break;                                           \
            h->v[i] = h->v[c];                                                            \
            i = c;                                                                        \
        }                                                                                 \
        if (h->n) h->v[i] = last;                                                         \
        return top;                                                                       \
    }

/* Whether whitespace after special token id is dropped when it is parsed: llama.cpp marks
 * the special tokens of a model whose general.name holds "phi-3" or "phi3" so (RSTRIP),
 * except <unk>, <s> and <|endoftext|>. */
bool tok_special_rstrip(const tok_vocab *v, int32_t id);

#endif
