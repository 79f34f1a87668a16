/*
 * chat_tools.c - tool definitions, tool calls and tool results through a chat template,
 * written as each family's own Jinja template writes them (Qwen's chatml, Meta's
 * Llama 3.1, Mistral's v0.3 and Nemo), with Jinja's tojson as Python's json.dumps
 * writes it (", " and ": ", or indent=4). JSON texts come from the gateway (compact,
 * as jansson writes them); they are checked here before use. Owner: tok.
 */
#include "chat.h"
#include "chat_impl.h"
#include "errcode.h"

#include <stdio.h>

#define JSON_MAX_DEPTH 64

/* ---- JSON text: check, walk, reformat ---- */

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* The code point of the 4 hex digits at p, or -1. */
static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* After the string that starts at p (a '"'); NULL if it does not end or holds a bad
 * escape: one JSON does not allow, \u0000, or a surrogate that is not in a pair (what
 * jansson refuses too, so the gateway never sends them). */
static const char *str_end(const char *p)
{
    for (p++; *p && *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p != '\\')
            continue;
        p++;
        if (!*p || !strchr("\"\\/bfnrtu", *p))
            return NULL;
        if (*p != 'u')
            continue;
        long cp = hex4(p + 1);
        p += 4;
        if (cp <= 0 || (cp >= 0xDC00 && cp < 0xE000))
            return NULL;
        if (cp >= 0xD800 && cp < 0xDC00) {
            long lo = p[1] == '\\' && p[2] == 'u' ? hex4(p + 3) : -1;
            if (lo < 0xDC00 || lo >= 0xE000)
                return NULL;
            p += 6;
        }
    }
    return *p ? p + 1 : NULL;
}

/* After the value at p (whitespace first); NULL when it is not one. */
static const char *value_end(const char *p, int depth)
{
    p = skip_ws(p);
    if (*p == '"')
        return str_end(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH)
            return NULL;
        p = skip_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (*(p = skip_ws(p)) != '"' || !(p = str_end(p)) || *(p = skip_ws(p)) != ':')
                    return NULL;
                p++;
            }
            if (!(p = value_end(p, depth + 1)))
                return NULL;
            p = skip_ws(p);
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    const char *s = p;
    while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || *p == '-' || *p == '+' || *p == '.' ||
           *p == 'E')
        p++;
    return p > s ? p : NULL;
}

/* Whether s is one JSON value (an object when want_object). */
static bool json_ok(const char *s, bool want_object)
{
    const char *e = s ? value_end(s, 0) : NULL;
    return e && !*skip_ws(e) && (!want_object || *skip_ws(s) == '{');
}

static void indent_to(sbuf *b, int indent, int depth)
{
    if (!indent)
        return;
    put(b, "\n");
    for (int i = 0; i < indent * depth; i++)
        put(b, " ");
}

/* The JSON value s (checked) as Python's json.dumps writes it: ", " and ": ", or with
 * indent a newline and indent spaces per level; strings as they are. */
static void put_json_n(sbuf *b, const char *s, const char *end, int indent)
{
    int depth = 0;
    for (const char *p = skip_ws(s); p < end; p++) {
        const char *q;
        switch (*p) {
        case '"':
            q = str_end(p);
            put_n(b, p, (size_t)(q - p));
            p = q - 1;
            break;
        case '{': case '[':
            q = skip_ws(p + 1);
            put_n(b, p, 1);
            if (*q == '}' || *q == ']') {
                put_n(b, q, 1);
                p = q;
            } else {
                indent_to(b, indent, ++depth);
            }
            break;
        case '}': case ']':
            indent_to(b, indent, --depth);
            put_n(b, p, 1);
            break;
        case ',':
            put(b, ",");
            if (indent)
                indent_to(b, indent, depth);
            else
                put(b, " ");
            break;
        case ':':
            put(b, ": ");
            break;
        case ' ': case '\t': case '\n': case '\r':
            break;
        default:
            put_n(b, p, 1);
        }
    }
}

static void put_json(sbuf *b, const char *s, int indent) { put_json_n(b, s, s + strlen(s), indent); }

