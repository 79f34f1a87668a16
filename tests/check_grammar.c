/*
 * Tests for the grammar engine of grammar/ (suite "grammar"): the GBNF parser on valid
 * grammars and on malformed ones (the message names the problem and its line and
 * column), the matcher (repetition bounds, UTF-8 across byte boundaries, dead ends,
 * end of sentence, refused bytes leave the state alone), the state's wire form (round
 * trip, every corruption refused) and token masks: the masker's tables and caches
 * against a token-by-token brute force over the real Llama-3 (128k, BPE) and Llama-2
 * (32k, SentencePiece with byte tokens) vocabularies. Data from $LLM_SHARED.
 * Owner: grammar (issue 20).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gram.h"
#include "tok.h"

static char err[512];

static gram *compile(const char *text)
{
    gram *g = gram_compile(text, strlen(text), err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", text, err);
    return g;
}

/* The whole text accepted and a complete sentence? */
static bool full_match(const gram *g, const char *text)
{
    gram_state *s = gram_state_new(g);
    ck_assert_ptr_nonnull(s);
    bool ok = gram_accept_bytes(s, text, strlen(text)) == 0 && gram_can_end(s);
    gram_state_free(s);
    return ok;
}

/* Accepted as a prefix (not necessarily complete)? */
static bool prefix_ok(const gram *g, const char *text)
{
    gram_state *s = gram_state_new(g);
    bool ok = gram_accept_bytes(s, text, strlen(text)) == 0;
    gram_state_free(s);
    return ok;
}

static void expect_error(const char *text, const char *needle)
{
    gram *g = gram_compile(text, strlen(text), err, sizeof err);
    ck_assert_msg(g == NULL, "compiled but should not: %s", text);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s': message '%s' lacks '%s'", text, err, needle);
}

/* A JSON grammar in llama.cpp's style. */
static const char *JSON_GBNF =
    "# JSON\n"
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

START_TEST(test_parse_valid)
{
    gram *g = compile(JSON_GBNF);
    ck_assert(full_match(g, "{}"));
    ck_assert(full_match(g, "{\"a\": [1, 2.5, -3e+7, true, null, \"x\\u00e9\\n\"], \"b\": {}}"));
    ck_assert(full_match(g, "{\"caf\xc3\xa9\": \"\xe6\x97\xa5\xf0\x9f\x99\x82\"}"));
    ck_assert(!full_match(g, "{\"a\" 1}"));
    ck_assert(!full_match(g, "{\"a\": 01}"));
    ck_assert(!full_match(g, "[]"));
    ck_assert(!full_match(g, "{\"a\": \"\x01\"}"));
    ck_assert(prefix_ok(g, "{\"a\": [1, "));
    ck_assert_uint_eq(gram_hash(g), gram_text_hash(JSON_GBNF, strlen(JSON_GBNF)));
    gram_free(g);

    /* every piece of syntax */
    g = compile("root ::= greet (\", \" greet){0,2} [.!]?  # a comment\n"
                "greet ::= (\"hi\" | \"h\\x65llo\" | \"\\u00e9t\\U0001F600\") name\n"
                "name ::= [ ]+ [A-Z] [a-z_\\-]*\n");
    ck_assert(full_match(g, "hi Bob"));
    ck_assert(full_match(g, "hello  Ann, hi Al_x-y!"));
    ck_assert(full_match(g, "\xc3\xa9t\xf0\x9f\x98\x80 Z"));
    ck_assert(!full_match(g, "hi Bob, hi Al, hi Cy, hi Di"));
    ck_assert(!full_match(g, "hi bob"));
    gram_free(g);

    g = compile("root ::= [^a-z\\n] . \"x\"\n");
    ck_assert(full_match(g, "A\xe2\x82\xac" "x"));
    ck_assert(full_match(g, "\xf0\x9f\x98\x80\nx"));
    ck_assert(!full_match(g, "q.x"));
    ck_assert(!full_match(g, "\n.x"));
    gram_free(g);

    /* CRLF line ends, alternatives continued after '|' on the next line, a rule used
     * before its definition */
    g = compile("root ::= a |\r\n  b\r\na ::= \"a\"\r\nb ::= \"b\"{2}\r\n");
    ck_assert(full_match(g, "a"));
    ck_assert(full_match(g, "bb"));
    ck_assert(!full_match(g, "b"));
    gram_free(g);

    /* an empty alternative and an empty literal */
    g = compile("root ::= \"\" | \"x\" \"\" ");
    ck_assert(full_match(g, ""));
    ck_assert(full_match(g, "x"));
    gram_free(g);
}
END_TEST

