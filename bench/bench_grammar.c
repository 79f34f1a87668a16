/*
 * bench_grammar.c - token-mask time per generated token for a nested JSON schema over
 * the Llama-3 vocabulary (128k tokens, ../shared/reference/tokenizer/ggml-vocab-
 * llama-bpe.gguf). It writes N deterministic JSON documents valid for the schema, token
 * by token as a constrained decode would (each token picked from the mask: the longest
 * allowed token that continues the document), and times gram_mask at every step. The
 * first document runs on a fresh masker (its per-context tables are built on the way:
 * "cold"); the others reuse it, as a server that caches compiled grammars would
 * ("warm"). For scale, the plain whole-vocabulary walk (gram_mask_walk) is timed on the
 * first document's states too.
 *
 *   build/bench/bench_grammar [N_DOCS]        (default 20)
 *   build/bench/bench_grammar --random N [SEED] [MAX_TOKENS]
 * --random samples as bench/bench_structured.py's requests do on a random-weight model:
 * its schema, and each token drawn uniformly from the mask (noise at temperature 1.0)
 * for N documents of at most MAX_TOKENS (128) tokens, on one masker: the mask time per
 * token a constrained stream pays, the inside-a-character states and the contexts of
 * bounded strings included.
 * Owner: grammar.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "gram.h"
#include "json_schema.h"
#include "tok.h"

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"maxLength\": 40},"
    "\"address\": {\"type\": \"object\", \"properties\": {\"street\": {\"type\": \"string\"},"
    "  \"city\": {\"type\": \"string\"}, \"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}$\"}},"
    "  \"required\": [\"street\", \"city\", \"zip\"]},"
    "\"orders\": {\"type\": \"array\", \"maxItems\": 8, \"items\": {\"type\": \"object\", \"properties\": {"
    "  \"id\": {\"type\": \"integer\", \"minimum\": 1}, \"item\": {\"type\": \"string\"},"
    "  \"qty\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 99},"
    "  \"status\": {\"enum\": [\"open\", \"shipped\", \"returned\"]}}, \"required\": [\"id\", \"item\", \"qty\", \"status\"]}},"
    "\"born\": {\"type\": \"string\", \"format\": \"date\"},"
    "\"vip\": {\"type\": \"boolean\"},"
    "\"score\": {\"type\": \"number\"}},"
    "\"required\": [\"name\", \"address\", \"orders\", \"vip\"]}";

/* bench/bench_structured.py's schema */
static const char *SCHEMA_SERVE =
    "{\"type\": \"object\", \"required\": [\"id\", \"owner\", \"pets\"], \"properties\": {"
    "\"id\": {\"type\": \"string\", \"format\": \"uuid\"}, \"owner\": {\"$ref\": \"#/$defs/person\"},"
    "\"pets\": {\"type\": \"array\", \"maxItems\": 4, \"items\": {\"type\": \"object\","
    "  \"required\": [\"kind\", \"name\", \"age\"], \"properties\": {\"kind\": {\"enum\": [\"cat\", \"dog\", \"fish\"]},"
    "  \"name\": {\"type\": \"string\", \"maxLength\": 20},"
    "  \"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 30}}}},"
    "\"notes\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 40}, \"maxItems\": 4}},"
    "\"$defs\": {\"person\": {\"type\": \"object\", \"required\": [\"name\", \"age\"], \"additionalProperties\": false,"
    "  \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 24},"
    "  \"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120},"
    "  \"email\": {\"type\": \"string\", \"maxLength\": 40}}}}}";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void make_doc(char *out, size_t cap, int k)
{
    static const char *const names[] = {"Ann Lee", "Bo Chen", "Carla D\xc3\xad\x61z", "Dmitri Ivanov", "Emeka Obi",
                                        "Fran\xc3\xa7oise", "\xe7\x94\xb0\xe4\xb8\xad \xe5\xa4\xaa\xe9\x83\x8e"};
    static const char *const items[] = {"blue mug", "USB-C cable (2 m)", "notebook", "tea \\\"green\\\"", "caf\xc3\xa9 beans"};
    static const char *const status[] = {"open", "shipped", "returned"};
    size_t n = (size_t)snprintf(out, cap,
                                "{\"name\": \"%s\", \"address\": {\"street\": \"%d Main Street\", \"city\": \"Springfield\", "
                                "\"zip\": \"%05d\"}, \"orders\": [",
                                names[k % 7], 10 + k * 7, 10000 + k * 3137 % 89999);
    int n_orders = 1 + k % 4;
    for (int i = 0; i < n_orders; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s{\"id\": %d, \"item\": \"%s\", \"qty\": %d, \"status\": \"%s\"}",
                              i ? ", " : "", 1000 + k * 10 + i, items[(k + i) % 5], 1 + (k * 7 + i) % 99,
                              status[(k + i) % 3]);
    snprintf(out + n, cap - n, "], \"vip\": %s, \"born\": \"19%02d-%02d-%02d\", \"score\": %d.%d}",
             k % 2 ? "true" : "false", 50 + k % 50, 1 + k % 12, 1 + k % 28, k * 13 % 100, k % 10);
}

typedef struct {
    double *t;
    size_t n, cap;
} samples;

static void add(samples *s, double v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->t = realloc(s->t, s->cap * sizeof *s->t);
    }
    s->t[s->n++] = v;
}

