/* Tests for client/oai_tools.c (function calling in the gateway: the request's tools,
 * the calls' grammar, the parser of generated calls per family, whole and streamed) and
 * its use in client/oai.c's answers. Suite "oai_tools". */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"
#include "oai.h"
#include "oai_tools.h"

/* ---- the parser ---- */

typedef struct {
    char   content[4096];
    char   names[8][64], args[8][256], ids[8][64];
    int    idx[8];
    int    n_calls;
} got;

static void on_content(void *cls, const char *text, size_t n)
{
    got *g = cls;
    strncat(g->content, text, n);
}

static void on_call(void *cls, int index, const oait_call *c)
{
    got *g = cls;
    ck_assert_int_lt(g->n_calls, 8);
    g->idx[g->n_calls] = index;
    strcpy(g->names[g->n_calls], c->name);
    strcpy(g->args[g->n_calls], c->args);
    strcpy(g->ids[g->n_calls], c->id);
    g->n_calls++;
}

static void on_head(void *cls, int index, const char *id, const char *name)
{
    got *g = cls;
    ck_assert_int_eq(index, g->n_calls);
    g->idx[index] = index;
    strcpy(g->names[index], name);
    strcpy(g->ids[index], id);
    g->args[index][0] = 0;
    g->n_calls++;
}

static void on_args(void *cls, int index, const char *text, size_t n)
{
    got *g = cls;
    ck_assert_int_eq(index, g->n_calls - 1);
    strncat(g->args[index], text, n);
}

/* text through the parser in pieces of step bytes (0: whole); streaming: calls as they
 * come (head, then argument pieces). */
static void run_as(oait_family f, const char *text, size_t step, got *g, int streaming)
{
    memset(g, 0, sizeof *g);
    oait_parser p;
    oait_parser_init(&p, f);
    oait_sink s = {.content = on_content, .call = on_call, .cls = g};
    if (streaming) s.head = on_head, s.args = on_args;
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) oait_feed(&p, text + i, i + step <= n ? step : n - i, &s);
    oait_finish(&p, &s);
    oait_parser_free(&p);
}

/* The same result whole and streamed byte by byte, in pieces of 3 and of 7, with whole
 * calls and with calls sent as they come. */
static void check(oait_family f, const char *text, const char *content, int n_calls, const char *const *names,
                  const char *const *args)
{
    static const size_t steps[] = {0, 1, 3, 7};
    for (size_t k = 0; k < 8; k++) {
        got g;
        run_as(f, text, steps[k % 4], &g, k >= 4);
        ck_assert_msg(strcmp(g.content, content) == 0, "%s (step %zu): content '%s'", text, steps[k], g.content);
        ck_assert_int_eq(g.n_calls, n_calls);
        for (int i = 0; i < n_calls; i++) {
            ck_assert_int_eq(g.idx[i], i);
            ck_assert_str_eq(g.names[i], names[i]);
            ck_assert_str_eq(g.args[i], args[i]);
            if (f == OAIT_MISTRAL)
                ck_assert_int_eq(strlen(g.ids[i]), 9);
            else
                ck_assert(strncmp(g.ids[i], "call_", 5) == 0 && strlen(g.ids[i]) == 29);
        }
    }
}

START_TEST(test_parse_hermes)
{
    const char *w[] = {"get_weather", "get_time"};
    const char *a[] = {"{\"city\": \"Paris\"}", "{}"}, *compact[] = {"{\"city\":\"Paris\"}"};
    check(OAIT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "", 1, w, a);
    check(OAIT_HERMES, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
          "</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>\n", "Sure.\n", 2, w, a);
    /* arguments as a string holding JSON (as some models write them) */
    check(OAIT_HERMES, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}"
          "</tool_call>", "", 1, w, compact);
    /* not calls: plain text with '<', a truncated call, malformed JSON, a call of no name */
    check(OAIT_HERMES, "a < b <tool", "a < b <tool", 0, NULL, NULL);
    check(OAIT_HERMES, "x<tool_call>\n{\"name\": \"f\"", "x<tool_call>\n{\"name\": \"f\"", 0, NULL, NULL);
    check(OAIT_HERMES, "<tool_call>{bad}</tool_call> ok", "<tool_call>{bad}</tool_call> ok", 0, NULL, NULL);
    check(OAIT_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", 0,
          NULL, NULL);
    /* a malformed call, then a good one */
    check(OAIT_HERMES, "<tool_call>x</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
          "<tool_call>x</tool_call>", 1, w + 1, a + 1);
}
END_TEST