START_TEST(test_parse_errors)
{
    expect_error("", "empty grammar");
    expect_error("  # only a comment\n\n", "empty grammar");
    expect_error("root ::= foo", "line 1 col 10: undefined rule 'foo'");
    expect_error("root ::= \"a\"\nb ::= c", "line 2 col 7: undefined rule 'c'");
    expect_error("root ::= (\"a\"", "line 1 col 10: unbalanced parentheses");
    expect_error("root ::= \"a\")", "unbalanced parentheses: ')' without '('");
    expect_error("root ::= \"\\q\"", "unknown escape '\\q'");
    expect_error("root ::= \"\\x4\"", "needs hex digits");
    expect_error("root ::= [\\U00110000]", "beyond U+10FFFF");
    expect_error("root ::= \"abc", "unterminated string literal");
    expect_error("root ::= [abc", "unterminated character class");
    expect_error("root ::= [z-a]", "out of order");
    expect_error("root ::= [^\\x00-\\U0010FFFF]", "matches nothing");
    expect_error("root ::= []", "matches nothing"); /* found by fuzz_grammar */
    expect_error("root ::= root \"a\" | \"b\"", "left recursion: rule 'root'");
    expect_error("root ::= x\nx ::= y? root \"a\"\ny ::= \"y\"", "left recursion");
    expect_error("root ::= (\"a\"?)*", "left recursion: a repetition of something that can be empty");
    expect_error("a ::= \"x\"", "no rule named 'root'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2 col 1: rule 'root' defined twice");
    expect_error("root ::= \"a\"{3,2}", "n < m");
    expect_error("root ::= \"a\"{99999}", "repetition count over");
    expect_error("root ::= \"a\"{2", "expected '}'");
    expect_error("root ::= * \"a\"", "repetition operator without an item");
    expect_error("root ::= \"a\"**", "repetition operator without an item");
    expect_error("root ::= \"a\" : \"b\"", "unexpected character ':'");
    expect_error("root \"a\"", "expected '::='");
    expect_error("::= \"a\"", "expected a rule name");
    expect_error("root ::= \"\xc3\"", "invalid UTF-8");
    expect_error("root ::= \"\xed\xa0\x80\"", "invalid UTF-8");
    expect_error("root ::= <[1000]>", "unexpected character '<'");
    /* nested too deep */
    char deep[400] = "root ::= ";
    for (int i = 0; i < 100; i++)
        strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 100; i++)
        strcat(deep, ")");
    expect_error(deep, "nested deeper than 64");
    /* too large after expansion: 30 times x{0,10000}, 4 elements per level */
    char big[400] = "root ::=";
    for (int i = 0; i < 30; i++)
        strcat(big, " \"a\"{0,10000}");
    expect_error(big, "grammar too large");
    /* but a repeated group is a reference, not a copy */
    gram_free(compile("root ::= (\"a\"{10000}){10000}"));
    /* a NUL inside */
    gram *g = gram_compile("root ::= \"a\"\0x", 14, err, sizeof err);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(err, "NUL byte"));
}
END_TEST