static void report(const char *what, samples *s)
{
    if (!s->n)
        return;
    qsort(s->t, s->n, sizeof *s->t, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->t[i];
    size_t p99 = (size_t)(0.99 * (double)(s->n - 1));
    printf("%-34s %6zu masks  mean %9.1f us  p50 %8.1f us  p99 %9.1f us  max %9.1f us\n", what, s->n,
           sum / (double)s->n * 1e6, s->t[s->n / 2] * 1e6, s->t[p99] * 1e6, s->t[s->n - 1] * 1e6);
}

typedef struct {
    tok_vocab *tv;
    int32_t n_vocab;
    gram_token *toks;
    char **texts;
    gram_vocab *gv;
} vocab;

static int load_vocab(vocab *v)
{
    const char *shared = getenv("LLM_SHARED") ? getenv("LLM_SHARED") : "../shared";
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-llama-bpe.gguf", shared);
    double t0 = now();
    gguf_ctx *gg = gguf_open(path, err, sizeof err);
    v->tv = gg ? tok_vocab_load(gg, err, sizeof err) : NULL;
    gguf_close(gg);
    if (!v->tv) {
        fprintf(stderr, "bench_grammar: %s: %s\n", path, err);
        return -1;
    }
    v->n_vocab = tok_n_vocab(v->tv);
    v->toks = calloc((size_t)v->n_vocab, sizeof *v->toks);
    v->texts = calloc((size_t)v->n_vocab, sizeof *v->texts);
    for (int32_t i = 0; i < v->n_vocab; i++) {
        char piece[256];
        int len = tok_piece(v->tv, i, false, piece, sizeof piece);
        v->texts[i] = malloc((size_t)len + 1);
        if (len <= (int)sizeof piece)
            memcpy(v->texts[i], piece, (size_t)len);
        else
            tok_piece(v->tv, i, false, v->texts[i], (size_t)len + 1);
        v->toks[i] = (gram_token){v->texts[i], (uint32_t)len, tok_is_eog(v->tv, i)};
    }
    double t1 = now();
    v->gv = gram_vocab_new(v->toks, v->n_vocab, err, sizeof err);
    if (!v->gv) {
        fprintf(stderr, "bench_grammar: %s\n", err);
        return -1;
    }
    printf("vocabulary: %d tokens (llama-bpe); load %.0f ms, gram_vocab_new %.0f ms\n", v->n_vocab, (t1 - t0) * 1e3,
           (now() - t1) * 1e3);
    return 0;
}

static void free_vocab(vocab *v)
{
    gram_vocab_free(v->gv);
    for (int32_t i = 0; v->texts && i < v->n_vocab; i++)
        free(v->texts[i]);
    free(v->texts);
    free(v->toks);
    tok_vocab_free(v->tv);
}

static gram *compile(const char *schema)
{
    char err[512];
    double t0 = now();
    gram *g = jsg_compile(schema, strlen(schema), err, sizeof err);
    if (!g)
        fprintf(stderr, "bench_grammar: %s\n", err);
    else
        printf("schema -> grammar: %zu rules, %.2f ms\n", gram_n_rules(g), (now() - t0) * 1e3);
    return g;
}

static void print_stats(gram_masker *m)
{
    gram_masker_stats st = gram_masker_get_stats(m);
    printf("masker: %llu masks, %llu tables (%llu derived) built in %.1f ms, %llu cache hits, %llu walks, "
           "%llu rechecks\n", (unsigned long long)st.masks, (unsigned long long)st.tables,
           (unsigned long long)st.derived, st.table_ns / 1e6,
           (unsigned long long)st.cache_hits, (unsigned long long)st.walks, (unsigned long long)st.rechecks);
}

/* The longest allowed token that continues doc at at; -1 when none. */
static int32_t pick_longest(const vocab *v, const uint64_t *mask, const char *doc, size_t len, size_t at)
{
    int32_t pick = -1;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        uint32_t l = v->toks[i].len;
        if ((mask[i / 64] >> (i % 64)) & 1 && l && l <= len - at && !memcmp(v->toks[i].text, doc + at, l) &&
            (pick < 0 || l > v->toks[pick].len))
            pick = i;
    }
    return pick;
}