START_TEST(test_parse_llama3)
{
    const char *w[] = {"get_weather"};
    const char *a[] = {"{\"city\": \"Paris\"}"};
    check(OAIT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", 1, w, a);
    check(OAIT_LLAMA3, "\n { \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"} } ", "", 1, w, a);
    check(OAIT_LLAMA3, "Hello {\"name\": \"x\"}", "Hello {\"name\": \"x\"}", 0, NULL, NULL);
    check(OAIT_LLAMA3, "{\"a\": 1}", "{\"a\": 1}", 0, NULL, NULL);
    check(OAIT_LLAMA3, "{\"name\": \"get_weather\", \"par", "{\"name\": \"get_weather\", \"par", 0, NULL, NULL);
    check(OAIT_LLAMA3, "", "", 0, NULL, NULL);
}
END_TEST

START_TEST(test_parse_mistral)
{
    const char *w[] = {"f", "g"};
    const char *a[] = {"{}", "{\"y\":2}"};
    check(OAIT_MISTRAL, "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{}}, {\"name\": \"g\", \"arguments\": {\"y\": 2}}]",
          "", 2, w, a);
    check(OAIT_MISTRAL, "ok [TOOL_CALLS] [{\"name\":\"f\",\"arguments\":{},\"id\":\"abcdefghi\"}]", "ok ", 1, w, a);
    check(OAIT_MISTRAL, "[TOOL_CALLS][]", "[TOOL_CALLS][]", 0, NULL, NULL);
    check(OAIT_MISTRAL, "[TOOL", "[TOOL", 0, NULL, NULL);
}
END_TEST

/* While streaming, text that may begin a call is held back: no content chunk ever
 * carries a marker's first bytes before the parser knows. */
START_TEST(test_stream_holds_markers)
{
    got g;
    memset(&g, 0, sizeof g);
    oait_parser p;
    oait_parser_init(&p, OAIT_HERMES);
    oait_sink s = {.content = on_content, .call = on_call, .cls = &g};
    oait_feed(&p, "Hi <tool", strlen("Hi <tool"), &s);
    ck_assert_str_eq(g.content, "Hi ");
    oait_feed(&p, "_call>\n{\"name\": \"f\", ", strlen("_call>\n{\"name\": \"f\", "), &s);
    ck_assert_str_eq(g.content, "Hi ");
    oait_feed(&p, "\"arguments\": {}}\n</tool_call>", strlen("\"arguments\": {}}\n</tool_call>"), &s);
    ck_assert_int_eq(g.n_calls, 1);
    oait_finish(&p, &s);
    ck_assert_str_eq(g.content, "Hi ");
    oait_parser_free(&p);
    /* sent as they come: the head once the name is known, the arguments piece by piece;
     * a call cut short stays as sent (a whole answer gives it back as content) */
    memset(&g, 0, sizeof g);
    oait_parser_init(&p, OAIT_HERMES);
    s.head = on_head, s.args = on_args;
    oait_feed(&p, "<tool_call>\n{\"name\": \"f\", \"argu", strlen("<tool_call>\n{\"name\": \"f\", \"argu"), &s);
    ck_assert_int_eq(g.n_calls, 0);
    oait_feed(&p, "ments\": {\"a\": \"}", strlen("ments\": {\"a\": \"}"), &s);
    ck_assert_int_eq(g.n_calls, 1);
    ck_assert_str_eq(g.names[0], "f");
    ck_assert_str_eq(g.args[0], "{\"a\": \"}");
    oait_feed(&p, "{\"}", strlen("{\"}"), &s); /* braces inside a string do not end it */
    ck_assert_str_eq(g.args[0], "{\"a\": \"}{\"}");
    oait_finish(&p, &s);
    ck_assert_str_eq(g.content, "");
    ck_assert_int_eq(g.n_calls, 1);
    oait_parser_free(&p);
    got w;
    run_as(OAIT_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}{\"}", 0, &w, 0);
    ck_assert_int_eq(w.n_calls, 0);
    ck_assert_str_eq(w.content, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}{\"}");
}
END_TEST

/* ---- the request and the grammar ---- */

static int parse(oai_req *r, const char *body, oai_err *e) { return oai_parse(r, OAI_CHAT, body, strlen(body), e); }

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
#define WEATHER "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"enum\":[\"Paris\",\"Oslo\"]},\"days\":{\"$ref\":\"#/$defs/d\"}},\"required\":[\"city\"]," \
    "\"$defs\":{\"d\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}}}}}"
#define TIME "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"Now\"}}"

