/*
 * chat_impl.h - what chat.c and chat_tools.c share: the growing output buffer that
 * remembers where message contents went (the spans tok_encode_guarded keeps as text).
 * Owner: tok (tokenizerd/chat.c). Not for other modules.
 */
#ifndef LLM_CHAT_IMPL_H
#define LLM_CHAT_IMPL_H

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "tok.h"

typedef struct {
    char     *s;
    size_t    n, cap;
    bool      oom;
    tok_span *spans;  /* where message contents went, in order */
    size_t    n_spans, cap_spans;
} sbuf;

static inline void put_n(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static inline void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

/* s without leading and trailing ASCII whitespace (llama.cpp's trim). */
static inline void put_trim(sbuf *b, const char *s)
{
    size_t a = 0, e = strlen(s);
    while (a < e && isspace((unsigned char)s[a]))
        a++;
    while (e > a && isspace((unsigned char)s[e - 1]))
        e--;
    put_n(b, s + a, e - a);
}

static inline void add_span(sbuf *b, size_t from)
{
    if (b->oom || b->n == from)
        return;
    if (b->n_spans == b->cap_spans) {
        size_t cap = b->cap_spans ? b->cap_spans * 2 : 16;
        tok_span *p = realloc(b->spans, cap * sizeof *p);
        if (!p) {
            b->oom = true;
            return;
        }
        b->spans = p;
        b->cap_spans = cap;
    }
    b->spans[b->n_spans++] = (tok_span){ from, b->n - from };
}

/* Message content: written like put / put_trim, and remembered as a span. */
static inline void put_content(sbuf *b, const char *s)
{
    size_t from = b->n;
    put(b, s);
    add_span(b, from);
}

static inline void put_content_trim(sbuf *b, const char *s)
{
    size_t from = b->n;
    put_trim(b, s);
    add_span(b, from);
}

/* Qwen3's template (chat_qwen3.c); think: false renders enable_thinking=false. */
void chat_render_qwen3(const chat_msg *m, size_t n, bool gen, bool think, sbuf *b);
/* Gemma 3's template (chat_gemma3.c); -1 and err when the roles do not alternate. */
int chat_render_gemma3(const chat_msg *m, size_t n, bool gen, sbuf *b, char *err, size_t errlen);

#endif
