/*
 * gram_parse.c - GBNF text to a compiled grammar: the parser, the expansion of
 * repetitions into helper rules, and the checks that make a grammar safe to match
 * (every rule defined, a root, no empty class, no left recursion, size limits).
 *
 * Repetitions become right-recursive helper rules, so that a stack never grows with
 * the number of repetitions (a reference in tail position pushes nothing):
 *   x*      R ::= x R | ""
 *   x+      x R           (R as for x*)
 *   x?      R ::= x | ""
 *   x{m,n}  x...x (m times) O(n-m)   with O1 ::= x | "", Ok ::= x O(k-1) | ""
 *   x{m,}   x...x (m times) R        (R as for x*)
 * A multi-element x (a literal, a group) is first made a rule of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_impl.h"
#include "hash.h"

#define REP_INF UINT32_MAX

typedef struct {
    gram_elem *v;
    size_t n, cap;
} elem_vec;

/* A rule while parsing: its alternatives back to back, each closed by an END. */
typedef struct {
    char *name;       /* NULL for a helper rule */
    elem_vec body;
    size_t pos;       /* definition (or creation) offset, for messages */
    size_t ref_pos;   /* first reference, for "undefined rule" */
    bool defined;
    uint32_t chain_top, chain_k; /* as in gram_rule */
} b_rule;

typedef struct {
    const char *s;
    size_t n, pos;
    char *err;
    size_t errlen;
    bool failed;
    b_rule *rules;
    size_t n_rules, cap_rules;
    uint32_t *slots;  /* open-addressing index of named rules: rule index + 1, 0 empty */
    size_t n_slots;
    gram_range *ranges;
    size_t n_ranges, cap_ranges;
    gram_class *classes;
    size_t n_classes, cap_classes;
    size_t n_elems;   /* all rule bodies together, against GRAM_MAX_ELEMS */
    int nest;
} parser;

static void fail_at(parser *p, size_t pos, const char *fmt, const char *arg)
{
    if (p->failed)
        return;
    p->failed = true;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < p->n; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    if (p->err && p->errlen)
        snprintf(p->err, p->errlen, "line %zu col %zu: %s", line, col, msg);
}

static void fail(parser *p, const char *fmt, const char *arg) { fail_at(p, p->pos, fmt, arg); }

static bool grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *nv = realloc(*v, c * size);
    if (!nv)
        return false;
    *v = nv;
    *cap = c;
    return true;
}

static void push_elem(parser *p, elem_vec *e, uint32_t kind, uint32_t val)
{
    if (p->failed)
        return;
    if (++p->n_elems > GRAM_MAX_ELEMS) {
        fail(p, "grammar too large (more than %s elements after expanding repetitions)", "1048576");
        return;
    }
    if (!grow((void **)&e->v, &e->cap, e->n + 1, sizeof *e->v)) {
        fail(p, "out of memory", NULL);
        return;
    }
    e->v[e->n++] = (gram_elem){kind, val};
}

uint64_t gram_text_hash(const void *text, size_t len) { return hash_fnv1a(HASH_FNV_SEED, text, len); }

static uint32_t new_rule(parser *p, char *name, size_t pos)
{
    if (p->n_rules >= GRAM_MAX_RULES) {
        free(name);
        fail(p, "grammar too large (more than %s rules)", "65536");
        return 0;
    }
    if (!grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) {
        free(name);
        fail(p, "out of memory", NULL);
        return 0;
    }
    p->rules[p->n_rules] = (b_rule){.name = name, .pos = pos, .ref_pos = pos, .chain_top = GRAM_NO_CHAIN};
    return (uint32_t)p->n_rules++;
}