/* Writes n_docs fixed documents; 0 or 1 (a failure, printed). */
static int run_docs(const vocab *v, int n_docs)
{
    gram *g = compile(SCHEMA);
    if (!g)
        return 1;
    gram_masker *m = gram_masker_new(g, v->gv);
    size_t words = gram_mask_words(v->gv);
    uint64_t *mask = malloc(words * 8), *ref = malloc(words * 8);
    samples cold = {0}, warm = {0}, walk = {0}, accept = {0};
    size_t tokens = 0, bytes = 0;
    char doc[4096];
    int rc = 0;
    for (int d = 0; d < n_docs && !rc; d++) {
        make_doc(doc, sizeof doc, d);
        size_t len = strlen(doc), at = 0;
        gram_state *s = gram_state_new(g);
        for (;;) {
            double a = now();
            gram_mask(m, s, mask);
            double b = now();
            add(d == 0 ? &cold : &warm, b - a);
            if (d == 0) {
                gram_mask_walk(v->gv, s, ref);
                add(&walk, now() - b);
                if (memcmp(ref, mask, words * 8) != 0) {
                    fprintf(stderr, "bench_grammar: masker and walk differ at offset %zu\n", at);
                    rc = 1;
                    break;
                }
            }
            if (at == len)
                break;
            int32_t pick = pick_longest(v, mask, doc, len, at);
            if (pick < 0) {
                fprintf(stderr, "bench_grammar: doc %d: no allowed token at offset %zu: %s\n", d, at, doc + at);
                rc = 1;
                break;
            }
            a = now();
            if (gram_accept_token(v->gv, s, pick) != 0) {
                fprintf(stderr, "bench_grammar: masked token refused\n");
                rc = 1;
                break;
            }
            add(&accept, now() - a);
            at += v->toks[pick].len;
            tokens++;
        }
        bytes += len;
        if (!rc && !gram_can_end(s)) {
            fprintf(stderr, "bench_grammar: doc %d incomplete\n", d);
            rc = 1;
        }
        gram_state_free(s);
    }
    if (!rc) {
        printf("%d documents, %zu tokens (%.1f bytes/token)\n", n_docs, tokens, (double)bytes / (double)tokens);
        print_stats(m);
        report("mask, first document (cold)", &cold);
        report("mask, other documents (warm)", &warm);
        report("plain walk, first document", &walk);
        report("accept token", &accept);
    }
    gram_masker_free(m);
    gram_free(g);
    free(mask);
    free(ref);
    free(cold.t);
    free(warm.t);
    free(walk.t);
    free(accept.t);
    return rc;
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* A token drawn uniformly from mask (n_set bits); -1 when empty. */
static int32_t pick_random(const uint64_t *mask, size_t words, uint64_t *rng)
{
    size_t n_set = 0;
    for (size_t w = 0; w < words; w++)
        n_set += (size_t)__builtin_popcountll(mask[w]);
    if (!n_set)
        return -1;
    size_t k = (size_t)(rng_next(rng) % n_set);
    for (size_t w = 0;; w++) {
        size_t c = (size_t)__builtin_popcountll(mask[w]);
        if (k < c) {
            uint64_t b = mask[w];
            while (k--)
                b &= b - 1;
            return (int32_t)(w * 64 + (size_t)__builtin_ctzll(b));
        }
        k -= c;
    }
}

/* Samples n_docs documents of at most max_tok tokens at random; 0 or 1. */
static int run_random(const vocab *v, int n_docs, uint64_t seed, int max_tok)
{
    gram *g = compile(SCHEMA_SERVE);
    if (!g)
        return 1;
    gram_masker *m = gram_masker_new(g, v->gv);
    size_t words = gram_mask_words(v->gv);
    uint64_t *mask = malloc(words * 8), rng = seed * 2654435761u + 1;
    samples first = {0}, rest = {0};
    size_t tokens = 0, ended = 0;
    int rc = 0;
    for (int d = 0; d < n_docs && !rc; d++) {
        gram_state *s = gram_state_new(g);
        for (int t = 0; t < max_tok; t++) {
            double a = now();
            gram_mask(m, s, mask);
            double el = now() - a;
            add(d == 0 ? &first : &rest, el);
            int32_t pick = pick_random(mask, words, &rng);
            if (pick < 0) {
                fprintf(stderr, "bench_grammar: doc %d: empty mask after %d tokens\n", d, t);
                rc = 1;
                break;
            }
            if (gram_vocab_is_eog(v->gv, pick)) {
                ended++;
                break;
            }
            if (gram_accept_token(v->gv, s, pick) != 0) {
                fprintf(stderr, "bench_grammar: masked token refused\n");
                rc = 1;
                break;
            }
            tokens++;
        }
        gram_state_free(s);
    }
    if (!rc) {
        printf("%d random documents (seed %llu, <= %d tokens), %zu tokens, %zu complete\n", n_docs,
               (unsigned long long)seed, max_tok, tokens, ended);
        print_stats(m);
        report("mask, first document", &first);
        report("mask, other documents", &rest);
    }
    gram_masker_free(m);
    gram_free(g);
    free(mask);
    free(first.t);
    free(rest.t);
    return rc;
}

int main(int argc, char **argv)
{
    vocab v = {0};
    if (load_vocab(&v) != 0)
        return 1;
    int rc;
    if (argc > 1 && !strcmp(argv[1], "--random"))
        rc = run_random(&v, argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? strtoull(argv[3], NULL, 10) : 1,
                        argc > 4 ? atoi(argv[4]) : 128);
    else
        rc = run_docs(&v, argc > 1 ? atoi(argv[1]) : 20);
    free_vocab(&v);
    return rc;
}
