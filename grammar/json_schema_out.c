/*
 * json_schema_out.c - the converter's output side: text buffers, the rule list with
 * unique names, the primitive rules (space, string, number, value, formats...) added
 * once when first used, and literals.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsg_impl.h"

void jsg_sb_addn(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->n + n + 1)
            c *= 2;
        char *np = realloc(b->p, c);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jsg_sb_add(sbuf *b, const char *s) { jsg_sb_addn(b, s, strlen(s)); }

void jsg_sb_addf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (n < (int)sizeof tmp) {
        jsg_sb_addn(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    jsg_sb_addn(b, big, (size_t)n);
    free(big);
}

char *jsg_sb_take(sbuf *b)
{
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    char *p = b->p ? b->p : strdup("");
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}

void jsg_fail(conv *c, const char *path, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->err && c->errlen)
        snprintf(c->err, c->errlen, "schema at %s: %s", *path ? path : "/", msg);
}

bool jsg_has_rule(const conv *c, const char *name)
{
    for (size_t i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name))
            return true;
    return false;
}

/* Adds rule name ::= body (body owned by the rule); returns its name or NULL. */
const char *jsg_put_rule(conv *c, char *name, char *body)
{
    if (!name || !body || c->failed) {
        free(name);
        free(body);
        if (!c->failed)
            jsg_fail(c, "", "out of memory");
        return NULL;
    }
    if (c->n_rules == c->cap_rules) {
        size_t cap = c->cap_rules ? c->cap_rules * 2 : 32;
        jrule *r = realloc(c->rules, cap * sizeof *r);
        if (!r) {
            free(name);
            free(body);
            jsg_fail(c, "", "out of memory");
            return NULL;
        }
        c->rules = r;
        c->cap_rules = cap;
    }
    c->rules[c->n_rules] = (jrule){name, body};
    return c->rules[c->n_rules++].name;
}

/* A fresh rule name from a hint: letters, digits and '-' only, made unique. */
char *jsg_fresh_name(conv *c, const char *hint)
{
    char base[80];
    size_t n = 0;
    for (const char *h = hint; *h && n < sizeof base - 12; h++) {
        char ch = *h;
        base[n++] = ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) ? ch : '-';
    }
    if (n == 0)
        base[n++] = 'r';
    base[n] = 0;
    char *name = malloc(n + 12);
    if (!name)
        return NULL;
    strcpy(name, base);
    for (int i = 1; jsg_has_rule(c, name); i++)
        snprintf(name, n + 12, "%s-%d", base, i);
    return name;
}

const char *jsg_add_rule(conv *c, const char *hint, char *body)
{
    return jsg_put_rule(c, jsg_fresh_name(c, hint), body);
}

/* ---- primitives ---- */

static const struct prim {
    const char *name, *body, *deps;
} PRIMS[] = {
    {"space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}", ""},
    {"boolean", "(\"true\" | \"false\") space", "space"},
    {"null", "\"null\" space", "space"},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", ""},
    {"decimal-part", "[0-9]{1,16}", ""},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? [0-9]{1,2})? space",
     "integral-part decimal-part space"},
    {"integer", "(\"-\"? integral-part) space", "integral-part space"},
    {"plain-char", "[^\"\\\\\\x7F\\x00-\\x1F]", ""},
    {"char", "plain-char | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", "plain-char"},
    {"string", "\"\\\"\" char* \"\\\"\" space", "char space"},
    {"value", "object | array | string | number | boolean | null",
     "object array string number boolean null"},
    {"object", "\"{\" space (string \":\" space value (\",\" space string \":\" space value)*)? \"}\" space",
     "space string value"},
    {"array", "\"[\" space (value (\",\" space value)*)? \"]\" space", "space value"},
    {"date", "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])", ""},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
             "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])", ""},
    {"date-time", "date \"T\" time", "date time"},
    {"hex", "[0-9a-fA-F]", ""},
    {"uuid", "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}", "hex"},
    {"date-string", "\"\\\"\" date \"\\\"\" space", "date space"},
    {"time-string", "\"\\\"\" time \"\\\"\" space", "time space"},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\" space", "date-time space"},
    {"uuid-string", "\"\\\"\" uuid \"\\\"\" space", "uuid space"},
};

/* Adds primitive name (and what it uses) once; returns name. */
const char *jsg_prim(conv *c, const char *name)
{
    for (size_t i = 0; i < sizeof PRIMS / sizeof *PRIMS; i++) {
        if (strcmp(PRIMS[i].name, name) != 0)
            continue;
        if (!jsg_has_rule(c, name)) {
            jsg_put_rule(c, strdup(name), strdup(PRIMS[i].body));
            char deps[128];
            snprintf(deps, sizeof deps, "%s", PRIMS[i].deps);
            for (char *save, *d = strtok_r(deps, " ", &save); d; d = strtok_r(NULL, " ", &save))
                jsg_prim(c, d);
        }
        return PRIMS[i].name;
    }
    return NULL; /* not reached: names are ours */
}

/* ---- literals ---- */

/* s[0..n) as a GBNF string literal. */
void jsg_gbnf_literal(sbuf *b, const char *s, size_t n)
{
    jsg_sb_add(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[3] = {'\\', (char)ch, 0};
            jsg_sb_add(b, e);
        } else if (ch < 0x20 || ch == 0x7F) {
            jsg_sb_addf(b, "\\x%02X", ch);
        } else {
            jsg_sb_addn(b, (const char *)&ch, 1);
        }
    }
    jsg_sb_add(b, "\"");
}

/* A JSON value written compactly, as a GBNF literal followed by space. */
char *jsg_json_literal(conv *c, const json_t *v, const char *path)
{
    char *js = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!js) {
        jsg_fail(c, path, "cannot write the enum/const value");
        return NULL;
    }
    sbuf b = {0};
    jsg_gbnf_literal(&b, js, strlen(js));
    jsg_sb_add(&b, " ");
    jsg_sb_add(&b, jsg_prim(c, "space"));
    free(js);
    return jsg_sb_take(&b);
}

bool jsg_in_list(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k))
            return true;
    return false;
}
