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

typedef struct {
    spm_bigram *v;
    size_t      n, cap;
} spm_heap;

/* a ranks above b: higher score, then the leftmost pair. */
static inline int bigram_above(const spm_bigram *a, const spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(spm_heap *h, spm_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        spm_bigram *p = realloc(h->v, cap * sizeof *p);
        if (!p)
            return false;
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_above(&b, &h->v[parent]))
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return true;
}

static spm_bigram heap_pop(spm_heap *h)
{
    spm_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_above(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_above(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static bool try_bigram(const tok_vocab *v, const char *s, const spm_sym *sym, int32_t l,
                       int32_t r, spm_heap *h)
{
    if (l < 0 || r < 0)
        return true;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = vocab_find(v, s + sym[l].start, size);
    if (id == TOK_NULL)
        return true;
    return heap_push(h, (spm_bigram){ v->scores[id], l, r, size });
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

bool tok_spm_encode(const tok_vocab *v, const char *text, size_t len, bool add_prefix, tok_ids *out)
{
    size_t n;
    char *s = spm_escape(text, len, add_prefix, &n);
    spm_sym *sym = s ? malloc((n + 1) * sizeof *sym) : NULL;
    spm_heap h = { 0 };
    bool ok = sym != NULL;
    int32_t ns = 0;
    for (size_t off = 0; ok && off < n; ns++) {
        size_t cl = uni_len_utf8((unsigned char)s[off]);
        if (cl > n - off)
            cl = n - off;
        sym[ns] = (spm_sym){ ns - 1, off + cl < n ? ns + 1 : -1, (uint32_t)off, (uint32_t)cl };
        off += cl;
    }
    for (int32_t i = 1; ok && i < ns; i++)
        ok = try_bigram(v, s, sym, i - 1, i, &h);
    while (ok && h.n) {
        spm_bigram b = heap_pop(&h);
        spm_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side has merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        ok = try_bigram(v, s, sym, l->prev, b.left, &h) &&
             try_bigram(v, s, sym, b.left, l->next, &h);
    }
    for (int32_t i = 0; ok && ns > 0 && i != -1; i = sym[i].next)
        ok = emit_symbol(v, s, &sym[i], out);
    free(h.v);
    free(sym);
    free(s);
    return ok;
}
