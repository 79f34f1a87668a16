/*
 * json_schema_scalar.c - the converter's rules for scalars: integers between bounds
 * (digit-by-digit ranges), strings with lengths, formats (date, time, date-time, uuid)
 * and patterns (a small regular-expression subset, written as GBNF).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsg_impl.h"

/* ---- integers in a range ---- */

/* Decimal strings lo <= hi of the same length n, as a GBNF expression. */
static void digits_range(sbuf *b, const char *lo, const char *hi, size_t n)
{
    if (n == 0)
        return;
    if (lo[0] == hi[0]) {
        jsg_sb_addf(b, "[%c]", lo[0]);
        if (n > 1) {
            jsg_sb_add(b, " ");
            digits_range(b, lo + 1, hi + 1, n - 1);
        }
        return;
    }
    bool lo_zero = strspn(lo + 1, "0") == n - 1, hi_nine = strspn(hi + 1, "9") == n - 1;
    char start = lo_zero ? lo[0] : (char)(lo[0] + 1), end = hi_nine ? hi[0] : (char)(hi[0] - 1);
    bool first = true;
    jsg_sb_add(b, "(");
    if (!lo_zero) {
        char nines[24];
        memset(nines, '9', n - 1);
        nines[n - 1] = 0;
        jsg_sb_addf(b, "[%c] ", lo[0]);
        digits_range(b, lo + 1, nines, n - 1);
        first = false;
    }
    if (start <= end) {
        jsg_sb_add(b, first ? "" : " | ");
        jsg_sb_addf(b, "[%c-%c]", start, end);
        if (n > 1)
            jsg_sb_addf(b, " [0-9]{%zu}", n - 1);
        first = false;
    }
    if (!hi_nine) {
        char zeros[24];
        memset(zeros, '0', n - 1);
        zeros[n - 1] = 0;
        jsg_sb_add(b, first ? "" : " | ");
        jsg_sb_addf(b, "[%c] ", hi[0]);
        digits_range(b, zeros, hi + 1, n - 1);
    }
    jsg_sb_add(b, ")");
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
    jsg_sb_add(b, "(");
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
        jsg_sb_add(b, first ? "" : " | ");
        digits_range(b, from, to, l);
        first = false;
    }
    if (z < 0 && la < 16)
        jsg_sb_addf(b, " | [1-9] [0-9]{%zu,15}", la);
    jsg_sb_add(b, ")");
}

static bool get_bound(conv *c, const json_t *s, const char *key, double *out, const char *path)
{
    json_t *v = json_object_get(s, key);
    if (!v)
        return false;
    if (!json_is_number(v)) {
        jsg_fail(c, path, "'%s' must be a number", key);
        return false;
    }
    double d = json_number_value(v);
    if (!(fabs(d) <= MAX_INT_BOUND)) {
        jsg_fail(c, path, "'%s' %g is beyond the supported range (+-1e15)", key, d);
        return false;
    }
    *out = d;
    return true;
}

char *jsg_integer_rule(conv *c, const json_t *s, const char *hint, const char *path)
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
        return strdup(jsg_prim(c, "integer"));
    if (has_lo && has_hi && lo > hi) {
        jsg_fail(c, path, "no integer lies between minimum %lld and maximum %lld", lo, hi);
        return NULL;
    }
    sbuf b = {0};
    jsg_sb_add(&b, "(");
    bool first = true;
    /* the negative part: "-" then magnitudes [max(1, -hi), -lo] (never "-0") */
    if (!has_lo || lo < 0) {
        jsg_sb_add(&b, "\"-\" ");
        nat_range(&b, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
        first = false;
    }
    /* the non-negative part: [max(0, lo), hi] */
    if (!has_hi || hi >= 0) {
        jsg_sb_add(&b, first ? "" : " | ");
        nat_range(&b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    jsg_sb_add(&b, ") ");
    jsg_sb_add(&b, jsg_prim(c, "space"));
    char *body = jsg_sb_take(&b);
    const char *name = jsg_add_rule(c, hint, body);
    return name ? strdup(name) : NULL;
}

/* ---- strings ---- */

static char *pattern_rule(conv *c, const char *pat, const char *hint, const char *path);

char *jsg_string_rule(conv *c, const json_t *s, const char *hint, const char *path)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    if ((fmt || pat) && (mn || mx)) {
        jsg_fail(c, path, "minLength/maxLength together with %s is not supported", fmt ? "format" : "pattern");
        return NULL;
    }
    if (fmt && pat) {
        jsg_fail(c, path, "format together with pattern is not supported");
        return NULL;
    }
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) {
            jsg_fail(c, path, "'format' must be a string");
            return NULL;
        }
        static const char *const ok[] = {"date", "time", "date-time", "uuid", NULL};
        if (!jsg_in_list(ok, f)) {
            jsg_fail(c, path, "unsupported format '%s' (supported: date, time, date-time, uuid)", f);
            return NULL;
        }
        char name[32];
        snprintf(name, sizeof name, "%s-string", f);
        return strdup(jsg_prim(c, name));
    }
    if (pat) {
        if (!json_is_string(pat)) {
            jsg_fail(c, path, "'pattern' must be a string");
            return NULL;
        }
        return pattern_rule(c, json_string_value(pat), hint, path);
    }
    if (!mn && !mx)
        return strdup(jsg_prim(c, "string"));
    if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
        (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0))) {
        jsg_fail(c, path, "minLength/maxLength must be non-negative integers");
        return NULL;
    }
    long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if (lo > 10000 || hi > 10000) {
        jsg_fail(c, path, "minLength/maxLength over 10000 is not supported");
        return NULL;
    }
    if (hi >= 0 && lo > hi) {
        jsg_fail(c, path, "minLength %lld > maxLength %lld", lo, hi);
        return NULL;
    }
    sbuf b = {0};
    jsg_prim(c, "char");
    if (hi < 0)
        jsg_sb_addf(&b, "\"\\\"\" char{%lld,} \"\\\"\" %s", lo, jsg_prim(c, "space"));
    else
        jsg_sb_addf(&b, "\"\\\"\" char{%lld,%lld} \"\\\"\" %s", lo, hi, jsg_prim(c, "space"));
    const char *name = jsg_add_rule(c, hint, jsg_sb_take(&b));
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
    jsg_fail(r->c, r->path, "pattern: %s at offset %zu (supported: literals, . [...] \\d \\w \\s, groups, |, "
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
    jsg_sb_add(b, "[");
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
            jsg_sb_addf(b, "\\U%08X-\\U%08X", cp, end);
            any = true;
            if (end == hi)
                break;
            cp = end + 1;
        }
    }
    jsg_sb_add(b, "]");
    if (!any) {
        b->n = mark;
        rx_fail(r, "a class with no character a JSON string can hold unescaped");
    }
}

