/*
 * json_schema.c - JSON Schema to GBNF. One pass over the schema (jansson), each
 * subschema becoming a GBNF expression; objects, arrays, strings, integer ranges and
 * $ref targets get named rules, the primitives (space, string, number, ...) are added
 * once when first used (json_schema_out.c; scalars in json_schema_scalar.c). Every
 * keyword of a schema object is checked against the list the converter honours before
 * anything is generated (fail closed).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsg_impl.h"
#include "json_schema.h"

/* ---- keywords ---- */

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", NULL};
static const char *const KEYWORDS[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                       "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                       "format", "pattern", "minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", NULL};


static bool is_annotation(const char *k) { return jsg_in_list(ANNOTATIONS, k); }

/* The first key of s that is neither an annotation nor in allowed (NULL if none). */
static const char *other_key(const json_t *s, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !jsg_in_list(allowed, k))
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
        jsg_sb_add(&b, "\"\"");
        first = false;
    }
    for (const trie *k = t->kids; k && !c->failed; k = k->next) {
        char *sub = trie_rule(c, k, hint);
        if (!sub)
            break;
        jsg_sb_add(&b, first ? "" : " | ");
        jsg_sb_addf(&b, "[\\U%08X] %s", k->cp, sub);
        free(sub);
        first = false;
    }
    jsg_sb_add(&b, first ? "" : " | ");
    jsg_sb_add(&b, "[^\"\\\\\\x7F\\x00-\\x1F");
    for (const trie *k = t->kids; k; k = k->next)
        jsg_sb_addf(&b, "\\U%08X", k->cp);
    jsg_sb_addf(&b, "] %s*", jsg_prim(c, "plain-char"));
    if (c->failed) {
        free(b.p);
        return NULL;
    }
    const char *name = jsg_add_rule(c, hint, jsg_sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* A key-value rule: the key's JSON string, then the value. */
static char *kv_rule(conv *c, const char *key, const char *value_expr, const char *hint)
{
    json_t *k = json_string(key);
    char *js = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (!js) {
        jsg_fail(c, "", "out of memory");
        return NULL;
    }
    sbuf b = {0};
    jsg_gbnf_literal(&b, js, strlen(js));
    jsg_sb_addf(&b, " %s \":\" %s %s", jsg_prim(c, "space"), jsg_prim(c, "space"), value_expr);
    free(js);
    const char *name = jsg_add_rule(c, hint, jsg_sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* The key-value rules of an object's members into kv (required[i]: a required one),
 * their names into names: the named properties in schema order, then the required
 * names without a schema (any value). 0, or -1 (failed, or out of memory: -2). */
static int object_members(conv *c, json_t *props, json_t *req, const char *hint, const char *path, char **kv,
                          bool *required, trie *names, size_t *n_out)
{
    size_t n_req = req ? json_array_size(req) : 0, n = 0;
    char sub[600], h[200];
    for (size_t i = 0; i < n_req; i++)
        if (!json_is_string(json_array_get(req, i))) {
            jsg_fail(c, path, "required must list strings");
            return -1;
        }
    const char *key;
    json_t *val;
    json_object_foreach(props, key, val) {
        subpath(sub, sizeof sub, path, "properties", key);
        snprintf(h, sizeof h, "%s-%s", hint, key);
        char *v = visit(c, val, h, sub);
        if (!v)
            return -1;
        snprintf(h, sizeof h, "%s-%s-kv", hint, key);
        kv[n] = kv_rule(c, key, v, h);
        free(v);
        if (!kv[n])
            return -1;
        for (size_t i = 0; i < n_req; i++)
            if (!strcmp(json_string_value(json_array_get(req, i)), key))
                required[n] = true;
        if (!trie_add(names, key)) {
            jsg_fail(c, path, "property name '%.40s...' over 200 bytes", key);
            return -1;
        }
        *n_out = ++n;
    }
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
        kv[n] = kv_rule(c, r, jsg_prim(c, "value"), h);
        if (!kv[n])
            return -1;
        if (!trie_add(names, r)) {
            jsg_fail(c, path, "property name '%.40s...' over 200 bytes", r);
            return -1;
        }
        required[n++] = true;
        *n_out = n;
    }
    return 0;
}

/* The rule of one extra property (additionalProperties: a name none of names, any
 * value or the given schema's) in *add_kv; none when extras are not allowed (absent
 * additionalProperties means none when properties are named). 0, or -1. */
static int object_extras(conv *c, json_t *props, json_t *add, trie *names, const char *hint, const char *path,
                         char **add_kv)
{
    *add_kv = NULL;
    if (!(add ? !json_is_false(add) : !props))
        return 0;
    char sub[600], h[200], *v;
    if (add && json_is_object(add)) {
        subpath(sub, sizeof sub, path, "additionalProperties", NULL);
        snprintf(h, sizeof h, "%s-additional", hint);
        v = visit(c, add, h, sub);
    } else {
        v = strdup(jsg_prim(c, "value"));
    }
    if (!v)
        return -1;
    snprintf(h, sizeof h, "%s-additional-key", hint);
    char *k = trie_rule(c, names, h);
    if (k) {
        sbuf b = {0};
        jsg_sb_addf(&b, "\"\\\"\" %s \"\\\"\" %s \":\" %s %s", k, jsg_prim(c, "space"), jsg_prim(c, "space"), v);
        snprintf(h, sizeof h, "%s-additional-kv", hint);
        const char *name = jsg_add_rule(c, h, jsg_sb_take(&b));
        *add_kv = name ? strdup(name) : NULL;
    }
    free(k);
    free(v);
    return *add_kv ? 0 : -1;
}

/* Without a required member, the first present member has no comma: a choice of which
 * comes first, each followed by the rest in order (each optional), then the extras.
 * Appends it to b; 0, or -1 when out of memory. */
static int object_optional_members(conv *c, sbuf *b, char **kv, size_t n_opt, const char *add_kv, const char *hint)
{
    char h[200];
    char **rest = calloc(n_opt + 2, sizeof *rest);
    if (!rest)
        return -1;
    /* rest[j]: members j.. each optional, then extras */
    rest[n_opt] = add_kv ? NULL : strdup("\"\"");
    if (add_kv) {
        sbuf rb = {0};
        jsg_sb_addf(&rb, "(\",\" space %s)*", add_kv);
        snprintf(h, sizeof h, "%s-rest", hint);
        const char *name = jsg_add_rule(c, h, jsg_sb_take(&rb));
        rest[n_opt] = name ? strdup(name) : NULL;
    }
    for (size_t j = n_opt; j-- > 0 && rest[j + 1];) {
        sbuf rb = {0};
        jsg_sb_addf(&rb, "(\",\" space %s)? %s", kv[j], rest[j + 1]);
        snprintf(h, sizeof h, "%s-rest", hint);
        const char *name = jsg_add_rule(c, h, jsg_sb_take(&rb));
        rest[j] = name ? strdup(name) : NULL;
    }
    jsg_sb_add(b, "(");
    for (size_t j = 0; j < n_opt && rest[j + 1]; j++)
        jsg_sb_addf(b, "%s%s %s", j ? " | " : "", kv[j], rest[j + 1]);
    if (add_kv)
        jsg_sb_addf(b, "%s%s (\",\" space %s)*", n_opt ? " | " : "", add_kv, add_kv);
    jsg_sb_add(b, ")? ");
    for (size_t j = 0; j <= n_opt; j++)
        free(rest[j]);
    free(rest);
    return 0;
}

static char *object_rule(conv *c, const json_t *s, const char *hint, const char *path)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req)) ||
        (add && !json_is_boolean(add) && !json_is_object(add))) {
        jsg_fail(c, path, "properties must be an object, required an array, additionalProperties a boolean or schema");
        return NULL;
    }
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    size_t cap = n_props + n_req + 1, n = 0;
    char **kv = calloc(cap, sizeof *kv);
    bool *required = calloc(cap, 1);
    trie names = {0};
    char *add_kv = NULL, *result = NULL;
    if (!kv || !required || object_members(c, props, req, hint, path, kv, required, &names, &n) != 0 ||
        object_extras(c, props, add, &names, hint, path, &add_kv) != 0)
        goto out;
    /* order: required first, then the optional ones, then extras */
    sbuf b = {0};
    jsg_sb_addf(&b, "\"{\" %s ", jsg_prim(c, "space"));
    size_t n_required = 0;
    for (size_t i = 0; i < n; i++)
        if (required[i])
            jsg_sb_addf(&b, "%s%s ", n_required++ ? "\",\" space " : "", kv[i]);
    size_t n_opt = n - n_required;
    if (n_required) {
        for (size_t i = 0; i < n; i++)
            if (!required[i])
                jsg_sb_addf(&b, "(\",\" space %s)? ", kv[i]);
        if (add_kv)
            jsg_sb_addf(&b, "(\",\" space %s)* ", add_kv);
    } else if ((n_opt || add_kv) && object_optional_members(c, &b, kv, n_opt, add_kv, hint) != 0) {
        free(b.p);
        jsg_fail(c, path, "out of memory");
        goto out;
    }
    jsg_sb_addf(&b, "\"}\" %s", jsg_prim(c, "space"));
    jsg_prim(c, "space");
    const char *name = jsg_add_rule(c, hint, jsg_sb_take(&b));
    result = name ? strdup(name) : NULL;
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
        jsg_fail(c, path, "'%s' must be an integer in 0..10000", key);
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
        jsg_fail(c, path, "items must be a schema or boolean, prefixItems an array");
        return NULL;
    }
    size_t k = prefix ? json_array_size(prefix) : 0;
    char sub[600], h[200];
    sbuf b = {0};
    jsg_sb_addf(&b, "\"[\" %s ", jsg_prim(c, "space"));
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
        jsg_sb_addf(&b, "%s%s ", i ? "\",\" space " : "", v);
        free(v);
    }
    /* further items: how many, and of what */
    long long ex_lo = lo > (long long)k ? lo - (long long)k : 0, ex_hi = hi < 0 ? -1 : hi - (long long)k;
    bool no_more = items && json_is_false(items);
    if (hi >= 0 && (long long)k > hi) {
        jsg_fail(c, path, "prefixItems has %zu items, more than maxItems %lld", k, hi);
        free(b.p);
        return NULL;
    }
    if (no_more && ex_lo > 0) {
        jsg_fail(c, path, "minItems %lld cannot be met with items false", lo);
        free(b.p);
        return NULL;
    }
    if (hi >= 0 && lo > hi) {
        jsg_fail(c, path, "minItems %lld > maxItems %lld", lo, hi);
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
            v = strdup(jsg_prim(c, "value"));
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
            jsg_sb_addf(&b, "(\",\" space %s)%s ", v, rep);
        } else {
            /* first item without a comma: [lo, hi] items = (v ("," v){lo-1, hi-1})? */
            long long a = ex_lo ? ex_lo - 1 : 0;
            char rep2[48];
            if (ex_hi < 0)
                snprintf(rep2, sizeof rep2, "{%lld,}", a);
            else
                snprintf(rep2, sizeof rep2, "{%lld,%lld}", a, ex_hi - 1);
            jsg_sb_addf(&b, "(%s (\",\" space %s)%s)%s ", v, v, rep2, ex_lo ? "" : "?");
        }
        free(v);
    }
    jsg_sb_addf(&b, "\"]\" %s", jsg_prim(c, "space"));
    const char *name = jsg_add_rule(c, hint, jsg_sb_take(&b));
    return name ? strdup(name) : NULL;
}

