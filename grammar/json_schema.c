/*
 * json_schema.c - JSON Schema to GBNF. One pass over the schema (jansson), each
 * subschema becoming a GBNF expression; objects, arrays, strings, integer ranges and
 * $ref targets get named rules, the primitives (space, string, number, ...) are added
 * once when first used. Every keyword of a schema object is checked against the list
 * the converter honours before anything is generated (fail closed).
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

#define MAX_SCHEMA_DEPTH 64
#define MAX_INT_BOUND 1e15 /* integer bounds beyond this are refused */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n)
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

static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

static void sb_addf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_addf(sbuf *b, const char *fmt, ...)
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
        sb_addn(b, tmp, (size_t)n);
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
    sb_addn(b, big, (size_t)n);
    free(big);
}

/* Takes ownership of the buffer's text (empty string if nothing was added). */
static char *sb_take(sbuf *b)
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

typedef struct {
    char *name, *body;
} jrule;

typedef struct {
    char *ptr, *name; /* a $ref target and its rule */
} jref;

typedef struct {
    json_t *root;
    jrule *rules;
    size_t n_rules, cap_rules;
    jref *refs;
    size_t n_refs, cap_refs;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
} conv;

static void fail(conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(conv *c, const char *path, const char *fmt, ...)
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

static bool has_rule(const conv *c, const char *name)
{
    for (size_t i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name))
            return true;
    return false;
}

/* Adds rule name ::= body (body owned by the rule); returns its name or NULL. */
static const char *put_rule(conv *c, char *name, char *body)
{
    if (!name || !body || c->failed) {
        free(name);
        free(body);
        if (!c->failed)
            fail(c, "", "out of memory");
        return NULL;
    }
    if (c->n_rules == c->cap_rules) {
        size_t cap = c->cap_rules ? c->cap_rules * 2 : 32;
        jrule *r = realloc(c->rules, cap * sizeof *r);
        if (!r) {
            free(name);
            free(body);
            fail(c, "", "out of memory");
            return NULL;
        }
        c->rules = r;
        c->cap_rules = cap;
    }
    c->rules[c->n_rules] = (jrule){name, body};
    return c->rules[c->n_rules++].name;
}

/* A fresh rule name from a hint: letters, digits and '-' only, made unique. */
static char *fresh_name(conv *c, const char *hint)
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
    for (int i = 1; has_rule(c, name); i++)
        snprintf(name, n + 12, "%s-%d", base, i);
    return name;
}

static const char *add_rule(conv *c, const char *hint, char *body)
{
    return put_rule(c, fresh_name(c, hint), body);
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
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
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
static const char *prim(conv *c, const char *name)
{
    for (size_t i = 0; i < sizeof PRIMS / sizeof *PRIMS; i++) {
        if (strcmp(PRIMS[i].name, name) != 0)
            continue;
        if (!has_rule(c, name)) {
            put_rule(c, strdup(name), strdup(PRIMS[i].body));
            char deps[128];
            snprintf(deps, sizeof deps, "%s", PRIMS[i].deps);
            for (char *save, *d = strtok_r(deps, " ", &save); d; d = strtok_r(NULL, " ", &save))
                prim(c, d);
        }
        return PRIMS[i].name;
    }
    return NULL; /* not reached: names are ours */
}

/* ---- literals ---- */

/* s[0..n) as a GBNF string literal. */
static void gbnf_literal(sbuf *b, const char *s, size_t n)
{
    sb_add(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[3] = {'\\', (char)ch, 0};
            sb_add(b, e);
        } else if (ch < 0x20 || ch == 0x7F) {
            sb_addf(b, "\\x%02X", ch);
        } else {
            sb_addn(b, (const char *)&ch, 1);
        }
    }
    sb_add(b, "\"");
}

/* A JSON value written compactly, as a GBNF literal followed by space. */
static char *json_literal(conv *c, const json_t *v, const char *path)
{
    char *js = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!js) {
        fail(c, path, "cannot write the enum/const value");
        return NULL;
    }
    sbuf b = {0};
    gbnf_literal(&b, js, strlen(js));
    sb_add(&b, " ");
    sb_add(&b, prim(c, "space"));
    free(js);
    return sb_take(&b);
}

/* ---- keywords ---- */

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", NULL};
static const char *const KEYWORDS[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                       "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                       "format", "pattern", "minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", NULL};

static bool in_list(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k))
            return true;
    return false;
}

static bool is_annotation(const char *k) { return in_list(ANNOTATIONS, k); }

/* The first key of s that is neither an annotation nor in allowed (NULL if none). */
static const char *other_key(const json_t *s, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !in_list(allowed, k))
            return k;
    }
    return NULL;
}

static char *visit(conv *c, const json_t *s, const char *hint, const char *path);

static void subpath(char *out, size_t cap, const char *path, const char *a, const char *b)
{
    if (b)
        snprintf(out, cap, "%s/%s/%s", path, a, b);
    else
        snprintf(out, cap, "%s/%s", path, a);
}

/* ---- integers in a range ---- */

/* Decimal strings lo <= hi of the same length n, as a GBNF expression. */
static void digits_range(sbuf *b, const char *lo, const char *hi, size_t n)
{
    if (n == 0)
        return;
    if (lo[0] == hi[0]) {
        sb_addf(b, "[%c]", lo[0]);
        if (n > 1) {
            sb_add(b, " ");
            digits_range(b, lo + 1, hi + 1, n - 1);
        }
        return;
    }
    bool lo_zero = strspn(lo + 1, "0") == n - 1, hi_nine = strspn(hi + 1, "9") == n - 1;
    char start = lo_zero ? lo[0] : (char)(lo[0] + 1), end = hi_nine ? hi[0] : (char)(hi[0] - 1);
    bool first = true;
    sb_add(b, "(");
    if (!lo_zero) {
        char nines[24];
        memset(nines, '9', n - 1);
        nines[n - 1] = 0;
        sb_addf(b, "[%c] ", lo[0]);
        digits_range(b, lo + 1, nines, n - 1);
        first = false;
    }
    if (start <= end) {
        sb_add(b, first ? "" : " | ");
        sb_addf(b, "[%c-%c]", start, end);
        if (n > 1)
            sb_addf(b, " [0-9]{%zu}", n - 1);
        first = false;
    }
    if (!hi_nine) {
        char zeros[24];
        memset(zeros, '0', n - 1);
        zeros[n - 1] = 0;
        sb_add(b, first ? "" : " | ");
        sb_addf(b, "[%c] ", hi[0]);
        digits_range(b, zeros, hi + 1, n - 1);
    }
    sb_add(b, ")");
}

