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

int main(int argc, char **argv)
{
    int n_docs = argc > 1 ? atoi(argv[1]) : 20;
    const char *shared = getenv("LLM_SHARED") ? getenv("LLM_SHARED") : "../shared";
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-llama-bpe.gguf", shared);
    double t0 = now();
    gguf_ctx *gg = gguf_open(path, err, sizeof err);
    tok_vocab *tv = gg ? tok_vocab_load(gg, err, sizeof err) : NULL;
    gguf_close(gg);
    if (!tv) {
        fprintf(stderr, "bench_grammar: %s: %s\n", path, err);
        return 1;
    }
    int32_t n_vocab = tok_n_vocab(tv);
    gram_token *toks = calloc((size_t)n_vocab, sizeof *toks);
    char **texts = calloc((size_t)n_vocab, sizeof *texts);
    for (int32_t i = 0; i < n_vocab; i++) {
        char piece[256];
        int len = tok_piece(tv, i, false, piece, sizeof piece);
        texts[i] = malloc((size_t)len + 1);
        if (len <= (int)sizeof piece)
            memcpy(texts[i], piece, (size_t)len);
        else
            tok_piece(tv, i, false, texts[i], (size_t)len + 1);
        toks[i] = (gram_token){texts[i], (uint32_t)len, tok_is_eog(tv, i)};
    }
    double t1 = now();
    gram_vocab *gv = gram_vocab_new(toks, n_vocab, err, sizeof err);
    double t2 = now();
    gram *g = jsg_compile(SCHEMA, strlen(SCHEMA), err, sizeof err);
    double t3 = now();
    if (!gv || !g) {
        fprintf(stderr, "bench_grammar: %s\n", err);
        return 1;
    }
    printf("vocabulary: %d tokens (llama-bpe); load %.0f ms, gram_vocab_new %.0f ms; schema -> grammar: %zu rules, "
           "%.2f ms\n", n_vocab, (t1 - t0) * 1e3, (t2 - t1) * 1e3, gram_n_rules(g), (t3 - t2) * 1e3);

    gram_masker *m = gram_masker_new(g, gv);
    size_t words = gram_mask_words(gv);
    uint64_t *mask = malloc(words * 8), *ref = malloc(words * 8);
    samples cold = {0}, warm = {0}, walk = {0}, accept = {0};
    size_t tokens = 0, bytes = 0;
    char doc[4096];
    for (int d = 0; d < n_docs; d++) {
        make_doc(doc, sizeof doc, d);
        size_t len = strlen(doc), at = 0;
        gram_state *s = gram_state_new(g);
        for (;;) {
            double a = now();
            gram_mask(m, s, mask);
            double b = now();
            add(d == 0 ? &cold : &warm, b - a);
            if (d == 0) {
                gram_mask_walk(gv, s, ref);
                add(&walk, now() - b);
                if (memcmp(ref, mask, words * 8) != 0) {
                    fprintf(stderr, "bench_grammar: masker and walk differ at offset %zu\n", at);
                    return 1;
                }
            }
            if (at == len)
                break;
            int32_t pick = -1;
            for (int32_t i = 0; i < n_vocab; i++) {
                uint32_t l = toks[i].len;
                if ((mask[i / 64] >> (i % 64)) & 1 && l && l <= len - at && !memcmp(toks[i].text, doc + at, l) &&
                    (pick < 0 || l > toks[pick].len))
                    pick = i;
            }
            if (pick < 0) {
                fprintf(stderr, "bench_grammar: doc %d: no allowed token at offset %zu: %s\n", d, at, doc + at);
                return 1;
            }
            a = now();
            if (gram_accept_token(gv, s, pick) != 0) {
                fprintf(stderr, "bench_grammar: masked token refused\n");
                return 1;
            }
            add(&accept, now() - a);
            at += toks[pick].len;
            tokens++;
        }
        bytes += len;
        if (!gram_can_end(s)) {
            fprintf(stderr, "bench_grammar: doc %d incomplete\n", d);
            return 1;
        }
        gram_state_free(s);
    }
    gram_masker_stats st = gram_masker_get_stats(m);
    printf("%d documents, %zu tokens (%.1f bytes/token); masker: %llu tables built in %.1f ms, %llu cache hits, "
           "%llu walks, %llu rechecks\n", n_docs, tokens, (double)bytes / (double)tokens,
           (unsigned long long)st.tables, st.table_ns / 1e6, (unsigned long long)st.cache_hits,
           (unsigned long long)st.walks, (unsigned long long)st.rechecks);
    report("mask, first document (cold)", &cold);
    report("mask, other documents (warm)", &warm);
    samples all = {0};
    for (size_t i = 0; i < cold.n; i++)
        add(&all, cold.t[i]);
    for (size_t i = 0; i < warm.n; i++)
        add(&all, warm.t[i]);
    report("mask, all documents", &all);
    report("plain walk, first document", &walk);
    report("accept token", &accept);

    gram_masker_free(m);
    gram_free(g);
    gram_vocab_free(gv);
    for (int32_t i = 0; i < n_vocab; i++)
        free(texts[i]);
    free(texts);
    free(toks);
    free(mask);
    free(ref);
    free(cold.t);
    free(warm.t);
    free(walk.t);
    free(all.t);
    free(accept.t);
    tok_vocab_free(tv);
    return 0;
}
