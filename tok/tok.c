/*
 * tok.c - tok_encode: special-token partitioning (llama.cpp's tokenizer_st_partition:
 * the special tokens are searched longest first, each splitting every remaining text
 * fragment at its leftmost non-overlapping occurrences), then SPM or BPE on each text
 * fragment, with BOS/EOS as the vocabulary asks. Owner: tok.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "errcode.h"

#define TOK_MAX_INPUT (1u << 30) /* bytes; keeps every internal index in 32 bits */

typedef struct {
    size_t  off, len; /* a text fragment, or */
    int32_t token;    /* a special token (>= 0) */
} fragment;

typedef struct {
    fragment *v;
    size_t    n, cap;
} frag_list;

static bool frag_push(frag_list *l, fragment f)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        fragment *p = realloc(l->v, cap * sizeof *p);
        if (!p)
            return false;
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = f;
    return true;
}

/* Text regions where control-token text stays plain text (sorted, disjoint). */
typedef struct {
    const tok_span *v;
    size_t          n;
} guard;

/* True if [pos, pos + len) overlaps a guarded span. */
static bool guarded(const guard *g, size_t pos, size_t len)
{
    size_t lo = 0, hi = g->n; /* first span ending after pos */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g->v[mid].off + g->v[mid].len <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo < g->n && g->v[lo].len == 0)
        lo++; /* empty spans guard nothing */
    return lo < g->n && g->v[lo].off < pos + len;
}

/* Splits the text fragments of *l at every occurrence of special token id (leftmost
 * first, not overlapping), skipping occurrences that touch a guarded span. */
static bool split_special(const tok_vocab *v, const char *text, int32_t id, const guard *g,
                          frag_list *l)
{
    size_t slen;
    const char *s = tok_text(v, id, &slen);
    bool rstrip = tok_special_rstrip(v, id);
    frag_list out = { 0 };
    bool ok = true;
    for (size_t i = 0; ok && i < l->n; i++) {
        fragment f = l->v[i];
        if (f.token >= 0 || f.len < slen) {
            ok = frag_push(&out, f);
            continue;
        }
        size_t at = f.off, from = f.off, end = f.off + f.len;
        const char *hit;
        while (ok && end - from >= slen && (hit = memmem(text + from, end - from, s, slen))) {
            size_t pos = (size_t)(hit - text);
            if (g && guarded(g, pos, slen)) {
                from = pos + 1;
                continue;
            }
            if (pos > at)
                ok = frag_push(&out, (fragment){ at, pos - at, -1 });
            ok = ok && frag_push(&out, (fragment){ 0, 0, id });
            at = pos + slen;
            while (rstrip && at < end && isspace((unsigned char)text[at]))
                at++; /* Phi-3: the whitespace after it goes (llama.cpp's RSTRIP) */
            from = at;
        }
        if (ok && at < end)
            ok = frag_push(&out, (fragment){ at, end - at, -1 });
    }
    free(l->v);
    *l = out;
    return ok;
}

static bool partition(const tok_vocab *v, const char *text, size_t len, bool parse_special,
                      const guard *g, frag_list *l)
{
    if (len && !frag_push(l, (fragment){ 0, len, -1 }))
        return false;
    for (int32_t k = 0; k < v->n_specials && l->n; k++) {
        int32_t id = v->specials[k];
        uint8_t t = v->ttype[id];
        bool parse_only = t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN;
        if (!parse_special && parse_only)
            continue; /* user-defined tokens are always split out, as in llama.cpp */
        if (!split_special(v, text, id, parse_only ? g : NULL, l))
            return false;
    }
    return true;
}

static int encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
                  bool parse_special, const guard *g, int32_t **ids, size_t *n, char *err,
                  size_t errlen)
{
    *ids = NULL;
    *n = 0;
    if (!v || (!text && len))
        return errf(err, errlen, "tok_encode: %s is NULL", v ? "text" : "vocabulary");
    if (len > TOK_MAX_INPUT)
        return errf(err, errlen, "tok_encode: input of %zu bytes is over the %u byte limit",
                          len, TOK_MAX_INPUT);
    frag_list frags = { 0 };
    tok_ids out = { 0 };
    bool ok = partition(v, text, len, parse_special, g, &frags);
    if (ok && add_special && v->add_bos)
        ok = ids_push(&out, v->bos);
    bool prev_special = true; /* SPM: a space prefix goes after BOS / a special token */
    for (size_t i = 0; ok && i < frags.n; i++) {
        const fragment *f = &frags.v[i];
        if (f->token >= 0) {
            ok = ids_push(&out, f->token);
            prev_special = true;
        } else if (v->type == TOK_VOCAB_SPM) {
            ok = tok_spm_encode(v, text + f->off, f->len, v->add_space_prefix && prev_special, &out);
            prev_special = false;
        } else {
            ok = tok_bpe_encode(v, text + f->off, f->len, &out);
        }
    }
    if (ok && add_special && v->add_eos)
        ok = ids_push(&out, v->eos);
    free(frags.v);
    if (!ok) {
        free(out.v);
        return errf(err, errlen, "tok_encode: out of memory on %zu bytes of input", len);
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
               bool parse_special, int32_t **ids, size_t *n, char *err, size_t errlen)
{
    return encode(v, text, len, add_special, parse_special, NULL, ids, n, err, errlen);
}

int tok_encode_guarded(const tok_vocab *v, const char *text, size_t len, bool add_special,
                       const tok_span *plain, size_t n_plain, int32_t **ids, size_t *n,
                       char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    if (n_plain && !plain)
        return errf(err, errlen, "tok_encode_guarded: %zu spans but no span array", n_plain);
    for (size_t i = 0; i < n_plain; i++) {
        if (plain[i].off > len || plain[i].len > len - plain[i].off ||
            (i && plain[i].off < plain[i - 1].off + plain[i - 1].len))
            return errf(err, errlen, "tok_encode_guarded: span %zu (%zu+%zu) is out of "
                              "order or past the %zu-byte text", i, plain[i].off, plain[i].len, len);
    }
    guard g = { plain, n_plain };
    return encode(v, text, len, add_special, true, &g, ids, n, err, errlen);
}