static void put_json_content(sbuf *b, const char *s, int indent)
{
    size_t from = b->n;
    put_json(b, s, indent);
    add_span(b, from);
}

static void put_utf8(sbuf *b, unsigned cp)
{
    char u[4];
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
        u[i] = (char)(0x80 | (cp & 0x3F));
    u[0] = (char)(n == 1 ? cp : (lead[n] | cp));
    put_n(b, u, n);
}

/* The JSON string at p (checked) decoded, as Jinja prints a string value. */
static void put_unescaped(sbuf *b, const char *p)
{
    const char *e = str_end(p) - 1;
    for (p++; p < e; p++) {
        if (*p != '\\') {
            put_n(b, p, 1);
            continue;
        }
        char c = *++p;
        const char *map = strchr("b\bf\fn\nr\rt\t", c);
        if (c == 'u') { /* checked by str_end: not 0, surrogates in pairs */
            long cp = hex4(p + 1);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(p + 3) - 0xDC00);
                p += 6;
            }
            put_utf8(b, (unsigned)cp);
        } else {
            put_n(b, map && c ? map + 1 : p, 1);
        }
    }
}

/* A string as Python's json.dumps(ensure_ascii=False) quotes it (Jinja's tojson). */
static void put_quoted(sbuf *b, const char *s)
{
    size_t from = b->n;
    put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *m = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                      : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        char e[8];
        if (!m && c < 0x20)
            snprintf(e, sizeof e, "\\u%04x", c), m = e;
        if (m)
            put(b, m);
        else
            put_n(b, s, 1);
    }
    put(b, "\"");
    add_span(b, from);
}

/* The value of member key of the JSON object obj (checked), or NULL. */
static const char *member(const char *obj, const char *key)
{
    size_t kl = strlen(key);
    const char *p = skip_ws(skip_ws(obj) + 1);
    while (*p == '"') {
        const char *k = p, *v = skip_ws(skip_ws(str_end(p)) + 1);
        if ((size_t)(str_end(k) - k) == kl + 2 && !strncmp(k + 1, key, kl))
            return v;
        p = skip_ws(value_end(v, 0));
        p = skip_ws(*p == ',' ? p + 1 : p);
    }
    return NULL;
}

/* ---- the families ---- */

static bool is(const chat_msg *m, const char *r) { return !strcmp(m->role, r); }

#define HERMES_HEAD "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" \
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
#define HERMES_TAIL "\n</tools>\n\nFor each function call, return a json object with function name and " \
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, " \
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"

static void hermes_calls(const chat_tools *tl, size_t i, const chat_msg *m, sbuf *b)
{
    bool first = true;
    for (size_t k = 0; k < tl->n_calls; k++) {
        const chat_call *c = &tl->calls[k];
        if (c->msg != i || !c->name)
            continue;
        if (!first || m->content[0])
            put(b, "\n");
        first = false;
        put(b, "<tool_call>\n{\"name\": \""), put_content(b, c->name), put(b, "\", \"arguments\": ");
        put_json_content(b, c->args, 0), put(b, "}\n</tool_call>");
    }
}

#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

const char *chat_tools_default_system(const char *src)
{
    return src && strstr(src, QWEN25_SYSTEM) ? QWEN25_SYSTEM : NULL;
}

/* Qwen2.5 / Qwen3 (Hermes): tools in the system turn, calls in <tool_call>, results as
 * <tool_response> in a user turn; Qwen2.5's template has a default system message. */
