/* oai.c - OpenAI request parsing and response JSON (see oai.h), on jansson. */
#include "oai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "errcode.h"
#include "gram.h"
#include "json_schema.h"
#include "sparams.h"
#include "unicode.h"

int oai_bad(oai_err *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    return -1;
}

void oai_req_free(oai_req *r)
{
    free(r->prompt);
    for (int i = 0; i < r->n_msgs; i++) free(r->msgs[i]);
    free(r->msgs);
    for (int i = 0; i < r->n_params; i++) { free(r->pk[i]); free(r->pv[i]); }
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->grammar);
    oait_req_free(&r->tl);
    memset(r, 0, sizeof *r);
    oait_init(&r->tl);
}

/* ---- request parsing ---- */

/* Adds (or replaces) a sampler parameter after checking its value with samplerd's parser. */
static int add_param(oai_req *r, smp_params *chk, const char *name, const char *value, const char *key, oai_err *e)
{
    char err[200];
    if (lc_param_check(chk, name, value, err, sizeof err) != ERR_NONE) return oai_bad(e, key, "%s", err);
    for (int i = 0; i < r->n_params; i++)
        if (strcmp(r->pk[i], name) == 0) {
            char *v = strdup(value);
            if (!v) return oai_bad(e, key, "out of memory");
            free(r->pv[i]);
            r->pv[i] = v;
            return 0;
        }
    if (r->n_params >= OAI_MAX_PARAMS) return oai_bad(e, key, "too many sampler parameters");
    r->pk[r->n_params] = strdup(name);
    r->pv[r->n_params] = strdup(value);
    if (!r->pk[r->n_params] || !r->pv[r->n_params]) return oai_bad(e, key, "out of memory");
    r->n_params++;
    return 0;
}


/* A JSON scalar as the text samplerd parses; arrays of strings are joined with ';' for
 * "samplers" and kept as JSON otherwise (dry_sequence_breakers takes a JSON array). */
static char *value_text(const char *key, json_t *v)
{
    char buf[64];
    if (json_is_integer(v)) snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, sizeof buf, "%.9g", json_real_value(v));
    else if (json_is_boolean(v)) snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "true" : "false");
    else if (json_is_string(v)) return strdup(json_string_value(v));
    else if (json_is_array(v) && strcmp(key, "samplers") == 0) {
        size_t i, n = 1;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (!json_is_string(x)) return NULL;
            n += json_string_length(x) + 1;
        }
        char *s = calloc(1, n);
        json_array_foreach(v, i, x) if (s) { if (i) strcat(s, ";"); strcat(s, json_string_value(x)); }
        return s;
    } else if (json_is_array(v)) return json_dumps(v, JSON_COMPACT);
    else return NULL;
    return strdup(buf);
}

static int parse_int(json_t *v, const char *key, long lo, long hi, long *out, oai_err *e)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return oai_bad(e, key, "%s must be an integer in [%ld, %ld]", key, lo, hi);
    *out = (long)json_integer_value(v);
    return 0;
}

static int parse_bool(json_t *v, const char *key, int *out, oai_err *e)
{
    if (!json_is_boolean(v)) return oai_bad(e, key, "%s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static char *content_text(json_t *c, oai_err *e)
{
    if (json_is_string(c)) return strdup(json_string_value(c));
    if (json_is_null(c) || !c) return strdup("");
    if (!json_is_array(c)) {
        oai_bad(e, "messages", "a message's content must be a string or an array of text parts");
        return NULL;
    }
    size_t i, n = 1;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text)) {
            oai_bad(e, "messages", "only content parts of type \"text\" are supported");
            return NULL;
        }
        n += json_string_length(text);
    }
    char *s = calloc(1, n);
    json_array_foreach(c, i, part) if (s) strcat(s, json_string_value(json_object_get(part, "text")));
    return s;
}

