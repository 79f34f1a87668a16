/* Tests for client/oai (OpenAI request parsing and response JSON) and client/gw_metrics
 * (Prometheus text). Suite "oai". */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gw_job.h"
#include "gw_metrics.h"
#include "gw_tok.h"
#include "tok_source.h"
#include "oai.h"
#include "proto.h"

static const char *param(const oai_req *r, const char *name)
{
    for (int i = 0; i < r->n_params; i++)
        if (strcmp(r->pk[i], name) == 0) return r->pv[i];
    return NULL;
}

static int parse(oai_req *r, oai_kind k, const char *body, oai_err *e)
{
    return oai_parse(r, k, body, strlen(body), e);
}

START_TEST(test_completion_mapping)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_COMPLETION,
                           "{\"model\":\"x\",\"prompt\":\"Once\",\"max_tokens\":12,\"temperature\":0,\"top_p\":0.9,"
                           "\"seed\":42,\"stop\":\"\\n\",\"top_k\":5,\"min_p\":0.1,\"repeat_penalty\":1.1,"
                           "\"ignore_eos\":true,\"samplers\":[\"top_k\",\"temperature\"],\"user\":\"u\","
                           "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"echo\":true}",
                           &e), 0);
    ck_assert_int_eq(r.kind, OAI_COMPLETION);
    ck_assert_str_eq(r.prompt, "Once");
    ck_assert_int_eq(r.n_predict, 12);
    ck_assert_str_eq(param(&r, "temperature"), "0");
    ck_assert_str_eq(param(&r, "top_p"), "0.9");
    ck_assert_str_eq(param(&r, "seed"), "42");
    ck_assert_str_eq(param(&r, "top_k"), "5");
    ck_assert_str_eq(param(&r, "repeat_penalty"), "1.1");
    ck_assert_str_eq(param(&r, "ignore_eos"), "true");
    ck_assert_str_eq(param(&r, "samplers"), "top_k;temperature");
    ck_assert_ptr_null(param(&r, "user"));
    ck_assert_ptr_null(param(&r, "model"));
    ck_assert_int_eq(r.n_stops, 1);
    ck_assert_str_eq(r.stops[0], "\n");
    ck_assert(r.stream && r.include_usage && r.echo && r.greedy);
    ck_assert_int_eq(r.logprobs, 0);
    oai_req_free(&r);
    /* a prompt array of one string; logprobs N -> n_probs N; defaults */
    ck_assert_int_eq(parse(&r, OAI_COMPLETION, "{\"prompt\":[\"Hi\"],\"logprobs\":3,\"stop\":[\"a\",\"\",\"b\"]}", &e), 0);
    ck_assert_str_eq(r.prompt, "Hi");
    ck_assert_int_eq(r.n_predict, -1);
    ck_assert(r.logprobs && r.top_logprobs == 3);
    ck_assert_str_eq(param(&r, "n_probs"), "3");
    ck_assert_int_eq(r.n_stops, 2); /* empty stop strings are dropped */
    oai_req_free(&r);
}
END_TEST

START_TEST(test_chat_mapping)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_CHAT,
                           "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello \"},"
                           "{\"type\":\"text\",\"text\":\"there\"}]},{\"role\":\"assistant\",\"content\":null}],"
                           "\"max_completion_tokens\":7,\"logprobs\":true,\"top_logprobs\":2,"
                           "\"logit_bias\":{\"15\":-100,\"7\":2.5},\"presence_penalty\":0.5}",
                           &e), 0);
    ck_assert_int_eq(r.n_msgs, 6);
    ck_assert_str_eq(r.msgs[0], "system");
    ck_assert_str_eq(r.msgs[1], "Be brief");
    ck_assert_str_eq(r.msgs[3], "Hello there");
    ck_assert_str_eq(r.msgs[4], "assistant");
    ck_assert_str_eq(r.msgs[5], "");
    ck_assert_int_eq(r.n_predict, 7);
    ck_assert(r.logprobs && r.top_logprobs == 2);
    ck_assert_str_eq(param(&r, "n_probs"), "2");
    ck_assert_str_eq(param(&r, "logit_bias"), "15:-100,7:2.5");
    ck_assert_str_eq(param(&r, "presence_penalty"), "0.5");
    oai_req_free(&r);
    /* logprobs alone: the chosen token's log-prob needs n_probs 1 */
    ck_assert_int_eq(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", &e), 0);
    ck_assert_str_eq(param(&r, "n_probs"), "1");
    oai_req_free(&r);
}
END_TEST