/* The index of the rule named s[0..len), created (undefined) on first mention. */
static uint32_t named_rule(parser *p, const char *s, size_t len, size_t pos)
{
    if (p->n_slots < 2 * (p->n_rules + 1)) {
        size_t ns = p->n_slots ? p->n_slots * 2 : 256;
        uint32_t *slots = calloc(ns, sizeof *slots);
        if (!slots) {
            fail(p, "out of memory", NULL);
            return 0;
        }
        for (size_t i = 0; i < p->n_rules; i++) {
            if (!p->rules[i].name)
                continue;
            size_t h = hash_fnv1a(HASH_FNV_SEED, p->rules[i].name, strlen(p->rules[i].name)) & (ns - 1);
            while (slots[h])
                h = (h + 1) & (ns - 1);
            slots[h] = (uint32_t)i + 1;
        }
        free(p->slots);
        p->slots = slots;
        p->n_slots = ns;
    }
    size_t h = hash_fnv1a(HASH_FNV_SEED, s, len) & (p->n_slots - 1);
    for (; p->slots[h]; h = (h + 1) & (p->n_slots - 1)) {
        const char *nm = p->rules[p->slots[h] - 1].name;
        if (nm && strlen(nm) == len && memcmp(nm, s, len) == 0)
            return p->slots[h] - 1;
    }
    char *name = strndup(s, len);
    if (!name) {
        fail(p, "out of memory", NULL);
        return 0;
    }
    uint32_t r = new_rule(p, name, pos);
    if (!p->failed)
        p->slots[h] = r + 1;
    return r;
}

/* ---- character classes ---- */