static int parse_messages(oai_req *r, json_t *v, oai_err *e)
{
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > OAI_MAX_MSGS)
        return oai_bad(e, "messages", "messages must be an array of 1 to %d messages", OAI_MAX_MSGS);
    r->msgs = calloc(json_array_size(v) * 2, sizeof *r->msgs);
    if (!r->msgs) return oai_bad(e, "messages", "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        json_t *role = json_object_get(m, "role");
        const char *rs = json_is_string(role) ? json_string_value(role) : NULL;
        if (!json_is_object(m) || !rs) return oai_bad(e, "messages", "messages[%zu] needs a string 'role'", i);
        if (strcmp(rs, "developer") == 0) rs = "system";
        if (strcmp(rs, "system") != 0 && strcmp(rs, "user") != 0 && strcmp(rs, "assistant") != 0 &&
            strcmp(rs, "tool") != 0)
            return oai_bad(e, "messages", "messages[%zu]: role '%.40s' is not supported (system, developer, user, "
                                      "assistant, tool)", i, rs);
        char terr[300];
        if (oait_parse_message(&r->tl, m, i, terr, sizeof terr) != 0) return oai_bad(e, "messages", "%s", terr);
        char *text = content_text(json_object_get(m, "content"), e);
        if (!text) return -1;
        r->msgs[r->n_msgs++] = strdup(rs);
        r->msgs[r->n_msgs++] = text;
        if (!r->msgs[r->n_msgs - 2]) return oai_bad(e, "messages", "out of memory");
    }
    return 0;
}

static int parse_prompt(oai_req *r, json_t *v, oai_err *e)
{
    if (json_is_array(v) && json_array_size(v) == 1) v = json_array_get(v, 0);
    if (json_is_array(v) && json_array_size(v) > 1 && json_is_string(json_array_get(v, 0)))
        return oai_bad(e, "prompt", "one prompt per request is supported (got an array of %zu)", json_array_size(v));
    if (!json_is_string(v))
        return oai_bad(e, "prompt", "prompt must be a string (token-id prompts are not supported)");
    r->prompt = strdup(json_string_value(v));
    return r->prompt ? 0 : oai_bad(e, "prompt", "out of memory");
}

static int parse_stop(oai_req *r, json_t *v, oai_err *e)
{
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return 0;
        r->stops[r->n_stops++] = strdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) return oai_bad(e, "stop", "stop must be a string or an array of strings");
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) return oai_bad(e, "stop", "stop must be a string or an array of strings");
        if (json_string_length(s) == 0) continue;
        if (r->n_stops >= OAI_MAX_STOPS) return oai_bad(e, "stop", "at most %d stop strings", OAI_MAX_STOPS);
        r->stops[r->n_stops++] = strdup(json_string_value(s));
    }
    return 0;
}

/* {"token id": bias, ...} or [[id, bias], ...] -> samplerd's "id:bias,id:bias". */
static int parse_bias(oai_req *r, smp_params *chk, json_t *v, oai_err *e)
{
    char *s = calloc(1, json_is_object(v) ? json_object_size(v) * 48 + 1 : json_array_size(v) * 48 + 1);
    if (!s) return oai_bad(e, "logit_bias", "out of memory");
    size_t n = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *b;
        json_object_foreach(v, k, b) {
            char *end;
            long id = strtol(k, &end, 10);
            if (*end || !*k || !json_is_number(b)) { free(s); return oai_bad(e, "logit_bias", "logit_bias keys must be token ids and values numbers"); }
            n += (size_t)sprintf(s + n, "%s%ld:%.9g", n ? "," : "", id, json_number_value(b));
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *p;
        json_array_foreach(v, i, p) {
            json_t *id = json_array_get(p, 0), *b = json_array_get(p, 1);
            if (json_array_size(p) != 2 || !json_is_integer(id) || !(json_is_number(b) || json_is_false(b))) {
                free(s);
                return oai_bad(e, "logit_bias", "logit_bias entries must be [token id, bias]");
            }
            if (json_is_false(b)) n += (size_t)sprintf(s + n, "%s%lld:-inf", n ? "," : "", (long long)json_integer_value(id));
            else n += (size_t)sprintf(s + n, "%s%lld:%.9g", n ? "," : "", (long long)json_integer_value(id), json_number_value(b));
        }
    } else {
        free(s);
        return oai_bad(e, "logit_bias", "logit_bias must be an object {\"token id\": bias}");
    }
    int rc = n ? add_param(r, chk, "logit_bias", s, "logit_bias", e) : 0;
    free(s);
    return rc;
}

/* r->grammar from GBNF text (gbnf, malloc'd: taken) or from a JSON Schema (schema),
 * compiled to check it; key names the parameter in an error. */
