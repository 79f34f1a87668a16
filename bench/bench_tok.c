/*
 * bench_tok.c - tokenizer throughput: MB/s of tok_encode for SentencePiece (llama-spm
 * vocabulary) and byte-level BPE (llama-bpe and qwen2 vocabularies) on 4 MB of mixed
 * text generated deterministically (English words, punctuation, digits, accented
 * Latin, CJK, emoji, code-like lines, runs of spaces and newlines), plus the streaming
 * detokenizer. Best of 3 runs. Data from $LLM_SHARED (default ../shared).
 *
 *   build/bench/bench_tok [MB]
 * Owner: tok.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "tok.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time: steadier than wall time on a machine shared with other jobs. */
static double cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static char *make_text(size_t len)
{
    static const char *const words[] = {
        "the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog", ". ", ", ",
        "Once ", "upon ", "a ", "time ", "there ", "was ", "little ", "girl ", "named ", "Lily",
        "don't ", "I'm ", "we've ", "12345 ", "3.14159 ", "2026-11-22 ", "\n", "\n\n", "    ",
        "caf\xc3\xa9 ", "na\xc3\xafve ", "\xc3\x9c\x62\x65r ", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e ",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 ", "\xf0\x9f\x99\x82 ",
        "int main(void) { return 0; }\n", "x += y[i] * 2;\n", "(hello, world)! ", "\"quoted\" ",
    };
    size_t n_words = sizeof words / sizeof *words, o = 0;
    char *t = malloc(len + 1);
    uint32_t seed = 42;
    while (t && o < len) {
        seed = seed * 1664525u + 1013904223u;
        const char *w = words[(seed >> 8) % n_words];
        size_t l = strlen(w);
        if (o + l > len)
            l = len - o;
        memcpy(t + o, w, l);
        o += l;
    }
    if (t)
        t[len] = 0;
    return t;
}

static tok_vocab *load(const char *shared, const char *name, double *secs)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-%s.gguf", shared, name);
    double t0 = now();
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    gguf_close(g);
    *secs = now() - t0;
    if (!v)
        fprintf(stderr, "bench_tok: %s: %s\n", path, err);
    return v;
}

static int bench_one(const char *shared, const char *name, const char *kind, const char *text,
                     size_t len)
{
    double load_s;
    tok_vocab *v = load(shared, name, &load_s);
    if (!v)
        return 1;
    double best = 1e30, best_cpu = 1e30;
    size_t n = 0;
    int32_t *ids = NULL;
    for (int r = 0; r < 3; r++) {
        char err[256];
        free(ids);
        double t0 = now(), c0 = cpu_now();
        if (tok_encode(v, text, len, false, false, &ids, &n, err, sizeof err)) {
            fprintf(stderr, "bench_tok: %s\n", err);
            tok_vocab_free(v);
            return 1;
        }
        double dt = now() - t0, dc = cpu_now() - c0;
        best = dt < best ? dt : best;
        best_cpu = dc < best_cpu ? dc : best_cpu;
    }
    tok_stream *s = tok_stream_new(v, TOK_STREAM_KEEP_SPACE);
    size_t out = 0, l;
    double t0 = now();
    for (size_t i = 0; i < n; i++) {
        tok_stream_push(s, ids[i], &l);
        out += l;
    }
    tok_stream_flush(s, &l);
    double dt = now() - t0;
    printf("%-4s %-10s encode %6.2f MB/s wall, %6.2f MB/s CPU (%zu bytes -> %zu ids, best of "
           "3)  stream-decode %6.1f MB/s  vocab load %.3f s\n", kind, name, len / best / 1e6,
           len / best_cpu / 1e6, len, n, (out + l) / dt / 1e6, load_s);
    tok_stream_free(s);
    free(ids);
    tok_vocab_free(v);
    return 0;
}

int main(int argc, char **argv)
{
    const char *shared = getenv("LLM_SHARED");
    if (!shared)
        shared = "../shared";
    size_t mb = argc > 1 ? (size_t)atoi(argv[1]) : 4;
    if (mb < 1 || mb > 256) {
        fprintf(stderr, "usage: bench_tok [MB, 1..256]\n");
        return 2;
    }
    size_t len = mb << 20;
    char *text = make_text(len);
    if (!text)
        return 1;
    int rc = bench_one(shared, "llama-spm", "SPM", text, len) |
             bench_one(shared, "llama-bpe", "BPE", text, len) |
             bench_one(shared, "qwen2", "BPE", text, len);
    free(text);
    return rc;
}
