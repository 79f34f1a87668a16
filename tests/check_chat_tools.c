/* Tests for tokenizerd/chat_tools.c: tools, tool calls and tool results rendered as
 * each family's Jinja template writes them. The expected texts are written out by hand
 * from the templates (Qwen3's in ../shared/reference/tokenizer/ggml-vocab-qwen2.gguf,
 * Meta's Llama 3.1, Mistral's Nemo and v0.3), and checked once against Python's jinja2
 * rendering those templates (tojson as transformers defines it). Suite "chat_tools". */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

#define TOOL "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the weather\"," \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define TOOL_PY "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the " \
    "weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, " \
    "\"required\": [\"city\"]}}}"

static const char *const tools[] = {TOOL};
static const chat_msg conv[] = {
    {"system", "Be brief."}, {"user", "Weather in Paris?"}, {"assistant", ""}, {"tool", "{\"temp\":20}"},
};
static const chat_call calls[] = {
    {.msg = 2, .id = "abc123XYZ", .name = "get_weather", .args = "{\"city\":\"Paris\"}"},
    {.msg = 3, .id = "abc123XYZ"},
};
static const chat_tools tl = {tools, 1, calls, 2, NULL};

static char *render(chat_tmpl t, const chat_msg *m, size_t n, const chat_tools *x, bool gen)
{
    char *out = NULL, err[256] = "";
    tok_span *spans = NULL;
    size_t ns = 0;
    ck_assert_msg(chat_render_tools(t, m, n, x, gen, &out, &spans, &ns, err, sizeof err) == 0, "%s", err);
    for (size_t i = 0; i < ns; i++) /* the spans lie inside, in order */
        ck_assert(spans[i].off + spans[i].len <= strlen(out) && (i == 0 || spans[i].off >= spans[i - 1].off));
    free(spans);
    return out;
}

START_TEST(test_hermes)
{
    char *out = render(CHAT_TMPL_CHATML, conv, 4, &tl, true);
    ck_assert_str_eq(out,
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" TOOL_PY
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n{\"temp\":20}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n");
    free(out);
    /* no system message, text before a call, two results in one user turn, no tools */
    static const chat_msg m[] = {{"user", "Hi"}, {"assistant", "Let me see."}, {"tool", "a"}, {"tool", "b"}};
    static const chat_call c[] = {{.msg = 1, .id = "x", .name = "f", .args = "{}"},
                                  {.msg = 1, .id = "y", .name = "g", .args = "{\"a\":[1,2]}"},
                                  {.msg = 2, .id = "x"}, {.msg = 3, .id = "y"}};
    chat_tools t2 = {NULL, 0, c, 4, NULL};
    out = render(CHAT_TMPL_CHATML, m, 4, &t2, false);
    ck_assert_str_eq(out,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nLet me see.\n<tool_call>\n{\"name\": \"f\", "
        "\"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": [1, 2]}}\n"
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n"
        "</tool_response><|im_end|>\n");
    free(out);
}
END_TEST

/* Qwen2.5's template writes a default system message when the chat has none. */
START_TEST(test_qwen25_default_system)
{
    const char *sys = chat_tools_default_system("{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a "
                                                "helpful assistant.' }}");
    ck_assert_ptr_nonnull(sys);
    ck_assert_ptr_null(chat_tools_default_system("{{ '<|im_start|>' }}"));
    ck_assert_ptr_null(chat_tools_default_system(NULL));
    chat_tools x = {tools, 1, NULL, 0, sys};
    char *out = render(CHAT_TMPL_CHATML, conv + 1, 1, &x, true);
    ck_assert(strncmp(out, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                           "assistant.\n\n# Tools\n\n", 96) == 0);
    free(out);
    static const chat_call c[] = {{.msg = 1, .id = "x", .name = "f", .args = "{}"}, {.msg = 2, .id = "x"}};
    chat_tools y = {NULL, 0, c, 2, sys};
    out = render(CHAT_TMPL_CHATML, (chat_msg[]){{"user", "Hi"}, {"assistant", ""}, {"tool", "ok"}}, 3, &y, true);
    ck_assert_str_eq(out, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                          "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
                          "{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
                          "<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    free(out);
}
END_TEST

START_TEST(test_llama31)
{
    char *out = render(CHAT_TMPL_LLAMA3, conv, 4, &tl, true);
    ck_assert_str_eq(out,
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December "
        "2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call with its proper arguments "
        "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
        "dictionary of argument name and its value}.Do not use variables.\n\n"
        "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
        "\"description\": \"Get the weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
        "            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n"
        "                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n"
        "        }\n    }\n}\n\nWeather in Paris?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": "
        "\"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\":20}\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(out);
    /* two calls in one message: the template refuses them */
    static const chat_call two[] = {{.msg = 2, .id = "a", .name = "f", .args = "{}"},
                                    {.msg = 2, .id = "b", .name = "f", .args = "{}"}};
    chat_tools t2 = {tools, 1, two, 2, NULL};
    char *o = NULL, err[256];
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_LLAMA3, conv, 3, &t2, true, &o, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "one tool call"));
}
END_TEST

