/* Tests for embeddings: the engine's pooling (eng_pool_add, eng_pool_finish), eng_embed
 * against the forward pass's own logits, and the gateway's request and response JSON
 * (client/oai_embed). Suite "embed". */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gguf.h"
#include "oai_embed.h"
#include "proto.h"
#include "segment.h"

static const char *shared(void)
{
    const char *s = getenv("LLM_SHARED");
    return s ? s : "../shared";
}

static double norm2(const float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

/* Mean and last pooling of three rows, then L2 normalization; a zero vector stays zero. */
START_TEST(test_pooling)
{
    const float rows[3 * 2] = {1, 0, 3, 4, 2, 2};
    double acc[2] = {0, 0};
    float out[2];
    eng_pool_add(acc, rows, 2, 2, ENG_POOL_MEAN); /* in two calls, as chunks arrive */
    eng_pool_add(acc, rows + 4, 1, 2, ENG_POOL_MEAN);
    eng_pool_finish(acc, 3, 2, ENG_POOL_MEAN, out); /* mean (2, 2): normalized (0.7071, 0.7071) */
    ck_assert(fabsf(out[0] - 0.70710678f) < 1e-6 && fabsf(out[1] - 0.70710678f) < 1e-6);
    double last[2] = {0, 0};
    eng_pool_add(last, rows, 2, 2, ENG_POOL_LAST);
    eng_pool_finish(last, 2, 2, ENG_POOL_LAST, out); /* (3, 4) -> (0.6, 0.8) */
    ck_assert(fabsf(out[0] - 0.6f) < 1e-6 && fabsf(out[1] - 0.8f) < 1e-6);
    double zero[2] = {0, 0};
    eng_pool_finish(zero, 1, 2, ENG_POOL_MEAN, out);
    ck_assert(out[0] == 0 && out[1] == 0);
}
END_TEST

/* logits = W xn for stories260K (W its f32 output matrix), so the embedding e (xn
 * pooled, normalized) must satisfy mean_p(logits_p) = s W e for one scale s > 0: checked
 * within 1e-4 of the logits' size, for mean pooling (every row of a prefill) and last
 * pooling (its last row), on the float path. */
static void check_against_logits(eng_model *m, const gguf_tensor *w, const int32_t *toks, int n, int pooling)
{
    int E = eng_config_of(m)->n_embd, V = eng_config_of(m)->n_vocab;
    char err[256];
    float *emb = malloc((size_t)E * sizeof *emb), *lg = malloc((size_t)n * V * sizeof *lg);
    double *want = calloc((size_t)V, sizeof *want), *we = calloc((size_t)V, sizeof *we);
    eng_session *s = eng_session_new(m, n, ENG_KV_F32, err, sizeof err);
    ck_assert_msg(s && eng_embed(m, s, toks, n, pooling, emb, err, sizeof err) == 0, "%s", err);
    ck_assert(fabs(norm2(emb, E) - 1) < 1e-5);
    eng_session_reset(s);
    ck_assert_msg(eng_prefill(m, s, toks, n, lg, true, err, sizeof err) == 0, "%s", err);
    for (int p = pooling == ENG_POOL_LAST ? n - 1 : 0; p < n; p++)
        for (int v = 0; v < V; v++) want[v] += lg[(size_t)p * V + v];
    const float *W = w->data;
    double num = 0, den = 0, big = 0;
    for (int v = 0; v < V; v++) {
        for (int i = 0; i < E; i++) we[v] += (double)W[(size_t)v * E + i] * emb[i];
        num += want[v] * we[v];
        den += we[v] * we[v];
        if (fabs(want[v]) > big) big = fabs(want[v]);
    }
    double scale = num / den, worst = 0;
    ck_assert(scale > 0);
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs(want[v] - scale * we[v]));
    ck_assert_msg(worst <= 1e-4 * big, "pooling %d: logits differ from W x embedding by %.3g (of %.3g)", pooling,
                  worst, big);
    eng_session_free(s);
    free(emb); free(lg); free(want); free(we);
}

/* eng_embed on stories260K: matches the logits; identical inputs give identical vectors,
 * different inputs different ones; a bad pooling or an empty input is refused. */
