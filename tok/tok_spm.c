/*
 * tok_spm.c - SentencePiece BPE by score, as llama.cpp's llm_tokenizer_spm does it:
 * spaces become U+2581, the text is cut into UTF-8 characters, and the adjacent pair
 * whose concatenation is the best-scoring token is merged until no pair is a token
 * (ties go to the leftmost pair). What is left and not a token falls back to its
 * bytes (<0xXX>). A heap keeps this O(n log n) on long inputs. Owner: tok.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "unicode.h"

typedef struct {
    int32_t  prev, next; /* neighbours in the live chain, -1 at the ends */
    uint32_t start, n;   /* bytes of the escaped text; n == 0 once merged away */
} spm_sym;

typedef struct {
    float    score;
    int32_t  left, right;
    uint32_t size;       /* bytes of the pair when it was queued (staleness check) */
} spm_bigram;

/* a ranks above b: higher score, then the leftmost pair. */
static inline int bigram_above(const spm_bigram *a, const spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TOK_HEAP_DEFINE(spm_heap, spm_bigram, bigram_above, 256)

static bool try_bigram(const tok_vocab *v, const char *s, const spm_sym *sym, int32_t l,
                       int32_t r, spm_heap *h)
{
    if (l < 0 || r < 0)
        return true;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = vocab_find(v, s + sym[l].start, size);
    if (id == TOK_NULL)
        return true;
    return spm_heap_push(h, (spm_bigram){ v->scores[id], l, r, size });
}

static bool emit_symbol(const tok_vocab *v, const char *s, const spm_sym *sym, tok_ids *out)
{
    int32_t id = vocab_find(v, s + sym->start, sym->n);
    if (id != TOK_NULL)
        return ids_push(out, id);
    for (uint32_t i = 0; i < sym->n; i++) { /* byte fallback */
        int32_t b = v->byte_tok[(unsigned char)s[sym->start + i]];
        if (!ids_push(out, b != TOK_NULL ? b : v->unk != TOK_NULL ? v->unk : 0))
            return false;
    }
    return true;
}

/* Spaces -> U+2581, with the optional leading one. NULL on OOM. */
static char *spm_escape(const char *text, size_t len, bool add_prefix, size_t *out_len)
{
    size_t spaces = add_prefix;
    for (size_t i = 0; i < len; i++)
        spaces += text[i] == ' ';
    char *s = malloc(len + 2 * spaces + 3 + 1);
    if (!s)
        return NULL;
    size_t o = 0;
    if (add_prefix) {
        memcpy(s, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            s[o++] = text[i];
        }
    }
    *out_len = o;
    return s;
}

/* Scratch space reused across the segments of one call. */
typedef struct {
    spm_sym *sym;
    size_t   sym_cap;
    spm_heap heap;
} spm_work;

/* Merges and emits the characters of s[a..b) (a run of whole characters). */
static bool spm_segment(const tok_vocab *v, const char *s, size_t a, size_t b, size_t n,
                        spm_work *w, tok_ids *out)
{
    if (b - a > w->sym_cap) {
        spm_sym *p = realloc(w->sym, (b - a) * sizeof *p);
        if (!p)
            return false;
        w->sym = p;
        w->sym_cap = b - a;
    }
    spm_sym *sym = w->sym;
    int32_t ns = 0;
    for (size_t off = a; off < b; ns++) {
        size_t cl = uni_len_utf8((unsigned char)s[off]);
        if (cl > n - off)
            cl = n - off;
        sym[ns] = (spm_sym){ ns - 1, off + cl < b ? ns + 1 : -1, (uint32_t)off, (uint32_t)cl };
        off += cl;
    }
    w->heap.n = 0;
    bool ok = true;
    for (int32_t i = 1; ok && i < ns; i++)
        ok = try_bigram(v, s, sym, i - 1, i, &w->heap);
    while (ok && w->heap.n) {
        spm_bigram g = spm_heap_pop(&w->heap);
        spm_sym *l = &sym[g.left], *r = &sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size)
            continue; /* stale: one side has merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = g.left;
        ok = try_bigram(v, s, sym, l->prev, g.left, &w->heap) &&
             try_bigram(v, s, sym, g.left, l->next, &w->heap);
    }
    for (int32_t i = 0; ok && ns > 0 && i != -1; i = sym[i].next)
        ok = emit_symbol(v, s, &sym[i], out);
    return ok;
}

static inline bool is_space_sym(const char *s, size_t off, size_t n)
{
    return n - off >= 3 && memcmp(s + off, "\xe2\x96\x81", 3) == 0;
}

/* When no token has U+2581 after something else (v->spm_walls), no merge can cross
 * the start of a run of U+2581 that follows another character, so each such word is
 * merged on its own: the same result, with small cache-friendly heaps. */
bool tok_spm_encode(const tok_vocab *v, const char *text, size_t len, bool add_prefix, tok_ids *out)
{
    size_t n;
    char *s = spm_escape(text, len, add_prefix, &n);
    if (!s)
        return false;
    spm_work w = { 0 };
    bool ok = true, prev_space = false;
    size_t seg = 0;
    for (size_t off = 0; ok && off < n;) {
        size_t cl = uni_len_utf8((unsigned char)s[off]);
        if (cl > n - off)
            cl = n - off;
        bool space = cl == 3 && is_space_sym(s, off, n);
        if (v->spm_walls && space && !prev_space && off > seg) {
            ok = spm_segment(v, s, seg, off, n, &w, out);
            seg = off;
        }
        prev_space = space;
        off += cl;
    }
    if (ok && n > seg)
        ok = spm_segment(v, s, seg, n, n, &w, out);
    free(w.heap.v);
    free(w.sym);
    free(s);
    return ok;
}