/* ---- references, combinations ---- */

/* The schema a "#..." JSON pointer names in the document. */
const json_t *jsg_resolve(conv *c, const char *ref, const char *path)
{
    if (ref[0] != '#') {
        jsg_fail(c, path, "$ref '%.100s': only references inside the schema (#...) are supported", ref);
        return NULL;
    }
    const json_t *t = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') {
            jsg_fail(c, path, "$ref '%.100s': not a JSON pointer", ref);
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
            jsg_fail(c, path, "$ref '%.100s' names nothing in the schema", ref);
            return NULL;
        }
    }
    return t;
}

static char *ref_rule(conv *c, const json_t *s, const char *path)
{
    const char *bad = other_key(s, (const char *const[]){"$ref", NULL});
    if (bad) {
        jsg_fail(c, path, "'%s' beside $ref is not supported", bad);
        return NULL;
    }
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) {
        jsg_fail(c, path, "$ref must be a string");
        return NULL;
    }
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ptr, ref))
            return strdup(c->refs[i].name);
    const json_t *t = jsg_resolve(c, ref, path);
    if (!t)
        return NULL;
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
        jref *r = realloc(c->refs, cap * sizeof *r);
        if (!r) {
            jsg_fail(c, path, "out of memory");
            return NULL;
        }
        c->refs = r;
        c->cap_refs = cap;
    }
    /* the rule's name is known before its body: recursion refers to it */
    const char *tail = strrchr(ref, '/');
    char hint[200];
    snprintf(hint, sizeof hint, "ref-%s", tail && tail[1] ? tail + 1 : "root");
    char *name = jsg_fresh_name(c, hint);
    char *ptr = strdup(ref);
    if (!name || !ptr) {
        free(name);
        free(ptr);
        jsg_fail(c, path, "out of memory");
        return NULL;
    }
    /* reserve the name now, so that a rule made while visiting cannot take it */
    if (!jsg_put_rule(c, strdup(name), strdup("")))
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
        jsg_fail(c, path, "'%s' beside %s is not supported", bad, key);
        return NULL;
    }
    const json_t *alts = json_object_get(s, key);
    if (!json_is_array(alts) || json_array_size(alts) == 0) {
        jsg_fail(c, path, "%s must be a non-empty array", key);
        return NULL;
    }
    sbuf b = {0};
    jsg_sb_add(&b, "(");
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
        jsg_sb_addf(&b, "%s%s", i ? " | " : "", v);
        free(v);
    }
    jsg_sb_add(&b, ")");
    for (size_t i = 0; !strcmp(key, "oneOf") && i < json_array_size(alts); i++)
        for (size_t j = i + 1; j < json_array_size(alts); j++)
            if (!jsg_disjoint(c, json_array_get(alts, i), json_array_get(alts, j))) {
                free(b.p);
                jsg_fail(c, path, "oneOf alternatives %zu and %zu may both match one value (exactly one "
                         "must: give them different types, or a required property with different "
                         "const/enum values), or use anyOf", i, j);
                return NULL;
            }
    return jsg_sb_take(&b);
}