static int set_grammar(oai_req *r, const char *key, char *gbnf, json_t *schema, oai_err *e)
{
    char err[256];
    if (r->grammar) {
        free(gbnf);
        return oai_bad(e, key, "give one of grammar, json_schema and a response_format other than text");
    }
    if (schema) {
        if (!json_is_object(schema) && !json_is_boolean(schema))
            return oai_bad(e, key, "%s: the schema must be a JSON object", key);
        char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        gbnf = text ? jsg_to_gbnf(text, strlen(text), err, sizeof err) : NULL;
        free(text);
        if (!gbnf) return oai_bad(e, key, "%s: %s", key, text ? err : "out of memory");
    }
    gram *g = gram_compile(gbnf, strlen(gbnf), err, sizeof err);
    if (!g) {
        free(gbnf);
        return oai_bad(e, key, "%s: %s", key, err);
    }
    gram_free(g);
    r->grammar = gbnf;
    return 0;
}

/* response_format: text (nothing to do), json_object (any object, or llama-server's
 * "schema" in it), json_schema (its "json_schema": {"schema": ..., "strict": ...}). */
static int parse_response_format(oai_req *r, json_t *v, oai_err *e)
{
    const char *key = "response_format";
    json_t *t = json_object_get(v, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : NULL;
    if (!json_is_object(v) || !type) return oai_bad(e, key, "response_format must be an object with a \"type\"");
    if (strcmp(type, "text") == 0) return 0;
    if (strcmp(type, "json_object") == 0) {
        json_t *s = json_object_get(v, "schema"), *any = s ? NULL : json_pack("{s:s}", "type", "object");
        int rc = set_grammar(r, key, NULL, s ? s : any, e);
        json_decref(any);
        return rc;
    }
    if (strcmp(type, "json_schema") == 0) {
        json_t *js = json_object_get(v, "json_schema"), *s = json_object_get(js, "schema");
        json_t *strict = json_object_get(js, "strict");
        if (!json_is_object(js)) return oai_bad(e, key, "response_format: json_schema must be an object");
        if (strict && !json_is_boolean(strict) && !json_is_null(strict))
            return oai_bad(e, key, "response_format: json_schema.strict must be true or false");
        if (!s) return oai_bad(e, key, "response_format: json_schema.schema is required");
        return set_grammar(r, key, NULL, s, e); /* strict or not, the schema is enforced */
    }
    return oai_bad(e, key, "response_format: type '%.60s' is not supported (text, json_object, json_schema)", type);
}

/* Keys of the OpenAI API that do not change the generation here. */
static const char *const IGNORED[] = {"model", "user", "metadata", "store", "service_tier", "cache_prompt", "id_slot",
                                      "modalities", NULL};

/* tools, tool_choice, parallel_tool_calls (oai_tools.h); functions (the old API) is refused. */
static int parse_tool_key(oai_req *r, const char *key, json_t *v, oai_err *e)
{
    char err[300];
    if (strcmp(key, "functions") == 0)
        return json_is_array(v) && json_array_size(v) == 0 ? 0 : oai_bad(e, key, "functions is not supported: use tools");
    if (r->kind != OAI_CHAT)
        return oai_bad(e, key, "%s: function calling is for /v1/chat/completions", key);
    if (strcmp(key, "parallel_tool_calls") == 0) return parse_bool(v, key, &r->tl.parallel, e);
    int rc = strcmp(key, "tools") == 0 ? oait_parse_tools(&r->tl, v, err, sizeof err)
                                       : oait_parse_choice(&r->tl, v, err, sizeof err);
    return rc == 0 ? 0 : oai_bad(e, key, "%s", err);
}

static int parse_key(oai_req *r, smp_params *chk, const char *key, json_t *v, oai_err *e)
{
    long x;
    for (int i = 0; IGNORED[i]; i++)
        if (strcmp(key, IGNORED[i]) == 0) return 0;
    int chat = r->kind == OAI_CHAT;
    if (strcmp(key, "messages") == 0 && chat) return parse_messages(r, v, e);
    if (strcmp(key, "prompt") == 0 && !chat) return parse_prompt(r, v, e);
    if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens") || !strcmp(key, "n_predict"))
        return parse_int(v, key, -1, 1 << 20, &r->n_predict, e);
    if (strcmp(key, "stop") == 0) return parse_stop(r, v, e);
    if (strcmp(key, "stream") == 0) return parse_bool(v, key, &r->stream, e);
    if (strcmp(key, "stream_options") == 0) {
        json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v)) return oai_bad(e, key, "stream_options must be an object");
        return u && !json_is_null(u) ? parse_bool(u, "stream_options.include_usage", &r->include_usage, e) : 0;
    }
    if (strcmp(key, "echo") == 0 && !chat) return parse_bool(v, key, &r->echo, e);
    if (strcmp(key, "logprobs") == 0) {
        if (chat) return parse_bool(v, key, &r->logprobs, e);
        if (json_is_boolean(v)) { r->logprobs = json_is_true(v); return 0; } /* llama-server accepts this */
        if (parse_int(v, key, 0, OAI_MAX_TOP, &x, e) != 0) return -1;
        r->logprobs = 1;
        r->top_logprobs = (int)x;
        return 0;
    }
    if (strcmp(key, "top_logprobs") == 0) {
        if (parse_int(v, key, 0, OAI_MAX_TOP, &x, e) != 0) return -1;
        r->top_logprobs = (int)x;
        return 0;
    }
    if (strcmp(key, "n") == 0) {
        if (parse_int(v, key, 1, OAI_MAX_N, &x, e) != 0) return -1;
        r->n_choices = (int)x;
        return 0;
    }
    if (strcmp(key, "best_of") == 0) return parse_int(v, key, 1, 1, &x, e) ? oai_bad(e, key, "best_of: only 1 is supported") : 0;
    if (strcmp(key, "suffix") == 0)
        return json_is_string(v) && json_string_length(v) == 0 ? 0 : oai_bad(e, key, "suffix is not supported");
    if (!strcmp(key, "tools") || !strcmp(key, "functions") || !strcmp(key, "tool_choice") ||
        !strcmp(key, "parallel_tool_calls"))
        return parse_tool_key(r, key, v, e);
    if (strcmp(key, "response_format") == 0) return parse_response_format(r, v, e);
    if (strcmp(key, "json_schema") == 0) return set_grammar(r, key, NULL, v, e);
    if (strcmp(key, "grammar") == 0) {
        if (!json_is_string(v)) return oai_bad(e, key, "grammar must be a string (GBNF)");
        if (json_string_length(v) == 0) return 0; /* llama-server: an empty grammar is none */
        char *g = strndup(json_string_value(v), json_string_length(v));
        return g ? set_grammar(r, key, g, NULL, e) : oai_bad(e, key, "out of memory");
    }
    if (strcmp(key, "logit_bias") == 0) return parse_bias(r, chk, v, e);
    if (!smp_param_known(key)) return 0; /* unknown keys are ignored, as llama-server does */
    char *text = value_text(key, v);
    if (!text) return oai_bad(e, key, "%s must be a number, a boolean or a string", key);
    int rc = add_param(r, chk, key, text, key, e);
    if (rc == 0 && strcmp(key, "temperature") == 0) r->greedy = atof(text) <= 0;
    free(text);
    return rc;
}