START_TEST(test_repetition_bounds)
{
    gram *g = compile("root ::= \"a\"{2,4}");
    ck_assert(!full_match(g, "a"));
    ck_assert(full_match(g, "aa"));
    ck_assert(full_match(g, "aaa"));
    ck_assert(full_match(g, "aaaa"));
    ck_assert(!prefix_ok(g, "aaaaa"));
    gram_free(g);
    g = compile("root ::= (\"ab\"){3} \"c\"{2,} \"d\"{,2} \"e\"? \"f\"+ \"g\"*");
    ck_assert(full_match(g, "abababccf"));
    ck_assert(full_match(g, "abababcccccddefffggg"));
    ck_assert(!full_match(g, "ababccf"));
    ck_assert(!full_match(g, "abababcf"));
    ck_assert(!full_match(g, "abababccdddf"));
    ck_assert(!full_match(g, "abababccee f"));
    ck_assert(!full_match(g, "abababcc"));
    gram_free(g);
    /* a long x* keeps one short stack (tail calls push nothing) */
    g = compile("root ::= \"[\" [a-z]* \"]\"");
    gram_state *s = gram_state_new(g);
    ck_assert_int_eq(gram_accept_bytes(s, "[", 1), 0);
    for (int i = 0; i < 5000; i++)
        ck_assert_int_eq(gram_accept_bytes(s, "q", 1), 0);
    uint8_t buf[64];
    ck_assert_uint_lt(gram_state_to_bytes(s, buf, sizeof buf), sizeof buf);
    ck_assert_int_eq(gram_accept_bytes(s, "]", 1), 0);
    ck_assert(gram_can_end(s));
    ck_assert(!gram_can_continue(s));
    gram_state_free(s);
    gram_free(g);
}
END_TEST

START_TEST(test_utf8_edges)
{
    gram *g = compile("root ::= \"\xc3\xa9\" [\xce\xb1-\xcf\x89]+ . [^\\x00-\\x7F]");
    gram_state *s = gram_state_new(g);
    /* é split over two tokens */
    ck_assert_int_eq(gram_accept_bytes(s, "\xc3", 1), 0);
    ck_assert_uint_eq(gram_pending_bytes(s), 1);
    ck_assert(!gram_can_end(s));
    ck_assert_int_eq(gram_accept_bytes(s, "\xa9\xce", 2), 0);
    ck_assert_uint_eq(gram_pending_bytes(s), 1);
    /* a Greek letter's second byte out of the class range (U+0380 is below alpha) */
    ck_assert_int_eq(gram_accept_bytes(s, "\x80", 1), -1);
    ck_assert_int_eq(gram_accept_bytes(s, "\xb2", 1), 0); /* beta */
    ck_assert_uint_eq(gram_pending_bytes(s), 0);
    /* a lead byte of no class: Cyrillic (0xD0) is outside alpha..omega but '.' follows,
     * so it is allowed as the start of '.' */
    gram_state *c = gram_state_clone(s);
    ck_assert_int_eq(gram_accept_bytes(c, "\xd0\x96", 2), 0);
    ck_assert_int_eq(gram_accept_bytes(c, "a", 1), -1); /* last class is non-ASCII */
    /* an emoji over 4 tokens, then a 3-byte char */
    ck_assert_int_eq(gram_accept_bytes(c, "\xf0", 1), 0);
    ck_assert_int_eq(gram_accept_bytes(c, "\x9f", 1), 0);
    ck_assert_int_eq(gram_accept_bytes(c, "\x98", 1), 0);
    ck_assert_uint_eq(gram_pending_bytes(c), 3);
    ck_assert_int_eq(gram_accept_bytes(c, "\x80", 1), 0);
    ck_assert(gram_can_end(c));
    gram_state_free(c);
    /* invalid UTF-8 refused at the first byte that shows it */
    const char *bad[] = {"\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                         "\xf5", "\xff", "\x80", "\xce\xce"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gram_state *t = gram_state_clone(s);
        ck_assert_msg(gram_accept_bytes(t, bad[i], strlen(bad[i])) == -1, "bad[%zu] accepted", i);
        gram_state_free(t);
    }
    /* a character cut short cannot end the sentence */
    ck_assert_int_eq(gram_accept_bytes(s, "x\xe2\x82", 3), 0);
    ck_assert(!gram_can_end(s));
    ck_assert(!gram_is_dead(s));
    ck_assert_int_eq(gram_accept_bytes(s, "\xac", 1), 0);
    ck_assert(gram_can_end(s));
    gram_state_free(s);
    gram_free(g);
    /* a class of surrogates only never matches, even its first byte */
    g = compile("root ::= [\\uD800-\\uDFFF] | \"a\"");
    s = gram_state_new(g);
    ck_assert_int_eq(gram_accept_bytes(s, "\xed", 1), -1);
    gram_state_free(s);
    gram_free(g);
}
END_TEST