/* Naturals in [a, b] (b < 0: no upper bound, up to 16 digits), as alternatives. */
static void nat_range(sbuf *b, long long a, long long z)
{
    char lo[24], hi[24];
    snprintf(lo, sizeof lo, "%lld", a);
    size_t la = strlen(lo), lz;
    if (z < 0) { /* a.. : a's length up to all nines, then longer numbers */
        memset(hi, '9', la);
        hi[la] = 0;
        lz = la;
    } else {
        snprintf(hi, sizeof hi, "%lld", z);
        lz = strlen(hi);
    }
    bool first = true;
    sb_add(b, "(");
    for (size_t l = la; l <= lz; l++) {
        char from[24], to[24];
        if (l == la) {
            strcpy(from, lo);
        } else {
            from[0] = '1';
            memset(from + 1, '0', l - 1);
            from[l] = 0;
        }
        if (l == lz) {
            strcpy(to, hi);
        } else {
            memset(to, '9', l);
            to[l] = 0;
        }
        sb_add(b, first ? "" : " | ");
        digits_range(b, from, to, l);
        first = false;
    }
    if (z < 0 && la < 16)
        sb_addf(b, " | [1-9] [0-9]{%zu,15}", la);
    sb_add(b, ")");
}

static bool get_bound(conv *c, const json_t *s, const char *key, double *out, const char *path)
{
    json_t *v = json_object_get(s, key);
    if (!v)
        return false;
    if (!json_is_number(v)) {
        fail(c, path, "'%s' must be a number", key);
        return false;
    }
    double d = json_number_value(v);
    if (!(fabs(d) <= MAX_INT_BOUND)) {
        fail(c, path, "'%s' %g is beyond the supported range (+-1e15)", key, d);
        return false;
    }
    *out = d;
    return true;
}