START_TEST(test_embed_engine)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/stories260K-f32.gguf", shared());
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    const gguf_tensor *w = gguf_find_tensor(g, "output.weight");
    if (!w) w = gguf_find_tensor(g, "token_embd.weight"); /* tied */
    ck_assert(w && w->type == 0 /* F32 */);
    eng_open_info info;
    eng_model *m = eng_open(path, ENG_FLOAT, &info, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    const int32_t a[] = {1, 403, 407, 261, 378, 11, 470}, b[] = {1, 403, 407, 261, 378, 11, 471};
    check_against_logits(m, w, a, 7, ENG_POOL_MEAN);
    check_against_logits(m, w, a, 7, ENG_POOL_LAST);
    int E = eng_config_of(m)->n_embd;
    float *x = malloc((size_t)E * 3 * sizeof *x);
    for (int k = 0; k < 3; k++) {
        eng_session *s = eng_session_new(m, 8, ENG_KV_F16, err, sizeof err);
        ck_assert_int_eq(eng_embed(m, s, k == 2 ? b : a, 7, ENG_POOL_MEAN, x + (size_t)k * E, err, sizeof err), 0);
        eng_session_free(s);
    }
    ck_assert_int_eq(memcmp(x, x + E, (size_t)E * sizeof *x), 0);
    ck_assert_int_ne(memcmp(x, x + 2 * E, (size_t)E * sizeof *x), 0);
    eng_session *s = eng_session_new(m, 4, ENG_KV_F16, err, sizeof err);
    ck_assert_int_eq(eng_embed(m, s, a, 7, ENG_POOL_MEAN, x, err, sizeof err), -1); /* past its context */
    ck_assert_int_eq(eng_embed(m, s, a, 2, 3, x, err, sizeof err), -1);
    ck_assert(strstr(err, "pooling"));
    eng_session_free(s);
    free(x);
    char name[SEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", eng_segment_name(m));
    eng_close(m);
    if (info.converted) seg_remove(name, err, sizeof err);
    gguf_close(g);
}
END_TEST

static int parse(oai_emb_req *r, oai_emb_kind k, const char *body, oai_err *e)
{
    return oai_emb_parse(r, k, body, strlen(body), PROTO_POOL_MEAN, e);
}

/* input shapes, pooling, encoding, refusals naming the parameter. */
START_TEST(test_embed_parse)
{
    oai_emb_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_EMB_OPENAI, "{\"input\":[\"a\",\"b\",\"c\"],\"model\":\"x\"}", &e), 0);
    ck_assert_int_eq(r.n_inputs, 3);
    ck_assert_str_eq(r.inputs[2], "c");
    ck_assert_int_eq(r.pooling, PROTO_POOL_MEAN);
    oai_emb_free(&r);
    ck_assert_int_eq(parse(&r, OAI_EMB_OPENAI, "{\"input\":[5,6],\"pooling\":\"last\",\"encoding_format\":\"base64\"}", &e), 0);
    ck_assert(r.n_inputs == 1 && r.n_ids[0] == 2 && r.ids[0][1] == 6 && r.pooling == PROTO_POOL_LAST && r.base64);
    oai_emb_free(&r);
    ck_assert_int_eq(parse(&r, OAI_EMB_OPENAI, "{\"input\":[[5],[6,7]],\"dimensions\":64}", &e), 0);
    ck_assert(r.n_inputs == 2 && r.n_ids[1] == 2 && r.dimensions == 64);
    oai_emb_free(&r);
    ck_assert_int_eq(parse(&r, OAI_EMB_LLAMA, "{\"content\":\"hello\"}", &e), 0);
    ck_assert(r.n_inputs == 1 && !strcmp(r.inputs[0], "hello"));
    oai_emb_free(&r);
    static const struct { const char *body, *param, *msg; } bad[] = {
        {"{\"model\":\"x\"}", "input", "required"},
        {"{\"input\":\"\"}", "input", "empty"},
        {"{\"input\":[]}", "input", "empty"},
        {"{\"input\":[[1,-1]]}", "input", "token id"},
        {"{\"input\":\"a\",\"encoding_format\":\"hex\"}", "encoding_format", "base64"},
        {"{\"input\":\"a\",\"pooling\":\"cls\"}", "pooling", "last"},
        {"{\"input\":\"a\",\"dimensions\":0}", "dimensions", "positive"},
        {"{\"input\":{\"a\":1}}", "input", "string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(&r, OAI_EMB_OPENAI, bad[i].body, &e), -1);
        ck_assert_str_eq(e.param, bad[i].param);
        ck_assert_msg(strstr(e.msg, bad[i].msg), "%s: %s", bad[i].body, e.msg);
    }
    char many[2048] = "{\"input\":[";
    for (int i = 0; i <= OAI_EMB_MAX_INPUTS; i++) strcat(many, i ? ",\"x\"" : "\"x\"");
    strcat(many, "]}");
    ck_assert_int_eq(parse(&r, OAI_EMB_OPENAI, many, &e), -1);
    ck_assert(strstr(e.msg, "at most"));
}
END_TEST

/* float and base64 (little-endian f32) responses, llama-server's shape, usage. */
START_TEST(test_embed_response)
{
    oai_emb_req r;
    oai_err e;
    ck_assert_int_eq(parse(&r, OAI_EMB_OPENAI, "{\"input\":[\"a\",\"b\"]}", &e), 0);
    float v0[3] = {0.6f, 0.8f, 0}, v1[3] = {1, 0, -0.25f};
    float *vecs[2] = {v0, v1};
    size_t n;
    char *s = oai_emb_response(&r, "m", vecs, 3, 7, &n);
    json_t *j = json_loadb(s, n, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
    json_t *d1 = json_array_get(json_object_get(j, "data"), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(d1, "index")), 1);
    ck_assert(json_real_value(json_array_get(json_object_get(d1, "embedding"), 2)) == -0.25);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 7);
    json_decref(j);
    free(s);
    r.base64 = 1;
    s = oai_emb_response(&r, "m", vecs, 3, 7, &n);
    j = json_loadb(s, n, 0, NULL);
    /* 1.0f, 0.0f, -0.25f little-endian: 00 00 80 3f | 00 00 00 00 | 00 00 80 be */
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 1), "embedding")),
                     "AACAPwAAAAAAAIC+");
    json_decref(j);
    free(s);
    r.kind = OAI_EMB_LLAMA;
    s = oai_emb_response(&r, "m", vecs, 3, 7, &n);
    j = json_loadb(s, n, 0, NULL);
    ck_assert(json_is_array(j) && json_array_size(j) == 2);
    ck_assert((float)json_real_value(json_array_get(json_array_get(json_object_get(json_array_get(j, 0), "embedding"), 0), 1)) ==
              0.8f); /* 9 digits: the float comes back exactly */
    json_decref(j);
    free(s);
    oai_emb_free(&r);
}
END_TEST

Suite *embed_suite(void)
{
    Suite *s = suite_create("embed");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pooling);
    tcase_add_test(tc, test_embed_engine);
    tcase_add_test(tc, test_embed_parse);
    tcase_add_test(tc, test_embed_response);
    suite_add_tcase(s, tc);
    return s;
}
