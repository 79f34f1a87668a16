/*
 * json_schema_oneof.c - when oneOf may be written as anyOf: the alternatives must be
 * provably disjoint, so that a value the grammar writes from one alternative is invalid
 * against every other one ("exactly one" then holds for every output). What counts as
 * proof, for each pair of alternatives:
 *   - their JSON types cannot meet (a string and an object; 1 is both an integer and a
 *     number, so those two meet);
 *   - both are enum/const lists with no value in common;
 *   - both are integers whose [minimum, maximum] ranges do not meet;
 *   - both are objects that require one property whose const/enum values do not meet
 *     (a discriminator, the usual way oneOf is written).
 * Anything else may overlap, and the converter refuses it (use anyOf). Alternatives are
 * followed through $ref (in the same document) and allOf.
 */
#include <math.h>
#include <string.h>

#include "jsg_impl.h"

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_FRAC = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ANY = 127 };

static const struct { const char *key, *type; } IMPLY[] = {
    {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
    {"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
    {"minLength", "string"}, {"maxLength", "string"}, {"format", "string"}, {"pattern", "string"},
    {"minimum", "integer"}, {"maximum", "integer"}, {"exclusiveMinimum", "integer"},
    {"exclusiveMaximum", "integer"}};

const char *jsg_implied_type(const json_t *s)
{
    for (size_t i = 0; i < sizeof IMPLY / sizeof *IMPLY; i++)
        if (json_object_get(s, IMPLY[i].key))
            return IMPLY[i].type;
    return NULL;
}

static int name_mask(const char *t)
{
    static const struct { const char *name; int mask; } names[] = {
        {"null", T_NULL}, {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_INT | T_FRAC},
        {"string", T_STR}, {"array", T_ARR}, {"object", T_OBJ}, {"json_object", T_OBJ}};
    for (size_t i = 0; t && i < sizeof names / sizeof *names; i++)
        if (!strcmp(t, names[i].name))
            return names[i].mask;
    return T_ANY;
}

static int value_mask(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT;
    case JSON_REAL: return json_real_value(v) == floor(json_real_value(v)) ? T_INT : T_FRAC;
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
    }
}

/* s with its $refs followed (NULL where one names nothing; the conversion reports it). */
static const json_t *deref(conv *c, const json_t *s)
{
    for (int hops = 0; json_is_object(s) && json_object_get(s, "$ref") && hops < MAX_SCHEMA_DEPTH; hops++) {
        const char *ref = json_string_value(json_object_get(s, "$ref"));
        s = ref ? jsg_resolve(c, ref, "") : NULL;
    }
    return s;
}

/* The values s allows, or NULL when it has no enum/const. */
static const json_t *values_of(const json_t *s, json_t **tmp)
{
    const json_t *e = json_object_get(s, "enum");
    if (e)
        return e;
    const json_t *k = json_object_get(s, "const");
    if (!k)
        return NULL;
    *tmp = json_array();
    json_array_append(*tmp, (json_t *)k);
    return *tmp;
}

/* The JSON types a value valid against s may have (T_ANY where unsure). */
static int type_mask(conv *c, const json_t *s, int depth)
{
    s = deref(c, s);
    if (!s || json_is_true(s) || !json_is_object(s) || depth > MAX_SCHEMA_DEPTH)
        return T_ANY;
    int m = T_ANY;
    const json_t *alts = json_object_get(s, "anyOf") ? json_object_get(s, "anyOf") : json_object_get(s, "oneOf");
    if (json_is_array(alts)) {
        m = 0;
        for (size_t i = 0; i < json_array_size(alts); i++)
            m |= type_mask(c, json_array_get(alts, i), depth + 1);
    }
    const json_t *all = json_object_get(s, "allOf");
    for (size_t i = 0; json_is_array(all) && i < json_array_size(all); i++)
        m &= type_mask(c, json_array_get(all, i), depth + 1);
    const json_t *type = json_object_get(s, "type");
    if (json_is_string(type)) {
        m &= name_mask(json_string_value(type));
    } else if (json_is_array(type)) {
        int t = 0;
        for (size_t i = 0; i < json_array_size(type); i++)
            t |= name_mask(json_string_value(json_array_get(type, i)));
        m &= t;
    } else if (!type && jsg_implied_type(s)) {
        m &= name_mask(jsg_implied_type(s));
    }
    json_t *tmp = NULL;
    const json_t *vals = values_of(s, &tmp);
    if (json_is_array(vals)) {
        int v = 0;
        for (size_t i = 0; i < json_array_size(vals); i++)
            v |= value_mask(json_array_get(vals, i));
        m &= v;
    }
    json_decref(tmp);
    return m;
}

/* Whether two enum/const lists have no value in common (false if either is absent). */
static bool values_apart(const json_t *a, const json_t *b)
{
    json_t *ta = NULL, *tb = NULL;
    const json_t *va = values_of(a, &ta), *vb = values_of(b, &tb);
    bool apart = json_is_array(va) && json_is_array(vb);
    for (size_t i = 0; apart && i < json_array_size(va); i++)
        for (size_t j = 0; apart && j < json_array_size(vb); j++)
            if (json_equal(json_array_get(va, i), json_array_get(vb, j)))
                apart = false;
    json_decref(ta);
    json_decref(tb);
    return apart;
}

/* An integer schema's inclusive range (the widest where a bound is absent). */
static void int_range(const json_t *s, double *lo, double *hi)
{
    *lo = -INFINITY;
    *hi = INFINITY;
    const json_t *v;
    if ((v = json_object_get(s, "minimum")) && json_is_number(v)) *lo = ceil(json_number_value(v));
    if ((v = json_object_get(s, "exclusiveMinimum")) && json_is_number(v)) *lo = floor(json_number_value(v)) + 1;
    if ((v = json_object_get(s, "maximum")) && json_is_number(v)) *hi = floor(json_number_value(v));
    if ((v = json_object_get(s, "exclusiveMaximum")) && json_is_number(v)) *hi = ceil(json_number_value(v)) - 1;
}

static bool in_required(const json_t *s, const char *name)
{
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++)
        if (json_is_string(json_array_get(req, i)) && !strcmp(json_string_value(json_array_get(req, i)), name))
            return true;
    return false;
}

/* A property both objects require whose const/enum values do not meet. */
static bool discriminated(conv *c, const json_t *a, const json_t *b)
{
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    if (!json_is_object(pa) || !json_is_object(pb))
        return false;
    const char *k;
    json_t *sa;
    json_object_foreach((json_t *)pa, k, sa) {
        const json_t *sb = json_object_get(pb, k);
        if (sb && in_required(a, k) && in_required(b, k) && values_apart(deref(c, sa), deref(c, sb)))
            return true;
    }
    return false;
}

bool jsg_disjoint(conv *c, const json_t *a, const json_t *b)
{
    a = deref(c, a);
    b = deref(c, b);
    if (!json_is_object(a) || !json_is_object(b))
        return false;
    int ma = type_mask(c, a, 0), mb = type_mask(c, b, 0);
    if (!(ma & mb) || values_apart(a, b))
        return true;
    if (ma == T_INT && mb == T_INT) {
        double la, ha, lb, hb;
        int_range(a, &la, &ha);
        int_range(b, &lb, &hb);
        if (ha < lb || hb < la)
            return true;
    }
    return ma == T_OBJ && mb == T_OBJ && discriminated(c, a, b);
}