int oai_parse(oai_req *r, oai_kind kind, const char *body, size_t len, oai_err *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    oait_init(&r->tl);
    r->kind = kind;
    r->n_predict = -1;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) return oai_bad(e, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = 0;
    smp_params chk = smp_params_default();
    if (!json_is_object(root)) rc = oai_bad(e, NULL, "the body must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (rc != 0) break;
        if (!json_is_null(v)) rc = parse_key(r, &chk, key, v, e);
    }
    if (rc == 0 && kind == OAI_CHAT && !r->msgs) rc = oai_bad(e, "messages", "messages is required");
    if (rc == 0 && kind == OAI_COMPLETION && !r->prompt) rc = oai_bad(e, "prompt", "prompt is required");
    char terr[300];
    if (rc == 0 && oait_check(&r->tl, terr, sizeof terr) != 0) rc = oai_bad(e, "tool_choice", "%s", terr);
    if (rc == 0 && kind == OAI_CHAT && r->top_logprobs > 0 && !r->logprobs)
        rc = oai_bad(e, "top_logprobs", "top_logprobs needs logprobs: true");
    if (rc == 0 && r->logprobs) { /* samplerd reports the chosen token's log-prob when n_probs > 0 */
        long want = r->top_logprobs > 0 ? r->top_logprobs : 1;
        for (int i = 0; i < r->n_params; i++)
            if (strcmp(r->pk[i], "n_probs") == 0 && atol(r->pv[i]) > want) want = atol(r->pv[i]);
        char n[24];
        snprintf(n, sizeof n, "%ld", want);
        rc = add_param(r, &chk, "n_probs", n, "top_logprobs", e);
    }
    json_decref(root);
    if (rc != 0) oai_req_free(r);
    return rc;
}