static char *integer_rule(conv *c, const json_t *s, const char *hint, const char *path)
{
    double d;
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    if (get_bound(c, s, "minimum", &d, path))
        has_lo = true, lo = (long long)ceil(d);
    if (get_bound(c, s, "exclusiveMinimum", &d, path)) {
        long long v = (long long)floor(d) + 1;
        if (!has_lo || v > lo)
            lo = v;
        has_lo = true;
    }
    if (get_bound(c, s, "maximum", &d, path))
        has_hi = true, hi = (long long)floor(d);
    if (get_bound(c, s, "exclusiveMaximum", &d, path)) {
        long long v = (long long)ceil(d) - 1;
        if (!has_hi || v < hi)
            hi = v;
        has_hi = true;
    }
    if (c->failed)
        return NULL;
    if (!has_lo && !has_hi)
        return strdup(prim(c, "integer"));
    if (has_lo && has_hi && lo > hi) {
        fail(c, path, "no integer lies between minimum %lld and maximum %lld", lo, hi);
        return NULL;
    }
    sbuf b = {0};
    sb_add(&b, "(");
    bool first = true;
    /* the negative part: "-" then magnitudes [max(1, -hi), -lo] (never "-0") */
    if (!has_lo || lo < 0) {
        sb_add(&b, "\"-\" ");
        nat_range(&b, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
        first = false;
    }
    /* the non-negative part: [max(0, lo), hi] */
    if (!has_hi || hi >= 0) {
        sb_add(&b, first ? "" : " | ");
        nat_range(&b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    sb_add(&b, ") ");
    sb_add(&b, prim(c, "space"));
    char *body = sb_take(&b);
    const char *name = add_rule(c, hint, body);
    return name ? strdup(name) : NULL;
}

/* ---- strings ---- */

static char *pattern_rule(conv *c, const char *pat, const char *hint, const char *path);

static char *string_rule(conv *c, const json_t *s, const char *hint, const char *path)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    if ((fmt || pat) && (mn || mx)) {
        fail(c, path, "minLength/maxLength together with %s is not supported", fmt ? "format" : "pattern");
        return NULL;
    }
    if (fmt && pat) {
        fail(c, path, "format together with pattern is not supported");
        return NULL;
    }
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) {
            fail(c, path, "'format' must be a string");
            return NULL;
        }
        static const char *const ok[] = {"date", "time", "date-time", "uuid", NULL};
        if (!in_list(ok, f)) {
            fail(c, path, "unsupported format '%s' (supported: date, time, date-time, uuid)", f);
            return NULL;
        }
        char name[32];
        snprintf(name, sizeof name, "%s-string", f);
        return strdup(prim(c, name));
    }
    if (pat) {
        if (!json_is_string(pat)) {
            fail(c, path, "'pattern' must be a string");
            return NULL;
        }
        return pattern_rule(c, json_string_value(pat), hint, path);
    }
    if (!mn && !mx)
        return strdup(prim(c, "string"));
    if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
        (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0))) {
        fail(c, path, "minLength/maxLength must be non-negative integers");
        return NULL;
    }
    long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if (lo > 10000 || hi > 10000) {
        fail(c, path, "minLength/maxLength over 10000 is not supported");
        return NULL;
    }
    if (hi >= 0 && lo > hi) {
        fail(c, path, "minLength %lld > maxLength %lld", lo, hi);
        return NULL;
    }
    sbuf b = {0};
    prim(c, "char");
    if (hi < 0)
        sb_addf(&b, "\"\\\"\" char{%lld,} \"\\\"\" %s", lo, prim(c, "space"));
    else
        sb_addf(&b, "\"\\\"\" char{%lld,%lld} \"\\\"\" %s", lo, hi, prim(c, "space"));
    const char *name = add_rule(c, hint, sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* ---- patterns: a small regular-expression subset to GBNF ---- */

typedef struct {
    const char *s;
    size_t pos, n;
    conv *c;
    const char *path;
    sbuf out;
    int depth;
} rx;

static void rx_fail(rx *r, const char *what)
{
    fail(r->c, r->path, "pattern: %s at offset %zu (supported: literals, . [...] \\d \\w \\s, groups, |, "
         "* + ? {m,n}, anchored ^...$)", what, r->pos);
}

/* A code point of the pattern (UTF-8). */
static uint32_t rx_utf8(rx *r)
{
    const unsigned char *p = (const unsigned char *)r->s + r->pos;
    uint32_t c = p[0];
    size_t need = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    if (r->pos + need >= r->n) {
        rx_fail(r, "truncated UTF-8");
        return 0;
    }
    if (need)
        c &= 0x3F >> need;
    for (size_t i = 1; i <= need; i++)
        c = (c << 6) | (p[i] & 0x3F);
    r->pos += need + 1;
    return c;
}

typedef struct {
    uint32_t lo, hi;
} cp_range;

/* Adds to a class the characters of a shorthand class letter (\d \w \s). */
static int shorthand(char l, cp_range *out)
{
    switch (l) {
    case 'd': out[0] = (cp_range){'0', '9'}; return 1;
    case 'w':
        out[0] = (cp_range){'0', '9'}, out[1] = (cp_range){'A', 'Z'}, out[2] = (cp_range){'_', '_'};
        out[3] = (cp_range){'a', 'z'};
        return 4;
    case 's': out[0] = (cp_range){' ', ' '}, out[1] = (cp_range){'\t', '\r'}; return 2;
    default: return 0;
    }
}

static int cmp_cp(const void *a, const void *b)
{
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Writes a class of ranges (negated if asked) minus the characters that JSON must
 * escape ('"', '\', controls) as a GBNF class. */
static void emit_class(rx *r, cp_range *rg, int n, bool negate)
{
    qsort(rg, (size_t)n, sizeof *rg, cmp_cp);
    cp_range m[80];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && rg[i].lo <= m[k - 1].hi + 1) {
            if (rg[i].hi > m[k - 1].hi)
                m[k - 1].hi = rg[i].hi;
        } else {
            m[k++] = rg[i];
        }
    }
    cp_range fin[90];
    int f = 0;
    if (negate) {
        uint32_t next = 0;
        for (int i = 0; i < k; i++) {
            if (m[i].lo > next)
                fin[f++] = (cp_range){next, m[i].lo - 1};
            next = m[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            fin[f++] = (cp_range){next, 0x10FFFF};
    } else {
        memcpy(fin, m, (size_t)k * sizeof *m);
        f = k;
    }
    /* minus controls, '"' and '\' */
    static const cp_range bad[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
    sbuf *b = &r->out;
    size_t mark = b->n;
    sb_add(b, "[");
    bool any = false;
    for (int i = 0; i < f; i++) {
        uint32_t lo = fin[i].lo, hi = fin[i].hi;
        for (uint32_t cp = lo; cp <= hi;) {
            uint32_t end = hi;
            bool skip = false;
            for (size_t j = 0; j < sizeof bad / sizeof *bad; j++) {
                if (cp >= bad[j].lo && cp <= bad[j].hi) {
                    cp = bad[j].hi + 1;
                    skip = true;
                    break;
                }
                if (bad[j].lo > cp && bad[j].lo - 1 < end)
                    end = bad[j].lo - 1;
            }
            if (skip)
                continue;
            sb_addf(b, "\\U%08X-\\U%08X", cp, end);
            any = true;
            if (end == hi)
                break;
            cp = end + 1;
        }
    }
    sb_add(b, "]");
    if (!any) {
        b->n = mark;
        rx_fail(r, "a class with no character a JSON string can hold unescaped");
    }
}

static void rx_alternation(rx *r);

/* One atom: a literal, '.', a class, a shorthand, a group. */
static bool rx_atom(rx *r)
{
    char ch = r->s[r->pos];
    cp_range rg[80];
    if (ch == '(') {
        r->pos++;
        if (r->pos + 1 < r->n && r->s[r->pos] == '?') {
            if (r->s[r->pos + 1] != ':') {
                rx_fail(r, "lookaround or named group");
                return false;
            }
            r->pos += 2;
        }
        if (++r->depth > 32) {
            rx_fail(r, "groups nested too deep");
            return false;
        }
        sb_add(&r->out, "(");
        rx_alternation(r);
        r->depth--;
        if (r->c->failed)
            return false;
        if (r->pos >= r->n || r->s[r->pos] != ')') {
            rx_fail(r, "'(' without ')'");
            return false;
        }
        r->pos++;
        sb_add(&r->out, ")");
        return true;
    }
    if (ch == '.') {
        r->pos++;
        rg[0] = (cp_range){0, 0x10FFFF};
        emit_class(r, rg, 1, false);
        return !r->c->failed;
    }
    if (ch == '[') {
        r->pos++;
        bool neg = false;
        int n = 0;
        if (r->pos < r->n && r->s[r->pos] == '^')
            neg = true, r->pos++;
        bool first = true;
        while (r->pos < r->n && (r->s[r->pos] != ']' || first)) {
            first = false;
            if (n > 70) {
                rx_fail(r, "a class too large");
                return false;
            }
            uint32_t lo;
            if (r->s[r->pos] == '\\' && r->pos + 1 < r->n) {
                char e = r->s[r->pos + 1];
                r->pos += 2;
                int k = shorthand(e, rg + n);
                if (k) {
                    n += k;
                    continue;
                }
                if (e == 'n') lo = '\n';
                else if (e == 't') lo = '\t';
                else if (e == 'r') lo = '\r';
                else if (strchr("\\]-^[.$*+?(){}|/\"", e)) lo = (uint32_t)e;
                else {
                    rx_fail(r, "an escape the converter does not know");
                    return false;
                }
            } else {
                lo = rx_utf8(r);
            }
            uint32_t hi = lo;
            if (r->pos + 1 < r->n && r->s[r->pos] == '-' && r->s[r->pos + 1] != ']') {
                r->pos++;
                if (r->s[r->pos] == '\\') {
                    rx_fail(r, "an escape as a range end");
                    return false;
                }
                hi = rx_utf8(r);
                if (hi < lo) {
                    rx_fail(r, "a range out of order");
                    return false;
                }
            }
            if (r->c->failed)
                return false;
            rg[n++] = (cp_range){lo, hi};
        }
        if (r->pos >= r->n) {
            rx_fail(r, "'[' without ']'");
            return false;
        }
        r->pos++;
        emit_class(r, rg, n, neg);
        return !r->c->failed;
    }
    if (ch == '\\') {
        if (r->pos + 1 >= r->n) {
            rx_fail(r, "a trailing backslash");
            return false;
        }
        char e = r->s[r->pos + 1];
        r->pos += 2;
        int k = shorthand((char)(e | 0x20), rg);
        if (k && (e == 'd' || e == 'w' || e == 's' || e == 'D' || e == 'W' || e == 'S')) {
            emit_class(r, rg, k, e < 'a');
            return !r->c->failed;
        }
        uint32_t lit;
        if (e == 'n') lit = '\n';
        else if (e == 't') lit = '\t';
        else if (e == 'r') lit = '\r';
        else if (strchr("\\.-^$*+?()[]{}|/\"", e)) lit = (uint32_t)e;
        else {
            rx_fail(r, "an escape the converter does not know (\\b, backreferences, \\p{...} are not supported)");
            return false;
        }
        char tmp[2] = {(char)lit, 0};
        /* written as JSON writes it */
        if (lit == '"' || lit == '\\') {
            char esc[3] = {'\\', (char)lit, 0};
            gbnf_literal(&r->out, esc, 2);
        } else if (lit < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", lit);
            gbnf_literal(&r->out, esc, 6);
        } else {
            gbnf_literal(&r->out, tmp, 1);
        }
        return true;
    }
    if (strchr("*+?{", ch)) {
        rx_fail(r, "a quantifier without an atom");
        return false;
    }
    if (ch == '^' || ch == '$') {
        rx_fail(r, "an anchor inside the pattern");
        return false;
    }
    size_t at = r->pos;
    uint32_t cp = rx_utf8(r);
    if (r->c->failed)
        return false;
    if (cp == '"' || cp < 0x20) {
        char esc[8];
        int len = cp == '"' ? snprintf(esc, sizeof esc, "\\\"") : snprintf(esc, sizeof esc, "\\u%04x", cp);
        gbnf_literal(&r->out, esc, (size_t)len);
    } else {
        gbnf_literal(&r->out, r->s + at, r->pos - at);
    }
    return true;
}

/* A quantifier after an atom, copied in GBNF syntax. */
static void rx_quantifier(rx *r)
{
    if (r->pos >= r->n)
        return;
    char ch = r->s[r->pos];
    if (ch == '*' || ch == '+' || ch == '?') {
        char q[2] = {ch, 0};
        sb_add(&r->out, q);
        r->pos++;
    } else if (ch == '{') {
        unsigned long m = 0, n = 0;
        char *end;
        const char *p = r->s + r->pos + 1;
        m = strtoul(p, &end, 10);
        bool has_m = end != p, has_n = false, comma = false;
        if (*end == ',') {
            comma = true;
            p = end + 1;
            n = strtoul(p, &end, 10);
            has_n = end != p;
        }
        if (!has_m || *end != '}' || (has_n && n < m) || m > 10000 || n > 10000) {
            rx_fail(r, "a bad {m,n}");
            return;
        }
        if (!comma)
            sb_addf(&r->out, "{%lu}", m);
        else if (has_n)
            sb_addf(&r->out, "{%lu,%lu}", m, n);
        else
            sb_addf(&r->out, "{%lu,}", m);
        r->pos = (size_t)(end - r->s) + 1;
    } else {
        return;
    }
    if (r->pos < r->n && strchr("*+?{", r->s[r->pos])) {
        if (r->s[r->pos] == '?')
            r->pos++; /* lazy: the same strings */
        else
            rx_fail(r, "a quantifier after a quantifier");
    }
}

static void rx_alternation(rx *r)
{
    for (;;) {
        bool empty = true;
        while (!r->c->failed && r->pos < r->n && r->s[r->pos] != '|' && r->s[r->pos] != ')') {
            if (r->s[r->pos] == '$' && r->pos + 1 == r->n)
                break;
            sb_add(&r->out, " ");
            if (!rx_atom(r))
                return;
            rx_quantifier(r);
            empty = false;
        }
        if (empty)
            sb_add(&r->out, " \"\"");
        if (r->c->failed || r->pos >= r->n || r->s[r->pos] != '|')
            return;
        r->pos++;
        sb_add(&r->out, " |");
    }
}

static char *pattern_rule(conv *c, const char *pat, const char *hint, const char *path)
{
    size_t n = strlen(pat);
    if (n < 2 || pat[0] != '^' || pat[n - 1] != '$' || (n >= 3 && pat[n - 2] == '\\')) {
        fail(c, path, "pattern '%.80s' must be anchored as ^...$", pat);
        return NULL;
    }
    rx r = {.s = pat, .pos = 1, .n = n, .c = c, .path = path};
    rx_alternation(&r);
    if (!c->failed && !(r.pos == n - 1 && pat[r.pos] == '$'))
        rx_fail(&r, "')' without '('");
    if (c->failed) {
        free(r.out.p);
        return NULL;
    }
    char *inner = sb_take(&r.out);
    sbuf b = {0};
    sb_addf(&b, "\"\\\"\" (%s ) \"\\\"\" ", inner ? inner : "");
    sb_add(&b, prim(c, "space"));
    free(inner);
    const char *name = add_rule(c, hint, sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* ---- objects ---- */

typedef struct trie {
    uint32_t cp;
    bool terminal;
    struct trie *kids, *next;
} trie;

static void trie_free(trie *t)
{
    while (t) {
        trie *n = t->next;
        trie_free(t->kids);
        free(t);
        t = n;
    }
}

static bool plain_cp(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7F; }

/* Adds a property name (only its plain prefix matters: a key with an escaped character
 * is never written). */
static bool trie_add(trie *root, const char *name)
{
    if (strlen(name) > 200)
        return false;
    trie *t = root;
    const unsigned char *p = (const unsigned char *)name;
    while (*p) {
        uint32_t cp = *p;
        size_t need = cp < 0x80 ? 0 : cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : 1;
        if (need)
            cp &= 0x3F >> need;
        for (size_t i = 1; i <= need && p[i]; i++)
            cp = (cp << 6) | (p[i] & 0x3F);
        for (size_t i = 0; i <= need && *p; i++)
            p++;
        if (!plain_cp(cp))
            return true;
        trie *k = t->kids;
        while (k && k->cp != cp)
            k = k->next;
        if (!k) {
            k = calloc(1, sizeof *k);
            if (!k)
                return false;
            k->cp = cp;
            k->next = t->kids;
            t->kids = k;
        }
        t = k;
    }
    t->terminal = true;
    return true;
}

/* Rule for the unescaped strings that differ from every name below node t. */
static char *trie_rule(conv *c, const trie *t, const char *hint)
{
    sbuf b = {0};
    bool first = true;
    if (!t->terminal) {
        sb_add(&b, "\"\"");
        first = false;
    }
    for (const trie *k = t->kids; k && !c->failed; k = k->next) {
        char *sub = trie_rule(c, k, hint);
        if (!sub)
            break;
        sb_add(&b, first ? "" : " | ");
        sb_addf(&b, "[\\U%08X] %s", k->cp, sub);
        free(sub);
        first = false;
    }
    sb_add(&b, first ? "" : " | ");
    sb_add(&b, "[^\"\\\\\\x7F\\x00-\\x1F");
    for (const trie *k = t->kids; k; k = k->next)
        sb_addf(&b, "\\U%08X", k->cp);
    sb_addf(&b, "] %s*", prim(c, "plain-char"));
    if (c->failed) {
        free(b.p);
        return NULL;
    }
    const char *name = add_rule(c, hint, sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* A key-value rule: the key's JSON string, then the value. */
static char *kv_rule(conv *c, const char *key, const char *value_expr, const char *hint)
{
    json_t *k = json_string(key);
    char *js = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (!js) {
        fail(c, "", "out of memory");
        return NULL;
    }
    sbuf b = {0};
    gbnf_literal(&b, js, strlen(js));
    sb_addf(&b, " %s \":\" %s %s", prim(c, "space"), prim(c, "space"), value_expr);
    free(js);
    const char *name = add_rule(c, hint, sb_take(&b));
    return name ? strdup(name) : NULL;
}

static char *object_rule(conv *c, const json_t *s, const char *hint, const char *path)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req)) ||
        (add && !json_is_boolean(add) && !json_is_object(add))) {
        fail(c, path, "properties must be an object, required an array, additionalProperties a boolean or schema");
        return NULL;
    }
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    size_t cap = n_props + n_req + 1;
    char **kv = calloc(cap, sizeof *kv);
    bool *required = calloc(cap, 1);
    trie names = {0};
    char sub[600], h[200];
    size_t n = 0;
    char *add_kv = NULL, *result = NULL;
    if (!kv || !required)
        goto out;
    for (size_t i = 0; i < n_req; i++)
        if (!json_is_string(json_array_get(req, i))) {
            fail(c, path, "required must list strings");
            goto out;
        }
    /* named properties, in schema order */
    const char *key;
    json_t *val;
    json_object_foreach(props, key, val) {
        subpath(sub, sizeof sub, path, "properties", key);
        snprintf(h, sizeof h, "%s-%s", hint, key);
        char *v = visit(c, val, h, sub);
        if (!v)
            goto out;
        snprintf(h, sizeof h, "%s-%s-kv", hint, key);
        kv[n] = kv_rule(c, key, v, h);
        free(v);
        if (!kv[n])
            goto out;
        for (size_t i = 0; i < n_req; i++)
            if (!strcmp(json_string_value(json_array_get(req, i)), key))
                required[n] = true;
        if (!trie_add(&names, key)) {
            fail(c, path, "property name '%.40s...' over 200 bytes", key);
            goto out;
        }
        n++;
    }
    /* required names without a schema: any value */
    for (size_t i = 0; i < n_req; i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (props && json_object_get(props, r))
            continue;
        bool dup = false;
        for (size_t j = 0; j < i; j++)
            dup |= !strcmp(json_string_value(json_array_get(req, j)), r);
        if (dup)
            continue;
        snprintf(h, sizeof h, "%s-%s-kv", hint, r);
        kv[n] = kv_rule(c, r, prim(c, "value"), h);
        if (!kv[n])
            goto out;
        if (!trie_add(&names, r)) {
            fail(c, path, "property name '%.40s...' over 200 bytes", r);
            goto out;
        }
        required[n++] = true;
    }
    /* extra properties: absent means none when properties are named */
    bool extras = add ? !json_is_false(add) : !props;
    if (extras) {
        char *v;
        if (add && json_is_object(add)) {
            subpath(sub, sizeof sub, path, "additionalProperties", NULL);
            snprintf(h, sizeof h, "%s-additional", hint);
            v = visit(c, add, h, sub);
        } else {
            v = strdup(prim(c, "value"));
        }
        if (!v)
            goto out;
        snprintf(h, sizeof h, "%s-additional-key", hint);
        char *k = trie_rule(c, &names, h);
        if (k) {
            sbuf b = {0};
            sb_addf(&b, "\"\\\"\" %s \"\\\"\" %s \":\" %s %s", k, prim(c, "space"), prim(c, "space"), v);
            snprintf(h, sizeof h, "%s-additional-kv", hint);
            const char *name = add_rule(c, h, sb_take(&b));
            add_kv = name ? strdup(name) : NULL;
        }
        free(k);
        free(v);
        if (!add_kv)
            goto out;
    }
    /* order: required first, then the optional ones, then extras */
    sbuf b = {0};
    sb_addf(&b, "\"{\" %s ", prim(c, "space"));
    size_t n_required = 0;
    for (size_t i = 0; i < n; i++)
        if (required[i])
            sb_addf(&b, "%s%s ", n_required++ ? "\",\" space " : "", kv[i]);
    size_t n_opt = n - n_required;
    if (n_required) {
        for (size_t i = 0; i < n; i++)
            if (!required[i])
                sb_addf(&b, "(\",\" space %s)? ", kv[i]);
        if (add_kv)
            sb_addf(&b, "(\",\" space %s)* ", add_kv);
    } else if (n_opt || add_kv) {
        /* the first present member has no comma: choose it, then the rest in order */
        const char **opt = calloc(n_opt + 1, sizeof *opt);
        char **rest = calloc(n_opt + 2, sizeof *rest);
        if (!opt || !rest) {
            free(opt);
            free(rest);
            free(b.p);
            goto oom;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            opt[k++] = kv[i];
        /* rest[j]: members j.. each optional, then extras */
        rest[n_opt] = add_kv ? NULL : strdup("\"\"");
        if (add_kv) {
            sbuf rb = {0};
            sb_addf(&rb, "(\",\" space %s)*", add_kv);
            snprintf(h, sizeof h, "%s-rest", hint);
            const char *name = add_rule(c, h, sb_take(&rb));
            rest[n_opt] = name ? strdup(name) : NULL;
        }
        for (size_t j = n_opt; j-- > 0 && rest[j + 1];) {
            sbuf rb = {0};
            sb_addf(&rb, "(\",\" space %s)? %s", opt[j], rest[j + 1]);
            snprintf(h, sizeof h, "%s-rest", hint);
            const char *name = add_rule(c, h, sb_take(&rb));
            rest[j] = name ? strdup(name) : NULL;
        }
        sb_add(&b, "(");
        for (size_t j = 0; j < n_opt && rest[j + 1]; j++)
            sb_addf(&b, "%s%s %s", j ? " | " : "", opt[j], rest[j + 1]);
        if (add_kv)
            sb_addf(&b, "%s%s (\",\" space %s)*", n_opt ? " | " : "", add_kv, add_kv);
        sb_add(&b, ")? ");
        for (size_t j = 0; j <= n_opt; j++)
            free(rest[j]);
        free(rest);
        free(opt);
    }
    sb_addf(&b, "\"}\" %s", prim(c, "space"));
    prim(c, "space");
    const char *name = add_rule(c, hint, sb_take(&b));
    result = name ? strdup(name) : NULL;
    goto out;
oom:
    fail(c, path, "out of memory");
out:
    for (size_t i = 0; kv && i < cap; i++)
        free(kv[i]);
    free(kv);
    free(required);
    free(add_kv);
    trie_free(names.kids);
    return result;
}

/* ---- arrays ---- */

static bool get_count(conv *c, const json_t *s, const char *key, long long *out, const char *path)
{
    json_t *v = json_object_get(s, key);
    if (!v)
        return false;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 10000) {
        fail(c, path, "'%s' must be an integer in 0..10000", key);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

static char *array_rule(conv *c, const json_t *s, const char *hint, const char *path)
{
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    long long lo = 0, hi = -1;
    get_count(c, s, "minItems", &lo, path);
    get_count(c, s, "maxItems", &hi, path);
    if (c->failed)
        return NULL;
    if ((items && !json_is_object(items) && !json_is_boolean(items)) || (prefix && !json_is_array(prefix))) {
        fail(c, path, "items must be a schema or boolean, prefixItems an array");
        return NULL;
    }
    size_t k = prefix ? json_array_size(prefix) : 0;
    char sub[600], h[200];
    sbuf b = {0};
    sb_addf(&b, "\"[\" %s ", prim(c, "space"));
    for (size_t i = 0; i < k; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        subpath(sub, sizeof sub, path, "prefixItems", idx);
        snprintf(h, sizeof h, "%s-%zu", hint, i);
        char *v = visit(c, json_array_get(prefix, i), h, sub);
        if (!v) {
            free(b.p);
            return NULL;
        }
        sb_addf(&b, "%s%s ", i ? "\",\" space " : "", v);
        free(v);
    }
    /* further items: how many, and of what */
    long long ex_lo = lo > (long long)k ? lo - (long long)k : 0, ex_hi = hi < 0 ? -1 : hi - (long long)k;
    bool no_more = items && json_is_false(items);
    if (hi >= 0 && (long long)k > hi) {
        fail(c, path, "prefixItems has %zu items, more than maxItems %lld", k, hi);
        free(b.p);
        return NULL;
    }
    if (no_more && ex_lo > 0) {
        fail(c, path, "minItems %lld cannot be met with items false", lo);
        free(b.p);
        return NULL;
    }
    if (hi >= 0 && lo > hi) {
        fail(c, path, "minItems %lld > maxItems %lld", lo, hi);
        free(b.p);
        return NULL;
    }
    if (!no_more && ex_hi != 0) {
        char *v;
        if (items && json_is_object(items)) {
            subpath(sub, sizeof sub, path, "items", NULL);
            snprintf(h, sizeof h, "%s-item", hint);
            v = visit(c, items, h, sub);
        } else {
            v = strdup(prim(c, "value"));
        }
        if (!v) {
            free(b.p);
            return NULL;
        }
        char rep[48];
        if (ex_hi < 0)
            snprintf(rep, sizeof rep, "{%lld,}", ex_lo);
        else
            snprintf(rep, sizeof rep, "{%lld,%lld}", ex_lo, ex_hi);
        if (k) { /* each further item after a comma */
            sb_addf(&b, "(\",\" space %s)%s ", v, rep);
        } else {
            /* first item without a comma: [lo, hi] items = (v ("," v){lo-1, hi-1})? */
            long long a = ex_lo ? ex_lo - 1 : 0;
            char rep2[48];
            if (ex_hi < 0)
                snprintf(rep2, sizeof rep2, "{%lld,}", a);
            else
                snprintf(rep2, sizeof rep2, "{%lld,%lld}", a, ex_hi - 1);
            sb_addf(&b, "(%s (\",\" space %s)%s)%s ", v, v, rep2, ex_lo ? "" : "?");
        }
        free(v);
    }
    sb_addf(&b, "\"]\" %s", prim(c, "space"));
    const char *name = add_rule(c, hint, sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* ---- references, combinations ---- */

/* The schema a "#..." JSON pointer names in the document. */
static const json_t *resolve(conv *c, const char *ref, const char *path)
{
    if (ref[0] != '#') {
        fail(c, path, "$ref '%.100s': only references inside the schema (#...) are supported", ref);
        return NULL;
    }
    const json_t *t = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') {
            fail(c, path, "$ref '%.100s': not a JSON pointer", ref);
            return NULL;
        }
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n < sizeof tok - 1) {
            if (p[0] == '~' && p[1] == '1')
                tok[n++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0')
                tok[n++] = '~', p += 2;
            else
                tok[n++] = *p++;
        }
        tok[n] = 0;
        if (json_is_object(t))
            t = json_object_get(t, tok);
        else if (json_is_array(t))
            t = json_array_get(t, (size_t)strtoul(tok, NULL, 10));
        else
            t = NULL;
        if (!t) {
            fail(c, path, "$ref '%.100s' names nothing in the schema", ref);
            return NULL;
        }
    }
    return t;
}

static char *ref_rule(conv *c, const json_t *s, const char *path)
{
    const char *bad = other_key(s, (const char *const[]){"$ref", NULL});
    if (bad) {
        fail(c, path, "'%s' beside $ref is not supported", bad);
        return NULL;
    }
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) {
        fail(c, path, "$ref must be a string");
        return NULL;
    }
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ptr, ref))
            return strdup(c->refs[i].name);
    const json_t *t = resolve(c, ref, path);
    if (!t)
        return NULL;
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
        jref *r = realloc(c->refs, cap * sizeof *r);
        if (!r) {
            fail(c, path, "out of memory");
            return NULL;
        }
        c->refs = r;
        c->cap_refs = cap;
    }
    /* the rule's name is known before its body: recursion refers to it */
    const char *tail = strrchr(ref, '/');
    char hint[200];
    snprintf(hint, sizeof hint, "ref-%s", tail && tail[1] ? tail + 1 : "root");
    char *name = fresh_name(c, hint);
    char *ptr = strdup(ref);
    if (!name || !ptr) {
        free(name);
        free(ptr);
        fail(c, path, "out of memory");
        return NULL;
    }
    /* reserve the name now, so that a rule made while visiting cannot take it */
    if (!put_rule(c, strdup(name), strdup("")))
        return free(name), free(ptr), NULL;
    size_t slot = c->n_rules - 1;
    c->refs[c->n_refs++] = (jref){ptr, name};
    char sub[600];
    snprintf(sub, sizeof sub, "%s", ref + 1);
    char *body = visit(c, t, name, sub);
    if (!body)
        return NULL;
    free(c->rules[slot].body);
    c->rules[slot].body = body;
    return strdup(name);
}

static char *any_of(conv *c, const json_t *s, const char *key, const char *hint, const char *path)
{
    const char *bad = other_key(s, (const char *const[]){key, NULL});
    if (bad) {
        fail(c, path, "'%s' beside %s is not supported", bad, key);
        return NULL;
    }
    const json_t *alts = json_object_get(s, key);
    if (!json_is_array(alts) || json_array_size(alts) == 0) {
        fail(c, path, "%s must be a non-empty array", key);
        return NULL;
    }
    sbuf b = {0};
    sb_add(&b, "(");
    for (size_t i = 0; i < json_array_size(alts); i++) {
        char sub[600], h[200], idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        subpath(sub, sizeof sub, path, key, idx);
        snprintf(h, sizeof h, "%s-%zu", hint, i);
        char *v = visit(c, json_array_get(alts, i), h, sub);
        if (!v) {
            free(b.p);
            return NULL;
        }
        sb_addf(&b, "%s%s", i ? " | " : "", v);
        free(v);
    }
    sb_add(&b, ")");
    return sb_take(&b);
}

/* allOf: the members (and the keywords beside it) merged into one schema when they do
 * not overlap: properties are united (a name in two members must have equal schemas),
 * required lists are united, types must agree, any other keyword may appear once. */
static char *all_of(conv *c, const json_t *s, const char *hint, const char *path)
{
    const json_t *members = json_object_get(s, "allOf");
    if (!json_is_array(members) || json_array_size(members) == 0) {
        fail(c, path, "allOf must be a non-empty array");
        return NULL;
    }
    json_t *merged = json_object(), *props = json_object(), *req = json_array();
    json_t *list = json_array();
    char *result = NULL;
    if (!merged || !props || !req || !list)
        goto out;
    json_t *self = json_deep_copy(s);
    json_object_del(self, "allOf");
    json_array_append_new(list, self);
    for (size_t i = 0; i < json_array_size(members); i++) {
        const json_t *m = json_array_get(members, i);
        for (int hop = 0; json_is_object(m) && json_object_get(m, "$ref") && hop < 16; hop++) {
            if (other_key(m, (const char *const[]){"$ref", NULL})) {
                fail(c, path, "allOf: a member with $ref and other keywords is not supported");
                goto out;
            }
            m = resolve(c, json_string_value(json_object_get(m, "$ref")) ? json_string_value(json_object_get(m, "$ref")) : "?", path);
            if (!m)
                goto out;
        }
        if (!json_is_object(m) || json_object_get(m, "allOf") || json_object_get(m, "$ref")) {
            fail(c, path, "allOf member %zu: nested allOf or $ref chains are not supported", i);
            goto out;
        }
        json_array_append(list, (json_t *)m);
    }
    size_t idx;
    json_t *m;
    bool add_seen = false, props_seen = false;
    json_array_foreach(list, idx, m) {
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) {
            if (is_annotation(k))
                continue;
            if (!strcmp(k, "properties") && json_is_object(v)) {
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv) {
                    json_t *old = json_object_get(props, pk);
                    if (old && !json_equal(old, pv)) {
                        fail(c, path, "allOf: property '%s' has two different schemas", pk);
                        goto out;
                    }
                    json_object_set(props, pk, pv);
                }
                props_seen = true;
            } else if (!strcmp(k, "required") && json_is_array(v)) {
                json_array_extend(req, v);
            } else if (!strcmp(k, "type")) {
                json_t *old = json_object_get(merged, "type");
                if (old && !json_equal(old, v)) {
                    fail(c, path, "allOf: members of different types are not supported");
                    goto out;
                }
                json_object_set(merged, "type", v);
            } else {
                if (!strcmp(k, "additionalProperties"))
                    add_seen = true;
                if (json_object_get(merged, k)) {
                    fail(c, path, "allOf: keyword '%s' in two members is not supported", k);
                    goto out;
                }
                json_object_set(merged, k, v);
            }
        }
    }
    if (add_seen && json_array_size(list) > 2) {
        /* another member's properties would escape additionalProperties: refuse */
        fail(c, path, "allOf: additionalProperties in a member of several is not supported");
        goto out;
    }
    if (props_seen)
        json_object_set(merged, "properties", props);
    if (json_array_size(req))
        json_object_set(merged, "required", req);
    result = visit(c, merged, hint, path);
out:
    if (!result && !c->failed)
        fail(c, path, "out of memory");
    json_decref(merged);
    json_decref(props);
    json_decref(req);
    json_decref(list);
    return result;
}