START_TEST(test_mistral)
{
    char *out = render(CHAT_TMPL_MISTRAL_V3_TEKKEN, conv, 4, &tl, true);
    ck_assert_str_eq(out,
        "[AVAILABLE_TOOLS][" TOOL_PY "][/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST]"
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}]</s>"
        "[TOOL_RESULTS]{\"content\": {\"temp\":20}, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS]");
    free(out);
    out = render(CHAT_TMPL_MISTRAL_V3, conv, 4, &tl, true);
    ck_assert_str_eq(out,
        "[AVAILABLE_TOOLS] [" TOOL_PY "][/AVAILABLE_TOOLS][INST] Be brief.\n\nWeather in Paris?[/INST]"
        "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}]</s>"
        "[TOOL_RESULTS] {\"content\": {\"temp\":20}, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS]");
    free(out);
    /* the system message goes with a last user message; description strings are printed raw */
    static const char *const t2[] = {"{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":"
                                      "\"Say \\\"hi\\\" \\u00e9\",\"parameters\":{}}}"};
    chat_tools x = {t2, 1, NULL, 0, NULL};
    out = render(CHAT_TMPL_MISTRAL_V3_TEKKEN, conv, 2, &x, true);
    ck_assert_str_eq(out, "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": "
                          "\"Say \"hi\" \xc3\xa9\", \"parameters\": {}}}][/AVAILABLE_TOOLS][INST]Be brief.\n\n"
                          "Weather in Paris?[/INST]");
    free(out);
    /* v0.3 puts the system message with the last user message, Nemo only with a user
     * message that ends the conversation; parallel calls and their results */
    static const chat_msg m2[] = {{"system", "Be brief."}, {"user", "Weather?"}, {"assistant", ""}, {"tool", "sunny"},
                                  {"tool", "1"}, {"assistant", " Sunny. "}, {"user", "Thanks"}};
    static const chat_call c2[] = {{.msg = 2, .id = "abc123XYZ", .name = "get_weather", .args = "{\"city\":\"Paris\"}"},
                                   {.msg = 2, .id = "abc123XYW", .name = "t", .args = "{}"},
                                   {.msg = 3, .id = "abc123XYZ"}, {.msg = 4, .id = "abc123XYW"}};
    chat_tools x2 = {tools, 1, c2, 4, NULL};
    out = render(CHAT_TMPL_MISTRAL_V3, m2, 7, &x2, true);
    ck_assert_str_eq(out,
        "[INST] Weather?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
        "\"id\": \"abc123XYZ\"}, {\"name\": \"t\", \"arguments\": {}, \"id\": \"abc123XYW\"}]</s>[TOOL_RESULTS] "
        "{\"content\": sunny, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": 1, \"call_id\": "
        "\"abc123XYW\"}[/TOOL_RESULTS] Sunny.</s>[AVAILABLE_TOOLS] [" TOOL_PY "][/AVAILABLE_TOOLS][INST] Be brief.\n\n"
        "Thanks[/INST]");
    free(out);
    out = render(CHAT_TMPL_MISTRAL_V3_TEKKEN, m2, 6, &x2, true);
    ck_assert_str_eq(out,
        "[AVAILABLE_TOOLS][" TOOL_PY "][/AVAILABLE_TOOLS][INST]Weather?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}, {\"name\": \"t\", \"arguments\": {}, \"id\": "
        "\"abc123XYW\"}]</s>[TOOL_RESULTS]{\"content\": sunny, \"call_id\": \"abc123XYZ\"}[/TOOL_RESULTS][TOOL_RESULTS]"
        "{\"content\": 1, \"call_id\": \"abc123XYW\"}[/TOOL_RESULTS] Sunny. </s>");
    free(out);
    /* ids are 9 characters */
    static const chat_call bad[] = {{.msg = 2, .id = "call_1", .name = "f", .args = "{}"}};
    chat_tools y = {tools, 1, bad, 1, NULL};
    char *o = NULL, err[256];
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_MISTRAL_V3, conv, 3, &y, true, &o, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "9 letters"));
}
END_TEST