static int cmp_range(const void *a, const void *b)
{
    const gram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* Adds the class made of r[0..n) (any order, overlaps allowed), negated if asked, and
 * returns its index; fails on a class that matches nothing. */
static uint32_t add_class(parser *p, gram_range *r, size_t n, bool negate, size_t pos)
{
    if (n) /* "[]" has no ranges (and r may be NULL) */
        qsort(r, n, sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    gram_range *src = r;
    size_t cnt = m;
    gram_range *neg = NULL;
    if (negate) {
        neg = malloc((m + 1) * sizeof *neg);
        if (!neg) {
            fail(p, "out of memory", NULL);
            return 0;
        }
        uint32_t next = 0;
        cnt = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[i].lo > next)
                neg[cnt++] = (gram_range){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            neg[cnt++] = (gram_range){next, 0x10FFFF};
        src = neg;
    }
    if (cnt == 0) {
        free(neg);
        fail_at(p, pos, "character class matches nothing%s", NULL);
        return 0;
    }
    if (!grow((void **)&p->ranges, &p->cap_ranges, p->n_ranges + cnt, sizeof *p->ranges) ||
        !grow((void **)&p->classes, &p->cap_classes, p->n_classes + 1, sizeof *p->classes)) {
        free(neg);
        fail(p, "out of memory", NULL);
        return 0;
    }
    gram_class c = {.first = (uint32_t)p->n_ranges, .n = (uint32_t)cnt};
    for (size_t i = 0; i < cnt; i++) {
        p->ranges[p->n_ranges++] = src[i];
        for (uint32_t cp = src[i].lo; cp <= src[i].hi && cp < 128; cp++)
            c.ascii[cp >> 6] |= 1ull << (cp & 63);
    }
    free(neg);
    p->classes[p->n_classes] = c;
    return (uint32_t)p->n_classes++;
}

static uint32_t single_class(parser *p, uint32_t cp, size_t pos)
{
    gram_range r = {cp, cp};
    return add_class(p, &r, 1, false, pos);
}

/* ---- lexing ---- */

static bool at_end(const parser *p) { return p->pos >= p->n; }
static int peek(const parser *p) { return at_end(p) ? -1 : (unsigned char)p->s[p->pos]; }

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(parser *p, bool newline_ok)
{
    while (!at_end(p)) {
        int c = peek(p);
        if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            p->pos++;
        } else if (c == '#') {
            while (!at_end(p) && peek(p) != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 character of the grammar text; fails on invalid UTF-8. */
static uint32_t utf8_char(parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->n - p->pos;
    uint32_t c = s[0], need, min;
    if (c < 0x80) {
        p->pos++;
        return c;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, min = 0x80, c &= 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, min = 0x800, c &= 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, min = 0x10000, c &= 0x07;
    } else {
        fail(p, "invalid UTF-8%s", NULL);
        return 0;
    }
    if (left <= need) {
        fail(p, "invalid UTF-8 (truncated character)%s", NULL);
        return 0;
    }
    for (uint32_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            fail(p, "invalid UTF-8%s", NULL);
            return 0;
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        fail(p, "invalid UTF-8%s", NULL);
        return 0;
    }
    p->pos += need + 1;
    return c;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static uint32_t parse_char(parser *p)
{
    if (peek(p) != '\\')
        return utf8_char(p);
    size_t start = p->pos++;
    int e = peek(p);
    p->pos++;
    int digits = 0;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': return (uint32_t)e;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        fail_at(p, start, "unknown escape '\\%s'", e < 0 ? "" : (char[]){(char)e, 0});
        return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = hexval(peek(p));
        if (h < 0) {
            fail_at(p, start, "bad escape: \\%s needs hex digits", (char[]){(char)e, 0});
            return 0;
        }
        v = v * 16 + (uint32_t)h;
        p->pos++;
    }
    if (v > 0x10FFFF) {
        fail_at(p, start, "escape beyond U+10FFFF%s", NULL);
        return 0;
    }
    return v;
}

static bool parse_uint(parser *p, uint32_t *out)
{
    if (peek(p) < '0' || peek(p) > '9')
        return false;
    uint64_t v = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (uint64_t)(peek(p) - '0');
        if (v > GRAM_MAX_REPEAT) {
            fail(p, "repetition count over %s", "10000");
            return false;
        }
        p->pos++;
    }
    *out = (uint32_t)v;
    return true;
}

/* ---- the grammar ---- */

static void parse_alternates(parser *p, uint32_t rule, bool nested);

static void parse_class(parser *p, elem_vec *e)
{
    size_t start = p->pos++;
    bool negate = false;
    if (peek(p) == '^') {
        negate = true;
        p->pos++;
    }
    gram_range *r = NULL;
    size_t n = 0, cap = 0;
    while (!p->failed && peek(p) != ']') {
        if (at_end(p)) {
            fail_at(p, start, "unterminated character class%s", NULL);
            break;
        }
        uint32_t lo = parse_char(p), hi = lo;
        if (!p->failed && peek(p) == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
            p->pos++;
            hi = parse_char(p);
            if (!p->failed && hi < lo)
                fail(p, "character range out of order%s", NULL);
        }
        if (!p->failed && !grow((void **)&r, &cap, n + 1, sizeof *r))
            fail(p, "out of memory", NULL);
        if (!p->failed)
            r[n++] = (gram_range){lo, hi};
    }
    if (!p->failed) {
        p->pos++;
        uint32_t c = add_class(p, r, n, negate, start);
        push_elem(p, e, GE_CLASS, c);
    }
    free(r);
}

static void parse_literal(parser *p, elem_vec *e)
{
    size_t start = p->pos++;
    while (!p->failed && peek(p) != '"') {
        if (at_end(p) || peek(p) == '\n') {
            fail_at(p, start, "unterminated string literal%s", NULL);
            return;
        }
        size_t at = p->pos;
        uint32_t cp = parse_char(p);
        if (!p->failed)
            push_elem(p, e, GE_CLASS, single_class(p, cp, at));
    }
    p->pos++;
}

/* Replaces the item e->v[from..] (just parsed) by its repetition per the operator at
 * p->pos. */
static void parse_repetition(parser *p, elem_vec *e, size_t from)
{
    size_t op_pos = p->pos;
    uint32_t min = 0, max = REP_INF;
    int c = peek(p);
    p->pos++;
    if (c == '*') {
        min = 0;
    } else if (c == '+') {
        min = 1;
    } else if (c == '?') {
        max = 1;
    } else { /* '{' m? (',' n?)? '}' */
        skip_space(p, true);
        bool has_min = parse_uint(p, &min);
        skip_space(p, true);
        if (p->failed)
            return;
        if (peek(p) == ',') {
            p->pos++;
            skip_space(p, true);
            if (!parse_uint(p, &max))
                max = REP_INF;
            skip_space(p, true);
        } else {
            max = min;
            if (!has_min) {
                fail(p, "expected a number in {m,n}%s", NULL);
                return;
            }
        }
        if (p->failed)
            return;
        if (peek(p) != '}') {
            fail(p, "expected '}' closing {m,n}%s", NULL);
            return;
        }
        p->pos++;
        if (max < min) {
            fail_at(p, op_pos, "repetition {m,n} with n < m%s", NULL);
            return;
        }
    }
    if (from == e->n) {
        fail_at(p, op_pos, "repetition operator without an item before it%s", NULL);
        return;
    }
    /* The atom: one element as it is, several made a rule of their own. */
    gram_elem atom;
    if (e->n - from == 1) {
        atom = e->v[from];
    } else {
        uint32_t r = new_rule(p, NULL, op_pos);
        if (p->failed)
            return;
        for (size_t i = from; i < e->n; i++)
            push_elem(p, &p->rules[r].body, e->v[i].kind, e->v[i].val);
        push_elem(p, &p->rules[r].body, GE_END, r);
        p->rules[r].defined = true;
        atom = (gram_elem){GE_REF, r};
    }
    p->n_elems -= e->n - from;
    e->n = from;
    for (uint32_t i = 0; i < min; i++)
        push_elem(p, e, atom.kind, atom.val);
    if (max == min || p->failed)
        return;
    uint32_t tail;
    if (max == REP_INF) { /* R ::= atom R | "" */
        tail = new_rule(p, NULL, op_pos);
        if (p->failed)
            return;
        elem_vec *b = &p->rules[tail].body;
        push_elem(p, b, atom.kind, atom.val);
        push_elem(p, b, GE_REF, tail);
        push_elem(p, b, GE_END, tail);
        push_elem(p, b, GE_END, tail);
    } else { /* O1 ::= atom | "" ; Ok ::= atom O(k-1) | "" */
        uint32_t prev = 0;
        for (uint32_t k = 1; k <= max - min && !p->failed; k++) {
            uint32_t r = new_rule(p, NULL, op_pos);
            if (p->failed)
                return;
            elem_vec *b = &p->rules[r].body;
            push_elem(p, b, atom.kind, atom.val);
            if (k > 1)
                push_elem(p, b, GE_REF, prev);
            push_elem(p, b, GE_END, r);
            push_elem(p, b, GE_END, r);
            p->rules[r].defined = true;
            p->rules[r].chain_k = k;
            prev = r;
        }
        tail = prev;
        for (uint32_t k = 1; k <= max - min && !p->failed; k++)
            p->rules[tail - (max - min - k)].chain_top = tail;
    }
    p->rules[tail].defined = true;
    push_elem(p, e, GE_REF, tail);
}

/* A sequence of items up to '|', ')', the end of the text, or (not nested) a newline. */
static void parse_sequence(parser *p, elem_vec *e, bool nested)
{
    size_t last = e->n; /* start of the last item, for a repetition */
    bool have_item = false;
    while (!p->failed) {
        skip_space(p, nested);
        int c = peek(p);
        size_t before = e->n;
        if (c == '"') {
            parse_literal(p, e);
        } else if (c == '[') {
            parse_class(p, e);
        } else if (c == '.') {
            p->pos++;
            gram_range all = {0, 0x10FFFF};
            push_elem(p, e, GE_CLASS, add_class(p, &all, 1, false, p->pos - 1));
        } else if (is_name_char(c)) {
            size_t s = p->pos;
            while (is_name_char(peek(p)))
                p->pos++;
            uint32_t r = named_rule(p, p->s + s, p->pos - s, s);
            push_elem(p, e, GE_REF, r);
        } else if (c == '(') {
            size_t open = p->pos++;
            if (++p->nest > GRAM_MAX_NEST) {
                fail_at(p, open, "parentheses nested deeper than %s", "64");
                return;
            }
            uint32_t r = new_rule(p, NULL, open);
            skip_space(p, true);
            if (!p->failed)
                parse_alternates(p, r, true);
            if (p->failed)
                return;
            if (peek(p) != ')') {
                fail_at(p, open, "unbalanced parentheses: '(' without ')'%s", NULL);
                return;
            }
            p->pos++;
            p->nest--;
            push_elem(p, e, GE_REF, r);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!have_item) {
                fail(p, "repetition operator without an item before it%s", NULL);
                return;
            }
            parse_repetition(p, e, last);
            have_item = false; /* x** is an error, as in llama.cpp */
            continue;
        } else {
            break;
        }
        last = before;
        have_item = true;
    }
}

static void parse_alternates(parser *p, uint32_t rule, bool nested)
{
    elem_vec body = {0};
    for (;;) {
        parse_sequence(p, &body, nested);
        push_elem(p, &body, GE_END, rule);
        if (p->failed || peek(p) != '|')
            break;
        p->pos++;
        skip_space(p, true);
    }
    if (p->failed) {
        free(body.v);
        return;
    }
    p->rules[rule].body = body;
    p->rules[rule].defined = true;
}

static void parse_rule(parser *p)
{
    size_t s = p->pos;
    while (is_name_char(peek(p)))
        p->pos++;
    if (p->pos == s) {
        fail(p, "expected a rule name%s", NULL);
        return;
    }
    uint32_t r = named_rule(p, p->s + s, p->pos - s, s);
    if (p->failed)
        return;
    if (p->rules[r].defined) {
        fail_at(p, s, "rule '%s' defined twice", p->rules[r].name);
        return;
    }
    p->rules[r].pos = s;
    skip_space(p, false);
    if (p->n - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3) != 0) {
        fail(p, "expected '::=' after the rule name%s", NULL);
        return;
    }
    p->pos += 3;
    skip_space(p, true);
    parse_alternates(p, r, false);
    if (p->failed)
        return;
    skip_space(p, false);
    if (peek(p) == ')')
        fail(p, "unbalanced parentheses: ')' without '('%s", NULL);
    else if (!at_end(p) && peek(p) != '\n')
        fail(p, "unexpected character '%s'", (char[]){(char)peek(p), 0});
}

/* ---- checks and the flat form ---- */

/* Left recursion: a rule reaching itself in leftmost position (through nullable
 * prefixes) would make the matcher's expansion endless. */
static void check_left_recursion(parser *p)
{
    size_t n = p->n_rules;
    bool *nullable = calloc(n, 1);
    uint8_t *color = calloc(n, 1);
    uint32_t *stack = malloc(n * sizeof *stack), *edge = malloc(n * sizeof *edge);
    if (!nullable || !color || !stack || !edge) {
        fail(p, "out of memory", NULL);
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            const elem_vec *b = &p->rules[r].body;
            bool alt_null = true;
            for (size_t i = 0; i < b->n; i++) {
                const gram_elem *x = &b->v[i];
                if (x->kind == GE_END) {
                    if (alt_null) {
                        nullable[r] = changed = true;
                        break;
                    }
                    alt_null = true;
                } else if (x->kind == GE_CLASS || !nullable[x->val]) {
                    alt_null = false;
                }
            }
        }
    }
    /* Depth-first search over leftmost references; edge[r] is the resume offset. */
    for (size_t root = 0; root < n && !p->failed; root++) {
        if (color[root])
            continue;
        size_t sp = 0;
        stack[sp] = (uint32_t)root;
        edge[sp++] = 0;
        color[root] = 1;
        while (sp && !p->failed) {
            uint32_t r = stack[sp - 1];
            const elem_vec *b = &p->rules[r].body;
            uint32_t i = edge[sp - 1];
            uint32_t next = UINT32_MAX;
            bool leftmost = i == 0 || b->v[i - 1].kind == GE_END ||
                            (b->v[i - 1].kind == GE_REF && nullable[b->v[i - 1].val]);
            for (; i < b->n; i++) {
                const gram_elem *x = &b->v[i];
                if (x->kind == GE_END) {
                    leftmost = true;
                    continue;
                }
                if (leftmost && x->kind == GE_REF) {
                    next = x->val;
                    i++;
                    break;
                }
                if (x->kind == GE_CLASS || !nullable[x->val])
                    leftmost = false;
            }
            edge[sp - 1] = i;
            if (next == UINT32_MAX) {
                color[r] = 2;
                sp--;
            } else if (color[next] == 1) {
                /* Name the first named rule on the cycle, else where the helper came from. */
                size_t k = sp;
                while (k > 0 && stack[k - 1] != next)
                    k--;
                size_t named = SIZE_MAX;
                for (size_t j = k ? k - 1 : 0; j < sp; j++)
                    if (p->rules[stack[j]].name) {
                        named = stack[j];
                        break;
                    }
                if (named != SIZE_MAX)
                    fail_at(p, p->rules[named].pos,
                            "left recursion: rule '%s' can reach itself without consuming a character",
                            p->rules[named].name);
                else
                    fail_at(p, p->rules[next].pos,
                            "left recursion: a repetition of something that can be empty%s", NULL);
            } else if (color[next] == 0) {
                color[next] = 1;
                stack[sp] = next;
                edge[sp++] = 0;
            }
        }
    }
out:
    free(nullable);
    free(color);
    free(stack);
    free(edge);
}

static gram *flatten(parser *p)
{
    gram *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    size_t n_elems = 0, n_alt = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        n_elems += p->rules[r].body.n;
        for (size_t i = 0; i < p->rules[r].body.n; i++)
            n_alt += p->rules[r].body.v[i].kind == GE_END;
    }
    g->elems = malloc((n_elems + 1) * sizeof *g->elems);
    g->frame_ok = calloc(n_elems + 1, 1);
    g->elem_rule = malloc((n_elems + 1) * sizeof *g->elem_rule);
    g->alt_start = malloc((n_alt + 1) * sizeof *g->alt_start);
    g->rules = malloc(p->n_rules * sizeof *g->rules);
    if (!g->elems || !g->frame_ok || !g->elem_rule || !g->alt_start || !g->rules) {
        gram_free(g);
        return NULL;
    }
    uint32_t pos = 0, alt = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        const elem_vec *b = &p->rules[r].body;
        g->rules[r].first_alt = alt;
        g->rules[r].chain_top = p->rules[r].chain_top;
        g->rules[r].chain_k = p->rules[r].chain_k;
        bool start = true;
        for (size_t i = 0; i < b->n; i++) {
            if (start)
                g->alt_start[alt++] = pos;
            g->elems[pos] = b->v[i];
            g->frame_ok[pos] = b->v[i].kind != GE_END;
            g->elem_rule[pos] = (uint32_t)r;
            start = b->v[i].kind == GE_END;
            pos++;
        }
        g->rules[r].n_alts = alt - g->rules[r].first_alt;
    }
    g->n_elems = pos;
    g->n_alt = alt;
    g->n_rules = (uint32_t)p->n_rules;
    g->classes = p->classes;
    g->n_classes = (uint32_t)p->n_classes;
    g->ranges = p->ranges;
    g->n_ranges = (uint32_t)p->n_ranges;
    p->classes = NULL;
    p->ranges = NULL;
    return g;
}