/* allOf: the members (and the keywords beside it) merged into one schema when they do
 * not overlap: properties are united (a name in two members must have equal schemas),
 * required lists are united, types must agree, any other keyword may appear once. */
static char *all_of(conv *c, const json_t *s, const char *hint, const char *path)
{
    const json_t *members = json_object_get(s, "allOf");
    if (!json_is_array(members) || json_array_size(members) == 0) {
        jsg_fail(c, path, "allOf must be a non-empty array");
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
                jsg_fail(c, path, "allOf: a member with $ref and other keywords is not supported");
                goto out;
            }
            m = jsg_resolve(c, json_string_value(json_object_get(m, "$ref")) ? json_string_value(json_object_get(m, "$ref")) : "?", path);
            if (!m)
                goto out;
        }
        if (!json_is_object(m) || json_object_get(m, "allOf") || json_object_get(m, "$ref")) {
            jsg_fail(c, path, "allOf member %zu: nested allOf or $ref chains are not supported", i);
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
                        jsg_fail(c, path, "allOf: property '%s' has two different schemas", pk);
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
                    jsg_fail(c, path, "allOf: members of different types are not supported");
                    goto out;
                }
                json_object_set(merged, "type", v);
            } else {
                if (!strcmp(k, "additionalProperties"))
                    add_seen = true;
                if (json_object_get(merged, k)) {
                    jsg_fail(c, path, "allOf: keyword '%s' in two members is not supported", k);
                    goto out;
                }
                json_object_set(merged, k, v);
            }
        }
    }
    if (add_seen && json_array_size(list) > 2) {
        /* another member's properties would escape additionalProperties: refuse */
        jsg_fail(c, path, "allOf: additionalProperties in a member of several is not supported");
        goto out;
    }
    if (props_seen)
        json_object_set(merged, "properties", props);
    if (json_array_size(req))
        json_object_set(merged, "required", req);
    result = visit(c, merged, hint, path);
