/*
 * tok_bpe.c - byte-level BPE as llama.cpp's llm_tokenizer_bpe_session does it: the
 * text is decoded to codepoints (bad bytes -> U+FFFD), split into words by the
 * pre-tokenizer, each word's UTF-8 bytes become GPT-2 alphabet symbols, and the
 * adjacent pair with the lowest merge rank is merged (ties: leftmost) until no pair
 * has a merge. Symbols are interned ids, so merging and staleness checks are integer
 * compares. Owner: tok.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "unicode.h"

typedef struct {
    int32_t prev, next;
    int32_t sym;   /* interned text, -1 if it is in no merge and no token */
    uint32_t start, n; /* bytes of the word */
} bpe_sym;

typedef struct {
    int32_t rank, left, right, lsym, rsym;
} bpe_bigram;

static inline int bigram_above(const bpe_bigram *a, const bpe_bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TOK_HEAP_DEFINE(bpe_heap, bpe_bigram, bigram_above, 64)

/* Scratch space reused across the words of one call. */
typedef struct {
    bpe_sym *sym;
    size_t   sym_cap;
    char    *mapped;
    size_t   mapped_cap;
    bpe_heap heap;
} bpe_work;

static bool try_bigram(const tok_vocab *v, bpe_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0 || w->sym[l].sym < 0 || w->sym[r].sym < 0)
        return true;
    const tok_merge *m = tok_merge_find(v, w->sym[l].sym, w->sym[r].sym);
    if (!m)
        return true;
    return bpe_heap_push(&w->heap, (bpe_bigram){ m->rank, l, r, w->sym[l].sym, w->sym[r].sym });
}

/* The word's bytes in the GPT-2 alphabet, in w->mapped; its length, or -1 on OOM. */
static long map_bytes(bpe_work *w, const unsigned char *b, size_t n)
{
    if (n * 2 > w->mapped_cap) {
        char *p = realloc(w->mapped, n * 2 + 16);
        if (!p)
            return -1;
        w->mapped = p;
        w->mapped_cap = n * 2 + 16;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)uni_encode(uni_byte_to_cp(b[i]), w->mapped + o);
    return (long)o;
}

/* A symbol that is not a token: llama.cpp emits the single-byte tokens of its
 * alphabet text, skipping bytes that are not tokens. */
static bool emit_fallback(const tok_vocab *v, bpe_work *w, const unsigned char *b, size_t n,
                          tok_ids *out)
{
    long m = map_bytes(w, b, n);
    if (m < 0)
        return false;
    for (long i = 0; i < m; i++) {
        int32_t id = vocab_find(v, w->mapped + i, 1);
        if (id != TOK_NULL && !ids_push(out, id))
            return false;
    }
    return true;
}

static bool bpe_word(const tok_vocab *v, bpe_work *w, const unsigned char *b, size_t n, tok_ids *out)
{
    if (v->ignore_merges) { /* Llama 3: a word that is a token is taken whole */
        long m = map_bytes(w, b, n);
        if (m < 0)
            return false;
        int32_t id = vocab_find(v, w->mapped, (size_t)m);
        if (id != TOK_NULL)
            return ids_push(out, id);
    }
    if (n > w->sym_cap) {
        bpe_sym *p = realloc(w->sym, n * sizeof *p);
        if (!p)
            return false;
        w->sym = p;
        w->sym_cap = n;
    }
    for (size_t i = 0; i < n; i++)
        w->sym[i] = (bpe_sym){ (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1,
                               v->byte_sym[b[i]], (uint32_t)i, 1 };
    w->heap.n = 0;
    bool ok = true;
    for (size_t i = 1; ok && i < n; i++)
        ok = try_bigram(v, w, (int32_t)i - 1, (int32_t)i);
    while (ok && w->heap.n) {
        bpe_bigram g = bpe_heap_pop(&w->heap);
        bpe_sym *l = &w->sym[g.left], *r = &w->sym[g.right];
        if (l->n == 0 || r->n == 0 || l->sym != g.lsym || r->sym != g.rsym || l->next != g.right)
            continue; /* stale */
        l->sym = tok_merge_find(v, g.lsym, g.rsym)->result;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = g.left;
        ok = try_bigram(v, w, l->prev, g.left) && try_bigram(v, w, g.left, l->next);
    }
    for (int32_t i = 0; ok && n > 0 && i != -1; i = w->sym[i].next) {
        const bpe_sym *s = &w->sym[i];
        int32_t id = s->sym >= 0 ? v->sym_tok[s->sym] : TOK_NULL;
        ok = id != TOK_NULL ? ids_push(out, id) : emit_fallback(v, w, b + s->start, s->n, out);
    }
    return ok;
}

/* Words repeat in real text, and a word's ids depend only on its bytes: a small
 * direct-mapped cache of short words skips their merging on long inputs. */
#define CACHE_SLOTS 4096
#define CACHE_WORD  30
#define CACHE_IDS   8
typedef struct {
    uint8_t wlen, n_ids; /* wlen 0 = empty */
    char    word[CACHE_WORD];
    int32_t ids[CACHE_IDS];
} cache_slot;

static cache_slot *cache_find(cache_slot *c, const unsigned char *b, size_t n, bool *hit)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    cache_slot *e = &c[(h ^ (h >> 15)) & (CACHE_SLOTS - 1)];
    *hit = e->wlen == n && memcmp(e->word, b, n) == 0;
    return e;
}

static bool cached_word(const tok_vocab *v, bpe_work *w, cache_slot *cache,
                        const unsigned char *b, size_t n, tok_ids *out)
{
    if (!cache || n == 0 || n > CACHE_WORD)
        return bpe_word(v, w, b, n, out);
    bool hit;
    cache_slot *e = cache_find(cache, b, n, &hit);
    if (hit) {
        for (int i = 0; i < e->n_ids; i++)
            if (!ids_push(out, e->ids[i]))
                return false;
        return true;
    }
    size_t before = out->n;
    if (!bpe_word(v, w, b, n, out))
        return false;
    if (out->n - before <= CACHE_IDS) {
        e->wlen = (uint8_t)n;
        e->n_ids = (uint8_t)(out->n - before);
        memcpy(e->word, b, n);
        memcpy(e->ids, out->v + before, e->n_ids * sizeof *e->ids);
    }
    return true;
}

bool tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out)
{
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    unsigned char *word = malloc(len * 4 + 4);
    cache_slot *cache = len >= 16384 ? calloc(CACHE_SLOTS, sizeof *cache) : NULL;
    uint32_t *lens = NULL;
    size_t n_cps = 0, n_words = 0;
    bpe_work w = { 0 };
    bool ok = cps && word;
    for (size_t off = 0; ok && off < len;)
        cps[n_cps++] = uni_decode(text, len, &off);
    ok = ok && tok_pre_split(v->pre, cps, n_cps, &lens, &n_words);
    size_t c = 0;
    for (size_t k = 0; ok && k < n_words; k++) {
        size_t nb = 0;
        for (uint32_t j = 0; j < lens[k]; j++, c++)
            nb += (size_t)uni_encode(cps[c], (char *)word + nb);
        ok = cached_word(v, &w, cache, word, nb, out);
    }
    free(cache);
    free(w.sym);
    free(w.mapped);
    free(w.heap.v);
    free(lens);
    free(word);
    free(cps);
    return ok;
}
