/* oai_embed.c - embeddings requests and responses (see oai_embed.h), on jansson. */
#include "oai_embed.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

void oai_emb_free(oai_emb_req *r)
{
    for (int i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i]);
        free(r->ids[i]);
    }
    memset(r, 0, sizeof *r);
}

int oai_emb_pooling(const char *name)
{
    if (name && strcmp(name, "mean") == 0) return PROTO_POOL_MEAN;
    if (name && strcmp(name, "last") == 0) return PROTO_POOL_LAST;
    return 0;
}

/* An array of token ids as input i; -1 when v is not one. */
static int add_ids(oai_emb_req *r, json_t *v, const char *key, oai_err *e)
{
    size_t n = json_array_size(v), i;
    if (n == 0) return oai_bad(e, key, "%s: an input is empty", key);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return oai_bad(e, key, "out of memory");
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            free(ids);
            return oai_bad(e, key, "%s[%d][%zu] is not a token id (a non-negative integer)", key, r->n_inputs, i);
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    r->ids[r->n_inputs] = ids;
    r->n_ids[r->n_inputs++] = (int)n;
    return 0;
}

static int add_one(oai_emb_req *r, json_t *v, const char *key, oai_err *e)
{
    if (r->n_inputs >= OAI_EMB_MAX_INPUTS)
        return oai_bad(e, key, "%s: at most %d inputs per request", key, OAI_EMB_MAX_INPUTS);
    if (json_is_array(v)) return add_ids(r, v, key, e);
    if (!json_is_string(v)) return oai_bad(e, key, "%s must be a string, an array of strings or of token ids", key);
    if (json_string_length(v) == 0) return oai_bad(e, key, "%s[%d] is an empty string", key, r->n_inputs);
    r->inputs[r->n_inputs] = strndup(json_string_value(v), json_string_length(v));
    if (!r->inputs[r->n_inputs]) return oai_bad(e, key, "out of memory");
    r->n_inputs++;
    return 0;
}

/* input: a string, an array of strings, an array of ids (one input), or of id arrays. */
static int parse_input(oai_emb_req *r, json_t *v, const char *key, oai_err *e)
{
    if (!json_is_array(v)) return add_one(r, v, key, e);
    if (json_array_size(v) == 0) return oai_bad(e, key, "%s is an empty array", key);
    if (json_is_integer(json_array_get(v, 0))) return add_one(r, v, key, e);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (add_one(r, x, key, e) != 0) return -1;
    return 0;
}

static int parse_key(oai_emb_req *r, const char *key, json_t *v, oai_err *e)
{
    const char *in = r->kind == OAI_EMB_OPENAI ? "input" : "content";
    if (strcmp(key, in) == 0) return parse_input(r, v, key, e);
    if (strcmp(key, "encoding_format") == 0) {
        const char *s = json_string_value(v);
        if (!s || (strcmp(s, "float") != 0 && strcmp(s, "base64") != 0))
            return oai_bad(e, key, "encoding_format must be \"float\" or \"base64\"");
        r->base64 = strcmp(s, "base64") == 0;
        return 0;
    }
    if (strcmp(key, "dimensions") == 0) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 20)
            return oai_bad(e, key, "dimensions must be a positive integer");
        r->dimensions = (long)json_integer_value(v);
        return 0;
    }
    if (strcmp(key, "pooling") == 0) {
        int p = oai_emb_pooling(json_string_value(v));
        if (!p) return oai_bad(e, key, "pooling must be \"mean\" or \"last\"");
        r->pooling = p;
        return 0;
    }
    return 0; /* model, user, ...: ignored */
}

int oai_emb_parse(oai_emb_req *r, oai_emb_kind kind, const char *body, size_t len, int default_pool, oai_err *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    r->pooling = default_pool ? default_pool : PROTO_POOL_MEAN;
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, 0, &je);
    if (!root) return oai_bad(e, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = json_is_object(root) ? 0 : oai_bad(e, NULL, "the body must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (rc != 0) break;
        if (!json_is_null(v)) rc = parse_key(r, key, v, e);
    }
    if (rc == 0 && r->n_inputs == 0) {
        const char *in = kind == OAI_EMB_OPENAI ? "input" : "content";
        rc = oai_bad(e, in, "%s is required", in);
    }
    json_decref(root);
    if (rc != 0) oai_emb_free(r);
    return rc;
}

/* Standard base64 of n bytes. */
static json_t *b64(const void *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = p;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    json_t *j = json_stringn(out, (size_t)(o - out));
    free(out);
    return j;
}

static json_t *floats(const float *v, int dim)
{
    json_t *a = json_array();
    for (int i = 0; i < dim; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

char *oai_emb_response(const oai_emb_req *r, const char *model, float *const *vecs, int dim, uint64_t n_prompt,
                       size_t *len)
{
    json_t *data = json_array();
    for (int i = 0; i < r->n_inputs; i++) {
        json_t *emb = r->kind == OAI_EMB_LLAMA ? json_pack("[o]", floats(vecs[i], dim))
                      : r->base64 ? b64(vecs[i], (size_t)dim * sizeof(float)) /* little-endian, as numpy reads it */
                                  : floats(vecs[i], dim);
        json_array_append_new(data, r->kind == OAI_EMB_LLAMA
                                        ? json_pack("{s:i,s:o}", "index", i, "embedding", emb)
                                        : json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", emb));
    }
    json_t *root = r->kind == OAI_EMB_LLAMA
                       ? json_incref(data)
                       : json_pack("{s:s,s:O,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", model ? model : "",
                                   "usage", "prompt_tokens", (json_int_t)n_prompt, "total_tokens", (json_int_t)n_prompt);
    json_decref(data);
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    *len = s ? strlen(s) : 0;
    return s;
}