/* Structured output: each way of asking becomes a grammar that compiles; text is none. */
START_TEST(test_structured_output)
{
    static const struct { oai_kind k; const char *body, *has; } cases[] = {
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}", "{"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                   "\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
                   "{\"age\":{\"type\":\"integer\"}},\"required\":[\"age\"]}}}}", "age"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\",\"schema\":{\"enum\":[\"zebra\"]}}}", "zebra"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"json_schema\":{\"const\":\"kiwi\"}}", "kiwi"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"}", "\"yes\" | \"no\""},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"},\"grammar\":\"\"}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oai_req r;
        oai_err e;
        ck_assert_msg(parse(&r, cases[i].k, cases[i].body, &e) == 0, "%s: %s", cases[i].body, e.msg);
        if (!cases[i].has) ck_assert_ptr_null(r.grammar);
        else ck_assert_msg(r.grammar && strstr(r.grammar, cases[i].has), "%s: grammar %s", cases[i].body, r.grammar);
        lc_gen g;
        gwj j = {.req = r};
        gwj_gen(&j, &g);
        ck_assert_ptr_eq(g.grammar, r.grammar);
        oai_req_free(&r);
    }
}
END_TEST

/* Every refusal names the parameter and leaves nothing allocated (checked by ASan). */
START_TEST(test_refusals)
{
    static const struct { oai_kind k; const char *body, *param, *msg; } cases[] = {
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature", "temperature"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"top_k\":\"many\"}", "top_k", "not an integer"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":\"ten\"}", "max_tokens", "integer"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":-5}", "seed", "seed"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":9}", "n", "[1, 8]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", "n", "[1, 8]"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"best_of\":2}", "best_of", "only 1"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix", "not supported"},
        {OAI_COMPLETION, "{\"prompt\":[1,2,3]}", "prompt", "token-id"},
        {OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "one prompt"},
        {OAI_COMPLETION, "{\"max_tokens\":3}", "prompt", "required"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":[1]}", "stop", "stop"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", "stop", "at most"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias", "token ids"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"mirostat\":{}}", "mirostat", "number"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream", "true or false"},
        {OAI_COMPLETION, "[1,2]", "", "JSON object"},
        {OAI_COMPLETION, "{\"prompt\":", "", "not valid JSON"},
        {OAI_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", "", "not valid JSON"},
        {OAI_CHAT, "{\"messages\":[]}", "messages", "1 to"},
        {OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages", "role"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages", "not supported"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages", "tool_call_id"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages", "text"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs", "logprobs"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":21,\"logprobs\":true}", "top_logprobs", "[0, 20]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", "tools", "tools[0]"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[{}]}", "functions", "not supported"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}", "response_format", "'xml' is not supported"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\"}}}", "response_format", "schema is required"},
        {OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"array\",\"uniqueItems\":true}}}}", "response_format", "uniqueItems"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"json_schema\":{\"type\":\"strin\"}}", "json_schema", "json_schema: "},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= foo\"}", "grammar", "grammar: "},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":3}", "grammar", "GBNF"},
        {OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}}", "json_schema", "give one of"},
        {OAI_CHAT, "{\"prompt\":\"x\"}", "messages", "required"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oai_req r;
        oai_err e;
        ck_assert_msg(parse(&r, cases[i].k, cases[i].body, &e) == -1, "accepted %s", cases[i].body);
        ck_assert_msg(strcmp(e.param, cases[i].param) == 0, "%s: param '%s'", cases[i].body, e.param);
        ck_assert_msg(strstr(e.msg, cases[i].msg) != NULL, "%s: message '%s'", cases[i].body, e.msg);
        ck_assert_int_eq(r.n_params + r.n_msgs + r.n_stops, 0); /* freed */
    }
}
END_TEST

static json_t *sse_json(const char *s, size_t n, int *events)
{
    /* the last "data: {...}" event before any [DONE] */
    json_t *last = NULL;
    *events = 0;
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *e = strstr(p, "\n\n");
        ck_assert_ptr_nonnull(e);
        ck_assert(strncmp(p, "data: ", 6) == 0);
        (*events)++;
        if (strncmp(p + 6, "[DONE]", 6) != 0) {
            json_decref(last);
            last = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
            ck_assert_ptr_nonnull(last);
        }
        p = e + 2;
    }
    return last;
}