START_TEST(test_dead_ends_and_eos)
{
    gram *g = compile("root ::= \"ab\" | \"ac\" \"d\"*");
    gram_state *s = gram_state_new(g);
    ck_assert(!gram_can_end(s));
    ck_assert(gram_can_continue(s));
    uint8_t before[256], after[256];
    size_t n0 = gram_state_to_bytes(s, before, sizeof before);
    ck_assert_int_eq(gram_accept_bytes(s, "ax", 2), -1);
    size_t n1 = gram_state_to_bytes(s, after, sizeof after);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0); /* refused: unchanged */
    ck_assert_int_eq(gram_accept_bytes(s, "ab", 2), 0);
    ck_assert(gram_can_end(s));
    ck_assert(!gram_can_continue(s));
    ck_assert_int_eq(gram_accept_bytes(s, "d", 1), -1);
    gram_state_free(s);
    s = gram_state_new(g);
    ck_assert_int_eq(gram_accept_bytes(s, "acddd", 5), 0);
    ck_assert(gram_can_end(s) && gram_can_continue(s));
    gram_state_free(s);
    gram_free(g);
    /* a grammar that may be empty may end at once */
    g = compile("root ::= \"x\"*");
    s = gram_state_new(g);
    ck_assert(gram_can_end(s));
    ck_assert(!gram_is_dead(s));
    gram_state_free(s);
    gram_free(g);
    /* ambiguity: both paths kept, then merged */
    g = compile("root ::= a | b\na ::= \"x\" [0-9]+ \"!\"\nb ::= \"x\" [0-4]+ \"?\"");
    s = gram_state_new(g);
    ck_assert_int_eq(gram_accept_bytes(s, "x12", 3), 0);
    ck_assert_uint_eq(gram_state_n_stacks(s), 4); /* per branch: more digits, or the end mark */
    ck_assert_int_eq(gram_accept_bytes(s, "7", 1), 0);
    ck_assert_uint_eq(gram_state_n_stacks(s), 2);
    ck_assert_int_eq(gram_accept_bytes(s, "?", 1), -1);
    ck_assert_int_eq(gram_accept_bytes(s, "!", 1), 0);
    ck_assert(gram_can_end(s));
    gram_state_free(s);
    gram_free(g);
    /* nesting deeper than the stack limit is refused, not crashed on */
    g = compile("root ::= \"(\" root \")\" | \"x\"");
    s = gram_state_new(g);
    int rc = 0, i;
    for (i = 0; i < 3 * GRAM_MAX_DEPTH && rc == 0; i++)
        rc = gram_accept_bytes(s, "(", 1);
    ck_assert_int_eq(rc, -1);
    ck_assert_int_gt(i, GRAM_MAX_DEPTH / 2);
    gram_state_free(s);
    gram_free(g);
}
END_TEST

