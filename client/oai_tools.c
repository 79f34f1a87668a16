/*
 * oai_tools.c - function calling in the gateway: tools checked, their grammar, the
 * generated calls parsed (oai_tools.h). Owner: gateway.
 */
#include "oai_tools.h"

#include "errcode.h"
#include "gram.h"
#include "json_schema.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- the request ---- */

void oait_init(oait_req *t)
{
    memset(t, 0, sizeof *t);
    t->parallel = 1;
}

static void free_strs(char **v, int n)
{
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void oait_req_free(oait_req *t)
{
    free_strs(t->tools, t->n_tools);
    free_strs(t->names, t->n_tools);
    free_strs(t->params, t->n_tools);
    free_strs(t->tcalls, t->n_tcalls);
    free(t->named);
    oait_init(t);
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* One tool: checked, its texts kept at t->n_tools. */
static int add_tool(oait_req *t, const json_t *tool, size_t i, char *err, size_t cap)
{
    const json_t *type = json_object_get(tool, "type"), *f = json_object_get(tool, "function");
    const json_t *name = json_object_get(f, "name"), *params = json_object_get(f, "parameters");
    const json_t *desc = json_object_get(f, "description");
    if (!json_is_object(tool) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
        return errf(err, cap, "tools[%zu]: a tool is {\"type\": \"function\", \"function\": {...}}", i);
    if (!json_is_object(f) || !json_is_string(name) || !name_ok(json_string_value(name)))
        return errf(err, cap, "tools[%zu].function.name: 1 to 64 letters, digits, '_' or '-'", i);
    if (desc && !json_is_string(desc))
        return errf(err, cap, "tools[%zu].function.description must be a string", i);
    for (int k = 0; k < t->n_tools; k++)
        if (strcmp(t->names[k], json_string_value(name)) == 0)
            return errf(err, cap, "tools[%zu].function.name: '%s' is given twice", i, t->names[k]);
    char *ptext = params ? json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY)
                         : strdup("{\"type\":\"object\",\"properties\":{}}");
    if (params && !json_is_object(params)) {
        free(ptext);
        return errf(err, cap, "tools[%zu].function.parameters must be a JSON Schema object", i);
    }
    char gerr[256];
    char *g = ptext ? jsg_to_gbnf(ptext, strlen(ptext), gerr, sizeof gerr) : NULL;
    if (!g) {
        free(ptext);
        return errf(err, cap, "tools[%zu].function.parameters: %s", i, ptext ? gerr : "out of memory");
    }
    free(g);
    t->names[t->n_tools] = strdup(json_string_value(name));
    t->params[t->n_tools] = ptext;
    t->tools[t->n_tools] = json_dumps(tool, JSON_COMPACT);
    t->n_tools++;
    if (!t->names[t->n_tools - 1] || !t->tools[t->n_tools - 1]) return errf(err, cap, "out of memory");
    return 0;
}

int oait_parse_tools(oait_req *t, const json_t *v, char *err, size_t cap)
{
    if (!json_is_array(v) || json_array_size(v) > OAIT_MAX_TOOLS)
        return errf(err, cap, "tools must be an array of at most %d tools", OAIT_MAX_TOOLS);
    size_t n = json_array_size(v);
    t->tools = calloc(n + 1, sizeof *t->tools);
    t->names = calloc(n + 1, sizeof *t->names);
    t->params = calloc(n + 1, sizeof *t->params);
    if (!t->tools || !t->names || !t->params) return errf(err, cap, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (add_tool(t, json_array_get(v, i), i, err, cap) != 0) return -1;
    return 0;
}

int oait_parse_choice(oait_req *t, const json_t *v, char *err, size_t cap)
{
    static const char *const names[] = {"auto", "none", "required"};
    if (json_is_string(v)) {
        for (int i = 0; i < 3; i++)
            if (strcmp(json_string_value(v), names[i]) == 0) {
                t->choice = (oait_choice)i;
                return 0;
            }
    } else if (json_is_object(v)) {
        const json_t *type = json_object_get(v, "type"), *name = json_object_get(json_object_get(v, "function"), "name");
        if (json_is_string(type) && strcmp(json_string_value(type), "function") == 0 && json_is_string(name)) {
            free(t->named);
            t->named = strdup(json_string_value(name));
            t->choice = OAIT_NAMED;
            return t->named ? 0 : errf(err, cap, "out of memory");
        }
    }
    return errf(err, cap, "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}");
}

static int add_tcall(oait_req *t, size_t idx, const char *id, const char *name, const char *args)
{
    if (t->n_tcalls + 4 > t->cap_tcalls) {
        int c = t->cap_tcalls ? t->cap_tcalls * 2 : 16;
        char **x = realloc(t->tcalls, (size_t)c * sizeof *x);
        if (!x) return -1;
        t->tcalls = x;
        t->cap_tcalls = c;
    }
    char num[24];
    snprintf(num, sizeof num, "%zu", idx);
    const char *v[4] = {num, id, name, args};
    for (int i = 0; i < 4; i++)
        if (!(t->tcalls[t->n_tcalls++] = strdup(v[i]))) return -1;
    return 0;
}

/* One call of an assistant message: its function's arguments as compact JSON. */
static int add_history_call(oait_req *t, const json_t *c, size_t idx, size_t k, char *err, size_t cap)
{
    const json_t *id = json_object_get(c, "id"), *f = json_object_get(c, "function");
    const json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
    if (!json_is_string(id) || json_string_length(id) == 0 || json_string_length(id) > 64)
        return errf(err, cap, "messages[%zu].tool_calls[%zu].id must be a string of 1 to 64 bytes", idx, k);
    if (!json_is_string(name) || !name_ok(json_string_value(name)))
        return errf(err, cap, "messages[%zu].tool_calls[%zu].function.name: 1 to 64 letters, digits, '_' or '-'",
                    idx, k);
    json_t *a = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : json_incref((json_t *)args);
    if (!json_is_object(a)) {
        json_decref(a);
        return errf(err, cap, "messages[%zu].tool_calls[%zu].function.arguments must be a JSON object's text",
                    idx, k);
    }
    char *text = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    int rc = text ? add_tcall(t, idx, json_string_value(id), json_string_value(name), text) : -1;
    free(text);
    return rc == 0 ? 0 : errf(err, cap, "out of memory");
}

int oait_parse_message(oait_req *t, const json_t *m, size_t idx, char *err, size_t cap)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *calls = json_object_get(m, "tool_calls"), *tcid = json_object_get(m, "tool_call_id");
    if (role && strcmp(role, "tool") == 0) {
        if (!json_is_string(tcid) || json_string_length(tcid) == 0)
            return errf(err, cap, "messages[%zu]: a tool message needs its tool_call_id", idx);
        return add_tcall(t, idx, json_string_value(tcid), "", "") == 0 ? 0 : errf(err, cap, "out of memory");
    }
    if (!calls || json_is_null(calls)) return 0;
    if (!role || strcmp(role, "assistant") != 0 || !json_is_array(calls) || json_array_size(calls) > OAIT_MAX_CALLS)
        return errf(err, cap, "messages[%zu].tool_calls: an assistant's array of at most %d calls", idx,
                    OAIT_MAX_CALLS);
    for (size_t k = 0; k < json_array_size(calls); k++)
        if (add_history_call(t, json_array_get(calls, k), idx, k, err, cap) != 0) return -1;
    return 0;
}

int oait_check(const oait_req *t, char *err, size_t cap)
{
    if ((t->choice == OAIT_REQUIRED || t->choice == OAIT_NAMED) && t->n_tools == 0)
        return errf(err, cap, "tool_choice %s needs tools", t->choice == OAIT_NAMED ? "naming a function" : "required");
    if (t->choice == OAIT_NAMED) {
        for (int i = 0; i < t->n_tools; i++)
            if (strcmp(t->names[i], t->named) == 0) return 0;
        return errf(err, cap, "tool_choice: no tool is named '%.64s'", t->named);
    }
    return 0;
}

int oait_active(const oait_req *t) { return t->n_tools > 0 && t->choice != OAIT_NONE; }

oait_family oait_family_of(const char *name)
{
    if (!name) return OAIT_UNSUPPORTED;
    if (strcmp(name, "chatml") == 0) return OAIT_HERMES;
    if (strcmp(name, "llama3") == 0) return OAIT_LLAMA3;
    if (strcmp(name, "mistral-v3") == 0 || strcmp(name, "mistral-v3-tekken") == 0) return OAIT_MISTRAL;
    return OAIT_UNSUPPORTED;
}

/* ---- the grammar ---- */

/* Every "$ref": "#..." in s moved under prefix (the schema now sits there). */
static void move_refs(json_t *s, const char *prefix)
{
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_array(s)) {
        json_array_foreach(s, i, v) move_refs(v, prefix);
        return;
    }
    json_object_foreach(s, k, v) {
        if (strcmp(k, "$ref") == 0 && json_is_string(v) && json_string_value(v)[0] == '#') {
            char *r = malloc(strlen(prefix) + json_string_length(v) + 1);
            if (r) {
                sprintf(r, "%s%s", prefix, json_string_value(v) + 1);
                json_string_set(v, r);
                free(r);
            }
        } else {
            move_refs(v, prefix);
        }
    }
}

/* {"anyOf": [{"name": const, key: parameters}, ...]} over the chosen tools. */
static json_t *calls_schema(const oait_req *t, const char *key)
{
    json_t *any = json_array();
    for (int i = 0; i < t->n_tools; i++) {
        if (t->choice == OAIT_NAMED && strcmp(t->names[i], t->named) != 0) continue;
        json_t *p = json_loads(t->params[i], 0, NULL);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "#/anyOf/%zu/properties/%s", json_array_size(any), key);
        move_refs(p, prefix);
        json_array_append_new(any, json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type", "object", "properties",
                                             "name", "const", t->names[i], key, p, "required", "name", key));
    }
    return json_pack("{s:o}", "anyOf", any);
}