static int text_fn(void *cls, int32_t id, char *buf, size_t cap)
{
    (void)cls;
    return snprintf(buf, cap, "t%d", (int)id);
}

START_TEST(test_chat_stream_chunks)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,"
                                         "\"stream_options\":{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":1}", &e), 0);
    oai_out o;
    oai_out_init(&o, &r, "m.gguf", 1700000000, 5);
    o.text_fn = text_fn;
    size_t n;
    int ev;
    char *s = oai_chunk_role(&o, &n);
    json_t *j = sse_json(s, n, &ev);
    ck_assert_int_eq(ev, 1);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    ck_assert_str_eq(json_string_value(json_object_get(delta, "role")), "assistant");
    ck_assert(strncmp(json_string_value(json_object_get(j, "id")), "chatcmpl-", 9) == 0);
    json_decref(j);
    free(s);
    /* a piece with one token, its log-prob and one alternative; invalid UTF-8 is repaired */
    oai_alt alt = {9, -2.5};
    oai_token t = {"\xe2\x82", 2, -INFINITY, &alt, 1};
    s = oai_chunk(&o, "H\xe2\x82", 3, &t, 1, &n);
    j = sse_json(s, n, &ev);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c0, "delta"), "content")), "H\xef\xbf\xbd\xef\xbf\xbd");
    json_t *lp = json_array_get(json_object_get(json_object_get(c0, "logprobs"), "content"), 0);
    ck_assert(json_real_value(json_object_get(lp, "logprob")) == -9999.0); /* -inf is not JSON */
    ck_assert_int_eq(json_array_size(json_object_get(lp, "bytes")), 2);
    json_t *top = json_array_get(json_object_get(lp, "top_logprobs"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(top, "token")), "t9");
    ck_assert(json_is_null(json_object_get(c0, "finish_reason")));
    json_decref(j);
    free(s);
    /* end: finish chunk, usage chunk, [DONE] */
    s = oai_chunk_end(&o, "context", 3, 4, &n);
    ck_assert(n > 14 && memcmp(s + n - 14, "data: [DONE]\n\n", 14) == 0);
    j = sse_json(s, n, &ev);
    ck_assert_int_eq(ev, 3);
    ck_assert_int_eq(json_array_size(json_object_get(j, "choices")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 7);
    json_decref(j);
    ck_assert(strstr(s, "\"finish_reason\":\"length\"") != NULL);
    free(s);
    oai_out_free(&o);
    oai_req_free(&r);
}
END_TEST

START_TEST(test_completion_response)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_COMPLETION, "{\"prompt\":\"P\",\"logprobs\":2}", &e), 0);
    oai_out o;
    oai_out_init(&o, &r, "m", 1, 1);
    oai_alt alts[2] = {{1, -0.1}, {2, -3}};
    oai_token toks[2] = {{" a", 2, -0.1, alts, 2}, {"bc", 2, -0.2, alts, 2}};
    ck_assert_int_eq(oai_add(&o, " a", 2, toks, 1), 0);
    ck_assert_int_eq(oai_add(&o, "bc", 2, toks + 1, 1), 0);
    size_t n;
    char *s = oai_response(&o, "eog", 1, 2, &n);
    json_t *j = json_loadb(s, n, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c0, "text")), " abc");
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_t *lp = json_object_get(c0, "logprobs");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)), 2);
    ck_assert_int_eq(json_object_size(json_array_get(json_object_get(lp, "top_logprobs"), 0)), 2);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
    json_decref(j);
    free(s);
    oai_out_free(&o);
    oai_req_free(&r);
}
END_TEST