static int accepts(const char *gbnf, const char *text)
{
    char err[256];
    gram *g = gram_compile(gbnf, strlen(gbnf), err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    gram_state *s = gram_state_new(g);
    int ok = gram_accept_bytes(s, text, strlen(text)) == 0 && gram_can_end(s);
    gram_state_free(s);
    gram_free(g);
    return ok;
}

START_TEST(test_request)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" WEATHER "," TIME "],\"tool_choice\":\"required\","
                               "\"parallel_tool_calls\":false}", &e), 0);
    ck_assert_int_eq(r.tl.n_tools, 2);
    ck_assert_str_eq(r.tl.names[1], "get_time");
    ck_assert_int_eq(r.tl.choice, OAIT_REQUIRED);
    ck_assert_int_eq(r.tl.parallel, 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "chatml", &e), 0);
    ck_assert_ptr_nonnull(r.grammar);
    ck_assert(accepts(r.grammar, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
                                 "\"days\": 3}}\n</tool_call>"));
    ck_assert(accepts(r.grammar, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    ck_assert(!accepts(r.grammar, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                                  "</tool_call>"));
    ck_assert(!accepts(r.grammar, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
                                  "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    oai_req_free(&r);
    /* parallel: up to one call per tool; named: that tool only; llama3 and mistral syntax */
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" WEATHER "," TIME "],\"tool_choice\":\"required\"}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "chatml", &e), 0);
    ck_assert(accepts(r.grammar, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
                                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                 "</tool_call>"));
    oai_req_free(&r);
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" WEATHER "," TIME "],\"tool_choice\":{\"type\":\"function\","
                               "\"function\":{\"name\":\"get_weather\"}}}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "llama3", &e), 0);
    ck_assert(accepts(r.grammar, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"));
    ck_assert(!accepts(r.grammar, "{\"name\": \"get_time\", \"parameters\": {}}"));
    oai_req_free(&r);
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" WEATHER "," TIME "],\"tool_choice\":\"required\"}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "mistral-v3-tekken", &e), 0);
    ck_assert(accepts(r.grammar, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": "
                                 "\"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 7}}]"));
    oai_req_free(&r);
    /* auto: no grammar, the answer is parsed; none: tools are not sent */
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" TIME "]}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "chatml", &e), 0);
    ck_assert_ptr_null(r.grammar);
    ck_assert(oait_active(&r.tl));
    oai_req_free(&r);
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" TIME "],\"tool_choice\":\"none\"}", &e), 0);
    ck_assert(!oait_active(&r.tl));
    ck_assert_int_eq(oai_tools_prepare(&r, "gemma", &e), 0); /* nothing to render */
    oai_req_free(&r);
}
END_TEST

START_TEST(test_history)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\","
                               "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
                               "{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\": \\\"UTC\\\"}\"}}]},{\"role\":\"tool\","
                               "\"tool_call_id\":\"call_1\",\"content\":\"12:00\"}],\"tools\":[" TIME "]}", &e), 0);
    ck_assert_int_eq(r.n_msgs, 6);
    ck_assert_str_eq(r.msgs[4], "tool");
    ck_assert_str_eq(r.msgs[3], "");
    ck_assert_int_eq(r.tl.n_tcalls, 8);
    const char *want[] = {"1", "call_1", "get_time", "{\"tz\":\"UTC\"}", "2", "call_1", "", ""};
    for (int i = 0; i < 8; i++) ck_assert_str_eq(r.tl.tcalls[i], want[i]);
    oai_req_free(&r);
}
END_TEST

START_TEST(test_refusals)
{
    static const struct { const char *body, *param, *msg; } cases[] = {
        {"{" MSGS ",\"tools\":[" TIME "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
         "tool_choice", "no tool is named 'nope'"},
        {"{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", "needs tools"},
        {"{" MSGS ",\"tools\":[" TIME "],\"tool_choice\":\"sometimes\"}", "tool_choice", "\"auto\""},
        {"{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"array\","
         "\"uniqueItems\":true}}}]}", "tools", "tools[0].function.parameters: "},
        {"{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"$ref\":\"#/x\"}}}]}",
         "tools", "tools[0].function.parameters"},
        {"{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools", "function.name"},
        {"{" MSGS ",\"tools\":[" TIME "," TIME "]}", "tools", "given twice"},
        {"{" MSGS ",\"tools\":[{\"type\":\"retrieval\"}]}", "tools", "tools[0]"},
        {"{" MSGS ",\"tools\":{}}", "tools", "array"},
        {"{" MSGS ",\"parallel_tool_calls\":3}", "parallel_tool_calls", "true or false"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\","
         "\"arguments\":\"[1]\"}}]}]}", "messages", "arguments"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
         "messages", "id"},
        {"{\"messages\":[{\"role\":\"user\",\"tool_calls\":[]}]}", "messages", "assistant"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oai_req r;
        oai_err e;
        ck_assert_msg(parse(&r, cases[i].body, &e) == -1, "accepted %s", cases[i].body);
        ck_assert_msg(strcmp(e.param, cases[i].param) == 0, "%s: param '%s'", cases[i].body, e.param);
        ck_assert_msg(strstr(e.msg, cases[i].msg) != NULL, "%s: message '%s'", cases[i].body, e.msg);
    }
    oai_req r;
    oai_err e;
    const char *cbody = "{\"prompt\":\"x\",\"tools\":[" TIME "]}";
    ck_assert_int_eq(oai_parse(&r, OAI_COMPLETION, cbody, strlen(cbody), &e), -1);
    ck_assert_str_eq(e.param, "tools");
    /* a template without a call syntax; a grammar besides a required choice */
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" TIME "]}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "gemma", &e), -1);
    ck_assert_ptr_nonnull(strstr(e.msg, "gemma"));
    oai_req_free(&r);
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" TIME "],\"tool_choice\":\"required\",\"grammar\":"
                               "\"root ::= \\\"a\\\"\"}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "chatml", &e), -1);
    ck_assert_str_eq(e.param, "tool_choice");
    oai_req_free(&r);
}
END_TEST