START_TEST(test_state_roundtrip_and_corruption)
{
    gram *g = compile(JSON_GBNF);
    gram *other = compile("root ::= \"x\"");
    gram_state *s = gram_state_new(g);
    const char *text = "{\"k\xc3\xa9y\": [1, {\"z\": \"\xe6\x97";
    uint8_t buf[4096], buf2[4096];
    for (size_t i = 0; text[i]; i++) {
        ck_assert_int_eq(gram_accept_bytes(s, text + i, 1), 0);
        size_t n = gram_state_to_bytes(s, buf, sizeof buf);
        ck_assert_uint_le(n, sizeof buf);
        ck_assert_uint_eq(gram_state_to_bytes(s, NULL, 0), n);
        gram_state *r = gram_state_from_bytes(g, buf, n, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        ck_assert_uint_eq(gram_state_to_bytes(r, buf2, sizeof buf2), n);
        ck_assert(memcmp(buf, buf2, n) == 0);
        /* the same future */
        const char *rest[] = {"\xa5\"}]}", "1", "\"", "}", "\xa5"};
        for (size_t k = 0; k < 5; k++) {
            gram_state *a = gram_state_clone(s), *b = gram_state_clone(r);
            ck_assert_int_eq(gram_accept_bytes(a, rest[k], strlen(rest[k])),
                             gram_accept_bytes(b, rest[k], strlen(rest[k])));
            ck_assert_int_eq(gram_can_end(a), gram_can_end(b));
            gram_state_free(a);
            gram_state_free(b);
        }
        gram_state_free(r);
    }
    size_t n = gram_state_to_bytes(s, buf, sizeof buf);
    ck_assert_uint_eq(gram_pending_bytes(s), 2);
    /* another grammar's state */
    ck_assert_ptr_null(gram_state_from_bytes(other, buf, n, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "another grammar"));
    /* every truncation */
    for (size_t k = 0; k < n; k++)
        ck_assert_ptr_null(gram_state_from_bytes(g, buf, k, err, sizeof err));
    /* a trailing byte */
    memcpy(buf2, buf, n);
    buf2[n] = 0;
    ck_assert_ptr_null(gram_state_from_bytes(g, buf2, n + 1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "trailing"));
    /* version */
    buf2[0] = 9;
    ck_assert_ptr_null(gram_state_from_bytes(g, buf2, n, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "version"));
    /* a frame out of range: a hand-made state, one stack of one frame */
    uint8_t hand[32];
    memcpy(hand, buf, 9);
    hand[9] = 0;                       /* no pending bytes */
    hand[10] = 1;                      /* one stack */
    hand[11] = 1;                      /* of depth 1 */
    hand[12] = 0xFF, hand[13] = 0x7F;  /* position 16383: beyond the grammar */
    ck_assert_ptr_null(gram_state_from_bytes(g, hand, 14, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a position"));
    /* a frame on an END element, and a top that is a rule reference */
    hand[12] = 0x00;                   /* position 0: root's REF object */
    ck_assert_ptr_null(gram_state_from_bytes(g, hand, 13, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "top is not a character class"));
    hand[12] = 0x01;                   /* position 1: root's END */
    ck_assert_ptr_null(gram_state_from_bytes(g, hand, 13, err, sizeof err));
    /* the same stack twice */
    hand[10] = 2, hand[11] = 0, hand[12] = 0;
    ck_assert_ptr_null(gram_state_from_bytes(g, hand, 13, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "repeated"));
    /* pending bytes that are not a character's start */
    hand[9] = 1, hand[10] = 0x80, hand[11] = 1, hand[12] = 0;
    ck_assert_ptr_null(gram_state_from_bytes(g, hand, 13, err, sizeof err));
    /* random corruption: refused or a valid state, never a crash */
    uint32_t seed = 1;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf2, buf, n);
        for (int f = 0; f < 3; f++) {
            seed = seed * 1664525u + 1013904223u;
            buf2[9 + (seed >> 8) % (n - 9)] ^= (uint8_t)(1u << ((seed >> 4) & 7));
        }
        gram_state *r = gram_state_from_bytes(g, buf2, n, err, sizeof err);
        if (r) {
            gram_accept_bytes(r, "\xa5\"}", 3);
            gram_state_free(r);
        }
    }
    gram_state_free(s);
    gram_free(other);
    gram_free(g);
}
END_TEST

/* ---- masks ---- */

typedef struct {
    tok_vocab *tv;
    gram_token *toks;
    char **texts;
    gram_vocab *gv;
    int32_t n;
} test_vocab;

static bool load_vocab(const char *name, test_vocab *tv)
{
    char path[1024];
    const char *sh = getenv("LLM_SHARED");
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-%s.gguf", sh ? sh : "../shared", name);
    gguf_ctx *gg = gguf_open(path, err, sizeof err);
    ck_assert_msg(gg != NULL, "%s", err);
    tv->tv = tok_vocab_load(gg, err, sizeof err);
    gguf_close(gg);
    ck_assert_msg(tv->tv != NULL, "%s", err);
    tv->n = tok_n_vocab(tv->tv);
    tv->toks = calloc(tv->n, sizeof *tv->toks);
    tv->texts = calloc(tv->n, sizeof *tv->texts);
    for (int32_t i = 0; i < tv->n; i++) {
        char piece[256];
        int len = tok_piece(tv->tv, i, false, piece, sizeof piece);
        ck_assert_int_ge(len, 0);
        tv->texts[i] = malloc((size_t)len + 1);
        if (len <= (int)sizeof piece)
            memcpy(tv->texts[i], piece, (size_t)len);
        else
            tok_piece(tv->tv, i, false, tv->texts[i], (size_t)len + 1);
        tv->toks[i] = (gram_token){tv->texts[i], (uint32_t)len, tok_is_eog(tv->tv, i)};
    }
    tv->gv = gram_vocab_new(tv->toks, tv->n, err, sizeof err);
    ck_assert_msg(tv->gv != NULL, "%s", err);
    return true;
}

static void free_vocab(test_vocab *tv)
{
    for (int32_t i = 0; i < tv->n; i++)
        free(tv->texts[i]);
    free(tv->texts);
    free(tv->toks);
    gram_vocab_free(tv->gv);
    tok_vocab_free(tv->tv);
}

/* Token by token: what gram_accept_token says. */
static void brute_mask(const test_vocab *tv, const gram_state *s, uint64_t *mask)
{
    memset(mask, 0, gram_mask_words(tv->gv) * 8);
    for (int32_t i = 0; i < tv->n; i++) {
        gram_state *c = gram_state_clone(s);
        if (gram_accept_token(tv->gv, c, i) == 0)
            mask[i / 64] |= 1ull << (i % 64);
        gram_state_free(c);
    }
}

static int count_bits(const uint64_t *m, size_t words)
{
    int n = 0;
    for (size_t i = 0; i < words; i++)
        n += __builtin_popcountll(m[i]);
    return n;
}

/* Compares the masker's mask, the plain walk's and the brute force's at s; returns the
 * masker's (caller frees). */
static uint64_t *compare_masks(const test_vocab *tv, gram_masker *m, const gram_state *s, const char *where)
{
    size_t words = gram_mask_words(tv->gv);
    uint64_t *a = calloc(words, 8), *b = calloc(words, 8), *c = calloc(words, 8);
    gram_mask(m, s, a);
    brute_mask(tv, s, b);
    gram_mask_walk(tv->gv, s, c);
    for (size_t w = 0; w < words; w++) {
        if (a[w] != b[w] || c[w] != b[w]) {
            int bit = __builtin_ctzll((a[w] ^ b[w]) | (c[w] ^ b[w]));
            int32_t id = (int32_t)(w * 64 + (size_t)bit);
            ck_abort_msg("%s: token %d '%.*s': masker %d walk %d brute %d", where, id,
                         (int)tv->toks[id].len, tv->toks[id].text, (int)((a[w] >> bit) & 1),
                         (int)((c[w] >> bit) & 1), (int)((b[w] >> bit) & 1));
        }
    }
    /* asked again: the cache gives the same */
    gram_mask(m, s, c);
    ck_assert(memcmp(a, c, words * 8) == 0);
    ck_assert_int_gt(count_bits(a, words) + gram_is_dead(s), 0);
    free(b);
    free(c);
    return a;
}

/* Writes text token by token, each token picked from the mask: the longest allowed
 * token that is a prefix of the rest on even steps, the shortest on odd ones (byte
 * tokens: states inside a character); compares the masks at every step, then ends
 * with an end-of-generation token. */
static void masks_along(const test_vocab *tv, const char *grammar, const char *text, int max_steps)
{
    gram *g = compile(grammar);
    gram_masker *m = gram_masker_new(g, tv->gv);
    gram_state *s = gram_state_new(g);
    size_t at = 0, len = strlen(text);
    char where[64];
    for (int step = 0; step < max_steps; step++) {
        snprintf(where, sizeof where, "step %d (offset %zu)", step, at);
        uint64_t *mask = compare_masks(tv, m, s, where);
        if (at == len) {
            ck_assert(gram_can_end(s));
            int32_t eog = -1;
            for (int32_t i = 0; i < tv->n && eog < 0; i++)
                if (tv->toks[i].eog)
                    eog = i;
            ck_assert((mask[eog / 64] >> (eog % 64)) & 1);
            ck_assert_int_eq(gram_accept_token(tv->gv, s, eog), 0);
            free(mask);
            break;
        }
        int32_t pick = -1;
        for (int32_t i = 0; i < tv->n; i++) {
            uint32_t l = tv->toks[i].len;
            if (!((mask[i / 64] >> (i % 64)) & 1) || l == 0 || l > len - at ||
                memcmp(tv->toks[i].text, text + at, l) != 0)
                continue;
            if (pick < 0 || ((step & 1) ? l < tv->toks[pick].len : l > tv->toks[pick].len))
                pick = i;
        }
        free(mask);
        ck_assert_msg(pick >= 0, "%s: no allowed token continues the text", where);
        ck_assert_int_eq(gram_accept_token(tv->gv, s, pick), 0);
        at += tv->toks[pick].len;
    }
    gram_state_free(s);
    gram_masker_free(m);
    gram_free(g);
}

/* Bounded strings and JSON's whitespace: chains of repetition rules whose tables are
 * derived from their top's (gram_mask.c). */
static const char *BOUNDED_GBNF =
    "root ::= \"{\" space \"\\\"a\\\"\" space \":\" space str24 \",\" space \"\\\"b\\\"\" space \":\" space \"[\""
    " space (str8 (\",\" space str8){0,2})? \"]\" space \"}\"\n"
    "str24 ::= \"\\\"\" char{0,24} \"\\\"\" space\n"
    "str8 ::= \"\\\"\" char{0,8} \"\\\"\" space\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n";

/* Writes n_docs documents of at most max_steps tokens, each token drawn at random from
 * the mask (as a random-weight model at temperature 1 would: states inside characters,
 * every position of the bounded strings); compares the masker with the plain walk at
 * every step. Returns the masker's counters. */
static gram_masker_stats masks_random(const test_vocab *tv, const char *grammar, uint64_t seed, int n_docs,
                                      int max_steps)
{
    gram *g = compile(grammar);
    gram_masker *m = gram_masker_new(g, tv->gv);
    size_t words = gram_mask_words(tv->gv);
    uint64_t *a = calloc(words, 8), *b = calloc(words, 8), x = seed;
    for (int d = 0; d < n_docs; d++) {
        gram_state *s = gram_state_new(g);
        for (int step = 0; step < max_steps; step++) {
            gram_mask(m, s, a);
            gram_mask_walk(tv->gv, s, b);
            for (size_t w = 0; w < words; w++)
                if (a[w] != b[w]) {
                    int32_t id = (int32_t)(w * 64 + (size_t)__builtin_ctzll(a[w] ^ b[w]));
                    ck_abort_msg("doc %d step %d: token %d '%.*s': masker %d walk %d", d, step, id,
                                 (int)tv->toks[id].len, tv->toks[id].text, (int)((a[w] >> (id % 64)) & 1),
                                 (int)((b[w] >> (id % 64)) & 1));
                }
            int n_set = count_bits(a, words);
            ck_assert_int_gt(n_set, 0);
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int k = (int)(x % (uint64_t)n_set);
            int32_t pick = -1;
            for (int32_t i = 0; pick < 0; i++)
                if (((a[i / 64] >> (i % 64)) & 1) && k-- == 0)
                    pick = i;
            if (tv->toks[pick].eog)
                break;
            ck_assert_int_eq(gram_accept_token(tv->gv, s, pick), 0);
        }
        gram_state_free(s);
    }
    gram_masker_stats st = gram_masker_get_stats(m);
    free(a);
    free(b);
    gram_masker_free(m);
    gram_free(g);
    return st;
}

START_TEST(test_masks_bounded)
{
    test_vocab tv;
    load_vocab("llama-bpe", &tv);
    gram_masker_stats st = masks_random(&tv, BOUNDED_GBNF, 7, 3, 60);
    ck_assert_uint_gt(st.derived, 0);
    ck_assert_uint_eq(st.walks, 0);
    free_vocab(&tv);
    load_vocab("llama-spm", &tv);
    st = masks_random(&tv, BOUNDED_GBNF, 11, 3, 80);
    ck_assert_uint_gt(st.derived, 0);
    free_vocab(&tv);
}
END_TEST

START_TEST(test_masks_bpe)
{
    test_vocab tv;
    load_vocab("llama-bpe", &tv);
    ck_assert_int_gt(tv.n, 128000);
    masks_along(&tv, JSON_GBNF, "{\"name\": \"Ann \xc3\xa9\xe6\x97\xa5\", \"n\": [12, {\"x\": -3.5}], \"ok\": true}", 40);
    free_vocab(&tv);
}
END_TEST

START_TEST(test_masks_spm_bytes)
{
    test_vocab tv;
    load_vocab("llama-spm", &tv);
    /* byte tokens (<0xE6>) split characters: states inside a character */
    const char *g = "root ::= \"[\" item (\",\" item)* \"]\"\n"
                    "item ::= [\\u3040-\\u30FF\\u4E00-\\u9FFF]+ | [0-9]{1,3} | \"\\\"\" [^\"]* \"\\\"\"\n";
    masks_along(&tv, g, "[\xe6\x97\xa5\xe6\x9c\xac,42,\"\xf0\x9f\x99\x82 ok\",\xe3\x81\x82]", 60);
    /* a state inside a character, checked directly */
    gram *gr = compile(g);
    gram_masker *m = gram_masker_new(gr, tv.gv);
    gram_state *s = gram_state_new(gr);
    ck_assert_int_eq(gram_accept_bytes(s, "[\xe6", 2), 0);
    free(compare_masks(&tv, m, s, "inside a character"));
    gram_masker_stats st = gram_masker_get_stats(m);
    ck_assert_uint_eq(st.walks, 0); /* tables keyed by the pending bytes too */
    gram_state_free(s);
    gram_masker_free(m);
    gram_free(gr);
    free_vocab(&tv);
}
END_TEST

START_TEST(test_masks_small_vocab)
{
    /* a hand-made vocabulary where tables, uncertain tokens and rechecks all matter */
    const char *texts[] = {"\"", "\",", "\"}", "a", "ab", "abc\"", "abc\",", "abc\"}", "}", ",", " ",
                           "{\"", "\":", "1", "12", "\xc3", "\xa9", "\xc3\xa9", "\",\"", "", "x\"}}"};
    int32_t n = (int32_t)(sizeof texts / sizeof *texts);
    gram_token toks[32];
    for (int32_t i = 0; i < n; i++)
        toks[i] = (gram_token){texts[i], (uint32_t)strlen(texts[i]), i == n - 2};
    gram_vocab *v = gram_vocab_new(toks, n, err, sizeof err);
    ck_assert_ptr_nonnull(v);
    test_vocab tv = {.toks = toks, .gv = v, .n = n};
    gram *g = compile("root ::= obj\n"
                      "obj ::= \"{\" pair (\",\" pair)* \"}\"\n"
                      "pair ::= str \":\" val\n"
                      "val ::= str | [0-9]+ | obj\n"
                      "str ::= \"\\\"\" [^\"]* \"\\\"\"\n");
    gram_masker *m = gram_masker_new(g, v);
    gram_state *s = gram_state_new(g);
    const char *steps[] = {"{\"", "ab", "\":", "{\"", "x", "\":", "\"", "a", "abc\"", "}", ",", "\"",
                           "\xc3", "\xa9", "\":", "12", "}"};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        free(compare_masks(&tv, m, s, steps[i]));
        ck_assert_int_eq(gram_accept_bytes(s, steps[i], strlen(steps[i])), 0);
    }
    free(compare_masks(&tv, m, s, "end"));
    ck_assert(gram_can_end(s));
    ck_assert_int_eq(gram_accept_token(v, s, n - 2), 0); /* the eog token */
    ck_assert_int_eq(gram_accept_token(v, s, n), -1);    /* out of range */
    gram_masker_stats st = gram_masker_get_stats(m);
    ck_assert_uint_gt(st.tables, 0);
    ck_assert_uint_gt(st.rechecks, 0);
    ck_assert_uint_gt(st.cache_hits, 0);
    gram_state_free(s);
    gram_masker_free(m);
    gram_free(g);
    gram_vocab_free(v);
}
END_TEST

Suite *grammar_suite(void)
{
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_parse_valid);
    tcase_add_test(tc, test_parse_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("match");
    tcase_add_test(tc, test_repetition_bounds);
    tcase_add_test(tc, test_utf8_edges);
    tcase_add_test(tc, test_dead_ends_and_eos);
    tcase_add_test(tc, test_state_roundtrip_and_corruption);
    suite_add_tcase(s, tc);
    tc = tcase_create("mask");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_masks_small_vocab);
    tcase_add_test(tc, test_masks_bpe);
    tcase_add_test(tc, test_masks_spm_bytes);
    tcase_add_test(tc, test_masks_bounded);
    suite_add_tcase(s, tc);
    return s;
}