START_TEST(test_errors)
{
    ck_assert_int_eq(oai_error_status("queue_full", 0), 429);
    ck_assert_int_eq(oai_error_status("unavailable", 1), 503);
    ck_assert_int_eq(oai_error_status("internal", 0), 500);
    ck_assert_int_eq(oai_error_status("invalid_request", 1), 400);
    ck_assert_int_eq(oai_error_status("context_length_exceeded", 0), 400);
    ck_assert_int_eq(oai_error_status(NULL, 0), 400);
    ck_assert_int_eq(oai_error_status(NULL, 1), 500);
    ck_assert_int_eq(oai_error_status("something_new", 1), 500);
    ck_assert_str_eq(oai_finish_reason("length"), "length");
    ck_assert_str_eq(oai_finish_reason("context"), "length");
    ck_assert_str_eq(oai_finish_reason("eog"), "stop");
    ck_assert_str_eq(oai_finish_reason("stop"), "stop");
    char *b = oai_error_body(401, "bad \"key\"", NULL, "invalid_api_key");
    ck_assert_str_eq(b, "{\"error\":{\"message\":\"bad \\\"key\\\"\",\"type\":\"authentication_error\",\"param\":null,"
                        "\"code\":\"invalid_api_key\"}}");
    free(b);
    size_t n;
    b = oai_chunk_error(500, "boom", NULL, &n);
    ck_assert_str_eq(b, "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
                        "data: [DONE]\n\n");
    ck_assert_uint_eq(n, strlen(b));
    free(b);
}
END_TEST

START_TEST(test_metrics_text)
{
    gwm m;
    gwm_init(&m);
    gwm_request(&m, GWM_EP_CHAT, 200);
    gwm_request(&m, GWM_EP_CHAT, 200);
    gwm_request(&m, GWM_EP_COMPLETIONS, 429);
    gwm_tokens(&m, 10, 20);
    gwm_ttft(&m, 0.03);
    gwm_itl(&m, 0.004, 3);
    gwm_itl(&m, 100, 1); /* beyond every bound: only +Inf */
    gwm_front f = {.fresh = 1, .workers = 2, .queued = 5, .max_requests = 1024, .max_per_client = 64, .samplerd_up = -1};
    size_t n;
    char *t = gwm_render(&m, &f, &n);
    ck_assert_uint_eq(n, strlen(t));
    ck_assert(strstr(t, "llm_http_requests_total{endpoint=\"/v1/chat/completions\",code=\"200\"} 2\n"));
    ck_assert(strstr(t, "llm_http_requests_total{endpoint=\"/v1/completions\",code=\"429\"} 1\n"));
    ck_assert(strstr(t, "llm_prompt_tokens_total 10\n") && strstr(t, "llm_generated_tokens_total 20\n"));
    ck_assert(strstr(t, "llm_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n"));
    ck_assert(strstr(t, "llm_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"));
    ck_assert(strstr(t, "llm_inter_token_seconds_bucket{le=\"0.005\"} 3\n")); /* cumulative from here on */
    ck_assert(strstr(t, "llm_inter_token_seconds_bucket{le=\"10\"} 3\n"));
    ck_assert(strstr(t, "llm_inter_token_seconds_bucket{le=\"+Inf\"} 4\n"));
    ck_assert(strstr(t, "llm_inter_token_seconds_count 4\n"));
    ck_assert(strstr(t, "llm_queue_depth 5\n") && strstr(t, "llm_workers_live 2\n"));
    ck_assert(strstr(t, "llm_queue_capacity{scope=\"per_client\"} 64\n"));
    ck_assert(strstr(t, "llm_up{daemon=\"engined\"} 1\n") && !strstr(t, "daemon=\"samplerd\""));
    free(t);
    f = (gwm_front){.fresh = 0, .samplerd_up = 0};
    t = gwm_render(&m, &f, &n);
    ck_assert(strstr(t, "llm_up{daemon=\"tokenizerd\"} 0\n") && strstr(t, "llm_up{daemon=\"samplerd\"} 0\n"));
    ck_assert(!strstr(t, "llm_queue_depth")); /* no stale front door figures */
    free(t);
    gwm_free(&m);
}
END_TEST

/* The GENERATE of a job, fresh and as a resume: same request, resume fields, the
 * resolved seed pinned as the last parameter (it wins over the client's). */
