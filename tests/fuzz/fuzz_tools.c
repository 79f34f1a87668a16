/*
 * fuzz_tools.c - libFuzzer harness: function calling. Byte 0 picks the call syntax (of
 * OAIT_FAMILY_COUNT) and whether calls are streamed as they come, byte 1 the size of the
 * pieces; the rest is generated text, fed to oait_parser piece by piece (content and
 * arguments must stay inside the text; every call has a name and an id). The same
 * bytes then serve as a tool definition, a call's arguments and a tool result for
 * chat_render_tools with every template that renders tools (spans inside the output, in
 * order). Built and run by `make fuzz`; seeds: calls in each syntax (fuzz_seeds tools).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "oai_tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t total;

static void on_content(void *cls, const char *text, size_t n)
{
    if (n && !text) abort();
    total += n;
}

static void on_call(void *cls, int index, const oait_call *c)
{
    if (index < 0 || !c->id[0] || !c->name[0] || !c->args) abort();
}

static void on_head(void *cls, int index, const char *id, const char *name)
{
    if (index < 0 || !id[0] || !name[0]) abort();
}

static void on_args(void *cls, int index, const char *text, size_t n) { total += n; }

static void render(const char *text)
{
    static const chat_tmpl ts[] = {CHAT_TMPL_CHATML, CHAT_TMPL_LLAMA3, CHAT_TMPL_MISTRAL_V3,
                                   CHAT_TMPL_MISTRAL_V3_TEKKEN};
    const char *tools[1] = {text};
    chat_msg m[4] = {{"system", "s"}, {"user", "u"}, {"assistant", ""}, {"tool", text}};
    chat_call calls[2] = {{.msg = 2, .id = "abcdefghi", .name = "f", .args = text}, {.msg = 3, .id = "abcdefghi"}};
    chat_tools tl = {tools, 1, calls, 2, NULL};
    for (size_t t = 0; t < sizeof ts / sizeof *ts; t++) {
        char *out = NULL, err[256];
        tok_span *spans = NULL;
        size_t ns = 0;
        if (chat_render_tools(ts[t], m, 4, &tl, true, &out, &spans, &ns, err, sizeof err) == 0) {
            size_t len = strlen(out), end = 0;
            for (size_t i = 0; i < ns; i++) {
                if (spans[i].off < end || spans[i].off + spans[i].len > len) abort();
                end = spans[i].off + spans[i].len;
            }
        }
        free(out);
        free(spans);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t n = size - 2, step = 1 + data[1] % 16;
    char *text = malloc(n + 1);
    if (!text) return 0;
    memcpy(text, data + 2, n);
    text[n] = 0;
    oait_parser p;
    oait_parser_init(&p, (oait_family)(data[0] % OAIT_FAMILY_COUNT));
    oait_sink s = {.content = on_content, .call = on_call};
    if (data[0] & 0x80) s.head = on_head, s.args = on_args;
    total = 0;
    for (size_t i = 0; i < n; i += step) oait_feed(&p, text + i, i + step <= n ? step : n - i, &s);
    oait_finish(&p, &s);
    if (total > n) abort(); /* nothing is given out twice */
    oait_parser_free(&p);
    render(text);
    free(text);
    return 0;
}