/* enum and const: the listed values, filtered by type when one is given. */
static char *enum_rule(conv *c, const json_t *s, const char *path)
{
    const char *bad = other_key(s, (const char *const[]){"enum", "const", "type", NULL});
    if (bad) {
        fail(c, path, "'%s' beside enum/const is not supported", bad);
        return NULL;
    }
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (e && k) {
        fail(c, path, "enum together with const is not supported");
        return NULL;
    }
    if (e && (!json_is_array(e) || json_array_size(e) == 0)) {
        fail(c, path, "enum must be a non-empty array");
        return NULL;
    }
    json_t *type = json_object_get(s, "type");
    sbuf b = {0};
    sb_add(&b, "(");
    size_t n = e ? json_array_size(e) : 1, written = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = e ? json_array_get(e, i) : k;
        if (type) { /* keep the values of the given type(s) */
            const char *tn = json_is_string(v) ? "string" : json_is_integer(v) ? "integer" : json_is_real(v) ? "number"
                           : json_is_boolean(v) ? "boolean" : json_is_null(v) ? "null" : json_is_array(v) ? "array" : "object";
            bool ok = false;
            for (size_t t = 0; t < (json_is_array(type) ? json_array_size(type) : 1); t++) {
                const char *want = json_string_value(json_is_array(type) ? json_array_get(type, t) : type);
                ok |= want && (!strcmp(want, tn) || (!strcmp(want, "number") && !strcmp(tn, "integer")));
            }
            if (!ok)
                continue;
        }
        char *lit = json_literal(c, v, path);
        if (!lit) {
            free(b.p);
            return NULL;
        }
        sb_addf(&b, "%s%s", written++ ? " | " : "", lit);
        free(lit);
    }
    sb_add(&b, ")");
    if (!written) {
        free(b.p);
        fail(c, path, "no enum/const value has the schema's type");
        return NULL;
    }
    return sb_take(&b);
}