START_TEST(test_job_generate)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_COMPLETION, "{\"prompt\":\"Once\",\"max_tokens\":9,\"seed\":5,\"stop\":[\".\"]}", &e), 0);
    gwm m;
    gwm_init(&m);
    gwj *j = gwj_new(&r, GWM_EP_COMPLETIONS, 42, "m", NULL, NULL, &m, 0);
    ck_assert_ptr_nonnull(j);
    ck_assert_ptr_null(r.prompt); /* taken */
    for (int resume = 0; resume < 2; resume++) {
        lc_resume rs = {.sess = 77, .seed = 123456, .have_seed = 1, .rbytes = 31};
        snprintf(rs.key, sizeof rs.key, "%s", "00112233445566778899aabbccddeeff");
        proto_writer w;
        gwj_generate(j, resume ? 43 : 42, resume ? &rs : NULL, &w);
        proto_msg msg;
        char err[200];
        ck_assert_int_eq(proto_decode(&msg, proto_data(&w), proto_size(&w), err, sizeof err), 0);
        ck_assert_int_eq(msg.type, PT_GENERATE);
        ck_assert_uint_eq(msg.id, resume ? 43 : 42);
        ck_assert_int_eq(proto_i64(&msg, MF_N, 0), 9);
        char s[64];
        ck_assert_int_eq(proto_strcpy(&msg, MF_PROMPT, s, sizeof s), 0);
        ck_assert_str_eq(s, "Once");
        ck_assert_uint_eq(proto_u64(&msg, MF_RESUME, 0), resume ? 77 : 0);
        ck_assert_uint_eq(proto_u64(&msg, MF_RBYTES, 0), resume ? 31 : 0);
        ck_assert_int_eq(proto_strcpy(&msg, MF_KEY, s, sizeof s), resume ? 0 : -1);
        const msgpack_object *p = proto_field(&msg, MF_PARAMS);
        ck_assert_ptr_nonnull(p);
        const msgpack_object_kv *last = &p->via.map.ptr[p->via.map.size - 1];
        ck_assert_uint_eq(p->via.map.size, resume ? 2 : 1);
        ck_assert(last->key.via.str.size == 4 && memcmp(last->key.via.str.ptr, "seed", 4) == 0);
        ck_assert(resume ? memcmp(last->val.via.str.ptr, "123456", 6) == 0 : memcmp(last->val.via.str.ptr, "5", 1) == 0);
        ck_assert_int_eq((int)proto_field(&msg, MF_STOP)->via.array.size, 1);
        proto_msg_free(&msg);
        proto_writer_free(&w);
    }
    gwj_unref(j);
    gwm_free(&m);
}
END_TEST

/* n = 3: three choices, each its own session; seed + i; one response id; chunks and the
 * whole response carry the choice index; usage sums the generated tokens. */
START_TEST(test_n_choices)
{
    oai_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3,\"seed\":7}", &e), 0);
    ck_assert_int_eq(r.n_choices, 3);
    gwm m;
    gwm_init(&m);
    gwj *j = gwj_new(&r, GWM_EP_CHAT, 42, "m", NULL, NULL, &m, 0);
    ck_assert_int_eq(j->n_ch, 3);
    for (int i = 0; i < 3; i++) {
        lc_gen g;
        gwj_gen_choice(j, i, &g);
        const char *seed = NULL;
        for (int k = 0; k < g.n_params; k++)
            if (strcmp(g.pk[k], "seed") == 0) seed = g.pv[k];
        char want[8];
        snprintf(want, sizeof want, "%d", 7 + i);
        ck_assert_str_eq(seed, want);
        ck_assert_int_eq(j->ch[i].out.index, i);
        ck_assert_str_eq(j->ch[i].out.id, j->ch[0].out.id);
    }
    size_t n;
    char *s = oai_chunk(&j->ch[2].out, "hi", 2, NULL, 0, &n);
    ck_assert(strstr(s, "\"index\":2") != NULL);
    free(s);
    s = oai_chunk_finish(&j->ch[1].out, "eog", &n);
    ck_assert(strstr(s, "\"index\":1") && strstr(s, "\"finish_reason\":\"stop\"") && !strstr(s, "[DONE]"));
    free(s);
    s = oai_chunk_tail(&j->ch[0].out, 3, 9, &n);
    ck_assert(n == 14 && memcmp(s, "data: [DONE]\n\n", 14) == 0);
    free(s);
    oai_out outs[3] = {j->ch[0].out, j->ch[1].out, j->ch[2].out};
    for (int i = 0; i < 3; i++) oai_add(&outs[i], i == 1 ? "b" : "a", 1, NULL, 0);
    const char *reasons[3] = {"eog", "length", "stop"};
    s = oai_response_n(outs, 3, reasons, 4, 12, &n);
    json_t *x = json_loadb(s, n, 0, NULL);
    json_t *ch = json_object_get(x, "choices");
    ck_assert_int_eq(json_array_size(ch), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(ch, 2), "index")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(ch, 1), "message"), "content")), "b");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ch, 1), "finish_reason")), "length");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(x, "usage"), "completion_tokens")), 12);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(x, "usage"), "prompt_tokens")), 4);
    json_decref(x);
    free(s);
    for (int i = 0; i < 3; i++) j->ch[i].out = outs[i]; /* freed with the job */
    gwj_unref(j);
    gwm_free(&m);
}
END_TEST