static void render_hermes(const chat_msg *m, size_t n, const chat_tools *tl, bool gen, sbuf *b)
{
    bool sys = n && is(&m[0], "system");
    const char *sys_text = sys ? m[0].content : tl->default_system;
    if (tl->n_tools) {
        put(b, "<|im_start|>system\n");
        if (sys_text)
            put_content(b, sys_text), put(b, "\n\n");
        put(b, HERMES_HEAD);
        for (size_t k = 0; k < tl->n_tools; k++)
            put(b, "\n"), put_json_content(b, tl->tools[k], 0);
        put(b, HERMES_TAIL);
    } else if (sys_text) {
        put(b, "<|im_start|>system\n"), put_content(b, sys_text), put(b, "<|im_end|>\n");
    }
    for (size_t i = sys; i < n; i++) {
        if (is(&m[i], "tool")) {
            if (i == 0 || !is(&m[i - 1], "tool"))
                put(b, "<|im_start|>user");
            put(b, "\n<tool_response>\n"), put_content(b, m[i].content), put(b, "\n</tool_response>");
            if (i + 1 == n || !is(&m[i + 1], "tool"))
                put(b, "<|im_end|>\n");
            continue;
        }
        put(b, "<|im_start|>"), put(b, m[i].role), put(b, "\n"), put_content(b, m[i].content);
        if (is(&m[i], "assistant"))
            hermes_calls(tl, i, &m[i], b);
        put(b, "<|im_end|>\n");
    }
    if (gen)
        put(b, "<|im_start|>assistant\n");
}

#define L3_HEAD(r) "<|start_header_id|>" r "<|end_header_id|>\n\n"
#define L3_TOOLS "Given the following functions, please respond with a JSON for a function call with its " \
    "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function " \
    "name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n"

/* Llama 3.1 (tools_in_user_message, its default): tools before the first message, a call
 * as {"name": ..., "parameters": ...}, results in the ipython role. The date is the
 * template's default, so that a prompt does not change with the day. */
