/*
 * json_schema.h - JSON Schema to GBNF (grammar/gram.h), failing closed: every output the
 * grammar allows is valid against the schema; a keyword, format or pattern the converter
 * cannot honour is an error naming it (and where in the schema), never ignored.
 *
 *   char err[256];
 *   char *gbnf = jsg_to_gbnf(schema, strlen(schema), err, sizeof err);  // or NULL
 *   gram *g = gram_compile(gbnf, strlen(gbnf), err, sizeof err);
 *   free(gbnf);
 *   // or both at once: gram *g = jsg_compile(schema, strlen(schema), err, sizeof err);
 *
 * Supported: type (a name or an array of names; "json_object" is any object, the
 * OpenAI response_format mode), enum, const, properties, required, additionalProperties
 * (absent means none when properties are given, any when not: every output then
 * validates), items, prefixItems, minItems, maxItems, minLength, maxLength, format
 * (date, time, date-time, uuid), pattern (anchored ^...$: literals, escapes, . [...]
 * [^...] \d \w \s \D \W \S, groups, |, * + ? {m} {m,} {m,n}), minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (integers only), anyOf, oneOf (when its
 * alternatives are provably disjoint: types that cannot meet, enum/const lists or integer
 * ranges that do not meet, or objects with a required discriminating property; otherwise
 * refused, naming the two alternatives), allOf (merged when the members do not
 * conflict), $ref to "#" JSON pointers in the same document (so $defs and definitions,
 * recursion included), and the annotations title, description, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly, which constrain nothing.
 * Without type, the type follows from the keywords (properties: object, items: array,
 * minLength: string, ...), and a schema of annotations only is any JSON value.
 *
 * The output is restricted where the schema is wide, as llama.cpp's converter does:
 * whitespace is `space ::= | " " | "\n"{1,2} [ \t]{0,20}` after each value and
 * punctuation, none before the root; integers and number parts have at most 16
 * digits and exponents at most 2 (so every number is finite as a double: a JSON parser
 * reads 1e400 as infinity, which validators refuse); objects write their required properties first, then the optional ones in
 * schema order; prefixItems arrays are written whole; pattern characters are never
 * escapes (a class loses '"', '\' and control characters); extra property names are
 * written without escapes and differ from every named property.
 *
 * Ownership: jsg_to_gbnf returns a malloc'd NUL-terminated text (caller frees);
 * jsg_compile a grammar for gram_free.
 * Owner: grammar (links jansson).
 */
#ifndef LLM_JSON_SCHEMA_H
#define LLM_JSON_SCHEMA_H

#include <stddef.h>

#include "gram.h"

/* Converts the JSON Schema in schema[0..len) (need not be NUL-terminated). NULL and a
 * message ("schema at /properties/a: unsupported keyword 'uniqueItems'") on error. */
char *jsg_to_gbnf(const char *schema, size_t len, char *err, size_t errlen);

/* jsg_to_gbnf, then gram_compile. NULL and a message on either's error. */
gram *jsg_compile(const char *schema, size_t len, char *err, size_t errlen);

#endif
