/*
 * tok_stream.c - ids back to text: single pieces, whole sequences, and the streaming
 * detokenizer that holds back the bytes of a UTF-8 character until it is complete.
 * Owner: tok.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "errcode.h"

static bool piece_hidden(const tok_vocab *v, int32_t id, bool render_special)
{
    uint8_t t = v->ttype[id];
    return !render_special && (t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN);
}

int tok_piece(const tok_vocab *v, int32_t id, bool render_special, char *buf, size_t cap)
{
    if (id < 0 || id >= v->n_vocab)
        return -1;
    if (piece_hidden(v, id, render_special))
        return 0;
    size_t len = v->piece_off[id + 1] - v->piece_off[id];
    if (buf && cap) memcpy(buf, v->pieces + v->piece_off[id], len < cap ? len : cap); /* NULL, 0: the length only */
    return (int)len;
}

/* The piece of id (already range-checked), without copying. */
static const char *piece_ref(const tok_vocab *v, int32_t id, bool render_special, size_t *len)
{
    *len = piece_hidden(v, id, render_special) ? 0 : v->piece_off[id + 1] - v->piece_off[id];
    return v->pieces + v->piece_off[id];
}

char *tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, bool render_special,
                 bool keep_leading_space, size_t *len, char *err, size_t errlen)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n_vocab) {
            errf(err, errlen, "tok_decode: id %d at position %zu is out of range "
                 "(n_vocab %d)", ids[i], i, v->n_vocab);
            return NULL;
        }
        total += v->piece_off[ids[i] + 1] - v->piece_off[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) {
        errf(err, errlen, "tok_decode: out of memory for %zu bytes", total);
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *p = piece_ref(v, ids[i], render_special, &l);
        if (i == 0 && v->add_space_prefix && !keep_leading_space && l && p[0] == ' ')
            p++, l--; /* llama_detokenize drops the space the encoder added */
        memcpy(out + o, p, l);
        o += l;
    }
    out[o] = 0;
    *len = o;
    return out;
}

/* ---- streaming ---- */

struct tok_stream {
    const tok_vocab *v;
    int    flags;
    bool   first;      /* no id pushed yet */
    char   pend[4];    /* bytes of an incomplete character */
    size_t n_pend;
    char  *out;
    size_t out_cap;
};

size_t tok_stream_pending(const tok_stream *s) { return s->n_pend; }

tok_stream *tok_stream_new(const tok_vocab *v, int flags)
{
    tok_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->v = v;
    s->flags = flags;
    s->first = true;
    return s;
}

void tok_stream_free(tok_stream *s)
{
    if (!s)
        return;
    free(s->out);
    free(s);
}

static bool out_reserve(tok_stream *s, size_t need)
{
    if (need <= s->out_cap)
        return true;
    size_t cap = s->out_cap ? s->out_cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(s->out, cap);
    if (!p)
        return false;
    s->out = p;
    s->out_cap = cap;
    return true;
}

/* Length of the valid UTF-8 sequence at b[0..n): >0 complete, 0 a valid but
 * incomplete prefix, -1 invalid (strict: no overlongs, surrogates or > U+10FFFF). */
static int utf8_seq(const unsigned char *b, size_t n)
{
    unsigned c = b[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    else if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0;
        unsigned x = b[i];
        if (i == 1 ? (x < lo || x > hi) : (x & 0xC0) != 0x80)
            return -1;
    }
    return need;
}

/* Appends bytes to the output, holding back an incomplete final character. */
static bool feed(tok_stream *s, size_t *o, const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        s->pend[s->n_pend++] = p[i];
        for (;;) {
            int k = utf8_seq((const unsigned char *)s->pend, s->n_pend);
            if (k == 0)
                break;
            if (!out_reserve(s, *o + 4))
                return false;
            size_t used = k > 0 ? (size_t)k : 1;
            if (k > 0) {
                memcpy(s->out + *o, s->pend, used);
                *o += used;
            } else {
                memcpy(s->out + *o, "\xef\xbf\xbd", 3); /* U+FFFD for the bad byte */
                *o += 3;
            }
            memmove(s->pend, s->pend + used, s->n_pend - used);
            s->n_pend -= used;
            if (!s->n_pend)
                break;
        }
    }
    return true;
}

const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len)
{
    size_t o = 0;
    bool ok;
    if (id < 0 || id >= s->v->n_vocab) {
        ok = feed(s, &o, "\xef\xbf\xbd", 3);
    } else {
        size_t l;
        const char *p = piece_ref(s->v, id, s->flags & TOK_STREAM_RENDER_SPECIAL, &l);
        if (s->first && s->v->add_space_prefix && !(s->flags & TOK_STREAM_KEEP_SPACE) && l &&
            p[0] == ' ')
            p++, l--;
        ok = feed(s, &o, p, l);
    }
    s->first = false;
    *len = ok ? o : 0;
    return s->out ? s->out : "";
}

const char *tok_stream_flush(tok_stream *s, size_t *len)
{
    size_t o = 0;
    if (s->n_pend && out_reserve(s, 3)) {
        memcpy(s->out, "\xef\xbf\xbd", 3);
        o = 3;
    }
    s->n_pend = 0;
    s->first = true;
    *len = o;
    return s->out ? s->out : "";
}