/* Feeds choice i of job j a message as the bridge would (the job's callbacks). */
static void feed(gwj *j, int i, proto_writer *w)
{
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(w), proto_size(w), err, sizeof err) == 0, "%s", err);
    gwj_ops.on_msg(&j->ch[i], &m);
    proto_msg_free(&m);
    proto_writer_free(w);
}

static void feed_piece(gwj *j, int i, const char *text, uint64_t ntok)
{
    proto_writer w;
    proto_begin(&w, PT_PIECE, j->ch[i].id);
    pm_piece p = {.text = proto_sv_of(text), .ntok = ntok};
    pm_piece_put(&w, &p);
    feed(j, i, &w);
}

static void feed_done(gwj *j, int i, const char *reason, uint64_t np, uint64_t ng)
{
    proto_writer w;
    proto_begin(&w, PT_DONE, j->ch[i].id);
    pm_done d = {.reason = proto_sv_of(reason), .ntok_prompt = np, .ntok = ng};
    pm_done_put(&w, &d);
    feed(j, i, &w);
}

/* A job of n = 2 fed as the bridge feeds it: the answer waits for both choices, then has
 * both in index order with usage summed; when one choice fails, the job fails and the
 * other choice is gone (the bridge cancels it). An embeddings job: one vector per input. */
START_TEST(test_job_choices)
{
    gwm m;
    gwm_init(&m);
    for (int fail = 0; fail < 2; fail++) {
        oai_req r;
        oai_err e;
        ck_assert_int_eq(parse(&r, OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":2}", &e), 0);
        gwj *j = gwj_new(&r, GWM_EP_COMPLETIONS, 42, "m", NULL, NULL, &m, 0);
        j->ch[1].id = 43;
        feed_piece(j, 1, " b", 1);
        feed_piece(j, 0, " a", 1);
        feed_done(j, 1, "eog", 4, 1);
        ck_assert(j->phase == GWJ_WAIT && !j->finished);
        if (fail) {
            proto_writer w;
            proto_begin(&w, PT_ERROR, 42);
            pm_error er = {.msg = proto_sv_of("worker died"), .code = proto_sv_of("internal"), .has_code = 1};
            pm_error_put(&w, &er);
            feed(j, 0, &w);
            ck_assert(j->finished && j->status == 500);
            ck_assert_int_eq(gwj_ops.gone(&j->ch[0]), 1); /* not done: the bridge drops it */
        } else {
            feed_done(j, 0, "length", 4, 3);
            ck_assert(j->finished && j->status == 200);
            json_t *x = json_loadb(j->body, j->body_len, 0, NULL);
            json_t *ch = json_object_get(x, "choices");
            ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ch, 0), "text")), " a");
            ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ch, 1), "text")), " b");
            ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ch, 0), "finish_reason")), "length");
            ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(x, "usage"), "completion_tokens")), 4);
            ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(x, "usage"), "prompt_tokens")), 4);
            json_decref(x);
        }
        gwj_unref(j);
    }
    oai_emb_req er;
    const char *eb = "{\"input\":[\"a\",[5,6]]}";
    ck_assert_int_eq(oai_emb_parse(&er, OAI_EMB_OPENAI, eb, strlen(eb), PROTO_POOL_MEAN, &(oai_err){0}), 0);
    gwj *j = gwj_new_embed(&er, 50, "m", &m, 0);
    ck_assert_int_eq(j->n_ch, 2);
    lc_gen g;
    gwj_gen_choice(j, 1, &g);
    ck_assert(g.embed == PROTO_POOL_MEAN && g.n_toks == 2 && g.toks[1] == 6 && !g.prompt);
    const float v[2][2] = {{0.6f, 0.8f}, {1, 0}};
    for (int i = 0; i < 2; i++) {
        proto_writer w;
        proto_begin(&w, PT_EMBEDDING, 50);
        pm_embedding pe = {.vec = {(const char *)v[i], sizeof v[i]}, .ntok = 2, .has_ntok = 1};
        pm_embedding_put(&w, &pe);
        feed(j, i, &w);
        feed_done(j, i, "embed", 2, 0);
    }
    ck_assert(j->finished && j->status == 200);
    json_t *x = json_loadb(j->body, j->body_len, 0, NULL);
    json_t *d1 = json_array_get(json_object_get(x, "data"), 1);
    ck_assert((float)json_real_value(json_array_get(json_object_get(d1, "embedding"), 0)) == 1.0f);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(x, "usage"), "prompt_tokens")), 4);
    json_decref(x);
    gwj_unref(j);
    gwm_free(&m);
}
END_TEST