gram *gram_compile(const char *text, size_t len, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    parser p = {.s = text, .n = len, .err = err, .errlen = errlen};
    gram *g = NULL;
    if (len > GRAM_MAX_TEXT) {
        fail_at(&p, 0, "grammar text over %s bytes", "1048576");
        return NULL;
    }
    if (memchr(text, 0, len)) {
        fail_at(&p, (size_t)((const char *)memchr(text, 0, len) - text), "NUL byte in the grammar%s", NULL);
        return NULL;
    }
    skip_space(&p, true);
    if (at_end(&p))
        fail(&p, "empty grammar (no rules)%s", NULL);
    while (!p.failed) {
        skip_space(&p, true);
        if (at_end(&p))
            break;
        parse_rule(&p);
    }
    uint32_t root = UINT32_MAX;
    for (size_t r = 0; r < p.n_rules && !p.failed; r++) {
        if (!p.rules[r].defined)
            fail_at(&p, p.rules[r].ref_pos, "undefined rule '%s'", p.rules[r].name);
        else if (p.rules[r].name && !strcmp(p.rules[r].name, "root"))
            root = (uint32_t)r;
    }
    if (!p.failed && root == UINT32_MAX)
        fail_at(&p, 0, "no rule named 'root' (the start rule)%s", NULL);
    if (!p.failed)
        check_left_recursion(&p);
    if (!p.failed) {
        g = flatten(&p);
        if (!g) {
            fail(&p, "out of memory%s", NULL);
        } else {
            g->root = root;
            g->hash = gram_text_hash(text, len);
        }
    }
    for (size_t r = 0; r < p.n_rules; r++) {
        free(p.rules[r].name);
        free(p.rules[r].body.v);
    }
    free(p.rules);
    free(p.slots);
    free(p.ranges);
    free(p.classes);
    return g;
}

void gram_free(gram *g)
{
    if (!g)
        return;
    free(g->elems);
    free(g->frame_ok);
    free(g->elem_rule);
    free(g->alt_start);
    free(g->rules);
    free(g->classes);
    free(g->ranges);
    free(g);
}

uint64_t gram_hash(const gram *g) { return g->hash; }
size_t gram_n_rules(const gram *g) { return g->n_rules; }
size_t gram_n_elems(const gram *g) { return g->n_elems; }