START_TEST(test_errors_and_plain)
{
    char *o = NULL, *p = NULL, err[256];
    /* without tools and tool messages: exactly chat_render */
    static const chat_tools none = {NULL, 0, NULL, 0, NULL};
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_GEMMA, conv, 2, &none, true, &o, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_eq(chat_render(CHAT_TMPL_GEMMA, conv, 2, true, &p, err, sizeof err), 0);
    ck_assert_str_eq(o, p);
    free(o);
    free(p);
    /* a template without tools */
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_GEMMA, conv, 4, &tl, true, &o, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "does not render tools"));
    ck_assert_ptr_null(o);
    /* a tool message alone needs a template with tools too */
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_PHI3, conv + 3, 1, NULL, true, &o, NULL, NULL, err, sizeof err), -1);
    /* malformed tool JSON, a call on a user message, arguments that are not an object */
    static const char *const badtool[] = {"{\"type\":\"function\",\"function\":{\"name\":\"f\"}"};
    chat_tools a = {badtool, 1, NULL, 0, NULL};
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_CHATML, conv, 2, &a, true, &o, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tool 0"));
    static const chat_call c1[] = {{.msg = 1, .id = "x", .name = "f", .args = "{}"}};
    chat_tools b = {NULL, 0, c1, 1, NULL};
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_CHATML, conv, 2, &b, true, &o, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "assistant"));
    static const chat_call c2[] = {{.msg = 2, .id = "x", .name = "f", .args = "[1]"}};
    chat_tools c = {NULL, 0, c2, 1, NULL};
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_CHATML, conv, 3, &c, true, &o, NULL, NULL, err, sizeof err), -1);
    static const chat_call c3[] = {{.msg = 2, .id = "x", .name = "f", .args = "{\"a\":"}};
    chat_tools d = {NULL, 0, c3, 1, NULL};
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_CHATML, conv, 3, &d, true, &o, NULL, NULL, err, sizeof err), -1);
    /* a role the tool templates do not know */
    static const chat_msg odd[] = {{"user", "a"}, {"critic", "b"}};
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_CHATML, odd, 2, &tl, true, &o, NULL, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "critic"));
}
END_TEST

/* Tool definitions and arguments are contents: control-token text in them stays text. */
START_TEST(test_spans_cover_user_data)
{
    static const char *const t[] = {"{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":"
                                    "\"<|im_end|>\"}}"};
    chat_tools x = {t, 1, NULL, 0, NULL};
    char *out = NULL, err[256];
    tok_span *spans = NULL;
    size_t ns = 0;
    ck_assert_int_eq(chat_render_tools(CHAT_TMPL_CHATML, conv + 1, 1, &x, true, &out, &spans, &ns, err, sizeof err), 0);
    const char *inj = strstr(out, "\"<|im_end|>\"");
    ck_assert_ptr_nonnull(inj);
    size_t at = (size_t)(inj - out);
    int covered = 0;
    for (size_t i = 0; i < ns; i++) covered |= spans[i].off <= at && at < spans[i].off + spans[i].len;
    ck_assert(covered);
    free(out);
    free(spans);
}
END_TEST

Suite *chat_tools_suite(void)
{
    Suite *s = suite_create("chat_tools");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, test_hermes);
    tcase_add_test(tc, test_qwen25_default_system);
    tcase_add_test(tc, test_llama31);
    tcase_add_test(tc, test_mistral);
    tcase_add_test(tc, test_errors_and_plain);
    tcase_add_test(tc, test_spans_cover_user_data);
    suite_add_tcase(s, tc);
    return s;
}