int oai_tools_prepare(oai_req *r, const char *template_name, oai_err *e)
{
    r->family = oait_family_of(template_name);
    if (!oait_active(&r->tl)) return 0;
    if (r->family == OAIT_UNSUPPORTED)
        return oai_bad(e, "tools", "tools: the model's chat template (%s) has no tool-call syntax this gateway knows "
                   "(chatml, llama3, mistral-v3, mistral-v3-tekken)", template_name && *template_name ? template_name
                   : "not known yet");
    char err[300];
    char *g = oait_grammar(&r->tl, r->family, err, sizeof err);
    if (!g) return err[0] ? oai_bad(e, "tools", "%s", err) : 0;
    if (r->grammar) {
        free(g);
        return oai_bad(e, "tool_choice", "tool_choice required or a named function constrains the output itself: "
                   "give no grammar, json_schema or response_format with it");
    }
    r->grammar = g;
    return 0;
}

/* ---- responses ---- */

/* A JSON string of s[0..n), invalid UTF-8 replaced by U+FFFD. */
static json_t *jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    char *buf = malloc(n * 3 + 1);
    size_t off = 0, k = 0;
    while (buf && off < n) k += (size_t)uni_encode(uni_decode(s, n, &off), buf + k);
    j = buf ? json_stringn(buf, k) : NULL;
    free(buf);
    return j ? j : json_string("");
}

static json_t *jbytes(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* Log-probs are finite in JSON: a banned token's -inf becomes -9999 (OpenAI's floor). */
static json_t *jlp(double lp)
{
    return json_real(isfinite(lp) ? lp : -9999.0);
}

void oai_out_init(oai_out *o, const oai_req *r, const char *model, long long created, uint64_t seq)
{
    memset(o, 0, sizeof *o);
    o->kind = r->kind;
    snprintf(o->id, sizeof o->id, "%s-%llx%06llx", r->kind == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)created, (unsigned long long)(seq & 0xffffff));
    o->created = created;
    snprintf(o->model, sizeof o->model, "%s", model ? model : "");
    o->logprobs = r->logprobs;
    o->top_logprobs = r->top_logprobs;
    o->include_usage = r->include_usage;
    o->tools = r->kind == OAI_CHAT && oait_active(&r->tl) && r->family != OAIT_UNSUPPORTED;
    o->family = r->family;
    oait_parser_init(&o->tp, r->family);
}

void oai_out_free(oai_out *o)
{
    oait_parser_free(&o->tp);
    free(o->ev);
    o->ev = NULL;
    free(o->text);
    json_decref((json_t *)o->lp);
    o->text = NULL;
    o->lp = NULL;
}

static json_t *alt_text(oai_out *o, int32_t id, char *buf, size_t cap, int *n)
{
    *n = o->text_fn ? o->text_fn(o->text_cls, id, buf, cap) : -1;
    if (*n < 0) *n = snprintf(buf, cap, "<id %d>", (int)id); /* no vocabulary: the id as text */
    if ((size_t)*n > cap) *n = (int)cap;
    return jstr(buf, (size_t)*n);
}

/* Chat: appends {"token","logprob","bytes","top_logprobs"} per token to arr. */
static void chat_logprobs(oai_out *o, json_t *arr, const oai_token *t, int n_toks)
{
    char buf[256];
    for (int i = 0; i < n_toks; i++) {
        json_t *top = json_array();
        for (int j = 0; j < t[i].n_top && j < o->top_logprobs; j++) {
            int n;
            json_t *tt = alt_text(o, t[i].top[j].id, buf, sizeof buf, &n);
            json_array_append_new(top, json_pack("{s:o,s:o,s:o}", "token", tt, "logprob", jlp(t[i].top[j].logprob),
                                                 "bytes", jbytes(buf, (size_t)n)));
        }
        json_array_append_new(arr, json_pack("{s:o,s:o,s:o,s:o}", "token", jstr(t[i].text, t[i].len), "logprob",
                                             jlp(t[i].logprob), "bytes", jbytes(t[i].text, t[i].len),
                                             "top_logprobs", top));
    }
}