/* g with its rule "root" renamed to name (names inside literals, classes and comments
 * left alone). */
static char *rename_root(const char *g, const char *name)
{
    size_t n = strlen(g);
    char *out = malloc(n * 3 + 64), *o = out;
    if (!out) return NULL;
    for (const char *p = g; *p;) {
        if (*p == '"' || *p == '[') {
            char close = *p == '"' ? '"' : ']';
            *o++ = *p++;
            while (*p && *p != close) {
                if (*p == '\\' && p[1]) *o++ = *p++;
                *o++ = *p++;
            }
            if (*p) *o++ = *p++;
        } else if (*p == '#') {
            while (*p && *p != '\n') *o++ = *p++;
        } else if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", *p)) {
            size_t w = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
            if (w == 4 && strncmp(p, "root", 4) == 0) o += sprintf(o, "%s", name);
            else memcpy(o, p, w), o += w;
            p += w;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

char *oait_grammar(const oait_req *t, oait_family f, char *err, size_t cap)
{
    err[0] = 0;
    if (t->choice != OAIT_REQUIRED && t->choice != OAIT_NAMED) return NULL;
    if (f == OAIT_UNSUPPORTED) {
        errf(err, cap, "tool_choice: the model's chat template has no tool-call syntax this gateway knows");
        return NULL;
    }
    json_t *s = calls_schema(t, f == OAIT_LLAMA3 ? "parameters" : "arguments");
    char *text = json_dumps(s, JSON_COMPACT), gerr[256];
    json_decref(s);
    char *g = text ? jsg_to_gbnf(text, strlen(text), gerr, sizeof gerr) : NULL;
    free(text);
    if (!g) {
        errf(err, cap, "tools: %s", text ? gerr : "out of memory");
        return NULL;
    }
    char call[32] = "tool-call";
    for (int i = 0; strstr(g, call); i++) snprintf(call, sizeof call, "tool-call-%d", i);
    char *body = rename_root(g, call);
    free(g);
    int chosen = t->choice == OAIT_NAMED ? 1 : t->n_tools;
    int more = !t->parallel || f == OAIT_LLAMA3 ? 0 : (chosen < OAIT_MAX_CALLS ? chosen : OAIT_MAX_CALLS) - 1;
    size_t n = body ? strlen(body) + 256 : 0;
    char *out = body ? malloc(n) : NULL;
    if (out && f == OAIT_HERMES)
        snprintf(out, n, "root ::= \"<tool_call>\\n\" %s \"\\n</tool_call>\" (\"\\n<tool_call>\\n\" %s "
                 "\"\\n</tool_call>\"){0,%d}\n%s", call, call, more, body);
    else if (out && f == OAIT_LLAMA3)
        snprintf(out, n, "root ::= %s\n%s", call, body);
    else if (out)
        snprintf(out, n, "root ::= \"[TOOL_CALLS][\" %s (\", \" %s){0,%d} \"]\"\n%s", call, call, more, body);
    free(body);
    if (!out) {
        errf(err, cap, "out of memory");
        return NULL;
    }
    gram *c = gram_compile(out, strlen(out), gerr, sizeof gerr);
    if (!c) {
        errf(err, cap, "tools: the calls' grammar: %s", gerr);
        free(out);
        return NULL;
    }
    gram_free(c);
    return out;
}

/* ---- the parser ---- */

static const char *const MARK[OAIT_FAMILY_COUNT] = {"<tool_call>", "{", "[TOOL_CALLS]"};

void oait_parser_init(oait_parser *p, oait_family fam)
{
    memset(p, 0, sizeof *p);
    p->fam = fam;
}

void oait_parser_free(oait_parser *p)
{
    free(p->buf);
    p->buf = NULL;
}

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && s[i] && strchr(" \t\r\n", s[i])) i++;
    return i;
}