/* One type of the schema, as an expression. */
static char *typed(conv *c, const json_t *s, const char *t, const char *hint, const char *path)
{
    if (!strcmp(t, "string"))
        return string_rule(c, s, hint, path);
    if (!strcmp(t, "integer"))
        return integer_rule(c, s, hint, path);
    if (!strcmp(t, "number")) {
        static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        for (int i = 0; b[i]; i++)
            if (json_object_get(s, b[i])) {
                fail(c, path, "'%s' on type number is not supported (integers only)", b[i]);
                return NULL;
            }
        return strdup(prim(c, "number"));
    }
    if (!strcmp(t, "boolean"))
        return strdup(prim(c, "boolean"));
    if (!strcmp(t, "null"))
        return strdup(prim(c, "null"));
    if (!strcmp(t, "object"))
        return object_rule(c, s, hint, path);
    if (!strcmp(t, "json_object"))
        return strdup(prim(c, "object"));
    if (!strcmp(t, "array"))
        return array_rule(c, s, hint, path);
    fail(c, path, "unknown type '%s'", t);
    return NULL;
}

static char *visit(conv *c, const json_t *s, const char *hint, const char *path)
{
    if (c->failed)
        return NULL;
    if (json_is_true(s))
        return strdup(prim(c, "value"));
    if (!json_is_object(s)) {
        fail(c, path, json_is_false(s) ? "the schema false allows nothing" : "a schema must be an object");
        return NULL;
    }
    if (++c->depth > MAX_SCHEMA_DEPTH) {
        fail(c, path, "schema nested deeper than %d", MAX_SCHEMA_DEPTH);
        return NULL;
    }
    char *r = NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !in_list(KEYWORDS, k)) {
            fail(c, path, "unsupported keyword '%s'", k);
            goto out;
        }
    }
    if (json_object_get(s, "$ref")) {
        r = ref_rule(c, s, path);
    } else if (json_object_get(s, "allOf")) {
        r = all_of(c, s, hint, path);
    } else if (json_object_get(s, "anyOf")) {
        r = any_of(c, s, "anyOf", hint, path);
    } else if (json_object_get(s, "oneOf")) {
        r = any_of(c, s, "oneOf", hint, path);
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        r = enum_rule(c, s, path);
    } else {
        json_t *type = json_object_get(s, "type");
        if (!type) { /* the type the keywords imply; annotations only: any value */
            static const struct { const char *key, *type; } imply[] = {
                {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
                {"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
                {"minLength", "string"}, {"maxLength", "string"}, {"format", "string"}, {"pattern", "string"},
                {"minimum", "integer"}, {"maximum", "integer"}, {"exclusiveMinimum", "integer"},
                {"exclusiveMaximum", "integer"}};
            const char *t = NULL;
            for (size_t i = 0; i < sizeof imply / sizeof *imply && !t; i++)
                if (json_object_get(s, imply[i].key))
                    t = imply[i].type;
            r = t ? typed(c, s, t, hint, path) : strdup(prim(c, "value"));
        } else if (json_is_string(type)) {
            r = typed(c, s, json_string_value(type), hint, path);
        } else if (json_is_array(type) && json_array_size(type) > 0) {
            sbuf b = {0};
            sb_add(&b, "(");
            for (size_t i = 0; i < json_array_size(type); i++) {
                const char *t = json_string_value(json_array_get(type, i));
                if (!t) {
                    fail(c, path, "type must list names");
                    break;
                }
                char h[200];
                snprintf(h, sizeof h, "%s-%s", hint, t);
                char *e = typed(c, s, t, h, path);
                if (!e)
                    break;
                sb_addf(&b, "%s%s", i ? " | " : "", e);
                free(e);
            }
            sb_add(&b, ")");
            if (c->failed)
                free(b.p);
            else
                r = sb_take(&b);
        } else {
            fail(c, path, "type must be a name or a non-empty array of names");
        }
    }
out:
    c->depth--;
    if (c->failed) {
        free(r);
        return NULL;
    }
    return r;
}

char *jsg_to_gbnf(const char *schema, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) {
        if (err && errlen)
            snprintf(err, errlen, "schema: invalid JSON at line %d col %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    conv c = {.root = root, .err = err, .errlen = errlen};
    /* root first in the output: reserve it */
    put_rule(&c, strdup("root"), strdup(""));
    char *top = visit(&c, root, "root", "");
    char *out = NULL;
    if (top) {
        free(c.rules[0].body);
        c.rules[0].body = top;
        sbuf b = {0};
        for (size_t i = 0; i < c.n_rules; i++)
            sb_addf(&b, "%s ::= ", c.rules[i].name), sb_add(&b, c.rules[i].body), sb_add(&b, "\n");
        out = sb_take(&b);
        if (!out && err && errlen)
            snprintf(err, errlen, "schema: out of memory");
    }
    for (size_t i = 0; i < c.n_rules; i++) {
        free(c.rules[i].name);
        free(c.rules[i].body);
    }
    for (size_t i = 0; i < c.n_refs; i++) {
        free(c.refs[i].ptr);
        free(c.refs[i].name);
    }
    free(c.rules);
    free(c.refs);
    json_decref(root);
    return out;
}

gram *jsg_compile(const char *schema, size_t len, char *err, size_t errlen)
{
    char *gbnf = jsg_to_gbnf(schema, len, err, errlen);
    if (!gbnf)
        return NULL;
    char e2[256];
    gram *g = gram_compile(gbnf, strlen(gbnf), e2, sizeof e2);
    if (!g && err && errlen)
        snprintf(err, errlen, "schema: the grammar made from it does not compile: %s", e2);
    free(gbnf);
    return g;
}