/* Completion: appends to {"tokens","token_logprobs","top_logprobs","text_offset"}. */
static void completion_logprobs(oai_out *o, json_t *obj, const oai_token *t, int n_toks)
{
    char buf[256];
    for (int i = 0; i < n_toks; i++) {
        json_t *top = json_object();
        for (int j = 0; j < t[i].n_top && j < o->top_logprobs; j++) {
            int n;
            json_t *tt = alt_text(o, t[i].top[j].id, buf, sizeof buf, &n);
            json_object_set_new(top, json_string_value(tt), jlp(t[i].top[j].logprob));
            json_decref(tt);
        }
        json_array_append_new(json_object_get(obj, "tokens"), jstr(t[i].text, t[i].len));
        json_array_append_new(json_object_get(obj, "token_logprobs"), jlp(t[i].logprob));
        json_array_append_new(json_object_get(obj, "top_logprobs"), top);
        json_array_append_new(json_object_get(obj, "text_offset"), json_integer((json_int_t)o->text_off));
        o->text_off += t[i].len;
    }
}

static json_t *new_logprobs(oai_kind kind)
{
    if (kind == OAI_CHAT) return json_pack("{s:[]}", "content");
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static void add_logprobs(oai_out *o, json_t *lp, const oai_token *t, int n_toks)
{
    if (o->kind == OAI_CHAT) chat_logprobs(o, json_object_get(lp, "content"), t, n_toks);
    else completion_logprobs(o, lp, t, n_toks);
}

/* The common head of every object: id, object, created, model, choices. */
static json_t *head(const oai_out *o, const char *object, json_t *choice)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", o->id, "object", object, "created", (json_int_t)o->created,
                     "model", o->model, "choices", choice);
}

