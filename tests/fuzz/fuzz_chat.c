/*
 * fuzz_chat.c - libFuzzer harness: the chat-template renderer. Byte 0 picks the
 * template (of CHAT_TMPL_COUNT), byte 1 whether to add the generation prompt; the rest
 * is NUL-separated role, content, role, content... (roles may be anything). Renders with
 * chat_render_spans and checks that the spans lie inside the output, in order; the whole
 * input is also given to chat_template_detect as a Jinja source. Built and run by
 * `make fuzz`; seeds: conversations for every template (fuzz_seeds chat).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    char *buf = malloc(size + 1); /* NUL-terminated copy: strings end at each NUL */
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    chat_template_detect(buf + 2);
    chat_msg msgs[16];
    size_t n = 0;
    for (size_t off = 2; off < size && n < 16;) {
        const char *role = buf + off;
        off += strlen(role) + 1;
        const char *content = off <= size ? buf + off : "";
        off += strlen(content) + 1;
        msgs[n++] = (chat_msg){role, content};
    }
    char *out = NULL, err[256];
    tok_span *spans = NULL;
    size_t ns = 0;
    if (chat_render_spans((chat_tmpl)(data[0] % CHAT_TMPL_COUNT), msgs, n, data[1] & 1, &out, &spans, &ns, err,
                          sizeof err) == 0) {
        size_t len = strlen(out), end = 0;
        for (size_t i = 0; i < ns; i++) {
            if (spans[i].off < end || spans[i].off + spans[i].len > len) abort(); /* a span outside the text */
            end = spans[i].off + spans[i].len;
        }
    }
    free(out);
    free(spans);
    free(buf);
    return 0;
}
