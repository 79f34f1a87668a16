/* gw_tok.c - /tokenize and /detokenize (see gw_tok.h), on jansson. */
#include "gw_tok.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "errcode.h"
#include "oai.h"
#include "unicode.h"

static char *dump(json_t *j, int *status, int st)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    *status = s ? st : 500;
    return s;
}

static char *refuse(int *status, const char *param, const char *msg)
{
    *status = 400;
    return oai_error_body(400, msg, param, errcode_name(ERR_INVALID));
}

/* The request body as a JSON object, or NULL with *out the refusal. */
static json_t *load(const char *body, size_t len, int *status, char **out)
{
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, 0, &je);
    if (json_is_object(root)) return root;
    json_decref(root);
    char msg[300];
    snprintf(msg, sizeof msg, "the body must be a JSON object%s%s", root ? "" : ": ", root ? "" : je.text);
    *out = refuse(status, NULL, msg);
    return NULL;
}

/* A boolean field with its default; -1 (and *out the refusal) when it is not one. */
static int flag(json_t *root, const char *key, int def, int *status, char **out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return def;
    if (json_is_boolean(v)) return json_is_true(v);
    char msg[120];
    snprintf(msg, sizeof msg, "%s must be true or false", key);
    *out = refuse(status, key, msg);
    return -1;
}

/* A piece as llama-server shows it: its text, or its bytes when not valid UTF-8. */
static json_t *piece(const tok_vocab *v, int32_t id)
{
    char buf[512];
    int n = tok_piece(v, id, true, buf, sizeof buf);
    if (n < 0) n = 0;
    if ((size_t)n > sizeof buf) n = (int)sizeof buf;
    json_t *s = json_stringn(buf, (size_t)n);
    if (s) return s;
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

char *gwt_tokenize(const tok_vocab *v, const char *body, size_t len, int *status)
{
    char *out = NULL;
    json_t *root = load(body, len, status, &out);
    if (!root) return out;
    json_t *content = json_object_get(root, "content");
    int add = flag(root, "add_special", 0, status, &out);
    int parse = add < 0 ? -1 : flag(root, "parse_special", 1, status, &out);
    int pieces = parse < 0 ? -1 : flag(root, "with_pieces", 0, status, &out);
    if (pieces >= 0 && !json_is_string(content)) out = refuse(status, "content", "content must be a string");
    if (out) {
        json_decref(root);
        return out;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    char err[200];
    if (tok_encode(v, json_string_value(content), json_string_length(content), add, parse, &ids, &n, err, sizeof err) != 0) {
        json_decref(root);
        return refuse(status, "content", err);
    }
    json_t *toks = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(toks, pieces ? json_pack("{s:i,s:o}", "id", (int)ids[i], "piece", piece(v, ids[i]))
                                           : json_integer(ids[i]));
    free(ids);
    json_decref(root);
    return dump(json_pack("{s:o}", "tokens", toks), status, 200);
}

char *gwt_detokenize(const tok_vocab *v, const char *body, size_t len, int *status)
{
    char *out = NULL;
    json_t *root = load(body, len, status, &out);
    if (!root) return out;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        return refuse(status, "tokens", "tokens must be an array of token ids");
    }
    size_t n = json_array_size(toks), i;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    json_t *t;
    json_array_foreach(toks, i, t) {
        if (!ids) break;
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || id < 0 || id >= tok_n_vocab(v)) {
            char msg[200];
            if (json_is_integer(t))
                snprintf(msg, sizeof msg, "tokens[%zu]: id %" JSON_INTEGER_FORMAT " is not in the vocabulary (0 to %d)", i,
                         id, (int)tok_n_vocab(v) - 1);
            else snprintf(msg, sizeof msg, "tokens[%zu] is not an integer token id", i);
            free(ids);
            json_decref(root);
            return refuse(status, "tokens", msg);
        }
        ids[i] = (int32_t)id;
    }
    json_decref(root);
    size_t tl = 0;
    char err[200];
    char *text = ids ? tok_decode(v, ids, n, true, false, &tl, err, sizeof err) : NULL;
    free(ids);
    if (!text) return refuse(status, "tokens", ids ? err : "out of memory");
    json_t *s = json_stringn(text, tl);
    if (!s) { /* not valid UTF-8 (a cut multi-byte character): U+FFFD for the bad bytes */
        char *fixed = malloc(tl * 3 + 1);
        size_t k = 0;
        for (size_t off = 0; fixed && off < tl;) k += (size_t)uni_encode(uni_decode(text, tl, &off), fixed + k);
        s = fixed ? json_stringn(fixed, k) : NULL;
        free(fixed);
        if (!s) s = json_string("");
    }
    free(text);
    return dump(json_pack("{s:o}", "content", s), status, 200);
}
