/*
 * fuzz_vocab.c - libFuzzer harness: bytes -> gguf_parse -> tok_vocab_load, then
 * encode a fixed text (plain and with special tokens), decode the ids, and every
 * token's piece. Built and run by `make fuzz` (libraries built with
 * -fsanitize=fuzzer-no-link,address,undefined into build-fuzz/).
 * Seeds: metadata-only GGUFs of small vocabularies (the tokenizer.* keys of a model,
 * arrays cut to 300 entries), written by fuzz_seeds from ../shared. Found issue 10's
 * heap overflow in seconds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h"
#include "tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++)
        log_init("fuzz", LOG_ERROR);
    char err[256];
    gguf_ctx *g = gguf_parse(data, size, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    if (v) {
        static const char text[] = "Hello world! <s>\xe2\x96\x81 caf\xc3\xa9 \xff 123 </s><|im_end|>\n\n  x";
        for (int parse = 0; parse < 2; parse++) {
            int32_t *ids = NULL;
            size_t n = 0, len;
            if (tok_encode(v, text, sizeof text - 1, true, parse, &ids, &n, err, sizeof err) == 0) {
                free(tok_decode(v, ids, n, parse, false, &len, err, sizeof err));
                free(ids);
            }
        }
        char buf[64];
        int32_t nv = tok_n_vocab(v);
        for (int32_t id = 0; id < nv && id < 100000; id++)
            tok_piece(v, id, id & 1, buf, sizeof buf);
        size_t tl;
        tok_text(v, nv - 1, &tl);
    }
    tok_vocab_free(v);
    gguf_close(g);
    return 0;
}