static json_t *chunk_obj(oai_out *o, const char *text, size_t n, const oai_token *toks, int n_toks,
                         const char *finish, int role)
{
    json_t *lp = json_null();
    if (o->logprobs && n_toks > 0) {
        lp = new_logprobs(o->kind);
        add_logprobs(o, lp, toks, n_toks);
    }
    json_t *fin = finish ? json_string(finish) : json_null(), *choice;
    if (o->kind == OAI_CHAT) {
        json_t *delta = role ? json_pack("{s:s,s:s}", "role", "assistant", "content", "")
                        : finish && !n ? json_object() : json_pack("{s:o}", "content", jstr(text, n));
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", o->index, "delta", delta, "logprobs", lp, "finish_reason", fin);
    } else {
        choice = json_pack("{s:o,s:i,s:o,s:o}", "text", jstr(text, n), "index", o->index, "logprobs", lp, "finish_reason", fin);
    }
    json_t *c = head(o, o->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", choice);
    if (o->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* Appends "data: <json>\n\n" to *s (a malloc'd buffer of *len bytes) and frees j. */
static void sse_append(char **s, size_t *len, json_t *j)
{
    char *d = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!d) return;
    size_t dl = strlen(d);
    char *x = realloc(*s, *len + dl + 9);
    if (x) {
        memcpy(x + *len, "data: ", 6);
        memcpy(x + *len + 6, d, dl);
        memcpy(x + *len + 6 + dl, "\n\n", 3);
        *len += dl + 8;
        *s = x;
    }
    free(d);
}

char *oai_chunk_role(oai_out *o, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (o->kind == OAI_CHAT) sse_append(&s, len, chunk_obj(o, NULL, 0, NULL, 0, NULL, 1));
    return s;
}

/* ---- tool calls ---- */

static json_t *call_json(int index, const oait_call *c, int head_part)
{
    if (head_part)
        return json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", index, "id", c->id, "type", "function", "function",
                         "name", c->name, "arguments", "");
    return json_pack("{s:i,s:{s:s}}", "index", index, "function", "arguments", c->args);
}

static json_t *call_chunk(oai_out *o, json_t *call)
{
    json_t *choice = json_pack("{s:i,s:{s:[o]},s:n,s:n}", "index", o->index, "delta", "tool_calls", call, "logprobs",
                               "finish_reason");
    json_t *c = head(o, "chat.completion.chunk", choice);
    if (o->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* The streaming parser's sink: content chunks, and per call a chunk with its index, id,
 * type and name, then one with its arguments. */
static void stream_content(void *cls, const char *text, size_t n)
{
    oai_out *o = cls;
    sse_append(&o->ev, &o->ev_len, chunk_obj(o, text, n, NULL, 0, NULL, 0));
}

static void stream_call(void *cls, int index, const oait_call *c)
{
    oai_out *o = cls;
    sse_append(&o->ev, &o->ev_len, call_chunk(o, call_json(index, c, 1)));
    sse_append(&o->ev, &o->ev_len, call_chunk(o, call_json(index, c, 0)));
}

static void stream_head(void *cls, int index, const char *id, const char *name)
{
    oai_out *o = cls;
    oait_call c = {id, name, ""};
    sse_append(&o->ev, &o->ev_len, call_chunk(o, call_json(index, &c, 1)));
}

static void stream_args(void *cls, int index, const char *text, size_t n)
{
    oai_out *o = cls;
    json_t *a = json_pack("{s:i,s:{s:o}}", "index", index, "function", "arguments", jstr(text, n));
    sse_append(&o->ev, &o->ev_len, call_chunk(o, a));
}

static const oait_sink *stream_sink(oai_out *o, oait_sink *s)
{
    *s = (oait_sink){.content = stream_content, .call = stream_call, .head = stream_head, .args = stream_args,
                     .cls = o};
    return s;
}

static char *take_events(oai_out *o, size_t *len)
{
    char *s = o->ev;
    *len = o->ev_len;
    o->ev = NULL;
    o->ev_len = 0;
    return s;
}

char *oai_chunk(oai_out *o, const char *text, size_t n, const oai_token *toks, int n_toks, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (o->tools) { /* held back while it may be a call; log-probs are not reported */
        oait_sink sink;
        oait_feed(&o->tp, text, n, stream_sink(o, &sink));
        return take_events(o, len);
    }
    sse_append(&s, len, chunk_obj(o, text, n, toks, n_toks, NULL, 0));
    return s;
}

static json_t *usage(uint64_t n_prompt, uint64_t n_gen)
{
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)n_prompt, "completion_tokens", (json_int_t)n_gen,
                     "total_tokens", (json_int_t)(n_prompt + n_gen));
}

static char *append_done(char *s, size_t *len)
{
    char *x = realloc(s, *len + 15);
    if (!x) return s;
    memcpy(x + *len, "data: [DONE]\n\n", 15);
    *len += 14;
    return x;
}

char *oai_chunk_end(oai_out *o, const char *reason, uint64_t n_prompt, uint64_t n_gen, size_t *len)
{
    size_t a, b;
    char *s = oai_chunk_finish(o, reason, &a), *t = oai_chunk_tail(o, n_prompt, n_gen, &b);
    char *x = s && t ? realloc(s, a + b + 1) : NULL;
    if (x) memcpy(x + a, t, b + 1);
    else free(s);
    free(t);
    *len = x ? a + b : 0;
    return x;
}

char *oai_chunk_finish(oai_out *o, const char *reason, size_t *len)
{
    char *s = NULL;
    *len = 0;
    const char *fin = oai_finish_reason(reason);
    if (o->tools) {
        oait_sink sink;
        oait_finish(&o->tp, stream_sink(o, &sink));
        s = take_events(o, len);
        if (o->tp.n_calls > 0) fin = "tool_calls";
    }
    sse_append(&s, len, chunk_obj(o, "", 0, NULL, 0, fin, 0));
    return s;
}

char *oai_chunk_tail(oai_out *o, uint64_t n_prompt, uint64_t n_gen, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (o->include_usage) {
        json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", o->id, "object",
                              o->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)o->created, "model", o->model, "choices", "usage", usage(n_prompt, n_gen));
        sse_append(&s, len, u);
    }
    return append_done(s, len);
}

char *oai_chunk_error(int status, const char *msg, const char *code, size_t *len)
{
    char *body = oai_error_body(status, msg, NULL, code), *s = NULL;
    *len = 0;
    if (body) {
        size_t bl = strlen(body);
        s = malloc(bl + 9);
        if (s) {
            *len = (size_t)sprintf(s, "data: %s\n\n", body);
        }
        free(body);
    }
    return append_done(s, len);
}

int oai_add(oai_out *o, const char *text, size_t n, const oai_token *toks, int n_toks)
{
    if (o->len + n + 1 > o->cap) {
        size_t cap = (o->len + n + 1) * 2;
        char *x = realloc(o->text, cap);
        if (!x) return -1;
        o->text = x;
        o->cap = cap;
    }
    memcpy(o->text + o->len, text, n);
    o->len += n;
    o->text[o->len] = 0;
    if (o->logprobs && n_toks > 0) {
        if (!o->lp) o->lp = new_logprobs(o->kind);
        add_logprobs(o, o->lp, toks, n_toks);
    }
    return 0;
}