static void rx_alternation(rx *r);

/* One atom: a literal, '.', a class, a shorthand, a group. */
/* A group "(...)" or "(?:...)" at r->pos (its '('). */
static bool rx_group(rx *r)
{
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
    jsg_sb_add(&r->out, "(");
    rx_alternation(r);
    r->depth--;
    if (r->c->failed)
        return false;
    if (r->pos >= r->n || r->s[r->pos] != ')') {
        rx_fail(r, "'(' without ')'");
        return false;
    }
    r->pos++;
    jsg_sb_add(&r->out, ")");
    return true;
}

/* A character class "[...]" at r->pos (its '['). */
static bool rx_class(rx *r)
{
    cp_range rg[80];
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

/* An escape at r->pos (its backslash): a class shorthand or a literal. */
static bool rx_escape(rx *r)
{
    cp_range rg[80];
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
        jsg_gbnf_literal(&r->out, esc, 2);
    } else if (lit < 0x20) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\u%04x", lit);
        jsg_gbnf_literal(&r->out, esc, 6);
    } else {
        jsg_gbnf_literal(&r->out, tmp, 1);
    }
    return true;
}

static bool rx_atom(rx *r)
{
    char ch = r->s[r->pos];
    cp_range rg[80];
    if (ch == '(')
        return rx_group(r);
    if (ch == '.') {
        r->pos++;
        rg[0] = (cp_range){0, 0x10FFFF};
        emit_class(r, rg, 1, false);
        return !r->c->failed;
    }
    if (ch == '[')
        return rx_class(r);
    if (ch == '\\')
        return rx_escape(r);
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
        jsg_gbnf_literal(&r->out, esc, (size_t)len);
    } else {
        jsg_gbnf_literal(&r->out, r->s + at, r->pos - at);
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
        jsg_sb_add(&r->out, q);
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
            jsg_sb_addf(&r->out, "{%lu}", m);
        else if (has_n)
            jsg_sb_addf(&r->out, "{%lu,%lu}", m, n);
        else
            jsg_sb_addf(&r->out, "{%lu,}", m);
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
            jsg_sb_add(&r->out, " ");
            if (!rx_atom(r))
                return;
            rx_quantifier(r);
            empty = false;
        }
        if (empty)
            jsg_sb_add(&r->out, " \"\"");
        if (r->c->failed || r->pos >= r->n || r->s[r->pos] != '|')
            return;
        r->pos++;
        jsg_sb_add(&r->out, " |");
    }
}

static char *pattern_rule(conv *c, const char *pat, const char *hint, const char *path)
{
    size_t n = strlen(pat);
    if (n < 2 || pat[0] != '^' || pat[n - 1] != '$' || (n >= 3 && pat[n - 2] == '\\')) {
        jsg_fail(c, path, "pattern '%.80s' must be anchored as ^...$", pat);
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
    char *inner = jsg_sb_take(&r.out);
    sbuf b = {0};
    jsg_sb_addf(&b, "\"\\\"\" (%s ) \"\\\"\" ", inner ? inner : "");
    jsg_sb_add(&b, jsg_prim(c, "space"));
    free(inner);
    const char *name = jsg_add_rule(c, hint, jsg_sb_take(&b));
    return name ? strdup(name) : NULL;
}