static int render_llama31(const chat_msg *m, size_t n, const chat_tools *tl, bool gen, sbuf *b, char *err,
                          size_t errlen)
{
    size_t i = n && is(&m[0], "system");
    put(b, L3_HEAD("system"));
    put(b, tl->n_tools ? "Environment: ipython\n" : "");
    put(b, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    put_content_trim(b, i ? m[0].content : ""), put(b, "<|eot_id|>");
    if (tl->n_tools) {
        if (i == n)
            return errf(err, errlen, "chat_render: llama3 puts the tools in the first user message: there is none");
        put(b, L3_HEAD("user") L3_TOOLS);
        for (size_t k = 0; k < tl->n_tools; k++)
            put_json_content(b, tl->tools[k], 4), put(b, "\n\n");
        put_content_trim(b, m[i++].content), put(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        const chat_call *c = NULL;
        int nc = 0;
        for (size_t k = 0; k < tl->n_calls; k++)
            if (tl->calls[k].msg == i && tl->calls[k].name)
                c = c ? c : &tl->calls[k], nc++;
        if (nc > 1)
            return errf(err, errlen, "chat_render: message %zu: llama3 takes one tool call per message, not %d", i, nc);
        if (is(&m[i], "tool")) {
            put(b, L3_HEAD("ipython")), put_quoted(b, m[i].content), put(b, "<|eot_id|>");
        } else if (c) {
            put(b, L3_HEAD("assistant") "{\"name\": \""), put_content(b, c->name), put(b, "\", \"parameters\": ");
            put_json_content(b, c->args, 0), put(b, "}<|eot_id|>");
        } else {
            put(b, "<|start_header_id|>"), put(b, m[i].role), put(b, "<|end_header_id|>\n\n");
            put_content_trim(b, m[i].content), put(b, "<|eot_id|>");
        }
    }
    if (gen)
        put(b, L3_HEAD("assistant"));
    return 0;
}

/* [AVAILABLE_TOOLS]: each tool's function members, strings printed raw (the template
 * concatenates them), other values as tojson. */
static void mistral_tools(const chat_tools *tl, const char *sp, sbuf *b)
{
    put(b, "[AVAILABLE_TOOLS]"), put(b, sp), put(b, "[");
    for (size_t k = 0; k < tl->n_tools; k++) {
        size_t from = b->n;
        put(b, "{\"type\": \"function\", \"function\": {");
        const char *f = member(tl->tools[k], "function"), *p = skip_ws(skip_ws(f) + 1);
        bool first = true;
        while (*p == '"') {
            const char *v = skip_ws(skip_ws(str_end(p)) + 1), *ve = value_end(v, 0);
            if (strncmp(p, "\"return\"", 8) != 0) {
                put(b, first ? "" : ", "), put_n(b, p, (size_t)(str_end(p) - p)), put(b, ": ");
                if (*v == '"')
                    put(b, "\""), put_unescaped(b, v), put(b, "\"");
                else
                    put_json_n(b, v, ve, 0);
                first = false;
            }
            p = skip_ws(ve);
            p = skip_ws(*p == ',' ? p + 1 : p);
        }
        put(b, "}}");
        add_span(b, from);
        put(b, k + 1 < tl->n_tools ? ", " : "]");
    }
    put(b, "[/AVAILABLE_TOOLS]");
}

static int mistral_calls(const chat_tools *tl, size_t i, const char *sp, sbuf *b, char *err, size_t errlen)
{
    bool first = true;
    for (size_t k = 0; k < tl->n_calls; k++) {
        const chat_call *c = &tl->calls[k];
        if (c->msg != i || !c->name)
            continue;
        if (strlen(c->id) != 9)
            return errf(err, errlen, "chat_render: mistral tool call ids are 9 letters or digits, not '%.40s'", c->id);
        put(b, first ? "[TOOL_CALLS]" : ", "), put(b, first ? sp : ""), put(b, first ? "[" : "");
        put(b, "{\"name\": \""), put_content(b, c->name), put(b, "\", \"arguments\": ");
        put_json_content(b, c->args, 0), put(b, ", \"id\": \""), put_content(b, c->id), put(b, "\"}");
        first = false;
    }
    put(b, "]</s>");
    return 0;
}

static const chat_call *result_of(const chat_tools *tl, size_t i)
{
    for (size_t k = 0; k < tl->n_calls; k++)
        if (tl->calls[k].msg == i && !tl->calls[k].name)
            return &tl->calls[k];
    return NULL;
}

static bool has_calls(const chat_tools *tl, size_t i)
{
    for (size_t k = 0; k < tl->n_calls; k++)
        if (tl->calls[k].msg == i && tl->calls[k].name)
            return true;
    return false;
}

/* Mistral v0.3 (sp " ") and Nemo / tekken (sp ""): tools before the last user message;
 * the system message goes with the last user message (v0.3) or only with a user message
 * that is the last message (Nemo), as their templates do. */
static int render_mistral_tools(chat_tmpl t, const chat_msg *m, size_t n, const chat_tools *tl, sbuf *b,
                                char *err, size_t errlen)
{
    const char *sp = t == CHAT_TMPL_MISTRAL_V3 ? " " : "";
    size_t i0 = n && is(&m[0], "system"), last_user = n;
    for (size_t i = i0; i < n; i++)
        if (is(&m[i], "user"))
            last_user = i;
    for (size_t i = i0; i < n; i++) {
        if (is(&m[i], "user")) {
            if (tl->n_tools && i == last_user)
                mistral_tools(tl, sp, b);
            put(b, "[INST]"), put(b, sp);
            if (i0 && (*sp ? i == last_user : i + 1 == n)) /* v0.3: the last user message; Nemo: the last message */
                put_content(b, m[0].content), put(b, "\n\n");
            put_content(b, m[i].content), put(b, "[/INST]");
        } else if (has_calls(tl, i)) {
            if (mistral_calls(tl, i, sp, b, err, errlen) != 0)
                return -1;
        } else if (is(&m[i], "assistant")) {
            if (*sp)
                put(b, " "), put_content_trim(b, m[i].content);
            else
                put_content(b, m[i].content);
            put(b, "</s>");
        } else if (is(&m[i], "tool")) {
            const chat_call *r = result_of(tl, i);
            if (!r || strlen(r->id) != 9)
                return errf(err, errlen, "chat_render: message %zu: mistral needs the tool_call_id (9 letters or "
                            "digits) of a tool result", i);
            put(b, "[TOOL_RESULTS]"), put(b, sp), put(b, "{\"content\": "), put_content(b, m[i].content);
            put(b, ", \"call_id\": \""), put_content(b, r->id), put(b, "\"}[/TOOL_RESULTS]");
        } else {
            return errf(err, errlen, "chat_render: message %zu: mistral takes a system message first only", i);
        }
    }
    return 0;
}

/* ---- the entry ---- */

bool chat_tools_supported(chat_tmpl t)
{
    return t == CHAT_TMPL_CHATML || t == CHAT_TMPL_LLAMA3 || t == CHAT_TMPL_MISTRAL_V3 ||
           t == CHAT_TMPL_MISTRAL_V3_TEKKEN || t == CHAT_TMPL_QWEN3 || t == CHAT_TMPL_QWEN3_NOTHINK;
}

static int check_tools(const chat_msg *m, size_t n, const chat_tools *tl, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return errf(err, errlen, "chat_render: message %zu has a NULL %s", i, m[i].role ? "content" : "role");
        if (!is(&m[i], "system") && !is(&m[i], "user") && !is(&m[i], "assistant") && !is(&m[i], "tool"))
            return errf(err, errlen, "chat_render: message %zu: role '%.40s' is not one of system, user, assistant, "
                        "tool", i, m[i].role);
    }
    for (size_t k = 0; k < tl->n_tools; k++) {
        const char *f = json_ok(tl->tools[k], true) ? member(tl->tools[k], "function") : NULL;
        if (!f || *f != '{' || !member(f, "name"))
            return errf(err, errlen, "chat_render: tool %zu is not a JSON object with a \"function\" that has a "
                        "\"name\"", k);
    }
    for (size_t k = 0; k < tl->n_calls; k++) {
        const chat_call *c = &tl->calls[k];
        const char *want = c->name ? "assistant" : "tool";
        if (c->msg >= n || !c->id || !is(&m[c->msg], want))
            return errf(err, errlen, "chat_render: tool call %zu does not belong to a%s %s message", k,
                        c->name ? "n" : "", want);
        if (c->name && (!c->name[0] || strpbrk(c->name, "\"\\<>[]{}\n") || !json_ok(c->args, true)))
            return errf(err, errlen, "chat_render: tool call %zu: a bad name or arguments that are not a JSON object", k);
    }
    return 0;
}

int chat_render_tools(chat_tmpl t, const chat_msg *msgs, size_t n, const chat_tools *tl,
                      bool add_generation_prompt, char **out, tok_span **spans, size_t *n_spans,
                      char *err, size_t errlen)
{
    bool any = tl && (tl->n_tools || tl->n_calls);
    for (size_t i = 0; i < n && !any && msgs; i++)
        any = msgs[i].role && !strcmp(msgs[i].role, "tool");
    if (!any)
        return chat_render_spans(t, msgs, n, add_generation_prompt, out, spans, n_spans, err, errlen);
    *out = NULL;
    if (spans)
        *spans = NULL, *n_spans = 0;
    static const chat_tools none = {0};
    tl = tl ? tl : &none;
    if (t == CHAT_TMPL_QWEN3 || t == CHAT_TMPL_QWEN3_NOTHINK)
        t = CHAT_TMPL_CHATML; /* Qwen3's tool section is Qwen2.5's (Hermes <tool_call>) */
    if (!chat_tools_supported(t))
        return errf(err, errlen, "chat_render: template %s does not render tools (chatml, qwen3, llama3, mistral-v3 and "
                    "mistral-v3-tekken do)", chat_template_name(t));
    if (n && !msgs)
        return errf(err, errlen, "chat_render: messages are NULL");
    if (check_tools(msgs, n, tl, err, errlen) != 0)
        return -1;
    sbuf b = {0};
    put(&b, "");
    int rc = 0;
    if (t == CHAT_TMPL_CHATML)
        render_hermes(msgs, n, tl, add_generation_prompt, &b);
    else if (t == CHAT_TMPL_LLAMA3)
        rc = render_llama31(msgs, n, tl, add_generation_prompt, &b, err, errlen);
    else
        rc = render_mistral_tools(t, msgs, n, tl, &b, err, errlen);
    if (rc == 0 && b.oom)
        rc = errf(err, errlen, "chat_render: out of memory");
    if (rc != 0) {
        free(b.s);
        free(b.spans);
        return -1;
    }
    *out = b.s;
    if (spans)
        *spans = b.spans, *n_spans = b.n_spans;
    else
        free(b.spans);
    return 0;
}
