/*
 * Tests for the JSON Schema converter of grammar/json_schema.c (suite "jsonschema"):
 * per keyword, texts the resulting grammar must accept and texts it must refuse; $ref
 * with recursion; formats and patterns; and every unsupported keyword, format, pattern
 * or combination refused with a message that names it (fail closed).
 * Owner: grammar (issue 20).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"
#include "json_schema.h"

static char err[512];

static gram *schema(const char *s)
{
    gram *g = jsg_compile(s, strlen(s), err, sizeof err);
    if (!g) {
        char *gbnf = jsg_to_gbnf(s, strlen(s), err, sizeof err);
        ck_abort_msg("%s: %s\n%s", s, err, gbnf ? gbnf : "");
    }
    return g;
}

static bool accepts(const gram *g, const char *text)
{
    gram_state *s = gram_state_new(g);
    ck_assert_ptr_nonnull(s);
    bool ok = gram_accept_bytes(s, text, strlen(text)) == 0 && gram_can_end(s);
    gram_state_free(s);
    return ok;
}

/* Every text of yes accepted, every text of no refused. */
static void check(const char *sch, const char *const *yes, const char *const *no)
{
    gram *g = schema(sch);
    for (; yes && *yes; yes++)
        ck_assert_msg(accepts(g, *yes), "%s: should accept %s", sch, *yes);
    for (; no && *no; no++)
        ck_assert_msg(!accepts(g, *no), "%s: should refuse %s", sch, *no);
    gram_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void refused(const char *sch, const char *needle)
{
    gram *g = jsg_compile(sch, strlen(sch), err, sizeof err);
    ck_assert_msg(g == NULL, "compiled but should not: %s", sch);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", sch, err, needle);
}

START_TEST(test_types)
{
    check("{\"type\": \"string\"}", L("\"\"", "\"a b\\n\\u00e9\\\"\"", "\"\xc3\xa9\""), L("a", "\"a", "\"\x01\"", " \"a\""));
    check("{\"type\": \"integer\"}", L("0", "-12", "1234567890123456"), L("01", "1.5", "-", "+1", "12345678901234567"));
    check("{\"type\": \"number\"}", L("0", "-1.25", "3e10", "2.5E-3", "-9.5e+99"),
          L(".5", "1.", "e5", "NaN", "1e400", "-2.1e11110")); /* exponents of 1-2 digits: finite */
    check("{\"type\": \"boolean\"}", L("true", "false"), L("True", "1"));
    check("{\"type\": \"null\"}", L("null"), L("nul", "None"));
    check("{\"type\": \"object\"}", L("{}", "{\"a\": [1, {\"b\": null}]}"), L("[]", "{\"a\"}"));
    check("{\"type\": \"array\"}", L("[]", "[1, \"x\", [true]]"), L("{}", "[1,]"));
    check("{\"type\": \"json_object\"}", L("{}", "{\"k\": {\"n\": 1}}"), L("[]", "1", "\"s\""));
    check("{\"type\": [\"string\", \"null\"]}", L("\"x\"", "null"), L("1", "true"));
    check("{}", L("1", "\"s\"", "{\"a\": []}", "null"), L("", "nope"));
    check("{\"description\": \"anything\", \"title\": \"t\"}", L("[1]"), NULL);
    check("true", L("{\"any\": 1}"), NULL);
}
END_TEST

START_TEST(test_whitespace)
{
    check("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}",
          L("{\"a\":1}", "{ \"a\" : 1 }", "{\n  \"a\": 1\n}", "{\n\n\t\"a\": 1}"),
          L(" {\"a\": 1}", "{  \"a\": 1}", "{\"a\": 1}\n\n\n"));
}
END_TEST

START_TEST(test_objects)
{
    const char *s = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "
                    "\"age\": {\"type\": \"integer\"}, \"nick\": {\"type\": \"string\"}}, \"required\": [\"age\"]}";
    /* required first, then the optional ones in schema order; no extras */
    check(s, L("{\"age\": 3}", "{\"age\": 3, \"name\": \"A\"}", "{\"age\": 3, \"name\": \"A\", \"nick\": \"B\"}",
               "{\"age\": 3, \"nick\": \"B\"}"),
          L("{}", "{\"name\": \"A\"}", "{\"age\": \"3\"}", "{\"age\": 3, \"zip\": 1}", "{\"age\": 3,}"));
    /* no required: any subset in order, or none */
    check("{\"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"boolean\"}}}",
          L("{}", "{\"a\": 1}", "{\"b\": true}", "{\"a\": 1, \"b\": false}"), L("{\"c\": 1}", "{,\"b\": true}"));
    /* additionalProperties false, true, a schema */
    check("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}, \"additionalProperties\": false}",
          L("{}", "{\"a\": \"x\"}"), L("{\"b\": 1}"));
    check("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}, \"additionalProperties\": true}",
          L("{\"a\": \"x\", \"b\": [1]}", "{\"ab\": 1}", "{\"\": 1}", "{\"b\": 1, \"c\": 2}"),
          L("{\"a\": 1}")); /* "a" must stay a string: an extra key never spells it */
    check("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}",
          L("{}", "{\"x\": 1, \"y\": -2}"), L("{\"x\": \"1\"}"));
    check("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}, \"required\": [\"a\"], "
          "\"additionalProperties\": {\"type\": \"null\"}}",
          L("{\"a\": \"x\", \"b\": null}", "{\"a\": \"x\", \"a2\": null}"), L("{\"a\": \"x\", \"b\": 1}", "{\"b\": null}"));
    /* a required name without a schema: any value */
    check("{\"type\": \"object\", \"required\": [\"id\"], \"properties\": {}}", L("{\"id\": [1]}"), L("{}"));
    /* keys that need escaping */
    check("{\"type\": \"object\", \"properties\": {\"q\\\"k\": {\"const\": 1}}, \"required\": [\"q\\\"k\"]}",
          L("{\"q\\\"k\": 1}"), L("{\"q\"k\": 1}"));
}
END_TEST

START_TEST(test_enum_const)
{
    check("{\"enum\": [\"red\", 1, null, true, {\"a\": [1]}, 2.5]}",
          L("\"red\"", "1", "null", "true", "{\"a\":[1]}", "2.5"), L("\"blue\"", "2", "false", "{\"a\": [1]}"));
    check("{\"const\": \"x\\ny\"}", L("\"x\\ny\""), L("\"x\ny\"", "\"xy\""));
    check("{\"type\": \"string\", \"enum\": [\"a\", 1]}", L("\"a\""), L("1"));
    refused("{\"type\": \"integer\", \"enum\": [\"a\"]}", "no enum/const value has the schema's type");
    refused("{\"enum\": []}", "enum must be a non-empty array");
    refused("{\"enum\": [\"a\"], \"minLength\": 2}", "'minLength' beside enum/const is not supported");
}
END_TEST

START_TEST(test_arrays)
{
    check("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 2, \"maxItems\": 3}",
          L("[1, 2]", "[1, 2, 3]"), L("[]", "[1]", "[1, 2, 3, 4]", "[1, \"2\"]"));
    check("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1}", L("[1]", "[1,2,3,4,5]"), L("[]"));
    check("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"maxItems\": 0}", L("[]"), L("[1]"));
    check("{\"items\": {\"type\": \"boolean\"}}", L("[]", "[true, false]"), L("[1]"));
    check("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": false}",
          L("[\"a\", 1]"), L("[\"a\"]", "[\"a\", 1, 2]", "[1, \"a\"]"));
    check("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}], \"items\": {\"type\": \"null\"}, \"maxItems\": 3}",
          L("[\"a\"]", "[\"a\", null, null]"), L("[\"a\", 1]", "[\"a\", null, null, null]"));
    refused("{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "minItems 3 > maxItems 2");
    refused("{\"type\": \"array\", \"prefixItems\": [{}], \"items\": false, \"minItems\": 2}", "cannot be met");
    refused("{\"type\": \"array\", \"uniqueItems\": true}", "unsupported keyword 'uniqueItems'");
}
END_TEST

START_TEST(test_strings)
{
    /* lengths count characters: an escape and a multi-byte character are one each */
    check("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
          L("\"ab\"", "\"abc\"", "\"\xc3\xa9\xe6\x97\xa5\"", "\"a\\n\"", "\"\\u00e9ab\""), L("\"a\"", "\"abcd\"", "\"\""));
    check("{\"maxLength\": 1}", L("\"\"", "\"x\""), L("\"xy\"", "1"));
    check("{\"type\": \"string\", \"format\": \"date\"}", L("\"2024-02-29\"", "\"1999-12-31\""),
          L("\"2024-13-01\"", "\"2024-1-01\"", "\"2024-01-32\"", "\"24-01-01\""));
    check("{\"type\": \"string\", \"format\": \"time\"}", L("\"23:59:59Z\"", "\"00:00:00.123+05:30\""),
          L("\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\""));
    check("{\"type\": \"string\", \"format\": \"date-time\"}", L("\"2024-05-06T07:08:09Z\""),
          L("\"2024-05-06 07:08:09Z\"", "\"2024-05-06\""));
    check("{\"type\": \"string\", \"format\": \"uuid\"}", L("\"123e4567-e89b-12d3-a456-426614174000\""),
          L("\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""));
    refused("{\"type\": \"string\", \"format\": \"email\"}", "unsupported format 'email'");
    refused("{\"type\": \"string\", \"format\": \"date\", \"maxLength\": 3}", "together with format");
}
END_TEST

START_TEST(test_patterns)
{
    check("{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}-\\\\d{3,4}$\"}", L("\"AB-123\"", "\"XY-0000\""),
          L("\"AB-12\"", "\"ab-123\"", "\"AB-12345\"", "\"AB123\""));
    check("{\"pattern\": \"^(foo|ba[rz])+x?$\"}", L("\"foo\"", "\"barbazfoox\""), L("\"\"", "\"bax\"", "\"foox x\""));
    check("{\"pattern\": \"^a.c\\\\.[^0-9]\\\\w*\\\\s?$\"}", L("\"abc.x_9\"", "\"a\xc3\xa9" "c.Q \""),
          L("\"abc.1\"", "\"abcx\""));
    /* a quote in the pattern is written escaped; a negated class never writes '"' or '\' */
    check("{\"pattern\": \"^say \\\"[^x]\\\"$\"}", L("\"say \\\"y\\\"\""), L("\"say \"y\"\"", "\"say \\\"\\\"\\\"\""));
    check("{\"pattern\": \"^(?:ab){2}$\"}", L("\"abab\""), L("\"ab\""));
    refused("{\"pattern\": \"abc\"}", "must be anchored");
    refused("{\"pattern\": \"^a(?=b)$\"}", "lookaround");
    refused("{\"pattern\": \"^(a)\\\\1$\"}", "does not know");
    refused("{\"pattern\": \"^\\\\bword$\"}", "does not know");
    refused("{\"pattern\": \"^a{3,2}$\"}", "bad {m,n}");
    refused("{\"pattern\": \"^(ab$\"}", "'(' without ')'");
    refused("{\"pattern\": \"^ab)$\"}", "')' without '('");
    refused("{\"pattern\": \"^a^b$\"}", "anchor inside");
    refused("{\"pattern\": \"^[\\\"]$\"}", "no character a JSON string can hold");
}
END_TEST

START_TEST(test_integers)
{
    check("{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 255}", L("0", "9", "10", "99", "100", "199", "200", "255"),
          L("-1", "256", "300", "1000", "00"));
    check("{\"type\": \"integer\", \"minimum\": -20, \"maximum\": -3}", L("-20", "-3", "-10"), L("-2", "-21", "0", "3", "-0"));
    check("{\"type\": \"integer\", \"minimum\": 17}", L("17", "99", "100", "123456"), L("16", "0", "-17"));
    check("{\"type\": \"integer\", \"maximum\": 5}", L("5", "0", "-1", "-99999"), L("6", "10"));
    check("{\"type\": \"integer\", \"minimum\": -7}", L("-7", "-1", "0", "700"), L("-8", "-10"));
    check("{\"type\": \"integer\", \"exclusiveMinimum\": 1, \"exclusiveMaximum\": 10}", L("2", "9"), L("1", "10"));
    check("{\"type\": \"integer\", \"minimum\": 1.5, \"maximum\": 3.5}", L("2", "3"), L("1", "4"));
    check("{\"type\": \"integer\", \"minimum\": 1234, \"maximum\": 98765}",
          L("1234", "1299", "9999", "10000", "98765", "98699"), L("1233", "98766", "99999", "123"));
    refused("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no integer lies between");
    refused("{\"type\": \"number\", \"minimum\": 0}", "'minimum' on type number is not supported");
    refused("{\"type\": \"integer\", \"maximum\": 1e300}", "beyond the supported range");
}
END_TEST

START_TEST(test_combinations)
{
    check("{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", \"maxLength\": 1}]}",
          L("1", "\"a\""), L("\"ab\"", "true"));
    check("{\"oneOf\": [{\"const\": \"a\"}, {\"const\": \"b\"}]}", L("\"a\"", "\"b\""), L("\"c\""));
    check("{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]},"
          "{\"properties\": {\"b\": {\"type\": \"string\"}}, \"required\": [\"b\"]}]}",
          L("{\"a\": 1, \"b\": \"x\"}"), L("{\"a\": 1}", "{\"b\": \"x\"}"));
    check("{\"$defs\": {\"base\": {\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}}},"
          "\"allOf\": [{\"$ref\": \"#/$defs/base\"}, {\"required\": [\"id\"]}]}", L("{\"id\": 1}"), L("{}"));
    refused("{\"allOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}", "members of different types");
    refused("{\"allOf\": [{\"properties\": {\"a\": {\"type\": \"string\"}}}, {\"properties\": {\"a\": {\"type\": \"integer\"}}}]}",
            "property 'a' has two different schemas");
    refused("{\"type\": \"object\", \"anyOf\": [{\"required\": [\"a\"]}]}", "'type' beside anyOf is not supported");
}
END_TEST

/* oneOf is written as anyOf only when no value can match two alternatives. */
START_TEST(test_one_of)
{
    /* types that cannot meet, also through $ref */
    check("{\"$defs\": {\"s\": {\"type\": \"string\", \"maxLength\": 2}},"
          "\"oneOf\": [{\"$ref\": \"#/$defs/s\"}, {\"type\": \"boolean\"}, {\"type\": [\"null\", \"object\"]}]}",
          L("\"ab\"", "true", "null", "{}"), L("1", "[]"));
    /* integer ranges apart */
    check("{\"oneOf\": [{\"type\": \"integer\", \"maximum\": 9}, {\"type\": \"integer\", \"minimum\": 10}]}",
          L("3", "10", "-4"), L("\"x\""));
    /* a discriminator: a required property with different const/enum values */
    check("{\"oneOf\": [{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"cat\"}, \"lives\": {\"type\": \"integer\"}},"
          "\"required\": [\"kind\", \"lives\"]},"
          "{\"type\": \"object\", \"properties\": {\"kind\": {\"enum\": [\"dog\", \"wolf\"]}}, \"required\": [\"kind\"]}]}",
          L("{\"kind\": \"cat\", \"lives\": 9}", "{\"kind\": \"wolf\"}"), L("{\"kind\": \"cat\"}", "{\"kind\": \"fox\"}"));
    /* overlaps, or not provably apart: refused, naming the alternatives */
    refused("{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\"}]}", "oneOf alternatives 0 and 1 may both match");
    refused("{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"string\", \"maxLength\": 3}]}", "or use anyOf");
    refused("{\"oneOf\": [{\"const\": 1}, {\"type\": \"null\"}, {\"enum\": [2, 1]}]}", "alternatives 0 and 2");
    refused("{\"oneOf\": [{\"type\": \"integer\", \"maximum\": 10}, {\"type\": \"integer\", \"minimum\": 10}]}",
            "may both match");
    /* a property in both, but required by only one: {"kind": "dog"} without it matches the first too */
    refused("{\"oneOf\": [{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"cat\"}}},"
            "{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"dog\"}}, \"required\": [\"kind\"]}]}",
            "may both match");
    refused("{\"oneOf\": [{}, {\"type\": \"null\"}]}", "may both match");
}
END_TEST

START_TEST(test_refs)
{
    /* a recursive list */
    const char *list = "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"},"
                       "\"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}},"
                       "\"required\": [\"v\", \"next\"]}}, \"$ref\": \"#/$defs/node\"}";
    check(list, L("{\"v\": 1, \"next\": null}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": {\"v\": 3, \"next\": null}}}"),
          L("{\"v\": 1}", "{\"v\": 1, \"next\": {\"v\": 2}}"));
    /* a tree through "#" and definitions */
    check("{\"type\": \"object\", \"properties\": {\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}},"
          "\"required\": [\"kids\"]}", L("{\"kids\": []}", "{\"kids\": [{\"kids\": [{\"kids\": []}]}, {\"kids\": []}]}"),
          L("{\"kids\": [{}]}"));
    check("{\"definitions\": {\"a/b\": {\"type\": \"boolean\"}}, \"items\": {\"$ref\": \"#/definitions/a~1b\"}}",
          L("[true]"), L("[1]"));
    refused("{\"$ref\": \"http://example.com/s.json\"}", "only references inside the schema");
    refused("{\"$ref\": \"#/$defs/missing\"}", "names nothing");
    refused("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/a\"}}, \"$ref\": \"#/$defs/a\"}", "left recursion");
    refused("{\"$ref\": \"#/$defs/a\", \"type\": \"string\", \"$defs\": {\"a\": {}}}", "'type' beside $ref");
}
END_TEST

START_TEST(test_refused)
{
    refused("{\"type\": \"object\", \"patternProperties\": {}}", "schema at /: unsupported keyword 'patternProperties'");
    refused("{\"properties\": {\"a\": {\"type\": \"string\", \"minProperties\": 1}}}",
            "schema at /properties/a: unsupported keyword 'minProperties'");
    refused("{\"items\": {\"not\": {}}}", "schema at /items: unsupported keyword 'not'");
    refused("{\"if\": {}}", "unsupported keyword 'if'");
    refused("{\"type\": \"strin\"}", "unknown type 'strin'");
    refused("{\"type\": 5}", "type must be a name");
    refused("{\"type\": \"object\"", "invalid JSON");
    refused("{\"a\": 1, \"a\": 2}", "invalid JSON");
    refused("false", "allows nothing");
    refused("[]", "a schema must be an object");
    refused("{\"properties\": {\"a\": false}}", "allows nothing");
    /* nesting beyond the limit */
    char deep[2000] = "";
    for (int i = 0; i < 80; i++)
        strcat(deep, "{\"items\": ");
    strcat(deep, "{}");
    for (int i = 0; i < 80; i++)
        strcat(deep, "}");
    refused(deep, "nested deeper than");
}
END_TEST

START_TEST(test_nested_schema_and_state)
{
    /* the nested schema of the benchmark, its state carried over the wire mid-way */
    const char *s = "{\"type\": \"object\", \"properties\": {"
                    "\"name\": {\"type\": \"string\", \"maxLength\": 40},"
                    "\"address\": {\"type\": \"object\", \"properties\": {\"street\": {\"type\": \"string\"},"
                    "  \"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}$\"}}, \"required\": [\"street\", \"zip\"]},"
                    "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"x\", \"y\"]}, \"maxItems\": 4},"
                    "\"born\": {\"type\": \"string\", \"format\": \"date\"},"
                    "\"score\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 100}},"
                    "\"required\": [\"name\", \"address\", \"score\"]}";
    gram *g = schema(s);
    const char *text = "{\"name\": \"Ann\", \"address\": {\"street\": \"Main 1\", \"zip\": \"12345\"}, "
                       "\"score\": 99, \"tags\": [\"x\", \"y\"], \"born\": \"2001-02-03\"}";
    ck_assert(accepts(g, text));
    gram_state *st = gram_state_new(g);
    for (size_t i = 0; text[i]; i++) {
        uint8_t buf[512];
        size_t n = gram_state_to_bytes(st, buf, sizeof buf);
        ck_assert_uint_le(n, sizeof buf);
        gram_state *r = gram_state_from_bytes(g, buf, n, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        gram_state_free(st);
        st = r;
        ck_assert_int_eq(gram_accept_bytes(st, text + i, 1), 0);
    }
    ck_assert(gram_can_end(st));
    gram_state_free(st);
    gram_free(g);
}
END_TEST

Suite *jsonschema_suite(void)
{
    Suite *s = suite_create("jsonschema");
    TCase *tc = tcase_create("keywords");
    tcase_add_test(tc, test_types);
    tcase_add_test(tc, test_whitespace);
    tcase_add_test(tc, test_objects);
    tcase_add_test(tc, test_enum_const);
    tcase_add_test(tc, test_arrays);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_patterns);
    tcase_add_test(tc, test_integers);
    tcase_add_test(tc, test_combinations);
    tcase_add_test(tc, test_one_of);
    tcase_add_test(tc, test_refs);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_nested_schema_and_state);
    suite_add_tcase(s, tc);
    return s;
}