out:
    if (!result && !c->failed)
        jsg_fail(c, path, "out of memory");
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
        jsg_fail(c, path, "'%s' beside enum/const is not supported", bad);
        return NULL;
    }
    json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (e && k) {
        jsg_fail(c, path, "enum together with const is not supported");
        return NULL;
    }
    if (e && (!json_is_array(e) || json_array_size(e) == 0)) {
        jsg_fail(c, path, "enum must be a non-empty array");
        return NULL;
    }
    json_t *type = json_object_get(s, "type");
    sbuf b = {0};
    jsg_sb_add(&b, "(");
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
        char *lit = jsg_json_literal(c, v, path);
        if (!lit) {
            free(b.p);
            return NULL;
        }
        jsg_sb_addf(&b, "%s%s", written++ ? " | " : "", lit);
        free(lit);
    }
    jsg_sb_add(&b, ")");
    if (!written) {
        free(b.p);
        jsg_fail(c, path, "no enum/const value has the schema's type");
        return NULL;
    }
    return jsg_sb_take(&b);
}

/* One type of the schema, as an expression. */
static char *typed(conv *c, const json_t *s, const char *t, const char *hint, const char *path)
{
    if (!strcmp(t, "string"))
        return jsg_string_rule(c, s, hint, path);
    if (!strcmp(t, "integer"))
        return jsg_integer_rule(c, s, hint, path);
    if (!strcmp(t, "number")) {
        static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        for (int i = 0; b[i]; i++)
            if (json_object_get(s, b[i])) {
                jsg_fail(c, path, "'%s' on type number is not supported (integers only)", b[i]);
                return NULL;
            }
        return strdup(jsg_prim(c, "number"));
    }
    if (!strcmp(t, "boolean"))
        return strdup(jsg_prim(c, "boolean"));
    if (!strcmp(t, "null"))
        return strdup(jsg_prim(c, "null"));
    if (!strcmp(t, "object"))
        return object_rule(c, s, hint, path);
    if (!strcmp(t, "json_object"))
        return strdup(jsg_prim(c, "object"));
    if (!strcmp(t, "array"))
        return array_rule(c, s, hint, path);
    jsg_fail(c, path, "unknown type '%s'", t);
    return NULL;
}