/* /tokenize and /detokenize on stories260K's vocabulary: ids, pieces, specials, round
 * trip, and refusals naming what was wrong. */
START_TEST(test_tokenize)
{
    const char *shared = getenv("LLM_SHARED") ? getenv("LLM_SHARED") : "../shared";
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K-f32.gguf", shared);
    tok_source src;
    ck_assert_msg(tok_source_open(&src, path, NULL, err, sizeof err) == 0, "%s", err);
    tok_vocab *v = tok_vocab_load(src.g, err, sizeof err);
    ck_assert_ptr_nonnull(v);
    int st;
    const char *body = "{\"content\":\"Once upon a time\"}";
    char *out = gwt_tokenize(v, body, strlen(body), &st);
    ck_assert_int_eq(st, 200);
    json_t *j = json_loads(out, 0, NULL), *toks = json_object_get(j, "tokens");
    ck_assert(json_array_size(toks) > 1 && json_is_integer(json_array_get(toks, 0)));
    ck_assert_int_ne(json_integer_value(json_array_get(toks, 0)), tok_bos(v)); /* add_special defaults to false */
    json_t *req = json_pack("{s:O}", "tokens", toks);
    char *ids = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    free(out);
    out = gwt_detokenize(v, ids, strlen(ids), &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(out, "{\"content\":\"Once upon a time\"}");
    free(out);
    free(ids);
    json_decref(j);
    body = "{\"content\":\"Once\",\"add_special\":true,\"with_pieces\":true}";
    out = gwt_tokenize(v, body, strlen(body), &st);
    j = json_loads(out, 0, NULL);
    toks = json_object_get(j, "tokens");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(toks, 0), "id")), tok_bos(v));
    ck_assert(json_is_string(json_object_get(json_array_get(toks, 1), "piece")));
    json_decref(j);
    free(out);
    static const struct { int tok; const char *body, *has; } bad[] = {
        {0, "{\"tokens\":[1,99999]}", "99999"},
        {0, "{\"tokens\":[1,-2]}", "-2"},
        {0, "{\"tokens\":[\"a\"]}", "tokens[0]"},
        {0, "{\"tokens\":5}", "array"},
        {1, "{\"content\":5}", "content"},
        {1, "{\"content\":\"x\",\"with_pieces\":1}", "with_pieces"},
        {1, "[1]", "JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = bad[i].tok ? gwt_tokenize(v, bad[i].body, strlen(bad[i].body), &st)
                         : gwt_detokenize(v, bad[i].body, strlen(bad[i].body), &st);
        ck_assert_int_eq(st, 400);
        ck_assert_msg(strstr(out, bad[i].has) != NULL, "%s: %s", bad[i].body, out);
        free(out);
    }
    tok_vocab_free(v);
    tok_source_close(&src);
}
END_TEST

Suite *oai_suite(void)
{
    Suite *s = suite_create("oai");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_completion_mapping);
    tcase_add_test(tc, test_chat_mapping);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_structured_output);
    tcase_add_test(tc, test_chat_stream_chunks);
    tcase_add_test(tc, test_completion_response);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_metrics_text);
    tcase_add_test(tc, test_job_generate);
    tcase_add_test(tc, test_n_choices);
    tcase_add_test(tc, test_tokenize);
    tcase_add_test(tc, test_job_choices);
    suite_add_tcase(s, tc);
    return s;
}
