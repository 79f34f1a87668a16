/*
 * chat_gemma3.c - Gemma 3's chat template (google/gemma-3-*-it's Jinja template, text
 * contents): an optional first system message becomes a prefix of the first user turn
 * (its content untrimmed, then a blank line); then user and assistant ("model") turns,
 * which must alternate from a user turn, each content trimmed. The BOS the template
 * writes first is left to the tokenizer. Detected by "<start_of_turn>" together with the
 * template's "first_user_prefix"; plain "<start_of_turn>" stays llama.cpp's "gemma".
 */
#include "chat.h"
#include "chat_impl.h"
#include "errcode.h"

int chat_render_gemma3(const chat_msg *m, size_t n, bool gen, sbuf *b, char *err, size_t errlen)
{
    size_t first = n && !strcmp(m[0].role, "system") ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        bool user = !strcmp(m[i].role, "user");
        if (user != ((i - first) % 2 == 0) || (!user && strcmp(m[i].role, "assistant")))
            return errf(err, errlen, "chat_render: gemma3: message %zu (%s): after an optional system "
                        "message, roles must alternate user/assistant/...", i, m[i].role);
    }
    for (size_t i = first; i < n; i++) {
        put(b, !strcmp(m[i].role, "user") ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (i == first && first) {
            put_content(b, m[0].content);
            put(b, "\n\n");
        }
        put_content_trim(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    if (gen)
        put(b, "<start_of_turn>model\n");
    return 0;
}
