/*
 * fuzz_tok.c - libFuzzer harness: text -> tok_encode on the real vocabularies of
 * ../shared (stories260K's SPM, llama SPM, GPT-2, Llama 3 and Qwen2 BPE), plain, with
 * special tokens parsed, and guarded (control-token text inside "message" spans must
 * stay text), then tok_decode and the streaming detokenizer on the ids. The first input
 * byte picks the vocabulary and the mode; the rest is the text (and, guarded, the span
 * boundaries are derived from it). Vocabularies come from $LLM_SHARED (default
 * ../shared). Built and run by `make fuzz`; seeds: the tokenizer test texts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h"
#include "tok.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const files[] = {
    "models/stories260K-f32.gguf", "reference/tokenizer/ggml-vocab-llama-spm.gguf",
    "reference/tokenizer/ggml-vocab-gpt-2.gguf", "reference/tokenizer/ggml-vocab-llama-bpe.gguf",
    "reference/tokenizer/ggml-vocab-qwen2.gguf"};
#define N_VOCABS (sizeof files / sizeof files[0])
static tok_vocab *vocabs[N_VOCABS];

static void load_all(void)
{
    const char *shared = getenv("LLM_SHARED");
    char path[1024], err[256];
    log_init("fuzz", LOG_ERROR);
    for (size_t i = 0; i < N_VOCABS; i++) {
        snprintf(path, sizeof path, "%s/%s", shared ? shared : "../shared", files[i]);
        gguf_ctx *g = gguf_open(path, err, sizeof err);
        vocabs[i] = g ? tok_vocab_load(g, err, sizeof err) : NULL;
        gguf_close(g);
        if (!vocabs[i]) {
            fprintf(stderr, "fuzz_tok: cannot load %s: %s (set LLM_SHARED)\n", path, err);
            abort();
        }
    }
}

/* The vocabularies are loaded before the first input, so that their loading (seconds
 * under the sanitizers, more on a loaded machine) never counts against -timeout. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    load_all();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const tok_vocab *v = vocabs[data[0] % N_VOCABS];
    int mode = data[0] / N_VOCABS % 3; /* 0 plain, 1 special, 2 guarded */
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    int rc;
    if (mode < 2) {
        rc = tok_encode(v, text, len, data[0] & 0x80, mode == 1, &ids, &n, err, sizeof err);
    } else { /* two spans: the middle thirds of the text, as a rendered chat's contents */
        tok_span spans[2] = {{len / 6, len / 6}, {len / 2, len / 3}};
        rc = tok_encode_guarded(v, text, len, data[0] & 0x80, spans, 2, &ids, &n, err, sizeof err);
    }
    if (rc != 0) return 0;
    size_t dl;
    free(tok_decode(v, ids, n, mode != 0, false, &dl, err, sizeof err));
    tok_stream *st = tok_stream_new(v, TOK_STREAM_DEFAULT);
    for (size_t i = 0; st && i < n; i++) tok_stream_push(st, ids[i], &dl);
    if (st) tok_stream_flush(st, &dl);
    tok_stream_free(st);
    free(ids);
    return 0;
}