/* A new call id: "call_" and 24 letters and digits; mistral's are 9 of them. */
static void new_id(oait_family f, char *id)
{
    static const char a[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[24];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)id;
        for (size_t i = 0; i < sizeof r; i++) x = x * 6364136223846793005ULL + 1, r[i] = (unsigned char)(x >> 33);
    }
    int n = f == OAIT_MISTRAL ? 9 : 24;
    char *o = id + (f == OAIT_MISTRAL ? 0 : sprintf(id, "call_"));
    for (int i = 0; i < n; i++) o[i] = a[r[i] % 62];
    o[n] = 0;
}

/* The arguments of a call object ({"name", "arguments" or "parameters"}: an object or
 * a JSON object's text), a reference for the caller; NULL if c is not a call. */
static json_t *call_args(const json_t *c)
{
    const json_t *name = json_object_get(c, "name"), *args = json_object_get(c, "arguments");
    if (!args) args = json_object_get(c, "parameters");
    json_t *a = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : json_incref((json_t *)args);
    if (!json_is_object(c) || !json_is_string(name) || !name_ok(json_string_value(name)) || !json_is_object(a)) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* Bytes past the end of the JSON object b[0..] ('{' first), scanning b[sc->pos..n) on
 * from where the last call stopped; 0 while it goes on past n. */
static size_t object_end(oait_scan *sc, const char *b, size_t n)
{
    for (; sc->pos < n; sc->pos++) {
        char c = b[sc->pos];
        if (sc->esc) sc->esc = 0;
        else if (sc->in_str) sc->esc = c == '\\', sc->in_str = c != '"';
        else if (c == '"') sc->in_str = 1;
        else if (c == '{' || c == '[') sc->depth++;
        else if ((c == '}' || c == ']') && --sc->depth == 0) return ++sc->pos;
    }
    return 0;
}

/* Literal lit after whitespace at b[*i..n): 1 (and *i past it), 0 if b ends inside it, -1. */
static int lit(const char *b, size_t n, size_t *i, const char *lit)
{
    size_t j = skip_ws(b, *i, n), l = strlen(lit), m = n - j < l ? n - j : l;
    if (strncmp(b + j, lit, m) != 0) return -1;
    if (m < l) return 0;
    *i = j + l;
    return 1;
}

/* The head of a call object, {"name": "NAME" (as name_ok), "arguments" (or "parameters"): {, at
 * b[0..n): 1 with name (65 bytes) and *args the offset of the arguments' '{'; 0 while b
 * may still become one; -1 when it is not one. */
static int call_head(const char *b, size_t n, char *name, size_t *args)
{
    size_t i = 0, k = 0, i0, i1;
    int r;
    if ((r = lit(b, n, &i, "{")) <= 0 || (r = lit(b, n, &i, "\"name\"")) <= 0 || (r = lit(b, n, &i, ":")) <= 0 ||
        (r = lit(b, n, &i, "\"")) <= 0)
        return r;
    for (; i < n && b[i] != '"'; i++) {
        if (k == 64 || !b[i] || !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", b[i]))
            return -1;
        name[k++] = b[i];
    }
    if (i == n) return 0;
    name[k] = 0;
    i++;
    if (k == 0 || (r = lit(b, n, &i, ",")) <= 0) return k ? r : -1;
    i0 = i1 = i;
    int r0 = lit(b, n, &i0, "\"arguments\""), r1 = lit(b, n, &i1, "\"parameters\"");
    if (r0 < 1 && r1 < 1) return r0 == 0 || r1 == 0 ? 0 : -1;
    i = r0 == 1 ? i0 : i1;
    if ((r = lit(b, n, &i, ":")) <= 0 || (r = lit(b, n, &i, "{")) <= 0) return r;
    *args = i - 1;
    return 1;
}

/* The arguments' text as generated in the call object obj[0..n), malloc'd; NULL when the
 * call is not written {"name", "arguments": {...}}. */
static char *raw_args(const char *obj, size_t n)
{
    char name[65];
    size_t at, end;
    oait_scan sc = {0};
    if (call_head(obj, n, name, &at) != 1 || !(end = object_end(&sc, obj + at, n - at))) return NULL;
    return strndup(obj + at, end);
}

/* A call object to the sink (its arguments: raw, their text as generated, or NULL);
 * -1 if it is not one. */
static int emit_call(oait_parser *p, const json_t *c, char *raw, const oait_sink *s)
{
    const json_t *name = json_object_get(c, "name");
    json_t *a = call_args(c);
    if (!a) {
        free(raw);
        return -1;
    }
    char *text = raw ? raw : json_dumps(a, JSON_COMPACT), id[40];
    json_decref(a);
    if (!text) return -1;
    new_id(p->fam, id);
    oait_call call = {id, json_string_value(name), text};
    s->call(s->cls, p->n_calls++, &call);
    free(text);
    return 0;
}

/* A JSON value at b[0..n): 1 and *used when whole, 0 when it may still come, -1 if not. */
static int json_at(const char *b, size_t n, json_t **v, size_t *used)
{
    json_error_t je;
    *v = json_loadb(b, n, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (*v) {
        *used = (size_t)je.position;
        return 1;
    }
    return json_error_code(&je) == json_error_premature_end_of_input ? 0 : -1;
}

#define WHOLE (-2L) /* stream_next: this call is not streamed, parse it whole */

/* The end of a streamed call: after its arguments, '}' and (hermes) </tool_call>. The
 * bytes of the region it used; 0 for more text. A call whose end is not so (or that is
 * cut short) stands as sent, and what follows is looked at afresh. */
static long stream_tail(oait_parser *p, const char *a, size_t an, int final)
{
    size_t end = p->args_end, t = skip_ws(a, end, an);
    int ok = t < an && a[t] == '}', more = t == an && !final;
    if (ok) {
        t = skip_ws(a, t + 1, an);
        if (p->fam == OAIT_HERMES) {
            size_t m = an - t < 12 ? an - t : 12;
            ok = strncmp(a + t, "</tool_call>", m) == 0;
            more = ok && m < 12 && !final;
            ok = ok && m == 12;
            t += ok ? 12 : 0;
        }
    }
    if (more) return 0;
    p->streaming = 0;
    if (ok) return (long)(p->args_at + t - p->sent);
    return (long)(final ? p->len - p->sent : p->args_at + end - p->sent); /* cut short: the rest is markup */
}

/* Streaming (s->head): a hermes or llama3 call sent as it comes; WHOLE when the call at
 * b[0..n) is not written {"name": ..., "arguments": {, or is cut before it is known. */
static long stream_next(oait_parser *p, const char *b, size_t n, const oait_sink *s, int final)
{
    if (!p->streaming) {
        size_t i = skip_ws(b, 0, n), ml = strlen(MARK[p->fam]), at;
        char name[65], id[40];
        if (p->fam == OAIT_HERMES) {
            if (n - i < ml || strncmp(b + i, MARK[p->fam], ml) != 0) return WHOLE;
            i += ml;
        }
        int r = call_head(b + i, n - i, name, &at);
        if (r < 0 || (r == 0 && final)) return WHOLE;
        if (r == 0) return 0;
        new_id(p->fam, id);
        s->head(s->cls, p->n_calls++, id, name);
        p->streaming = 1;
        p->args_at = p->sent + i + at;
        p->args_sent = p->args_end = 0;
        memset(&p->scan, 0, sizeof p->scan);
    }
    const char *a = p->buf + p->args_at;
    size_t an = p->len - p->args_at, end = p->args_end ? p->args_end : object_end(&p->scan, a, an);
    size_t upto = end ? end : an;
    if (upto > p->args_sent) s->args(s->cls, p->n_calls - 1, a + p->args_sent, upto - p->args_sent);
    p->args_sent = upto;
    if (!end) {
        if (!final) return 0;
        p->streaming = 0;
        return (long)(p->len - p->sent);
    }
    p->args_end = end;
    return stream_tail(p, a, an, final);
}

/* The next call(s) of the region at b[0..n): consumed bytes > 0, 0 for more text, -1 if
 * malformed. */
static long next_calls(oait_parser *p, const char *b, size_t n, const oait_sink *s, int final)
{
    const char *mark = MARK[p->fam];
    size_t i = skip_ws(b, 0, n), ml = strlen(mark), used;
    if (i == n) return 0;
    long st = s->head && p->fam != OAIT_MISTRAL ? stream_next(p, b, n, s, final) : WHOLE;
    if (st != WHOLE) return st;
    if (n - i < ml) return strncmp(b + i, mark, n - i) == 0 && !final ? 0 : -1;
    if (strncmp(b + i, mark, ml) != 0) return -1;
    json_t *v = NULL;
    if (p->fam == OAIT_HERMES) {
        const char *end = memmem(b + i + ml, n - i - ml, "</tool_call>", 12);
        if (!end) return final ? -1 : 0;
        size_t on = (size_t)(end - b - i - ml);
        v = json_loadb(b + i + ml, on, 0, NULL);
        int rc = v ? emit_call(p, v, raw_args(b + i + ml, on), s) : -1;
        json_decref(v);
        return rc == 0 ? (long)(end + 12 - b) : -1;
    }
    size_t from = p->fam == OAIT_LLAMA3 ? i : skip_ws(b, i + ml, n);
    int rc = json_at(b + from, n - from, &v, &used);
    if (rc <= 0) return rc == 0 && !final ? 0 : -1;
    if (p->fam == OAIT_LLAMA3) {
        rc = emit_call(p, v, raw_args(b + from, used), s);
    } else if (!json_is_array(v) || json_array_size(v) == 0) {
        rc = -1;
    } else {
        rc = 0;
        for (size_t k = 0; rc == 0 && k < json_array_size(v); k++) { /* all good, or none is sent */
            json_t *a = call_args(json_array_get(v, k));
            rc = a ? 0 : -1;
            json_decref(a);
        }
        for (size_t k = 0; rc == 0 && k < json_array_size(v); k++) rc = emit_call(p, json_array_get(v, k), NULL, s);
    }
    json_decref(v);
    return rc == 0 ? (long)(from + used) : -1;
}

/* Bytes at the end of b[0..n) that may begin the marker (held back while streaming). */
static size_t held(const oait_parser *p, const char *b, size_t n)
{
    const char *mark = MARK[p->fam];
    size_t ml = strlen(mark);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (strncmp(b + n - k, mark, k) == 0) return k;
    return 0;
}

static void content(oait_parser *p, size_t upto, const oait_sink *s)
{
    if (upto > p->sent) s->content(s->cls, p->buf + p->sent, upto - p->sent);
    p->sent = upto;
}

/* Content up to the next call, if any: 1 when a call region starts at p->sent. */
static int find_call(oait_parser *p, const oait_sink *s, int final)
{
    if (p->fam == OAIT_LLAMA3) { /* a call is the whole answer: it starts with '{' */
        if (p->never) content(p, p->len, s);
        if (p->never || p->n_calls) return p->n_calls > 0 && !p->never;
        size_t i = skip_ws(p->buf, p->sent, p->len);
        if (i == p->len) {
            if (final) content(p, p->len, s);
            return 0;
        }
        if (p->buf[i] == '{') return 1;
        p->never = 1;
        content(p, p->len, s);
        return 0;
    }
    const char *m = memmem(p->buf + p->sent, p->len - p->sent, MARK[p->fam], strlen(MARK[p->fam]));
    if (m) {
        content(p, (size_t)(m - p->buf), s);
        return 1;
    }
    content(p, final ? p->len : p->len - held(p, p->buf + p->sent, p->len - p->sent), s);
    return 0;
}

static void step(oait_parser *p, const oait_sink *s, int final)
{
    if (!p->buf) return; /* no text at all */
    while (p->sent < p->len || final) {
        if (!p->in_call && !(p->in_call = find_call(p, s, final))) return;
        long used = next_calls(p, p->buf + p->sent, p->len - p->sent, s, final);
        if (used > 0) {
            p->sent += (size_t)used;
            p->in_call = p->fam != OAIT_LLAMA3;
            if (skip_ws(p->buf, p->sent, p->len) == p->len && !final) return;
            continue;
        }
        if (used == 0) {
            if (final) p->sent = p->len; /* only whitespace after the calls */
            return;
        }
        /* malformed: given out as content (a llama3 answer whole); the search for a
         * call goes on after the marker, so the loop always advances */
        p->in_call = 0;
        if (p->fam == OAIT_LLAMA3) {
            p->never = 1;
            content(p, p->len, s);
            return;
        }
        size_t i = skip_ws(p->buf, p->sent, p->len), ml = strlen(MARK[p->fam]);
        if (p->len - i >= ml && strncmp(p->buf + i, MARK[p->fam], ml) == 0) content(p, i + ml, s);
    }
}

void oait_feed(oait_parser *p, const char *text, size_t n, const oait_sink *s)
{
    if (p->len + n + 1 > p->cap) {
        size_t cap = (p->len + n + 1) * 2;
        char *x = realloc(p->buf, cap);
        if (!x) {
            p->oom = 1;
            return;
        }
        p->buf = x;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, text, n);
    p->len += n;
    p->buf[p->len] = 0;
    step(p, s, 0);
}

void oait_finish(oait_parser *p, const oait_sink *s) { step(p, s, 1); }