static char *visit(conv *c, const json_t *s, const char *hint, const char *path)
{
    if (c->failed)
        return NULL;
    if (json_is_true(s))
        return strdup(jsg_prim(c, "value"));
    if (!json_is_object(s)) {
        jsg_fail(c, path, json_is_false(s) ? "the schema false allows nothing" : "a schema must be an object");
        return NULL;
    }
    if (++c->depth > MAX_SCHEMA_DEPTH) {
        jsg_fail(c, path, "schema nested deeper than %d", MAX_SCHEMA_DEPTH);
        return NULL;
    }
    char *r = NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !jsg_in_list(KEYWORDS, k)) {
            jsg_fail(c, path, "unsupported keyword '%s'", k);
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
            const char *t = jsg_implied_type(s);
            r = t ? typed(c, s, t, hint, path) : strdup(jsg_prim(c, "value"));
        } else if (json_is_string(type)) {
            r = typed(c, s, json_string_value(type), hint, path);
        } else if (json_is_array(type) && json_array_size(type) > 0) {
            sbuf b = {0};
            jsg_sb_add(&b, "(");
            for (size_t i = 0; i < json_array_size(type); i++) {
                const char *t = json_string_value(json_array_get(type, i));
                if (!t) {
                    jsg_fail(c, path, "type must list names");
                    break;
                }
                char h[200];
                snprintf(h, sizeof h, "%s-%s", hint, t);
                char *e = typed(c, s, t, h, path);
                if (!e)
                    break;
                jsg_sb_addf(&b, "%s%s", i ? " | " : "", e);
                free(e);
            }
            jsg_sb_add(&b, ")");
            if (c->failed)
                free(b.p);
            else
                r = jsg_sb_take(&b);
        } else {
            jsg_fail(c, path, "type must be a name or a non-empty array of names");
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
    jsg_put_rule(&c, strdup("root"), strdup(""));
    char *top = visit(&c, root, "root", "");
    char *out = NULL;
    if (top) {
        free(c.rules[0].body);
        c.rules[0].body = top;
        sbuf b = {0};
        for (size_t i = 0; i < c.n_rules; i++)
            jsg_sb_addf(&b, "%s ::= ", c.rules[i].name), jsg_sb_add(&b, c.rules[i].body), jsg_sb_add(&b, "\n");
        out = jsg_sb_take(&b);
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
