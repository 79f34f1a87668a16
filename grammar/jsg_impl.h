/*
 * jsg_impl.h - what the files of the JSON Schema converter share (grammar/json_schema*.c;
 * not a public header): the output (a text buffer, the rule list, the primitives) and
 * the rules for scalars.
 *   json_schema.c          keywords, objects, arrays, $ref, anyOf/oneOf/allOf, enum
 *   json_schema_out.c      text buffers, rules and their names, primitives, literals
 *   json_schema_scalar.c   integers in a range, strings (lengths, formats, patterns)
 *   json_schema_oneof.c    whether oneOf's alternatives are disjoint; implied types
 * Every function that fails records the first message in the conv (jsg_fail) and
 * returns NULL; the others then do nothing.
 */
#ifndef LLM_JSG_IMPL_H
#define LLM_JSG_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define MAX_SCHEMA_DEPTH 64
#define MAX_INT_BOUND 1e15 /* integer bounds beyond this are refused */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

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

/* json_schema.c: the schema a "#..." JSON pointer names in the document (NULL, failed). */
const json_t *jsg_resolve(conv *c, const char *ref, const char *path);

/* json_schema_oneof.c */
/* The type a schema's keywords imply when it has none ("object" for properties, ...), or
 * NULL (annotations only: any value). */
const char *jsg_implied_type(const json_t *s);
/* Whether no value can be valid against both a and b (false where that is not proven). */
bool jsg_disjoint(conv *c, const json_t *a, const json_t *b);

/* json_schema_out.c */
void jsg_sb_addn(sbuf *b, const char *s, size_t n);
void jsg_sb_add(sbuf *b, const char *s);
void jsg_sb_addf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Takes the buffer's text (malloc'd; "" if empty; NULL after an allocation failure). */
char *jsg_sb_take(sbuf *b);
/* Records "schema at PATH: message" unless a failure is recorded already. */
void jsg_fail(conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool jsg_has_rule(const conv *c, const char *name);
const char *jsg_put_rule(conv *c, char *name, char *body);
char *jsg_fresh_name(conv *c, const char *hint);
const char *jsg_add_rule(conv *c, const char *hint, char *body);
const char *jsg_prim(conv *c, const char *name);
void jsg_gbnf_literal(sbuf *b, const char *s, size_t n);
char *jsg_json_literal(conv *c, const json_t *v, const char *path);
bool jsg_in_list(const char *const *list, const char *k);

/* json_schema_scalar.c: expressions (malloc'd) for type integer and type string */
char *jsg_integer_rule(conv *c, const json_t *s, const char *hint, const char *path);
char *jsg_string_rule(conv *c, const json_t *s, const char *hint, const char *path);

#endif