/* ---- the answers ---- */

START_TEST(test_answers)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, "{" MSGS ",\"tools\":[" WEATHER "],\"stream\":true}", &e), 0);
    ck_assert_int_eq(oai_tools_prepare(&r, "chatml", &e), 0);
    const char *text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    /* whole */
    oai_out o;
    oai_out_init(&o, &r, "m", 1, 1);
    ck_assert_int_eq(oai_add(&o, text, strlen(text), NULL, 0), 0);
    size_t len;
    char *body = oai_response(&o, "eog", 3, 9, &len);
    json_t *j = json_loads(body, 0, NULL), *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *m = json_object_get(c, "message"), *call = json_array_get(json_object_get(m, "tool_calls"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "tool_calls");
    ck_assert(json_is_null(json_object_get(m, "content")));
    ck_assert_str_eq(json_string_value(json_object_get(call, "type")), "function");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "get_weather");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                     "{\"city\": \"Oslo\"}");
    json_decref(j);
    free(body);
    oai_out_free(&o);
    /* streamed in pieces: no content, a head chunk (index, id, type, name, "") then the arguments */
    oai_out_init(&o, &r, "m", 1, 1);
    char *all = calloc(1, 1);
    size_t n_all = 0;
    for (size_t i = 0; i < strlen(text); i += 5) {
        char *s = oai_chunk(&o, text + i, strlen(text + i) < 5 ? strlen(text + i) : 5, NULL, 0, &len);
        all = realloc(all, n_all + len + 1);
        memcpy(all + n_all, s ? s : "", len);
        n_all += len;
        all[n_all] = 0;
        free(s);
    }
    char *end = oai_chunk_end(&o, "eog", 3, 9, &len);
    all = realloc(all, n_all + len + 1);
    memcpy(all + n_all, end, len + 1);
    free(end);
    ck_assert_ptr_null(strstr(all, "\"content\""));
    /* the events: a head (index, id, type, name, arguments ""), then argument pieces */
    char args[256] = "";
    int heads = 0, pieces = 0;
    for (char *l = strstr(all, "data: {"); l; l = strstr(l + 1, "data: {")) {
        json_t *ev = json_loadb(l + 6, strcspn(l + 6, "\n"), 0, NULL);
        json_t *d = json_array_get(json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "delta"),
                                   0);
        json_t *tc = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(ev, "choices"),
                                                                                   0), "delta"), "tool_calls"), 0);
        (void)d;
        if (tc) {
            json_t *f = json_object_get(tc, "function");
            ck_assert_int_eq(json_integer_value(json_object_get(tc, "index")), 0);
            if (json_object_get(tc, "id")) {
                ck_assert_int_eq(pieces, 0);
                ck_assert(strncmp(json_string_value(json_object_get(tc, "id")), "call_", 5) == 0);
                ck_assert_str_eq(json_string_value(json_object_get(tc, "type")), "function");
                ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "get_weather");
                ck_assert_str_eq(json_string_value(json_object_get(f, "arguments")), "");
                heads++;
            } else {
                strcat(args, json_string_value(json_object_get(f, "arguments")));
                pieces++;
            }
        }
        json_decref(ev);
    }
    ck_assert_int_eq(heads, 1);
    ck_assert_int_gt(pieces, 1);
    ck_assert_str_eq(args, "{\"city\": \"Oslo\"}");
    ck_assert_ptr_nonnull(strstr(all, "\"finish_reason\":\"tool_calls\""));
    free(all);
    oai_out_free(&o);
    oai_req_free(&r);
}
END_TEST

Suite *oai_tools_suite(void)
{
    Suite *s = suite_create("oai_tools");
    TCase *tc = tcase_create("tools");
    tcase_add_test(tc, test_parse_hermes);
    tcase_add_test(tc, test_parse_llama3);
    tcase_add_test(tc, test_parse_mistral);
    tcase_add_test(tc, test_stream_holds_markers);
    tcase_add_test(tc, test_request);
    tcase_add_test(tc, test_history);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_answers);
    suite_add_tcase(s, tc);
    return s;
}
