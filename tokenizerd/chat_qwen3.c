/*
 * chat_qwen3.c - Qwen3's chat template (Qwen/Qwen3-0.6B's Jinja template, without tools):
 * ChatML turns; an assistant turn keeps only the text after its last "</think>", except
 * after the last user turn, where its reasoning is written back in a <think> block (always
 * for the final message); "qwen3-nothink" (enable_thinking=false) opens the generated turn
 * with an empty <think> block. Chosen by name (--chat-template qwen3), or detected from
 * the template on a qwen3/qwen3moe model (chat_template_detect_arch; tiny-qwen2 carries it
 * too and stays ChatML). A chat with tools is rendered as ChatML (chat_render_tools).
 */
#include "chat.h"
#include "chat_impl.h"

/* n bytes of s as message content (a span). */
static void content_n(sbuf *b, const char *s, size_t n)
{
    size_t from = b->n;
    put_n(b, s, n);
    add_span(b, from);
}

static const char *last_of(const char *s, const char *needle)
{
    const char *r = NULL;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) r = p;
    return r;
}

/* An assistant turn: reasoning and answer split as the template splits them. */
static void qwen3_assistant(const char *c, bool after_query, bool last, sbuf *b)
{
    const char *end = last_of(c, "</think>");
    const char *ans = c, *rs = c, *re = c;
    if (end) {
        ans = end + 8;
        while (*ans == '\n') ans++;
        const char *first_end = strstr(c, "</think>");
        re = first_end;
        while (re > c && re[-1] == '\n') re--;
        for (const char *p = c; (p = strstr(p, "<think>")) && p < re; p++) rs = p + 7;
        while (rs < re && *rs == '\n') rs++;
    }
    put(b, "<|im_start|>assistant\n");
    if (after_query && (last || re > rs)) {
        put(b, "<think>\n");
        content_n(b, rs, (size_t)(re - rs));
        put(b, "\n</think>\n\n");
        while (*ans == '\n') ans++;
    }
    put_content(b, ans);
    put(b, "<|im_end|>\n");
}

void chat_render_qwen3(const chat_msg *m, size_t n, bool gen, bool think, sbuf *b)
{
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;) {
        if (strcmp(m[i].role, "user") == 0) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].role, "assistant") == 0) {
            qwen3_assistant(m[i].content, i > last_query, i + 1 == n, b);
            continue;
        }
        put(b, "<|im_start|>"), put(b, m[i].role), put(b, "\n");
        put_content(b, m[i].content), put(b, "<|im_end|>\n");
    }
    if (gen) put(b, think ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}