typedef struct {
    char   *text;   /* content (len) */
    size_t  len;
    json_t *calls;
} whole;

static void whole_content(void *cls, const char *text, size_t n)
{
    whole *w = cls;
    char *x = realloc(w->text, w->len + n + 1);
    if (!x) return;
    memcpy(x + w->len, text, n);
    w->len += n;
    x[w->len] = 0;
    w->text = x;
}

static void whole_call(void *cls, int index, const oait_call *c)
{
    whole *w = cls;
    json_array_append_new(w->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", c->id, "type", "function", "function",
                                              "name", c->name, "arguments", c->args));
}

/* The chat message of a whole answer: its text, or the calls parsed from it (content
 * null unless text came before them). */
static json_t *message(oai_out *o, const char **fin)
{
    if (!o->tools) return json_pack("{s:s,s:o}", "role", "assistant", "content", jstr(o->text, o->len));
    whole w = {NULL, 0, json_array()};
    oait_parser p;
    oait_parser_init(&p, o->family);
    oait_sink sink = {.content = whole_content, .call = whole_call, .cls = &w};
    oait_feed(&p, o->text ? o->text : "", o->len, &sink);
    oait_finish(&p, &sink);
    oait_parser_free(&p);
    size_t ws = 0;
    while (ws < w.len && w.text[ws] && strchr(" \t\r\n", w.text[ws])) ws++;
    json_t *content = json_array_size(w.calls) && ws == w.len ? json_null() : jstr(w.text, w.len);
    json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
    if (json_array_size(w.calls)) {
        json_object_set_new(m, "tool_calls", w.calls);
        *fin = "tool_calls";
    } else {
        json_decref(w.calls);
    }
    free(w.text);
    return m;
}

/* One choice of a whole response (a chat's message with its tool calls, if any). */
static json_t *choice_json(oai_out *o, const char *reason)
{
    json_t *lp = !o->logprobs ? json_null() : o->lp ? json_incref((json_t *)o->lp) : new_logprobs(o->kind);
    const char *finish = oai_finish_reason(reason);
    if (o->kind == OAI_CHAT) {
        json_t *m = message(o, &finish);
        return json_pack("{s:i,s:o,s:o,s:s}", "index", o->index, "message", m, "logprobs", lp, "finish_reason", finish);
    }
    return json_pack("{s:o,s:i,s:o,s:s}", "text", jstr(o->text, o->len), "index", o->index, "logprobs", lp,
                     "finish_reason", finish);
}

char *oai_response(oai_out *o, const char *reason, uint64_t n_prompt, uint64_t n_gen, size_t *len)
{
    return oai_response_n(o, 1, &reason, n_prompt, n_gen, len);
}

char *oai_response_n(oai_out *outs, int n, const char *const *reasons, uint64_t n_prompt, uint64_t n_gen, size_t *len)
{
    json_t *r = head(&outs[0], outs[0].kind == OAI_CHAT ? "chat.completion" : "text_completion", choice_json(&outs[0], reasons[0]));
    for (int i = 1; i < n; i++) json_array_append_new(json_object_get(r, "choices"), choice_json(&outs[i], reasons[i]));
    json_object_set_new(r, "usage", usage(n_prompt, n_gen));
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    *len = s ? strlen(s) : 0;
    return s;
}

const char *oai_finish_reason(const char *reason)
{
    if (reason && (strcmp(reason, "length") == 0 || strcmp(reason, "context") == 0)) return "length";
    /* the grammar could not be completed with the model's vocabulary: the text is cut */
    if (reason && strcmp(reason, "grammar_dead_end") == 0) return "grammar_dead_end";
    return "stop"; /* EOS, a stop string, a complete grammar ("grammar") */
}

int oai_error_status(const char *code, int accepted)
{
    int status = errcode_http_status(errcode_from_name(code));
    return status ? status : accepted ? 500 : 400;
}

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *oai_error_body(int status, const char *msg, const char *param, const char *code)
{
    json_t *j = json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", jstr(msg, msg ? strlen(msg) : 0), "type",
                          error_type(status), "param", param && *param ? json_string(param) : json_null(), "code",
                          code && *code ? json_string(code) : json_null());
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}
